//! What the commands compute from a run: processes grouped per host and device, merged
//! timelines, device usage versus tracked bytes, the free-memory queries that matter, the
//! overview and the verdict.
//!
//! Everything here produces plain owned data ([`RunSummary`]) that the text, markdown and
//! JSON renderers share, so the three formats never disagree. Times are absolute
//! microseconds internally and the run's clock ([`Clock`]) in what is shown.

use crate::clock::Clock;
use crate::costs::{self, CostRow};
use crate::load::Run;
use crate::model::{
    first_recorded, last_before, Device, Failure, Graphs, Ipc, Probe, Report, Stamp, Stamped, CATEGORIES,
};
use crate::units::fmt_bytes;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// The schema id of `culedger report --format json` (docs/cli-json.md).
pub const REPORT_SCHEMA: &str = "culedger-report/1";

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

    pub fn label(&self) -> String {
        self.report.process.label()
    }

    /// Absolute time (µs since the epoch) of one of this process's records.
    pub fn abs_us(&self, rec: &dyn Stamped) -> i64 {
        crate::clock::abs_us(self.report, rec)
    }

    /// Absolute time of a process-relative microsecond count.
    pub fn abs_of(&self, rel_us: i64) -> i64 {
        self.report.process.start_us() + rel_us
    }

    /// When the process ended (its final report), or None while it runs or was killed.
    pub fn ended_us(&self) -> Option<i64> {
        let p = &self.report.process;
        p.ended().then(|| p.end_us())
    }

    /// Live bytes per category of this process on this device at absolute time `at_us`:
    /// the last timeline sample at or before it; nothing before the first sample or after
    /// the process ended (the driver frees a dead process's memory).
    pub fn live_at(&self, at_us: i64) -> [i64; 6] {
        if self.ended_us().is_some_and(|end| at_us > end) {
            return [0; 6];
        }
        // Timelines are in time order: binary search for the last sample at or before `at`.
        let n = self.dev.timeline.partition_point(|s| self.abs_us(s) <= at_us);
        n.checked_sub(1).map(|i| CATEGORIES.map(|c| self.dev.timeline[i].cat(c))).unwrap_or([0; 6])
    }

    /// Live bytes per category of this process on this device just before its own record
    /// stamped `at` (a probe, a failure): ordered by `(t_ms, seq)`, so allocations made in
    /// the same millisecond after it do not count.
    pub fn live_before(&self, at: Stamp) -> [i64; 6] {
        let n = self.dev.timeline.partition_point(|s| s.stamp().precedes(at));
        n.checked_sub(1).map(|i| CATEGORIES.map(|c| self.dev.timeline[i].cat(c))).unwrap_or([0; 6])
    }

    /// The earliest record of this process on this device (absolute µs).
    pub fn first_us(&self) -> Option<i64> {
        let d = self.dev;
        let all = d.timeline.iter().map(|s| self.abs_us(s));
        let all = all.chain(d.probes.iter().map(|p| self.abs_us(p)));
        let all = all.chain(d.failures.iter().map(|f| self.abs_us(f)));
        let all = all.chain(d.events.iter().map(|e| e.t0_us.map_or_else(|| self.abs_us(e), |t| self.abs_of(t))));
        all.min()
    }

    /// What the process holds on the device, in words: `allocations`, or only a context
    /// (`peer context` when it came from enabling peer access from another GPU).
    pub fn holds(&self) -> &'static str {
        if self.dev.alloc_count > 0 || self.dev.peak_bytes > 0 {
            "allocations"
        } else if self.dev.events.iter().any(|e| e.kind == "peer_access") {
            "peer context"
        } else {
            "context"
        }
    }
}

/// All processes that touched one device of one host.
pub struct DeviceGroup<'a> {
    pub host: String,
    pub index: i64,
    pub members: Vec<Member<'a>>,
    /// The run's clock (shared by every device of the run).
    pub clock: Clock,
}

/// Groups a run's processes per (host, device index), sorted.
pub fn groups(run: &Run) -> Vec<DeviceGroup<'_>> {
    let clock = Clock::of(&run.procs);
    let mut map: BTreeMap<(String, i64), Vec<Member>> = BTreeMap::new();
    for report in &run.procs {
        for dev in &report.devices {
            map.entry((report.process.host.clone(), dev.index)).or_default().push(Member { report, dev });
        }
    }
    map.into_iter().map(|((host, index), members)| DeviceGroup { host, index, members, clock }).collect()
}

