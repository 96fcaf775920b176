//! "What to change", computed: from the engine's formula evaluated on the run
//! (`crate::sizing`), the interval of the parameter's values that start, the value to set, and
//! every way to start with the pool each keeps, as typed values ([`Advised`]) with no sentence
//! in them; the CLI writes the sentences and `culedger-explain/1`'s `what_to_change` from them.
//! The reconciliations it reads are made with the caller's words (`ReconWords`), of which it
//! reads only the figures.
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

use crate::costs::ApiClass;
use crate::engines::{self, Sizing};
use crate::explain::{Detail, Finding, Item, ItemKind};
use crate::groups::{by_id, DeviceGroup, Member};
use crate::load::Run;
use crate::recon::ReconWords;
use crate::sizing::{after_pool, ceil2, deficit_at, draft, floor2, still_needed, Evaluation, RankSizing};
use crate::steps;
use serde::Serialize;

/// The recommendation for a failed (or refused) start, as numbers: the run's value of the
/// parameter, which way it moves and to what, the pool before and after, what arrived after
/// the sizing query, the margin kept for what the failed run never reached, the levers, and
/// every way to start (`choices`, most pool kept first).
#[derive(Debug, Clone)]
pub struct Advised {
    /// The run's value of the parameter.
    pub value: f64,
    pub direction: Direction,
    /// The value to set (two decimals), when one fits.
    pub recommended: Option<f64>,
    /// The bound before rounding.
    pub bound: f64,
    /// The values that start, as the checks and the failure bound them.
    pub interval: Interval,
    /// The pool (per rank) at the run's value and at the recommended one.
    pub pool_before_bytes: i64,
    pub pool_after_bytes: Option<i64>,
    /// What the formula reserved for everything after the pool at the run's value.
    pub reserve_bytes: i64,
    /// What arrived after the sizing query on the deciding rank, largest first.
    pub arrivals: Vec<(Arrived, i64)>,
    pub arrivals_bytes: i64,
    /// Left for what the failed run never reached, and what it stands for.
    pub margin_bytes: i64,
    pub margin: Margin,
    /// Features whose call sites caused part of the arrivals, and how much.
    pub levers: Vec<Lever>,
    /// Every way to start, most pool kept first.
    pub choices: Vec<Choice>,
    /// The rank whose numbers decide: its index in the evaluation's `ranks`.
    pub rank: usize,
    /// What decided, for the sentences.
    pub why: Why,
}

/// Which way the parameter moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Lower,
    Raise,
    /// No value of the parameter fits.
    None,
}

impl Direction {
    /// As `culedger-explain/1` writes it: `lower`, `raise`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Lower => "lower",
            Direction::Raise => "raise",
            Direction::None => "none",
        }
    }
}

/// A part of what arrived after the sizing query, or of what a lever took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arrived {
    /// Hidden driver memory of a class of APIs.
    Cost(ApiClass),
    /// The other ranks' contexts.
    OtherRanks,
    /// The process's allocations of a category.
    Allocations(String),
    /// Memory no report explains.
    Unexplained,
    /// The failed request itself.
    FailedRequest,
    /// The rest of the engine's estimate of the graphs (what a lever of the graphs also takes
    /// away where the estimate stood for the margin).
    EstimateRest,
}

/// A lever of the pack's `alternatives` and what it takes away: its call sites' driver costs,
/// its categories' allocations, the failed request where its call site runs through it.
#[derive(Debug, Clone)]
pub struct Lever {
    pub flag: String,
    /// The pack's words for the feature.
    pub what: String,
    pub bytes: i64,
    pub parts: Vec<Arrived>,
}

/// Which sentence a choice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sentence {
    /// The parameter alone.
    Parameter,
    /// A lever turned off (the pack's alternatives without `scales`).
    Disable,
    /// A lever that takes a number, lowered (`--cuda-graph-max-bs N`).
    Scale,
    /// The pool's size set in bytes (`--kv-cache-memory-bytes`).
    PoolBytes,
    /// The longest request shortened (`--max-model-len`).
    ModelLen,
    /// The weights split over more GPUs (`--tp`).
    TensorParallel,
    /// A smaller model (weights per rank of at most `lever_value`).
    SmallerModel,
}

/// One way to start, as numbers (the CLI words it): the flag to set (the parameter's
/// own, or a lever of the pack's `alternatives` together with the parameter's value), and the
/// KV pool per rank it keeps. `choices` come most pool kept first.
#[derive(Debug, Clone, Serialize)]
pub struct Choice {
    /// The lever's flag (`--disable-custom-all-reduce`), or the parameter's flag alone.
    pub flag: String,
    /// Whether this is the parameter alone (no lever).
    pub parameter_only: bool,
    /// The parameter's value to use with it (the run's own when the lever alone fits).
    pub value: f64,
    /// The pool per rank at that value.
    pub pool_bytes: i64,
    /// What the lever takes away of what came after the sizing query (0 for the parameter).
    pub removes_bytes: i64,
    /// For a lever that takes a number (`--cuda-graph-max-bs`): the number to set, and the
    /// run's own (absent for the others).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lever_value: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lever_was: Option<i64>,
    /// The tokens the pool holds, where the model's config gives the bytes a token takes
    /// (`model_len::Check::tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_tokens: Option<i64>,
    /// Which sentence it is.
    #[serde(skip)]
    pub sentence: Sentence,
}

