//! The values of `culedger diff --format json` (`culedger-diff/1`, docs/cli-json.md): two
//! runs compared device by device, and each side's pool reconciled from its sizing query, side
//! by side. This crate gathers each device's comparison ([`devices`]: the devices of the two
//! runs matched, each one's rows, queries, failures and grown call sites); the CLI writes the
//! fields that hold words, those of a device through [`DiffWords`] (`device`, the failures,
//! the totals' names, why the sizing query matters, the lines of the side-by-side
//! reconciliation, [`since_sizing`]), and the rest of [`Diff`] (`headline`, `what_to_change`).

use crate::clock::Clock;
use crate::compare::Row;
use crate::explain::{ItemKind, Part};
use crate::figures::{Figure, DIFF_TOTALS};
use crate::groups::{DeviceGroup, Member, Why};
use crate::model::{Failure, Probe, CATEGORIES};
use crate::recon::{failure_reconciliation, PoolWindow, ReconWords};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

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

/// The words of one device's comparison, written by the renderer (the CLI's `diff`).
pub trait DiffWords {
    /// The device's name: its GPU alone when every device was matched by index
    /// (`by_index`), else with its host.
    fn device(&self, g: &DeviceGroup, by_index: bool) -> String;
    /// A device-wide figure's row name.
    fn figure(&self, f: Figure) -> String;
    /// One failed request of process `m`, an allocator's `retries` of it said on its line.
    fn failure(&self, g: &DeviceGroup, m: Member, f: &Failure, retries: usize) -> String;
    /// Why the sizing query matters (`before` of the `sizing` query).
    fn why(&self, w: &Why, c: &Clock) -> String;
    /// The words of each side's reconciliation (a process's name, each item's words).
    fn recon(&self) -> &dyn ReconWords;
    /// A line of the side-by-side reconciliation (its `name`).
    fn since_line(&self, l: &SinceLine) -> String;
    /// What failed on one side (`a_failed`, `b_failed`): its part, size, category and call.
    fn since_failed(&self, f: &SideFailure) -> String;
}

/// A device's group in run A and in run B.
pub type Pair<'g, 'a> = (Option<&'g DeviceGroup<'a>>, Option<&'g DeviceGroup<'a>>);

/// The devices of two runs matched: by host, index and MIG device (two MIG devices of one GPU
/// are two devices); when each run has a single host (the usual case: the same machine under
/// two configurations, or two machines) by index and MIG device alone (`by_index`, the
/// first value). In order of (host,) index and MIG device.
pub fn pairs<'g, 'a>(ga: &'g [DeviceGroup<'a>], gb: &'g [DeviceGroup<'a>]) -> (bool, Vec<Pair<'g, 'a>>) {
    let hosts = |g: &[DeviceGroup]| g.iter().map(|d| d.host.clone()).collect::<BTreeSet<_>>();
    let by_index = hosts(ga).len() <= 1 && hosts(gb).len() <= 1;
    let key = |g: &DeviceGroup| {
        if by_index {
            (String::new(), g.index, g.mig_index)
        } else {
            (g.host.clone(), g.index, g.mig_index)
        }
    };
    let mut keys: BTreeMap<(String, i64, Option<i64>), Pair> = BTreeMap::new();
    for g in ga {
        keys.entry(key(g)).or_default().0 = Some(g);
    }
    for g in gb {
        keys.entry(key(g)).or_default().1 = Some(g);
    }
    (by_index, keys.into_values().collect())
}

/// Each device of two runs compared ([`pairs`]), its words from `words`.
pub fn devices(ga: &[DeviceGroup], gb: &[DeviceGroup], words: &dyn DiffWords) -> Vec<DevDiff> {
    let (by_index, pairs) = pairs(ga, gb);
    pairs
        .into_iter()
        .map(|(a, b)| {
            let g = a.or(b).expect("every key has a side");
            dev_diff(words.device(g, by_index), a, b, words)
        })
        .collect()
}

fn probe_side(g: &DeviceGroup, m: Member, p: &Probe) -> ProbeSide {
    ProbeSide {
        pid: m.pid(),
        label: m.label(),
        at_us: g.clock.since(m.abs_us(p)),
        t_ms: p.t_ms,
        api: p.api.clone(),
        free_bytes: p.free_bytes,
        total_bytes: p.total_bytes,
        before: None,
        before_category: None,
    }
}

