//! Unit tests of the findings (`culedger_analysis::findings`) as `culedger explain` words
//! them: the failure's reconciliation, its call sites, its words; a failed start.

use culedger_analysis::findings::{all, Detail, Finding, Kind};
use culedger_analysis::sizing::evaluate_run;
use crate::analysis::DeviceGroup;
use crate::load::Run;
use serde_json::{json, Value};

/// The findings with their words, as `culedger explain` has them.
fn worded(run: &Run, gs: &[DeviceGroup], ev: Option<&culedger_analysis::sizing::Evaluation>) -> Vec<Finding> {
    let mut found = all(run, gs, ev, &crate::explain::recon::Words);
    for f in &mut found {
        super::prose::word(f, !run.skipped.is_empty());
    }
    found
}

const MIB: i64 = 1 << 20;

fn py(file: &str, function: &str) -> Value {
    json!({"file": file, "function": function, "line": 10})
}

/// Rank 0 on GPU 0 as a writer with call sites records it: a first query, weights, the
/// sizing query, peer access (1 GiB), the pool's first half, the second half failing,
/// the out-of-memory handler's query. Rank 1 creates its context on GPU 0 by peer access
/// after rank 0's sizing query.
fn run() -> Run {
    let stamp = |t: i64, seq: i64, mut v: Value| {
        v["t_ms"] = json!(t / 1000);
        v["t_us"] = json!(t);
        v["seq"] = json!(seq);
        v
    };
    let total = 16384 * MIB;
    let probe = |t, seq, free: i64, site| {
        stamp(t, seq, json!({"api": "cudaMemGetInfo", "free_bytes": free * MIB, "total_bytes": total, "site": site}))
    };
    let sample = |t, seq, weights: i64, kv: i64| {
        stamp(t, seq, json!({"live_bytes": (weights + kv) * MIB, "weights": weights * MIB, "kv_pool": kv * MIB}))
    };
    let rank0 = json!({
        "schema": "culedger/1",
        "process": {"pid": 100, "host": "h", "start_unix_ms": 0, "start_unix_us": 0, "end_unix_ms": 10,
                    "exit": "exit", "exit_code": 1, "env": {"RANK": "0", "WORLD_SIZE": "2"}},
        "sites": [
            {"id": 7, "python": [py("/usr/lib/python3.11/ctypes/__init__.py", "__call__"),
                                  py("/srv/sglang/srt/distributed/custom_all_reduce.py", "CustomAllreduce.open")],
             "native": []},
            {"id": 9, "python": [py("/srv/venv/lib/python3.11/site-packages/sglang/srt/mem_cache/memory_pool.py",
                                     "MHATokenToKVPool._create_buffers")], "native": []},
            {"id": 10, "python": [py("/srv/venv/lib/python3.11/site-packages/sglang/srt/mem_cache/memory_pool.py",
                                      "MHATokenToKVPool._create_buffers")], "native": []},
            {"id": 11, "python": [py("/srv/venv/lib/python3.11/site-packages/sglang/srt/utils.py",
                                      "get_available_gpu_memory")], "native": []},
        ],
        "devices": [{
            "index": 0, "total_bytes": total, "alloc_count": 3, "live_bytes": 9000 * MIB, "peak_bytes": 9000 * MIB,
            "probes": [probe(1000, 1, 15872, 11), probe(3000, 3, 11776, 11), probe(9000, 9, 1288, 11)],
            "timeline": [sample(2000, 2, 4096, 0), sample(6000, 6, 4096, 4904)],
            "top_allocations": [
                stamp(6000, 6, json!({"ptr": "0x2", "bytes": 4904 * MIB, "api": "cudaMalloc", "category": "kv_pool", "site": 9})),
                stamp(2000, 2, json!({"ptr": "0x1", "bytes": 4096 * MIB, "api": "cudaMalloc", "category": "weights",
                                      "h2d_bytes": 4096 * MIB, "caller": "model_runner.py:ModelRunner.load_model"})),
            ],
            "failures": [stamp(8000, 8, json!({"api": "cudaMalloc", "bytes": 4904 * MIB, "error": 2,
                                               "error_name": "cudaErrorMemoryAllocation", "live_bytes": 9000 * MIB,
                                               "site": 10}))],
            "driver_costs": [{"api": "cudaDeviceEnablePeerAccess", "calls": 1, "bytes": 1024 * MIB, "sites": [7]}],
            "events": [stamp(5000, 5, json!({"kind": "driver_cost", "api": "cudaDeviceEnablePeerAccess",
                                             "bytes": 1024 * MIB, "t0_us": 4000, "detail": "1073741824 bytes"}))],
        }],
    });
    // Its context alone on the GPU: 512 MiB untracked at its first query.
    let r0: crate::model::Report = serde_json::from_value(rank0).unwrap();
    let rank1 = json!({
        "schema": "culedger/1",
        "process": {"pid": 101, "host": "h", "start_unix_ms": 0, "start_unix_us": 0, "end_unix_ms": 10,
                    "exit": "exit", "exit_code": 0, "env": {"RANK": "1", "WORLD_SIZE": "2"}},
        "devices": [{"index": 0, "events": [stamp(5600, 4, json!({"kind": "peer_access", "api": "cudaDeviceEnablePeerAccess",
                                                                  "t0_us": 5500, "detail": "peer access from device 1"}))]}],
    });
    Run { label: "t/".into(), procs: vec![r0, serde_json::from_value(rank1).unwrap()], ..Run::default() }
}

