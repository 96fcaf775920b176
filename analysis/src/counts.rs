//! How many times each part of a run's analysis was computed on this thread: the parts'
//! own functions count themselves (`groups::groups`, `explanation::explanation`, ...), so a
//! test sees any command that computes one twice, through the one analysis per run
//! (`run_analysis::Analysis`) or around it.

/// The parts of an analysis, as the count of computations names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Groups,
    Evaluation,
    Findings,
    /// Alike findings folded into one (`findings::fold`).
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

thread_local! {
    /// Elementary steps of a device group's analysis on this thread: a member's record
    /// placed in time ([`crate::groups::Member::abs_us`], `abs_of`) or its end looked up
    /// (`ended_us`, and once per member for the group's end). Every per-reading,
    /// per-sample or per-member loop of the analysis goes through these, so a test sees
    /// the cost grow with the square of the processes (read by the tests).
    static STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts one elementary step on this thread.
#[inline]
pub fn step() {
    STEPS.with(|s| s.set(s.get().wrapping_add(1)));
}

/// The steps counted on this thread so far, and the count reset (for tests).
pub fn take_steps() -> u64 {
    STEPS.with(|s| s.replace(0))
}
