//! Words shared by the renderers: a process in a sentence, lists, sizes that need a gloss.
//! Everything here turns figures into words; nothing here computes a figure.

use crate::model::Report;
use culedger_analysis::explain::{Ended, Part};
use crate::units::fmt_bytes;

/// The process in words for sentences: `rank 1 (pid 5102)` when it has a rank, else
/// `pid 5100 (its label)`.
pub fn who(r: &Report) -> String {
    let p = &r.process;
    let get = |k: &str| p.env.get(k).map(String::as_str).filter(|v| !v.is_empty());
    match (get("RANK"), get("LOCAL_RANK")) {
        (Some(rank), _) => format!("rank {rank} (pid {})", p.pid),
        (None, Some(local)) => format!("local rank {local} (pid {})", p.pid),
        _ => format!("pid {} ({})", p.pid, words_upto(&p.label(), 40)),
    }
}

/// The words of `text` that fit in `width` columns, then `...` when some were left out.
fn words_upto(text: &str, width: usize) -> String {
    let mut out = String::new();
    for w in text.split(' ') {
        if !out.is_empty() && out.len() + 1 + w.len() > width {
            return format!("{out} ...");
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

/// `A`, `A and B`, `A, B and C`.
pub fn join_and(parts: &[String]) -> String {
    match parts.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// A failed allocation's size in words when the request itself names none.
pub fn needed_words(bytes: i64, need: i64, api: &str) -> String {
    if bytes == 0 && need > 0 {
        format!("{} of driver memory, what each successful {api} cost", fmt_bytes(need))
    } else {
        fmt_bytes(bytes)
    }
}

/// Which part of what it was allocating a failed request is, in words: `its pool`, `the
/// second half of its KV pool`, `allocation 3 of a burst of 3`.
pub fn part(p: Part) -> String {
    let pool = if p.kv() { "its KV pool" } else { "its pool" };
    match p {
        Part::Allocation => "an allocation".into(),
        Part::OfBurst(n) => format!("allocation {n} of a burst of {n}"),
        Part::Pool { .. } => pool.to_string(),
        Part::SecondHalf { .. } => format!("the second half of {pool}"),
        Part::PartOf { n, .. } => format!("part {n} of {pool}"),
    }
}

/// How a process ended, in words: `exited with status 1`, `was killed by SIGKILL`.
pub fn ended(e: Ended) -> String {
    match e {
        Ended::Killed(sig) => format!("was killed by {}", crate::runs::signal_name(sig)),
        Ended::Exited(c) => format!("exited with status {c}"),
        Ended::Failed => "failed".into(),
    }
}
