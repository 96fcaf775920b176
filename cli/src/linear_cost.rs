//! The analysis of many processes on one GPU costs time in proportion to them ([23] item 6):
//! a test module of its own, counting the analysis's elementary steps
//! (`culedger_analysis::counts::take_steps`: a member's record placed in time, a member's
//! end looked up) rather than timing anything. Every free-memory reading summed every
//! member's live bytes, the group's end went over every member at each reading and the
//! device timeline evaluated every member at every member's sample: 10,000 reports took
//! 33 s for `metrics` (BENCHMARKS.md, "The CLI over thousands of reports on one GPU").

use culedger_analysis::counts::take_steps;
use serde_json::Value;
use std::path::Path;

/// `n` reports of nccl's rank 0 on one host and GPU (pids apart, starts 1 ms apart), each
/// with 4 queries, 12 timeline samples and 3 of every other list.
fn write_reports(dir: &Path, n: usize) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl/culedger-4101.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(fixture).unwrap()).unwrap();
    let cut = |x: &mut Value, keep: usize| {
        if let Some(a) = x.as_array_mut() {
            a.truncate(keep)
        }
    };
    cut(&mut v["sites"], 3);
    let dev = &mut v["devices"][0];
    for (list, keep) in [("events", 3), ("sites", 3), ("top_allocations", 3), ("probes", 4), ("timeline", 12)] {
        cut(&mut dev[list], keep);
    }
    let start_ms = v["process"]["start_unix_ms"].as_i64().unwrap();
    for i in 0..n as i64 {
        v["process"]["pid"] = (10_000 + i).into();
        v["process"]["start_unix_ms"] = (start_ms + i).into();
        v["process"]["start_unix_us"] = ((start_ms + i) * 1000).into();
        std::fs::write(dir.join(format!("culedger-{}.json", 10_000 + i)), serde_json::to_vec(&v).unwrap()).unwrap();
    }
}

/// The steps of `metrics` (its snapshot is the analysis `report` and each `top` frame make)
/// and `explain` over `n` processes on one GPU.
fn steps(n: usize) -> u64 {
    let d = tempfile::tempdir().unwrap();
    write_reports(d.path(), n);
    let paths = [d.path().to_path_buf()];
    let snap = crate::metrics::snapshot(&paths);
    assert_eq!(snap.run.procs.len(), n);
    take_steps();
    let snap = crate::metrics::snapshot(&paths);
    let text = crate::metrics::render(&snap, &Default::default(), 0);
    assert!(text.contains("culedger_"), "{text}");
    crate::run_analysis::of(&snap.run).explanation();
    take_steps()
}

#[test]
fn four_times_the_processes_cost_about_four_times_the_steps() {
    let (small, large) = (steps(150), steps(600));
    // Linear with a binary search's logarithm: about 4.3 here; with the square of the
    // processes, 16.
    let ratio = large as f64 / small as f64;
    assert!(ratio < 6.0, "150 processes: {small} steps, 600: {large} ({ratio:.1} times)");
    assert!(small > 150 * 12, "{small} steps: the samples are counted");
}
