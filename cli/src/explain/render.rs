//! `culedger explain` as text and markdown: the verdict, then the findings, numbered, most
//! important first. Failed allocations with the same mechanism on several GPUs are shown
//! once in full and then as one row per GPU.

use culedger_analysis::findings::{Detail, FailDetail, Finding, Kind, Severity};
use super::recon::{Item, ItemKind, Recon};
use super::Explanation;
use crate::clock::{fmt_secs, Clock, ClockWords};
use crate::doc::{Block, Doc, Table};
use crate::units::{fmt_bytes, fmt_delta};

fn gpu(f: &Finding) -> String {
    f.device.map_or_else(String::new, |d| {
        crate::analysis::gpu_words(&crate::analysis::id_token(d, f.mig_index, f.gpu.as_ref()))
    })
}

/// A GPU among folded findings: with its host when they are on several.
fn gpu_among(f: &Finding, fs: &[&Finding]) -> String {
    match fs.iter().any(|g| g.host != f.host) {
        true => format!("{} {}", f.host.as_deref().unwrap_or("?"), gpu(f)),
        false => gpu(f),
    }
}

/// `-512.00 MiB`, `~` for estimates and `(?)` for figures that may hold something else.
fn minus(it: &Item) -> String {
    let mut s = fmt_delta(-it.bytes);
    if it.estimated {
        s = format!("~{s}");
    }
    if it.uncertain {
        s.push_str(" (?)");
    }
    s
}

/// The reconciliation as a table: told, minus each item, equals free; requested; short by.
fn recon_table(r: &Recon, d: Option<&FailDetail>) -> Table {
    let mut t = Table::new(&["", "bytes"], &[1]);
    // The call sites of an item go on its own line below it ("from ..."): the item's text
    // keeps the width, and the bytes stay beside it.
    let mut row = |label: String, bytes: String, callers: Vec<String>| {
        let label = if callers.is_empty() { label } else { format!("{label}\nfrom {}", callers.join(", ")) };
        t.row(vec![label, bytes]);
    };
    row(
        format!("told free at {} ({}, {})", fmt_secs(r.query.at_us), r.query.api, r.query.process),
        fmt_bytes(r.query.free_bytes),
        r.query.caller.iter().cloned().collect(),
    );
    let with_chain = |short: &Option<String>, chain: &Option<String>| -> Vec<String> {
        match (short, chain) {
            (Some(s), Some(c)) if c.contains(" <- ") => vec![format!("{s} ({c})")],
            (s, _) => s.iter().cloned().collect(),
        }
    };
    for it in &r.items {
        row(format!("- {}", it.what), minus(it), it.callers.clone());
    }
    if let Some(u) = r.unexplained_bytes.filter(|u| *u != 0) {
        row("- not explained by any report of the run".into(), fmt_delta(-u), Vec::new());
    }
    let end = match (&r.closed_by, d) {
        (Some(q), _) => format!("= free (the query at {} told it)", fmt_secs(q.at_us)),
        (None, _) => "= left (estimated: no query followed)".to_string(),
    };
    row(end, fmt_bytes(r.free_bytes), Vec::new());
    if let Some(d) = d {
        row(format!("requested: {} of {}", d.api, d.part), fmt_bytes(d.bytes), with_chain(&d.caller, &d.caller_chain));
        if d.bytes == 0 && d.needed_bytes > 0 {
            row(format!("needed: what a successful {} cost it", d.api), fmt_bytes(d.needed_bytes), Vec::new());
        }
        if let Some(s) = d.short_by_bytes {
            let shortage = s > 0 || d.free_bytes.is_some_and(|f| f <= 0);
            row(
                if shortage { "short by".into() } else { "to spare (not a shortage)".into() },
                fmt_bytes(s.abs()),
                Vec::new(),
            );
        }
    }
    t
}

/// The folded rows of untracked growth with the same mechanism.
fn folded_untracked(fs: &[&Finding]) -> Table {
    let mut t = Table::new(&["GPU", "from", "to", "rise", "free after"], &[1, 2, 3, 4]);
    for f in fs {
        let Detail::Untracked(u) = &f.detail else { continue };
        t.row(vec![
            gpu_among(f, fs),
            fmt_secs(u.from.at_us),
            fmt_secs(u.to.at_us),
            fmt_bytes(u.rise_bytes),
            fmt_bytes(u.free_after_bytes),
        ]);
    }
    t
}

