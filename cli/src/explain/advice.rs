//! "What to change": the engine's sizing formula (`engines`) evaluated on the run's own
//! queries, and the value of its parameter that makes the failed (or refused) start fit.
//!
//! For each rank the formula's inputs come from the queries their call sites name. Then:
//! - a refusal (the formula's own check: SGLang's pool must come out positive, vLLM's initial
//!   free memory must hold `total x utilization`) bounds the parameter where the check's
//!   linear expression crosses zero;
//! - a failed allocation after the sizing query bounds it by the deficit at the failure:
//!   what was still to come there (the rest of the pool, when the failure is inside it, else
//!   the failed request) plus the margin for what the failed run never reached (the pack's
//!   `after_pool`), minus the free memory left; the parameter moves the pool by `scale`
//!   bytes per unit (SGLang: `total`; vLLM: the GPU's memory), so lowering it by
//!   `deficit / scale` makes room.
//!
//! The most constraining rank decides; "lower" values round down and "raise" values round up
//! to two decimals. `whatif` replays the same evaluation with other values.

use super::engines::{self, Sizing, Term};
use super::findings::{join_and, Detail, Finding};
use super::recon::{api_words, reconcile, Item};
use super::steps::{self, burst_after, Kind, Step};
use crate::analysis::{DeviceGroup, Member};
use crate::load::Run;
use crate::model::Report;
use crate::units::fmt_bytes;
use serde::Serialize;
use std::collections::BTreeMap;

const GIB: f64 = (1u64 << 30) as f64;

/// One rank's formula inputs and its pool at the run's parameter value.
#[derive(Debug, Clone, Serialize)]
pub struct RankSizing {
    pub pid: i64,
    pub process: String,
    pub host: String,
    pub device: i64,
    /// The inputs as the engine used them (after the minimum over ranks, where it takes it).
    pub inputs: BTreeMap<String, i64>,
    /// The rank's own value of each input, before any minimum over ranks.
    pub own_inputs: BTreeMap<String, i64>,
    /// The free memory its sizing query told it.
    pub told_bytes: i64,
    /// The pool the formula gives at the run's value.
    pub pool_bytes: i64,
    /// The call site (function) of the sizing query that matched the formula.
    pub query_function: Option<String>,
    /// Whether every input of the formula was found (a start refused early has only those
    /// of its refusal check).
    pub complete: bool,
    #[serde(skip)]
    pub query_index: usize,
}

/// The formula evaluated on a run.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    pub pack: String,
    pub engine: String,
    /// `file.py function` the formula is keyed on.
    pub function: String,
    pub formula: String,
    pub parameter: String,
    pub flag: String,
    pub value: f64,
    /// Where the value comes from, in words.
    pub value_source: String,
    /// Bytes the pool grows per unit of the parameter (per rank).
    pub scale_bytes: i64,
    pub ranks: Vec<RankSizing>,
    #[serde(skip)]
    pub sizing: Sizing,
}

