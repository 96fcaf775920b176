//! Imbalance across the ranks of a launch: category peaks that differ from rank to rank.

use super::types::{pct, Detail, Finding, ImbalanceDetail, Kind, RankPeaks, Severity, Spread};
use crate::load::Run;
use crate::model::{Report, CATEGORIES};
use crate::thresholds::{IMBALANCE_PCT, NOISE};

fn is_rank(r: &Report) -> bool {
    crate::process::rank_hint(&r.process.env).is_some()
}

fn allocates(r: &Report) -> bool {
    r.devices.iter().any(|d| d.alloc_count > 0 || d.peak_bytes > 0)
}

/// Categories whose peaks differ across the ranks of the launch by more than
/// [`IMBALANCE_PCT`] and at least [`NOISE`] (ranks whose allocation failed left out).
/// `words` name each rank.
pub(super) fn imbalance(run: &Run, words: &dyn crate::recon::ReconWords) -> Option<Finding> {
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
            process: words.who(r),
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
    let detail = ImbalanceDetail { ranks, categories: spreads, failed_left_out };
    let pids = detail.ranks.iter().map(|r| r.pid).collect();
    Some(super::types::finding(Kind::Imbalance, Severity::Warning, None, pids, Vec::new(), Detail::Imbalance(detail)))
}
