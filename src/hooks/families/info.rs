//! Free-memory queries: every one is a probe, with what the program was told.

use super::{api, out};
use crate::hooks::real::current_device;
use crate::hooks::table::*;
use crate::hooks::Depth;
use libc::c_int;

/// `cudaMemGetInfo` and `cuMemGetInfo_v2` (same ABI). Either out-pointer may be NULL:
/// the real function decides what that means; we read back only what it filled.
///
/// A nested call (the driver entry the runtime's query reaches) only forwards, in a few
/// instructions: the recording part is a separate function, so this one needs no frame.
#[inline]
pub unsafe fn mem_get_info(sym: Sym, real: cudaMemGetInfo::Real, free: *mut usize, total: *mut usize) -> c_int {
    let depth = Depth::enter();
    let rc = real(free, total);
    if depth.outer {
        record_probe(&depth, sym, rc, free, total);
    }
    rc
}

/// The outermost query's probe.
#[inline(never)]
unsafe fn record_probe(depth: &Depth, sym: Sym, rc: c_int, free: *mut usize, total: *mut usize) {
    let (f, t) = if rc == 0 { (out(free), out(total)) } else { (None, None) };
    // Who asked: the query an engine sizes its memory from. Engines repeat queries from
    // the same place: the thread's previous site is reused when the frames provably match.
    let dev = current_device(sym);
    let site = if dev.is_some() { crate::sites::capture_repeat(sym as usize) } else { (0, false) };
    depth.record(api(sym), |l| {
        // The probe also records the device's total. With no context current there is no
        // device the answer was about (the query failed): counted only.
        if let Some(dev) = super::charged(l, dev) {
            l.probe_site(dev, api(sym), f, t, rc, site);
        }
    });
    // The pool sized from this answer follows: written within tens of milliseconds.
    if rc == 0 {
        crate::report::free_memory_query();
    }
}
