//! Runs and how each process ended, in the CLI's words: the analysis crate groups the
//! processes into runs and selects what a command reads (`culedger_analysis::runs`); this
//! words a selection that found nothing, and tells how each process ended (asking this
//! machine whether a process without a final report still runs).

use crate::error::{Fail, Result};
use crate::load::{Run, SummaryMeta};
use crate::model::{Exit, Report};
pub use culedger_analysis::runs::Selection;
use culedger_analysis::runs::is_stop_signal;
use culedger_analysis::runs::{RunListing, SelectError};

/// One run out of `run`, as `sel` asks (`culedger_analysis::runs::select`), or one line
/// that says why none.
pub fn select(run: Run, sel: &Selection) -> Result<Run> {
    culedger_analysis::runs::select(run, sel).map_err(|e| Fail::input(select_error(&e)))
}

/// One line for a selection that found nothing.
pub fn select_error(e: &SelectError) -> String {
    match e {
        SelectError::NoSuchRun { label, want, runs } => {
            format!("{}: no run {want} here (runs: {})", label.trim_end(), list(runs))
        }
        SelectError::AmbiguousRun { want, matches } => {
            format!("--run {want} matches {matches} runs: give more of the id")
        }
        SelectError::SeveralRuns { label, runs } => format!(
            "{}: reports of {} different runs ({}); add --merge-runs to add them up, or --run ID to read one",
            label.trim_end(),
            runs.len(),
            list(runs)
        ),
        SelectError::NoMatch { label, devices, pids, hosts } => {
            let mut asked = Vec::new();
            for (flag, values) in [
                ("--device", devices.iter().map(i64::to_string).collect::<Vec<_>>()),
                ("--pid", pids.iter().map(i64::to_string).collect()),
                ("--host", hosts.clone()),
            ] {
                if !values.is_empty() {
                    asked.push(format!("{flag} {}", values.join(",")));
                }
            }
            format!("{}: no process matches {}", label.trim_end(), asked.join(" "))
        }
    }
}

