//! Lazy module loading (`CUDA_MODULE_LOADING=LAZY`, the default since CUDA 12.2): the device
//! memory of a library loaded with `cuLibraryLoadData`/`cuLibraryLoadFromFile` is taken when
//! the library is first needed in a context, not at the load. What needs it (cuda.h 13.5 and
//! the CUDA programming guide's "Lazy Loading"): a launch of one of its kernels
//! (`cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel`, each also `_ptsz`, with
//! a `CUkernel` cast to `CUfunction`), `cuKernelGetFunction` (the kernel's function in the
//! current context), `cuLibraryGetModule` and `cuLibraryGetGlobal`.
//!
//! Each of those is bracketed by the driver's free-memory figure at the FIRST use of the
//! library in the context only, and the delta recorded as a driver cost named for the
//! library's file (the shared object its image lies in, or the file it was read from) and the
//! entry point that triggered it. Real driver calls only, no runtime, no lock across a call.
//!
//! The steady-state launch is one relaxed load, the driver's `cuCtxGetCurrent` and a probe of
//! a lock-free table of (handle, context) pairs already settled ([`SEEN`]); only a pair never
//! seen takes the ledger's lock to learn whether it is a first use (`scripts/bench.sh`,
//! `launch` pair, measures it).

use super::{api, out};
use crate::hooks::real::{current_context, device_of, measure_free, Current};
use crate::hooks::table::*;
use crate::hooks::types::*;
use crate::hooks::{record, Depth};
use crate::ledger::{FirstUse, LibrarySource};
use libc::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Set once a library was loaded: before that, a launch does nothing more than this load.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Slots of [`SEEN`] (a power of two), and how far a probe looks.
const SLOTS: usize = 1 << 14;
const PROBE: usize = 16;

/// (handle, context) pairs whose use needs no measurement any more: a kernel whose library is
/// loaded in the context, or a handle of no known library (a `CUfunction`, whose getter was
/// the first use). Open addressing, insert-only; a full neighbourhood just means the slow path.
/// Cleared when a library is unloaded (a handle value may then be reused).
static SEEN: [AtomicU64; 2 * SLOTS] = [const { AtomicU64::new(0) }; 2 * SLOTS];

#[inline]
fn slot(f: u64, ctx: u64) -> usize {
    let h = (f ^ ctx.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 40) as usize & (SLOTS - 1)
}

#[inline]
fn seen(f: u64, ctx: u64) -> bool {
    let base = slot(f, ctx);
    for i in 0..PROBE {
        let s = (base + i) & (SLOTS - 1);
        let k = SEEN[2 * s].load(Ordering::Acquire);
        if k == 0 {
            return false;
        }
        if k == f && SEEN[2 * s + 1].load(Ordering::Acquire) == ctx {
            return true;
        }
    }
    false
}

/// Something was settled since [`SEEN`] was last cleared (a process unloading hundreds of
/// libraries at exit clears it once, not once each).
static SETTLED: AtomicBool = AtomicBool::new(false);

fn settle(f: u64, ctx: u64) {
    if f == 0 {
        return;
    }
    if !SETTLED.load(Ordering::Relaxed) {
        SETTLED.store(true, Ordering::Relaxed);
    }
    let base = slot(f, ctx);
    for i in 0..PROBE {
        let s = (base + i) & (SLOTS - 1);
        match SEEN[2 * s].compare_exchange(0, f, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                SEEN[2 * s + 1].store(ctx, Ordering::Release);
                return;
            }
            Err(k) if k == f && SEEN[2 * s + 1].load(Ordering::Acquire) == ctx => return,
            Err(_) => {}
        }
    }
}

fn forget_all() {
    if !SETTLED.swap(false, Ordering::Relaxed) {
        return;
    }
    for s in 0..SLOTS {
        SEEN[2 * s + 1].store(0, Ordering::Release);
        SEEN[2 * s].store(0, Ordering::Release);
    }
}

/// The name a library's cost carries: the file of the shared object its image lies in
/// (`libtorch_cuda.so`), the file it was read from, or "(image in memory)" for an image
/// outside every loaded object (one a program built or read itself).
fn library_name(source: &LibrarySource) -> Arc<str> {
    match source {
        LibrarySource::File(f) => f.clone(),
        LibrarySource::Image(addr) => crate::sites::object_at(*addr).unwrap_or_else(|| Arc::from("(image in memory)")),
    }
}

