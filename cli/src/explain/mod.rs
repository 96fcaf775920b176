//! `culedger explain PATH...`: why a run used (or ran out of) the memory it did, as
//! findings, most important first, each with the numbers that prove it and the call sites
//! involved. The definitions (bursts, sizing queries, the reconciliation, the thresholds)
//! are in docs/explain.md; the JSON (`culedger-explain/1`) too.
//!
//! - `recon`: the reconciliation from a query to a failure (or a pool);
//! - `findings`: the findings, computed as typed values (`culedger_analysis::findings`);
//! - `prose`: each finding's title and conclusion, written from its figures;
//! - `render`: text and markdown;
//! - `callers`: call sites in words;
//! - `engines`: the engines' sizing formulas, as the rule packs give them;
//! - `advice`: "What to change", from the formula evaluated on the run.
//!
//! The steps of a process (bursts, sizing queries) are the analysis crate's
//! (`culedger_analysis::steps`).
//! The layers only call down (`scripts/import-circles.py cli/src`: no circle): `engines`,
//! `callers`, `recon` and `sizing` (the formula evaluated) compute; `findings` (the analysis
//! crate's) build typed values on them (no words: a finding's title and text are empty
//! there; its processes named by `recon::Words`); `prose::word`
//! writes those words from the figures when the run's analysis (`run_analysis`) computes the
//! findings; `render` and the other commands take the finished values. Words shared with
//! other commands (a process in a sentence, lists) are in `crate::words`.

pub mod advice;
#[cfg(test)]
mod findings_tests;
pub mod prose;
pub mod recon;
pub mod render;

use crate::analysis::{DeviceGroup, GroupWords};
use crate::clock::Clock;
use crate::load::Run;
use crate::words::who;
use culedger_analysis::callers;

pub use culedger_analysis::findings::{Detail, FailDetail, Finding, Kind, Severity};

pub use culedger_analysis::explanation::{Explanation, EXPLAIN_SCHEMA};

/// Findings with the same mechanism (a failure or a rise of untracked memory alike in all
/// but its rank, GPU and figures) share a signature; each after the first names the first
/// (`folded_into`), under which every output shows it as one row; the first gets a title
/// that names them all (`folded_title`).
pub fn fold(mut found: Vec<Finding>) -> Vec<Finding> {
    culedger_analysis::counts::computed(culedger_analysis::counts::Part::Fold);
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
        found[k].folded_title = prose::group_title(&all);
    }
    found
}

/// Explains a run from the parts of its analysis (`run_analysis::Analysis` computes them
/// once): its device groups, its findings (folded, by `Analysis::findings`) and the
/// recommendation.
pub fn explain(
    run: &Run,
    gs: &[DeviceGroup],
    found: Vec<Finding>,
    what_to_change: Option<advice::Advice>,
) -> Explanation {
    culedger_analysis::counts::computed(culedger_analysis::counts::Part::Explanation);
    let clock = Clock::of(&run.procs);
    let impossible: Vec<String> = gs.iter().flat_map(|g| g.impossible_lines()).collect();

    let count = |sev: Severity| found.iter().filter(|f| f.severity == sev).count();
    let (failures, warnings) = (count(Severity::Failure), count(Severity::Warning));
    // Observations with the same mechanism on several GPUs are one (as they are shown).
    let infos = found.iter().filter(|f| f.severity == Severity::Info && f.folded_into.is_none()).count();
    let verdict = if failures + warnings == 0 && !impossible.is_empty() {
        format!(
            "{} that cannot all be true: these are not the figures of one GPU each",
            crate::units::count(impossible.len(), "figure", "figures")
        )
    } else if failures + warnings == 0 && infos > 0 {
        format!("nothing alarming; {} below", crate::units::count(infos, "observation", "observations"))
    } else if failures + warnings == 0 {
        "no findings: no allocation failed, the ranks sized their pools alike, untracked memory never rose by more \
         than 256 MiB between two queries, no category kept growing at the end of the run, and the ranks are \
         balanced"
            .to_string()
    } else {
        let mut parts = Vec::new();
        // Failed ranks counted as report's verdict counts them (one process with a failed
        // allocation is one, whatever its findings); then those that failed without one.
        let (failed_ranks, ranks) = crate::summary::failed_ranks(run, gs);
        let rows: Vec<&culedger_analysis::explain::StartRow> = found
            .iter()
            .filter(|f| f.kind == Kind::FailedStart)
            .flat_map(|f| if let Detail::Start(d) = &f.detail { d.processes.iter().collect() } else { Vec::new() })
            .collect();
        // Those the engine refused by its own check are said so, with the check.
        let refused: Vec<&culedger_analysis::explain::StartRow> = rows.iter().copied().filter(|r| r.refused_by.is_some()).collect();
        let starts = rows.len() - refused.len();
        if failed_ranks > 0 {
            parts.push(if ranks == 1 {
                "the process failed to allocate".to_string()
            } else {
                format!("{failed_ranks} of {ranks} ranks failed to allocate")
            });
        }
        if let Some(f) = refused.first().and_then(|r| r.refused_by.as_ref()) {
            let whom = if refused.len() == 1 { "1 process".to_string() } else { format!("{} processes", refused.len()) };
            let check = match &refused[0].last_query_function {
                Some(function) => format!("by its check in {function}"),
                None => "by its own check".to_string(),
            };
            parts.push(format!("{} refused to start ({whom}, no failed allocation) {check}", f.engine));
        }
        if starts > 0 {
            let more = if failed_ranks > 0 || !refused.is_empty() { " more" } else { "" };
            let noun = if starts == 1 { "process" } else { "processes" };
            parts.push(format!("{starts}{more} {noun} failed without a failed allocation"));
        }
        if parts.is_empty() && failures > 0 {
            parts.push(crate::units::count(failures, "failure", "failures"));
        }
        if warnings > 0 {
            parts.push(crate::units::count(warnings, "warning", "warnings"));
        }
        format!("{}, most important first", parts.join(" and "))
    };
    Explanation {
        schema: EXPLAIN_SCHEMA,
        label: run.label.clone(),
        run_ids: run.run_ids.clone(),
        t0_unix_us: clock.t0_us,
        processes: run.procs.len(),
        devices: gs.len(),
        verdict,
        exit_code: i32::from(failures + warnings > 0 || !impossible.is_empty()),
        findings: found,
        sites_recorded: run.procs.iter().any(callers::recorded),
        notes: notes(run, gs),
        what_to_change,
        impossible,
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
fn notes(run: &Run, gs: &[crate::analysis::DeviceGroup]) -> Vec<String> {
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
