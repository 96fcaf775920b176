//! Words shared by the renderers: a process in a sentence, lists, sizes that need a gloss.
//! Everything here turns figures into words; nothing here computes a figure.

use crate::clock::Clock;
use crate::model::Report;
use crate::units::{count, fmt_bytes};
use culedger_analysis::explain::{Ended, Item, Note, Part, Subject, Who};

/// The process in words for sentences: `rank 1 (pid 5102)` when it has a rank, else
/// `pid 5100 (its label)`.
pub fn who(r: &Report) -> String {
    who_is(&Who::of(r))
}

/// A process's name in words: `rank 1 (pid 5102)`, `local rank 0 (pid 5102)`, `pid 5100 (its
/// label)`.
pub fn who_is(w: &Who) -> String {
    match w {
        Who::Rank { rank, pid } => format!("rank {rank} (pid {pid})"),
        Who::LocalRank { rank, pid } => format!("local rank {rank} (pid {pid})"),
        Who::Pid { pid, label } => format!("pid {pid} ({})", words_upto(label, 40)),
    }
}

/// What a line of a reconciliation is, in words (its `what`); `pids` are the item's.
pub fn subject(s: &Subject, pids: &[i64]) -> String {
    match s {
        Subject::Pool { category, allocations } => {
            format!("the pool so far ({category}, {})", count(*allocations, "allocation", "allocations"))
        }
        Subject::Allocated { category, by, net } => {
            format!("{category} {} by {}", if *net > 0 { "allocated" } else { "freed" }, who_is(by))
        }
        Subject::DriverCost { api, calls, by } => {
            format!("{api} ({}) by {}", count(*calls as usize, "call", "calls"), who_is(by))
        }
        Subject::Process { who, tracked, costs: None, context: None } if *tracked > 0 => {
            format!("allocations of {}", who_is(who))
        }
        Subject::Process { who, tracked, costs, context } => {
            let mut parts: Vec<String> = Vec::new();
            if *tracked != 0 {
                parts.push(format!(
                    "{} {}",
                    if *tracked > 0 { "allocated" } else { "freed" },
                    fmt_bytes(tracked.abs())
                ));
            }
            if let Some((bytes, apis)) = costs {
                parts.push(format!("{} in its own driver costs ({})", fmt_bytes(*bytes), apis.join(", ")));
            }
            if let Some(c) = context {
                let how = if c.peer { "its context, created by its peer access" } else { "its context" };
                parts.push(if c.size_known { how.to_string() } else { format!("{how} (size unknown)") });
            }
            format!("{}: {}", who_is(who), parts.join(", "))
        }
        Subject::Context { who, peer: true } => {
            format!("the context that {} created here by its peer access", who_is(who))
        }
        Subject::Context { who, peer: false } => format!("the context of {}", who_is(who)),
        Subject::Contexts { count, peer: true } => {
            format!("the contexts that {count} processes (pids {}) created here by their peer access", pid_list(pids))
        }
        Subject::Contexts { count, peer: false } => {
            format!("the contexts of {count} processes (pids {})", pid_list(pids))
        }
    }
}

/// A note on a line of a reconciliation, in words; times on the run's clock.
pub fn recon_note(n: &Note, c: &Clock) -> String {
    match n {
        Note::Cost(n) => crate::costs::note(n, c),
        Note::ContextSizeUnknown => {
            "a context's size is unknown here: no process queried free memory alone on this GPU".into()
        }
    }
}

/// Words the lines of a reconciliation: each item's `what` from its subject, its `notes` from
/// its typed notes (each sentence once, in order).
pub fn recon_items(items: &mut [Item], c: &Clock) {
    for it in items {
        it.what = subject(&it.subject, &it.pids);
        it.notes.clear();
        for n in &it.noted {
            let s = recon_note(n, c);
            if !it.notes.contains(&s) {
                it.notes.push(s);
            }
        }
    }
}

/// `6101, 6103-6108`: pids, consecutive ones as ranges.
pub fn pid_list(pids: &[i64]) -> String {
    let mut v = pids.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j >= i + 2 {
            format!("{}-{}", v[i], v[j])
        } else {
            v[i..=j].iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
        });
        i = j + 1;
    }
    out.join(", ")
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

/// A class of APIs' hidden cost, for sentences: `peer access`, `IPC opens`, ...; any other API
/// by its name.
pub fn api_class(c: &culedger_analysis::costs::ApiClass) -> String {
    use culedger_analysis::costs::ApiClass;
    match c {
        ApiClass::IpcOpens => "IPC opens",
        ApiClass::PeerAccess => "peer access",
        ApiClass::GraphInstantiation => "graph instantiation",
        ApiClass::ModuleLoads => "module loads",
        ApiClass::Contexts => "contexts",
        ApiClass::MemoryPools => "memory pools",
        ApiClass::Other(api) => return api.clone(),
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_lists() {
        assert_eq!(pid_list(&[6103, 6101, 6104, 6105]), "6101, 6103-6105");
        assert_eq!(pid_list(&[1, 2]), "1, 2");
        assert_eq!(pid_list(&[]), "");
    }

    /// The words of a reconciliation line come from its typed subject alone.
    #[test]
    fn subjects_in_words() {
        use culedger_analysis::explain::ContextOf;
        let r1 = Who::Rank { rank: "1".into(), pid: 5102 };
        let ctx = |peer, size_known| Some(ContextOf { peer, size_known });
        let process = |tracked, costs, context| Subject::Process { who: r1.clone(), tracked, costs, context };
        assert_eq!(subject(&process(1 << 20, None, None), &[5102]), "allocations of rank 1 (pid 5102)");
        assert_eq!(
            subject(&process(-(1 << 20), Some((2 << 20, vec!["cuCtxCreate".into()])), ctx(true, true)), &[5102]),
            "rank 1 (pid 5102): freed 1.00 MiB, 2.00 MiB in its own driver costs (cuCtxCreate), its context, created \
             by its peer access"
        );
        assert_eq!(
            subject(&process(0, None, ctx(false, false)), &[5102]),
            "rank 1 (pid 5102): its context (size unknown)"
        );
        assert_eq!(
            subject(&Subject::Context { who: r1.clone(), peer: true }, &[5102]),
            "the context that rank 1 (pid 5102) created here by its peer access"
        );
        assert_eq!(
            subject(&Subject::Contexts { count: 3, peer: false }, &[7, 5, 6]),
            "the contexts of 3 processes (pids 5-7)"
        );
        let pid = Who::Pid { pid: 9, label: "python3 train.py".into() };
        assert_eq!(
            subject(&Subject::Allocated { category: "weights".into(), by: pid, net: -1 }, &[9]),
            "weights freed by pid 9 (python3 train.py)"
        );
        assert_eq!(
            subject(&Subject::Pool { category: "kv_cache".into(), allocations: 1 }, &[9]),
            "the pool so far (kv_cache, 1 allocation)"
        );
    }
}
