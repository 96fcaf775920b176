//! The engine's sizing formula (`engines`) evaluated on the run's own queries: each rank's
//! inputs as its call sites name them, its pool at the run's parameter value and at others,
//! the formula's checks, and where a failure leaves the free memory (`outlook`).
//!
//! Below it, leaves first: the run's command lines ([`command_line`]), the queries an input
//! names ([`queries`]), the model's KV cell and the engine's length check ([`model_len`]), a
//! draft model still loading ([`draft`]) and what follows the pool ([`after_pool`]). Numbers
//! only: `explain` and `whatif` word them.

pub mod after_pool;
pub mod command_line;
pub mod draft;
pub mod model_len;
pub mod queries;

pub use queries::matching_queries;

use crate::engines::{self, Sizing, Term};
use crate::explain::{ItemKind, Recon};
use crate::groups::{by_id, DeviceGroup, Member};
use crate::load::Run;
use crate::model::Report;
use crate::process::RankId;
use crate::recon::{reconcile, ReconWords};
use crate::steps::{self, burst_after, Kind, Step};
use serde::Serialize;
use std::collections::BTreeMap;

/// One rank's formula inputs and its pool at the run's parameter value.
#[derive(Debug, Clone, Serialize)]
pub struct RankSizing {
    /// Which process on which GPU (`pid`, `process`, `host`, `device`, `mig_index`).
    #[serde(flatten)]
    pub rank: RankId,
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
    /// The step of the query the engine sized its pool from (the formula's `sizing_query`:
    /// SGLang's profile_max_num_token, vLLM's memory_profiling after the profile run); the
    /// findings start from it. `query_index` may lie after it (a span the engine brackets with
    /// queries before its pool).
    #[serde(skip)]
    pub sizing_index: usize,
}

impl RankSizing {
    /// Whether this is `m`'s process (a pid alone names no process).
    pub fn is(&self, m: Member) -> bool {
        self.rank.pid == m.pid() && self.rank.start_us == m.report.process.start_us()
    }
}

/// Where the run's value of the parameter comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum ValueSource {
    /// `flag` on the command line of process `pid`.
    Process { flag: String, pid: i64 },
    /// `flag` on the command line `culedger run` recorded (ranks started by multiprocessing
    /// carry the launcher's arguments only there).
    Command { flag: String },
    /// The engine's default, with the pack's note on it.
    Default { note: String },
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
    /// Where the value comes from.
    pub value_source: ValueSource,
    /// Bytes the pool grows per unit of the parameter (per rank).
    pub scale_bytes: i64,
    pub ranks: Vec<RankSizing>,
    #[serde(skip)]
    pub sizing: Sizing,
    /// The bytes a token of the pool takes (the pack's `kv_cell`), where the model's config
    /// gives them (`model_len::cell`).
    #[serde(skip)]
    pub cell: Option<model_len::Cell>,
    /// The engine's check that the pool holds one request of the longest length (the pack's
    /// `model_len`), where the cell is known (`model_len::check`).
    #[serde(skip)]
    pub model_len: Option<model_len::Check>,
}

/// The run's value of the parameter and where it comes from.
fn param_value(run: &Run, s: &Sizing) -> (f64, ValueSource) {
    let flag = s.parameter.flag.clone();
    for r in &run.procs {
        if let Some(v) = engines::flag_value(&r.process.argv, &s.parameter.flag) {
            return (v, ValueSource::Process { flag, pid: r.process.pid });
        }
    }
    // Ranks started by multiprocessing carry the launcher's arguments only in the command
    // `culedger run` recorded.
    if let Some(v) = run.summary.as_ref().and_then(|m| engines::flag_value(&m.command, &s.parameter.flag)) {
        return (v, ValueSource::Command { flag });
    }
    (s.parameter.default, ValueSource::Default { note: s.parameter.default_note.clone() })
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
    peak_above(m, st, from, to, base)
}

/// The largest rise of `m`'s tracked memory from step `from` to step `to` above what is
/// tracked at `to`: what was taken and given back in between (vLLM 0.33's
/// transient_peak_headroom, torch's peak less what stays allocated after the profile run).
fn peak_headroom(m: Member, st: &[Step], from: usize, to: usize) -> i64 {
    let Some(end) = probe_of(&st[to]).map(|p| p.live_bytes) else { return 0 };
    peak_above(m, st, from, to, end)
}

