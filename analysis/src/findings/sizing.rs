//! The sizing formula: what each rank was told by the query it sized its pool from, and
//! what share of it the pool took; ranks whose pool differs from the others'.

use crate::process::RankId;
use crate::callers;
use crate::steps;
use super::types::{median, pct, Detail, Finding, Kind, Severity, SizingDetail, SizingRow, WhyDiffers};
use crate::groups::{by_id, DeviceGroup, Member};
use crate::process::Who;
use crate::recon::ReconWords;
use crate::thresholds::POOL_DIFF_PCT;

/// Why a rank was told `delta` more (negative: less) free memory than the others: who else
/// held memory on its GPU at its query (processes with live allocations, and those that held
/// only a context), in the group's member order.
fn told_why(g: &DeviceGroup, m: Member, at: i64, delta: i64) -> WhyDiffers {
    let (mut contexts, mut allocations) = (Vec::new(), Vec::new());
    for o in g.members.iter().filter(|o| !std::ptr::eq(o.report, m.report)) {
        let present = o.first_us().is_some_and(|f| f <= at) && o.ended_us().is_none_or(|e| e >= at);
        if !present {
            continue;
        }
        let live: i64 = o.live_at(at).iter().sum();
        if live > 0 {
            allocations.push((o.pid(), live, Who::of(o.report)));
        } else {
            contexts.push(Who::of(o.report));
        }
    }
    WhyDiffers::Told { delta, allocations, contexts }
}

/// What each rank was told and what share of it its pool took; a finding when a rank's pool
/// differs from the others' or when an allocation failed (the context of the failure).
/// `words` name each rank.
pub(super) fn sizing(
    gs: &[DeviceGroup],
    any_failure: bool,
    ev: Option<&crate::sizing::Evaluation>,
    words: &dyn ReconWords,
) -> Option<Finding> {
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
                    rank: RankId::of(*m, g, words.who(m.report)),
                    first_told_bytes: first.and_then(|i| st[i].told()).and_then(|p| p.free_bytes),
                    first_at_us: first.map(|i| g.clock.since(st[i].abs_us)),
                    told_bytes: sz.told,
                    at_us: g.clock.since(abs),
                    pool_bytes: sz.pool,
                    fraction: sz.pool as f64 / sz.told.max(1) as f64,
                    failed: sz.burst.iter().any(|&i| st[i].failure().is_some()),
                    differs_pct: 0.0,
                    flagged: false,
                    // Written from `why_of` by the words (`prose::word`).
                    why: None,
                    caller,
                    why_of: None,
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
        for (r, abs) in &mut rows {
            if let Some(x) = e.ranks.iter().find(|x| x.rank.same(&r.rank)) {
                r.told_bytes = x.inputs.get(&e.sizing.sizing_query).copied().unwrap_or(r.told_bytes);
                r.pool_bytes = x.pool_bytes.max(0);
                r.fraction = r.pool_bytes as f64 / r.told_bytes.max(1) as f64;
                // When and where: the query the formula sized from (the evaluation's), and
                // whether the pool allocated after it failed (not a later burst's failure).
                let g = by_id(gs, &r.rank.gpu).expect("the row's device");
                let m = g.member_at(r.rank.pid, r.rank.start_us).expect("the row's process");
                let st = steps::steps(m);
                if x.complete && st.get(x.sizing_index).is_some_and(|q| q.told().is_some()) {
                    *abs = st[x.sizing_index].abs_us;
                    r.at_us = g.clock.since(*abs);
                    let pool = steps::burst_after(&st, x.query_index);
                    r.failed = pool.iter().any(|&i| st[i].failure().is_some());
                    if let Some(c) = pool.iter().find_map(|&i| {
                        st[i].top().and_then(|a| a.caller.clone().or_else(|| callers::caller(m.report, a.site)))
                    }) {
                        r.caller = Some(c);
                    }
                }
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
            let g = by_id(gs, &r.rank.gpu).expect("the row's device");
            let m = g.member_at(r.rank.pid, r.rank.start_us).expect("the row's process");
            r.why_of = Some(if (delta as f64).abs() * 2.0 >= ((r.pool_bytes - reference) as f64).abs() {
                told_why(g, m, *abs, delta)
            } else {
                WhyDiffers::Share { fraction: r.fraction, others: ref_fraction }
            });
        }
    }
    let rows: Vec<SizingRow> = rows.into_iter().map(|(r, _)| r).collect();
    let flagged: Vec<&SizingRow> = rows.iter().filter(|r| r.flagged).collect();
    let flagged_any = !flagged.is_empty() && rows.len() >= 2;
    if !flagged_any && !any_failure {
        return None;
    }
    let detail = SizingDetail { ranks: rows, reference_pool_bytes: reference, reference_told_bytes: ref_told };
    let callers: Vec<String> = detail.ranks.iter().filter_map(|r| r.caller.clone()).fold(Vec::new(), |mut v, c| {
        if !v.contains(&c) {
            v.push(c);
        }
        v
    });
    let severity = if flagged_any { Severity::Warning } else { Severity::Info };
    let pids = detail.ranks.iter().map(|r| r.rank.pid).collect();
    Some(super::types::finding(Kind::Sizing, severity, None, pids, callers, Detail::Sizing(detail)))
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
