//! CUDA IPC: exporting marks the containing allocation (category `ipc`); opening a peer's
//! handle counts an imported buffer (never local memory) and the driver memory it cost.

use super::{api, measured, on_success, out};
use crate::hooks::real::address_range_size;
use crate::hooks::table::*;
use crate::hooks::types::*;
use libc::{c_int, c_uint};

fn export(sym: Sym, ptr: u64, call: impl FnOnce() -> c_int) -> c_int {
    on_success(sym, call, |l| {
        if !l.mark_exported_by(ptr, api(sym)) {
            l.note_warning(&format!("{}: 0x{ptr:x} is not a tracked allocation", api(sym)));
        }
    })
}

pub unsafe fn cuda_ipc_get_mem_handle(
    sym: Sym,
    real: cudaIpcGetMemHandle::Real,
    h: *mut IpcMemHandle,
    p: VoidPtr,
) -> c_int {
    export(sym, p as u64, || real(h, p))
}

pub unsafe fn cu_ipc_get_mem_handle(
    sym: Sym,
    real: cuIpcGetMemHandle::Real,
    h: *mut IpcMemHandle,
    p: CUdeviceptr,
) -> c_int {
    export(sym, p, || real(h, p))
}

/// Opening: bracketed by free-memory measurements (peer mappings cost driver memory). A
/// failed open returns once the report holding it is on disk (`report::failed_allocation`).
fn open(sym: Sym, opened: impl FnOnce() -> Option<u64>, call: impl FnOnce() -> c_int) -> c_int {
    let mut failed = false;
    let rc = measured(sym, call, |l, m| {
        let name = api(sym);
        if m.rc != 0 {
            l.failure_at(m.dev, name, 0, m.rc, error_name(TABLE[sym as usize].kind, m.rc), m.site);
            failed = true;
            return;
        }
        if let Some(ptr) = opened() {
            l.ipc_import(m.dev, ptr, address_range_size(ptr), name);
        }
        if let Some(bytes) = m.delta {
            l.driver_cost_at(m.dev, name, bytes, m.site, Some(m.start_us));
        }
    });
    if failed {
        crate::report::failed_allocation();
    }
    rc
}

pub unsafe fn cuda_ipc_open_mem_handle(
    sym: Sym,
    real: cudaIpcOpenMemHandle::Real,
    p: *mut VoidPtr,
    h: IpcMemHandle,
    flags: c_uint,
) -> c_int {
    open(sym, || unsafe { out(p) }, || real(p, h, flags))
}

pub unsafe fn cu_ipc_open_mem_handle(
    sym: Sym,
    real: cuIpcOpenMemHandle_v2::Real,
    p: *mut CUdeviceptr,
    h: IpcMemHandle,
    flags: c_uint,
) -> c_int {
    open(sym, || unsafe { out(p) }, || real(p, h, flags))
}

pub unsafe fn cuda_ipc_close_mem_handle(sym: Sym, real: cudaIpcCloseMemHandle::Real, p: VoidPtr) -> c_int {
    on_success(
        sym,
        || real(p),
        |l| {
            l.ipc_close(p as u64);
        },
    )
}

pub unsafe fn cu_ipc_close_mem_handle(sym: Sym, real: cuIpcCloseMemHandle::Real, p: CUdeviceptr) -> c_int {
    on_success(
        sym,
        || real(p),
        |l| {
            l.ipc_close(p);
        },
    )
}
