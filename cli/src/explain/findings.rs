//! The five findings of `culedger explain` (docs/explain.md):
//! 1. failed allocations, reconciled from the query the process sized from;
//! 2. the sizing formula: what each rank was told and what share it took; ranks whose pool
//!    differs from the others';
//! 3. untracked growth between two queries, with the hidden costs in between;
//! 4. categories that kept growing during the last third of the run, with the peaks;
//! 5. imbalance across the ranks of the launch.

use super::recon::{api_words, hidden_in_window, pid_list, reconcile, Item, QueryRef, Recon};
use super::steps::{self, burst_ending_at, query_before, Kind, Step};
use super::{callers, who, IMBALANCE_PCT, NOISE, POOL_DIFF_PCT, UNTRACKED_GROWTH};
use crate::analysis::{DeviceGroup, Member};
use crate::clock::Clock;
use crate::load::Run;
use crate::model::{Report, CATEGORIES};
use crate::units::fmt_bytes;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// `failed_allocation`, `sizing`, `untracked_growth`, `growth` or `imbalance`.
    pub kind: &'static str,
    /// `failure`, `warning` or `info` (context, or a rise the free memory left absorbs; does
    /// not change the exit status).
    pub severity: &'static str,
    /// One line.
    pub title: String,
    /// The conclusion, as an engineer would write it.
    pub text: String,
    pub host: Option<String>,
    /// The device index, for findings about one device.
    pub device: Option<i64>,
    /// The processes involved.
    pub pids: Vec<i64>,
    /// The call sites involved (short forms); empty when the reports record none.
    pub callers: Vec<String>,
    /// Kind-specific figures (docs/explain.md).
    pub detail: Detail,
}

#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Detail {
    Failure(Box<FailDetail>),
    Sizing(SizingDetail),
    Untracked(Box<UntrackedDetail>),
    Growth(GrowthDetail),
    Imbalance(ImbalanceDetail),
    Start(StartDetail),
}

