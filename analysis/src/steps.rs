//! One process's records on one device as one sequence, and the bursts and sizing queries
//! found in it (docs/explain.md, "Definitions").
//!
//! The steps, in the process's record order (`t_ms`, then `seq`; `t_us` when a writer gave
//! no `seq`):
//! - an *allocation*: a rise of the device's timeline (one sample per change), its size the
//!   rise and its category the one that rose most; a top allocation with the same `seq` is
//!   the same call and gives its call site and how much was copied into it from the host;
//! - a *failed allocation*: `failures[]`, its size the size requested;
//! - a *free*: a fall of the timeline;
//! - a *query*: `probes[]`.
//!
//! A *burst* is a run of allocation attempts (successful or failed) in which
//! - the first is at least 1 MiB ([`BURST_MIN_FIRST`]);
//! - none is smaller than the largest before it in the run divided by 8 ([`BURST_DROP`]);
//! - none was filled from the host (at least half of its bytes copied in: loaded data such
//!   as weights, not a pool), as far as the report tells (top allocations only);
//! - no free lies between two of them, and no query either, except queries that follow a
//!   failed attempt (an out-of-memory handler asking how much is free belongs to the burst);
//! - all come from one call site's run: the allocations are of one category (decided by each
//!   one's own call site), and a failed attempt's call site is one of theirs, where the report
//!   names them (`same_run`).
//!
//! These are the rules of the classifier's phase fallback (`src/classify/phase.rs`) applied to what a report keeps, plus failed attempts.

use crate::groups::Member;
use crate::model::{Allocation, Failure, Probe, Stamp, Stamped, CATEGORIES};

/// Smallest first attempt of a burst.
pub const BURST_MIN_FIRST: i64 = 1 << 20;
/// A burst ends at an attempt smaller than its largest one so far divided by this.
pub const BURST_DROP: i64 = 8;

#[derive(Debug, Clone, Copy)]
pub enum Kind<'a> {
    /// A successful allocation: the category that rose most, and the top allocation
    /// recorded by the same call, if the report kept it.
    Alloc {
        category: &'static str,
        top: Option<&'a Allocation>,
    },
    Failed(&'a Failure),
    Free,
    Query(&'a Probe),
}

#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    pub kind: Kind<'a>,
    /// Allocation: the rise; failure: the size requested; free: the fall; query: 0.
    pub bytes: i64,
    /// The rise (or fall) per category, in [`CATEGORIES`] order; zero for failures and queries.
    pub cats: [i64; 6],
    pub stamp: Stamp,
    /// Absolute time (µs since the epoch).
    pub abs_us: i64,
    rel_us: i64,
}

impl<'a> Step<'a> {
    pub fn failure(&self) -> Option<&'a Failure> {
        match self.kind {
            Kind::Failed(f) => Some(f),
            _ => None,
        }
    }

    /// A query that told the free memory.
    pub fn told(&self) -> Option<&'a Probe> {
        match self.kind {
            Kind::Query(p) if p.error == 0 && p.free_bytes.is_some_and(|f| f > 0) => Some(p),
            _ => None,
        }
    }

    /// At least half of it was copied in from the host (as far as the report tells).
    fn host_filled(&self) -> bool {
        match self.kind {
            Kind::Alloc { top: Some(a), .. } => a.h2d_bytes > 0 && a.h2d_bytes.saturating_mul(2) >= a.bytes,
            _ => false,
        }
    }

    pub fn top(&self) -> Option<&'a Allocation> {
        match self.kind {
            Kind::Alloc { top, .. } => top,
            _ => None,
        }
    }
}

