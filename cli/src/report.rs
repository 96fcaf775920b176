//! `culedger report`: the verdict and one line per GPU first, then the processes, then one
//! section per host and device (optionally folded when ranks look alike).

use crate::analysis::{Holds, Reading};
use crate::clock::{fmt_age, fmt_secs, fmt_wall, Clock, ClockWords};
use crate::doc::{Block, Doc, Table};
use culedger_analysis::sites::SiteRow;
use crate::summary::{DeviceSummary, OverviewRow, ProcSummary, RunSummary};
use crate::units::{count, fmt_bytes, fmt_delta, fmt_opt, fmt_pct};

/// How the report is laid out.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Show the first of each set of alike devices in full, the others as a delta table:
    /// `Some(true)` `--fold`, `Some(false)` `--no-fold`, `None` when there are more than
    /// [`FOLD_ABOVE`] devices.
    pub fold: Option<bool>,
}

/// Alike devices are folded by default when a run has more than this many.
pub const FOLD_ABOVE: usize = 2;

/// A run-relative time in µs on the report's clock.
fn at(us: i64) -> String {
    fmt_secs(us)
}

/// `GPU 3` (`GPU 0 MIG 1` for a MIG device; `GPU-8f2e1a0b` where the host's numbering is not
/// known), or `host GPU 3` when the run spans several hosts.
fn gpu_name(host: &str, index: i64, mig_index: Option<i64>, uuid_name: Option<&str>, hosts: usize) -> String {
    let n = crate::analysis::gpu_words(&crate::analysis::gpu_token(index, mig_index, uuid_name));
    if hosts > 1 {
        format!("{host} {n}")
    } else {
        n
    }
}

/// [`crate::analysis::gpu_token`] of a device.
fn token(dev: &DeviceSummary) -> String {
    crate::analysis::gpu_token(dev.index, dev.mig_index, dev.uuid_name.as_deref())
}

/// Builds the report document of a run.
pub fn document(s: &RunSummary, opts: Options) -> Doc {
    let mut d = Doc::default();
    let hosts: std::collections::BTreeSet<&str> = s.processes.iter().map(|p| p.host.as_str()).collect();
    let runs = match s.run_ids.len() {
        0 => String::new(),
        1 => format!("; run {}", s.run_ids[0]),
        n => format!("; {n} runs merged: {}", s.run_ids.join(", ")),
    };
    d.push(Block::Title(format!(
        "culedger report: {} ({}, {}, {}{runs})",
        s.label,
        count(s.processes.len(), "process", "processes"),
        count(hosts.len(), "host", "hosts"),
        count(s.devices.len(), "GPU", "GPUs"),
    )));
    d.push(Block::Verdict { text: s.verdict.text.clone(), bad: s.verdict.failed });
    d.para(Clock { t0_us: s.t0_unix_us }.header());
    for n in &s.notes {
        d.push(Block::Alert(n.clone()));
    }

    d.push(Block::Heading("Overview".into()));
    d.table(overview(&s.overview, hosts.len()));

    d.push(Block::Heading("Processes".into()));
    // The host column with several hosts, pinned host memory when some process had any.
    let many_hosts = hosts.len() > 1;
    let pinned = s.processes.iter().any(|p| p.pinned_peak_bytes > 0 || p.registered_peak_bytes > 0);
    let mut headers = vec!["pid", "process"];
    if many_hosts {
        headers.push("host");
    }
    headers.extend(["started", "at", "ran", "status"]);
    if pinned {
        headers.push("pinned host (peak)");
    }
    let o = usize::from(many_hosts);
    // The host memory column is text ("1.00 MiB (1.00 MiB) + registered ..."): it wraps at its
    // spaces when the table is too wide, as the right-aligned numbers never do.
    let mut procs = Table::new(&headers, &[0, 3 + o, 4 + o]);
    for p in &s.processes {
        let mut row = vec![p.pid.to_string(), p.label.clone()];
        if many_hosts {
            row.push(p.host.clone());
        }
        row.extend([fmt_wall(p.start_unix_us), at(p.started_at_us), fmt_secs(p.duration_us), p.status.clone()]);
        if pinned {
            row.push(host_memory(p));
        }
        procs.row(row);
    }
    d.table(procs);
    for p in &s.processes {
        if p.lost_events > 0 || p.unknown_frees > 0 || !p.unwrapped_symbols.is_empty() {
            d.push(Block::Alert(format!(
                "pid {}: {} lost events, {} unknown frees, unwrapped symbols: [{}]",
                p.pid,
                p.lost_events,
                p.unknown_frees,
                p.unwrapped_symbols.join(", ")
            )));
        }
        for w in &p.warnings {
            d.para(format!("pid {} warning: {w}", p.pid));
        }
    }

    let shown: Vec<&str> = s.categories_shown.iter().map(String::as_str).collect();
    let fold = opts.fold.unwrap_or(s.devices.len() > FOLD_ABOVE);
    let folds = if fold { fold_classes(&s.devices) } else { (0..s.devices.len()).map(|i| vec![i]).collect() };
    for class in folds {
        let first = &s.devices[class[0]];
        device_section(&mut d, first, &shown);
        if class.len() > 1 {
            folded(&mut d, first, class[1..].iter().map(|&i| &s.devices[i]).collect(), hosts.len());
        }
    }
    d
}

