//! `culedger report`: one section per host and device.

use crate::analysis::{DeviceSummary, RunSummary};
use crate::doc::{Block, Doc, Table};
use crate::units::{fmt_bytes, fmt_ms, fmt_opt, fmt_pct};

/// Builds the report document of a run.
pub fn document(s: &RunSummary) -> Doc {
    let mut d = Doc::default();
    let hosts: std::collections::BTreeSet<&str> = s.processes.iter().map(|p| p.host.as_str()).collect();
    d.push(Block::Title(format!(
        "culedger report: {} ({}, {}, {})",
        s.label,
        count(s.processes.len(), "process", "processes"),
        count(hosts.len(), "host", "hosts"),
        count(s.devices.len(), "device", "devices")
    )));

    let mut procs = Table::new(&["pid", "host", "process", "exit", "ran", "pinned host (peak)"], &[0, 4, 5]);
    for p in &s.processes {
        let exit = match (p.exit.as_str(), p.exit_code) {
            ("exit", Some(c)) => format!("exit {c}"),
            ("exit", None) => "exited".into(),
            ("signal", _) => p.signal.map_or_else(|| "signal".into(), |s| format!("signal {s}")),
            (other, _) => other.to_string(),
        };
        procs.row(vec![p.pid.to_string(), p.host.clone(), p.role.clone(), exit, fmt_ms(p.duration_ms), host_memory(p)]);
    }
    d.push(Block::Heading("Processes".into()));
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
    for dev in &s.devices {
        device_section(&mut d, dev);
    }
    d
}

/// Pinned host memory now (peak), plus registered host memory when there is any.
fn host_memory(p: &crate::analysis::ProcSummary) -> String {
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

/// `count(3, "process", "processes")` -> `3 processes`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn device_section(d: &mut Doc, dev: &DeviceSummary) {
    let total = dev.total_bytes.unwrap_or(0);
    d.push(Block::Heading(format!("{} GPU {} ({} total)", dev.host, dev.index, fmt_opt(dev.total_bytes))));
    if dev.processes.len() > 1 {
        let mut t = Table::new(&["pid", "process", "live", "peak", "allocs", "frees"], &[0, 2, 3, 4, 5]);
        for p in &dev.processes {
            t.row(vec![
                p.pid.to_string(),
                p.role.clone(),
                fmt_bytes(p.live_bytes),
                fmt_bytes(p.peak_bytes),
                p.alloc_count.to_string(),
                p.free_count.to_string(),
            ]);
        }
        t.row(vec![
            "".into(),
            format!("sum of {} processes", dev.processes.len()),
            fmt_bytes(dev.live_bytes),
            fmt_bytes(dev.peak_bytes),
            dev.processes.iter().map(|p| p.alloc_count).sum::<i64>().to_string(),
            dev.processes.iter().map(|p| p.free_count).sum::<i64>().to_string(),
        ]);
        d.table(t);
    } else if let Some(p) = dev.processes.first() {
        d.para(format!("process {} ({})", p.pid, p.role));
    }

    let mut t = Table::new(&["category", "live", "peak", "share of device", "live allocs"], &[1, 2, 3, 4]);
    for c in &dev.categories {
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
    d.para(match (dev.device_used_bytes, dev.untracked_bytes) {
        (Some(used), Some(untracked)) => format!(
            "tracked {} | device used {} (last query) | untracked {} (max {}): contexts, modules, graphs, peer mappings, rounding, other processes",
            fmt_bytes(dev.live_bytes),
            fmt_bytes(used),
            fmt_bytes(untracked),
            fmt_opt(dev.untracked_max_bytes)
        ),
        _ => format!("tracked {} | device used unknown: the program never queried free memory", fmt_bytes(dev.live_bytes)),
    });

    if !dev.key_probes.is_empty() {
        d.push(Block::Sub(format!("Free-memory queries that matter ({} made)", dev.probes_total)));
        let mut t = Table::new(
            &["pid", "at", "api", "told free", "of total", "process had", "why it matters"],
            &[0, 1, 3, 4, 5],
        );
        for p in &dev.key_probes {
            t.row(vec![
                p.pid.to_string(),
                fmt_ms(p.t_ms),
                p.api.clone(),
                if p.error != 0 { format!("error {}", p.error) } else { fmt_opt(p.free_bytes) },
                fmt_opt(p.total_bytes),
                fmt_bytes(p.tracked_bytes),
                p.why.clone(),
            ]);
        }
        d.table(t);
    }

    if dev.failures_total > 0 {
        d.push(Block::Sub(format!("Failed allocations ({})", dev.failures_total)));
        for f in &dev.failures {
            let cats: Vec<String> =
                f.categories.iter().filter(|(_, v)| **v != 0).map(|(k, v)| format!("{k} {}", fmt_bytes(*v))).collect();
            d.push(Block::Alert(format!(
                "pid {} at {}: {} of {} failed with {}; the process held {} ({}); last query before it{}",
                f.pid,
                fmt_ms(f.t_ms),
                f.api,
                fmt_bytes(f.bytes),
                f.error_name,
                fmt_bytes(f.live_bytes),
                if cats.is_empty() { "nothing".into() } else { cats.join(", ") },
                match (f.last_probe_t_ms, f.last_probe_free_bytes) {
                    (Some(t), Some(free)) => format!(" at {}: free {}", fmt_ms(t), fmt_bytes(free)),
                    (Some(t), None) => format!(" at {}: free unknown", fmt_ms(t)),
                    _ => ": none".into(),
                }
            )));
        }
        let shown = dev.failures.len() as i64;
        if shown < dev.failures_total {
            d.para(format!("({} more failures not recorded in detail)", dev.failures_total - shown));
        }
    }

    if !dev.driver_costs.is_empty() {
        d.push(Block::Sub(format!("Hidden driver costs ({}, approximate)", fmt_bytes(dev.driver_cost_bytes))));
        let mut t = Table::new(&["pid", "api", "calls", "bytes"], &[0, 2, 3]);
        for c in &dev.driver_costs {
            t.row(vec![c.pid.to_string(), c.api.clone(), c.calls.to_string(), fmt_bytes(c.bytes)]);
        }
        d.table(t);
    }

    if !dev.top_allocations.is_empty() {
        d.push(Block::Sub("Top allocations".into()));
        let mut t = Table::new(&["pid", "size", "category", "api", "at", "flags", "caller"], &[0, 1, 4]);
        for a in &dev.top_allocations {
            let flags: Vec<&str> = [(a.exported, "exported"), (a.captured, "captured")]
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, s)| *s)
                .collect();
            t.row(vec![
                a.pid.to_string(),
                fmt_bytes(a.bytes),
                a.category.clone(),
                a.api.clone(),
                fmt_ms(a.t_ms),
                flags.join(","),
                a.caller.clone().unwrap_or_default(),
            ]);
        }
        d.table(t);
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
    }
}
