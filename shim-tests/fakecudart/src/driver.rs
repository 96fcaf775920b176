//! How the runtime reaches the driver: exactly the path real libcudart 12.9 takes.
//!
//! 1. `dlopen("libcuda.so.1", RTLD_NOW)`;
//! 2. `dlsym(handle, "cuGetProcAddress_v2")` through the global `dlsym` symbol (the only dlsym, so an
//!    `LD_PRELOAD` interposer of `dlsym` sees it);
//! 3. a probe with the empty name `""`, which must fail;
//! 4. `cuInit` resolved at 2000 and called with 0;
//! 5. `cuGetProcAddress` resolved through itself at 11030 and at 12000 (the 12000 one is used after);
//! 6. every other entry by BASE name and the cudaVersion of the ABI the runtime was written against;
//!    stream-ordered entries a second time with `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` at the
//!    version of their per-thread variant, into a second table.
//!
//! This happens once, lazily, at the first API call that needs the driver (never at load time).
//! If `FAKECUDA_TRACE` names a file, the steps the driver cannot see (`rt dlopen libcuda.so.1 -> ok`,
//! `rt dlsym cuGetProcAddress_v2 -> ok`, or `-> fail`) are appended to it next to the driver's own
//! `getproc ...` and `init ...` lines.

// NUL-terminated byte strings rather than `c""` literals: the workspace's MSRV is 1.75.
#![allow(clippy::manual_c_str_literals)]

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};

use crate::errors::*;
use crate::types::*;

/// `cuGetProcAddress_v2` (CUDA 12.0 ABI, five arguments).
pub(crate) type GetProcV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;

/// The runtime's own version (`CUDART_VERSION` of the 12.9 headers).
pub(crate) const CUDART_VERSION: c_int = 12090;