/// The failed calls a device's failure rows stand for (each row: a request and its retries).
fn recorded_calls(dev: &DeviceSummary) -> i64 {
    dev.failures.iter().map(|f| 1 + f.retried_at_us.len() as i64).sum()
}

/// One line per GPU: tracked, untracked and device usage at the last query, failures and
/// the biggest category.
fn overview(rows: &[OverviewRow], hosts: usize) -> Table {
    let mut t = Table::new(
        &["GPU", "tracked", "untracked", "device used", "of total", "failed", "biggest category"],
        &[1, 2, 3, 4, 5],
    );
    for r in rows {
        t.row(vec![
            gpu_name(&r.host, r.index, r.mig_index, r.uuid_name.as_deref(), hosts),
            fmt_bytes(r.tracked_bytes),
            fmt_opt(r.untracked_bytes),
            fmt_opt(r.used_bytes),
            fmt_opt(r.total_bytes),
            r.failures.to_string(),
            match (&r.biggest_category, r.biggest_category_bytes) {
                (Some(c), Some(b)) => format!("{c} {}", fmt_bytes(b)),
                _ => "-".into(),
            },
        ]);
    }
    t
}

/// Pinned host memory now (peak), plus registered host memory when there is any.
fn host_memory(p: &ProcSummary) -> String {
    let mut s = format!("{} ({})", fmt_bytes(p.pinned_live_bytes), fmt_bytes(p.pinned_peak_bytes));
    if p.registered_peak_bytes > 0 {
        s.push_str(&format!(
            " + registered {} ({})",
            fmt_bytes(p.registered_live_bytes),
            fmt_bytes(p.registered_peak_bytes)
        ));
    }
    s
}

/// What the last reading says, compared at the query itself.
pub fn reading_sentence(r: &Reading, max: Option<&Reading>) -> String {
    let what = if r.api == "nvml" { "NVML reading" } else { "free-memory query" };
    let mut s = format!(
        "At the last {what} ({} at {}, {} before the last report): device used {} of {}, \
         this run's processes had {} allocated, untracked {} (contexts, modules, graphs, peer mappings, rounding, \
         other processes)",
        r.pid,
        at(r.at_us),
        fmt_age(r.age_us),
        fmt_bytes(r.used_bytes),
        fmt_bytes(r.total_bytes),
        fmt_bytes(r.tracked_bytes),
        fmt_bytes(r.untracked_bytes),
    );
    if let Some(m) = max.filter(|m| m.untracked_bytes > r.untracked_bytes) {
        s.push_str(&format!("; most untracked: {} at {} ({})", fmt_bytes(m.untracked_bytes), at(m.at_us), m.pid));
    }
    s.push('.');
    s
}

