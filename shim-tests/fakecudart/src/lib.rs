//! Simulated CUDA runtime (`libcudart.so.12`, CUDA 12.9 ABI).
//!
//! A thin, strict runtime over whatever `libcuda.so.1` the dynamic linker finds (in the simulated
//! stack, the fake driver of `shim-tests/fakecuda`). It never links the driver: it reaches it the way
//! real libcudart 12.9 does, see [`driver`]. Every entry point has the exact `cuda_runtime_api.h`
//! signature, and the stream-ordered ones also exist under the `_ptsz` / `_ptds` names the header maps
//! them to when `CUDA_API_PER_THREAD_DEFAULT_STREAM` is defined.
//!
//! Built twice: as the cdylib `libcudart.so.12` (dynamic runtime) and as an rlib (the "static runtime"
//! embedded in NCCL or nvcc-built extensions): a Rust program calls these functions directly, exports
//! nothing, and the driver is still reached through `dlsym` + `cuGetProcAddress`.
//!
//! Runtime semantics kept from the real one:
//! - a thread-local current device (default 0); the device's primary context is retained once per
//!   process and made current on a thread at the first call that needs it (`cudaSetDevice` does it
//!   eagerly, as in CUDA 12);
//! - a thread-local last error: every failing call records its code, `cudaGetLastError` returns and
//!   clears it, `cudaPeekAtLastError` only returns it;
//! - driver errors map to the runtime codes of the same value (OOM -> `cudaErrorMemoryAllocation`);
//!   a missing driver gives `cudaErrorInsufficientDriver`, never a crash; no panic crosses the ABI.

#![allow(non_snake_case, non_upper_case_globals)]

pub mod driver;
pub mod errors;
pub mod types;

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::panic::AssertUnwindSafe;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};

use driver::{check, initialized, loaded, need, Driver, Streamed, CUDART_VERSION};
pub use errors::*;
pub use types::*;

/// Which default stream a NULL stream handle means for the entry point that was called.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum DefaultStream {
    /// The plain names: NULL is the legacy default stream.
    Legacy,
    /// The `_ptsz` / `_ptds` names: NULL is the calling thread's default stream.
    PerThread,
}

/// Bumped by `cudaDeviceReset` so that every thread re-binds its primary context.
static CONTEXT_EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// `cudaSetDevice` / `cudaGetDevice`.
    static DEVICE: Cell<c_int> = const { Cell::new(0) };
    /// (device, epoch) whose primary context is current on this thread; device -1 = none yet.
    static BOUND: Cell<(c_int, u64)> = const { Cell::new((-1, 0)) };
    /// `cudaGetLastError` / `cudaPeekAtLastError`.
    static LAST_ERROR: Cell<cudaError_t> = const { Cell::new(cudaSuccess) };
}

/// The initialized driver with the current device's primary context current on this thread.
fn with_ctx() -> Result<&'static Driver, cudaError_t> {
    let d = initialized()?;
    let device = DEVICE.with(Cell::get);
    let epoch = CONTEXT_EPOCH.load(Ordering::Acquire);
    if BOUND.with(Cell::get) != (device, epoch) {
        let ctx = d.primary_ctx(device)?;
        // SAFETY: a context handle the driver gave us.
        unsafe { check(need(d.core.ctx_set_current)?(ctx))? };
        BOUND.with(|b| b.set((device, epoch)));
    }
    Ok(d)
}

/// Number of devices the driver reports.
fn device_count(d: &Driver) -> Result<c_int, cudaError_t> {
    let mut n: c_int = 0;
    // SAFETY: valid out-pointer.
    unsafe { check(need(d.core.device_get_count)?(&mut n))? };
    Ok(n)
}

/// `cudaErrorInvalidDevice` unless `0 <= device < count`.
fn valid_device(d: &Driver, device: c_int) -> Result<(), cudaError_t> {
    if device < 0 || device >= device_count(d)? {
        return Err(cudaErrorInvalidDevice);
    }
    Ok(())
}

