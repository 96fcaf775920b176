//! Memory accounting and strict validation of the fake driver (each test in its own process and
//! machine, see `common::in_child`).

mod common;

use common::*;
use fakecuda::api::{copy::*, ctx::*, mem::*, stream::*};
use fakecuda::types::*;
use std::os::raw::{c_int, c_uint, c_void};
use std::ptr::null_mut;

#[test]
fn oom_at_card_limit_with_rounding() {
    in_child(
        "oom_at_card_limit_with_rounding",
        &[("FAKECUDA_TOTAL_MIB", "64"), ("FAKECUDA_CTX_MIB", "8")],
        || unsafe {
            assert_eq!(cuInit(0), 0);
            let mut ctx = null_mut();
            assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, 0), 0);
            assert_eq!(cuCtxSetCurrent(ctx), 0);
            assert_eq!(info(), (56 * MIB, 64 * MIB), "the first context costs FAKECUDA_CTX_MIB");
            let one = alloc(1);
            assert_eq!(used(), 10 * MIB, "1 byte is charged as 2 MiB");
            let odd = alloc(2 * MIB + 1);
            assert_eq!(used(), 14 * MIB, "2 MiB + 1 rounds to 4 MiB");
            let rest = alloc(50 * MIB);
            assert_eq!(info().0, 0);
            let mut p = 0;
            assert_eq!(cuMemAlloc_v2(&mut p, 2 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
            let small = alloc(1);
            assert_eq!(small, one + 512, "a small allocation shares the page of the one before");
            assert_eq!(cuMemFree_v2(small), 0);
            assert_eq!(cuMemFree_v2(one), 0);
            assert_eq!(cuMemAlloc_v2(&mut p, 2 * MIB + 1), CUDA_ERROR_OUT_OF_MEMORY, "4 MiB does not fit in 2 MiB");
            let again = alloc(2 * MIB);
            for ptr in [odd, rest, again] {
                assert_eq!(cuMemFree_v2(ptr), 0);
            }
            assert_eq!(used(), 8 * MIB);
            assert_eq!(cuDevicePrimaryCtxRelease_v2(0), 0);
            assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, 0), 0);
            assert_eq!(cuCtxSetCurrent(ctx), 0);
            assert_eq!(used(), 8 * MIB, "the context cost is released and charged again");
        },
    );
}

/// Small allocations share pages as a real driver's do: a page is charged when the first one
/// lands in it and given back with the last; each keeps its own range; one of another context
/// gets a page of its own.
#[test]
fn small_allocations_share_pages() {
    in_child("small_allocations_share_pages", &[("FAKECUDA_TOTAL_MIB", "64"), ("FAKECUDA_CTX_MIB", "0")], || unsafe {
        setup(0);
        let ptrs: Vec<CUdeviceptr> = (0..1000).map(|i| alloc(if i % 3 == 0 { 608 } else { 24 })).collect();
        assert_eq!(used(), 2 * MIB, "1000 small allocations (at most 1 KiB in the page each) in one page");
        assert!(ptrs.windows(2).all(|w| w[1] > w[0] && (w[1] - w[0]) % 512 == 0), "512-byte aligned, in order");
        let (mut base, mut size) = (0, 0usize);
        assert_eq!(cuMemGetAddressRange_v2(&mut base, &mut size, ptrs[3] + 100), 0);
        assert_eq!((base, size), (ptrs[3], 608), "each keeps its own range");
        let next = alloc(3 * MIB / 2);
        assert_eq!(used(), 4 * MIB, "1.5 MiB more does not fit in the first page's rest");
        assert_eq!(cuMemFree_v2(next), 0);
        assert_eq!(used(), 2 * MIB, "a page goes back with its last allocation");
        for p in &ptrs[1..] {
            assert_eq!(cuMemFree_v2(*p), 0);
        }
        assert_eq!(used(), 2 * MIB, "one allocation still holds the page");
        assert_eq!(cuMemFree_v2(ptrs[0]), 0);
        assert_eq!(used(), 0);
        assert_eq!(cuMemFree_v2(ptrs[0]), CUDA_ERROR_INVALID_VALUE, "freed twice");
        let big = alloc(2 * MIB);
        assert_eq!((used(), big % (2 * MIB as u64)), (2 * MIB, 0), "2 MiB is not small");
    });
}

