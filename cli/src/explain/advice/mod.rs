//! "What to change": the engine's sizing formula (`engines`) evaluated on the run's own
//! queries, and the value of its parameter that makes the failed (or refused) start fit.
//!
//! How the checks and the failures bound the value: `culedger_analysis::advice`.
//!
//! `culedger_analysis::sizing` evaluates the formula on the run (`sizing_words` words it);
//! `culedger_analysis::advice` turns it into the recommendation as typed values; `words` writes
//! its sentences (`Advice`, culedger-explain/1's `what_to_change`).
pub mod sizing_words;
pub mod words;

pub use culedger_analysis::advice::Measured;
pub use sizing_words::*;
pub use words::Advice;

use crate::analysis::DeviceGroup;
use crate::load::Run;
use culedger_analysis::explain::Finding;

/// The recommendation for a run whose start failed, from the engine's formula evaluated on
/// it (`ev`) and its findings, in words.
pub fn advise_with(run: &Run, gs: &[DeviceGroup], findings: &[Finding], ev: &Evaluation) -> Option<Advice> {
    advise_measured(run, gs, findings, ev, None)
}

/// `advise_with`, the margin for what the failed run never reached taken from a run that
/// started (`culedger diff`): `measured` is what that run took after its pool
/// (`measured_after_pool`); None: the pack's fixed `after_pool`.
pub fn advise_measured(
    run: &Run,
    gs: &[DeviceGroup],
    findings: &[Finding],
    ev: &Evaluation,
    measured: Option<Measured>,
) -> Option<Advice> {
    culedger_analysis::advice::advised(run, gs, findings, ev, measured, &crate::explain::recon::Words).map(|a| words::advice(&a, ev))
}

/// [`culedger_analysis::advice::measured_after_pool`], its reconciliations made with the CLI's
/// words.
pub fn measured_after_pool(gs: &[DeviceGroup], ev: &Evaluation) -> Option<(i64, RankSizing)> {
    culedger_analysis::advice::measured_after_pool(gs, ev, &crate::explain::recon::Words)
}
