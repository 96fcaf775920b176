//! Runs kept apart (a reused directory, reports of two runs together), and how processes
//! ended: killed by a signal (`culedger run`'s summary), no final report (killed?).

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

#[test]
fn reports_of_two_runs_are_not_added_up() {
    let d = mixed_dir(&["nccl", "custom-ar"]);
    let dir = d.path().to_str().unwrap();
    for args in [vec!["report", dir], vec!["check", dir, "--budget", "ipc<=1GiB"]] {
        let o = culedger(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stdout(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("reports of 2 different runs (nccl-run: 3 processes from 00:00:00.000; custom-ar-run: 3 processes from 00:00:00.000)"), "{err}");
        assert!(err.trim_end().ends_with("add --merge-runs to add them up, or --run ID to read one"), "{err}");
        assert!(stdout(&o).is_empty());
    }
    let o = culedger(&["diff", dir, "tests/fixtures/nccl"]);
    assert_eq!(o.status.code(), Some(2), "diff refuses too");
    // Asked for: added up, or one of them.
    let o = culedger(&["report", dir, "--merge-runs", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["run_ids"], serde_json::json!(["nccl-run", "custom-ar-run"]));
    assert_eq!(v["processes"].as_array().unwrap().len(), 6);
    let o = culedger(&["report", dir, "--run", "custom-ar"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&format!("culedger report: {dir}/ (3 processes, 1 host, 2 GPUs; run custom-ar-run)"))
    );
    let merged = stdout(&culedger(&["report", dir, "--merge-runs"]));
    let title: Vec<&str> = merged.lines().take(2).collect();
    assert!(title.join(" ").contains("2 runs merged: nccl-run, custom-ar-run)"), "{merged}");
}

/// Two runs that followed each other on the same GPUs, merged: the report says they never ran
/// together and gives each run's own peak (the sum is no device's real content); runs that
/// overlapped get no such note.
#[test]
fn merged_sequential_runs_are_said_to_be_sequential() {
    let d = tempdir();
    for (run, shift_ms) in [("nccl", 0i64), ("custom-ar", 60_000)] {
        for e in std::fs::read_dir(fixtures().join(run)).unwrap().flatten() {
            let mut v: Value = serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap();
            if let Some(p) = v.get_mut("process") {
                for (k, unit) in [("start_unix_ms", 1), ("end_unix_ms", 1), ("start_unix_us", 1000)] {
                    if let Some(t) = p[k].as_i64() {
                        p[k] = (t + shift_ms * unit).into();
                    }
                }
            }
            std::fs::write(d.path().join(e.file_name()), v.to_string()).unwrap();
        }
    }
    let dir = d.path().to_str().unwrap();
    let out = stdout(&culedger(&["report", dir, "--merge-runs"]));
    let note =
        out.lines().position(|l| l.starts_with("The 2 merged runs ran one after another, never at the same time"));
    let verdict = out.lines().position(|l| l.starts_with("2 of 4 ranks failed"));
    assert!(note.is_some() && note > verdict && note < out.lines().position(|l| l == "== Overview =="), "{out}");
    let words = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains("Each run's own tracked peak: nccl-run 22.55 GiB on sim-host GPU 1 of 24.00 GiB; custom-ar-run 21.55 GiB on sim-host GPU 1"), "{out}");
    let v: Value =
        serde_json::from_slice(&culedger(&["report", dir, "--merge-runs", "--format", "json"]).stdout).unwrap();
    assert!(v["notes"][0].as_str().unwrap().starts_with("The 2 merged runs ran one after another"));
    // At the same time (the fixtures' own clocks): no note.
    let d = mixed_dir(&["nccl", "custom-ar"]);
    let out = stdout(&culedger(&["report", d.path().to_str().unwrap(), "--merge-runs"]));
    assert!(!out.contains("one after another"), "{out}");
}

/// The SIGTERM case from `culedger run`: the command was killed, its report stayed at its
/// last flush ("running"); the summary knows how it ended.
fn killed_run(signal: Option<i64>) -> tempfile::TempDir {
    let d = tempdir();
    let mut launcher: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("nccl/culedger-4100.json")).unwrap()).unwrap();
    launcher["process"]["exit"] = "running".into();
    launcher["process"]["exit_code"] = Value::Null;
    let rank: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("nccl/culedger-4101.json")).unwrap()).unwrap();
    std::fs::write(d.path().join("culedger-4100.json"), launcher.to_string()).unwrap();
    std::fs::write(d.path().join("culedger-4101.json"), rank.to_string()).unwrap();
    let summary = serde_json::json!({
        "schema": "culedger-summary/1", "run_id": "nccl-run", "command": ["python3", "x.py"], "pid": 4100,
        "exit_code": signal.map_or(0, |s| 128 + s), "signal": signal, "processes": [launcher, rank]});
    std::fs::write(d.path().join("summary.json"), summary.to_string()).unwrap();
    d
}

fn status_of(dir: &Path, pid: i64) -> String {
    let o = culedger(&["report", dir.to_str().unwrap(), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = v["processes"].as_array().unwrap().iter().find(|p| p["pid"] == pid).unwrap();
    p["status"].as_str().unwrap().to_string()
}

#[test]
fn a_process_killed_by_a_signal_says_so() {
    let d = killed_run(Some(15));
    assert_eq!(status_of(d.path(), 4100), "killed by SIGTERM");
    assert_eq!(status_of(d.path(), 4101), "exit 0");
    let text = stdout(&culedger(&["report", d.path().to_str().unwrap()]));
    assert!(text.contains("killed by SIGTERM"), "{text}");
    // The summary alone reads the same.
    assert_eq!(status_of(&d.path().join("summary.json"), 4100), "killed by SIGTERM");
    golden("report-killed-processes.txt", &processes_table(&text));
}

/// The "== Processes ==" section of a text report.
fn processes_table(text: &str) -> String {
    let lines: Vec<&str> =
        text.lines().skip_while(|l| *l != "== Processes ==").take_while(|l| !l.starts_with("== sim-host")).collect();
    lines.join("\n")
}

#[test]
fn a_process_without_a_final_report_says_so() {
    // The run ended (there is a summary) but this process never wrote its final report.
    let d = killed_run(None);
    assert_eq!(status_of(d.path(), 4100), "no final report (killed?)");
    let text = stdout(&culedger(&["report", d.path().to_str().unwrap()]));
    golden("report-no-final-report-processes.txt", &processes_table(&text));
    // Without a summary: a process of this host that is gone.
    let d = tempdir();
    let mut r: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("nccl/culedger-4100.json")).unwrap()).unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    r["process"]["host"] = host.into();
    r["process"]["exit"] = "running".into();
    r["process"]["pid"] = (i32::MAX - 11).into();
    std::fs::write(d.path().join("culedger-1.json"), r.to_string()).unwrap();
    assert_eq!(status_of(d.path(), (i32::MAX - 11) as i64), "no final report (killed?)");
}