/// The parameter's interval of values that start, from the engine's checks and the failure:
/// at least `at_least` (the pool must come out positive: the engine's own refusal) and at
/// most `at_most` (the pool plus what came after it must fit). Empty when `at_least >=
/// at_most`. Either is None where nothing bounds it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Interval {
    pub at_least: Option<f64>,
    pub at_most: Option<f64>,
}

/// What the margin for what the failed run never reached stands for.
#[derive(Debug, Clone)]
pub enum Margin {
    /// The pack's fixed `after_pool` (its words).
    Rules(String),
    /// What a run that started measured after its pool (`measured_after_pool`).
    Measured(Measured),
    /// The engine's own estimate (the pack's `after_pool.estimate`: its words), all of it.
    Estimate { what: String, bytes: i64 },
    /// No margin (the run set the pool's bytes itself).
    None,
}

/// What a run that started took after its KV pool (`measured_after_pool`): the bytes, the
/// run's name, and the rank that took the most.
#[derive(Debug, Clone)]
pub struct Measured {
    pub bytes: i64,
    pub run: String,
    pub rank: RankSizing,
}

/// What decided the recommendation, for its sentences.
#[derive(Debug, Clone)]
pub enum Why {
    /// The formula's checks and failures bound the parameter.
    Formula(Box<Formula>),
    /// The run set the pool's bytes itself and an allocation failed (`pool_bytes_set`).
    PoolBytesSet(PoolBytesSet),
}

/// The figures behind the sentences of a recommendation from the formula.
#[derive(Debug, Clone)]
pub struct Formula {
    /// The check that decided (its message), when a refusal check decided.
    pub refusal: Option<String>,
    /// Whether a failure after the sizing query decided (its reconciliation sized it).
    pub failure: bool,
    /// A failure after the pool: the failed request's bytes and its category.
    pub failed_after_pool: Option<(i64, Option<String>)>,
    /// A draft model's weights still loading when the start failed: the draft, what the rank
    /// had loaded of it, and what it still needed.
    pub draft: Option<(draft::Draft, i64, i64)>,
    /// The engine's estimate of what follows the pool, when it stood for the margin.
    pub estimate: Option<i64>,
    /// The messages of the checks that bound the interval from below and above (a failure's
    /// bound has none), and whether the upper bound is a check's.
    pub at_least_refusal: Option<String>,
    pub at_most_refusal: Option<String>,
    pub at_most_is_check: bool,
    /// The length check's message (the pack's `model_len`), and whether the run broke it.
    pub len_message: Option<String>,
    pub len_broken: bool,
    /// The weights the deciding rank held at its sizing query.
    pub weights_bytes: i64,
    /// The sizing query's function, and the engine's sizing function it was made inside
    /// under another name.
    pub query: String,
    pub query_inside: Option<String>,
    /// Whether the margin is the pack's (not measured by a run that started).
    pub from_rules: bool,
    /// What follows the pool that grows with its tokens, at the run's value (the pack's
    /// `after_pool.per_token`; only with the pack's margin).
    pub growth: Option<after_pool::Growth>,
    /// The pack's fixed margin.
    pub fixed_margin_bytes: i64,
    /// The levers (indices into `levers`) that do not make the start fit on their own.
    pub not_enough: Vec<usize>,
    /// A draft model the command line names, and whether speculative decoding is on it.
    pub draft_named: Option<draft::Draft>,
    pub speculative: bool,
}

/// A run that set the pool's bytes itself (vLLM's --kv-cache-memory-bytes) and failed.
#[derive(Debug, Clone)]
pub struct PoolBytesSet {
    /// The bytes set, and the highest value below which the pool must go (whole MiB).
    pub set: i64,
    pub to: i64,
    /// The largest shortfall, and the failed request's bytes and category.
    pub short: i64,
    pub failed_bytes: i64,
    pub failed_category: Option<String>,
    /// The levers' words, in the order of `choices`.
    pub whats: Vec<String>,
}

