//! Page-locked host memory: pinned allocations and registrations (a separate ledger).

use super::{api, on_success, out, undoable};
use crate::hooks::table::*;
use crate::hooks::types::*;
use crate::hooks::Depth;
use libc::{c_int, c_uint};

/// Forward a pinned allocation and record it in the host ledger on success.
#[inline]
fn pinned(sym: Sym, p: *mut VoidPtr, size: usize, call: impl FnOnce() -> c_int) -> c_int {
    on_success(sym, call, |l| {
        if let Some(ptr) = unsafe { out(p) } {
            if ptr != 0 {
                l.host_alloc(ptr, size as u64, api(sym));
            }
        }
    })
}

pub unsafe fn cuda_malloc_host(sym: Sym, real: cudaMallocHost::Real, p: *mut VoidPtr, size: usize) -> c_int {
    pinned(sym, p, size, || real(p, size))
}

pub unsafe fn cuda_host_alloc(
    sym: Sym,
    real: cudaHostAlloc::Real,
    p: *mut VoidPtr,
    size: usize,
    flags: c_uint,
) -> c_int {
    pinned(sym, p, size, || real(p, size, flags))
}

pub unsafe fn cu_mem_host_alloc(
    sym: Sym,
    real: cuMemHostAlloc::Real,
    p: *mut VoidPtr,
    size: usize,
    flags: c_uint,
) -> c_int {
    pinned(sym, p, size, || real(p, size, flags))
}

pub unsafe fn cu_mem_alloc_host(sym: Sym, real: cuMemAllocHost_v2::Real, p: *mut VoidPtr, size: usize) -> c_int {
    pinned(sym, p, size, || real(p, size))
}

/// `cudaFreeHost`/`cuMemFreeHost` (same ABI). Removed first, as device frees are, and put
/// back if the real free fails.
pub unsafe fn free_host(sym: Sym, real: cudaFreeHost::Real, p: VoidPtr) -> c_int {
    if p.is_null() {
        let _depth = Depth::enter();
        return real(p);
    }
    let ptr = p as u64;
    undoable(
        sym,
        |l| l.host_take(ptr),
        || real(p),
        |l, rc, bytes| {
            l.host_restore(ptr, bytes);
            l.note_warning(&format!("{}(0x{ptr:x}) failed with {rc}; allocation kept", api(sym)));
        },
    )
}

/// `cudaHostRegister`/`cuMemHostRegister_v2` (same ABI).
pub unsafe fn host_register(sym: Sym, real: cudaHostRegister::Real, p: VoidPtr, size: usize, flags: c_uint) -> c_int {
    on_success(sym, || real(p, size, flags), |l| l.host_register(p as u64, size as u64, api(sym)))
}

/// `cudaHostUnregister`/`cuMemHostUnregister` (same ABI).
pub unsafe fn host_unregister(sym: Sym, real: cudaHostUnregister::Real, p: VoidPtr) -> c_int {
    on_success(
        sym,
        || real(p),
        |l| {
            l.host_unregister(p as u64);
        },
    )
}
