//! The words of each finding of `culedger explain`: its one-line title and its conclusion,
//! as an engineer would write them, from the figures [`super::findings`] computed. Every
//! time here is already on the run's clock.

use culedger_analysis::callers;
use culedger_analysis::findings::{AfterPool, CatGrowth, SizingRow, UntrackedDetail, WhyDiffers};
use culedger_analysis::findings::{
    Detail, FailDetail, Finding, GrowthDetail, ImbalanceDetail, Minimum, Part, Severity, SizingDetail, StartDetail,
};
use crate::words::who_is;
use culedger_analysis::process::Who;
use super::recon::{api_words, Item, ItemKind, Recon};
use crate::words::pid_list;
use crate::clock::fmt_secs;
use crate::units::fmt_bytes;
use crate::words::join_and;
use culedger_analysis::thresholds::{IMBALANCE_PCT, NOISE, POOL_DIFF_PCT};
use std::collections::BTreeMap;

/// Writes a finding's title and conclusion from its figures. `skipped`: a report of the
/// run could not be read.
pub fn word(f: &mut Finding, skipped: bool) {
    f.gpu_name = f.gpu.as_ref().and_then(|g| g.uuid_name.clone());
    match &mut f.detail {
        Detail::Start(d) => {
            for r in &mut d.processes {
                r.status = crate::words::ended(r.ended);
            }
        }
        Detail::Failure(d) => {
            d.part = crate::words::part(d.part_of);
            d.after_pool = d.after.map(after_pool);
        }
        Detail::Sizing(d) => {
            for r in &mut d.ranks {
                let device = crate::analysis::id_token(r.rank.device, r.rank.mig_index, Some(&r.rank.gpu));
                r.why = r.why_of.as_ref().map(|w| why_differs(w, &gpu(device)));
            }
        }
        _ => {}
    }
    let device = crate::analysis::id_token(f.device.unwrap_or_default(), f.mig_index, f.gpu.as_ref());
    let device = device.as_str();
    let (title, text) = match &f.detail {
        Detail::Start(d) => failed_start(d),
        Detail::Failure(d) => failed_allocation(d, device, skipped, d.minimum.as_ref()),
        // A sizing finding is a warning when a rank's pool was flagged, else context.
        Detail::Sizing(d) => sizing(d, f.severity == Severity::Warning),
        Detail::Untracked(d) => untracked_growth(d, device, f.severity),
        Detail::Growth(d) => growth(d, device),
        Detail::Imbalance(d) => imbalance(d),
    };
    f.title = title;
    f.text = text;
}

/// `GPU 3`; `number` as [`crate::analysis::gpu_token`] writes it (`0 MIG 1`, `GPU-8f2e1a0b`).
fn gpu(number: impl std::fmt::Display) -> String {
    crate::analysis::gpu_words(&number.to_string())
}

// ---------------------------------------------------------------------------------------
// Failed allocations, and starts that failed without one.

