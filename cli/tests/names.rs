//! Report file names and temporaries: readers take every `culedger-*.json` (today's
//! `culedger-<host>-<pid>-<start_ms>[-<k>].json` and older `culedger-<pid>.json` names), never
//! a writer's temporary (partial JSON while it writes, or left by a killed writer); reports of
//! processes that ended by a signal or an exec count as ended.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

fn fixture(pid: i64, exit: &str, exit_code: Option<i64>, signal: Option<i64>) -> String {
    let text = std::fs::read_to_string(fixtures().join("nccl/culedger-4101.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let p = &mut v["process"];
    p["pid"] = pid.into();
    p["exit"] = exit.into();
    p["exit_code"] = exit_code.map_or(Value::Null, Value::from);
    p["signal"] = signal.map_or(Value::Null, Value::from);
    serde_json::to_string(&v).unwrap()
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn every_report_name_is_read_and_no_temporary_is() {
    let d = tempdir();
    let dir = d.path();
    write(dir, "culedger-71.json", &fixture(71, "exit", Some(0), None));
    write(dir, "culedger-sim-host-72-1700000000000.json", &fixture(72, "signal", None, Some(15)));
    write(dir, "culedger-sim-host-72-1700000000000-2.json", &fixture(73, "exec", None, None));
    let partial = &fixture(74, "running", None, None)[..100];
    write(dir, ".culedger-sim-host-74-1700000000000.json.tmp.0123456789abcdef-4026531836-74-99.3", partial);
    write(dir, ".culedger-75.json.tmp.2", partial);
    let o = culedger(&["report", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "temporaries are not reports, not even bad ones");
    let out = stdout(&o);
    assert!(out.contains("(3 processes, 1 host"), "{out}");
    for (pid, exit) in [(71, "exit 0"), (72, "killed by SIGTERM"), (73, "exec")] {
        let row = out
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("{pid}: {out}"));
        assert!(row.contains(exit), "{row}");
    }
    // The JSON form carries the signal only where there is one.
    let o = culedger(&["report", dir.to_str().unwrap(), "--format", "json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let procs = v["processes"].as_array().unwrap();
    let by_pid = |pid: i64| procs.iter().find(|p| p["pid"] == pid).unwrap();
    assert_eq!(by_pid(72)["signal"], 15);
    assert!(by_pid(71).get("signal").is_none());
}

/// A process that ended by a signal or an exec holds no device memory afterwards, like one
/// that exited (the driver freed it): the memory_viz trace frees everything at its end; a
/// running one keeps it.
#[test]
fn processes_ended_by_a_signal_or_exec_hold_nothing_afterwards() {
    let replay = r#"
import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
live = 0
for trace in s['device_traces']:
    for e in trace:
        if e['category'] != 'unknown':
            live += e['size'] if e['action'] == 'alloc' else -e['size']
print(live)
"#;
    for (exit, ended) in [("signal", true), ("exec", true), ("exit", true), ("running", false)] {
        let d = tempdir();
        write(d.path(), "culedger-72.json", &fixture(72, exit, None, (exit == "signal").then_some(9)));
        let snap = d.path().join("s.pickle");
        let o = culedger(&["export", d.path().to_str().unwrap(), "--memory-viz", snap.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let py = std::process::Command::new("python3").arg("-c").arg(replay).arg(&snap).output().expect("python3");
        assert!(py.status.success(), "{}", String::from_utf8_lossy(&py.stderr));
        let live: i64 = String::from_utf8_lossy(&py.stdout).trim().parse().unwrap();
        assert_eq!(live == 0, ended, "{exit}: {live} bytes live at the end");
    }
}