/// The steps of `m` on its device, in record order.
pub fn steps<'a>(m: Member<'a>) -> Vec<Step<'a>> {
    let d = m.dev;
    let mut out: Vec<Step<'a>> = Vec::new();
    let mut prev = [0i64; 6];
    let mut prev_live = 0i64;
    for s in &d.timeline {
        let cats = CATEGORIES.map(|c| s.cat(c));
        let mut rise = [0i64; 6];
        for i in 0..6 {
            rise[i] = cats[i] - prev[i];
        }
        let delta = s.live_bytes - prev_live;
        prev = cats;
        prev_live = s.live_bytes;
        let stamp = s.stamp();
        let kind = if delta > 0 {
            let i = (0..6).max_by_key(|&i| (rise[i], std::cmp::Reverse(i))).unwrap_or(5);
            let top = s.seq.and_then(|seq| d.top_allocations.iter().find(|a| a.seq == Some(seq)));
            Kind::Alloc { category: CATEGORIES[i], top }
        } else if delta < 0 {
            Kind::Free
        } else {
            continue;
        };
        out.push(Step { kind, bytes: delta.abs(), cats: rise, stamp, abs_us: m.abs_us(s), rel_us: s.rel_us() });
    }
    for f in &d.failures {
        out.push(Step {
            kind: Kind::Failed(f),
            bytes: f.bytes,
            cats: [0; 6],
            stamp: f.stamp(),
            abs_us: m.abs_us(f),
            rel_us: f.rel_us(),
        });
    }
    for p in &d.probes {
        out.push(Step {
            kind: Kind::Query(p),
            bytes: 0,
            cats: [0; 6],
            stamp: p.stamp(),
            abs_us: m.abs_us(p),
            rel_us: p.rel_us(),
        });
    }
    out.sort_by_key(|s| (s.stamp.t_ms, s.stamp.seq.unwrap_or(-1), s.rel_us));
    out
}

/// Whether attempt `j` belongs to the same call site's run as the attempts `members`: an
/// allocation of another category than theirs (each decided by its own call site), or a failed
/// attempt whose call site is none of theirs (as far as the report keeps them: top
/// allocations), starts another run. A failed attempt from a site the report does not name,
/// or after allocations whose sites it does not keep, continues the run.
fn same_run(steps: &[Step], members: &[usize], j: usize) -> bool {
    let cat = |i: usize| match steps[i].kind {
        Kind::Alloc { category, .. } => Some(category),
        _ => None,
    };
    let site = |i: usize| match steps[i].kind {
        Kind::Alloc { top, .. } => top.and_then(|a| a.site).filter(|&s| s != 0),
        Kind::Failed(f) => f.site.filter(|&s| s != 0),
        _ => None,
    };
    match steps[j].kind {
        Kind::Alloc { category, .. } => members.iter().filter_map(|&i| cat(i)).all(|c| c == category),
        Kind::Failed(_) => {
            let Some(own) = site(j) else { return true };
            let theirs: Vec<i64> = members.iter().filter(|&&i| cat(i).is_some()).filter_map(|&i| site(i)).collect();
            theirs.is_empty() || theirs.contains(&own)
        }
        _ => true,
    }
}

/// Whether the nearest step before `i` that is not a query is a failed attempt.
fn follows_failure(steps: &[Step], i: usize) -> bool {
    steps[..i].iter().rev().find(|s| !matches!(s.kind, Kind::Query(_))).is_some_and(|s| s.failure().is_some())
}

/// Whether the attempts at `idx` (in order) satisfy the size rules of a burst.
fn sizes_ok(steps: &[Step], idx: &[usize]) -> bool {
    let Some(&first) = idx.first() else { return true };
    if steps[first].bytes < BURST_MIN_FIRST {
        return false;
    }
    let mut largest = 0i64;
    for &i in idx {
        let b = steps[i].bytes;
        if b.saturating_mul(BURST_DROP) < largest || steps[i].host_filled() {
            return false;
        }
        largest = largest.max(b);
    }
    true
}

/// The burst that ends with the attempt at `last`: the indices of its attempts, in order.
pub fn burst_ending_at(steps: &[Step], last: usize) -> Vec<usize> {
    let mut members = vec![last];
    let mut j = last;
    while j > 0 {
        j -= 1;
        match steps[j].kind {
            Kind::Free => break,
            Kind::Query(_) if follows_failure(steps, j) => continue,
            Kind::Query(_) => break,
            Kind::Alloc { .. } | Kind::Failed(_) => {
                let mut candidate = vec![j];
                candidate.extend_from_slice(&members);
                if !sizes_ok(steps, &candidate) || !same_run(steps, &members, j) {
                    break;
                }
                members = candidate;
            }
        }
    }
    // The first attempt must be large enough to start a burst: drop small leading ones.
    while members.len() > 1 && !sizes_ok(steps, &members) {
        members.remove(0);
    }
    members
}