/// The first, sizing and last free-memory queries of a device ([`ProbeDiff::which`]).
fn probe(g: &DeviceGroup, which: &str, words: &dyn DiffWords) -> Option<ProbeSide> {
    match which {
        "first" => g.probes().first().map(|(m, p)| probe_side(g, *m, p)),
        "last" => g.probes().last().map(|(m, p)| probe_side(g, *m, p)),
        _ => {
            let big = g.largest_allocation();
            g.sizing_probe().map(|(m, p, why)| ProbeSide {
                before: Some(words.why(&why, &g.clock)),
                before_category: big.and_then(|b| b.category),
                ..probe_side(g, m, p)
            })
        }
    }
}

/// One device of the two runs compared, named `label`.
fn dev_diff(label: String, a: Option<&DeviceGroup>, b: Option<&DeviceGroup>, words: &dyn DiffWords) -> DevDiff {
    let cat = |g: Option<&DeviceGroup>, c: &str| g.map_or(0, |g| g.cat_live(c));
    let mut categories: Vec<Row> = CATEGORIES.iter().map(|c| Row::new(c, cat(a, c), cat(b, c))).collect();
    categories.sort_by_key(|r| std::cmp::Reverse(r.delta.abs()));
    // Device-wide rows below the categories; a figure never measured counts as 0.
    let total = |g: Option<&DeviceGroup>, f: Figure| g.and_then(|g| f.read(g)).unwrap_or(0);
    let totals = DIFF_TOTALS.iter().map(|&f| Row::new(&words.figure(f), total(a, f), total(b, f))).collect();
    let costs = |g: Option<&DeviceGroup>| g.map(crate::costs::by_api).unwrap_or_default();
    let (ca, cb) = (costs(a), costs(b));
    let apis: BTreeSet<&String> = ca.keys().chain(cb.keys()).collect();
    let mut driver_costs: Vec<Row> = apis
        .into_iter()
        .map(|api| Row::new(api, ca.get(api).map_or(0, |c| c.1), cb.get(api).map_or(0, |c| c.1)))
        .filter(|r| r.delta != 0)
        .collect();
    driver_costs.sort_by_key(|r| std::cmp::Reverse(r.delta.abs()));
    let probes = ["first", "sizing", "last"].map(|which| {
        let (pa, pb) = (a.and_then(|g| probe(g, which, words)), b.and_then(|g| probe(g, which, words)));
        let free_delta = match (&pa, &pb) {
            (Some(x), Some(y)) => x.free_bytes.zip(y.free_bytes).map(|(x, y)| y - x),
            _ => None,
        };
        ProbeDiff { which: which.into(), a: pa, b: pb, free_delta }
    });
    let failures = |g: Option<&DeviceGroup>| -> Vec<String> {
        let Some(g) = g else { return Vec::new() };
        g.failed_requests().iter().map(|(m, f, retries)| words.failure(g, *m, f, retries.len())).collect()
    };
    let (fa, fb) = (failures(a), failures(b));
    DevDiff {
        device: label,
        only_in: match (a, b) {
            (Some(_), None) => Some("a".into()),
            (None, Some(_)) => Some("b".into()),
            _ => None,
        },
        categories,
        totals,
        probes: probes.into(),
        // Failures present on one side only: a device that failed in both runs lists both.
        failures_a: if fb.is_empty() || !fa.is_empty() { fa } else { Vec::new() },
        failures_b: fb,
        driver_costs,
        sites: crate::sites::grew(a, b),
        since_sizing: since_sizing(a, b, words),
    }
}

/// What a line of the side-by-side reconciliation stands for, before its words
/// ([`DiffWords::since_line`]); lines of the same meaning on the two sides are one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinceLine {
    /// Told free at the sizing query.
    Told,
    /// The pool so far.
    Pool,
    /// A category the process allocated since the query.
    Allocated(String),
    /// The process's hidden driver costs of one API.
    DriverCost(String),
    /// Other processes: only their contexts, or their memory.
    Others { contexts_only: bool },
    /// Memory no report explains.
    Unexplained,
    /// Free after the pool, or when it failed.
    Free,
    /// What the failed attempt asked for, and by how much it was short.
    Requested,
    ShortBy,
}

