//! Hook implementations, one file per API family. Each function receives the table row
//! (`Sym`), the real function, and the C arguments; it forwards first and records after
//! (frees: remove first, see [`free`]). Shared shapes live here.

pub mod alloc;
pub mod costs;
pub mod graphs;
pub mod host;
pub mod info;
pub mod ipc;
pub mod vmm;

use super::real::{current_device, measure_free};
use super::table::{Sym, TABLE};
use super::types::error_name;
use super::{record, Depth};
use crate::ledger::{Facts, Freed, MemKind};
use libc::c_int;

/// Exported name of a row: the `api` recorded in the report.
#[inline]
pub(crate) fn api(sym: Sym) -> &'static str {
    TABLE[sym as usize].name
}

/// Forward an allocation of `bytes`; the outermost call records the pointer `result()`
/// reads back on success, or the failure with the ledger at that moment.
#[inline]
pub(crate) fn allocation(
    sym: Sym,
    mem: MemKind,
    bytes: u64,
    call: impl FnOnce() -> c_int,
    result: impl FnOnce() -> Option<(u64, u64)>,
) -> c_int {
    let depth = Depth::enter();
    let rc = call();
    if depth.outer {
        let name = api(sym);
        record(name, |l| {
            let dev = current_device();
            if rc == 0 {
                if let Some((ptr, size)) = result() {
                    if ptr != 0 {
                        l.alloc(dev, ptr, size, mem, name, Facts::default());
                    }
                }
            } else {
                l.failure(dev, name, bytes, rc, error_name(TABLE[sym as usize].kind, rc));
            }
        });
    }
    rc
}

/// Forward a free. The record is removed BEFORE the real call: once the driver has the
/// address back it may hand it to another thread's allocation, whose record must not be
/// removed by ours. If the real free fails, the record is put back.
#[inline]
pub(crate) fn free(sym: Sym, ptr: u64, call: impl FnOnce() -> c_int) -> c_int {
    let depth = Depth::enter();
    if !depth.outer || ptr == 0 {
        return call();
    }
    let name = api(sym);
    let mut removed = Freed::Unknown;
    record(name, |l| removed = l.free(ptr, name));
    let rc = call();
    if rc != 0 {
        if let Freed::Known { dev, bytes } = removed {
            record(name, |l| {
                l.alloc(dev, ptr, bytes, MemKind::Device, name, Facts::default());
                l.note_warning(&format!("{name}(0x{ptr:x}) failed with {rc}; allocation kept"));
            });
        }
    }
    rc
}

/// Forward a call with hidden driver cost, bracketed by the driver's free-memory figure;
/// `after` records with (device, measured bytes if both measurements worked, start of the
/// measurement window on the ledger's `t_us` clock).
#[inline]
pub(crate) fn measured(
    sym: Sym,
    call: impl FnOnce() -> c_int,
    after: impl FnOnce(&crate::ledger::Ledger, c_int, i32, Option<i64>, u64),
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
    record(api(sym), |l| after(l, rc, current_device(), delta, start_us));
    rc
}

/// Forward a call and, when it is the outermost and succeeded, record.
#[inline]
pub(crate) fn on_success(sym: Sym, call: impl FnOnce() -> c_int, after: impl FnOnce(&crate::ledger::Ledger)) -> c_int {
    let depth = Depth::enter();
    let rc = call();
    if depth.outer && rc == 0 {
        record(api(sym), after);
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
