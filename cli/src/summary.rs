//! The run summary's words: the analysis crate computes `culedger report`'s summary, the
//! values of `culedger-report/1` (`culedger_analysis::summary`: the verdict, the overview,
//! and per process and per device the figures), and asks for the few sentences the schema
//! holds; [`ReportWords`] writes them. Every renderer of the summary (text, markdown, JSON,
//! the one screen, `top`, `metrics`) prints the same [`RunSummary`].

use crate::analysis::{gpu_token, gpu_words, DeviceGroup, GroupWords, Why};
use crate::clock::Clock;
use crate::costs::CostNote;
use crate::load::Run;
use crate::model::Report;
use crate::units::fmt_bytes;
pub use culedger_analysis::summary::*;

/// The summary's sentences, from what the analysis computed.
pub struct ReportWords;

impl SummaryWords for ReportWords {
    fn verdict(&self, v: &VerdictOf) -> String {
        match v {
            VerdictOf::Failed { failed, ranks, smallest, largest, failures } => {
                let size = crate::units::fmt_range(*smallest, *largest);
                let who = if *ranks == 1 { "the process".to_string() } else { format!("{failed} of {ranks} ranks") };
                let times =
                    if *failures as usize > *failed { format!(" ({failures} failed allocations)") } else { String::new() };
                format!("{who} failed to allocate {size}{times}; see `culedger explain` for why")
            }
            VerdictOf::Fullest { group: g, reading: r } => format!(
                "no allocation failed; the fullest device was {} with {} used of {} at {}: {} tracked, {} untracked",
                g.title(),
                fmt_bytes(r.used_bytes),
                fmt_bytes(r.total_bytes),
                crate::clock::fmt_secs(r.at_us),
                fmt_bytes(r.tracked_bytes),
                fmt_bytes(r.untracked_bytes)
            ),
            VerdictOf::Peak { group: g } => {
                let total = g.total_bytes().map(|t| format!(" of {}", fmt_bytes(t))).unwrap_or_default();
                format!(
                    "no allocation failed; the fullest device was {} with {} tracked at its peak{total} (no \
                     free-memory query measured what else it held)",
                    g.title(),
                    fmt_bytes(g.peak())
                )
            }
            VerdictOf::Nothing => "no allocation failed; no device memory was tracked".to_string(),
        }
    }

    fn notes(&self, sequential: Option<&[RunPeak]>, run: &Run, gs: &[DeviceGroup], devices: &[DeviceSummary]) -> Vec<String> {
        sequential
            .map(sequential_runs_note)
            .into_iter()
            .chain(crate::analysis::ordinal_fallback_note(run))
            .chain(crate::analysis::pci_numbering_note(gs))
            .chain(devices.iter().flat_map(|d| d.impossible.iter().map(|l| format!("Impossible figures: {l}."))))
            .collect()
    }

    fn status(&self, r: &Report, run: &Run) -> String {
        crate::runs::status_in(r, run)
    }

    fn impossible(&self, g: &DeviceGroup) -> Vec<String> {
        g.impossible_lines()
    }

    fn why(&self, ws: &[Why], c: &Clock) -> String {
        crate::analysis::whys(ws, c)
    }

    fn cost_notes(&self, ns: &[CostNote], c: &Clock) -> Vec<String> {
        crate::costs::notes(ns, c)
    }
}

/// The sentence saying that the merged runs never ran at the same time, with each run's own
/// tracked peak and where it was: the merged figures add their processes up as if they had
/// shared the GPUs.
fn sequential_runs_note(runs: &[RunPeak]) -> String {
    let peaks: Vec<String> = runs
        .iter()
        .map(|r| match &r.fullest {
            Some(p) => {
                let total = p.total_bytes.map(|t| format!(" of {}", fmt_bytes(t))).unwrap_or_default();
                let gpu = gpu_words(&gpu_token(p.index, p.mig_index, p.uuid_name.as_deref()));
                format!("{} {} on {} {gpu}{total}", r.id, fmt_bytes(p.peak_bytes), p.host)
            }
            None => format!("{} nothing tracked", r.id),
        })
        .collect();
    format!(
        "The {} merged runs ran one after another, never at the same time: the figures below add them up as if \
         they had shared the GPUs. Each run's own tracked peak: {}.",
        runs.len(),
        peaks.join("; ")
    )
}
