//! Ledger accuracy (issue [11], items 6-10): VMM lifetimes, the device of stream-ordered
//! allocations, failed frees, a driver loaded at several addresses, secrets in the command
//! line. Each program says what it holds and what the driver told it (`RESULT` lines); the
//! report must agree.
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both).

mod common;

use common::{machine, CTX_MIB, MIB};
use culedger_scenarios::{repo_root, Run, Sim};
use serde_json::Value;
use std::path::PathBuf;

/// A program run under culedger on a fresh simulated machine, and the reports it left.
struct Under {
    sim: Sim,
    out: PathBuf,
}

impl Under {
    fn new(test: &str) -> Under {
        let lib = repo_root().join("target/release/libculedger.so");
        assert!(lib.is_file(), "{} is missing: run `make` first", lib.display());
        let mut sim = machine(test);
        let out = sim.scratch().join("reports");
        sim.env("LD_PRELOAD", &lib).env("CULEDGER_OUT", &out);
        Under { sim, out }
    }

    fn run(&self, program: &str, args: &[&str]) -> Run {
        self.sim.run_ok(self.sim.cmd(program).args(args))
    }

    /// The one report written (panics unless there is exactly one).
    fn report(&self) -> Value {
        let files: Vec<PathBuf> = std::fs::read_dir(&self.out)
            .map(|rd| rd.flatten().map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        assert_eq!(files.len(), 1, "expected one report in {}: {files:?}", self.out.display());
        let text = std::fs::read_to_string(&files[0]).unwrap();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", files[0].display()))
    }
}

/// Run `program args` under culedger on a fresh machine: what it said, and its report.
fn ran(test: &str, program: &str, args: &[&str]) -> (Run, Value) {
    let u = Under::new(test);
    let run = u.run(program, args);
    (run, u.report())
}

fn dev(report: &Value, index: u64) -> &Value {
    let devices = report["devices"].as_array().expect("devices[]");
    devices.iter().find(|d| d["index"] == index).unwrap_or_else(|| panic!("no device {index}: {report:#}"))
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn live(d: &Value, category: &str) -> u64 {
    num(&d["categories"][category]["live_bytes"])
}

/// Live bytes of the device at each free-memory query, in order.
fn probe_lives(d: &Value) -> Vec<u64> {
    d["probes"].as_array().unwrap().iter().map(|p| num(&p["live_bytes"])).collect()
}

fn top<'a>(d: &'a Value, api: &str) -> &'a Value {
    let tops = d["top_allocations"].as_array().unwrap();
    tops.iter().find(|t| t["api"] == api).unwrap_or_else(|| panic!("no {api} allocation in {tops:#?}"))
}

