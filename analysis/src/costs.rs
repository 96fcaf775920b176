//! Hidden driver costs, de-noised at analysis time.
//!
//! The interposer measures a call's hidden cost as the device's free memory before minus
//! after the call (`events[]` of kind `driver_cost`: `bytes`, the window `t0_us`..`t_us`).
//! That is a device-wide difference: whatever another process of the run did on the device
//! inside the window lands in it too (a peer rank creating its context while this rank
//! opens an IPC handle made one of six identical runs charge `cudaIpcOpenMemHandle` 516 MiB
//! instead of 4 MiB). For each measured call this module subtracts what the run's other
//! processes demonstrably did on the same device inside the window, by absolute time:
//!
//! 1. their tracked allocations and frees (the change of their timelines over the window);
//! 2. their own measured costs whose windows lie inside this one;
//! 3. a context they created on this device inside the window: the first record of a
//!    process on a device being a `peer_access` event (enabling peer access creates the
//!    process's context on the peer device, which no figure of its own device shows). Its
//!    size is not measured anywhere, so it is estimated as the device's context size: the
//!    smallest untracked memory at a process's first query on the device (a process alone
//!    on the device then holds its context and nothing else untracked). It is subtracted
//!    only when the measurement evidently contains it (at least 95% of the estimate remains
//!    after 1 and 2, and the call has room for it: [`context_holders`]).
//!
//! Times of different processes are compared within [`CLOCK_TOLERANCE_US`]: each writer's
//! clock follows the monotonic clock to within a few microseconds (src/ledger/clock.rs), so a
//! context another process created 2 µs after this window closed, by the two clocks, may
//! still lie inside it (and the measurement then shows it).
//!
//! What cannot be decided is marked `uncertain`: another process's measured window that
//! only partly overlaps, or a context created in the window when no estimate exists or the
//! measurement is smaller than the estimate. Calls beyond the report's bounded event list
//! (or from writers without windows) are taken as measured.

use crate::groups::{DeviceGroup, Member};
use crate::model::Event;

/// What was subtracted from a measured call, or left uncertain (the CLI words it). Times
/// are absolute (µs since the epoch); `pid` is the other process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CostNote {
    /// The other process's tracked memory moved by `bytes` (negative: freed) during the call
    /// that ended at `at_us`.
    Moved { pid: i64, bytes: i64, at_us: i64 },
    /// Its own measured call (`api`) lay inside this window: `bytes` subtracted.
    Inside { pid: i64, api: String, bytes: i64 },
    /// Its measured call (`api`, ended at `at_us`) only partly overlaps.
    Overlaps { pid: i64, api: String, at_us: i64 },
    /// Its context, created here by peer access that ended at `at_us`, subtracted at the
    /// estimated size `bytes` (see [`ContextEstimate`]).
    Context { pid: i64, bytes: i64, at_us: i64, estimate: ContextEstimate },
    /// It created its context here (peer access that ended at `at_us`) during this call,
    /// size unknown.
    ContextUnknown { pid: i64, at_us: i64 },
    /// `calls` more calls than the report's event list kept: taken as measured.
    NotListed { calls: i64 },
}

/// The estimated size of a context on a device: the bytes, and the process whose first
/// query showed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ContextEstimate {
    pub bytes: i64,
    pub pid: i64,
}

/// Hidden driver costs of one process and API on one device.
#[derive(Debug, Clone)]
pub struct CostRow {
    pub pid: i64,
    pub label: String,
    pub api: String,
    pub calls: i64,
    /// After subtracting what other processes did inside the measurement windows.
    pub bytes: i64,
    /// As measured (free before minus free after, summed).
    pub measured_bytes: i64,
    /// Part of the measurement could not be attributed either way.
    pub uncertain: bool,
    /// What was subtracted or left uncertain, in the order found.
    pub notes: Vec<CostNote>,
}

/// One measured call.
#[derive(Clone)]
pub struct Call<'a> {
    pub member: Member<'a>,
    pub api: &'a str,
    /// The window in absolute µs: start (when recorded) and end.
    pub start_us: Option<i64>,
    pub end_us: i64,
    pub measured: i64,
    /// Calls the event stands for (alike calls folded by the writer once its list was full).
    pub calls: i64,
}