/// The recommendation.
#[derive(Debug, Clone, Serialize)]
pub struct Advice {
    pub engine: String,
    pub parameter: String,
    pub flag: String,
    pub value: f64,
    pub value_source: String,
    /// `lower` or `raise`; `none` when no value of the parameter fits.
    pub direction: &'static str,
    /// The value to set (two decimals), when one fits.
    pub recommended: Option<f64>,
    /// The bound before rounding.
    pub bound: f64,
    /// The pool (per rank) at the run's value and at the recommended one.
    pub pool_before_bytes: i64,
    pub pool_after_bytes: Option<i64>,
    /// What the formula reserved for everything after the pool at the run's value.
    pub reserve_bytes: i64,
    pub reserve_words: String,
    /// What arrived after the sizing query on the deciding rank, largest first.
    pub arrivals: Vec<(String, i64)>,
    pub arrivals_bytes: i64,
    /// Left for what the failed run never reached.
    pub margin_bytes: i64,
    pub margin_what: String,
    /// Features whose call sites caused part of the arrivals, and how much.
    pub alternatives: Vec<AltAdvice>,
    /// The rank whose numbers decide (`rank 1 (pid 5102)`).
    pub deciding: String,
    /// "What to change", most useful first.
    pub lines: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AltAdvice {
    pub flag: String,
    pub what: String,
    pub bytes: i64,
    pub apis: Vec<String>,
}

/// GiB with two decimals; three below 0.01 GiB, so that a few MiB do not read as nothing.
fn gib(b: i64) -> String {
    let g = b as f64 / GIB;
    if g != 0.0 && g.abs() < 0.01 {
        format!("{g:.3}")
    } else {
        format!("{g:.2}")
    }
}

/// The value of the engine's parameter: on a command line of the run, else its default.
fn param_value(run: &Run, s: &Sizing) -> (f64, String) {
    for r in &run.procs {
        if let Some(v) = engines::flag_value(&r.process.argv, &s.parameter.flag) {
            return (v, format!("{} {v} on the command line of pid {}", s.parameter.flag, r.process.pid));
        }
    }
    // Ranks started by multiprocessing carry the launcher's arguments only in the command
    // `culedger run` recorded.
    if let Some(v) = run.summary.as_ref().and_then(|m| engines::flag_value(&m.command, &s.parameter.flag)) {
        return (v, format!("{} {v} on the command line", s.parameter.flag));
    }
    (s.parameter.default, format!("the default {} ({})", s.parameter.default, s.parameter.default_note))
}

/// The process's queries on `m`'s device whose frames match `callers`, as step indices.
fn matching_queries(m: Member, st: &[Step], callers: &[String]) -> Vec<usize> {
    (0..st.len())
        .filter(|&i| match st[i].kind {
            Kind::Query(p) => p.error == 0 && engines::matching_frame(m.report, p.site, callers).is_some(),
            _ => false,
        })
        .collect()
}

fn probe_of<'a>(s: &Step<'a>) -> Option<&'a crate::model::Probe> {
    match s.kind {
        Kind::Query(p) => Some(p),
        _ => None,
    }
}

/// The largest rise of `m`'s tracked memory from step `from` to step `to`.
fn peak_rise(m: Member, st: &[Step], from: usize, to: usize) -> i64 {
    let Some(base) = probe_of(&st[from]).map(|p| p.live_bytes) else { return 0 };
    let (t0, t1) = (st[from].stamp, st[to].stamp);
    m.dev
        .timeline
        .iter()
        .filter(|s| t0.precedes(crate::model::Stamped::stamp(*s)) && crate::model::Stamped::stamp(*s).precedes(t1))
        .map(|s| s.live_bytes - base)
        .max()
        .unwrap_or(0)
        .max(0)
}

fn eval_terms(terms: &[Term], inputs: &BTreeMap<String, i64>, p: f64) -> f64 {
    terms
        .iter()
        .map(|t| {
            let x = inputs.get(&t.input).copied().unwrap_or(0) as f64 * t.coef;
            if t.times_parameter {
                x * p
            } else {
                x
            }
        })
        .sum()
}

/// The formula's terms as `c0 + c1 * p`.
fn linear(terms: &[Term], inputs: &BTreeMap<String, i64>) -> (f64, f64) {
    let c0 = eval_terms(&terms.iter().filter(|t| !t.times_parameter).cloned().collect::<Vec<_>>(), inputs, 0.0);
    let c1 = eval_terms(&terms.iter().filter(|t| t.times_parameter).cloned().collect::<Vec<_>>(), inputs, 1.0);
    (c0, c1)
}

