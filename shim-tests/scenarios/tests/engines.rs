//! The simulated engines (shim-tests/py/engines) under culedger, against their ground truth.
//!
//! Each engine runs its start-up on the simulated stack with culedger preloaded; every process
//! writes its report and its ground truth (`truth-<pid>.json`: live and peak bytes per category
//! per device, computed with final categories, and the history behind them). Checked here:
//!
//! 1. the ground truth is self-consistent;
//! 2. culedger's device totals (live and peak bytes) equal the truth's, exactly;
//! 3. the REPORT's per-category live AND peak bytes (report-time categories: culedger's own
//!    call sites, the shipped rules, the phase fallback) are within 1% + 2 MiB of the truth,
//!    on every rank, with every Python interpreter present (`pythons::supported`);
//! 4. the shipped rules applied to the history the simulation recorded itself (allocations
//!    with the call site a recorder would see) give the same: this separates a rule problem
//!    from a recording problem when 3 fails.
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both).

use culedger::classify::matcher::{NativeFrame, PyFrame};
use culedger::classify::phase::ProbeRecord;
use culedger::classify::report_time::{classify_device, AllocView, Site};
use culedger_scenarios::pythons::{self, Python};
use culedger_scenarios::{repo_root, Run, Sim};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MIB: u64 = 1 << 20;
const CATEGORIES: [&str; 6] = ["weights", "kv_pool", "ipc", "graphs", "comm", "other"];

fn libculedger() -> PathBuf {
    let p = repo_root().join("target/release/libculedger.so");
    assert!(p.is_file(), "{} is missing: run `make` first", p.display());
    p
}

struct EngineRun {
    python: String,
    run: Run,
    reports: Vec<Value>,
    truths: Vec<Value>,
}

/// Runs `engines/<script> args` on 2 simulated 8 GiB GPUs under culedger, with `python`
/// (None: `$PYTHON` or python3).
fn engine(name: &str, script: &str, args: &[&str], env: &[(&str, &str)]) -> EngineRun {
    engine_with(None, name, script, args, env)
}

/// The interpreters to run the sims with: every supported one present from 3.11 on (at least
/// one). Python 3.10 has no `co_qualname`: its frames name functions without their class
/// (`load_model`, not `ModelRunner.load_model`), which the packs' function patterns do not
/// match (docs/categories.md, "Limits").
fn interpreters() -> Vec<Python> {
    let found: Vec<Python> = pythons::supported().into_iter().filter(|p| p.minor >= 11).collect();
    assert!(!found.is_empty(), "no supported Python found");
    found
}

/// `check(ranks)` for `script args` on every interpreter.
fn on_every_python(name: &str, script: &str, args: &[&str], env: &[(&str, &str)], ranks: usize) -> Vec<EngineRun> {
    interpreters()
        .iter()
        .map(|py| {
            let tag = format!("{name}_py{}{}", py.major, py.minor);
            let e = engine_with(Some(py), &tag, script, args, env);
            e.run.assert_success();
            e.check(ranks);
            e
        })
        .collect()
}

fn engine_with(python: Option<&Python>, name: &str, script: &str, args: &[&str], env: &[(&str, &str)]) -> EngineRun {
    let mut sim = Sim::new(name);
    let (out, truth) = (sim.scratch().join("out"), sim.scratch().join("truth"));
    sim.env("LD_PRELOAD", libculedger())
        .env("CULEDGER_OUT", &out)
        .env("ENGINE_SIM_TRUTH_DIR", &truth)
        .env("FAKECUDA_DEVICES", "2")
        .env("FAKECUDA_TOTAL_MIB", "8192")
        .env("SIM_DIST_TIMEOUT_S", "60");
    for (k, v) in env {
        sim.env(k, v);
    }
    sim.timeout(Duration::from_secs(120));
    let mut cmd = sim.python(&format!("engines/{script}"));
    let label = match python {
        Some(py) => {
            let mut c = std::process::Command::new(&py.command);
            c.arg(repo_root().join("shim-tests/py/engines").join(script));
            sim.apply_env(&mut c);
            // The ranks are spawned with this interpreter too (a Debian build runs through
            // its launcher, not its bare executable).
            if py.command.is_absolute() {
                c.env("CULEDGER_SIM_PYTHON", &py.command);
            }
            cmd = c;
            py.label()
        }
        None => std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()),
    };
    let run = sim.run(cmd.args(args));
    EngineRun { python: label, reports: json_files(&out, "culedger-"), truths: json_files(&truth, "truth-"), run }
}

