//! Stream capture and graph instantiation. Allocations made while a capture is active on
//! a device (the captured stream's device) are flagged captured (category `graphs`);
//! instantiation costs driver memory.

use super::api;
use crate::hooks::real::stream_device;
use crate::hooks::table::*;
use crate::hooks::types::*;
use crate::hooks::{record, Depth};
use libc::{c_char, c_int, c_ulonglong, c_void};

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
    // On the stream's device: allocations there are the captured ones.
    super::on_success(sym, call, |l| {
        if let Some(dev) = super::charged(l, stream_device(sym, s as u64)) {
            l.capture_begin(dev, stream_key(s), api(sym))
        }
    })
}

/// `cuStreamBeginCapture` (v1, no mode) and its `_ptsz` form.
pub unsafe fn begin_capture(sym: Sym, real: cuStreamBeginCapture::Real, s: CUstream) -> c_int {
    begin(sym, s, || real(s))
}

/// `cudaStreamBeginCapture`, `cuStreamBeginCapture_v2` and their per-thread forms.
pub unsafe fn begin_capture_mode(sym: Sym, real: cuStreamBeginCapture_v2::Real, s: CUstream, mode: c_int) -> c_int {
    begin(sym, s, || real(s, mode))
}

/// `cuStreamBeginCaptureToGraph`, `cudaStreamBeginCaptureToGraph` (12.3) and their per-thread
/// forms: a capture into a graph the caller created; it ends with `cuStreamEndCapture`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn begin_capture_to_graph(
    sym: Sym,
    real: cuStreamBeginCaptureToGraph::Real,
    s: CUstream,
    g: CUgraph,
    deps: *const CUgraphNode,
    data: *const c_void,
    n: usize,
    mode: c_int,
) -> c_int {
    begin(sym, s, || real(s, g, deps, data, n, mode))
}

/// `cuStreamBeginRecaptureToGraph` (CUDA 13.3) and its per-thread form: capture again into an
/// existing graph; it ends with `cuStreamEndCapture`.
pub unsafe fn begin_recapture(
    sym: Sym,
    real: cuStreamBeginRecaptureToGraph::Real,
    s: CUstream,
    mode: c_int,
    g: CUgraph,
    callback: VoidPtr,
    user_data: VoidPtr,
) -> c_int {
    begin(sym, s, || real(s, mode, g, callback, user_data))
}

/// End of capture: the capture is over whatever the result (an invalidated capture ends
/// with an error).
pub unsafe fn end_capture(sym: Sym, real: cuStreamEndCapture::Real, s: CUstream, g: *mut CUgraph) -> c_int {
    let depth = Depth::enter();
    let rc = real(s, g);
    if depth.outer {
        record(api(sym), |l| {
            if let Some(dev) = super::charged(l, stream_device(sym, s as u64)) {
                l.capture_end(dev, stream_key(s), api(sym))
            }
        });
    }
    rc
}

/// Instantiation takes driver memory: one refused for lack of it (out of memory, 2 in both
/// the runtime's and the driver's codes) is a failed allocation of no size, like an IPC open,
/// and returns once the report holding it is on disk (`report::failed_allocation`).
fn instantiate(sym: Sym, call: impl FnOnce() -> c_int) -> c_int {
    let mut failed = false;
    let rc = super::measured(sym, call, |l, m| {
        if m.rc == 0 {
            l.graph_instantiate(m.dev, api(sym), m.delta);
            if let Some(bytes) = m.delta {
                l.driver_cost_at(m.dev, api(sym), bytes, m.site, Some(m.start_us));
            }
        } else if m.rc == 2 {
            let name = crate::hooks::types::error_name(TABLE[sym as usize].kind, m.rc);
            l.failure_at(m.dev, api(sym), 0, m.rc, name, m.site);
            failed = true;
        }
    });
    if failed {
        crate::report::failed_allocation();
    }
    rc
}

/// `cuGraphExecDestroy`, `cudaGraphExecDestroy`: what the instantiation took comes back. The
/// driver's figure is measured around the call like the instantiation's, so that a graph
/// thrown away (vLLM 0.33's `profile_cudagraph_memory` captures every size once into a
/// throwaway pool and destroys them before sizing) no longer reads as memory still held.
pub unsafe fn exec_destroy(sym: Sym, real: cuGraphExecDestroy::Real, e: CUgraphExec) -> c_int {
    super::measured(
        sym,
        || real(e),
        |l, m| {
            if m.rc == 0 {
                l.graph_exec_destroy(m.dev, api(sym), m.delta, m.site, Some(m.start_us));
            }
        },
    )
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

/// `cuGraphInstantiateWithParams`, `cudaGraphInstantiateWithParams` (12.0) and their per-thread
/// forms: the flags (and the result) travel in a parameter struct we do not read.
pub unsafe fn instantiate_params(
    sym: Sym,
    real: cuGraphInstantiateWithParams::Real,
    e: *mut CUgraphExec,
    g: CUgraph,
    params: VoidPtr,
) -> c_int {
    instantiate(sym, || real(e, g, params))
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