const CUDA_SUCCESS: CUresult = 0;
const CU_GET_PROC_ADDRESS_DEFAULT: u64 = 0;
const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// Declares a table of driver entry points resolved by base name and version.
/// Each row: `field: "cuBase" @ legacy_version [/ per_thread_version] => fn(args)`.
macro_rules! driver_table {
    ($(#[$meta:meta])* $table:ident {
        $( $(#[$fmeta:meta])* $field:ident : $base:literal @ $ver:literal $(/ $ptver:literal)?
           => fn($($arg:ty),* $(,)?); )*
    }) => {
        $(#[$meta])*
        pub(crate) struct $table {
            $( $(#[$fmeta])* pub(crate) $field: Option<unsafe extern "C" fn($($arg),*) -> CUresult>, )*
        }

        impl $table {
            /// Every row as (base name, version, per-thread version, number of parameters), for
            /// the cross-check against `cudaTypedefs.h`.
            #[cfg(test)]
            pub(crate) const ROWS: &'static [(&'static str, c_int, Option<c_int>, usize)] = &[
                $( ($base, $ver, driver_table!(@opt $($ptver)?), <[&str]>::len(&[$(stringify!($arg)),*])), )*
            ];

            /// Resolves every row through `get_proc`; with the per-thread flag each row is asked
            /// at the version of its per-thread variant.
            unsafe fn resolve(get_proc: GetProcV2, flags: u64) -> Self {
                Self { $( $field: {
                    let version: c_int = if flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM {
                        driver_table!(@pt $ver $(, $ptver)?)
                    } else {
                        $ver
                    };
                    resolve_one(get_proc, concat!($base, "\0"), version, flags).map(|p| {
                        // SAFETY: the driver returns the entry whose ABI is the one of the
                        // `PFN_<base>_v<version>` typedef, which this row's signature spells out.
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> CUresult>(p)
                    })
                }, )* }
            }
        }
    };
    (@opt) => { None };
    (@opt $ptver:literal) => { Some($ptver) };
    (@pt $ver:literal) => { $ver };
    (@pt $ver:literal, $ptver:literal) => { $ptver };
}

driver_table! {
    /// Entries that do not depend on the default-stream semantics (resolved once, default flags).
    Core {
        driver_get_version: "cuDriverGetVersion" @ 2020 => fn(*mut c_int);
        device_get: "cuDeviceGet" @ 2000 => fn(*mut CUdevice, c_int);
        device_get_count: "cuDeviceGetCount" @ 2000 => fn(*mut c_int);
        primary_ctx_retain: "cuDevicePrimaryCtxRetain" @ 7000 => fn(*mut CUcontext, CUdevice);
        primary_ctx_release: "cuDevicePrimaryCtxRelease" @ 11000 => fn(CUdevice);
        ctx_set_current: "cuCtxSetCurrent" @ 4000 => fn(CUcontext);
        ctx_synchronize: "cuCtxSynchronize" @ 2000 => fn();
        ctx_enable_peer_access: "cuCtxEnablePeerAccess" @ 4000 => fn(CUcontext, c_uint);
        mem_alloc: "cuMemAlloc" @ 3020 => fn(*mut CUdeviceptr, usize);
        mem_free: "cuMemFree" @ 3020 => fn(CUdeviceptr);
        mem_get_info: "cuMemGetInfo" @ 3020 => fn(*mut usize, *mut usize);
        mem_alloc_managed: "cuMemAllocManaged" @ 6000 => fn(*mut CUdeviceptr, usize, c_uint);
        mem_alloc_host: "cuMemAllocHost" @ 3020 => fn(*mut *mut c_void, usize);
        mem_host_alloc: "cuMemHostAlloc" @ 2020 => fn(*mut *mut c_void, usize, c_uint);
        mem_free_host: "cuMemFreeHost" @ 2000 => fn(*mut c_void);
        mem_host_register: "cuMemHostRegister" @ 6050 => fn(*mut c_void, usize, c_uint);
        mem_host_unregister: "cuMemHostUnregister" @ 4000 => fn(*mut c_void);
        ipc_get_mem_handle: "cuIpcGetMemHandle" @ 4010 => fn(*mut IpcMemHandle, CUdeviceptr);
        ipc_open_mem_handle: "cuIpcOpenMemHandle" @ 11000 => fn(*mut CUdeviceptr, IpcMemHandle, c_uint);
        ipc_close_mem_handle: "cuIpcCloseMemHandle" @ 4010 => fn(CUdeviceptr);
        stream_create: "cuStreamCreate" @ 2000 => fn(*mut CUstream, c_uint);
        stream_destroy: "cuStreamDestroy" @ 4000 => fn(CUstream);
        thread_exchange_capture_mode: "cuThreadExchangeStreamCaptureMode" @ 10010 => fn(*mut c_int);
        /// Resolved like the real runtime does (its trace shows it), but the 12.x
        /// `cudaGraphInstantiate` forwards to `cuGraphInstantiateWithFlags`.
        #[allow(dead_code)]
        graph_instantiate: "cuGraphInstantiate" @ 11000
            => fn(*mut CUgraphExec, CUgraph, *mut *mut c_void, *mut c_char, usize);
        graph_instantiate_with_flags: "cuGraphInstantiateWithFlags" @ 11040 => fn(*mut CUgraphExec, CUgraph, u64);
        graph_exec_destroy: "cuGraphExecDestroy" @ 10000 => fn(CUgraphExec);
        graph_destroy: "cuGraphDestroy" @ 10000 => fn(CUgraph);
        graph_create: "cuGraphCreate" @ 10000 => fn(*mut CUgraph, c_uint);
    }
}

driver_table! {
    /// Stream-ordered entries: one table with the legacy default stream, one with the per-thread one.
    Streamed {
        mem_alloc_async: "cuMemAllocAsync" @ 11020 / 11020 => fn(*mut CUdeviceptr, usize, CUstream);
        mem_free_async: "cuMemFreeAsync" @ 11020 / 11020 => fn(CUdeviceptr, CUstream);
        stream_synchronize: "cuStreamSynchronize" @ 2000 / 7000 => fn(CUstream);
        stream_begin_capture: "cuStreamBeginCapture" @ 10010 / 10010 => fn(CUstream, c_int);
        stream_begin_capture_to_graph: "cuStreamBeginCaptureToGraph" @ 12030 / 12030
            => fn(CUstream, CUgraph, *const *mut c_void, *const c_void, usize, c_int);
        stream_end_capture: "cuStreamEndCapture" @ 10000 / 10000 => fn(CUstream, *mut CUgraph);
        stream_is_capturing: "cuStreamIsCapturing" @ 10000 / 10000 => fn(CUstream, *mut c_int);
        graph_launch: "cuGraphLaunch" @ 10000 / 10000 => fn(CUgraphExec, CUstream);
        /// `cudaGraphInstantiateParams` has the layout of `CUDA_GRAPH_INSTANTIATE_PARAMS`.
        graph_instantiate_with_params: "cuGraphInstantiateWithParams" @ 12000 / 12000
            => fn(*mut CUgraphExec, CUgraph, *mut c_void);
        memcpy: "cuMemcpy" @ 4000 / 7000 => fn(CUdeviceptr, CUdeviceptr, usize);
        memcpy_htod: "cuMemcpyHtoD" @ 3020 / 7000 => fn(CUdeviceptr, *const c_void, usize);
        memcpy_dtoh: "cuMemcpyDtoH" @ 3020 / 7000 => fn(*mut c_void, CUdeviceptr, usize);
        memcpy_dtod: "cuMemcpyDtoD" @ 3020 / 7000 => fn(CUdeviceptr, CUdeviceptr, usize);
        memcpy_async: "cuMemcpyAsync" @ 4000 / 7000 => fn(CUdeviceptr, CUdeviceptr, usize, CUstream);
        memset_d8: "cuMemsetD8" @ 3020 / 7000 => fn(CUdeviceptr, u8, usize);
        memset_d8_async: "cuMemsetD8Async" @ 3020 / 7000 => fn(CUdeviceptr, u8, usize, CUstream);
    }
}

/// Asks the driver for one entry; `None` when it has none (the caller then reports
/// `cudaErrorCallRequiresNewerDriver` if the entry is ever needed).
unsafe fn resolve_one(get_proc: GetProcV2, base: &str, version: c_int, flags: u64) -> Option<*mut c_void> {
    let mut pfn: *mut c_void = std::ptr::null_mut();
    let mut status: c_int = 0;
    let res = get_proc(base.as_ptr().cast(), &mut pfn, version, flags, &mut status);
    (res == CUDA_SUCCESS && !pfn.is_null()).then_some(pfn)
}

/// The resolved driver and the process-wide runtime state that depends on it.
pub(crate) struct Driver {
    /// `cuGetProcAddress` as resolved through itself at 12000 (used by `cudaGetDriverEntryPoint`).
    pub(crate) get_proc: GetProcV2,
    pub(crate) core: Core,
    pub(crate) legacy: Streamed,
    pub(crate) per_thread: Streamed,
    /// What `cuInit(0)` returned, as a runtime code (sticky for the whole process, like the real one).
    pub(crate) init_error: cudaError_t,
    /// Primary context retained per device ordinal (stored as an address; retained once, never released).
    primary: Mutex<HashMap<c_int, usize>>,
}

/// Outcome of the one-time load: the driver, or why there is none (`cudaErrorInsufficientDriver`).
static DRIVER: OnceLock<Result<Driver, cudaError_t>> = OnceLock::new();

thread_local! {
    /// Set while this thread runs the one-time load, so that a re-entrant call (e.g. from a hook
    /// inside the driver) gets an error instead of deadlocking on the `OnceLock`.
    static LOADING: Cell<bool> = const { Cell::new(false) };
}

/// The loaded driver (loading it on first use). Does not require `cuInit` to have succeeded.
pub(crate) fn loaded() -> Result<&'static Driver, cudaError_t> {
    if let Some(d) = DRIVER.get() {
        return d.as_ref().map_err(|e| *e);
    }
    if LOADING.with(|l| l.replace(true)) {
        return Err(cudaErrorInitializationError);
    }
    // SAFETY: `load` only calls the driver through the documented resolution protocol.
    let r = DRIVER.get_or_init(|| unsafe { load() });
    LOADING.with(|l| l.set(false));
    r.as_ref().map_err(|e| *e)
}

/// The driver, with `cuInit` succeeded.
pub(crate) fn initialized() -> Result<&'static Driver, cudaError_t> {
    let d = loaded()?;
    if d.init_error != cudaSuccess {
        return Err(d.init_error);
    }
    Ok(d)
}

