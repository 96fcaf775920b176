//! Failed allocations, each reconciled from the query the process sized from (failed
//! attempts of one burst are one finding), and starts that failed without one. Which part of
//! its burst an attempt is, and the reconciliation a device's pool went through (for
//! `culedger diff`), are the analysis crate's (`crate::recon`).

use crate::callers;
use crate::recon::{burst_category, part_of, reconcile, ReconWords};
use crate::steps::{self, burst_ending_at, query_before, Step};
use super::types::{
    AfterPool, Detail, Ended, FailDetail, Finding, Kind, Minimum, Severity, SizedBy, StartDetail, StartRefusal,
    StartRow,
};
use crate::groups::{DeviceGroup, Member};
use crate::load::Run;
use crate::model::Report;

/// Processes that touched a GPU and exited with a failure status (or were killed by a
/// signal) without a failed allocation of their own, leaving out a parent whose child failed
/// (a launcher reports its ranks' failure): a start that failed is always a finding, also
/// when the engine refused by its own check ("Not enough memory") before allocating its pool.
/// A process stopped (SIGTERM, SIGINT, SIGHUP, or ended with a `culedger run` a stop signal
/// ended: see `runs::stopped`) did not fail.
/// `ev`: the engine's formula on the run; a rank whose refusal check fails at the run's value
/// was refused by that check, and the row says which. `words` name each process.
pub(super) fn failed_start(
    run: &Run,
    gs: &[DeviceGroup],
    ev: Option<&crate::sizing::Evaluation>,
    words: &dyn ReconWords,
) -> Vec<Finding> {
    // The run's command failed of itself (an exit status other than 0, no signal) and no
    // process has a failed allocation: the stop signals its processes got were its own
    // cleanup, not a user's stop (vLLM 0.33: a worker whose `Worker.init_device` raises is
    // terminated with the others by `MultiprocExecutor`'s shutdown, SIGTERM, and `vllm serve`
    // exits 1).
    let command_failed = run.summary.as_ref().is_some_and(|s| s.signal.is_none() && s.exit_code.is_some_and(|c| c != 0))
        && !run.procs.iter().any(|p| p.devices.iter().any(|d| !d.failures.is_empty()));
    let failed = |r: &Report| {
        (r.process.exit_code.is_some_and(|c| c != 0) || r.process.signal.is_some())
            && (command_failed || !crate::runs::stopped(r, run))
    };
    let mut rows: Vec<StartRow> = Vec::new();
    for r in &run.procs {
        let touched = !r.devices.is_empty();
        let own_failures = r.devices.iter().any(|d| !d.failures.is_empty());
        // Its children: on its host, started after it (a pid alone names no process).
        let child_failed = run.procs.iter().any(|c| {
            c.process.ppid == r.process.pid
                && c.process.host == r.process.host
                && c.process.start_us() >= r.process.start_us()
                && failed(c)
        });
        if !failed(r) || !touched || own_failures || child_failed {
            continue;
        }
        // Its last free-memory query: where it was when it gave up.
        let last = gs
            .iter()
            .flat_map(|g| g.members.iter().filter(|m| std::ptr::eq(m.report, r)).map(move |m| (g, *m)))
            .flat_map(|(g, m)| m.dev.probes.iter().map(move |p| (g, m, p)))
            .max_by_key(|(_, m, p)| m.abs_us(*p));
        let function = last.map(|(_, m, p)| {
            callers::explaining(m.report, p.site, true).map(|e| e.function).unwrap_or_else(|| "?".into())
        });
        rows.push(StartRow {
            pid: r.process.pid,
            process: words.who(r),
            // Written from `ended` by the words (`prose::word`).
            status: String::new(),
            ended: Ended::of(r.process.exit_code, r.process.signal),
            last_query_at_us: last.map(|(g, m, p)| g.clock.since(m.abs_us(p))),
            last_query_function: function,
            last_query_device: last.map(|(g, _, _)| (g.index, g.mig_index, g.id())),
            refused_by: ev.and_then(|ev| {
                let rank = ev.ranks.iter().find(|k| k.rank.is_process(r))?;
                let (message, c0, c1, _) = ev.refusals(rank, ev.value).into_iter().next()?;
                Some(StartRefusal {
                    engine: ev.engine.clone(),
                    message,
                    flag: ev.flag.clone(),
                    value: ev.value,
                    short_bytes: -(c0 + c1 * ev.value).round() as i64,
                })
            }),
        });
    }
    if rows.is_empty() {
        return Vec::new();
    }
    let detail = StartDetail { processes: rows };
    let callers = detail.processes.iter().filter_map(|r| r.last_query_function.clone()).fold(Vec::new(), |mut v, c| {
        if !v.contains(&c) {
            v.push(c);
        }
        v
    });
    let pids = detail.processes.iter().map(|r| r.pid).collect();
    vec![super::types::finding(Kind::FailedStart, Severity::Failure, None, pids, callers, Detail::Start(detail))]
}

