//! Hook implementations, one file per API family. Each function receives the table row
//! (`Sym`), the real function, and the C arguments; it forwards first and records after
//! (frees: remove first, see [`free`]). Shared shapes live here.

pub mod alloc;
pub mod costs;
pub mod graphs;
pub mod host;
pub mod info;
pub mod ipc;
pub mod lazy;
pub mod pools;
pub mod vmm;

use super::real::{current_device, device_of, measure_free, Current};
use super::table::{Sym, TABLE};
use super::types::error_name;
use super::Depth;
use crate::ledger::Ledger;
use crate::ledger::{Facts, MemKind};
use libc::c_int;

/// Exported name of a row: the `api` recorded in the report.
#[inline]
pub(crate) fn api(sym: Sym) -> &'static str {
    TABLE[sym as usize].name
}

/// Forward an allocation of `bytes` on the current device; the outermost call records the
/// pointer `result()` reads back on success, or the failure with the ledger at that moment,
/// and returns once the report holding the failure is on disk (`report::failed_allocation`).
#[inline]
pub(crate) fn allocation(
    sym: Sym,
    mem: MemKind,
    bytes: u64,
    call: impl FnOnce() -> c_int,
    result: impl FnOnce() -> Option<(u64, u64)>,
) -> c_int {
    allocation_on(sym, mem, bytes, |l, _| charged(l, current_device(sym)), call, result)
}

/// The device a call is charged to, or None (counted in `health.no_context_calls`) when
/// the calling thread had no current context: nothing is charged then.
#[inline]
pub(crate) fn charged(l: &Ledger, dev: Option<i32>) -> Option<i32> {
    if dev.is_none() {
        l.no_context();
    }
    dev
}

/// [`allocation`] on the device `place` names, asked after the call with the new pointer
/// (None when the call failed). `place` answering None means the memory is not device
/// memory (a host-located pool): nothing is recorded. `place` may call the real driver (no
/// lock is held then).
#[inline]
pub(crate) fn allocation_on(
    sym: Sym,
    mem: MemKind,
    bytes: u64,
    place: impl FnOnce(&crate::ledger::Ledger, Option<u64>) -> Option<i32>,
    call: impl FnOnce() -> c_int,
    result: impl FnOnce() -> Option<(u64, u64)>,
) -> c_int {
    let depth = Depth::enter();
    let rc = call();
    if depth.outer {
        let name = api(sym);
        // The call site, only for allocations that matter (and every failure): the small
        // path pays one comparison; a place the thread allocated from lately, a proof.
        let (site, repeated) = if rc != 0 {
            (crate::sites::capture(), false)
        } else if crate::sites::wanted(bytes) {
            crate::sites::capture_alloc(sym as usize)
        } else {
            (0, false)
        };
        let tag = depth.tag();
        let mut failed = false;
        depth.record(name, |l| {
            if rc == 0 {
                if let Some((ptr, size)) = result().filter(|&(ptr, _)| ptr != 0) {
                    if let Some(dev) = place(l, Some(ptr)) {
                        l.alloc_site(dev, ptr, size, mem, name, Facts { tag, site, ..Facts::default() }, repeated);
                    }
                }
            } else if let Some(dev) = place(l, None) {
                l.failure_at(dev, name, bytes, rc, error_name(TABLE[sym as usize].kind, rc), site);
                failed = true;
            }
        });
        if failed {
            crate::report::failed_allocation();
        }
    }
    rc
}

/// Forward a free. The record is removed BEFORE the real call: once the driver has the
/// address back it may hand it to another thread's allocation, whose record must not be
/// removed by ours. If the real free fails, the record is put back exactly as it was.
#[inline]
pub(crate) fn free(sym: Sym, ptr: u64, call: impl FnOnce() -> c_int) -> c_int {
    if ptr == 0 {
        // Frees nothing (often a context initialisation); calls beneath it stay nested.
        let _depth = Depth::enter();
        return call();
    }
    undoable(
        sym,
        |l| l.free_take(ptr),
        call,
        |l, rc, t| {
            l.restore(t);
            l.note_warning(&format!("{}(0x{ptr:x}) failed with {rc}; allocation kept", api(sym)));
        },
    )
}

/// Forward a call that ends a lifetime (a VMM release or unmap): recorded BEFORE the real
/// call, for the reason [`free`] gives, and undone if the call fails.
#[inline]
pub(crate) fn undoable<U>(
    sym: Sym,
    begin: impl FnOnce(&crate::ledger::Ledger) -> Option<U>,
    call: impl FnOnce() -> c_int,
    undo: impl FnOnce(&crate::ledger::Ledger, c_int, U),
) -> c_int {
    let depth = Depth::enter();
    if !depth.outer {
        return call();
    }
    let mut change = None;
    depth.record(api(sym), |l| change = begin(l));
    let rc = call();
    if rc != 0 {
        if let Some(c) = change {
            depth.record(api(sym), |l| undo(l, rc, c));
        }
    }
    rc
}

/// What a measured call records: result, device, measured bytes (if both measurements
/// worked) and the call site.
pub(crate) struct Measured {
    pub rc: c_int,
    /// The device of the calling thread's current context after the call.
    pub dev: i32,
    pub delta: Option<i64>,
    pub site: u32,
    /// When the free-memory figure before the call was read (`Ledger::t_us`).
    pub start_us: u64,
}

/// Forward a call with hidden driver cost, bracketed by the driver's free-memory figure;
/// `after` records what was measured, with the call site and the start of the measurement
/// window on the ledger's `t_us` clock. With no context current after the call (cudart
/// loading its modules during its own initialisation) there is no device to charge and no
/// free memory to measure: the call is counted (`health.no_context_calls`) and nothing else.
#[inline]
pub(crate) fn measured(
    sym: Sym,
    call: impl FnOnce() -> c_int,
    after: impl FnOnce(&crate::ledger::Ledger, Measured),
) -> c_int {
    let depth = Depth::enter();
    if !depth.outer {
        return call();
    }
    let start_us = crate::ledger::global().t_us();
    let before = measure_free();
    let rc = call();
    let later = measure_free();
    let delta = match (before, later) {
        (Some((b, _)), Some((a, _))) => Some(b as i64 - a as i64),
        _ => None,
    };
    let dev = device_of(sym);
    let site = if let Current::Device(_) = dev { crate::sites::capture() } else { 0 };
    depth.record(api(sym), |l| match dev {
        Current::Device(dev) => after(l, Measured { rc, dev, delta, site, start_us }),
        Current::NoContext => l.no_context(),
        Current::Unknowable => {}
    });
    rc
}

/// Forward a call and, when it is the outermost and succeeded, record.
#[inline]
pub(crate) fn on_success(sym: Sym, call: impl FnOnce() -> c_int, after: impl FnOnce(&crate::ledger::Ledger)) -> c_int {
    let depth = Depth::enter();
    let rc = call();
    if depth.outer && rc == 0 {
        depth.record(api(sym), after);
    }
    rc
}

/// A machine word an out-parameter holds: a device pointer, a size, a host pointer.
pub(crate) trait Word: Copy {
    fn word(self) -> u64;
}
impl Word for u64 {
    fn word(self) -> u64 {
        self
    }
}
impl Word for usize {
    fn word(self) -> u64 {
        self as u64
    }
}
impl Word for *mut libc::c_void {
    fn word(self) -> u64 {
        self as u64
    }
}

/// Read an out-parameter the real function filled (None for a NULL out-pointer).
#[inline]
pub(crate) unsafe fn out<T: Word>(p: *const T) -> Option<u64> {
    if p.is_null() {
        None
    } else {
        Some((*p).word())
    }
}
