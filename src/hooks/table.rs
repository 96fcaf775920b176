//! THE table of hooked entry points. Everything else (exported symbols, the dlsym path,
//! the cuGetProcAddress path, the per-slot wrappers) is generated from it.
//!
//! A row: `exported_name: Kind(base, version, per_thread) fn(args) => implementation;`
//! - `exported_name` is the symbol as exported by libcudart/libcuda (`cuMemAlloc_v2`).
//! - Driver rows carry the base name and the cudaVersion in which this ABI variant was
//!   introduced, exactly as cuda.h's `PFN_<base>_v<version>[_ptsz|_ptds]` typedefs say;
//!   `per_thread` marks the `_ptsz`/`_ptds` variants. Runtime rows use `("", 0, false)`.
//! - The implementation receives the row's `Sym`, the real function pointer, then the
//!   arguments (implementations are shared by variants with one ABI, e.g. `_ptsz`).
//!
//! Each row gets `NSLOTS` wrapper instances (const-generic monomorphisations), each with
//! its own slot for a real pointer: slot 0 belongs to the exported symbol (resolved with
//! `RTLD_NEXT`), slots 1.. are claimed by real pointers handed out through `dlsym` on a
//! handle or by the driver's resolver. Two libraries defining the same symbol (a ctypes-
//! loaded libcudart next to the linked one, an exported and an internal driver entry) get
//! distinct wrappers, each calling its own real function.

use super::types::*;
use libc::{c_char, c_int, c_uint, c_ulonglong, c_void};

/// Wrapper instances (and real-pointer slots) per hooked symbol.
pub const NSLOTS: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Runtime,
    Driver,
}

/// One row of the table.
#[derive(Debug)]
pub struct Entry {
    pub sym: Sym,
    /// Exported symbol name.
    pub name: &'static str,
    /// NUL-terminated copy of `name`, for C calls.
    pub cname: &'static [u8],
    pub kind: Kind,
    /// Driver: the base name `cuGetProcAddress` is asked for.
    pub base: &'static str,
    /// Driver: cudaVersion in which this variant was introduced.
    pub version: u32,
    /// Driver: the per-thread default stream variant (`_ptsz`/`_ptds`).
    pub per_thread: bool,
}

macro_rules! hook_table {
    ( $( $name:ident : $kind:ident ($base:literal, $ver:literal, $pt:literal)
         fn ( $( $arg:ident : $ty:ty ),* $(,)? ) => $imp:path ; )* ) => {
        /// Index of a hooked symbol in [`TABLE`].
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum Sym { $( $name ),* }

        pub const NSYMS: usize = [ $( Sym::$name ),* ].len();

        pub static TABLE: [Entry; NSYMS] = [ $( Entry {
            sym: Sym::$name,
            name: stringify!($name),
            cname: concat!(stringify!($name), "\0").as_bytes(),
            kind: Kind::$kind,
            base: $base,
            version: $ver,
            per_thread: $pt,
        } ),* ];

        $(
            #[allow(non_snake_case)]
            pub mod $name {
                #[allow(unused_imports)]
                use super::*;
                /// The real function's type.
                pub type Real = unsafe extern "C" fn( $( $ty ),* ) -> c_int;
                /// Wrapper instance for slot `S`.
                pub unsafe extern "C" fn wrap<const S: usize>( $( $arg : $ty ),* ) -> c_int {
                    match crate::hooks::real::get::<Real>(Sym::$name, S) {
                        Some(real) => $imp(Sym::$name, real, $( $arg ),*),
                        None => crate::hooks::real::missing(Sym::$name),
                    }
                }
            }

            /// Exported hook (preload path); forwards to the definition after us.
            #[no_mangle]
            pub unsafe extern "C" fn $name( $( $arg : $ty ),* ) -> c_int {
                $name::wrap::<0>( $( $arg ),* )
            }
        )*

        /// Address of the wrapper instance for (`sym`, `slot`).
        pub fn wrapper(sym: Sym, slot: usize) -> *mut c_void {
            match sym { $(
                Sym::$name => match slot {
                    0 => $name::wrap::<0> as *mut c_void,
                    1 => $name::wrap::<1> as *mut c_void,
                    2 => $name::wrap::<2> as *mut c_void,
                    _ => $name::wrap::<3> as *mut c_void,
                },
            )* }
        }

        /// Address of the exported hook for `sym`.
        pub fn exported(sym: Sym) -> *mut c_void {
            match sym { $( Sym::$name => $name as *mut c_void, )* }
        }
    };
}

