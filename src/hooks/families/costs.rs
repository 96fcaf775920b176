//! Calls whose device memory the driver takes without an allocation the program sees:
//! peer access, module and library loads, primary context creation. Each is bracketed
//! by the driver's free-memory figure; the delta is recorded per API (approximate).

use super::{api, measured};
use crate::hooks::table::*;
use crate::hooks::types::*;
use libc::{c_char, c_int, c_uint, c_void};

fn cost(sym: Sym, call: impl FnOnce() -> c_int) -> c_int {
    measured(sym, call, |l, rc, dev, delta, start_us| {
        if let (0, Some(bytes)) = (rc, delta) {
            l.driver_cost_since(dev, api(sym), bytes, start_us);
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
        |l, rc, dev, delta, start_us| {
            if rc == 0 {
                if let Some(bytes) = delta {
                    l.driver_cost_since(dev, api(sym), bytes, start_us);
                }
                l.peer_access(peer, api(sym), dev, start_us);
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
/// when another context of the thread was current before (otherwise it shows as untracked).
pub unsafe fn cu_device_primary_ctx_retain(
    sym: Sym,
    real: cuDevicePrimaryCtxRetain::Real,
    pctx: *mut CUcontext,
    dev: CUdevice,
) -> c_int {
    measured(
        sym,
        || real(pctx, dev),
        |l, rc, _current, delta, start_us| {
            if let (0, Some(bytes)) = (rc, delta) {
                l.driver_cost_since(dev, api(sym), bytes, start_us);
            }
        },
    )
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
    cost(sym, || real(lib, code, jit_options, jit_values, n_jit, lib_options, lib_values, n_lib))
}
