//! The values of `culedger diff --format json` (`culedger-diff/1`, docs/cli-json.md): two
//! runs compared device by device, and each side's pool reconciled from its sizing query, side
//! by side. The CLI gathers them and fills the fields that hold words (`headline`,
//! `what_to_change`, `device`, the failures, the rows' names, the processes).

use crate::compare::Row;
use crate::explain::Part;
use serde::Serialize;

/// The schema id of `culedger diff --format json` (docs/cli-json.md).
pub const DIFF_SCHEMA: &str = "culedger-diff/1";

#[derive(Debug, Serialize)]
pub struct Diff {
    /// Always [`DIFF_SCHEMA`].
    pub schema: &'static str,
    pub a: String,
    pub b: String,
    /// The run ids of each side.
    pub a_run_ids: Vec<String>,
    pub b_run_ids: Vec<String>,
    /// The origin of each side's `at_us`: when its first process started (µs since the epoch).
    pub a_t0_unix_us: i64,
    pub b_t0_unix_us: i64,
    /// One sentence: what changed most.
    pub headline: String,
    /// When one side's start failed: the first line of `culedger explain`'s "What to change"
    /// for it (null otherwise).
    pub what_to_change: Option<String>,
    /// When the other side started: the margin What to change keeps for what the failed side
    /// never reached, as the side that started measured it after its pool, in words and bytes
    /// (null otherwise: explain's, the engine pack's fixed one).
    pub what_to_change_margin: Option<String>,
    pub margin_bytes: Option<i64>,
    /// The categories the text lists (non-empty on either side, or all with --all-categories).
    pub categories_shown: Vec<String>,
    pub devices: Vec<DevDiff>,
}

#[derive(Debug, Serialize)]
pub struct DevDiff {
    pub device: String,
    /// Present in only one run: "a" or "b"; null when in both.
    pub only_in: Option<String>,
    /// Per category, sorted by absolute delta.
    pub categories: Vec<Row>,
    /// Tracked live, peak, untracked, driver costs, IPC imported.
    pub totals: Vec<Row>,
    pub probes: Vec<ProbeDiff>,
    pub failures_a: Vec<String>,
    pub failures_b: Vec<String>,
    pub driver_costs: Vec<Row>,
    /// Callers whose live bytes grew (`culedger_analysis::sites`).
    pub sites: Vec<Row>,
    /// Each side's pool reconciled from its sizing query (`culedger explain`), side by side;
    /// null when neither side sized a pool on this device.
    pub since_sizing: Option<SinceSizing>,
}

#[derive(Debug, Serialize)]
pub struct ProbeDiff {
    /// `first`, `sizing` (the last query before the largest allocation) or `last`.
    pub which: String,
    pub a: Option<ProbeSide>,
    pub b: Option<ProbeSide>,
    pub free_delta: Option<i64>,
}

#[derive(Debug, Serialize, Clone)]
pub struct ProbeSide {
    pub pid: i64,
    pub label: String,
    /// On that side's run clock (µs since its first process started).
    pub at_us: i64,
    pub t_ms: i64,
    pub api: String,
    pub free_bytes: Option<i64>,
    pub total_bytes: Option<i64>,
    /// For `sizing`: the allocation that followed.
    pub before: Option<String>,
    /// Category of the allocation that followed, when known.
    pub before_category: Option<String>,
}

/// One line of the side-by-side reconciliation: bytes on each side (null where that side
/// has no such line or no sized pool) and B - A.
#[derive(Debug, Clone, Serialize)]
pub struct SinceRow {
    pub name: String,
    pub kind: LineKind,
    pub a: Option<i64>,
    pub b: Option<i64>,
    pub delta: Option<i64>,
}

/// What a line of the reconciliation is (its `kind` in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    /// Told free at the sizing query.
    Told,
    /// What was taken after it: the pool so far, allocations, hidden driver costs, other
    /// processes, memory no report explains.
    Pool,
    Allocated,
    DriverCost,
    OtherProcesses,
    Unexplained,
    /// Free after the pool, or when it failed; what the failed attempt asked for; by how much
    /// it was short.
    Free,
    Requested,
    ShortBy,
}

impl LineKind {
    /// Told first, then what was taken, then free, requested and short by.
    pub fn rank(self) -> u8 {
        match self {
            LineKind::Told => 0,
            LineKind::Free => 2,
            LineKind::Requested => 3,
            LineKind::ShortBy => 4,
            _ => 1,
        }
    }

    /// Memory taken after the sizing query.
    pub fn taken(self) -> bool {
        self.rank() == 1
    }
}

/// What failed on one side: which part of the pool, its size, the category of the pool and
/// the call.
#[derive(Debug, Clone)]
pub struct SideFailure {
    pub part: Part,
    pub bytes: i64,
    pub category: Option<String>,
    pub api: String,
}

/// The reconciliations of one device in A and in B.
#[derive(Debug, Clone, Serialize)]
pub struct SinceSizing {
    /// The process reconciled on each side, and what failed there (`part (size, api)`).
    pub a_process: Option<String>,
    pub b_process: Option<String>,
    pub a_failed: Option<String>,
    pub b_failed: Option<String>,
    /// What failed, in parts.
    #[serde(skip)]
    pub a_failure: Option<SideFailure>,
    #[serde(skip)]
    pub b_failure: Option<SideFailure>,
    pub rows: Vec<SinceRow>,
}
