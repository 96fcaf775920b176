//! The interposer on the simulated stack: every path a program can take to CUDA, each
//! checked against what the program says it did (its `RESULT` lines) and against the
//! same program run without culedger.
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both).

use culedger_scenarios::reports::libculedger;
use culedger_scenarios::{repo_root, Run, Sim};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// A simulated machine whose programs run under culedger, writing into `out`.
struct Ledgered {
    sim: Sim,
    out: PathBuf,
}

impl Ledgered {
    fn new(name: &str) -> Ledgered {
        Ledgered::with_preload(name, &libculedger().display().to_string())
    }

    fn with_preload(name: &str, preload: &str) -> Ledgered {
        let mut sim = Sim::new(name);
        let out = sim.scratch().join("out");
        sim.env("LD_PRELOAD", preload).env("CULEDGER_OUT", &out).env("CULEDGER_FLUSH_MS", "100");
        Ledgered { sim, out }
    }

    fn run(&self, program: &str, args: &[&str]) -> Run {
        self.sim.run_ok(self.sim.cmd(program).args(args))
    }

    /// Every report written, keyed by pid.
    fn reports(&self) -> Vec<Value> {
        reports_in(&self.out)
    }

    /// The only report; panics if there is not exactly one.
    fn report(&self) -> Value {
        let mut all = self.reports();
        assert_eq!(all.len(), 1, "expected one report in {}, found {}", self.out.display(), all.len());
        all.remove(0)
    }

    fn report_of(&self, pid: u64) -> Value {
        self.reports()
            .into_iter()
            .find(|r| r["process"]["pid"].as_u64() == Some(pid))
            .unwrap_or_else(|| panic!("no report for pid {pid} in {}", self.out.display()))
    }
}

fn reports_in(dir: &Path) -> Vec<Value> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<Value> = rd
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("culedger-") && n.ends_with(".json")
        })
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap();
            serde_json::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}\n{text}", e.path().display()))
        })
        .collect();
    v.sort_by_key(|r| r["process"]["pid"].as_u64());
    v
}

fn device(report: &Value, index: u64) -> &Value {
    report["devices"]
        .as_array()
        .expect("devices[]")
        .iter()
        .find(|d| d["index"].as_u64() == Some(index))
        .unwrap_or_else(|| panic!("no device {index} in {report:#}"))
}

