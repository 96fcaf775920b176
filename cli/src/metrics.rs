//! `culedger metrics PATH... [--listen ADDR] [--sites]`: the run's figures in the Prometheus
//! text exposition format (version 0.0.4), printed once (for node_exporter's textfile
//! collector) or served over HTTP at `/metrics`, the reports read anew at each scrape.
//!
//! Every figure is the one `culedger report` shows (`culedger_analysis::summary::summarize`), so a dashboard
//! and the report never disagree. Names and labels: docs/metrics.md. Cardinality stays low
//! by default: series per host, device, category, API and process; call sites only with
//! `--sites` (their number is bounded there too).

use crate::error::{Fail, Result};
use crate::load::{self, Run};
use crate::model::CATEGORIES;
use crate::runs;
use crate::summary::{DeviceSummary, RunSummary};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The content type of the 0.0.4 text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Call sites per device exported with `--sites`.
const SITE_ROWS: usize = 20;

/// What to export.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// One series per call site and device (the largest [`SITE_ROWS`]).
    pub sites: bool,
}

/// The run as `top` and `metrics` see it now: whatever the paths hold, merged (a directory
/// that `culedger run --append` reused holds several runs), analysed like `report`.
/// None while there is no readable report.
pub struct Snapshot {
    pub run: Run,
    pub summary: Option<RunSummary>,
}

pub fn snapshot(paths: &[PathBuf]) -> Snapshot {
    let run = load::load_live(paths);
    if run.procs.is_empty() {
        return Snapshot { run, summary: None };
    }
    let sel = runs::Selection { merge_runs: true, ..runs::Selection::default() };
    let (skipped, missing) = (run.skipped.clone(), run.missing.clone());
    match runs::select(run.clone(), &sel) {
        Ok(mut chosen) => {
            chosen.skipped = skipped;
            chosen.missing = missing;
            let summary = crate::run_analysis::of(&chosen).summary(false).clone();
            Snapshot { run: chosen, summary: Some(summary) }
        }
        Err(_) => Snapshot { run, summary: None },
    }
}