/// Evaluates `s` on the run: every rank whose queries feed all of the formula's inputs.
pub fn evaluate(run: &Run, gs: &[DeviceGroup], pack: &str, s: &Sizing) -> Option<Evaluation> {
    let mut ranks: Vec<RankSizing> = Vec::new();
    for g in gs {
        for m in &g.members {
            let st = steps::steps(*m);
            let mut own: BTreeMap<String, i64> = BTreeMap::new();
            let mut idx: BTreeMap<String, usize> = BTreeMap::new();
            for (name, input) in &s.inputs {
                let found = matching_queries(*m, &st, &input.callers);
                let pick = if input.pick == "first" { found.first() } else { found.last() };
                let Some(&i) = pick else { continue };
                idx.insert(name.clone(), i);
            }
            // A start refused early reached only the queries of its refusal check.
            let complete = idx.len() == s.inputs.len();
            let refusal_ok = s.refusals.iter().any(|f| {
                serde_json::from_value::<Vec<Term>>(f.when.clone())
                    .is_ok_and(|ts| !ts.is_empty() && ts.iter().all(|t| idx.contains_key(&t.input)))
            });
            if !complete && !refusal_ok {
                continue;
            }
            for (name, input) in &s.inputs {
                let Some(&i) = idx.get(name) else { continue };
                let p = probe_of(&st[i]).expect("a query");
                let v = match input.value.as_str() {
                    "total" => p.total_bytes.unwrap_or(0),
                    "peak_rise" => {
                        let from = input.since.as_ref().and_then(|n| idx.get(n)).copied().unwrap_or(i);
                        peak_rise(*m, &st, from, i)
                    }
                    _ => p.free_bytes.unwrap_or(0),
                };
                own.insert(name.clone(), v);
            }
            let q = idx.get(&s.sizing_query).copied().unwrap_or_else(|| idx.values().copied().max().unwrap_or(0));
            let function = probe_of(&st[q])
                .and_then(|p| engines::matching_frame(m.report, p.site, &s.inputs[&s.sizing_query].callers))
                .map(|f| f.function.clone());
            ranks.push(RankSizing {
                pid: m.pid(),
                process: super::who(m.report),
                host: g.host.clone(),
                device: g.index,
                inputs: own.clone(),
                told_bytes: own.get(&s.sizing_query).copied().unwrap_or(0),
                own_inputs: own,
                pool_bytes: 0,
                query_function: function,
                complete,
                query_index: q,
            });
        }
    }
    if ranks.is_empty() {
        return None;
    }
    // Inputs the engine takes as the minimum over the ranks.
    for (name, input) in &s.inputs {
        if input.over_ranks.as_deref() == Some("min") {
            let Some(min) = ranks.iter().filter_map(|r| r.own_inputs.get(name).copied()).min() else { continue };
            for r in ranks.iter_mut().filter(|r| r.inputs.contains_key(name)) {
                r.inputs.insert(name.clone(), min);
            }
        }
    }
    let (value, value_source) = param_value(run, s);
    for r in &mut ranks {
        r.pool_bytes = eval_terms(&s.pool, &r.inputs, value) as i64;
    }
    if s.pool_over_ranks.as_deref() == Some("min") {
        let min = ranks.iter().filter(|r| r.complete).map(|r| r.pool_bytes).min().unwrap_or(0);
        for r in &mut ranks {
            r.pool_bytes = min;
        }
    }
    for r in ranks.iter_mut().filter(|r| !r.complete) {
        r.pool_bytes = 0;
    }
    let scale = ranks.iter().map(|r| linear(&s.pool, &r.inputs).1 as i64).min().unwrap_or(0);
    Some(Evaluation {
        pack: pack.to_string(),
        engine: s.engine.clone(),
        function: s.function.clone(),
        formula: s.formula.clone(),
        parameter: s.parameter.name.clone(),
        flag: s.parameter.flag.clone(),
        value,
        value_source,
        scale_bytes: scale,
        ranks,
        sizing: s.clone(),
    })
}

/// The engine's formula on the run, when the run is a known engine's.
pub fn evaluate_run(run: &Run, gs: &[DeviceGroup]) -> Option<Evaluation> {
    let reports: Vec<&Report> = run.procs.iter().collect();
    let (pack, s) = engines::recognize(&reports)?;
    evaluate(run, gs, &pack, &s)
}

impl Evaluation {
    /// The pool per rank at parameter value `p`.
    pub fn pool_at(&self, r: &RankSizing, p: f64) -> i64 {
        if !r.complete {
            return 0;
        }
        let own = eval_terms(&self.sizing.pool, &r.inputs, p) as i64;
        if self.sizing.pool_over_ranks.as_deref() == Some("min") {
            let all = self.ranks.iter().filter(|o| o.complete);
            all.map(|o| eval_terms(&self.sizing.pool, &o.inputs, p) as i64).min().unwrap_or(own)
        } else {
            own
        }
    }

