//! The real SGLang server on the simulated 8-GPU machine: `python -m sglang.launch_server`
//! (sglang 0.5.23, sglang-kernel 0.4.10, real torch 2.15 and NCCL 2.30) unchanged, with a tiny
//! `LlamaForCausalLM` written by the test, `--load-format dummy --skip-tokenizer-init`, nothing
//! downloaded at run time. Each start runs without culedger first (a failure there is the fake
//! driver's or SGLang's, not culedger's), then under `culedger run --`; both must print SGLang's
//! readiness line and answer `/model_info`, and a SIGTERM after readiness must not read as a
//! failure. Under culedger, the KV pool each GPU's report holds is what SGLang logs for it
//! ("KV Cache is allocated ... K size: X GB, V size: Y GB"), and every call site is named by a
//! rule (none falls to the default). The wheels come from `scripts/fetch-sglang.sh`
//! (`make test` runs it) over the frameworks' torch; without network the tests skip with the
//! script's one line.
//!
//! The servers run one at a time (a lock): each start imports SGLang in every process, which is
//! most of its wall time on a small machine (on the shared 2-core machine: `--tp 1` 450 s for
//! both starts, `--tp 8` 190-610 s to ready per start, three starts).

use culedger_scenarios::cli::built;
use culedger_scenarios::reports::reports_in;
use culedger_scenarios::servers::{free_port, tiny_llama as write_model};
use culedger_scenarios::{repo_root, Sim};
use serde_json::Value;
use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_SERVER_AT_A_TIME: Mutex<()> = Mutex::new(());

/// How long a start may take to readiness (the `--tp 8` start imports SGLang in nine processes).
const READY_LIMIT: Duration = Duration::from_secs(1500);
const READY_LINE: &str = "The server is fired up and ready to roll!";

/// The venv python that sees the SGLang wheels and the frameworks' torch, or None (after one
/// line saying why) when they could not be fetched.
fn sglang_python() -> Option<PathBuf> {
    let root = repo_root();
    let python = root.join("target/sglang/venv/bin/python");
    if python.is_file() && root.join("target/sglang/site/sglang/__init__.py").is_file() {
        assert!(
            root.join("target/frameworks/site/torch/__init__.py").is_file(),
            "target/frameworks/site has no torch: run scripts/fetch-frameworks.sh (make test runs it)"
        );
        return Some(python);
    }
    for why in ["target/sglang/unavailable", "target/frameworks/unavailable"] {
        if let Ok(reason) = std::fs::read_to_string(root.join(why)) {
            eprintln!("skipped: real SGLang server test: {}", reason.trim());
            return None;
        }
    }
    panic!("{} missing: run scripts/fetch-sglang.sh (make test runs it)", python.display())
}

/// The simulated machine: 8 GPUs of 80 GiB, a 13.2 driver, SGLang offline.
fn machine(test: &str) -> Sim {
    let mut sim = Sim::new(test);
    sim.env("FAKECUDA_DRIVER_VERSION", "13020")
        .env("FAKECUDA_DEVICES", "8")
        .env("FAKECUDA_TOTAL_MIB", "81920")
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        // The custom all-reduce V2 is compiled at run time with ninja; the legacy one runs.
        .env("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2", "0");
    sim
}

/// One launch of the server: the process (its own process group), its log, its port, and the
/// `/dev/shm` entries there were before it.
struct Server {
    child: Child,
    log: PathBuf,
    port: u16,
    started: Instant,
    shm_before: HashSet<OsString>,
}

/// The `/dev/shm` entries now.
fn shm_entries() -> HashSet<OsString> {
    std::fs::read_dir("/dev/shm").map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default()
}