/// How far `m`'s tracked memory rose above `base` between steps `from` and `to` (its
/// timeline's samples strictly between them; 0 when it never did).
fn peak_above(m: Member, st: &[Step], from: usize, to: usize, base: i64) -> i64 {
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

/// Evaluates `s` on the run: every rank whose queries feed all of the formula's inputs
/// (`words` names each rank's process).
pub fn evaluate(run: &Run, gs: &[DeviceGroup], pack: &str, s: &Sizing, words: &dyn ReconWords) -> Option<Evaluation> {
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
            let complete = s.inputs.iter().all(|(name, input)| input.optional || idx.contains_key(name));
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
                    "peak_headroom" => {
                        let from = input.since.as_ref().and_then(|n| idx.get(n)).copied().unwrap_or(i);
                        peak_headroom(*m, &st, from, i)
                    }
                    // The engine's own estimate from its samples (the pack's
                    // after_pool.estimate: vLLM's first capture plus the per-graph sample for
                    // each further graph), not the drop of the two it sampled.
                    "drop" if s.after_pool.estimate.as_ref().is_some_and(|e| e.input == *name) => {
                        after_pool::measured_parts(run, s, *m).map_or(0, |(first, per, n)| first + (n.max(1) - 1) * per)
                    }
                    "drop" => {
                        // From the first of the matching queries to the last.
                        let found = matching_queries(*m, &st, &input.callers);
                        let free = |j: usize| probe_of(&st[j]).and_then(|q| q.free_bytes).unwrap_or(0);
                        match (found.first(), found.last()) {
                            (Some(&a), Some(&b)) => (free(a) - free(b)).max(0),
                            _ => 0,
                        }
                    }
                    _ => p.free_bytes.unwrap_or(0),
                };
                // Measured but not applied: the engine's switch is off in this process.
                let off = input.applied_unless_env_zero.as_ref().is_some_and(|k| {
                    m.report.process.env.get(k).and_then(|x| x.trim().parse::<i64>().ok()) == Some(0)
                });
                own.insert(name.clone(), if off { 0 } else { v });
            }
            let q = idx.get(&s.sizing_query).copied().unwrap_or_else(|| idx.values().copied().max().unwrap_or(0));
            let sizing_index = q;
            let function = probe_of(&st[q])
                .and_then(|p| engines::matching_frame(m.report, p.site, &s.inputs[&s.sizing_query].callers))
                .map(|f| f.function.clone());
            // A span the engine brackets with queries after its sizing query and before its
            // pool (vLLM 0.33's CUDA-graph estimate: profile_cudagraph_memory captures into a
            // throwaway pool between the profile run and the KV cache, and gives it back): the
            // pool follows the span's last query, and what arrived after sizing is counted from
            // there.
            let q = s
                .inputs
                .values()
                .filter(|i| i.value == "drop")
                .flat_map(|i| matching_queries(*m, &st, &i.callers))
                .filter(|&j| j > q && st[j].told().is_some())
                .max()
                .unwrap_or(q);
            ranks.push(RankSizing {
                rank: RankId::of(*m, g, words.who(m.report)),
                inputs: own.clone(),
                told_bytes: own.get(&s.sizing_query).copied().unwrap_or(0),
                own_inputs: own,
                pool_bytes: 0,
                query_function: function,
                complete,
                query_index: q,
                sizing_index,
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
    // The length check sizes the pool the formula gives; a run that sets the pool's bytes
    // itself (`pool_bytes_flag`) is not sized by the formula.
    let pool_set = s.pool_bytes_flag.as_ref().is_some_and(|p| command_line::on_command_line(run, &p.flag));
    let cell = s.kv_cell.as_ref().and_then(|kc| model_len::cell(run, kc, ranks.len() as i64));
    let model_len = match (&s.model_len, &s.kv_cell, &cell) {
        (Some(m), Some(kc), Some(c)) if !pool_set => model_len::check(run, &m.flag, kc, c),
        _ => None,
    };
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
        cell,
        model_len,
    })
}

