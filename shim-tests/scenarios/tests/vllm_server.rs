//! The real vLLM server on the simulated machine: `vllm serve` (vllm 0.33.0 with the torch
//! 2.14.0+cu130, triton 3.8.0, NCCL 2.30.7 and cuBLAS it pins, from `scripts/fetch-vllm.sh`, a
//! venv of its own under target/vllm) unchanged, a tiny `LlamaForCausalLM` written by the test,
//! `--load-format dummy --skip-tokenizer-init`, offline, at `--tensor-parallel-size 2`, eager
//! and with torch.compile + CUDA graphs. Each start must answer `/v1/models` (a completion is not
//! asserted yet: see [`Server::serves`]); under `culedger run --` each GPU's kv_pool is what vLLM logs as "Available
//! KV cache memory" (read from its log), nothing above 1% of a GPU is left unnamed, no event is
//! lost, and a clean stop (SIGTERM with `--shutdown-timeout`) is no failure.
//!
//! One workaround, of the environment only: `VLLM_USE_FLASHINFER_SAMPLER=0`. FlashInfer's
//! top-k/top-p sampler is compiled with nvcc at run time, and there is no nvcc here (and no GPU
//! to compile for). Everything else runs as vLLM ships it (the V2 model runner, FlashAttention,
//! triton kernels, real NCCL, vLLM's custom all-reduce over cudaIpc).
//!
//! A start that fails under culedger is rerun without it, so that the failure says whether the
//! fake driver or culedger is at fault. Without network the tests skip with the fetch script's one line. The
//! servers run one at a time (a lock): every start imports vLLM and torch in four processes.

use culedger_scenarios::cli::{built, culedger};
use culedger_scenarios::reports::reports_in;
use culedger_scenarios::servers::{free_port, tiny_llama as write_model};
use culedger_scenarios::{repo_root, Sim};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_SERVER_AT_A_TIME: Mutex<()> = Mutex::new(());

/// How long a start may take to answer `/v1/models` (torch.compile of the model and the
/// capture of its graphs included): 241 s eager on an idle machine, 1168 s with graphs at a
/// load of 20 on 2 cores; a limit that only a hung start reaches.
const READY_LIMIT: Duration = Duration::from_secs(2700);
const GIB: f64 = (1u64 << 30) as f64;

/// `target/vllm/venv/bin/vllm`, or None (after one line saying why) when it could not be fetched.
fn vllm() -> Option<PathBuf> {
    let root = repo_root();
    let vllm = root.join("target/vllm/venv/bin/vllm");
    if vllm.is_file() && root.join("target/vllm/venv/.pins").is_file() {
        return Some(vllm);
    }
    if let Ok(reason) = std::fs::read_to_string(root.join("target/vllm/unavailable")) {
        eprintln!("skipped: real vLLM server test: {}", reason.trim());
        return None;
    }
    panic!("{} missing: run scripts/fetch-vllm.sh (make test runs it)", vllm.display())
}

/// The simulated machine: 2 GPUs of 80 GiB, a 13.2 driver, vLLM offline, its caches (compiled
/// graphs, triton kernels) in the test's scratch directory.
fn machine(test: &str) -> Sim {
    let mut sim = Sim::new(test);
    let cache = sim.scratch().join("cache");
    sim.env("FAKECUDA_DRIVER_VERSION", "13020")
        .env("FAKECUDA_DEVICES", "2")
        .env("FAKECUDA_TOTAL_MIB", "81920")
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("VLLM_NO_USAGE_STATS", "1")
        .env("DO_NOT_TRACK", "1")
        .env("VLLM_CACHE_ROOT", cache.join("vllm"))
        .env("TRITON_CACHE_DIR", cache.join("triton"))
        .env("XDG_CACHE_HOME", &cache)
        // FlashInfer's sampler is compiled with nvcc at run time: no nvcc here.
        .env("VLLM_USE_FLASHINFER_SAMPLER", "0");
    sim
}