/// What arrived after the sizing query, by the reconciliation's items: driver costs by class
/// of API, other ranks' contexts, allocations by category; largest first.
fn arrivals(recon: &crate::explain::Recon) -> Vec<(Arrived, i64)> {
    let mut out: Vec<(Arrived, i64)> = Vec::new();
    for it in &recon.items {
        let what = match it.kind {
            ItemKind::DriverCost => Arrived::Cost(ApiClass::of(it.api.as_deref().unwrap_or(""))),
            ItemKind::OtherProcesses => Arrived::OtherRanks,
            ItemKind::Allocated => Arrived::Allocations(it.category.clone().unwrap_or_default()),
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
    if let Some(u) = recon.unexplained_bytes.filter(|u| *u > crate::thresholds::NOISE) {
        out.push((Arrived::Unexplained, u));
    }
    out.sort_by_key(|(_, b)| std::cmp::Reverse(*b));
    out
}

/// The alternatives whose call sites (or categories) account for part of what came after the
/// sizing query, and how much: driver costs of their call sites, the process's allocations in
/// their categories, and the failed request itself when its call site runs through them.
fn alternatives(
    s: &Sizing,
    m: Member,
    items: Option<&[Item]>,
    failed: Option<(&crate::model::Failure, i64)>,
) -> Vec<Lever> {
    let mut out = Vec::new();
    for a in &s.alternatives {
        let mut bytes = 0;
        let mut apis: Vec<Arrived> = Vec::new();
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
                    .filter(|i| {
                        i.kind == ItemKind::DriverCost && i.api.as_deref() == Some(crate::costs::cost_label(c).as_str())
                    })
                    .map(|i| i.bytes)
                    .sum(),
                None => c.bytes,
            };
            if b > 0 {
                bytes += b;
                let w = Arrived::Cost(ApiClass::of(&c.api));
                if !apis.contains(&w) {
                    apis.push(w);
                }
            }
        }
        if let Some(items) = items {
            for i in items.iter().filter(|i| i.kind == ItemKind::Allocated && i.bytes > 0) {
                if i.category.as_ref().is_some_and(|c| a.categories.contains(c)) {
                    bytes += i.bytes;
                    let w = Arrived::Allocations(i.category.clone().unwrap_or_default());
                    if !apis.contains(&w) {
                        apis.push(w);
                    }
                }
            }
        }
        if let Some((f, need)) = failed {
            if engines::frames(m.report, f.site).iter().any(|fr| engines::frame_matches(&a.callers, fr)) {
                bytes += need;
                let w = Arrived::FailedRequest;
                if !apis.contains(&w) {
                    apis.push(w);
                }
            }
        }
        if bytes > 0 {
            out.push(Lever { flag: a.flag.clone(), what: a.what.clone(), bytes, parts: apis });
        }
    }
    out
}

/// The sizing query's function, and the engine's sizing function when the query is made
/// inside it under another name (vLLM 0.33: `memory_profiling` in
/// `Worker.determine_available_memory`, vllm/v1/worker/gpu_worker.py); SGLang's query is its
/// sizing function's own (`ModelRunner.profile_max_num_token`).
fn sizing_query(ev: &Evaluation, r: &RankSizing, m: Member) -> (String, Option<String>) {
    let q = r.query_function.as_deref().unwrap_or("?");
    let f = &ev.sizing.function;
    let st = steps::steps(m);
    let inside = match st.get(r.sizing_index).map(|x| &x.kind) {
        Some(steps::Kind::Query(p)) => engines::frames(m.report, p.site)
            .iter()
            .any(|x| x.function == *f || x.function.ends_with(&format!(".{f}"))),
        _ => false,
    };
    if inside && !(q == f || q.ends_with(&format!(".{f}")) || f.ends_with(&format!(".{q}"))) {
        (q.to_string(), Some(f.clone()))
    } else {
        (q.to_string(), None)
    }
}

struct Bound {
    /// The value must be at most `at` (else at least `at`).
    at_most: bool,
    at: f64,
    /// For a refusal check: the bytes its expression moves per unit of the parameter.
    per_unit: f64,
    rank: usize,
    recon: Option<crate::explain::Recon>,
    refusal: Option<String>,
    margin: i64,
    /// Whether the run's own value broke it (what made the start fail).
    broken: bool,
    /// For a failure's bound: the deficit, and the alternatives that shrink it.
    deficit: i64,
    alts: Vec<Lever>,
    /// A failure after the pool: the failed request's bytes and its category (its own call
    /// site's), which the value must make room for beside what arrived.
    failed_after_pool: Option<(i64, Option<String>)>,
    /// A draft model's weights still loading when the start failed, counted whole: the draft,
    /// what the rank had loaded of it, and what it still needed (`draft`).
    draft: Option<(draft::Draft, i64, i64)>,
    /// The engine's estimate of what follows the pool, when it stood for the margin.
    estimate: Option<i64>,
}

/// What a run that started took after its KV pool, measured: per rank, the free memory when
/// the pool's last part was allocated less the free memory at its last query (the attention
/// workspace, the CUDA graphs and their driver memory, what grows with the pool's tokens,
/// other processes' growth meanwhile); the most of any rank, and that rank. None when a rank
/// failed or no rank allocated a pool after its sizing query.
pub fn measured_after_pool(gs: &[DeviceGroup], ev: &Evaluation, words: &dyn ReconWords) -> Option<(i64, RankSizing)> {
    let mut best: Option<(i64, &RankSizing)> = None;
    for r in ev.ranks.iter().filter(|r| r.complete) {
        let g = by_id(gs, &r.rank.gpu)?;
        let m = g.member_at(r.rank.pid, r.rank.start_us)?;
        let st = steps::steps(m);
        if st.iter().any(|s| s.failure().is_some()) {
            return None;
        }
        let q = r.query_index;
        let burst = steps::burst_after(&st, q);
        let Some(&end) = burst.last() else { continue };
        let pool_end_free = crate::recon::reconcile(g, m, &st, q, end, &burst, words).free_bytes;
        let Some(last) = (end + 1..st.len()).rev().find(|&j| st[j].told().is_some()) else { continue };
        let after = pool_end_free - st[last].told().and_then(|p| p.free_bytes).unwrap_or(pool_end_free);
        if best.as_ref().is_none_or(|b| after > b.0) {
            best = Some((after, r));
        }
    }
    best.filter(|b| b.0 > 0).map(|(bytes, r)| (bytes, r.clone()))
}

