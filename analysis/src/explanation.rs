//! `culedger explain --format json` (`culedger-explain/1`, docs/cli-json.md): the envelope
//! ([`Explanation`]) around the findings (`crate::explain`) and the recommendation in words
//! ([`Advice`], `what_to_change`: the numbers of `crate::advice::Advised` with their words
//! beside them). The fields that hold words (`verdict`, `notes`, `impossible`, and Advice's
//! `value_source`, `reserve_words`, `arrivals`' names, `margin_what`, `deciding`, `lines`) are
//! filled by the CLI from the figures.

use crate::advice::{Choice, Interval};
use crate::clock::Clock;
use crate::explain::{Detail, Finding, Kind, Severity, StartRow};
use crate::groups::DeviceGroup;
use crate::load::Run;
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

/// What the explanation's verdict counts, for its words ([`ExplanationWords::verdict`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    pub failures: usize,
    pub warnings: usize,
    /// Observations, those folded under another counted once (as they are shown).
    pub infos: usize,
    /// Figures that cannot all be true.
    pub impossible: usize,
    /// Failed ranks as `culedger report`'s verdict counts them (a process with a failed
    /// allocation is one, whatever its findings), of the ranks (`summary::failed_ranks`).
    pub failed_ranks: usize,
    pub ranks: usize,
    /// Processes the engine refused by its own check, when any.
    pub refused: Option<Refused>,
    /// Processes whose start failed without a failed allocation and that no check refused.
    pub starts: usize,
}

/// Processes an engine refused to start by its own check (no failed allocation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub engine: String,
    pub processes: usize,
    /// The engine function of the first one's last free-memory query (its check), if known.
    pub function: Option<String>,
}

/// The explanation's words: its verdict, what limits it, and a device's impossible figures.
pub trait ExplanationWords {
    /// One line: what the findings say, most important first, or that there is none.
    fn verdict(&self, t: &Tally) -> String;
    /// What limits the explanation: reports that could not be read, processes without a
    /// final report, lost events.
    fn notes(&self, run: &Run, gs: &[DeviceGroup]) -> Vec<String>;
    /// A device's figures that cannot all be true, one line each.
    fn impossible(&self, g: &DeviceGroup) -> Vec<String>;
}

/// `culedger explain`'s document, from the parts of a run's analysis
/// (`crate::run_analysis::Analysis` computes each once): its device groups, its findings
/// (folded) and the recommendation, in `words`.
pub fn explanation(
    run: &Run,
    gs: &[DeviceGroup],
    found: Vec<Finding>,
    what_to_change: Option<Advice>,
    words: &dyn ExplanationWords,
) -> Explanation {
    crate::counts::computed(crate::counts::Part::Explanation);
    let clock = Clock::of(&run.procs);
    let impossible: Vec<String> = gs.iter().flat_map(|g| words.impossible(g)).collect();
    let tally = tally(run, gs, &found, impossible.len());
    Explanation {
        schema: EXPLAIN_SCHEMA,
        label: run.label.clone(),
        run_ids: run.run_ids.clone(),
        t0_unix_us: clock.t0_us,
        processes: run.procs.len(),
        devices: gs.len(),
        verdict: words.verdict(&tally),
        exit_code: i32::from(tally.failures + tally.warnings > 0 || tally.impossible > 0),
        findings: found,
        sites_recorded: run.procs.iter().any(crate::callers::recorded),
        notes: words.notes(run, gs),
        what_to_change,
        impossible,
    }
}

/// What the verdict counts.
fn tally(run: &Run, gs: &[DeviceGroup], found: &[Finding], impossible: usize) -> Tally {
    let count = |sev: Severity| found.iter().filter(|f| f.severity == sev).count();
    let (failures, warnings) = (count(Severity::Failure), count(Severity::Warning));
    // Observations with the same mechanism on several GPUs are one (as they are shown).
    let infos = found.iter().filter(|f| f.severity == Severity::Info && f.folded_into.is_none()).count();
    let (failed_ranks, ranks) = crate::summary::failed_ranks(run, gs);
    let rows: Vec<&StartRow> = found
        .iter()
        .filter(|f| f.kind == Kind::FailedStart)
        .flat_map(|f| if let Detail::Start(d) = &f.detail { d.processes.iter().collect() } else { Vec::new() })
        .collect();
    // Those the engine refused by its own check are told apart, with the check.
    let refused: Vec<&StartRow> = rows.iter().copied().filter(|r| r.refused_by.is_some()).collect();
    Tally {
        failures,
        warnings,
        infos,
        impossible,
        failed_ranks,
        ranks,
        refused: refused.first().and_then(|r| r.refused_by.as_ref()).map(|f| Refused {
            engine: f.engine.clone(),
            processes: refused.len(),
            function: refused[0].last_query_function.clone(),
        }),
        starts: rows.len() - refused.len(),
    }
}