/// `id: N processes from HH:MM:SS` for each run.
fn list(runs: &[RunListing]) -> String {
    runs.iter()
        .map(|g| {
            format!(
                "{}: {} from {}",
                g.id,
                crate::units::count(g.procs, "process", "processes"),
                crate::clock::fmt_wall(g.start_us)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Signal names for exit statuses.
pub fn signal_name(sig: i64) -> String {
    let name = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// This machine's host name.
fn local_host() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length; the last byte stays NUL.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(0);
    (rc == 0).then(|| String::from_utf8_lossy(&buf[..len]).into_owned())
}

/// Whether the process that wrote `r` still runs: it is on this host, its pid exists, and
/// that pid's process started no later than the report's process (not a reused pid).
/// None when it cannot be told (another host).
fn alive(r: &Report) -> Option<bool> {
    let p = &r.process;
    if local_host().as_deref() != Some(p.host.as_str()) {
        return None;
    }
    let pid = libc::pid_t::try_from(p.pid).ok()?;
    // SAFETY: kill with signal 0 only checks existence and permission.
    let exists =
        unsafe { libc::kill(pid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    // A zombie (killed, not yet reaped by its parent) still answers kill(pid, 0).
    if !exists || zombie(p.pid) {
        return Some(false);
    }
    Some(started_unix_us(p.pid).is_none_or(|s| s <= p.start_us() + 1_000_000))
}

/// Whether a local process has ended and waits to be reaped (state Z or X in /proc).
fn zombie(pid: i64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).is_some_and(|s| s == "Z" || s == "X")
}

/// When a local process started (µs since the epoch), from /proc.
fn started_unix_us(pid: i64) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let ticks: i64 = after.split(' ').nth(19)?.parse().ok()?;
    let btime: i64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ").and_then(|v| v.trim().parse().ok()))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    Some(btime * 1_000_000 + ticks * 1_000_000 / hz)
}

/// How the process ended, in words: `exit 1`, `killed by SIGTERM`, `running`,
/// `no final report (killed?)`. `summary` is what `culedger run` recorded, if anything.
pub fn status(r: &Report, summary: Option<&SummaryMeta>) -> String {
    let p = &r.process;
    match &p.exit {
        Exit::Exit => match p.exit_code {
            Some(c) => format!("exit {c}"),
            None => "exited".into(),
        },
        // A terminating signal left at its default action: the final report was written first.
        Exit::Signal => match p.signal {
            Some(sig) => format!("killed by {}", signal_name(sig)),
            None => "killed by a signal".into(),
        },
        Exit::Exec => "exec'd another program".into(),
        Exit::Running => {
            if let Some(s) = summary {
                if s.pid == Some(p.pid) {
                    if let Some(sig) = s.signal {
                        return format!("killed by {}", signal_name(sig));
                    }
                }
                // The run is over: a process still "running" wrote no final report.
                return "no final report (killed?)".into();
            }
            match alive(r) {
                Some(true) => "running".into(),
                Some(false) => "no final report (killed?)".into(),
                None => "running or killed (last report)".into(),
            }
        }
        Exit::Other(other) => match p.exit_code {
            Some(c) => format!("{other} {c}"),
            None => other.to_string(),
        },
    }
}

/// [`status`] with the rest of the run at hand: a process that wrote no final report while
/// its launcher (its parent: a process of the run, or the command `culedger run` started)
/// ended cleanly (exit 0, or a stop signal) was "stopped with its launcher", not a crash:
/// vLLM's shutdown SIGKILLs its workers, SGLang's launcher kills its tree.
pub fn status_in(r: &Report, run: &Run) -> String {
    let base = status(r, run.summary.as_ref());
    if !(base.starts_with("no final report") || base.starts_with("running or killed")) {
        return base;
    }
    let ppid = r.process.ppid;
    let clean = |code: Option<i64>, signal: Option<i64>| match signal {
        Some(sig) => is_stop_signal(sig),
        None => code == Some(0),
    };
    let parent_clean = match run.procs.iter().find(|p| p.process.pid == ppid && p.process.host == r.process.host) {
        Some(p) => match &p.process.exit {
            Exit::Exit => clean(p.process.exit_code, None),
            Exit::Signal => clean(None, p.process.signal),
            _ => false,
        },
        None => run.summary.as_ref().is_some_and(|s| s.pid == Some(ppid) && clean(s.exit_code, s.signal)),
    };
    if parent_clean {
        "stopped with its launcher".into()
    } else {
        base
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn proc(pid: i64, ppid: i64, start_ms: i64, end_ms: i64, run: Option<(&str, &str)>) -> Report {
        let mut p = json!({"pid": pid, "ppid": ppid, "host": "h", "start_unix_ms": start_ms, "end_unix_ms": end_ms,
                           "exit": "exit", "exit_code": 0});
        if let Some((id, source)) = run {
            p["run_id"] = json!(id);
            p["run_id_source"] = json!(source);
        }
        serde_json::from_value(json!({"schema": "culedger/1", "process": p, "devices": []})).unwrap()
    }

    fn run(procs: Vec<Report>) -> Run {
        let n = procs.len();
        Run { label: "d/".into(), procs, sources: vec![Default::default(); n], ..Run::default() }
    }

    #[test]
    fn several_runs_are_refused_merged_or_picked() {
        let two = || {
            run(vec![proc(10, 1, 1000, 5000, Some(("runA", "env"))), proc(20, 1, 9000, 9500, Some(("runB", "env")))])
        };
        let e = select(two(), &Selection::default()).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.message.starts_with("d/: reports of 2 different runs (runA: 1 process from "), "{}", e.message);
        assert!(e.message.ends_with("add --merge-runs to add them up, or --run ID to read one"), "{}", e.message);
        let merged = select(two(), &Selection { merge_runs: true, ..Default::default() }).unwrap();
        assert_eq!((merged.procs.len(), merged.run_ids.clone()), (2, vec!["runA".to_string(), "runB".to_string()]));
        let b = select(two(), &Selection { run: Some("runB".into()), ..Default::default() }).unwrap();
        assert_eq!(b.procs.iter().map(|r| r.process.pid).collect::<Vec<_>>(), [20]);
        assert!(select(two(), &Selection { run: Some("nope".into()), ..Default::default() }).is_err());
    }

    #[test]
    fn filters() {
        let r = run(vec![proc(10, 1, 1000, 5000, None), proc(11, 10, 1100, 5000, None)]);
        let only = select(r.clone(), &Selection { pids: vec![11], ..Default::default() }).unwrap();
        assert_eq!(only.procs.len(), 1);
        let e = select(r, &Selection { devices: vec![3], ..Default::default() }).unwrap_err();
        assert_eq!(e.message, "d/: no process matches --device 3");
    }

    #[test]
    fn statuses() {
        let mut r = proc(10, 1, 1000, 5000, None);
        assert_eq!(status(&r, None), "exit 0");
        r.process.exit = Exit::Running;
        let killed = SummaryMeta { pid: Some(10), signal: Some(15), ..SummaryMeta::default() };
        assert_eq!(status(&r, Some(&killed)), "killed by SIGTERM");
        let other = SummaryMeta { pid: Some(99), exit_code: Some(0), ..SummaryMeta::default() };
        assert_eq!(status(&r, Some(&other)), "no final report (killed?)");
        assert_eq!(status(&r, None), "running or killed (last report)", "host h is not this one");
        r.process.host = local_host().unwrap();
        r.process.pid = std::process::id() as i64;
        r.process.start_unix_ms = chrono::Utc::now().timestamp_millis();
        assert_eq!(status(&r, None), "running", "this very process");
        r.process.pid = i32::MAX as i64 - 7;
        assert_eq!(status(&r, None), "no final report (killed?)");
        assert_eq!(signal_name(9), "SIGKILL");
        assert!(is_stop_signal(15) && is_stop_signal(2) && is_stop_signal(1) && !is_stop_signal(9));
    }

    #[test]
    fn a_worker_killed_by_a_launcher_that_ended_cleanly_was_stopped_with_it() {
        let mut worker = proc(11, 10, 1100, 4000, None);
        worker.process.exit = Exit::Running;
        worker.process.exit_code = None;
        let launcher = proc(10, 5, 1000, 5000, None);
        let mut r = run(vec![launcher.clone(), worker.clone()]);
        assert_eq!(status_in(&r.procs[1], &r), "stopped with its launcher");
        // A launcher stopped by SIGTERM: the same.
        r.procs[0].process.exit = Exit::Signal;
        r.procs[0].process.signal = Some(15);
        assert_eq!(status_in(&r.procs[1], &r), "stopped with its launcher");
        // A launcher that failed (or was killed hard), or none known: a worker killed, maybe a crash.
        r.procs[0].process.signal = Some(9);
        assert_eq!(status_in(&r.procs[1], &r), "running or killed (last report)");
        r.procs[0].process.exit = Exit::Exit;
        r.procs[0].process.signal = None;
        r.procs[0].process.exit_code = Some(1);
        assert_eq!(status_in(&r.procs[1], &r), "running or killed (last report)");
        // The launcher is the command `culedger run` started, which wrote no report.
        let mut alone = run(vec![worker]);
        alone.summary = Some(SummaryMeta { pid: Some(10), exit_code: Some(0), ..SummaryMeta::default() });
        assert_eq!(status_in(&alone.procs[0], &alone), "stopped with its launcher");
        alone.summary =
            Some(SummaryMeta { pid: Some(10), exit_code: Some(137), signal: Some(9), ..SummaryMeta::default() });
        assert_eq!(status_in(&alone.procs[0], &alone), "no final report (killed?)");
        // A process that did write its final report keeps its own words.
        assert_eq!(status_in(&r.procs[0], &r), "exit 1");
        assert_eq!(signal_name(40), "signal 40");
    }
}
