//! Words shared by the renderers: a process in a sentence, lists, sizes that need a gloss.
//! Everything here turns figures into words; nothing here computes a figure.

use crate::model::Report;
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