#[test]
fn a_failure_is_reconciled_with_its_call_sites() {
    let run = run();
    let gs = crate::analysis::groups(&run);
    let found = worded(&run, &gs, evaluate_run(&run, &gs, &crate::explain::recon::Words).as_ref());
    let f = found.iter().find(|f| f.kind == Kind::FailedAllocation).expect("the failure");
    let Detail::Failure(d) = &f.detail else { unreachable!() };
    let r = d.reconciliation.as_ref().expect("a sizing query before it");
    assert_eq!(r.query.free_bytes, 11776 * MIB);
    assert_eq!(r.query.caller.as_deref(), Some("sglang/srt/utils.py:get_available_gpu_memory"));
    let kinds: Vec<(&str, i64)> = r.items.iter().map(|i| (i.kind.as_str(), i.bytes / MIB)).collect();
    assert_eq!(kinds, [("pool", 4904), ("driver_cost", 1024), ("other_processes", 512)]);
    // 11776 - 4904 - 1024 - 512 = 5336 expected free; the handler's query told 1288:
    // 4048 MiB no report explains.
    assert_eq!(r.unexplained_bytes, Some(4048 * MIB));
    assert_eq!((d.free_bytes, d.short_by_bytes), (Some(1288 * MIB), Some((4904 - 1288) * MIB)));
    assert_eq!(d.part, "the second half of its KV pool");
    assert_eq!(
        f.title,
        "rank 0 (pid 100) could not allocate the second half of its KV pool on GPU 0 (4.79 GiB, cudaMalloc, \
         kv_pool, from MHATokenToKVPool._create_buffers)"
    );
    assert_eq!(d.caller.as_deref(), Some("sglang/srt/mem_cache/memory_pool.py:MHATokenToKVPool._create_buffers"));
    assert_eq!(r.items[0].callers, ["sglang/srt/mem_cache/memory_pool.py:MHATokenToKVPool._create_buffers"]);
    assert_eq!(r.items[1].callers, ["custom_all_reduce.py:CustomAllreduce.open"], "runtime frames skipped");
    assert!(f.callers.contains(&"custom_all_reduce.py:CustomAllreduce.open".to_string()));
    assert_eq!(f.pids, [100, 101]);
    assert!(
        f.text.starts_with(
            "rank 0 (pid 100) sized its KV pool from 11.50 GiB free at 0.003s; after that query 1.00 GiB went to \
             peer access (not visible to that query), 512.00 MiB to the context that rank 1 (pid 101) created here by \
             its peer access and 3.95 GiB to something no report of the run shows; the first half of the KV pool \
             took 4.79 GiB, and the second half of the KV pool (4.79 GiB) no longer fit: 1.26 GiB were free, \
             short by 3.53 GiB."
        ),
        "{}",
        f.text
    );
}

#[test]
fn a_failure_without_a_query_before_it_says_so() {
    // One process on GPU 0: a 100 MiB allocation, then a 5000 MiB one that fails; no query.
    let v = json!({
        "schema": "culedger/1",
        "process": {"pid": 7, "host": "h", "start_unix_ms": 0, "start_unix_us": 0, "end_unix_ms": 1000, "exit": "exit"},
        "devices": [{"index": 0, "total_bytes": 100_000 * MIB,
            "timeline": [{"t_ms": 10, "t_us": 10_000, "seq": 1, "live_bytes": 100 * MIB, "other": 100 * MIB}],
            "failures": [{"t_ms": 20, "t_us": 20_000, "seq": 2, "api": "cudaMalloc", "bytes": 5000 * MIB,
                          "error": 2, "error_name": "cudaErrorMemoryAllocation", "live_bytes": 100 * MIB}],
            "probes": [],
            "top_allocations": [{"ptr": "0x1", "bytes": 100 * MIB, "api": "cudaMalloc", "t_ms": 10, "t_us": 10_000,
                                 "seq": 1, "category": "other", "h2d_bytes": 0}]}],
    });
    let r: crate::model::Report = serde_json::from_value(v).unwrap();
    let run = Run { label: "t/".into(), procs: vec![r], ..Run::default() };
    let gs = crate::analysis::groups(&run);
    let found = worded(&run, &gs, evaluate_run(&run, &gs, &crate::explain::recon::Words).as_ref());
    assert_eq!(found.len(), 1, "{found:?}");
    let Detail::Failure(d) = &found[0].detail else { unreachable!() };
    assert!(d.reconciliation.is_none() && d.short_by_bytes.is_none());
    assert!(found[0].text.contains("with no free-memory query before it on GPU 0"), "{}", found[0].text);
}