/// A start that failed without a failed allocation: (title, text).
pub fn failed_start(d: &StartDetail) -> (String, String) {
    let n = d.processes.len();
    let r0 = &d.processes[0];
    let where_ = match (&r0.last_query_device, r0.last_query_at_us, &r0.last_query_function) {
        (Some((index, mig_index, id)), Some(at), Some(function)) => {
            format!(
                " after its last free-memory query (on {} at {}, from {function})",
                gpu(crate::analysis::id_token(*index, *mig_index, Some(id))),
                crate::clock::fmt_secs(at)
            )
        }
        _ => String::new(),
    };
    let more = if n > 1 { format!(", and so did {} more", crate::units::count(n - 1, "process", "processes")) } else { String::new() };
    // Refused by the engine's own check, which its formula shows failing at the run's value.
    if let Some(f) = r0.refused_by.as_ref().filter(|_| d.processes.iter().all(|r| r.refused_by.is_some())) {
        let check = match &r0.last_query_function {
            Some(function) => format!("its check in {function}"),
            None => "its own check".to_string(),
        };
        let text = format!(
            "{} {}{where_} without a failed allocation{more}: {} refused to start by {check}, \"{}\": at {} {:.2} it was {} short.",
            r0.process,
            r0.status,
            f.engine,
            f.message,
            f.flag,
            f.value,
            crate::units::fmt_bytes(f.short_bytes)
        );
        let whom = if n == 1 { r0.process.clone() } else { format!("{n} processes") };
        return (format!("{} refused to start ({whom}): {check}", f.engine), text);
    }
    let text = format!(
        "{} {}{where_} without a failed allocation{more}: the start failed, but not because an allocation was \
         refused; the engine gave up by its own check (its log says why), or something other than GPU memory \
         failed.",
        r0.process, r0.status
    );
    let title = if n == 1 {
        format!("{} {} without a failed allocation", r0.process, r0.status)
    } else {
        format!("{n} processes failed without a failed allocation")
    };
    (title, text)
}

/// What a failed request was for, in a phase of its own after the process's KV pool.
fn after_pool(a: AfterPool) -> String {
    match a {
        AfterPool::GraphCapture => "its CUDA graph capture after its KV cache".to_string(),
    }
}

/// A failed allocation on GPU `device`: (title, text). `skipped`: a report of the run could
/// not be read.
pub fn failed_allocation(d: &FailDetail, device: &str, skipped: bool, minimum: Option<&Minimum>) -> (String, String) {
    let (name, part) = (&d.process, &d.part);
    let at = fmt_secs(d.at_us);
    // A lone allocation that is no pool is named by its size, not "an allocation".
    let (part, size) = match d.part_of {
        Part::Allocation => (fmt_bytes(d.bytes), String::new()),
        _ => (part.clone(), format!("{}, ", fmt_bytes(d.bytes))),
    };
    let part = match &d.after_pool {
        Some(a) => format!("{part} for {a}"),
        None => part,
    };
    let title = format!(
        "{name} could not allocate {part} on {} ({size}{}{}{})",
        gpu(device),
        d.api,
        d.category.as_deref().map(|c| format!(", {c}")).unwrap_or_default(),
        d.caller.as_deref().map(|c| format!(", from {}", callers::function(c))).unwrap_or_default()
    );
    let text = match &d.reconciliation {
        Some(r) => conclusion(
            name,
            d.part_of,
            (d.bytes, d.needed_bytes, &d.api),
            r,
            d.short_by_bytes.unwrap_or(0),
            (skipped, d.sized_by.as_ref().map(|s| format!("{}'s {}", s.engine, s.function)).as_deref()),
        ),
        None => format!(
            "{name} asked for {} at {at} with no free-memory query before it on {}: culedger cannot tell what it \
             sized the request from. The process held {} on the GPU at that moment.",
            fmt_bytes(d.bytes),
            gpu(device),
            fmt_bytes(d.held_bytes)
        ),
    };
    let text = match minimum {
        Some(m) => text.replacen(
            &format!("from {} free at", fmt_bytes(m.told)),
            &format!(
                "from {} free (the minimum over the ranks, as {} takes it; its own query told {}) at",
                fmt_bytes(m.used),
                m.engine,
                fmt_bytes(m.told)
            ),
            1,
        ),
        None => text,
    };
    (title, text)
}

/// The parts of `pool` that succeeded before the failure, in words: `the first half of
/// the pool`, `the first 3 parts of the pool`.
fn before_words(part: Part, done: usize) -> String {
    let pool = if part.kv() { "the KV pool" } else { "the pool" };
    if matches!(part, Part::SecondHalf { .. }) {
        format!("the first half of {pool}")
    } else if done == 1 {
        format!("its first part of {pool}")
    } else {
        format!("the first {done} parts of {pool}")
    }
}

