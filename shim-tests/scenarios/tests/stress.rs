//! Stress: 32 threads doing allocations, frees, copies, IPC exports, captures, queries, failing
//! allocations and unknown frees at random over the 8 devices of a simulated machine, with forks,
//! execs and posix_spawn in the middle and SIGUSR1 landing inside hooks all along
//! (`shim-tests/c/stress.c`). The final report must match the program's own ground truth exactly.
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both).

use std::time::Duration;

use culedger_scenarios::reports::{culedger_lines, device, int, libculedger, reports_in};
use culedger_scenarios::{Run, Sim};
use serde_json::Value;

const THREADS: &str = "32";

/// Operations per thread and forks of each kind: small in `make test`; a longer soak with
/// `CULEDGER_STRESS_OPS=100000 CULEDGER_STRESS_FORKS=50 cargo test --release -p culedger-scenarios --test stress`.
fn sizes() -> (String, usize) {
    let ops = std::env::var("CULEDGER_STRESS_OPS").unwrap_or_else(|_| "3000".into());
    let forks = std::env::var("CULEDGER_STRESS_FORKS").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    (ops, forks)
}

/// The program's ground truth for one device.
fn truth(run: &Run, dev: u64) -> Vec<(String, u64)> {
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with(&format!("RESULT dev={dev} ")))
        .unwrap_or_else(|| panic!("no ground truth for device {dev}\n{}", run.describe()));
    line.split_whitespace()
        .skip(2)
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// What the report says for the same keys.
fn reported(d: &Value, key: &str) -> u64 {
    match key {
        "allocs" => int(&d["alloc_count"]),
        "frees" => int(&d["free_count"]),
        "live" => int(&d["live_bytes"]),
        "probes" => int(&d["probes_total"]),
        "failures" => int(&d["failures_total"]),
        "exported" => int(&d["ipc"]["exported_count"]),
        "exported_bytes" => int(&d["ipc"]["exported_bytes"]),
        "captures" => int(&d["graphs"]["captures"]),
        other => panic!("unknown ground-truth key {other}"),
    }
}

#[test]
fn threads_forks_execs_and_signals_give_exact_totals() {
    let mut sim = Sim::new("stress");
    let out = sim.scratch().join("out");
    sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out).env("CULEDGER_FLUSH_MS", "20");
    sim.timeout(Duration::from_secs(1200));
    let (ops, forks_each) = sizes();
    let run = sim.run_ok(sim.cmd("stress").args([THREADS, &ops, &forks_each.to_string()]));
    assert!(culedger_lines(&run).is_empty(), "culedger complained:\n{}", run.stderr);
    let pid = u64::from(run.pid);
    let reports = reports_in(&out);
    let of = |pid: u64| reports.iter().map(|(_, r)| r).filter(move |r| r["process"]["pid"].as_u64() == Some(pid));

    // The parent: exact totals on every device.
    let main: Vec<&Value> = of(pid).collect();
    assert_eq!(main.len(), 1, "one report for the stress process");
    let r = main[0];
    assert_eq!(r["process"]["exit"], "exit");
    assert_eq!(r["process"]["exit_code"], 0);
    assert_eq!(r["health"]["lost_events"], 0, "{:#}", r["health"]);
    assert_eq!(r["health"]["warnings"].as_array().map(Vec::len), Some(0), "{:#}", r["health"]);
    assert_eq!(int(&r["health"]["unknown_frees"]), run.u64("unknown_frees"));
    let mut total_allocs = 0;
    for dev in 0..8 {
        let d = device(r, dev);
        for (key, want) in truth(&run, dev) {
            assert_eq!(reported(d, &key), want, "device {dev}: {key}");
        }
        let cats: u64 = d["categories"].as_object().unwrap().values().map(|c| int(&c["live_bytes"])).sum();
        assert_eq!(cats, int(&d["live_bytes"]), "device {dev}: categories sum to the live bytes");
        let live_allocs: u64 = d["categories"].as_object().unwrap().values().map(|c| int(&c["allocs"])).sum();
        assert_eq!(live_allocs, int(&d["alloc_count"]) - int(&d["free_count"]), "device {dev}");
        assert!(int(&d["peak_bytes"]) >= int(&d["live_bytes"]));
        total_allocs += int(&d["alloc_count"]);
    }
    assert!(total_allocs > 10_000, "the stress did little: {total_allocs} allocations");
    assert!(run.u64("signals") > 100, "few signals landed: {}", run.u64("signals"));

    // Fork children: their own clean ledger, with the failed attempt only, written at exit.
    let forks = run.all("fork_child");
    assert_eq!(forks.len(), forks_each);
    for child in forks {
        let c: Vec<&Value> = of(child.parse().unwrap()).collect();
        assert_eq!(c.len(), 1, "fork child {child}: one report");
        let c = c[0];
        assert_eq!(c["process"]["forked_from"].as_u64(), Some(pid), "fork child {child}");
        assert_eq!(c["process"]["exit"], "exit", "fork child {child}");
        let devs = c["devices"].as_array().unwrap();
        assert!(devs.iter().all(|d| int(&d["alloc_count"]) == 0 && int(&d["live_bytes"]) == 0), "{child}: {c:#}");
        let failures: u64 = devs.iter().map(|d| int(&d["failures_total"])).sum();
        assert_eq!(failures, 1, "fork child {child}: its one failed cudaMalloc");
    }
    // Exec'd children (a fresh image of the program): their own complete report.
    let execs = run.all("exec_child");
    assert_eq!(execs.len(), forks_each);
    for child in execs {
        let c: Vec<&Value> = of(child.parse().unwrap()).collect();
        let done = c.iter().find(|r| r["process"]["exit"] == "exit").unwrap_or_else(|| panic!("exec child {child}"));
        let d = device(done, 0);
        assert_eq!((int(&d["alloc_count"]), int(&d["free_count"]), int(&d["live_bytes"])), (1, 1, 0), "{child}");
    }
    // Nothing else wrote (posix_spawn'd /bin/true touches no CUDA), nothing was left half-written.
    assert_eq!(reports.len(), 1 + 2 * forks_each, "{:?}", reports.iter().map(|r| &r.0).collect::<Vec<_>>());
    assert!(culedger_scenarios::reports::temporaries_in(&out).is_empty());
}