#[test]
fn mem_get_info_null_handling() {
    in_child("mem_get_info_null_handling", &[("FAKECUDA_TOTAL_MIB", "1024"), ("FAKECUDA_CTX_MIB", "0")], || unsafe {
        setup(0);
        let (mut f, mut t) = (7usize, 7usize);
        assert_eq!(cuMemGetInfo_v2(null_mut(), null_mut()), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemGetInfo_v2(&mut f, null_mut()), 0);
        assert_eq!(f, 1024 * MIB);
        assert_eq!(cuMemGetInfo_v2(null_mut(), &mut t), 0);
        assert_eq!(t, 1024 * MIB);
        let (mut f32, mut t32) = (0 as c_uint, 0 as c_uint);
        assert_eq!(cuMemGetInfo(&mut f32, &mut t32), 0);
        assert_eq!((f32 as usize, t32 as usize), (1024 * MIB, 1024 * MIB));
        assert_eq!(cuMemGetInfo(null_mut(), null_mut()), CUDA_ERROR_INVALID_VALUE);
    });
}

#[test]
fn strict_errors() {
    in_child("strict_errors", &[("FAKECUDA_DEVICES", "2")], || unsafe {
        let mut p = 0;
        let (mut f, mut t) = (0usize, 0usize);
        assert_eq!(cuMemAlloc_v2(&mut p, 16), CUDA_ERROR_NOT_INITIALIZED, "before cuInit");
        assert_eq!(cuMemGetInfo_v2(&mut f, &mut t), CUDA_ERROR_NOT_INITIALIZED);
        let mut n = 0;
        assert_eq!(cuDeviceGetCount(&mut n), CUDA_ERROR_NOT_INITIALIZED);
        assert_eq!(cuInit(1), CUDA_ERROR_INVALID_VALUE, "cuInit flags must be 0");
        assert_eq!(cuInit(0), 0);
        assert_eq!(cuDeviceGetCount(&mut n), 0);
        assert_eq!(n, 2);
        assert_eq!(cuMemAlloc_v2(&mut p, 16), CUDA_ERROR_INVALID_CONTEXT, "no current context");
        assert_eq!(cuMemGetInfo_v2(&mut f, &mut t), CUDA_ERROR_INVALID_CONTEXT);
        let mut d = 0;
        assert_eq!(cuDeviceGet(&mut d, 2), CUDA_ERROR_INVALID_DEVICE);
        assert_eq!(cuDeviceGet(&mut d, -1), CUDA_ERROR_INVALID_DEVICE);
        let mut ctx = null_mut();
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, 7), CUDA_ERROR_INVALID_DEVICE);
        assert_eq!(cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT, "not retained");
        setup(1);
        assert_eq!(cuMemAlloc_v2(null_mut(), 16), CUDA_ERROR_INVALID_VALUE, "NULL out-pointer");
        assert_eq!(cuMemAlloc_v2(&mut p, 0), CUDA_ERROR_INVALID_VALUE, "zero bytes");
        assert_eq!(cuMemFree_v2(0x7000_1234_0000), CUDA_ERROR_INVALID_VALUE, "unknown pointer");
        assert_eq!(cuMemFree_v2(0), 0, "NULL frees nothing (cudart forwards cudaFree(NULL))");
        let q = alloc(4096);
        assert_eq!(q >> 39, (0x7000_0000_0000u64 >> 39) + 1, "device 1's window");
        assert_eq!(q % (2 * MIB as u64), 0, "2 MiB aligned");
        assert_eq!(cuMemFree_v2(q + 16), CUDA_ERROR_INVALID_VALUE, "interior pointer");
        assert_eq!(cuMemFree_v2(q), 0);
        assert_eq!(cuMemFree_v2(q), CUDA_ERROR_INVALID_VALUE, "double free");
        let mut dev: c_int = -1;
        assert_eq!(cuCtxGetDevice(&mut dev), 0);
        assert_eq!(dev, 1);
        let mut s = null_mut();
        assert_eq!(cuStreamSynchronize(0xdead_0000 as CUstream), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuStreamCreate(&mut s, 4), CUDA_ERROR_INVALID_VALUE);
        let mut name = [0 as std::os::raw::c_char; 8];
        assert_eq!(cuDeviceGetName(name.as_mut_ptr(), 8, 0), 0);
        assert_eq!(name[7], 0, "truncated and NUL-terminated");
        let mut sp = std::ptr::null();
        assert_eq!(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &mut sp), 0);
        assert_eq!(std::ffi::CStr::from_ptr(sp).to_str(), Ok("invalid argument"));
        assert_eq!(cuGetErrorName(4242, &mut sp), CUDA_ERROR_INVALID_VALUE);
        assert!(sp.is_null());
    });
}

