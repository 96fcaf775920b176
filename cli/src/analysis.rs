//! What the commands compute from a run: processes grouped per host and device, merged
//! timelines, device usage versus tracked bytes, the free-memory queries that matter.
//!
//! Everything here produces plain owned data ([`RunSummary`]) that the text, markdown and
//! JSON renderers share, so the three formats never disagree.

use crate::load::Run;
use crate::model::{
    first_recorded, last_before, Device, Failure, Graphs, Ipc, Probe, Report, Stamp, Stamped, CATEGORIES,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// One process's view of one device.
#[derive(Clone, Copy)]
pub struct Member<'a> {
    pub report: &'a Report,
    pub dev: &'a Device,
}

impl Member<'_> {
    pub fn pid(&self) -> i64 {
        self.report.process.pid
    }
    /// Absolute time (Unix ms) of a process-relative `t_ms`.
    pub fn abs(&self, t_ms: i64) -> i64 {
        self.report.process.start_unix_ms + t_ms
    }
    /// Live bytes per category of this process on this device at absolute time `at`:
    /// the last timeline sample at or before it; nothing before the first sample or after
    /// the process ended (the driver frees a dead process's memory).
    pub fn live_at(&self, at: i64) -> [i64; 6] {
        let p = &self.report.process;
        if p.ended() && at > p.end_unix_ms {
            return [0; 6];
        }
        // Timelines are in time order: binary search for the last sample at or before `at`.
        let n = self.dev.timeline.partition_point(|s| self.abs(s.t_ms) <= at);
        n.checked_sub(1).map(|i| CATEGORIES.map(|c| self.dev.timeline[i].cat(c))).unwrap_or([0; 6])
    }

    /// Live bytes per category of this process on this device just before its own record
    /// stamped `at` (a probe, a failure): ordered by `(t_ms, seq)`, so allocations made in
    /// the same millisecond after it do not count.
    pub fn live_before(&self, at: Stamp) -> [i64; 6] {
        let n = self.dev.timeline.partition_point(|s| s.stamp().precedes(at));
        n.checked_sub(1).map(|i| CATEGORIES.map(|c| self.dev.timeline[i].cat(c))).unwrap_or([0; 6])
    }
}

/// All processes that touched one device of one host.
pub struct DeviceGroup<'a> {
    pub host: String,
    pub index: i64,
    pub members: Vec<Member<'a>>,
}

/// Groups a run's processes per (host, device index), sorted.
pub fn groups(run: &Run) -> Vec<DeviceGroup<'_>> {
    let mut map: BTreeMap<(String, i64), Vec<Member>> = BTreeMap::new();
    for report in &run.procs {
        for dev in &report.devices {
            map.entry((report.process.host.clone(), dev.index)).or_default().push(Member { report, dev });
        }
    }
    map.into_iter().map(|((host, index), members)| DeviceGroup { host, index, members }).collect()
}

/// A point of a merged timeline: absolute time and live bytes per category.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub t_unix_ms: i64,
    pub cats: [i64; 6],
}

impl Point {
    pub fn total(&self) -> i64 {
        self.cats.iter().sum()
    }
}

/// The largest single allocation (or failed attempt) seen on a device.
#[derive(Debug, Clone, Serialize)]
pub struct LargeAlloc {
    pub pid: i64,
    pub t_ms: i64,
    pub seq: Option<i64>,
    pub bytes: i64,
    pub api: String,
    pub category: Option<String>,
    pub failed: bool,
}

impl<'a> DeviceGroup<'a> {
    pub fn title(&self) -> String {
        format!("{} GPU {}", self.host, self.index)
    }

    pub fn total_bytes(&self) -> Option<i64> {
        self.members.iter().filter_map(|m| m.dev.total_bytes).max()
    }

    pub fn live(&self) -> i64 {
        self.members.iter().map(|m| m.dev.live_bytes).sum()
    }

