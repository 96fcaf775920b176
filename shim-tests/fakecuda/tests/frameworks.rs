//! What NVIDIA's real runtime and the frameworks on it need from the driver beyond allocation:
//! the private tables of `cuGetExportTable`, lazy module loading, kernels that load their
//! library into a context, events, stream priorities, capture info and pool attributes.

mod common;

use common::*;
use fakecuda::api::export::{self, integrity};
use fakecuda::api::{ctx::*, exec::*, mem::*, stream::*};
use fakecuda::types::*;
use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;

type Table = *const *const c_void;

unsafe fn table(id: &export::Uuid) -> (CUresult, Table) {
    let mut t: *const c_void = std::ptr::null();
    let r = fakecuda::api::export::cuGetExportTable(&mut t, id);
    (r, t.cast())
}

#[test]
fn export_tables() {
    in_child("export_tables", &[("FAKECUDA_DRIVER_VERSION", "13020"), ("FAKECUDA_DEVICES", "2")], || unsafe {
        assert_eq!(cuInit(0), 0);
        // The runtime's skip-init probe: not found; an unknown id: not supported.
        assert_eq!(table(&export::SKIP_INIT_PROBE), (CUDA_ERROR_NOT_FOUND, std::ptr::null()));
        assert_eq!(table(&[0x11; 16]), (CUDA_ERROR_NOT_SUPPORTED, std::ptr::null()));
        // Size-first tables.
        for (id, slots) in [
            (export::CUDART_INTERFACE, 13),
            (export::TOOLS_RUNTIME_CALLBACK_HOOKS, 7),
            (export::TOOLS_TLS, 4),
            (export::CONTEXT_CHECKS, 4),
            (export::INTEGRITY_CHECK, 3),
        ] {
            let (r, t) = table(&id);
            assert_eq!(r, 0);
            assert_eq!(*t as usize, slots * 8, "size slot");
        }
        // CUDART_INTERFACE slot 2 gives the primary context, retained but not active (nothing
        // committed on the device) until it is retained through the API or made current.
        let (_, cudart) = table(&export::CUDART_INTERFACE);
        let retain: unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult = std::mem::transmute(*cudart.add(2));
        let state = |dev| {
            let (mut flags, mut active) = (0, 0);
            assert_eq!(cuDevicePrimaryCtxGetState(dev, &mut flags, &mut active), 0);
            active
        };
        let mut ctx = null_mut();
        assert_eq!(retain(&mut ctx, 1), 0);
        assert_eq!(state(1), 0, "not active after the private table's retain");
        let mut again = null_mut();
        assert_eq!(cuDevicePrimaryCtxRetain(&mut again, 1), 0);
        assert_eq!(ctx, again, "the same primary context");
        assert_eq!(state(1), 1);
        let mut ctx0 = null_mut();
        assert_eq!(retain(&mut ctx0, 0), 0);
        assert_eq!(state(0), 0);
        assert_eq!(cuCtxSetCurrent(ctx0), 0);
        assert_eq!(state(0), 1, "active once made current");
        let (mut free, mut total) = (0usize, 0usize);
        assert_eq!(cuMemGetInfo_v2(&mut free, &mut total), 0);
        assert_eq!(total - free, 512 << 20, "the context's memory, committed when made current");
        assert_eq!(retain(&mut ctx, 7), CUDA_ERROR_INVALID_DEVICE);
        // Context-local storage: put, get, delete; NULL means the current context.
        let (_, cls) = table(&export::CONTEXT_LOCAL_STORAGE);
        type Put = unsafe extern "C" fn(CUcontext, *mut c_void, *mut c_void, *const c_void) -> CUresult;
        type Del = unsafe extern "C" fn(CUcontext, *mut c_void) -> CUresult;
        type Get = unsafe extern "C" fn(*mut *mut c_void, CUcontext, *mut c_void) -> CUresult;
        let put = std::mem::transmute::<*const c_void, Put>(*cls);
        let del = std::mem::transmute::<*const c_void, Del>(*cls.add(1));
        let get = std::mem::transmute::<*const c_void, Get>(*cls.add(2));
        let key = 0x1234 as *mut c_void;
        let mut v = null_mut();
        assert_eq!(get(&mut v, ctx, key), CUDA_ERROR_INVALID_HANDLE, "never put");
        assert_eq!(put(ctx, key, 0x99 as *mut c_void, std::ptr::null()), 0);
        assert_eq!(cuCtxSetCurrent(ctx), 0);
        assert_eq!((get(&mut v, null_mut(), key), v as usize), (0, 0x99));
        assert_eq!(del(null_mut(), key), 0);
        assert_eq!(get(&mut v, ctx, key), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(put(0x5 as CUcontext, key, v, std::ptr::null()), CUDA_ERROR_INVALID_CONTEXT);
        // The tools buffers.
        let (_, hooks) = table(&export::TOOLS_RUNTIME_CALLBACK_HOOKS);
        let buf: unsafe extern "C" fn(*mut *mut c_void, *mut usize) = std::mem::transmute(*hooks.add(2));
        let (mut p, mut n) = (null_mut(), 0usize);
        buf(&mut p, &mut n);
        assert!(!p.is_null() && n >= 0x1000);
        assert!(std::slice::from_raw_parts(p.cast::<u8>(), n).iter().all(|b| *b == 0), "no tool subscribed");
        // Context checks pass.
        let (_, checks) = table(&export::CONTEXT_CHECKS);
        let check: unsafe extern "C" fn(CUcontext, *mut u32, *mut *const c_void) -> CUresult =
            std::mem::transmute(*checks.add(2));
        let mut res = 7u32;
        assert_eq!((check(ctx, &mut res, null_mut()), res), (0, 0));
        // The integrity check: fixed answers for versions ending in 0/1, else the HMAC of the
        // calling process, thread, tables, time and devices.
        let (_, integ) = table(&export::INTEGRITY_CHECK);
        let f: unsafe extern "C" fn(u32, u64, *mut [u64; 2]) -> CUresult = std::mem::transmute(*integ.add(1));
        let mut out = [0u64; 2];
        assert_eq!(f(13020, 1_700_000_000, &mut out), 0);
        assert_eq!(out, [0x3341_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8]);
        assert_eq!(f(13022, 1_700_000_000, &mut out), 0);
        let expect = integrity::answer(
            &integrity::Context {
                driver_version: 13020,
                version: 13022,
                pid: std::process::id(),
                thread: libc::pthread_self() as u32,
                cudart_table: cudart as u64,
                integrity_table: integ as u64,
                function: *integ.add(1) as u64,
                unix_seconds: 1_700_000_000,
            },
            &(0..2)
                .map(|d| integrity::Device { uuid: device_uuid(d), pci_domain: 0, pci_bus: d + 1, pci_device: 0 })
                .collect::<Vec<_>>(),
        );
        assert_eq!(out, expect);
        let (mut u0, mut u1) = ([0u8; 16], [0u8; 16]);
        assert_eq!((cuDeviceGetUuid_v2(&mut u0, 0), cuDeviceGetUuid(&mut u1, 1)), (0, 0));
        assert_ne!(u0, u1);
        assert_eq!(u0, device_uuid(0));
        let mut bus = [0 as std::os::raw::c_char; 32];
        assert_eq!(cuDeviceGetPCIBusId(bus.as_mut_ptr(), 32, 1), 0);
        assert_eq!(std::ffi::CStr::from_ptr(bus.as_ptr()).to_str().unwrap(), "00000000:02:00.0");
        let mut a = 0;
        assert_eq!((cuDeviceGetAttribute(&mut a, 33, 1), a), (0, 2), "PCI bus id attribute");
        assert_eq!(cuDeviceGetAttribute(&mut a, 159, 0), 0, "a 13.x attribute");
        assert_eq!(cuDeviceGetAttribute(&mut a, 160, 0), CUDA_ERROR_INVALID_VALUE);
    });
}

#[test]
fn libraries_load_lazily() {
    in_child("libraries_load_lazily", &[("FAKECUDA_CTX_MIB", "0"), ("FAKECUDA_MODULE_MIB", "8")], || unsafe {
        assert_eq!(cuInit(0), 0);
        let image = [0u8; 16];
        let mut libs = [null_mut(); 3];
        for l in libs.iter_mut() {
            assert_eq!(
                cuLibraryLoadData(l, image.as_ptr().cast(), null_mut(), null_mut(), 0, null_mut(), null_mut(), 0),
                0
            );
        }
        setup(0);
        assert_eq!(used(), 0, "loading costs nothing until a kernel is used");
        let name = c"k".as_ptr();
        let mut k = null_mut();
        assert_eq!(cuLibraryGetKernel(&mut k, libs[0], name), 0);
        assert_eq!(used(), 0, "naming a kernel loads nothing");
        let mut f = null_mut();
        assert_eq!(cuKernelGetFunction(&mut f, k), 0);
        assert_eq!(used(), 8 * MIB, "first use in a context loads its library there");
        let mut f2 = null_mut();
        assert_eq!(cuKernelGetFunction(&mut f2, k), 0);
        assert_eq!(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, null_mut(), null_mut(), null_mut()), 0);
        assert_eq!(used(), 8 * MIB, "once per context");
        // A kernel handle launched directly loads its library too.
        let mut k2 = null_mut();
        assert_eq!(cuLibraryGetKernel(&mut k2, libs[1], name), 0);
        assert_eq!(cuLaunchKernel(k2, 1, 1, 1, 1, 1, 1, 0, null_mut(), null_mut(), null_mut()), 0);
        assert_eq!(used(), 16 * MIB);
        let mut attr = 0;
        assert_eq!((cuFuncGetAttribute(&mut attr, 0, f), attr), (0, 1024));
        assert_eq!(
            cuLaunchKernel(0x77 as *mut c_void, 1, 1, 1, 1, 1, 1, 0, null_mut(), null_mut(), null_mut()),
            CUDA_ERROR_INVALID_HANDLE
        );
        // Another context on another device loads it again, there.
        let mut c1 = null_mut();
        assert_eq!(cuDevicePrimaryCtxRetain(&mut c1, 1), 0);
        assert_eq!(cuCtxSetCurrent(c1), 0);
        assert_eq!(cuKernelGetFunction(&mut f2, k), 0);
        assert_eq!(used(), 8 * MIB, "device 1");
        assert_eq!(cuLibraryUnload(libs[0]), 0);
        assert_eq!(used(), 0, "unloading gives back every context's copy");
        assert_eq!(cuKernelGetFunction(&mut f2, k), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuLibraryUnload(libs[0]), CUDA_ERROR_INVALID_VALUE);
        setup(0);
        assert_eq!(used(), 8 * MIB, "libs[1] is still loaded on device 0");
        assert_eq!(cuDevicePrimaryCtxRelease_v2(0), 0);
        assert_eq!(cuDevicePrimaryCtxRelease_v2(0), 0);
        let ctx = setup(0);
        assert!(!ctx.is_null());
        assert_eq!(used(), 0, "a destroyed context's loads are gone");
    });
}