#[test]
fn v1_abi_uses_32_bit_pointers() {
    in_child("v1_abi_uses_32_bit_pointers", &[("FAKECUDA_CTX_MIB", "0")], || unsafe {
        setup(0);
        let mut p: c_uint = 0;
        assert_eq!(cuMemAlloc(&mut p, 3 * MIB as c_uint), 0);
        assert!(p != 0 && (p as u64) >= 0x1000_0000 && (p as u64) < 0x2000_0000, "device 0's 32-bit window: {p:#x}");
        assert_eq!(used(), 4 * MIB);
        let (mut base, mut size) = (0 as c_uint, 0 as c_uint);
        assert_eq!(cuMemGetAddressRange(&mut base, &mut size, p + 100), 0);
        assert_eq!((base, size as usize), (p, 3 * MIB));
        let buf = [1u8; 64];
        assert_eq!(cuMemcpyHtoD(p, buf.as_ptr().cast(), 64), 0);
        assert_eq!(cuMemFree_v2(p as u64), 0, "v1 pointers are ordinary pointers for the v2 ABI");
        assert_eq!(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(used(), 0);
    });
}

#[test]
fn pointer_queries_and_copies() {
    in_child("pointer_queries_and_copies", &[("FAKECUDA_CTX_MIB", "0")], || unsafe {
        let ctx = setup(0);
        let p = alloc(5 * MIB);
        let (mut base, mut size) = (0u64, 0usize);
        assert_eq!(cuMemGetAddressRange_v2(&mut base, &mut size, p + 4 * MIB as u64), 0);
        assert_eq!((base, size), (p, 5 * MIB));
        assert_eq!(cuMemGetAddressRange_v2(null_mut(), &mut size, p), 0, "out-pointers are optional");
        assert_eq!(cuMemGetAddressRange_v2(&mut base, &mut size, p + 5 * MIB as u64), CUDA_ERROR_NOT_FOUND);
        let mut v = 0u64;
        let attr = |a: c_int, ptr: u64, out: *mut u64| cuPointerGetAttribute(out.cast(), a, ptr);
        assert_eq!(attr(11, p + 10, &mut v), 0);
        assert_eq!(v, p, "RANGE_START_ADDR");
        assert_eq!(attr(12, p + 10, &mut v), 0);
        assert_eq!(v as usize, 5 * MIB, "RANGE_SIZE");
        v = 0;
        assert_eq!(attr(2, p, &mut v), 0);
        assert_eq!(v as u32, CU_MEMORYTYPE_DEVICE);
        assert_eq!(attr(9, p, &mut v), 0);
        assert_eq!(v as u32, 0, "DEVICE_ORDINAL");
        assert_eq!(attr(1, p, &mut v), 0);
        assert_eq!(v, ctx as u64, "CONTEXT");
        assert_eq!(attr(2, 0x1234, &mut v), CUDA_ERROR_INVALID_VALUE, "unknown pointer");
        // Copies: device ranges must lie inside one live allocation.
        let mut host = vec![7u8; 4096];
        assert_eq!(cuMemcpyHtoD_v2(p, host.as_ptr().cast(), 4096), 0);
        assert_eq!(cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), p, 4096), 0);
        assert!(host.iter().all(|b| *b == 0), "device data reads back as zeros");
        assert_eq!(cuMemcpyHtoD_v2(p + 5 * MIB as u64 - 10, host.as_ptr().cast(), 11), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemcpyDtoD_v2(p, 0x7000_dead_0000, 1), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemcpyHtoD_v2(p, std::ptr::null(), 1), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemsetD8_v2(p, 1, 5 * MIB), 0);
        assert_eq!(cuMemsetD8_v2(p, 1, 5 * MIB + 1), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemsetD8Async(p, 1, 16, CU_STREAM_PER_THREAD as CUstream), 0);
        // Managed memory is real memory.
        let mut m = 0u64;
        assert_eq!(cuMemAllocManaged(&mut m, 4096, CU_MEM_ATTACH_GLOBAL), 0);
        assert_eq!(used(), 8 * MIB, "managed memory is charged to the device");
        let src = [42u8; 16];
        assert_eq!(cuMemcpyHtoD_v2(m, src.as_ptr().cast(), 16), 0);
        assert_eq!(*(m as *const u8), 42);
        assert_eq!(cuMemsetD8_v2(m + 1, 9, 1), 0);
        *(m as *mut u8).add(2) = 5;
        let mut back = [0u8; 3];
        assert_eq!(cuMemcpy(back.as_mut_ptr() as u64, m, 3), 0);
        assert_eq!(back, [42, 9, 5]);
        assert_eq!(attr(8, m, &mut v), 0);
        assert_eq!(v as u32, 1, "IS_MANAGED");
        assert_eq!(cuMemFree_v2(m), 0);
        assert_eq!(cuMemFree_v2(p), 0);
        assert_eq!(used(), 0);
    });
}

