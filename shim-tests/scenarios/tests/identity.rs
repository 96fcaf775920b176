//! What identifies a process and places its records in time, in real reports of the
//! interposer on the simulated stack: run ids (from `CULEDGER_RUN_ID`, or the process's
//! own), titles set with setproctitle, allow-listed rank hints, microsecond timestamps,
//! measurement windows of driver costs, and the peer device a rank holds a context on.
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both).

use culedger_scenarios::reports::libculedger;
use culedger_scenarios::Sim;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A machine of 2 GPUs whose programs run under culedger, writing into `scratch/out`.
fn machine(name: &str) -> (Sim, PathBuf) {
    let mut sim = Sim::new(name);
    let out = sim.scratch().join("out");
    sim.env("LD_PRELOAD", libculedger())
        .env("CULEDGER_OUT", &out)
        .env("FAKECUDA_DEVICES", "2")
        .env("FAKECUDA_TOTAL_MIB", "4096")
        .env("FAKECUDA_PEER_MIB", "64");
    (sim, out)
}

fn reports(dir: &Path) -> Vec<Value> {
    let mut v: Vec<Value> = std::fs::read_dir(dir)
        .expect("the report directory")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap())
        .collect();
    v.sort_by_key(|r| r["process"]["pid"].as_u64());
    v
}

/// The simulated SGLang server with the custom all-reduce and a small model: fits, no OOM.
fn start_up(sim: &Sim) {
    let mut cmd = sim.python("engines/sglang_server.py");
    cmd.args(["--tp", "2", "--model-mib", "512", "--layers", "4", "--mem-fraction-static", "0.5"]);
    cmd.args(["--attention-workspace-mib", "64", "--allreduce", "custom"]);
    sim.run_ok(&mut cmd);
}

fn rank(r: &Value) -> Option<u64> {
    r["process"]["env"]["RANK"].as_str().and_then(|s| s.parse().ok())
}

