//! What NVIDIA's math libraries (cuBLAS 13, cuBLASLt) ask of the driver besides allocations and
//! kernels: globals of their modules, the library of a kernel, occupancy with dynamic shared
//! memory and clusters, the JIT linker, batched stream memory operations, 2D copies, prefetches
//! of managed memory and their graphs' nodes. Each checked in cuda.h's documented order.

mod common;

use common::*;
use fakecuda::api::copy::*;
use fakecuda::api::ctx::*;
use fakecuda::api::exec::*;
use fakecuda::api::mem::*;
use fakecuda::api::module::*;
use fakecuda::api::occupancy::*;
use fakecuda::api::stream::*;
use fakecuda::types::*;
use std::os::raw::{c_int, c_uint, c_void};
use std::ptr::{null, null_mut};

unsafe fn library() -> (CUlibrary, *mut c_void) {
    let image = [0u8; 16];
    let mut lib = null_mut();
    assert_eq!(
        cuLibraryLoadData(&mut lib, image.as_ptr().cast(), null_mut(), null_mut(), 0, null_mut(), null_mut(), 0),
        0
    );
    let mut k = null_mut();
    assert_eq!(cuLibraryGetKernel(&mut k, lib, c"gemm".as_ptr()), 0);
    (lib, k)
}

