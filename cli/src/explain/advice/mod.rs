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
//!
//! `evaluation` evaluates the formula on the run; this module turns it into the advice.
mod evaluation;
mod after_pool;

pub use evaluation::*;
use evaluation::{ceil2, deficit_at, floor2, gib};

use super::engines::{self, Sizing};
use super::findings::{join_and, Detail, Finding};
use super::recon::{api_words, Item, ItemKind};
use super::steps;
use crate::analysis::{DeviceGroup, Member};
use crate::load::Run;
use crate::units::fmt_bytes;
use serde::Serialize;

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

/// The value of the engine's parameter: on a command line of the run, else its default.

fn arrivals(recon: &super::recon::Recon) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = Vec::new();
    for it in &recon.items {
        let what = match it.kind {
            ItemKind::DriverCost => api_words(it.api.as_deref().unwrap_or("")),
            ItemKind::OtherProcesses => "other ranks' contexts".to_string(),
            ItemKind::Allocated => format!("{} allocations", it.category.clone().unwrap_or_default()),
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
                    .filter(|i| {
                        i.kind == ItemKind::DriverCost && i.api.as_deref() == Some(crate::costs::cost_label(c).as_str())
                    })
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

struct Bound {
    lower: bool,
    at: f64,
    rank: usize,
    recon: Option<super::recon::Recon>,
    refusal: Option<String>,
    margin: i64,
}

/// The recommendation for a run whose start failed, from the engine's formula evaluated on
/// it (`ev`) and its findings.
pub fn advise_with(run: &Run, gs: &[DeviceGroup], findings: &[Finding], ev: &Evaluation) -> Option<Advice> {
    let s = &ev.sizing;
    let p0 = ev.value;
    let (margin, margin_what) = after_pool::fixed(run, s);
    let mut bounds: Vec<Bound> = Vec::new();
    for (k, r) in ev.ranks.iter().enumerate() {
        let Some(g) = gs.iter().find(|g| g.host == r.host && g.index == r.device) else { continue };
        let Some(m) = g.member_at(r.pid, r.start_us) else { continue };
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
        // What arrived between the pool and the failure was part of what the margin stands for;
        // what grows with the pool's tokens is on top of the fixed margin and shrinks with it.
        let growth = after_pool::growth(s, m, r, r.pool_bytes);
        let (margin, deficit) = after_pool::margin_and_deficit(margin, growth, still, need, after_pool, free);
        if deficit <= 0 || ev.scale_bytes <= 0 {
            continue;
        }
        bounds.push(Bound {
            lower: true,
            at: p0 - after_pool::lowering(deficit, ev.scale_bytes, growth),
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
    let m = g.member_at(r.pid, r.start_us)?;
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
            margin_what,
            ev.pack
        ));
    } else if direction == "lower" {
        lines.push(format!("After the pool: {margin_what}"));
    }
    if let (Some(g), Some(pt)) = (after_pool::growth(s, m, r, pool_before), s.after_pool.per_token.as_ref()) {
        if direction == "lower" && deciding.refusal.is_none() {
            lines.push(format!(
                "What follows the pool grows with its tokens ({}: {} B a token): {} GiB for the pool's {} tokens \
                 at {p0:.2}{}; the margin counts it on top of the fixed {} GiB (rules/{}.json, after_pool.per_token)",
                pt.what,
                pt.bytes,
                gib(g.bytes),
                g.tokens,
                pool_after.map_or(String::new(), |pa| format!(
                    ", {} GiB at {:.2}",
                    gib((g.per_pool_byte * pa as f64) as i64),
                    recommended.unwrap_or(p0)
                )),
                gib(after_pool::fixed(run, s).0),
                ev.pack
            ));
        }
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
        margin_what,
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