#[test]
fn without_call_sites_the_text_says_so() {
    let mut run = run();
    for r in &mut run.procs {
        r.sites.clear();
        for d in &mut r.devices {
            for a in &mut d.top_allocations {
                (a.site, a.caller) = (None, None);
            }
        }
    }
    let gs = crate::analysis::groups(&run);
    let ev = evaluate_run(&run, &gs, &crate::explain::recon::Words);
    let found = worded(&run, &gs, ev.as_ref());
    let e = culedger_analysis::explanation::explanation(&run, &gs, found, None, &super::ExplainWords);
    assert!(!e.sites_recorded);
    let text = super::render::document(&e).render(crate::doc::Format::Text, crate::layout::Style::default());
    assert!(text.contains("Call site unknown: these reports record no call sites"), "{text}");
}

#[test]
fn a_process_stopped_by_a_stop_signal_did_not_fail_its_start() {
    // Rank 1 (no failed allocation of its own) ends by a signal: SIGSEGV is a failed start,
    // SIGTERM (a healthy server stopped) is not, nor is any process of a `culedger run`
    // whose command SIGINT stopped.
    let with = |signal: i64, summary: Option<crate::load::SummaryMeta>| {
        let mut run = run();
        run.procs[0].devices[0].failures.clear();
        run.procs[0].process.exit_code = Some(0);
        run.procs[1].process.exit = culedger_format::report::Exit::Signal;
        run.procs[1].process.exit_code = None;
        run.procs[1].process.signal = Some(signal);
        run.summary = summary;
        let gs = crate::analysis::groups(&run);
        worded(&run, &gs, evaluate_run(&run, &gs, &crate::explain::recon::Words).as_ref())
            .iter()
            .filter(|f| f.kind == Kind::FailedStart)
            .map(|f| {
                // One space between words: the text is a sentence, whatever renders it.
                assert!(!f.text.contains("  ") && !f.title.contains("  "), "{:?}", f.text);
                f.title.clone()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(with(11, None), ["rank 1 (pid 101) was killed by SIGSEGV without a failed allocation"]);
    assert!(with(15, None).is_empty());
    assert!(with(1, None).is_empty());
    let stopped =
        crate::load::SummaryMeta { pid: Some(1), signal: Some(2), exit_code: Some(130), ..Default::default() };
    let mut run = run();
    run.procs[0].devices[0].failures.clear();
    run.summary = Some(stopped);
    let gs = crate::analysis::groups(&run);
    assert!(
        worded(&run, &gs, evaluate_run(&run, &gs, &crate::explain::recon::Words).as_ref())
            .iter()
            .all(|f| f.kind != Kind::FailedStart),
        "rank 0's exit 1 is part of the stop"
    );
    // The command exited 1 of itself and nobody's allocation failed: the ranks' SIGTERM was
    // its cleanup (vLLM's executor after a worker's refusal), a failed start.
    let refused = crate::load::SummaryMeta { pid: Some(1), signal: None, exit_code: Some(1), ..Default::default() };
    assert_eq!(with(15, Some(refused.clone())), ["rank 1 (pid 101) was killed by SIGTERM without a failed allocation"]);
    let clean = crate::load::SummaryMeta { pid: Some(1), signal: None, exit_code: Some(0), ..Default::default() };
    assert!(with(15, Some(clean)).is_empty(), "a command that exited 0: a stop");
    // Rank 0 exited 1 a minute before the rest of the run ended by SIGINT: it failed, and
    // its launcher hung until the user's Ctrl-C.
    run.procs[1].process.end_unix_ms = 60_010;
    let gs = crate::analysis::groups(&run);
    assert!(
        worded(&run, &gs, evaluate_run(&run, &gs, &crate::explain::recon::Words).as_ref())
            .iter()
            .any(|f| f.kind == Kind::FailedStart),
        "an earlier failure stays one"
    );
}

#[test]
fn a_report_without_its_final_write_says_when_failures_came_past_the_urgent_budget() {
    let mut run = run();
    run.procs[0].health.urgent_deferred = 3;
    let has_note = |run: &Run| {
        crate::run_analysis::of(run).explanation().notes.iter().any(|n| n.contains("past culedger's budget"))
    };
    assert!(!has_note(&run), "a final report holds everything");
    run.procs[0].process.exit = culedger_format::report::Exit::Running;
    assert!(has_note(&run));
    let notes = crate::run_analysis::of(&run).explanation().notes.clone();
    assert!(notes.iter().all(|n| !n.contains("  ")), "one space between words: {notes:?}");
    run.procs[0].health.urgent_deferred = 0;
    assert!(!has_note(&run));
}