impl Driver {
    /// The device's primary context, retained on first use. The driver calls happen without the
    /// lock held; a thread that loses a race releases its extra reference.
    pub(crate) fn primary_ctx(&self, device: c_int) -> Result<CUcontext, cudaError_t> {
        if let Some(&ctx) = lock(&self.primary).get(&device) {
            return Ok(ctx as CUcontext);
        }
        let mut dev: CUdevice = 0;
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointers; the entries have the signatures of their PFN typedefs.
        unsafe {
            check(need(self.core.device_get)?(&mut dev, device))?;
            check(need(self.core.primary_ctx_retain)?(&mut ctx, dev))?;
        }
        let existing = *lock(&self.primary).entry(device).or_insert(ctx as usize);
        if existing != ctx as usize {
            // SAFETY: drops the reference this thread took above.
            unsafe { need(self.core.primary_ctx_release)?(dev) };
        }
        Ok(existing as CUcontext)
    }

    /// Forgets the retained primary context of `device`; true if there was one (the caller then
    /// releases the reference).
    pub(crate) fn forget_primary_ctx(&self, device: c_int) -> bool {
        lock(&self.primary).remove(&device).is_some()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An entry the driver must have for this call; a missing one means the driver is too old.
pub(crate) fn need<F>(f: Option<F>) -> Result<F, cudaError_t> {
    f.ok_or(cudaErrorCallRequiresNewerDriver)
}

/// Turns a driver result into the runtime's.
pub(crate) fn check(res: CUresult) -> Result<(), cudaError_t> {
    if res == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(from_driver(res))
    }
}

/// The one-time load (see the module documentation for the steps).
unsafe fn load() -> Result<Driver, cudaError_t> {
    let handle = libc::dlopen(b"libcuda.so.1\0".as_ptr().cast(), libc::RTLD_NOW);
    trace(&format!("rt dlopen libcuda.so.1 -> {}", if handle.is_null() { "fail" } else { "ok" }));
    if handle.is_null() {
        warn("libcuda.so.1 could not be loaded; CUDA calls fail with cudaErrorInsufficientDriver");
        return Err(cudaErrorInsufficientDriver);
    }
    // The ONLY dlsym: through the global symbol, as an interposer of dlsym expects.
    let sym = libc::dlsym(handle, b"cuGetProcAddress_v2\0".as_ptr().cast());
    trace(&format!("rt dlsym cuGetProcAddress_v2 -> {}", if sym.is_null() { "fail" } else { "ok" }));
    if sym.is_null() {
        warn("libcuda.so.1 has no cuGetProcAddress_v2; CUDA calls fail with cudaErrorInsufficientDriver");
        return Err(cudaErrorInsufficientDriver);
    }
    // SAFETY: cuGetProcAddress_v2 has the 12.0 five-argument ABI.
    let bootstrap = std::mem::transmute::<*mut c_void, GetProcV2>(sym);

    // Probe: the empty name is never a symbol; a driver that says otherwise is not trusted further.
    let mut probe: *mut c_void = std::ptr::null_mut();
    let mut status: c_int = 0;
    let res = bootstrap(b"\0".as_ptr().cast(), &mut probe, CUDART_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &mut status);
    if res == CUDA_SUCCESS {
        warn("libcuda.so.1 resolved the empty symbol name; treating the driver as unusable");
        return Err(cudaErrorInsufficientDriver);
    }

    let Some(init) = resolve_one(bootstrap, "cuInit\0", 2000, CU_GET_PROC_ADDRESS_DEFAULT) else {
        warn("libcuda.so.1 does not resolve cuInit; CUDA calls fail with cudaErrorInsufficientDriver");
        return Err(cudaErrorInsufficientDriver);
    };
    // SAFETY: PFN_cuInit_v2000 is `CUresult (unsigned int)`.
    let init = std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_uint) -> CUresult>(init);
    let init_res = init(0);

