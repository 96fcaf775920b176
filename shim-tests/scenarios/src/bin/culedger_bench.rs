//! `make bench`: what culedger adds to the calls it hooks, measured on the minimal-cost driver
//! (`target/sim/min/libcuda.so.1`, shim-tests/mincuda) so that only culedger's cost shows.
//!
//! Every figure is measured in one invocation as a difference against the same program without
//! the preload: each round runs the workload once plain and once with `LD_PRELOAD=libculedger.so`
//! (alternating which goes first), each run times one warm-up batch and then many batches; the
//! figure is the median over all batches of a side, the spread the range of the per-round
//! differences. The workloads are `target/sim/bin/bench_rt` (dynamic runtime, linked against
//! `libcudart.so.12`) and this binary's `worker` mode (the runtime embedded as an rlib, like
//! NCCL's static cudart).
//!
//! Also: `bench_rt drv_*` reach the driver through `cuGetProcAddress` only (as NCCL and
//! nvcc-built code do): 2 MiB pairs from one call site with and without a site, on growing and
//! on reused addresses (`MINCUDA_REUSE=1`), the free-memory query and the copy; and, when
//! `make frameworks` has installed it, two real-torch step loops on the simulated driver (one
//! served by the caching allocator, one missing it every step).
//!
//! ```text
//! culedger_bench [--quick] [--rounds N] [--only TEXT] [--json PATH]   the table of figures
//! culedger_bench longrun PAIRS                                        memory and report size over a long run
//! culedger_bench worker static-pair LIVE BATCHES BATCH                (internal) static-runtime workload
//! ```

use std::ffi::c_void;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use culedger_scenarios::{repo_root, wait_with_timeout, Results};
use fakecudart as rt;

/// Where `make` puts what the bench runs.
struct Paths {
    lib: PathBuf,
    bench_rt: PathBuf,
    min_driver: PathBuf,
    me: PathBuf,
}