/// SGLang's shared-memory files that appeared since `before`: its load-snapshot slots
/// (managers/load_snapshot.py `shm_path_for`: `sglang_loads_<name>_<digest>.shm`) and its
/// pid-stamped segments (utils/stale_shm_cleanup.py `make_shm_name`: `sgl_shm_<kind>_<pid>_<rand>`,
/// the message queues of distributed/device_communicators/shm_broadcast.py, 24 MiB each) whose
/// creator is gone. SGLang unlinks them on a clean exit; its launcher's SIGKILL of the tree
/// (`kill_process_tree`) skips that, and SGLang itself sweeps them only in its CI.
fn sglang_shm_leftovers(before: &HashSet<OsString>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for name in shm_entries().difference(before) {
        let n = name.to_string_lossy();
        let ours = if n.starts_with("sglang_loads_") {
            true
        } else if let Some(rest) = n.strip_prefix("sgl_shm_") {
            // sgl_shm_<kind>_<pid>_<rand>: only once its creator has exited.
            let parts: Vec<&str> = rest.split('_').collect();
            parts.len() >= 3
                && parts[parts.len() - 2]
                    .parse::<i32>()
                    .is_ok_and(|pid| pid > 0 && unsafe { libc::kill(pid, 0) } != 0)
        } else {
            false
        };
        if ours {
            out.push(Path::new("/dev/shm").join(name));
        }
    }
    out
}

impl Server {
    /// `python -m sglang.launch_server ARGS`, under `culedger run -o OUT --` when `out` is given.
    fn start(sim: &Sim, python: &Path, model: &Path, args: &[&str], out: Option<&Path>, tag: &str) -> Server {
        let port = free_port();
        let log = sim.scratch().join(format!("{tag}.log"));
        let mut cmd = match out {
            Some(dir) => {
                let mut c = Command::new(built("target/release/culedger"));
                c.arg("run").arg("--color").arg("never").arg("-o").arg(dir).arg("--").arg(python);
                c
            }
            None => Command::new(python),
        };
        cmd.args(["-m", "sglang.launch_server", "--model-path"]).arg(model);
        cmd.args(["--port", &port.to_string(), "--host", "127.0.0.1"]);
        cmd.args(["--load-format", "dummy", "--skip-tokenizer-init", "--skip-server-warmup"]);
        cmd.args(["--attention-backend", "torch_native", "--sampling-backend", "pytorch", "--disable-cuda-graph"]);
        cmd.args(args);
        sim.apply_env(&mut cmd);
        let shm_before = shm_entries();
        let file = std::fs::File::create(&log).unwrap();
        cmd.stdin(Stdio::null()).stdout(file.try_clone().unwrap()).stderr(file).process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("{tag}: cannot start: {e}"));
        Server { child, log, port, started: Instant::now(), shm_before }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Waits for SGLang's readiness line; panics with the log's tail when the server exits or
    /// the limit passes first.
    fn wait_ready(&mut self, tag: &str) -> Duration {
        self.ready(tag).unwrap_or_else(|why| panic!("{why}"))
    }