    pub fn cat_live(&self, name: &str) -> i64 {
        self.members.iter().map(|m| m.dev.cat(name).live_bytes).sum()
    }

    /// The device timeline: every member's samples summed as step functions.
    pub fn series(&self) -> Vec<Point> {
        let mut times: Vec<i64> = Vec::new();
        for m in &self.members {
            times.extend(m.dev.timeline.iter().map(|s| m.abs(s.t_ms)));
            // The driver frees an exited process's memory: show the drop.
            if m.report.process.ended() {
                times.push(m.report.process.end_unix_ms + 1);
            }
        }
        times.sort_unstable();
        times.dedup();
        times
            .into_iter()
            .map(|t| {
                let mut cats = [0i64; 6];
                for m in &self.members {
                    for (c, v) in cats.iter_mut().zip(m.live_at(t)) {
                        *c += v;
                    }
                }
                Point { t_unix_ms: t, cats }
            })
            .collect()
    }

    /// Peak of the device's summed live bytes. Exact for one process (its own counter);
    /// for several, the maximum of the merged timelines (at least any member's peak).
    pub fn peak(&self) -> i64 {
        let member_max = self.members.iter().map(|m| m.dev.peak_bytes).max().unwrap_or(0);
        if self.members.len() == 1 {
            return member_max;
        }
        self.series().iter().map(Point::total).max().unwrap_or(0).max(member_max)
    }

    /// Peak of one category, computed like [`Self::peak`].
    pub fn cat_peak(&self, name: &str) -> i64 {
        let member_max = self.members.iter().map(|m| m.dev.cat(name).peak_bytes).max().unwrap_or(0);
        if self.members.len() == 1 {
            return member_max;
        }
        let i = CATEGORIES.iter().position(|c| *c == name).unwrap_or(5);
        self.series().iter().map(|p| p.cats[i]).max().unwrap_or(0).max(member_max)
    }

    /// Every probe of every member, with the member, in time order (across processes by
    /// absolute time, within one by `(t_ms, seq)`).
    pub fn probes(&self) -> Vec<(Member<'a>, &'a Probe)> {
        let mut all: Vec<(Member, &Probe)> =
            self.members.iter().flat_map(|m| m.dev.probes.iter().map(move |p| (*m, p))).collect();
        all.sort_by_key(|(m, p)| (m.abs(p.t_ms), m.pid(), p.stamp().key()));
        all
    }

    /// What the processes of this run had allocated on the device when `m` made the
    /// probe `p`: the others' by absolute time, `m`'s own just before the probe.
    pub fn tracked_at(&self, m: Member, p: &Probe) -> i64 {
        let at = m.abs(p.t_ms);
        self.members
            .iter()
            .map(|o| {
                let live = if std::ptr::eq(o.report, m.report) { o.live_before(p.stamp()) } else { o.live_at(at) };
                live.iter().sum::<i64>()
            })
            .sum()
    }

    /// Device memory in use by anything (from each probe: total - free) minus what the
    /// processes of this run had allocated at that moment. Returns (last, max, used at the
    /// last probe).
    pub fn untracked(&self) -> (Option<i64>, Option<i64>, Option<i64>) {
        let mut last = None;
        let mut max: Option<i64> = None;
        let mut used_last = None;
        for (m, p) in self.probes() {
            let (Some(free), Some(total)) = (p.free_bytes, p.total_bytes) else {
                continue;
            };
            let used = total - free;
            let untracked = used - self.tracked_at(m, p);
            last = Some(untracked);
            used_last = Some(used);
            max = Some(max.map_or(untracked, |x| x.max(untracked)));
        }
        (last, max, used_last)
    }