/// A point of a merged timeline: absolute time (µs) and live bytes per category.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub t_unix_us: i64,
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
    /// On the run's clock (µs since its first process started).
    pub at_us: i64,
    pub t_ms: i64,
    pub seq: Option<i64>,
    pub bytes: i64,
    pub api: String,
    pub category: Option<String>,
    pub failed: bool,
}

/// A free-memory reading: what the device used at a query, what this run's processes had
/// allocated at that moment, and the difference.
#[derive(Debug, Clone, Serialize)]
pub struct Reading {
    pub pid: i64,
    pub api: String,
    /// On the run's clock.
    pub at_us: i64,
    pub free_bytes: i64,
    pub total_bytes: i64,
    /// `total - free`.
    pub used_bytes: i64,
    /// What the run's processes had allocated on the device at the query.
    pub tracked_bytes: i64,
    /// `used - tracked`: contexts, modules, graphs, peer mappings, rounding, other processes.
    pub untracked_bytes: i64,
    /// How old the reading is at the end of the run (its last report).
    pub age_us: i64,
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

    /// The end of the run as far as this device's processes tell: their last report.
    pub fn end_us(&self) -> i64 {
        self.members.iter().map(|m| m.report.process.end_us()).max().unwrap_or(self.clock.t0_us)
    }

