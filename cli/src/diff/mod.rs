//! `culedger diff A B`: two runs compared device by device. This module gathers the
//! figures ([`Diff`]); `render` writes them as a document; `since` reconciles each side's
//! pool from its sizing query, side by side, and names the cause when one side failed.

pub mod render;
pub mod since;

use crate::analysis::{shown_categories, DeviceGroup, GroupWords};
use crate::clock::Clock;
use crate::figures::{Figure, DIFF_TOTALS};
use crate::model::CATEGORIES;
use crate::run_analysis::Analysis;
use crate::units::{fmt_bytes, fmt_delta};
pub use culedger_analysis::compare::Row;
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
    pub since_sizing: Option<since::SinceSizing>,
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

/// A short name for a run in sentences: the last path component (`custom-ar/`).
pub(super) fn short(label: &str) -> String {
    let trimmed = label.trim_end_matches('/');
    let last = trimmed.rsplit('/').next().unwrap_or(trimmed);
    if label.ends_with('/') {
        format!("{last}/")
    } else {
        last.to_string()
    }
}

fn probe_side(g: &DeviceGroup, m: crate::analysis::Member, p: &crate::model::Probe) -> ProbeSide {
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

fn first_probe(g: &DeviceGroup) -> Option<ProbeSide> {
    g.probes().first().map(|(m, p)| probe_side(g, *m, p))
}

fn last_probe(g: &DeviceGroup) -> Option<ProbeSide> {
    g.probes().last().map(|(m, p)| probe_side(g, *m, p))
}

fn sizing_probe(g: &DeviceGroup) -> Option<ProbeSide> {
    let big = g.largest_allocation();
    g.sizing_probe().map(|(m, p, why)| ProbeSide {
        before: Some(crate::analysis::why(&why, &g.clock)),
        before_category: big.and_then(|b| b.category),
        ..probe_side(g, m, p)
    })
}

/// One line per failed request (an allocator's retries of it are said on its line).
fn failure_lines(g: &DeviceGroup) -> Vec<String> {
    g.failed_requests()
        .iter()
        .map(|(m, f, retries)| {
            format!(
                "{} {} at {}: {} of {} ({}{})",
                m.pid(),
                m.label(),
                g.clock.record(m.report, *f),
                f.api,
                fmt_bytes(f.bytes),
                f.error_name,
                match retries.len() {
                    0 => String::new(),
                    1 => ", failed again when retried".to_string(),
                    n => format!(", failed again in {n} retries"),
                }
            )
        })
        .collect()
}

fn dev_diff(label: String, a: Option<&DeviceGroup>, b: Option<&DeviceGroup>) -> DevDiff {
    let cat = |g: Option<&DeviceGroup>, c: &str| g.map_or(0, |g| g.cat_live(c));
    let mut categories: Vec<Row> = CATEGORIES.iter().map(|c| Row::new(c, cat(a, c), cat(b, c))).collect();
    categories.sort_by_key(|r| std::cmp::Reverse(r.delta.abs()));
    // Device-wide rows below the categories; a figure never measured counts as 0.
    let total = |g: Option<&DeviceGroup>, f: Figure| g.and_then(|g| f.read(g)).unwrap_or(0);
    let totals = DIFF_TOTALS.iter().map(|&f| Row::new(&f.label(), total(a, f), total(b, f))).collect();
    let costs = |g: Option<&DeviceGroup>| g.map(crate::costs::by_api).unwrap_or_default();
    let (ca, cb) = (costs(a), costs(b));
    let apis: BTreeSet<&String> = ca.keys().chain(cb.keys()).collect();
    let mut driver_costs: Vec<Row> = apis
        .into_iter()
        .map(|api| Row::new(api, ca.get(api).map_or(0, |c| c.1), cb.get(api).map_or(0, |c| c.1)))
        .filter(|r| r.delta != 0)
        .collect();
    driver_costs.sort_by_key(|r| std::cmp::Reverse(r.delta.abs()));
    let probe = |which: &str, f: fn(&DeviceGroup) -> Option<ProbeSide>| {
        let (pa, pb) = (a.and_then(f), b.and_then(f));
        let free_delta = match (&pa, &pb) {
            (Some(x), Some(y)) => x.free_bytes.zip(y.free_bytes).map(|(x, y)| y - x),
            _ => None,
        };
        ProbeDiff { which: which.into(), a: pa, b: pb, free_delta }
    };
    let (fa, fb) = (a.map(failure_lines).unwrap_or_default(), b.map(failure_lines).unwrap_or_default());
    DevDiff {
        device: label,
        only_in: match (a, b) {
            (Some(_), None) => Some("a".into()),
            (None, Some(_)) => Some("b".into()),
            _ => None,
        },
        categories,
        totals,
        probes: vec![probe("first", first_probe), probe("sizing", sizing_probe), probe("last", last_probe)],
        // Failures present on one side only: a device that failed in both runs lists both.
        failures_a: if fb.is_empty() || !fa.is_empty() { fa } else { Vec::new() },
        failures_b: fb,
        driver_costs,
        sites: culedger_analysis::sites::grew(a, b),
        since_sizing: since::since_sizing(a, b),
    }
}

/// A device's group in run A and in run B.
type Pair<'a, 'b> = (Option<&'a DeviceGroup<'b>>, Option<&'a DeviceGroup<'b>>);

/// Compares two runs. Devices are matched by host, index and MIG device (two MIG devices of
/// one GPU are two devices); when each run has a single host (the usual case: the same
/// machine under two configurations, or two machines) by index and MIG device alone.
pub fn diff(a: &Analysis, b: &Analysis, all_categories: bool) -> Diff {
    let (ra, rb) = (a.run, b.run);
    let (ga, gb) = (a.groups(), b.groups());
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
    let devices: Vec<DevDiff> = keys
        .into_values()
        .map(|(a, b)| {
            let g = a.or(b).expect("every key has a side");
            let label =
                if by_index { crate::analysis::gpu_words(&crate::analysis::gpu_token(g.index, g.mig_index, g.uuid_name.as_deref())) } else { g.title() };
            dev_diff(label, a, b)
        })
        .collect();
    let (sa, sb) = (short(&ra.label), short(&rb.label));
    let sizing: Vec<(String, Option<&since::SinceSizing>)> =
        devices.iter().map(|d| (d.device.clone(), d.since_sizing.as_ref())).collect();
    let headline = since::cause_headline(&sa, &sb, &sizing).unwrap_or_else(|| headline(&sa, &sb, &devices));
    // The recommendation of `culedger explain` of the side whose start failed (its first line,
    // as `Explanation::gist` gives it), its margin for what that side never reached measured on
    // the side that started, where it did, instead of the pack's fixed one.
    let measured = b.advice_measured_by(a, &sa).or_else(|| a.advice_measured_by(b, &sb));
    let what_to_change = measured
        .as_ref()
        .or_else(|| b.advice().or_else(|| a.advice()))
        .and_then(|adv| adv.lines.first())
        .map(|l| format!("{l}."));
    let fixed = b.advice().or_else(|| a.advice()).map(|adv| adv.margin_bytes);
    let what_to_change_margin = measured.as_ref().map(|m| {
        format!(
            "The margin for what the failed start never reached is {}: {}{}.",
            fmt_bytes(m.margin_bytes),
            m.margin_what,
            fixed.map_or(String::new(), |f| format!(", not the {} explain keeps from the engine's rules", fmt_bytes(f)))
        )
    });
    let margin_bytes = measured.as_ref().map(|m| m.margin_bytes);
    let (ca, cb) = (shown_categories(ra, all_categories), shown_categories(rb, all_categories));
    Diff {
        schema: DIFF_SCHEMA,
        a: ra.label.clone(),
        b: rb.label.clone(),
        a_run_ids: ra.run_ids.clone(),
        b_run_ids: rb.run_ids.clone(),
        a_t0_unix_us: Clock::of(&ra.procs).t0_us,
        b_t0_unix_us: Clock::of(&rb.procs).t0_us,
        headline,
        what_to_change,
        what_to_change_margin,
        margin_bytes,
        categories_shown: CATEGORIES
            .iter()
            .filter(|c| ca.contains(c) || cb.contains(c))
            .map(|c| c.to_string())
            .collect(),
        devices,
    }
}

fn headline(sa: &str, sb: &str, devices: &[DevDiff]) -> String {
    let mut parts = Vec::new();
    if let Some((d, r)) = devices
        .iter()
        .flat_map(|d| d.categories.iter().map(move |r| (d, r)))
        .filter(|(_, r)| r.delta != 0)
        .max_by_key(|(_, r)| r.delta.abs())
    {
        let amount = if r.delta > 0 { fmt_delta(r.delta) } else { format!("{} less", fmt_bytes(-r.delta)) };
        parts.push(format!("{sb} uses {amount} {} on {}", r.name, d.device));
    }
    if let Some((d, p, delta)) = devices
        .iter()
        .flat_map(|d| d.probes.iter().filter(|p| p.which == "sizing").map(move |p| (d, p)))
        .filter_map(|(d, p)| p.free_delta.map(|x| (d, p, x)))
        .filter(|(_, _, x)| x.abs() >= 1 << 20)
        .max_by_key(|(_, _, x)| x.abs())
    {
        let what = match p.b.as_ref().and_then(|s| s.before_category.as_deref()) {
            Some("kv_pool") => "its KV pool".to_string(),
            Some(c) => format!("its largest allocation ({c})"),
            None => "its largest allocation".to_string(),
        };
        let more_less = if delta < 0 { "less" } else { "more" };
        let verb = if parts.is_empty() { format!("{sb} saw") } else { "saw".into() };
        parts.push(format!("{verb} {} {more_less} free memory before {what} on {}", fmt_bytes(delta.abs()), d.device));
    }
    // The hidden driver memory that changed most: what free-memory queries taken before
    // it could not see.
    if let Some((d, r)) = devices
        .iter()
        .flat_map(|d| d.totals.iter().filter(|r| r.name == Figure::DriverCosts.label()).map(move |r| (d, r)))
        .filter(|(_, r)| r.delta.abs() >= 1 << 20)
        .max_by_key(|(_, r)| r.delta.abs())
    {
        let more_less = if r.delta < 0 { "less" } else { "more" };
        let verb = if parts.is_empty() { format!("{sb} paid") } else { "paid".into() };
        parts.push(format!("{verb} {} {more_less} in hidden driver costs on {}", fmt_bytes(r.delta.abs()), d.device));
    }
    let only = |side: fn(&DevDiff) -> usize| devices.iter().map(side).sum::<usize>();
    let (fa, fb) = (
        only(|d| if d.failures_b.is_empty() { d.failures_a.len() } else { 0 }),
        only(|d| if d.failures_a.is_empty() { d.failures_b.len() } else { 0 }),
    );
    for (n, name) in [(fb, sb), (fa, sa)] {
        if n > 0 {
            parts.push(format!("{n} allocation{} failed only in {name}", if n == 1 { "" } else { "s" }));
        }
    }
    // "B uses ..., saw ... and paid ...; N allocations failed only in B".
    let failures: Vec<String> = parts.iter().filter(|p| p.contains("failed only")).cloned().collect();
    let facts: Vec<String> = parts.into_iter().filter(|p| !p.contains("failed only")).collect();
    let mut sentences: Vec<String> = Vec::new();
    if let Some((last, rest)) = facts.split_last() {
        sentences.push(if rest.is_empty() { last.clone() } else { format!("{} and {last}", rest.join(", ")) });
    }
    sentences.extend(failures);
    if sentences.is_empty() {
        format!("{sa} and {sb}: no difference in tracked memory, sizing queries or failures")
    } else {
        sentences.join("; ")
    }
}