/// The engine's formula on the run, when the run is a known engine's.
pub fn evaluate_run(run: &Run, gs: &[DeviceGroup], words: &dyn ReconWords) -> Option<Evaluation> {
    crate::counts::computed(crate::counts::Part::Evaluation);
    let reports: Vec<&Report> = run.procs.iter().collect();
    let (pack, s) = engines::recognize(&reports)?;
    evaluate(run, gs, &pack, &s, words)
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

    /// Every refusal check of the engine that rank `r`'s inputs allow: (message, c0, c1,
    /// strict), where the check holds when `c0 + c1 * p` is positive (strict: the pool) or
    /// not negative (other checks).
    pub fn checks(&self, r: &RankSizing) -> Vec<(String, f64, f64, bool)> {
        self.refusals(r, f64::NAN).into_iter().collect()
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
            // NaN: every check (`checks`).
            if v.is_nan() || (strict && v <= 0.0) || (!strict && v < 0.0) {
                out.push((f.message.clone(), c0, c1, strict));
            }
        }
        // The pool must hold the block held back and one request of the longest length.
        if let (Some(c), Some(m), true) = (&self.model_len, &self.sizing.model_len, r.complete) {
            let (c0, c1) = linear(&self.sizing.pool, &r.inputs);
            let c0 = c0 - c.pool_needed() as f64;
            let v = c0 + c1 * p;
            if v.is_nan() || v < 0.0 {
                out.push((self.model_len_message(m, c), c0, c1, false));
            }
        }
        out
    }

    /// The length check's refusal, with the run's length in it.
    pub fn model_len_message(&self, m: &engines::ModelLen, c: &model_len::Check) -> String {
        m.message.replace("{max_len}", &c.max_len.to_string())
    }

    /// The inputs the pack's reserve (`(1 - {parameter}) x {total}`) names, in `r`'s inputs'
    /// order: what multiplies `1 - p`.
    pub fn reserve_inputs<'e>(&self, r: &'e RankSizing) -> Vec<(&'e String, i64)> {
        let template = self.sizing.reserve.replace("{parameter}", "");
        r.inputs.iter().filter(|(name, _)| template.contains(&format!("{{{name}}}"))).map(|(n, v)| (n, *v)).collect()
    }

    /// The reserve at `p` in bytes, for rank `r`: `1 - p` times the inputs it names.
    pub fn reserve_bytes(&self, r: &RankSizing, p: f64) -> i64 {
        self.reserve_inputs(r).iter().fold(1.0 - p, |b, (_, v)| b * *v as f64) as i64
    }
}

/// Rounded down to two decimals (a value to lower to).
pub fn floor2(x: f64) -> f64 {
    ((x * 100.0) + 1e-9).floor() / 100.0
}

/// Rounded up to two decimals (a value to raise to).
pub fn ceil2(x: f64) -> f64 {
    ((x * 100.0) - 1e-9).ceil() / 100.0
}

/// What a failure at step `i` of rank `r` leaves to come, the reconciliation from the sizing
/// query to it, and (for a failure after the pool) the free memory when the pool was done; for
/// a failure before the pool, the whole pool is still to come and that free memory is the
/// free memory at the failure (nothing of what follows the pool arrived).
pub fn deficit_at(
    g: &DeviceGroup,
    m: Member,
    st: &[Step],
    r: &RankSizing,
    i: usize,
    need: i64,
    words: &dyn ReconWords,
) -> (i64, Recon, Option<i64>) {
    let q = r.query_index;
    let pool_burst = burst_after(st, q);
    let upto: Vec<usize> = pool_burst.iter().copied().filter(|&j| j <= i).collect();
    let recon = reconcile(g, m, st, q, i, &upto, words);
    // A failure before the pool's first part (an IPC open or peer access of the custom
    // all-reduce, whose first collective follows the sizing query): the whole pool is still to
    // come after the failed request, and nothing of what follows the pool arrived.
    if pool_burst.first().is_none_or(|&first| i < first) {
        let free = recon.free_bytes;
        return (need + r.pool_bytes, recon, Some(free));
    }
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
        (need, Some(reconcile(g, m, st, q, end, &pool_burst, words).free_bytes))
    };
    (still.0, recon, still.1)
}

/// What rank `r`'s failure at step `i` needed: the failed request (`needed`); and, for weights
/// failing after the sizing query with the draft model named and readable, the draft, what
/// the rank had loaded of it after the sizing query and the rest of its load still to come
/// (`draft::rest`), which `explain` and `whatif` count instead of the failed request.
pub fn still_needed(
    run: &Run,
    m: Member,
    st: &[Step],
    r: &RankSizing,
    i: usize,
) -> (i64, Option<(draft::Draft, i64, i64)>) {
    let f = st[i].failure().expect("a failure");
    let need = needed(m, f);
    let weights = culedger_format::category::CATEGORIES.iter().position(|c| *c == "weights");
    let seen: i64 = weights.map_or(0, |w| st[r.query_index + 1..i].iter().map(|x| x.cats[w].max(0)).sum());
    let draft = (f.category.as_deref() == Some("weights"))
        .then(|| draft::named(run))
        .flatten()
        .and_then(|d| draft::rest(&d, seen, need).map(|rest| (d, seen, rest)));
    (need, draft)
}