fn device_section(d: &mut Doc, dev: &DeviceSummary, shown: &[&str]) {
    let total = dev.total_bytes.unwrap_or(0);
    d.push(Block::Heading(format!(
        "{} {} ({} total)",
        dev.host,
        crate::analysis::gpu_words(&token(dev)),
        fmt_opt(dev.total_bytes)
    )));
    if dev.processes.len() > 1 {
        let mut t = Table::new(&["pid", "process", "holds", "live", "peak", "allocs", "frees"], &[0, 3, 4, 5, 6]);
        for p in &dev.processes {
            t.row(vec![
                p.pid.to_string(),
                p.label.clone(),
                p.holds.as_str().to_string(),
                // A context costs device memory no allocation tracks: its estimate.
                match p.context_bytes {
                    Some(b) if p.live_bytes == 0 => format!("(~{})", fmt_bytes(b)),
                    _ => fmt_bytes(p.live_bytes),
                },
                fmt_bytes(p.peak_bytes),
                p.alloc_count.to_string(),
                p.free_count.to_string(),
            ]);
        }
        t.row(vec![
            "".into(),
            format!("sum of {} processes", dev.processes.len()),
            "".into(),
            fmt_bytes(dev.live_bytes),
            fmt_bytes(dev.peak_bytes),
            dev.processes.iter().map(|p| p.alloc_count).sum::<i64>().to_string(),
            dev.processes.iter().map(|p| p.free_count).sum::<i64>().to_string(),
        ]);
        d.table(t.abbreviate(&[1]));
        let contexts: Vec<i64> = dev.processes.iter().filter(|p| p.live_bytes == 0).filter_map(|p| p.context_bytes).collect();
        if !contexts.is_empty() {
            d.para(format!(
                "(~{}): what a context costs here, estimated; device memory no allocation tracks, not in the sum \
                 ({} in all)",
                fmt_bytes(contexts[0]),
                fmt_bytes(contexts.iter().sum())
            ));
        }
    } else if let Some(p) = dev.processes.first() {
        d.para(format!("process {} ({}): {}", p.pid, p.label, p.holds.as_str()));
    }

    let mut t = Table::new(&["category", "live", "peak", "share of device", "live allocs"], &[1, 2, 3, 4]);
    for c in dev.categories.iter().filter(|c| shown.contains(&c.name.as_str())) {
        t.row(vec![
            c.name.clone(),
            fmt_bytes(c.live_bytes),
            fmt_bytes(c.peak_bytes),
            fmt_pct(c.live_bytes, total),
            c.allocs.to_string(),
        ]);
    }
    t.row(vec![
        "tracked".into(),
        fmt_bytes(dev.live_bytes),
        fmt_bytes(dev.peak_bytes),
        fmt_pct(dev.live_bytes, total),
        dev.categories.iter().map(|c| c.allocs).sum::<i64>().to_string(),
    ]);
    d.table(t);
    d.para(match &dev.last_query {
        Some(r) => reading_sentence(r, dev.max_untracked.as_ref()),
        None => format!(
            "tracked {}; device usage unknown: no process of the run queried free memory on this GPU",
            fmt_bytes(dev.live_bytes)
        ),
    });

    if !dev.key_probes.is_empty() {
        d.push(Block::Sub(format!("Free-memory queries that matter ({} made)", dev.probes_total)));
        let mut t = Table::new(&["at", "process", "api", "told free", "process had", "why it matters"], &[0, 3, 4]);
        for p in &dev.key_probes {
            let told = if p.error != 0 { format!("error {}", p.error) } else { fmt_opt(p.free_bytes) };
            let of_total = match p.total_bytes {
                Some(t) if Some(t) != dev.total_bytes => format!(" of {}", fmt_bytes(t)),
                _ => String::new(),
            };
            t.row(vec![
                at(p.at_us),
                format!("{} {}", p.pid, p.label),
                p.api.clone(),
                told + &of_total,
                fmt_bytes(p.tracked_bytes),
                p.why.clone(),
            ]);
        }
        d.table(t.abbreviate(&[1]));
    }

    if dev.failures_total > 0 {
        d.push(Block::Sub(if dev.failed_requests == dev.failures_total {
            format!("Failed allocations ({})", dev.failures_total)
        } else {
            format!(
                "Failed allocations ({}, {} with the retries)",
                count(dev.failed_requests as usize, "request", "requests"),
                count(dev.failures_total as usize, "failed call", "failed calls")
            )
        }));
        for f in &dev.failures {
            let cats: Vec<String> =
                f.categories.iter().filter(|(_, v)| **v != 0).map(|(k, v)| format!("{k} {}", fmt_bytes(*v))).collect();
            d.push(Block::Alert(format!(
                "{} {} at {}: {} of {} failed with {}{}; the process held {} ({}); last query before it{}",
                f.pid,
                f.label,
                at(f.at_us),
                f.api,
                fmt_bytes(f.bytes),
                f.error_name,
                match f.retried_at_us.as_slice() {
                    [] => String::new(),
                    [one] => format!(", and again when retried at {}", at(*one)),
                    more => format!(", and again in {} retries (the last at {})", more.len(), at(more[more.len() - 1])),
                },
                fmt_bytes(f.live_bytes),
                if cats.is_empty() { "nothing".into() } else { cats.join(", ") },
                match (f.last_probe_at_us, f.last_probe_free_bytes) {
                    (Some(t), Some(free)) => format!(" at {}: free {}", at(t), fmt_bytes(free)),
                    (Some(t), None) => format!(" at {}: free unknown", at(t)),
                    _ => ": none".into(),
                }
            )));
        }
        if recorded_calls(dev) < dev.failures_total {
            d.para(format!("({} more failures not recorded in detail)", dev.failures_total - recorded_calls(dev)));
        }
    }

    if !dev.driver_costs.is_empty() {
        let measured = if dev.driver_cost_measured_bytes != dev.driver_cost_bytes {
            format!("; measured {}, less what other processes did meanwhile", fmt_bytes(dev.driver_cost_measured_bytes))
        } else {
            String::new()
        };
        d.push(Block::Sub(format!(
            "Hidden driver costs ({}, approximate{measured})",
            fmt_bytes(dev.driver_cost_bytes)
        )));
        let mut t = Table::new(&["process", "api", "calls", "bytes", "measured"], &[2, 3, 4]);
        let mut notes = Vec::new();
        for c in &dev.driver_costs {
            let mut bytes = fmt_bytes(c.bytes);
            if c.uncertain {
                bytes.push_str(" (?)");
            }
            if !c.notes.is_empty() {
                notes.push(format!("[{}] {} {}: {}", notes.len() + 1, c.pid, c.api, c.notes.join("; ")));
                bytes = format!("[{}] {bytes}", notes.len());
            }
            t.row(vec![
                format!("{} {}", c.pid, c.label),
                c.api.clone(),
                c.calls.to_string(),
                bytes,
                fmt_bytes(c.measured_bytes),
            ]);
        }
        d.table(t.abbreviate(&[0]));
        for n in notes {
            d.push(Block::Note(n));
        }
    }

    sites_section(d, &dev.sites);

    if !dev.top_allocations.is_empty() {
        // One API for all of them (the usual case) is said once, in the heading.
        let one_api = dev.top_allocations.iter().all(|a| a.api == dev.top_allocations[0].api);
        d.push(Block::Sub(if one_api {
            format!("Top allocations (all {})", dev.top_allocations[0].api)
        } else {
            "Top allocations".into()
        }));
        let callers = dev.top_allocations.iter().any(|a| a.caller.is_some());
        let mut headers = vec!["at", "process", "size", "category"];
        if !one_api {
            headers.push("api");
        }
        if callers {
            headers.push("caller");
        }
        let mut t = Table::new(&headers, &[0, 2]);
        for a in &dev.top_allocations {
            // Flags follow the category (they explain it), so the caller keeps its room.
            let category = [(a.exported, "exported"), (a.captured, "captured")]
                .iter()
                .filter(|(on, _)| *on)
                .fold(a.category.clone(), |c, (_, flag)| format!("{c} {flag}"));
            let (when, size) = if a.count > 1 {
                (format!("{}-{}", at(a.at_us).trim_end_matches('s'), at(a.last_at_us)), format!("{} x {}", a.count, fmt_bytes(a.bytes)))
            } else {
                (at(a.at_us), fmt_bytes(a.bytes))
            };
            let mut row = vec![when, format!("{} {}", a.pid, a.label), size, category];
            if !one_api {
                row.push(a.api.clone());
            }
            if callers {
                row.push(a.caller.clone().unwrap_or_default());
            }
            t.row(row);
        }
        d.table(t.abbreviate(&[1]));
    }

    let (i, g) = (&dev.ipc, &dev.graphs);
    if i.exported_count + i.imported_count + g.captures + g.instantiations > 0 {
        d.push(Block::Sub("IPC and graphs".into()));
        d.para(format!(
            "IPC: exported {} ({}); opened {} ({}), {} still open ({})",
            count(i.exported_count as usize, "buffer", "buffers"),
            fmt_bytes(i.exported_bytes),
            count(i.imported_count as usize, "peer buffer", "peer buffers"),
            fmt_bytes(i.imported_bytes),
            i.imported_live_count,
            fmt_bytes(i.imported_live_bytes)
        ));
        d.para(format!(
            "Graphs: {} ({} active), {} allocations while capturing ({}), {} (~{})",
            count(g.captures as usize, "capture", "captures"),
            g.captures_active,
            g.captured_allocs,
            fmt_bytes(g.captured_bytes),
            count(g.instantiations as usize, "instantiation", "instantiations"),
            fmt_bytes(g.instantiate_bytes)
        ));
        if g.exec_destroys > 0 {
            // What the destroyed executables gave back (measured as a negative cost).
            d.para(format!(
                "Graph executables destroyed: {} (~{} given back), ~{} still held",
                g.exec_destroys,
                fmt_bytes(-g.exec_destroy_bytes),
                fmt_bytes(g.instantiate_bytes + g.exec_destroy_bytes)
            ));
        }
    }
}