    /// The largest allocation or failed attempt on the device (ties: the earliest).
    pub fn largest_allocation(&self) -> Option<LargeAlloc> {
        let mut candidates: Vec<(i64, LargeAlloc)> = Vec::new();
        for m in &self.members {
            for a in &m.dev.top_allocations {
                let large = LargeAlloc {
                    pid: m.pid(),
                    t_ms: a.t_ms,
                    seq: a.seq,
                    bytes: a.bytes,
                    api: a.api.clone(),
                    category: Some(a.category.clone()),
                    failed: false,
                };
                candidates.push((m.abs(a.t_ms), large));
            }
            for f in &m.dev.failures {
                let large = LargeAlloc {
                    pid: m.pid(),
                    t_ms: f.t_ms,
                    seq: f.seq,
                    bytes: f.bytes,
                    api: f.api.clone(),
                    category: None,
                    failed: true,
                };
                candidates.push((m.abs(f.t_ms), large));
            }
        }
        candidates
            .into_iter()
            .max_by_key(|(at, a)| (a.bytes, std::cmp::Reverse((*at, a.seq.unwrap_or(-1)))))
            .map(|(_, a)| a)
    }

    fn member(&self, pid: i64) -> Option<Member<'a>> {
        self.members.iter().copied().find(|m| m.pid() == pid)
    }

    /// The probe the program sized its memory from: the last probe of the process that
    /// made the device's largest allocation, before that allocation; without allocations
    /// in the report, the last probe before the steepest rise of that process's timeline.
    /// "Before" is in the process's record order, `(t_ms, seq)`.
    pub fn sizing_probe(&self) -> Option<(Member<'a>, &'a Probe, String)> {
        if let Some(big) = self.largest_allocation() {
            let m = self.member(big.pid)?;
            let at = Stamp { t_ms: big.t_ms, seq: big.seq };
            let p = last_before(&m.dev.probes, at)?;
            let what = match (&big.category, big.failed) {
                (_, true) => format!("failed {} of {}", big.api, crate::units::fmt_bytes(big.bytes)),
                (Some(c), false) => format!("{} {} of {}", c, big.api, crate::units::fmt_bytes(big.bytes)),
                (None, false) => format!("{} of {}", big.api, crate::units::fmt_bytes(big.bytes)),
            };
            return Some((
                m,
                p,
                format!("before the largest allocation ({what} at {})", crate::units::fmt_ms(big.t_ms)),
            ));
        }
        let mut best: Option<(Member, Stamp, i64)> = None;
        for m in &self.members {
            for w in m.dev.timeline.windows(2) {
                let rise = w[1].live_bytes - w[0].live_bytes;
                if rise > 0 && !matches!(&best, Some(b) if rise <= b.2) {
                    best = Some((*m, w[1].stamp(), rise));
                }
            }
        }
        let (m, at, rise) = best?;
        let p = last_before(&m.dev.probes, at)?;
        Some((
            m,
            p,
            format!(
                "before the steepest rise (+{} at {})",
                crate::units::fmt_bytes(rise),
                crate::units::fmt_ms(at.t_ms)
            ),
        ))
    }

    /// The free-memory queries worth showing: each process's first, the sizing probe, and
    /// the last probe before each failure. Deduplicated, in time order.
    pub fn key_probes(&self) -> Vec<KeyProbe> {
        let mut out: Vec<(i64, KeyProbe)> = Vec::new();
        let mut add = |m: Member, p: &Probe, why: String| {
            let same =
                |k: &KeyProbe| (k.pid, k.t_ms, k.seq, k.api.as_str()) == (m.pid(), p.t_ms, p.seq, p.api.as_str());
            if let Some((_, k)) = out.iter_mut().find(|(_, k)| same(k)) {
                if !k.why.contains(&why) {
                    k.why = format!("{}; {why}", k.why);
                }
                return;
            }
            out.push((m.abs(p.t_ms), KeyProbe::new(m, p, why)));
        };
        for m in &self.members {
            if let Some(p) = first_recorded(&m.dev.probes) {
                add(*m, p, "first query".into());
            }
        }
        if let Some((m, p, why)) = self.sizing_probe() {
            add(m, p, why);
        }
        for m in &self.members {
            for f in &m.dev.failures {
                if let Some(p) = &f.last_probe {
                    add(*m, p, format!("before the failed {} of {}", f.api, crate::units::fmt_bytes(f.bytes)));
                }
            }
        }
        out.sort_by_key(|(t, k)| (*t, k.pid, k.seq.unwrap_or(-1)));
        out.into_iter().map(|(_, k)| k).collect()
    }

    pub fn failures(&self) -> Vec<(Member<'a>, &'a Failure)> {
        let mut all: Vec<(Member, &Failure)> =
            self.members.iter().flat_map(|m| m.dev.failures.iter().map(move |f| (*m, f))).collect();
        all.sort_by_key(|(m, f)| (m.abs(f.t_ms), m.pid(), f.stamp().key()));
        all
    }

    pub fn failures_total(&self) -> i64 {
        self.members.iter().map(|m| m.dev.failures_total.max(m.dev.failures.len() as i64)).sum()
    }

    pub fn driver_cost_bytes(&self) -> i64 {
        self.members.iter().map(|m| m.dev.driver_cost_bytes()).sum()
    }

    /// Driver costs per API summed over the processes: api -> (calls, bytes).
    pub fn driver_costs_by_api(&self) -> BTreeMap<String, (i64, i64)> {
        let mut map: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for m in &self.members {
            for c in &m.dev.driver_costs {
                let e = map.entry(c.api.clone()).or_default();
                e.0 += c.calls;
                e.1 += c.bytes;
            }
        }
        map
    }

    pub fn ipc(&self) -> Ipc {
        let mut t = Ipc::default();
        for m in &self.members {
            let i = &m.dev.ipc;
            t.exported_count += i.exported_count;
            t.exported_bytes += i.exported_bytes;
            t.imported_count += i.imported_count;
            t.imported_bytes += i.imported_bytes;
            t.imported_live_count += i.imported_live_count;
            t.imported_live_bytes += i.imported_live_bytes;
        }
        t
    }

    pub fn graphs(&self) -> Graphs {
        let mut t = Graphs::default();
        for m in &self.members {
            let g = &m.dev.graphs;
            t.captures += g.captures;
            t.captures_active += g.captures_active;
            t.captured_allocs += g.captured_allocs;
            t.captured_bytes += g.captured_bytes;
            t.instantiations += g.instantiations;
            t.instantiate_bytes += g.instantiate_bytes;
        }
        t
    }
}

