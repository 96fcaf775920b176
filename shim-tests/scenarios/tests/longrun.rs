//! Long runs stay bounded: millions of alloc+free pairs, with free-memory queries, failed
//! allocations, unknown frees, exports of untracked memory (a warning each) and copies mixed in
//! (`bench_rt churn`, on the minimal driver), keep culedger's resident memory flat, every list of
//! the report at its bound, and the report's size independent of the run's length. The 100M-pair
//! run is `scripts/bench.sh longrun 100000000` (BENCHMARKS.md).
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both).

use culedger_scenarios::reports::{device, int, libculedger, reports_in, temporaries_in};
use culedger_scenarios::{sim_dir, Run, Sim};
use serde_json::Value;

/// `bench_rt churn PAIRS CHECKPOINTS` under culedger on the minimal driver; the run and its report.
fn churn(pairs: u64, checkpoints: u64) -> (Run, Value, u64) {
    let mut sim = Sim::new("longrun");
    let out = sim.scratch().join("out");
    // No periodic writes: the resident memory sampled along the way is the ledger's own, not a
    // report being rendered at that moment. The final write happens at exit.
    sim.env("LD_PRELOAD", libculedger())
        .env("CULEDGER_OUT", &out)
        .env("CULEDGER_FLUSH_MS", "0")
        .env("LD_LIBRARY_PATH", sim_dir().join("min"));
    let run = sim.run_ok(sim.cmd("bench_rt").args(["churn", &pairs.to_string(), &checkpoints.to_string()]));
    let reports = reports_in(&out);
    assert_eq!(reports.len(), 1);
    assert!(temporaries_in(&out).is_empty());
    let size = std::fs::metadata(&reports[0].0).unwrap().len();
    (run, reports[0].1.clone(), size)
}

#[test]
fn millions_of_pairs_keep_memory_and_report_bounded() {
    const PAIRS: u64 = 2_000_000;
    let (run, r, size) = churn(PAIRS, 10);
    // Resident memory: the bounded lists fill during the first part of the run (the event
    // ring takes an export and a failure every 1,024 pairs, so about half a million pairs to
    // fill), then it is flat: over the second half (1M pairs, where a leak of one byte per pair
    // would be 1 MB) it may not grow by more than 64 KiB, and never by more than 1 MiB in all.
    let rss: Vec<u64> = run.all("rss").iter().map(|v| v.parse().unwrap()).collect();
    assert_eq!(rss.len(), 10, "{}", run.describe());
    let growth = rss.iter().max().unwrap() - rss[0];
    let late = rss[5..].iter().max().unwrap() - rss[4];
    assert!(late <= 64 << 10, "resident memory grew by {late} bytes over the second half: {rss:?}");
    assert!(growth <= 1 << 20, "resident memory grew by {growth} bytes over {PAIRS} pairs: {rss:?}");

    // Every list at its bound, every total still exact.
    let d = device(&r, 0);
    let len = |k: &str| d[k].as_array().map_or(0, Vec::len);
    assert_eq!(int(&d["alloc_count"]), PAIRS);
    assert_eq!(int(&d["free_count"]), PAIRS - 64, "64 slots stay live");
    assert_eq!(int(&d["probes_total"]), PAIRS / 16);
    assert_eq!(len("probes"), 512, "the first and the last 256 queries");
    assert_eq!(int(&d["failures_total"]), PAIRS.div_ceil(1024));
    assert_eq!(len("failures"), 256);
    assert!(int(&d["events_total"]) > 100_000 && len("events") == 1024);
    assert!((1024..=2048).contains(&len("timeline")), "timeline of {}", len("timeline"));
    assert_eq!(len("top_allocations"), 32);
    let h = &r["health"];
    assert_eq!(int(&h["unknown_frees"]), PAIRS.div_ceil(1024));
    assert_eq!(h["warnings"].as_array().map(Vec::len), Some(64));
    assert_eq!(int(&h["warnings_dropped"]) + 64, PAIRS.div_ceil(1024), "one distinct warning per export");

    // The report's size does not depend on the run's length: ten times fewer pairs, about the
    // same size (the timeline is decimated to between 1024 and 2048 samples; failures fill up).
    let (_, _, small) = churn(PAIRS / 10, 1);
    assert!(size <= 1 << 20, "report of {size} bytes");
    assert!(size <= small + (160 << 10), "report grew from {small} to {size} bytes with ten times the pairs");
}