fn json_files(dir: &Path, prefix: &str) -> Vec<Value> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<Value> = rd
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap())
        .collect();
    v.sort_by_key(|d| d["pid"].as_u64().or(d["process"]["pid"].as_u64()));
    v
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

impl EngineRun {
    /// The truths of processes that allocated (the engine's ranks), with their role.
    fn ranks(&self) -> Vec<&Value> {
        self.truths.iter().filter(|t| !t["records"].as_array().unwrap().is_empty()).collect()
    }

    fn report_of(&self, pid: u64) -> &Value {
        self.reports
            .iter()
            .find(|r| r["process"]["pid"].as_u64() == Some(pid))
            .unwrap_or_else(|| panic!("no report of pid {pid}\n{}", self.run.describe()))
    }

    /// Every check of the module documentation; `ranks` processes allocated.
    fn check(&self, ranks: usize) {
        assert_eq!(self.ranks().len(), ranks, "{}", self.run.describe());
        let mut problems = Vec::new();
        for t in &self.truths {
            check_truth(t);
            self.check_totals(t);
            problems.extend(check_categories(t));
        }
        assert!(problems.is_empty(), "categories off the truth:\n{}\n{}", problems.join("\n"), self.run.describe());
        let off = self.report_problems();
        assert!(
            off.is_empty(),
            "{}: the report's categories off the truth:\n{}\n{}",
            self.python,
            off.join("\n"),
            self.run.describe()
        );
    }

    /// The report's categories against the truth, per rank and device: one line per category
    /// off by more than 1% + 2 MiB (live or peak), then the report's sites to see why.
    fn report_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for t in self.ranks() {
            let r = self.report_of(u(&t["pid"]));
            for (dev, _) in t["devices"].as_object().unwrap() {
                let d =
                    r["devices"].as_array().unwrap().iter().find(|d| d["index"].as_u64() == dev.parse().ok()).unwrap();
                let mut bad = false;
                for cat in CATEGORIES {
                    let c = &d["categories"][cat];
                    let got = (u(&c["live_bytes"]), u(&c["peak_bytes"]));
                    let want = truth_of(t, dev, cat);
                    if !close(got.0, want.0) || !close(got.1, want.1) {
                        bad = true;
                        problems.push(format!(
                            "{} device {dev} {cat}: report live {} MiB, peak {} MiB; truth {} MiB, {} MiB",
                            t["role"],
                            got.0 / MIB,
                            got.1 / MIB,
                            want.0 / MIB,
                            want.1 / MIB
                        ));
                    }
                }
                if bad {
                    for s in d["sites"].as_array().unwrap() {
                        problems.push(format!(
                            "  site {} {} live {} MiB peak {} MiB -> {} by {}",
                            s["site"],
                            s["caller"],
                            u(&s["live_bytes"]) / MIB,
                            u(&s["peak_bytes"]) / MIB,
                            s["category"],
                            s["rule"]
                        ));
                    }
                }
            }
        }
        problems
    }

    /// The worst difference from the truth per category over the ranks and devices:
    /// (live, peak) in bytes, for the accuracy figures printed by the tests.
    fn worst(&self) -> Vec<(&'static str, u64, u64)> {
        CATEGORIES
            .iter()
            .map(|&cat| {
                let (mut wl, mut wp) = (0, 0);
                for t in self.ranks() {
                    let r = self.report_of(u(&t["pid"]));
                    for dev in t["devices"].as_object().unwrap().keys() {
                        let d = r["devices"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|d| d["index"].as_u64() == dev.parse().ok())
                            .unwrap();
                        let c = &d["categories"][cat];
                        let want = truth_of(t, dev, cat);
                        wl = wl.max(u(&c["live_bytes"]).abs_diff(want.0));
                        wp = wp.max(u(&c["peak_bytes"]).abs_diff(want.1));
                    }
                }
                (cat, wl, wp)
            })
            .collect()
    }

    fn print_worst(&self, what: &str) {
        let w: Vec<String> = self.worst().iter().map(|(c, l, p)| format!("{c} {l}/{p}")).collect();
        eprintln!("ACCURACY {what} ({}): worst |report - truth| bytes live/peak: {}", self.python, w.join(", "));
    }

    fn check_totals(&self, t: &Value) {
        let r = self.report_of(u(&t["pid"]));
        let zero = serde_json::json!({"live": 0, "peak": 0});
        for d in r["devices"].as_array().unwrap() {
            let want = t["devices"].get(d["index"].to_string()).unwrap_or(&zero);
            assert_eq!(
                (u(&d["live_bytes"]), u(&d["peak_bytes"])),
                (u(&want["live"]), u(&want["peak"])),
                "{} device {}: report live/peak vs truth",
                t["role"],
                d["index"]
            );
        }
        for dev in t["devices"].as_object().unwrap().keys() {
            let seen = r["devices"].as_array().unwrap().iter().any(|d| d["index"].as_u64() == dev.parse().ok());
            assert!(seen, "{}: device {dev} of the truth is not in the report", t["role"]);
        }
        assert_eq!(u(&r["health"]["lost_events"]), 0, "{}", r["health"]);
        assert_eq!(u(&r["health"]["unknown_frees"]), 0, "{}", r["health"]);
    }
}

