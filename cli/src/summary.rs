//! The run summary every renderer of `culedger report` (text, markdown, JSON, the one
//! screen) shares, so the formats never disagree: the verdict, the overview, and per
//! process and per device the figures, as plain owned data ([`RunSummary`]). It is computed
//! from the device groups of [`crate::analysis`]; times are on the run's clock ([`Clock`]).

use crate::analysis::{
    extra_categories, groups, query_lines, shown_categories, DeviceGroup, GroupWords, Holds, LargeAlloc, QueryLine,
    Reading,
};
use crate::clock::Clock;
use crate::costs::CostLine;
use crate::figures::Figure;
use crate::load::Run;
use crate::model::{Graphs, Ipc, CATEGORIES};
use crate::units::fmt_bytes;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// The schema id of `culedger report --format json` (docs/cli-json.md).
pub const REPORT_SCHEMA: &str = "culedger-report/1";

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
    /// A MIG device's index among its GPU's MIG devices (`index` is its GPU's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig_index: Option<i64>,
    /// The GPU's name where its host's numbering is not known (`DeviceGroup::uuid_name`);
    /// left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid_name: Option<String>,
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
    pub exit: crate::model::Exit,
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
    /// A MIG device's index among its GPU's MIG devices (`index` is its GPU's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig_index: Option<i64>,
    /// The GPU's name where its host's numbering is not known (`DeviceGroup::uuid_name`);
    /// left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid_name: Option<String>,
    /// The physical GPU (absent for reports written before culedger recorded it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// For a MIG device (`uuid` `MIG-...`): its GPU's UUID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_uuid: Option<String>,
    /// For a MIG device: its GPU instance's id (NVML's; the DCGM exporter's `GPU_I_ID`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_instance_id: Option<i64>,
    /// Figures that cannot all be true (`DeviceGroup::impossible`), one line each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub impossible: Vec<String>,
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
    pub key_probes: Vec<QueryLine>,
    pub failures_total: i64,
    /// Failed requests: `failures_total` less the retries folded into `failures`.
    pub failed_requests: i64,
    pub failures: Vec<FailRow>,
    /// Per process and API, de-noised (see docs/cli-json.md).
    pub driver_costs: Vec<CostLine>,
    /// Sum of `driver_costs[].bytes` (de-noised), and of what was measured.
    pub driver_cost_bytes: i64,
    pub driver_cost_measured_bytes: i64,
    pub largest_allocation: Option<LargeAlloc>,
    pub top_allocations: Vec<TopRow>,
    /// Live bytes by caller (`culedger_analysis::sites`).
    pub sites: Vec<culedger_analysis::sites::SiteRow>,
    pub ipc: Ipc,
    pub graphs: Graphs,
}

#[derive(Debug, Clone, Serialize)]
pub struct DevProc {
    pub pid: i64,
    /// With `pid` and the device's host, which process this is (processes in containers
    /// share pids); not in the JSON (`report --format json` has the processes' own list).
    #[serde(skip)]
    pub start_unix_us: i64,
    pub label: String,
    pub role: String,
    /// `allocations`, `peer context` (its context here serves peer access) or `context`.
    pub holds: Holds,
    /// The process's own ordinal for this GPU, where it is not the GPU's number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<i64>,
    pub live_bytes: i64,
    pub peak_bytes: i64,
    pub alloc_count: i64,
    pub free_count: i64,
    /// What its context here costs, estimated (`costs::context_estimate`: the smallest
    /// untracked memory a process saw at its first query on this GPU), for a process that
    /// holds only a context: none of it is tracked, all of it is device memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_bytes: Option<i64>,
}

/// Sorts processes by rank (a launcher first), then by start, where any has a rank; in start
/// order otherwise.
fn by_rank<T>(v: &mut [T], key: impl Fn(&T) -> (BTreeMap<String, String>, i64)) {
    let rank = |env: &BTreeMap<String, String>| {
        ["RANK", "LOCAL_RANK"].iter().find_map(|k| env.get(*k).and_then(|v| v.trim().parse::<i64>().ok()))
    };
    if !v.iter().any(|x| rank(&key(x).0).is_some()) {
        return;
    }
    v.sort_by_key(|x| {
        let (env, start) = key(x);
        (rank(&env).unwrap_or(-1), start)
    });
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
    /// Alike allocations folded into this row (same process, size, category, API, flags and
    /// caller: a model's identical layers), 1 when alone; `at_us` is the first of them and
    /// `last_at_us` the last.
    pub count: usize,
    pub last_at_us: i64,
}