/// The burst that follows the query at `q`, if one starts before the next query: indices
/// of its attempts, in order.
pub fn burst_after(steps: &[Step], q: usize) -> Vec<usize> {
    let mut members: Vec<usize> = Vec::new();
    let mut largest = 0i64;
    for (j, s) in steps.iter().enumerate().skip(q + 1) {
        match s.kind {
            Kind::Query(_) if !members.is_empty() && follows_failure(steps, j) => continue,
            Kind::Query(_) => break,
            Kind::Free if members.is_empty() => continue,
            Kind::Free => break,
            Kind::Alloc { .. } | Kind::Failed(_) => {
                if members.is_empty() {
                    if s.bytes >= BURST_MIN_FIRST && !s.host_filled() {
                        members.push(j);
                        largest = s.bytes;
                    }
                    continue;
                }
                if s.bytes.saturating_mul(BURST_DROP) < largest || s.host_filled() || !same_run(steps, &members, j) {
                    break;
                }
                members.push(j);
                largest = largest.max(s.bytes);
            }
        }
    }
    members
}

/// The last query that told the free memory before step `i`.
pub fn query_before(steps: &[Step], i: usize) -> Option<usize> {
    (0..i).rev().find(|&j| steps[j].told().is_some())
}

/// A process's pool on one device: the query it sized from and the burst that followed.
#[derive(Debug, Clone)]
pub struct Sizing {
    /// Index of the query in the steps.
    pub query: usize,
    /// Indices of the burst's attempts.
    pub burst: Vec<usize>,
    /// What the query told: free bytes.
    pub told: i64,
    /// The sum of the burst's attempts (failed ones included: what the process asked for).
    pub pool: i64,
}

