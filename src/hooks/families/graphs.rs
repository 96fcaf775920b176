//! Stream capture and graph instantiation. Allocations made while a capture is active on
//! a device are flagged captured (category `graphs`); instantiation costs driver memory.

use super::api;
use crate::hooks::real::current_device;
use crate::hooks::table::*;
use crate::hooks::types::*;
use crate::hooks::{record, Depth};
use libc::{c_char, c_int, c_ulonglong};

/// Capture state is per stream; the legacy and per-thread default streams (handles 0, 1,
/// 2) are per thread, so they are keyed with the thread id.
fn stream_key(s: CUstream) -> u64 {
    let v = s as u64;
    if v <= 2 {
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u64;
        (tid << 2) | v
    } else {
        v
    }
}

fn begin(sym: Sym, s: CUstream, call: impl FnOnce() -> c_int) -> c_int {
    super::on_success(sym, call, |l| l.capture_begin(current_device(), stream_key(s), api(sym)))
}

/// `cuStreamBeginCapture` (v1, no mode) and its `_ptsz` form.
pub unsafe fn begin_capture(sym: Sym, real: cuStreamBeginCapture::Real, s: CUstream) -> c_int {
    begin(sym, s, || real(s))
}

/// `cudaStreamBeginCapture`, `cuStreamBeginCapture_v2` and their per-thread forms.
pub unsafe fn begin_capture_mode(sym: Sym, real: cuStreamBeginCapture_v2::Real, s: CUstream, mode: c_int) -> c_int {
    begin(sym, s, || real(s, mode))
}

/// End of capture: the capture is over whatever the result (an invalidated capture ends
/// with an error).
pub unsafe fn end_capture(sym: Sym, real: cuStreamEndCapture::Real, s: CUstream, g: *mut CUgraph) -> c_int {
    let depth = Depth::enter();
    let rc = real(s, g);
    if depth.outer {
        record(api(sym), |l| l.capture_end(current_device(), stream_key(s), api(sym)));
    }
    rc
}

fn instantiate(sym: Sym, call: impl FnOnce() -> c_int) -> c_int {
    super::measured(sym, call, |l, rc, dev, delta, start_us| {
        if rc == 0 {
            l.graph_instantiate(dev, api(sym), delta);
            if let Some(bytes) = delta {
                l.driver_cost_since(dev, api(sym), bytes, start_us);
            }
        }
    })
}

/// `cudaGraphInstantiate` (12.x), `cudaGraphInstantiateWithFlags`, `cuGraphInstantiateWithFlags`.
pub unsafe fn instantiate_flags(
    sym: Sym,
    real: cuGraphInstantiateWithFlags::Real,
    e: *mut CUgraphExec,
    g: CUgraph,
    f: c_ulonglong,
) -> c_int {
    instantiate(sym, || real(e, g, f))
}

/// `cuGraphInstantiate` (10000) and `cuGraphInstantiate_v2` (11000): error node + log.
pub unsafe fn instantiate_log(
    sym: Sym,
    real: cuGraphInstantiate_v2::Real,
    e: *mut CUgraphExec,
    g: CUgraph,
    node: *mut CUgraphNode,
    log: *mut c_char,
    size: usize,
) -> c_int {
    instantiate(sym, || real(e, g, node, log, size))
}