/// What makes devices alike for folding: the same host, the same number of processes
/// holding the same kinds of things, the same non-empty categories, and failures on both
/// or neither.
fn fold_key(d: &DeviceSummary) -> (String, Vec<String>, Vec<String>, bool) {
    let mut holds: Vec<String> = d.processes.iter().map(|p| p.holds.as_str().to_string()).collect();
    holds.sort();
    (
        d.host.clone(),
        holds,
        d.categories.iter().filter(|c| c.peak_bytes > 0).map(|c| c.name.clone()).collect(),
        d.failures_total > 0,
    )
}

/// Devices grouped into classes of alike devices, each in device order, classes in the
/// order of their first device.
pub(crate) fn fold_classes(devices: &[DeviceSummary]) -> Vec<Vec<usize>> {
    classes_by(devices, fold_key)
}

/// Items grouped by `key`: the indices of each class in order, classes in the order of
/// their first item (`diff` folds its device pairs the same way).
pub(crate) fn classes_by<T, K: PartialEq>(items: &[T], key: impl Fn(&T) -> K) -> Vec<Vec<usize>> {
    let mut classes: Vec<(K, Vec<usize>)> = Vec::new();
    for (i, d) in items.iter().enumerate() {
        let k = key(d);
        match classes.iter_mut().find(|(c, _)| *c == k) {
            Some((_, members)) => members.push(i),
            None => classes.push((k, vec![i])),
        }
    }
    classes.into_iter().map(|(_, m)| m).collect()
}