/// One launch of the server: the process (its own process group), its log, its port.
struct Server {
    child: Child,
    log: PathBuf,
    port: u16,
    model: String,
    started: Instant,
}

impl Server {
    /// `vllm serve MODEL ARGS`, under `culedger run -o OUT --` when `out` is given.
    fn start(sim: &Sim, vllm: &Path, model: &Path, args: &[&str], out: Option<&Path>, tag: &str) -> Server {
        let port = free_port();
        let log = sim.scratch().join(format!("{tag}.log"));
        let mut cmd = match out {
            Some(dir) => {
                let mut c = Command::new(built("target/release/culedger"));
                c.arg("run").arg("--color").arg("never").arg("-o").arg(dir).arg("--").arg(vllm);
                c
            }
            None => Command::new(vllm),
        };
        cmd.arg("serve").arg(model);
        cmd.args(["--port", &port.to_string(), "--host", "127.0.0.1"]);
        cmd.args(["--load-format", "dummy", "--skip-tokenizer-init", "--max-model-len", "512"]);
        cmd.args(["--tensor-parallel-size", "2", "--shutdown-timeout", "60"]);
        cmd.args(args);
        sim.apply_env(&mut cmd);
        let file = std::fs::File::create(&log).unwrap();
        cmd.stdin(Stdio::null()).stdout(file.try_clone().unwrap()).stderr(file).process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("{tag}: cannot start: {e}"));
        Server { child, log, port, model: model.display().to_string(), started: Instant::now() }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(80)..].join("\n")
    }

    /// Waits until `/v1/models` answers 200: Ok(time to ready), or Err(the log's tail) when the
    /// server exits or the limit passes first.
    fn wait_ready(&mut self, tag: &str) -> Result<Duration, String> {
        loop {
            if self.try_request("GET", "/v1/models", None).is_some_and(|(code, _)| code == 200) {
                return Ok(self.started.elapsed());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{tag}: the server exited ({status}) before it was ready:\n{}", self.tail()));
            }
            if self.started.elapsed() > READY_LIMIT {
                return Err(format!("{tag}: not ready after {READY_LIMIT:?}:\n{}", self.tail()));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

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

    /// One HTTP/1.0 request: (status code, body), None when nothing answers.
    fn try_request(&self, method: &str, path: &str, body: Option<&str>) -> Option<(u32, String)> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
        let body = body.unwrap_or("");
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        Some((code, body))
    }

    /// `/v1/models` names the model.
    ///
    /// Not asserted yet: a completion. On the fake driver vLLM 0.33's default V2 model runner
    /// runs the request's steps (the engine core schedules it, both workers execute the model
    /// and return to their queues) but the API server never answers it (seen with and without
    /// `return_token_ids`, and without culedger): what the output path waits for is not found.
    fn serves(&self, tag: &str) {
        let (code, body) = self.try_request("GET", "/v1/models", None).expect("/v1/models");
        assert_eq!(code, 200, "{tag}: /v1/models answered {code}: {body}");
        assert!(body.contains(&self.model), "{tag}: /v1/models: {body}");
    }

    /// What a user's Ctrl-C or a service manager does: SIGTERM to the launch (`culedger run`
    /// forwards it to vLLM's API server, which stops its engine within `--shutdown-timeout`).
    fn stop(&mut self, tag: &str) -> std::process::ExitStatus {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.wait_exit(Duration::from_secs(180), tag)
    }
}

impl Drop for Server {
    /// Whatever happened, nothing of the launch outlives the test.
    fn drop(&mut self) {
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Every value of "Available KV cache memory: X GiB" vLLM logged, by tensor-parallel rank
/// (`(Worker_TP1 pid=...)` prefixes the workers' lines; format_gib: GiB, two decimals).
fn logged_kv_gib(log: &str) -> Vec<(u64, f64)> {
    let mut by_rank: Vec<(u64, f64)> = log
        .lines()
        .filter_map(|l| {
            let at = l.find("Available KV cache memory: ")? + "Available KV cache memory: ".len();
            let gib: f64 = l[at..].split_whitespace().next()?.parse().ok()?;
            let rank = l.find("Worker_TP").and_then(|p| {
                l[p + "Worker_TP".len()..].chars().take_while(|c| c.is_ascii_digit()).collect::<String>().parse().ok()
            });
            Some((rank.unwrap_or(0), gib))
        })
        .collect();
    by_rank.sort_by(|a, b| a.partial_cmp(b).unwrap());
    by_rank.dedup_by_key(|(r, _)| *r);
    by_rank
}

/// The sizing lines of vLLM's log a formula is checked against (free memory on startup,
/// desired utilization, consumed memory, the CUDA-graph pool), each once.
fn sizing_lines(log: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for l in log.lines() {
        if ["Free memory on device", "Available KV cache memory", "CUDA graph pool memory", "Model loading took"]
            .iter()
            .any(|k| l.contains(k))
            && !lines.iter().any(|x| x == l)
        {
            lines.push(l.to_string());
        }
    }
    lines
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The reports holding a KV pool (the workers), by GPU index: (index, report, device).
fn worker_devices(out: &Path) -> Vec<(u64, Value, Value)> {
    let mut by_gpu = Vec::new();
    for (_, r) in reports_in(out) {
        for d in r["devices"].as_array().unwrap() {
            // The peak: vLLM's stop releases the pool before the workers' last reports.
            if d["categories"]["kv_pool"]["peak_bytes"].as_u64().unwrap_or(0) > 0 {
                by_gpu.push((n(&d["index"]), r.clone(), d.clone()));
            }
        }
    }
    by_gpu.sort_by_key(|(i, _, _)| *i);
    by_gpu
}

/// Starts the server under culedger and waits for it to serve; when it does not, reruns it
/// without culedger to say whose fault it is, and fails with both logs' tails.
fn start_under_culedger(sim: &Sim, vllm: &Path, model: &Path, args: &[&str], tag: &str) -> (Server, PathBuf) {
    let out = sim.scratch().join(format!("{tag}-out"));
    let mut run = Server::start(sim, vllm, model, args, Some(&out), tag);
    match run.wait_ready(&format!("{tag} under culedger")) {
        Ok(t) => {
            eprintln!("{tag}: ready under culedger in {:.0} s", t.as_secs_f64());
            (run, out)
        }
        Err(why) => {
            drop(run);
            let mut bare = Server::start(sim, vllm, model, args, None, &format!("{tag}-bare"));
            let bare_says = match bare.wait_ready(&format!("{tag} without culedger")) {
                Ok(_) => "the same start WITHOUT culedger serves: culedger is at fault".to_string(),
                Err(e) => format!("it fails without culedger too (the fake driver or vLLM):\n{e}"),
            };
            panic!("{why}\n\n{bare_says}")
        }
    }
}

/// What every healthy start under culedger shares: each GPU's kv_pool is vLLM's logged
/// "Available KV cache memory" (to its two decimals), nothing above 1% of a GPU unnamed, no
/// failure after the stop, no lost events. Returns the logged KV cache (GiB).
fn healthy_checks(out: &Path, log: &str, tag: &str) -> f64 {
    // Logged once (`logger.info_once`), by rank 0; the executor sizes every worker's pool from
    // the smallest of the workers' figures (MultiprocExecutor.determine_available_memory).
    let logged = logged_kv_gib(log);
    assert_eq!(logged.iter().map(|(r, _)| *r).collect::<Vec<_>>(), vec![0], "{tag}: the log: {logged:?}");
    let gib = logged[0].1;
    let workers = worker_devices(out);
    assert_eq!(workers.iter().map(|(i, _, _)| *i).collect::<Vec<_>>(), vec![0, 1], "{tag}: one worker per GPU");
    for (i, r, d) in &workers {
        let pool = n(&d["categories"]["kv_pool"]["peak_bytes"]) as f64 / GIB;
        eprintln!("{tag}: GPU {i}: kv_pool {pool:.4} GiB, vLLM logged {gib:.2} GiB");
        assert!((pool - gib).abs() <= 0.005 + 1e-9, "{tag}: GPU {i}: kv_pool {pool:.4} GiB, vLLM logged {gib:.2} GiB");
        // Named: vLLM's own allocation of the KV cache tensors.
        let kv_sites: Vec<&Value> =
            d["sites"].as_array().unwrap().iter().filter(|s| s["category"] == "kv_pool").collect();
        assert!(
            kv_sites.iter().all(|s| s["caller"].as_str().is_some_and(|c| c.contains("allocate_kv_cache"))),
            "{tag}: GPU {i}: kv_pool sites: {kv_sites:?}"
        );
        let total = n(&d["total_bytes"]);
        let unnamed: u64 =
            d["sites"].as_array().unwrap().iter().filter(|s| !s["rule"].is_string()).map(|s| n(&s["peak_bytes"])).sum();
        assert!(
            unnamed * 100 <= total,
            "{tag}: GPU {i}: {unnamed} bytes at sites no rule names (pid {}): {}",
            r["process"]["pid"],
            d["sites"]
        );
        assert!(d["failures"].as_array().is_none_or(|f| f.is_empty()), "{tag}: GPU {i}: a failure");
    }
    let (code, e) = culedger_scenarios::cli::explain(out);
    let findings = e["findings"].as_array().unwrap();
    for f in findings {
        eprintln!("{tag}: explain: {} {}: {}", f["severity"], f["kind"], f["title"]);
    }
    for note in e["notes"].as_array().unwrap() {
        eprintln!("{tag}: explain note: {note}");
    }
    let failures: Vec<&Value> = findings.iter().filter(|f| f["severity"] == "failure").collect();
    assert!(failures.is_empty(), "{tag}: explain after a clean stop (exit {code}): {failures:?}");
    for f in findings.iter().filter(|f| f["kind"] == "untracked_growth") {
        let total = workers.first().map(|(_, _, d)| n(&d["total_bytes"])).unwrap();
        let unexplained = f["detail"]["unexplained_bytes"].as_i64().unwrap_or(0).max(0) as u64;
        eprintln!("{tag}: explain: GPU {}: rise {} bytes, {unexplained} not explained", f["device"], f["detail"]["rise_bytes"]);
        assert!(unexplained * 100 <= total, "{tag}: more than 1% of a GPU unnamed: {f}");
    }
    for (p, r) in reports_in(out) {
        assert_eq!(n(&r["health"]["lost_events"]), 0, "{tag}: {}: events lost: {}", p.display(), r["health"]);
    }
    gib
}

/// `culedger whatif --set gpu_memory_utilization=V --format json`: the pool per rank it gives.
fn whatif_pools(out: &Path, value: f64) -> (i32, String) {
    culedger(&[
        "whatif",
        out.to_str().unwrap(),
        "--set",
        &format!("gpu_memory_utilization={value}"),
        "--format",
        "json",
    ])
}

/// whatif at the recorded `--gpu-memory-utilization` reproduces the pool vLLM logged (its
/// formula, keyed on 0.33's Worker.determine_available_memory, from the run's queries): within
/// 1% on every rank.
fn whatif_reproduces(out: &Path, value: f64, logged_gib: f64, tag: &str) {
    let (code, w) = whatif_pools(out, value);
    assert_eq!(code, 0, "{tag}: whatif at the recorded {value}: {w}");
    let v: Value = serde_json::from_str(&w).unwrap_or_else(|e| panic!("{tag}: whatif: {e}: {w}"));
    let ranks = v["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2, "{tag}: whatif: {v:#}");
    for r in ranks {
        let pool = n(&r["pool_bytes"]) as f64 / GIB;
        eprintln!("{tag}: whatif at {value}: {}: pool {pool:.3} GiB, vLLM logged {logged_gib:.2} GiB", r["process"]);
        assert!(
            (pool - logged_gib).abs() <= logged_gib * 0.01,
            "{tag}: whatif {pool:.3} GiB vs {logged_gib:.2}: {v:#}"
        );
    }
}

/// explain `e` of a failed start at `given` says: lower vLLM's --gpu-memory-utilization, naming
/// vLLM's `function`; whatif on the failed run fits at the recommended value and not 0.02
/// beyond it. Returns the recommended value.
fn lower_utilization(e: &Value, out: &Path, given: f64, function: &str) -> f64 {
    let a = &e["what_to_change"];
    assert_eq!(a["engine"], "vLLM", "{a:#}");
    assert_eq!(a["flag"], "--gpu-memory-utilization", "{a:#}");
    assert_eq!(a["direction"], "lower", "{a:#}");
    assert!(e.to_string().contains(function), "explain does not name vLLM's {function}: {e:#}");
    let rec = a["recommended"].as_f64().unwrap();
    assert!(rec < given && rec > 0.5, "{a:#}");
    let (code, w) = whatif_pools(out, rec);
    assert_eq!(code, 0, "whatif at the recommended {rec:.2}: {w}");
    let (code, w) = whatif_pools(out, rec + 0.02);
    assert_eq!(code, 1, "whatif at {:.2}, 0.02 beyond the recommended value: {w}", rec + 0.02);
    rec
}

/// `--tensor-parallel-size 2 --enforce-eager` under culedger.
#[test]
fn vllm_tp2_eager_serves_under_culedger() {
    let Some(vllm) = vllm() else { return };
    let _one = ONE_SERVER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let sim = machine("vllm_tp2_eager");
    let model = write_model(sim.scratch());
    let args = ["--enforce-eager", "--gpu-memory-utilization", "0.8"];
    let (mut run, out) = start_under_culedger(&sim, &vllm, &model, &args, "eager");
    run.serves("eager under culedger");
    let status = run.stop("eager under culedger");
    eprintln!("eager: stopped under culedger: {status}");
    let log = run.log();
    drop(run);
    for l in sizing_lines(&log) {
        eprintln!("eager: vLLM: {l}");
    }
    let logged = healthy_checks(&out, &log, "eager");
    whatif_reproduces(&out, 0.8, logged, "eager");
}

/// `--tensor-parallel-size 2` with torch.compile and CUDA graphs (vLLM's defaults).
#[test]
fn vllm_tp2_graphs_serves_under_culedger() {
    let Some(vllm) = vllm() else { return };
    let _one = ONE_SERVER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let sim = machine("vllm_tp2_graphs");
    let model = write_model(sim.scratch());
    let args = ["--gpu-memory-utilization", "0.8"];
    let (mut run, out) = start_under_culedger(&sim, &vllm, &model, &args, "graphs");
    run.serves("graphs under culedger");
    let status = run.stop("graphs under culedger");
    eprintln!("graphs: stopped under culedger: {status}");
    let log = run.log();
    drop(run);
    for l in sizing_lines(&log) {
        eprintln!("graphs: vLLM: {l}");
    }
    assert!(log.contains("CUDA graph pool memory"), "graphs: vLLM captured no CUDA graphs");
    let logged = healthy_checks(&out, &log, "graphs");
    for (i, _, d) in worker_devices(&out) {
        assert!(n(&d["categories"]["graphs"]["peak_bytes"]) > 0, "graphs: GPU {i}: {}", d["categories"]);
        // profile_cudagraph_memory's throwaway graphs are destroyed before the KV cache is
        // sized (vllm 0.33 gpu_model_runner.py / cudagraph_utils.py): what they took comes
        // back, measured.
        let g = &d["graphs"];
        let (made, back) = (g["instantiate_bytes"].as_i64().unwrap(), g["exec_destroy_bytes"].as_i64().unwrap_or(0));
        eprintln!("graphs: GPU {i}: {} instantiations ({made} bytes), {} destroyed ({back} bytes)", g["instantiations"], g["exec_destroys"]);
        assert!(g["exec_destroys"].as_u64() > Some(0) && back < 0 && made > 0, "graphs: GPU {i}: {g}");
    }
    whatif_reproduces(&out, 0.8, logged, "graphs");
    // vLLM 0.33 estimated its graphs before sizing (profile_cudagraph_memory): a rise of
    // untracked memory after its sizing query is set against that estimate, not called unseen.
    let (_, e) = culedger_scenarios::cli::explain(&out);
    for f in e["findings"].as_array().unwrap().iter().filter(|f| f["kind"] == "untracked_growth") {
        if f["detail"]["sized_before"].as_array().is_some_and(|s| !s.is_empty()) {
            assert!(f["detail"]["estimated_before"].as_array().is_some_and(|s| !s.is_empty()), "graphs: {f:#}");
            assert!(!f["text"].as_str().unwrap().contains("could not see"), "graphs: {f:#}");
        }
    }
}

/// A failure of vLLM's own: `--gpu-memory-utilization 0.995` asks for more than the GPU has free
/// when the worker takes its initial snapshot (its context, NCCL and the custom all-reduce are
/// there already), and `request_memory`
/// (vllm/v1/worker/utils.py, 0.33.0, called from Worker.init_device) refuses: "Free memory on
/// device ... on startup is less than desired GPU memory utilization". explain names it and
/// recommends a value; that value, applied to the real server, starts, and whatif agrees.
#[test]
// 0.995: refused whatever else is on GPU 0 (the worker's own context, 512 MiB, is more than
// the 0.5% it leaves). Whole on 2026-12-04 with each process's context on its own GPU only
// (the fake driver gave the API server process and the other rank one on every GPU before):
// 1.12 GiB used at the worker's snapshot, explain's bound 0.986, recommended 0.98; whatif: 0.98
// starts, 1.00 does not; 0.98 applied: ready in 304 s, kv_pool 77.4961 GiB per GPU where vLLM
// logged 77.50; 795 s in all.
// Earlier at 0.99 (892 s at a load of about 12 on 2 cores): refused at 0.99; explain
// recommends 0.97 (needed 93839c3: both workers end by SIGTERM, MultiprocExecutor's shutdown
// after the refusal, and `vllm serve` exits 1, which explain had taken for a user's stop);
// whatif: 0.97 starts, 0.99 does not; 0.97 applied: ready in 211 s, kv_pool 76.6953 GiB per
// GPU where vLLM logged 76.70.
fn vllm_tp2_refused_utilization_then_the_recommended_value_starts() {
    let Some(vllm) = vllm() else { return };
    let _one = ONE_SERVER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let sim = machine("vllm_tp2_refused");
    let model = write_model(sim.scratch());
    let out = sim.scratch().join("refused-out");
    let mut run = Server::start(
        &sim,
        &vllm,
        &model,
        &["--enforce-eager", "--gpu-memory-utilization", "0.995"],
        Some(&out),
        "refused",
    );
    let why = run.wait_ready("refused at 0.995").expect_err("0.995 must not start");
    let status = run.wait_exit(Duration::from_secs(180), "refused at 0.995");
    let log = run.log();
    drop(run);
    assert!(!status.success(), "0.995: {status}");
    assert!(
        log.contains("is less than desired GPU memory utilization"),
        "0.995 failed otherwise than by vLLM's refusal: {why}"
    );
    let (code, e) = culedger_scenarios::cli::explain(&out);
    assert_eq!(code, 1, "explain of the refused start: {e:#}");
    eprintln!("refused: what to change: {:#}", e["what_to_change"]);
    let rec = lower_utilization(&e, &out, 0.995, "Worker.init_device");

    // Applied: the recommended value starts.
    let value = format!("{rec:.2}");
    let (mut run, out) = start_under_culedger(
        &sim,
        &vllm,
        &model,
        &["--enforce-eager", "--gpu-memory-utilization", &value],
        "recommended",
    );
    run.serves("the recommended value");
    run.stop("the recommended value");
    let log = run.log();
    drop(run);
    healthy_checks(&out, &log, "recommended");
}

/// vllm-project/vllm#7553's shape on vLLM 0.33: CUDA graphs captured after the KV cache, outside
/// the budget. With `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0` (vllm/envs.py; the switch vLLM's
/// own warning names) Worker.determine_available_memory (vllm/v1/worker/gpu_worker.py, 0.33.0)
/// still measures the graphs (profile_cudagraph_memory, vllm/v1/worker/gpu/cudagraph_utils.py,
/// before the KV cache) but does not subtract the estimate, so `requested_memory -
/// non_kv_cache_memory` all goes to the KV cache; Worker._compile_or_warm_up_model then captures
/// the graphs (GPUModelRunner.capture_model -> CudaGraphManager.capture) in what is left. At 0.97
/// (init_device's `request_memory` check passes: 0.995 is refused) the capture runs out of
/// memory on both ranks ("CUDA out of memory. Tried to allocate 20.00 MiB", from the warm-up
/// forward of a size before its capture), the executor reports the worker's error and the
/// engine core's start fails. explain names the capture after the KV cache and recommends a
/// value; that value, applied to the real server (the same launch otherwise, the estimate still
/// off), starts, and whatif agrees with the failed run at both the value and 0.02 beyond it.
///
/// Ignored in `make test` for its cost: 746 s here on 2 shared cores (the failed start 375 s,
/// the recommended one 336 s), two starts with torch.compile and graph capture. Run it with
/// `cargo test --release --workspace --test vllm_server -- --ignored`.
///
/// At 0.95 (the recommended value + 0.02, a run of its own on 2026-12-04, 718 s at a load of
/// two servers): the capture fails too (KV cache 75.03 GiB; "Tried to allocate 14.00 MiB"), and
/// explain recommends 0.93 again (bound 0.9388).
///
/// Seen on 2026-12-04 (twice, the same figures): vLLM logged "Available KV cache memory: 76.63
/// GiB" at 0.97 (kv_pool 76.635 GiB in the reports); the capture failed with 0.94 GiB free at
/// its start. explain: recommended 0.93 (bound 0.9388), margin 2.49 GiB of a CUDA-graph
/// estimate of 3.57 GiB; whatif: 0.93 fits, 0.95 does not. 0.93 applied: ready in 336 s,
/// "Available KV cache memory: 73.44 GiB" = kv_pool 73.4414 GiB per GPU, whatif at 0.93 73.421
/// GiB; vLLM logged "CUDA graph pool memory: 3.24 GiB (actual), 2.77 GiB (estimated)". After
/// the failure rank 1 also fails a cudaIpcOpenMemHandle in register_graph_buffers
/// (CustomAllreduce.capture's `finally`, custom_all_reduce.py; "Failed: Cuda error
/// custom_all_reduce.cuh:143 'invalid resource handle'", which exits the worker): later than
/// its capture's failure, and not the cause.
#[test]
#[ignore = "746 s here: two real vLLM starts with torch.compile and CUDA-graph capture; run with --ignored"]
fn vllm_tp2_graph_capture_after_the_kv_cache_fails_then_the_recommended_value_starts() {
    let Some(vllm) = vllm() else { return };
    let _one = ONE_SERVER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut sim = machine("vllm_tp2_capture");
    sim.env("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "0");
    let model = write_model(sim.scratch());
    let high = "0.97";
    let out = sim.scratch().join("capture-out");
    let started = Instant::now();
    let mut run = Server::start(&sim, &vllm, &model, &["--gpu-memory-utilization", high], Some(&out), "capture");
    let why = run.wait_ready(&format!("graphs at {high}")).expect_err("the capture must not fit");
    let status = run.wait_exit(Duration::from_secs(180), &format!("graphs at {high}"));
    let log = run.log();
    drop(run);
    eprintln!("capture: failed at {high} in {:.0} s: {status}", started.elapsed().as_secs_f64());
    for l in sizing_lines(&log) {
        eprintln!("capture: vLLM: {l}");
    }
    for l in log.lines().filter(|l| l.contains("rror") || l.contains("CUDA graph memory profiling")) {
        eprintln!("capture: log: {l}");
    }
    assert!(!status.success(), "{high}: {status}");
    // The KV cache was sized and allocated first; then torch ran out of memory. Where: the
    // reports' call sites (explain's "capture after its KV cache" below), as the log's traceback
    // (Worker._compile_or_warm_up_model -> GPUModelRunner.capture_model) is not always written:
    // at 0.95 both workers exit in CustomAllreduce.capture's `finally` first (a
    // cudaIpcOpenMemHandle out of memory in register_graph_buffers, custom_all_reduce.cuh's
    // CUDACHECK calls exit), and the engine core logs only "cancelled".
    let kv_at = log.find("Available KV cache memory").unwrap_or_else(|| panic!("{high}: no KV cache sized: {why}"));
    let oom_at = log.find("CUDA out of memory").unwrap_or_else(|| panic!("{high}: no out of memory: {why}"));
    assert!(kv_at < oom_at, "{high}: out of memory before the KV cache was sized: {why}");
    assert!(log.contains("CUDA graph memory profiling is disabled"), "{high}: the estimate was applied");

    let (code, e) = culedger_scenarios::cli::explain(&out);
    for f in e["findings"].as_array().unwrap() {
        eprintln!("capture: explain: {} {}: {}", f["severity"], f["kind"], f["title"]);
    }
    let a = &e["what_to_change"];
    eprintln!("capture: what to change: {a:#}");
    assert_eq!(code, 1, "explain of the failed start: {e:#}");
    let failed: Vec<&Value> =
        e["findings"].as_array().unwrap().iter().filter(|f| f["kind"] == "failed_allocation").collect();
    // Each rank's first failure is its capture after its KV cache. What may follow it is vLLM's
    // unwinding: CustomAllreduce.capture's `finally` (custom_all_reduce.py) exchanges the graph
    // buffers each rank recorded before its failure, and a rank that opens the other's handles
    // can fail there (cudaIpcOpenMemHandle); those come later and are not the cause.
    let capture: Vec<&Value> = failed
        .iter()
        .copied()
        .filter(|f| f["detail"]["after_pool"] == "its CUDA graph capture after its KV cache")
        .collect();
    let mut gpus: Vec<u64> = capture.iter().map(|f| n(&f["device"])).collect();
    gpus.sort_unstable();
    gpus.dedup();
    assert_eq!(gpus, vec![0, 1], "each rank's capture after its KV cache: {failed:#?}");
    for f in &failed {
        let first = capture.iter().filter(|c| c["detail"]["pid"] == f["detail"]["pid"]).map(|c| n(&c["detail"]["at_us"])).min();
        assert!(first.is_some_and(|t| t <= n(&f["detail"]["at_us"])), "a failure before the capture's: {f:#}");
    }
    let rec = lower_utilization(&e, &out, 0.97, "capture_model");

    // Applied: the recommended value starts (the same launch otherwise, the estimate still off).
    let value = format!("{rec:.2}");
    let (mut run, out) = start_under_culedger(&sim, &vllm, &model, &["--gpu-memory-utilization", &value], "capture-recommended");
    run.serves("the recommended value");
    run.stop("the recommended value");
    let log = run.log();
    drop(run);
    for l in sizing_lines(&log) {
        eprintln!("capture-recommended: vLLM: {l}");
    }
    let logged = healthy_checks(&out, &log, "capture-recommended");
    whatif_reproduces(&out, rec, logged, "capture-recommended");
    eprintln!("capture: {:.0} s in all", started.elapsed().as_secs_f64());
}
