//! `culedger explain PATH...`: why a run used (or ran out of) the memory it did, as
//! findings, most important first, each with the numbers that prove it and the call sites
//! involved. The definitions (bursts, sizing queries, the reconciliation, the thresholds)
//! are in docs/explain.md; the JSON (`culedger-explain/1`) too.
//!
//! - `recon`: the reconciliation's words (`culedger_analysis::recon` reconciles);
//! - `prose`: each finding's title and conclusion, written from its figures (the findings
//!   are computed as typed values by `culedger_analysis::findings`);
//! - `render`: text and markdown;
//! - `advice`: "What to change" in words (`culedger_analysis::sizing` evaluates the formula,
//!   `culedger_analysis::advice` computes the recommendation);
//! - here: the explanation's verdict and notes ([`ExplainWords`]; the document is
//!   `culedger_analysis::explanation`'s).
//!
//! The layers only call down (`scripts/import-circles.py cli/src`: no circle): the analysis
//! crate computes each part once per run (`culedger_analysis::run_analysis::Analysis`), with no
//! words in it; the run's analysis in the CLI's words (`crate::run_analysis`) has them written
//! by these modules from the figures; `render` and the other commands take the finished values.
//! Words shared with other commands (a process in a sentence, lists) are in `crate::words`.

pub mod advice;
#[cfg(test)]
mod findings_tests;
pub mod prose;
pub mod recon;
pub mod render;

use crate::analysis::{DeviceGroup, GroupWords};
use crate::load::Run;
use crate::words::who;

pub use culedger_analysis::findings::{Detail, FailDetail, Finding, Kind, Severity};

pub use culedger_analysis::explanation::{Advice, Explanation};
use culedger_analysis::explanation::{ExplanationWords, Tally};

/// The explanation's words: its verdict from what it counts, its notes, and a device's
/// impossible figures.
pub struct ExplainWords;

impl ExplanationWords for ExplainWords {
    fn verdict(&self, t: &Tally) -> String {
        verdict(t)
    }

    fn notes(&self, run: &Run, gs: &[DeviceGroup]) -> Vec<String> {
        notes(run, gs)
    }

    fn impossible(&self, g: &DeviceGroup) -> Vec<String> {
        g.impossible_lines()
    }
}

/// The verdict: how many findings of each severity, or that there is none.
fn verdict(t: &Tally) -> String {
    if t.failures + t.warnings == 0 && t.impossible > 0 {
        format!(
            "{} that cannot all be true: these are not the figures of one GPU each",
            crate::units::count(t.impossible, "figure", "figures")
        )
    } else if t.failures + t.warnings == 0 && t.infos > 0 {
        format!("nothing alarming; {} below", crate::units::count(t.infos, "observation", "observations"))
    } else if t.failures + t.warnings == 0 {
        "no findings: no allocation failed, the ranks sized their pools alike, untracked memory never rose by more \
         than 256 MiB between two queries, no category kept growing at the end of the run, and the ranks are \
         balanced"
            .to_string()
    } else {
        let mut parts = Vec::new();
        // Failed ranks counted as report's verdict counts them; then those that failed
        // without one.
        if t.failed_ranks > 0 {
            parts.push(if t.ranks == 1 {
                "the process failed to allocate".to_string()
            } else {
                format!("{} of {} ranks failed to allocate", t.failed_ranks, t.ranks)
            });
        }
        // Those the engine refused by its own check are said so, with the check.
        if let Some(r) = &t.refused {
            let whom = if r.processes == 1 { "1 process".to_string() } else { format!("{} processes", r.processes) };
            let check = match &r.function {
                Some(function) => format!("by its check in {function}"),
                None => "by its own check".to_string(),
            };
            parts.push(format!("{} refused to start ({whom}, no failed allocation) {check}", r.engine));
        }
        if t.starts > 0 {
            let more = if t.failed_ranks > 0 || t.refused.is_some() { " more" } else { "" };
            let noun = if t.starts == 1 { "process" } else { "processes" };
            parts.push(format!("{}{more} {noun} failed without a failed allocation", t.starts));
        }
        if parts.is_empty() && t.failures > 0 {
            parts.push(crate::units::count(t.failures, "failure", "failures"));
        }
        if t.warnings > 0 {
            parts.push(crate::units::count(t.warnings, "warning", "warnings"));
        }
        format!("{}, most important first", parts.join(" and "))
    }
}

/// An explanation's headline (the first finding's title, else the verdict) and its first
/// "What to change" line: the gist that commands showing only that much print (the one screen
/// of `culedger run`'s ending).
pub fn gist(e: &Explanation) -> (String, Option<String>) {
    let head = e.findings.first().map_or_else(|| e.verdict.clone(), |f| f.title.clone());
    (head, e.what_to_change.as_ref().and_then(|a| a.lines.first()).map(|l| format!("{l}.")))
}

/// What limits the explanation.
fn notes(run: &Run, gs: &[DeviceGroup]) -> Vec<String> {
    let mut out: Vec<String> = crate::analysis::ordinal_fallback_note(run).into_iter().collect();
    out.extend(crate::analysis::pci_numbering_note(gs));
    out.extend(run.skipped.iter().map(|s| {
        let s = crate::load::file_error(s);
        format!(
            "skipped {s}; what that process did shows as memory no report explains (or is missing from the figures)"
        )
    }));
    for r in &run.procs {
        let status = crate::runs::status_in(r, run);
        if ["no final report", "killed", "running or", "stopped with"].iter().any(|s| status.starts_with(s)) {
            out.push(format!("{}: {status}; its figures are those of its last report", who(r)));
        }
        // Past the urgent writes' budget a failure waited for the periodic write, which a kill
        // may have cut short (docs/reliability.md, "Urgent writes").
        if r.process.exit == crate::model::Exit::Running && r.health.urgent_deferred > 0 {
            out.push(format!(
                "{}: {} failed allocations or free-memory query windows came past culedger's budget for writing at \
                 once; its last report may lack those of its last second",
                who(r),
                r.health.urgent_deferred
            ));
        }
        if r.health.lost_events > 0 {
            out.push(format!("{}: {} events were lost; its figures are incomplete", who(r), r.health.lost_events));
        }
    }
    out
}
