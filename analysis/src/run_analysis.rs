//! One analysis per run, shared by every command: the device groups, the sizing formula
//! evaluated, the findings, the recommendation, the explanation and the summary, each
//! computed once, when first asked for (bytehound's `Data`: built once, every exporter
//! takes it). A command builds one [`Analysis`] per run it reads and hands it to every
//! output it writes: `html` of two runs computes each part twice in all, not once per
//! section; `diff` takes the recommendation, not a whole explanation.
//!
//! The parts are numbers and typed values; the few fields the schemas give in words are
//! written by the [`AnalysisWords`] the analysis is built with (the CLI's), from the figures.

use crate::advice::{Advised, Measured};
use crate::explain::{Finding, Severity};
use crate::explanation::{Advice, Explanation, ExplanationWords};
use crate::groups::DeviceGroup;
use crate::load::Run;
use crate::recon::ReconWords;
use crate::sizing::Evaluation;
use crate::summary::{RunSummary, SummaryWords};
use std::cell::OnceCell;

/// The words of a run's analysis: those of each part, written by the renderers' side.
pub trait AnalysisWords {
    /// How a process is named and a reconciliation's lines.
    fn recon(&self) -> &dyn ReconWords;
    /// `culedger report`'s sentences.
    fn summary(&self) -> &dyn SummaryWords;
    /// `culedger explain`'s verdict and notes.
    fn explanation(&self) -> &dyn ExplanationWords;
    /// A finding's title and conclusion (and the fields the JSON gives in words), from its
    /// figures; `skipped`: some of the run's reports could not be read.
    fn finding(&self, f: &mut Finding, skipped: bool);
    /// The title of findings folded into one row, the first and those folded into it, by host
    /// and GPU (`crate::findings::fold`).
    fn folded_title(&self, row: &[&Finding]) -> Option<String>;
    /// The recommendation in words (`culedger-explain/1`'s `what_to_change`).
    fn advice(&self, a: &Advised, ev: &Evaluation) -> Advice;
}

/// Everything the commands compute from one run, lazily.
pub struct Analysis<'r> {
    pub run: &'r Run,
    words: &'r dyn AnalysisWords,
    groups: OnceCell<Vec<DeviceGroup<'r>>>,
    evaluation: OnceCell<Option<Evaluation>>,
    findings: OnceCell<Vec<Finding>>,
    advice: OnceCell<Option<Advice>>,
    explanation: OnceCell<Explanation>,
    /// Without and with `--all-categories`.
    summaries: [OnceCell<RunSummary>; 2],
}