/// The engineer's sentence for a reconciled failure.
fn conclusion(
    name: &str,
    part: Part,
    (requested, needed, api): (i64, i64, &str),
    r: &Recon,
    short_by: i64,
    (skipped, sized_by): (bool, Option<&str>),
) -> String {
    let pool = if part.kv() { "its KV pool" } else { "its pool" };
    let sized = if part.is_pool() { "sized" } else { "sized its request" };
    let mut s = if sized == "sized" {
        format!("{name} sized {pool} from {} free at {}", fmt_bytes(r.query.free_bytes), fmt_secs(r.query.at_us))
    } else if let Some(by) = sized_by {
        // A request after the pool, counted from the query the engine sized its pool from.
        format!("{name} sized its KV pool from {} free at {} (the sizing query, in {by})", fmt_bytes(r.query.free_bytes), fmt_secs(r.query.at_us))
    } else {
        // A request no query sized: the last query before it is only where the count starts.
        format!("{name} was told {} free at {} (its last query before the request)", fmt_bytes(r.query.free_bytes), fmt_secs(r.query.at_us))
    };
    // (bytes, where they went), the first said with "went to".
    let mut clauses: Vec<(i64, String)> = Vec::new();
    let hidden: Vec<&Item> = r.items.iter().filter(|i| i.kind == ItemKind::DriverCost).collect();
    let hidden_bytes: i64 = hidden.iter().map(|i| i.bytes).sum();
    if hidden_bytes > 0 {
        let mut words: Vec<String> = Vec::new();
        let mut by_size: Vec<&&Item> = hidden.iter().collect();
        by_size.sort_by_key(|i| std::cmp::Reverse(i.bytes));
        for i in by_size {
            let w = api_words(i.api.as_deref().unwrap_or(""));
            if !words.contains(&w) {
                words.push(w);
            }
        }
        clauses.push((hidden_bytes, format!("{} (not visible to that query)", join_and(&words))));
    }
    for i in r.items.iter().filter(|i| i.kind == ItemKind::OtherProcesses && i.bytes > 0) {
        clauses.push((i.bytes, i.what.clone()));
    }
    // Counted from the engine's sizing query, the KV pool the engine allocated after it is
    // its pool, not one of its other allocations.
    let is_kv = |i: &&Item| sized_by.is_some() && i.category.as_deref() == Some("kv_pool");
    let kv: i64 = r.items.iter().filter(|i| i.kind == ItemKind::Allocated && i.bytes > 0).filter(is_kv).map(|i| i.bytes).sum();
    if kv > 0 {
        clauses.push((kv, "its KV pool".into()));
    }
    let own: i64 = r.sum(ItemKind::Allocated) - kv;
    if own > 0 {
        let cats: Vec<String> = r
            .items
            .iter()
            .filter(|i| i.kind == ItemKind::Allocated && i.bytes > 0 && !is_kv(i))
            .filter_map(|i| i.category.clone())
            .collect();
        clauses.push((own, format!("its own other allocations ({})", cats.join(", "))));
    }
    if let Some(u) = r.unexplained_bytes.filter(|u| *u > NOISE && *u * 100 > r.query.free_bytes) {
        clauses.push((
            u,
            if skipped {
                "something no readable report shows (a report was skipped: see the note)".into()
            } else {
                "something no report of the run shows".into()
            },
        ));
    }
    let clauses: Vec<String> = clauses
        .iter()
        .enumerate()
        .map(|(k, (b, w))| format!("{} {}{w}", fmt_bytes(*b), if k == 0 { "went to " } else { "to " }))
        .collect();
    if !clauses.is_empty() {
        s.push_str(&format!("; after that query {}", join_and(&clauses)));
    }
    let done = r.items.iter().find(|i| i.kind == ItemKind::Pool);
    let free = if r.closed_by.is_some() {
        format!("{} {} free", fmt_bytes(r.free_bytes), if r.free_bytes == 1 { "was" } else { "were" })
    } else {
        format!("about {} were left", fmt_bytes(r.free_bytes))
    };
    let failed = format!(
        "{} ({})",
        crate::words::part(part).replace("its pool", "the pool").replace("its KV pool", "the KV pool"),
        crate::words::needed_words(requested, needed, api)
    );
    let pool_done = done.map(|d| format!("{} took {}", before_words(part, d.calls as usize), fmt_bytes(d.bytes)));
    let tail = if short_by > 0 {
        format!("{failed} no longer fit: {free}, short by {}", fmt_bytes(short_by))
    } else if r.free_bytes <= 0 {
        format!("{failed} no longer fit: nothing was left")
    } else {
        format!(
            "{failed} failed although {free}, {} more than it asked for: not a lack of free memory as far as the \
             reports tell (a limit, fragmentation, or memory that came back just before the query)",
            fmt_bytes(-short_by)
        )
    };
    match (clauses.is_empty(), pool_done) {
        (_, Some(d)) => s.push_str(&format!("; {d}, and {tail}.")),
        (true, None) => s.push_str(&format!("; {tail}.")),
        (false, None) => s.push_str(&format!(", and {tail}.")),
    }
    s
}

