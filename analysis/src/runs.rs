//! Runs kept apart, selections, and how each process ended.
//!
//! A run is the set of processes of one launch. `culedger run` gives its whole process
//! tree one id (`CULEDGER_RUN_ID`, `process.run_id_source: "env"`). A process preloaded
//! without one names itself (`"process"`), and so do its children; such processes are put
//! back together by their parentage: a child joins the run of its parent (`ppid` or
//! `forked_from`, same host, parent started before and still reporting when the child
//! started), and siblings (same host, same parent pid other than 0 and 1, lifetimes that
//! overlap) join each other. Reports from writers before run ids are grouped the same way.
//!
//! `report`, `diff` and `check` read one run: reports of several runs in one directory (a
//! reused `-o DIR`, files copied together) are refused in one line unless `--merge-runs`
//! adds them up or `--run ID` picks one.

use crate::load::Run;
use crate::model::Report;
use std::collections::BTreeMap;

/// One run in a set of reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunGroup {
    /// The run id (of the run's first process when they named themselves).
    pub id: String,
    /// Indices into the run's processes, in their order.
    pub procs: Vec<usize>,
}

/// How far (µs) a parent's last report may lag its child's start: reports are rewritten
/// every second while a process runs.
const REPORT_LAG_US: i64 = 2_000_000;

struct Sets(Vec<usize>);

impl Sets {
    fn find(&mut self, i: usize) -> usize {
        let mut r = i;
        while self.0[r] != r {
            r = self.0[r];
        }
        self.0[i] = r;
        r
    }
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            // The earlier index (earlier start: processes are sorted) becomes the root.
            let (lo, hi) = (ra.min(rb), ra.max(rb));
            self.0[hi] = lo;
        }
    }
}

fn from_env(r: &Report) -> Option<&str> {
    (r.process.run_id_source.as_deref() == Some("env")).then_some(r.process.run_id.as_deref()).flatten()
}

/// Groups the processes of `procs` (sorted by host, start, pid) into runs, in the order of
/// their first process.
pub fn group(procs: &[Report]) -> Vec<RunGroup> {
    let mut sets = Sets((0..procs.len()).collect());
    let mut by_id: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, r) in procs.iter().enumerate() {
        if let Some(id) = from_env(r) {
            match by_id.get(id) {
                Some(&j) => sets.union(i, j),
                None => {
                    by_id.insert(id, i);
                }
            }
        }
    }
    for (i, child) in procs.iter().enumerate() {
        if from_env(child).is_some() {
            continue;
        }
        let c = &child.process;
        for (j, other) in procs.iter().enumerate() {
            let o = &other.process;
            if i == j || o.host != c.host {
                continue;
            }
            let parent = (o.pid == c.ppid || Some(o.pid) == c.forked_from)
                && o.start_us() <= c.start_us()
                && o.end_us() + REPORT_LAG_US >= c.start_us();
            let sibling = from_env(other).is_none()
                && c.ppid > 1
                && o.ppid == c.ppid
                && o.start_us() <= c.end_us()
                && c.start_us() <= o.end_us();
            if parent || sibling {
                sets.union(i, j);
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..procs.len() {
        let root = sets.find(i);
        groups.entry(root).or_default().push(i);
    }
    let mut out: Vec<RunGroup> = groups
        .into_values()
        .map(|members| {
            let first = members.iter().copied().min_by_key(|&i| (procs[i].process.start_us(), i)).unwrap_or(0);
            let p = &procs[first].process;
            let id = members
                .iter()
                .find_map(|&i| from_env(&procs[i]).map(String::from))
                .or_else(|| p.run_id.clone())
                .unwrap_or_else(|| format!("{}-{}-{}", p.host, p.pid, p.start_unix_ms));
            RunGroup { id, procs: members }
        })
        .collect();
    out.sort_by_key(|g| g.procs.iter().map(|&i| procs[i].process.start_us()).min().unwrap_or(0));
    out
}

/// `culedger report|diff|check` options that choose what to read.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Add up the processes of several runs.
    pub merge_runs: bool,
    /// Keep only the run with this id (or id prefix).
    pub run: Option<String>,
    /// Keep only these device indices / pids / hosts (empty: all).
    pub devices: Vec<i64>,
    pub pids: Vec<i64>,
    pub hosts: Vec<String>,
}

impl Run {
    fn retain_procs(&mut self, mut keep: impl FnMut(&Report) -> bool) {
        let (procs, sources): (Vec<_>, Vec<_>) = std::mem::take(&mut self.procs)
            .into_iter()
            .zip(std::mem::take(&mut self.sources))
            .filter(|(r, _)| keep(r))
            .unzip();
        self.procs = procs;
        self.sources = sources;
    }
}

/// One run among several, for the message that lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunListing {
    pub id: String,
    /// How many processes it has.
    pub procs: usize,
    /// When its first process started (µs since the epoch).
    pub start_us: i64,
}

/// Why a selection found nothing to read. `label` is the run's label (what the user named).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectError {
    /// `--run ID` matches no run.
    NoSuchRun { label: String, want: String, runs: Vec<RunListing> },
    /// `--run ID` is the prefix of several runs' ids.
    AmbiguousRun { want: String, matches: usize },
    /// The paths hold several runs and neither `--merge-runs` nor `--run` was given.
    SeveralRuns { label: String, runs: Vec<RunListing> },
    /// No process is left after `--device`, `--pid` and `--host`.
    NoMatch { label: String, devices: Vec<i64>, pids: Vec<i64>, hosts: Vec<String> },
}

