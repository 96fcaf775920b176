//! The findings of `culedger explain` (docs/explain.md), computed as typed values: what
//! each finding is about, its figures (its [`Detail`]) and the processes and call sites
//! involved. The words of each (its title and conclusion) are written from those figures
//! by [`super::prose::word`], above this module: nothing here calls it.
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
#[cfg(test)]
mod tests;
mod types;
mod untracked;

use crate::analysis::DeviceGroup;
use crate::load::Run;
use culedger_analysis::recon::ReconWords;

pub use types::*;

/// Every finding of a run, most important first.
/// `ev`: the engine's sizing formula evaluated on the run, when one applies. `words` name
/// processes (the JSON's `process` fields) and write the reconciliations' lines; every other
/// word of a finding is written afterwards from its figures (`prose::word`).
pub fn all(
    run: &Run,
    gs: &[DeviceGroup],
    ev: Option<&culedger_analysis::sizing::Evaluation>,
    words: &dyn ReconWords,
) -> Vec<Finding> {
    culedger_analysis::counts::computed(culedger_analysis::counts::Part::Findings);
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