/// The sizing query of a process on a device: the query whose burst takes the largest
/// share of the free memory it told, among those whose burst takes more than half of it;
/// ties go to the later query.
pub fn sizing(steps: &[Step]) -> Option<Sizing> {
    let mut best: Option<Sizing> = None;
    for (q, s) in steps.iter().enumerate() {
        let Some(p) = s.told() else { continue };
        let told = p.free_bytes.unwrap_or(0);
        let burst = burst_after(steps, q);
        let pool: i64 = burst.iter().map(|&i| steps[i].bytes).sum();
        if pool.saturating_mul(2) <= told {
            continue;
        }
        let better = best
            .as_ref()
            .is_none_or(|b| i128::from(pool) * i128::from(b.told) >= i128::from(b.pool) * i128::from(told));
        if better {
            best = Some(Sizing { query: q, burst, told, pool });
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::groups;
    use crate::load::Run;
    use crate::model::Report;
    use serde_json::{json, Value};

    const MIB: i64 = 1 << 20;

    /// One process on device 0 from a list of (kind, MiB): "a" allocation, "h" allocation
    /// filled from the host, "x" failed allocation, "f" free, "q" query telling MiB free.
    fn process(ops: &[(&str, i64)]) -> Report {
        let (mut timeline, mut failures, mut probes, mut top) = (vec![], vec![], vec![], vec![]);
        let mut live = 0;
        for (i, &(op, mib)) in ops.iter().enumerate() {
            let (seq, t) = (i as i64 + 1, 10 * (i as i64 + 1));
            match op {
                "a" | "h" | "f" => {
                    live += if op == "f" { -mib * MIB } else { mib * MIB };
                    timeline.push(json!({"t_ms": t, "t_us": t * 1000, "seq": seq, "live_bytes": live, "other": live}));
                    if op != "f" {
                        let h2d = if op == "h" { mib * MIB } else { 0 };
                        top.push(
                            json!({"ptr": format!("0x{seq:x}"), "bytes": mib * MIB, "api": "cudaMalloc", "t_ms": t,
                                        "t_us": t * 1000, "seq": seq, "category": "other", "h2d_bytes": h2d}),
                        );
                    }
                }
                "x" => failures.push(json!({"t_ms": t, "t_us": t * 1000, "seq": seq, "api": "cudaMalloc",
                                             "bytes": mib * MIB, "error": 2, "error_name": "cudaErrorMemoryAllocation",
                                             "live_bytes": live})),
                "q" => probes.push(json!({"t_ms": t, "t_us": t * 1000, "seq": seq, "api": "cudaMemGetInfo",
                                          "free_bytes": mib * MIB, "total_bytes": 100_000 * MIB, "live_bytes": live})),
                _ => unreachable!("{op}"),
            }
        }
        let v: Value = json!({
            "schema": "culedger/1",
            "process": {"pid": 7, "host": "h", "start_unix_ms": 0, "start_unix_us": 0, "end_unix_ms": 1000, "exit": "exit"},
            "devices": [{"index": 0, "total_bytes": 100_000 * MIB, "timeline": timeline, "failures": failures,
                         "probes": probes, "top_allocations": top}],
        });
        serde_json::from_value(v).unwrap()
    }

    fn with_steps<T>(ops: &[(&str, i64)], f: impl FnOnce(&[Step]) -> T) -> T {
        let run = Run { procs: vec![process(ops)], ..Run::default() };
        let g = &groups(&run)[0];
        let st = steps(g.members[0]);
        f(&st)
    }

    fn sizes(st: &[Step], idx: &[usize]) -> Vec<i64> {
        idx.iter().map(|&i| st[i].bytes / MIB).collect()
    }

    #[test]
    fn the_failures_burst_starts_after_the_sizing_query() {
        // Weights (loaded from the host), the sizing query, the pool's two halves, the
        // second failing, then the out-of-memory handler's query.
        let ops = [("q", 90_000), ("h", 2000), ("h", 2000), ("q", 19_000), ("a", 5000), ("x", 5000), ("q", 4000)];
        with_steps(&ops, |st| {
            let fail = st.iter().position(|s| s.failure().is_some()).unwrap();
            let burst = burst_ending_at(st, fail);
            assert_eq!(sizes(st, &burst), [5000, 5000]);
            let q = query_before(st, burst[0]).unwrap();
            assert_eq!(st[q].told().unwrap().free_bytes, Some(19_000 * MIB));
            let s = sizing(st).unwrap();
            assert_eq!((s.query, s.pool / MIB), (q, 10_000));
        });
    }

    #[test]
    fn a_query_after_a_failed_attempt_stays_inside_the_burst() {
        // Retry with half the size after an out-of-memory error and its query.
        let ops = [("q", 20_000), ("x", 16_000), ("q", 3000), ("x", 8000), ("q", 3000)];
        with_steps(&ops, |st| {
            let last = st.iter().rposition(|s| s.failure().is_some()).unwrap();
            let burst = burst_ending_at(st, last);
            assert_eq!(sizes(st, &burst), [16_000, 8000]);
            assert_eq!(st[query_before(st, burst[0]).unwrap()].told().unwrap().free_bytes, Some(20_000 * MIB));
        });
    }

    #[test]
    fn small_allocations_and_frees_end_a_burst() {
        let ops = [("q", 20_000), ("a", 2), ("a", 6000), ("f", 2), ("a", 6000), ("x", 600)];
        with_steps(&ops, |st| {
            let fail = st.iter().position(|s| s.failure().is_some()).unwrap();
            // 600 MiB after 6000 MiB: less than 1/8.
            assert_eq!(sizes(st, &burst_ending_at(st, fail)), [600]);
            let alloc = st.iter().rposition(|s| s.bytes == 6000 * MIB).unwrap();
            assert_eq!(sizes(st, &burst_ending_at(st, alloc)), [6000], "the free before it ends the burst");
            // Forward from the query: 2 MiB starts it, 6000 MiB joins (a rise is fine), the free ends it.
            assert_eq!(sizes(st, &burst_after(st, 0)), [2, 6000]);
        });
    }

    #[test]
    fn no_sizing_query_without_a_burst_over_half_of_the_told_memory() {
        with_steps(&[("q", 20_000), ("a", 4000), ("a", 4000)], |st| assert!(sizing(st).is_none()));
        with_steps(&[("q", 20_000), ("a", 4000), ("a", 8000)], |st| assert_eq!(sizing(st).unwrap().pool, 12_000 * MIB));
    }
}
