//! `culedger diff A B`: two runs compared device by device. The analysis crate gathers each
//! device's figures (`culedger_analysis::diff::devices`); this module words them
//! ([`DeviceWords`]) and writes the headline and what to change ([`Diff`]); `render` writes
//! them as a document; `since` reconciles each side's pool from its sizing query, side by
//! side, and names the cause when one side failed.

pub mod render;
pub mod since;

use crate::analysis::{shown_categories, DeviceGroup, GroupWords, Member, Why};
use crate::clock::Clock;
use crate::figures::{Figure, FigureWords};
use crate::model::{Failure, CATEGORIES};
use crate::run_analysis::Analysis;
use crate::units::{fmt_bytes, fmt_delta};
pub use culedger_analysis::compare::Row;
use culedger_analysis::diff::DiffWords;
pub use culedger_analysis::diff::{DevDiff, Diff, ProbeSide, DIFF_SCHEMA};

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

/// A device's comparison in words (the analysis crate gathers it: `culedger_analysis::diff`).
struct DeviceWords;

impl DiffWords for DeviceWords {
    fn device(&self, g: &DeviceGroup, by_index: bool) -> String {
        if by_index {
            crate::analysis::gpu_words(&crate::analysis::gpu_token(g.index, g.mig_index, g.uuid_name.as_deref()))
        } else {
            g.title()
        }
    }

    fn figure(&self, f: Figure) -> String {
        f.label()
    }

    /// `PID LABEL at TIME: API of SIZE (ERROR, failed again when retried)`.
    fn failure(&self, g: &DeviceGroup, m: Member, f: &Failure, retries: usize) -> String {
        format!(
            "{} {} at {}: {} of {} ({}{})",
            m.pid(),
            m.label(),
            g.clock.record(m.report, f),
            f.api,
            fmt_bytes(f.bytes),
            f.error_name,
            match retries {
                0 => String::new(),
                1 => ", failed again when retried".to_string(),
                n => format!(", failed again in {n} retries"),
            }
        )
    }

    fn why(&self, w: &Why, c: &Clock) -> String {
        crate::analysis::why(w, c)
    }

    fn recon(&self) -> &dyn culedger_analysis::recon::ReconWords {
        &crate::explain::recon::Words
    }

    fn since_line(&self, l: &since::SinceLine) -> String {
        since::line_words(l)
    }

    fn since_failed(&self, f: &since::SideFailure) -> String {
        since::failed_words(f)
    }
}

/// Compares two runs. Devices are matched by host, index and MIG device (two MIG devices of
/// one GPU are two devices); when each run has a single host (the usual case: the same
/// machine under two configurations, or two machines) by index and MIG device alone.
pub fn diff(a: &Analysis, b: &Analysis, all_categories: bool) -> Diff {
    let (ra, rb) = (a.run, b.run);
    let devices = culedger_analysis::diff::devices(a.groups(), b.groups(), &DeviceWords);
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