/// Picks the driver table and the driver stream handle for a runtime stream argument:
/// `cudaStreamPerThread` -> per-thread table with the driver's NULL (its per-thread default stream),
/// `cudaStreamLegacy` -> legacy table with NULL, NULL -> the entry point's default, others unchanged.
fn streamed(d: &'static Driver, stream: cudaStream_t, mode: DefaultStream) -> (&'static Streamed, CUstream) {
    let by_mode = match mode {
        DefaultStream::Legacy => &d.legacy,
        DefaultStream::PerThread => &d.per_thread,
    };
    match stream as usize {
        0 => (by_mode, null_mut()),
        CUDA_STREAM_LEGACY => (&d.legacy, null_mut()),
        CUDA_STREAM_PER_THREAD => (&d.per_thread, null_mut()),
        _ => (by_mode, stream),
    }
}

/// Runs an API body: panics become `cudaErrorUnknown`, failures are recorded as the last error.
fn api(body: impl FnOnce() -> Result<(), cudaError_t>) -> cudaError_t {
    let code = match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => cudaSuccess,
        Ok(Err(e)) => e,
        Err(_) => cudaErrorUnknown,
    };
    if code != cudaSuccess {
        let _ = LAST_ERROR.try_with(|l| l.set(code));
    }
    code
}

/// `cudaErrorInvalidValue` for a NULL pointer argument.
fn non_null<T>(p: *const T) -> Result<(), cudaError_t> {
    if p.is_null() {
        Err(cudaErrorInvalidValue)
    } else {
        Ok(())
    }
}

/// A runtime pointer as a driver `CUdeviceptr` (unified addressing: same value).
fn dptr<T>(p: *const T) -> CUdeviceptr {
    p as usize as CUdeviceptr
}

/// `cudaMemcpyKind` must be one of the five enumerators.
fn memcpy_kind(kind: cudaMemcpyKind) -> Result<(), cudaError_t> {
    if (cudaMemcpyHostToHost..=cudaMemcpyDefault).contains(&kind) {
        Ok(())
    } else {
        Err(cudaErrorInvalidMemcpyDirection)
    }
}

