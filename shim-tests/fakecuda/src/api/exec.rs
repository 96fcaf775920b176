//! What a framework needs around its allocations to run on the fake: events, stream priorities
//! and queries, capture info, kernels and launches, stream-ordered pool attributes, and the
//! multicast family, green contexts and the driver log (answered "not supported": a device
//! without NVSwitch multicast, SM partitioning or a log to read).
//!
//! Kernels never run: a launch checks its function and stream and returns, so results computed
//! on the fake are garbage by design. A kernel of a context-independent library is what loads
//! that library into a context ([`Proc::use_library`]): the lazy module loading of a real driver.
//!
//! Long, as a list of small entry points is: each is a few lines of argument checks in the
//! real driver's documented order, and splitting them by family would scatter what a
//! framework's start-up asks for in one sequence.

use crate::api::ctx::{attribute, STREAM_PRIORITY_GREATEST};
use crate::api::mem::pool_device;
use crate::out;
use crate::state::{handle, tag, tag_of, with_init, Event, Proc, Stream, R};
use crate::types::*;
use std::os::raw::{c_char, c_int, c_uint, c_void};

/// `CU_EVENT_DEFAULT | BLOCKING_SYNC | DISABLE_TIMING | INTERPROCESS`.
const EVENT_FLAGS_ALL: c_uint = 0x1 | 0x2 | 0x4;
const EVENT_DISABLE_TIMING: c_uint = 0x2;

