//! Initialisation, devices, contexts, peer access and error strings.

use crate::config::Config;
use crate::out;
use crate::state::{self, with, with_init, Costly};
use crate::types::*;
use std::os::raw::{c_char, c_int, c_uint, c_void};

/// Last valid `CUdevice_attribute` + 1 for the driver's version: `CU_DEVICE_ATTRIBUTE_MAX` is 144
/// in cuda.h 12.9 and 160 in 13.5 (a 13.2 runtime reads the attributes from 144 on at init).
pub fn device_attribute_max() -> c_int {
    if Config::get().driver_version >= 13000 {
        160
    } else {
        144
    }
}
/// Flags `cuCtxCreate` accepts (scheduling, MAP_HOST, LMEM_RESIZE_TO_MAX, coredump, SYNC_MEMOPS).
const CTX_FLAGS_ALL: c_uint = 0xff;
/// The greatest (numerically lowest) stream priority, as an H100 reports it.
pub const STREAM_PRIORITY_GREATEST: c_int = -5;

/// Device attributes the fake reports (an H100/H200-class device); others in range read 0.
const ATTRIBUTES: &[(c_int, c_int)] = &[
    (1, 1024),          // MAX_THREADS_PER_BLOCK
    (2, 1024),          // MAX_BLOCK_DIM_X
    (3, 1024),          // MAX_BLOCK_DIM_Y
    (4, 64),            // MAX_BLOCK_DIM_Z
    (5, 2147483647),    // MAX_GRID_DIM_X
    (6, 65535),         // MAX_GRID_DIM_Y
    (7, 65535),         // MAX_GRID_DIM_Z
    (8, 49152),         // MAX_SHARED_MEMORY_PER_BLOCK
    (9, 65536),         // TOTAL_CONSTANT_MEMORY
    (10, 32),           // WARP_SIZE
    (12, 65536),        // MAX_REGISTERS_PER_BLOCK
    (13, 1980000),      // CLOCK_RATE (kHz)
    (16, 132),          // MULTIPROCESSOR_COUNT
    (19, 1),            // CAN_MAP_HOST_MEMORY
    (31, 1),            // CONCURRENT_KERNELS
    (32, 1),            // ECC_ENABLED
    (36, 2619000),      // MEMORY_CLOCK_RATE (kHz)
    (37, 5120),         // GLOBAL_MEMORY_BUS_WIDTH
    (38, 52428800),     // L2_CACHE_SIZE
    (39, 2048),         // MAX_THREADS_PER_MULTIPROCESSOR
    (40, 3),            // ASYNC_ENGINE_COUNT
    (41, 1),            // UNIFIED_ADDRESSING
    (75, 9),            // COMPUTE_CAPABILITY_MAJOR
    (76, 0),            // COMPUTE_CAPABILITY_MINOR
    (81, 233472),       // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    (82, 65536),        // MAX_REGISTERS_PER_MULTIPROCESSOR (torch's topk divides by what it allows: 0 was SIGFPE)
    (83, 1),            // MANAGED_MEMORY
    (89, 1),            // CONCURRENT_MANAGED_ACCESS
    (91, 1),            // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM (x86-64 Linux, unified addressing)
    (95, 1),            // COOPERATIVE_LAUNCH
    (97, 232448),       // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 227 KiB (NCCL's init checks its kernels fit)
    (99, 1),            // HOST_REGISTER_SUPPORTED
    (102, 1),           // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
    (103, 1),           // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
    (106, 32),          // MAX_BLOCKS_PER_MULTIPROCESSOR
    (111, 1024),        // RESERVED_SHARED_MEMORY_PER_BLOCK: 233472 per SM = 232448 opt-in + 1024
    (113, 1),           // READ_ONLY_HOST_REGISTER_SUPPORTED
    (115, 1),           // MEMORY_POOLS_SUPPORTED
    (116, 1),           // GPU_DIRECT_RDMA_SUPPORTED
    (125, 1),           // IPC_EVENT_SUPPORTED (the documented IPC capability check)
    (131, -1),          // NUMA_ID: none
    (132, 0),           // MULTICAST_SUPPORTED: no (the cuMulticast* calls answer not supported)
    (134, 0),           // HOST_NUMA_ID: node 0 (NCCL asks VMM granularity for HOST_NUMA memory)
    (139, 0x2335_10de), // GPU_PCI_DEVICE_ID: an H200's device and vendor id
    (141, 1),           // HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
    (145, 1),           // HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
];