#[test]
fn host_memory() {
    in_child("host_memory", &[("FAKECUDA_CTX_MIB", "0")], || unsafe {
        setup(0);
        let mut h: *mut c_void = null_mut();
        assert_eq!(cuMemHostAlloc(&mut h, 10000, 0x2), 0);
        std::ptr::write_bytes(h.cast::<u8>(), 3, 10000);
        assert_eq!(used(), 0, "pinned host memory is not device memory");
        let mut v = 0u64;
        assert_eq!(cuPointerGetAttribute((&mut v as *mut u64).cast(), 2, h as u64), 0);
        assert_eq!(v as u32, CU_MEMORYTYPE_HOST);
        assert_eq!(cuMemHostAlloc(&mut h, 16, 0x80), CUDA_ERROR_INVALID_VALUE, "unknown flag");
        assert_eq!(cuMemFreeHost(h), 0);
        assert_eq!(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemAllocHost_v2(&mut h, 64), 0);
        assert_eq!(cuMemFreeHost(h), 0);
        let mut buf = vec![0u8; 1 << 16];
        let bp = buf.as_mut_ptr().cast::<c_void>();
        assert_eq!(cuMemHostRegister_v2(bp, buf.len(), 0), 0);
        assert_eq!(
            cuMemHostRegister_v2(bp.cast::<u8>().add(100).cast(), 10, 0),
            CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
        );
        assert_eq!(cuMemFreeHost(bp), CUDA_ERROR_INVALID_VALUE, "registered memory is not freed by cuMemFreeHost");
        assert_eq!(cuMemHostUnregister(bp), 0);
        assert_eq!(cuMemHostUnregister(bp), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    });
}

#[test]
fn hidden_costs_are_released_with_their_objects() {
    let env = [
        ("FAKECUDA_CTX_MIB", "100"),
        ("FAKECUDA_PEER_MIB", "10"),
        ("FAKECUDA_GRAPH_MIB", "20"),
        ("FAKECUDA_MODULE_MIB", "30"),
        ("FAKECUDA_DEVICES", "2"),
    ];
    in_child("hidden_costs_are_released_with_their_objects", &env, || unsafe {
        assert_eq!(cuInit(0), 0);
        let mut c1 = null_mut();
        assert_eq!(cuCtxCreate_v2(&mut c1, 0, 1), 0);
        let c0 = setup(0);
        assert_eq!(used(), 100 * MIB);
        assert_eq!(cuCtxEnablePeerAccess(c1, 0), 0);
        assert_eq!(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
        assert_eq!(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_INVALID_DEVICE, "same device");
        assert_eq!(used(), 110 * MIB);
        let mut g = null_mut();
        assert_eq!(cuGraphCreate(&mut g, 0), 0);
        let mut e = null_mut();
        assert_eq!(cuGraphInstantiateWithFlags(&mut e, g, 0), 0);
        assert_eq!(used(), 130 * MIB);
        let image = [0u8; 16];
        let mut m = null_mut();
        assert_eq!(cuModuleLoadData(&mut m, image.as_ptr().cast()), 0);
        assert_eq!(used(), 160 * MIB);
        assert_eq!(cuModuleUnload(m), 0);
        assert_eq!(cuModuleUnload(m), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuGraphExecDestroy(e), 0);
        assert_eq!(cuGraphDestroy(g), 0);
        assert_eq!(cuCtxDisablePeerAccess(c1), 0);
        assert_eq!(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
        assert_eq!(used(), 100 * MIB);
        // Destroying a context frees what it owns (memory, peer mappings, its first-context cost).
        assert_eq!(cuCtxSetCurrent(c1), 0);
        alloc(10 * MIB);
        assert_eq!(cuCtxEnablePeerAccess(c0, 0), 0);
        assert_eq!(used(), 120 * MIB, "device 1: its context, the allocation and the peer mapping");
        assert_eq!(cuCtxSetCurrent(c0), 0);
        assert_eq!(used(), 100 * MIB, "the peer mapping is paid by the mapping context's device");
        assert_eq!(cuCtxDestroy_v2(c1), 0);
        let mut c1b = null_mut();
        assert_eq!(cuCtxCreate_v2(&mut c1b, 0, 1), 0);
        assert_eq!(used(), 100 * MIB, "device 1 holds only the new context's cost again");
        assert_eq!(cuCtxDestroy_v2(c1b), 0);
        assert_eq!(cuCtxGetCurrent(&mut c1b), 0);
        assert_eq!(c1b, c0, "the destroyed context was popped, revealing the previous one");
        assert_eq!(cuCtxDestroy_v2(c0), CUDA_ERROR_INVALID_CONTEXT, "primary contexts are released, not destroyed");
    });
}

#[test]
fn stream_ordered_and_capture() {
    in_child("stream_ordered_and_capture", &[("FAKECUDA_CTX_MIB", "0"), ("FAKECUDA_GRAPH_MIB", "16")], || unsafe {
        setup(0);
        let mut s = null_mut();
        assert_eq!(cuStreamCreate(&mut s, CU_STREAM_NON_BLOCKING), 0);
        let mut p = 0;
        assert_eq!(cuMemAllocAsync(&mut p, MIB, s), 0);
        let mut pool = null_mut();
        assert_eq!(cuDeviceGetDefaultMemPool(&mut pool, 0), 0);
        let mut v = 0u64;
        assert_eq!(cuPointerGetAttribute((&mut v as *mut u64).cast(), 17, p), 0);
        assert_eq!(v, pool as u64, "MEMPOOL_HANDLE");
        let mut q = 0;
        assert_eq!(cuMemAllocFromPoolAsync_ptsz(&mut q, MIB, pool, null_mut()), 0);
        assert_eq!(cuMemAllocFromPoolAsync(&mut q, MIB, 0x1234 as CUmemoryPool, s), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(used(), 4 * MIB);
        assert_eq!(cuMemFreeAsync(p, s), 0);
        assert_eq!(cuMemFreeAsync_ptsz(q, null_mut()), 0);
        assert_eq!(used(), 0);
        // The legacy stream cannot be captured; the per-thread one can.
        assert_eq!(cuStreamBeginCapture_v2(null_mut(), 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        assert_eq!(cuStreamBeginCapture_v2(CU_STREAM_LEGACY as CUstream, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        assert_eq!(cuStreamBeginCapture_v2_ptsz(null_mut(), CU_STREAM_CAPTURE_MODE_RELAXED), 0);
        let mut status = -1;
        assert_eq!(cuStreamIsCapturing(CU_STREAM_PER_THREAD as CUstream, &mut status), 0);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
        let mut g = null_mut();
        assert_eq!(cuStreamEndCapture_ptsz(null_mut(), &mut g), 0);
        assert!(!g.is_null());
        // A synchronous allocation during a global capture is refused and invalidates it.
        assert_eq!(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), 0);
        assert_eq!(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
        assert_eq!(cuMemAllocAsync(&mut p, MIB, s), 0, "stream-ordered allocation is captured");
        let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        assert_eq!(cuThreadExchangeStreamCaptureMode(&mut mode), 0);
        assert_eq!(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
        assert_eq!(cuMemAlloc_v2(&mut q, MIB), 0, "relaxed mode may allocate");
        assert_eq!(cuMemFree_v2(q), 0);
        assert_eq!(cuThreadExchangeStreamCaptureMode(&mut mode), 0);
        assert_eq!(cuMemAlloc_v2(&mut q, MIB), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        assert_eq!(cuStreamIsCapturing(s, &mut status), 0);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        assert_eq!(cuStreamEndCapture(s, &mut g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert!(g.is_null());
        // A clean capture instantiates and launches; the exec costs FAKECUDA_GRAPH_MIB.
        assert_eq!(cuStreamBeginCapture(s), 0);
        assert_eq!(cuStreamEndCapture(s, &mut g), 0);
        let before = used();
        let mut e = null_mut();
        let mut err_node = 1 as CUgraphNode;
        let mut log = [1 as std::os::raw::c_char; 4];
        assert_eq!(cuGraphInstantiate_v2(&mut e, g, &mut err_node, log.as_mut_ptr(), 4), 0);
        assert!(err_node.is_null() && log[0] == 0);
        assert_eq!(used(), before + 16 * MIB);
        assert_eq!(cuGraphLaunch(e, s), 0);
        assert_eq!(cuGraphLaunch_ptsz(e, null_mut()), 0);
        assert_eq!(cuGraphExecDestroy(e), 0);
        assert_eq!(cuGraphLaunch(e, s), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(used(), before);
        assert_eq!(cuStreamDestroy_v2(s), 0);
        assert_eq!(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
    });
}

#[test]
fn threads_alloc_free_back_to_baseline() {
    in_child(
        "threads_alloc_free_back_to_baseline",
        &[("FAKECUDA_CTX_MIB", "0"), ("FAKECUDA_TOTAL_MIB", "65536")],
        || unsafe {
            let ctx = setup(0);
            let ctx = ctx as usize;
            let threads: Vec<_> = (0..8)
                .map(|t| {
                    std::thread::spawn(move || {
                        assert_eq!(cuCtxSetCurrent(ctx as CUcontext), 0);
                        let mut live: Vec<(u64, usize)> = Vec::new();
                        for i in 0..300usize {
                            let size = 1 + (i * 7919 + t * 104729) % (5 * MIB);
                            let mut p = 0;
                            assert_eq!(cuMemAlloc_v2(&mut p, size), 0);
                            live.push((p, size));
                            if i % 3 == 2 {
                                let (q, _) = live.swap_remove(i % live.len());
                                assert_eq!(cuMemFree_v2(q), 0);
                            }
                        }
                        live
                    })
                })
                .collect();
            let mut all: Vec<(u64, usize)> = threads.into_iter().flat_map(|h| h.join().expect("thread")).collect();
            all.sort();
            for w in all.windows(2) {
                assert!(w[0].0 + w[0].1 as u64 <= w[1].0, "live allocations overlap: {:x?}", w);
            }
            // Each large one rounded up to 2 MiB; the small ones share pages (each page once).
            let pages: std::collections::BTreeSet<u64> =
                all.iter().filter(|(_, s)| *s < 2 * MIB).map(|(p, _)| p & !(2 * MIB as u64 - 1)).collect();
            let large: usize = all.iter().filter(|(_, s)| *s >= 2 * MIB).map(|(_, s)| s.div_ceil(2 * MIB) * 2 * MIB).sum();
            let charged = large + pages.len() * 2 * MIB;
            assert_eq!(used(), charged);
            for (p, _) in all {
                assert_eq!(cuMemFree_v2(p), 0);
            }
            assert_eq!(used(), 0);
        },
    );
}

#[test]
fn modules_and_libraries() {
    in_child("modules_and_libraries", &[("FAKECUDA_CTX_MIB", "0"), ("FAKECUDA_MODULE_MIB", "8")], || unsafe {
        assert_eq!(cuInit(0), 0);
        let image = [0u8; 16];
        // Libraries are context-independent and load lazily: nothing is charged here
        // (tests/frameworks.rs: a kernel's first use in a context charges it there).
        let mut lib = null_mut();
        assert_eq!(
            cuLibraryLoadData(&mut lib, image.as_ptr().cast(), null_mut(), null_mut(), 0, null_mut(), null_mut(), 0),
            0
        );
        let mut m = null_mut();
        assert_eq!(cuModuleLoadData(&mut m, image.as_ptr().cast()), CUDA_ERROR_INVALID_CONTEXT);
        setup(0);
        assert_eq!(used(), 0);
        let exe = std::ffi::CString::new(std::env::current_exe().unwrap().to_str().unwrap()).unwrap();
        let missing = std::ffi::CString::new("/nonexistent/kernel.cubin").unwrap();
        assert_eq!(cuModuleLoad(&mut m, missing.as_ptr()), CUDA_ERROR_FILE_NOT_FOUND);
        assert_eq!(cuModuleLoad(&mut m, std::ptr::null()), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuModuleLoad(&mut m, exe.as_ptr()), 0);
        let mut m2 = null_mut();
        assert_eq!(
            cuModuleLoadDataEx(&mut m2, image.as_ptr().cast(), 2, null_mut(), null_mut()),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuModuleLoadDataEx(&mut m2, image.as_ptr().cast(), 0, null_mut(), null_mut()), 0);
        let mut lib2 = null_mut();
        assert_eq!(
            cuLibraryLoadFromFile(&mut lib2, exe.as_ptr(), null_mut(), null_mut(), 0, null_mut(), null_mut(), 0),
            0
        );
        assert_eq!(used(), 16 * MIB, "the two modules; the libraries are not loaded into a context yet");
        assert_eq!(cuLibraryUnload(m as CUlibrary), CUDA_ERROR_INVALID_VALUE, "a module is not a library");
        for r in [cuModuleUnload(m), cuModuleUnload(m2), cuLibraryUnload(lib), cuLibraryUnload(lib2)] {
            assert_eq!(r, 0);
        }
        assert_eq!(used(), 0);
    });
}

#[test]
fn machine_without_devices() {
    in_child("machine_without_devices", &[("FAKECUDA_DEVICES", "0")], || unsafe {
        assert_eq!(cuInit(0), CUDA_ERROR_NO_DEVICE);
        let mut n = -1;
        assert_eq!(cuDeviceGetCount(&mut n), CUDA_ERROR_NOT_INITIALIZED);
        let mut v = 0;
        assert_eq!(cuDriverGetVersion(&mut v), 0, "the driver itself is there");
        assert_eq!(v, 12090);
    });
}
