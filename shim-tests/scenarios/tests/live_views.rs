//! The live views against a server that runs: the SGLang-like sim (shim-tests/py/engines,
//! `--serve-until FILE` keeps its ranks up) under culedger on 2 simulated GPUs, its reports
//! rewritten every 200 ms.
//!
//! - `metrics`: a real Prometheus server (Debian's package, fetched into target/test-deps by
//!   `make test-deps`) scrapes `culedger metrics --listen` on loopback; its HTTP API must give
//!   the KV pool's bytes per GPU that `culedger report` gives, and `up` must be 1.
//! - `top`: in a real terminal (tmux): an empty directory, a half-written report, the server
//!   starting, the keys, a rank killed by SIGKILL, a program that execs, then `q`.
//!
//! A tool that cannot be found (the fetch failed: no network, empty package lists) skips its
//! test with one line on stderr. Needs `make sim` and the release binaries.

use culedger_scenarios::cli::built;
use culedger_scenarios::{repo_root, Sim};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn cli() -> PathBuf {
    built("target/release/culedger")
}

/// A test tool: on PATH, else under target/test-deps/NAME (with its libraries).
fn tool(name: &str, bin: &str) -> Option<(PathBuf, Option<PathBuf>)> {
    let deps = repo_root().join("target/test-deps").join(name);
    if deps.join(bin).is_file() {
        let arch = std::env::consts::ARCH;
        return Some((deps.join(bin), Some(deps.join(format!("usr/lib/{arch}-linux-gnu")))));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()).map(|p| (p, None))
}

