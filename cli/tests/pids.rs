//! A process is (host, pid, start time) ([23] 4, 5, 14, 15): processes in containers share
//! pids (every one pid 1), and one pid shows up on several hosts. `report`, `explain`,
//! `whatif` and `metrics` must tell them apart. `CULEDGER_CLI=/path/to/old/culedger` runs
//! these against another build.

mod common;
use common::*;
use serde_json::Value;

/// custom-ar's two ranks (no launcher) with their pids replaced by `pids` and their hosts
/// by `hosts`, parents unknown (ppid 0, as in containers).
fn ranks(pids: [i64; 2], hosts: [&str; 2]) -> tempfile::TempDir {
    let d = tempdir();
    for (k, name) in ["culedger-5101.json", "culedger-5102.json"].iter().enumerate() {
        let mut v: Value =
            serde_json::from_slice(&std::fs::read(fixtures().join("custom-ar").join(name)).unwrap()).unwrap();
        v["process"]["pid"] = pids[k].into();
        v["process"]["ppid"] = 0.into();
        v["process"]["host"] = hosts[k].into();
        std::fs::write(d.path().join(name), serde_json::to_vec(&v).unwrap()).unwrap();
    }
    d
}

fn run(args: &[&str]) -> (i32, String, String) {
    let o = culedger(args);
    (o.status.code().unwrap_or(-1), stdout(&o), stderr(&o))
}

