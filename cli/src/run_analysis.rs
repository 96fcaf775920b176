//! A run's analysis in the CLI's words: the analysis crate computes each part of a run once
//! (`culedger_analysis::run_analysis::Analysis`: the device groups, the sizing formula
//! evaluated, the findings, the recommendation, the explanation and the summary); [`Words`]
//! writes the fields the schemas give in words, from the figures, with the renderers' words
//! (`explain::prose`, `explain::advice::words`, `summary::ReportWords`, `explain::recon`).
//! Every command builds one per run it reads ([`of`]) and hands it to every output it writes.

use crate::explain::advice::Evaluation;
use crate::explain::{Advice, Finding};
use crate::load::Run;
use culedger_analysis::advice::Advised;
use culedger_analysis::explanation::ExplanationWords;
use culedger_analysis::recon::ReconWords;
use culedger_analysis::run_analysis::AnalysisWords;
use culedger_analysis::summary::SummaryWords;

pub use culedger_analysis::run_analysis::Analysis;

/// The CLI's words for every part of a run's analysis.
pub struct Words;

impl AnalysisWords for Words {
    fn recon(&self) -> &dyn ReconWords {
        &crate::explain::recon::Words
    }

    fn summary(&self) -> &dyn SummaryWords {
        &crate::summary::ReportWords
    }

    fn explanation(&self) -> &dyn ExplanationWords {
        &crate::explain::ExplainWords
    }

    fn finding(&self, f: &mut Finding, skipped: bool) {
        crate::explain::prose::word(f, skipped)
    }

    fn folded_title(&self, row: &[&Finding]) -> Option<String> {
        crate::explain::prose::group_title(row)
    }

    fn advice(&self, a: &Advised, ev: &Evaluation) -> Advice {
        crate::explain::advice::words::advice(a, ev)
    }
}

/// The analysis of `run`, in the CLI's words.
pub fn of(run: &Run) -> Analysis<'_> {
    Analysis::new(run, &Words)
}