/// A figure of a folded device, with its difference from the first device when there is one.
fn with_delta(value: Option<i64>, first: Option<i64>) -> String {
    match (value, first) {
        (Some(v), Some(f)) if v != f => format!("{} ({})", fmt_bytes(v), fmt_delta(v - f)),
        (v, _) => fmt_opt(v),
    }
}

/// The devices folded under `first`: one row each with its figures, and their difference
/// from `first` in parentheses where they differ.
fn folded(d: &mut Doc, first: &DeviceSummary, others: Vec<&DeviceSummary>, hosts: usize) {
    let names: Vec<String> = others.iter().map(|o| crate::analysis::gpu_words(&token(o))).collect();
    d.push(Block::Heading(
        format!(
            "{} {} (folded: alike {}; differences from {} in parentheses)",
            if hosts > 1 { first.host.as_str() } else { "" },
            names.join(", "),
            if others.len() == 1 { "GPU" } else { "GPUs" },
            crate::analysis::gpu_words(&token(first))
        )
        .trim_start()
        .to_string(),
    ));
    let mut t =
        Table::new(&["GPU", "processes", "tracked", "untracked", "driver costs", "failed allocation"], &[0, 2, 3, 4]);
    let untracked = |x: &DeviceSummary| x.last_query.as_ref().map(|r| r.untracked_bytes);
    for o in others {
        let mut procs: Vec<String> = o
            .processes
            .iter()
            .filter(|p| p.holds == Holds::Allocations)
            .map(|p| format!("{} {}", p.pid, p.label))
            .collect();
        let contexts = o.processes.iter().filter(|p| p.holds != Holds::Allocations).count();
        if contexts > 0 {
            procs.push(format!("+{}", count(contexts, "context", "contexts")));
        }
        t.row(vec![
            token(o),
            procs.join(" "),
            with_delta(Some(o.live_bytes), Some(first.live_bytes)),
            with_delta(untracked(o), untracked(first)),
            with_delta(Some(o.driver_cost_bytes), Some(first.driver_cost_bytes)),
            o.failures.first().map_or("-".into(), |f| format!("{} {} at {}", f.api, fmt_bytes(f.bytes), at(f.at_us))),
        ]);
    }
    d.table(t);
}
/// Rows shown in the report's table (the rest are summed in one line).
const REPORT_ROWS: usize = 20;

