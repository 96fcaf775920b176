//! Unit tests of the device groups: which queries matter, retries, untracked memory.

use super::*;
use crate::model::{Failure, Report};
use serde_json::{json, Value};

const MIB: i64 = 1 << 20;

fn probe(t_ms: i64, seq: Option<i64>, free_mib: i64) -> Value {
    json!({"t_ms": t_ms, "seq": seq, "api": "cudaMemGetInfo",
           "free_bytes": free_mib * MIB, "total_bytes": 1024 * MIB})
}

/// One process, one device: a probe, the KV pool allocated, and a probe after it, all
/// in the same millisecond (the SGLang pattern that confused `t_ms` alone).
pub(crate) fn report(seqs: bool) -> Report {
    let s = |n: i64| if seqs { json!(n) } else { Value::Null };
    let sample = |n: i64, mib: i64| json!({"t_ms": 7, "seq": s(n), "live_bytes": mib * MIB, "other": mib * MIB});
    let v = json!({
        "schema": "culedger/1",
        "process": {"pid": 42, "host": "h", "start_unix_ms": 1000, "end_unix_ms": 2000, "exit": "running"},
        "devices": [{
            "index": 0,
            "total_bytes": 1024 * MIB,
            "probes": [probe(7, s(2).as_i64(), 900), probe(7, s(5).as_i64(), 300)],
            "top_allocations": [
                {"ptr": "0x1", "bytes": 500 * MIB, "api": "cudaMalloc", "t_ms": 7, "seq": s(3), "category": "other"},
                {"ptr": "0x2", "bytes": 100 * MIB, "api": "cudaMalloc", "t_ms": 7, "seq": s(4), "category": "other"},
                {"ptr": "0x3", "bytes": 20 * MIB, "api": "cudaMalloc", "t_ms": 7, "seq": s(1), "category": "other"},
            ],
            "timeline": [sample(1, 20), sample(3, 520), sample(4, 620)],
        }],
    });
    serde_json::from_value(v).expect("a valid report")
}

pub(crate) fn run(r: Report) -> Run {
    Run { label: "t".into(), procs: vec![r], ..Run::default() }
}

#[test]
fn sizing_probe_is_before_the_allocation_in_the_same_millisecond() {
    let run = run(report(true));
    let g = &groups(&run)[0];
    let big = g.largest_allocation().unwrap();
    assert_eq!((big.bytes, big.seq), (500 * MIB, Some(3)));
    let (_, p, why) = g.sizing_probe().unwrap();
    assert_eq!(
        (p.seq, p.free_bytes),
        (Some(2), Some(900 * MIB)),
        "the probe taken after the allocation must not be picked ({why:?})"
    );
}

#[test]
fn an_allocators_retry_folds_into_its_request() {
    // PyTorch's allocator retries a failed cudaMalloc once: the same size from the same Python
    // stack (another native return address: another site id), a millisecond later. A later
    // failure of another size is a request of its own, and so is a retry more than 10 s later.
    let mut r = report(true);
    let frames = json!([{"file": "/srv/sglang/srt/mem_cache/memory_pool.py", "function": "f", "line": 3}]);
    r.sites = serde_json::from_value(json!([
        {"id": 1, "python": frames, "native": [{"object": "libc10_cuda.so", "offset": "0x10"}]},
        {"id": 2, "python": frames, "native": [{"object": "libc10_cuda.so", "offset": "0x20"}]},
        {"id": 3, "python": [{"file": "/srv/other.py", "function": "g", "line": 1}], "native": []}
    ]))
    .unwrap();
    let fail = |t_us: i64, seq: i64, bytes: i64, site: i64| {
        serde_json::from_value::<Failure>(json!({"t_ms": t_us / 1000, "t_us": t_us, "seq": seq, "api": "cudaMalloc",
            "bytes": bytes, "error": 2, "error_name": "cudaErrorMemoryAllocation", "site": site}))
        .unwrap()
    };
    r.devices[0].failures = vec![
        fail(100_000, 20, 900 * MIB, 1),
        fail(101_000, 21, 900 * MIB, 2),
        fail(102_000, 22, 900 * MIB, 3),
        fail(103_000, 23, 100 * MIB, 3),
        // Past the retry window (groups::RETRY_WINDOW_US, 10 s): a request of its own.
        fail(12_000_000, 24, 100 * MIB, 3),
    ];
    r.devices[0].failures_total = 5;
    let run = run(r);
    let g = &groups(&run)[0];
    let req: Vec<(i64, usize)> = g.failed_requests().iter().map(|(_, f, rs)| (f.seq.unwrap(), rs.len())).collect();
    assert_eq!(req, [(20, 1), (22, 0), (23, 0), (24, 0)], "a retry from another stack is not folded");
    let s = crate::summary::summarize_device(g, &crate::summary::ReportWords);
    assert_eq!((s.failures_total, s.failed_requests, s.failures.len()), (5, 4, 4));
    assert_eq!(s.failures[0].retried_at_us.len(), 1);
}