/// A free-memory query and what the program was told.
#[derive(Debug, Clone, Serialize)]
pub struct KeyProbe {
    pub pid: i64,
    pub t_ms: i64,
    pub seq: Option<i64>,
    pub api: String,
    pub why: String,
    pub free_bytes: Option<i64>,
    pub total_bytes: Option<i64>,
    pub error: i64,
    /// What this process had allocated on the device at that moment.
    pub tracked_bytes: i64,
}

impl KeyProbe {
    fn new(m: Member, p: &Probe, why: String) -> Self {
        KeyProbe {
            pid: m.pid(),
            t_ms: p.t_ms,
            seq: p.seq,
            api: p.api.clone(),
            why,
            free_bytes: p.free_bytes,
            total_bytes: p.total_bytes,
            error: p.error,
            tracked_bytes: p.live_bytes,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The owned summary every renderer uses.

#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub label: String,
    pub processes: Vec<ProcSummary>,
    pub devices: Vec<DeviceSummary>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProcSummary {
    pub pid: i64,
    pub host: String,
    pub role: String,
    pub argv: Vec<String>,
    pub exit: String,
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i64>,
    pub duration_ms: i64,
    pub pinned_live_bytes: i64,
    pub pinned_peak_bytes: i64,
    pub pinned_alloc_count: i64,
    pub registered_live_bytes: i64,
    pub registered_peak_bytes: i64,
    pub lost_events: i64,
    pub unknown_frees: i64,
    pub unwrapped_symbols: Vec<String>,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceSummary {
    pub host: String,
    pub index: i64,
    pub total_bytes: Option<i64>,
    pub processes: Vec<DevProc>,
    pub categories: Vec<CatRow>,
    pub live_bytes: i64,
    pub peak_bytes: i64,
    /// `total - free` at the last free-memory query of any process on the device.
    pub device_used_bytes: Option<i64>,
    /// `device_used_bytes` minus what this run's processes had allocated then.
    pub untracked_bytes: Option<i64>,
    pub untracked_max_bytes: Option<i64>,
    pub probes_total: i64,
    pub key_probes: Vec<KeyProbe>,
    pub failures_total: i64,
    pub failures: Vec<FailRow>,
    pub driver_costs: Vec<CostRow>,
    pub driver_cost_bytes: i64,
    pub largest_allocation: Option<LargeAlloc>,
    pub top_allocations: Vec<TopRow>,
    pub ipc: Ipc,
    pub graphs: Graphs,
}

#[derive(Debug, Clone, Serialize)]
pub struct DevProc {
    pub pid: i64,
    pub role: String,
    pub live_bytes: i64,
    pub peak_bytes: i64,
    pub alloc_count: i64,
    pub free_count: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CatRow {
    pub name: String,
    pub live_bytes: i64,
    pub peak_bytes: i64,
    pub allocs: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailRow {
    pub pid: i64,
    pub t_ms: i64,
    pub api: String,
    pub bytes: i64,
    pub error_name: String,
    pub live_bytes: i64,
    pub categories: BTreeMap<String, i64>,
    pub last_probe_free_bytes: Option<i64>,
    pub last_probe_t_ms: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    pub pid: i64,
    pub api: String,
    pub calls: i64,
    pub bytes: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopRow {
    pub pid: i64,
    pub ptr: String,
    pub bytes: i64,
    pub category: String,
    pub api: String,
    pub t_ms: i64,
    pub seq: Option<i64>,
    pub exported: bool,
    pub captured: bool,
    pub caller: Option<String>,
}

/// How many of the largest allocations a device section lists.
pub const TOP_N: usize = 10;

pub fn summarize(run: &Run) -> RunSummary {
    let processes = run
        .procs
        .iter()
        .map(|r| {
            let p = &r.process;
            ProcSummary {
                pid: p.pid,
                host: p.host.clone(),
                role: p.role(),
                argv: p.argv.clone(),
                exit: p.exit.clone(),
                exit_code: p.exit_code,
                signal: p.signal,
                duration_ms: p.end_unix_ms - p.start_unix_ms,
                pinned_live_bytes: r.host.pinned_live_bytes,
                pinned_peak_bytes: r.host.pinned_peak_bytes,
                pinned_alloc_count: r.host.pinned_alloc_count,
                registered_live_bytes: r.host.registered_live_bytes,
                registered_peak_bytes: r.host.registered_peak_bytes,
                lost_events: r.health.lost_events,
                unknown_frees: r.health.unknown_frees,
                unwrapped_symbols: r.health.unwrapped_symbols.clone(),
                warnings: r.health.warnings.clone(),
            }
        })
        .collect();
    let devices = groups(run).iter().map(summarize_device).collect();
    RunSummary { label: run.label.clone(), processes, devices }
}

pub fn summarize_device(g: &DeviceGroup) -> DeviceSummary {
    let (untracked, untracked_max, used) = g.untracked();
    let mut top: Vec<TopRow> = g
        .members
        .iter()
        .flat_map(|m| {
            m.dev.top_allocations.iter().map(move |a| TopRow {
                pid: m.pid(),
                ptr: a.ptr.clone(),
                bytes: a.bytes,
                category: a.category.clone(),
                api: a.api.clone(),
                t_ms: a.t_ms,
                seq: a.seq,
                exported: a.exported,
                captured: a.captured,
                caller: a.caller.clone(),
            })
        })
        .collect();
    top.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.pid.cmp(&b.pid)).then(a.t_ms.cmp(&b.t_ms)).then(a.seq.cmp(&b.seq)));
    top.truncate(TOP_N);
    DeviceSummary {
        host: g.host.clone(),
        index: g.index,
        total_bytes: g.total_bytes(),
        processes: g
            .members
            .iter()
            .map(|m| DevProc {
                pid: m.pid(),
                role: m.report.process.role(),
                live_bytes: m.dev.live_bytes,
                peak_bytes: m.dev.peak_bytes,
                alloc_count: m.dev.alloc_count,
                free_count: m.dev.free_count,
            })
            .collect(),
        categories: CATEGORIES
            .iter()
            .map(|c| CatRow {
                name: c.to_string(),
                live_bytes: g.cat_live(c),
                peak_bytes: g.cat_peak(c),
                allocs: g.members.iter().map(|m| m.dev.cat(c).allocs).sum(),
            })
            .collect(),
        live_bytes: g.live(),
        peak_bytes: g.peak(),
        device_used_bytes: used,
        untracked_bytes: untracked,
        untracked_max_bytes: untracked_max,
        probes_total: g.members.iter().map(|m| m.dev.probes_total.max(m.dev.probes.len() as i64)).sum(),
        key_probes: g.key_probes(),
        failures_total: g.failures_total(),
        failures: g
            .failures()
            .into_iter()
            .map(|(m, f)| FailRow {
                pid: m.pid(),
                t_ms: f.t_ms,
                api: f.api.clone(),
                bytes: f.bytes,
                error_name: f.error_name.clone(),
                live_bytes: f.live_bytes,
                categories: f.categories.clone(),
                last_probe_free_bytes: f.last_probe.as_ref().and_then(|p| p.free_bytes),
                last_probe_t_ms: f.last_probe.as_ref().map(|p| p.t_ms),
            })
            .collect(),
        driver_costs: g
            .members
            .iter()
            .flat_map(|m| {
                m.dev.driver_costs.iter().map(move |c| CostRow {
                    pid: m.pid(),
                    api: c.api.clone(),
                    calls: c.calls,
                    bytes: c.bytes,
                })
            })
            .collect(),
        driver_cost_bytes: g.driver_cost_bytes(),
        largest_allocation: g.largest_allocation(),
        top_allocations: top,
        ipc: g.ipc(),
        graphs: g.graphs(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{json, Value};

    const MIB: i64 = 1 << 20;

    fn probe(t_ms: i64, seq: Option<i64>, free_mib: i64) -> Value {
        json!({"t_ms": t_ms, "seq": seq, "api": "cudaMemGetInfo",
               "free_bytes": free_mib * MIB, "total_bytes": 1024 * MIB})
    }

    /// One process, one device: a probe, the KV pool allocated, and a probe after it, all
    /// in the same millisecond (the SGLang pattern that confused `t_ms` alone).
    pub(crate) fn report(seqs: bool) -> Report {
        let s = |n: i64| if seqs { json!(n) } else { Value::Null };
        let sample = |n: i64, mib: i64| json!({"t_ms": 7, "seq": s(n), "live_bytes": mib * MIB, "other": mib * MIB});
        let v = json!({
            "schema": "culedger/1",
            "process": {"pid": 42, "host": "h", "start_unix_ms": 1000, "end_unix_ms": 2000, "exit": "running"},
            "devices": [{
                "index": 0,
                "total_bytes": 1024 * MIB,
                "probes": [probe(7, s(2).as_i64(), 900), probe(7, s(5).as_i64(), 300)],
                "top_allocations": [
                    {"ptr": "0x1", "bytes": 500 * MIB, "api": "cudaMalloc", "t_ms": 7, "seq": s(3), "category": "other"},
                    {"ptr": "0x2", "bytes": 100 * MIB, "api": "cudaMalloc", "t_ms": 7, "seq": s(4), "category": "other"},
                    {"ptr": "0x3", "bytes": 20 * MIB, "api": "cudaMalloc", "t_ms": 7, "seq": s(1), "category": "other"},
                ],
                "timeline": [sample(1, 20), sample(3, 520), sample(4, 620)],
            }],
        });
        serde_json::from_value(v).expect("a valid report")
    }

    pub(crate) fn run(r: Report) -> Run {
        Run { label: "t".into(), procs: vec![r], sources: Vec::new() }
    }

    #[test]
    fn sizing_probe_is_before_the_allocation_in_the_same_millisecond() {
        let run = run(report(true));
        let g = &groups(&run)[0];
        let big = g.largest_allocation().unwrap();
        assert_eq!((big.bytes, big.seq), (500 * MIB, Some(3)));
        let (_, p, why) = g.sizing_probe().unwrap();
        assert_eq!(
            (p.seq, p.free_bytes),
            (Some(2), Some(900 * MIB)),
            "the probe taken after the allocation must not be picked ({why})"
        );
    }

    #[test]
    fn without_seq_the_same_millisecond_counts_as_before() {
        // An older writer: no seq. The report cannot tell; the last probe of that
        // millisecond is taken, as before seq existed.
        let run = run(report(false));
        let g = &groups(&run)[0];
        let (_, p, _) = g.sizing_probe().unwrap();
        assert_eq!((p.seq, p.free_bytes), (None, Some(300 * MIB)));
        assert_eq!(g.probes().len(), 2, "both probes, in list order");
        assert_eq!(g.probes()[0].1.free_bytes, Some(900 * MIB));
    }

    #[test]
    fn first_and_last_probes_follow_seq_not_list_order() {
        let mut r = report(true);
        r.devices[0].probes.reverse();
        let run = run(r);
        let g = &groups(&run)[0];
        let seqs: Vec<_> = g.probes().iter().map(|(_, p)| p.seq).collect();
        assert_eq!(seqs, [Some(2), Some(5)]);
        let first = g.key_probes().into_iter().find(|k| k.why.contains("first query"));
        assert_eq!(first.unwrap().seq, Some(2));
    }

    #[test]
    fn untracked_counts_only_own_allocations_made_before_the_probe() {
        let run = run(report(true));
        let g = &groups(&run)[0];
        let (m, p) = g.probes()[0];
        assert_eq!(g.tracked_at(m, p), 20 * MIB, "the KV pool came after this probe");
        let (m, p) = g.probes()[1];
        assert_eq!(g.tracked_at(m, p), 620 * MIB);
        // used at the last probe 724 MiB, tracked 620 MiB.
        assert_eq!(g.untracked().0, Some(104 * MIB));
    }

    #[test]
    fn two_probes_in_one_millisecond_stay_two_key_probes() {
        let mut r = report(true);
        // A failure after the second probe: both the sizing probe and the failure's last
        // probe are shown, distinct although they share t_ms and api.
        r.devices[0].failures = vec![serde_json::from_value(json!({
            "t_ms": 7, "seq": 6, "api": "cudaMalloc", "bytes": 400 * MIB,
            "error": 2, "error_name": "cudaErrorMemoryAllocation",
            "last_probe": probe(7, Some(5), 300)}))
        .unwrap()];
        let run = run(r);
        let keys = groups(&run)[0].key_probes();
        let seqs: Vec<_> = keys.iter().map(|k| k.seq).collect();
        assert_eq!(seqs, [Some(2), Some(5)], "{keys:?}");
        assert!(keys[0].why.contains("first query") && keys[0].why.contains("largest allocation"));
        assert!(keys[1].why.contains("before the failed cudaMalloc"));
    }
}