// ---------------------------------------------------------------------------------------
// The sizing formula.

/// Why a rank's pool differs from the others', in words; `gpu`: its GPU in words.
fn why_differs(w: &WhyDiffers, gpu: &str) -> String {
    match w {
        WhyDiffers::Told { delta, allocations, contexts } => {
            let mut allocs: Vec<(i64, String)> = allocations
                .iter()
                .map(|(pid, bytes, who)| (*pid, format!("{} allocated by {}", fmt_bytes(*bytes), who_is(who))))
                .collect();
            let mut contexts: Vec<(i64, String)> = contexts.iter().map(|w| (w.pid(), who_is(w))).collect();
            contexts.sort();
            allocs.sort();
            let mut held: Vec<String> = allocs.into_iter().map(|(_, s)| s).collect();
            match contexts.len() {
                0 => {}
                1 => held.push(format!("the context of {}", contexts[0].1)),
                _ => held.push(format!(
                    "the contexts of {}",
                    join_and(&contexts.into_iter().map(|(_, s)| s).collect::<Vec<_>>())
                )),
            }
            let more_less = if *delta < 0 { "less" } else { "more" };
            let mut s = format!("it was told {} {more_less} free memory than the other ranks", fmt_bytes(delta.abs()));
            if !held.is_empty() && *delta < 0 {
                s.push_str(&format!(": {gpu} also held {} at its query", join_and(&held)));
            }
            s
        }
        WhyDiffers::Share { fraction, others } => format!(
            "it asked for {:.1}% of what it was told, the other ranks {:.1}%",
            fraction * 100.0,
            others * 100.0
        ),
    }
}