impl<'r> Analysis<'r> {
    /// The analysis of `run`, its words written by `words`.
    pub fn new(run: &'r Run, words: &'r dyn AnalysisWords) -> Self {
        Analysis {
            run,
            words,
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
        self.groups.get_or_init(|| crate::groups::groups(self.run))
    }

    /// The engine's sizing formula evaluated on the run (None: no engine formula applies).
    pub fn evaluation(&self) -> Option<&Evaluation> {
        self.evaluation
            .get_or_init(|| crate::sizing::evaluate_run(self.run, self.groups(), self.words.recon()))
            .as_ref()
    }

    /// The findings, most important first, worded and folded.
    pub fn findings(&self) -> &[Finding] {
        self.findings.get_or_init(|| {
            let mut found = crate::findings::all(self.run, self.groups(), self.evaluation(), self.words.recon());
            for f in &mut found {
                self.words.finding(f, !self.run.skipped.is_empty());
            }
            crate::findings::fold(found, &|row| self.words.folded_title(row))
        })
    }

    /// "What to change": for a run with a failure finding, from the engine's formula.
    pub fn advice(&self) -> Option<&Advice> {
        self.advice
            .get_or_init(|| {
                crate::counts::computed(crate::counts::Part::Advice);
                let failed = self.findings().iter().any(|f| f.severity == Severity::Failure);
                let ev = self.evaluation().filter(|_| failed)?;
                self.advised(ev, None)
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
        let (bytes, rank) = crate::advice::measured_after_pool(good.groups(), gev, self.words.recon())?;
        self.advised(ev, Some(Measured { bytes, run: good_name.to_string(), rank }))
    }

    fn advised(&self, ev: &Evaluation, measured: Option<Measured>) -> Option<Advice> {
        crate::advice::advised(self.run, self.groups(), self.findings(), ev, measured, self.words.recon())
            .map(|a| self.words.advice(&a, ev))
    }

    /// `culedger explain`'s document.
    pub fn explanation(&self) -> &Explanation {
        self.explanation.get_or_init(|| {
            crate::explanation::explanation(
                self.run,
                self.groups(),
                self.findings().to_vec(),
                self.advice().cloned(),
                self.words.explanation(),
            )
        })
    }

    /// `culedger report`'s summary; `all_categories` lists also the categories that held nothing.
    pub fn summary(&self, all_categories: bool) -> &RunSummary {
        self.summaries[usize::from(all_categories)]
            .get_or_init(|| crate::summary::summarize(self.run, self.groups(), all_categories, self.words.summary()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::{take_counts, Part};
    use crate::testing::{fixture, NoWords};
    use serde_json::{json, Value};
    use std::path::Path;

    impl AnalysisWords for NoWords {
        fn recon(&self) -> &dyn ReconWords {
            self
        }
        fn summary(&self) -> &dyn SummaryWords {
            self
        }
        fn explanation(&self) -> &dyn ExplanationWords {
            self
        }
        fn finding(&self, _: &mut Finding, _: bool) {}
        fn folded_title(&self, _: &[&Finding]) -> Option<String> {
            None
        }
        fn advice(&self, a: &Advised, ev: &Evaluation) -> Advice {
            Advice {
                engine: ev.sizing.engine.clone(),
                parameter: ev.sizing.parameter.name.clone(),
                flag: ev.sizing.parameter.flag.clone(),
                value: a.value,
                value_source: String::new(),
                direction: a.direction.as_str(),
                recommended: a.recommended,
                bound: a.bound,
                interval: a.interval,
                pool_before_bytes: a.pool_before_bytes,
                pool_after_bytes: a.pool_after_bytes,
                reserve_bytes: a.reserve_bytes,
                reserve_words: String::new(),
                arrivals: Vec::new(),
                arrivals_bytes: a.arrivals_bytes,
                margin_bytes: a.margin_bytes,
                margin_what: String::new(),
                alternatives: Vec::new(),
                choices: a.choices.clone(),
                deciding: String::new(),
                lines: Vec::new(),
            }
        }
    }

    /// The figures of `culedger-explain/1` that hold no words.
    fn figures(e: &Value) -> Value {
        let findings: Vec<Value> = e["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| json!([f["kind"], f["severity"], f["device"], f["pids"], f["folded_into"]]))
            .collect();
        let w = &e["what_to_change"];
        let advice = [
            "engine", "parameter", "flag", "value", "direction", "recommended", "bound", "interval",
            "pool_before_bytes", "pool_after_bytes", "reserve_bytes", "arrivals_bytes", "margin_bytes", "choices",
        ]
        .map(|k| w[k].clone());
        json!([e["processes"], e["devices"], e["exit_code"], e["sites_recorded"], findings, advice])
    }

    /// Computed without the CLI's words, the explanation's figures are those of the CLI's
    /// golden `explain --format json` of the same run (cli/tests/golden/explain-custom-ar.json),
    /// and each part is computed once however many times it is asked for.
    #[test]
    fn each_part_once_and_the_figures_need_no_words() {
        let run = fixture("custom-ar");
        take_counts();
        let a = Analysis::new(&run, &NoWords);
        for _ in 0..2 {
            a.groups();
            a.evaluation();
            a.findings();
            a.advice();
            a.explanation();
            a.summary(false);
        }
        use Part::*;
        let once: std::collections::BTreeMap<Part, usize> =
            [Groups, Evaluation, Findings, Fold, Advice, Explanation, Summary].map(|p| (p, 1)).into_iter().collect();
        assert_eq!(take_counts(), once);

        let golden: Value = serde_json::from_slice(
            &std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/golden/explain-custom-ar.json"))
                .unwrap(),
        )
        .unwrap();
        let ours = serde_json::to_value(a.explanation()).unwrap();
        assert_eq!(figures(&ours), figures(&golden));
        assert_eq!(ours["what_to_change"]["recommended"], json!(0.84));
        // Both ranks failed to allocate: the verdict's tally, which the CLI words.
        let t = &a.explanation().verdict;
        assert!(t.contains("failures: 2, warnings: 0, infos: 1, impossible: 0, failed_ranks: 2, ranks: 2"), "{t}");
    }
}
