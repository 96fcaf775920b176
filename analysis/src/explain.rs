//! The values of `culedger explain --format json` (`culedger-explain/1`, docs/cli-json.md):
//! the findings, their figures and the reconciliations, as typed values. The CLI computes
//! them (its `explain` findings) and writes their words; the fields that hold words
//! (`title`, `text`, `process`, `what`, `part`, `status`, `after_pool`, `why`) are filled by
//! the CLI from the figures (`part` from [`FailDetail::part_of`], `after_pool` from
//! [`FailDetail::after`], `status` from [`StartRow::ended`], `why` from [`SizingRow::why_of`]);
//! `process` by the words the computation is given (`crate::recon::ReconWords::who`).

pub use crate::process::Who;
use crate::process::RankId;
use serde::Serialize;
use std::collections::BTreeMap;

/// What a finding is about (its `kind` in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    FailedAllocation,
    FailedStart,
    Sizing,
    UntrackedGrowth,
    Growth,
    Imbalance,
}

/// How much a finding matters, most first (its `severity` in the JSON). `Info` is context,
/// or a rise the free memory left absorbs: it does not change the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Failure,
    Warning,
    Info,
}

impl Severity {
    /// As the JSON writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Failure => "failure",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub kind: Kind,
    pub severity: Severity,
    /// One line.
    pub title: String,
    /// The conclusion, as an engineer would write it.
    pub text: String,
    pub host: Option<String>,
    /// The device index, for findings about one device.
    pub device: Option<i64>,
    /// For a finding about a MIG device: its index under its GPU (`device`); left out
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig_index: Option<i64>,
    /// Which device group of the run (two MIG devices of one GPU share `device`, and so may
    /// groups of reports that name no physical GPU).
    #[serde(skip)]
    pub gpu: Option<crate::groups::GpuId>,
    /// The processes involved.
    pub pids: Vec<i64>,
    /// The call sites involved (short forms); empty when the reports record none.
    pub callers: Vec<String>,
    /// Kind-specific figures (docs/explain.md).
    pub detail: Detail,
    /// For a finding with the same mechanism as an earlier one (the same failure or rise on
    /// another GPU, differing only in its rank, GPU and figures): the index in `findings` of
    /// the first of them, under which the text, markdown and page show it as one row. Left
    /// out of the JSON for the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folded_into: Option<usize>,
    /// For the first of findings folded together: a title that names every GPU and process
    /// of them (the text and markdown heading, the page's card). Left out of the JSON for
    /// the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folded_title: Option<String>,
    /// For a finding about one GPU whose host's numbering is not known (no NVML, and no
    /// process saw every GPU there): the GPU's name, its UUID's (`GPU-8f2e1a0b`), which the
    /// text names it by; `device` is then its place in PCI bus order among the GPUs seen.
    /// Left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_name: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Detail {
    Failure(Box<FailDetail>),
    Sizing(SizingDetail),
    Untracked(Box<UntrackedDetail>),
    Growth(GrowthDetail),
    Imbalance(ImbalanceDetail),
    Start(StartDetail),
}

/// A start that failed without a failed allocation.
#[derive(Debug, Clone, Serialize)]
pub struct StartDetail {
    pub processes: Vec<StartRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StartRow {
    pub pid: i64,
    pub process: String,
    /// How it ended ([`StartRow::ended`]) in words: `exited with status 1`, `was killed by
    /// SIGKILL`; written by the CLI.
    pub status: String,
    /// How it ended.
    #[serde(skip)]
    pub ended: Ended,
    /// Its last free-memory query (on the run's clock) and the function that made it.
    pub last_query_at_us: Option<i64>,
    pub last_query_function: Option<String>,
    /// The device of that query: its group (a MIG device is a device of its own), named as
    /// the CLI names it from the group's number, MIG index and UUID name.
    #[serde(skip)]
    pub last_query_device: Option<(i64, Option<i64>, crate::groups::GpuId)>,
    /// The engine's own check that refused the start, when its formula shows one failing at
    /// the run's value (vLLM 0.33 `request_memory` from `Worker.init_device`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_by: Option<StartRefusal>,
}

/// An engine's refusal to start, by its own check: what the check says, and by how much the
/// run's value missed it.
#[derive(Debug, Clone, Serialize)]
pub struct StartRefusal {
    pub engine: String,
    /// The engine's message (`Free memory on device ... on startup is less than desired GPU
    /// memory utilization`).
    pub message: String,
    /// The parameter's flag and the run's value.
    pub flag: String,
    pub value: f64,
    /// How far short the check fell at that value.
    pub short_bytes: i64,
}

/// How a process whose start failed ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Killed by this signal.
    Killed(i64),
    /// Exited with this status.
    Exited(i64),
    /// Its report records neither.
    Failed,
}

