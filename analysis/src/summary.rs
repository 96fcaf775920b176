//! `culedger report`'s summary, the values of `culedger-report/1` (docs/cli-json.md): the
//! verdict, the overview, and per process and per device the figures, as plain owned data
//! ([`RunSummary`]) that every renderer of `report` (text, markdown, JSON, the one screen,
//! `top`, `metrics`) prints, so the formats never disagree. Computed once per run from the
//! device groups ([`crate::groups`]); times are on the run's clock ([`Clock`]).
//!
//! The schema holds a few sentences (the verdict, the notes, how a process ended, why a query
//! matters, an impossible figure, a driver cost's notes): this crate writes none of them. It
//! computes what each says ([`VerdictOf`], [`RunPeak`], ...) and asks the renderer's
//! [`SummaryWords`] for the words, as ripgrep's searcher hands its matches to a `Sink`.

use crate::clock::Clock;
use crate::costs::{context_estimate, CostNote, CostRow};
use crate::groups::{
    extra_categories, groups, shown_categories, DeviceGroup, Holds, LargeAlloc, Reading, Why,
};
use crate::load::Run;
use crate::model::{Exit, Graphs, Ipc, Report, CATEGORIES};
use crate::sites::SiteRow;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// The words a summary holds, written by the renderer (the CLI's `summary`).
pub trait SummaryWords {
    /// The verdict's sentence.
    fn verdict(&self, v: &VerdictOf) -> String;
    /// The notes before the figures, in order: merged runs that ran one after another
    /// (`sequential`, [`sequential_runs`]), then what the renderer says of the run's GPU
    /// numbering, then each device's impossible figures (`devices[].impossible`).
    fn notes(&self, sequential: Option<&[RunPeak]>, run: &Run, gs: &[DeviceGroup], devices: &[DeviceSummary])
        -> Vec<String>;
    /// How a process ended (`exit 1`, `killed by SIGTERM`, `stopped with its launcher`).
    fn status(&self, r: &Report, run: &Run) -> String;
    /// Figures of this GPU that cannot all be true, one line each.
    fn impossible(&self, g: &DeviceGroup) -> Vec<String>;
    /// Why a free-memory query matters; times on the run's clock.
    fn why(&self, ws: &[Why], c: &Clock) -> String;
    /// A driver cost's notes, each sentence once, in order.
    fn cost_notes(&self, ns: &[CostNote], c: &Clock) -> Vec<String>;
}

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
    pub exit: Exit,
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
    /// Figures that cannot all be true ([`DeviceGroup::impossible`]), one line each
    /// ([`SummaryWords::impossible`]).
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
    /// Per process and API, de-noised ([`crate::costs`]; see docs/cli-json.md).
    pub driver_costs: Vec<CostLine>,
    /// Sum of `driver_costs[].bytes` (de-noised), and of what was measured.
    pub driver_cost_bytes: i64,
    pub driver_cost_measured_bytes: i64,
    pub largest_allocation: Option<LargeAlloc>,
    pub top_allocations: Vec<TopRow>,
    /// Live bytes by caller ([`crate::sites`]).
    pub sites: Vec<SiteRow>,
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
    /// What its context here costs, estimated ([`crate::costs::context_estimate`]: the smallest
    /// untracked memory a process saw at its first query on this GPU), for a process that
    /// holds only a context: none of it is tracked, all of it is device memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_bytes: Option<i64>,
}


/// A free-memory query and what the program was told, as `culedger report --format json`
/// writes it.
#[derive(Debug, Clone, Serialize)]
pub struct QueryLine {
    pub pid: i64,
    pub label: String,
    /// On the run's clock (µs since its first process started).
    pub at_us: i64,
    pub t_ms: i64,
    pub seq: Option<i64>,
    pub api: String,
    /// Why it matters ([`SummaryWords::why`]).
    pub why: String,
    pub free_bytes: Option<i64>,
    pub total_bytes: Option<i64>,
    pub error: i64,
    /// What this process had allocated on the device at that moment.
    pub tracked_bytes: i64,
}

/// Hidden driver costs of one process and API on one device, as `culedger report --format
/// json` writes them.
#[derive(Debug, Clone, Serialize)]
pub struct CostLine {
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
    /// What was subtracted or left uncertain, one sentence each ([`SummaryWords::cost_notes`]).
    pub notes: Vec<String>,
}

/// What the verdict says, before its words ([`SummaryWords::verdict`]).
pub enum VerdictOf<'g, 'a> {
    /// Some allocation failed: `failed` of `ranks` processes, requests of `smallest` to
    /// `largest` bytes, `failures` failed requests in all.
    Failed { failed: usize, ranks: usize, smallest: i64, largest: i64, failures: i64 },
    /// Nothing failed; the fullest device is the one whose query saw the most used (tracked
    /// bytes alone understate a device whose contexts, modules or other processes took
    /// much), at that reading.
    Fullest { group: &'g DeviceGroup<'a>, reading: Reading },
    /// Nothing failed and no query measured a device: the one with the highest tracked peak.
    Peak { group: &'g DeviceGroup<'a> },
    /// Nothing failed and no device memory was tracked.
    Nothing,
}

/// One of merged runs that ran one after another ([`sequential_runs`]): its id and its own
/// fullest device (None: it tracked nothing).
#[derive(Debug, Clone)]
pub struct RunPeak {
    pub id: String,
    pub fullest: Option<GroupPeak>,
}