#[test]
fn events_streams_and_capture_info() {
    in_child("events_streams_and_capture_info", &[], || unsafe {
        setup(0);
        let (mut least, mut greatest) = (7, 7);
        assert_eq!(cuCtxGetStreamPriorityRange(&mut least, &mut greatest), 0);
        assert_eq!((least, greatest), (0, -5));
        let mut s = null_mut();
        assert_eq!(cuStreamCreateWithPriority(&mut s, 1, -9), 0);
        let (mut prio, mut flags) = (0 as c_int, 0u32);
        assert_eq!((cuStreamGetPriority(s, &mut prio), prio), (0, -5), "clamped");
        assert_eq!((cuStreamGetFlags(s, &mut flags), flags), (0, 1));
        assert_eq!(cuStreamQuery(s), 0);
        let mut e = null_mut();
        assert_eq!(cuEventCreate(&mut e, 0), 0);
        assert_eq!(cuEventRecord(e, s), 0);
        assert_eq!(cuStreamWaitEvent(null_mut(), e, 0), 0);
        let mut ms = -1.0f32;
        assert_eq!((cuEventElapsedTime_v2(&mut ms, e, e), ms), (0, 0.0));
        assert_eq!(cuEventQuery(e), 0);
        let (mut status, mut id, mut graph) = (9, 0u64, null_mut());
        let (mut deps, mut n) = (std::ptr::null(), 9usize);
        assert_eq!(cuStreamGetCaptureInfo_v2(s, &mut status, &mut id, &mut graph, &mut deps, &mut n), 0);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_NONE);
        assert_eq!(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), 0);
        assert_eq!(cuStreamGetCaptureInfo_v3(s, &mut status, &mut id, &mut graph, &mut deps, null_mut(), &mut n), 0);
        assert_eq!((status, n), (CU_STREAM_CAPTURE_STATUS_ACTIVE, 0));
        let mut ended = null_mut();
        assert_eq!(cuStreamEndCapture(s, &mut ended), 0);
        assert_eq!(ended, graph, "the graph being captured into");
        assert_eq!(cuEventDestroy_v2(e), 0);
        assert_eq!(cuEventRecord(e, s), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuMulticastGetGranularity(), CUDA_ERROR_NOT_SUPPORTED);
    });
}