/// Forward `call`, a use of kernel handle `f` in the current context, measuring it when it is
/// the first use of the kernel's library there.
#[inline]
fn kernel_use(sym: Sym, f: u64, call: impl FnOnce() -> c_int) -> c_int {
    if !ACTIVE.load(Ordering::Relaxed) {
        return call();
    }
    let Some(ctx) = current_context() else { return call() };
    if seen(f, ctx) {
        return call();
    }
    first_use(sym, ctx, Some(f), |l| l.lazy_claim_kernel(f, ctx), call)
}

/// Forward `call`, a use of `library` in the current context (never on a hot path).
fn library_use(sym: Sym, library: u64, call: impl FnOnce() -> c_int) -> c_int {
    if !ACTIVE.load(Ordering::Relaxed) {
        return call();
    }
    let Some(ctx) = current_context() else { return call() };
    first_use(sym, ctx, None, |l| l.lazy_claim_library(library, ctx), call)
}

/// The slow path: ask the ledger whether this is the library's first use in `ctx` (claiming
/// it), and measure the call if so.
#[cold]
#[inline(never)]
fn first_use(
    sym: Sym,
    ctx: u64,
    f: Option<u64>,
    claim: impl FnOnce(&crate::ledger::Ledger) -> FirstUse,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let depth = Depth::enter();
    if !depth.outer {
        return call();
    }
    let mut first = FirstUse::Unknown;
    depth.record(api(sym), |l| first = claim(l));
    let FirstUse::First { library, source } = first else {
        if let Some(f) = f {
            settle(f, ctx);
        }
        return call();
    };
    let start_us = crate::ledger::global().t_us();
    let before = measure_free();
    let rc = call();
    let after = measure_free();
    if rc != 0 {
        depth.record(api(sym), |l| l.lazy_release(library, ctx));
        return rc;
    }
    if let Some(f) = f {
        settle(f, ctx);
    }
    let Current::Device(dev) = device_of(sym) else { return rc };
    let (Some((b, _)), Some((a, _))) = (before, after) else { return rc };
    let site = crate::sites::capture();
    let name = library_name(&source);
    depth.record(api(sym), |l| l.lazy_load_cost(dev, api(sym), &name, b as i64 - a as i64, site, start_us));
    rc
}

// ---- where libraries and kernels come from -----------------------------------------------

/// A library was loaded (`cuLibraryLoadData`: the image's address; `cuLibraryLoadFromFile`:
/// the file's name). Called by the load hooks after a successful load.
pub(crate) unsafe fn library_loaded(sym: Sym, lib: *mut CUlibrary, code: *const c_void) {
    let (Some(handle), false) = (out(lib as *const *mut c_void), code.is_null()) else { return };
    let source = if sym == Sym::cuLibraryLoadFromFile {
        let path = std::ffi::CStr::from_ptr(code.cast::<c_char>()).to_string_lossy();
        let file = path.rsplit('/').next().unwrap_or("").chars().take(256).collect::<String>();
        LibrarySource::File(Arc::from(file))
    } else {
        LibrarySource::Image(code as u64)
    };
    record(api(sym), |l| l.lazy_library(handle, source));
    ACTIVE.store(true, Ordering::Relaxed);
}

pub unsafe fn cu_library_get_kernel(
    sym: Sym,
    real: cuLibraryGetKernel::Real,
    kernel: *mut VoidPtr,
    library: CUlibrary,
    name: *const c_char,
) -> c_int {
    let rc = real(kernel, library, name);
    if rc == 0 && ACTIVE.load(Ordering::Relaxed) {
        if let Some(k) = out(kernel as *const VoidPtr) {
            record(api(sym), |l| l.lazy_kernel(k, library as u64));
        }
    }
    rc
}

/// The library goes: forgotten before the call (its handle values may be reused at once).
pub unsafe fn cu_library_unload(sym: Sym, real: cuLibraryUnload::Real, library: CUlibrary) -> c_int {
    if ACTIVE.load(Ordering::Relaxed) {
        record(api(sym), |l| l.lazy_unload(library as u64));
        forget_all();
    }
    real(library)
}