/// The truth agrees with itself: categories sum to the device, peaks bound lives, the
/// history replays to the summary.
fn check_truth(t: &Value) {
    for (dev, d) in t["devices"].as_object().unwrap() {
        let cats = &d["categories"];
        let live_sum: u64 = CATEGORIES.iter().map(|c| u(&cats[c]["live"])).sum();
        let peak_sum: u64 = CATEGORIES.iter().map(|c| u(&cats[c]["peak"])).sum();
        let peak_max = CATEGORIES.iter().map(|c| u(&cats[c]["peak"])).max().unwrap();
        assert_eq!(live_sum, u(&d["live"]), "{} device {dev}", t["role"]);
        assert!(CATEGORIES.iter().all(|c| u(&cats[c]["peak"]) >= u(&cats[c]["live"])), "{d}");
        assert!(u(&d["peak"]) >= u(&d["live"]) && u(&d["peak"]) >= peak_max && u(&d["peak"]) <= peak_sum, "{d}");
        let records = t["records"].as_array().unwrap().iter().filter(|r| r["dev"].as_u64() == dev.parse().ok());
        let live: u64 = records.filter(|r| r["freed_seq"].is_null()).map(|r| u(&r["bytes"])).sum();
        assert_eq!(live, u(&d["live"]), "{} device {dev}: records vs summary", t["role"]);
    }
    for r in t["records"].as_array().unwrap() {
        let from_allocator = r["native"].as_array().unwrap().iter().any(|o| o == "libc10_cuda.so");
        assert!(
            u(&r["bytes"]) > 0 && (!from_allocator || u(&r["bytes"]).is_multiple_of(2 * MIB)),
            "segment sizes: {r}"
        );
        assert!(r["freed_seq"].as_u64().is_none_or(|f| f > u(&r["seq"])), "{r}");
        assert!(CATEGORIES.contains(&r["category"].as_str().unwrap()), "{r}");
    }
}

/// (live, peak) of one category in the truth summary of `dev`.
fn truth_of(t: &Value, dev: &str, cat: &str) -> (u64, u64) {
    let c = &t["devices"][dev]["categories"][cat];
    (u(&c["live"]), u(&c["peak"]))
}

fn close(got: u64, want: u64) -> bool {
    got.abs_diff(want) <= want / 100 + 2 * MIB
}