    /// Waits for SGLang's readiness line: the time it took, or why not (with the log's tail).
    fn ready(&mut self, tag: &str) -> Result<Duration, String> {
        loop {
            if self.log().contains(READY_LINE) {
                return Ok(self.started.elapsed());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{tag}: the server exited ({status}) before it was ready:\n{}", self.tail()));
            }
            if self.started.elapsed() > READY_LIMIT {
                return Err(format!("{tag}: not ready after {READY_LIMIT:?}:\n{}", self.tail()));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits for the launch to end (SGLang's own launcher kills its tree on a failure).
    fn wait_exit(&mut self, limit: Duration, tag: &str) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                panic!("{tag}: still running after {limit:?}:\n{}", self.tail());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// GET `path` over plain HTTP/1.0: (status code, body).
    fn get(&self, path: &str) -> (u32, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect to the server");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (code, body)
    }

    fn signal(&self, sig: i32) {
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }
}

impl Drop for Server {
    /// Whatever happened, nothing of the launch outlives the test: not its processes, not the
    /// shared-memory files SGLang leaves when it is killed.
    fn drop(&mut self) {
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
        // The schedulers may outlive the launcher by a moment (their own process groups' end).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = sglang_shm_leftovers(&self.shm_before);
            for f in &left {
                let _ = std::fs::remove_file(f);
            }
            let young = shm_entries().difference(&self.shm_before).any(|n| n.to_string_lossy().starts_with("sgl_shm_"));
            if !young || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// What SGLang logged for its KV cache: (#tokens, K bytes + V bytes), read from
/// "KV Cache is allocated. dtype: ..., #tokens: N, K size: X GB, V size: Y GB" (GB = 2^30
/// bytes in memory_pool.py), rounded as SGLang prints them (two decimals).
fn logged_kv(log: &str) -> (u64, f64) {
    let line = log
        .lines()
        .find(|l| l.contains("KV Cache is allocated"))
        .unwrap_or_else(|| panic!("no 'KV Cache is allocated' line in the log"));
    let field = |name: &str| -> &str {
        let at = line.find(name).unwrap_or_else(|| panic!("{name} not in {line}")) + name.len();
        line[at..].split([',', ' ']).find(|s| !s.is_empty()).unwrap()
    };
    let tokens: u64 = field("#tokens:").parse().unwrap();
    let k: f64 = field("K size:").parse().unwrap();
    let v: f64 = field("V size:").parse().unwrap();
    (tokens, k + v)
}

/// The reports of the run's processes that used GPUs (the schedulers), by GPU index.
fn scheduler_reports(out: &Path) -> Vec<(u64, Value)> {
    let mut by_gpu = Vec::new();
    for (_, r) in reports_in(out) {
        for d in r["devices"].as_array().unwrap() {
            if d["categories"]["kv_pool"]["live_bytes"].as_u64().unwrap_or(0) > 0 {
                by_gpu.push((d["index"].as_u64().unwrap(), r.clone()));
            }
        }
    }
    by_gpu.sort_by_key(|(i, _)| *i);
    by_gpu
}

fn device(r: &Value, index: u64) -> &Value {
    r["devices"].as_array().unwrap().iter().find(|d| d["index"] == index).expect("device in the report")
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

const GIB: f64 = (1u64 << 30) as f64;

/// Starts the server without culedger and checks it serves; then under `culedger run` with
/// the same arguments, stops it with SIGTERM after readiness, and returns (the reports'
/// directory, the server's log, the `run` screen). Prints the wall time of each start.
fn start_both(sim: &Sim, python: &Path, model: &Path, args: &[&str], tag: &str) -> (PathBuf, String) {
    let _one = ONE_SERVER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut bare = Server::start(sim, python, model, args, None, &format!("{tag}-bare"));
    let t = bare.wait_ready(&format!("{tag} without culedger"));
    let (code, body) = bare.get("/model_info");
    assert_eq!(code, 200, "{tag} without culedger: /model_info answered {code}: {body}");
    eprintln!("{tag}: ready without culedger in {:.0} s", t.as_secs_f64());
    bare.signal(libc::SIGTERM);
    let _ = bare.wait_exit(Duration::from_secs(120), &format!("{tag} without culedger"));
    drop(bare);

    let out = sim.scratch().join(format!("{tag}-out"));
    let mut run = Server::start(sim, python, model, args, Some(&out), tag);
    let t = run.wait_ready(&format!("{tag} under culedger"));
    eprintln!("{tag}: ready under culedger in {:.0} s", t.as_secs_f64());
    let (code, body) = run.get("/model_info");
    assert_eq!(code, 200, "{tag} under culedger: /model_info answered {code}: {body}");
    let info: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("/model_info: {e}: {body}"));
    assert_eq!(info["architectures"][0], "LlamaForCausalLM", "{info}");
    // What a user's Ctrl-C or a service manager does: `culedger run` forwards it to SGLang.
    run.signal(libc::SIGTERM);
    let _ = run.wait_exit(Duration::from_secs(180), &format!("{tag} under culedger"));
    let log = run.log();
    (out, log)
}

/// The checks every healthy start shares: each of the `tp` GPUs holds the KV pool SGLang
/// logged, every allocation is named by an SGLang or torch rule, and the stop is no failure.
fn healthy_checks(out: &Path, log: &str, tp: u64, tag: &str) {
    let (tokens, kv_gib) = logged_kv(log);
    assert!(tokens > 0);
    let gpus = scheduler_reports(out);
    let indices: Vec<u64> = gpus.iter().map(|(i, _)| *i).collect();
    assert_eq!(indices, (0..tp).collect::<Vec<_>>(), "{tag}: one scheduler per GPU holds a KV pool");
    for (i, r) in &gpus {
        let d = device(r, *i);
        // The K and V buffers: memory_pool.py MHATokenToKVPool._create_buffers, per layer.
        let kv: u64 = d["sites"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| {
                s["category"] == "kv_pool" && s["caller"].as_str().is_some_and(|c| c.contains("_create_buffers"))
            })
            .map(|s| n(&s["live_bytes"]))
            .sum();
        assert!(
            ((kv as f64 / GIB) - kv_gib).abs() <= 0.01,
            "{tag}: GPU {i}: the pool's K and V buffers are {:.4} GiB, SGLang logged {kv_gib:.2} GB: {}",
            kv as f64 / GIB,
            d["sites"]
        );
        // Beside K and V: the allocator's free list (8 B a token, mem_cache/allocator/token.py
        // TokenToKVPoolAllocator.clear) and the request-to-token table (ReqToTokenPool).
        let pool = n(&d["categories"]["kv_pool"]["live_bytes"]);
        assert!(
            pool >= kv && pool - kv <= 8 * tokens + (64 << 20),
            "{tag}: GPU {i}: kv_pool {pool} against K+V {kv} and {tokens} tokens"
        );
        for s in d["sites"].as_array().unwrap() {
            assert!(s["rule"].is_string(), "{tag}: GPU {i}: a site no rule names (the default other): {s}");
            // The EagerRunner's input buffers, built with CUDA graphs off too: not graphs (a
            // segment of torch's cache is charged to the call that made it, so they may be
            // served from one made earlier and carry no site of their own).
            if s["caller"].as_str().is_some_and(|c| c.contains("register_slot")) {
                assert_eq!(s["rule"], "sglang.other.eager_runner_inputs", "{tag}: GPU {i}: {s}");
            }
        }
        assert_eq!(n(&d["categories"]["graphs"]["peak_bytes"]), 0, "{tag}: GPU {i}: graphs with --disable-cuda-graph");
        for c in ["weights", "kv_pool", "other"] {
            assert!(n(&d["categories"][c]["peak_bytes"]) > 0, "{tag}: GPU {i}: nothing in {c}: {}", d["categories"]);
        }
        assert!(d["failures"].as_array().is_none_or(|f| f.is_empty()), "{tag}: GPU {i}: a failure");
    }
    // A stop after readiness is no failure: no finding of severity failure (no failed
    // allocation, no failed start); warnings are shown for whoever reads the test's output.
    let (code, e) = culedger_scenarios::cli::explain(out);
    let findings = e["findings"].as_array().unwrap();
    let failures: Vec<&Value> = findings.iter().filter(|f| f["severity"] == "failure").collect();
    assert!(failures.is_empty(), "{tag}: explain after SIGTERM (exit {code}): {failures:?}");
    for f in findings {
        eprintln!("{tag}: explain: {} {}: {}", f["severity"], f["kind"], f["title"]);
    }
    // Nothing above 1% of a GPU is left unnamed ([21]): every rise of untracked memory explain
    // reports is named (contexts, the libraries loaded lazily, IPC opens) but for at most 1% of
    // the GPU's 80 GiB. (Was 1.92 GiB at --tp 1 and 6.03 GiB at --tp 8: NCCL's ~1000 allocations
    // of 4 to 608 bytes each took a 2 MiB page of their own on the fake driver, where a real
    // driver packs them; and the lazy first uses fell out of the bounded events behind ~1000
    // empty cuLibraryLoadData events; and at --tp 8, 4.00 GiB on every GPU: the contexts the
    // other processes got there when their runtime initialised, where the fake driver committed
    // a primary context on every device in slot 2 of the runtime's private table. A real runtime
    // holds none on a device it never made current: PyTorch's test_cuda_primary_ctx.py, and
    // frameworks.rs torch_holds_a_context_only_on_the_device_it_uses.)
    for f in findings.iter().filter(|f| f["kind"] == "untracked_growth") {
        let unnamed = f["detail"]["unexplained_bytes"].as_u64().unwrap_or(0);
        eprintln!("{tag}: explain: {:.1} MiB unnamed on GPU {}", unnamed as f64 / (1 << 20) as f64, f["device"]);
        assert!(
            unnamed <= (81920u64 << 20) / 100,
            "{tag}: {:.2} GiB left unnamed: {}",
            unnamed as f64 / GIB,
            f["text"]
        );
    }
    for (p, r) in reports_in(out) {
        assert_eq!(n(&r["health"]["lost_events"]), 0, "{tag}: {}: events lost: {}", p.display(), r["health"]);
    }
}

/// `--tp 1`: one scheduler on GPU 0.
#[test]
fn sglang_tp1_serves_under_culedger() {
    let Some(python) = sglang_python() else { return };
    let sim = machine("sglang_tp1");
    let model = write_model(sim.scratch());
    let (out, log) = start_both(&sim, &python, &model, &["--tp", "1"], "tp1");
    healthy_checks(&out, &log, 1, "tp1");
}

/// Starts the server under `culedger run` and lets it fail: SGLang's launcher SIGKILLs the
/// tree when a scheduler raises (`run_scheduler_process` -> SIGQUIT ->
/// `launch_phase_sigquit_handler` -> `kill_process_tree`). Returns (reports, server log).
fn start_failing(sim: &Sim, python: &Path, model: &Path, args: &[&str], tag: &str) -> (PathBuf, String) {
    let _one = ONE_SERVER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = sim.scratch().join(format!("{tag}-out"));
    let before = shm_entries();
    let mut run = Server::start(sim, python, model, args, Some(&out), tag);
    let status = run.wait_exit(READY_LIMIT, tag);
    let log = run.log();
    assert!(!log.contains(READY_LINE), "{tag}: the server started:\n{}", run.tail());
    assert!(log.contains("CUDA out of memory"), "{tag}: not SGLang's out-of-memory:\n{}", run.tail());
    // `culedger run` ends as its command did: killed by SIGKILL (SGLang's launcher kills itself).
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{tag}: `culedger run` ends as the killed launcher: {status}");
    drop(run);
    // The killed launch leaves nothing in /dev/shm (the Server's end removes what SGLang left).
    let left = sglang_shm_leftovers(&before);
    assert!(left.is_empty(), "{tag}: SGLang's shared memory left behind: {left:?}");
    (out, log)
}

/// The failing scheduler's report: its failed allocation (what torch says it tried) and the
/// pool SGLang logged before it.
fn failure_checks(out: &Path, log: &str, tag: &str) -> Value {
    let (_, kv_gib) = logged_kv(log);
    // torch's message: "Tried to allocate 931.00 MiB" (or "1.02 GiB").
    let tried = log
        .lines()
        .find_map(|l| l.split("Tried to allocate ").nth(1))
        .and_then(|r| {
            let mut w = r.split_whitespace();
            let v: f64 = w.next()?.parse().ok()?;
            Some(if w.next()?.starts_with("GiB") { v * 1024.0 } else { v })
        })
        .unwrap_or_else(|| panic!("{tag}: no 'Tried to allocate N MiB' in the log"));
    let failing: Vec<(u64, Value)> = reports_in(out)
        .into_iter()
        .flat_map(|(_, r)| {
            r["devices"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["failures"].as_array().is_some_and(|f| !f.is_empty()))
                .map(|d| (n(&d["index"]), r.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!failing.is_empty(), "{tag}: no report holds the failed allocation SGLang logged ({tried} MiB)");
    let (i, r) = &failing[0];
    let d = device(r, *i);
    let f = &d["failures"][0];
    let mib = n(&f["bytes"]) as f64 / (1 << 20) as f64;
    // torch prints two decimals of MiB or GiB; its allocator rounds requests up to 2 MiB.
    assert!(
        (mib - tried).abs() <= (tried * 0.005).max(2.0),
        "{tag}: GPU {i}: the failure is what torch tried ({tried} MiB): {f}"
    );
    let pool = n(&d["categories"]["kv_pool"]["live_bytes"]) as f64 / GIB;
    assert!(
        pool >= kv_gib - 0.01,
        "{tag}: GPU {i}: the report's kv_pool {pool:.2} GiB, SGLang logged K+V {kv_gib:.2} GB"
    );
    r.clone()
}

/// The `--mem-fraction-static` the failing `--tp 8` start uses on the simulated machine: 0.02
/// above a value that starts, so that the value explain recommends from its failure is shown
/// to start and 0.02 beyond it to fail, in two starts. Measured on the real server with the
/// tiny model: what follows the pool is 56 B a token (512 B of K and V a token per GPU) and
/// 0.12 GiB beside it. With each process's context on its own GPU only (as a real runtime
/// holds them), 0.91 gives a 70.29 GiB pool a GPU and its EagerRunner buffer (3.24 GiB) is
/// 896 MiB short; explain recommends 0.89, which starts with 68.75 GiB a GPU. (When the fake
/// driver gave every process a context on all eight GPUs, the pools were 63.7 and 62.3 GiB and
/// 0.91 was 0.7 GiB short.)
const TP8_FAILS_AT: f64 = 0.91;

/// Starts the server under `culedger run` to readiness and stops it with SIGTERM; returns (the
/// reports' directory, the server's log). When it does not get ready, the same launch runs
/// without culedger so that the panic says whether the fake driver (or SGLang) or culedger is
/// at fault.
fn start_under_culedger(sim: &Sim, python: &Path, model: &Path, args: &[&str], tag: &str) -> (PathBuf, String) {
    let _one = ONE_SERVER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = sim.scratch().join(format!("{tag}-out"));
    let mut run = Server::start(sim, python, model, args, Some(&out), tag);
    match run.ready(&format!("{tag} under culedger")) {
        Ok(t) => eprintln!("{tag}: ready under culedger in {:.0} s", t.as_secs_f64()),
        Err(why) => {
            drop(run);
            let mut bare = Server::start(sim, python, model, args, None, &format!("{tag}-bare"));
            let bare_says = match bare.ready(&format!("{tag} without culedger")) {
                Ok(t) => format!("without culedger the same launch was ready in {:.0} s: culedger is at fault", t.as_secs_f64()),
                Err(w) => format!("without culedger it fails too (the fake driver or SGLang): {w}"),
            };
            panic!("{why}\n{bare_says}");
        }
    }
    let (code, body) = run.get("/model_info");
    assert_eq!(code, 200, "{tag} under culedger: /model_info answered {code}: {body}");
    run.signal(libc::SIGTERM);
    let _ = run.wait_exit(Duration::from_secs(180), &format!("{tag} under culedger"));
    let log = run.log();
    (out, log)
}

/// `--tp 8` with SGLang's legacy custom all-reduce (IPC buffers between the eight GPUs), the
/// failure this project exists for, on the mechanism SGLang 0.5.23's own code has: after the
/// KV pool, SGLang allocates per token of the pool (the allocator's free list, 8 B:
/// `TokenToKVPoolAllocator.clear`; the EagerRunner's input buffers, 48 B:
/// `CudaGraphBufferRegistry.register_slot`), which a fraction that leaves too little after the
/// pool cannot hold (on this tiny model, 512 B of K and V a token per GPU, that is 11% of the
/// pool). (In 0.5.23 the custom all-reduce opens its peers before the memory baseline, so the
/// demo's "arrived after the sizing query" does not happen: docs/explain.md.)
/// 1. At [`TP8_FAILS_AT`] under culedger, all settings default: the scheduler raises and
///    SGLang's launcher SIGKILLs the tree within a second; the failed allocation and the pool
///    are on disk anyway ([21] part 1); explain names the failed call and says to lower
///    `--mem-fraction-static`, to a value at most 0.02 below (so 0.02 beyond it is the failed
///    start).
/// 2. The recommended value under culedger: ready, `/model_info`, a SIGTERM, the healthy checks
///    (kv_pool as logged, every site named, no failure, nothing above 1% of a GPU unnamed on
///    any of the eight), the custom all-reduce's buffers in `ipc` on every GPU, and `diff` of
///    the two launches shows the failed one's larger pool on every GPU, what grew after the
///    sizing query, and explain's value. Without culedger only when it does not start (the panic
///    says which side is at fault).
#[test]
fn sglang_tp8_custom_all_reduce_failure_then_the_recommended_value_starts() {
    let Some(python) = sglang_python() else { return };
    let sim = machine("sglang_tp8");
    let model = write_model(sim.scratch());
    let t0 = Instant::now();

    let fails = format!("{TP8_FAILS_AT:.2}");
    let (failed_out, failed_log) =
        start_failing(&sim, &python, &model, &["--tp", "8", "--mem-fraction-static", &fails], "tp8-oom");
    eprintln!("tp8-oom: failed and killed after {:.0} s", t0.elapsed().as_secs_f64());
    failure_checks(&failed_out, &failed_log, "tp8-oom");
    let (code, e) = culedger_scenarios::cli::explain(&failed_out);
    assert_eq!(code, 1, "explain exits 1 on a failure: {e}");
    let first = &e["findings"][0];
    assert_eq!(first["kind"], "failed_allocation", "{}", e["findings"]);
    // What failed is one of what SGLang allocates after the pool, per token.
    assert!(
        first["callers"].as_array().unwrap().iter().any(|c| c
            .as_str()
            .is_some_and(|c| c.contains("TokenToKVPoolAllocator.clear") || c.contains("register_slot"))),
        "explain names what failed: {first}"
    );
    let w = &e["what_to_change"];
    assert_eq!(w["flag"], "--mem-fraction-static", "{w}");
    assert_eq!(w["direction"], "lower", "{w}");
    assert_eq!(w["value"].as_f64(), Some(TP8_FAILS_AT), "the failed run's value: {w}");
    let value = w["recommended"].as_f64().unwrap_or_else(|| panic!("a recommended value: {w}"));
    eprintln!("tp8: explain recommends --mem-fraction-static {value}: {}", w["lines"]);
    assert!(
        value < TP8_FAILS_AT && value >= TP8_FAILS_AT - 0.02 - 1e-9,
        "the recommendation is at most 0.02 below the failed value (which is 0.02 above the highest that \
         starts): {w}"
    );

    let recommended = format!("{value:.2}");
    let t1 = Instant::now();
    let (out, log) =
        start_under_culedger(&sim, &python, &model, &["--tp", "8", "--mem-fraction-static", &recommended], "tp8");
    eprintln!("tp8: ready and stopped after {:.0} s", t1.elapsed().as_secs_f64());
    assert!(!log.contains("Setup Custom allreduce failed"), "tp8: the custom all-reduce did not start");
    healthy_checks(&out, &log, 8, "tp8");
    for (i, r) in scheduler_reports(&out) {
        let d = device(&r, i);
        assert!(
            n(&d["categories"]["ipc"]["peak_bytes"]) > 0,
            "tp8: GPU {i}: the custom all-reduce's buffers: {}",
            d["categories"]
        );
    }

    // diff of the failed and the started launch: its headline says the failed side ran out of
    // memory and gives explain's value; each GPU's table shows the pool as what the failed
    // launch had more of (the fraction it was given).
    let (code, text) = culedger_scenarios::cli::culedger(&[
        "diff",
        "--color",
        "never",
        failed_out.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    eprintln!("tp8: culedger diff (exit {code}):\n{text}");
    assert_eq!(code, 0, "culedger diff: {text}");
    let head: String = text.lines().take_while(|l| !l.starts_with("culedger diff:")).collect::<Vec<_>>().join(" ");
    assert!(head.starts_with("tp8-oom-out/ ran out of memory"), "diff names the failed launch: {head}");
    // ... and what grew after the sizing query compared with the launch that started.
    let grew = head.split("after the sizing query ").nth(1).and_then(|t| t.split(" grew compared with tp8-out/").next());
    assert!(
        grew.is_some_and(|g| !g.is_empty()) && head.contains(" grew compared with tp8-out/"),
        "diff names what grew after the sizing query: {head}"
    );
    // diff's value keeps the margin the started launch measured after its pool ([19] item 4),
    // not explain's fixed one: below the value that failed, not below the one that started.
    let at = head.split("to at most ").nth(1).and_then(|t| t.split(':').next()).and_then(|v| v.parse::<f64>().ok());
    let at = at.unwrap_or_else(|| panic!("diff gives a value: {head}"));
    assert!(at < TP8_FAILS_AT - 1e-9 && at >= value - 1e-9, "diff's value {at} between {recommended} and {fails}: {head}");
    assert!(head.contains("as the run that started measured it (tp8-out/"), "the margin's source: {head}");
    let pools: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() >= 8 && w[0] == "|" && w[1] == "kv_pool" && w[3] == "GiB" && w[5] == "GiB")
                .then(|| (w[2].parse().unwrap_or(0.0), w[4].parse().unwrap_or(0.0)))
        })
        .collect();
    // (alike GPUs are folded into the first one's table)
    assert!(!pools.is_empty(), "a kv_pool row in the diff:\n{text}");
    assert!(pools.iter().all(|(a, b)| a > b), "the failed launch's pool is the larger on every GPU: {pools:?}");
    eprintln!("tp8: whole test {:.0} s", t0.elapsed().as_secs_f64());
}
