//! Calls whose device memory the driver takes without an allocation the program sees:
//! peer access, module and library loads, primary context creation. Each is bracketed
//! by the driver's free-memory figure; the delta is recorded per API (approximate).

use super::{api, measured};
use crate::hooks::real::{device_of, measure_free, Current};
use crate::hooks::table::*;
use crate::hooks::types::*;
use crate::hooks::{record, Depth};
use libc::{c_char, c_int, c_uint, c_void};

fn cost(sym: Sym, call: impl FnOnce() -> c_int) -> c_int {
    measured(sym, call, |l, m| {
        if let (0, Some(bytes)) = (m.rc, m.delta) {
            l.driver_cost_at(m.dev, api(sym), bytes, m.site, Some(m.start_us));
        }
    })
}

pub unsafe fn cuda_device_enable_peer_access(
    sym: Sym,
    real: cudaDeviceEnablePeerAccess::Real,
    peer: c_int,
    flags: c_uint,
) -> c_int {
    // The runtime retains the peer device's primary context (creating it when this process
    // had none there): memory on the peer that the current device's figure cannot show.
    measured(
        sym,
        || real(peer, flags),
        |l, m| {
            if m.rc == 0 {
                if let Some(bytes) = m.delta {
                    l.driver_cost_at(m.dev, api(sym), bytes, m.site, Some(m.start_us));
                }
                l.peer_access(peer, api(sym), m.dev, m.start_us);
            }
        },
    )
}

pub unsafe fn cu_ctx_enable_peer_access(
    sym: Sym,
    real: cuCtxEnablePeerAccess::Real,
    peer: CUcontext,
    flags: c_uint,
) -> c_int {
    cost(sym, || real(peer, flags))
}

/// Retaining a primary context creates it the first time: its cost can only be measured
/// when a context of the same device was current around the call (the figure is the
/// current device's); otherwise it shows as untracked on `dev`.
pub unsafe fn cu_device_primary_ctx_retain(
    sym: Sym,
    real: cuDevicePrimaryCtxRetain::Real,
    pctx: *mut CUcontext,
    dev: CUdevice,
) -> c_int {
    measured(
        sym,
        || real(pctx, dev),
        |l, m| {
            if let (0, Some(bytes), true) = (m.rc, m.delta, m.dev == dev) {
                l.driver_cost_at(dev, api(sym), bytes, m.site, Some(m.start_us));
            }
        },
    )
}

/// A new context on `dev`, made current by the driver. The free-memory figure is per device:
/// the cost is measured only when a context on the same device was current before (a second
/// context next to the primary one); the first context on a device has nothing to measure
/// against and shows as untracked, like the primary context's.
fn ctx_create(sym: Sym, dev: CUdevice, call: impl FnOnce() -> c_int) -> c_int {
    let depth = Depth::enter();
    if !depth.outer {
        return call();
    }
    let before = if matches!(device_of(sym), Current::Device(d) if d == dev) { measure_free() } else { None };
    let rc = call();
    let after = if rc == 0 && before.is_some() { measure_free() } else { None };
    record(api(sym), |l| {
        if let (Some((b, _)), Some((a, _))) = (before, after) {
            l.driver_cost(dev, api(sym), b as i64 - a as i64);
        }
    });
    rc
}

pub unsafe fn cu_ctx_create_v2(
    sym: Sym,
    real: cuCtxCreate_v2::Real,
    p: *mut CUcontext,
    f: c_uint,
    d: CUdevice,
) -> c_int {
    ctx_create(sym, d, || real(p, f, d))
}

pub unsafe fn cu_ctx_create_v3(
    sym: Sym,
    real: cuCtxCreate_v3::Real,
    p: *mut CUcontext,
    params: VoidPtr,
    n: c_int,
    f: c_uint,
    d: CUdevice,
) -> c_int {
    ctx_create(sym, d, || real(p, params, n, f, d))
}

/// `cuCtxCreate_v4` (12.5): what `cuCtxCreate` means in CUDA 13's cuda.h.
pub unsafe fn cu_ctx_create_v4(
    sym: Sym,
    real: cuCtxCreate_v4::Real,
    p: *mut CUcontext,
    params: VoidPtr,
    f: c_uint,
    d: CUdevice,
) -> c_int {
    ctx_create(sym, d, || real(p, params, f, d))
}

pub unsafe fn cu_module_load(sym: Sym, real: cuModuleLoad::Real, m: *mut CUmodule, f: *const c_char) -> c_int {
    cost(sym, || real(m, f))
}

pub unsafe fn cu_module_load_data(
    sym: Sym,
    real: cuModuleLoadData::Real,
    m: *mut CUmodule,
    image: *const c_void,
) -> c_int {
    cost(sym, || real(m, image))
}

pub unsafe fn cu_module_load_data_ex(
    sym: Sym,
    real: cuModuleLoadDataEx::Real,
    m: *mut CUmodule,
    image: *const c_void,
    n: c_uint,
    options: *mut c_int,
    values: *mut VoidPtr,
) -> c_int {
    cost(sym, || real(m, image, n, options, values))
}

/// `cuLibraryLoadData` and `cuLibraryLoadFromFile` (the file name is the same pointer argument).
#[allow(clippy::too_many_arguments)]
pub unsafe fn cu_library_load_data(
    sym: Sym,
    real: cuLibraryLoadData::Real,
    lib: *mut CUlibrary,
    code: *const c_void,
    jit_options: *mut c_int,
    jit_values: *mut VoidPtr,
    n_jit: c_uint,
    lib_options: *mut c_int,
    lib_values: *mut VoidPtr,
    n_lib: c_uint,
) -> c_int {
    let rc = cost(sym, || real(lib, code, jit_options, jit_values, n_jit, lib_options, lib_values, n_lib));
    if rc == 0 {
        // Lazy loading: its memory is taken where it is first used (`lazy`).
        super::lazy::library_loaded(sym, lib, code);
    }
    rc
}