/// A start that failed without a failed allocation.
#[derive(Debug, Clone, Serialize)]
pub struct StartDetail {
    pub processes: Vec<StartRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StartRow {
    pub pid: i64,
    pub process: String,
    /// `exited with status 1`, `was killed by SIGKILL`.
    pub status: String,
    /// Its last free-memory query (on the run's clock) and the function that made it.
    pub last_query_at_us: Option<i64>,
    pub last_query_function: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailDetail {
    pub pid: i64,
    pub process: String,
    pub label: String,
    /// On the run's clock.
    pub at_us: i64,
    pub api: String,
    /// Requested.
    pub bytes: i64,
    pub error_name: String,
    pub caller: Option<String>,
    /// The explaining frame and its callers (`a <- b <- c`).
    pub caller_chain: Option<String>,
    /// Which part of what it was allocating: `the second half of its pool`, `its pool`, ...
    pub part: String,
    /// The category of the burst's successful allocations (a failure records none).
    pub category: Option<String>,
    /// Attempts of the burst up to this failure, and their sum (what the process asked for).
    pub burst_attempts: usize,
    pub burst_bytes: i64,
    /// Failed attempts of the same burst after this one.
    pub later_failures: usize,
    /// From the query the process sized from to the failure; null without a query before it.
    pub reconciliation: Option<Recon>,
    /// Free memory when it failed: measured by the query that followed, else estimated.
    pub free_bytes: Option<i64>,
    pub free_measured: bool,
    /// What the request needed: its size, or for a call that asks the driver for memory
    /// without a size (an IPC open, peer access) what the same call cost the process when it
    /// succeeded (0 when unknown).
    pub needed_bytes: i64,
    /// Needed minus free (positive: the shortfall; nothing left is a shortage too).
    pub short_by_bytes: Option<i64>,
    /// Findings with the same mechanism share it (the text folds them).
    #[serde(skip)]
    pub signature: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SizingRow {
    pub pid: i64,
    pub process: String,
    pub host: String,
    pub device: i64,
    /// The process's first query on the device, when it is not the sizing query.
    pub first_told_bytes: Option<i64>,
    pub first_at_us: Option<i64>,
    /// The sizing query.
    pub told_bytes: i64,
    pub at_us: i64,
    /// What its burst asked for (failed attempts included).
    pub pool_bytes: i64,
    /// `pool / told`.
    pub fraction: f64,
    pub failed: bool,
    /// Difference from the reference pool (`SizingDetail::reference_pool_bytes`), in percent.
    pub differs_pct: f64,
    pub flagged: bool,
    /// Why a flagged pool differs.
    pub why: Option<String>,
    pub caller: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SizingDetail {
    pub ranks: Vec<SizingRow>,
    /// The pool most ranks asked for: the median of the largest group of ranks whose pools
    /// lie within 1% of each other (ties: the group of larger pools), and what they were told.
    pub reference_pool_bytes: i64,
    pub reference_told_bytes: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct UntrackedDetail {
    pub from: QueryRef,
    pub to: QueryRef,
    pub untracked_from_bytes: i64,
    pub untracked_to_bytes: i64,
    pub rise_bytes: i64,
    /// The hidden costs measured and the contexts created in between.
    pub items: Vec<Item>,
    /// The rise minus the items.
    pub unexplained_bytes: i64,
    /// Processes that sized a pool from a query taken before the rise.
    pub sized_before: Vec<i64>,
    /// Free memory at the later query.
    pub free_after_bytes: i64,
    /// Findings with the same mechanism share it (the text folds them).
    #[serde(skip)]
    pub signature: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CatGrowth {
    pub name: String,
    pub peak_bytes: i64,
    /// When the peak was first reached, on the run's clock.
    pub peak_at_us: i64,
    /// Live bytes when the last third of the run began, and at its end.
    pub third_bytes: i64,
    pub end_bytes: i64,
    pub growth_bytes: i64,
    pub bytes_per_s: i64,
    /// Rose in each of the three parts of the last third.
    pub kept_growing: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GrowthDetail {
    /// The last third of the run on this device, on the run's clock.
    pub from_us: i64,
    pub to_us: i64,
    pub categories: Vec<CatGrowth>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RankPeaks {
    pub pid: i64,
    pub process: String,
    /// Peak bytes per category (summed over the rank's devices), in category order.
    pub peaks: Vec<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    pub category: String,
    pub min_bytes: i64,
    pub min_pid: i64,
    pub max_bytes: i64,
    pub max_pid: i64,
    /// `(max - min) / max`, in percent.
    pub spread_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImbalanceDetail {
    pub ranks: Vec<RankPeaks>,
    pub categories: Vec<Spread>,
    /// Ranks left out because an allocation of theirs failed (their figures stop there).
    pub failed_left_out: Vec<i64>,
}

/// `A`, `A and B`, `A, B and C`.
pub fn join_and(parts: &[String]) -> String {
    match parts.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

fn gpu(g: &DeviceGroup) -> String {
    format!("GPU {}", g.index)
}

fn pct(part: i64, whole: i64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Every finding of a run, most important first.
pub fn all(run: &Run, gs: &[DeviceGroup]) -> Vec<Finding> {
    let ev = super::advice::evaluate_run(run, gs);
    let mut failures = failed_allocations(gs, !run.skipped.is_empty(), ev.as_ref());
    failures.extend(failed_start(run, gs));
    let mut out = failures.clone();
    out.extend(sizing(gs, !failures.is_empty(), ev.as_ref()));
    let windows: Vec<(String, i64, i64, i64)> = failures
        .iter()
        .filter_map(|f| match &f.detail {
            Detail::Failure(d) => {
                let r = d.reconciliation.as_ref()?;
                let end = r.closed_by.as_ref().map_or(d.at_us, |q| q.at_us);
                Some((f.host.clone()?, f.device?, r.query.at_us, end))
            }
            _ => None,
        })
        .collect();
    let mut untracked: Vec<Finding> = gs.iter().filter_map(|g| untracked_growth(g, &windows)).collect();
    untracked.sort_by_key(|f| match &f.detail {
        Detail::Untracked(d) => (f.severity != "warning", std::cmp::Reverse(d.rise_bytes), f.device),
        _ => (true, std::cmp::Reverse(0), None),
    });
    out.extend(untracked);
    out.extend(gs.iter().filter_map(growth));
    out.extend(imbalance(run));
    // Failures, then warnings, then the rest; in the order above within each.
    out.sort_by_key(|f| match f.severity {
        "failure" => 0,
        "warning" => 1,
        _ => 2,
    });
    out
}

// ---------------------------------------------------------------------------------------
// 1. Failed allocations, and starts that failed without one.

/// Processes that touched a GPU and exited with a failure status (or were killed by a
/// signal) without a failed allocation of their own, leaving out a parent whose child failed
/// (a launcher reports its ranks' failure): a start that failed is always a finding, also
/// when the engine refused by its own check ("Not enough memory") before allocating its pool.
fn failed_start(run: &Run, gs: &[DeviceGroup]) -> Vec<Finding> {
    let failed = |r: &Report| r.process.exit_code.is_some_and(|c| c != 0) || r.process.signal.is_some();
    // Each process with its last query: (GPU, when, the function that made it).
    type LastQuery = Option<(String, i64, String)>;
    let mut who_failed: Vec<(&Report, LastQuery)> = Vec::new();
    for r in &run.procs {
        let touched = !r.devices.is_empty();
        let own_failures = r.devices.iter().any(|d| !d.failures.is_empty());
        let child_failed = run.procs.iter().any(|c| c.process.ppid == r.process.pid && failed(c));
        if !failed(r) || !touched || own_failures || child_failed {
            continue;
        }
        // Its last free-memory query: where it was when it gave up.
        let last = gs
            .iter()
            .flat_map(|g| g.members.iter().filter(|m| std::ptr::eq(m.report, r)).map(move |m| (g, *m)))
            .flat_map(|(g, m)| m.dev.probes.iter().map(move |p| (g, m, p)))
            .max_by_key(|(_, m, p)| m.abs_us(*p))
            .map(|(g, m, p)| {
                let function =
                    callers::explaining(m.report, p.site, true).map(|e| e.function).unwrap_or_else(|| "?".into());
                (format!("GPU {}", g.index), g.clock.since(m.abs_us(p)), function)
            });
        who_failed.push((r, last));
    }
    if who_failed.is_empty() {
        return Vec::new();
    }
    let status = |r: &Report| match (r.process.exit_code, r.process.signal) {
        (_, Some(sig)) => format!("was killed by {}", crate::runs::signal_name(sig)),
        (Some(c), _) => format!("exited with status {c}"),
        _ => "failed".into(),
    };
    let n = who_failed.len();
    let (r0, last0) = &who_failed[0];
    let where_ = match last0 {
        Some((gpu, at, function)) => {
            format!(" after its last free-memory query (on {gpu} at {}, from {function})", crate::clock::fmt_secs(*at))
        }
        None => String::new(),
    };
    let text = format!(
        "{} {}{where_} without a failed allocation{}: the start failed, but not because an allocation was          refused; the engine gave up by its own check (its log says why), or something other than GPU memory          failed.",
        who(r0),
        status(r0),
        if n > 1 { format!(", and so did {} more", crate::report::count(n - 1, "process", "processes")) } else { String::new() }
    );
    vec![Finding {
        kind: "failed_start",
        severity: "failure",
        title: if n == 1 {
            format!("{} {} without a failed allocation", who(r0), status(r0))
        } else {
            format!("{n} processes failed without a failed allocation")
        },
        text,
        host: None,
        device: None,
        pids: who_failed.iter().map(|(r, _)| r.process.pid).collect(),
        callers: who_failed.iter().filter_map(|(_, l)| l.as_ref().map(|l| l.2.clone())).fold(Vec::new(), |mut v, c| {
            if !v.contains(&c) {
                v.push(c);
            }
            v
        }),
        detail: Detail::Start(StartDetail {
            processes: who_failed
                .iter()
                .map(|(r, l)| StartRow {
                    pid: r.process.pid,
                    process: who(r),
                    status: status(r),
                    last_query_at_us: l.as_ref().map(|l| l.1),
                    last_query_function: l.as_ref().map(|l| l.2.clone()),
                })
                .collect(),
        }),
    }]
}

/// Which part of its burst a failed attempt is, in words.
fn part_words(steps: &[Step], burst: &[usize], told: Option<i64>, category: Option<&str>) -> String {
    let total: i64 = burst.iter().map(|&i| steps[i].bytes).sum();
    let pool = match category {
        Some("kv_pool") => "its KV pool",
        _ => "its pool",
    };
    let is_pool = told.is_some_and(|t| total.saturating_mul(2) > t) || category == Some("kv_pool");
    let n = burst.len();
    let equal = burst.iter().all(|&i| (steps[i].bytes - steps[burst[0]].bytes).abs() * 100 <= steps[burst[0]].bytes);
    match (is_pool, n) {
        (false, 1) => "an allocation".into(),
        (false, _) => format!("allocation {n} of a burst of {n}"),
        (true, 1) => pool.to_string(),
        (true, 2) if equal => format!("the second half of {pool}"),
        (true, _) => format!("part {n} of {pool}"),
    }
}

/// The parts of `pool` that succeeded before the failure, in words: `the first half of
/// the pool`, `the first 3 parts of the pool`.
fn before_words(part: &str, done: usize) -> String {
    let pool = if part.contains("KV pool") { "the KV pool" } else { "the pool" };
    if part.starts_with("the second half") {
        format!("the first half of {pool}")
    } else if done == 1 {
        format!("its first part of {pool}")
    } else {
        format!("the first {done} parts of {pool}")
    }
}

/// The failure findings, in device order; failed attempts of one burst are one finding.
fn failed_allocations(gs: &[DeviceGroup], skipped: bool, ev: Option<&super::advice::Evaluation>) -> Vec<Finding> {
    let mut out: Vec<(i64, Finding)> = Vec::new();
    for g in gs {
        for m in &g.members {
            let st = steps::steps(*m);
            let mut bursts: Vec<(usize, usize)> = Vec::new(); // (burst start, index into out)
            for (i, s) in st.iter().enumerate() {
                let Some(f) = s.failure() else { continue };
                let burst = burst_ending_at(&st, i);
                if let Some(&(_, k)) = bursts.iter().find(|(b, _)| *b == burst[0]) {
                    if let Detail::Failure(d) = &mut out[k].1.detail {
                        d.later_failures += 1;
                    }
                    continue;
                }
                bursts.push((burst[0], out.len()));
                let mut finding = failure_finding(g, *m, &st, i, &burst, f, skipped);
                if let Some(r) = ev.and_then(|e| e.ranks.iter().find(|r| r.pid == m.pid() && r.device == g.index)) {
                    // The engine sized every rank from the minimum over the ranks: say so where
                    // the rank's own query told more.
                    let e = ev.expect("the evaluation");
                    let used = r.inputs.get(&e.sizing.sizing_query).copied().unwrap_or(0);
                    if used != r.told_bytes {
                        let own = format!("from {} free at", fmt_bytes(r.told_bytes));
                        finding.text = finding.text.replacen(
                            &own,
                            &format!(
                                "from {} free (the minimum over the ranks, as {} takes it; its own query told {}) at",
                                fmt_bytes(used),
                                e.engine,
                                fmt_bytes(r.told_bytes)
                            ),
                            1,
                        );
                    }
                }
                let finding = finding;
                out.push((s.abs_us, finding));
            }
        }
    }
    // In device order: failures with the same mechanism fold under the first GPU's.
    out.sort_by_key(|(t, f)| (f.host.clone(), f.device, *t));
    out.into_iter().map(|(_, f)| f).collect()
}

fn failure_finding(
    g: &DeviceGroup,
    m: Member,
    st: &[Step],
    i: usize,
    burst: &[usize],
    f: &crate::model::Failure,
    skipped: bool,
) -> Finding {
    let clock = g.clock;
    let q = query_before(st, burst[0]);
    let recon = q.map(|q| reconcile(g, m, st, q, i, burst));
    let told = recon.as_ref().map(|r| r.query.free_bytes);
    let category = burst
        .iter()
        .filter_map(|&j| match st[j].kind {
            Kind::Alloc { category, .. } => Some(category),
            _ => None,
        })
        .next();
    let part = part_words(st, burst, told, category);
    let caller = callers::caller(m.report, f.site);
    let caller_chain = callers::explaining(m.report, f.site, false).map(|e| e.chain);
    let name = who(m.report);
    let (free, measured) = match &recon {
        Some(r) => (Some(r.free_bytes), r.closed_by.is_some()),
        None => (None, false),
    };
    let needed = super::advice::needed(m, f);
    let short_by = free.map(|fr| needed - fr);
    let at = clock.at(st[i].abs_us);
    let title = format!(
        "{name} could not allocate {part} on {} ({}, {}{}{})",
        gpu(g),
        fmt_bytes(f.bytes),
        f.api,
        category.map(|c| format!(", {c}")).unwrap_or_default(),
        caller.as_deref().map(|c| format!(", from {}", callers::function(c))).unwrap_or_default()
    );
    let text = match &recon {
        Some(r) => conclusion(&name, &part, (f.bytes, needed, &f.api), r, short_by.unwrap_or(0), &clock, skipped),
        None => format!(
            "{name} asked for {} at {at} with no free-memory query before it on {}: culedger cannot tell what it \
             sized the request from. The process held {} on the GPU at that moment.",
            fmt_bytes(f.bytes),
            gpu(g),
            fmt_bytes(f.live_bytes)
        ),
    };
    let mut all_callers: Vec<String> = Vec::new();
    let mut add = |c: &Option<String>| {
        if let Some(c) = c {
            if !all_callers.contains(c) {
                all_callers.push(c.clone());
            }
        }
    };
    add(&caller);
    if let Some(r) = &recon {
        add(&r.query.caller);
        for it in &r.items {
            for c in &it.callers {
                add(&Some(c.clone()));
            }
        }
    }
    let mut pids = vec![m.pid()];
    if let Some(r) = &recon {
        for it in &r.items {
            for p in &it.pids {
                if !pids.contains(p) {
                    pids.push(*p);
                }
            }
        }
    }
    let signature = match &recon {
        Some(r) => {
            let kinds: Vec<String> =
                r.items.iter().map(|i| format!("{}:{}", i.kind, i.api.clone().unwrap_or_default())).collect();
            format!("{part}|{}|{}", kinds.join(","), short_by.is_some_and(|s| s > 0) || free.is_some_and(|f| f <= 0))
        }
        None => format!("{part}|no query"),
    };
    Finding {
        kind: "failed_allocation",
        severity: "failure",
        title,
        text,
        host: Some(g.host.clone()),
        device: Some(g.index),
        pids,
        callers: all_callers,
        detail: Detail::Failure(Box::new(FailDetail {
            pid: m.pid(),
            process: name,
            label: m.label(),
            at_us: clock.since(st[i].abs_us),
            api: f.api.clone(),
            bytes: f.bytes,
            error_name: f.error_name.clone(),
            caller,
            caller_chain,
            part,
            category: category.map(str::to_string),
            burst_attempts: burst.len(),
            burst_bytes: burst.iter().map(|&j| st[j].bytes).sum(),
            later_failures: 0,
            reconciliation: recon,
            free_bytes: free,
            free_measured: measured,
            needed_bytes: needed,
            short_by_bytes: short_by,
            signature,
        })),
    }
}

/// The engineer's sentence for a reconciled failure.
fn conclusion(
    name: &str,
    part: &str,
    (requested, needed, api): (i64, i64, &str),
    r: &Recon,
    short_by: i64,
    clock: &Clock,
    skipped: bool,
) -> String {
    let pool = if part.contains("KV pool") { "its KV pool" } else { "its pool" };
    let sized = if part.starts_with("an allocation") || part.starts_with("allocation ") {
        "sized its request"
    } else {
        "sized"
    };
    let what = if sized == "sized" { format!("sized {pool}") } else { sized.to_string() };
    let mut s = format!(
        "{name} {what} from {} free at {}",
        fmt_bytes(r.query.free_bytes),
        clock.at(clock.t0_us + r.query.at_us)
    );
    // (bytes, where they went), the first said with "went to".
    let mut clauses: Vec<(i64, String)> = Vec::new();
    let hidden: Vec<&Item> = r.items.iter().filter(|i| i.kind == "driver_cost").collect();
    let hidden_bytes: i64 = hidden.iter().map(|i| i.bytes).sum();
    if hidden_bytes > 0 {
        let mut words: Vec<String> = Vec::new();
        let mut by_size: Vec<&&Item> = hidden.iter().collect();
        by_size.sort_by_key(|i| std::cmp::Reverse(i.bytes));
        for i in by_size {
            let w = api_words(i.api.as_deref().unwrap_or(""));
            if !words.contains(&w) {
                words.push(w);
            }
        }
        clauses.push((hidden_bytes, format!("{} (not visible to that query)", join_and(&words))));
    }
    for i in r.items.iter().filter(|i| i.kind == "other_processes" && i.bytes > 0) {
        clauses.push((i.bytes, i.what.clone()));
    }
    let own: i64 = r.sum("allocated");
    if own > 0 {
        let cats: Vec<String> = r
            .items
            .iter()
            .filter(|i| i.kind == "allocated" && i.bytes > 0)
            .filter_map(|i| i.category.clone())
            .collect();
        clauses.push((own, format!("its own other allocations ({})", cats.join(", "))));
    }
    if let Some(u) = r.unexplained_bytes.filter(|u| *u > NOISE && *u * 100 > r.query.free_bytes) {
        clauses.push((
            u,
            if skipped {
                "something no readable report shows (a report was skipped: see the note)".into()
            } else {
                "something no report of the run shows".into()
            },
        ));
    }
    let clauses: Vec<String> = clauses
        .iter()
        .enumerate()
        .map(|(k, (b, w))| format!("{} {}{w}", fmt_bytes(*b), if k == 0 { "went to " } else { "to " }))
        .collect();
    if !clauses.is_empty() {
        s.push_str(&format!("; after that query {}", join_and(&clauses)));
    }
    let done = r.items.iter().find(|i| i.kind == "pool");
    let free = if r.closed_by.is_some() {
        format!("{} {} free", fmt_bytes(r.free_bytes), if r.free_bytes == 1 { "was" } else { "were" })
    } else {
        format!("about {} were left", fmt_bytes(r.free_bytes))
    };
    let failed = format!(
        "{} ({})",
        part.replace("its pool", "the pool").replace("its KV pool", "the KV pool"),
        super::advice::needed_words(requested, needed, api)
    );
    let pool_done = done.map(|d| format!("{} took {}", before_words(part, d.calls as usize), fmt_bytes(d.bytes)));
    let tail = if short_by > 0 {
        format!("{failed} no longer fit: {free}, short by {}", fmt_bytes(short_by))
    } else if r.free_bytes <= 0 {
        format!("{failed} no longer fit: nothing was left")
    } else {
        format!(
            "{failed} failed although {free}, {} more than it asked for: not a lack of free memory as far as the \
             reports tell (a limit, fragmentation, or memory that came back just before the query)",
            fmt_bytes(-short_by)
        )
    };
    match (clauses.is_empty(), pool_done) {
        (_, Some(d)) => s.push_str(&format!("; {d}, and {tail}.")),
        (true, None) => s.push_str(&format!("; {tail}.")),
        (false, None) => s.push_str(&format!(", and {tail}.")),
    }
    s
}

/// The reconciliation a device's pool went through, for `diff`: of the first failure on
/// the device, else of the largest pool sized there (to the end of its burst).
#[derive(Debug, Clone, Serialize)]
pub struct PoolWindow {
    pub pid: i64,
    pub process: String,
    /// The failed attempt: (api, bytes, part), when the pool failed.
    pub failed: Option<(String, i64, String)>,
    pub category: Option<String>,
    pub recon: Recon,
}

/// See [`PoolWindow`].
pub fn failure_reconciliation(g: &DeviceGroup) -> Option<PoolWindow> {
    let mut best: Option<(i64, PoolWindow)> = None;
    for m in &g.members {
        let st = steps::steps(*m);
        if let Some(i) = st.iter().position(|s| s.failure().is_some()) {
            let burst = burst_ending_at(&st, i);
            let Some(q) = query_before(&st, burst[0]) else { continue };
            let recon = reconcile(g, *m, &st, q, i, &burst);
            let category = burst.iter().find_map(|&j| match st[j].kind {
                Kind::Alloc { category, .. } => Some(category.to_string()),
                _ => None,
            });
            let part = part_words(&st, &burst, Some(recon.query.free_bytes), category.as_deref());
            let f = st[i].failure().map(|f| (f.api.clone(), f.bytes, part));
            // The earliest failure wins over any pool.
            let key = -st[i].abs_us - (1 << 60);
            if best.as_ref().is_none_or(|(k, _)| key > *k) {
                best = Some((key, PoolWindow { pid: m.pid(), process: who(m.report), failed: f, category, recon }));
            }
            continue;
        }
        let Some(sz) = steps::sizing(&st) else { continue };
        let end = *sz.burst.last().unwrap_or(&sz.query);
        let recon = reconcile(g, *m, &st, sz.query, end, &sz.burst);
        let category = sz.burst.iter().find_map(|&j| match st[j].kind {
            Kind::Alloc { category, .. } => Some(category.to_string()),
            _ => None,
        });
        if best.as_ref().is_none_or(|(k, _)| sz.pool > *k && *k >= 0) {
            best = Some((sz.pool, PoolWindow { pid: m.pid(), process: who(m.report), failed: None, category, recon }));
        }
    }
    best.map(|(_, w)| w)
}

// ---------------------------------------------------------------------------------------
// 2. The sizing formula.

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    match v.len() {
        0 => 0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2,
    }
}

/// Why a rank was told less (or more) than the others: who else held memory on its GPU at
/// its query.
fn told_why(g: &DeviceGroup, m: Member, at: i64, delta: i64) -> String {
    // (pid, words) of the processes that held a context, and of those that held allocations.
    type Held = Vec<(i64, String)>;
    let (mut contexts, mut allocs): (Held, Held) = (Vec::new(), Vec::new());
    for o in g.members.iter().filter(|o| !std::ptr::eq(o.report, m.report)) {
        let present = o.first_us().is_some_and(|f| f <= at) && o.ended_us().is_none_or(|e| e >= at);
        if !present {
            continue;
        }
        let live: i64 = o.live_at(at).iter().sum();
        if live > 0 {
            allocs.push((o.pid(), format!("{} allocated by {}", fmt_bytes(live), who(o.report))));
        } else {
            contexts.push((o.pid(), who(o.report)));
        }
    }
    contexts.sort();
    allocs.sort();
    let mut held: Vec<String> = allocs.into_iter().map(|(_, s)| s).collect();
    match contexts.len() {
        0 => {}
        1 => held.push(format!("the context of {}", contexts[0].1)),
        _ => held
            .push(format!("the contexts of {}", join_and(&contexts.into_iter().map(|(_, s)| s).collect::<Vec<_>>()))),
    }
    let more_less = if delta < 0 { "less" } else { "more" };
    let mut s = format!("it was told {} {more_less} free memory than the other ranks", fmt_bytes(delta.abs()));
    if !held.is_empty() && delta < 0 {
        s.push_str(&format!(": {} also held {} at its query", gpu(g), join_and(&held)));
    }
    s
}

fn sizing(gs: &[DeviceGroup], any_failure: bool, ev: Option<&super::advice::Evaluation>) -> Option<Finding> {
    let mut rows: Vec<(SizingRow, i64)> = Vec::new();
    for g in gs {
        for m in &g.members {
            let st = steps::steps(*m);
            if st.iter().filter(|s| s.told().is_some()).count() < 2 {
                continue;
            }
            let Some(sz) = steps::sizing(&st) else { continue };
            let first = st.iter().position(|s| s.told().is_some()).filter(|&i| i != sz.query);
            let abs = st[sz.query].abs_us;
            let caller = sz.burst.iter().find_map(|&i| {
                st[i].top().and_then(|a| a.caller.clone().or_else(|| callers::caller(m.report, a.site)))
            });
            rows.push((
                SizingRow {
                    pid: m.pid(),
                    process: who(m.report),
                    host: g.host.clone(),
                    device: g.index,
                    first_told_bytes: first.and_then(|i| st[i].told()).and_then(|p| p.free_bytes),
                    first_at_us: first.map(|i| g.clock.since(st[i].abs_us)),
                    told_bytes: sz.told,
                    at_us: g.clock.since(abs),
                    pool_bytes: sz.pool,
                    fraction: sz.pool as f64 / sz.told.max(1) as f64,
                    failed: sz.burst.iter().any(|&i| st[i].failure().is_some()),
                    differs_pct: 0.0,
                    flagged: false,
                    why: None,
                    caller,
                },
                abs,
            ));
        }
    }
    if rows.is_empty() {
        return None;
    }
    // With the engine's formula, what each rank was told and asked for is the formula's: its
    // inputs as the engine took them (SGLang: the minimum over the ranks) and the pool it
    // computed, not the pool so far plus the part that failed.
    if let Some(e) = ev {
        for (r, _) in &mut rows {
            if let Some(x) = e.ranks.iter().find(|x| x.pid == r.pid && x.device == r.device) {
                r.told_bytes = x.inputs.get(&e.sizing.sizing_query).copied().unwrap_or(r.told_bytes);
                r.pool_bytes = x.pool_bytes.max(0);
                r.fraction = r.pool_bytes as f64 / r.told_bytes.max(1) as f64;
            }
        }
    }
    let reference = reference_pool(&rows.iter().map(|(r, _)| r.pool_bytes).collect::<Vec<_>>());
    let alike = |pool: i64| pct((pool - reference).abs(), reference) <= POOL_DIFF_PCT;
    let ref_told = median(rows.iter().filter(|(r, _)| alike(r.pool_bytes)).map(|(r, _)| r.told_bytes).collect());
    let ref_fraction = reference as f64 / ref_told.max(1) as f64;
    for (r, abs) in &mut rows {
        r.differs_pct = pct(r.pool_bytes - reference, reference);
        r.flagged = reference > 0 && !alike(r.pool_bytes);
        if r.flagged {
            let delta = r.told_bytes - ref_told;
            let g = gs.iter().find(|g| g.host == r.host && g.index == r.device).expect("the row's device");
            let m = g.member(r.pid).expect("the row's process");
            r.why = Some(if (delta as f64).abs() * 2.0 >= ((r.pool_bytes - reference) as f64).abs() {
                told_why(g, m, *abs, delta)
            } else {
                format!(
                    "it asked for {:.1}% of what it was told, the other ranks {:.1}%",
                    r.fraction * 100.0,
                    ref_fraction * 100.0
                )
            });
        }
    }
    let rows: Vec<SizingRow> = rows.into_iter().map(|(r, _)| r).collect();
    let flagged: Vec<&SizingRow> = rows.iter().filter(|r| r.flagged).collect();
    let flagged_any = !flagged.is_empty() && rows.len() >= 2;
    if !flagged_any && !any_failure {
        return None;
    }
    // The range of shares, compared as numbers ("84.5" < "126.0", which as text it is not).
    let shares = rows.iter().map(|r| r.fraction * 100.0);
    let (lo, hi) = (shares.clone().fold(f64::INFINITY, f64::min), shares.fold(f64::NEG_INFINITY, f64::max));
    let (lo, hi) = (format!("{lo:.1}"), format!("{hi:.1}"));
    let share = if lo == hi { format!("{lo}%") } else { format!("{lo}-{hi}%") };
    let n = rows.len();
    let (who_all, they) =
        if n == 1 { ("The process".to_string(), "it was") } else { (format!("{n} ranks"), "they were") };
    let told_range = crate::units::fmt_range(
        rows.iter().map(|r| r.told_bytes).min().unwrap_or(0),
        rows.iter().map(|r| r.told_bytes).max().unwrap_or(0),
    );
    let mut text = format!(
        "{who_all} sized {} from a free-memory query and asked for {share} of what {they} told ({told_range})",
        if n == 1 { "its pool" } else { "their pools" },
    );
    let title = if flagged_any {
        let names: Vec<String> = flagged
            .iter()
            .map(|r| {
                format!(
                    "{}'s pool ({}) is {:.1}% {} than the other ranks' ({}): {}",
                    r.process,
                    fmt_bytes(r.pool_bytes),
                    r.differs_pct.abs(),
                    if r.differs_pct < 0.0 { "smaller" } else { "larger" },
                    fmt_bytes(reference),
                    r.why.clone().unwrap_or_default()
                )
            })
            .collect();
        text.push_str(&format!(". {}.", names.join("; ")));
        format!(
            "{} from the other ranks' by more than {POOL_DIFF_PCT}%",
            if flagged.len() == 1 {
                format!("{}'s pool differs", flagged[0].process)
            } else {
                format!("{} ranks' pools differ", flagged.len())
            }
        )
    } else {
        let left: Vec<i64> = rows.iter().map(|r| r.told_bytes - r.pool_bytes).collect();
        text.push_str(&format!(
            ", leaving {} for everything that came after the query.",
            crate::units::fmt_range(*left.iter().min().unwrap_or(&0), *left.iter().max().unwrap_or(&0))
        ));
        format!(
            "Sizing: what {} told and what {} asked for",
            if n == 1 { "the process was" } else { "each rank was" },
            if n == 1 { "it" } else { "they" }
        )
    };
    let callers: Vec<String> = rows.iter().filter_map(|r| r.caller.clone()).fold(Vec::new(), |mut v, c| {
        if !v.contains(&c) {
            v.push(c);
        }
        v
    });
    Some(Finding {
        kind: "sizing",
        severity: if flagged_any { "warning" } else { "info" },
        title,
        text,
        host: None,
        device: None,
        pids: rows.iter().map(|r| r.pid).collect(),
        callers,
        detail: Detail::Sizing(SizingDetail {
            ranks: rows,
            reference_pool_bytes: reference,
            reference_told_bytes: ref_told,
        }),
    })
}

/// The median of the largest group of pools lying within [`POOL_DIFF_PCT`] of the group's
/// smallest (ties: the group of larger pools).
fn reference_pool(pools: &[i64]) -> i64 {
    let mut v = pools.to_vec();
    v.sort_unstable();
    let (mut best, mut i) = ((0usize, 0i64), 0usize);
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && pct(v[j + 1] - v[i], v[i]) <= POOL_DIFF_PCT {
            j += 1;
        }
        if j + 1 - i >= best.0 {
            best = (j + 1 - i, median(v[i..=j].to_vec()));
        }
        i = j + 1;
    }
    best.1
}

// ---------------------------------------------------------------------------------------
// 3. Untracked growth.

fn untracked_growth(g: &DeviceGroup, failure_windows: &[(String, i64, i64, i64)]) -> Option<Finding> {
    let clock = g.clock;
    let probes = g.probes();
    let readings: Vec<(Member, &crate::model::Probe, crate::analysis::Reading)> =
        probes.iter().filter_map(|(m, p)| g.reading(*m, p).map(|r| (*m, *p, r))).collect();
    if readings.len() < 2 {
        return None;
    }
    // The largest rise from an earlier reading (ties: the later low point, the earlier high).
    let (mut lo, mut best): (usize, Option<(usize, usize, i64)>) = (0, None);
    for j in 1..readings.len() {
        if readings[j - 1].2.untracked_bytes <= readings[lo].2.untracked_bytes {
            lo = j - 1;
        }
        let rise = readings[j].2.untracked_bytes - readings[lo].2.untracked_bytes;
        if best.is_none_or(|(_, _, b)| rise > b) {
            best = Some((lo, j, rise));
        }
    }
    let (mut i, j, _) = best?;
    // When a process sized its pool from a query inside the rise, start there: that is the
    // memory its figure could not see.
    let mut sized_before: Vec<i64> = Vec::new();
    for m in &g.members {
        let st = steps::steps(*m);
        let Some(sz) = steps::sizing(&st) else { continue };
        let at = st[sz.query].abs_us;
        let Some(k) = readings.iter().position(|(x, p, _)| x.pid() == m.pid() && x.abs_us(*p) == at) else { continue };
        if k >= i && k < j && readings[j].2.untracked_bytes - readings[k].2.untracked_bytes > UNTRACKED_GROWTH {
            sized_before.push(m.pid());
            i = i.max(k);
        }
    }
    let (from, to) = (&readings[i], &readings[j]);
    let rise = to.2.untracked_bytes - from.2.untracked_bytes;
    if rise <= UNTRACKED_GROWTH {
        return None;
    }
    let (t0, t1) = (from.0.abs_us(from.1), to.0.abs_us(to.1));
    let (s0, s1) = (clock.since(t0), clock.since(t1));
    if failure_windows.iter().any(|(h, d, a, b)| *h == g.host && *d == g.index && *a <= s1 && s0 <= *b) {
        return None;
    }
    let items = hidden_in_window(g, t0, t1);
    // Contexts of processes that began to use the GPU in between are expected.
    let expected: i64 = items.iter().filter(|i| i.expected).map(|i| i.bytes).sum();
    if rise - expected <= UNTRACKED_GROWTH {
        return None;
    }
    let explained: i64 = items.iter().map(|i| i.bytes).sum();
    let unexplained = rise - explained;
    let mut listed: Vec<&Item> = items.iter().filter(|i| (i.bytes != 0 || i.uncertain) && !i.expected).collect();
    listed.sort_by_key(|i| std::cmp::Reverse(i.bytes));
    let words: Vec<String> = listed
        .iter()
        .map(|i| match (&i.api, i.kind) {
            (Some(api), _) => {
                format!("{} in {} by {}", fmt_bytes(i.bytes), api_with_calls(api, i.calls), who_pids(g, &i.pids))
            }
            (None, _) => format!("{} for {}", fmt_bytes(i.bytes), i.what),
        })
        .collect();
    let mut text = format!(
        "Untracked memory on {} rose by {} between the query at {} ({}, untracked {}) and the query at {} ({}, untracked {})",
        gpu(g),
        fmt_bytes(rise),
        clock.at(t0),
        who(from.0.report),
        fmt_bytes(from.2.untracked_bytes),
        clock.at(t1),
        who(to.0.report),
        fmt_bytes(to.2.untracked_bytes)
    );
    if expected > 0 {
        text.push_str(&format!(
            "; {} of it are the contexts of processes that began to use the GPU meanwhile (expected)",
            fmt_bytes(expected)
        ));
    }
    if words.is_empty() {
        text.push_str(": no measured call or new context explains the rest.");
    } else {
        text.push_str(&format!("{} {}", if expected > 0 { "; the rest:" } else { ":" }, join_and(&words)));
        if unexplained.abs() > NOISE {
            text.push_str(&format!("; {} is not explained by a measured call", fmt_bytes(unexplained)));
        }
        text.push('.');
    }
    if !sized_before.is_empty() {
        let names: Vec<String> = sized_before.iter().filter_map(|p| g.member(*p)).map(|m| who(m.report)).collect();
        text.push_str(&format!(
            " {} sized {} from the query at {}, before this memory was taken: the figure {} sized from could \
             not see it.",
            join_and(&names),
            if names.len() == 1 { "its pool" } else { "their pools" },
            clock.at(t0),
            if names.len() == 1 { "it" } else { "they" },
        ));
    }
    // A risk when what remained free would not absorb another rise like this one.
    let net = rise - expected;
    let severity = if to.2.free_bytes < net { "warning" } else { "info" };
    if severity == "warning" {
        text.push_str(&format!(
            " Only {} remained free at {}, less than this rise: another like it would not fit.",
            fmt_bytes(to.2.free_bytes),
            clock.at(t1)
        ));
    } else {
        text.push_str(&format!(
            " {} remained free at {}, {} times this rise.",
            fmt_bytes(to.2.free_bytes),
            clock.at(t1),
            to.2.free_bytes / net.max(1)
        ));
    }
    let mut apis: Vec<String> = listed
        .iter()
        .map(|i| i.api.clone().unwrap_or_else(|| if i.expected { "ctx".into() } else { "peer ctx".into() }))
        .collect();
    apis.sort();
    apis.dedup();
    let signature = format!("{severity}|{}|{}", apis.join(","), sized_before.len());
    let mut callers: Vec<String> = Vec::new();
    for c in items.iter().flat_map(|i| &i.callers) {
        if !callers.contains(c) {
            callers.push(c.clone());
        }
    }
    let mut pids: Vec<i64> = items.iter().flat_map(|i| i.pids.clone()).collect();
    pids.sort_unstable();
    pids.dedup();
    Some(Finding {
        kind: "untracked_growth",
        severity,
        // The same figure as the text's first sentence; the part beyond the new processes'
        // contexts beside it.
        title: format!(
            "Untracked memory on {} rose by {} between two queries{}",
            gpu(g),
            fmt_bytes(rise),
            if expected > 0 { format!(" ({} beyond new processes' contexts)", fmt_bytes(net)) } else { String::new() }
        ),
        text,
        host: Some(g.host.clone()),
        device: Some(g.index),
        pids,
        callers,
        detail: Detail::Untracked(Box::new(UntrackedDetail {
            from: QueryRef::new(g, from.0, from.1),
            to: QueryRef::new(g, to.0, to.1),
            untracked_from_bytes: from.2.untracked_bytes,
            untracked_to_bytes: to.2.untracked_bytes,
            rise_bytes: rise,
            items,
            unexplained_bytes: unexplained,
            sized_before,
            free_after_bytes: to.2.free_bytes,
            signature,
        })),
    })
}

fn api_with_calls(api: &str, calls: i64) -> String {
    if calls > 1 {
        format!("{api} (x{calls})")
    } else {
        api.to_string()
    }
}

fn who_pids(g: &DeviceGroup, pids: &[i64]) -> String {
    match pids {
        [p] => g.member(*p).map(|m| who(m.report)).unwrap_or_else(|| format!("pid {p}")),
        _ => format!("pids {}", pid_list(pids)),
    }
}

// ---------------------------------------------------------------------------------------
// 4. Peaks and growth at the end of the run.

fn value_at(points: &[crate::analysis::Point], c: usize, t: i64) -> i64 {
    let n = points.partition_point(|p| p.t_unix_us <= t);
    n.checked_sub(1).map_or(0, |i| points[i].cats[c])
}

fn growth(g: &DeviceGroup) -> Option<Finding> {
    let clock = g.clock;
    let points = g.series();
    let start = g.members.iter().filter_map(|m| m.first_us()).min()?;
    let end = g.end_us();
    let span = end - start;
    if span <= 0 || points.is_empty() {
        return None;
    }
    let third = end - span / 3;
    let bounds = [third, third + span / 9, third + 2 * span / 9, end];
    let mut cats: Vec<CatGrowth> = Vec::new();
    for (c, name) in CATEGORIES.iter().enumerate() {
        let (mut peak, mut peak_at) = (0i64, start);
        for p in &points {
            if p.cats[c] > peak {
                (peak, peak_at) = (p.cats[c], p.t_unix_us);
            }
        }
        if peak == 0 {
            continue;
        }
        let at = |t: i64| value_at(&points, c, t);
        let rising = bounds.windows(2).all(|w| at(w[1]) > at(w[0]));
        let growth = at(end) - at(third);
        cats.push(CatGrowth {
            name: name.to_string(),
            peak_bytes: peak,
            peak_at_us: clock.since(peak_at),
            third_bytes: at(third),
            end_bytes: at(end),
            growth_bytes: growth,
            bytes_per_s: (growth as f64 / ((end - third).max(1) as f64 / 1e6)) as i64,
            kept_growing: rising && growth >= NOISE,
        });
    }
    let growing: Vec<&CatGrowth> = cats.iter().filter(|c| c.kept_growing).collect();
    if growing.is_empty() {
        return None;
    }
    let words: Vec<String> = growing
        .iter()
        .map(|c| {
            format!(
                "{} by {} (from {} to {}, {}/s)",
                c.name,
                fmt_bytes(c.growth_bytes),
                fmt_bytes(c.third_bytes),
                fmt_bytes(c.end_bytes),
                fmt_bytes(c.bytes_per_s)
            )
        })
        .collect();
    let mut callers: Vec<String> = Vec::new();
    let mut pids: Vec<i64> = Vec::new();
    for m in &g.members {
        for a in &m.dev.top_allocations {
            if m.abs_us(a) >= third && growing.iter().any(|c| c.name == a.category) {
                if !pids.contains(&m.pid()) {
                    pids.push(m.pid());
                }
                if let Some(c) = a.caller.clone().or_else(|| callers::caller(m.report, a.site)) {
                    if !callers.contains(&c) {
                        callers.push(c);
                    }
                }
            }
        }
    }
    // Without top allocations in the window, the processes that allocate here.
    if pids.is_empty() {
        pids = g.members.iter().filter(|m| m.dev.alloc_count > 0).map(|m| m.pid()).collect();
    }
    let text = format!(
        "On {} {} in each of the three parts of the last third of the run ({} to {}) and {} still rising when \
         the last report was written: {}. A pool or a cache that is full does not grow; memory that keeps growing \
         at the end of a run is a leak or an unbounded cache, and the run will fail once it reaches the free memory.",
        gpu(g),
        if growing.len() == 1 { "this category grew" } else { "these categories grew" },
        clock.at(third),
        clock.at(end),
        if growing.len() == 1 { "was" } else { "were" },
        join_and(&words)
    );
    Some(Finding {
        kind: "growth",
        severity: "warning",
        title: format!(
            "{} kept growing on {} during the last third of the run",
            join_and(&growing.iter().map(|c| c.name.clone()).collect::<Vec<_>>()),
            gpu(g)
        ),
        text,
        host: Some(g.host.clone()),
        device: Some(g.index),
        pids,
        callers,
        detail: Detail::Growth(GrowthDetail { from_us: clock.since(third), to_us: clock.since(end), categories: cats }),
    })
}

// ---------------------------------------------------------------------------------------
// 5. Imbalance across ranks.

fn is_rank(r: &Report) -> bool {
    let e = &r.process.env;
    e.contains_key("RANK") || e.contains_key("LOCAL_RANK")
}

fn allocates(r: &Report) -> bool {
    r.devices.iter().any(|d| d.alloc_count > 0 || d.peak_bytes > 0)
}

fn imbalance(run: &Run) -> Option<Finding> {
    let ranked: Vec<&Report> = run.procs.iter().filter(|r| is_rank(r) && allocates(r)).collect();
    let candidates: Vec<&Report> =
        if ranked.len() >= 2 { ranked } else { run.procs.iter().filter(|r| allocates(r)).collect() };
    let failed = |r: &Report| r.devices.iter().any(|d| d.failures_total > 0 || !d.failures.is_empty());
    let failed_left_out: Vec<i64> = candidates.iter().filter(|r| failed(r)).map(|r| r.process.pid).collect();
    let ranks: Vec<RankPeaks> = candidates
        .iter()
        .filter(|r| !failed(r))
        .map(|r| RankPeaks {
            pid: r.process.pid,
            process: who(r),
            peaks: CATEGORIES.iter().map(|c| r.devices.iter().map(|d| d.cat(c).peak_bytes).sum()).collect(),
        })
        .collect();
    if ranks.len() < 2 {
        return None;
    }
    let mut ranks = ranks;
    ranks.sort_by_key(|r| r.pid);
    let mut spreads: Vec<Spread> = Vec::new();
    for (c, name) in CATEGORIES.iter().enumerate() {
        let lo = ranks.iter().min_by_key(|r| (r.peaks[c], r.pid))?;
        let hi = ranks.iter().max_by_key(|r| (r.peaks[c], std::cmp::Reverse(r.pid)))?;
        let spread = hi.peaks[c] - lo.peaks[c];
        let p = pct(spread, hi.peaks[c]);
        if spread >= NOISE && p > IMBALANCE_PCT {
            spreads.push(Spread {
                category: name.to_string(),
                min_bytes: lo.peaks[c],
                min_pid: lo.pid,
                max_bytes: hi.peaks[c],
                max_pid: hi.pid,
                spread_pct: p,
            });
        }
    }
    if spreads.is_empty() {
        return None;
    }
    let name = |pid: i64| ranks.iter().find(|r| r.pid == pid).map_or(format!("pid {pid}"), |r| r.process.clone());
    let words: Vec<String> = spreads
        .iter()
        .map(|s| {
            format!(
                "{}: {} at its peak held {}, {} only {} ({:.1}% less)",
                s.category,
                name(s.max_pid),
                fmt_bytes(s.max_bytes),
                name(s.min_pid),
                fmt_bytes(s.min_bytes),
                s.spread_pct
            )
        })
        .collect();
    let mut text = format!(
        "Across {} ranks of the launch, {} more than {IMBALANCE_PCT}%: {}. Tensor-parallel ranks hold the same \
         shapes; a difference means a rank was told less free memory, holds something the others do not, or \
         was given a different share.",
        ranks.len(),
        if spreads.len() == 1 { "one category differs by" } else { "these categories differ by" },
        join_and(&words)
    );
    if !failed_left_out.is_empty() {
        text.push_str(&format!(
            " Left out: {} (an allocation failed; their figures stop there).",
            join_and(&failed_left_out.iter().map(|p| format!("pid {p}")).collect::<Vec<_>>())
        ));
    }
    let title = format!(
        "The ranks are imbalanced: {}",
        join_and(
            &spreads.iter().map(|s| format!("{} differs by {:.1}%", s.category, s.spread_pct)).collect::<Vec<_>>()
        )
    );
    Some(Finding {
        kind: "imbalance",
        severity: "warning",
        title,
        text,
        host: None,
        device: None,
        pids: ranks.iter().map(|r| r.pid).collect(),
        callers: Vec::new(),
        detail: Detail::Imbalance(ImbalanceDetail { ranks, categories: spreads, failed_left_out }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const MIB: i64 = 1 << 20;

    fn py(file: &str, function: &str) -> Value {
        json!({"file": file, "function": function, "line": 10})
    }

    /// Rank 0 on GPU 0 as a writer with call sites records it: a first query, weights, the
    /// sizing query, peer access (1 GiB), the pool's first half, the second half failing,
    /// the out-of-memory handler's query. Rank 1 creates its context on GPU 0 by peer access
    /// after rank 0's sizing query.
    fn run() -> Run {
        let stamp = |t: i64, seq: i64, mut v: Value| {
            v["t_ms"] = json!(t / 1000);
            v["t_us"] = json!(t);
            v["seq"] = json!(seq);
            v
        };
        let total = 16384 * MIB;
        let probe = |t, seq, free: i64, site| {
            stamp(
                t,
                seq,
                json!({"api": "cudaMemGetInfo", "free_bytes": free * MIB, "total_bytes": total, "site": site}),
            )
        };
        let sample = |t, seq, weights: i64, kv: i64| {
            stamp(t, seq, json!({"live_bytes": (weights + kv) * MIB, "weights": weights * MIB, "kv_pool": kv * MIB}))
        };
        let rank0 = json!({
            "schema": "culedger/1",
            "process": {"pid": 100, "host": "h", "start_unix_ms": 0, "start_unix_us": 0, "end_unix_ms": 10,
                        "exit": "exit", "exit_code": 1, "env": {"RANK": "0", "WORLD_SIZE": "2"}},
            "sites": [
                {"id": 7, "python": [py("/usr/lib/python3.11/ctypes/__init__.py", "__call__"),
                                      py("/srv/sglang/srt/distributed/custom_all_reduce.py", "CustomAllreduce.open")],
                 "native": []},
                {"id": 9, "python": [py("/srv/venv/lib/python3.11/site-packages/sglang/srt/mem_cache/memory_pool.py",
                                         "MHATokenToKVPool._create_buffers")], "native": []},
                {"id": 10, "python": [py("/srv/venv/lib/python3.11/site-packages/sglang/srt/mem_cache/memory_pool.py",
                                          "MHATokenToKVPool._create_buffers")], "native": []},
                {"id": 11, "python": [py("/srv/venv/lib/python3.11/site-packages/sglang/srt/utils.py",
                                          "get_available_gpu_memory")], "native": []},
            ],
            "devices": [{
                "index": 0, "total_bytes": total, "alloc_count": 3, "live_bytes": 9000 * MIB, "peak_bytes": 9000 * MIB,
                "probes": [probe(1000, 1, 15872, 11), probe(3000, 3, 11776, 11), probe(9000, 9, 1288, 11)],
                "timeline": [sample(2000, 2, 4096, 0), sample(6000, 6, 4096, 4904)],
                "top_allocations": [
                    stamp(6000, 6, json!({"ptr": "0x2", "bytes": 4904 * MIB, "api": "cudaMalloc", "category": "kv_pool", "site": 9})),
                    stamp(2000, 2, json!({"ptr": "0x1", "bytes": 4096 * MIB, "api": "cudaMalloc", "category": "weights",
                                          "h2d_bytes": 4096 * MIB, "caller": "model_runner.py:ModelRunner.load_model"})),
                ],
                "failures": [stamp(8000, 8, json!({"api": "cudaMalloc", "bytes": 4904 * MIB, "error": 2,
                                                   "error_name": "cudaErrorMemoryAllocation", "live_bytes": 9000 * MIB,
                                                   "site": 10}))],
                "driver_costs": [{"api": "cudaDeviceEnablePeerAccess", "calls": 1, "bytes": 1024 * MIB, "sites": [7]}],
                "events": [stamp(5000, 5, json!({"kind": "driver_cost", "api": "cudaDeviceEnablePeerAccess",
                                                 "bytes": 1024 * MIB, "t0_us": 4000, "detail": "1073741824 bytes"}))],
            }],
        });
        // Its context alone on the GPU: 512 MiB untracked at its first query.
        let r0: crate::model::Report = serde_json::from_value(rank0).unwrap();
        let rank1 = json!({
            "schema": "culedger/1",
            "process": {"pid": 101, "host": "h", "start_unix_ms": 0, "start_unix_us": 0, "end_unix_ms": 10,
                        "exit": "exit", "exit_code": 0, "env": {"RANK": "1", "WORLD_SIZE": "2"}},
            "devices": [{"index": 0, "events": [stamp(5600, 4, json!({"kind": "peer_access", "api": "cudaDeviceEnablePeerAccess",
                                                                      "t0_us": 5500, "detail": "peer access from device 1"}))]}],
        });
        Run { label: "t/".into(), procs: vec![r0, serde_json::from_value(rank1).unwrap()], ..Run::default() }
    }

    #[test]
    fn a_failure_is_reconciled_with_its_call_sites() {
        let run = run();
        let gs = crate::analysis::groups(&run);
        let found = all(&run, &gs);
        let f = found.iter().find(|f| f.kind == "failed_allocation").expect("the failure");
        let Detail::Failure(d) = &f.detail else { unreachable!() };
        let r = d.reconciliation.as_ref().expect("a sizing query before it");
        assert_eq!(r.query.free_bytes, 11776 * MIB);
        assert_eq!(r.query.caller.as_deref(), Some("sglang/srt/utils.py:get_available_gpu_memory"));
        let kinds: Vec<(&str, i64)> = r.items.iter().map(|i| (i.kind, i.bytes / MIB)).collect();
        assert_eq!(kinds, [("pool", 4904), ("driver_cost", 1024), ("other_processes", 512)]);
        // 11776 - 4904 - 1024 - 512 = 5336 expected free; the handler's query told 1288:
        // 4048 MiB no report explains.
        assert_eq!(r.unexplained_bytes, Some(4048 * MIB));
        assert_eq!((d.free_bytes, d.short_by_bytes), (Some(1288 * MIB), Some((4904 - 1288) * MIB)));
        assert_eq!(d.part, "the second half of its KV pool");
        assert_eq!(
            f.title,
            "rank 0 (pid 100) could not allocate the second half of its KV pool on GPU 0 (4.79 GiB, cudaMalloc, \
             kv_pool, from MHATokenToKVPool._create_buffers)"
        );
        assert_eq!(d.caller.as_deref(), Some("sglang/srt/mem_cache/memory_pool.py:MHATokenToKVPool._create_buffers"));
        assert_eq!(r.items[0].callers, ["sglang/srt/mem_cache/memory_pool.py:MHATokenToKVPool._create_buffers"]);
        assert_eq!(r.items[1].callers, ["custom_all_reduce.py:CustomAllreduce.open"], "runtime frames skipped");
        assert!(f.callers.contains(&"custom_all_reduce.py:CustomAllreduce.open".to_string()));
        assert_eq!(f.pids, [100, 101]);
        assert!(
            f.text.starts_with(
                "rank 0 (pid 100) sized its KV pool from 11.50 GiB free at 0.003s; after that query 1.00 GiB went to \
                 peer access (not visible to that query), 512.00 MiB to the context that rank 1 (pid 101) created here by \
                 its peer access and 3.95 GiB to something no report of the run shows; the first half of the KV pool \
                 took 4.79 GiB, and the second half of the KV pool (4.79 GiB) no longer fit: 1.26 GiB were free, \
                 short by 3.53 GiB."
            ),
            "{}",
            f.text
        );
    }

    #[test]
    fn a_failure_without_a_query_before_it_says_so() {
        let r = crate::explain::steps::tests::process(&[("a", 100), ("x", 5000)]);
        let run = Run { label: "t/".into(), procs: vec![r], ..Run::default() };
        let gs = crate::analysis::groups(&run);
        let found = all(&run, &gs);
        assert_eq!(found.len(), 1, "{found:?}");
        let Detail::Failure(d) = &found[0].detail else { unreachable!() };
        assert!(d.reconciliation.is_none() && d.short_by_bytes.is_none());
        assert!(found[0].text.contains("with no free-memory query before it on GPU 0"), "{}", found[0].text);
    }

    #[test]
    fn without_call_sites_the_text_says_so() {
        let mut run = run();
        for r in &mut run.procs {
            r.sites.clear();
            for d in &mut r.devices {
                for a in &mut d.top_allocations {
                    (a.site, a.caller) = (None, None);
                }
            }
        }
        let e = super::super::explain(&run);
        assert!(!e.sites_recorded);
        let text = super::super::document(&e).render(crate::doc::Format::Text, crate::layout::Style::default());
        assert!(text.contains("Call site unknown: these reports record no call sites"), "{text}");
    }
}