/// What the ranks were told and asked for; `flagged_any`: some rank's pool differs from the
/// others'. (title, text).
pub fn sizing(d: &SizingDetail, flagged_any: bool) -> (String, String) {
    let rows: &[SizingRow] = &d.ranks;
    let reference = d.reference_pool_bytes;
    let flagged: Vec<&SizingRow> = rows.iter().filter(|r| r.flagged).collect();
    // The range of shares, compared as numbers ("84.5" < "126.0", which as text it is not).
    let shares = rows.iter().map(|r| r.fraction * 100.0);
    let (lo, hi) = (shares.clone().fold(f64::INFINITY, f64::min), shares.fold(f64::NEG_INFINITY, f64::max));
    let (lo, hi) = (format!("{lo:.1}"), format!("{hi:.1}"));
    let share = if lo == hi { format!("{lo}%") } else { format!("{lo}-{hi}%") };
    let n = rows.len();
    let (who_all, they) =
        if n == 1 { ("The process".to_string(), "it was") } else { (format!("{n} ranks"), "they were") };
    let told_range = crate::units::fmt_range(
        rows.iter().map(|r| r.told_bytes).min().unwrap_or(0),
        rows.iter().map(|r| r.told_bytes).max().unwrap_or(0),
    );
    let mut text = format!(
        "{who_all} sized {} from a free-memory query and asked for {share} of what {they} told ({told_range})",
        if n == 1 { "its pool" } else { "their pools" },
    );
    let title = if flagged_any {
        let names: Vec<String> = flagged
            .iter()
            .map(|r| {
                format!(
                    "{}'s pool ({}) is {:.1}% {} than the other ranks' ({}): {}",
                    r.rank.process,
                    fmt_bytes(r.pool_bytes),
                    r.differs_pct.abs(),
                    if r.differs_pct < 0.0 { "smaller" } else { "larger" },
                    fmt_bytes(reference),
                    r.why.clone().unwrap_or_default()
                )
            })
            .collect();
        text.push_str(&format!(". {}.", names.join("; ")));
        format!(
            "{} from the other ranks' by more than {POOL_DIFF_PCT}%",
            if flagged.len() == 1 {
                format!("{}'s pool differs", flagged[0].rank.process)
            } else {
                format!("{} ranks' pools differ", flagged.len())
            }
        )
    } else {
        let left: Vec<i64> = rows.iter().map(|r| r.told_bytes - r.pool_bytes).collect();
        text.push_str(&format!(
            ", leaving {} for everything that came after the query.",
            crate::units::fmt_range(*left.iter().min().unwrap_or(&0), *left.iter().max().unwrap_or(&0))
        ));
        format!(
            "Sizing: what {} told and what {} asked for",
            if n == 1 { "the process was" } else { "each rank was" },
            if n == 1 { "it" } else { "they" }
        )
    };
    (title, text)
}

// ---------------------------------------------------------------------------------------
// Untracked growth.

fn api_with_calls(api: &str, calls: i64) -> String {
    if calls > 1 {
        format!("{api} (x{calls})")
    } else {
        api.to_string()
    }
}

fn who_pids(names: &BTreeMap<i64, Who>, pids: &[i64]) -> String {
    match pids {
        [p] => names.get(p).map_or_else(|| format!("pid {p}"), who_is),
        _ => format!("pids {}", pid_list(pids)),
    }
}