/// How many of the largest allocations a device section lists (rows, after folding alike
/// ones).
pub const TOP_N: usize = 10;

/// The processes that allocated device memory and those among them with a failed
/// allocation: (failed, ranks). Every output that counts failed ranks takes them from here
/// (report's verdict, explain's, the one screen, html, metrics), so that they agree.
pub fn failed_ranks(run: &Run, gs: &[DeviceGroup]) -> (usize, usize) {
    let (failed, ranks, _, _) = counted(run, gs);
    (failed.len(), ranks)
}

type Pid<'a> = (&'a str, i64, i64);

/// (failed processes, ranks, sizes of the failed requests, failed requests).
fn counted<'a>(run: &'a Run, gs: &[DeviceGroup<'a>]) -> (BTreeSet<Pid<'a>>, usize, Vec<i64>, i64) {
    // A process is (host, pid, start): processes in containers share pids.
    let allocating: BTreeSet<Pid> = run
        .procs
        .iter()
        .filter(|r| r.devices.iter().any(|d| d.alloc_count > 0 || d.peak_bytes > 0 || !d.failures.is_empty()))
        .map(|r| (r.process.host.as_str(), r.process.pid, r.process.start_us()))
        .collect();
    let mut failed: BTreeSet<Pid> = BTreeSet::new();
    let mut sizes: Vec<i64> = Vec::new();
    let mut total_failures = 0;
    for g in gs {
        total_failures += Figure::FailedRequests.read(g).unwrap_or(0);
        for (m, f, _) in g.failed_requests() {
            failed.insert((m.report.process.host.as_str(), m.pid(), m.report.process.start_us()));
            sizes.push(f.bytes);
        }
    }
    let ranks = allocating.len().max(failed.len());
    (failed, ranks, sizes, total_failures)
}

/// The reading the overview shows for a GPU: where an allocation failed, the first reading at
/// or after its first failure (the GPU as the failure left it; the page's picture takes the
/// same moment), else the last before it; otherwise the last reading. The last reading of a
/// failed run is taken as its processes exit (each final report reads the GPU): it varies
/// with the order they exit in and showed a full GPU as 512 MiB used next to its failure.
fn overview_reading(g: &DeviceGroup, d: &DeviceSummary) -> Option<Reading> {
    let Some((m, f)) = g.failures().into_iter().next() else { return d.last_query.clone() };
    let t = g.clock.since(m.abs_us(f));
    let rs = g.readings();
    rs.iter().find(|r| r.at_us >= t).or_else(|| rs.iter().rev().find(|r| r.at_us <= t)).cloned()
}