impl Paths {
    fn find() -> Result<Paths, String> {
        let root = repo_root();
        let p = Paths {
            lib: root.join("target/release/libculedger.so"),
            bench_rt: root.join("target/sim/bin/bench_rt"),
            min_driver: root.join("target/sim/min"),
            me: std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?,
        };
        for f in [&p.lib, &p.bench_rt, &p.min_driver.join("libcuda.so.1")] {
            if !f.exists() {
                return Err(format!("{} is missing: run `make bench` (it builds first)", f.display()));
            }
        }
        Ok(p)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Plain,
    With,
}

/// Settings of one bench invocation.
struct Bench {
    paths: Paths,
    scratch: PathBuf,
    rounds: usize,
    batches: usize,
    batch: usize,
    live: usize,
    startup_runs: usize,
    quick: bool,
    runs: std::cell::Cell<usize>,
    /// Settings given to culedger (the `With` side) on top of its defaults.
    settings: std::cell::RefCell<Vec<(&'static str, String)>>,
    /// Environment of both sides (the minimal driver's switches).
    both: std::cell::RefCell<Vec<(&'static str, String)>>,
}

/// One program run's `RESULT` lines and the output directory culedger wrote into.
struct Out {
    results: Results,
    out_dir: Option<PathBuf>,
    wall: Duration,
}

impl Bench {
    fn command(&self, side: Side, program: &Path, args: &[String]) -> (Command, Option<PathBuf>) {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("LD_LIBRARY_PATH", &self.paths.min_driver)
            .env_remove("LD_PRELOAD")
            // culedger's defaults, whatever the caller's environment holds.
            .env_remove("CULEDGER_OUT")
            .env_remove("CULEDGER_FLUSH_MS")
            .env_remove("CULEDGER_LOG")
            .env_remove("CULEDGER_MODE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.envs(self.both.borrow().iter().map(|(k, v)| (k, v)));
        let n = self.runs.get();
        self.runs.set(n + 1);
        let out = (side == Side::With).then(|| self.scratch.join(format!("out-{n}")));
        if let Some(dir) = &out {
            cmd.env("LD_PRELOAD", &self.paths.lib).env("CULEDGER_OUT", dir);
            cmd.envs(self.settings.borrow().iter().map(|(k, v)| (k, v)));
        }
        (cmd, out)
    }

    fn run(&self, side: Side, program: &Path, args: &[String]) -> Out {
        let (mut cmd, out_dir) = self.command(side, program, args);
        let what = format!("{side:?} {} {}", program.display(), args.join(" "));
        let t0 = Instant::now();
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let run = wait_with_timeout(child, Duration::from_secs(600), what.clone());
        let wall = t0.elapsed();
        assert!(run.success(), "{what} failed ({:?})\n{}", run.status, run.describe());
        Out { results: run.results, out_dir, wall }
    }

    /// Like [`Bench::run`] for a short program, timed from spawn to exit with a blocking wait.
    fn run_short(&self, side: Side, program: &Path, args: &[String]) -> Out {
        let (mut cmd, out_dir) = self.command(side, program, args);
        let t0 = Instant::now();
        let out = cmd.output().unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let wall = t0.elapsed();
        assert!(
            out.status.success(),
            "{side:?} {} failed: {}",
            program.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Out { results: Results::parse(&String::from_utf8_lossy(&out.stdout)), out_dir, wall }
    }

    /// `rounds` runs per side, alternating; the per-batch values of `key` of each run.
    fn rounds(&self, program: &Path, args: &[String], key: &str) -> Paired {
        let mut p = Paired::default();
        for round in 0..self.rounds {
            let order = if round % 2 == 0 { [Side::Plain, Side::With] } else { [Side::With, Side::Plain] };
            for side in order {
                let out = self.run(side, program, args);
                let values: Vec<f64> = out.results.all(key).iter().filter_map(|v| v.parse().ok()).collect();
                assert!(!values.is_empty(), "no RESULT {key}= from {}", program.display());
                match side {
                    Side::Plain => p.plain.push(values),
                    Side::With => p.with.push(values),
                }
            }
        }
        p
    }
}

/// An integer `RESULT` value (0 when missing: the caller's figure then shows it).
fn int(r: &Results, key: &str) -> u64 {
    r.get(key).and_then(culedger_scenarios::parse_u64).unwrap_or(0)
}

/// Per-round values of both sides.
#[derive(Default)]
struct Paired {
    plain: Vec<Vec<f64>>,
    with: Vec<Vec<f64>>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

impl Paired {
    fn pooled(rounds: &[Vec<f64>]) -> f64 {
        median(&rounds.concat())
    }

    /// (median without, median with, added, lowest and highest per-round difference).
    fn figure(&self) -> Measured {
        let plain = Self::pooled(&self.plain);
        let with = Self::pooled(&self.with);
        let diffs: Vec<f64> = self.plain.iter().zip(&self.with).map(|(p, w)| median(w) - median(p)).collect();
        let lo = diffs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = diffs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Measured { plain, with, added: with - plain, spread: Some((lo, hi)) }
    }
}

#[derive(Clone, Copy, Debug)]
struct Measured {
    plain: f64,
    with: f64,
    added: f64,
    spread: Option<(f64, f64)>,
}

/// One line of the table.
struct Row {
    name: String,
    unit: &'static str,
    measured: Option<Measured>,
    /// A figure that is not a with/without difference (e.g. a file size).
    value: Option<String>,
    target: String,
    met: Option<bool>,
}

fn fmt_num(v: f64, unit: &str) -> String {
    if v.is_nan() {
        return "-".into();
    }
    match unit {
        "ns" => format!("{v:.1} ns"),
        "B" => format!("{v:.1} B"),
        "ms" => format!("{v:.3} ms"),
        u => format!("{v:.2} {u}"),
    }
}

fn print_table(rows: &[Row]) -> String {
    let mut s = String::new();
    let head = ["figure", "without", "with culedger", "added (spread)", "target", "met"];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            let (plain, with, added) = match (&r.measured, &r.value) {
                (Some(m), _) => {
                    let spread = m.spread.map_or(String::new(), |(lo, hi)| {
                        format!(" ({}..{})", fmt_num(lo, r.unit).replace(' ', ""), fmt_num(hi, r.unit).replace(' ', ""))
                    });
                    (
                        fmt_num(m.plain, r.unit),
                        fmt_num(m.with, r.unit),
                        format!("{}{}{spread}", if m.added >= 0.0 { "+" } else { "" }, fmt_num(m.added, r.unit)),
                    )
                }
                (None, Some(v)) => (String::new(), v.clone(), String::new()),
                (None, None) => (String::new(), "n/a".into(), String::new()),
            };
            let met = match r.met {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            };
            [r.name.clone(), plain, with, added, r.target.clone(), met.into()]
        })
        .collect();
    let mut widths = head.map(str::len);
    for c in &cells {
        for (w, v) in widths.iter_mut().zip(c) {
            *w = (*w).max(v.chars().count());
        }
    }
    let line = |s: &mut String, c: &[String]| {
        let _ = writeln!(
            s,
            "{:<w0$} | {:>w1$} | {:>w2$} | {:<w3$} | {:<w4$} | {}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
            w4 = widths[4]
        );
    };
    line(&mut s, &head.map(String::from));
    let _ = writeln!(s, "{}", "-".repeat(widths.iter().sum::<usize>() + 3 * 5 + 3));
    for c in &cells {
        line(&mut s, c);
    }
    s
}

/// CPUs this process may run on.
fn cpus() -> usize {
    // SAFETY: a zeroed cpu_set_t filled by the kernel.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            return (libc::CPU_COUNT(&set) as usize).max(1);
        }
    }
    1
}

fn report_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    v.sort();
    v
}

fn mtime_unix_ns(p: &Path) -> Option<u128> {
    let m = std::fs::metadata(p).ok()?.modified().ok()?;
    Some(m.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos())
}

fn bench(args: &[String]) -> Result<(), String> {
    let mut quick = false;
    let mut rounds = None;
    let mut only = None;
    let mut json_path = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--rounds" => rounds = it.next().and_then(|v| v.parse().ok()),
            "--only" => only = it.next().cloned(),
            "--json" => json_path = it.next().map(PathBuf::from),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let paths = Paths::find()?;
    let scratch = std::env::temp_dir().join(format!("culedger-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let b = Bench {
        paths,
        scratch: scratch.clone(),
        rounds: rounds.unwrap_or(if quick { 2 } else { 7 }),
        batches: if quick { 5 } else { 30 },
        batch: if quick { 2000 } else { 20000 },
        live: if quick { 100_000 } else { 1_000_000 },
        startup_runs: if quick { 10 } else { 100 },
        quick,
        runs: std::cell::Cell::new(0),
        settings: Default::default(),
        both: Default::default(),
    };
    let want = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let mut rows = Vec::new();
    let started = Instant::now();
    let bench_rt = b.paths.bench_rt.clone();
    let per_op = [b.batches.to_string(), b.batch.to_string()];
    let live_1k = 1000.to_string();

    // ---- a process that never touches CUDA (first: nothing heavy has run yet) ----
    if want("nocuda") || want("startup") {
        let mut plain = Vec::new();
        let mut with = Vec::new();
        let mut files = 0;
        let mut max_threads = 0;
        for i in 0..b.startup_runs {
            let order = if i % 2 == 0 { [Side::Plain, Side::With] } else { [Side::With, Side::Plain] };
            for side in order {
                let out = b.run_short(side, &bench_rt, &["nocuda".into()]);
                let ms = out.wall.as_secs_f64() * 1e3;
                if let Some(dir) = &out.out_dir {
                    files += report_files(dir).len() + usize::from(dir.exists());
                    max_threads = max_threads.max(int(&out.results, "threads"));
                    with.push(ms);
                } else {
                    plain.push(ms);
                }
            }
        }
        let m = Measured {
            plain: median(&plain),
            with: median(&with),
            added: median(&with) - median(&plain),
            spread: None,
        };
        rows.push(Row {
            name: format!("never touches CUDA: start-up to exit ({} runs)", b.startup_runs),
            unit: "ms",
            measured: Some(m),
            value: None,
            target: "< 1 ms".into(),
            met: Some(m.added < 1.0),
        });
        rows.push(Row {
            name: "never touches CUDA: files and directories written, threads".into(),
            unit: "",
            measured: None,
            value: Some(format!("{files} files, {max_threads} thread(s)")),
            target: "no file, no thread".into(),
            met: Some(files == 0 && max_threads == 1),
        });
    }

    // ---- alloc+free pairs ----
    let mut pair_added = None;
    if want("pair") {
        let args = [vec!["pair".into(), live_1k.clone()], per_op.to_vec()].concat();
        let m = b.rounds(&bench_rt, &args, "ns").figure();
        pair_added = Some(m.added);
        rows.push(Row {
            name: "alloc+free pair, 1 thread, dynamic runtime".into(),
            unit: "ns",
            measured: Some(m),
            value: None,
            target: "<= 100 ns".into(),
            met: Some(m.added <= 100.0),
        });
        let args = [vec!["worker".into(), "static-pair".into(), live_1k.clone()], per_op.to_vec()].concat();
        let m = b.rounds(&b.paths.me, &args, "ns").figure();
        rows.push(Row {
            name: "alloc+free pair, 1 thread, static runtime".into(),
            unit: "ns",
            measured: Some(m),
            value: None,
            target: "<= 100 ns".into(),
            met: Some(m.added <= 100.0),
        });
    }
    // ---- the driver through cuGetProcAddress: large allocations (its query and copy below) ----
    // 2 MiB from one call site (above CULEDGER_SITE_MIN: a site each, proven after the first),
    // the same with no site, and the pair with addresses that only grow (the minimal driver's
    // own way) against addresses the driver reuses (MINCUDA_REUSE=1).
    let drv_pair = [vec!["drv_pair".into(), live_1k.clone()], per_op.to_vec(), vec!["2048".into()]].concat();
    for (key, name, site_min, reuse, limit) in [
        (
            "drv_pair_site",
            "alloc+free pair, 2 MiB, one call site (site proven), cuGetProcAddress path",
            None,
            false,
            250.0,
        ),
        (
            "drv_pair_nosite",
            "alloc+free pair, 2 MiB, CULEDGER_SITE_MIN=1GiB, growing addresses",
            Some("1GiB"),
            false,
            100.0,
        ),
        (
            "drv_pair_reused",
            "alloc+free pair, 2 MiB, CULEDGER_SITE_MIN=1GiB, reused addresses",
            Some("1GiB"),
            true,
            100.0,
        ),
    ] {
        if !want(key) && !want("pair") {
            continue;
        }
        *b.settings.borrow_mut() = site_min.map(|v| vec![("CULEDGER_SITE_MIN", v.to_string())]).unwrap_or_default();
        *b.both.borrow_mut() = if reuse { vec![("MINCUDA_REUSE", "1".into())] } else { vec![] };
        let m = b.rounds(&bench_rt, &drv_pair, "ns").figure();
        rows.push(Row {
            name: name.into(),
            unit: "ns",
            measured: Some(m),
            value: None,
            target: format!("<= {limit:.0} ns"),
            met: Some(m.added <= limit),
        });
    }
    b.settings.borrow_mut().clear();
    b.both.borrow_mut().clear();

    if want("threads") {
        let (threads, inner_rounds, pairs) = (16, if b.quick { 2 } else { 5 }, if b.quick { 500 } else { 5000 });
        let cores = cpus().min(threads) as f64;
        // Per pair: the CPU time of all threads (what contention costs in spinning and cache
        // traffic), and the round's wall time times the cores it could use (also what blocking
        // costs); both against the same program without culedger.
        let (mut cpu, mut wall) = (Paired::default(), Paired::default());
        for round in 0..b.rounds {
            let order = if round % 2 == 0 { [Side::Plain, Side::With] } else { [Side::With, Side::Plain] };
            for side in order {
                let out = b.run(
                    side,
                    &bench_rt,
                    &["threads".into(), threads.to_string(), inner_rounds.to_string(), pairs.to_string()],
                );
                let per = |key: &str, scale: f64| -> Vec<f64> {
                    out.results
                        .all(key)
                        .iter()
                        .filter_map(|w| w.parse::<f64>().ok())
                        .map(|w| w * scale / (threads * pairs) as f64)
                        .collect()
                };
                let (c, w) = (per("cpu_ns", 1.0), per("wall_ns", cores));
                match side {
                    Side::Plain => (cpu.plain.push(c), wall.plain.push(w)),
                    Side::With => (cpu.with.push(c), wall.with.push(w)),
                };
            }
        }
        let limit = pair_added.map(|a| 2.0 * a.max(0.0));
        for (how, p) in [("CPU time", &cpu), (&*format!("wall x {cores} cores"), &wall)] {
            let m = p.figure();
            rows.push(Row {
                name: format!("alloc+free pair, {threads} threads on 8 devices, per pair ({how})"),
                unit: "ns",
                measured: Some(m),
                value: None,
                target: match limit {
                    Some(l) => format!("<= 2x 1-thread ({l:.0} ns)"),
                    None => "<= 2x 1-thread".into(),
                },
                met: limit.map(|l| m.added <= l),
            });
        }
    }

    // ---- copies, queries, dlsym ----
    for (mode, name) in [
        ("h2d", "host-to-device copy, cudaMemcpy"),
        ("h2d_async", "host-to-device copy, cudaMemcpyAsync"),
        ("meminfo", "free-memory query, cudaMemGetInfo"),
        ("drv_meminfo", "free-memory query, cuMemGetInfo, repeated from one site, cuGetProcAddress path"),
        ("drv_h2d", "host-to-device copy, cuMemcpyHtoD, cuGetProcAddress path"),
        (
            "drv_launch",
            "kernel launch, cuLaunchKernel, 64 kernels of a loaded library in turn (first uses done: steady state)",
        ),
        ("dlsym", "dlsym of a non-CUDA name, on a handle"),
        ("dlsym_default", "dlsym of a non-CUDA name, RTLD_DEFAULT"),
    ] {
        if !want(mode) {
            continue;
        }
        let args = if mode.starts_with("dlsym") {
            [vec![mode.to_string()], per_op.to_vec()].concat()
        } else {
            [vec![mode.to_string(), live_1k.clone()], per_op.to_vec()].concat()
        };
        let m = b.rounds(&bench_rt, &args, "ns").figure();
        rows.push(Row {
            name: name.into(),
            unit: "ns",
            measured: Some(m),
            value: None,
            target: "<= 40 ns".into(),
            met: Some(m.added <= 40.0),
        });
    }

    // ---- live allocations: resident memory, the report's write ----
    if want("live") || want("report") {
        let sites = if b.quick { 1000 } else { 10_000 };
        let args = ["live".to_string(), b.live.to_string(), sites.to_string()];
        let mut p = Paired::default();
        let (mut write_ms, mut sizes, mut site_counts) = (Vec::new(), Vec::new(), Vec::new());
        // Every allocation captures its call site (they are 4 KiB, below the default 1 MiB),
        // so the report and the resident memory hold the 10k sites.
        *b.settings.borrow_mut() = vec![("CULEDGER_SITE_MIN", "0".into())];
        for round in 0..b.rounds.min(3) {
            let order = if round % 2 == 0 { [Side::Plain, Side::With] } else { [Side::With, Side::Plain] };
            for side in order {
                let out = b.run(side, &bench_rt, &args);
                let r = &out.results;
                let per = (int(r, "rss_after").saturating_sub(int(r, "rss_before"))) as f64 / b.live as f64;
                match side {
                    Side::Plain => p.plain.push(vec![per]),
                    Side::With => p.with.push(vec![per]),
                }
                if let Some(dir) = out.out_dir {
                    let files = report_files(&dir);
                    let [report] = files.as_slice() else {
                        return Err(format!("expected one report in {}, found {files:?}", dir.display()));
                    };
                    let t_exit = u128::from(int(r, "t_exit_unix_ns"));
                    let mtime = mtime_unix_ns(report).ok_or("no mtime")?;
                    write_ms.push(mtime.saturating_sub(t_exit) as f64 / 1e6);
                    let text = std::fs::read(report).map_err(|e| e.to_string())?;
                    sizes.push(text.len() as f64);
                    let doc: serde_json::Value = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
                    let live = doc["devices"][0]["categories"]["other"]["allocs"].as_u64();
                    if live != Some(b.live as u64) {
                        return Err(format!("the report has {live:?} live allocations, expected {}", b.live));
                    }
                    site_counts.push(count_sites(&doc));
                }
            }
        }
        b.settings.borrow_mut().clear();
        let m = p.figure();
        rows.push(Row {
            name: format!("resident memory per live allocation, {} live, {sites} call sites", b.live),
            unit: "B",
            measured: Some(m),
            value: None,
            target: "<= 64 B".into(),
            met: Some(m.added <= 64.0),
        });
        let ms = median(&write_ms);
        let size = median(&sizes);
        let sites_seen = site_counts.iter().copied().max().unwrap_or(0);
        let site_note = if sites_seen == 0 { "; none captured".to_string() } else { String::new() };
        rows.push(Row {
            name: format!(
                "report write at exit, {} live, {sites} call sites ({sites_seen} in report{site_note})",
                b.live
            ),
            unit: "ms",
            measured: None,
            value: Some(format!("{ms:.1} ms")),
            target: "<= 100 ms".into(),
            met: Some(ms <= 100.0),
        });
        rows.push(Row {
            name: format!("report size, {} live, {sites} call sites", b.live),
            unit: "B",
            measured: None,
            value: Some(format!("{:.2} MB", size / 1e6)),
            target: "<= 2 MB".into(),
            met: Some(size <= 2e6),
        });
    }
    if want("site") {
        // The pair (256 KiB) with culedger, capturing no call site (the default 1 MiB minimum)
        // against capturing one per allocation (CULEDGER_SITE_MIN=0): native frames of a C
        // program, interned once (scripts/bench.sh measures Python frames after this).
        let args = [vec!["pair".into(), live_1k.clone()], per_op.to_vec()].concat();
        let mut p = Paired::default();
        for round in 0..b.rounds {
            for capture in if round % 2 == 0 { [false, true] } else { [true, false] } {
                *b.settings.borrow_mut() = if capture { vec![("CULEDGER_SITE_MIN", "0".into())] } else { vec![] };
                let out = b.run(Side::With, &bench_rt, &args);
                let values: Vec<f64> =
                    out.results.all("ns").iter().filter_map(|v| v.parse::<f64>().ok()).map(|ns| ns / 1000.0).collect();
                if capture {
                    p.with.push(values)
                } else {
                    p.plain.push(values)
                }
            }
        }
        b.settings.borrow_mut().clear();
        let m = p.figure();
        rows.push(Row {
            name: "call-site capture per large allocation (native frames; pair without / with a site)".into(),
            unit: "us",
            measured: Some(m),
            value: None,
            target: "<= 5 us".into(),
            met: Some(m.added <= 5.0),
        });
    }

    if want("torch") {
        for (mode, what) in [
            ("cached", "through the caching allocator, warm (no cudaMalloc)"),
            ("miss", "missing the cache (every step new segments)"),
        ] {
            match torch_steps(&b, mode, what)? {
                Some(row) => rows.push(row),
                None => break,
            }
        }
    }

    let table = print_table(&rows);
    println!(
        "culedger bench: {} rounds x {} batches x {} ops per side; minimal driver {}; {} CPUs; load average {}; {:.0} s",
        b.rounds,
        b.batches,
        b.batch,
        b.paths.min_driver.display(),
        cpus(),
        std::fs::read_to_string("/proc/loadavg").map_or("?".into(), |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")),
        started.elapsed().as_secs_f64()
    );
    print!("{table}");
    if let Some(path) = json_path {
        let rows_json: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "figure": r.name, "unit": r.unit,
                    "without": r.measured.map(|m| m.plain), "with": r.measured.map(|m| m.with),
                    "added": r.measured.map(|m| m.added),
                    "spread": r.measured.and_then(|m| m.spread).map(|(a, b)| [a, b]),
                    "value": r.value, "target": r.target, "met": r.met,
                })
            })
            .collect();
        std::fs::write(&path, serde_json::to_vec_pretty(&rows_json).unwrap_or_default())
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// A step loop of real PyTorch on the simulated driver (`shim-tests/py/frameworks/torch_steps.py`,
/// `mode` `cached` or `miss`), with and without culedger, when `make frameworks` has installed
/// it; None (after a line saying so) otherwise.
fn torch_steps(b: &Bench, mode: &str, what: &str) -> Result<Option<Row>, String> {
    let site = repo_root().join("target/frameworks/site");
    if !site.join("torch/__init__.py").is_file() {
        println!("bench: real-torch step loop skipped: {} has no torch (make frameworks)", site.display());
        return Ok(None);
    }
    let (batches, steps) = if b.quick { ("3", "20") } else { ("15", "50") };
    let mut p = Paired::default();
    // Each run imports torch (seconds): five rounds at most, one in quick mode.
    for round in 0..b.rounds.min(if b.quick { 1 } else { 5 }) {
        let order = if round % 2 == 0 { [Side::Plain, Side::With] } else { [Side::With, Side::Plain] };
        for side in order {
            let mut sim = culedger_scenarios::Sim::new(&format!("bench_torch_{mode}_{round}_{side:?}"));
            sim.env("FAKECUDA_DRIVER_VERSION", "13020")
                .env("FAKECUDA_DEVICES", "1")
                .env("FAKECUDA_TOTAL_MIB", "81920")
                .env("PYTHONPATH", &site)
                .timeout(Duration::from_secs(600));
            if side == Side::With {
                let out = sim.scratch().join("out");
                sim.env("LD_PRELOAD", &b.paths.lib).env("CULEDGER_OUT", out);
            }
            let run = sim.run_ok(sim.python("frameworks/torch_steps.py").args([mode, batches, steps]));
            let values: Vec<f64> = run.all("ns").iter().filter_map(|v| v.parse().ok()).collect();
            if values.is_empty() {
                return Err(format!("torch_steps.py printed no figure\n{}", run.describe()));
            }
            match side {
                Side::Plain => p.plain.push(values),
                Side::With => p.with.push(values),
            }
        }
    }
    let m = p.figure();
    Ok(Some(Row {
        name: format!("real-torch step loop {what}, per step (ratio with/without {:.3}x)", m.with / m.plain),
        unit: "us",
        measured: Some(Measured {
            plain: m.plain / 1e3,
            with: m.with / 1e3,
            added: m.added / 1e3,
            spread: m.spread.map(|(lo, hi)| (lo / 1e3, hi / 1e3)),
        }),
        value: None,
        target: "(no target: the ratio)".into(),
        met: None,
    }))
}

/// Distinct call sites a report names (`caller` of its allocations; call sites come with [4]).
fn count_sites(doc: &serde_json::Value) -> usize {
    let mut sites = std::collections::BTreeSet::new();
    for d in doc["devices"].as_array().into_iter().flatten() {
        for t in d["top_allocations"].as_array().into_iter().flatten() {
            if let Some(c) = t["caller"].as_str() {
                sites.insert(c.to_string());
            }
        }
        for s in d["sites"].as_array().into_iter().flatten() {
            sites.insert(s.to_string());
        }
    }
    sites.len()
}

/// `longrun PAIRS`: one process doing PAIRS alloc+free pairs (with queries, failed allocations,
/// unknown frees and copies mixed in) under culedger on the minimal driver; prints resident
/// memory along the way and what the report kept.
fn longrun(args: &[String]) -> Result<(), String> {
    let pairs: u64 = args.first().and_then(|v| v.parse().ok()).ok_or("usage: longrun PAIRS")?;
    let paths = Paths::find()?;
    let scratch = std::env::temp_dir().join(format!("culedger-longrun-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let b = Bench {
        paths,
        scratch: scratch.clone(),
        rounds: 1,
        batches: 0,
        batch: 0,
        live: 0,
        startup_runs: 0,
        quick: false,
        runs: std::cell::Cell::new(0),
        settings: Default::default(),
        both: Default::default(),
    };
    let t0 = Instant::now();
    let out = b.run(Side::With, &b.paths.bench_rt, &["churn".into(), pairs.to_string(), "20".into()]);
    let secs = t0.elapsed().as_secs_f64();
    let at = out.results.all("at");
    let rss = out.results.all("rss");
    for (a, r) in at.iter().zip(&rss) {
        println!("longrun: after {a:>12} pairs: resident {:>8.1} MiB", r.parse::<f64>().unwrap_or(0.0) / 1048576.0);
    }
    let first = rss.first().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let last = rss.last().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let dir = out.out_dir.ok_or("no output directory")?;
    let files = report_files(&dir);
    let [report] = files.as_slice() else { return Err(format!("expected one report, found {files:?}")) };
    let text = std::fs::read(report).map_err(|e| e.to_string())?;
    let doc: serde_json::Value = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
    let d = &doc["devices"][0];
    let len = |k: &str| d[k].as_array().map_or(0, Vec::len);
    println!(
        "longrun: {pairs} pairs in {secs:.1} s; resident {:.1} -> {:.1} MiB after the first {}% ({:+.1} MiB); report {} bytes",
        first / 1048576.0,
        last / 1048576.0,
        100 / 20,
        (last - first) / 1048576.0,
        text.len()
    );
    println!(
        "longrun: alloc_count {} free_count {}; probes {} of {}; failures {} of {}; events {} of {}; timeline {}; warnings {} (+{} dropped); unknown frees {}",
        d["alloc_count"],
        d["free_count"],
        len("probes"),
        d["probes_total"],
        len("failures"),
        d["failures_total"],
        len("events"),
        d["events_total"],
        len("timeline"),
        doc["health"]["warnings"].as_array().map_or(0, Vec::len),
        doc["health"]["warnings_dropped"],
        doc["health"]["unknown_frees"]
    );
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// `worker static-pair LIVE BATCHES BATCH`: the static-runtime workload (the runtime is this
/// binary's own `fakecudart`; culedger sees only the driver entries it resolves).
fn worker(args: &[String]) -> Result<(), String> {
    let num = |i: usize| {
        args.get(i).and_then(|v| v.parse::<usize>().ok()).ok_or("usage: worker static-pair LIVE BATCHES BATCH")
    };
    if args.first().map(String::as_str) != Some("static-pair") {
        return Err("usage: worker static-pair LIVE BATCHES BATCH".into());
    }
    let (live, batches, batch) = (num(1)?, num(2)?, num(3)?);
    let ck = |what: &str, e: i32| if e == 0 { Ok(()) } else { Err(format!("{what} failed with {e}")) };
    // SAFETY: plain runtime calls with valid out-pointers.
    unsafe {
        ck("cudaSetDevice", rt::cudaSetDevice(0))?;
        for _ in 0..live {
            let mut p: *mut c_void = std::ptr::null_mut();
            ck("cudaMalloc", rt::cudaMalloc(&mut p, 64 << 10))?;
        }
        let pair = || {
            let mut p: *mut c_void = std::ptr::null_mut();
            rt::cudaMalloc(&mut p, 256 << 10) | rt::cudaFree(p)
        };
        for _ in 0..batch {
            ck("pair", pair())?;
        }
        for _ in 0..batches {
            // In this thread's CPU time, as bench_rt does (time spent preempted is not a cost).
            let t0 = thread_cpu_ns();
            let mut rc = 0;
            for _ in 0..batch {
                rc |= pair();
            }
            let ns = (thread_cpu_ns() - t0) as f64 / batch as f64;
            ck("pair", rc)?;
            println!("RESULT ns={ns:.2}");
        }
    }
    Ok(())
}

/// The calling thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("worker") => worker(&args[1..]),
        Some("longrun") => longrun(&args[1..]),
        _ => bench(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("culedger_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