/// The value of device attribute `attrib` (in range; the PCI location ones are per device).
pub fn attribute(attrib: c_int) -> c_int {
    ATTRIBUTES.iter().find(|(a, _)| *a == attrib).map_or(0, |(_, v)| *v)
}

/// Creates a context on `dev`, makes it current (pushed), and returns its handle.
///
/// # Safety
/// `pctx` is the caller's C out-pointer (NULL or writable).
unsafe fn create_ctx(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> state::R {
    if pctx.is_null() || flags & !CTX_FLAGS_ALL != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let h = with_init(|p| {
        let d = p.device(dev)?;
        p.create_ctx(d, false)
    })?;
    state::push_current(h);
    pctx.write(h as CUcontext);
    Ok(())
}

/// Retains `dev`'s primary context and writes its handle: `cuDevicePrimaryCtxRetain` ("Retains
/// the primary context on the device, creating it if necessary"), which commits the context's
/// memory (`activate`), or the runtime's private table, which the runtime calls for every device
/// as it initialises and which commits nothing (`activate` false: the context is committed when
/// first made current or retained). A real runtime holds no memory on a device it never made
/// current: PyTorch's test/test_cuda_primary_ctx.py checks that after `torch.cuda.device_count()`
/// no device's primary context is active (`cuDevicePrimaryCtxGetState`), and that `set_device(0)`
/// (CUDA 12's eager `cudaSetDevice`) or a tensor on `cuda:1` activates that device's only.
///
/// # Safety
/// `pctx` is the caller's C out-pointer (NULL or writable).
pub unsafe fn retain_primary(pctx: *mut CUcontext, dev: CUdevice, activate: bool) -> state::R {
    if pctx.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let h = with_init(|p| {
        let d = p.device(dev)?;
        let h = match (p.primary[d].0, activate) {
            (Some(h), true) => {
                p.activate(h)?;
                h
            }
            (Some(h), false) => h,
            (None, true) => p.create_ctx(d, true)?,
            (None, false) => p.inactive_primary(d),
        };
        p.primary[d] = (Some(h), p.primary[d].1 + 1);
        Ok(h)
    })?;
    out(pctx, h as CUcontext)
}

/// A physical device's PCI (domain, bus, device): one bus per device, bus = index + 1 (as the
/// fake NVML's nvmlDeviceGetPciInfo_v3 says), whatever ordinal a process sees it by.
pub fn device_pci(phys: CUdevice) -> (c_int, c_int, c_int) {
    (0, gpu_of(phys) + 1, 0)
}

/// The physical GPU of a device slot: itself, or a MIG device's GPU.
fn gpu_of(slot: CUdevice) -> CUdevice {
    let cfg = Config::get();
    match cfg.mig.of_slot(slot as usize, cfg.devices) {
        Some((gpu, _, _)) => gpu as CUdevice,
        None => slot,
    }
}

/// A device slot's UUID (`cuDeviceGetUuid_v2`): stable for a machine name and device, different
/// between devices and machines, the same bytes the fake NVML prints
/// ([`crate::config::device_uuid`]); a MIG device's own ([`crate::config::mig_uuid`]).
pub fn device_uuid(phys: CUdevice) -> [u8; 16] {
    let cfg = Config::get();
    match cfg.mig.of_slot(phys as usize, cfg.devices) {
        Some(_) => crate::config::mig_uuid(&cfg.machine, phys as usize),
        None => crate::config::device_uuid(&cfg.machine, phys as usize),
    }
}

/// The physical device of ordinal `dev` as the C types want it.
fn physical(dev: CUdevice) -> state::R<CUdevice> {
    with_init(|p| p.physical(dev)).map(|d| d as CUdevice)
}

unsafe fn get_uuid(uuid: *mut [u8; 16], dev: CUdevice) -> state::R {
    let phys = physical(dev)?;
    out(uuid, device_uuid(phys))
}

/// `cuDeviceGetUuid`, the version before MIG UUIDs: a MIG device's GPU's UUID (cuda.h 12.x:
/// only `_v2` "returns its MIG UUID" in MIG mode).
unsafe fn get_uuid_v1(uuid: *mut [u8; 16], dev: CUdevice) -> state::R {
    let gpu = gpu_of(physical(dev)?);
    out(uuid, crate::config::device_uuid(&Config::get().machine, gpu as usize))
}

/// (domain, bus, device, function) of a PCI location in one of cuda.h's three forms.
fn parse_pci(s: &str) -> Option<(u32, u32, u32, u32)> {
    let hex = |x: &str| u32::from_str_radix(x.trim(), 16).ok();
    let parts: Vec<&str> = s.trim().split(':').collect();
    let (domain, bus, rest) = match parts.as_slice() {
        [d, b, r] => (hex(d)?, hex(b)?, *r),
        [b, r] if r.contains('.') => (0, hex(b)?, *r),
        _ => return None,
    };
    let (device, function) = match rest.split_once('.') {
        Some((d, f)) => (hex(d)?, hex(f)?),
        None => (hex(rest)?, 0),
    };
    Some((domain, bus, device, function))
}

/// `CUlimit` values a context reports (stack size, printf FIFO, malloc heap, ...); set values
/// are kept per process.
fn limit_slot(limit: c_int) -> state::R<usize> {
    usize::try_from(limit).ok().filter(|l| *l < LIMITS_DEFAULT.len()).ok_or(CUDA_ERROR_INVALID_VALUE)
}
/// Defaults of `CU_LIMIT_STACK_SIZE` .. `CU_LIMIT_CIG_ENABLED` (a real H100's). CIG_ENABLED is 0:
/// the fake's contexts are never CUDA-in-graphics contexts. cuBLASLt's `cublasLtCtxInit` asks it
/// and, when the query fails, takes the context's shared memory limit to be 0 ("Discovered
/// per-ctx shared memory size limit = 0"): every GEMM's heuristic then finds no kernel that fits
/// and `cublasGemmEx` answers CUBLAS_STATUS_NOT_SUPPORTED.
const LIMITS_DEFAULT: [usize; 9] = [1024, 1 << 20, 8 << 20, 2, 2048, 0, 32, 0, 0];
static LIMITS: std::sync::Mutex<[usize; 9]> = std::sync::Mutex::new(LIMITS_DEFAULT);
/// `CU_LIMIT_SHMEM_SIZE` and `CU_LIMIT_CIG_ENABLED`: "Can only be queried, cannot be set" (cuda.h).
const QUERY_ONLY_LIMITS: [usize; 2] = [7, 8];

/// Shared body of the primary-context release ABIs.
fn primary_release(dev: CUdevice) -> state::R {
    with_init(|p| {
        let d = p.device(dev)?;
        match p.primary[d] {
            (Some(h), refs) if refs > 0 => {
                p.primary[d].1 -= 1;
                if refs == 1 {
                    p.primary[d].0 = None;
                    p.destroy_ctx(h)?;
                }
                Ok(())
            }
            _ => Err(CUDA_ERROR_INVALID_CONTEXT),
        }
    })
}

/// Shared body of the context-destroy ABIs (primary contexts are refused).
fn destroy_ctx(ctx: CUcontext) -> state::R {
    with_init(|p| {
        if p.ctx(ctx as u64)?.primary {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        p.destroy_ctx(ctx as u64)
    })
}

/// Making a context current commits its memory if it was not yet (a primary context the
/// runtime's private table handed out).
fn push_ctx(ctx: CUcontext) -> state::R {
    with_init(|p| p.activate(ctx as u64))?;
    state::push_current(ctx as u64);
    Ok(())
}

unsafe fn pop_ctx(pctx: *mut CUcontext) -> state::R {
    with_init(|_| Ok(()))?;
    let h = state::pop_current().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    if !pctx.is_null() {
        pctx.write(h as CUcontext);
    }
    Ok(())
}

unsafe fn error_string(error: CUresult, p_str: *mut *const c_char, name: bool) -> state::R {
    if p_str.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match error_cstr(error, name) {
        Some(s) => out(p_str, s),
        None => {
            p_str.write(std::ptr::null());
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    }
}

entry! {
    /// Attaches to the simulated machine (flags must be 0).
    fn cuInit(flags: c_uint) {
        let r = if flags != 0 { Err(CUDA_ERROR_INVALID_VALUE) } else { with(|p| p.init()) };
        crate::trace::line(|| format!("init cuInit {flags} -> {}", r.err().unwrap_or(CUDA_SUCCESS)));
        r
    }

    fn cuDriverGetVersion(driver_version: *mut c_int) {
        out(driver_version, Config::get().driver_version)
    }

    fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) {
        with_init(|p| p.device(ordinal).map(|_| ()))?;
        out(device, ordinal)
    }

    fn cuDeviceGetCount(count: *mut c_int) {
        let n = with_init(|p| Ok(p.devices as c_int))?;
        out(count, n)
    }

    fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) {
        let t = with_init(|p| p.device(dev).map(|d| p.mem_info(d).1))?;
        out(bytes, t as usize)
    }

    /// 32-bit ABI: the total saturates at `UINT_MAX`.
    fn cuDeviceTotalMem(bytes: *mut c_uint, dev: CUdevice) {
        let t = with_init(|p| p.device(dev).map(|d| p.mem_info(d).1))?;
        out(bytes, t.min(c_uint::MAX as u64) as c_uint)
    }

    fn cuDeviceGetAttribute(pi: *mut c_int, attrib: c_int, dev: CUdevice) {
        let phys = physical(dev)?;
        if !(1..device_attribute_max()).contains(&attrib) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (domain, bus, device) = device_pci(phys);
        let v = match attrib {
            33 => bus,
            34 => device,
            50 => domain,
            _ => attribute(attrib),
        };
        out(pi, v)
    }

    fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) {
        let phys = physical(dev)?;
        if name.is_null() || len <= 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let s = format!("FakeCUDA Simulated GPU {phys}");
        let n = s.len().min(len as usize - 1);
        std::ptr::copy_nonoverlapping(s.as_ptr(), name.cast::<u8>(), n);
        name.add(n).write(0);
        Ok(())
    }

    fn cuDeviceCanAccessPeer(can_access_peer: *mut c_int, dev: CUdevice, peer_dev: CUdevice) {
        let v = with_init(|p| Ok((p.device(dev)? != p.device(peer_dev)?) as c_int))?;
        out(can_access_peer, v)
    }

    fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) {
        retain_primary(pctx, dev, true)
    }

    fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) {
        primary_release(dev)
    }

    /// The 7000 ABI (same signature).
    fn cuDevicePrimaryCtxRelease(dev: CUdevice) {
        primary_release(dev)
    }

    fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut c_uint, active: *mut c_int) {
        if flags.is_null() || active.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let on = with_init(|p| {
            let d = p.device(dev)?;
            Ok(p.primary[d].0.is_some_and(|h| p.ctxs.get(&h).is_some_and(|c| c.active)))
        })?;
        flags.write(0);
        active.write(on as c_int);
        Ok(())
    }

    fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) {
        create_ctx(pctx, flags, dev)
    }

    /// The 2000 ABI (same signature).
    fn cuCtxCreate(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) {
        create_ctx(pctx, flags, dev)
    }

    /// 11040 ABI: execution affinity is not supported by the fake.
    fn cuCtxCreate_v3(pctx: *mut CUcontext, params_array: *mut c_void, num_params: c_int, flags: c_uint, dev: CUdevice) {
        if num_params < 0 || (num_params > 0 && params_array.is_null()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if num_params > 0 {
            return Err(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
        }
        create_ctx(pctx, flags, dev)
    }

    /// 12050 ABI: affinity and CIG parameters are not supported by the fake.
    fn cuCtxCreate_v4(pctx: *mut CUcontext, ctx_create_params: *mut CUctxCreateParams, flags: c_uint, dev: CUdevice) {
        if let Some(params) = ctx_create_params.as_ref() {
            if params.num_exec_affinity_params != 0 || !params.cig_params.is_null() {
                return Err(CUDA_ERROR_NOT_SUPPORTED);
            }
        }
        create_ctx(pctx, flags, dev)
    }

    fn cuCtxDestroy_v2(ctx: CUcontext) {
        destroy_ctx(ctx)
    }

    /// The 2000 ABI (same signature).
    fn cuCtxDestroy(ctx: CUcontext) {
        destroy_ctx(ctx)
    }

    fn cuCtxPushCurrent_v2(ctx: CUcontext) {
        push_ctx(ctx)
    }

    fn cuCtxPushCurrent(ctx: CUcontext) {
        push_ctx(ctx)
    }

    fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) {
        pop_ctx(pctx)
    }

    fn cuCtxPopCurrent(pctx: *mut CUcontext) {
        pop_ctx(pctx)
    }

    fn cuCtxSetCurrent(ctx: CUcontext) {
        if !ctx.is_null() {
            with_init(|p| p.activate(ctx as u64))?;
        } else {
            with_init(|_| Ok(()))?;
        }
        state::set_current(ctx as u64);
        Ok(())
    }

    fn cuCtxGetCurrent(pctx: *mut CUcontext) {
        let h = with_init(|p| Ok(p.current().map_or(0, |(h, _)| h)))?;
        out(pctx, h as CUcontext)
    }

    fn cuCtxGetDevice(device: *mut CUdevice) {
        let d = with_init(|p| p.current().map(|(_, d)| d as CUdevice))?;
        out(device, d)
    }

    fn cuCtxSynchronize() {
        with_init(|p| p.current().map(|_| ()))
    }

    /// CUDA 13.0 ABI (what `cuCtxGetDevice` resolves to from 13000): the device of `ctx`, or of
    /// the current context when `ctx` is NULL.
    fn cuCtxGetDevice_v2(device: *mut CUdevice, ctx: CUcontext) {
        let d = with_init(|p| if ctx.is_null() { p.current().map(|(_, d)| d) } else { p.ctx(ctx as u64).map(|c| c.dev) })?;
        out(device, d as CUdevice)
    }

    /// The context's API version (3020: every context since CUDA 3.2, per cuda.h), of the current
    /// context when `ctx` is NULL. NVIDIA's runtime uses it on a thread's first call to check
    /// that the primary context it made current there is still alive (a destroyed one answers
    /// `CUDA_ERROR_INVALID_CONTEXT` and the runtime retains it anew).
    fn cuCtxGetApiVersion(ctx: CUcontext, version: *mut c_uint) {
        if version.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        with_init(|p| if ctx.is_null() { p.current().map(|_| ()) } else { p.ctx(ctx as u64).map(|_| ()) })?;
        out(version, 3020)
    }

    /// CUDA 13.0 ABI: synchronizes `ctx`, or the current context when NULL.
    fn cuCtxSynchronize_v2(ctx: CUcontext) {
        with_init(|p| if ctx.is_null() { p.current().map(|_| ()) } else { p.ctx(ctx as u64).map(|_| ()) })
    }

    /// Maps the peer context's memory into the current context: costs `FAKECUDA_PEER_MIB` on the
    /// current device until disabled (or either context is destroyed).
    fn cuCtxEnablePeerAccess(peer_context: CUcontext, flags: c_uint) {
        with_init(|p| {
            if flags != 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            let (me, dev) = p.current()?;
            let peer = p.ctx(peer_context as u64)?.dev;
            if peer == dev {
                return Err(CUDA_ERROR_INVALID_DEVICE);
            }
            let key = (me, peer_context as u64);
            if p.peers.contains_key(&key) {
                return Err(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
            }
            let cost = Config::get().peer_cost;
            p.charge(dev, cost)?;
            p.peers.insert(key, Costly { ctx: me, dev, charged: cost });
            Ok(())
        })
    }

    fn cuCtxDisablePeerAccess(peer_context: CUcontext) {
        with_init(|p| {
            let (me, _) = p.current()?;
            p.ctx(peer_context as u64)?;
            let c = p.peers.remove(&(me, peer_context as u64)).ok_or(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)?;
            p.drop_costly(c);
            Ok(())
        })
    }

    fn cuGetErrorName(error: CUresult, p_str: *mut *const c_char) {
        error_string(error, p_str, true)
    }

    fn cuGetErrorString(error: CUresult, p_str: *mut *const c_char) {
        error_string(error, p_str, false)
    }

    /// CUDA 9.2 ABI: the GPU's UUID, also for a MIG device (`_v2` gives the MIG device's).
    fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: CUdevice) {
        get_uuid_v1(uuid, dev)
    }

    fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: CUdevice) {
        get_uuid(uuid, dev)
    }

    /// `domain:bus:device.function`, as the real driver formats it.
    fn cuDeviceGetPCIBusId(pci_bus_id: *mut c_char, len: c_int, dev: CUdevice) {
        let phys = physical(dev)?;
        if pci_bus_id.is_null() || len <= 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (domain, bus, device) = device_pci(phys);
        let s = format!("{domain:08X}:{bus:02X}:{device:02X}.0");
        let n = s.len().min(len as usize - 1);
        std::ptr::copy_nonoverlapping(s.as_ptr(), pci_bus_id.cast::<u8>(), n);
        pci_bus_id.add(n).write(0);
        Ok(())
    }

    /// The ordinal of the device at a PCI location, in cuda.h's forms `domain:bus:device.function`,
    /// `domain:bus:device` and `bus:device.function` (hexadecimal); a device this process does not
    /// see (`CUDA_VISIBLE_DEVICES`) or no device there is `CUDA_ERROR_INVALID_DEVICE`.
    fn cuDeviceGetByPCIBusId(dev: *mut CUdevice, pci_bus_id: *const c_char) {
        if dev.is_null() || pci_bus_id.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let s = std::ffi::CStr::from_ptr(pci_bus_id).to_str().map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        let loc = parse_pci(s).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let ordinal = with_init(|p| {
            (0..p.devices)
                .find(|&o| {
                    let (domain, bus, device) = device_pci(p.visible[o] as CUdevice);
                    (domain as u32, bus as u32, device as u32, 0) == loc
                })
                .ok_or(CUDA_ERROR_INVALID_DEVICE)
        })?;
        out(dev, ordinal as CUdevice)
    }

    /// Peer attributes (performance rank, access, atomics, array access): every pair of distinct
    /// devices is connected.
    fn cuDeviceGetP2PAttribute(value: *mut c_int, attrib: c_int, src_device: CUdevice, dst_device: CUdevice) {
        let same = with_init(|p| Ok(p.device(src_device)? == p.device(dst_device)?))?;
        if same || !(1..=5).contains(&attrib) {
            return Err(CUDA_ERROR_INVALID_DEVICE);
        }
        out(value, if attrib == 1 { 0 } else { 1 })
    }

    fn cuDevicePrimaryCtxSetFlags(dev: CUdevice, flags: c_uint) {
        with_init(|p| p.device(dev))?;
        if flags & !CTX_FLAGS_ALL != 0 { Err(CUDA_ERROR_INVALID_VALUE) } else { Ok(()) }
    }

    fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: c_uint) {
        with_init(|p| p.device(dev))?;
        if flags & !CTX_FLAGS_ALL != 0 { Err(CUDA_ERROR_INVALID_VALUE) } else { Ok(()) }
    }

    /// An H100's range: priorities 0 (least) to -5 (greatest).
    fn cuCtxGetStreamPriorityRange(least_priority: *mut c_int, greatest_priority: *mut c_int) {
        with_init(|p| p.current().map(|_| ()))?;
        if !least_priority.is_null() {
            least_priority.write(0);
        }
        if !greatest_priority.is_null() {
            greatest_priority.write(STREAM_PRIORITY_GREATEST);
        }
        Ok(())
    }

    fn cuCtxGetFlags(flags: *mut c_uint) {
        with_init(|p| p.current().map(|_| ()))?;
        out(flags, 0)
    }

    fn cuCtxGetId(ctx: CUcontext, ctx_id: *mut u64) {
        let h = with_init(|p| if ctx.is_null() { p.current().map(|(h, _)| h) } else { p.ctx(ctx as u64).map(|_| ctx as u64) })?;
        out(ctx_id, h & 0xffff_ffff)
    }

    fn cuCtxGetLimit(pvalue: *mut usize, limit: c_int) {
        let slot = limit_slot(limit)?;
        let v = LIMITS.lock().map_or(LIMITS_DEFAULT[slot], |l| l[slot]);
        out(pvalue, v)
    }

    fn cuCtxSetLimit(limit: c_int, value: usize) {
        let slot = limit_slot(limit)?;
        with_init(|p| p.current().map(|_| ()))?;
        if QUERY_ONLY_LIMITS.contains(&slot) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if let Ok(mut l) = LIMITS.lock() {
            l[slot] = value;
        }
        Ok(())
    }
}
