//! The seed reproduction end to end (`make demo` runs the same configuration): the
//! SGLang-like start-up with 8 tensor-parallel ranks on 8 simulated 96 GiB GPUs under the
//! interposer, with NCCL and with the custom all-reduce forced on, then `culedger explain`
//! and `culedger diff` on the reports. The facts checked are the mechanism itself: what the
//! ranks were told, what the lazy IPC opens and peer access took after that query, and the
//! shortfall of the pool's second half.
//!
//! Needs `make` (the simulated stack, the release `libculedger.so` and `culedger`).

use culedger_scenarios::{repo_root, Sim};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const GIB: f64 = (1u64 << 30) as f64;

fn built(rel: &str) -> PathBuf {
    let p = repo_root().join(rel);
    assert!(p.is_file(), "{} is missing: run `make` first", p.display());
    p
}

/// The demo's start-up (scripts/demo.sh) under the interposer; its exit code and reports.
fn start_up(name: &str, allreduce: &str) -> (Sim, PathBuf, i32) {
    let mut sim = Sim::new(name);
    let out = sim.scratch().join(if allreduce == "custom" { "custom-ar" } else { "nccl" });
    sim.env("LD_PRELOAD", built("target/release/libculedger.so"))
        .env("CULEDGER_OUT", &out)
        .env("CULEDGER_RUN_ID", format!("seed-{allreduce}"))
        .env("FAKECUDA_DEVICES", "8")
        .env("FAKECUDA_TOTAL_MIB", "98304")
        .env("FAKECUDA_PEER_MIB", "1024")
        .env("FAKECUDA_GRAPH_MIB", "116")
        .timeout(std::time::Duration::from_secs(120));
    let mut cmd = sim.python("sglang_sim.py");
    cmd.args(["--tp", "8", "--model-mib", "77184", "--mem-fraction-static", "0.9", "--allreduce", allreduce]);
    let run = sim.run(&mut cmd);
    let code = run.status.and_then(|s| s.code()).unwrap_or(-1);
    (sim, out, code)
}

fn culedger(args: &[&str]) -> (i32, String) {
    let o = Command::new(built("target/release/culedger")).args(args).env("NO_COLOR", "1").output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned())
}

fn explain(dir: &Path) -> (i32, Value) {
    let (code, out) = culedger(&["explain", dir.to_str().unwrap(), "--format", "json"]);
    (code, serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}")))
}

fn gib(v: &Value) -> f64 {
    v.as_i64().unwrap() as f64 / GIB
}

#[test]
fn nccl_sizes_10_4_gib_pools_and_custom_allreduce_runs_out_of_memory_after_the_query() {
    let (_nccl_sim, nccl, code) = start_up("seed_nccl", "nccl");
    assert_eq!(code, 0, "the NCCL start-up passes");
    let (_car_sim, car, code) = start_up("seed_custom", "custom");
    assert_eq!(code, 1, "the custom all-reduce start-up runs out of memory");

    // NCCL: every rank but rank 0 (whose GPU also holds the launcher's context) sized a
    // pool of about 10.4 GiB, and about 9.2 GiB stayed free.
    let (code, v) = explain(&nccl);
    assert_eq!(code, 1, "rank 0's smaller pool is a warning");
    let sizing = v["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "sizing").expect("sizing");
    let ranks = sizing["detail"]["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 8);
    for r in ranks {
        let pool = gib(&r["pool_bytes"]);
        if r["device"] == 0 {
            assert!(r["flagged"] == true && (pool - 9.9).abs() < 0.05, "{r}");
        } else {
            assert!(r["flagged"] == false && (pool - 10.4).abs() < 0.05, "{r}");
        }
    }
    assert!(v["findings"].as_array().unwrap().iter().all(|f| f["kind"] != "failed_allocation"));
    for f in v["findings"].as_array().unwrap().iter().filter(|f| f["kind"] == "untracked_growth") {
        assert!((gib(&f["detail"]["free_after_bytes"]) - 9.2).abs() < 0.05, "{f}");
    }

    // Custom all-reduce: every rank's second half fails, short by the same amount, because
    // after its query its own IPC opens and peer access, and the contexts of the seven other
    // ranks, took more than the reserve.
    let (code, v) = explain(&car);
    assert_eq!(code, 1);
    let fails: Vec<&Value> =
        v["findings"].as_array().unwrap().iter().filter(|f| f["kind"] == "failed_allocation").collect();
    assert_eq!(fails.len(), 8);
    for f in fails {
        let d = &f["detail"];
        assert_eq!(d["part"], "the second half of its pool", "{f}");
        let r = &d["reconciliation"];
        let items = r["items"].as_array().unwrap();
        let by_api = |api: &str| items.iter().find(|i| i["api"] == api).unwrap_or_else(|| panic!("{api}: {f}"));
        assert_eq!(by_api("cudaIpcOpenMemHandle")["calls"], 14);
        assert_eq!(by_api("cudaDeviceEnablePeerAccess")["calls"], 7);
        assert!((gib(&by_api("cudaDeviceEnablePeerAccess")["bytes"]) - 7.0).abs() < 0.01);
        let others: usize =
            items.iter().filter(|i| i["kind"] == "other_processes").map(|i| i["pids"].as_array().unwrap().len()).sum();
        assert_eq!(others, 7, "the other ranks' contexts: {f}");
        assert_eq!(r["unexplained_bytes"], 0, "{f}");
        let short = d["short_by_bytes"].as_i64().unwrap();
        assert!((short as f64 / GIB - 0.93).abs() < 0.01, "{f}");
        let text = f["text"].as_str().unwrap();
        assert!(text.contains("(not visible to that query)") && text.contains("no longer fit"), "{text}");
    }

    let (code, out) = culedger(&["diff", nccl.to_str().unwrap(), car.to_str().unwrap()]);
    assert_eq!(code, 0);
    let head = out.lines().take_while(|l| !l.starts_with("culedger diff:")).collect::<Vec<_>>().join(" ");
    assert!(head.starts_with("custom-ar/ ran out of memory: the second half of its pool (4.95-5.20 GiB, other, cudaMalloc) failed on 8 of 8 GPUs"), "{head}");
    assert!(head.contains("cudaDeviceEnablePeerAccess (+7.00 GiB), other processes' contexts (+3.50 GiB)"), "{head}");
}