/// A rise of untracked memory on GPU `device`: (title, text).
pub fn untracked_growth(d: &UntrackedDetail, device: &str, severity: Severity) -> (String, String) {
    let rise = d.rise_bytes;
    // Contexts of processes that began to use the GPU in between are expected.
    let expected: i64 = d.items.iter().filter(|i| i.expected).map(|i| i.bytes).sum();
    let net = rise - expected;
    let mut listed: Vec<&Item> = d.items.iter().filter(|i| (i.bytes != 0 || i.uncertain) && !i.expected).collect();
    listed.sort_by_key(|i| std::cmp::Reverse(i.bytes));
    let words: Vec<String> = listed
        .iter()
        .map(|i| match (&i.api, i.kind) {
            (Some(api), _) => {
                format!("{} in {} by {}", fmt_bytes(i.bytes), api_with_calls(api, i.calls), who_pids(&d.names, &i.pids))
            }
            (None, _) => format!("{} for {}", fmt_bytes(i.bytes), i.what),
        })
        .collect();
    let mut text = format!(
        "Untracked memory on {} rose by {} between the query at {} ({}, untracked {}) and the query at {} ({}, untracked {})",
        gpu(device),
        fmt_bytes(rise),
        fmt_secs(d.from.at_us),
        d.from.process,
        fmt_bytes(d.untracked_from_bytes),
        fmt_secs(d.to.at_us),
        d.to.process,
        fmt_bytes(d.untracked_to_bytes)
    );
    if expected > 0 {
        text.push_str(&format!(
            "; {} of it are the contexts of processes that began to use the GPU meanwhile (expected)",
            fmt_bytes(expected)
        ));
    }
    if words.is_empty() {
        text.push_str(": no measured call or new context explains the rest.");
    } else {
        text.push_str(&format!("{} {}", if expected > 0 { "; the rest:" } else { ":" }, join_and(&words)));
        if d.unexplained_bytes.abs() > NOISE {
            text.push_str(&format!("; {} is not explained by a measured call", fmt_bytes(d.unexplained_bytes)));
        }
        text.push('.');
    }
    for (pid, bytes, what) in &d.estimated_before {
        let beyond = rise - bytes;
        text.push_str(&format!(
            " {} sized its pool from the query at {} after setting {} aside for what comes after it ({what}){}.",
            d.names.get(pid).map_or_else(|| format!("pid {pid}"), who_is),
            fmt_secs(d.from.at_us),
            fmt_bytes(*bytes),
            if beyond > 0 {
                format!(": this rise is {} beyond it", fmt_bytes(beyond))
            } else {
                ": this rise is within it".to_string()
            },
        ));
    }
    let unestimated: Vec<i64> =
        d.sized_before.iter().copied().filter(|p| !d.estimated_before.iter().any(|(q, _, _)| q == p)).collect();
    if !unestimated.is_empty() {
        let names: Vec<String> = unestimated.iter().filter_map(|p| d.names.get(p)).map(who_is).collect();
        text.push_str(&format!(
            " {} sized {} from the query at {}, before this memory was taken: the figure {} sized from could \
             not see it.",
            join_and(&names),
            if names.len() == 1 { "its pool" } else { "their pools" },
            fmt_secs(d.from.at_us),
            if names.len() == 1 { "it" } else { "they" },
        ));
    }
    if severity == Severity::Warning {
        text.push_str(&format!(
            " Only {} remained free at {}, less than this rise: another like it would not fit.",
            fmt_bytes(d.free_after_bytes),
            fmt_secs(d.to.at_us)
        ));
    } else {
        text.push_str(&format!(
            " {} remained free at {}, {} times this rise.",
            fmt_bytes(d.free_after_bytes),
            fmt_secs(d.to.at_us),
            d.free_after_bytes / net.max(1)
        ));
    }
    // The same figure as the text's first sentence; the part beyond the new processes'
    // contexts beside it.
    let title = format!(
        "Untracked memory on {} rose by {} between two queries{}",
        gpu(device),
        fmt_bytes(rise),
        if expected > 0 { format!(" ({} beyond new processes' contexts)", fmt_bytes(net)) } else { String::new() }
    );
    (title, text)
}

// ---------------------------------------------------------------------------------------
// Growth at the end of the run.

/// Categories that kept growing on GPU `device`: (title, text).
pub fn growth(d: &GrowthDetail, device: &str) -> (String, String) {
    let growing: Vec<&CatGrowth> = d.categories.iter().filter(|c| c.kept_growing).collect();
    let words: Vec<String> = growing
        .iter()
        .map(|c| {
            format!(
                "{} by {} (from {} to {}, {}/s)",
                c.name,
                fmt_bytes(c.growth_bytes),
                fmt_bytes(c.third_bytes),
                fmt_bytes(c.end_bytes),
                fmt_bytes(c.bytes_per_s)
            )
        })
        .collect();
    let text = format!(
        "On {} {} in each of the three parts of the last third of the run ({} to {}) and {} still rising when \
         the last report was written: {}. A pool or a cache that is full does not grow; memory that keeps growing \
         at the end of a run is a leak or an unbounded cache, and the run will fail once it reaches the free memory.",
        gpu(device),
        if growing.len() == 1 { "this category grew" } else { "these categories grew" },
        fmt_secs(d.from_us),
        fmt_secs(d.to_us),
        if growing.len() == 1 { "was" } else { "were" },
        join_and(&words)
    );
    let title = format!(
        "{} kept growing on {} during the last third of the run",
        join_and(&growing.iter().map(|c| c.name.clone()).collect::<Vec<_>>()),
        gpu(device)
    );
    (title, text)
}