    // cuGetProcAddress through itself: the 11.3 form (resolved, like the real runtime) and the 12.0 one.
    let _v11030 = resolve_one(bootstrap, "cuGetProcAddress\0", 11030, CU_GET_PROC_ADDRESS_DEFAULT);
    let get_proc = match resolve_one(bootstrap, "cuGetProcAddress\0", 12000, CU_GET_PROC_ADDRESS_DEFAULT) {
        // SAFETY: PFN_cuGetProcAddress_v12000 is the five-argument ABI.
        Some(p) => std::mem::transmute::<*mut c_void, GetProcV2>(p),
        None => bootstrap,
    };

    Ok(Driver {
        get_proc,
        core: Core::resolve(get_proc, CU_GET_PROC_ADDRESS_DEFAULT),
        legacy: Streamed::resolve(get_proc, CU_GET_PROC_ADDRESS_DEFAULT),
        per_thread: Streamed::resolve(get_proc, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
        init_error: if init_res == CUDA_SUCCESS { cudaSuccess } else { from_driver(init_res) },
        primary: Mutex::new(HashMap::new()),
    })
}

/// One-line warning on stderr (bad environment, never a crash).
pub(crate) fn warn(msg: &str) {
    eprintln!("fakecudart: warning: {msg}");
}

/// Appends one line to `$FAKECUDA_TRACE` (one `write` with `O_APPEND`, so lines of concurrent
/// processes do not interleave). Only used during the one-time load.
fn trace(line: &str) {
    let Some(path) = std::env::var_os("FAKECUDA_TRACE") else {
        return;
    };
    let Ok(path) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())) else {
        return;
    };
    let text = format!("{line}\n");
    // SAFETY: plain POSIX calls on a NUL-terminated path and an owned buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC, 0o644);
        if fd >= 0 {
            let _ = libc::write(fd, text.as_ptr().cast(), text.len());
            libc::close(fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// `PFN_<name>` typedef name -> number of parameters, from the official `cudaTypedefs.h`.
    fn pfn_typedefs() -> HashMap<String, usize> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/cuda-headers/include/cudaTypedefs.h");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}: run `make headers` first"));
        let mut out = HashMap::new();
        for line in text.lines() {
            let Some(rest) = line.trim().strip_prefix("typedef CUresult (CUDAAPI *PFN_") else {
                continue;
            };
            let Some((name, params)) = rest.split_once(")(") else {
                continue;
            };
            let params = params.trim_end_matches(");");
            let arity = if params.trim() == "void" { 0 } else { params.split(',').count() };
            out.insert(name.to_string(), arity);
        }
        assert!(out.len() > 400, "cudaTypedefs.h parsed to only {} typedefs", out.len());
        out
    }

    #[test]
    fn every_row_matches_a_pfn_typedef() {
        let pfn = pfn_typedefs();
        for &(base, ver, pt, arity) in Core::ROWS.iter().chain(Streamed::ROWS) {
            let legacy = format!("{base}_v{ver}");
            assert_eq!(pfn.get(&legacy), Some(&arity), "no PFN_{legacy} with {arity} parameters");
            if let Some(pt) = pt {
                let found = ["ptsz", "ptds"].iter().any(|sfx| pfn.get(&format!("{base}_v{pt}_{sfx}")) == Some(&arity));
                assert!(found, "no PFN_{base}_v{pt}_ptsz/_ptds with {arity} parameters");
            }
        }
        // Stream-ordered rows all have a per-thread version.
        assert!(Streamed::ROWS.iter().all(|r| r.2.is_some()));
    }
}
