//! Untracked memory (what the device used beyond what the reports tracked) rising between
//! two free-memory queries, with the hidden costs measured and the contexts created in
//! between.

use crate::explain::Item;
use crate::recon::{hidden_in_window, query_ref, ReconWords};
use crate::steps;
use super::types::{Detail, Finding, Kind, Severity, UntrackedDetail};
use crate::groups::{DeviceGroup, Member};
use crate::thresholds::UNTRACKED_GROWTH;

/// A failure's reconciliation, on the run's clock: a rise inside it is the failure's.
pub(super) struct FailureWindow {
    pub gpu: crate::groups::GpuId,
    pub from_us: i64,
    pub to_us: i64,
}

/// The largest rise of untracked memory between two queries on a device, when it is more
/// than [`UNTRACKED_GROWTH`] beyond the contexts of processes that began meanwhile and lies
/// outside every failure's reconciliation (which accounts for it already). `words` name the
/// queries' processes and write the items' lines.
pub(super) fn untracked_growth(
    g: &DeviceGroup,
    failure_windows: &[FailureWindow],
    ev: Option<&crate::sizing::Evaluation>,
    words: &dyn ReconWords,
) -> Option<Finding> {
    let clock = g.clock;
    let probes = g.probes();
    let readings: Vec<(Member, &crate::model::Probe, crate::groups::Reading)> =
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
    if failure_windows.iter().any(|w| g.is(&w.gpu) && w.from_us <= s1 && s0 <= w.to_us) {
        return None;
    }
    let items = hidden_in_window(g, t0, t1, words);
    // Contexts of processes that began to use the GPU in between are expected.
    let expected: i64 = items.iter().filter(|i| i.expected).map(|i| i.bytes).sum();
    if rise - expected <= UNTRACKED_GROWTH {
        return None;
    }
    let explained: i64 = items.iter().map(|i| i.bytes).sum();
    let unexplained = rise - explained;
    let mut listed: Vec<&Item> = items.iter().filter(|i| (i.bytes != 0 || i.uncertain) && !i.expected).collect();
    listed.sort_by_key(|i| std::cmp::Reverse(i.bytes));
    // A risk when what remained free would not absorb another rise like this one.
    let net = rise - expected;
    let severity = if to.2.free_bytes < net { Severity::Warning } else { Severity::Info };
    let mut apis: Vec<String> = listed
        .iter()
        .map(|i| i.api.clone().unwrap_or_else(|| if i.expected { "ctx".into() } else { "peer ctx".into() }))
        .collect();
    apis.sort();
    apis.dedup();
    let signature = format!("{}|{}|{}", severity.as_str(), apis.join(","), sized_before.len());
    let mut callers: Vec<String> = Vec::new();
    for c in items.iter().flat_map(|i| &i.callers) {
        if !callers.contains(c) {
            callers.push(c.clone());
        }
    }
    // What the engine's formula set aside before its sizing query for what comes after it (an
    // input read as the drop across a span the engine brackets with queries, subtracted).
    let estimated_before: Vec<(i64, i64, String)> = ev
        .map(|ev| {
            sized_before
                .iter()
                .filter_map(|&pid| {
                    let r = ev.ranks.iter().find(|r| r.rank.pid == pid && g.is(&r.rank.gpu))?;
                    let (name, input) = ev.sizing.inputs.iter().find(|(_, i)| i.value == "drop")?;
                    let bytes = r.own_inputs.get(name).copied().filter(|&b| b > 0)?;
                    ev.sizing
                        .pool
                        .iter()
                        .any(|t| &t.input == name && t.coef < 0.0)
                        .then(|| (pid, bytes, input.what.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut pids: Vec<i64> = items.iter().flat_map(|i| i.pids.clone()).collect();
    pids.sort_unstable();
    pids.dedup();
    let detail = UntrackedDetail {
        from: query_ref(g, from.0, from.1, words),
        to: query_ref(g, to.0, to.1, words),
        untracked_from_bytes: from.2.untracked_bytes,
        untracked_to_bytes: to.2.untracked_bytes,
        rise_bytes: rise,
        items,
        unexplained_bytes: unexplained,
        sized_before,
        estimated_before,
        free_after_bytes: to.2.free_bytes,
        names: g.members.iter().rev().map(|m| (m.pid(), crate::process::Who::of(m.report))).collect(),
        signature,
    };
    Some(super::types::finding(Kind::UntrackedGrowth, severity, Some(g), pids, callers, Detail::Untracked(Box::new(detail))))
}
