//! One analysis per run, shared by every command: the device groups, the sizing formula
//! evaluated, the findings, the recommendation, the explanation and the summary, each
//! computed once, when first asked for (bytehound's `Data`: built once, every exporter
//! takes it). A command builds one [`Analysis`] per run it reads and hands it to every
//! output it writes: `html` of two runs computes each part twice in all, not once per
//! section; `diff` takes the recommendation, not a whole explanation.

use crate::analysis::DeviceGroup;
use crate::explain::advice::{Advice, Evaluation};
use crate::explain::{Explanation, Finding, Severity};
use crate::load::Run;
use crate::summary::RunSummary;
use std::cell::OnceCell;

/// Everything the commands compute from one run, lazily.
pub struct Analysis<'r> {
    pub run: &'r Run,
    groups: OnceCell<Vec<DeviceGroup<'r>>>,
    evaluation: OnceCell<Option<Evaluation>>,
    findings: OnceCell<Vec<Finding>>,
    advice: OnceCell<Option<Advice>>,
    explanation: OnceCell<Explanation>,
    /// Without and with `--all-categories`.
    summaries: [OnceCell<RunSummary>; 2],
}

impl<'r> Analysis<'r> {
    pub fn new(run: &'r Run) -> Self {
        Analysis {
            run,
            groups: OnceCell::new(),
            evaluation: OnceCell::new(),
            findings: OnceCell::new(),
            advice: OnceCell::new(),
            explanation: OnceCell::new(),
            summaries: [OnceCell::new(), OnceCell::new()],
        }
    }

    /// The processes grouped per host and device.
    pub fn groups(&self) -> &[DeviceGroup<'r>] {
        self.groups.get_or_init(|| crate::analysis::groups(self.run))
    }

    /// The engine's sizing formula evaluated on the run (None: no engine formula applies).
    pub fn evaluation(&self) -> Option<&Evaluation> {
        self.evaluation.get_or_init(|| crate::explain::advice::evaluate_run(self.run, self.groups())).as_ref()
    }

    /// The findings, most important first.
    pub fn findings(&self) -> &[Finding] {
        self.findings.get_or_init(|| {
            let mut found = culedger_analysis::findings::all(self.run, self.groups(), self.evaluation(), &crate::explain::recon::Words);
            // The words, from the figures.
            for f in &mut found {
                crate::explain::prose::word(f, !self.run.skipped.is_empty());
            }
            crate::explain::fold(found)
        })
    }

    /// "What to change": for a run with a failure finding, from the engine's formula.
    pub fn advice(&self) -> Option<&Advice> {
        self.advice
            .get_or_init(|| {
                culedger_analysis::counts::computed(culedger_analysis::counts::Part::Advice);
                let failed = self.findings().iter().any(|f| f.severity == Severity::Failure);
                let ev = self.evaluation().filter(|_| failed)?;
                crate::explain::advice::advise_with(self.run, self.groups(), self.findings(), ev)
            })
            .as_ref()
    }

    /// "What to change" for this failed run with the margin for what it never reached taken
    /// from `good`, a run of the same engine that started: what `good` measured after its pool
    /// (`culedger diff`). None when this run has no advice, `good` failed, or measured nothing.
    pub fn advice_measured_by(&self, good: &Analysis, good_name: &str) -> Option<Advice> {
        self.advice()?;
        let ev = self.evaluation()?;
        let gev = good.evaluation().filter(|g| g.engine == ev.engine)?;
        if good.findings().iter().any(|f| f.severity == Severity::Failure) {
            return None;
        }
        let (bytes, rank) = crate::explain::advice::measured_after_pool(good.groups(), gev)?;
        let measured = crate::explain::advice::Measured { bytes, run: good_name.to_string(), rank };
        crate::explain::advice::advise_measured(self.run, self.groups(), self.findings(), ev, Some(measured))
    }

    /// `culedger explain`'s document.
    pub fn explanation(&self) -> &Explanation {
        self.explanation.get_or_init(|| {
            crate::explain::explain(self.run, self.groups(), self.findings().to_vec(), self.advice().cloned())
        })
    }

    /// `culedger report`'s summary; `all_categories` lists also the categories that held nothing.
    pub fn summary(&self, all_categories: bool) -> &RunSummary {
        self.summaries[usize::from(all_categories)]
            .get_or_init(|| crate::summary::summarize(self.run, self.groups(), all_categories))
    }
}