#[test]
fn a_run_id_from_the_environment_titles_hints_and_peer_contexts() {
    let (mut sim, out) = machine("identity_env");
    sim.env("CULEDGER_RUN_ID", "20260101-000000-abc123");
    start_up(&sim);
    let reps = reports(&out);
    assert_eq!(reps.len(), 3, "the launcher and two ranks");
    for r in &reps {
        let p = &r["process"];
        assert_eq!((p["run_id"].as_str(), p["run_id_source"].as_str()), (Some("20260101-000000-abc123"), Some("env")));
        assert_eq!(p["start_unix_ms"].as_u64().unwrap(), p["start_unix_us"].as_u64().unwrap() / 1000);
        assert!(p["comm"].as_str().is_some_and(|c| c.starts_with("python")), "{p}");
    }
    let ranks: Vec<&Value> = reps.iter().filter(|r| rank(r).is_some()).collect();
    assert_eq!(ranks.len(), 2);
    for r in ranks {
        let n = rank(r).unwrap();
        let p = &r["process"];
        // The title the worker set (as SGLang does with setproctitle), and argv without the
        // NUL padding the rewritten command line has.
        assert_eq!(p["title"].as_str(), Some(format!("sglang::scheduler_TP{n}").as_str()), "{p}");
        assert_eq!(p["argv"].as_array().unwrap().len(), 1, "{p}");
        // Only the allow-listed rank hints.
        let env: Vec<&str> = p["env"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(env, ["LOCAL_RANK", "RANK", "WORLD_SIZE"], "{p}");
        assert_eq!(p["env"]["WORLD_SIZE"], "2");
        // Enabling peer access gave the rank a context on the other GPU: that device is in
        // its report, with the call's window.
        let peer = r["devices"].as_array().unwrap().iter().find(|d| d["index"].as_u64() == Some(1 - n)).unwrap();
        let ev = &peer["events"][0];
        assert_eq!(
            (ev["kind"].as_str(), ev["api"].as_str()),
            (Some("peer_access"), Some("cudaDeviceEnablePeerAccess"))
        );
        assert!(ev["t0_us"].as_u64().unwrap() <= ev["t_us"].as_u64().unwrap());
        assert_eq!(peer["live_bytes"], 0);
        // Its own GPU: every record in microseconds, t_ms its whole milliseconds; each
        // measured cost with a window that ends where the record was made.
        let own = r["devices"].as_array().unwrap().iter().find(|d| d["index"].as_u64() == Some(n)).unwrap();
        for list in ["probes", "top_allocations", "timeline", "events"] {
            for rec in own[list].as_array().unwrap() {
                assert_eq!(rec["t_ms"].as_u64().unwrap(), rec["t_us"].as_u64().unwrap() / 1000, "{list}: {rec}");
            }
        }
        let costs: Vec<&Value> =
            own["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "driver_cost").collect();
        assert!(costs.len() >= 3, "two IPC opens and the peer access: {costs:?}");
        for c in costs {
            let (t0, t) = (c["t0_us"].as_u64().unwrap(), c["t_us"].as_u64().unwrap());
            assert!(t0 <= t && c["bytes"].is_i64(), "{c}");
        }
        // Microseconds tell records of the same millisecond apart.
        let times: Vec<u64> = own["timeline"].as_array().unwrap().iter().map(|s| s["t_us"].as_u64().unwrap()).collect();
        let distinct_us: std::collections::BTreeSet<u64> = times.iter().copied().collect();
        let distinct_ms: std::collections::BTreeSet<u64> = times.iter().map(|t| t / 1000).collect();
        assert!(distinct_us.len() > distinct_ms.len(), "{times:?}");
    }
}

#[test]
fn without_a_run_id_every_process_names_its_own() {
    let (sim, out) = machine("identity_own");
    start_up(&sim);
    let reps = reports(&out);
    assert_eq!(reps.len(), 3);
    let mut ids = std::collections::BTreeSet::new();
    for r in &reps {
        let p = &r["process"];
        assert_eq!(p["run_id_source"], "process", "{p}");
        let want = format!("{}-{}-{}", p["host"].as_str().unwrap(), p["pid"], p["start_unix_ms"]);
        assert_eq!(p["run_id"].as_str(), Some(want.as_str()));
        ids.insert(p["run_id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), 3, "culedger never sets the variable for children itself");
}

#[test]
fn a_forked_child_keeps_an_environment_run_id_and_makes_its_own_otherwise() {
    for (env_id, shared) in [(Some("run-from-env"), true), (None, false)] {
        let mut sim = Sim::new("identity_fork");
        let out = sim.scratch().join("out");
        sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out);
        if let Some(id) = env_id {
            sim.env("CULEDGER_RUN_ID", id);
        }
        let run = sim.run_ok(sim.cmd("rt_ledger").arg("fork"));
        let reps = reports(&out);
        let of = |pid: u64| reps.iter().find(|r| r["process"]["pid"].as_u64() == Some(pid)).unwrap();
        let (parent, child) = (of(run.u64("parent_pid")), of(run.u64("child_pid")));
        assert_eq!(parent["process"]["run_id"] == child["process"]["run_id"], shared, "{env_id:?}");
        assert_eq!(child["process"]["ppid"], parent["process"]["pid"]);
    }
}

#[test]
fn a_malformed_run_id_is_one_warning_and_the_process_runs() {
    let (mut sim, out) = machine("identity_bad");
    sim.env("CULEDGER_RUN_ID", "two words; and more");
    let run = sim.run_ok(sim.cmd("rt_ledger").arg("basic"));
    let warned = run.stderr.lines().filter(|l| l.starts_with("culedger:") && l.contains("CULEDGER_RUN_ID")).count();
    assert_eq!(warned, 1, "{}", run.describe());
    let reps = reports(&out);
    assert_eq!(reps[0]["process"]["run_id_source"], "process");
    let warnings = reps[0]["health"]["warnings"].as_array().unwrap();
    assert!(warnings.iter().any(|w| w.as_str().unwrap().contains("CULEDGER_RUN_ID")), "{warnings:?}");
}
