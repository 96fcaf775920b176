//! The findings of `culedger explain` (docs/explain.md), computed as typed values: what
//! each finding is about, its figures (its [`Detail`]) and the processes and call sites
//! involved, with no words in them: the words of each (its title and conclusion, and the
//! fields the JSON gives in words but `process`) are written from those figures by the CLI
//! (its `explain::prose::word`), and the processes are named by the words [`all`] is given.
//!
//! 1. failed allocations, reconciled from the query the process sized from, and starts that
//!    failed without one (`failure`);
//! 2. the sizing formula: what each rank was told and what share it took; ranks whose pool
//!    differs from the others' (`sizing`);
//! 3. untracked growth between two queries, with the hidden costs in between (`untracked`);
//! 4. categories that kept growing during the last third of the run, with the peaks (`growth`);
//! 5. imbalance across the ranks of the launch (`imbalance`).

mod failure;
mod growth;
mod imbalance;
mod sizing;
mod types;
mod untracked;

use crate::groups::DeviceGroup;
use crate::load::Run;
use crate::recon::ReconWords;

pub use types::*;

/// Every finding of a run, most important first.
/// `ev`: the engine's sizing formula evaluated on the run, when one applies. `words` name
/// processes (the JSON's `process` fields) and write the reconciliations' lines; every other
/// word of a finding is written afterwards from its figures (the CLI's `prose::word`).
pub fn all(
    run: &Run,
    gs: &[DeviceGroup],
    ev: Option<&crate::sizing::Evaluation>,
    words: &dyn ReconWords,
) -> Vec<Finding> {
    crate::counts::computed(crate::counts::Part::Findings);
    let mut failures = failure::failed_allocations(gs, ev, words);
    failures.extend(failure::failed_start(run, gs, ev, words));
    let mut out = failures.clone();
    out.extend(sizing::sizing(gs, !failures.is_empty(), ev, words));
    let windows: Vec<untracked::FailureWindow> = failures
        .iter()
        .filter_map(|f| match &f.detail {
            Detail::Failure(d) => {
                let r = d.reconciliation.as_ref()?;
                let end = r.closed_by.as_ref().map_or(d.at_us, |q| q.at_us);
                Some(untracked::FailureWindow {
                    gpu: f.gpu.clone()?,
                    from_us: r.query.at_us,
                    to_us: end,
                })
            }
            _ => None,
        })
        .collect();
    let mut untracked: Vec<Finding> = gs.iter().filter_map(|g| untracked::untracked_growth(g, &windows, ev, words)).collect();
    untracked.sort_by_key(|f| match &f.detail {
        Detail::Untracked(d) => (f.severity != Severity::Warning, std::cmp::Reverse(d.rise_bytes), f.device, f.mig_index),
        _ => (true, std::cmp::Reverse(0), None, None),
    });
    out.extend(untracked);
    out.extend(gs.iter().filter_map(growth::growth));
    out.extend(imbalance::imbalance(run, words));
    // Failures, then warnings, then the rest; in the order above within each (a stable sort).
    out.sort_by_key(|f| f.severity);
    out
}

/// Findings with the same mechanism (a failure or a rise of untracked memory alike in all
/// but its rank, GPU and figures) share a signature; each after the first names the first
/// (`folded_into`), under which every output shows it as one row; the first gets a title
/// that names them all (`folded_title`, written by `title` from the row's findings, ordered
/// by host and GPU).
pub fn fold(mut found: Vec<Finding>, title: &dyn Fn(&[&Finding]) -> Option<String>) -> Vec<Finding> {
    crate::counts::computed(crate::counts::Part::Fold);
    let signature = |f: &Finding| match &f.detail {
        Detail::Failure(d) => Some(d.signature.clone()),
        Detail::Untracked(d) => Some(d.signature.clone()),
        _ => None,
    };
    let sigs: Vec<Option<String>> = found.iter().map(signature).collect();
    for k in 0..found.len() {
        found[k].folded_into = None;
        if sigs[k].is_some() {
            found[k].folded_into = (0..k).find(|&j| found[j].folded_into.is_none() && sigs[j] == sigs[k]);
        }
    }
    for k in 0..found.len() {
        let mut all: Vec<&Finding> = found.iter().enumerate().filter(|(j, f)| *j == k || f.folded_into == Some(k)).map(|(_, f)| f).collect();
        all.sort_by_key(|f| (f.host.clone(), f.device, f.mig_index));
        found[k].folded_title = title(&all);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_severities_are_written_as_the_json_names_them() {
        let json = |v: serde_json::Value| v.as_str().unwrap().to_string();
        let kinds =
            [Kind::FailedAllocation, Kind::FailedStart, Kind::Sizing, Kind::UntrackedGrowth, Kind::Growth, Kind::Imbalance]
                .map(|k| json(serde_json::to_value(k).unwrap()));
        assert_eq!(kinds, ["failed_allocation", "failed_start", "sizing", "untracked_growth", "growth", "imbalance"]);
        let severities =
            [Severity::Failure, Severity::Warning, Severity::Info].map(|s| json(serde_json::to_value(s).unwrap()));
        assert_eq!(severities, ["failure", "warning", "info"]);
        assert_eq!(severities, [Severity::Failure, Severity::Warning, Severity::Info].map(|s| s.as_str().to_string()));
    }

    #[test]
    fn reconciliation_items_are_written_as_the_json_names_them() {
        use crate::explain::ItemKind::*;
        let kinds = [Pool, Allocated, DriverCost, OtherProcesses, Context];
        let names = kinds.map(|k| serde_json::to_value(k).unwrap());
        assert_eq!(names, ["pool", "allocated", "driver_cost", "other_processes", "context"]);
        assert_eq!(names, kinds.map(|k| k.as_str()));
    }
}