fn warnings(report: &Value) -> Vec<String> {
    report["health"]["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_string()).collect()
}

// ---- item 6: VMM physical memory lives while a handle reference or a mapping exists -----------

/// cuda-samples vectorAddMMAP: cuMemCreate, cuMemMap, cuMemRelease at once. The driver keeps
/// the memory until cuMemUnmap; culedger once counted it freed at the release (0 live, all
/// of it untracked).
#[test]
fn vmm_memory_released_after_mapping_stays_live_until_unmapped() {
    let (run, r) = ran("acc_vmm_release_early", "drv_accuracy", &["vmm_release_early"]);
    let d = dev(&r, 0);
    assert_eq!(num(&d["live_bytes"]), run.u64("live"));
    assert_eq!(num(&d["live_bytes"]), run.u64("after_unmap"), "what the driver still holds");
    assert_eq!(num(&d["peak_bytes"]), run.u64("peak"));
    assert_eq!(num(&d["peak_bytes"]), run.u64("mapped"));
    assert_eq!(probe_lives(d), [0, run.u64("mapped"), run.u64("after_unmap")]);
    // Used minus tracked is the context alone, at every query.
    assert_eq!(num(&d["untracked_bytes"]), CTX_MIB * MIB);
    assert_eq!(num(&d["untracked_max_bytes"]), CTX_MIB * MIB);
    assert_eq!((num(&d["alloc_count"]), num(&d["free_count"])), (3, 1));
    assert_eq!(live(d, "other"), run.u64("live"));
    assert!(warnings(&r).is_empty(), "{:?}", warnings(&r));
}

/// NCCL's free path (ncclCuMemFree): retain the handle from the address, release that
/// reference, unmap, release the creation reference. Live until the last release.
#[test]
fn vmm_retained_handle_release_keeps_the_mapping_live() {
    let (run, r) = ran("acc_vmm_retain", "drv_accuracy", &["vmm_retain"]);
    let d = dev(&r, 0);
    let driver = ["after_retain_release", "after_unmap", "after_release"].map(|k| run.u64(k));
    assert_eq!(driver, [run.u64("size"), run.u64("size"), 0], "the fake driver's lifetime");
    assert_eq!(probe_lives(d), [0, driver[0], driver[1], driver[2]]);
    assert_eq!((num(&d["live_bytes"]), num(&d["peak_bytes"])), (0, run.u64("size")));
    assert_eq!((num(&d["alloc_count"]), num(&d["free_count"])), (1, 1));
    assert_eq!(num(&d["untracked_max_bytes"]), CTX_MIB * MIB);
    assert!(warnings(&r).is_empty(), "{:?}", warnings(&r));
}

// ---- item 7: stream-ordered allocations are charged to the stream's or the pool's device ------

fn check_async_devices(r: &Value, run: &Run) {
    let (d0, d1) = (dev(r, 0), dev(r, 1));
    assert_eq!(num(&d0["live_bytes"]), run.u64("dev0"), "device 0: {d0:#}");
    assert_eq!(num(&d0["live_bytes"]), run.u64("dev0_measured"), "what device 0 really holds");
    assert_eq!(num(&d1["live_bytes"]), run.u64("dev1"), "device 1: {d1:#}");
    assert_eq!(live(d1, "graphs"), run.u64("dev1_graphs"), "captured on device 1's stream");
    assert_eq!(live(d0, "graphs"), 0, "device 0 allocated outside the capture");
    assert_eq!((num(&d0["graphs"]["captures"]), num(&d1["graphs"]["captures"])), (0, 1));
    assert_eq!(num(&d1["graphs"]["captured_allocs"]), 1);
    assert_eq!((num(&d0["alloc_count"]), num(&d1["alloc_count"])), (2, 5));
}

/// With device 0 current: cuMemAllocAsync on device 1's stream, cuMemAllocFromPoolAsync from
/// device 1's default pool, from a pool made on device 1 and from one culedger never saw
/// (its device comes from the new pointer), a capture on device 1's stream. Once all
/// charged to device 0.
#[test]
fn stream_ordered_allocations_land_on_the_stream_or_pool_device() {
    let (run, r) = ran("acc_async_devices", "drv_accuracy", &["async_devices"]);
    check_async_devices(&r, &run);
}

/// The same on a 12.4 driver: no cuStreamGetDevice; the device comes from the stream's context.
#[test]
fn stream_device_without_cu_stream_get_device() {
    let mut u = Under::new("acc_async_devices_124");
    u.sim.env("FAKECUDA_DRIVER_VERSION", "12040");
    let run = u.run("drv_accuracy", &["async_devices"]);
    check_async_devices(&u.report(), &run);
}

/// Runtime: cudaMallocAsync on device 1's stream while device 0 is current.
#[test]
fn runtime_stream_ordered_allocation_on_another_device() {
    let (run, r) = ran("acc_rt_async_devices", "rt_accuracy", &["async_devices"]);
    assert_eq!(num(&dev(&r, 0)["live_bytes"]), run.u64("dev0"));
    assert_eq!(num(&dev(&r, 1)["live_bytes"]), run.u64("dev1"));
    assert_eq!(top(dev(&r, 1), "cudaMallocAsync")["kind"], "async");
}

// ---- item 8: a failed free leaves the record exactly as it was ---------------------------------

/// cudaFree and cudaFreeHost during a global-mode capture fail with 900. The allocations
/// keep their kind, api, category and facts (they once became captured `device` memory of
/// `cudaFree` in `graphs`), nothing counts as freed, and the timeline never shows a dip.
#[test]
fn free_failing_during_capture_leaves_the_allocation_as_it_was() {
    let (run, r) = ran("acc_free_in_capture", "rt_accuracy", &["free_in_capture"]);
    assert_eq!([run.u64("free_rc"), run.u64("managed_rc"), run.u64("host_rc")], [900, 900, 900]);
    let d = dev(&r, 0);
    assert_eq!(num(&d["live_bytes"]), run.u64("live"));
    assert_eq!((num(&d["alloc_count"]), num(&d["free_count"])), (run.u64("allocs"), run.u64("frees")));
    assert_eq!((live(d, "ipc"), live(d, "other"), live(d, "graphs")), (run.u64("ipc"), run.u64("other"), 0));
    assert_eq!(num(&d["graphs"]["captured_allocs"]), 0);
    assert_eq!(num(&d["ipc"]["exported_count"]), 1, "exported twice, counted once");
    let exported = top(d, "cudaMalloc");
    assert_eq!((exported["kind"].as_str(), exported["category"].as_str()), (Some("device"), Some("ipc")));
    assert_eq!((&exported["exported"], &exported["captured"]), (&Value::Bool(true), &Value::Bool(false)));
    let managed = top(d, "cudaMallocManaged");
    assert_eq!((managed["kind"].as_str(), managed["category"].as_str()), (Some("managed"), Some("other")));
    assert_eq!(managed["captured"], false);
    let sizes: Vec<u64> = d["timeline"].as_array().unwrap().iter().map(|s| num(&s["live_bytes"])).collect();
    // Allocated 64 (exported: reclassified), 96, 112; the successful free: 96. No dip.
    assert_eq!(sizes, [64, 64, 96, 112, 96].map(|m| m * MIB), "timeline");
    assert_eq!(num(&r["host"]["pinned_live_bytes"]), run.u64("pinned"));
    assert_eq!(num(&r["host"]["pinned_free_count"]), 0);
    assert_eq!(num(&r["health"]["unknown_frees"]), 0);
}

/// cuMemFree from a thread without a context fails with 201: the exported buffer stays in
/// `ipc` (it once moved to `other`, and exporting it again counted it twice).
#[test]
fn free_failing_without_context_keeps_the_export() {
    let (run, r) = ran("acc_free_fails", "drv_accuracy", &["free_fails"]);
    assert_eq!(run.u64("free_rc"), 201);
    let d = dev(&r, 0);
    assert_eq!(num(&d["live_bytes"]), run.u64("live"));
    assert_eq!((live(d, "ipc"), live(d, "other")), (run.u64("ipc"), 0));
    assert_eq!((num(&d["ipc"]["exported_count"]), num(&d["ipc"]["exported_bytes"])), (1, run.u64("ipc")));
    assert_eq!((num(&d["alloc_count"]), num(&d["free_count"])), (run.u64("allocs"), run.u64("frees")));
    assert_eq!(top(d, "cuMemAlloc_v2")["exported"], true);
}

// ---- item 9: the driver loaded at several addresses -------------------------------------------

/// dlopen/dlsym/dlclose of libcuda.so.1 three times at new addresses, then real use: the
/// wrapper slots held by the unloaded copies are reused (once: no report, no warning).
#[test]
fn driver_reloaded_at_new_addresses_is_still_accounted() {
    let (run, r) = ran("acc_reload", env!("CARGO_BIN_EXE_driver_reload"), &["reload", "3"]);
    assert_eq!((run.u64("loads"), run.u64("distinct_bases"), run.u64("unloaded")), (4, 4, 3));
    let d = dev(&r, 0);
    assert_eq!(num(&d["live_bytes"]), run.u64("live"));
    assert_eq!(num(&d["probes"][0]["free_bytes"]), run.u64("probe_free"));
    assert_eq!(r["health"]["unwrapped_symbols"], Value::Array(vec![]));
}

/// Four copies loaded at once: three wrapper slots per entry, so the fourth copy's entry is
/// handed out unwrapped; that is said once on stderr and in the report.
#[test]
fn wrappers_exhausted_by_live_copies_warn_once() {
    let u = Under::new("acc_copies");
    let lib = culedger_scenarios::lib_dir().join("libcuda.so.1");
    let dir = u.sim.scratch().join("copies");
    for i in 1..=4 {
        let d = dir.join(format!("c{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(&lib, d.join("libcuda.so.1")).unwrap();
    }
    let run = u.run(env!("CARGO_BIN_EXE_driver_reload"), &["copies", dir.to_str().unwrap(), "4"]);
    let r = u.report();
    assert_eq!(num(&dev(&r, 0)["live_bytes"]), run.u64("live_first"), "the first copy is accounted");
    let unwrapped = r["health"]["unwrapped_symbols"].as_array().unwrap();
    assert!(unwrapped.iter().any(|s| s == "cuMemAlloc_v2"), "{unwrapped:?}");
    let said: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("culedger:")).collect();
    assert_eq!(said.len(), 1, "{}", run.stderr);
    assert!(said[0].contains("cuMemAlloc_v2") && said[0].contains("not accounted"), "{said:?}");
    assert_eq!(warnings(&r).iter().filter(|w| w.contains("not accounted")).count(), 1, "{:?}", warnings(&r));
}

// ---- item 10: secrets in the command line -----------------------------------------------------

/// Other forms a secret takes on a command line: several values, headers, URL passwords and
/// query tokens. None of it may reach the report.
#[test]
fn secrets_in_other_argv_forms_never_reach_the_report() {
    #[rustfmt::skip]
    let args = [
        "free_fails",
        "postgres://user:pw-h@db:5432/app",
        "--api-key", "sk-a1", "sk-a2", "--api-keys", "sk-a3,sk-a4",
        "--authorization", "Bearer tok-b0123456",
        "-H", "Authorization: Bearer tok-c0123456",
        "--pwd", "pw-d", "--pass=pw-e", "--passphrase", "pw-f", "--credentials", "cred-g",
        "--url=https://x:pw-i@example.com/v1?access_token=tok-j&model=m",
        "redis://:pw-k@10.0.0.1:6379",
    ];
    let (_, r) = ran("acc_argv", "drv_accuracy", &args);
    let argv: Vec<&str> = r["process"]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    #[rustfmt::skip]
    let want = [
        "free_fails",
        "postgres://user:<redacted>@db:5432/app",
        "--api-key", "<redacted>", "<redacted>", "--api-keys", "<redacted>",
        "--authorization", "<redacted>",
        "-H", "Authorization: <redacted>",
        "--pwd", "<redacted>", "--pass=<redacted>", "--passphrase", "<redacted>", "--credentials", "<redacted>",
        "--url=https://x:<redacted>@example.com/v1?access_token=<redacted>&model=m",
        "redis://:<redacted>@10.0.0.1:6379",
    ];
    assert_eq!(argv[1..], want);
    let text = r.to_string();
    for secret in ["sk-a", "tok-", "pw-", "cred-g"] {
        assert!(!text.contains(secret), "{secret} in the report");
    }
}