    /// The device timeline: every member's samples summed as step functions.
    pub fn series(&self) -> Vec<Point> {
        let mut times: Vec<i64> = Vec::new();
        for m in &self.members {
            times.extend(m.dev.timeline.iter().map(|s| m.abs_us(s)));
            // The driver frees an exited process's memory: show the drop.
            if let Some(end) = m.ended_us() {
                times.push(end + 1);
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
                Point { t_unix_us: t, cats }
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
        // A category beyond the six (a user's or a tag's) has no series: the largest member's.
        let Some(i) = CATEGORIES.iter().position(|c| *c == name) else { return member_max };
        self.series().iter().map(|p| p.cats[i]).max().unwrap_or(0).max(member_max)
    }

    /// Every probe of every member, with the member, in time order (across processes by
    /// absolute time, within one by `(t_ms, seq)`).
    pub fn probes(&self) -> Vec<(Member<'a>, &'a Probe)> {
        let mut all: Vec<(Member, &Probe)> =
            self.members.iter().flat_map(|m| m.dev.probes.iter().map(move |p| (*m, p))).collect();
        all.sort_by_key(|(m, p)| (m.abs_us(*p), m.pid(), p.stamp().key()));
        all
    }

    /// What the processes of this run had allocated on the device when `m` made the
    /// probe `p`: the others' by absolute time, `m`'s own just before the probe.
    pub fn tracked_at(&self, m: Member, p: &Probe) -> i64 {
        let at = m.abs_us(p);
        self.members
            .iter()
            .map(|o| {
                let live = if std::ptr::eq(o.report, m.report) { o.live_before(p.stamp()) } else { o.live_at(at) };
                live.iter().sum::<i64>()
            })
            .sum()
    }

    /// The reading of the probe `p` of `m`, when the probe told both free and total.
    pub fn reading(&self, m: Member, p: &Probe) -> Option<Reading> {
        let (Some(free), Some(total)) = (p.free_bytes, p.total_bytes) else {
            return None;
        };
        if p.error != 0 {
            return None;
        }
        let tracked = self.tracked_at(m, p);
        let at = m.abs_us(p);
        Some(Reading {
            pid: m.pid(),
            api: p.api.clone(),
            at_us: self.clock.since(at),
            free_bytes: free,
            total_bytes: total,
            used_bytes: total - free,
            tracked_bytes: tracked,
            untracked_bytes: total - free - tracked,
            age_us: (self.end_us() - at).max(0),
        })
    }

    /// Every reading of the device, in time order.
    pub fn readings(&self) -> Vec<Reading> {
        self.probes().into_iter().filter_map(|(m, p)| self.reading(m, p)).collect()
    }

    /// The last reading: used and tracked compared at the query itself.
    pub fn last_reading(&self) -> Option<Reading> {
        self.readings().pop()
    }

    /// The reading with the most untracked memory.
    pub fn max_untracked(&self) -> Option<Reading> {
        self.readings().into_iter().rev().max_by_key(|r| r.untracked_bytes)
    }

    /// The largest allocation or failed attempt on the device (ties: the earliest).
    pub fn largest_allocation(&self) -> Option<LargeAlloc> {
        let mut candidates: Vec<(i64, LargeAlloc)> = Vec::new();
        for m in &self.members {
            for a in &m.dev.top_allocations {
                let at = m.abs_us(a);
                let large = LargeAlloc {
                    pid: m.pid(),
                    at_us: self.clock.since(at),
                    t_ms: a.t_ms,
                    seq: a.seq,
                    bytes: a.bytes,
                    api: a.api.clone(),
                    category: Some(a.category.clone()),
                    failed: false,
                };
                candidates.push((at, large));
            }
            for f in &m.dev.failures {
                let at = m.abs_us(f);
                let large = LargeAlloc {
                    pid: m.pid(),
                    at_us: self.clock.since(at),
                    t_ms: f.t_ms,
                    seq: f.seq,
                    bytes: f.bytes,
                    api: f.api.clone(),
                    category: None,
                    failed: true,
                };
                candidates.push((at, large));
            }
        }
        candidates
            .into_iter()
            .max_by_key(|(at, a)| (a.bytes, std::cmp::Reverse((*at, a.seq.unwrap_or(-1)))))
            .map(|(_, a)| a)
    }

    pub fn member(&self, pid: i64) -> Option<Member<'a>> {
        self.members.iter().copied().find(|m| m.pid() == pid)
    }

    /// The probe the program sized its memory from: the last probe of the process that
    /// made the device's largest allocation, before that allocation; without allocations
    /// in the report, the last probe before the steepest rise of that process's timeline.
    /// "Before" is in the process's record order, `(t_ms, seq)`.
    pub fn sizing_probe(&self) -> Option<(Member<'a>, &'a Probe, String)> {
        let c = &self.clock;
        if let Some(big) = self.largest_allocation() {
            let m = self.member(big.pid)?;
            let at = Stamp { t_ms: big.t_ms, seq: big.seq };
            let p = last_before(&m.dev.probes, at)?;
            let what = match (&big.category, big.failed) {
                (_, true) => format!("failed {} of {}", big.api, fmt_bytes(big.bytes)),
                (Some(c), false) => format!("{} {} of {}", c, big.api, fmt_bytes(big.bytes)),
                (None, false) => format!("{} of {}", big.api, fmt_bytes(big.bytes)),
            };
            return Some((m, p, format!("before the largest allocation ({what} at {})", c.at(c.t0_us + big.at_us))));
        }
        let mut best: Option<(Member, Stamp, i64, i64)> = None;
        for m in &self.members {
            for w in m.dev.timeline.windows(2) {
                let rise = w[1].live_bytes - w[0].live_bytes;
                if rise > 0 && !matches!(&best, Some(b) if rise <= b.2) {
                    best = Some((*m, w[1].stamp(), rise, m.abs_us(&w[1])));
                }
            }
        }
        let (m, at, rise, abs) = best?;
        let p = last_before(&m.dev.probes, at)?;
        Some((m, p, format!("before the steepest rise (+{} at {})", fmt_bytes(rise), c.at(abs))))
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
            out.push((m.abs_us(p), KeyProbe::new(self, m, p, why)));
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
                    add(*m, p, format!("before the failed {} of {}", f.api, fmt_bytes(f.bytes)));
                }
            }
        }
        out.sort_by_key(|(t, k)| (*t, k.pid, k.seq.unwrap_or(-1)));
        out.into_iter().map(|(_, k)| k).collect()
    }

    pub fn failures(&self) -> Vec<(Member<'a>, &'a Failure)> {
        let mut all: Vec<(Member, &Failure)> =
            self.members.iter().flat_map(|m| m.dev.failures.iter().map(move |f| (*m, f))).collect();
        all.sort_by_key(|(m, f)| (m.abs_us(*f), m.pid(), f.stamp().key()));
        all
    }

    /// The failures that are requests of their own (not a retry of the previous failure of the
    /// same process), each with the times of its retries.
    pub fn failed_requests(&self) -> Vec<(Member<'a>, &'a Failure, Vec<i64>)> {
        let mut out: Vec<(Member, &Failure, Vec<i64>)> = Vec::new();
        for (m, f) in self.failures() {
            let prev = out.iter_mut().rev().find(|(pm, _, _)| pm.pid() == m.pid());
            if let Some((pm, pf, retries)) = prev {
                let last_us = retries.last().copied().unwrap_or_else(|| pm.abs_us(*pf));
                if is_retry(m.report, pf, f, last_us, m.abs_us(f)) {
                    retries.push(m.abs_us(f));
                    continue;
                }
            }
            out.push((m, f, Vec::new()));
        }
        out
    }

    pub fn failures_total(&self) -> i64 {
        self.members.iter().map(|m| m.dev.failures_total.max(m.dev.failures.len() as i64)).sum()
    }

    /// The hidden driver costs per process and API, de-noised (see `costs`).
    pub fn cost_rows(&self) -> Vec<CostRow> {
        costs::rows(self)
    }

    /// The sum of the de-noised hidden driver costs on this device.
    pub fn driver_cost_bytes(&self) -> i64 {
        self.cost_rows().iter().map(|r| r.bytes).sum()
    }

    /// Driver costs per API summed over the processes, de-noised: api -> (calls, bytes).
    pub fn driver_costs_by_api(&self) -> BTreeMap<String, (i64, i64)> {
        let mut map: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for c in self.cost_rows() {
            let e = map.entry(c.api.clone()).or_default();
            e.0 += c.calls;
            e.1 += c.bytes;
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
            t.instantiate_measured += g.instantiate_measured;
        }
        t
    }

    /// The category holding the most live bytes: (name, bytes), when any holds some.
    pub fn biggest_category(&self) -> Option<(String, i64)> {
        CATEGORIES.iter().map(|c| (c.to_string(), self.cat_live(c))).filter(|(_, b)| *b > 0).max_by_key(|(_, b)| *b)
    }
}