fn skip(what: &str) {
    eprintln!("SKIP: {what} (run `make test-deps`; it fetches it into target/test-deps)");
}

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET path` on 127.0.0.1:port; the body, when the status is 200.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
}

/// A query string's value, percent-encoded.
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Waits for `what` to hold, polling; panics with `describe` after `limit`.
fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>, describe: impl Fn() -> String) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}\n{}", describe());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Kills a child we started and reaps it.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The simulated server on 2 GPUs of 8 GiB, its reports in `out`, staying up until `stop`
/// exists; its output goes to `scratch/server.log`.
fn server(sim: &mut Sim, out: &Path, stop: &Path) -> Guard {
    let log = std::fs::File::create(sim.scratch().join("server.log")).unwrap();
    sim.env("LD_PRELOAD", built("target/release/libculedger.so"))
        .env("CULEDGER_OUT", out)
        .env("CULEDGER_FLUSH_MS", "200")
        // One run id, as `culedger run` gives (without it, `report` groups processes by their
        // reports' times, and a launcher idle since its last write can fall out of the run).
        .env("CULEDGER_RUN_ID", format!("live-{}", std::process::id()))
        .env("FAKECUDA_DEVICES", "2")
        .env("FAKECUDA_TOTAL_MIB", "8192")
        .env("SIM_DIST_TIMEOUT_S", "60");
    let mut cmd = sim.python("engines/sglang_server.py");
    cmd.args(["--tp", "2", "--model-mib", "2048", "--mem-fraction-static", "0.8", "--allreduce", "nccl"])
        .arg("--serve-until")
        .arg(stop)
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    Guard(Some(cmd.spawn().expect("start the simulated server")))
}

/// Waits until both ranks said they are ready (their pools allocated, their reports
/// rewritten since: the flush period is 200 ms), then returns the KV pools the report gives.
fn ready_pools(sim: &Sim, out: &Path) -> Vec<(i64, i64)> {
    let log = || std::fs::read_to_string(sim.scratch().join("server.log")).unwrap_or_default();
    wait_for(
        Duration::from_secs(120),
        "both ranks ready",
        || (log().matches("] ready:").count() == 2).then_some(()),
        log,
    );
    std::thread::sleep(Duration::from_millis(1000));
    wait_for(Duration::from_secs(20), "both ranks' KV pools", || kv_pools(out), || format!("{:?}", report_json(out)))
}

/// `culedger report --format json` of `dir`.
fn report_json(dir: &Path) -> Value {
    let o = Command::new(cli()).args(["report", "--format", "json"]).arg(dir).output().unwrap();
    serde_json::from_slice(&o.stdout).unwrap_or_else(|_| String::from_utf8_lossy(&o.stderr).into())
}

/// KV pool live bytes per device index, from the report, once both ranks have their pool.
fn kv_pools(dir: &Path) -> Option<Vec<(i64, i64)>> {
    let r = report_json(dir);
    let devs = r["devices"].as_array()?;
    let mut out = Vec::new();
    for d in devs {
        let kv = d["categories"].as_array()?.iter().find(|c| c["name"] == "kv_pool")?["live_bytes"].as_i64()?;
        out.push((d["index"].as_i64()?, kv));
    }
    (out.len() == 2 && out.iter().all(|(_, kv)| *kv > 0)).then_some(out)
}

#[test]
fn prometheus_scrapes_the_kv_pool_of_a_running_server() {
    let Some((prometheus, _)) = tool("prometheus", "usr/bin/prometheus") else {
        return skip("no prometheus server");
    };
    let mut sim = Sim::new("live_prometheus");
    let (out, stop) = (sim.scratch().join("out"), sim.scratch().join("stop"));
    std::fs::create_dir_all(&out).unwrap();
    let srv = server(&mut sim, &out, &stop);
    let pools = ready_pools(&sim, &out);

    let port = free_port();
    let metrics = Guard(Some(
        Command::new(cli())
            .args(["metrics", "--listen", &format!("127.0.0.1:{port}")])
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    let page =
        wait_for(Duration::from_secs(20), "culedger metrics --listen", || http_get(port, "/metrics"), String::new);
    assert!(page.contains("# TYPE culedger_category_live_bytes gauge"), "{page}");

    // A second target: processes that share a pid (containers' pid 1, on one host and on two),
    // each ended with a status, the layout where per-process labels once gave duplicate series.
    let pids = sim.scratch().join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    for (k, (pid, host)) in [(1, "node-a"), (1, "node-a"), (1, "node-b"), (7, "node-b")].into_iter().enumerate() {
        let name = ["culedger-5101.json", "culedger-5102.json"][k % 2];
        let fixture = repo_root().join("cli/tests/fixtures/custom-ar").join(name);
        let mut v: Value = serde_json::from_slice(&std::fs::read(fixture).unwrap()).unwrap();
        v["process"]["pid"] = pid.into();
        v["process"]["ppid"] = 0.into();
        v["process"]["host"] = host.into();
        v["process"]["start_unix_us"] = (v["process"]["start_unix_us"].as_i64().unwrap() + k as i64 * 1000).into();
        std::fs::write(pids.join(format!("culedger-{host}-{pid}-{k}.json")), serde_json::to_vec(&v).unwrap()).unwrap();
    }
    let exposition = Command::new(cli()).arg("metrics").arg(&pids).output().unwrap();
    assert!(exposition.status.success());
    let exposition = String::from_utf8(exposition.stdout).unwrap();
    let sample_lines = exposition.lines().filter(|l| !l.starts_with('#')).count();
    let pids_port = free_port();
    let _pids_metrics = Guard(Some(
        Command::new(cli())
            .args(["metrics", "--listen", &format!("127.0.0.1:{pids_port}")])
            .arg(&pids)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));

    let prom_port = free_port();
    let config = sim.scratch().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: culedger\n    \
             static_configs:\n      - targets: ['127.0.0.1:{port}']\n  - job_name: pids\n    \
             static_configs:\n      - targets: ['127.0.0.1:{pids_port}']\n  - job_name: prometheus\n    \
             static_configs:\n      - targets: ['127.0.0.1:{prom_port}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(sim.scratch().join("prometheus.log")).unwrap();
    let _prom = Guard(Some(
        Command::new(&prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", sim.scratch().join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .current_dir(sim.scratch())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    ));
    let prom_log = || std::fs::read_to_string(sim.scratch().join("prometheus.log")).unwrap_or_default();
    let query = |q: &str| -> Option<Vec<Value>> {
        let body = http_get(prom_port, &format!("/api/v1/query?query={q}"))?;
        let v: Value = serde_json::from_str(&body).ok()?;
        let result = v["data"]["result"].as_array()?.clone();
        (!result.is_empty()).then_some(result)
    };
    let up = wait_for(
        Duration::from_secs(60),
        "Prometheus' first scrape",
        || query("up%7Bjob%3D%22culedger%22%7D"),
        prom_log,
    );
    assert_eq!(up[0]["value"][1], "1", "the scrape failed: {up:?}");
    let kv = wait_for(
        Duration::from_secs(60),
        "the KV pool in Prometheus",
        || {
            query("culedger_category_live_bytes%7Bcategory%3D%22kv_pool%22%2Cjob%3D%22culedger%22%7D")
                .filter(|r| r.len() == 2)
        },
        prom_log,
    );
    let mut seen: Vec<(i64, i64)> = kv
        .iter()
        .map(|s| {
            let dev: i64 = s["metric"]["device"].as_str().unwrap().parse().unwrap();
            let bytes: f64 = s["value"][1].as_str().unwrap().parse().unwrap();
            (dev, bytes as i64)
        })
        .collect();
    seen.sort();
    assert_eq!(seen, pools, "Prometheus' KV pool bytes per GPU against culedger report's");
    // The server held its pools the whole time: what the report says now is the same.
    assert_eq!(kv_pools(&out), Some(pools.clone()));
    let host = kv[0]["metric"]["host"].as_str().unwrap_or_default().to_string();
    assert!(!host.is_empty(), "{kv:?}");
    // Every query of the Grafana dashboard (docs/grafana-culedger.json) is valid PromQL and
    // finds series (its variables set to every host and device).
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_root().join("docs/grafana-culedger.json")).unwrap())
            .unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap().replace("$host", ".*").replace("$device", ".*");
            let found = wait_for(Duration::from_secs(30), &expr, || query(&url_encode(&expr)), prom_log);
            assert!(!found.is_empty(), "{expr}");
        }
    }

    // The processes that share a pid: every sample of the exposition stored as its own series
    // (a duplicate would be dropped and counted by Prometheus), the info series joins, and
    // each process's exit status is there.
    let stored = wait_for(
        Duration::from_secs(30),
        "the pids target's series",
        || query(&url_encode("count({job=\"pids\", __name__=~\"culedger_.*\"})")),
        prom_log,
    );
    assert_eq!(stored[0]["value"][1], sample_lines.to_string().as_str(), "series stored against samples exposed");
    let dup = wait_for(
        Duration::from_secs(30),
        "Prometheus' own duplicate-sample counter",
        || query("prometheus_target_scrapes_sample_duplicate_timestamp_total"),
        prom_log,
    );
    assert_eq!(dup[0]["value"][1], "0", "Prometheus dropped duplicate samples: {dup:?}");
    // A process's device memory is keyed by its rank and comm, not its pid (a restart keeps
    // its series): the info series joins on those.
    let joined = wait_for(
        Duration::from_secs(30),
        "the info join",
        || {
            query(&url_encode(
                "culedger_process_live_bytes{job=\"pids\"} * on(host, rank, comm) group_left(title) \
                 culedger_process_info{job=\"pids\"}",
            ))
        },
        prom_log,
    );
    let live = query(&url_encode("culedger_process_live_bytes{job=\"pids\"}")).unwrap();
    assert_eq!(joined.len(), live.len(), "{joined:?}");
    assert!(live.iter().all(|s| s["metric"].get("pid").is_none() && s["metric"].get("start_ms").is_none()), "{live:?}");
    assert!(
        joined.iter().all(|s| s["metric"]["title"].as_str().unwrap().starts_with("sglang::scheduler_TP")),
        "{joined:?}"
    );
    // docs/metrics.md's query: each rank's memory named by the title of the process running it
    // now (the running server's processes).
    let docs_query = "culedger_process_live_bytes{job=\"culedger\"} * on(host, rank, comm) group_left(title) \
                      (culedger_process_info{job=\"culedger\"} and on(host, pid, start_ms) culedger_process_running == 1)";
    let named = wait_for(Duration::from_secs(30), "docs/metrics.md's title join", || query(&url_encode(docs_query)), prom_log);
    let live = query(&url_encode("culedger_process_live_bytes{job=\"culedger\"}")).unwrap();
    assert_eq!(named.len(), live.len(), "{named:?}");
    assert!(named.iter().all(|s| s["metric"]["title"].as_str().is_some_and(|t| !t.is_empty())), "{named:?}");
    let exits = query(&url_encode("culedger_process_exit_status{job=\"pids\"}")).unwrap();
    assert_eq!(exits.len(), 4, "{exits:?}");
    assert!(exits.iter().all(|s| s["value"][1] == "1"), "every rank exited with status 1: {exits:?}");

    std::fs::write(&stop, "").unwrap();
    let mut srv = srv;
    let status = srv.0.take().unwrap().wait().unwrap();
    assert!(status.success(), "the simulated server: {status:?}");
    drop(metrics);
}

/// tmux on a private socket, its panes 120x60.
struct Tmux {
    bin: PathBuf,
    lib: Option<PathBuf>,
    socket: PathBuf,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.bin);
        if let Some(lib) = &self.lib {
            c.env("LD_LIBRARY_PATH", lib);
        }
        c.arg("-S").arg(&self.socket).arg("-f").arg("/dev/null");
        c
    }

    fn run(&self, args: &[&str]) -> String {
        let o = self.cmd().args(args).output().expect("run tmux");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// Waits until the screen shows `text` (and `pred` holds on it).
    fn wait(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        wait_for(Duration::from_secs(60), what, || Some(self.screen()).filter(|s| pred(s)), || self.screen())
    }

    fn alive(&self) -> bool {
        self.run(&["list-panes", "-t", "top", "-F", "#{pane_dead}"]).trim() == "0"
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().args(["kill-server"]).output();
    }
}

#[test]
fn top_follows_a_server_in_a_real_terminal() {
    let Some((bin, lib)) = tool("tmux", "usr/bin/tmux") else {
        return skip("no tmux");
    };
    let mut sim = Sim::new("live_top");
    let (out, stop) = (sim.scratch().join("out"), sim.scratch().join("stop"));
    std::fs::create_dir_all(&out).unwrap();
    let tmux = Tmux { bin, lib, socket: sim.scratch().join("tmux.sock") };
    // top's exit status from the shell that runs it: tmux 3.3a can leave the pane's process a
    // zombie for seconds after its terminal closed (seen under load), so that
    // `pane_dead_status` stays empty.
    let status_file = sim.scratch().join("top.status");
    let top = format!("{} top {}; echo $? > {}", cli().display(), out.display(), status_file.display());
    // remain-on-exit: a crash leaves the pane (dead) for the assertions to see.
    tmux.run(&["new-session", "-d", "-s", "top", "-x", "120", "-y", "60", "-e", "TERM=xterm-256color", &top]);
    tmux.run(&["set-option", "-t", "top", "remain-on-exit", "on"]);
    tmux.wait("the waiting screen", |s| s.contains("waiting for reports"));

    // A report file half written (a writer that does not rename, or a copy in progress).
    let half = out.join("culedger-half-1-2.json");
    std::fs::write(&half, "{\"schema\": \"culedger/1\", \"process\": {\"pid\": 1").unwrap();
    tmux.wait("the unreadable file counted", |s| s.contains("1 report file unreadable"));
    assert!(tmux.alive());

    let mut srv = server(&mut sim, &out, &stop);
    let s = tmux.wait("both ranks", |s| s.contains("sglang::scheduler_TP0") && s.contains("GPU 1"));
    assert!(s.contains("▶"), "{s}");
    tmux.wait("the KV pools", |s| s.contains("kv_pool"));
    // Tab selects GPU 1: its block's title.
    tmux.keys(&["Tab"]);
    tmux.wait("GPU 1 selected", |s| s.lines().any(|l| l.contains("┌") && l.contains("GPU 1")));
    tmux.keys(&["f"]);
    tmux.keys(&["f"]);
    std::fs::remove_file(&half).unwrap();
    tmux.wait("the unreadable file gone", |s| !s.contains("unreadable"));

    // SIGKILL a rank: no final report; top goes on and says so.
    let reports = report_json(&out);
    let rank = reports["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == "sglang::scheduler_TP1")
        .and_then(|p| p["pid"].as_i64())
        .expect("rank 1's report");
    // SAFETY: kill(2) on a pid of the server this test started.
    unsafe { libc::kill(rank as i32, libc::SIGKILL) };
    tmux.wait("the killed rank", |s| s.contains("no final report (killed?)"));
    assert!(tmux.alive(), "top ended: {}", tmux.screen());

    // The server stops (its memory freed); a program that execs: the old image's report ends
    // with `exec`, the new one's follows.
    std::fs::write(&stop, "").unwrap();
    let _ = srv.0.take().unwrap().wait();
    let mut cmd = sim.cmd("rt_life");
    cmd.args(["exec", "execv", "child"]);
    let run = sim.run(&mut cmd);
    assert!(run.success(), "{}", run.describe());
    // It ran on GPU 0: Tab wraps around to it.
    tmux.keys(&["Tab"]);
    tmux.wait("GPU 0 selected", |s| s.lines().any(|l| l.contains("┌") && l.contains("GPU 0")));
    tmux.wait("the exec'd program", |s| s.contains("exec'd another program"));
    assert!(tmux.alive(), "top ended: {}", tmux.screen());
    tmux.keys(&["q"]);
    let status = wait_for(
        Duration::from_secs(10),
        "top to quit on q",
        || std::fs::read_to_string(&status_file).ok().filter(|s| s.ends_with('\n')),
        || tmux.screen(),
    );
    assert_eq!(status.trim(), "0", "top's exit status");
}

/// Processes whose command line holds `needle` (read from /proc).
fn pids_running(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) && cmd.contains(" top ") {
            out.push(pid);
        }
    }
    out
}

/// The terminal going away (its window closed, tmux's server killed) ends `top`: it neither
/// stays behind spinning on a terminal that reads end of file nor needs SIGKILL.
#[test]
fn top_ends_when_its_terminal_goes_away() {
    let Some((bin, lib)) = tool("tmux", "usr/bin/tmux") else {
        return skip("no tmux");
    };
    let sim = Sim::new("live_top_hangup");
    let out = sim.scratch().join("out-hangup");
    std::fs::create_dir_all(&out).unwrap();
    let tmux = Tmux { bin, lib, socket: sim.scratch().join("tmux.sock") };
    let top = format!("{} top {}", cli().display(), out.display());
    tmux.run(&["new-session", "-d", "-s", "top", "-x", "120", "-y", "40", "-e", "TERM=xterm-256color", &top]);
    tmux.wait("the waiting screen", |s| s.contains("waiting for reports"));
    let needle = out.to_str().unwrap().to_string();
    let pids = pids_running(&needle);
    assert!(!pids.is_empty(), "top is running");
    // A key on its way when the terminal goes: crossterm's reader must not be left spinning.
    tmux.keys(&["Tab"]);
    tmux.run(&["kill-server"]);
    wait_for(
        Duration::from_secs(20),
        "top to end after its terminal went away",
        || pids_running(&needle).is_empty().then_some(()),
        || format!("still running: {:?}", pids_running(&needle)),
    );
}