const _: () = assert!(NSLOTS == 4, "wrapper() instantiates exactly four slots");

use crate::hooks::families::{alloc, costs, graphs, host, info, ipc, lazy, pools, vmm};
use crate::hooks::resolve;

hook_table! {
    // ---- runtime (libcudart) ------------------------------------------------------------
    cudaMalloc: Runtime("", 0, false) fn(dev_ptr: *mut VoidPtr, size: usize) => alloc::cuda_malloc;
    cudaFree: Runtime("", 0, false) fn(dev_ptr: VoidPtr) => alloc::cuda_free;
    cudaMallocAsync: Runtime("", 0, false) fn(dev_ptr: *mut VoidPtr, size: usize, stream: cudaStream_t) => alloc::cuda_malloc_async;
    cudaMallocAsync_ptsz: Runtime("", 0, false) fn(dev_ptr: *mut VoidPtr, size: usize, stream: cudaStream_t) => alloc::cuda_malloc_async;
    cudaFreeAsync: Runtime("", 0, false) fn(dev_ptr: VoidPtr, stream: cudaStream_t) => alloc::cuda_free_async;
    cudaFreeAsync_ptsz: Runtime("", 0, false) fn(dev_ptr: VoidPtr, stream: cudaStream_t) => alloc::cuda_free_async;
    cudaMallocManaged: Runtime("", 0, false) fn(dev_ptr: *mut VoidPtr, size: usize, flags: c_uint) => alloc::cuda_malloc_managed;
    cudaMallocPitch: Runtime("", 0, false) fn(dev_ptr: *mut VoidPtr, pitch: *mut usize, width: usize, height: usize) => alloc::cuda_malloc_pitch;
    cudaMallocHost: Runtime("", 0, false) fn(ptr: *mut VoidPtr, size: usize) => host::cuda_malloc_host;
    cudaHostAlloc: Runtime("", 0, false) fn(ptr: *mut VoidPtr, size: usize, flags: c_uint) => host::cuda_host_alloc;
    cudaFreeHost: Runtime("", 0, false) fn(ptr: VoidPtr) => host::free_host;
    cudaHostRegister: Runtime("", 0, false) fn(ptr: VoidPtr, size: usize, flags: c_uint) => host::host_register;
    cudaHostUnregister: Runtime("", 0, false) fn(ptr: VoidPtr) => host::host_unregister;
    cudaMemGetInfo: Runtime("", 0, false) fn(free: *mut usize, total: *mut usize) => info::mem_get_info;
    cudaIpcGetMemHandle: Runtime("", 0, false) fn(handle: *mut IpcMemHandle, dev_ptr: VoidPtr) => ipc::cuda_ipc_get_mem_handle;
    cudaIpcOpenMemHandle: Runtime("", 0, false) fn(dev_ptr: *mut VoidPtr, handle: IpcMemHandle, flags: c_uint) => ipc::cuda_ipc_open_mem_handle;
    cudaIpcCloseMemHandle: Runtime("", 0, false) fn(dev_ptr: VoidPtr) => ipc::cuda_ipc_close_mem_handle;
    cudaStreamBeginCapture: Runtime("", 0, false) fn(stream: cudaStream_t, mode: c_int) => graphs::begin_capture_mode;
    cudaStreamBeginCapture_ptsz: Runtime("", 0, false) fn(stream: cudaStream_t, mode: c_int) => graphs::begin_capture_mode;
    cudaStreamBeginCaptureToGraph: Runtime("", 0, false) fn(stream: cudaStream_t, graph: CUgraph, deps: *const CUgraphNode, dep_data: *const c_void, n_deps: usize, mode: c_int) => graphs::begin_capture_to_graph;
    cudaStreamBeginCaptureToGraph_ptsz: Runtime("", 0, false) fn(stream: cudaStream_t, graph: CUgraph, deps: *const CUgraphNode, dep_data: *const c_void, n_deps: usize, mode: c_int) => graphs::begin_capture_to_graph;
    cudaStreamEndCapture: Runtime("", 0, false) fn(stream: cudaStream_t, graph: *mut CUgraph) => graphs::end_capture;
    cudaStreamEndCapture_ptsz: Runtime("", 0, false) fn(stream: cudaStream_t, graph: *mut CUgraph) => graphs::end_capture;
    cudaGraphInstantiate: Runtime("", 0, false) fn(exec: *mut CUgraphExec, graph: CUgraph, flags: c_ulonglong) => graphs::instantiate_flags;
    cudaGraphInstantiateWithFlags: Runtime("", 0, false) fn(exec: *mut CUgraphExec, graph: CUgraph, flags: c_ulonglong) => graphs::instantiate_flags;
    cudaGraphInstantiateWithParams: Runtime("", 0, false) fn(exec: *mut CUgraphExec, graph: CUgraph, params: VoidPtr) => graphs::instantiate_params;
    cudaGraphInstantiateWithParams_ptsz: Runtime("", 0, false) fn(exec: *mut CUgraphExec, graph: CUgraph, params: VoidPtr) => graphs::instantiate_params;
    cudaGraphExecDestroy: Runtime("", 0, false) fn(exec: CUgraphExec) => graphs::exec_destroy;
    cudaDeviceEnablePeerAccess: Runtime("", 0, false) fn(peer: c_int, flags: c_uint) => costs::cuda_device_enable_peer_access;
    cudaMemcpy: Runtime("", 0, false) fn(dst: VoidPtr, src: *const c_void, count: usize, kind: c_int) => alloc::cuda_memcpy;
    cudaMemcpy_ptds: Runtime("", 0, false) fn(dst: VoidPtr, src: *const c_void, count: usize, kind: c_int) => alloc::cuda_memcpy;
    cudaMemcpyAsync: Runtime("", 0, false) fn(dst: VoidPtr, src: *const c_void, count: usize, kind: c_int, stream: cudaStream_t) => alloc::cuda_memcpy_async;
    cudaMemcpyAsync_ptsz: Runtime("", 0, false) fn(dst: VoidPtr, src: *const c_void, count: usize, kind: c_int, stream: cudaStream_t) => alloc::cuda_memcpy_async;
    cudaGetDriverEntryPoint: Runtime("", 0, false) fn(symbol: *const c_char, func: *mut VoidPtr, flags: c_ulonglong, status: *mut c_int) => resolve::cuda_get_driver_entry_point;
    cudaGetDriverEntryPointByVersion: Runtime("", 0, false) fn(symbol: *const c_char, func: *mut VoidPtr, version: c_uint, flags: c_ulonglong, status: *mut c_int) => resolve::cuda_get_driver_entry_point_by_version;
    cudaGetDriverEntryPoint_ptsz: Runtime("", 0, false) fn(symbol: *const c_char, func: *mut VoidPtr, flags: c_ulonglong, status: *mut c_int) => resolve::cuda_get_driver_entry_point;
    cudaGetDriverEntryPointByVersion_ptsz: Runtime("", 0, false) fn(symbol: *const c_char, func: *mut VoidPtr, version: c_uint, flags: c_ulonglong, status: *mut c_int) => resolve::cuda_get_driver_entry_point_by_version;

    // ---- driver (libcuda) ---------------------------------------------------------------
    cuMemAlloc_v2: Driver("cuMemAlloc", 3020, false) fn(dptr: *mut CUdeviceptr, bytes: usize) => alloc::cu_mem_alloc;
    cuMemFree_v2: Driver("cuMemFree", 3020, false) fn(dptr: CUdeviceptr) => alloc::cu_mem_free;
    cuMemGetInfo_v2: Driver("cuMemGetInfo", 3020, false) fn(free: *mut usize, total: *mut usize) => info::mem_get_info;
    cuMemAllocPitch_v2: Driver("cuMemAllocPitch", 3020, false) fn(dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, elem: c_uint) => alloc::cu_mem_alloc_pitch;
    cuMemAllocManaged: Driver("cuMemAllocManaged", 6000, false) fn(dptr: *mut CUdeviceptr, bytes: usize, flags: c_uint) => alloc::cu_mem_alloc_managed;
    cuMemAllocAsync: Driver("cuMemAllocAsync", 11020, false) fn(dptr: *mut CUdeviceptr, bytes: usize, stream: CUstream) => alloc::cu_mem_alloc_async;
    cuMemAllocAsync_ptsz: Driver("cuMemAllocAsync", 11020, true) fn(dptr: *mut CUdeviceptr, bytes: usize, stream: CUstream) => alloc::cu_mem_alloc_async;
    cuMemFreeAsync: Driver("cuMemFreeAsync", 11020, false) fn(dptr: CUdeviceptr, stream: CUstream) => alloc::cu_mem_free_async;
    cuMemFreeAsync_ptsz: Driver("cuMemFreeAsync", 11020, true) fn(dptr: CUdeviceptr, stream: CUstream) => alloc::cu_mem_free_async;
    cuMemAllocFromPoolAsync: Driver("cuMemAllocFromPoolAsync", 11020, false) fn(dptr: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool, stream: CUstream) => alloc::cu_mem_alloc_from_pool_async;
    cuMemAllocFromPoolAsync_ptsz: Driver("cuMemAllocFromPoolAsync", 11020, true) fn(dptr: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool, stream: CUstream) => alloc::cu_mem_alloc_from_pool_async;
    cuMemPoolCreate: Driver("cuMemPoolCreate", 11020, false) fn(pool: *mut CUmemoryPool, props: *const CUmemPoolPropsHead) => pools::cu_mem_pool_create;
    cuMemPoolDestroy: Driver("cuMemPoolDestroy", 11020, false) fn(pool: CUmemoryPool) => pools::cu_mem_pool_destroy;
    cuDeviceGetDefaultMemPool: Driver("cuDeviceGetDefaultMemPool", 11020, false) fn(pool: *mut CUmemoryPool, dev: CUdevice) => pools::cu_device_get_mem_pool;
    cuDeviceGetMemPool: Driver("cuDeviceGetMemPool", 11020, false) fn(pool: *mut CUmemoryPool, dev: CUdevice) => pools::cu_device_get_mem_pool;
    cuMemHostAlloc: Driver("cuMemHostAlloc", 2020, false) fn(pp: *mut VoidPtr, bytes: usize, flags: c_uint) => host::cu_mem_host_alloc;
    cuMemAllocHost_v2: Driver("cuMemAllocHost", 3020, false) fn(pp: *mut VoidPtr, bytes: usize) => host::cu_mem_alloc_host;
    cuMemFreeHost: Driver("cuMemFreeHost", 2000, false) fn(p: VoidPtr) => host::free_host;
    cuMemHostRegister_v2: Driver("cuMemHostRegister", 6050, false) fn(p: VoidPtr, bytes: usize, flags: c_uint) => host::host_register;
    cuMemHostUnregister: Driver("cuMemHostUnregister", 4000, false) fn(p: VoidPtr) => host::host_unregister;
    cuMemCreate: Driver("cuMemCreate", 10020, false) fn(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationPropHead, flags: c_ulonglong) => vmm::cu_mem_create;
    cuMemRelease: Driver("cuMemRelease", 10020, false) fn(handle: CUmemGenericAllocationHandle) => vmm::cu_mem_release;
    cuMemMap: Driver("cuMemMap", 10020, false) fn(ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: c_ulonglong) => vmm::cu_mem_map;
    cuMemUnmap: Driver("cuMemUnmap", 10020, false) fn(ptr: CUdeviceptr, size: usize) => vmm::cu_mem_unmap;
    cuMemRetainAllocationHandle: Driver("cuMemRetainAllocationHandle", 11000, false) fn(handle: *mut CUmemGenericAllocationHandle, addr: VoidPtr) => vmm::cu_mem_retain_allocation_handle;
    cuMemExportToShareableHandle: Driver("cuMemExportToShareableHandle", 10020, false) fn(shareable: VoidPtr, handle: CUmemGenericAllocationHandle, handle_type: c_int, flags: c_ulonglong) => vmm::cu_mem_export_to_shareable_handle;
    cuIpcGetMemHandle: Driver("cuIpcGetMemHandle", 4010, false) fn(handle: *mut IpcMemHandle, dptr: CUdeviceptr) => ipc::cu_ipc_get_mem_handle;
    cuIpcOpenMemHandle: Driver("cuIpcOpenMemHandle", 4010, false) fn(pdptr: *mut CUdeviceptr, handle: IpcMemHandle, flags: c_uint) => ipc::cu_ipc_open_mem_handle;
    cuIpcOpenMemHandle_v2: Driver("cuIpcOpenMemHandle", 11000, false) fn(pdptr: *mut CUdeviceptr, handle: IpcMemHandle, flags: c_uint) => ipc::cu_ipc_open_mem_handle;
    cuIpcCloseMemHandle: Driver("cuIpcCloseMemHandle", 4010, false) fn(dptr: CUdeviceptr) => ipc::cu_ipc_close_mem_handle;
    cuStreamBeginCapture: Driver("cuStreamBeginCapture", 10000, false) fn(stream: CUstream) => graphs::begin_capture;
    cuStreamBeginCapture_ptsz: Driver("cuStreamBeginCapture", 10000, true) fn(stream: CUstream) => graphs::begin_capture;
    cuStreamBeginCapture_v2: Driver("cuStreamBeginCapture", 10010, false) fn(stream: CUstream, mode: c_int) => graphs::begin_capture_mode;
    cuStreamBeginCapture_v2_ptsz: Driver("cuStreamBeginCapture", 10010, true) fn(stream: CUstream, mode: c_int) => graphs::begin_capture_mode;
    cuStreamBeginCaptureToGraph: Driver("cuStreamBeginCaptureToGraph", 12030, false) fn(stream: CUstream, graph: CUgraph, deps: *const CUgraphNode, dep_data: *const c_void, n_deps: usize, mode: c_int) => graphs::begin_capture_to_graph;
    cuStreamBeginCaptureToGraph_ptsz: Driver("cuStreamBeginCaptureToGraph", 12030, true) fn(stream: CUstream, graph: CUgraph, deps: *const CUgraphNode, dep_data: *const c_void, n_deps: usize, mode: c_int) => graphs::begin_capture_to_graph;
    cuStreamBeginRecaptureToGraph: Driver("cuStreamBeginRecaptureToGraph", 13030, false) fn(stream: CUstream, mode: c_int, graph: CUgraph, callback: VoidPtr, user_data: VoidPtr) => graphs::begin_recapture;
    cuStreamBeginRecaptureToGraph_ptsz: Driver("cuStreamBeginRecaptureToGraph", 13030, true) fn(stream: CUstream, mode: c_int, graph: CUgraph, callback: VoidPtr, user_data: VoidPtr) => graphs::begin_recapture;
    cuStreamEndCapture: Driver("cuStreamEndCapture", 10000, false) fn(stream: CUstream, graph: *mut CUgraph) => graphs::end_capture;
    cuStreamEndCapture_ptsz: Driver("cuStreamEndCapture", 10000, true) fn(stream: CUstream, graph: *mut CUgraph) => graphs::end_capture;
    cuGraphInstantiate: Driver("cuGraphInstantiate", 10000, false) fn(exec: *mut CUgraphExec, graph: CUgraph, err_node: *mut CUgraphNode, log: *mut c_char, log_size: usize) => graphs::instantiate_log;
    cuGraphInstantiate_v2: Driver("cuGraphInstantiate", 11000, false) fn(exec: *mut CUgraphExec, graph: CUgraph, err_node: *mut CUgraphNode, log: *mut c_char, log_size: usize) => graphs::instantiate_log;
    cuGraphInstantiateWithFlags: Driver("cuGraphInstantiateWithFlags", 11040, false) fn(exec: *mut CUgraphExec, graph: CUgraph, flags: c_ulonglong) => graphs::instantiate_flags;
    cuGraphInstantiateWithParams: Driver("cuGraphInstantiateWithParams", 12000, false) fn(exec: *mut CUgraphExec, graph: CUgraph, params: VoidPtr) => graphs::instantiate_params;
    cuGraphInstantiateWithParams_ptsz: Driver("cuGraphInstantiateWithParams", 12000, true) fn(exec: *mut CUgraphExec, graph: CUgraph, params: VoidPtr) => graphs::instantiate_params;
    cuGraphExecDestroy: Driver("cuGraphExecDestroy", 10000, false) fn(exec: CUgraphExec) => graphs::exec_destroy;
    cuCtxEnablePeerAccess: Driver("cuCtxEnablePeerAccess", 4000, false) fn(peer: CUcontext, flags: c_uint) => costs::cu_ctx_enable_peer_access;
    cuCtxCreate_v2: Driver("cuCtxCreate", 3020, false) fn(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) => costs::cu_ctx_create_v2;
    cuCtxCreate_v3: Driver("cuCtxCreate", 11040, false) fn(pctx: *mut CUcontext, params: VoidPtr, n_params: c_int, flags: c_uint, dev: CUdevice) => costs::cu_ctx_create_v3;
    cuCtxCreate_v4: Driver("cuCtxCreate", 12050, false) fn(pctx: *mut CUcontext, params: VoidPtr, flags: c_uint, dev: CUdevice) => costs::cu_ctx_create_v4;
    cuDevicePrimaryCtxRetain: Driver("cuDevicePrimaryCtxRetain", 7000, false) fn(pctx: *mut CUcontext, dev: CUdevice) => costs::cu_device_primary_ctx_retain;
    cuModuleLoad: Driver("cuModuleLoad", 2000, false) fn(module: *mut CUmodule, fname: *const c_char) => costs::cu_module_load;
    cuModuleLoadData: Driver("cuModuleLoadData", 2000, false) fn(module: *mut CUmodule, image: *const c_void) => costs::cu_module_load_data;
    cuModuleLoadDataEx: Driver("cuModuleLoadDataEx", 2010, false) fn(module: *mut CUmodule, image: *const c_void, n_options: c_uint, options: *mut c_int, values: *mut VoidPtr) => costs::cu_module_load_data_ex;
    cuModuleLoadFatBinary: Driver("cuModuleLoadFatBinary", 2000, false) fn(module: *mut CUmodule, fat_cubin: *const c_void) => costs::cu_module_load_data;
    cuLibraryLoadData: Driver("cuLibraryLoadData", 12000, false) fn(library: *mut CUlibrary, code: *const c_void, jit_options: *mut c_int, jit_values: *mut VoidPtr, n_jit: c_uint, lib_options: *mut c_int, lib_values: *mut VoidPtr, n_lib: c_uint) => costs::cu_library_load_data;
    // `file` is a `const char *`; declared as the data form's pointer, one implementation serves both.
    cuLibraryLoadFromFile: Driver("cuLibraryLoadFromFile", 12000, false) fn(library: *mut CUlibrary, file: *const c_void, jit_options: *mut c_int, jit_values: *mut VoidPtr, n_jit: c_uint, lib_options: *mut c_int, lib_values: *mut VoidPtr, n_lib: c_uint) => costs::cu_library_load_data;
    // Lazy module loading: where a library's kernels come from, what loads it into a context.
    cuLibraryGetKernel: Driver("cuLibraryGetKernel", 12000, false) fn(kernel: *mut VoidPtr, library: CUlibrary, name: *const c_char) => lazy::cu_library_get_kernel;
    cuLibraryUnload: Driver("cuLibraryUnload", 12000, false) fn(library: CUlibrary) => lazy::cu_library_unload;
    cuLaunchKernel: Driver("cuLaunchKernel", 4000, false) fn(f: VoidPtr, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, smem: c_uint, stream: CUstream, params: *mut VoidPtr, extra: *mut VoidPtr) => lazy::cu_launch_kernel;
    cuLaunchKernel_ptsz: Driver("cuLaunchKernel", 7000, true) fn(f: VoidPtr, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, smem: c_uint, stream: CUstream, params: *mut VoidPtr, extra: *mut VoidPtr) => lazy::cu_launch_kernel;
    cuLaunchKernelEx: Driver("cuLaunchKernelEx", 11060, false) fn(config: *const c_void, f: VoidPtr, params: *mut VoidPtr, extra: *mut VoidPtr) => lazy::cu_launch_kernel_ex;
    cuLaunchKernelEx_ptsz: Driver("cuLaunchKernelEx", 11060, true) fn(config: *const c_void, f: VoidPtr, params: *mut VoidPtr, extra: *mut VoidPtr) => lazy::cu_launch_kernel_ex;
    cuLaunchCooperativeKernel: Driver("cuLaunchCooperativeKernel", 9000, false) fn(f: VoidPtr, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, smem: c_uint, stream: CUstream, params: *mut VoidPtr) => lazy::cu_launch_cooperative_kernel;
    cuLaunchCooperativeKernel_ptsz: Driver("cuLaunchCooperativeKernel", 9000, true) fn(f: VoidPtr, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, smem: c_uint, stream: CUstream, params: *mut VoidPtr) => lazy::cu_launch_cooperative_kernel;
    cuKernelGetFunction: Driver("cuKernelGetFunction", 12000, false) fn(func: *mut VoidPtr, kernel: VoidPtr) => lazy::cu_kernel_get_function;
    // Lazy loading, cont.: what asks about a kernel loads its library as a launch does (the
    // fake driver charges these as a real driver loads the function to answer them).
    cuFuncGetAttribute: Driver("cuFuncGetAttribute", 2020, false) fn(pi: *mut c_int, attrib: c_int, f: VoidPtr) => lazy::cu_func_get_attribute;
    cuFuncSetAttribute: Driver("cuFuncSetAttribute", 9000, false) fn(f: VoidPtr, attrib: c_int, value: c_int) => lazy::cu_func_set_attribute;
    cuFuncSetCacheConfig: Driver("cuFuncSetCacheConfig", 3000, false) fn(f: VoidPtr, config: c_int) => lazy::cu_func_set_cache_config;
    cuOccupancyMaxActiveBlocksPerMultiprocessor: Driver("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050, false) fn(n: *mut c_int, f: VoidPtr, block: c_int, smem: usize) => lazy::cu_occupancy_max_active_blocks;
    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags: Driver("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000, false) fn(n: *mut c_int, f: VoidPtr, block: c_int, smem: usize, flags: c_uint) => lazy::cu_occupancy_max_active_blocks_with_flags;
    cuOccupancyAvailableDynamicSMemPerBlock: Driver("cuOccupancyAvailableDynamicSMemPerBlock", 10020, false) fn(size: *mut usize, f: VoidPtr, blocks: c_int, block: c_int) => lazy::cu_occupancy_available_dynamic_smem;
    cuOccupancyMaxActiveClusters: Driver("cuOccupancyMaxActiveClusters", 11070, false) fn(n: *mut c_int, f: VoidPtr, config: *const c_void) => lazy::cu_occupancy_max_active_clusters;
    cuLibraryGetModule: Driver("cuLibraryGetModule", 12000, false) fn(module: *mut CUmodule, library: CUlibrary) => lazy::cu_library_get_module;
    cuLibraryGetGlobal: Driver("cuLibraryGetGlobal", 12000, false) fn(dptr: *mut CUdeviceptr, bytes: *mut usize, library: CUlibrary, name: *const c_char) => lazy::cu_library_get_global;
    cuMemcpyHtoD_v2: Driver("cuMemcpyHtoD", 3020, false) fn(dst: CUdeviceptr, src: *const c_void, bytes: usize) => alloc::cu_memcpy_htod;
    cuMemcpyHtoD_v2_ptds: Driver("cuMemcpyHtoD", 7000, true) fn(dst: CUdeviceptr, src: *const c_void, bytes: usize) => alloc::cu_memcpy_htod;
    cuMemcpyHtoDAsync_v2: Driver("cuMemcpyHtoDAsync", 3020, false) fn(dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream) => alloc::cu_memcpy_htod_async;
    cuMemcpyHtoDAsync_v2_ptsz: Driver("cuMemcpyHtoDAsync", 7000, true) fn(dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream) => alloc::cu_memcpy_htod_async;
    cuGetProcAddress: Driver("cuGetProcAddress", 11030, false) fn(symbol: *const c_char, pfn: *mut VoidPtr, version: c_int, flags: cuuint64_t) => resolve::cu_get_proc_address;
    cuGetProcAddress_v2: Driver("cuGetProcAddress", 12000, false) fn(symbol: *const c_char, pfn: *mut VoidPtr, version: c_int, flags: cuuint64_t, status: *mut c_int) => resolve::cu_get_proc_address_v2;
}

/// Older ABI variants of hooked bases that culedger deliberately does NOT wrap (their
/// argument types differ: 32-bit sizes, `CUdeviceptr_v1`). When the driver's resolver
/// answers with one of these, the real pointer is handed back untouched.
pub const UNWRAPPED_VARIANTS: &[(&str, u32, bool)] = &[
    ("cuMemAlloc", 2000, false),
    ("cuMemFree", 2000, false),
    ("cuMemGetInfo", 2000, false),
    ("cuMemAllocPitch", 2000, false),
    ("cuMemAllocHost", 2000, false),
    ("cuMemHostRegister", 4000, false),
    ("cuMemcpyHtoD", 2000, false),
    ("cuMemcpyHtoDAsync", 2000, false),
    // The CUDA 2.0 context ABI (`CUdevice_v1`): no program built since CUDA 3.2 asks for it.
    ("cuCtxCreate", 2000, false),
];

/// Bases the driver resolves to ANOTHER function from some version on: cuda.h 12.0+
/// `#define`s `cuGraphInstantiate` as `cuGraphInstantiateWithFlags` (12.x also
/// `#define PFN_cuGraphInstantiate PFN_cuGraphInstantiateWithFlags_v11040`), and the driver
/// answers `cuGetProcAddress("cuGraphInstantiate", 12000+)` with that function's 3-argument
/// ABI. (base, from version, target base).
pub const ALIASES: &[(&str, u32, &str)] = &[("cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags")];

/// Look up a hooked symbol by exported name.
pub fn by_name(name: &[u8]) -> Option<&'static Entry> {
    // Every hooked name starts with "cu"; most dlsym traffic is rejected here.
    if name.len() < 3 || name[0] != b'c' || name[1] != b'u' {
        return None;
    }
    TABLE.iter().find(|e| e.name.as_bytes() == name)
}