/// The categories worth listing for a run: those that held memory (live, peak or live
/// allocations) in some process on some device; all six with `all`.
/// Categories beyond the six (a user's rules or a program's tags name them; reports since
/// report-time categories carry them), sorted; with `all` also the empty ones.
pub fn extra_categories(run: &Run, all: bool) -> Vec<String> {
    let mut v: Vec<String> = run
        .procs
        .iter()
        .flat_map(|r| &r.devices)
        .flat_map(|d| d.categories.iter())
        .filter(|(name, s)| {
            !CATEGORIES.contains(&name.as_str()) && (all || s.live_bytes != 0 || s.peak_bytes != 0 || s.allocs != 0)
        })
        .map(|(name, _)| name.clone())
        .collect();
    v.sort();
    v.dedup();
    v
}

pub fn shown_categories(run: &Run, all: bool) -> Vec<&'static str> {
    CATEGORIES
        .iter()
        .copied()
        .filter(|c| {
            all || run.procs.iter().flat_map(|r| &r.devices).any(|d| {
                let s = d.cat(c);
                s.live_bytes != 0 || s.peak_bytes != 0 || s.allocs != 0
            })
        })
        .collect()
}

/// A free-memory query and what the program was told.
#[derive(Debug, Clone, Serialize)]
pub struct KeyProbe {
    pub pid: i64,
    pub label: String,
    /// On the run's clock (µs since its first process started).
    pub at_us: i64,
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
    fn new(g: &DeviceGroup, m: Member, p: &Probe, why: String) -> Self {
        KeyProbe {
            pid: m.pid(),
            label: m.label(),
            at_us: g.clock.since(m.abs_us(p)),
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
    /// Always [`REPORT_SCHEMA`].
    pub schema: &'static str,
    pub label: String,
    /// The run(s) read (more than one only with `--merge-runs`).
    pub run_ids: Vec<String>,
    /// The origin of every `at_us`: when the run's first process started (µs since the epoch).
    pub t0_unix_us: i64,
    /// The categories the text lists (non-empty ones, or all with `--all-categories`).
    pub categories_shown: Vec<String>,
    pub verdict: Verdict,
    /// What the reader must know before reading the figures: runs merged with `--merge-runs`
    /// that ran one after another (their figures add up as if they had run together), with
    /// each run's own peak. Left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    pub overview: Vec<OverviewRow>,
    pub processes: Vec<ProcSummary>,
    pub devices: Vec<DeviceSummary>,
}

/// The one-line answer at the top of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Some allocation failed.
    pub failed: bool,
    pub text: String,
    /// Processes that allocated device memory, and those among them with a failure.
    pub ranks: usize,
    pub failed_ranks: usize,
}

/// One line per GPU in the overview.
#[derive(Debug, Clone, Serialize)]
pub struct OverviewRow {
    pub host: String,
    pub index: i64,
    pub processes: usize,
    /// Tracked live bytes (at each process's last report).
    pub tracked_bytes: i64,
    pub peak_bytes: i64,
    /// Untracked memory and device usage at the last query (null without one).
    pub untracked_bytes: Option<i64>,
    pub used_bytes: Option<i64>,
    pub total_bytes: Option<i64>,
    pub failures: i64,
    /// The category with the most live bytes.
    pub biggest_category: Option<String>,
    pub biggest_category_bytes: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProcSummary {
    pub pid: i64,
    pub ppid: i64,
    pub host: String,
    /// The best name for the process (title, argv, rank hints).
    pub label: String,
    pub role: String,
    pub title: Option<String>,
    pub comm: Option<String>,
    pub env: BTreeMap<String, String>,
    pub run_id: Option<String>,
    pub argv: Vec<String>,
    /// How it ended, in words (`exit 1`, `killed by SIGTERM`, `no final report (killed?)`).
    pub status: String,
    pub exit: String,
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i64>,
    pub start_unix_us: i64,
    /// On the run's clock.
    pub started_at_us: i64,
    pub duration_us: i64,
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
    /// Every process whose report has this device (a context counts).
    pub processes: Vec<DevProc>,
    pub categories: Vec<CatRow>,
    pub live_bytes: i64,
    pub peak_bytes: i64,
    /// The last free-memory query, used and tracked compared at that moment.
    pub last_query: Option<Reading>,
    /// The query with the most untracked memory.
    pub max_untracked: Option<Reading>,
    pub probes_total: i64,
    pub key_probes: Vec<KeyProbe>,
    pub failures_total: i64,
    /// Failed requests: `failures_total` less the retries folded into `failures`.
    pub failed_requests: i64,
    pub failures: Vec<FailRow>,
    /// Per process and API, de-noised (see docs/cli-json.md).
    pub driver_costs: Vec<CostRow>,
    /// Sum of `driver_costs[].bytes` (de-noised), and of what was measured.
    pub driver_cost_bytes: i64,
    pub driver_cost_measured_bytes: i64,
    pub largest_allocation: Option<LargeAlloc>,
    pub top_allocations: Vec<TopRow>,
    /// Live bytes by caller (`crate::sites`).
    pub sites: Vec<crate::sites::SiteRow>,
    pub ipc: Ipc,
    pub graphs: Graphs,
}

#[derive(Debug, Clone, Serialize)]
pub struct DevProc {
    pub pid: i64,
    pub label: String,
    pub role: String,
    /// `allocations`, `peer context` (its context here serves peer access) or `context`.
    pub holds: String,
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
    pub label: String,
    /// On the run's clock.
    pub at_us: i64,
    pub t_ms: i64,
    pub api: String,
    pub bytes: i64,
    pub error_name: String,
    pub live_bytes: i64,
    pub categories: BTreeMap<String, i64>,
    pub last_probe_free_bytes: Option<i64>,
    pub last_probe_at_us: Option<i64>,
    /// The same request failing again right after (see [`is_retry`]), on the run's clock:
    /// shown with this failure rather than as failures of their own.
    pub retried_at_us: Vec<i64>,
}

/// Is failure `f` of process `report` the same request as its previous failure `prev` made
/// again: the same API and size, from the same call site (or the same Python stack: a retry
/// inside the allocator comes from another native return address), within a second.
/// PyTorch's caching allocator does that on every out-of-memory
/// (`c10/cuda/CUDACachingAllocator.cpp`, `DeviceCachingAllocator::malloc`: after a failed
/// `alloc_block` it releases its cached blocks and calls `alloc_block` again).
pub fn is_retry(report: &Report, prev: &Failure, f: &Failure, prev_us: i64, f_us: i64) -> bool {
    let python = |id: Option<i64>| report.sites.iter().find(|s| Some(s.id) == id).map(|s| &s.python);
    let same_place =
        prev.site == f.site || python(prev.site).is_some_and(|a| !a.is_empty() && Some(a) == python(f.site));
    prev.api == f.api && prev.bytes == f.bytes && same_place && (0..=1_000_000).contains(&(f_us - prev_us))
}

#[derive(Debug, Clone, Serialize)]
pub struct TopRow {
    pub pid: i64,
    pub label: String,
    pub ptr: String,
    pub bytes: i64,
    pub category: String,
    pub api: String,
    /// On the run's clock.
    pub at_us: i64,
    pub t_ms: i64,
    pub seq: Option<i64>,
    pub exported: bool,
    pub captured: bool,
    pub caller: Option<String>,
}

/// How many of the largest allocations a device section lists.
pub const TOP_N: usize = 10;

/// The verdict: who failed to allocate how much, or that nothing failed.
fn verdict(run: &Run, gs: &[DeviceGroup]) -> Verdict {
    let allocating: BTreeSet<i64> = run
        .procs
        .iter()
        .filter(|r| r.devices.iter().any(|d| d.alloc_count > 0 || d.peak_bytes > 0 || !d.failures.is_empty()))
        .map(|r| r.process.pid)
        .collect();
    let mut failed: BTreeSet<i64> = BTreeSet::new();
    let mut sizes: Vec<i64> = Vec::new();
    let mut total_failures = 0;
    for g in gs {
        let requests = g.failed_requests();
        let retries: usize = requests.iter().map(|(_, _, r)| r.len()).sum();
        total_failures += g.failures_total() - retries as i64;
        for (m, f, _) in requests {
            failed.insert(m.pid());
            sizes.push(f.bytes);
        }
    }
    let ranks = allocating.len().max(failed.len());
    if total_failures > 0 {
        let (lo, hi) = (sizes.iter().min().copied().unwrap_or(0), sizes.iter().max().copied().unwrap_or(0));
        let size = crate::units::fmt_range(lo, hi);
        let who = if ranks == 1 { "the process".to_string() } else { format!("{} of {ranks} ranks", failed.len()) };
        let times = if total_failures as usize > failed.len() {
            format!(" ({total_failures} failed allocations)")
        } else {
            String::new()
        };
        return Verdict {
            failed: true,
            text: format!("{who} failed to allocate {size}{times}; see `culedger explain` for why"),
            ranks,
            failed_ranks: failed.len(),
        };
    }
    // The fullest device is the one whose query saw the most used (tracked bytes alone
    // understate a device whose contexts, modules or other processes took much), else the
    // one with the highest tracked peak.
    let fullest = gs
        .iter()
        .filter_map(|g| g.readings().into_iter().max_by_key(|r| r.used_bytes).map(|r| (g, r)))
        .max_by_key(|(_, r)| r.used_bytes);
    if let Some((g, r)) = fullest {
        let text = format!(
            "no allocation failed; the fullest device was {} with {} used of {} at {}: {} tracked, {} untracked",
            g.title(),
            fmt_bytes(r.used_bytes),
            fmt_bytes(r.total_bytes),
            crate::clock::fmt_secs(r.at_us),
            fmt_bytes(r.tracked_bytes),
            fmt_bytes(r.untracked_bytes)
        );
        return Verdict { failed: false, text, ranks, failed_ranks: 0 };
    }
    let peak = gs.iter().max_by_key(|g| g.peak());
    let text = match peak {
        Some(g) => {
            let total = g.total_bytes().map(|t| format!(" of {}", fmt_bytes(t))).unwrap_or_default();
            format!(
                "no allocation failed; the fullest device was {} with {} tracked at its peak{total} (no free-memory \
                 query measured what else it held)",
                g.title(),
                fmt_bytes(g.peak())
            )
        }
        None => "no allocation failed; no device memory was tracked".to_string(),
    };
    Verdict { failed: false, text, ranks, failed_ranks: 0 }
}

/// When the merged runs never ran at the same time (each started after the one before had
/// ended), a sentence saying so, with each run's own tracked peak and where it was: the merged
/// figures add their processes up as if they had shared the GPUs.
pub fn sequential_runs(run: &Run) -> Option<String> {
    if run.run_ids.len() < 2 {
        return None;
    }
    let mut spans: Vec<(i64, i64, &str)> = run
        .run_ids
        .iter()
        .filter_map(|id| {
            let procs = run.procs.iter().filter(|r| r.process.run_id.as_deref() == Some(id.as_str()));
            let (start, end) =
                procs.fold((i64::MAX, i64::MIN), |(s, e), r| (s.min(r.process.start_us()), e.max(r.process.end_us())));
            (start <= end).then_some((start, end, id.as_str()))
        })
        .collect();
    spans.sort();
    if spans.len() < 2 || spans.windows(2).any(|w| w[1].0 < w[0].1) {
        return None;
    }
    let peaks: Vec<String> = spans
        .iter()
        .map(|(_, _, id)| {
            let own = Run {
                procs: run.procs.iter().filter(|r| r.process.run_id.as_deref() == Some(*id)).cloned().collect(),
                ..Run::default()
            };
            let gs = groups(&own);
            match gs.iter().max_by_key(|g| g.peak()) {
                Some(g) => {
                    let total = g.total_bytes().map(|t| format!(" of {}", fmt_bytes(t))).unwrap_or_default();
                    format!("{id} {} on {}{total}", fmt_bytes(g.peak()), g.title())
                }
                None => format!("{id} nothing tracked"),
            }
        })
        .collect();
    Some(format!(
        "The {} merged runs ran one after another, never at the same time: the figures below add them up as if \
         they had shared the GPUs. Each run's own tracked peak: {}.",
        spans.len(),
        peaks.join("; ")
    ))
}

pub fn summarize(run: &Run, all_categories: bool) -> RunSummary {
    let gs = groups(run);
    let clock = Clock::of(&run.procs);
    let processes = run
        .procs
        .iter()
        .map(|r| {
            let p = &r.process;
            ProcSummary {
                pid: p.pid,
                ppid: p.ppid,
                host: p.host.clone(),
                label: p.label(),
                role: p.role(),
                title: p.title.clone(),
                comm: p.comm.clone(),
                env: p.env.clone(),
                run_id: p.run_id.clone(),
                argv: p.argv.clone(),
                status: crate::runs::status(r, run.summary.as_ref()),
                exit: p.exit.clone(),
                exit_code: p.exit_code,
                signal: p.signal,
                start_unix_us: p.start_us(),
                started_at_us: clock.since(p.start_us()),
                duration_us: p.end_us() - p.start_us(),
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
    let devices: Vec<DeviceSummary> = gs.iter().map(summarize_device).collect();
    let overview = gs
        .iter()
        .zip(&devices)
        .map(|(g, d)| {
            let biggest = g.biggest_category();
            OverviewRow {
                host: g.host.clone(),
                index: g.index,
                processes: g.members.len(),
                tracked_bytes: d.live_bytes,
                peak_bytes: d.peak_bytes,
                untracked_bytes: d.last_query.as_ref().map(|r| r.untracked_bytes),
                used_bytes: d.last_query.as_ref().map(|r| r.used_bytes),
                total_bytes: d.total_bytes,
                failures: d.failed_requests,
                biggest_category: biggest.as_ref().map(|b| b.0.clone()),
                biggest_category_bytes: biggest.map(|b| b.1),
            }
        })
        .collect();
    RunSummary {
        schema: REPORT_SCHEMA,
        label: run.label.clone(),
        run_ids: run.run_ids.clone(),
        t0_unix_us: clock.t0_us,
        categories_shown: shown_categories(run, all_categories)
            .iter()
            .map(|c| c.to_string())
            .chain(extra_categories(run, all_categories))
            .collect(),
        verdict: verdict(run, &gs),
        notes: sequential_runs(run).into_iter().collect(),
        overview,
        processes,
        devices,
    }
}

pub fn summarize_device(g: &DeviceGroup) -> DeviceSummary {
    let failed: Vec<FailRow> = g
        .failed_requests()
        .into_iter()
        .map(|(m, f, retries)| FailRow {
            pid: m.pid(),
            label: m.label(),
            at_us: g.clock.since(m.abs_us(f)),
            t_ms: f.t_ms,
            api: f.api.clone(),
            bytes: f.bytes,
            error_name: f.error_name.clone(),
            live_bytes: f.live_bytes,
            categories: f.categories.clone(),
            last_probe_free_bytes: f.last_probe.as_ref().and_then(|p| p.free_bytes),
            last_probe_at_us: f.last_probe.as_ref().map(|p| g.clock.since(m.abs_us(p))),
            retried_at_us: retries.into_iter().map(|us| g.clock.since(us)).collect(),
        })
        .collect();
    // Categories beyond the six on this device (the text shows them when not empty).
    let mut extras: Vec<String> = g
        .members
        .iter()
        .flat_map(|m| m.dev.categories.keys())
        .filter(|name| !CATEGORIES.contains(&name.as_str()))
        .cloned()
        .collect();
    extras.sort();
    extras.dedup();
    let mut top: Vec<TopRow> = g
        .members
        .iter()
        .flat_map(|m| {
            m.dev.top_allocations.iter().map(move |a| TopRow {
                pid: m.pid(),
                label: m.label(),
                ptr: a.ptr.clone(),
                bytes: a.bytes,
                category: a.category.clone(),
                api: a.api.clone(),
                at_us: g.clock.since(m.abs_us(a)),
                t_ms: a.t_ms,
                seq: a.seq,
                exported: a.exported,
                captured: a.captured,
                caller: a.caller.clone(),
            })
        })
        .collect();
    top.sort_by(|a, b| {
        b.bytes.cmp(&a.bytes).then(a.pid.cmp(&b.pid)).then(a.at_us.cmp(&b.at_us)).then(a.seq.cmp(&b.seq))
    });
    top.truncate(TOP_N);
    let cost_rows = g.cost_rows();
    DeviceSummary {
        host: g.host.clone(),
        index: g.index,
        total_bytes: g.total_bytes(),
        processes: g
            .members
            .iter()
            .map(|m| DevProc {
                pid: m.pid(),
                label: m.label(),
                role: m.report.process.role(),
                holds: m.holds().to_string(),
                live_bytes: m.dev.live_bytes,
                peak_bytes: m.dev.peak_bytes,
                alloc_count: m.dev.alloc_count,
                free_count: m.dev.free_count,
            })
            .collect(),
        categories: CATEGORIES
            .iter()
            .map(|c| c.to_string())
            .chain(extras.iter().cloned())
            .map(|c| CatRow {
                name: c.clone(),
                live_bytes: g.cat_live(&c),
                peak_bytes: g.cat_peak(&c),
                allocs: g.members.iter().map(|m| m.dev.cat(&c).allocs).sum(),
            })
            .collect(),
        live_bytes: g.live(),
        peak_bytes: g.peak(),
        last_query: g.last_reading(),
        max_untracked: g.max_untracked(),
        probes_total: g.members.iter().map(|m| m.dev.probes_total.max(m.dev.probes.len() as i64)).sum(),
        key_probes: g.key_probes(),
        failures_total: g.failures_total(),
        failed_requests: g.failures_total() - failed.iter().map(|f| f.retried_at_us.len() as i64).sum::<i64>(),
        failures: failed,
        driver_cost_bytes: cost_rows.iter().map(|c| c.bytes).sum(),
        driver_cost_measured_bytes: cost_rows.iter().map(|c| c.measured_bytes).sum(),
        driver_costs: cost_rows,
        largest_allocation: g.largest_allocation(),
        top_allocations: top,
        sites: crate::sites::rows(g),
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
        Run { label: "t".into(), procs: vec![r], ..Run::default() }
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
    fn an_allocators_retry_folds_into_its_request() {
        // PyTorch's allocator retries a failed cudaMalloc once: the same size from the same Python
        // stack (another native return address: another site id), a millisecond later. A later
        // failure of another size is a request of its own, and so is a retry more than 1 s later.
        let mut r = report(true);
        let frames = json!([{"file": "/srv/sglang/srt/mem_cache/memory_pool.py", "function": "f", "line": 3}]);
        r.sites = serde_json::from_value(json!([
            {"id": 1, "python": frames, "native": [{"object": "libc10_cuda.so", "offset": "0x10"}]},
            {"id": 2, "python": frames, "native": [{"object": "libc10_cuda.so", "offset": "0x20"}]},
            {"id": 3, "python": [{"file": "/srv/other.py", "function": "g", "line": 1}], "native": []}
        ]))
        .unwrap();
        let fail = |t_us: i64, seq: i64, bytes: i64, site: i64| {
            serde_json::from_value::<Failure>(
                json!({"t_ms": t_us / 1000, "t_us": t_us, "seq": seq, "api": "cudaMalloc",
                "bytes": bytes, "error": 2, "error_name": "cudaErrorMemoryAllocation", "site": site}),
            )
            .unwrap()
        };
        r.devices[0].failures = vec![
            fail(100_000, 20, 900 * MIB, 1),
            fail(101_000, 21, 900 * MIB, 2),
            fail(102_000, 22, 900 * MIB, 3),
            fail(103_000, 23, 100 * MIB, 3),
            fail(2_000_000, 24, 100 * MIB, 3),
        ];
        r.devices[0].failures_total = 5;
        let run = run(r);
        let g = &groups(&run)[0];
        let req: Vec<(i64, usize)> = g.failed_requests().iter().map(|(_, f, rs)| (f.seq.unwrap(), rs.len())).collect();
        assert_eq!(req, [(20, 1), (22, 0), (23, 0), (24, 0)], "a retry from another stack is not folded");
        let s = summarize_device(g);
        assert_eq!((s.failures_total, s.failed_requests, s.failures.len()), (5, 4, 4));
        assert_eq!(s.failures[0].retried_at_us.len(), 1);
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
        let last = g.last_reading().unwrap();
        assert_eq!((last.used_bytes, last.tracked_bytes, last.untracked_bytes), (724 * MIB, 620 * MIB, 104 * MIB));
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