    /// The refusal checks that fail for rank `r` at `p`: (message, c0, c1), where the check
    /// holds when `c0 + c1 * p` is positive (the pool) or not negative (other checks).
    pub fn refusals(&self, r: &RankSizing, p: f64) -> Vec<(String, f64, f64, bool)> {
        let mut out = Vec::new();
        for f in &self.sizing.refusals {
            let (terms, strict): (Vec<Term>, bool) = if f.when.as_str() == Some("pool") {
                (self.sizing.pool.clone(), true)
            } else {
                (serde_json::from_value(f.when.clone()).unwrap_or_default(), false)
            };
            if !terms.iter().all(|t| r.inputs.contains_key(&t.input)) {
                continue;
            }
            let (c0, c1) = linear(&terms, &r.inputs);
            let v = c0 + c1 * p;
            if (strict && v <= 0.0) || (!strict && v < 0.0) {
                out.push((f.message.clone(), c0, c1, strict));
            }
        }
        out
    }

    /// The reserve at `p` in words (`(1 - 0.90) x 95.00 GiB`) and bytes, for rank `r`.
    pub fn reserve(&self, r: &RankSizing, p: f64) -> (String, i64) {
        let mut words = self.sizing.reserve.replace("{parameter}", &format!("{p:.2}"));
        let mut bytes = 1.0 - p;
        for (name, v) in &r.inputs {
            let key = format!("{{{name}}}");
            if words.contains(&key) {
                words = words.replace(&key, &format!("{} GiB", gib(*v)));
                bytes *= *v as f64;
            }
        }
        (words, bytes as i64)
    }
}

fn floor2(x: f64) -> f64 {
    ((x * 100.0) + 1e-9).floor() / 100.0
}

fn ceil2(x: f64) -> f64 {
    ((x * 100.0) - 1e-9).ceil() / 100.0
}

/// What a failure at step `i` of rank `r` leaves to come, the reconciliation from the sizing
/// query to it, and (for a failure after the pool) the free memory when the pool was done.
fn deficit_at(
    g: &DeviceGroup,
    m: Member,
    st: &[Step],
    r: &RankSizing,
    i: usize,
    need: i64,
) -> (i64, super::recon::Recon, Option<i64>) {
    let q = r.query_index;
    let pool_burst = burst_after(st, q);
    let upto: Vec<usize> = pool_burst.iter().copied().filter(|&j| j <= i).collect();
    let recon = reconcile(g, m, st, q, i, &upto);
    let still = if pool_burst.contains(&i) {
        // Inside the pool: the rest of the pool is still to come. The formula's pool is made
        // of equal parts (K and V buffers per layer, one tensor per layer); other parts of the
        // burst (a request-to-token table) are outside it.
        let equal: i64 = upto
            .iter()
            .filter(|&&j| j != i && matches!(st[j].kind, Kind::Alloc { .. }))
            .map(|&j| st[j].bytes)
            .filter(|b| (b - st[i].bytes).abs() * 100 <= st[i].bytes)
            .sum();
        ((r.pool_bytes - equal).max(need), None)
    } else {
        let end = pool_burst.last().copied().unwrap_or(q);
        (need, Some(reconcile(g, m, st, q, end, &pool_burst).free_bytes))
    };
    (still.0, recon, still.1)
}

/// One rank's start as the run recorded it, for replaying the formula at other values.
#[derive(Debug, Clone, Serialize)]
pub struct Outlook {
    pub pid: i64,
    pub process: String,
    pub host: String,
    pub device: i64,
    /// What its sizing query told it.
    pub told_bytes: i64,
    /// Whether an allocation failed after the sizing query.
    pub failed: bool,
    /// What arrived after the sizing query apart from the pool, up to the failure (or the
    /// end of the run).
    pub arrivals_bytes: i64,
    /// Free memory at the failure (or at the end).
    pub free_end_bytes: i64,
    /// Still needed at the failure: the rest of the pool or the failed request.
    pub still_bytes: i64,
    /// Left for what the failed run never reached (0 for a rank that started).
    pub margin_bytes: i64,
}