impl SinceLine {
    pub fn kind(&self) -> LineKind {
        match self {
            SinceLine::Told => LineKind::Told,
            SinceLine::Pool => LineKind::Pool,
            SinceLine::Allocated(_) => LineKind::Allocated,
            SinceLine::DriverCost(_) => LineKind::DriverCost,
            SinceLine::Others { .. } => LineKind::OtherProcesses,
            SinceLine::Unexplained => LineKind::Unexplained,
            SinceLine::Free => LineKind::Free,
            SinceLine::Requested => LineKind::Requested,
            SinceLine::ShortBy => LineKind::ShortBy,
        }
    }
}

/// The lines of one side's window, amounts taken as positive (lines of the same meaning
/// added up).
fn since_lines(w: &PoolWindow) -> Vec<(SinceLine, i64)> {
    let r = &w.recon;
    let mut out = vec![(SinceLine::Told, r.query.free_bytes)];
    let contexts_only =
        r.items.iter().filter(|i| i.kind == ItemKind::OtherProcesses).all(|i| i.subject.contexts_only());
    let mut add = |key: SinceLine, bytes: i64| match out.iter_mut().find(|(k, _)| *k == key) {
        Some(l) => l.1 += bytes,
        None => out.push((key, bytes)),
    };
    for i in &r.items {
        match i.kind {
            ItemKind::Pool => add(SinceLine::Pool, i.bytes),
            ItemKind::Allocated => add(SinceLine::Allocated(i.category.clone().unwrap_or_default()), i.bytes),
            ItemKind::DriverCost => add(SinceLine::DriverCost(i.api.clone().unwrap_or_default()), i.bytes),
            _ => add(SinceLine::Others { contexts_only }, i.bytes),
        }
    }
    if let Some(u) = r.unexplained_bytes.filter(|u| *u != 0) {
        add(SinceLine::Unexplained, u);
    }
    add(SinceLine::Free, r.free_bytes);
    if let Some(f) = &w.failed {
        add(SinceLine::Requested, f.bytes);
        add(SinceLine::ShortBy, f.bytes - r.free_bytes);
    }
    out
}

/// Each side's pool reconciled from its sizing query ([`failure_reconciliation`]), side by
/// side; None when neither side sized a pool on this device.
pub fn since_sizing(a: Option<&DeviceGroup>, b: Option<&DeviceGroup>, words: &dyn DiffWords) -> Option<SinceSizing> {
    let window = |g: Option<&DeviceGroup>| g.and_then(|g| failure_reconciliation(g, words.recon()));
    let (wa, wb) = (window(a), window(b));
    if wa.is_none() && wb.is_none() {
        return None;
    }
    let (la, lb) = (wa.as_ref().map(since_lines).unwrap_or_default(), wb.as_ref().map(since_lines).unwrap_or_default());
    let mut keys: Vec<SinceLine> = Vec::new();
    for (k, _) in la.iter().chain(&lb) {
        if !keys.contains(k) {
            keys.push(k.clone());
        }
    }
    keys.sort_by_key(|k| k.kind().rank());
    let get = |l: &[(SinceLine, i64)], k: &SinceLine, side: bool| {
        l.iter().find(|(x, _)| x == k).map(|x| x.1).or(if side { Some(0) } else { None })
    };
    let rows = keys
        .into_iter()
        .map(|k| {
            let kind = k.kind();
            let taken = kind.taken();
            let (x, y) = (get(&la, &k, taken && wa.is_some()), get(&lb, &k, taken && wb.is_some()));
            SinceRow { name: words.since_line(&k), kind, a: x, b: y, delta: x.zip(y).map(|(x, y)| y - x) }
        })
        .collect();
    let parts = |w: &Option<PoolWindow>| {
        w.as_ref().and_then(|w| {
            w.failed.as_ref().map(|f| SideFailure {
                part: f.part,
                bytes: f.bytes,
                category: w.category.clone(),
                api: f.api.clone(),
            })
        })
    };
    let (fa, fb) = (parts(&wa), parts(&wb));
    Some(SinceSizing {
        a_process: wa.as_ref().map(|w| w.process.clone()),
        b_process: wb.as_ref().map(|w| w.process.clone()),
        a_failed: fa.as_ref().map(|f| words.since_failed(f)),
        b_failed: fb.as_ref().map(|f| words.since_failed(f)),
        a_failure: fa,
        b_failure: fb,
        rows,
    })
}