/// A device's tracked peak, with what names the device.
#[derive(Debug, Clone)]
pub struct GroupPeak {
    pub host: String,
    pub index: i64,
    pub mig_index: Option<i64>,
    pub uuid_name: Option<String>,
    pub peak_bytes: i64,
    pub total_bytes: Option<i64>,
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
    /// The same request failing again right after (see [`crate::groups::is_retry`]), on the
    /// run's clock: shown with this failure rather than as failures of their own.
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
        total_failures += g.failed_request_count();
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
fn verdict(run: &Run, gs: &[DeviceGroup], words: &dyn SummaryWords) -> Verdict {
    let (failed, ranks, sizes, failures) = counted(run, gs);
    if failures > 0 {
        let (smallest, largest) = (sizes.iter().min().copied().unwrap_or(0), sizes.iter().max().copied().unwrap_or(0));
        let of = VerdictOf::Failed { failed: failed.len(), ranks, smallest, largest, failures };
        return Verdict { failed: true, text: words.verdict(&of), ranks, failed_ranks: failed.len() };
    }
    let fullest = gs
        .iter()
        .filter_map(|g| g.readings().into_iter().max_by_key(|r| r.used_bytes).map(|r| (g, r)))
        .max_by_key(|(_, r)| r.used_bytes);
    let of = match fullest {
        Some((group, reading)) => VerdictOf::Fullest { group, reading },
        None => match gs.iter().max_by_key(|g| g.peak()) {
            Some(group) => VerdictOf::Peak { group },
            None => VerdictOf::Nothing,
        },
    };
    Verdict { failed: false, text: words.verdict(&of), ranks, failed_ranks: 0 }
}

/// When the merged runs never ran at the same time (each started after the one before had
/// ended), each run's own tracked peak and where it was: the merged figures add their
/// processes up as if they had shared the GPUs. None for one run or runs that overlapped.
pub fn sequential_runs(run: &Run) -> Option<Vec<RunPeak>> {
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
    let peaks = spans
        .iter()
        .map(|(_, _, id)| {
            let own = Run {
                procs: run.procs.iter().filter(|r| r.process.run_id.as_deref() == Some(*id)).cloned().collect(),
                ..Run::default()
            };
            let gs = groups(&own);
            let fullest = gs.iter().max_by_key(|g| g.peak()).map(|g| GroupPeak {
                host: g.host.clone(),
                index: g.index,
                mig_index: g.mig_index,
                uuid_name: g.uuid_name.clone(),
                peak_bytes: g.peak(),
                total_bytes: g.total_bytes(),
            });
            RunPeak { id: id.to_string(), fullest }
        })
        .collect();
    Some(peaks)
}

/// The run's summary, from its device groups (the CLI's one analysis per run computes them
/// once), its sentences written by `words`.
pub fn summarize(run: &Run, gs: &[DeviceGroup], all_categories: bool, words: &dyn SummaryWords) -> RunSummary {
    crate::counts::computed(crate::counts::Part::Summary);
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
                status: words.status(r, run),
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
    let mut devices: Vec<DeviceSummary> = gs.iter().map(|g| summarize_device(g, words)).collect();
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
        verdict: verdict(run, gs, words),
        notes: words.notes(sequential_runs(run).as_deref(), run, gs, &devices),
        overview,
        processes,
        devices,
    }
}

/// One device's part of the summary.
pub fn summarize_device(g: &DeviceGroup, words: &dyn SummaryWords) -> DeviceSummary {
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
    let context = context_estimate(g).map(|e| e.bytes);
    DeviceSummary {
        host: g.host.clone(),
        index: g.index,
        mig_index: g.mig_index,
        uuid_name: g.uuid_name.clone(),
        uuid: g.uuid.clone(),
        parent_uuid: g.members.iter().find_map(|m| m.dev.parent_uuid.clone()),
        gpu_instance_id: g.members.iter().find_map(|m| m.dev.gpu_instance_id),
        impossible: words.impossible(g),
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
        live_bytes: g.live(),
        peak_bytes: g.peak(),
        last_query: g.last_reading(),
        max_untracked: g.max_untracked(),
        probes_total: g.members.iter().map(|m| m.dev.probes_total.max(m.dev.probes.len() as i64)).sum(),
        key_probes: query_lines(g, words),
        failures_total: g.failures_total(),
        failed_requests: g.failed_request_count(),
        failures: failed,
        driver_cost_bytes: cost_rows.iter().map(|c| c.bytes).sum(),
        driver_cost_measured_bytes: cost_rows.iter().map(|c| c.measured_bytes).sum(),
        driver_costs: cost_lines(cost_rows, &g.clock, words),
        largest_allocation: g.largest_allocation(),
        top_allocations: top,
        sites: crate::sites::rows(g),
        ipc: g.ipc(),
        graphs: g.graphs(),
    }
}

/// The queries that matter on a device ([`DeviceGroup::key_probes`]), why in words.
pub fn query_lines(g: &DeviceGroup, words: &dyn SummaryWords) -> Vec<QueryLine> {
    g.key_probes()
        .into_iter()
        .map(|k| QueryLine {
            why: words.why(&k.why, &g.clock),
            pid: k.pid,
            label: k.label,
            at_us: k.at_us,
            t_ms: k.t_ms,
            seq: k.seq,
            api: k.api,
            free_bytes: k.free_bytes,
            total_bytes: k.total_bytes,
            error: k.error,
            tracked_bytes: k.tracked_bytes,
        })
        .collect()
}

/// The de-noised rows of a device ([`crate::costs::rows`]), their notes in words.
pub fn cost_lines(rows: Vec<CostRow>, c: &Clock, words: &dyn SummaryWords) -> Vec<CostLine> {
    rows.into_iter()
        .map(|r| CostLine {
            notes: words.cost_notes(&r.notes, c),
            pid: r.pid,
            label: r.label,
            api: r.api,
            calls: r.calls,
            bytes: r.bytes,
            measured_bytes: r.measured_bytes,
            uncertain: r.uncertain,
        })
        .collect()
}
