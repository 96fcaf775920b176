//! What `culedger diff` takes from the explanation, in words: the lines of each side's pool
//! reconciled side by side (from the sizing query to the failure, or to the pool's last
//! allocation; `culedger_analysis::diff::since_sizing` computes them), and a headline that
//! names the cause when one side failed: which allocation failed, and which categories and
//! hidden costs that appeared after the sizing query grew.

use crate::words::join_and;
use crate::words::part as part_words;
pub use culedger_analysis::diff::{LineKind, SideFailure, SinceLine, SinceSizing};
use crate::units::{fmt_bytes, fmt_delta};

/// A line of the side-by-side reconciliation in words (its `name`).
pub fn line_words(l: &SinceLine) -> String {
    match l {
        SinceLine::Told => "told free at the sizing query".into(),
        SinceLine::Pool => "the pool so far".into(),
        SinceLine::Allocated(category) => format!("{category} allocated since"),
        SinceLine::DriverCost(api) => api.clone(),
        SinceLine::Others { contexts_only: true } => "other processes' contexts".into(),
        SinceLine::Others { contexts_only: false } => "other processes' memory".into(),
        SinceLine::Unexplained => "not explained by any report".into(),
        SinceLine::Free => "free after the pool, or when it failed".into(),
        SinceLine::Requested => "requested (failed)".into(),
        SinceLine::ShortBy => "short by".into(),
    }
}

/// What failed on one side in words: `its KV pool (2.00 GiB, kv_pool, cudaMalloc)`.
pub fn failed_words(f: &SideFailure) -> String {
    let cat = f.category.as_ref().map(|c| format!(", {c}")).unwrap_or_default();
    format!("{} ({}{cat}, {})", part_words(f.part), fmt_bytes(f.bytes), f.api)
}

/// The headline when one side failed: what failed, and what grew after the sizing query.
/// `devices` holds each device's name and its side-by-side reconciliation.
pub fn cause_headline(sa: &str, sb: &str, devices: &[(String, Option<&SinceSizing>)]) -> Option<String> {
    let failing = |side_b: bool| -> Vec<(&String, &SinceSizing)> {
        devices
            .iter()
            .filter_map(|(n, s)| s.map(|s| (n, s)))
            .filter(|(_, s)| if side_b { s.b_failed.is_some() } else { s.a_failed.is_some() })
            .collect()
    };
    let (fa, fb) = (failing(false), failing(true));
    let (name, other, fails, side_b) = match (fa.is_empty(), fb.is_empty()) {
        (true, false) => (sb, sa, fb, true),
        (false, true) => (sa, sb, fa, false),
        // Both failed, or neither: the ordinary headline says so.
        _ => return None,
    };
    // What grew on the failing side, per failing device: (device, [(line, delta)]).
    let grew = |s: &SinceSizing| -> Vec<(String, i64)> {
        s.rows
            .iter()
            .filter(|r| {
                matches!(
                    r.kind,
                    LineKind::Allocated | LineKind::DriverCost | LineKind::OtherProcesses | LineKind::Unexplained
                )
            })
            .filter_map(|r| {
                let d = if side_b { r.b.unwrap_or(0) - r.a.unwrap_or(0) } else { r.a.unwrap_or(0) - r.b.unwrap_or(0) };
                (d >= 1 << 20).then(|| (r.name.clone(), d))
            })
            .collect()
    };
    // The failing device where the most grew (the first of equals).
    let mut best: Option<(&String, &SinceSizing, i64)> = None;
    for (dev, s) in &fails {
        let total: i64 = grew(s).iter().map(|(_, d)| *d).sum();
        if best.is_none_or(|(_, _, b)| total > b) {
            best = Some((dev, s, total));
        }
    }
    let (dev, s, _) = best?;
    // What failed: the representative's part, the sizes over every failing device.
    let failure = |s: &SinceSizing| if side_b { s.b_failure.clone() } else { s.a_failure.clone() };
    let sizes: Vec<i64> = fails.iter().filter_map(|(_, s)| failure(s).map(|f| f.bytes)).collect();
    let what = match failure(s) {
        Some(SideFailure { part, category, api, .. }) => {
            let size = crate::units::fmt_range(
                sizes.iter().copied().min().unwrap_or(0),
                sizes.iter().copied().max().unwrap_or(0),
            );
            let cat = category.map(|c| format!(", {c}")).unwrap_or_default();
            format!("{} ({size}{cat}, {api})", part_words(part))
        }
        None => String::new(),
    };
    let n_dev = devices.len();
    let on = if fails.len() == 1 { format!("on {dev}") } else { format!("on {} of {n_dev} GPUs", fails.len()) };
    let mut g = grew(s);
    g.sort_by_key(|(_, d)| std::cmp::Reverse(*d));
    let mut head = format!("{name} ran out of memory: {what} failed {on}");
    if g.is_empty() {
        head.push_str(&format!("; nothing that came after the sizing query grew compared with {other}"));
    } else {
        let parts: Vec<String> = g.iter().map(|(k, d)| format!("{k} ({})", fmt_delta(*d))).collect();
        let alike = fails.iter().all(|(_, x)| {
            let mut h = grew(x);
            h.sort_by_key(|(_, d)| std::cmp::Reverse(*d));
            h == g
        });
        let where_ = match (fails.len(), alike) {
            (1, _) => String::new(),
            (_, true) => ", on each of them".to_string(),
            (_, false) => format!(" (most on {dev})"),
        };
        head.push_str(&format!("; after the sizing query {} grew compared with {other}{where_}", join_and(&parts)));
    }
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::LineKind::*;

    #[test]
    fn line_kinds_are_written_as_the_json_names_them() {
        let kinds = [Told, Pool, Allocated, DriverCost, OtherProcesses, Unexplained, Free, Requested, ShortBy]
            .map(|k| serde_json::to_value(k).unwrap());
        let want = [
            "told",
            "pool",
            "allocated",
            "driver_cost",
            "other_processes",
            "unexplained",
            "free",
            "requested",
            "short_by",
        ];
        assert_eq!(kinds, want);
    }
}