#[test]
fn ranks_sharing_pid_1_are_two_processes() {
    let (shared, apart) = (ranks([1, 1], ["sim-host"; 2]), ranks([5101, 5102], ["sim-host"; 2]));
    let (s, a) = (shared.path().to_str().unwrap(), apart.path().to_str().unwrap());
    let (code, out, err) = run(&["report", s]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().nth(1).unwrap(),
        "2 of 2 ranks failed to allocate 916.00 MiB; see `culedger explain` for why"
    );

    let (code_s, ex_s, err) = run(&["explain", s]);
    let (code_a, ex_a, _) = run(&["explain", a]);
    assert_eq!(code_s, code_a, "{err}");
    let headings = |t: &str| t.lines().filter(|l| l.starts_with("== ")).map(String::from).collect::<Vec<_>>();
    let unpid = |t: &str| t.replace("pid 5101", "pid 1").replace("pid 5102", "pid 1");
    assert_eq!(headings(&ex_s), headings(&unpid(&ex_a)), "{ex_s}");
    assert!(!ex_s.contains("without a failed allocation"), "{ex_s}");
    let advice = |t: &str| t.lines().skip_while(|l| !l.starts_with("== What to change")).nth(1).map(String::from);
    assert!(advice(&ex_s).is_some_and(|l| l.starts_with("1. Disable the custom all-reduce") || l.starts_with("1. Lower --mem-fraction-static")), "{ex_s}");
    assert_eq!(advice(&ex_s), advice(&unpid(&ex_a)));

    let (code_s, w_s, err) = run(&["whatif", s, "--set", "mem_fraction_static=0.8"]);
    let (code_a, w_a, _) = run(&["whatif", a, "--set", "mem_fraction_static=0.8"]);
    assert_eq!(code_s, code_a, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // The rows of the table (its header wraps with the width of the pids).
    let rows = |t: &str| {
        unpid(t)
            .lines()
            .filter(|l| l.contains("(pid "))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
    };
    assert_eq!(rows(&w_s).len(), 2, "{w_s}");
    assert_eq!(rows(&w_s), rows(&w_a));
}

/// `name{labels}` of every sample line.
fn series(exposition: &str) -> Vec<String> {
    exposition.lines().filter(|l| !l.starts_with('#')).map(|l| l.rsplit_once(' ').unwrap().0.to_string()).collect()
}

#[test]
fn metrics_series_are_one_per_process() {
    let shared = ranks([1, 1], ["sim-host"; 2]);
    let (code, out, err) = run(&["metrics", shared.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let all = series(&out);
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(all.len(), unique.len(), "duplicate series:\n{out}");
    assert_eq!(all.iter().filter(|s| s.starts_with("culedger_process_running{")).count(), 2, "{out}");

    // The same pid on two hosts: each host's info series carries its own process's title and
    // rank, and each host's process series are its own.
    let two = ranks([7, 7], ["host-a", "host-b"]);
    let (_, out, _) = run(&["metrics", two.path().to_str().unwrap()]);
    let running: Vec<&str> = out.lines().filter(|l| l.starts_with("culedger_process_info{")).collect();
    assert_eq!(running.len(), 2, "{out}");
    let b = running.iter().find(|l| l.contains("host=\"host-b\"")).unwrap();
    assert!(b.contains("rank=\"1\"") && b.contains("TP1"), "{b}");
    let a = running.iter().find(|l| l.contains("host=\"host-a\"")).unwrap();
    assert!(a.contains("rank=\"0\"") && a.contains("TP0"), "{a}");
    let live: Vec<&str> =
        out.lines().filter(|l| l.starts_with("culedger_process_live_bytes{host=\"host-b\"")).collect();
    assert!(!live.is_empty() && live.iter().all(|l| l.contains("rank=\"1\"") && !l.contains("pid=")), "{out}");
}

/// A restart (the same rank and program, a new pid and start) continues its device memory's
/// series instead of starting another ([20] 5: no per-pid label that multiplies series across
/// restarts; the info metric carries the pid). Rank 0 of custom-ar twice, the second started a
/// minute later (after the first ended): one live and one peak series on its GPU, the second's
/// figures (not their sum), and two info series, one per process.
#[test]
fn a_restart_continues_its_device_memory_series() {
    let d = tempdir();
    let mut first: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("custom-ar").join("culedger-5101.json")).unwrap()).unwrap();
    first["process"]["host"] = "sim-host".into();
    std::fs::write(d.path().join("culedger-5101.json"), serde_json::to_vec(&first).unwrap()).unwrap();
    let mut again = first.clone();
    again["process"]["pid"] = 6101.into();
    let start = again["process"]["start_unix_us"].as_i64().unwrap();
    again["process"]["start_unix_us"] = (start + 60_000_000).into();
    for k in ["start_unix_ms", "end_unix_ms"] {
        again["process"][k] = (again["process"][k].as_i64().unwrap() + 60_000).into();
    }
    std::fs::write(d.path().join("culedger-6101.json"), serde_json::to_vec(&again).unwrap()).unwrap();
    let dir = d.path().to_str().unwrap();
    let (code, out, err) = run(&["metrics", dir]);
    assert_eq!(code, 0, "{err}");
    let (_, json, _) = run(&["report", dir, "--format", "json"]);
    let r: Value = serde_json::from_str(&json).unwrap();
    let procs = r["devices"][0]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "{json}");
    let second = procs.iter().find(|p| p["pid"] == 6101).unwrap();
    for (name, key) in [("culedger_process_live_bytes{", "live_bytes"), ("culedger_process_peak_bytes{", "peak_bytes")] {
        // (rank 0 also has a context on GPU 1, its peer's)
        let lines: Vec<&str> = out.lines().filter(|l| l.starts_with(name) && l.contains("device=\"0\"")).collect();
        assert_eq!(lines.len(), 1, "one series for the rank across its restart:\n{out}");
        assert!(lines[0].contains("rank=\"0\"") && !lines[0].contains("pid="), "{}", lines[0]);
        assert_eq!(lines[0].rsplit_once(' ').unwrap().1, second[key].to_string(), "the restart's figure: {}", lines[0]);
    }
    assert_eq!(out.lines().filter(|l| l.starts_with("culedger_process_info{")).count(), 2, "{out}");

    // The same two processes running together (the second started 1 ms after the first, as
    // one program's workers without a rank do): one series, holding what both held.
    for k in ["start_unix_us", "start_unix_ms", "end_unix_ms"] {
        let shift = if k == "start_unix_us" { 1000 } else { 1 };
        again["process"][k] = (first["process"][k].as_i64().unwrap() + shift).into();
    }
    std::fs::write(d.path().join("culedger-6101.json"), serde_json::to_vec(&again).unwrap()).unwrap();
    let (_, out, _) = run(&["metrics", dir]);
    let lines: Vec<&str> =
        out.lines().filter(|l| l.starts_with("culedger_process_live_bytes{") && l.contains("device=\"0\"")).collect();
    assert_eq!(lines.len(), 1, "{out}");
    let live = second["live_bytes"].as_i64().unwrap();
    assert!(live > 0);
    assert_eq!(lines[0].rsplit_once(' ').unwrap().1, (2 * live).to_string(), "both, added up: {}", lines[0]);
}
