//! Each part of a run's analysis is computed once per run, whatever the command (a test
//! module of its own: it calls the commands, which sit above `run_analysis`).

use crate::load::Run;
use culedger_analysis::counts::{take_counts, Part};
use std::collections::BTreeMap;

fn fixture(name: &str) -> Run {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    crate::runs::select(crate::load::load_run(&[dir]).unwrap(), &Default::default()).unwrap()
}

fn counts(pairs: &[(Part, usize)]) -> BTreeMap<Part, usize> {
    pairs.iter().copied().collect()
}

/// The page of two runs shows each run's summary, explanation and charts and the diff
/// of the two: each part is computed once per run, however many sections use it.
#[test]
fn html_of_two_runs_computes_each_part_once_per_run() {
    // custom-ar's start failed (an engine formula applies, advice is given); nccl's did not.
    let runs = [fixture("custom-ar"), fixture("nccl")];
    take_counts();
    crate::html::page(&runs).unwrap();
    use Part::*;
    assert_eq!(
        take_counts(),
        counts(&[(Groups, 2), (Evaluation, 2), (Findings, 2), (Fold, 2), (Advice, 2), (Explanation, 2), (Summary, 2)])
    );
}

/// `diff` takes each side's recommendation, not a whole explanation; `export` with both
/// outputs and `plot` group the devices once; `report --brief` explains once; the findings
/// are folded once per run (not again by the explanation).
#[test]
fn every_command_computes_each_part_once() {
    use Part::*;
    let (a, b) = (fixture("custom-ar"), fixture("nccl"));
    take_counts();
    crate::diff::diff(&crate::run_analysis::of(&a), &crate::run_analysis::of(&b), false);
    let diff = take_counts();
    assert_eq!(diff.get(&Explanation), None, "{diff:?}");
    assert_eq!(diff, counts(&[(Groups, 2), (Evaluation, 2), (Findings, 2), (Fold, 2), (Advice, 2)]));

    let analysis = crate::run_analysis::of(&a);
    crate::export::perfetto(&analysis);
    crate::export::memory_viz(&analysis);
    crate::plot::svg(&analysis, false, Default::default()).unwrap();
    crate::screen::document(&analysis, "d");
    analysis.summary(false);
    analysis.explanation();
    assert_eq!(
        take_counts(),
        counts(&[(Groups, 1), (Evaluation, 1), (Findings, 1), (Fold, 1), (Advice, 1), (Explanation, 1), (Summary, 1)])
    );
}