impl Ended {
    /// As the process's final report records it (a signal wins over an exit status).
    pub fn of(exit_code: Option<i64>, signal: Option<i64>) -> Self {
        match (exit_code, signal) {
            (_, Some(sig)) => Ended::Killed(sig),
            (Some(c), _) => Ended::Exited(c),
            _ => Ended::Failed,
        }
    }
}

/// Which part of what a process was allocating a failed attempt is: of its burst
/// (docs/explain.md, "Definitions"), and whether that burst is a pool. `kv`: the burst's
/// category is the KV pool's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// A lone request that is no pool.
    Allocation,
    /// The last of a burst of this many requests that is no pool.
    OfBurst(usize),
    /// A whole pool asked for in one request.
    Pool { kv: bool },
    /// The second of two equal halves of a pool.
    SecondHalf { kv: bool },
    /// Part `n` of a pool asked for in `n` requests (or more).
    PartOf { n: usize, kv: bool },
}

impl Part {
    /// The failed request belongs to a pool.
    pub fn is_pool(self) -> bool {
        !matches!(self, Part::Allocation | Part::OfBurst(_))
    }

    /// The pool is the KV pool.
    pub fn kv(self) -> bool {
        matches!(self, Part::Pool { kv: true } | Part::SecondHalf { kv: true } | Part::PartOf { kv: true, .. })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FailDetail {
    pub pid: i64,
    pub process: String,
    pub label: String,
    /// On the run's clock.
    pub at_us: i64,
    pub api: String,
    /// Requested.
    pub bytes: i64,
    pub error_name: String,
    pub caller: Option<String>,
    /// The explaining frame and its callers (`a <- b <- c`).
    pub caller_chain: Option<String>,
    /// Which part of what it was allocating ([`FailDetail::part_of`]) in words: `the second
    /// half of its pool`, `its pool`, ...; written by the CLI.
    pub part: String,
    /// Which part of what it was allocating.
    #[serde(skip)]
    pub part_of: Part,
    /// What the request was for when it came after the process's KV pool in a phase of its
    /// own ([`FailDetail::after`]) in words (`its CUDA graph capture after its KV cache`);
    /// absent otherwise. Written by the CLI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_pool: Option<String>,
    /// What the request was for when it came after the process's KV pool in a phase of its
    /// own.
    #[serde(skip)]
    pub after: Option<AfterPool>,
    /// The category of the burst's successful allocations (a failure records none).
    pub category: Option<String>,
    /// Attempts of the burst up to this failure, and their sum (what the process asked for).
    pub burst_attempts: usize,
    pub burst_bytes: i64,
    /// Failed attempts of the same burst after this one.
    pub later_failures: usize,
    /// From the query the process sized from to the failure; null without a query before it.
    pub reconciliation: Option<Recon>,
    /// Free memory when it failed: measured by the query that followed, else estimated.
    pub free_bytes: Option<i64>,
    pub free_measured: bool,
    /// What the request needed: its size, or for a call that asks the driver for memory
    /// without a size (an IPC open, peer access) what the same call cost the process when it
    /// succeeded (0 when unknown).
    pub needed_bytes: i64,
    /// Needed minus free (positive: the shortfall; nothing left is a shortage too).
    pub short_by_bytes: Option<i64>,
    /// What the process held on the GPU when it failed.
    #[serde(skip)]
    pub held_bytes: i64,
    /// Findings with the same mechanism share it (the text folds them).
    #[serde(skip)]
    pub signature: String,
    /// The engine sized every rank from the minimum over the ranks, where this rank's own
    /// query told more (the text says so).
    #[serde(skip)]
    pub minimum: Option<Minimum>,
    /// When the reconciliation starts from the query the engine sized its pool from (not the
    /// last query before the request): the engine and its sizing function (the CLI writes
    /// `vLLM's Worker.determine_available_memory`).
    #[serde(skip)]
    pub sized_by: Option<SizedBy>,
}

/// A phase of its own that a failed request came in, after the process allocated its KV pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterPool {
    /// Its CUDA graph capture (vLLM's compile_or_warm_up_model -> capture_model after
    /// initialize_from_config; SGLang's init_cuda_graphs after init_memory_pool).
    GraphCapture,
}

/// The engine function that sized a pool: the engine's name and its sizing function, as the
/// rule pack names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizedBy {
    pub engine: String,
    pub function: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SizingRow {
    /// Which process on which GPU (`pid`, `process`, `host`, `device`, `mig_index`).
    #[serde(flatten)]
    pub rank: RankId,
    /// The process's first query on the device, when it is not the sizing query.
    pub first_told_bytes: Option<i64>,
    pub first_at_us: Option<i64>,
    /// The sizing query.
    pub told_bytes: i64,
    pub at_us: i64,
    /// What its burst asked for (failed attempts included).
    pub pool_bytes: i64,
    /// `pool / told`.
    pub fraction: f64,
    pub failed: bool,
    /// Difference from the reference pool (`SizingDetail::reference_pool_bytes`), in percent.
    pub differs_pct: f64,
    pub flagged: bool,
    /// Why a flagged pool differs ([`SizingRow::why_of`]) in words; written by the CLI.
    pub why: Option<String>,
    pub caller: Option<String>,
    /// Why a flagged pool differs.
    #[serde(skip)]
    pub why_of: Option<WhyDiffers>,
}

/// Why a rank's pool differs from the other ranks'.
#[derive(Debug, Clone, PartialEq)]
pub enum WhyDiffers {
    /// It was told `delta` bytes more (negative: less) free memory than the other ranks (their
    /// median); who else held memory on its GPU at its query, in the device group's member
    /// order: processes with live allocations (pid, bytes, who) and processes that held only
    /// a context.
    Told { delta: i64, allocations: Vec<(i64, i64, Who)>, contexts: Vec<Who> },
    /// It asked for another share of what it was told (`fraction`) than the other ranks
    /// (`others`, the reference pool over their median told).
    Share { fraction: f64, others: f64 },
}

#[derive(Debug, Clone, Serialize)]
pub struct SizingDetail {
    pub ranks: Vec<SizingRow>,
    /// The pool most ranks asked for: the median of the largest group of ranks whose pools
    /// lie within 1% of each other (ties: the group of larger pools), and what they were told.
    pub reference_pool_bytes: i64,
    pub reference_told_bytes: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct UntrackedDetail {
    pub from: QueryRef,
    pub to: QueryRef,
    pub untracked_from_bytes: i64,
    pub untracked_to_bytes: i64,
    pub rise_bytes: i64,
    /// The hidden costs measured and the contexts created in between.
    pub items: Vec<Item>,
    /// The rise minus the items.
    pub unexplained_bytes: i64,
    /// Processes that sized a pool from a query taken before the rise.
    pub sized_before: Vec<i64>,
    /// Of those, the ones whose engine estimated memory to come after that query and kept it
    /// out of the pool (vLLM 0.33's CUDA-graph estimate): pid, bytes, and what, in the pack's
    /// words. Empty when the run is no known engine's or its formula has no such term.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub estimated_before: Vec<(i64, i64, String)>,
    /// Free memory at the later query.
    pub free_after_bytes: i64,
    /// The processes of the device, by pid (the first member of a pid).
    #[serde(skip)]
    pub names: BTreeMap<i64, Who>,
    /// Findings with the same mechanism share it (the text folds them).
    #[serde(skip)]
    pub signature: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CatGrowth {
    pub name: String,
    pub peak_bytes: i64,
    /// When the peak was first reached, on the run's clock.
    pub peak_at_us: i64,
    /// Live bytes when the last third of the run began, and at its end.
    pub third_bytes: i64,
    pub end_bytes: i64,
    pub growth_bytes: i64,
    pub bytes_per_s: i64,
    /// Rose in each of the three parts of the last third.
    pub kept_growing: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GrowthDetail {
    /// The last third of the run on this device, on the run's clock.
    pub from_us: i64,
    pub to_us: i64,
    pub categories: Vec<CatGrowth>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RankPeaks {
    pub pid: i64,
    pub process: String,
    /// Peak bytes per category (summed over the rank's devices), in category order.
    pub peaks: Vec<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    pub category: String,
    pub min_bytes: i64,
    pub min_pid: i64,
    pub max_bytes: i64,
    pub max_pid: i64,
    /// `(max - min) / max`, in percent.
    pub spread_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImbalanceDetail {
    pub ranks: Vec<RankPeaks>,
    pub categories: Vec<Spread>,
    /// Ranks left out because an allocation of theirs failed (their figures stop there).
    pub failed_left_out: Vec<i64>,
}

/// The engine sized every rank from the minimum over the ranks (`used`), where this rank's
/// own query told more (`told`).
#[derive(Debug, Clone)]
pub struct Minimum {
    pub used: i64,
    pub told: i64,
    pub engine: String,
}

/// A free-memory query, as the reconciliation shows it.
#[derive(Debug, Clone, Serialize)]
pub struct QueryRef {
    pub pid: i64,
    /// The process in words (`rank 1 (pid 5102)`).
    pub process: String,
    /// On the run's clock (µs since its first process started).
    pub at_us: i64,
    pub api: String,
    pub free_bytes: i64,
    pub total_bytes: Option<i64>,
    /// Its call site (short form), when recorded.
    pub caller: Option<String>,
    /// The explaining frame and its callers (`a <- b <- c`), when the report keeps frames.
    pub caller_chain: Option<String>,
}

/// What a line of a reconciliation is (its `kind` in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// The pool's own allocations so far.
    Pool,
    /// The process's other allocations.
    Allocated,
    /// Hidden driver memory a measured call took.
    DriverCost,
    /// What other processes took on the device.
    OtherProcesses,
    /// A context created in the window (untracked growth).
    Context,
}

impl ItemKind {
    /// As the JSON writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Pool => "pool",
            ItemKind::Allocated => "allocated",
            ItemKind::DriverCost => "driver_cost",
            ItemKind::OtherProcesses => "other_processes",
            ItemKind::Context => "context",
        }
    }
}

/// A context a process created on the device: by peer access (else by starting to use the
/// GPU), and whether its size is known (estimated from a process's first query).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextOf {
    pub peer: bool,
    pub size_known: bool,
}

/// What a line of a reconciliation is about, as typed values; the CLI words it (the item's
/// `what`) and decides by it, never by the words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The burst's successful attempts so far: their main category and how many.
    Pool { category: String, allocations: usize },
    /// The reconciled process's other allocations of one category, net (negative: freed).
    Allocated { category: String, by: Who, net: i64 },
    /// The hidden cost of one API's calls by one process.
    DriverCost { api: String, calls: i64, by: Who },
    /// What another process did: its tracked allocations (net), its own driver costs (bytes,
    /// APIs in order, repeats next to each other once) and the context it created, if any.
    Process { who: Who, tracked: i64, costs: Option<(i64, Vec<String>)>, context: Option<ContextOf> },
    /// The context one process created (its size known), alone.
    Context { who: Who, peer: bool },
    /// The contexts of several processes (their pids are the item's), all by peer access or not.
    Contexts { count: usize, peer: bool },
}

impl Subject {
    /// A context or contexts alone.
    pub fn contexts_only(&self) -> bool {
        matches!(self, Subject::Context { .. } | Subject::Contexts { .. })
    }