#[test]
fn pool_attributes_follow_stream_ordered_allocations() {
    in_child("pool_attributes_follow_stream_ordered_allocations", &[("FAKECUDA_CTX_MIB", "0")], || unsafe {
        setup(0);
        let mut pool = null_mut();
        assert_eq!(cuDeviceGetDefaultMemPool(&mut pool, 0), 0);
        let read = |attr: c_int| {
            let mut v = 0u64;
            assert_eq!(cuMemPoolGetAttribute(pool, attr, (&mut v as *mut u64).cast()), 0);
            v
        };
        let (mut a, mut b) = (0, 0);
        assert_eq!(cuMemAllocAsync(&mut a, 3 * MIB, null_mut()), 0);
        assert_eq!(cuMemAllocAsync(&mut b, MIB, null_mut()), 0);
        assert_eq!((read(5), read(7)), (6 * MIB as u64, 4 * MIB as u64), "reserved in granules, used as requested");
        assert_eq!(cuMemFreeAsync(a, null_mut()), 0);
        assert_eq!((read(5), read(6), read(7), read(8)), (2 * MIB as u64, 6 * MIB as u64, MIB as u64, 4 * MIB as u64));
        let mut zero = 0u64;
        assert_eq!(cuMemPoolSetAttribute(pool, 6, (&mut zero as *mut u64).cast()), 0);
        assert_eq!(read(6), 2 * MIB as u64, "a reset high-water mark restarts from now");
        let mut one = 1u64;
        assert_eq!(cuMemPoolSetAttribute(pool, 6, (&mut one as *mut u64).cast()), CUDA_ERROR_INVALID_VALUE);
        let mut policy = 0 as c_int;
        assert_eq!(cuMemPoolGetAttribute(pool, 1, (&mut policy as *mut c_int).cast()), 0);
        assert_eq!(policy, 1);
        assert_eq!(
            cuMemPoolGetAttribute(0x9 as CUmemoryPool, 5, (&mut zero as *mut u64).cast()),
            CUDA_ERROR_INVALID_VALUE
        );
    });
}