// ---------------------------------------------------------------------------------------
// Imbalance across ranks.

/// Categories whose peaks differ across the ranks: (title, text).
pub fn imbalance(d: &ImbalanceDetail) -> (String, String) {
    let name = |pid: i64| d.ranks.iter().find(|r| r.pid == pid).map_or(format!("pid {pid}"), |r| r.process.clone());
    let words: Vec<String> = d
        .categories
        .iter()
        .map(|s| {
            format!(
                "{}: {} at its peak held {}, {} only {} ({:.1}% less)",
                s.category,
                name(s.max_pid),
                fmt_bytes(s.max_bytes),
                name(s.min_pid),
                fmt_bytes(s.min_bytes),
                s.spread_pct
            )
        })
        .collect();
    let mut text = format!(
        "Across {} ranks of the launch, {} more than {IMBALANCE_PCT}%: {}. Tensor-parallel ranks hold the same \
         shapes; a difference means a rank was told less free memory, holds something the others do not, or \
         was given a different share.",
        d.ranks.len(),
        if d.categories.len() == 1 { "one category differs by" } else { "these categories differ by" },
        join_and(&words)
    );
    if !d.failed_left_out.is_empty() {
        text.push_str(&format!(
            " Left out: {} (an allocation failed; their figures stop there).",
            join_and(&d.failed_left_out.iter().map(|p| format!("pid {p}")).collect::<Vec<_>>())
        ));
    }
    let title = format!(
        "The ranks are imbalanced: {}",
        join_and(
            &d.categories.iter().map(|s| format!("{} differs by {:.1}%", s.category, s.spread_pct)).collect::<Vec<_>>()
        )
    );
    (title, text)
}

// ---------------------------------------------------------------------------------------
// Findings folded into one.

/// The GPUs of alike findings: `GPUs 1-7`, `GPUs 1, 3`; `host-a GPU 1, host-b GPU 1` when
/// they are on several hosts.
pub fn gpus(fs: &[&Finding]) -> String {
    let hosts: Vec<&str> = fs.iter().filter_map(|f| f.host.as_deref()).collect();
    if hosts.windows(2).all(|w| w[0] == w[1]) {
        let idx: Vec<i64> = fs.iter().filter_map(|f| f.device).collect();
        if fs.iter().any(|f| f.mig_index.is_some() || f.gpu.as_ref().is_some_and(|g| g.uuid_name.is_some())) {
            let each: Vec<String> =
                fs.iter().map(|f| crate::analysis::id_token(f.device.unwrap_or(0), f.mig_index, f.gpu.as_ref())).collect();
            return format!("{} {}", if each.len() == 1 { "GPU" } else { "GPUs" }, join_and(&each));
        }
        return format!("{} {}", if idx.len() == 1 { "GPU" } else { "GPUs" }, pid_list(&idx));
    }
    join_and(&fs.iter().map(|f| format!(
        "{} {}",
        f.host.as_deref().unwrap_or("?"),
        gpu(crate::analysis::id_token(f.device.unwrap_or(0), f.mig_index, f.gpu.as_ref()))
    )).collect::<Vec<_>>())
}

/// `ranks 1-7 (pids 6102-6108)` for processes named `rank N (pid P)`, else `7 processes
/// (pids ...)`.
fn processes(names: &[&str], pids: &[i64]) -> String {
    let ranks: Option<Vec<i64>> = names
        .iter()
        .map(|n| n.strip_prefix("rank ").and_then(|r| r.split(' ').next()).and_then(|r| r.parse().ok()))
        .collect();
    match ranks {
        Some(r) => format!("ranks {} (pids {})", pid_list(&r), pid_list(pids)),
        None => format!("{} processes (pids {})", names.len(), pid_list(pids)),
    }
}