    /// Contexts alone, or a process's figures with its context among them.
    pub fn holds_context(&self) -> bool {
        self.contexts_only() || matches!(self, Subject::Process { context: Some(_), .. })
    }
}

/// A note on a line of a reconciliation, as typed values; the CLI words it (the item's
/// `notes`, each sentence once).
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// What de-noising a measured call subtracted or left uncertain.
    Cost(crate::costs::CostNote),
    /// A context's size is unknown: no process queried free memory alone on this GPU.
    ContextSizeUnknown,
}

/// One line of a reconciliation.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub kind: ItemKind,
    /// What it is, in words: the CLI's wording of `subject`.
    pub what: String,
    /// What it is, as typed values.
    #[serde(skip)]
    pub subject: Subject,
    pub pids: Vec<i64>,
    pub category: Option<String>,
    pub api: Option<String>,
    /// Calls (driver costs) or allocations (pool).
    pub calls: i64,
    pub bytes: i64,
    /// Driver costs as measured, before subtracting what other processes did meanwhile.
    pub measured_bytes: Option<i64>,
    /// Contains an estimate (a context's size).
    pub estimated: bool,
    /// Part of a measurement could not be attributed either way.
    pub uncertain: bool,
    /// A context a process created when it began to use the GPU (not by peer access):
    /// expected memory, not counted as untracked growth.
    pub expected: bool,
    /// Call sites involved (short forms).
    pub callers: Vec<String>,
    /// The notes in words: the CLI's wording of `noted`, each sentence once.
    pub notes: Vec<String>,
    /// The notes as typed values, in order (repeats kept).
    #[serde(skip)]
    pub noted: Vec<Note>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Recon {
    /// The query the process sized from.
    pub query: QueryRef,
    pub items: Vec<Item>,
    /// Free memory at the end: measured by `closed_by`, else the told free minus the items.
    pub free_bytes: i64,
    /// The query that measured `free_bytes` (the process's next record after the end).
    pub closed_by: Option<QueryRef>,
    /// Told minus free minus the items, when the free memory was measured.
    pub unexplained_bytes: Option<i64>,
}

impl Recon {
    /// The sum of the items of one kind.
    pub fn sum(&self, kind: ItemKind) -> i64 {
        self.items.iter().filter(|i| i.kind == kind).map(|i| i.bytes).sum()
    }
}
