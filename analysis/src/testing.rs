//! What the crate's unit tests share: words that say nothing (the analysis computes its
//! figures without the CLI's) and the CLI's fixtures, loaded as the commands load them.

use crate::clock::Clock;
use crate::costs::CostNote;
use crate::explain::Item;
use crate::explanation::{ExplanationWords, Tally};
use crate::groups::{DeviceGroup, Why};
use crate::load::Run;
use crate::model::Report;
use crate::recon::ReconWords;
use crate::summary::{DeviceSummary, RunPeak, SummaryWords, VerdictOf};
use std::path::Path;

/// Words that say nothing: the analysis computes its figures without the CLI's.
pub struct NoWords;

impl ReconWords for NoWords {
    fn who(&self, _: &Report) -> String {
        String::new()
    }
    fn items(&self, _: &mut [Item], _: &Clock) {}
}

impl SummaryWords for NoWords {
    fn verdict(&self, _: &VerdictOf) -> String {
        String::new()
    }
    fn notes(&self, _: Option<&[RunPeak]>, _: &Run, _: &[DeviceGroup], _: &[DeviceSummary]) -> Vec<String> {
        Vec::new()
    }
    fn status(&self, _: &Report, _: &Run) -> String {
        String::new()
    }
    fn impossible(&self, _: &DeviceGroup) -> Vec<String> {
        Vec::new()
    }
    fn why(&self, _: &[Why], _: &Clock) -> String {
        String::new()
    }
    fn cost_notes(&self, _: &[CostNote], _: &Clock) -> Vec<String> {
        Vec::new()
    }
}

impl ExplanationWords for NoWords {
    /// The tally itself, for the test to read.
    fn verdict(&self, t: &Tally) -> String {
        format!("{t:?}")
    }
    fn notes(&self, _: &Run, _: &[DeviceGroup]) -> Vec<String> {
        Vec::new()
    }
    fn impossible(&self, _: &DeviceGroup) -> Vec<String> {
        Vec::new()
    }
}

pub fn fixture(name: &str) -> Run {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/fixtures").join(name);
    let run = crate::load::load_run(&[dir], &mut |e| panic!("{e:?}")).unwrap();
    crate::runs::select(run, &Default::default()).unwrap()
}