/// `a` when every value is `a`, else `a to b`.
fn span(v: &[i64]) -> String {
    let (lo, hi) = (v.iter().min().copied().unwrap_or(0), v.iter().max().copied().unwrap_or(0));
    if lo == hi {
        fmt_bytes(lo)
    } else {
        format!("{} to {}", fmt_bytes(lo), fmt_bytes(hi))
    }
}

/// The title of findings with the same mechanism on several GPUs, shown as one (the first
/// is `fs[0]`, whose text stands for all): it names every GPU and process; None for a
/// single finding or a kind that is not folded.
pub fn group_title(fs: &[&Finding]) -> Option<String> {
    if fs.len() < 2 {
        return None;
    }
    let where_ = gpus(fs);
    match &fs[0].detail {
        Detail::Failure(d0) => {
            let ds: Vec<&FailDetail> =
                fs.iter().filter_map(|f| if let Detail::Failure(d) = &f.detail { Some(&**d) } else { None }).collect();
            let names: Vec<&str> = ds.iter().map(|d| d.process.as_str()).collect();
            let pids: Vec<i64> = ds.iter().map(|d| d.pid).collect();
            let bytes: Vec<i64> = ds.iter().map(|d| d.bytes).collect();
            let (part, size) = match d0.part_of {
                Part::Allocation => (span(&bytes), String::new()),
                _ => (d0.part.replace(" its ", " their "), format!("{}, ", span(&bytes))),
            };
            let part = match &d0.after_pool {
                Some(a) => format!("{part} for {}", a.replace("its ", "their ")),
                None => part,
            };
            Some(format!(
                "{} could not allocate {part} on {where_} ({size}{}{}{})",
                processes(&names, &pids),
                d0.api,
                d0.category.as_deref().map(|c| format!(", {c}")).unwrap_or_default(),
                d0.caller.as_deref().map(|c| format!(", from {}", callers::function(c))).unwrap_or_default()
            ))
        }
        Detail::Untracked(_) => {
            let rises: Vec<i64> = fs
                .iter()
                .filter_map(|f| if let Detail::Untracked(d) = &f.detail { Some(d.rise_bytes) } else { None })
                .collect();
            let each = if rises.iter().all(|r| *r == rises[0]) { " each" } else { "" };
            Some(format!("Untracked memory on {where_} rose by {}{each} between two queries", span(&rises)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why a rank's pool differs, in words, from its typed reason: who else held memory on
    /// its GPU (by pid), or the share it asked for.
    #[test]
    fn why_a_pool_differs_in_words() {
        const MIB: i64 = 1 << 20;
        let rank = |r: &str, pid| Who::Rank { rank: r.into(), pid };
        let told = WhyDiffers::Told {
            delta: -512 * MIB,
            allocations: vec![(7, 1024 * MIB, Who::Pid { pid: 7, label: "python3 x.py".into() }), (3, 2 * MIB, rank("1", 3))],
            contexts: vec![rank("2", 9), rank("0", 5)],
        };
        assert_eq!(
            why_differs(&told, "GPU 1"),
            "it was told 512.00 MiB less free memory than the other ranks: GPU 1 also held 2.00 MiB allocated by \
             rank 1 (pid 3), 1.00 GiB allocated by pid 7 (python3 x.py) and the contexts of rank 0 (pid 5) and \
             rank 2 (pid 9) at its query"
        );
        let more = WhyDiffers::Told { delta: 512 * MIB, allocations: Vec::new(), contexts: vec![rank("0", 5)] };
        assert_eq!(why_differs(&more, "GPU 1"), "it was told 512.00 MiB more free memory than the other ranks");
        let share = WhyDiffers::Share { fraction: 0.845, others: 0.9 };
        assert_eq!(why_differs(&share, "GPU 1"), "it asked for 84.5% of what it was told, the other ranks 90.0%");
    }
}
