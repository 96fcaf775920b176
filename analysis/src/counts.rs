//! How many times each part of a run's analysis was computed on this thread: the parts'
//! own functions count themselves (`groups::groups`, the CLI's `explain::explain`, ...), so a
//! test sees any command that computes one twice, through the CLI's one analysis per run or
//! around it.

/// The parts of an analysis, as the count of computations names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Groups,
    Evaluation,
    Findings,
    /// Alike findings folded into one (`explain::fold`).
    Fold,
    Advice,
    Explanation,
    Summary,
}

thread_local! {
    /// How many times each part was computed on this thread (read by the tests).
    static COMPUTED: std::cell::RefCell<std::collections::BTreeMap<Part, usize>> = Default::default();
}

/// Counts one computation of `part` on this thread.
pub fn computed(part: Part) {
    COMPUTED.with(|c| *c.borrow_mut().entry(part).or_default() += 1);
}

/// The computations counted on this thread so far, and the count reset (for tests).
pub fn take_counts() -> std::collections::BTreeMap<Part, usize> {
    COMPUTED.with(|c| std::mem::take(&mut *c.borrow_mut()))
}
