//! What `culedger diff` takes from the explanation: the reconciliation of each side's pool
//! (from the sizing query to the failure, or to the pool's last allocation) side by side,
//! and a headline that names the cause when one side failed: which allocation failed, and
//! which categories and hidden costs that appeared after the sizing query grew.

use crate::analysis::DeviceGroup;
use crate::explain::findings::{failure_reconciliation, join_and, PoolWindow};
use crate::explain::recon::ItemKind;
use crate::words::part as part_words;
use culedger_analysis::explain::Part;
use crate::units::{fmt_bytes, fmt_delta};
use serde::Serialize;

/// One line of the side-by-side reconciliation: bytes on each side (null where that side
/// has no such line or no sized pool) and B - A.
#[derive(Debug, Clone, Serialize)]
pub struct SinceRow {
    pub name: String,
    pub kind: LineKind,
    pub a: Option<i64>,
    pub b: Option<i64>,
    pub delta: Option<i64>,
}

/// What a line of the reconciliation is (its `kind` in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    /// Told free at the sizing query.
    Told,
    /// What was taken after it: the pool so far, allocations, hidden driver costs, other
    /// processes, memory no report explains.
    Pool,
    Allocated,
    DriverCost,
    OtherProcesses,
    Unexplained,
    /// Free after the pool, or when it failed; what the failed attempt asked for; by how much
    /// it was short.
    Free,
    Requested,
    ShortBy,
}

impl LineKind {
    /// Told first, then what was taken, then free, requested and short by.
    fn rank(self) -> u8 {
        match self {
            LineKind::Told => 0,
            LineKind::Free => 2,
            LineKind::Requested => 3,
            LineKind::ShortBy => 4,
            _ => 1,
        }
    }

    /// Memory taken after the sizing query.
    pub fn taken(self) -> bool {
        self.rank() == 1
    }
}

/// What failed on one side: which part of the pool, its size, the category of the pool and
/// the call.
#[derive(Debug, Clone)]
pub struct SideFailure {
    pub part: Part,
    pub bytes: i64,
    pub category: Option<String>,
    pub api: String,
}

/// The reconciliations of one device in A and in B.
#[derive(Debug, Clone, Serialize)]
pub struct SinceSizing {
    /// The process reconciled on each side, and what failed there (`part (size, api)`).
    pub a_process: Option<String>,
    pub b_process: Option<String>,
    pub a_failed: Option<String>,
    pub b_failed: Option<String>,
    /// What failed, in parts.
    #[serde(skip)]
    pub a_failure: Option<SideFailure>,
    #[serde(skip)]
    pub b_failure: Option<SideFailure>,
    pub rows: Vec<SinceRow>,
}

/// (key, kind, bytes) lines of a window, amounts taken as positive.
fn lines(w: &PoolWindow) -> Vec<(String, LineKind, i64)> {
    let r = &w.recon;
    let mut out = vec![("told free at the sizing query".to_string(), LineKind::Told, r.query.free_bytes)];
    let contexts_only =
        r.items.iter().filter(|i| i.kind == ItemKind::OtherProcesses).all(|i| i.subject.contexts_only());
    let others = if contexts_only { "other processes' contexts" } else { "other processes' memory" };
    let mut add = |key: String, kind: LineKind, bytes: i64| match out.iter_mut().find(|(k, _, _)| *k == key) {
        Some(l) => l.2 += bytes,
        None => out.push((key, kind, bytes)),
    };
    for i in &r.items {
        match i.kind {
            ItemKind::Pool => add("the pool so far".into(), LineKind::Pool, i.bytes),
            ItemKind::Allocated => {
                add(format!("{} allocated since", i.category.clone().unwrap_or_default()), LineKind::Allocated, i.bytes)
            }
            ItemKind::DriverCost => add(i.api.clone().unwrap_or_default(), LineKind::DriverCost, i.bytes),
            _ => add(others.into(), LineKind::OtherProcesses, i.bytes),
        }
    }
    if let Some(u) = r.unexplained_bytes.filter(|u| *u != 0) {
        add("not explained by any report".into(), LineKind::Unexplained, u);
    }
    add("free after the pool, or when it failed".into(), LineKind::Free, r.free_bytes);
    if let Some(f) = &w.failed {
        add("requested (failed)".into(), LineKind::Requested, f.bytes);
        add("short by".into(), LineKind::ShortBy, f.bytes - r.free_bytes);
    }
    out
}

/// The side-by-side reconciliation of a device; None when neither side sized a pool.
pub fn since_sizing(a: Option<&DeviceGroup>, b: Option<&DeviceGroup>) -> Option<SinceSizing> {
    let (wa, wb) = (a.and_then(failure_reconciliation), b.and_then(failure_reconciliation));
    if wa.is_none() && wb.is_none() {
        return None;
    }
    let (la, lb) = (wa.as_ref().map(lines).unwrap_or_default(), wb.as_ref().map(lines).unwrap_or_default());
    let mut keys: Vec<(String, LineKind)> = Vec::new();
    for (k, kind, _) in la.iter().chain(&lb) {
        if !keys.iter().any(|(x, _)| x == k) {
            keys.push((k.clone(), *kind));
        }
    }
    keys.sort_by_key(|(_, kind)| kind.rank());
    let get = |l: &[(String, LineKind, i64)], k: &str, side: bool| {
        l.iter().find(|(x, _, _)| x == k).map(|x| x.2).or(if side { Some(0) } else { None })
    };
    let rows = keys
        .into_iter()
        .map(|(k, kind)| {
            let taken = kind.taken();
            let (x, y) = (get(&la, &k, taken && wa.is_some()), get(&lb, &k, taken && wb.is_some()));
            SinceRow { name: k, kind, a: x, b: y, delta: x.zip(y).map(|(x, y)| y - x) }
        })
        .collect();
    let parts = |w: &Option<PoolWindow>| {
        w.as_ref().and_then(|w| {
            w.failed.as_ref().map(|f| SideFailure {
                part: f.part,
                bytes: f.bytes,
                category: w.category.clone(),
                api: f.api.clone(),
            })
        })
    };
    let failed = |w: &Option<PoolWindow>| {
        w.as_ref().and_then(|w| {
            let cat = w.category.as_ref().map(|c| format!(", {c}")).unwrap_or_default();
            w.failed.as_ref().map(|f| format!("{} ({}{cat}, {})", part_words(f.part), fmt_bytes(f.bytes), f.api))
        })
    };
    Some(SinceSizing {
        a_process: wa.as_ref().map(|w| w.process.clone()),
        b_process: wb.as_ref().map(|w| w.process.clone()),
        a_failed: failed(&wa),
        b_failed: failed(&wb),
        a_failure: parts(&wa),
        b_failure: parts(&wb),
        rows,
    })
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