/// The folded rows of failures with the same mechanism; the size asked for among them when
/// it differs.
fn folded_table(fs: &[&Finding]) -> Table {
    let asked: Vec<i64> =
        fs.iter().filter_map(|f| if let Detail::Failure(d) = &f.detail { Some(d.bytes) } else { None }).collect();
    let sizes = asked.iter().any(|b| *b != asked[0]);
    let mut headers = vec!["GPU", "process"];
    if sizes {
        headers.push("asked");
    }
    headers.extend(["told free", "at", "hidden costs", "other processes", "free", "short by"]);
    let first = headers.len() - 6;
    let mut t = Table::new(&headers, &(first.min(2)..headers.len()).collect::<Vec<_>>());
    for f in fs {
        let Detail::Failure(d) = &f.detail else { continue };
        let r = d.reconciliation.as_ref();
        let sum = |k: ItemKind| r.map_or("-".to_string(), |r| fmt_bytes(r.sum(k)));
        let mut row = vec![gpu_among(f, fs), d.process.clone()];
        if sizes {
            row.push(fmt_bytes(d.bytes));
        }
        row.extend([
            r.map_or("-".into(), |r| fmt_bytes(r.query.free_bytes)),
            r.map_or("-".into(), |r| fmt_secs(r.query.at_us)),
            sum(ItemKind::DriverCost),
            sum(ItemKind::OtherProcesses),
            d.free_bytes.map_or("-".into(), fmt_bytes),
            d.short_by_bytes.map_or("-".into(), fmt_bytes),
        ]);
        t.row(row);
    }
    t.abbreviate(&[1])
}

fn sizing_table(f: &Finding) -> Option<Table> {
    let Detail::Sizing(s) = &f.detail else { return None };
    let firsts = s.ranks.iter().any(|r| r.first_told_bytes.is_some());
    let mut headers = vec!["process", "GPU"];
    if firsts {
        headers.push("first query told");
    }
    headers.extend(["sizing query told", "at", "pool asked for", "share"]);
    let others = s.ranks.len() > 1;
    if others {
        headers.push("vs others");
    }
    let mut t = Table::new(&headers, &(2..headers.len()).filter(|&i| i != 0).collect::<Vec<_>>());
    for r in &s.ranks {
        let gpu = crate::analysis::id_token(r.rank.device, r.rank.mig_index, Some(&r.rank.gpu));
        let mut row = vec![r.rank.process.clone(), gpu];
        if firsts {
            row.push(r.first_told_bytes.map_or("-".into(), fmt_bytes));
        }
        row.extend([
            fmt_bytes(r.told_bytes),
            fmt_secs(r.at_us),
            format!("{}{}", fmt_bytes(r.pool_bytes), if r.failed { " (failed)" } else { "" }),
            format!("{:.1}%", r.fraction * 100.0),
        ]);
        if others {
            row.push(format!("{:+.1}%{}", r.differs_pct, if r.flagged { " !" } else { "" }));
        }
        t.row(row);
    }
    Some(t.abbreviate(&[0]))
}

fn items_table(items: &[Item], extra: &[(String, i64)]) -> Table {
    let with_callers = items.iter().any(|i| !i.callers.is_empty());
    let mut headers = vec!["", "bytes"];
    if with_callers {
        headers.push("call sites");
    }
    let mut t = Table::new(&headers, &[1]);
    for it in items {
        let mut b = fmt_bytes(it.bytes);
        if it.estimated {
            b = format!("~{b}");
        }
        if it.uncertain {
            b.push_str(" (?)");
        }
        let mut row = vec![it.what.clone(), b];
        if with_callers {
            row.push(it.callers.join(", "));
        }
        t.row(row);
    }
    for (label, bytes) in extra {
        let mut row = vec![label.clone(), fmt_bytes(*bytes)];
        if with_callers {
            row.push(String::new());
        }
        t.row(row);
    }
    t
}

fn growth_table(f: &Finding) -> Option<Table> {
    let Detail::Growth(g) = &f.detail else { return None };
    let mut t = Table::new(
        &["category", "peak", "at", "when the last third began", "at the end", "growth", "per second", "kept growing"],
        &[1, 2, 3, 4, 5, 6],
    );
    for c in &g.categories {
        t.row(vec![
            c.name.clone(),
            fmt_bytes(c.peak_bytes),
            fmt_secs(c.peak_at_us),
            fmt_bytes(c.third_bytes),
            fmt_bytes(c.end_bytes),
            fmt_delta(c.growth_bytes),
            fmt_delta(c.bytes_per_s),
            if c.kept_growing { "yes" } else { "no" }.into(),
        ]);
    }
    Some(t)
}

fn imbalance_table(f: &Finding) -> Option<Table> {
    let Detail::Imbalance(d) = &f.detail else { return None };
    let cats: Vec<usize> =
        d.categories.iter().filter_map(|s| crate::model::CATEGORIES.iter().position(|c| *c == s.category)).collect();
    let mut headers: Vec<String> = vec!["process".into()];
    headers.extend(cats.iter().map(|&c| format!("{} peak", crate::model::CATEGORIES[c])));
    let hdr: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut t = Table::new(&hdr, &(1..=cats.len()).collect::<Vec<_>>());
    for r in &d.ranks {
        let mut row = vec![r.process.clone()];
        row.extend(cats.iter().map(|&c| fmt_bytes(r.peaks[c])));
        t.row(row);
    }
    Some(t.abbreviate(&[0]))
}