/// The shipped rules on the recorded history, per device; one line per category off the
/// truth (with the rules behind each record, to see why).
fn check_categories(t: &Value) -> Vec<String> {
    let set = culedger::classify::ruleset();
    let records = t["records"].as_array().unwrap();
    let sites: Vec<Site<'_>> = records
        .iter()
        .map(|r| Site {
            python: r["python"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| PyFrame { file: f[0].as_str().unwrap(), function: f[1].as_str().unwrap() })
                .collect(),
            native: r["native"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| NativeFrame { object: o.as_str().unwrap(), symbol: None, internal: false })
                .collect(),
        })
        .collect();
    let mut problems = Vec::new();
    for dev in t["devices"].as_object().unwrap().keys() {
        let devn: Option<u64> = dev.parse().ok();
        let on_dev: Vec<usize> = (0..records.len()).filter(|&i| records[i]["dev"].as_u64() == devn).collect();
        let allocs: Vec<AllocView<'_>> = on_dev
            .iter()
            .map(|&i| {
                let r = &records[i];
                AllocView {
                    seq: u(&r["seq"]),
                    freed_seq: r["freed_seq"].as_u64(),
                    bytes: u(&r["bytes"]),
                    h2d_bytes: u(&r["h2d_bytes"]),
                    api: r["api"].as_str().unwrap(),
                    tag: None,
                    captured: r["captured"].as_bool().unwrap(),
                    exported: r["exported"].as_bool().unwrap(),
                    site: Some(&sites[i]),
                    site_id: 0,
                }
            })
            .collect();
        let probes: Vec<ProbeRecord> = t["probes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["dev"].as_u64() == devn)
            .map(|p| ProbeRecord { seq: u(&p["seq"]), free: p["free"].as_u64() })
            .collect();
        let c = classify_device(set, &allocs, &probes);
        for cat in CATEGORIES {
            let (got, want) = (c.category(cat), truth_of(t, dev, cat));
            if !close(got.0, want.0) || !close(got.1, want.1) {
                problems.push(format!(
                    "{} device {dev} {cat}: live {} MiB, peak {} MiB; truth {} MiB, {} MiB",
                    t["role"],
                    got.0 / MIB,
                    got.1 / MIB,
                    want.0 / MIB,
                    want.1 / MIB
                ));
            }
        }
        if !problems.is_empty() {
            for (&i, &(cat, rule)) in on_dev.iter().zip(&c.verdicts) {
                let r = &records[i];
                let rule = rule.map_or("default", |k| &set.rules()[k].name);
                problems.push(format!(
                    "  seq {} {} MiB truth {}{} -> {} by {rule}",
                    r["seq"],
                    u(&r["bytes"]) / MIB,
                    r["category"],
                    if r["exported"] == true { " (exported)" } else { "" },
                    c.categories[cat]
                ));
            }
        }
    }
    problems
}

/// The ranks' truth for one category on their own device (every rank alike in these runs).
fn each_rank(e: &EngineRun, cat: &str, pred: impl Fn(u64, u64) -> bool) {
    for t in e.ranks() {
        for dev in t["devices"].as_object().unwrap().keys() {
            let (live, peak) = truth_of(t, dev, cat);
            assert!(pred(live, peak), "{} device {dev} {cat}: live {live}, peak {peak}", t["role"]);
        }
    }
}

const SGLANG: [&str; 10] =
    ["--tp", "2", "--model-mib", "1024", "--layers", "4", "--mem-fraction-static", "0.85", "--cuda-graph-max-bs", "8"];

#[test]
fn sglang_with_nccl() {
    let args = [&SGLANG[..], &["--allreduce", "nccl"]].concat();
    for e in on_every_python("eng_sglang_nccl", "sglang_server.py", &args, &[], 2) {
        e.print_worst("sglang nccl");
        each_rank(&e, "weights", |l, _| l > 900 * MIB);
        each_rank(&e, "weights", |l, p| p > l); // the repacking scratch, freed again
        each_rank(&e, "kv_pool", |l, _| l > 3000 * MIB);
        each_rank(&e, "comm", |l, _| l > 0);
        each_rank(&e, "graphs", |l, _| l > 0);
        each_rank(&e, "ipc", |l, p| l == 0 && p == 0);
    }
}

/// The custom all-reduce enables peer access after the sizing query, which also makes the
/// runtime create a context on the peer's GPU (hidden driver memory there): a larger reserve.
#[test]
fn sglang_with_custom_allreduce() {
    let args = [&SGLANG[..6], &["--mem-fraction-static", "0.75", "--allreduce", "custom"]].concat();
    for e in on_every_python("eng_sglang_custom", "sglang_server.py", &args, &[], 2) {
        e.print_worst("sglang custom all-reduce");
        // meta + buffer (16 MiB), rank_data's 20 MiB segment, the graph pool's exported segments.
        each_rank(&e, "ipc", |l, _| l >= 36 * MIB);
    }
}

/// The demo's failure on a small machine: a thin reserve, and the custom all-reduce's lazily
/// opened peer buffers cost driver memory after the sizing query: the KV pool does not fit.
#[test]
fn sglang_custom_allreduce_out_of_memory() {
    let thin = ["--mem-fraction-static", "0.95", "--attention-workspace-mib", "64", "--cuda-graph-max-bs", "8"];
    let args = [&SGLANG[..6], &thin[..], &["--allreduce", "custom"]].concat();
    let e = engine("eng_sglang_oom", "sglang_server.py", &args, &[("FAKECUDA_PEER_MIB", "400")]);
    assert_eq!(e.run.status.and_then(|s| s.code()), Some(1), "{}", e.run.describe());
    assert!(e.run.stderr.contains("OutOfMemoryError"), "{}", e.run.describe());
    e.check(2);
    // Rank 0 fails for sure (its reserve is thinner: the launcher's context shares GPU 0); rank
    // 1 too unless its KV pool was allocated before rank 0's peer context landed on GPU 1.
    let failed: Vec<&Value> = e.ranks().into_iter().filter(|t| t["status"] == "failed").collect();
    assert!(!failed.is_empty(), "{}", e.run.describe());
    for t in failed {
        let r = e.report_of(u(&t["pid"]));
        let failures = r["devices"].as_array().unwrap().iter().map(|d| u(&d["failures_total"])).sum::<u64>();
        assert!(failures >= 1 || e.run.stderr.contains("exited during a collective"), "{}", r["devices"]);
    }
    let sane = engine(
        "eng_sglang_no_oom",
        "sglang_server.py",
        &[&args[..], &["--allreduce", "nccl"]].concat(),
        &[("FAKECUDA_PEER_MIB", "400")],
    );
    sane.run.assert_success();
}

/// `make demo` (scripts/demo.sh): the same server, machine and arguments, both configurations.
/// Every rank's categories, including those of the ranks that failed (their history up to the
/// failure), are checked against the truth; weights and the KV pool are there on every rank.
const DEMO: [&str; 6] = ["--tp", "8", "--model-mib", "77184", "--mem-fraction-static", "0.9"];
const DEMO_MACHINE: [(&str, &str); 4] = [
    ("FAKECUDA_DEVICES", "8"),
    ("FAKECUDA_TOTAL_MIB", "98304"),
    ("FAKECUDA_PEER_MIB", "1024"),
    ("FAKECUDA_GRAPH_MIB", "116"),
];

#[test]
fn the_demo_configurations() {
    for (allreduce, want) in [("nccl", 0), ("custom", 1)] {
        let args = [&DEMO[..], &["--allreduce", allreduce]].concat();
        let e = engine(&format!("eng_demo_{allreduce}"), "sglang_server.py", &args, &DEMO_MACHINE);
        assert_eq!(e.run.status.and_then(|s| s.code()), Some(want), "{}", e.run.describe());
        e.check(8);
        each_rank(&e, "weights", |l, _| l > 70 << 30);
        each_rank(&e, "kv_pool", |l, _| l > 10 << 30);
        each_rank(&e, "comm", |l, _| l > 0);
        let failed = e.ranks().iter().filter(|t| t["status"] == "failed").count();
        if allreduce == "custom" {
            // Every rank fails in its KV pool's V buffers, after the peer mappings.
            assert_eq!(failed, 8, "{}", e.run.describe());
            assert!(e.run.stderr.matches("torch.OutOfMemoryError").count() == 8, "{}", e.run.describe());
            each_rank(&e, "ipc", |l, _| l >= 16 * MIB);
            for t in e.ranks() {
                let r = e.report_of(u(&t["pid"]));
                let failures = r["devices"].as_array().unwrap().iter().map(|d| u(&d["failures_total"])).sum::<u64>();
                assert!(failures >= 1, "{}", r["devices"]);
            }
        } else {
            assert_eq!(failed, 0, "{}", e.run.describe());
            each_rank(&e, "graphs", |l, _| l > 0);
        }
        // The ranks name themselves as SGLang's do, with the launcher's rank environment.
        for t in e.ranks() {
            let r = e.report_of(u(&t["pid"]));
            let rank = t["role"].as_str().unwrap().rsplit(' ').next().unwrap();
            assert_eq!(r["process"]["title"], format!("sglang::scheduler_TP{rank}"), "{}", r["process"]);
            assert_eq!(r["process"]["env"]["RANK"], rank, "{}", r["process"]);
            assert_eq!(r["process"]["env"]["WORLD_SIZE"], "8", "{}", r["process"]);
        }
    }
}

const VLLM: [&str; 8] = ["--tp", "2", "--model-mib", "1024", "--layers", "4", "--gpu-memory-utilization", "0.8"];

#[test]
fn vllm_with_custom_allreduce() {
    for e in on_every_python("eng_vllm", "vllm_server.py", &VLLM, &[], 2) {
        e.print_worst("vllm custom all-reduce");
        each_rank(&e, "weights", |l, p| l > 900 * MIB && p > l);
        each_rank(&e, "kv_pool", |l, _| l > 3000 * MIB);
        each_rank(&e, "ipc", |l, _| l >= 36 * MIB);
        each_rank(&e, "graphs", |l, _| l > 0);
        each_rank(&e, "other", |_, p| p > 0); // the profile run, released before the KV cache
    }
}

/// Sleep mode: the weights and the KV cache are VMM memory (cuMemCreate + cuMemMap by
/// cumem_allocator.abi3.so); culedger counts the physical handles.
#[test]
fn vllm_sleep_mode_with_vmm() {
    let args = [&VLLM[..], &["--enable-sleep-mode", "--allreduce", "nccl"]].concat();
    for e in on_every_python("eng_vllm_vmm", "vllm_server.py", &args, &[], 2) {
        e.print_worst("vllm sleep mode");
        vmm_handles_counted(&e);
    }
}

fn vmm_handles_counted(e: &EngineRun) {
    for t in e.ranks() {
        let vmm = t["records"].as_array().unwrap().iter().filter(|r| r["api"] == "cuMemCreate");
        let cats: std::collections::BTreeSet<&str> = vmm.map(|r| r["category"].as_str().unwrap()).collect();
        assert!(cats.contains("weights") && cats.contains("kv_pool") && cats.contains("comm"), "{cats:?}");
        let r = e.report_of(u(&t["pid"]));
        let top = r["devices"][0]["top_allocations"].as_array().unwrap();
        assert!(top.iter().any(|a| a["kind"] == "vmm_physical" && a["api"] == "cuMemCreate"), "{top:?}");
    }
}

#[test]
fn plain_pytorch_script() {
    for e in on_every_python("eng_plain", "plain_torch.py", &[], &[], 1) {
        e.print_worst("plain torch");
        each_rank(&e, "weights", |l, _| l > 900 * MIB);
        each_rank(&e, "kv_pool", |l, _| l > 4000 * MIB);
        each_rank(&e, "other", |l, _| l > 0);
    }
}

/// No frame of any pack: the weights are allocated and copied by the script itself, so only
/// the phase fallback can find them.
#[test]
fn plain_pytorch_script_with_hand_loaded_weights() {
    for e in on_every_python("eng_plain_raw", "plain_torch.py", &["--raw-weights"], &[], 1) {
        e.print_worst("plain torch, hand-loaded weights");
        each_rank(&e, "weights", |l, _| l > 900 * MIB);
    }
}

/// The shipped rules with every rule that names `kv_pool` left out (engine packs and phase
/// fallback), as a `CULEDGER_RULES` file that replaces them.
fn rules_without_kv_pool() -> String {
    let mut rules = Vec::new();
    for f in ["builtin", "sglang", "vllm", "trtllm", "torch", "fallback"] {
        let path = repo_root().join(format!("rules/{f}.json"));
        let pack: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        rules.extend(pack["rules"].as_array().unwrap().iter().filter(|r| r["category"] != "kv_pool").cloned());
    }
    serde_json::json!({"culedger_rules": 1, "pack": "no-kv", "replace": true, "rules": rules}).to_string()
}

/// The accuracy check can fail: without the KV pool rules, the pool goes to `other` and the
/// report is off the truth (kv_pool and other, live and peak) on every rank.
#[test]
fn the_report_check_fails_without_the_kv_pool_rules() {
    let holder = Sim::new("eng_no_kv_rules_file");
    let file = holder.scratch().join("no-kv.json");
    std::fs::write(&file, rules_without_kv_pool()).unwrap();
    let path = file.display().to_string();
    let args = [&SGLANG[..], &["--allreduce", "nccl"]].concat();
    let e = engine("eng_sglang_no_kv_rules", "sglang_server.py", &args, &[("CULEDGER_RULES", &path)]);
    e.run.assert_success();
    let off = e.report_problems();
    for t in e.ranks() {
        for cat in ["kv_pool", "other"] {
            let want = format!(
                "{} device {} {cat}: report live",
                t["role"],
                t["devices"].as_object().unwrap().keys().next().unwrap()
            );
            assert!(off.iter().any(|l| l.starts_with(&want)), "{want} missing in:\n{}", off.join("\n"));
        }
        let r = e.report_of(u(&t["pid"]));
        assert!(r["health"]["warnings"].as_array().unwrap().is_empty(), "the file is valid: {}", r["health"]);
        let d = &r["devices"][0];
        assert_eq!(d["categories"]["kv_pool"]["peak_bytes"], 0, "{}", d["categories"]);
    }
}