/// Every rank of the evaluation, as the run went.
pub fn outlook(gs: &[DeviceGroup], ev: &Evaluation) -> Vec<Outlook> {
    let margin = ev.sizing.after_pool.mib << 20;
    let mut out = Vec::new();
    for r in &ev.ranks {
        let Some(g) = gs.iter().find(|g| g.host == r.host && g.index == r.device) else { continue };
        let Some(m) = g.member(r.pid) else { continue };
        let st = steps::steps(m);
        let q = r.query_index;
        let pool_burst = burst_after(&st, q);
        let fail = (q + 1..st.len()).find(|&i| st[i].failure().is_some()).filter(|_| r.complete);
        // (failed, free at the end, the pool so far, still needed, margin)
        let (failed, free, pool, still, margin_bytes) = match fail {
            Some(i) => {
                let f = st[i].failure().expect("a failure");
                let (still, recon, after_pool) = deficit_at(g, m, &st, r, i, needed(m, f));
                let free = recon.free_bytes;
                let margin = after_pool.map_or(margin, |fp| (margin - (fp - free)).max(0));
                (true, free, recon.sum("pool"), still, margin)
            }
            None => {
                let last = st.len() - 1;
                let pool: i64 = pool_burst.iter().map(|&j| st[j].bytes).sum();
                let free = match st[last].told() {
                    Some(p) if last > q => p.free_bytes.unwrap_or(0),
                    _ => reconcile(g, m, &st, q, last, &pool_burst).free_bytes,
                };
                (false, free, pool, 0, 0)
            }
        };
        let o = Outlook {
            pid: r.pid,
            process: r.process.clone(),
            host: r.host.clone(),
            device: r.device,
            told_bytes: r.told_bytes,
            failed,
            arrivals_bytes: r.told_bytes - free - pool,
            free_end_bytes: free,
            still_bytes: still,
            margin_bytes,
        };
        out.push(o);
    }
    out
}

/// The bytes a failed request needed: its size, or for a call that asks for driver memory
/// (an IPC open, peer access), what the same call cost the process when it succeeded (the
/// median of its measured calls, else their mean).
pub fn needed(m: Member, f: &crate::model::Failure) -> i64 {
    if f.bytes > 0 {
        return f.bytes;
    }
    // The median of the calls' own measurements: a measurement window is the free memory
    // before and after the call, and another process allocating meanwhile (the other ranks
    // starting up beside it) inflates the few calls it overlapped; the mean would carry that.
    let mut each: Vec<i64> = m
        .dev
        .events
        .iter()
        .filter(|e| e.kind == "driver_cost" && e.api == f.api)
        .filter_map(|e| e.bytes)
        .filter(|&b| b > 0)
        .collect();
    if !each.is_empty() {
        each.sort_unstable();
        return each[each.len() / 2];
    }
    m.dev.driver_costs.iter().find(|c| c.api == f.api && c.calls > 0).map_or(0, |c| c.bytes / c.calls)
}

fn arrivals(recon: &super::recon::Recon) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = Vec::new();
    for it in &recon.items {
        let what = match it.kind {
            "driver_cost" => api_words(it.api.as_deref().unwrap_or("")),
            "other_processes" => "other ranks' contexts".to_string(),
            "allocated" => format!("{} allocations", it.category.clone().unwrap_or_default()),
            _ => continue,
        };
        if it.bytes <= 0 {
            continue;
        }
        match out.iter_mut().find(|(w, _)| *w == what) {
            Some(e) => e.1 += it.bytes,
            None => out.push((what, it.bytes)),
        }
    }
    if let Some(u) = recon.unexplained_bytes.filter(|u| *u > crate::explain::NOISE) {
        out.push(("memory no report explains".into(), u));
    }
    out.sort_by_key(|(_, b)| std::cmp::Reverse(*b));
    out
}

/// The alternatives whose call sites caused driver costs among `items` (or, without items,
/// anywhere in the process).
fn alternatives(s: &Sizing, m: Member, items: Option<&[Item]>) -> Vec<AltAdvice> {
    let mut out = Vec::new();
    for a in &s.alternatives {
        let mut bytes = 0;
        let mut apis: Vec<String> = Vec::new();
        for c in &m.dev.driver_costs {
            let caused = c
                .sites
                .iter()
                .any(|&id| engines::frames(m.report, Some(id)).iter().any(|f| engines::frame_matches(&a.callers, f)));
            if !caused {
                continue;
            }
            let b = match items {
                Some(items) => items
                    .iter()
                    .filter(|i| i.kind == "driver_cost" && i.api.as_deref() == Some(c.api.as_str()))
                    .map(|i| i.bytes)
                    .sum(),
                None => c.bytes,
            };
            if b > 0 {
                bytes += b;
                let w = api_words(&c.api);
                if !apis.contains(&w) {
                    apis.push(w);
                }
            }
        }
        if bytes > 0 {
            out.push(AltAdvice { flag: a.flag.clone(), what: a.what.clone(), bytes, apis });
        }
    }
    out
}