/// Defines exported runtime entry points. `fn name [name_ptsz] (args) => |mode| body;` also
/// exports the per-thread-default-stream form; `mode` says which one is running.
macro_rules! export {
    ($( $(#[$meta:meta])* fn $name:ident $([$pt:ident])? ($($arg:ident : $ty:ty),* $(,)?)
        => |$mode:ident| $body:expr; )*) => {
        $( export!(@one [$(#[$meta])*] $name [$($pt)?] ($($arg : $ty),*) $mode $body); )*
    };
    (@one [$($meta:tt)*] $name:ident [] ($($arg:ident : $ty:ty),*) $mode:ident $body:expr) => {
        export!(@fn [$($meta)*] $name Legacy ($($arg : $ty),*) $mode $body);
    };
    (@one [$($meta:tt)*] $name:ident [$pt:ident] ($($arg:ident : $ty:ty),*) $mode:ident $body:expr) => {
        export!(@fn [$($meta)*] $name Legacy ($($arg : $ty),*) $mode $body);
        export!(@fn [#[doc = concat!("`", stringify!($pt), "`: [`", stringify!($name),
            "`] with the per-thread default stream (`CUDA_API_PER_THREAD_DEFAULT_STREAM`).")]]
            $pt PerThread ($($arg : $ty),*) $mode $body);
    };
    (@fn [$($meta:tt)*] $name:ident $which:ident ($($arg:ident : $ty:ty),*) $mode:ident $body:expr) => {
        $($meta)*
        ///
        /// # Safety
        /// Pointer arguments must be valid as the CUDA documentation of this function requires.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg : $ty),*) -> cudaError_t {
            #[allow(unused_variables)]
            let $mode = DefaultStream::$which;
            api(move || $body)
        }
    };
}

export! {
    /// `cudaMalloc`: device memory on the current device; size 0 gives NULL and success.
    fn cudaMalloc(dev_ptr: *mut *mut c_void, size: usize) => |mode| {
        non_null(dev_ptr)?;
        let d = with_ctx()?;
        let mut p: CUdeviceptr = 0;
        if size > 0 {
            check(need(d.core.mem_alloc)?(&mut p, size))?;
        }
        *dev_ptr = p as usize as *mut c_void;
        Ok(())
    };

    /// `cudaFree`: NULL is a no-op that still initializes the context (the classic idiom).
    fn cudaFree(dev_ptr: *mut c_void) => |mode| {
        let d = with_ctx()?;
        if !dev_ptr.is_null() {
            check(need(d.core.mem_free)?(dptr(dev_ptr)))?;
        }
        Ok(())
    };

    /// `cudaMallocAsync`: stream-ordered allocation from the device's default pool.
    fn cudaMallocAsync [cudaMallocAsync_ptsz] (dev_ptr: *mut *mut c_void, size: usize, stream: cudaStream_t)
    => |mode| {
        non_null(dev_ptr)?;
        let (t, s) = streamed(with_ctx()?, stream, mode);
        let mut p: CUdeviceptr = 0;
        check(need(t.mem_alloc_async)?(&mut p, size, s))?;
        *dev_ptr = p as usize as *mut c_void;
        Ok(())
    };

    /// `cudaFreeAsync`.
    fn cudaFreeAsync [cudaFreeAsync_ptsz] (dev_ptr: *mut c_void, stream: cudaStream_t) => |mode| {
        let (t, s) = streamed(with_ctx()?, stream, mode);
        check(need(t.mem_free_async)?(dptr(dev_ptr), s))
    };

    /// `cudaMallocManaged` (`flags`: `cudaMemAttachGlobal` / `cudaMemAttachHost`, same values as the driver's).
    fn cudaMallocManaged(dev_ptr: *mut *mut c_void, size: usize, flags: c_uint) => |mode| {
        non_null(dev_ptr)?;
        let d = with_ctx()?;
        let mut p: CUdeviceptr = 0;
        check(need(d.core.mem_alloc_managed)?(&mut p, size, flags))?;
        *dev_ptr = p as usize as *mut c_void;
        Ok(())
    };

    /// `cudaMallocHost`: page-locked host memory.
    fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) => |mode| {
        non_null(ptr)?;
        check(need(with_ctx()?.core.mem_alloc_host)?(ptr, size))
    };

    /// `cudaHostAlloc` (`cudaHostAlloc*` flags have the driver's `CU_MEMHOSTALLOC_*` values).
    fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) => |mode| {
        non_null(ptr)?;
        check(need(with_ctx()?.core.mem_host_alloc)?(ptr, size, flags))
    };

    /// `cudaFreeHost`: NULL is a no-op.
    fn cudaFreeHost(ptr: *mut c_void) => |mode| {
        let d = with_ctx()?;
        if ptr.is_null() {
            return Ok(());
        }
        check(need(d.core.mem_free_host)?(ptr))
    };

    /// `cudaHostRegister` (`cudaHostRegister*` flags have the driver's `CU_MEMHOSTREGISTER_*` values).
    fn cudaHostRegister(ptr: *mut c_void, size: usize, flags: c_uint) => |mode| {
        non_null(ptr)?;
        check(need(with_ctx()?.core.mem_host_register)?(ptr, size, flags))
    };

    /// `cudaHostUnregister`.
    fn cudaHostUnregister(ptr: *mut c_void) => |mode| {
        non_null(ptr)?;
        check(need(with_ctx()?.core.mem_host_unregister)?(ptr))
    };

    /// `cudaMemGetInfo`: free and total bytes of the current device (the driver validates the pointers).
    fn cudaMemGetInfo(free: *mut usize, total: *mut usize) => |mode| {
        check(need(with_ctx()?.core.mem_get_info)?(free, total))
    };

    /// `cudaSetDevice`: selects the thread's device and, as in CUDA 12, initializes its primary context.
    fn cudaSetDevice(device: c_int) => |mode| {
        valid_device(initialized()?, device)?;
        DEVICE.with(|d| d.set(device));
        with_ctx().map(drop)
    };

    /// `cudaGetDevice`.
    fn cudaGetDevice(device: *mut c_int) => |mode| {
        non_null(device)?;
        initialized()?;
        *device = DEVICE.with(Cell::get);
        Ok(())
    };

    /// `cudaGetDeviceCount`: 0 devices are reported on failure, as the real one does.
    fn cudaGetDeviceCount(count: *mut c_int) => |mode| {
        non_null(count)?;
        *count = 0;
        *count = device_count(initialized()?)?;
        Ok(())
    };

    /// `cudaDeviceReset`: drops this process's reference on the current device's primary context
    /// (the driver destroys it and what it owns when no one else holds it).
    fn cudaDeviceReset() => |mode| {
        let d = with_ctx()?;
        let device = DEVICE.with(Cell::get);
        check(need(d.core.ctx_synchronize)?())?;
        if d.forget_primary_ctx(device) {
            let mut dev: CUdevice = 0;
            check(need(d.core.device_get)?(&mut dev, device))?;
            CONTEXT_EPOCH.fetch_add(1, Ordering::AcqRel);
            check(need(d.core.primary_ctx_release)?(dev))?;
        }
        Ok(())
    };

    /// `cudaDeviceEnablePeerAccess`: lets the current device access `peer_device`'s memory.
    fn cudaDeviceEnablePeerAccess(peer_device: c_int, flags: c_uint) => |mode| {
        if flags != 0 {
            return Err(cudaErrorInvalidValue);
        }
        let d = with_ctx()?;
        valid_device(d, peer_device)?;
        if peer_device == DEVICE.with(Cell::get) {
            return Err(cudaErrorInvalidDevice);
        }
        let peer = d.primary_ctx(peer_device)?;
        check(need(d.core.ctx_enable_peer_access)?(peer, 0))
    };

    /// `cudaIpcGetMemHandle`.
    fn cudaIpcGetMemHandle(handle: *mut cudaIpcMemHandle_t, dev_ptr: *mut c_void) => |mode| {
        non_null(handle)?;
        check(need(with_ctx()?.core.ipc_get_mem_handle)?(handle, dptr(dev_ptr)))
    };

    /// `cudaIpcOpenMemHandle` (the handle is passed by value; the only flag is
    /// `cudaIpcMemLazyEnablePeerAccess`).
    fn cudaIpcOpenMemHandle(dev_ptr: *mut *mut c_void, handle: cudaIpcMemHandle_t, flags: c_uint) => |mode| {
        non_null(dev_ptr)?;
        if flags & !cudaIpcMemLazyEnablePeerAccess != 0 {
            return Err(cudaErrorInvalidValue);
        }
        let mut p: CUdeviceptr = 0;
        check(need(with_ctx()?.core.ipc_open_mem_handle)?(&mut p, handle, flags))?;
        *dev_ptr = p as usize as *mut c_void;
        Ok(())
    };

    /// `cudaIpcCloseMemHandle`.
    fn cudaIpcCloseMemHandle(dev_ptr: *mut c_void) => |mode| {
        check(need(with_ctx()?.core.ipc_close_mem_handle)?(dptr(dev_ptr)))
    };

    /// `cudaStreamCreate` (default flags).
    fn cudaStreamCreate(stream: *mut cudaStream_t) => |mode| {
        non_null(stream)?;
        check(need(with_ctx()?.core.stream_create)?(stream, 0))
    };

    /// `cudaStreamDestroy`: the default streams cannot be destroyed.
    fn cudaStreamDestroy(stream: cudaStream_t) => |mode| {
        let d = with_ctx()?;
        if matches!(stream as usize, 0 | CUDA_STREAM_LEGACY | CUDA_STREAM_PER_THREAD) {
            return Err(cudaErrorInvalidResourceHandle);
        }
        check(need(d.core.stream_destroy)?(stream))
    };

    /// `cudaStreamSynchronize`.
    fn cudaStreamSynchronize [cudaStreamSynchronize_ptsz] (stream: cudaStream_t) => |mode| {
        let (t, s) = streamed(with_ctx()?, stream, mode);
        check(need(t.stream_synchronize)?(s))
    };

    /// `cudaStreamBeginCapture` (capturing the legacy stream is refused by the driver, error 900).
    fn cudaStreamBeginCapture [cudaStreamBeginCapture_ptsz] (stream: cudaStream_t, capture_mode: cudaStreamCaptureMode)
    => |mode| {
        let (t, s) = streamed(with_ctx()?, stream, mode);
        check(need(t.stream_begin_capture)?(s, capture_mode))
    };

    /// `cudaStreamBeginCaptureToGraph` (12.3): capture into a graph the caller created.
    fn cudaStreamBeginCaptureToGraph [cudaStreamBeginCaptureToGraph_ptsz] (stream: cudaStream_t, graph: cudaGraph_t,
        dependencies: *const *mut c_void, dependency_data: *const c_void, num_dependencies: usize,
        capture_mode: cudaStreamCaptureMode) => |mode| {
        let (t, s) = streamed(with_ctx()?, stream, mode);
        check(need(t.stream_begin_capture_to_graph)?(s, graph, dependencies, dependency_data, num_dependencies, capture_mode))
    };

    /// `cudaStreamEndCapture`.
    fn cudaStreamEndCapture [cudaStreamEndCapture_ptsz] (stream: cudaStream_t, graph: *mut cudaGraph_t) => |mode| {
        non_null(graph)?;
        let (t, s) = streamed(with_ctx()?, stream, mode);
        check(need(t.stream_end_capture)?(s, graph))
    };

    /// `cudaStreamIsCapturing`.
    fn cudaStreamIsCapturing [cudaStreamIsCapturing_ptsz] (stream: cudaStream_t, status: *mut cudaStreamCaptureStatus)
    => |mode| {
        non_null(status)?;
        let (t, s) = streamed(with_ctx()?, stream, mode);
        check(need(t.stream_is_capturing)?(s, status))
    };

    /// `cudaThreadExchangeStreamCaptureMode`.
    fn cudaThreadExchangeStreamCaptureMode(capture_mode: *mut cudaStreamCaptureMode) => |mode| {
        non_null(capture_mode)?;
        check(need(initialized()?.core.thread_exchange_capture_mode)?(capture_mode))
    };

    /// `cudaGraphInstantiate` (the CUDA 12 form with `unsigned long long flags`).
    fn cudaGraphInstantiate(exec: *mut cudaGraphExec_t, graph: cudaGraph_t, flags: u64) => |mode| {
        graph_instantiate(exec, graph, flags)
    };

    /// `cudaGraphInstantiateWithFlags`.
    fn cudaGraphInstantiateWithFlags(exec: *mut cudaGraphExec_t, graph: cudaGraph_t, flags: u64) => |mode| {
        graph_instantiate(exec, graph, flags)
    };

    /// `cudaGraphInstantiateWithParams` (12.0): forwards the parameter struct (its upload stream
    /// follows the entry point's default-stream mode).
    fn cudaGraphInstantiateWithParams [cudaGraphInstantiateWithParams_ptsz] (exec: *mut cudaGraphExec_t,
        graph: cudaGraph_t, params: *mut c_void) => |mode| {
        non_null(exec)?;
        let (t, _) = streamed(with_ctx()?, null_mut(), mode);
        check(need(t.graph_instantiate_with_params)?(exec, graph, params))
    };

    /// `cudaGraphExecDestroy`.
    fn cudaGraphExecDestroy(exec: cudaGraphExec_t) => |mode| {
        check(need(with_ctx()?.core.graph_exec_destroy)?(exec))
    };

    /// `cudaGraphCreate` (flags must be 0).
    fn cudaGraphCreate(graph: *mut cudaGraph_t, flags: c_uint) => |mode| {
        non_null(graph)?;
        check(need(with_ctx()?.core.graph_create)?(graph, flags))
    };

    /// `cudaGraphDestroy`.
    fn cudaGraphDestroy(graph: cudaGraph_t) => |mode| {
        check(need(with_ctx()?.core.graph_destroy)?(graph))
    };

    /// `cudaGraphLaunch`.
    fn cudaGraphLaunch [cudaGraphLaunch_ptsz] (exec: cudaGraphExec_t, stream: cudaStream_t) => |mode| {
        let (t, s) = streamed(with_ctx()?, stream, mode);
        check(need(t.graph_launch)?(exec, s))
    };

    /// `cudaMemcpy`: typed driver copies for the three directed kinds, `cuMemcpy` (unified
    /// addressing) for host-to-host and `cudaMemcpyDefault`.
    fn cudaMemcpy [cudaMemcpy_ptds] (dst: *mut c_void, src: *const c_void, count: usize, kind: cudaMemcpyKind)
    => |mode| {
        memcpy_kind(kind)?;
        let (t, _) = streamed(with_ctx()?, null_mut(), mode);
        if count == 0 {
            return Ok(());
        }
        check(match kind {
            cudaMemcpyHostToDevice => need(t.memcpy_htod)?(dptr(dst), src, count),
            cudaMemcpyDeviceToHost => need(t.memcpy_dtoh)?(dst, dptr(src), count),
            cudaMemcpyDeviceToDevice => need(t.memcpy_dtod)?(dptr(dst), dptr(src), count),
            _ => need(t.memcpy)?(dptr(dst), dptr(src), count),
        })
    };

    /// `cudaMemcpyAsync` (unified addressing: `cuMemcpyAsync` for every kind).
    fn cudaMemcpyAsync [cudaMemcpyAsync_ptsz]
        (dst: *mut c_void, src: *const c_void, count: usize, kind: cudaMemcpyKind, stream: cudaStream_t)
    => |mode| {
        memcpy_kind(kind)?;
        let (t, s) = streamed(with_ctx()?, stream, mode);
        if count == 0 {
            return Ok(());
        }
        check(need(t.memcpy_async)?(dptr(dst), dptr(src), count, s))
    };

    /// `cudaMemset` (byte value = low 8 bits of `value`).
    fn cudaMemset [cudaMemset_ptds] (dev_ptr: *mut c_void, value: c_int, count: usize) => |mode| {
        let (t, _) = streamed(with_ctx()?, null_mut(), mode);
        check(need(t.memset_d8)?(dptr(dev_ptr), value as u8, count))
    };

    /// `cudaMemsetAsync`.
    fn cudaMemsetAsync [cudaMemsetAsync_ptsz] (dev_ptr: *mut c_void, value: c_int, count: usize, stream: cudaStream_t)
    => |mode| {
        let (t, s) = streamed(with_ctx()?, stream, mode);
        check(need(t.memset_d8_async)?(dptr(dev_ptr), value as u8, count, s))
    };

    /// `cudaDeviceSynchronize`.
    fn cudaDeviceSynchronize() => |mode| {
        check(need(with_ctx()?.core.ctx_synchronize)?())
    };

    /// `cudaGetDriverEntryPoint`: the driver entry for `symbol` at the runtime's own version
    /// (`CUDART_VERSION`, 12090).
    fn cudaGetDriverEntryPoint [cudaGetDriverEntryPoint_ptsz]
        (symbol: *const c_char, func_ptr: *mut *mut c_void, flags: u64, driver_status: *mut cudaDriverEntryPointQueryResult)
    => |mode| {
        entry_point(symbol, func_ptr, CUDART_VERSION as c_uint, flags, driver_status, mode)
    };

    /// `cudaGetDriverEntryPointByVersion`: the driver entry for `symbol` at `cuda_version`.
    fn cudaGetDriverEntryPointByVersion [cudaGetDriverEntryPointByVersion_ptsz]
        (symbol: *const c_char, func_ptr: *mut *mut c_void, cuda_version: c_uint, flags: u64,
         driver_status: *mut cudaDriverEntryPointQueryResult)
    => |mode| {
        entry_point(symbol, func_ptr, cuda_version, flags, driver_status, mode)
    };

    /// `cudaRuntimeGetVersion`: 12090, no driver needed.
    fn cudaRuntimeGetVersion(version: *mut c_int) => |mode| {
        non_null(version)?;
        *version = CUDART_VERSION;
        Ok(())
    };

    /// `cudaDriverGetVersion`: 0 (and success) when there is no driver, like the real one.
    fn cudaDriverGetVersion(version: *mut c_int) => |mode| {
        non_null(version)?;
        *version = 0;
        match loaded() {
            Ok(d) => check(need(d.core.driver_get_version)?(version)),
            Err(_) => Ok(()),
        }
    };
}