fn cat(dev: &Value, name: &str) -> u64 {
    dev["categories"][name]["live_bytes"].as_u64().unwrap_or_else(|| panic!("categories.{name} in {dev:#}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

// ---- dynamic runtime ---------------------------------------------------------------------

#[test]
fn dynamic_runtime_allocations_frees_probes_and_copies() {
    let l = Ledgered::new("dyn_basic");
    let run = l.run("rt_ledger", &["basic"]);
    let r = l.report();
    assert_eq!(r["schema"], "culedger/1");
    assert_eq!(r["process"]["exit"], "exit");
    assert_eq!(r["process"]["pid"].as_u64(), Some(r["process"]["pid"].as_u64().unwrap()));
    let d = device(&r, 0);
    assert_eq!(u(&d["live_bytes"]), run.u64("live"));
    assert_eq!(u(&d["peak_bytes"]), run.u64("peak"));
    // cudaMalloc reaches our cuMemAlloc_v2 wrapper through the runtime: counted once.
    assert_eq!(u(&d["alloc_count"]), run.u64("allocs"));
    assert_eq!(u(&d["free_count"]), run.u64("frees"));
    // Report-time categories ([5]): what is not host-filled before the sizing query is other.
    let cats = ["weights", "kv_pool", "ipc", "graphs", "comm", "other"];
    assert_eq!(cats.iter().map(|c| cat(d, c)).sum::<u64>(), run.u64("live"), "{}", d["categories"]);
    assert_eq!(cat(d, "other") + cat(d, "weights"), run.u64("live"), "{}", d["categories"]);
    // cudaFree(NULL) is not a free of anything; cudaFree(0x1234) is an unknown free.
    assert_eq!(u(&r["health"]["unknown_frees"]), 1);
    assert_ne!(run.u64("bad_free"), 0, "the fake runtime rejects the bogus free");
    // The probe records exactly what the program was told.
    let probes = d["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 1, "{probes:#?}");
    assert_eq!(probes[0]["api"], "cudaMemGetInfo");
    assert_eq!(u(&probes[0]["free_bytes"]), run.u64("probe_free"));
    assert_eq!(u(&probes[0]["total_bytes"]), run.u64("probe_total"));
    assert_eq!(u(&probes[0]["live_bytes"]), 68 * MIB);
    // Host-to-device bytes land on the allocation they were copied into.
    let tops = d["top_allocations"].as_array().unwrap();
    let a = tops.iter().find(|t| u(&t["bytes"]) == MIB).expect("the 1 MiB allocation");
    assert_eq!(u(&a["h2d_bytes"]), run.u64("h2d"));
    assert_eq!(a["api"], "cudaMalloc");
}

#[test]
fn results_and_exit_codes_identical_without_preload() {
    for (program, args) in [("rt_ledger", &["basic"][..]), ("drv_ledger", &["basic"][..]), ("rt_ledger", &["oom"][..])]
    {
        let plain = Sim::new("plain");
        let a = plain.run(plain.cmd(program).args(args));
        let l = Ledgered::new("same");
        let b = l.sim.run(l.sim.cmd(program).args(args));
        assert_eq!(a.status.map(|s| s.code()), b.status.map(|s| s.code()), "{}\n{}", a.describe(), b.describe());
        assert_eq!(a.stdout, b.stdout, "{program} {args:?}: output differs under culedger");
    }
}

#[test]
fn process_that_never_touches_cuda_writes_nothing() {
    let plain = Sim::new("nocuda_plain");
    let a = plain.run(plain.cmd("rt_ledger").arg("nocuda"));
    let l = Ledgered::new("nocuda");
    let b = l.sim.run(l.sim.cmd("rt_ledger").arg("nocuda"));
    assert_eq!(a.status.unwrap().code(), Some(3));
    assert_eq!(b.status.unwrap().code(), Some(3));
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(b.stderr, "", "culedger must stay quiet");
    assert!(l.reports().is_empty(), "a process that reached no hook wrote a report");
    // Nor does a program that has nothing to do with CUDA at all (python, with dlsym
    // traffic). A global-scope lookup of a hooked name finds nothing, as without culedger:
    // our own exports must not make CUDA appear to be loaded.
    let probe = "import ctypes; g = ctypes.CDLL(None); \
                 print(g.getpid() > 0, hasattr(g, 'cudaMalloc'), hasattr(g, 'cuMemAlloc_v2'), hasattr(g, 'dlsym'))";
    let without = plain.run_ok(plain.cmd("python3").args(["-c", probe]));
    let with = l.sim.run_ok(l.sim.cmd("python3").args(["-c", probe]));
    assert_eq!(without.stdout.trim(), "True False False True");
    assert_eq!(with.stdout, without.stdout);
    assert!(l.reports().is_empty());
}

#[test]
fn several_devices_are_kept_apart() {
    let l = Ledgered::new("multi");
    let run = l.run("rt_ledger", &["multi"]);
    let r = l.report();
    assert_eq!(u(&device(&r, 0)["live_bytes"]), run.u64("dev0"));
    assert_eq!(u(&device(&r, 1)["live_bytes"]), run.u64("dev1"));
}

#[test]
fn many_threads_give_exact_totals() {
    let l = Ledgered::new("threads");
    let run = l.run("rt_ledger", &["threads", "16", "300"]);
    let d = device(&l.report(), 0).clone();
    assert_eq!(u(&d["live_bytes"]), run.u64("live"));
    assert_eq!(u(&d["alloc_count"]), run.u64("allocs"));
    assert_eq!(u(&d["alloc_count"]) - u(&d["free_count"]), d["categories"]["other"]["allocs"].as_u64().unwrap());
}

#[test]
fn failed_allocation_is_recorded_with_the_ledger_and_last_probe() {
    let l = Ledgered::new("oom");
    let run = l.run("rt_ledger", &["oom"]);
    let r = l.report();
    let d = device(&r, 0);
    let f = &d["failures"][0];
    assert_eq!(f["api"], "cudaMalloc");
    assert_eq!(u(&f["bytes"]), run.u64("want"));
    assert_eq!(u(&f["error"]), run.u64("oom_error"));
    assert_eq!(f["error_name"], "cudaErrorMemoryAllocation");
    assert_eq!(u(&f["live_bytes"]), 4 * MIB);
    assert_eq!(u(&f["last_probe"]["free_bytes"]), run.u64("probe_free"));
    assert_eq!(u(&d["failures_total"]), 1);
}

#[test]
fn async_allocations_legacy_and_per_thread_stream() {
    for program in ["rt_ledger", "rt_ledger_ptds"] {
        let l = Ledgered::new(program);
        let run = l.run(program, &["async"]);
        let r = l.report();
        let d = device(&r, 0);
        assert_eq!(u(&d["live_bytes"]), run.u64("live"), "{program}");
        assert_eq!(u(&d["peak_bytes"]), run.u64("peak"), "{program}");
    }
    // Built per-thread, the program binds to the exported _ptsz forms.
    let l = Ledgered::new("ptds_api");
    l.run("rt_ledger_ptds", &["async"]);
    let r = l.report();
    let apis: Vec<_> = device(&r, 0)["top_allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["api"].as_str().unwrap().to_string())
        .collect();
    assert!(apis.iter().all(|a| a == "cudaMallocAsync_ptsz"), "{apis:?}");
}

#[test]
fn capture_flags_allocations_and_instantiation_is_measured() {
    let l = Ledgered::new("graph");
    let run = l.run("rt_ledger", &["graph"]);
    let r = l.report();
    let d = device(&r, 0);
    assert_eq!(cat(d, "graphs"), run.u64("captured"));
    assert_eq!(cat(d, "other"), run.u64("other"));
    assert_eq!(u(&d["graphs"]["captures"]), 1);
    assert_eq!(u(&d["graphs"]["captures_active"]), 0);
    assert_eq!(u(&d["graphs"]["instantiations"]), run.u64("instantiations"));
    assert!(u(&d["graphs"]["instantiate_bytes"]) > 0, "the fake driver charges graph instantiation: {d:#}");
}

#[test]
fn ipc_export_moves_the_allocation_to_ipc_once() {
    let l = Ledgered::new("ipc");
    let run = l.run("rt_ledger", &["ipc"]);
    let r = l.report();
    let d = device(&r, 0);
    assert_eq!(cat(d, "ipc"), run.u64("ipc"));
    assert_eq!(cat(d, "other"), run.u64("other"));
    assert_eq!(u(&d["ipc"]["exported_count"]), 1);
    assert_eq!(u(&d["ipc"]["exported_bytes"]), run.u64("ipc"));
}

#[test]
fn peer_access_cost_is_measured() {
    let l = Ledgered::new("peer");
    l.run("rt_ledger", &["peer"]);
    let r = l.report();
    let costs = device(&r, 0)["driver_costs"].as_array().unwrap().clone();
    let c = costs.iter().find(|c| c["api"] == "cudaDeviceEnablePeerAccess").unwrap_or_else(|| panic!("{costs:#?}"));
    assert!(u(&c["bytes"]) > 0 && u(&c["calls"]) == 1 && c["approximate"] == true, "{c:#}");
}

#[test]
fn pinned_host_memory_has_its_own_ledger() {
    let l = Ledgered::new("pinned");
    let run = l.run("rt_ledger", &["pinned"]);
    let h = l.report()["host"].clone();
    assert_eq!(u(&h["pinned_live_bytes"]), run.u64("pinned_live"));
    assert_eq!(u(&h["pinned_peak_bytes"]), run.u64("pinned_peak"));
    assert_eq!(u(&h["registered_live_bytes"]), run.u64("registered"));
}

#[test]
fn driver_entry_points_from_the_runtime_count_once() {
    let l = Ledgered::new("entry");
    let run = l.run("rt_ledger", &["entry"]);
    let d = device(&l.report(), 0).clone();
    assert_eq!(u(&d["live_bytes"]), run.u64("live"));
    assert_eq!(u(&d["alloc_count"]), run.u64("allocs"));
    assert_eq!(run.u64("v1_distinct"), 1, "the v1 ABI is a different entry");
    assert!(d["top_allocations"].as_array().unwrap().iter().all(|t| t["api"] == "cuMemAlloc_v2"));
}

// ---- bad input -----------------------------------------------------------------------------

#[test]
fn malformed_settings_warn_once_and_use_defaults() {
    let mut l = Ledgered::new("badenv");
    l.sim.env("CULEDGER_FLUSH_MS", "soon").env("CULEDGER_LOG", "loud");
    let run = l.run("rt_ledger", &["basic"]);
    let lines: Vec<&str> = run.stderr.lines().filter(|s| s.starts_with("culedger:")).collect();
    assert_eq!(lines.len(), 2, "one line per bad setting:\n{}", run.stderr);
    assert!(lines.iter().any(|s| s.contains("CULEDGER_FLUSH_MS") && s.contains("soon")), "{lines:?}");
    let r = l.report();
    assert_eq!(r["settings"]["flush_ms"].as_u64(), Some(1000));
    assert_eq!(r["health"]["warnings"].as_array().unwrap().len(), 2);
    assert_eq!(u(&device(&r, 0)["live_bytes"]), run.u64("live"));
}

#[test]
fn unwritable_output_directory_warns_and_the_program_is_unharmed() {
    let plain = Sim::new("unwritable_plain");
    let a = plain.run_ok(plain.cmd("rt_ledger").arg("basic"));
    let mut l = Ledgered::new("unwritable");
    let blocker = l.sim.scratch().join("a-file");
    std::fs::write(&blocker, b"not a directory").unwrap();
    l.sim.env("CULEDGER_OUT", blocker.join("out"));
    let b = l.run("rt_ledger", &["basic"]);
    assert_eq!(a.stdout, b.stdout);
    let lines: Vec<&str> = b.stderr.lines().filter(|s| s.starts_with("culedger:")).collect();
    assert_eq!(lines.len(), 1, "exactly one warning:\n{}", b.stderr);
}

// ---- fork, exit paths, SIGKILL ------------------------------------------------------------

#[test]
fn fork_child_starts_a_clean_ledger_of_its_own() {
    for mode in ["fork", "fork_exit"] {
        let l = Ledgered::new(mode);
        let run = l.run("rt_ledger", &[mode]);
        assert_eq!(run.u64("child_status"), 0, "{}", run.describe());
        let parent = l.report_of(run.u64("parent_pid"));
        let child = l.report_of(run.u64("child_pid"));
        assert_eq!(u(&device(&parent, 0)["live_bytes"]), run.u64("parent_live"), "{mode}");
        assert_eq!(u(&device(&parent, 0)["alloc_count"]), 1, "{mode}");
        // The child's ledger starts empty: none of the parent's allocations, only its own
        // (failed: CUDA cannot be used in a child forked after initialisation) attempt.
        let cd = device(&child, 0);
        assert_eq!(u(&cd["live_bytes"]), 0, "{mode}: the child inherited the parent's ledger");
        assert_eq!(u(&cd["alloc_count"]), 0, "{mode}");
        assert_eq!(u(&cd["failures"][0]["bytes"]), run.u64("child_want"), "{mode}");
        assert_eq!(u(&cd["failures"][0]["error"]), run.u64("child_rc"), "{mode}");
        assert_eq!(u(&cd["failures"][0]["live_bytes"]), 0, "{mode}");
        assert_eq!(child["process"]["forked_from"].as_u64(), Some(run.u64("parent_pid")), "{mode}");
        assert_eq!(child["process"]["exit"], "exit", "{mode}: the child's final write happened");
        assert_eq!(child["process"]["exit_code"].as_i64(), Some(0), "{mode}");
    }
}

#[test]
fn exit_from_a_signal_handler_inside_a_hook_never_hangs() {
    for i in 0..5 {
        let l = Ledgered::new("sigexit");
        let run = l.sim.run(l.sim.cmd("rt_ledger").arg("sigexit"));
        assert_eq!(run.status.and_then(|s| s.code()), Some(42), "round {i}: {}", run.describe());
        // A report exists: the final one, or the last periodic one when the signal landed
        // inside culedger's bookkeeping.
        let r = l.report();
        assert!(u(&device(&r, 0)["alloc_count"]) >= 1, "round {i}");
    }
}

#[test]
fn sigkill_loses_at_most_one_flush_interval() {
    let l = Ledgered::new("sigkill");
    let mut cmd = l.sim.cmd("rt_ledger");
    cmd.arg("sleep");
    let mut child = cmd.spawn().unwrap();
    let pid = child.id() as u64;
    // Wait for the periodic write (flush every 100 ms) to show the allocation.
    let deadline = Instant::now() + Duration::from_secs(20);
    let report = loop {
        let reps = l.reports();
        if let Some(r) = reps.into_iter().find(|r| r["process"]["pid"].as_u64() == Some(pid)) {
            if r["devices"].as_array().is_some_and(|d| !d.is_empty()) {
                break r;
            }
        }
        assert!(Instant::now() < deadline, "no periodic report within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = child.wait();
    assert_eq!(report["process"]["exit"], "running");
    let after = l.report_of(pid);
    assert_eq!(after["process"]["exit"], "running", "a killed process cannot write at exit");
    assert_eq!(u(&device(&after, 0)["live_bytes"]), 12 * MIB);
    // The atomic writes left no temporary file behind.
    let leftovers: Vec<_> = std::fs::read_dir(&l.out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty() || leftovers.len() == 1, "{leftovers:?}");
}

// ---- driver API directly --------------------------------------------------------------------

#[test]
fn driver_api_direct() {
    let l = Ledgered::new("drv_basic");
    let run = l.run("drv_ledger", &["basic"]);
    let r = l.report();
    let d = device(&r, 0);
    assert_eq!(u(&d["live_bytes"]), run.u64("live"));
    let probes = d["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 2);
    assert_eq!(probes[0]["api"], "cuMemGetInfo_v2");
    assert_eq!(u(&probes[0]["free_bytes"]), run.u64("probe_free"));
    assert!(probes[1]["free_bytes"].is_null(), "cuMemGetInfo_v2(NULL, &total): nothing to read back");
    assert_eq!(u(&probes[1]["total_bytes"]), run.u64("probe_total"));
    let a = &d["top_allocations"][0];
    assert_eq!(a["api"], "cuMemAlloc_v2");
    assert_eq!(u(&a["h2d_bytes"]), run.u64("h2d"));
    // The driver's own answer to the double free is passed through.
    assert_eq!(run.u64("double_free"), 1, "CUDA_ERROR_INVALID_VALUE");
}

#[test]
fn pitched_allocation_counts_pitch_times_height() {
    let l = Ledgered::new("pitch");
    let run = l.run("drv_ledger", &["pitch"]);
    assert!(run.u64("pitch") >= 1000);
    let d = device(&l.report(), 0).clone();
    assert_eq!(u(&d["live_bytes"]), run.u64("live"));
    assert_eq!(d["top_allocations"][0]["kind"], "pitch");
    assert_eq!(d["top_allocations"][0]["api"], "cuMemAllocPitch_v2");
}

#[test]
fn driver_managed_pinned_pool_module_capture_and_instantiate() {
    let l = Ledgered::new("drv_misc");
    let run = l.run("drv_ledger", &["misc"]);
    let r = l.report();
    let d = device(&r, 0);
    assert_eq!(u(&d["live_bytes"]), run.u64("live"));
    assert_eq!(cat(d, "graphs"), run.u64("captured"));
    let kinds: Vec<(String, String)> = d["top_allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["api"].as_str().unwrap().to_string(), t["kind"].as_str().unwrap().to_string()))
        .collect();
    for (api, kind) in
        [("cuMemAllocAsync", "async"), ("cuMemAllocFromPoolAsync", "async"), ("cuMemAllocManaged", "managed")]
    {
        assert!(kinds.contains(&(api.to_string(), kind.to_string())), "{api}: {kinds:?}");
    }
    // cuStreamBeginCapture and cuGraphInstantiate are macros for the _v2 / WithFlags forms.
    assert_eq!(u(&d["graphs"]["captures"]), 1);
    assert_eq!(u(&d["graphs"]["instantiations"]), 1);
    let costs: Vec<&str> = d["driver_costs"].as_array().unwrap().iter().map(|c| c["api"].as_str().unwrap()).collect();
    assert!(costs.contains(&"cuModuleLoadData") && costs.contains(&"cuGraphInstantiateWithFlags"), "{costs:?}");
    assert_eq!(u(&r["host"]["pinned_live_bytes"]), run.u64("pinned"));
    assert_eq!(u(&r["host"]["pinned_peak_bytes"]), run.u64("pinned_peak"));
}

#[test]
fn vmm_physical_memory_counts_until_release() {
    let l = Ledgered::new("vmm");
    let run = l.run("drv_ledger", &["vmm"]);
    let r = l.report();
    let d = device(&r, 1);
    assert_eq!(u(&d["live_bytes"]), run.u64("vmm_live"));
    assert_eq!(u(&d["peak_bytes"]), run.u64("vmm_peak"));
    assert_eq!(cat(d, "ipc"), run.u64("vmm_exported"));
}

#[test]
fn get_proc_address_wraps_v2_and_passes_v1_through() {
    let l = Ledgered::new("getproc");
    let run = l.run("drv_ledger", &["getproc"]);
    let d = device(&l.report(), 0).clone();
    assert_eq!(run.u64("v1_distinct"), 1);
    // Only the v2 allocation is accounted; the v1 ABI is never wrapped.
    assert_eq!(u(&d["alloc_count"]), 1);
    assert_eq!(u(&d["live_bytes"]), run.u64("live"));
}

// ---- ctypes (SGLang / vLLM CudaRTLibrary) ----------------------------------------------------

#[test]
fn ctypes_runtime_through_dlsym_on_a_handle() {
    let l = Ledgered::new("ctypes");
    let run = l.sim.run_ok(&mut l.sim.python("ledger_ctypes.py"));
    let r = l.report();
    let d = device(&r, 0);
    assert_eq!(u(&d["live_bytes"]), run.u64("live"));
    assert_eq!(cat(d, "ipc"), run.u64("ipc"));
    assert_eq!(cat(d, "other"), run.u64("other"));
    assert_eq!(u(&d["probes"][0]["free_bytes"]), run.u64("probe_free"));
}

#[test]
fn os_exit_still_writes_the_final_report() {
    let l = Ledgered::new("os_exit");
    let run = l.sim.run_ok(l.sim.python("ledger_ctypes.py").arg("os_exit"));
    let r = l.report();
    assert_eq!(r["process"]["exit"], "exit");
    assert_eq!(r["process"]["exit_code"].as_i64(), Some(0));
    assert_eq!(u(&device(&r, 0)["live_bytes"]), run.u64("live"));
}

#[test]
fn ipc_open_in_a_spawned_child_counts_imports_apart() {
    let l = Ledgered::new("ctypes_ipc");
    let run = l.sim.run_ok(l.sim.python("ledger_ctypes.py").arg("ipc"));
    let parent = l.report_of(run.u64("parent_pid"));
    let child = l.report_of(run.u64("child_pid"));
    assert_eq!(cat(device(&parent, 0), "ipc"), run.u64("ipc"));
    let cd = device(&child, 1);
    assert_eq!(u(&cd["ipc"]["imported_count"]), 1);
    assert_eq!(u(&cd["ipc"]["imported_bytes"]), run.u64("ipc"));
    assert_eq!(u(&cd["ipc"]["imported_live_count"]), 0, "closed before exit");
    assert_eq!(u(&cd["live_bytes"]), 0, "an imported buffer is not local memory");
    let costs = cd["driver_costs"].as_array().unwrap();
    assert!(costs.iter().any(|c| c["api"] == "cudaIpcOpenMemHandle" && u(&c["bytes"]) > 0), "{costs:#?}");
}

// ---- other interposers ------------------------------------------------------------------------

#[test]
fn another_interposer_keeps_its_rtld_next() {
    let other = culedger_scenarios::lib_dir().join("libother_interposer.so");
    assert!(other.is_file(), "{} missing: run `make sim`", other.display());
    let ours = libculedger();
    for order in [format!("{}:{}", ours.display(), other.display()), format!("{}:{}", other.display(), ours.display())]
    {
        let l = Ledgered::with_preload("chain", &order);
        let run = l.run("rt_ledger", &["basic"]);
        assert!(run.stderr.contains("OTHER_INTERPOSER cudaMalloc=3"), "{order}\n{}", run.describe());
        assert!(run.stderr.contains("malloc_next=ok"), "{}", run.describe());
        let r = l.report();
        assert_eq!(u(&device(&r, 0)["live_bytes"]), run.u64("live"), "{order}");
        assert_eq!(u(&device(&r, 0)["alloc_count"]), 3, "{order}: counted once");

        let l = Ledgered::with_preload("chain_drv", &order);
        let run = l.run("drv_ledger", &["basic"]);
        assert!(run.stderr.contains("cuMemAlloc_v2=2"), "{order}\n{}", run.describe());
        assert_eq!(u(&device(&l.report(), 0)["live_bytes"]), run.u64("live"), "{order}");
    }
}

// ---- static runtime (NCCL, nvcc-built extensions) ----------------------------------------------

#[test]
fn static_runtime_is_seen_through_dlsym_and_the_resolver() {
    let l = Ledgered::new("static");
    let bin = culedger_scenarios::build_dir().join("static_ledger");
    let run = l.sim.run_ok(&mut l.sim.cmd(&bin));
    let r = l.report();
    let d = device(&r, 1);
    assert_eq!(u(&d["live_bytes"]), run.u64("live"));
    assert_eq!(u(&d["alloc_count"]), run.u64("allocs"));
    assert_eq!(cat(d, "ipc"), run.u64("ipc"));
    assert_eq!(cat(d, "other"), run.u64("other"));
    assert_eq!(u(&d["probes"][0]["free_bytes"]), run.u64("probe_free"));
    // Nothing is exported by the binary: every record names a driver entry point, the
    // per-thread one where the runtime used the per-thread default stream.
    let apis: std::collections::BTreeSet<String> =
        d["top_allocations"].as_array().unwrap().iter().map(|t| t["api"].as_str().unwrap().to_string()).collect();
    let want: std::collections::BTreeSet<String> =
        ["cuMemAlloc_v2", "cuMemAllocAsync_ptsz", "cuMemCreate"].iter().map(|s| s.to_string()).collect();
    assert_eq!(apis, want);
    assert_eq!(d["probes"][0]["api"], "cuMemGetInfo_v2");
}

// ---- real third-party code ------------------------------------------------------------------

/// NVIDIA's real libcudart.so.12 (12.9.79, unpacked from the wheel by `make headers`),
/// loaded by path through ctypes, on the fake driver. It resolves the driver through our
/// dlsym and cuGetProcAddress wrappers, gets its private tables from `cuGetExportTable` and
/// runs a malloc, a query and a free; culedger must leave every result, and the resolution
/// sequence, unchanged, and record exactly what the program was told.
#[test]
fn real_libcudart_behaves_identically_under_culedger() {
    let real = repo_root().join("target/cuda-headers/lib/libcudart.so.12");
    assert!(real.is_file(), "{} missing: run `make headers`", real.display());
    let mut plain = Sim::new("real_plain");
    plain.enable_trace();
    let a = plain.run_ok(plain.python("real_cudart.py").arg(&real));
    let mut l = Ledgered::new("real");
    l.sim.enable_trace();
    let b = l.sim.run_ok(l.sim.python("real_cudart.py").arg(&real));
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(b.u64("runtime"), 12090);
    assert_eq!((b.u64("malloc_rc"), b.u64("info_rc"), b.u64("free_rc")), (0, 0, 0), "runs past init");
    let (ta, tb) = (plain.trace(), l.sim.trace());
    assert!(ta.lines().filter(|l| l.starts_with("getproc ")).count() > 400, "{ta}");
    assert!(ta.contains("getproc cuMemAlloc 3020 0 -> 0 cuMemAlloc_v2"), "{ta}");
    assert_eq!(
        ta.lines().collect::<Vec<_>>(),
        culedger_scenarios::trace_without_culedger(&tb),
        "the real runtime asked the driver for something else under culedger"
    );
    // What it told the program is what culedger recorded.
    let r = l.report();
    let d = device(&r, 0);
    assert_eq!(d["failures"].as_array().unwrap().len(), 0);
    assert_eq!(
        (u(&d["alloc_count"]), u(&d["free_count"]), u(&d["live_bytes"]), u(&d["peak_bytes"])),
        (1, 1, 0, 1 << 20)
    );
    assert_eq!(d["probes"][0]["api"], "cudaMemGetInfo");
    assert_eq!(u(&d["probes"][0]["error"]), 0);
    assert_eq!(u(&d["probes"][0]["free_bytes"]), b.u64("free"));
}

/// LLVM's OpenMP runtime looks for a tool with `dlsym(RTLD_NEXT, "ompt_start_tool")` from
/// inside libomp, which also defines that symbol. Loaded RTLD_GLOBAL (as `import torch`
/// loads its dependencies), a dlsym hook that forwarded RTLD_NEXT with an ordinary call
/// would answer "after libculedger", find libomp's own symbol and never return: this hung
/// `import torch` under another interposer. The runtime is LLVM OpenMP 21.1.8 from PyPI
/// (`cmeel-libomp`), unpacked by `make test-deps` into `target/test-deps/libomp/`.
#[test]
fn openmp_tool_loader_under_culedger() {
    let libomp = repo_root().join("target/test-deps/libomp/libomp.so");
    assert!(libomp.is_file(), "{} missing: run `make test-deps`", libomp.display());
    let probe = format!(
        "import ctypes; omp = ctypes.CDLL({:?}, mode=ctypes.RTLD_GLOBAL); \
         print('RESULT threads_ok=%d' % (omp.omp_get_max_threads() > 0))",
        libomp.display().to_string()
    );
    let probe = probe.as_str();
    let mut plain = Sim::new("omp_plain");
    plain.env("OMP_TOOL_VERBOSE_INIT", "stdout").timeout(Duration::from_secs(30));
    let a = plain.run(plain.cmd("python3").args(["-c", probe]));
    assert!(a.success(), "{} does not load\n{}", libomp.display(), a.describe());
    let mut l = Ledgered::new("omp");
    l.sim.env("OMP_TOOL_VERBOSE_INIT", "stdout").timeout(Duration::from_secs(30));
    let b = l.sim.run_ok(l.sim.cmd("python3").args(["-c", probe]));
    assert_eq!(b.u64("threads_ok"), 1);
    assert!(b.stdout.contains("Search for OMP tool in current address space... Failed"), "{}", b.describe());
    assert_eq!(a.stdout, b.stdout);
}
