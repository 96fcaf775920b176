//! Lifetimes and devices the interposer's accuracy tests compare against: VMM physical
//! memory lives while a handle reference or a mapping exists (cuda.h: `cuMemRelease`,
//! `cuMemUnmap`, `cuMemRetainAllocationHandle`); stream-ordered memory lands on the stream's
//! or the pool's device, whatever context is current; a stream knows its context and device;
//! an older driver does not know newer entry points.

mod common;

use common::*;
use fakecuda::api::{ctx::*, mem::*, stream::*, vmm::*};
use fakecuda::getproc::resolve_on;
use fakecuda::types::*;
use std::os::raw::c_int;
use std::ptr::null_mut;

/// Device 0's primary context current, and a stream created on device 1's: (c0, c1, s1).
unsafe fn device1_stream() -> (CUcontext, CUcontext, CUstream) {
    let c0 = setup(0);
    let mut c1 = null_mut();
    assert_eq!(cuDevicePrimaryCtxRetain(&mut c1, 1), 0);
    assert_eq!(cuCtxSetCurrent(c1), 0);
    let mut s1 = null_mut();
    assert_eq!(cuStreamCreate(&mut s1, 0), 0);
    assert_eq!(cuCtxSetCurrent(c0), 0);
    (c0, c1, s1)
}

/// Used bytes of device `dev` (its primary context made current for the query).
fn used_on(dev: c_int) -> usize {
    unsafe {
        let mut ctx = null_mut();
        let mut prev = null_mut();
        assert_eq!(cuCtxGetCurrent(&mut prev), 0);
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, dev), 0);
        assert_eq!(cuCtxSetCurrent(ctx), 0);
        let u = used();
        assert_eq!(cuDevicePrimaryCtxRelease_v2(dev), 0);
        assert_eq!(cuCtxSetCurrent(prev), 0);
        u
    }
}