/// A global is a device range of the module in the context: stable per name, distinct between
/// names, a copy target, never freeable; getting one loads the library there (charged); the
/// unload forgets it. A kernel knows its library.
#[test]
fn globals_and_the_library_of_a_kernel() {
    in_child(
        "globals_and_the_library_of_a_kernel",
        &[("FAKECUDA_CTX_MIB", "0"), ("FAKECUDA_MODULE_MIB", "8")],
        || unsafe {
            assert_eq!(cuInit(0), 0);
            let (lib, k) = library();
            let (mut d, mut bytes) = (0u64, 0usize);
            assert_eq!(cuLibraryGetGlobal(&mut d, &mut bytes, lib, c"x".as_ptr()), CUDA_ERROR_INVALID_CONTEXT);
            setup(0);
            assert_eq!(cuLibraryGetGlobal(null_mut(), null_mut(), lib, c"x".as_ptr()), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuLibraryGetGlobal(&mut d, &mut bytes, lib, null()), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(
                cuLibraryGetGlobal(&mut d, &mut bytes, 0x99 as CUlibrary, c"x".as_ptr()),
                CUDA_ERROR_INVALID_HANDLE
            );
            assert_eq!(cuLibraryGetGlobal(&mut d, &mut bytes, lib, c"x".as_ptr()), 0);
            assert_eq!(used(), 8 * MIB, "the library's module is loaded in the context");
            assert!(d != 0 && bytes > 0);
            let (mut again, mut other) = (0u64, 0u64);
            assert_eq!(cuLibraryGetGlobal(&mut again, null_mut(), lib, c"x".as_ptr()), 0);
            assert_eq!(cuLibraryGetGlobal(&mut other, null_mut(), lib, c"y".as_ptr()), 0);
            assert_eq!(again, d);
            assert!(other >= d + bytes as u64, "a name of its own");
            let src = [7u8; 64];
            assert_eq!(cuMemcpyHtoD_v2(d, src.as_ptr().cast(), 64), 0, "cudaMemcpyToSymbol's copy");
            assert_eq!(cuMemFree_v2(d), CUDA_ERROR_INVALID_VALUE, "a global is not an allocation");
            let mut module = null_mut();
            assert_eq!(cuLibraryGetModule(&mut module, lib), 0);
            let mut via_module = 0u64;
            assert_eq!(cuModuleGetGlobal_v2(&mut via_module, null_mut(), module, c"x".as_ptr()), 0);
            assert_eq!(via_module, d, "the library's module in this context has the same global");
            let mut owner = null_mut();
            assert_eq!(cuKernelGetLibrary(&mut owner, k), 0);
            assert_eq!(owner, lib);
            assert_eq!(cuKernelGetLibrary(null_mut(), k), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuKernelGetLibrary(&mut owner, 0x42 as *mut c_void), CUDA_ERROR_INVALID_HANDLE);
            assert_eq!(cuLibraryUnload(lib), 0);
            assert_eq!(used(), 0);
            assert_eq!(cuMemcpyHtoD_v2(d, src.as_ptr().cast(), 64), CUDA_ERROR_INVALID_VALUE, "gone with the library");
        },
    );
}

/// The documented H100 figures: one block gets the whole opt-in 227 KiB; two split the SM's
/// 228 KiB less 1 KiB each; blocks that exceed the SM's threads get nothing. Clusters: the
/// SMs' blocks grouped by the configured cluster size; none configured, or more than 8, is
/// CUDA_ERROR_INVALID_CLUSTER_SIZE.
#[test]
fn occupancy_with_dynamic_shared_memory_and_clusters() {
    in_child("occupancy_with_dynamic_shared_memory_and_clusters", &[], || unsafe {
        assert_eq!(cuInit(0), 0);
        let (_, k) = library();
        let mut smem = 0usize;
        assert_eq!(cuOccupancyAvailableDynamicSMemPerBlock(&mut smem, k, 1, 128), CUDA_ERROR_INVALID_CONTEXT);
        setup(0);
        assert_eq!((cuOccupancyAvailableDynamicSMemPerBlock(&mut smem, k, 1, 128), smem), (0, 232448));
        assert_eq!((cuOccupancyAvailableDynamicSMemPerBlock(&mut smem, k, 2, 256), smem), (0, 233472 / 2 - 1024));
        assert_eq!((cuOccupancyAvailableDynamicSMemPerBlock(&mut smem, k, 3, 1024), smem), (0, 0));
        assert_eq!(cuOccupancyAvailableDynamicSMemPerBlock(&mut smem, k, 0, 128), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuOccupancyAvailableDynamicSMemPerBlock(&mut smem, null_mut(), 1, 128), CUDA_ERROR_INVALID_HANDLE);

        #[repr(C)]
        struct Attr {
            id: c_int,
            pad: [u8; 4],
            value: [c_uint; 16],
        }
        let mut cluster = Attr { id: 4, pad: [0; 4], value: [0; 16] };
        cluster.value[..3].copy_from_slice(&[2, 1, 1]);
        let mut config = CUlaunchConfig {
            dims: [264, 1, 1, 256, 1, 1],
            shared_mem_bytes: 0,
            h_stream: null_mut(),
            attrs: (&mut cluster as *mut Attr).cast(),
            num_attrs: 1,
        };
        let mut n = 0;
        assert_eq!((cuOccupancyMaxActiveClusters(&mut n, k, &config), n), (0, 132 * 8 / 2), "8 blocks of 256 per SM");
        config.shared_mem_bytes = 100 << 10;
        assert_eq!(
            cuOccupancyMaxActiveClusters(&mut n, k, &config),
            CUDA_ERROR_INVALID_VALUE,
            "over the default 48 KiB"
        );
        assert_eq!(cuKernelSetAttribute(8, 100 << 10, k, 0), 0);
        assert_eq!(
            (cuOccupancyMaxActiveClusters(&mut n, k, &config), n),
            (0, 132 * 2 / 2),
            "2 blocks by shared memory"
        );
        cluster.value[..3].copy_from_slice(&[16, 1, 1]);
        assert_eq!(cuOccupancyMaxActiveClusters(&mut n, k, &config), CUDA_ERROR_INVALID_CLUSTER_SIZE, "non-portable");
        // What cuBLASLt does: the opt-in shared memory and non-portable clusters, then sizes to 16.
        assert_eq!(cuKernelSetAttribute(14, 1, k, 0), 0);
        assert_eq!(cuKernelSetAttribute(8, 232448, k, 0), 0);
        assert_eq!(cuKernelSetAttribute(8, 232449, k, 0), CUDA_ERROR_INVALID_VALUE, "over the opt-in limit");
        assert_eq!(cuKernelSetAttribute(0, 512, k, 0), CUDA_ERROR_INVALID_VALUE, "read-only");
        let mut v = 0;
        assert_eq!((cuKernelGetAttribute(&mut v, 8, k, 0), v), (0, 232448));
        assert_eq!((cuKernelGetAttribute(&mut v, 8, k, 1), v), (0, 49152), "per device");
        config.dims[3] = 128;
        config.shared_mem_bytes = 232448;
        assert_eq!((cuOccupancyMaxActiveClusters(&mut n, k, &config), n), (0, 8), "one cluster of 16 per GPC");
        cluster.value[..3].copy_from_slice(&[2, 1, 1]);
        assert_eq!((cuOccupancyMaxActiveClusters(&mut n, k, &config), n), (0, 66), "an H100's 66 pairs");
        cluster.value[..3].copy_from_slice(&[17, 1, 1]);
        assert_eq!(cuOccupancyMaxActiveClusters(&mut n, k, &config), CUDA_ERROR_INVALID_CLUSTER_SIZE);
        config.num_attrs = 0;
        assert_eq!(cuOccupancyMaxActiveClusters(&mut n, k, &config), CUDA_ERROR_INVALID_CLUSTER_SIZE);
        assert_eq!(cuOccupancyMaxActiveClusters(&mut n, k, null()), CUDA_ERROR_INVALID_VALUE);
    });
}

/// The linker hands back its inputs as the image (owned by the link until destroyed), which
/// the fake's module loads accept.
#[test]
fn jit_link() {
    in_child("jit_link", &[], || unsafe {
        assert_eq!(cuInit(0), 0);
        let mut link = null_mut();
        assert_eq!(cuLinkCreate_v2(0, null_mut(), null_mut(), &mut link), CUDA_ERROR_INVALID_CONTEXT);
        setup(0);
        assert_eq!(cuLinkCreate_v2(0, null_mut(), null_mut(), null_mut()), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuLinkCreate_v2(1, null_mut(), null_mut(), &mut link), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuLinkCreate_v2(0, null_mut(), null_mut(), &mut link), 0);
        let (a, b) = (*b"cubin-a", *b"ptx-b\0");
        let add = |data: &[u8], kind| {
            cuLinkAddData_v2(link, kind, data.as_ptr() as *mut c_void, data.len(), null(), 0, null_mut(), null_mut())
        };
        assert_eq!(add(&a, 0), 0);
        assert_eq!(add(&b, 1), 0);
        assert_eq!(add(&b, 9), CUDA_ERROR_INVALID_VALUE, "no such input type");
        assert_eq!(add(&[], 0), CUDA_ERROR_INVALID_VALUE);
        let (mut image, mut size) = (null_mut(), 0usize);
        assert_eq!(cuLinkComplete(link, &mut image, &mut size), 0);
        assert_eq!(std::slice::from_raw_parts(image.cast::<u8>(), size), b"cubin-aptx-b\0");
        let mut module = null_mut();
        assert_eq!(cuModuleLoadData(&mut module, image), 0);
        assert_eq!(cuLinkDestroy(link), 0);
        assert_eq!(cuLinkDestroy(link), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuLinkComplete(link, &mut image, &mut size), CUDA_ERROR_INVALID_HANDLE);
    });
}

/// Batched stream memory operations: each wait/write checked like its single form; a flush and
/// a barrier need nothing; flags must be 0 and fewer than 256 operations.
#[test]
fn stream_batch_memory_operations() {
    in_child("stream_batch_memory_operations", &[], || unsafe {
        setup(0);
        let flag = alloc(MIB);
        let ops: [[u64; 6]; 4] =
            [[2, flag, 1, 0, 0, 0], [1, flag, 1, 0, 0, 0], [5, flag + 8, 1, 0, 0, 0], [6, 0, 0, 0, 0, 0]];
        assert_eq!(cuStreamBatchMemOp_v2(null_mut(), 4, ops.as_ptr(), 0), 0);
        assert_eq!(cuStreamBatchMemOp(null_mut(), 4, ops.as_ptr(), 0), 0);
        assert_eq!(cuStreamBatchMemOp_v2(null_mut(), 4, ops.as_ptr(), 1), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuStreamBatchMemOp_v2(null_mut(), 256, ops.as_ptr(), 0), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuStreamBatchMemOp_v2(null_mut(), 1, null(), 0), CUDA_ERROR_INVALID_VALUE);
        let outside = [[2u64, flag + MIB as u64, 1, 0, 0, 0]];
        assert_eq!(cuStreamBatchMemOp_v2(null_mut(), 1, outside.as_ptr(), 0), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuStreamBatchMemOp_v2(0x5 as CUstream, 1, ops.as_ptr(), 0), CUDA_ERROR_INVALID_HANDLE);
    });
}

/// A 2D copy moves real bytes between host rows and zero-fills host rows from fake device
/// memory; every row must fit its allocation before anything moves.
#[test]
fn copies_in_two_dimensions() {
    in_child("copies_in_two_dimensions", &[], || unsafe {
        setup(0);
        let dev = alloc(MIB);
        let src: Vec<u8> = (0..64u8).collect();
        let mut dst = vec![0xffu8; 64];
        let mut c = Memcpy2D {
            src_x: 2,
            src_y: 1,
            src_type: CU_MEMORYTYPE_HOST,
            src_host: src.as_ptr().cast(),
            src_device: 0,
            src_array: null_mut(),
            src_pitch: 16,
            dst_x: 0,
            dst_y: 0,
            dst_type: CU_MEMORYTYPE_HOST,
            dst_host: dst.as_mut_ptr().cast(),
            dst_device: 0,
            dst_array: null_mut(),
            dst_pitch: 8,
            width: 4,
            height: 2,
        };
        assert_eq!(cuMemcpy2DAsync_v2(&c, null_mut()), 0);
        assert_eq!(&dst[..12], &[18, 19, 20, 21, 0xff, 0xff, 0xff, 0xff, 34, 35, 36, 37]);
        c.src_type = CU_MEMORYTYPE_DEVICE;
        c.src_device = dev;
        assert_eq!(cuMemcpy2DAsync_v2(&c, null_mut()), 0);
        assert_eq!(&dst[..12], &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], "fake device memory reads as zeros");
        c.src_y = MIB / 16 - 1;
        dst.fill(0xee);
        assert_eq!(
            cuMemcpy2DAsync_v2(&c, null_mut()),
            CUDA_ERROR_INVALID_VALUE,
            "the second row leaves the allocation"
        );
        assert!(dst.iter().all(|b| *b == 0xee), "nothing moved");
        c.src_y = 0;
        c.dst_pitch = 2;
        assert_eq!(cuMemcpy2DAsync_v2(&c, null_mut()), CUDA_ERROR_INVALID_VALUE, "pitch under the width");
        c.dst_pitch = 8;
        c.src_type = CU_MEMORYTYPE_ARRAY;
        assert_eq!(cuMemcpy2DAsync_v2(&c, null_mut()), CUDA_ERROR_INVALID_HANDLE, "no arrays on the fake");
        assert_eq!(cuMemcpy2DAsync_v2(null(), null_mut()), CUDA_ERROR_INVALID_VALUE);
    });
}