/// One run out of `run`, as `sel` asks; the run ids it holds are in `run.run_ids`.
pub fn select(mut run: Run, sel: &Selection) -> Result<Run, SelectError> {
    let groups = group(&run.procs);
    let chosen: Vec<&RunGroup> = match &sel.run {
        Some(want) => {
            let exact: Vec<&RunGroup> = groups.iter().filter(|g| &g.id == want).collect();
            let found =
                if exact.is_empty() { groups.iter().filter(|g| g.id.starts_with(want)).collect() } else { exact };
            match found.len() {
                1 => found,
                0 => {
                    return Err(SelectError::NoSuchRun {
                        label: run.label.clone(),
                        want: want.clone(),
                        runs: list(&groups, &run.procs),
                    })
                }
                _ => return Err(SelectError::AmbiguousRun { want: want.clone(), matches: found.len() }),
            }
        }
        None if groups.len() > 1 && !sel.merge_runs => {
            return Err(SelectError::SeveralRuns { label: run.label.clone(), runs: list(&groups, &run.procs) })
        }
        None => groups.iter().collect(),
    };
    let keep: Vec<usize> = chosen.iter().flat_map(|g| g.procs.iter().copied()).collect();
    run.run_ids = chosen.iter().map(|g| g.id.clone()).collect();
    let mut i = 0;
    run.retain_procs(|_| {
        i += 1;
        keep.contains(&(i - 1))
    });
    filter(run, sel)
}

/// Each group's id, size and start.
fn list(groups: &[RunGroup], procs: &[Report]) -> Vec<RunListing> {
    groups
        .iter()
        .map(|g| RunListing {
            id: g.id.clone(),
            procs: g.procs.len(),
            start_us: g.procs.iter().map(|&i| procs[i].process.start_us()).min().unwrap_or(0),
        })
        .collect()
}

/// Keeps the devices, pids and hosts asked for.
fn filter(mut run: Run, sel: &Selection) -> Result<Run, SelectError> {
    let wanted = |list: &[i64], v: i64| list.is_empty() || list.contains(&v);
    run.retain_procs(|r| {
        wanted(&sel.pids, r.process.pid) && (sel.hosts.is_empty() || sel.hosts.contains(&r.process.host))
    });
    if !sel.devices.is_empty() {
        for r in &mut run.procs {
            r.devices.retain(|d| sel.devices.contains(&d.index));
        }
        run.retain_procs(|r| !r.devices.is_empty());
    }
    if run.procs.is_empty() {
        return Err(SelectError::NoMatch {
            label: run.label.clone(),
            devices: sel.devices.clone(),
            pids: sel.pids.clone(),
            hosts: sel.hosts.clone(),
        });
    }
    Ok(run)
}


/// Signals that stop a process rather than tell of a crash: what a user (Ctrl-C), a
/// terminal closing, a launcher or a service manager sends to end a server
/// (`SIGHUP`, `SIGINT`, `SIGTERM`).
pub fn is_stop_signal(sig: i64) -> bool {
    matches!(sig, 1 | 2 | 15)
}

/// How long before the run's last report a process may have ended and still be part of the
/// stop that ended the run (a launcher's shutdown waits a few seconds for its workers).
pub const STOP_GRACE_US: i64 = 10_000_000;

/// Whether the process ended as stopped, not failed: by a stop signal of its own (its final
/// report says so), or, with no signal of its own, as part of a `culedger run` whose command a
/// stop signal ended, within [`STOP_GRACE_US`] of the run's last report (a process that failed
/// earlier, leaving its launcher to hang until the user's Ctrl-C, did fail).
pub fn stopped(r: &Report, run: &Run) -> bool {
    if r.process.signal.is_some_and(is_stop_signal) {
        return true;
    }
    let by_run = run.summary.as_ref().and_then(|s| s.signal).is_some_and(is_stop_signal);
    let last = run.procs.iter().map(|p| p.process.end_us()).max().unwrap_or(0);
    by_run && r.process.signal.is_none() && last - r.process.end_us() <= STOP_GRACE_US
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

    fn ids(procs: &[Report]) -> Vec<(String, Vec<i64>)> {
        group(procs).into_iter().map(|g| (g.id, g.procs.iter().map(|&i| procs[i].process.pid).collect())).collect()
    }

    #[test]
    fn runs_by_environment_id() {
        let procs = vec![
            proc(10, 1, 1000, 5000, Some(("runA", "env"))),
            proc(11, 10, 1100, 5000, Some(("runA", "env"))),
            proc(20, 1, 9000, 9500, Some(("runB", "env"))),
        ];
        assert_eq!(ids(&procs), [("runA".to_string(), vec![10, 11]), ("runB".to_string(), vec![20])]);
    }

    #[test]
    fn own_ids_join_their_parents_and_overlapping_siblings() {
        let procs = vec![
            proc(10, 5, 1000, 5000, Some(("h-10-1000", "process"))),
            proc(11, 10, 1100, 4000, Some(("h-11-1100", "process"))),
            proc(12, 10, 1200, 4000, Some(("h-12-1200", "process"))),
            // Launched by the same shell (ppid 5) later, not overlapping: another run.
            proc(30, 5, 8000, 9000, Some(("h-30-8000", "process"))),
            // Two workers of a launcher that has no report, running together: one run.
            proc(41, 40, 10000, 12000, None),
            proc(42, 40, 10001, 12000, None),
        ];
        assert_eq!(
            ids(&procs),
            [
                ("h-10-1000".to_string(), vec![10, 11, 12]),
                ("h-30-8000".to_string(), vec![30]),
                ("h-41-10000".to_string(), vec![41, 42]),
            ]
        );
    }

    #[test]
    fn a_reused_pid_is_not_a_parent() {
        // pid 10 of an old run ended long before pid 11 (ppid 10) of a new one started.
        let procs = vec![proc(10, 1, 1000, 2000, None), proc(11, 10, 60_000, 61_000, None)];
        assert_eq!(group(&procs).len(), 2);
    }
}