/// The verdict: who failed to allocate how much, or that nothing failed.
fn verdict(run: &Run, gs: &[DeviceGroup]) -> Verdict {
    let (failed, ranks, sizes, total_failures) = counted(run, gs);
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

/// The run's summary, from its device groups (`run_analysis::Analysis` computes them once).
pub fn summarize(run: &Run, gs: &[DeviceGroup], all_categories: bool) -> RunSummary {
    culedger_analysis::counts::computed(culedger_analysis::counts::Part::Summary);
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
                status: crate::runs::status_in(r, run),
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
    let mut processes: Vec<ProcSummary> = processes;
    by_rank(&mut processes, |p| (p.env.clone(), p.start_unix_us));
    let mut devices: Vec<DeviceSummary> = gs.iter().map(summarize_device).collect();
    for (d, g) in devices.iter_mut().zip(gs) {
        let env: BTreeMap<(i64, i64), BTreeMap<String, String>> =
            g.members.iter().map(|m| ((m.pid(), m.report.process.start_us()), m.report.process.env.clone())).collect();
        by_rank(&mut d.processes, |p| (env.get(&(p.pid, p.start_unix_us)).cloned().unwrap_or_default(), p.start_unix_us));
    }
    let overview = gs
        .iter()
        .zip(&devices)
        .map(|(g, d)| {
            let biggest = g.biggest_category();
            OverviewRow {
                host: g.host.clone(),
                index: g.index,
                mig_index: g.mig_index,
                uuid_name: g.uuid_name.clone(),
                processes: g.members.len(),
                tracked_bytes: d.live_bytes,
                peak_bytes: d.peak_bytes,
                untracked_bytes: overview_reading(g, d).map(|r| r.untracked_bytes),
                used_bytes: overview_reading(g, d).map(|r| r.used_bytes),
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
        verdict: verdict(run, gs),
        notes: sequential_runs(run)
            .into_iter()
            .chain(crate::analysis::ordinal_fallback_note(run))
            .chain(crate::analysis::pci_numbering_note(gs))
            .chain(devices.iter().flat_map(|d| d.impossible.iter().map(|l| format!("Impossible figures: {l}."))))
            .collect(),
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
                count: 1,
                last_at_us: g.clock.since(m.abs_us(a)),
            })
        })
        .collect();
    top.sort_by(|a, b| {
        b.bytes.cmp(&a.bytes).then(a.pid.cmp(&b.pid)).then(a.at_us.cmp(&b.at_us)).then(a.seq.cmp(&b.seq))
    });
    // Alike allocations fold into one row (ten identical 1.24 GiB layers are one line).
    let mut folded: Vec<TopRow> = Vec::new();
    for a in top {
        let alike = |b: &TopRow| {
            (b.pid, b.bytes, &b.category, &b.api, b.exported, b.captured, &b.caller)
                == (a.pid, a.bytes, &a.category, &a.api, a.exported, a.captured, &a.caller)
        };
        match folded.iter_mut().find(|b| alike(b)) {
            Some(b) => {
                b.count += 1;
                b.at_us = b.at_us.min(a.at_us);
                b.last_at_us = b.last_at_us.max(a.at_us);
            }
            None => folded.push(a),
        }
    }
    let mut top = folded;
    top.truncate(TOP_N);
    let cost_rows = crate::costs::rows(g);
    let context = crate::costs::context_estimate(g).map(|e| e.bytes);
    DeviceSummary {
        host: g.host.clone(),
        index: g.index,
        mig_index: g.mig_index,
        uuid_name: g.uuid_name.clone(),
        uuid: g.uuid.clone(),
        parent_uuid: g.members.iter().find_map(|m| m.dev.parent_uuid.clone()),
        gpu_instance_id: g.members.iter().find_map(|m| m.dev.gpu_instance_id),
        impossible: g.impossible_lines(),
        total_bytes: g.total_bytes(),
        processes: g
            .members
            .iter()
            .map(|m| DevProc {
                pid: m.pid(),
                start_unix_us: m.report.process.start_us(),
                label: m.label(),
                role: m.report.process.role(),
                holds: m.holds(),
                ordinal: (g.uuid.is_some() && m.dev.index != g.index).then_some(m.dev.index),
                live_bytes: m.dev.live_bytes,
                peak_bytes: m.dev.peak_bytes,
                alloc_count: m.dev.alloc_count,
                free_count: m.dev.free_count,
                context_bytes: (m.holds() != Holds::Allocations).then_some(context).flatten(),
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
        live_bytes: Figure::Live.read(g).unwrap_or(0),
        peak_bytes: Figure::Peak.read(g).unwrap_or(0),
        last_query: g.last_reading(),
        max_untracked: g.max_untracked(),
        probes_total: g.members.iter().map(|m| m.dev.probes_total.max(m.dev.probes.len() as i64)).sum(),
        key_probes: query_lines(g),
        failures_total: g.failures_total(),
        failed_requests: Figure::FailedRequests.read(g).unwrap_or(0),
        failures: failed,
        driver_cost_bytes: cost_rows.iter().map(|c| c.bytes).sum(),
        driver_cost_measured_bytes: cost_rows.iter().map(|c| c.measured_bytes).sum(),
        driver_costs: crate::costs::lines(cost_rows, &g.clock),
        largest_allocation: g.largest_allocation(),
        top_allocations: top,
        sites: culedger_analysis::sites::rows(g),
        ipc: g.ipc(),
        graphs: g.graphs(),
    }
}