/// The failure findings, in device order; failed attempts of one burst are one finding.
/// `words` name each process and write its reconciliation's lines.
pub(super) fn failed_allocations(
    gs: &[DeviceGroup],
    ev: Option<&crate::sizing::Evaluation>,
    words: &dyn ReconWords,
) -> Vec<Finding> {
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
                // The engine sized every rank from the minimum over the ranks: the text says so
                // where the rank's own query told more.
                let minimum = ev.and_then(|e| {
                    let r = e.ranks.iter().find(|r| r.is(*m) && g.is(&r.rank.gpu))?;
                    let used = r.inputs.get(&e.sizing.sizing_query).copied().unwrap_or(0);
                    (used != r.told_bytes).then(|| Minimum { used, told: r.told_bytes, engine: e.engine.clone() })
                });
                // The query the engine sized its pool from (one value, the evaluation's), when
                // it precedes the failed burst: the reconciliation starts there.
                let sized = ev.and_then(|e| {
                    let r = e.ranks.iter().find(|r| r.is(*m) && g.is(&r.rank.gpu) && r.complete)?;
                    let q = r.sizing_index;
                    // Whether the engine's pool (the burst after the formula's last query) was
                    // allocated whole before this burst: then what failed is no part of it.
                    let pool = steps::burst_after(&st, r.query_index);
                    let after = pool.last().is_some_and(|&l| l < burst[0]) && !pool.iter().any(|&j| st[j].failure().is_some());
                    (q < burst[0] && st[q].told().is_some())
                        .then(|| (q, SizedBy { engine: e.engine.clone(), function: e.sizing.function.clone() }, after))
                });
                out.push((s.abs_us, failure_finding(g, *m, &st, i, &burst, f, minimum, sized, words)));
            }
        }
    }
    // In device order: failures with the same mechanism fold under the first GPU's.
    out.sort_by_key(|(t, f)| (f.host.clone(), f.device, f.mig_index, *t));
    out.into_iter().map(|(_, f)| f).collect()
}

#[allow(clippy::too_many_arguments)]
fn failure_finding(
    g: &DeviceGroup,
    m: Member,
    st: &[Step],
    i: usize,
    burst: &[usize],
    f: &crate::model::Failure,
    minimum: Option<Minimum>,
    sized: Option<(usize, SizedBy, bool)>,
    words: &dyn ReconWords,
) -> Finding {
    let clock = g.clock;
    let q = sized.as_ref().map(|x| x.0).or_else(|| query_before(st, burst[0]));
    let recon = q.map(|q| reconcile(g, m, st, q, i, burst, words));
    let told = recon.as_ref().map(|r| r.query.free_bytes);
    let (category, own) = burst_category(st, burst);
    // After the engine's whole pool, a request is no part of it, whatever its size.
    let after_engine_pool = sized.as_ref().is_some_and(|x| x.2);
    let part = part_of(st, burst, told.filter(|_| !after_engine_pool), category, own);
    let caller = callers::caller(m.report, f.site);
    let caller_chain = callers::explaining(m.report, f.site, false).map(|e| e.chain);
    let (free, measured) = match &recon {
        Some(r) => (Some(r.free_bytes), r.closed_by.is_some()),
        None => (None, false),
    };
    let needed = crate::sizing::needed(m, f);
    let short_by = free.map(|fr| needed - fr);
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
                r.items.iter().map(|i| format!("{}:{}", i.kind.as_str(), i.api.clone().unwrap_or_default())).collect();
            format!("{part:?}|{}|{}", kinds.join(","), short_by.is_some_and(|s| s > 0) || free.is_some_and(|f| f <= 0))
        }
        None => format!("{part:?}|no query"),
    };
    let detail = FailDetail {
        pid: m.pid(),
        process: words.who(m.report),
        label: m.label(),
        at_us: clock.since(st[i].abs_us),
        api: f.api.clone(),
        bytes: f.bytes,
        error_name: f.error_name.clone(),
        caller,
        caller_chain,
        // Written from `part_of` by the words (`prose::word`).
        part: String::new(),
        part_of: part,
        // Written from `after` by the words (`prose::word`).
        after_pool: None,
        after: graph_capture_after_pool(st, i, category),
        category: category.map(str::to_string),
        burst_attempts: burst.len(),
        burst_bytes: burst.iter().map(|&j| st[j].bytes).sum(),
        later_failures: 0,
        reconciliation: recon,
        free_bytes: free,
        free_measured: measured,
        needed_bytes: needed,
        short_by_bytes: short_by,
        held_bytes: f.live_bytes,
        signature,
        minimum,
        sized_by: sized.map(|x| x.1),
    };
    super::types::finding(Kind::FailedAllocation, Severity::Failure, Some(g), pids, all_callers, Detail::Failure(Box::new(detail)))
}

/// A failed request of the CUDA graphs' (its own call site's category) made after the process
/// allocated its KV pool: the graph capture after the pool (vLLM's compile_or_warm_up_model ->
/// capture_model after initialize_from_config; SGLang's init_cuda_graphs after
/// init_memory_pool).
fn graph_capture_after_pool(st: &[Step], i: usize, category: Option<&str>) -> Option<AfterPool> {
    let kv = crate::model::CATEGORIES.iter().position(|c| *c == "kv_pool")?;
    (category == Some("graphs") && st[..i].iter().any(|s| s.cats[kv] > 0)).then_some(AfterPool::GraphCapture)
}

// ---------------------------------------------------------------------------------------