/// The size of a measured event: `bytes`, or the `N bytes` of its detail (older writers).
fn event_bytes(e: &Event) -> Option<i64> {
    e.bytes.or_else(|| e.detail.strip_suffix(" bytes").and_then(|n| n.trim().parse().ok()))
}

/// The name a measured call is shown under: its entry point, or for the lazy loading of a
/// library into a context the writer's own words (`detail`: `N bytes: lazy loading of
/// libtorch_cuda.so (first used by cuLaunchKernel)`), so every table names the library.
fn call_label(e: &Event) -> &str {
    match e.detail.split_once(": ") {
        Some((_, words)) if words.starts_with("lazy loading of ") => words,
        _ => e.api.as_str(),
    }
}

/// The label [`calls_of`] gives the calls a report's `driver_costs[]` entry sums.
pub fn cost_label(c: &crate::model::DriverCost) -> String {
    match &c.library {
        Some(l) => format!("lazy loading of {l} (first used by {})", c.api),
        None => c.api.clone(),
    }
}

/// What an API's hidden cost is, for grouping costs in sentences (the CLI words each class:
/// `peer access`, `IPC opens`, ...): APIs of one class are one cost there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiClass {
    IpcOpens,
    PeerAccess,
    GraphInstantiation,
    ModuleLoads,
    Contexts,
    MemoryPools,
    /// Any other API, by its name.
    Other(String),
}

impl ApiClass {
    /// The class of `api` (`cuIpcOpenMemHandle_v2`: IPC opens).
    pub fn of(api: &str) -> ApiClass {
        let a = api.trim_end_matches("_v2").trim_end_matches("_ptsz");
        if a.contains("IpcOpenMemHandle") {
            ApiClass::IpcOpens
        } else if a.contains("EnablePeerAccess") {
            ApiClass::PeerAccess
        } else if a.contains("GraphInstantiate") || a.contains("GraphUpload") {
            ApiClass::GraphInstantiation
        } else if a.contains("ModuleLoad") || a.contains("LibraryLoad") {
            ApiClass::ModuleLoads
        } else if a.contains("CtxCreate") || a.contains("PrimaryCtxRetain") || a.contains("SetDevice") {
            ApiClass::Contexts
        } else if a.contains("MemPool") || a.contains("MemAllocAsync") {
            ApiClass::MemoryPools
        } else {
            ApiClass::Other(api.to_string())
        }
    }
}

/// The measured calls of one process on the device, in record order.
pub fn calls_of<'a>(m: Member<'a>) -> Vec<Call<'a>> {
    m.dev
        .events
        .iter()
        .filter(|e| e.kind == "driver_cost")
        .filter_map(|e| {
            Some(Call {
                member: m,
                api: call_label(e),
                start_us: e.t0_us.map(|t| m.abs_of(t)),
                end_us: m.abs_us(e),
                measured: event_bytes(e)?,
                calls: e.calls.unwrap_or(1).max(1),
            })
        })
        .collect()
}

/// Windows in which a process created its context on the device through peer access:
/// `peer_access` events that are the process's first record on the device.
fn context_windows<'a>(m: Member<'a>) -> Vec<(i64, i64)> {
    let first = m.first_us();
    m.dev
        .events
        .iter()
        .filter(|e| e.kind == "peer_access")
        .filter_map(|e| {
            let (start, end) = (m.abs_of(e.t0_us?), m.abs_us(e));
            (first == Some(start)).then_some((start, end))
        })
        .collect()
}

/// The estimated size of a context on this device and where it comes from: the smallest
/// positive untracked memory at a process's first query on the device.
pub fn context_estimate(g: &DeviceGroup) -> Option<ContextEstimate> {
    g.members
        .iter()
        .filter_map(|m| {
            let p = crate::model::first_recorded(&m.dev.probes)?;
            let r = g.reading(*m, p)?;
            (r.untracked_bytes > 0).then(|| (r.untracked_bytes, m.pid()))
        })
        .min()
        .map(|(bytes, pid)| ContextEstimate { bytes, pid })
}