fn callers_line(f: &Finding, recorded: bool) -> Option<String> {
    if !f.callers.is_empty() {
        return Some(format!("Call sites: {}.", f.callers.join(", ")));
    }
    match f.kind {
        Kind::Imbalance | Kind::Sizing => None,
        _ if recorded => Some("Call sites: none recorded for these records.".into()),
        _ => Some(
            "Call site unknown: these reports record no call sites (written before culedger recorded them).".into(),
        ),
    }
}

/// The explanation as a document.
pub fn document(e: &Explanation) -> Doc {
    let mut d = Doc::default();
    let runs = match e.run_ids.len() {
        0 => String::new(),
        1 => format!("; run {}", e.run_ids[0]),
        n => format!("; {n} runs merged"),
    };
    d.push(Block::Title(format!(
        "culedger explain: {} ({}, {}{runs})",
        e.label,
        crate::units::count(e.processes, "process", "processes"),
        crate::units::count(e.devices, "GPU", "GPUs"),
    )));
    d.push(Block::Verdict { text: e.verdict.clone(), bad: e.exit_code != 0 });
    d.para(Clock { t0_us: e.t0_unix_us }.header());
    for n in &e.notes {
        d.push(Block::Alert(format!("Note: {n}")));
    }
    for l in &e.impossible {
        d.push(Block::Alert(format!("Impossible figures: {l}.")));
    }
    let fs = &e.findings;
    let mut shown = vec![false; fs.len()];
    let mut i = 0;
    let mut number = 0;
    while i < fs.len() {
        let f = &fs[i];
        number += 1;
        // Later findings with the same mechanism: one row each, under the first, whose
        // heading names them all.
        let same: Vec<usize> = (i + 1..fs.len()).filter(|&k| fs[k].folded_into == Some(i)).collect();
        let mut all = vec![f];
        all.extend(same.iter().map(|&k| &fs[k]));
        all.sort_by_key(|f| (f.host.clone(), f.device, f.mig_index));
        let title = f.folded_title.as_ref().unwrap_or(&f.title);
        d.push(Block::Heading(format!("{number}. {title}")));
        if f.severity == Severity::Failure {
            d.push(Block::Alert(f.text.clone()));
        } else {
            d.para(f.text.clone());
        }
        match &f.detail {
            Detail::Failure(fd) => {
                if let Some(r) = &fd.reconciliation {
                    d.table(recon_table(r, Some(fd)));
                }
                if fd.later_failures > 0 {
                    d.para(format!(
                        "{} of the same burst failed after it (an allocator retries a failed request).",
                        crate::units::count(fd.later_failures, "more attempt", "more attempts")
                    ));
                }
            }
            Detail::Untracked(u) => {
                let mut extra = Vec::new();
                if u.unexplained_bytes != 0 {
                    extra.push(("not explained by a measured call".to_string(), u.unexplained_bytes));
                }
                extra.push(("= the rise of untracked memory".to_string(), u.rise_bytes));
                d.table(items_table(&u.items, &extra));
            }
            _ => {}
        }
        for t in [sizing_table(f), growth_table(f), imbalance_table(f)].into_iter().flatten() {
            d.table(t);
        }
        // A failure's reconciliation names its call sites item by item ("from ...").
        let in_table = matches!(&f.detail, Detail::Failure(fd) if fd.reconciliation.is_some()) && !f.callers.is_empty();
        if let Some(line) = callers_line(f, e.sites_recorded).filter(|_| !in_table) {
            d.para(line);
        }
        if !same.is_empty() {
            d.push(Block::Sub(format!("The text above is {}'s; on each of the {} GPUs:", gpu_among(f, &all), all.len())));
            d.table(if matches!(f.detail, Detail::Failure(_)) { folded_table(&all) } else { folded_untracked(&all) });
            for k in same {
                shown[k] = true;
            }
        }
        shown[i] = true;
        while i < fs.len() && shown[i] {
            i += 1;
        }
    }
    if fs.is_empty() && e.impossible.is_empty() {
        d.para("Nothing alarming was found; `culedger report` shows where the memory went.");
    }
    if let Some(a) = &e.what_to_change {
        what_to_change(&mut d, a);
    }
    d
}

/// "What to change", most useful first.
pub fn what_to_change(d: &mut Doc, a: &crate::explain::Advice) {
    d.push(Block::Heading("What to change".into()));
    for (k, line) in a.lines.iter().enumerate() {
        d.para(format!("{}. {line}.", k + 1));
    }
}
