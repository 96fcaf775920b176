//! `culedger explain --format json` (`culedger-explain/1`, docs/cli-json.md): the envelope
//! ([`Explanation`]) around the findings (`crate::explain`) and the recommendation in words
//! ([`Advice`], `what_to_change`: the numbers of `crate::advice::Advised` with their words
//! beside them). The fields that hold words (`verdict`, `notes`, `impossible`, and Advice's
//! `value_source`, `reserve_words`, `arrivals`' names, `margin_what`, `deciding`, `lines`) are
//! filled by the CLI from the figures.

use crate::advice::{Choice, Interval};
use crate::explain::Finding;
use serde::Serialize;

/// The schema id of `culedger explain --format json` (docs/cli-json.md).
pub const EXPLAIN_SCHEMA: &str = "culedger-explain/1";

/// `culedger explain`'s document.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// Always [`EXPLAIN_SCHEMA`].
    pub schema: &'static str,
    pub label: String,
    pub run_ids: Vec<String>,
    /// The origin of every `at_us`: when the run's first process started (µs since the epoch).
    pub t0_unix_us: i64,
    pub processes: usize,
    pub devices: usize,
    /// One line: how many findings of each severity, or that there is none.
    pub verdict: String,
    /// The exit status: 1 when a finding is a failure or a warning, else 0.
    pub exit_code: i32,
    pub findings: Vec<Finding>,
    /// Whether the reports record call sites (not every writer's reports hold them).
    pub sites_recorded: bool,
    /// What limits the explanation: reports that could not be read, processes without a
    /// final report, lost events.
    pub notes: Vec<String>,
    /// For a failed or refused start of an engine whose sizing formula the rule packs give:
    /// the parameter to change, its value, and the numbers behind it (null otherwise).
    pub what_to_change: Option<Advice>,
    /// Figures that cannot all be true (`DeviceGroup::impossible`), one line each; left out
    /// when none. They make the exit status 1 and are never "nothing alarming".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub impossible: Vec<String>,
}

/// `culedger-explain/1`'s `what_to_change`: the numbers of `crate::advice::Advised`
/// (see there) in the order the schema has them, with their words beside them: where the
/// value comes from, the reserve filled in, what arrived and what each lever took by name,
/// what the margin stands for, the deciding rank, and "What to change", most useful first.
#[derive(Debug, Clone, Serialize)]
pub struct Advice {
    pub engine: String,
    pub parameter: String,
    pub flag: String,
    pub value: f64,
    pub value_source: String,
    /// `lower`, `raise` or `none`.
    pub direction: &'static str,
    pub recommended: Option<f64>,
    pub bound: f64,
    pub interval: Interval,
    pub pool_before_bytes: i64,
    pub pool_after_bytes: Option<i64>,
    pub reserve_bytes: i64,
    pub reserve_words: String,
    pub arrivals: Vec<(String, i64)>,
    pub arrivals_bytes: i64,
    pub margin_bytes: i64,
    pub margin_what: String,
    /// The levers.
    pub alternatives: Vec<AltAdvice>,
    pub choices: Vec<Choice>,
    /// `rank 1 (pid 5102) on GPU 1`.
    pub deciding: String,
    pub lines: Vec<String>,
}

/// A lever in `culedger-explain/1`: what its feature took, the parts named in words.
#[derive(Debug, Clone, Serialize)]
pub struct AltAdvice {
    pub flag: String,
    pub what: String,
    pub bytes: i64,
    pub apis: Vec<String>,
}