/// Prefetching needs managed memory and a real destination (a device or the host).
#[test]
fn prefetch_managed_memory() {
    in_child("prefetch_managed_memory", &[], || unsafe {
        setup(0);
        let mut managed = 0;
        assert_eq!(cuMemAllocManaged(&mut managed, MIB, 1), 0);
        let plain = alloc(MIB);
        assert_eq!(cuMemPrefetchAsync(managed, MIB, 0, null_mut()), 0);
        assert_eq!(cuMemPrefetchAsync(managed, MIB, -1, null_mut()), 0, "CU_DEVICE_CPU");
        assert_eq!(cuMemPrefetchAsync(managed, MIB, 9, null_mut()), CUDA_ERROR_INVALID_DEVICE);
        assert_eq!(cuMemPrefetchAsync(plain, MIB, 0, null_mut()), CUDA_ERROR_INVALID_VALUE, "not managed");
        assert_eq!(cuMemPrefetchAsync(managed, 2 * MIB, 0, null_mut()), CUDA_ERROR_INVALID_VALUE);
        let device = CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: 0 };
        let host = CUmemLocation { type_: CU_MEM_LOCATION_TYPE_HOST, id: 0 };
        assert_eq!(cuMemPrefetchAsync_v2(managed, MIB, device, 0, null_mut()), 0);
        assert_eq!(cuMemPrefetchAsync_v2(managed, MIB, host, 0, null_mut()), 0);
        assert_eq!(cuMemPrefetchAsync_v2(managed, MIB, host, 1, null_mut()), CUDA_ERROR_INVALID_VALUE);
    });
}

/// The fake's graphs have no nodes: every node query is CUDA_ERROR_INVALID_VALUE.
#[test]
fn graph_nodes_are_unknown() {
    in_child("graph_nodes_are_unknown", &[], || unsafe {
        assert_eq!(cuGraphNodeGetType(0x1 as CUgraphNode, &mut 0), CUDA_ERROR_NOT_INITIALIZED);
        setup(0);
        assert_eq!(cuGraphNodeGetType(0x1 as CUgraphNode, &mut 0), CUDA_ERROR_INVALID_VALUE);
        let mut params = [0u8; 128];
        assert_eq!(
            cuGraphKernelNodeGetParams_v2(0x1 as CUgraphNode, params.as_mut_ptr().cast()),
            CUDA_ERROR_INVALID_VALUE
        );
    });
}