/// The report's "Where the memory was allocated" section of one device.
fn sites_section(d: &mut Doc, rows: &[SiteRow]) {
    if rows.is_empty() {
        return;
    }
    d.push(Block::Sub("Where the memory was allocated".into()));
    // Live and all allocations share a column, so the caller keeps its room at 80 columns.
    // The rule behind each category goes with the caller, in brackets (the one free-text column
    // wraps; the category stays a short column): only when a report names rules (reports
    // written before report-time categories do not).
    let rules = rows.iter().take(REPORT_ROWS).any(|r| r.rule.is_some());
    let caller = if rules { "caller [rule]" } else { "caller" };
    let mut t = Table::new(&[caller, "category", "live", "peak", "allocs live/all", "pids"], &[2, 3, 4]);
    for r in rows.iter().take(REPORT_ROWS) {
        let pids: Vec<String> = r.pids.iter().map(i64::to_string).collect();
        let mut cells = vec![match (&r.rule, rules) {
            (Some(rule), _) => format!("{}\n[{rule}]", r.caller),
            (None, true) => format!("{}\n[default]", r.caller),
            (None, false) => r.caller.clone(),
        }];
        cells.push(r.category.clone());
        cells.extend([
            fmt_bytes(r.live_bytes),
            fmt_bytes(r.peak_bytes),
            format!("{}/{}", r.allocs, r.total_allocs),
            pids.join(" "),
        ]);
        t.row(cells);
    }
    d.table(t);
    if rows.len() > REPORT_ROWS {
        let rest = &rows[REPORT_ROWS..];
        d.para(format!("{} more callers hold {}", rest.len(), fmt_bytes(rest.iter().map(|r| r.live_bytes).sum())));
    }
}