/// One rank's start as the run recorded it, for replaying the formula at other values.
#[derive(Debug, Clone, Serialize)]
pub struct Outlook {
    /// Which process on which GPU (`pid`, `process`, `host`, `device`, `mig_index`).
    #[serde(flatten)]
    pub rank: RankId,
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
    /// Left for what the failed run never reached (0 for a rank that started), at the run's
    /// value: `explain`'s margin (`after_pool::margin_and_deficit`).
    pub margin_bytes: i64,
    /// The part of the margin that grows with the pool, per byte of pool (`after_pool.per_token`).
    #[serde(skip)]
    pub margin_per_pool_byte: f64,
    /// What failed was part of weights still loading after the pool whose total the reports
    /// cannot size (a draft model not named, or its files not readable here): what the rest of
    /// that load needs is unseen, so no value can be said to fit.
    #[serde(skip)]
    pub unsized_weights: bool,
    /// A draft model named and readable, counted whole (`still_needed`): its per-rank bytes.
    #[serde(skip)]
    pub draft_bytes: Option<i64>,
}

/// Every rank of the evaluation, as the run went. The margin is `explain`'s: the pack's fixed
/// `after_pool` (smaller when a flag of the run turns off what it stands for) less what arrived
/// between the pool and the failure, plus what grows with the pool's tokens.
pub fn outlook(run: &Run, gs: &[DeviceGroup], ev: &Evaluation, words: &dyn ReconWords) -> Vec<Outlook> {
    let (fixed, _) = after_pool::fixed(run, &ev.sizing);
    let mut out = Vec::new();
    for r in &ev.ranks {
        let Some(g) = by_id(gs, &r.rank.gpu) else { continue };
        let Some(m) = g.member_at(r.rank.pid, r.rank.start_us) else { continue };
        let st = steps::steps(m);
        let q = r.query_index;
        let pool_burst = burst_after(&st, q);
        let growth = after_pool::growth(&ev.sizing, m, r.query_function.as_ref(), r.pool_bytes);
        let per_pool_byte = growth.map_or(0.0, |g| g.per_pool_byte);
        // The engine's own estimate of what follows the pool, measured and not applied.
        let estimate = after_pool::estimate(run, &ev.sizing, m);
        let growth = growth.or(estimate.map(|b| after_pool::Growth { tokens: 0, bytes: b, per_pool_byte: 0.0 }));
        let fail = (q + 1..st.len()).find(|&i| st[i].failure().is_some()).filter(|_| r.complete);
        let (mut unsized_weights, mut draft_bytes) = (false, None);
        // (failed, free at the end, the pool so far, still needed, margin)
        let (failed, free, pool, still, margin_bytes) = match fail {
            Some(i) => {
                let f = st[i].failure().expect("a failure");
                // The draft's weights, named and readable, count whole, as `explain` counts them.
                let (need, draft) = still_needed(run, m, &st, r, i);
                let (still, recon, after_pool) = deficit_at(g, m, &st, r, i, draft.as_ref().map_or(need, |d| d.2), words);
                let free = recon.free_bytes;
                let (margin, _) = match &draft {
                    Some((_, seen, _)) => {
                        after_pool::margin_and_deficit(fixed, growth, still, 0, after_pool.map(|fp| fp - seen), free)
                    }
                    None => after_pool::margin_and_deficit(fixed, growth, still, need, after_pool, free),
                };
                // Unsized: no draft named and readable here (with one, a rank whose failed request
                // was the rest of its load is sized by it).
                let readable = draft::named(run).is_some_and(|d| d.per_rank_bytes.is_some());
                unsized_weights =
                    draft.is_none() && !readable && after_pool.is_some() && f.category.as_deref() == Some("weights");
                draft_bytes = draft.as_ref().and_then(|d| d.0.per_rank_bytes);
                (true, free, recon.sum(ItemKind::Pool), still, margin)
            }
            None => {
                let last = st.len() - 1;
                let pool: i64 = pool_burst.iter().map(|&j| st[j].bytes).sum();
                let free = match st[last].told() {
                    Some(p) if last > q => p.free_bytes.unwrap_or(0),
                    _ => reconcile(g, m, &st, q, last, &pool_burst, words).free_bytes,
                };
                (false, free, pool, 0, 0)
            }
        };
        let o = Outlook {
            rank: r.rank.clone(),
            told_bytes: r.told_bytes,
            failed,
            arrivals_bytes: r.told_bytes - free - pool,
            free_end_bytes: free,
            still_bytes: still,
            margin_bytes,
            margin_per_pool_byte: if failed { per_pool_byte } else { 0.0 },
            unsized_weights,
            draft_bytes,
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
        .filter_map(|e| e.bytes.map(|b| b / e.calls.unwrap_or(1).max(1)))
        .filter(|&b| b > 0)
        .collect();
    if !each.is_empty() {
        each.sort_unstable();
        return each[each.len() / 2];
    }
    m.dev.driver_costs.iter().find(|c| c.api == f.api && c.calls > 0).map_or(0, |c| c.bytes / c.calls)
}