/// The recommendation for a run whose start failed, from the engine's formula evaluated on
/// it (`ev`) and its findings; the margin for what the failed run never reached taken from a
/// run that started where `measured` gives what that run took after its pool
/// (`measured_after_pool`, `culedger diff`), else the pack's fixed `after_pool`.
pub fn advised(
    run: &Run,
    gs: &[DeviceGroup],
    findings: &[Finding],
    ev: &Evaluation,
    measured: Option<Measured>,
    words: &dyn ReconWords,
) -> Option<Advised> {
    // A lever the run already pulled (its flag on the command line) is no alternative.
    let mut sizing = ev.sizing.clone();
    // A lever that scales needs the run's own number.
    sizing.alternatives.retain(|a| match a.scales {
        Some(_) => after_pool::flag_number(run, &a.flag).is_some_and(|n| n >= 2.0),
        None => !after_pool::on_command_line(run, &a.flag),
    });
    let s = &sizing;
    let p0 = ev.value;
    let from_rules = measured.is_none();
    // The run set the pool's bytes itself (vLLM's --kv-cache-memory-bytes): the parameter no
    // longer sizes the pool, and an allocation that failed is made room for by that flag.
    if let Some(a) = pool_bytes_set(run, findings, ev, &sizing) {
        return Some(a);
    }
    let (margin, margin_what) = match measured {
        Some(m) => (m.bytes, Margin::Measured(m)),
        None => {
            let (bytes, what) = after_pool::fixed(run, s);
            (bytes, Margin::Rules(what))
        }
    };
    let mut bounds: Vec<Bound> = Vec::new();
    for (k, r) in ev.ranks.iter().enumerate() {
        let Some(g) = by_id(gs, &r.rank.gpu) else { continue };
        let Some(m) = g.member_at(r.rank.pid, r.rank.start_us) else { continue };
        let failed_exit = m.report.process.exit_code.is_some_and(|c| c != 0) || m.report.process.signal.is_some();
        // Every check of the engine bounds the parameter, whether or not the run broke it:
        // a value that cures the failure must not break another check (a pool that is not
        // positive fails with the engine's other error).
        for (msg, c0, c1, _) in ev.checks(r) {
            if c1 == 0.0 {
                continue;
            }
            let broken = failed_exit && ev.refusals(r, p0).iter().any(|x| x.0 == msg);
            // A start the check refused stopped at it: what the levers' call sites took before
            // is in what the check read (vLLM's initial snapshot after the custom all-reduce's
            // peer access), and turning them off gives it back.
            let alts = if broken && c1 < 0.0 { alternatives(s, m, None, None) } else { Vec::new() };
            bounds.push(Bound {
                at_most: c1 < 0.0,
                at: -c0 / c1,
                per_unit: c1.abs(),
                rank: k,
                recon: None,
                refusal: Some(msg),
                margin: 0,
                broken,
                deficit: 0,
                alts,
                failed_after_pool: None,
                draft: None,
                estimate: None,
            });
        }
        let st = steps::steps(m);
        let Some(i) = (r.query_index + 1..st.len()).find(|&i| st[i].failure().is_some()) else { continue };
        let f = st[i].failure().expect("a failure");
        let (need, draft) = still_needed(run, m, &st, r, i);
        let (still, recon, after_pool) = deficit_at(g, m, &st, r, i, draft.as_ref().map_or(need, |d| d.2), words);
        // The free memory at the failure: as the failure finding measured it, else as the
        // reconciliation from the sizing query estimates it.
        let free = findings
            .iter()
            .find_map(|x| match &x.detail {
                Detail::Failure(d) if d.pid == r.rank.pid && x.gpu.as_ref() == Some(&r.rank.gpu) => d.free_bytes,
                _ => None,
            })
            .unwrap_or(recon.free_bytes);
        // What arrived between the pool and the failure was part of what the margin stands for;
        // what grows with the pool's tokens is on top of the fixed margin and shrinks with it.
        // A measured margin holds what grew with the pool's tokens already.
        let growth = after_pool::growth(s, m, r.query_function.as_ref(), r.pool_bytes).filter(|_| from_rules);
        // The engine's own estimate of what follows the pool, measured and not applied: all of
        // what follows, the failed request included (like the per-token part).
        let estimate = after_pool::estimate(run, s, m).filter(|_| from_rules && after_pool.is_some());
        let growth = growth.or(estimate.map(|b| after_pool::Growth { tokens: 0, bytes: b, per_pool_byte: 0.0 }));
        // A measured margin is everything that followed the pool in the run that started, the
        // request that failed here included (it succeeded there): like the rules' margin with
        // its per-token part, it is not added again on top of the failed request.
        let whole = growth.or_else(|| (!from_rules).then_some(after_pool::Growth { tokens: 0, bytes: 0, per_pool_byte: 0.0 }));
        // The draft's weights are no part of what follows the pool: what it loaded after the
        // pool and the failed request (part of it) leave the margin as it was.
        let (margin, deficit) = match &draft {
            Some((_, seen, _)) => after_pool::margin_and_deficit(margin, whole, still, 0, after_pool.map(|fp| fp - seen), free),
            None => after_pool::margin_and_deficit(margin, whole, still, need, after_pool, free),
        };
        if deficit <= 0 || ev.scale_bytes <= 0 {
            continue;
        }
        // A failure inside the pool: the rest of the pool is not something a lever removes.
        let failed = if after_pool.is_some() { Some((f, need)) } else { None };
        let mut alts = alternatives(s, m, Some(&recon.items), failed);
        // The levers of the graphs take away the rest of the engine's estimate of them too.
        if estimate.is_some() {
            for a in alts.iter_mut() {
                if s.alternatives.iter().any(|x| x.flag == a.flag && x.categories.iter().any(|c| c == "graphs")) {
                    a.bytes += margin;
                    a.parts.push(Arrived::EstimateRest);
                }
            }
        }
        bounds.push(Bound {
            at_most: true,
            at: p0 - after_pool::lowering(deficit, ev.scale_bytes, growth),
            per_unit: 0.0,
            rank: k,
            recon: Some(recon),
            refusal: None,
            margin,
            broken: true,
            deficit,
            alts,
            failed_after_pool: after_pool.map(|_| (need, f.category.clone())),
            draft,
            estimate,
        });
    }
    if !bounds.iter().any(|b| b.broken) {
        return None;
    }
    let at_most = bounds.iter().filter(|b| b.at_most).min_by(|a, b| a.at.total_cmp(&b.at));
    let at_least = bounds.iter().filter(|b| !b.at_most).max_by(|a, b| a.at.total_cmp(&b.at));
    let interval = Interval { at_least: at_least.map(|b| b.at), at_most: at_most.map(|b| b.at) };
    // Two decimals inside the interval: "at most" rounds down, "at least" up; a value on the
    // "at least" bound itself is not in it (the pool must be positive).
    let lo = at_least.map(|b| ceil2(b.at + 1e-6)).unwrap_or(s.parameter.min).max(s.parameter.min);
    let hi = at_most.map(|b| floor2(b.at)).unwrap_or(s.parameter.max).min(s.parameter.max);
    let broke_at_most = at_most.is_some_and(|b| p0 > b.at);
    let broke_at_least = at_least.is_some_and(|b| p0 <= b.at);
    let (direction, bound, deciding) = match (broke_at_most, broke_at_least) {
        _ if lo > hi => (Direction::None, at_most.or(at_least).map_or(p0, |b| b.at), at_most.or(at_least)?),
        (true, _) => (Direction::Lower, at_most?.at, at_most?),
        (false, true) => (Direction::Raise, at_least?.at, at_least?),
        (false, false) => return None,
    };
    let recommended = match direction {
        Direction::Lower => Some(hi),
        Direction::Raise => Some(lo),
        Direction::None => None,
    };
    let r = &ev.ranks[deciding.rank];
    let margin = deciding.margin;
    let margin_what = match (deciding.estimate, s.after_pool.estimate.as_ref()) {
        (Some(b), Some(e)) => Margin::Estimate { what: e.what.clone(), bytes: b },
        _ => margin_what,
    };
    let pool_before = r.pool_bytes;
    let pool_after = recommended.map(|v| ev.pool_at(r, v));
    let reserve_bytes = ev.reserve_bytes(r, p0);
    let arr = deciding.recon.as_ref().map(arrivals).unwrap_or_default();
    let arrivals_bytes: i64 = arr.iter().map(|(_, b)| b).sum();
    let g = by_id(gs, &r.rank.gpu)?;
    let m = g.member_at(r.rank.pid, r.rank.start_us)?;
    let alts = match deciding.recon.as_ref() {
        Some(_) => deciding.alts.clone(),
        None => alternatives(s, m, None, None),
    };

    // Every way to start, with the pool it keeps: the parameter alone, and each lever with
    // the parameter's value it still needs (the failures' deficits shrunk by what the lever
    // takes away on each rank), inside the interval the checks leave.
    let mut choices: Vec<Choice> = Vec::new();
    if let Some(v) = recommended {
        choices.push(Choice {
            flag: s.parameter.flag.clone(),
            parameter_only: true,
            value: v,
            pool_bytes: pool_after.unwrap_or(0),
            removes_bytes: 0,
            lever_value: None,
            lever_was: None,
            pool_tokens: None,
            sentence: Sentence::Parameter,
        });
    }
    for a in s.alternatives.iter().filter(|a| a.scales.is_none()) {
        let mut upper = hi.max(p0).min(s.parameter.max);
        let mut removes = 0;
        let mut any = false;
        for b in bounds.iter().filter(|b| b.at_most) {
            let took = b.alts.iter().find(|x| x.flag == a.flag).map_or(0, |x| x.bytes);
            if b.recon.is_some() {
                any |= took > 0;
                if b.rank == deciding.rank {
                    removes = took;
                }
                let left = b.deficit - took;
                if left > 0 {
                    upper = upper.min(floor2(p0 - left as f64 / ev.scale_bytes.max(1) as f64));
                }
            } else if took > 0 && b.per_unit > 0.0 {
                // The refusal check the run stopped at reads what the lever gives back.
                any = true;
                if b.rank == deciding.rank {
                    removes = took;
                }
                upper = upper.min(floor2(b.at + took as f64 / b.per_unit));
            } else {
                upper = upper.min(floor2(b.at));
            }
        }
        let v = upper.min(p0.max(lo));
        if !any || v < lo || v > s.parameter.max {
            continue;
        }
        choices.push(Choice {
            flag: a.flag.clone(),
            parameter_only: false,
            value: v,
            pool_bytes: ev.pool_at(r, v),
            removes_bytes: removes,
            lever_value: None,
            lever_was: None,
            pool_tokens: None,
            sentence: Sentence::Disable,
        });
    }
    // A lever that scales what its feature took (`--cuda-graph-max-bs N`: what the graphs took
    // after the sizing query, the failed request included, as N / the run's number): the
    // highest value of the parameter, from the run's own down to the pool's bound, at which
    // some N of at least 1 covers every failure's deficit, and the largest such N.
    for a in s.alternatives.iter().filter(|a| a.scales.is_some()) {
        let Some(n0) = after_pool::flag_number(run, &a.flag).map(|n| n as i64) else { continue };
        let fails: Vec<&Bound> = bounds.iter().filter(|b| b.at_most && b.recon.is_some()).collect();
        let took = |b: &Bound| b.alts.iter().find(|x| x.flag == a.flag).map_or(0, |x| x.bytes);
        if !fails.iter().any(|b| took(b) > 0) {
            continue;
        }
        let cap = bounds.iter().filter(|b| b.at_most && b.recon.is_none()).map(|b| floor2(b.at)).fold(floor2(p0), f64::min);
        let mut v = cap.min(s.parameter.max);
        let mut found = None;
        // The engine's estimate of the graphs stood for what follows the pool: at a largest
        // size n its first sample (the largest capture) scales with n and every further graph
        // costs the per-graph sample, the graphs counted as the engine chooses its sizes.
        let parts = s
            .after_pool
            .estimate
            .as_ref()
            .filter(|_| fails.iter().any(|b| b.estimate.is_some()))
            .and_then(|e| after_pool::estimate_parts(run, s, m).map(|p| (e, p)));
        if let Some((e, (first, per, count))) = parts {
            let est = first + (count - 1) * per;
            while v >= lo - 1e-9 && found.is_none() {
                let ok = |n: i64| {
                    let at_n = first * n / n0 + (after_pool::count_up_to(&e.count, n).max(1) - 1) * per;
                    fails.iter().all(|b| b.deficit as f64 - (p0 - v) * ev.scale_bytes as f64 <= (est - at_n) as f64)
                };
                found = (1..n0).rev().find(|&n| ok(n)).map(|n| (v, n));
                if found.is_none() {
                    v = floor2(v - 0.01 + 1e-9);
                }
            }
        }
        while found.is_none() && v >= lo - 1e-9 {
            // The share of what the feature took that must go on each rank.
            let share = fails
                .iter()
                .map(|b| {
                    let left = b.deficit as f64 - (p0 - v) * ev.scale_bytes as f64;
                    if left <= 0.0 {
                        0.0
                    } else if took(b) > 0 {
                        left / took(b) as f64
                    } else {
                        f64::INFINITY
                    }
                })
                .fold(0.0, f64::max);
            let n = ((n0 as f64) * (1.0 - share) + 1e-9).floor() as i64;
            if share > 0.0 && n >= 1 && n < n0 {
                found = Some((v, n));
                break;
            }
            v = floor2(v - 0.01 + 1e-9);
        }
        let Some((v, n)) = found else { continue };
        let t = fails.iter().find(|b| b.rank == deciding.rank).map_or(0, |b| took(b));
        choices.push(Choice {
            flag: a.flag.clone(),
            parameter_only: false,
            value: v,
            pool_bytes: ev.pool_at(r, v),
            removes_bytes: match parts {
                Some((e, (first, per, count))) => {
                    (count - after_pool::count_up_to(&e.count, n).max(1)) * per + first - first * n / n0
                }
                None => t - t * n / n0,
            },
            lever_value: Some(n),
            lever_was: Some(n0),
            pool_tokens: None,
            sentence: Sentence::Scale,
        });
    }
    // A flag that sizes the pool in bytes (vLLM's --kv-cache-memory-bytes): at the run's value
    // (or the highest the refusal checks allow), the pool the failures leave room for: the
    // run's pool less the largest deficit, in whole MiB.
    if let Some(pb) = s.pool_bytes_flag.as_ref().filter(|_| !after_pool::on_command_line(run, &s.pool_bytes_flag.as_ref().map_or(String::new(), |x| x.flag.clone()))) {
        let deficit = bounds.iter().filter(|b| b.at_most && b.recon.is_some()).map(|b| b.deficit).max();
        let cap = bounds.iter().filter(|b| b.at_most && b.recon.is_none()).map(|b| floor2(b.at)).fold(p0, f64::min);
        if let Some(d) = deficit {
            let bytes = ((pool_before - d) >> 20) << 20;
            if bytes > 0 && cap >= lo {
                choices.push(Choice {
                    flag: pb.flag.clone(),
                    parameter_only: false,
                    value: cap,
                    pool_bytes: bytes,
                    removes_bytes: 0,
                    lever_value: Some(bytes),
                    lever_was: None,
                    pool_tokens: None,
                    sentence: Sentence::PoolBytes,
                });
            }
        }
    }
    // A pool too small for one request of the longest length (vLLM's --max-model-len, the
    // pack's `model_len`): at the run's value (or the highest the other bounds allow), the
    // longest length that pool holds, as the engine estimates it.
    let len_msg = ev.model_len.as_ref().zip(s.model_len.as_ref()).map(|(c, ml)| ev.model_len_message(ml, c));
    if let (Some(c), Some(ml), Some(msg)) = (&ev.model_len, s.model_len.as_ref(), &len_msg) {
        let is_len = |b: &Bound| b.refusal.as_deref() == Some(msg.as_str());
        if bounds.iter().any(|b| b.broken && is_len(b)) {
            let lo_other = bounds
                .iter()
                .filter(|b| !b.at_most && !is_len(b))
                .map(|b| ceil2(b.at + 1e-6))
                .fold(s.parameter.min, f64::max);
            let v = if at_most.is_none_or(|b| p0 <= b.at) { p0 } else { hi };
            let pool = ev.pool_at(&ev.ranks[deciding.rank], v);
            let n = c.longest(pool);
            if v >= lo_other && n >= 1 && n < c.max_len {
                choices.push(Choice {
                    flag: ml.flag.clone(),
                    parameter_only: false,
                    value: v,
                    pool_bytes: pool,
                    removes_bytes: 0,
                    lever_value: Some(n),
                    lever_was: Some(c.max_len),
                    pool_tokens: None,
                    sentence: Sentence::ModelLen,
                });
            }
        }
    }
    // No value starts and the weights are what leaves too little: split them over more GPUs
    // (the smallest doubling of the tensor-parallel size whose weights per rank leave the pool
    // positive at the highest value the failures allow), or a smaller model (weights per rank
    // that leave the pool the run sized at its own value). Raising the free memory after the
    // weights by F moves the pool's bound down by F / scale; the failures' bound stays.
    let mut weights_levers: Vec<(String, i64, f64, i64, i64)> = Vec::new();
    if lo > hi && s.weights_split.is_some() && ev.scale_bytes > 0 {
        let st = steps::steps(m);
        let w = match st[r.query_index].kind {
            steps::Kind::Query(p) => p.categories.get("weights").copied().unwrap_or(0),
            _ => 0,
        };
        let v = hi.max(s.parameter.min);
        let lo_at = interval.at_least.unwrap_or(s.parameter.min);
        // The weights to free for a positive pool at v, and for the run's own pool there.
        let positive = ((lo_at - v) * ev.scale_bytes as f64).max(0.0) as i64 + (64 << 20);
        let same_pool = positive + pool_before.max(0);
        let tp0 = s
            .weights_split
            .as_ref()
            .and_then(|x| x.flags.iter().find_map(|f| after_pool::flag_number(run, f)))
            .map_or(ev.ranks.len() as i64, |t| t as i64);
        if w > 0 && tp0 >= 1 {
            let mut t = tp0 * 2;
            while t <= 64 && w - w * tp0 / t < positive {
                t *= 2;
            }
            if t <= 64 {
                let freed = w - w * tp0 / t;
                weights_levers.push(("--tp".into(), t, v, ev.pool_at(r, v) + freed, tp0));
            }
            if w > same_pool {
                weights_levers.push(("weights".into(), w - same_pool, v, ev.pool_at(r, v) + same_pool, w));
            }
        }
    }
    for (flag, n, v, pool, was) in &weights_levers {
        choices.push(Choice {
            flag: flag.clone(),
            parameter_only: false,
            value: *v,
            pool_bytes: *pool,
            removes_bytes: 0,
            lever_value: Some(*n),
            lever_was: Some(*was),
            pool_tokens: None,
            sentence: if flag == "--tp" { Sentence::TensorParallel } else { Sentence::SmallerModel },
        });
    }
    // A start refused before its pool has no pool to compare: the higher value first.
    choices.sort_by_key(|c| std::cmp::Reverse((c.pool_bytes, (c.value * 10_000.0).round() as i64)));
    if let Some(c) = &ev.cell {
        for ch in &mut choices {
            ch.pool_tokens = Some(c.tokens(ch.pool_bytes));
        }
    }
    // The length check the run broke.
    let len_broken = len_msg.as_ref().is_some_and(|msg| bounds.iter().any(|b| b.broken && b.refusal.as_deref() == Some(msg.as_str())));
    // Alternatives that do not make the start fit on their own.
    let turns_off = |f: &str| s.alternatives.iter().any(|x| x.flag == f && x.scales.is_none());
    let not_enough: Vec<usize> = (0..alts.len())
        .filter(|&k| turns_off(&alts[k].flag) && !choices.iter().any(|c| c.flag == alts[k].flag))
        .collect();
    let weights_bytes = match steps::steps(m)[r.query_index].kind {
        steps::Kind::Query(p) => p.categories.get("weights").copied().unwrap_or(0),
        _ => 0,
    };
    let (query, query_inside) = sizing_query(ev, r, m);
    let growth = match (s.after_pool.per_token.as_ref(), from_rules) {
        (Some(_), true) => after_pool::growth(s, m, r.query_function.as_ref(), pool_before),
        _ => None,
    };
    let why = Formula {
        refusal: deciding.refusal.clone(),
        failure: deciding.recon.is_some(),
        failed_after_pool: deciding.failed_after_pool.clone(),
        draft: deciding.draft.clone(),
        estimate: deciding.estimate,
        at_least_refusal: at_least.and_then(|b| b.refusal.clone()),
        at_most_refusal: at_most.and_then(|b| b.refusal.clone()),
        at_most_is_check: at_most.is_some_and(|b| b.recon.is_none()),
        len_message: len_msg,
        len_broken,
        weights_bytes,
        query,
        query_inside,
        from_rules,
        growth,
        fixed_margin_bytes: after_pool::fixed(run, s).0,
        not_enough,
        draft_named: match (&deciding.draft, &deciding.failed_after_pool, direction) {
            (None, Some((_, Some(c))), Direction::Lower) if c == "weights" => draft::named(run),
            _ => None,
        },
        speculative: after_pool::on_command_line(run, "--speculative-algorithm"),
    };
    Some(Advised {
        value: p0,
        direction,
        recommended,
        bound,
        interval,
        pool_before_bytes: pool_before,
        pool_after_bytes: pool_after,
        reserve_bytes,
        arrivals: arr,
        arrivals_bytes,
        margin_bytes: margin,
        margin: margin_what,
        levers: alts,
        choices,
        rank: deciding.rank,
        why: Why::Formula(Box::new(why)),
    })
}