/// The recommendation for a run whose start failed, from the engine's formula.
pub fn advise(run: &Run, gs: &[DeviceGroup], findings: &[Finding]) -> Option<Advice> {
    let ev = evaluate_run(run, gs)?;
    advise_with(run, gs, findings, &ev)
}

struct Bound {
    lower: bool,
    at: f64,
    rank: usize,
    recon: Option<super::recon::Recon>,
    refusal: Option<String>,
    margin: i64,
}

pub fn advise_with(run: &Run, gs: &[DeviceGroup], findings: &[Finding], ev: &Evaluation) -> Option<Advice> {
    let s = &ev.sizing;
    let p0 = ev.value;
    let margin = s.after_pool.mib << 20;
    let mut bounds: Vec<Bound> = Vec::new();
    for (k, r) in ev.ranks.iter().enumerate() {
        let Some(g) = gs.iter().find(|g| g.host == r.host && g.index == r.device) else { continue };
        let Some(m) = g.member(r.pid) else { continue };
        let failed_exit = m.report.process.exit_code.is_some_and(|c| c != 0) || m.report.process.signal.is_some();
        for (msg, c0, c1, _) in ev.refusals(r, p0) {
            if failed_exit && c1 != 0.0 {
                bounds.push(Bound {
                    lower: c1 < 0.0,
                    at: -c0 / c1,
                    rank: k,
                    recon: None,
                    refusal: Some(msg),
                    margin: 0,
                });
            }
        }
        let st = steps::steps(m);
        let Some(i) = (r.query_index + 1..st.len()).find(|&i| st[i].failure().is_some()) else { continue };
        let f = st[i].failure().expect("a failure");
        let need = needed(m, f);
        let (still, recon, after_pool) = deficit_at(g, m, &st, r, i, need);
        // The free memory at the failure: as the failure finding measured it, else as the
        // reconciliation from the sizing query estimates it.
        let free = findings
            .iter()
            .find_map(|x| match &x.detail {
                Detail::Failure(d) if d.pid == r.pid && x.device == Some(r.device) => d.free_bytes,
                _ => None,
            })
            .unwrap_or(recon.free_bytes);
        // What arrived between the pool and the failure was part of what the margin stands for.
        let margin = after_pool.map_or(margin, |fp| (margin - (fp - free)).max(0));
        let deficit = still + margin - free;
        if deficit <= 0 || ev.scale_bytes <= 0 {
            continue;
        }
        bounds.push(Bound {
            lower: true,
            at: p0 - deficit as f64 / ev.scale_bytes as f64,
            rank: k,
            recon: Some(recon),
            refusal: None,
            margin,
        });
    }
    if bounds.is_empty() {
        return None;
    }
    let lowest = bounds.iter().filter(|b| b.lower).min_by(|a, b| a.at.total_cmp(&b.at));
    let highest = bounds.iter().filter(|b| !b.lower).max_by(|a, b| a.at.total_cmp(&b.at));
    let (direction, bound, deciding) = match (lowest, highest) {
        (Some(l), Some(h)) if h.at >= l.at => ("none", l.at, l),
        (Some(l), _) => ("lower", l.at, l),
        (None, Some(h)) => ("raise", h.at, h),
        (None, None) => return None,
    };
    let recommended = match direction {
        "lower" => Some(floor2(bound)),
        "raise" => Some(ceil2(bound + 1e-6)),
        _ => None,
    }
    .filter(|v| *v >= s.parameter.min && *v <= s.parameter.max);
    let r = &ev.ranks[deciding.rank];
    let margin = deciding.margin;
    let pool_before = r.pool_bytes;
    let pool_after = recommended.map(|v| ev.pool_at(r, v));
    let (reserve_words, reserve_bytes) = ev.reserve(r, p0);
    let arr = deciding.recon.as_ref().map(arrivals).unwrap_or_default();
    let arrivals_bytes: i64 = arr.iter().map(|(_, b)| b).sum();
    let g = gs.iter().find(|g| g.host == r.host && g.index == r.device)?;
    let m = g.member(r.pid)?;
    let alts = alternatives(s, m, deciding.recon.as_ref().map(|x| &x.items[..]));

    let flag = &s.parameter.flag;
    let mut lines = Vec::new();
    match (direction, recommended) {
        ("lower", Some(v)) => lines.push(format!(
            "Lower {flag} from {p0:.2} to at most {v:.2}{}{}",
            if pool_before > 0 {
                format!(": the pool shrinks from {} to {} GiB per rank", gib(pool_before), gib(pool_after.unwrap_or(0)))
            } else {
                ":".to_string()
            },
            match &deciding.refusal {
                Some(msg) => format!(
                    "{} {} no longer refuses to start (\"{msg}\")",
                    if pool_before > 0 { " and" } else { "" },
                    s.engine
                ),
                None => format!(
                    ", so that the {} GiB that arrived after the sizing query fit and {} GiB stay for what the failed \
                     run never reached",
                    gib(arrivals_bytes),
                    gib(margin)
                ),
            }
        )),
        ("raise", Some(v)) => lines.push(format!(
            "Raise {flag} from {p0:.2} to at least {v:.2}: the formula gave a pool of {} GiB, and {} refused \
             (\"{}\"); at {v:.2} the pool gets {} GiB, and each 0.01 more adds {} GiB",
            gib(pool_before),
            s.engine,
            deciding.refusal.clone().unwrap_or_default(),
            gib(pool_after.unwrap_or(0)),
            gib(ev.scale_bytes / 100)
        )),
        _ => lines.push(format!(
            "No value of {flag} fits: the pool needs it above {:.3} and what comes after the pool needs it at most \
             {:.3}; free memory elsewhere (fewer arrivals, a smaller model, more GPUs)",
            highest.map_or(0.0, |h| h.at),
            lowest.map_or(0.0, |l| l.at)
        )),
    }
    if deciding.refusal.is_none() || !arr.is_empty() {
        let parts: Vec<String> = arr.iter().map(|(w, b)| format!("{w} {}", gib(*b))).collect();
        lines.push(format!(
            "The reserve was {reserve_words} = {} GiB ({} on {}); after the sizing query ({}) {} GiB arrived{}",
            gib(reserve_bytes),
            r.process,
            format_args!("GPU {}", r.device),
            r.query_function.as_deref().unwrap_or("?"),
            gib(arrivals_bytes),
            if parts.is_empty() { String::new() } else { format!(": {}", parts.join(", ")) }
        ));
    } else {
        lines.push(format!(
            "The reserve was {reserve_words} = {} GiB ({} on GPU {})",
            gib(reserve_bytes),
            r.process,
            r.device
        ));
    }
    for a in &alts {
        lines.push(format!(
            "Or disable {} ({}): its {} took {} GiB{}, named by the call sites of those costs",
            a.what,
            a.flag,
            join_and(&a.apis),
            gib(a.bytes),
            if deciding.recon.is_some() { " after the sizing query" } else { "" }
        ));
    }
    if margin > 0 && direction == "lower" && deciding.refusal.is_none() {
        lines.push(format!(
            "The value leaves a margin of {} GiB for {}, which the failed run never reached, so the reports cannot \
             size it (rules/{}.json, after_pool)",
            gib(margin),
            s.after_pool.what,
            ev.pack
        ));
    } else if direction == "lower" {
        lines.push(format!("After the pool: {}", s.after_pool.what));
    }
    let _ = run;
    Some(Advice {
        engine: s.engine.clone(),
        parameter: s.parameter.name.clone(),
        flag: flag.clone(),
        value: p0,
        value_source: ev.value_source.clone(),
        direction,
        recommended,
        bound,
        pool_before_bytes: pool_before,
        pool_after_bytes: pool_after,
        reserve_bytes,
        reserve_words,
        arrivals: arr,
        arrivals_bytes,
        margin_bytes: margin,
        margin_what: s.after_pool.what.clone(),
        alternatives: alts,
        deciding: format!("{} on GPU {}", r.process, r.device),
        lines,
    })
}

/// A failed allocation's size in words when the request itself names none.
pub fn needed_words(bytes: i64, need: i64, api: &str) -> String {
    if bytes == 0 && need > 0 {
        format!("{} of driver memory, what each successful {api} cost", fmt_bytes(need))
    } else {
        fmt_bytes(bytes)
    }
}