fn overlaps(a: (i64, i64), b: (i64, i64)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// How far apart two processes' clocks may read one instant: each follows the monotonic
/// clock to within a few microseconds (the counter's calibration lines, src/ledger/clock.rs,
/// and the wall-clock origin of `start_unix_us`), so twice that with a margin.
pub const CLOCK_TOLERANCE_US: i64 = 20;

/// Whether a window of this process and one of another process may overlap, given the clocks.
fn may_overlap(a: (i64, i64), b: (i64, i64)) -> bool {
    overlaps((a.0 - CLOCK_TOLERANCE_US, a.1 + CLOCK_TOLERANCE_US), b)
}

/// One call, de-noised: (bytes, uncertain, notes).
///
/// A folded event (`calls` > 1: alike calls the writer folded once its list was full) spans
/// from its first call's start to its last call's end, and its size is the sum of the calls'
/// own windows, not the drop across that span: what other processes did in the gaps between
/// its calls is not in it, so it is taken as measured, like a call without a window.
pub fn denoise(g: &DeviceGroup, call: &Call, estimate: Option<&ContextEstimate>) -> (i64, bool, Vec<CostNote>) {
    let Some(start) = call.start_us.filter(|_| call.calls <= 1) else {
        return (call.measured, false, Vec::new());
    };
    let window = (start, call.end_us);
    let (mut rest, mut uncertain, mut notes) = (call.measured, false, Vec::new());
    for o in g.members.iter().filter(|o| !std::ptr::eq(o.report, call.member.report)) {
        let who = o.pid();
        let total = |at: i64| o.live_at(at).iter().sum::<i64>();
        let moved = total(window.1) - total(window.0);
        if moved != 0 {
            rest -= moved;
            notes.push(CostNote::Moved { pid: who, bytes: moved, at_us: call.end_us });
        }
        for oc in calls_of(*o) {
            let Some(os) = oc.start_us else { continue };
            if !overlaps(window, (os, oc.end_us)) {
                continue;
            }
            if os >= window.0 && oc.end_us <= window.1 {
                rest -= oc.measured;
                notes.push(CostNote::Inside { pid: who, api: oc.api.to_string(), bytes: oc.measured });
            } else {
                uncertain = true;
                notes.push(CostNote::Overlaps { pid: who, api: oc.api.to_string(), at_us: oc.end_us });
            }
        }
        for ctx in context_windows(*o) {
            if !may_overlap(window, ctx) {
                continue;
            }
            let inside = ctx.0 >= window.0 && ctx.1 <= window.1;
            match estimate {
                // A context is charged once: only the measured call that holds it subtracts it.
                Some(est) if rest * 100 >= est.bytes * 95 && holds_context(g, call, o.report, ctx, est.bytes) => {
                    rest -= est.bytes;
                    notes.push(CostNote::Context { pid: who, bytes: est.bytes, at_us: ctx.1, estimate: *est });
                }
                Some(_) => {}
                None if inside => {
                    uncertain = true;
                    notes.push(CostNote::ContextUnknown { pid: who, at_us: ctx.1 });
                }
                None => {}
            }
        }
    }
    (rest, uncertain, notes)
}

/// Whether `call` is the measured call that holds the context `o` created in `ctx`
/// ([`context_holders`]).
fn holds_context(g: &DeviceGroup, call: &Call, o: &crate::model::Report, ctx: (i64, i64), size: i64) -> bool {
    context_holders(g, size).into_iter().any(|(owner, window, h)| {
        std::ptr::eq(owner, o)
            && window == ctx
            && std::ptr::eq(h.member.report, call.member.report)
            && h.end_us == call.end_us
            && h.api == call.api
    })
}

/// Which measured call holds each context another process created on the device (contexts
/// of `size` bytes): (the context's process, its window, the call). A call's excess is its
/// measurement minus the smallest measurement of its API on the device (what a call of that
/// API costs by itself), or its whole measurement when it is the only call of its API; it
/// holds as many contexts as whole ones fit in its excess (95% of one counts), and each
/// context is charged to one call at most. Contexts created wholly inside another
/// process's measured window are placed first (that measurement holds them for certain),
/// then the others in time order; each goes to the call whose window overlaps it (within
/// the clocks' tolerance) and still has room: one that contains it first, then the largest
/// excess, ties to the earliest. A context no call has room for was in no measurement (a
/// peer's context created just before a window opened, whose own window only overlaps it).
fn context_holders<'g, 'a>(
    g: &'g DeviceGroup<'a>,
    size: i64,
) -> Vec<(&'a crate::model::Report, (i64, i64), Call<'a>)> {
    let calls: Vec<Call<'a>> = g.members.iter().flat_map(|m| calls_of(*m)).collect();
    let mut smallest: std::collections::BTreeMap<&str, (i64, usize)> = std::collections::BTreeMap::new();
    for c in &calls {
        let e = smallest.entry(c.api).or_insert((c.measured, 0));
        e.0 = e.0.min(c.measured);
        e.1 += 1;
    }
    let excess: Vec<i64> = calls
        .iter()
        .map(|c| match smallest.get(c.api) {
            Some(&(min, n)) if n > 1 => c.measured - min,
            _ => c.measured,
        })
        .collect();
    let mut room: Vec<i64> =
        excess.iter().map(|&e| if size > 0 && e > 0 { e.saturating_mul(100) / size.saturating_mul(95) } else { 0 }).collect();
    let window = |c: &Call| c.start_us.map(|s| (s, c.end_us));
    let contains = |c: &Call, w: (i64, i64)| window(c).is_some_and(|(s, e)| s <= w.0 && w.1 <= e);
    let mut ctxs: Vec<(&'a crate::model::Report, (i64, i64))> =
        g.members.iter().flat_map(|m| context_windows(*m).into_iter().map(move |w| (m.report, w))).collect();
    let certain = |o: &crate::model::Report, w: (i64, i64)| {
        calls.iter().any(|c| !std::ptr::eq(c.member.report, o) && contains(c, w))
    };
    ctxs.sort_by_key(|&(o, w)| (!certain(o, w), w));
    let mut out = Vec::new();
    for (o, w) in ctxs {
        let holder = calls
            .iter()
            .enumerate()
            .filter(|(i, c)| room[*i] > 0 && !std::ptr::eq(c.member.report, o))
            .filter(|(_, c)| window(c).is_some_and(|cw| may_overlap(cw, w)))
            .max_by_key(|(i, c)| (contains(c, w), excess[*i], std::cmp::Reverse(c.end_us)))
            .map(|(i, _)| i);
        if let Some(i) = holder {
            room[i] -= 1;
            out.push((o, w, calls[i].clone()));
        }
    }
    out
}

/// The sum of the de-noised hidden driver costs on a device.
pub fn total(g: &DeviceGroup) -> i64 {
    rows(g).iter().map(|r| r.bytes).sum()
}

/// Driver costs per API summed over the processes, de-noised: api -> (calls, bytes).
pub fn by_api(g: &DeviceGroup) -> std::collections::BTreeMap<String, (i64, i64)> {
    let mut map: std::collections::BTreeMap<String, (i64, i64)> = std::collections::BTreeMap::new();
    for c in rows(g) {
        let e = map.entry(c.api.clone()).or_default();
        e.0 += c.calls;
        e.1 += c.bytes;
    }
    map
}

/// The de-noised costs per process and API, in member order and each member's API order.
pub fn rows(g: &DeviceGroup) -> Vec<CostRow> {
    let estimate = context_estimate(g);
    let mut out = Vec::new();
    for m in &g.members {
        let calls = calls_of(*m);
        for cost in &m.dev.driver_costs {
            let api = cost_label(cost);
            let mine: Vec<&Call> = calls.iter().filter(|c| c.api == api).collect();
            let mut row = CostRow {
                pid: m.pid(),
                label: m.label(),
                api,
                calls: cost.calls,
                bytes: 0,
                measured_bytes: cost.bytes,
                uncertain: false,
                notes: Vec::new(),
            };
            let seen: i64 = mine.iter().map(|c| c.measured).sum();
            for call in &mine {
                let (bytes, uncertain, notes) = denoise(g, call, estimate.as_ref());
                row.bytes += bytes;
                row.uncertain |= uncertain;
                for n in notes {
                    if !row.notes.contains(&n) {
                        row.notes.push(n);
                    }
                }
            }
            // Calls the bounded event list did not keep count as measured.
            row.bytes += cost.bytes - seen;
            let missing = cost.calls - mine.len() as i64;
            if missing > 0 && !row.notes.is_empty() {
                row.notes.push(CostNote::NotListed { calls: missing });
            }
            out.push(row);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::groups::groups;
    use crate::load::Run;
    use crate::model::Report;
    use serde_json::{json, Value};

    const MIB: i64 = 1 << 20;

    /// APIs of one hidden cost are one class, whatever their suffix (`_v2`, `_ptsz`).
    #[test]
    fn api_classes() {
        use super::ApiClass;
        assert_eq!(ApiClass::of("cudaIpcOpenMemHandle"), ApiClass::IpcOpens);
        assert_eq!(ApiClass::of("cuIpcOpenMemHandle_v2"), ApiClass::IpcOpens);
        assert_eq!(ApiClass::of("cudaDeviceEnablePeerAccess"), ApiClass::PeerAccess);
        assert_eq!(ApiClass::of("cuGraphInstantiateWithFlags"), ApiClass::GraphInstantiation);
        assert_eq!(ApiClass::of("cuCtxCreate_v2"), ApiClass::of("cuDevicePrimaryCtxRetain"));
        assert_eq!(ApiClass::of("cuFoo"), ApiClass::Other("cuFoo".into()));
    }

    /// A rank on `dev` with a first probe (its context, 512 MiB, alone on the device) and
    /// the measured calls `(t0_us, t_us, api, bytes)`; `peer` adds a peer_access event.
    fn rank(pid: i64, dev: i64, calls: &[(i64, i64, &str, i64)], extra: Vec<Value>) -> Report {
        let mut events: Vec<Value> = calls
            .iter()
            .map(|&(t0, t, api, b)| {
                json!({"t_ms": t / 1000, "t_us": t, "kind": "driver_cost", "api": api, "bytes": b, "t0_us": t0,
                       "detail": format!("{b} bytes")})
            })
            .collect();
        events.extend(extra);
        let mut costs: Vec<Value> = Vec::new();
        for &(_, _, api, b) in calls {
            match costs.iter_mut().find(|c| c["api"] == api) {
                Some(c) => {
                    c["calls"] = json!(c["calls"].as_i64().unwrap() + 1);
                    c["bytes"] = json!(c["bytes"].as_i64().unwrap() + b);
                }
                None => costs.push(json!({"api": api, "calls": 1, "bytes": b})),
            }
        }
        serde_json::from_value(json!({
            "schema": "culedger/1",
            "process": {"pid": pid, "host": "h", "start_unix_ms": 0, "start_unix_us": 0, "end_unix_ms": 100,
                        "exit": "exit", "exit_code": 0},
            "devices": [{"index": dev, "total_bytes": 1024 * MIB,
                         "probes": [{"t_ms": 0, "t_us": 10, "seq": 1, "api": "cudaMemGetInfo",
                                     "free_bytes": 512 * MIB, "total_bytes": 1024 * MIB}],
                         "driver_costs": costs, "events": events}],
        }))
        .unwrap()
    }

    #[test]
    fn a_lazy_loading_cost_is_named_for_its_library_and_trigger() {
        // What the writer records for the first launch of a kernel of libtorch_cuda.so in a
        // context: a driver cost with the library, its event in the writer's words.
        let mut r =
            rank(11, 0, &[(1000, 1100, "cuLaunchKernel", 64 * MIB), (2000, 2100, "cuLaunchKernel", 2 * MIB)], vec![]);
        let d = &mut r.devices[0];
        d.driver_costs[0].library = Some("libtorch_cuda.so".into());
        d.driver_costs.push(crate::model::DriverCost { library: None, ..d.driver_costs[0].clone() });
        d.driver_costs[0].calls = 1;
        d.driver_costs[0].bytes = 64 * MIB;
        d.driver_costs[1].calls = 1;
        d.driver_costs[1].bytes = 2 * MIB;
        d.events[0].detail =
            format!("{} bytes: lazy loading of libtorch_cuda.so (first used by cuLaunchKernel)", 64 * MIB);
        let rows = costs(vec![r]);
        assert_eq!(
            rows,
            [
                (
                    11,
                    "lazy loading of libtorch_cuda.so (first used by cuLaunchKernel)".to_string(),
                    64 * MIB,
                    64 * MIB,
                    false
                ),
                (11, "cuLaunchKernel".to_string(), 2 * MIB, 2 * MIB, false)
            ]
        );
    }

    fn peer(pid: i64, dev: i64, t0: i64, t: i64) -> Report {
        serde_json::from_value(json!({
            "schema": "culedger/1",
            "process": {"pid": pid, "host": "h", "start_unix_ms": 0, "start_unix_us": 0, "end_unix_ms": 100,
                        "exit": "exit", "exit_code": 0},
            "devices": [{"index": dev, "events": [{"t_ms": t / 1000, "t_us": t, "kind": "peer_access",
                        "api": "cudaDeviceEnablePeerAccess", "t0_us": t0, "detail": "peer access from device 0"}]}],
        }))
        .unwrap()
    }

    fn costs(procs: Vec<Report>) -> Vec<(i64, String, i64, i64, bool)> {
        let run = Run { label: "t".into(), procs, ..Run::default() };
        let g = &groups(&run)[0];
        super::rows(g).into_iter().map(|r| (r.pid, r.api, r.bytes, r.measured_bytes, r.uncertain)).collect()
    }

    #[test]
    fn a_peer_context_created_inside_the_window_is_subtracted() {
        // Rank 1's second IPC open (window 2000..2100 µs) contains rank 0's peer access to
        // GPU 1 (2020..2050): 514 MiB measured, 2 MiB its own.
        let r1 = rank(
            11,
            1,
            &[(1000, 1100, "cudaIpcOpenMemHandle", 2 * MIB), (2000, 2100, "cudaIpcOpenMemHandle", 514 * MIB)],
            vec![],
        );
        let rows = costs(vec![r1.clone(), peer(10, 1, 2020, 2050)]);
        assert_eq!(rows, [(11, "cudaIpcOpenMemHandle".to_string(), 4 * MIB, 516 * MIB, false)]);
        // The same run where the context came between the calls: nothing to subtract.
        let clean = rank(
            11,
            1,
            &[(1000, 1100, "cudaIpcOpenMemHandle", 2 * MIB), (2000, 2100, "cudaIpcOpenMemHandle", 2 * MIB)],
            vec![],
        );
        let rows = costs(vec![clean, peer(10, 1, 1500, 1600)]);
        assert_eq!(rows, [(11, "cudaIpcOpenMemHandle".to_string(), 4 * MIB, 4 * MIB, false)]);
    }

    #[test]
    fn a_context_just_past_the_window_by_the_clocks_is_still_subtracted() {
        // Seven peer accesses of 1 GiB each; the last one measured 1.5 GiB: rank 0 created its
        // context on GPU 1 then, though its clock puts that 2 µs after the window closed.
        let calls: Vec<(i64, i64, &str, i64)> = (0..7)
            .map(|i| {
                (2000 + 20 * i, 2012 + 20 * i, "cudaDeviceEnablePeerAccess", if i == 6 { 1536 } else { 1024 } * MIB)
            })
            .collect();
        let rows = costs(vec![rank(11, 1, &calls, vec![]), peer(10, 1, 2134, 2148)]);
        assert_eq!(rows, [(11, "cudaDeviceEnablePeerAccess".to_string(), 7168 * MIB, 7680 * MIB, false)]);
    }

    #[test]
    fn a_peer_window_that_only_overlaps_is_left_alone_when_the_measurement_does_not_hold_it() {
        let r1 = rank(11, 1, &[(2000, 2100, "cudaIpcOpenMemHandle", 2 * MIB)], vec![]);
        let rows = costs(vec![r1, peer(10, 1, 1950, 2010)]);
        assert_eq!(rows[0].2, 2 * MIB);
        assert!(!rows[0].4);
    }

    #[test]
    fn without_an_estimate_the_call_is_uncertain() {
        let mut r1 = rank(11, 1, &[(2000, 2100, "cudaIpcOpenMemHandle", 514 * MIB)], vec![]);
        r1.devices[0].probes.clear();
        let rows = costs(vec![r1, peer(10, 1, 2020, 2050)]);
        assert_eq!((rows[0].2, rows[0].4), (514 * MIB, true));
    }

    #[test]
    fn other_processes_allocations_in_the_window_are_subtracted() {
        let r1 = rank(11, 0, &[(2000, 2100, "cuModuleLoadData", 72 * MIB)], vec![]);
        let mut r0: Report = serde_json::from_value(json!({
            "schema": "culedger/1",
            "process": {"pid": 10, "host": "h", "start_unix_ms": 0, "start_unix_us": 0, "end_unix_ms": 100, "exit": "exit"},
            "devices": [{"index": 0, "timeline": [
                {"t_ms": 1, "t_us": 1000, "live_bytes": 0, "other": 0},
                {"t_ms": 2, "t_us": 2050, "live_bytes": 64 * MIB, "other": 64 * MIB}]}],
        }))
        .unwrap();
        r0.devices[0].alloc_count = 1;
        let rows = costs(vec![r1, r0]);
        assert_eq!(rows[0].2, 8 * MIB);
    }

    #[test]
    fn overlapping_measurements_of_two_processes_are_uncertain() {
        let a = rank(11, 0, &[(2000, 2100, "cuModuleLoadData", 16 * MIB)], vec![]);
        let b = rank(12, 0, &[(2050, 2200, "cuModuleLoadData", 16 * MIB)], vec![]);
        let rows = costs(vec![a, b]);
        assert!(rows.iter().all(|r| r.4 && r.2 == 16 * MIB), "{rows:?}");
    }

    #[test]
    fn a_context_is_subtracted_from_one_call_only() {
        // The peer's context creation overlaps an IPC open (which measured it: 2 + 512 MiB)
        // and the next peer access (1 GiB of its own, like every peer access here): only the
        // IPC open holds it.
        let r1 = rank(
            11,
            1,
            &[
                (1000, 1100, "cudaIpcOpenMemHandle", 514 * MIB),
                (1150, 1300, "cudaDeviceEnablePeerAccess", 1024 * MIB),
                (2000, 2100, "cudaDeviceEnablePeerAccess", 1024 * MIB),
            ],
            vec![],
        );
        let rows = costs(vec![r1, peer(10, 1, 1050, 1200)]);
        assert_eq!(
            rows,
            [
                (11, "cudaIpcOpenMemHandle".to_string(), 2 * MIB, 514 * MIB, false),
                (11, "cudaDeviceEnablePeerAccess".to_string(), 2048 * MIB, 2048 * MIB, false),
            ]
        );
    }

    #[test]
    fn a_call_holds_no_more_contexts_than_its_measurement_shows() {
        // The demo's custom all-reduce start-up, run 11 of 12 (scripts/stable-costs.sh): rank
        // 0's first peer access (4023..7099 µs) measured 1.5 GiB, one context more than its
        // own 1 GiB. Two peers' context creations touch that window: one wholly inside it
        // (6048..6133), one whose peer access began well before and ended inside (320..5178).
        // The measurement holds one context: the one inside. Both were subtracted (6.5 GiB for
        // the seven calls instead of 7 GiB).
        let mut calls = vec![(4023, 7099, "cudaDeviceEnablePeerAccess", 1536 * MIB)];
        calls.extend((0..6).map(|i| (7127 + 16 * i, 7140 + 16 * i, "cudaDeviceEnablePeerAccess", 1024 * MIB)));
        let procs = vec![rank(11, 1, &calls, vec![]), peer(12, 1, 320, 5178), peer(13, 1, 6048, 6133)];
        let run = Run { label: "t".into(), procs, ..Run::default() };
        let g = &groups(&run)[0];
        let rows = super::rows(g);
        assert_eq!((rows[0].bytes, rows[0].measured_bytes, rows[0].uncertain), (7168 * MIB, 7680 * MIB, false));
        let charged: Vec<i64> = rows[0]
            .notes
            .iter()
            .filter_map(|n| match n {
                super::CostNote::Context { pid, .. } => Some(*pid),
                _ => None,
            })
            .collect();
        assert_eq!(charged, [13]);
        // The same, where the window held both contexts (2 GiB measured): both subtracted.
        calls[0].3 = 2048 * MIB;
        let procs = vec![rank(11, 1, &calls, vec![]), peer(12, 1, 320, 5178), peer(13, 1, 6048, 6133)];
        assert_eq!(costs(procs)[0].2, 7168 * MIB);
    }

    #[test]
    fn writers_without_windows_are_taken_as_measured() {
        let mut r1 = rank(11, 1, &[(2000, 2100, "cudaIpcOpenMemHandle", 514 * MIB)], vec![]);
        r1.devices[0].events[0].t0_us = None;
        let rows = costs(vec![r1, peer(10, 1, 2020, 2050)]);
        assert_eq!((rows[0].2, rows[0].4), (514 * MIB, false));
    }
}