/// Shared body of the two graph-instantiation entry points (both forward to
/// `cuGraphInstantiateWithFlags`, as the 12.x runtime does).
unsafe fn graph_instantiate(exec: *mut cudaGraphExec_t, graph: cudaGraph_t, flags: u64) -> Result<(), cudaError_t> {
    non_null(exec)?;
    check(need(with_ctx()?.core.graph_instantiate_with_flags)?(exec, graph, flags))
}

/// Shared body of `cudaGetDriverEntryPoint*`. Per the header: an unknown symbol or an insufficient
/// version is a success with `*func_ptr = NULL` and the reason in `driver_status`.
unsafe fn entry_point(
    symbol: *const c_char,
    func_ptr: *mut *mut c_void,
    cuda_version: c_uint,
    flags: u64,
    driver_status: *mut cudaDriverEntryPointQueryResult,
    mode: DefaultStream,
) -> Result<(), cudaError_t> {
    non_null(symbol)?;
    non_null(func_ptr)?;
    if flags & !(cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream) != 0 {
        return Err(cudaErrorInvalidValue);
    }
    let flags = match (flags, mode) {
        (cudaEnableDefault, DefaultStream::PerThread) => cudaEnablePerThreadDefaultStream,
        _ => flags,
    };
    let d = initialized()?;
    let mut status: c_int = 0;
    *func_ptr = null_mut();
    let res = (d.get_proc)(symbol, func_ptr, cuda_version as c_int, flags, &mut status);
    if res != 0 {
        *func_ptr = null_mut();
        // The driver reports the reason; an error without one means "not found".
        if status == 0 {
            status = 1;
        }
    }
    if !driver_status.is_null() {
        *driver_status = status;
    }
    Ok(())
}

/// `cudaGetErrorName`: the enumerator name of `error`.
#[no_mangle]
pub extern "C" fn cudaGetErrorName(error: cudaError_t) -> *const c_char {
    errors::error_name(error).as_ptr().cast()
}

/// `cudaGetErrorString`: a description of `error`.
#[no_mangle]
pub extern "C" fn cudaGetErrorString(error: cudaError_t) -> *const c_char {
    errors::error_string(error).as_ptr().cast()
}

/// `cudaGetLastError`: the last error of this thread, which is reset to `cudaSuccess`.
#[no_mangle]
pub extern "C" fn cudaGetLastError() -> cudaError_t {
    LAST_ERROR.try_with(|l| l.replace(cudaSuccess)).unwrap_or(cudaSuccess)
}

/// `cudaPeekAtLastError`: the last error of this thread, left in place.
#[no_mangle]
pub extern "C" fn cudaPeekAtLastError() -> cudaError_t {
    LAST_ERROR.try_with(Cell::get).unwrap_or(cudaSuccess)
}
