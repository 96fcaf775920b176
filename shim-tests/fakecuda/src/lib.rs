//! Simulated CUDA driver (`libcuda.so.1`) for testing culedger without a GPU.
//!
//! The crate builds a cdylib with soname `libcuda.so.1` exporting the driver entry points listed in
//! [`getproc::TABLE`] with the exact C signatures of `cuda.h` 12.9, and an rlib so tests can call
//! the same `extern "C"` functions directly.
//!
//! * Devices, memory and hidden driver costs come from `FAKECUDA_*` variables ([`config`]).
//! * Device usage is shared by all processes of one simulated machine through `/dev/shm` ([`shm`]).
//! * Device pointers are fake addresses, validated strictly against a process table ([`state`]);
//!   managed and pinned host memory are real host memory.
//! * `cuGetProcAddress`/`cuGetProcAddress_v2` resolve base names by version and stream flavour from
//!   one static table checked against `cudaTypedefs.h` ([`getproc`]).
//! * `FAKECUDA_TRACE=<file>` appends one line per resolution and init event ([`trace`]), and
//!   with `FAKECUDA_TRACE_ERRORS=1` one per entry point that returned an error, with
//!   `FAKECUDA_TRACE_CHARGES=1` one per hidden cost charged (which entry point, which handle).
//!
//! Every entry point is panic-free towards C: bodies run under `catch_unwind` and a panic becomes
//! `CUDA_ERROR_UNKNOWN`. See `shim-tests/README.md`, section "Fake driver".
#![allow(non_snake_case, clippy::missing_safety_doc)]

pub mod config;
pub mod shm;
pub mod state;
pub mod trace;
pub mod types;

/// Defines `#[no_mangle] extern "C"` entry points whose body returns [`state::R`]: `Ok` becomes
/// `CUDA_SUCCESS`, `Err(code)` becomes `code`, and a panic becomes `CUDA_ERROR_UNKNOWN`.
macro_rules! entry {
    ($( $(#[$m:meta])* fn $name:ident ( $($a:ident : $t:ty),* $(,)? ) $body:block )*) => {
        $(
            $(#[$m])*
            #[no_mangle]
            pub unsafe extern "C" fn $name($($a: $t),*) -> $crate::types::CUresult {
                let _entry = $crate::trace::Entry::enter(stringify!($name));
                $crate::trace::failed(stringify!($name), $crate::guard(move || -> $crate::state::R { $body }))
            }
        )*
    };
}

pub mod api;
pub mod getproc;

use types::{CUresult, CUDA_ERROR_UNKNOWN, CUDA_SUCCESS};

/// Runs an entry point body: never lets a panic cross into C.
pub fn guard(f: impl FnOnce() -> state::R) -> CUresult {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => CUDA_ERROR_UNKNOWN,
    }
}

/// One warning line on stderr (never fails, never panics).
pub fn warn(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "fakecuda: warning: {msg}");
}

/// Writes `v` through a C out-pointer, refusing NULL with `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
/// `p` must be NULL or valid for a write of `T`.
pub unsafe fn out<T>(p: *mut T, v: T) -> state::R {
    if p.is_null() {
        return Err(types::CUDA_ERROR_INVALID_VALUE);
    }
    p.write(v);
    Ok(())
}

/// Process exit: give this process's device usage back to the machine at once (processes that die
/// without running destructors are reclaimed by the liveness sweep instead).
extern "C" fn fakecuda_fini() {
    let _ = std::panic::catch_unwind(state::at_exit);
}

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fakecuda_fini;