#[test]
fn without_seq_the_same_millisecond_counts_as_before() {
    // An older writer: no seq. The report cannot tell; the last probe of that
    // millisecond is taken, as before seq existed.
    let run = run(report(false));
    let g = &groups(&run)[0];
    let (_, p, _) = g.sizing_probe().unwrap();
    assert_eq!((p.seq, p.free_bytes), (None, Some(300 * MIB)));
    assert_eq!(g.probes().len(), 2, "both probes, in list order");
    assert_eq!(g.probes()[0].1.free_bytes, Some(900 * MIB));
}

#[test]
fn first_and_last_probes_follow_seq_not_list_order() {
    let mut r = report(true);
    r.devices[0].probes.reverse();
    let run = run(r);
    let g = &groups(&run)[0];
    let seqs: Vec<_> = g.probes().iter().map(|(_, p)| p.seq).collect();
    assert_eq!(seqs, [Some(2), Some(5)]);
    let first = g.key_probes().into_iter().find(|k| k.why.contains(&Why::FirstQuery));
    assert_eq!(first.unwrap().seq, Some(2));
}

#[test]
fn untracked_counts_only_own_allocations_made_before_the_probe() {
    let run = run(report(true));
    let g = &groups(&run)[0];
    let (m, p) = g.probes()[0];
    assert_eq!(g.tracked_at(m, p), 20 * MIB, "the KV pool came after this probe");
    let (m, p) = g.probes()[1];
    assert_eq!(g.tracked_at(m, p), 620 * MIB);
    // used at the last probe 724 MiB, tracked 620 MiB.
    let last = g.last_reading().unwrap();
    assert_eq!((last.used_bytes, last.tracked_bytes, last.untracked_bytes), (724 * MIB, 620 * MIB, 104 * MIB));
}

#[test]
fn two_probes_in_one_millisecond_stay_two_key_probes() {
    let mut r = report(true);
    // A failure after the second probe: both the sizing probe and the failure's last
    // probe are shown, distinct although they share t_ms and api.
    r.devices[0].failures = vec![serde_json::from_value(json!({
        "t_ms": 7, "seq": 6, "api": "cudaMalloc", "bytes": 400 * MIB,
        "error": 2, "error_name": "cudaErrorMemoryAllocation",
        "last_probe": probe(7, Some(5), 300)}))
    .unwrap()];
    let run = run(r);
    let keys = crate::summary::query_lines(&groups(&run)[0], &crate::summary::ReportWords);
    let seqs: Vec<_> = keys.iter().map(|k| k.seq).collect();
    assert_eq!(seqs, [Some(2), Some(5)], "{keys:?}");
    assert!(keys[0].why.contains("first query") && keys[0].why.contains("largest allocation"));
    assert!(keys[1].why.contains("before the failed cudaMalloc"));
}

#[test]
fn holds_is_written_as_the_json_names_it() {
    let names = [Holds::Allocations, Holds::Context, Holds::PeerContext].map(|h| serde_json::to_value(h).unwrap());
    assert_eq!(names, ["allocations", "context", "peer context"]);
    assert_eq!(names, [Holds::Allocations, Holds::Context, Holds::PeerContext].map(|h| h.as_str()));
}