#[test]
fn vmm_memory_lives_while_referenced_or_mapped() {
    let test = "vmm_memory_lives_while_referenced_or_mapped";
    in_child(test, &[("FAKECUDA_CTX_MIB", "0")], || unsafe {
        setup(0);
        let pr = prop(0, 0);
        let mut va = 0;
        assert_eq!(cuMemAddressReserve(&mut va, 12 * MIB, 0, 0, 0), 0);
        // vectorAddMMAP: release right after mapping; the memory stays until unmapped.
        let mut h = 0;
        assert_eq!(cuMemCreate(&mut h, 4 * MIB, &pr, 0), 0);
        assert_eq!(cuMemMap(va, 4 * MIB, 0, h, 0), 0);
        assert_eq!(cuMemRelease(h), 0);
        assert_eq!(used(), 4 * MIB, "released, still mapped");
        assert_eq!(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE, "no reference left to release");
        assert_eq!(cuMemMap(va + 4 * MIB as u64, 4 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "released handle");
        // Retaining from the address gives the reference back (same handle value).
        let mut r = 0;
        assert_eq!(cuMemRetainAllocationHandle(&mut r, (va + 12345) as *mut _), 0);
        assert_eq!(r, h);
        assert_eq!(cuMemUnmap(va, 4 * MIB), 0);
        assert_eq!(used(), 4 * MIB, "unmapped, still referenced by the retained handle");
        assert_eq!(cuMemRelease(r), 0);
        assert_eq!(used(), 0, "gone with its last reference");

        // NCCL's free path: retain, release, unmap, release.
        assert_eq!(cuMemCreate(&mut h, 8 * MIB, &pr, 0), 0);
        assert_eq!(cuMemMap(va, 8 * MIB, 0, h, 0), 0);
        assert_eq!(cuMemRetainAllocationHandle(&mut r, va as *mut _), 0);
        assert_eq!(cuMemRelease(r), 0);
        assert_eq!(used(), 8 * MIB);
        assert_eq!(cuMemUnmap(va, 8 * MIB), 0);
        assert_eq!(used(), 8 * MIB);
        assert_eq!(cuMemRelease(h), 0);
        assert_eq!(used(), 0);
        assert_eq!(cuMemRetainAllocationHandle(&mut r, va as *mut _), CUDA_ERROR_INVALID_VALUE, "nothing mapped");

        // Two mappings of one released handle: freed with the last one.
        assert_eq!(cuMemCreate(&mut h, 4 * MIB, &pr, 0), 0);
        assert_eq!(cuMemMap(va, 4 * MIB, 0, h, 0), 0);
        assert_eq!(cuMemMap(va + 4 * MIB as u64, 4 * MIB, 0, h, 0), 0);
        assert_eq!(cuMemRelease(h), 0);
        assert_eq!(cuMemUnmap(va, 4 * MIB), 0);
        assert_eq!(used(), 4 * MIB);
        assert_eq!(cuMemUnmap(va + 4 * MIB as u64, 4 * MIB), 0);
        assert_eq!(used(), 0);
        assert_eq!(cuMemAddressFree(va, 12 * MIB), 0);
    });
}

#[test]
fn streams_know_their_context_and_device() {
    let test = "streams_know_their_context_and_device";
    in_child(test, &[("FAKECUDA_DEVICES", "2")], || unsafe {
        let (c0, c1, s1) = device1_stream();
        let (mut ctx, mut dev) = (null_mut(), -1);
        assert_eq!(cuStreamGetCtx(s1, &mut ctx), 0);
        assert_eq!(ctx, c1);
        assert_eq!(cuStreamGetDevice(s1, &mut dev), 0);
        assert_eq!(dev, 1);
        let mut green = std::ptr::dangling_mut::<std::os::raw::c_void>();
        assert_eq!(cuStreamGetCtx_v2(s1, &mut ctx, &mut green), 0);
        assert_eq!((ctx, green), (c1, null_mut()));
        // The default streams are the current context's.
        for s in [0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD] {
            assert_eq!(cuStreamGetDevice(s as CUstream, &mut dev), 0);
            assert_eq!(dev, 0);
            assert_eq!(cuStreamGetCtx_ptsz(s as CUstream, &mut ctx), 0);
            assert_eq!(ctx, c0);
        }
        assert_eq!(cuStreamGetDevice_ptsz(null_mut(), &mut dev), 0);
        assert_eq!(cuStreamGetDevice(0x1234 as CUstream, &mut dev), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuStreamGetDevice(s1, null_mut()), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuStreamGetCtx(s1, null_mut()), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuStreamDestroy_v2(s1), 0);
        assert_eq!(cuStreamGetCtx(s1, &mut ctx), CUDA_ERROR_INVALID_HANDLE);
    });
}

#[test]
fn stream_ordered_memory_lands_on_the_stream_or_pool_device() {
    let test = "stream_ordered_memory_lands_on_the_stream_or_pool_device";
    in_child(test, &[("FAKECUDA_DEVICES", "2"), ("FAKECUDA_CTX_MIB", "0")], || unsafe {
        let (_, _, s1) = device1_stream();
        let (mut a, mut b, mut c) = (0, 0, 0);
        assert_eq!(cuMemAllocAsync(&mut a, 4 * MIB, s1), 0, "device 1's stream, device 0 current");
        let mut pool1 = null_mut();
        assert_eq!(cuDeviceGetDefaultMemPool(&mut pool1, 1), 0);
        assert_eq!(cuMemAllocFromPoolAsync(&mut b, 2 * MIB, pool1, null_mut()), 0, "device 1's pool");
        let mut props = CUmemPoolProps {
            alloc_type: CU_MEM_ALLOCATION_TYPE_PINNED,
            handle_types: 0,
            location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: 1 },
            win32_security_attributes: null_mut(),
            max_size: 0,
            usage: 0,
            reserved: [0; 54],
        };
        let mut made = null_mut();
        assert_eq!(cuMemPoolCreate(&mut made, &props), 0);
        assert_eq!(cuMemAllocFromPoolAsync_ptsz(&mut c, 6 * MIB, made, null_mut()), 0, "a made pool on device 1");
        let mut v = 0u64;
        assert_eq!(cuPointerGetAttribute((&mut v as *mut u64).cast(), 17, c), 0);
        assert_eq!(v, made as u64, "MEMPOOL_HANDLE of a made pool");
        assert_eq!(cuPointerGetAttribute((&mut v as *mut u64).cast(), 9, c), 0);
        assert_eq!(v as u32, 1, "DEVICE_ORDINAL");
        assert_eq!((used(), used_on(1)), (0, 12 * MIB));
        assert_eq!(cuMemPoolDestroy(made), 0);
        assert_eq!(cuMemPoolDestroy(made), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemPoolDestroy(pool1), CUDA_ERROR_INVALID_VALUE, "a default pool cannot be destroyed");
        assert_eq!(cuMemAllocFromPoolAsync(&mut c, MIB, made, s1), CUDA_ERROR_INVALID_VALUE, "destroyed pool");
        assert_eq!(cuMemFreeAsync(c, s1), 0, "memory of a destroyed pool is still freed");
        assert_eq!(used_on(1), 6 * MIB);
        props.location.id = 7;
        assert_eq!(cuMemPoolCreate(&mut made, &props), CUDA_ERROR_INVALID_DEVICE);
        props.location = CUmemLocation { type_: CU_MEM_LOCATION_TYPE_HOST, id: 0 };
        assert_eq!(cuMemPoolCreate(&mut made, &props), CUDA_ERROR_INVALID_VALUE, "host pools are not simulated");
        assert_eq!(cuMemPoolCreate(&mut made, null_mut()), CUDA_ERROR_INVALID_VALUE);
    });
}

#[test]
fn an_older_driver_lacks_newer_entry_points() {
    // cuStreamGetDevice is CUDA 12.8; a 12.4 driver resolves cuStreamGetCtx to its 9.2 form.
    let found = |name: &str, version: c_int, driver: c_int| resolve_on(driver, name, version, 0).ok();
    assert_eq!(found("cuStreamGetDevice", 12080, 12090).map(|e| e.symbol), Some("cuStreamGetDevice"));
    assert!(found("cuStreamGetDevice", 12080, 12040).is_none());
    assert!(found("cuStreamGetDevice", 12090, 12040).is_none());
    assert_eq!(found("cuStreamGetCtx", 12090, 12040).map(|e| e.symbol), Some("cuStreamGetCtx"));
    assert_eq!(found("cuStreamGetCtx", 12090, 12050).map(|e| e.symbol), Some("cuStreamGetCtx_v2"));
    assert_eq!(
        resolve_on(12040, "cuStreamGetDevice", 12080, 0).err(),
        Some((CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND))
    );
    let test = "an_older_driver_lacks_newer_entry_points";
    in_child(test, &[("FAKECUDA_DRIVER_VERSION", "12040")], || unsafe {
        let mut v = 0;
        assert_eq!(cuDriverGetVersion(&mut v), 0);
        assert_eq!(v, 12040);
        let mut pfn = null_mut();
        let mut status = -1;
        let name = c"cuStreamGetDevice".as_ptr();
        let r = fakecuda::getproc::cuGetProcAddress_v2(name, &mut pfn, 12080, 0, &mut status);
        assert_eq!((r, pfn, status), (CUDA_ERROR_NOT_FOUND, null_mut(), CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
    });
}