fn event(p: &Proc, ev: *mut c_void) -> R<&Event> {
    p.events.get(&(ev as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)
}

fn record(ev: *mut c_void, stream: CUstream, per_thread: bool) -> R {
    with_init(|p| {
        p.stream(stream, per_thread)?;
        event(p, ev).map(|_| ())
    })
}

fn destroy_event(ev: *mut c_void) -> R {
    with_init(|p| p.events.remove(&(ev as u64)).map(|_| ()).ok_or(CUDA_ERROR_INVALID_HANDLE))
}

/// Both events must exist and time: the fake's work takes no time.
unsafe fn elapsed(ms: *mut f32, start: *mut c_void, end: *mut c_void) -> R {
    with_init(|p| {
        for e in [start, end] {
            if event(p, e)?.flags & EVENT_DISABLE_TIMING != 0 {
                return Err(CUDA_ERROR_INVALID_HANDLE);
            }
        }
        Ok(())
    })?;
    out(ms, 0.0)
}

/// A stream's field: created streams their own, default streams the defaults (priority 0, flags 0).
fn stream_field<T>(h: CUstream, per_thread: bool, f: impl Fn(&Stream) -> T, default: T) -> R<T> {
    with_init(|p| {
        p.stream(h, per_thread)?;
        Ok(p.streams.get(&(h as u64)).map_or(default, f))
    })
}

fn stream_query(h: CUstream, per_thread: bool) -> R {
    with_init(|p| p.stream(h, per_thread).map(|_| ()))
}

fn wait_event(h: CUstream, ev: *mut c_void, per_thread: bool) -> R {
    with_init(|p| {
        p.stream(h, per_thread)?;
        event(p, ev).map(|_| ())
    })
}

/// `cuStreamGetCaptureInfo` (all three ABIs): status, a capture id, the graph being captured
/// into, and no dependency nodes (the fake's graphs have no nodes).
#[allow(clippy::too_many_arguments)]
unsafe fn capture_info(
    h: CUstream,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const c_void,
    num_deps: *mut usize,
    per_thread: bool,
) -> R {
    if status.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (s, g) = with_init(|p| {
        let (key, _) = p.stream(h, per_thread)?;
        Ok(match key.and_then(|k| p.captures.get(&k)) {
            None => (CU_STREAM_CAPTURE_STATUS_NONE, 0),
            Some(c) if c.invalidated => (CU_STREAM_CAPTURE_STATUS_INVALIDATED, c.graph),
            Some(c) => (CU_STREAM_CAPTURE_STATUS_ACTIVE, c.graph),
        })
    })?;
    status.write(s);
    let active = s == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if !id.is_null() && active {
        id.write(g & 0xffff_ffff);
    }
    if !graph.is_null() && active {
        graph.write(g as CUgraph);
    }
    if !deps.is_null() && active {
        deps.write(std::ptr::null());
    }
    if !edges.is_null() && active {
        edges.write(std::ptr::null());
    }
    if !num_deps.is_null() && active {
        num_deps.write(0);
    }
    Ok(())
}

/// The library a kernel handle belongs to.
pub fn kernel_library(p: &Proc, kernel: *mut c_void) -> R<u64> {
    let k = kernel as u64;
    let lib = handle(tag::LIBRARY, k);
    if tag_of(k) == tag::KERNEL && p.libraries.contains_key(&lib) {
        Ok(lib)
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

/// A function handle: from `cuModuleGetFunction`/`cuKernelGetFunction`, or a kernel handle,
/// which `cuLaunchKernel` also takes. A kernel used here loads its library into the context.
pub fn launchable(p: &mut Proc, f: *mut c_void) -> R {
    let v = f as u64;
    match tag_of(v) {
        tag::FUNC if p.modules.contains_key(&handle(tag::MODULE, v)) => Ok(()),
        tag::FUNC => p.use_library(handle(tag::LIBRARY, v)).map(|_| ()),
        tag::KERNEL => {
            let lib = kernel_library(p, f)?;
            p.use_library(lib).map(|_| ())
        }
        _ => Err(CUDA_ERROR_INVALID_HANDLE),
    }
}

fn launch(f: *mut c_void, stream: CUstream, per_thread: bool) -> R {
    with_init(|p| {
        p.stream(stream, per_thread)?;
        launchable(p, f)
    })
}

/// `CUlaunchConfig` (the grid and block are not looked at).
#[repr(C)]
pub struct CUlaunchConfig {
    pub dims: [c_uint; 6],
    pub shared_mem_bytes: c_uint,
    pub h_stream: CUstream,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

/// Defaults of `CUfunction_attribute` 0..=17 (a small kernel compiled for sm_90).
fn function_attribute(attrib: c_int) -> R<c_int> {
    Ok(match attrib {
        0 => 1024,   // MAX_THREADS_PER_BLOCK
        4 => 32,     // NUM_REGS
        5 | 6 => 90, // PTX_VERSION, BINARY_VERSION
        8 => 49152,  // MAX_DYNAMIC_SHARED_SIZE_BYTES
        9 => -1,     // PREFERRED_SHARED_MEMORY_CARVEOUT
        1..=17 => 0,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`, `_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`.
pub const FUNC_MAX_DYNAMIC_SHARED: c_int = 8;
pub const FUNC_NON_PORTABLE_CLUSTER: c_int = 14;

/// Checks a value for a settable attribute (cuda.h, cuFuncSetAttribute: 8, 9, 11-15 and 17;
/// the others are read-only, `CUDA_ERROR_INVALID_VALUE`).
fn settable(attrib: c_int, value: c_int) -> R {
    let ok = match attrib {
        FUNC_MAX_DYNAMIC_SHARED => (0..=attribute(97)).contains(&value), // opt-in per block, no static smem
        9 => (-1..=100).contains(&value),                                // carveout, percent
        11..=13 => value >= 0,                                           // required cluster dims
        FUNC_NON_PORTABLE_CLUSTER => matches!(value, 0 | 1),
        15 => (0..=3).contains(&value), // CUclusterSchedulingPolicy
        17 => (0..=4).contains(&value), // CUsharedMemoryMode
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_VALUE)
    }
}

/// Whose attributes a function handle reads and sets, on which device: a module's function in
/// its module's context; a library's kernel (as a kernel, or as a function of the current
/// context) on the current device.
pub fn attribute_owner(p: &mut Proc, f: *mut c_void) -> R<(u64, usize)> {
    launchable(p, f)?;
    let v = f as u64;
    let module = handle(tag::MODULE, v);
    if tag_of(v) == tag::FUNC {
        if let Some(m) = p.modules.get(&module) {
            return Ok((module, m.dev));
        }
    }
    Ok((handle(tag::LIBRARY, v), p.current()?.1))
}

/// An attribute's value for (owner, device): what was set, else the default.
pub fn function_value(p: &Proc, owner: (u64, usize), attrib: c_int) -> R<c_int> {
    let default = function_attribute(attrib)?;
    Ok(p.func_attrs.get(&owner).and_then(|a| a.get(&attrib)).copied().unwrap_or(default))
}

fn set_function_value(p: &mut Proc, owner: (u64, usize), attrib: c_int, value: c_int) -> R {
    function_attribute(attrib)?;
    settable(attrib, value)?;
    p.func_attrs.entry(owner).or_default().insert(attrib, value);
    Ok(())
}

/// A `CUmemPool_attribute` value: (is 64-bit, value).
fn pool_attribute(p: &Proc, pool: u64, attr: c_int) -> R<(bool, u64)> {
    let (reserved, used) = p.pool_bytes(pool);
    let (reserved_high, used_high) = p.pool_high.get(&pool).copied().unwrap_or((0, 0));
    Ok(match attr {
        1..=3 => (false, 1),   // the reuse policies, enabled by default
        4 => (true, 0),        // RELEASE_THRESHOLD
        5 => (true, reserved), // RESERVED_MEM_CURRENT
        6 => (true, reserved_high.max(reserved)),
        7 => (true, used), // USED_MEM_CURRENT
        8 => (true, used_high.max(used)),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

/// Uploading an instantiated graph: it and the stream must be valid; nothing to copy.
fn graph_upload(exec: CUgraphExec, stream: CUstream, per_thread: bool) -> R {
    with_init(|p| {
        p.stream(stream, per_thread)?;
        if p.execs.contains_key(&(exec as u64)) {
            Ok(())
        } else {
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    })
}

/// The default pool of a device location (pinned allocations only).
unsafe fn location_pool(location: *const CUmemLocation, alloc_type: c_int) -> R<CUmemoryPool> {
    let loc = location.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if alloc_type != CU_MEM_ALLOCATION_TYPE_PINNED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if loc.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    let dev = with_init(|p| p.device(loc.id))?;
    Ok(handle(tag::POOL, dev as u64) as CUmemoryPool)
}

/// Stream memory operations: the stream must be valid; a write to fake device memory writes
/// nothing, a wait returns at once.
fn stream_memop(stream: CUstream, addr: CUdeviceptr, per_thread: bool) -> R {
    with_init(|p| {
        p.stream(stream, per_thread)?;
        p.check_range(addr, 4).map(|_| ())
    })
}

/// `cuStreamBatchMemOp` (both ABIs): fewer than 256 `CUstreamBatchMemOpParams` (48 bytes: the
/// operation, then for the value operations the address), flags 0. Waits and writes are checked
/// like their single forms; flushes and barriers need nothing; the atomic reductions of CUDA 13
/// are not supported by the simulated device.
unsafe fn batch_mem_op(stream: CUstream, count: c_uint, params: *const [u64; 6], flags: c_uint, per_thread: bool) -> R {
    with_init(|p| {
        p.stream(stream, per_thread)?;
        if flags != 0 || count >= 256 || (count > 0 && params.is_null()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        for i in 0..count as usize {
            let op = params.add(i).read_unaligned();
            match op[0] as u32 {
                1 | 2 => p.check_range(op[1], 4).map(|_| ())?,
                4 | 5 => p.check_range(op[1], 8).map(|_| ())?,
                3 | 6 => {}
                8 => return Err(CUDA_ERROR_NOT_SUPPORTED),
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            }
        }
        Ok(())
    })
}

/// Runs a host function on the calling thread (the fake has no queue to wait on), outside any lock.
unsafe fn host_func(
    stream: CUstream,
    f: Option<unsafe extern "C" fn(*mut c_void)>,
    data: *mut c_void,
    per_thread: bool,
) -> R {
    let f = f.ok_or(CUDA_ERROR_INVALID_VALUE)?;
    with_init(|p| p.stream(stream, per_thread).map(|_| ()))?;
    f(data);
    Ok(())
}

entry! {
    fn cuEventCreate(ph_event: *mut *mut c_void, flags: c_uint) {
        if ph_event.is_null() || flags & !EVENT_FLAGS_ALL != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = with_init(|p| {
            let (ctx, _) = p.current()?;
            let h = p.new_handle(tag::EVENT);
            p.events.insert(h, Event { ctx, flags });
            Ok(h)
        })?;
        ph_event.write(h as *mut c_void);
        Ok(())
    }

    fn cuEventRecord(h_event: *mut c_void, h_stream: CUstream) {
        record(h_event, h_stream, false)
    }

    fn cuEventRecord_ptsz(h_event: *mut c_void, h_stream: CUstream) {
        record(h_event, h_stream, true)
    }

    fn cuEventRecordWithFlags(h_event: *mut c_void, h_stream: CUstream, flags: c_uint) {
        if flags & !0x1 != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        record(h_event, h_stream, false)
    }

    fn cuEventRecordWithFlags_ptsz(h_event: *mut c_void, h_stream: CUstream, flags: c_uint) {
        if flags & !0x1 != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        record(h_event, h_stream, true)
    }

    /// Work on the fake completes at once.
    fn cuEventQuery(h_event: *mut c_void) {
        with_init(|p| event(p, h_event).map(|_| ()))
    }

    fn cuEventSynchronize(h_event: *mut c_void) {
        with_init(|p| event(p, h_event).map(|_| ()))
    }

    fn cuEventDestroy(h_event: *mut c_void) {
        destroy_event(h_event)
    }

    fn cuEventDestroy_v2(h_event: *mut c_void) {
        destroy_event(h_event)
    }

    fn cuEventElapsedTime(p_milliseconds: *mut f32, h_start: *mut c_void, h_end: *mut c_void) {
        elapsed(p_milliseconds, h_start, h_end)
    }

    fn cuEventElapsedTime_v2(p_milliseconds: *mut f32, h_start: *mut c_void, h_end: *mut c_void) {
        elapsed(p_milliseconds, h_start, h_end)
    }

    /// Priorities are clamped into the context's range, as the driver does.
    fn cuStreamCreateWithPriority(ph_stream: *mut CUstream, flags: c_uint, priority: c_int) {
        if ph_stream.is_null() || flags & !CU_STREAM_NON_BLOCKING != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = with_init(|p| {
            let (ctx, dev) = p.current()?;
            let h = p.new_handle(tag::STREAM);
            p.streams.insert(h, Stream { ctx, dev, flags, priority: priority.clamp(STREAM_PRIORITY_GREATEST, 0) });
            Ok(h)
        })?;
        ph_stream.write(h as CUstream);
        Ok(())
    }

    fn cuStreamGetPriority(h_stream: CUstream, priority: *mut c_int) {
        let v = stream_field(h_stream, false, |s| s.priority, 0)?;
        out(priority, v)
    }

    fn cuStreamGetPriority_ptsz(h_stream: CUstream, priority: *mut c_int) {
        let v = stream_field(h_stream, true, |s| s.priority, 0)?;
        out(priority, v)
    }

    fn cuStreamGetFlags(h_stream: CUstream, flags: *mut c_uint) {
        let v = stream_field(h_stream, false, |s| s.flags, 0)?;
        out(flags, v)
    }

    fn cuStreamGetFlags_ptsz(h_stream: CUstream, flags: *mut c_uint) {
        let v = stream_field(h_stream, true, |s| s.flags, 0)?;
        out(flags, v)
    }

    fn cuStreamGetId(h_stream: CUstream, stream_id: *mut u64) {
        let v = stream_field(h_stream, false, |_| h_stream as u64 & 0xffff_ffff, 0)?;
        out(stream_id, v)
    }

    fn cuStreamGetId_ptsz(h_stream: CUstream, stream_id: *mut u64) {
        let v = stream_field(h_stream, true, |_| h_stream as u64 & 0xffff_ffff, 0)?;
        out(stream_id, v)
    }

    fn cuStreamQuery(h_stream: CUstream) {
        stream_query(h_stream, false)
    }

    fn cuStreamQuery_ptsz(h_stream: CUstream) {
        stream_query(h_stream, true)
    }

    fn cuStreamWaitEvent(h_stream: CUstream, h_event: *mut c_void, flags: c_uint) {
        let _ = flags;
        wait_event(h_stream, h_event, false)
    }

    fn cuStreamWaitEvent_ptsz(h_stream: CUstream, h_event: *mut c_void, flags: c_uint) {
        let _ = flags;
        wait_event(h_stream, h_event, true)
    }

    fn cuStreamGetCaptureInfo(h_stream: CUstream, status: *mut c_int, id: *mut u64) {
        capture_info(h_stream, status, id, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), false)
    }

    fn cuStreamGetCaptureInfo_ptsz(h_stream: CUstream, status: *mut c_int, id: *mut u64) {
        capture_info(h_stream, status, id, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), true)
    }

    fn cuStreamGetCaptureInfo_v2(h_stream: CUstream, status: *mut c_int, id: *mut u64, graph: *mut CUgraph, deps: *mut *const CUgraphNode, num_deps: *mut usize) {
        capture_info(h_stream, status, id, graph, deps, std::ptr::null_mut(), num_deps, false)
    }

    fn cuStreamGetCaptureInfo_v2_ptsz(h_stream: CUstream, status: *mut c_int, id: *mut u64, graph: *mut CUgraph, deps: *mut *const CUgraphNode, num_deps: *mut usize) {
        capture_info(h_stream, status, id, graph, deps, std::ptr::null_mut(), num_deps, true)
    }

    fn cuStreamGetCaptureInfo_v3(h_stream: CUstream, status: *mut c_int, id: *mut u64, graph: *mut CUgraph, deps: *mut *const CUgraphNode, edges: *mut *const c_void, num_deps: *mut usize) {
        capture_info(h_stream, status, id, graph, deps, edges, num_deps, false)
    }

    fn cuStreamGetCaptureInfo_v3_ptsz(h_stream: CUstream, status: *mut c_int, id: *mut u64, graph: *mut CUgraph, deps: *mut *const CUgraphNode, edges: *mut *const c_void, num_deps: *mut usize) {
        capture_info(h_stream, status, id, graph, deps, edges, num_deps, true)
    }

    fn cuStreamWriteValue32(stream: CUstream, addr: CUdeviceptr, value: u32, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, false)
    }
    fn cuStreamWriteValue32_ptsz(stream: CUstream, addr: CUdeviceptr, value: u32, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, true)
    }
    fn cuStreamWriteValue32_v2(stream: CUstream, addr: CUdeviceptr, value: u32, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, false)
    }
    fn cuStreamWriteValue32_v2_ptsz(stream: CUstream, addr: CUdeviceptr, value: u32, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, true)
    }
    fn cuStreamWaitValue32(stream: CUstream, addr: CUdeviceptr, value: u32, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, false)
    }
    fn cuStreamWaitValue32_ptsz(stream: CUstream, addr: CUdeviceptr, value: u32, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, true)
    }
    fn cuStreamWaitValue32_v2(stream: CUstream, addr: CUdeviceptr, value: u32, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, false)
    }
    fn cuStreamWaitValue32_v2_ptsz(stream: CUstream, addr: CUdeviceptr, value: u32, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, true)
    }
    fn cuStreamWriteValue64(stream: CUstream, addr: CUdeviceptr, value: u64, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, false)
    }
    fn cuStreamWriteValue64_ptsz(stream: CUstream, addr: CUdeviceptr, value: u64, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, true)
    }
    fn cuStreamWriteValue64_v2(stream: CUstream, addr: CUdeviceptr, value: u64, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, false)
    }
    fn cuStreamWriteValue64_v2_ptsz(stream: CUstream, addr: CUdeviceptr, value: u64, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, true)
    }
    fn cuStreamWaitValue64(stream: CUstream, addr: CUdeviceptr, value: u64, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, false)
    }
    fn cuStreamWaitValue64_ptsz(stream: CUstream, addr: CUdeviceptr, value: u64, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, true)
    }
    fn cuStreamWaitValue64_v2(stream: CUstream, addr: CUdeviceptr, value: u64, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, false)
    }
    fn cuStreamWaitValue64_v2_ptsz(stream: CUstream, addr: CUdeviceptr, value: u64, flags: c_uint) {
        let _ = (value, flags);
        stream_memop(stream, addr, true)
    }

    fn cuStreamBatchMemOp(stream: CUstream, count: c_uint, param_array: *const [u64; 6], flags: c_uint) {
        batch_mem_op(stream, count, param_array, flags, false)
    }
    fn cuStreamBatchMemOp_ptsz(stream: CUstream, count: c_uint, param_array: *const [u64; 6], flags: c_uint) {
        batch_mem_op(stream, count, param_array, flags, true)
    }
    fn cuStreamBatchMemOp_v2(stream: CUstream, count: c_uint, param_array: *const [u64; 6], flags: c_uint) {
        batch_mem_op(stream, count, param_array, flags, false)
    }
    fn cuStreamBatchMemOp_v2_ptsz(stream: CUstream, count: c_uint, param_array: *const [u64; 6], flags: c_uint) {
        batch_mem_op(stream, count, param_array, flags, true)
    }

    fn cuLaunchHostFunc(h_stream: CUstream, f: Option<unsafe extern "C" fn(*mut c_void)>, user_data: *mut c_void) {
        host_func(h_stream, f, user_data, false)
    }
    fn cuLaunchHostFunc_ptsz(h_stream: CUstream, f: Option<unsafe extern "C" fn(*mut c_void)>, user_data: *mut c_void) {
        host_func(h_stream, f, user_data, true)
    }
    fn cuLaunchHostFunc_v2(h_stream: CUstream, f: Option<unsafe extern "C" fn(*mut c_void)>, user_data: *mut c_void, sync_mode: c_uint) {
        let _ = sync_mode;
        host_func(h_stream, f, user_data, false)
    }
    fn cuLaunchHostFunc_v2_ptsz(h_stream: CUstream, f: Option<unsafe extern "C" fn(*mut c_void)>, user_data: *mut c_void, sync_mode: c_uint) {
        let _ = sync_mode;
        host_func(h_stream, f, user_data, true)
    }

    /// Any name is a kernel of a live library (the fake does not parse images).
    fn cuLibraryGetKernel(p_kernel: *mut *mut c_void, library: CUlibrary, name: *const c_char) {
        if p_kernel.is_null() || name.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let lib = library as u64;
        with_init(|p| if p.libraries.contains_key(&lib) { Ok(()) } else { Err(CUDA_ERROR_INVALID_HANDLE) })?;
        p_kernel.write(handle(tag::KERNEL, lib) as *mut c_void);
        Ok(())
    }

    /// The library's module in the current context: loads it there.
    fn cuLibraryGetModule(p_mod: *mut CUmodule, library: CUlibrary) {
        if p_mod.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        with_init(|p| p.use_library(library as u64))?;
        p_mod.write(handle(tag::LIBRARY_MODULE, library as u64) as CUmodule);
        Ok(())
    }

    /// The kernel's function in the current context: loads its library there.
    fn cuKernelGetFunction(p_func: *mut *mut c_void, kernel: *mut c_void) {
        if p_func.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        with_init(|p| {
            let lib = kernel_library(p, kernel)?;
            p.use_library(lib).map(|_| ())
        })?;
        p_func.write(handle(tag::FUNC, kernel as u64) as *mut c_void);
        Ok(())
    }

    fn cuKernelGetAttribute(pi: *mut c_int, attrib: c_int, kernel: *mut c_void, dev: CUdevice) {
        let v = with_init(|p| {
            let d = p.device(dev)?;
            let lib = kernel_library(p, kernel)?;
            function_value(p, (lib, d), attrib)
        })?;
        out(pi, v)
    }

    /// Per kernel and device; what cuBLASLt sets (the opt-in dynamic shared memory, non-portable
    /// clusters) is what its occupancy queries then count on.
    fn cuKernelSetAttribute(attrib: c_int, val: c_int, kernel: *mut c_void, dev: CUdevice) {
        with_init(|p| {
            let d = p.device(dev)?;
            let lib = kernel_library(p, kernel)?;
            set_function_value(p, (lib, d), attrib, val)
        })
    }

    fn cuKernelSetCacheConfig(kernel: *mut c_void, config: c_int, dev: CUdevice) {
        let _ = config;
        with_init(|p| {
            p.device(dev)?;
            kernel_library(p, kernel).map(|_| ())
        })
    }

    fn cuKernelGetName(name: *mut *const c_char, kernel: *mut c_void) {
        with_init(|p| kernel_library(p, kernel))?;
        out(name, c"fakecuda_kernel".as_ptr())
    }

    /// Any name is a function of a loaded module (or of a library's module in a context).
    fn cuModuleGetFunction(hfunc: *mut *mut c_void, hmod: CUmodule, name: *const c_char) {
        if hfunc.is_null() || name.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let m = hmod as u64;
        with_init(|p| match tag_of(m) {
            tag::MODULE if p.modules.contains_key(&m) => Ok(()),
            tag::LIBRARY_MODULE if p.libraries.contains_key(&handle(tag::LIBRARY, m)) => Ok(()),
            _ => Err(CUDA_ERROR_INVALID_HANDLE),
        })?;
        hfunc.write(handle(tag::FUNC, m) as *mut c_void);
        Ok(())
    }

    fn cuFuncGetAttribute(pi: *mut c_int, attrib: c_int, hfunc: *mut c_void) {
        let v = with_init(|p| {
            let owner = attribute_owner(p, hfunc)?;
            function_value(p, owner, attrib)
        })?;
        out(pi, v)
    }

    fn cuFuncSetAttribute(hfunc: *mut c_void, attrib: c_int, value: c_int) {
        with_init(|p| {
            let owner = attribute_owner(p, hfunc)?;
            set_function_value(p, owner, attrib, value)
        })
    }

    fn cuFuncSetCacheConfig(hfunc: *mut c_void, config: c_int) {
        let _ = config;
        with_init(|p| launchable(p, hfunc))
    }

    /// A launch runs nothing: the function and the stream must be valid.
    fn cuLaunchKernel(f: *mut c_void, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_mem_bytes: c_uint, h_stream: CUstream, kernel_params: *mut *mut c_void, extra: *mut *mut c_void) {
        let _ = (gx, gy, gz, bx, by, bz, shared_mem_bytes, kernel_params, extra);
        launch(f, h_stream, false)
    }

    fn cuLaunchKernel_ptsz(f: *mut c_void, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_mem_bytes: c_uint, h_stream: CUstream, kernel_params: *mut *mut c_void, extra: *mut *mut c_void) {
        let _ = (gx, gy, gz, bx, by, bz, shared_mem_bytes, kernel_params, extra);
        launch(f, h_stream, true)
    }

    fn cuLaunchKernelEx(config: *const CUlaunchConfig, f: *mut c_void, kernel_params: *mut *mut c_void, extra: *mut *mut c_void) {
        let _ = (kernel_params, extra);
        let c = config.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?;
        launch(f, c.h_stream, false)
    }

    fn cuLaunchKernelEx_ptsz(config: *const CUlaunchConfig, f: *mut c_void, kernel_params: *mut *mut c_void, extra: *mut *mut c_void) {
        let _ = (kernel_params, extra);
        let c = config.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?;
        launch(f, c.h_stream, true)
    }

    /// A cooperative launch runs nothing either (grid-wide sync is the kernel's business).
    fn cuLaunchCooperativeKernel(f: *mut c_void, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_mem_bytes: c_uint, h_stream: CUstream, kernel_params: *mut *mut c_void) {
        let _ = (gx, gy, gz, bx, by, bz, shared_mem_bytes, kernel_params);
        launch(f, h_stream, false)
    }

    fn cuLaunchCooperativeKernel_ptsz(f: *mut c_void, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_mem_bytes: c_uint, h_stream: CUstream, kernel_params: *mut *mut c_void) {
        let _ = (gx, gy, gz, bx, by, bz, shared_mem_bytes, kernel_params);
        launch(f, h_stream, true)
    }

    fn cuOccupancyMaxActiveBlocksPerMultiprocessor(num_blocks: *mut c_int, func: *mut c_void, block_size: c_int, dynamic_smem_size: usize) {
        let _ = dynamic_smem_size;
        with_init(|p| launchable(p, func))?;
        if block_size <= 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        out(num_blocks, (2048 / block_size).clamp(1, 32))
    }

    fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num_blocks: *mut c_int, func: *mut c_void, block_size: c_int, dynamic_smem_size: usize, flags: c_uint) {
        let _ = (dynamic_smem_size, flags);
        with_init(|p| launchable(p, func))?;
        if block_size <= 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        out(num_blocks, (2048 / block_size).clamp(1, 32))
    }

    /// Reserved bytes are the granules of the pool's live allocations, used bytes their requested
    /// sizes (nothing is kept cached).
    fn cuMemPoolGetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void) {
        if value.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (wide, v) = with_init(|p| {
            pool_device(p, pool)?;
            pool_attribute(p, pool as u64, attr)
        })?;
        if wide {
            value.cast::<u64>().write_unaligned(v);
        } else {
            value.cast::<c_int>().write_unaligned(v as c_int);
        }
        Ok(())
    }

    /// The policies and the release threshold are accepted; the high-water marks can only be
    /// reset (to 0, which restarts them from the current value).
    fn cuMemPoolSetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void) {
        if value.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        with_init(|p| {
            pool_device(p, pool)?;
            let pool = pool as u64;
            match attr {
                1..=4 => Ok(()),
                6 | 8 if value.cast::<u64>().read_unaligned() == 0 => {
                    let (reserved, used) = p.pool_bytes(pool);
                    let high = p.pool_high.entry(pool).or_insert((0, 0));
                    if attr == 6 {
                        high.0 = reserved;
                    } else {
                        high.1 = used;
                    }
                    Ok(())
                }
                _ => Err(CUDA_ERROR_INVALID_VALUE),
            }
        })
    }

    /// CUDA 13.0: a location's default pool. Device locations have the device's default pool;
    /// the fake has no host pools.
    fn cuMemGetDefaultMemPool(pool_out: *mut CUmemoryPool, location: *const CUmemLocation, alloc_type: c_int) {
        let h = location_pool(location, alloc_type)?;
        out(pool_out, h)
    }

    /// CUDA 13.0: a location's current pool (always its default pool in the fake).
    fn cuMemGetMemPool(pool: *mut CUmemoryPool, location: *const CUmemLocation, alloc_type: c_int) {
        let h = location_pool(location, alloc_type)?;
        out(pool, h)
    }

    /// CUDA 13.0: only a device's own default pool can be current in the fake.
    fn cuMemSetMemPool(location: *const CUmemLocation, alloc_type: c_int, pool: CUmemoryPool) {
        let h = location_pool(location, alloc_type)?;
        if h == pool { Ok(()) } else { Err(CUDA_ERROR_NOT_SUPPORTED) }
    }

    /// Every device reads and writes every pool (`CU_MEM_ACCESS_FLAGS_PROT_READWRITE`).
    fn cuMemPoolGetAccess(flags: *mut c_int, pool: CUmemoryPool, location: *const CUmemLocation) {
        let loc = location.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?;
        with_init(|p| {
            pool_device(p, pool)?;
            if loc.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            p.device(loc.id).map(|_| ())
        })?;
        out(flags, 3)
    }

    /// Graph memory (`cudaGraphAddMemAllocNode` pools): the fake's graphs have no allocation
    /// nodes, so every figure is 0 (`USED_MEM_CURRENT/HIGH`, `RESERVED_MEM_CURRENT/HIGH`).
    fn cuDeviceGetGraphMemAttribute(device: CUdevice, attr: c_int, value: *mut c_void) {
        with_init(|p| p.device(device))?;
        if !(0..=3).contains(&attr) || value.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        value.cast::<u64>().write_unaligned(0);
        Ok(())
    }

    /// Only the high-water marks can be reset (to 0).
    fn cuDeviceSetGraphMemAttribute(device: CUdevice, attr: c_int, value: *mut c_void) {
        with_init(|p| p.device(device))?;
        if !matches!(attr, 1 | 3) || value.is_null() || value.cast::<u64>().read_unaligned() != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    }

    fn cuDeviceGraphMemTrim(device: CUdevice) {
        with_init(|p| p.device(device).map(|_| ()))
    }

    /// Only a device's own default pool can be its current pool in the fake.
    fn cuDeviceSetMemPool(dev: CUdevice, pool: CUmemoryPool) {
        let d = with_init(|p| p.device(dev))?;
        if pool as u64 == handle(tag::POOL, d as u64) { Ok(()) } else { Err(CUDA_ERROR_NOT_SUPPORTED) }
    }

    /// The fake's graphs have no nodes (captured work is not recorded, only its allocations).
    fn cuGraphGetNodes(h_graph: CUgraph, nodes: *mut CUgraphNode, num_nodes: *mut usize) {
        let _ = nodes;
        with_init(|p| if p.graphs.contains_key(&(h_graph as u64)) { Ok(()) } else { Err(CUDA_ERROR_INVALID_VALUE) })?;
        out(num_nodes, 0)
    }

    fn cuGraphUpload(h_graph_exec: CUgraphExec, h_stream: CUstream) {
        graph_upload(h_graph_exec, h_stream, false)
    }

    fn cuGraphUpload_ptsz(h_graph_exec: CUgraphExec, h_stream: CUstream) {
        graph_upload(h_graph_exec, h_stream, true)
    }

    /// Nothing is cached, so there is nothing to trim.
    fn cuMemPoolTrimTo(pool: CUmemoryPool, min_bytes_to_keep: usize) {
        let _ = min_bytes_to_keep;
        with_init(|p| pool_device(p, pool).map(|_| ()))
    }

    fn cuMemPoolSetAccess(pool: CUmemoryPool, map: *const CUmemAccessDesc, count: usize) {
        if map.is_null() && count > 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let descs = if count == 0 { &[][..] } else { std::slice::from_raw_parts(map, count) };
        with_init(|p| {
            pool_device(p, pool)?;
            for d in descs {
                if d.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE || !matches!(d.flags, 0 | 1 | 3) {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                p.device(d.location.id)?;
            }
            Ok(())
        })
    }
}

/// Entry points the fake resolves so that a framework's driver table is complete, but whose
/// feature the simulated device does not have: they answer `CUDA_ERROR_NOT_SUPPORTED` without
/// looking at their arguments (on x86_64 and aarch64 a caller's arguments need no cleanup by the
/// callee, so one body serves every signature).
macro_rules! not_supported {
    ($($name:ident),* $(,)?) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name() -> CUresult {
                CUDA_ERROR_NOT_SUPPORTED
            }
        )*
    };
}

not_supported! {
    cuMulticastCreate,
    cuMulticastAddDevice,
    cuMulticastBindMem,
    cuMulticastBindMem_v2,
    cuMulticastBindAddr,
    cuMulticastBindAddr_v2,
    cuMulticastUnbind,
    cuMulticastGetGranularity,
    cuCtxFromGreenCtx,
    cuGreenCtxCreate,
    cuGreenCtxDestroy,
    cuGreenCtxStreamCreate,
    cuDevSmResourceSplitByCount,
    cuDeviceGetDevResource,
    cuDevResourceGenerateDesc,
    cuLogsRegisterCallback,
    cuLogsUnregisterCallback,
}