/// NCCL's ncclCuMemHostAlloc (src/include/alloc.h): host-located VMM memory is real memory the
/// CPU can use at the mapped address, costs the device nothing, reports its location, and an
/// exported POSIX fd maps the same bytes again.
#[test]
fn host_located_vmm_memory_is_real_host_memory() {
    use fakecuda::api::vmm::*;
    in_child("host_located_vmm_memory_is_real_host_memory", &[("FAKECUDA_CTX_MIB", "0")], || unsafe {
        setup(0);
        let mut prop: CUmemAllocationProp = std::mem::zeroed();
        prop.type_ = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location = CUmemLocation { type_: CU_MEM_LOCATION_TYPE_HOST_NUMA, id: 0 };
        prop.requested_handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        let mut g = 0usize;
        assert_eq!(cuMemGetAllocationGranularity(&mut g, &prop, 0), 0);
        let mut h = 0;
        assert_eq!(cuMemCreate(&mut h, g, &prop, 0), 0);
        assert_eq!(used(), 0, "host memory is not device memory");
        let mut bad = prop;
        bad.location.id = 3;
        assert_eq!(cuMemCreate(&mut h, g, &bad, 0), CUDA_ERROR_INVALID_VALUE, "no NUMA node 3");
        let mut va = 0;
        assert_eq!(cuMemAddressReserve(&mut va, g, g, 0, 0), 0);
        assert_eq!(cuMemMap(va, g, 0, h, 0), 0);
        let access = [
            CUmemAccessDesc { location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: 0 }, flags: 3 },
            CUmemAccessDesc { location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_HOST_NUMA, id: 0 }, flags: 3 },
        ];
        assert_eq!(cuMemSetAccess(va, g, access.as_ptr(), 2), 0);
        let p = va as *mut u64;
        p.write(0x1234_5678);
        let mut got: CUmemAllocationProp = std::mem::zeroed();
        assert_eq!(cuMemGetAllocationPropertiesFromHandle(&mut got, h), 0);
        assert_eq!((got.location.type_, got.location.id), (CU_MEM_LOCATION_TYPE_HOST_NUMA, 0));
        let mut fd: std::os::raw::c_int = -1;
        assert_eq!(cuMemExportToShareableHandle((&mut fd as *mut std::os::raw::c_int).cast(), h, 1, 0), 0);
        let mut h2 = 0;
        assert_eq!(cuMemImportFromShareableHandle(&mut h2, fd as usize as *mut c_void, 1), 0);
        libc::close(fd);
        let mut va2 = 0;
        assert_eq!(cuMemAddressReserve(&mut va2, g, g, 0, 0), 0);
        assert_eq!(cuMemMap(va2, g, 0, h2, 0), 0);
        assert_eq!((va2 as *const u64).read(), 0x1234_5678, "the same bytes through the imported handle");
        assert_eq!(cuMemUnmap(va2, g), 0);
        assert_eq!(cuMemRelease(h2), 0);
        assert_eq!(cuMemRelease(h), 0);
        assert_eq!(p.read(), 0x1234_5678, "still mapped: released handles live until unmapped");
        assert_eq!(cuMemUnmap(va, g), 0);
        assert_eq!(cuMemAddressFree(va, g), 0);
        assert_eq!(cuMemAddressFree(va2, g), 0);
        assert_eq!(used(), 0);
    });
}
