//! Hidden driver costs in the CLI's words: the analysis crate de-noises them
//! (`culedger_analysis::costs`: what another process did inside a measured call's window is
//! subtracted, what cannot be decided is marked uncertain); this writes each note.

use crate::clock::Clock;
use crate::units::fmt_bytes;
pub use culedger_analysis::costs::*;
use serde::Serialize;

/// One note of a de-noised call, in words; times on the run's clock.
pub fn note(n: &CostNote, c: &Clock) -> String {
    match n {
        CostNote::Moved { pid, bytes, at_us } => {
            let verb = if *bytes > 0 { "allocated" } else { "freed" };
            format!("{pid} {verb} {} during the call at {}", fmt_bytes(bytes.abs()), c.at(*at_us))
        }
        CostNote::Inside { pid, api, bytes } => {
            format!("minus {} measured by {pid}'s {api} inside this window", fmt_bytes(*bytes))
        }
        CostNote::Overlaps { pid, api, at_us } => format!("uncertain: overlaps {pid}'s {api} at {}", c.at(*at_us)),
        CostNote::Context { pid, bytes, at_us, estimate } => format!(
            "minus {}: {pid}'s context here (its peer access at {} fell in the window; size estimated from {}'s \
             first query)",
            fmt_bytes(*bytes),
            c.at(*at_us),
            estimate.pid
        ),
        CostNote::ContextUnknown { pid, at_us } => {
            format!("uncertain: {pid} created its context on this GPU (peer access at {}) during this call", c.at(*at_us))
        }
        CostNote::NotListed { calls } => format!("{calls} more calls not in the report's event list: taken as measured"),
    }
}

/// Notes in words, each sentence once, in order.
pub fn notes(ns: &[CostNote], c: &Clock) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in ns {
        let s = note(n, c);
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// Hidden driver costs of one process and API on one device, as `culedger report --format
/// json` writes them.
#[derive(Debug, Clone, Serialize)]
pub struct CostLine {
    pub pid: i64,
    pub label: String,
    pub api: String,
    pub calls: i64,
    /// After subtracting what other processes did inside the measurement windows.
    pub bytes: i64,
    /// As measured (free before minus free after, summed).
    pub measured_bytes: i64,
    /// Part of the measurement could not be attributed either way.
    pub uncertain: bool,
    /// What was subtracted or left uncertain, one sentence each.
    pub notes: Vec<String>,
}

/// The de-noised rows of a device, in words.
pub fn lines(rows: Vec<CostRow>, c: &Clock) -> Vec<CostLine> {
    rows.into_iter()
        .map(|r| CostLine {
            notes: notes(&r.notes, c),
            pid: r.pid,
            label: r.label,
            api: r.api,
            calls: r.calls,
            bytes: r.bytes,
            measured_bytes: r.measured_bytes,
            uncertain: r.uncertain,
        })
        .collect()
}