/// A label value in the text format: backslash, double quote and line feed escaped.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The families of one exposition, in the order they were first written.
#[derive(Default)]
struct Exposition {
    families: Vec<(&'static str, &'static str, &'static str, String)>,
}

impl Exposition {
    /// Adds one sample to the family `name` (declared with its type and help text on first use).
    fn sample(&mut self, name: &'static str, kind: &'static str, help: &'static str, labels: &[(&str, &str)], v: f64) {
        let i = match self.families.iter().position(|f| f.0 == name) {
            Some(i) => i,
            None => {
                self.families.push((name, kind, help, String::new()));
                self.families.len() - 1
            }
        };
        let body = &mut self.families[i].3;
        body.push_str(name);
        if !labels.is_empty() {
            body.push('{');
            for (k, (key, value)) in labels.iter().enumerate() {
                if k > 0 {
                    body.push(',');
                }
                let _ = write!(body, "{key}=\"{}\"", escape(value));
            }
            body.push('}');
        }
        let _ = writeln!(body, " {}", number(v));
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for (name, kind, help, body) in &self.families {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            out.push_str(body);
        }
        out
    }
}

/// A sample value: integers exactly (byte counts up to 2^53 are exact in a float anyway).
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The rank of a process, from its rank hint (`culedger_analysis::process::rank_hint`), or "".
fn rank(env: &std::collections::BTreeMap<String, String>) -> String {
    culedger_analysis::process::rank_hint(env).map_or_else(String::new, |(r, _)| r.to_string())
}

/// A device's processes as its per-process series key them, by what a restart keeps (their
/// rank and comm, with the device's labels), never by pid or start, which would make every
/// restart a new series: ((rank, comm), (live bytes, peak bytes)). The processes that share a
/// key and were alive when the last of them started stand for it (a restart replaces the
/// ended process; processes that ran together, such as one program's workers without a
/// rank, are all there): their live bytes added up, and the largest of their peaks.
fn per_process_on_device(s: &RunSummary, d: &DeviceSummary) -> Vec<((String, String), (i64, i64))> {
    type Key = (String, String);
    // (key, start, end, live, peak); the end is the last report's for a process that runs.
    let mut rows: Vec<(Key, i64, i64, i64, i64)> = Vec::new();
    for dp in &d.processes {
        let p = s.processes.iter().find(|p| p.host == d.host && p.pid == dp.pid && p.start_unix_us == dp.start_unix_us);
        let key = p.map_or_else(Default::default, |p| (rank(&p.env), p.comm.clone().unwrap_or_default()));
        let end = p.map_or(i64::MAX, |p| p.start_unix_us.saturating_add(p.duration_us));
        rows.push((key, dp.start_unix_us, end, dp.live_bytes, dp.peak_bytes));
    }
    let mut keys: Vec<Key> = rows.iter().map(|r| r.0.clone()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|k| {
            let of: Vec<_> = rows.iter().filter(|r| r.0 == k).collect();
            let last_start = of.iter().map(|r| r.1).max().unwrap_or(0);
            let now: Vec<_> = of.iter().filter(|r| r.2 >= last_start).collect();
            let figures = (now.iter().map(|r| r.3).sum(), now.iter().map(|r| r.4).max().unwrap_or(0));
            (k, figures)
        })
        .collect()
}

/// The exposition of `snap` at `now_us` (µs since the epoch).
pub fn render(snap: &Snapshot, opts: &Options, now_us: i64) -> String {
    let mut e = Exposition::default();
    let reports = snap.run.procs.len() as f64;
    e.sample("culedger_reports", "gauge", "Reports read at this scrape.", &[], reports);
    e.sample(
        "culedger_reports_unreadable",
        "gauge",
        "Report files that could not be read at this scrape (half-written, truncated, another schema).",
        &[],
        snap.run.skipped.len() as f64,
    );
    e.sample(
        "culedger_paths_missing",
        "gauge",
        "Paths named on the command line that do not exist at this scrape (a run directory not made yet, or removed).",
        &[],
        snap.run.missing.len() as f64,
    );
    let Some(s) = &snap.summary else { return e.render() };
    let verdict_failed = f64::from(u8::from(s.verdict.failed));
    e.sample("culedger_run_failed", "gauge", "1 when an allocation failed in the run, else 0.", &[], verdict_failed);
    e.sample(
        "culedger_run_ranks",
        "gauge",
        "Processes of the run that allocated device memory (report's and explain's \"of N ranks\").",
        &[],
        s.verdict.ranks as f64,
    );
    e.sample(
        "culedger_run_failed_ranks",
        "gauge",
        "Processes with a failed allocation (report's and explain's \"K of N ranks failed\").",
        &[],
        s.verdict.failed_ranks as f64,
    );

    // A process's own series (how it runs and ended) carry its identity only: host, pid and
    // start (ms since the epoch: processes in containers share a host and a pid). A process is
    // found by all three, never by its pid alone. What describes it (title, comm, rank), which
    // can change while it runs (setproctitle) and would split its series, is on
    // `culedger_process_info` alone, joined `on(host, pid, start_ms)`, as kube-state-metrics'
    // `*_info` series are. Its memory on a device is keyed by what a restart keeps instead
    // (`per_process_on_device`), as the DCGM exporter keys a GPU's.
    let who = |host: &str, pid: i64, start_us: i64| {
        (host.to_string(), pid.to_string(), start_us.div_euclid(1000).to_string())
    };
    for p in &s.processes {
        let (host, pid, start) = who(&p.host, p.pid, p.start_unix_us);
        let l = [("host", host.as_str()), ("pid", pid.as_str()), ("start_ms", start.as_str())];
        let title = p.title.clone().or_else(|| p.comm.clone()).unwrap_or_default();
        let (comm, rank) = (p.comm.clone().unwrap_or_default(), rank(&p.env));
        let mut li = l.to_vec();
        li.extend([("title", title.as_str()), ("comm", comm.as_str()), ("rank", rank.as_str())]);
        e.sample(
            "culedger_process_info",
            "gauge",
            "1 for every process, its descriptive labels (title, comm, rank) joined to its other series on(host, pid, start_ms).",
            &li,
            1.0,
        );
        // How it ended, as a shell says it: its exit code, or 128 + the signal that ended it;
        // absent while it runs or when its end is unknown (no final report: SIGKILL).
        let exit_status = match p.exit {
            crate::model::Exit::Exit => p.exit_code,
            crate::model::Exit::Signal => p.signal.map(|s| 128 + s),
            _ => None,
        };
        if let Some(status) = exit_status {
            e.sample(
                "culedger_process_exit_status",
                "gauge",
                "How the process ended: its exit code, or 128 + the signal that ended it (absent while it runs, or without a final report).",
                &l,
                status as f64,
            );
        }
        e.sample(
            "culedger_process_running",
            "gauge",
            "1 while the process runs (its report says running and, on this host, it is alive), else 0.",
            &l,
            // `running or killed (last report)`: another host's process, which cannot be asked.
            f64::from(u8::from(p.status.starts_with("running"))),
        );
        e.sample(
            "culedger_process_start_time_seconds",
            "gauge",
            "When the process started, seconds since the Unix epoch.",
            &l,
            p.start_unix_us as f64 / 1e6,
        );
        e.sample(
            "culedger_process_pinned_host_bytes",
            "gauge",
            "Pinned host memory the process holds (cudaHostAlloc, cudaMallocHost, cuMemHostAlloc).",
            &l,
            p.pinned_live_bytes as f64,
        );
        e.sample(
            "culedger_process_registered_host_bytes",
            "gauge",
            "Host memory the process registered with the driver (cudaHostRegister, cuMemHostRegister).",
            &l,
            p.registered_live_bytes as f64,
        );
        e.sample(
            "culedger_process_lost_events_total",
            "counter",
            "Records the interposer could not keep (its figures are incomplete when above 0).",
            &l,
            p.lost_events as f64,
        );
    }

    for d in &s.devices {
        let dev = d.index.to_string();
        let mig = d.mig_index.map(|m| m.to_string());
        let gi = d.gpu_instance_id.map(|g| g.to_string());
        // Where the reports name the physical GPU, the DCGM exporter's own labels too (`gpu`,
        // its index on the host; `UUID`), so a query can join these series with DCGM's. A MIG
        // device is its own device (`mig`, its index under its GPU), and in DCGM's labels its
        // GPU's `gpu` and `UUID` with its GPU instance (`GPU_I_ID`), as the exporter labels it.
        let mut l = vec![("host", d.host.as_str()), ("device", dev.as_str())];
        if let Some(m) = &mig {
            l.push(("mig", m.as_str()));
        }
        if let Some(uuid) = &d.uuid {
            let uuid = d.parent_uuid.as_deref().unwrap_or(uuid);
            l.extend([("gpu", dev.as_str()), ("UUID", uuid)]);
            if let Some(gi) = &gi {
                l.push(("GPU_I_ID", gi.as_str()));
            }
        }
        let l = l.as_slice();
        if let Some(total) = d.total_bytes {
            e.sample("culedger_device_capacity_bytes", "gauge", "The device's memory.", &l, total as f64);
        }
        e.sample(
            "culedger_device_tracked_bytes",
            "gauge",
            "Device memory the run's processes hold, as tracked by culedger (each process's last report).",
            &l,
            d.live_bytes as f64,
        );
        e.sample(
            "culedger_device_tracked_peak_bytes",
            "gauge",
            "The peak of the tracked device memory.",
            &l,
            d.peak_bytes as f64,
        );
        for c in &d.categories {
            // The six categories always (a series that exists at zero); others once they held memory.
            let empty = c.live_bytes == 0 && c.peak_bytes == 0 && c.allocs == 0;
            if empty && !CATEGORIES.contains(&c.name.as_str()) {
                continue;
            }
            let mut lc = l.to_vec();
            lc.push(("category", c.name.as_str()));
            e.sample(
                "culedger_category_live_bytes",
                "gauge",
                "Tracked live device memory per category (docs/categories.md).",
                &lc,
                c.live_bytes as f64,
            );
            e.sample(
                "culedger_category_peak_bytes",
                "gauge",
                "The peak of a category's live bytes.",
                &lc,
                c.peak_bytes as f64,
            );
        }
        if let Some(q) = &d.last_query {
            e.sample(
                "culedger_device_used_bytes",
                "gauge",
                "Device memory in use at the last free-memory query (total minus free).",
                &l,
                q.used_bytes as f64,
            );
            e.sample(
                "culedger_device_untracked_bytes",
                "gauge",
                "Memory in use that no tracked allocation explains at the last free-memory query (contexts, modules, driver costs, other processes).",
                &l,
                q.untracked_bytes as f64,
            );
            let at_us = s.t0_unix_us + q.at_us;
            e.sample(
                "culedger_device_last_query_timestamp_seconds",
                "gauge",
                "When the last free-memory query was made, seconds since the Unix epoch.",
                &l,
                at_us as f64 / 1e6,
            );
            e.sample(
                "culedger_device_last_query_age_seconds",
                "gauge",
                "How old the last free-memory query is at this scrape.",
                &l,
                ((now_us - at_us).max(0) / 1000) as f64 / 1e3,
            );
        }
        e.sample(
            "culedger_device_queries_total",
            "counter",
            "Free-memory queries (cudaMemGetInfo, cuMemGetInfo, NVML) made on the device.",
            &l,
            d.probes_total as f64,
        );
        e.sample(
            "culedger_device_failed_allocations_total",
            "counter",
            "Failed allocation calls on the device (retries of one request included).",
            &l,
            d.failures_total as f64,
        );
        e.sample(
            "culedger_device_failed_requests_total",
            "counter",
            "Failed allocation requests on the device (an allocator's immediate retries folded in).",
            &l,
            d.failed_requests as f64,
        );
        let mut by_api: std::collections::BTreeMap<&str, (i64, i64)> = std::collections::BTreeMap::new();
        for c in &d.driver_costs {
            let t = by_api.entry(c.api.as_str()).or_default();
            t.0 += c.calls;
            t.1 += c.bytes;
        }
        for (api, (calls, bytes)) in by_api {
            let mut la = l.to_vec();
            la.push(("api", api));
            e.sample(
                "culedger_driver_cost_bytes",
                "gauge",
                "Device memory the driver took for calls that allocate nothing visible (contexts, peer access, IPC opens, graph instantiation, module loads), de-noised.",
                &la,
                bytes as f64,
            );
            e.sample(
                "culedger_driver_cost_calls_total",
                "counter",
                "Calls with a hidden driver cost.",
                &la,
                calls as f64,
            );
        }
        e.sample(
            "culedger_device_ipc_imported_bytes",
            "gauge",
            "Memory of other processes this device's processes have open through CUDA IPC.",
            &l,
            d.ipc.imported_live_bytes as f64,
        );
        for ((rank, comm), (live, peak)) in per_process_on_device(s, d) {
            let mut lp = l.to_vec();
            lp.extend([("rank", rank.as_str()), ("comm", comm.as_str())]);
            e.sample(
                "culedger_process_live_bytes",
                "gauge",
                "Tracked device memory the process of a rank (and comm) holds on the device (a restart's replaces the ended one's; processes that ran together are added up).",
                &lp,
                live as f64,
            );
            e.sample(
                "culedger_process_peak_bytes",
                "gauge",
                "The peak of that process's tracked memory on the device (of processes that ran together, the largest).",
                &lp,
                peak as f64,
            );
        }
        if opts.sites {
            for row in d.sites.iter().take(SITE_ROWS) {
                let mut ls = l.to_vec();
                ls.extend([("caller", row.caller.as_str()), ("category", row.category.as_str())]);
                e.sample(
                    "culedger_site_live_bytes",
                    "gauge",
                    "Live device memory by call site (only with --sites; the largest 20 per device).",
                    &ls,
                    row.live_bytes as f64,
                );
            }
        }
    }
    e.render()
}

fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// `culedger metrics`: prints once, or serves `/metrics` at `listen` until killed.
pub fn command(paths: &[PathBuf], listen: Option<&str>, opts: &Options) -> Result<i32> {
    let Some(addr) = listen else {
        let snap = snapshot(paths);
        if snap.run.procs.is_empty() && snap.run.missing.len() == paths.len() {
            return Err(Fail::input(format!("{}: no such file or directory", snap.run.label)));
        }
        crate::output::print_stdout(&render(&snap, opts, now_us()))?;
        return Ok(0);
    };
    let listener =
        std::net::TcpListener::bind(addr).map_err(|e| Fail::input(format!("metrics: cannot listen on {addr}: {e}")))?;
    let bound = listener.local_addr().map_or_else(|_| addr.to_string(), |a| a.to_string());
    eprintln!("culedger: serving http://{bound}/metrics");
    let (paths, opts) = (paths.to_vec(), opts.clone());
    // One exposition built at a time: concurrent scrapes wait for the one in progress
    // rather than each reading every report at once.
    let building = std::sync::Mutex::new(());
    let handler = move |path: &str| match path {
        "/metrics" => {
            let _one = building.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let body = render(&snapshot(&paths), &opts, now_us()).into_bytes();
            crate::serve::Answer { status: 200, content_type: CONTENT_TYPE, body }
        }
        "/" => crate::serve::Answer {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: b"<html><body><a href=\"/metrics\">/metrics</a></body></html>\n".to_vec(),
        },
        _ => crate::serve::Answer {
            status: 404,
            content_type: "text/plain; charset=utf-8",
            body: b"not found: try /metrics\n".to_vec(),
        },
    };
    crate::serve::serve(listener, std::sync::Arc::new(handler));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }

    #[test]
    fn families_are_declared_once() {
        let mut e = Exposition::default();
        e.sample("x_bytes", "gauge", "X.", &[("a", "1")], 5.0);
        e.sample("y_total", "counter", "Y.", &[], 1.5);
        e.sample("x_bytes", "gauge", "X.", &[("a", "2")], 6.0);
        assert_eq!(
            e.render(),
            "# HELP x_bytes X.\n# TYPE x_bytes gauge\nx_bytes{a=\"1\"} 5\nx_bytes{a=\"2\"} 6\n\
             # HELP y_total Y.\n# TYPE y_total counter\ny_total 1.5\n"
        );
    }
}