// ---- what loads a library into a context --------------------------------------------------

#[allow(clippy::too_many_arguments)]
pub unsafe fn cu_launch_kernel(
    sym: Sym,
    real: cuLaunchKernel::Real,
    f: VoidPtr,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    smem: c_uint,
    stream: CUstream,
    params: *mut VoidPtr,
    extra: *mut VoidPtr,
) -> c_int {
    kernel_use(sym, f as u64, || real(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra))
}

pub unsafe fn cu_launch_kernel_ex(
    sym: Sym,
    real: cuLaunchKernelEx::Real,
    config: *const c_void,
    f: VoidPtr,
    params: *mut VoidPtr,
    extra: *mut VoidPtr,
) -> c_int {
    kernel_use(sym, f as u64, || real(config, f, params, extra))
}

#[allow(clippy::too_many_arguments)]
pub unsafe fn cu_launch_cooperative_kernel(
    sym: Sym,
    real: cuLaunchCooperativeKernel::Real,
    f: VoidPtr,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    smem: c_uint,
    stream: CUstream,
    params: *mut VoidPtr,
) -> c_int {
    kernel_use(sym, f as u64, || real(f, gx, gy, gz, bx, by, bz, smem, stream, params))
}

pub unsafe fn cu_kernel_get_function(
    sym: Sym,
    real: cuKernelGetFunction::Real,
    func: *mut VoidPtr,
    kernel: VoidPtr,
) -> c_int {
    kernel_use(sym, kernel as u64, || real(func, kernel))
}

pub unsafe fn cu_library_get_module(
    sym: Sym,
    real: cuLibraryGetModule::Real,
    module: *mut CUmodule,
    library: CUlibrary,
) -> c_int {
    library_use(sym, library as u64, || real(module, library))
}

pub unsafe fn cu_library_get_global(
    sym: Sym,
    real: cuLibraryGetGlobal::Real,
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    library: CUlibrary,
    name: *const c_char,
) -> c_int {
    library_use(sym, library as u64, || real(dptr, bytes, library, name))
}

// ---- what asks about a kernel (its function's attributes, its occupancy) ------------------

pub unsafe fn cu_func_get_attribute(sym: Sym, real: cuFuncGetAttribute::Real, pi: *mut c_int, attrib: c_int, f: VoidPtr) -> c_int {
    kernel_use(sym, f as u64, || real(pi, attrib, f))
}

pub unsafe fn cu_func_set_attribute(sym: Sym, real: cuFuncSetAttribute::Real, f: VoidPtr, attrib: c_int, value: c_int) -> c_int {
    kernel_use(sym, f as u64, || real(f, attrib, value))
}

pub unsafe fn cu_func_set_cache_config(sym: Sym, real: cuFuncSetCacheConfig::Real, f: VoidPtr, config: c_int) -> c_int {
    kernel_use(sym, f as u64, || real(f, config))
}

pub unsafe fn cu_occupancy_max_active_blocks(
    sym: Sym,
    real: cuOccupancyMaxActiveBlocksPerMultiprocessor::Real,
    n: *mut c_int,
    f: VoidPtr,
    block: c_int,
    smem: usize,
) -> c_int {
    kernel_use(sym, f as u64, || real(n, f, block, smem))
}

pub unsafe fn cu_occupancy_max_active_blocks_with_flags(
    sym: Sym,
    real: cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags::Real,
    n: *mut c_int,
    f: VoidPtr,
    block: c_int,
    smem: usize,
    flags: c_uint,
) -> c_int {
    kernel_use(sym, f as u64, || real(n, f, block, smem, flags))
}

pub unsafe fn cu_occupancy_available_dynamic_smem(
    sym: Sym,
    real: cuOccupancyAvailableDynamicSMemPerBlock::Real,
    size: *mut usize,
    f: VoidPtr,
    blocks: c_int,
    block: c_int,
) -> c_int {
    kernel_use(sym, f as u64, || real(size, f, blocks, block))
}

pub unsafe fn cu_occupancy_max_active_clusters(
    sym: Sym,
    real: cuOccupancyMaxActiveClusters::Real,
    n: *mut c_int,
    f: VoidPtr,
    config: *const c_void,
) -> c_int {
    kernel_use(sym, f as u64, || real(n, f, config))
}
