//! Hidden driver costs in the CLI's words: the analysis crate de-noises them
//! (`culedger_analysis::costs`: what another process did inside a measured call's window is
//! subtracted, what cannot be decided is marked uncertain); this writes each note.

use crate::clock::Clock;
use crate::units::fmt_bytes;
pub use culedger_analysis::costs::*;

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