/// What to change for a run that set the pool's bytes itself (the pack's `pool_bytes_flag`:
/// vLLM's --kv-cache-memory-bytes; vllm 0.33 Worker.determine_available_memory skips
/// memory_profiling and the KV cache is that many bytes) and failed to allocate: the parameter
/// changes only the engine's start-up check. The levers that turn off at least the largest
/// shortfall of what failed (the failed request's call site runs through them) keep the pool as
/// set; the flag's own value is bounded by that shortfall and not recommended (what the failed
/// step needed after the failed request is not in the reports). None
/// when the flag is not set, or no allocation failed short of memory (a refusal by the
/// start-up check is the parameter's, as without the flag).
fn pool_bytes_set(run: &Run, findings: &[Finding], ev: &Evaluation, s: &Sizing) -> Option<Advised> {
    let pb = s.pool_bytes_flag.as_ref()?;
    let set = after_pool::flag_number(run, &pb.flag)? as i64;
    // The largest shortfall, and the failed request on that rank.
    let (short, fail) = findings
        .iter()
        .filter_map(|x| match &x.detail {
            Detail::Failure(d) => d.short_by_bytes.filter(|b| *b > 0).map(|b| (b, d)),
            _ => None,
        })
        .max_by_key(|(b, _)| *b)?;
    let to = ((set - short) >> 20) << 20;
    let p0 = ev.value;
    let mut choices = Vec::new();
    let mut whats = Vec::new();
    // The levers whose call sites the failed request ran through: turned off, they remove it;
    // one that scales removes its share.
    let report = run.procs.iter().find(|r| r.process.pid == fail.pid)?;
    let frames = report
        .devices
        .iter()
        .flat_map(|d| d.failures.iter())
        .find(|f| f.bytes == fail.bytes && f.api == fail.api)
        .map(|f| engines::frames(report, f.site))
        .unwrap_or_default();
    for a in s.alternatives.iter().filter(|a| frames.iter().any(|f| engines::frame_matches(&a.callers, f))) {
        let took = fail.needed_bytes;
        // A lever that scales (--max-cudagraph-capture-size) is not offered here: what else its
        // smaller capture still takes (each graph's instantiation) is not sized on this path.
        if a.scales.is_some() || took < short {
            continue;
        }
        choices.push(Choice {
            flag: a.flag.clone(),
            parameter_only: false,
            value: p0,
            pool_bytes: set,
            removes_bytes: took,
            lever_value: None,
            lever_was: None,
            pool_tokens: None,
            sentence: Sentence::Disable,
        });
        whats.push(a.what.clone());
    }
    if choices.is_empty() {
        return None;
    }
    // Most pool kept first: the levers keep the pool as set.
    choices.sort_by_key(|c| std::cmp::Reverse(c.pool_bytes));
    for c in &mut choices {
        c.pool_tokens = ev.cell.as_ref().map(|x| x.tokens(c.pool_bytes));
    }
    let rank = ev.ranks.iter().position(|r| r.rank.pid == fail.pid).or((!ev.ranks.is_empty()).then_some(0))?;
    Some(Advised {
        value: p0,
        direction: Direction::None,
        recommended: None,
        bound: p0,
        interval: Interval { at_least: None, at_most: None },
        pool_before_bytes: set,
        pool_after_bytes: None,
        reserve_bytes: 0,
        arrivals: Vec::new(),
        arrivals_bytes: 0,
        margin_bytes: 0,
        margin: Margin::None,
        levers: Vec::new(),
        choices,
        rank,
        why: Why::PoolBytesSet(PoolBytesSet {
            set,
            to,
            short,
            failed_bytes: fail.needed_bytes,
            failed_category: fail.category.clone(),
            whats,
        }),
    })
}
