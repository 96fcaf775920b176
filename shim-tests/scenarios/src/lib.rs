//! Helpers to run programs on the simulated CUDA stack (`target/sim`), for the scenario tests and
//! for the interposer's integration tests.
//!
//! ```no_run
//! use culedger_scenarios::Sim;
//! let sim = Sim::new("rt_basic");
//! let run = sim.run(&mut sim.cmd("rt_basic"));
//! run.assert_success();
//! assert_eq!(run.u64("oom_error"), 2);
//! ```
//!
//! Each [`Sim`] is one simulated machine: a unique `FAKECUDA_MACHINE` name, a scratch directory, and
//! an environment applied to every command it builds (`LD_LIBRARY_PATH` pointing at the fake
//! `libcuda.so.1` / `libcudart.so.12`). Dropping it removes the machine's `/dev/shm` file and the
//! scratch directory. Programs report results as `RESULT key=value [key=value...]` lines on stdout.

pub mod cli;
pub mod cuda;
pub mod elf;
pub mod pythons;
pub mod reports;
pub mod servers;

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Default time a program may run before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// The repository root (from this crate's manifest directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// The simulated stack: `$CULEDGER_SIM_DIR` or `<repo>/target/sim`. Panics with
/// "run `make sim` first" when the fake libraries are missing.
pub fn sim_dir() -> PathBuf {
    let dir = std::env::var_os("CULEDGER_SIM_DIR").map(PathBuf::from).unwrap_or_else(|| repo_root().join("target/sim"));
    for lib in ["lib/libcuda.so.1", "lib/libcudart.so.12"] {
        assert!(
            dir.join(lib).is_file(),
            "{} is missing: run `make sim` first (or set CULEDGER_SIM_DIR)",
            dir.join(lib).display()
        );
    }
    dir
}

/// The Rust build outputs under test (`libculedger.so`, the Rust scenario programs):
/// `$CULEDGER_BUILD_DIR` or `<repo>/target/release`. The aarch64 run points it at the
/// cross-built ones (`scripts/aarch64.sh`).
pub fn build_dir() -> PathBuf {
    std::env::var_os("CULEDGER_BUILD_DIR").map(PathBuf::from).unwrap_or_else(|| repo_root().join("target/release"))
}

/// The command prefix that runs the simulated stack's programs: `$CULEDGER_SIM_RUNNER`
/// split at spaces (e.g. `qemu-aarch64-static -L SYSROOT` for the aarch64 stack); empty
/// when they run natively.
pub fn runner() -> Vec<OsString> {
    std::env::var("CULEDGER_SIM_RUNNER").unwrap_or_default().split_whitespace().map(OsString::from).collect()
}

/// Directory holding the fake `libcuda.so.1` and `libcudart.so.12`.
pub fn lib_dir() -> PathBuf {
    sim_dir().join("lib")
}

/// Directory of the compiled C scenarios.
pub fn bin_dir() -> PathBuf {
    sim_dir().join("bin")
}

/// Path of the compiled C scenario `name` (e.g. `"rt_basic"`).
pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// One simulated machine and the environment of the programs run on it.
pub struct Sim {
    name: String,
    machine: String,
    scratch: PathBuf,
    envs: Vec<(OsString, OsString)>,
    timeout: Duration,
}

impl Sim {
    /// A fresh machine for `test_name` (unique per process and call).
    pub fn new(test_name: &str) -> Sim {
        let clean: String =
            test_name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).take(40).collect();
        let machine = format!("cl_{clean}_{}_{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let scratch = std::env::temp_dir().join(format!("culedger-sim-{machine}"));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).expect("create the scratch directory");
        let sim = Sim { name: test_name.to_string(), machine, scratch, envs: Vec::new(), timeout: DEFAULT_TIMEOUT };
        sim.remove_shm();
        sim
    }

    /// The `FAKECUDA_MACHINE` name of this machine.
    pub fn machine(&self) -> &str {
        &self.machine
    }

    /// The test name given to [`Sim::new`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A per-machine scratch directory (removed on drop).
    pub fn scratch(&self) -> &Path {
        &self.scratch
    }

    /// Adds an environment variable to every command built afterwards.
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        self.envs.push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Sets the time limit of [`Sim::run`].
    pub fn timeout(&mut self, limit: Duration) -> &mut Self {
        self.timeout = limit;
        self
    }

    /// Turns on `FAKECUDA_TRACE` into `scratch/trace.log` for later commands; returns the path.
    pub fn enable_trace(&mut self) -> PathBuf {
        let path = self.trace_path();
        self.env("FAKECUDA_TRACE", &path);
        path
    }

    /// Where [`Sim::enable_trace`] makes the fakes write their trace.
    pub fn trace_path(&self) -> PathBuf {
        self.scratch.join("trace.log")
    }

    /// The trace written so far (empty if none).
    pub fn trace(&self) -> String {
        std::fs::read_to_string(self.trace_path()).unwrap_or_default()
    }

    /// A command for `program` with the machine's environment: a bare name is looked up in
    /// `target/sim/bin`, anything else is used as a path; behind [`runner`] when one is set.
    /// Stdout and stderr are piped.
    pub fn cmd(&self, program: impl AsRef<OsStr>) -> Command {
        let program = program.as_ref();
        let in_bin = bin_dir().join(program);
        let path = if !program.to_string_lossy().contains('/') && in_bin.is_file() {
            in_bin.into_os_string()
        } else {
            program.to_owned()
        };
        let mut cmd = match runner().split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(path);
                c
            }
            None => Command::new(path),
        };
        self.apply_env(&mut cmd);
        cmd
    }

    /// `python3 shim-tests/py/<script>` with the machine's environment (`$PYTHON` overrides python3).
    pub fn python(&self, script: &str) -> Command {
        let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
        let mut cmd = Command::new(python);
        cmd.arg(repo_root().join("shim-tests/py").join(script));
        self.apply_env(&mut cmd);
        cmd
    }

    /// The environment every command gets (also usable on a `Command` built elsewhere).
    pub fn apply_env(&self, cmd: &mut Command) {
        let lib = lib_dir();
        let ld_path = match std::env::var_os("LD_LIBRARY_PATH") {
            Some(old) if !old.is_empty() => {
                let mut v = lib.into_os_string();
                v.push(":");
                v.push(old);
                v
            }
            _ => lib.into_os_string(),
        };
        cmd.env("FAKECUDA_MACHINE", &self.machine)
            .env("LD_LIBRARY_PATH", ld_path)
            .env("CULEDGER_SIM_DIR", sim_dir())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            // The fake driver honours it as the real one does: a test sets it where it means to.
            .env_remove("CUDA_VISIBLE_DEVICES")
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }

    /// Runs `cmd` to completion (killed after the time limit) and parses its `RESULT` lines.
    pub fn run(&self, cmd: &mut Command) -> Run {
        let what = format!("{cmd:?}");
        let child = cmd.spawn().unwrap_or_else(|e| panic!("[{}] cannot start {what}: {e}", self.name));
        wait_with_timeout(child, self.timeout, what)
    }

    /// [`Sim::run`] that also asserts a zero exit status (printing the output otherwise).
    pub fn run_ok(&self, cmd: &mut Command) -> Run {
        let run = self.run(cmd);
        run.assert_success();
        run
    }

    /// The `/dev/shm` files of this machine.
    pub fn shm_files(&self) -> Vec<PathBuf> {
        let Ok(dir) = std::fs::read_dir("/dev/shm") else {
            return Vec::new();
        };
        dir.flatten()
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.find(&self.machine).is_some_and(|at| {
                    !name[at + self.machine.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                })
            })
            .map(|e| e.path())
            .collect()
    }

    fn remove_shm(&self) {
        for f in self.shm_files() {
            let _ = std::fs::remove_file(f);
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.remove_shm();
        if std::env::var_os("CULEDGER_KEEP_SCRATCH").is_none() {
            let _ = std::fs::remove_dir_all(&self.scratch);
        }
    }
}

/// The driver trace `trace` of a program run under culedger, less culedger's own look-ups of
/// device functions through the driver's resolver (its bookkeeping, src/hooks/real.rs): what
/// the program itself asked the driver for, to compare with its trace without culedger.
pub fn trace_without_culedger(trace: &str) -> Vec<&str> {
    // The device functions culedger looks up itself: the current device (hooks), and the
    // devices' count, UUIDs (both versions: a MIG device's differ) and PCI bus ids (the report
    // writer, `crate::gpu`).
    let ours = [
        "getproc cuCtxGetDevice 2000 0 -> 0 cuCtxGetDevice",
        "getproc cuDeviceGetCount 2000 0 -> 0 cuDeviceGetCount",
        "getproc cuDeviceGetUuid 11040 0 -> 0 cuDeviceGetUuid_v2",
        "getproc cuDeviceGetUuid 9020 0 -> 0 cuDeviceGetUuid",
        "getproc cuDeviceGetPCIBusId 4010 0 -> 0 cuDeviceGetPCIBusId",
    ];
    let mut lines: Vec<&str> = trace.lines().collect();
    for ours in ours {
        if let Some(i) = lines.iter().rposition(|l| *l == ours) {
            lines.remove(i);
        }
    }
    lines
}

/// A finished program.
#[derive(Debug)]
pub struct Run {
    /// What was run (for messages).
    pub what: String,
    /// Process id of the program (e.g. to find the report it wrote: `process.pid`).
    pub pid: u32,
    /// Exit status (`None` if it was killed after the time limit).
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    /// The parsed `RESULT` lines.
    pub results: Results,
}

impl Run {
    /// True if the program exited with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Panics with the program's output unless it exited with status 0.
    pub fn assert_success(&self) {
        assert!(self.success(), "{} failed ({:?})\n{}", self.what, self.status, self.describe());
    }

    /// Output of the program, for assertion messages.
    pub fn describe(&self) -> String {
        format!("--- stdout\n{}--- stderr\n{}---", self.stdout, self.stderr)
    }

    /// The last value of `key`, if reported.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.results.get(key)
    }

    /// The last value of `key`; panics with the output if missing.
    pub fn value(&self, key: &str) -> &str {
        self.get(key).unwrap_or_else(|| panic!("{}: no RESULT {key}=...\n{}", self.what, self.describe()))
    }

    /// The last value of `key` as an integer (decimal or 0x-hex); panics with the output otherwise.
    pub fn u64(&self, key: &str) -> u64 {
        let v = self.value(key);
        parse_u64(v).unwrap_or_else(|| panic!("{}: RESULT {key}={v} is not an integer\n{}", self.what, self.describe()))
    }

    /// Every value of `key` in order.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.results.all(key)
    }
}

/// `key=value` pairs from `RESULT` lines, in order.
#[derive(Debug, Default, Clone)]
pub struct Results {
    pairs: Vec<(String, String)>,
    last: HashMap<String, usize>,
}

impl Results {
    /// Parses every line `RESULT k=v [k=v...]` of `output`; other lines are ignored.
    pub fn parse(output: &str) -> Results {
        let mut r = Results::default();
        for line in output.lines() {
            let Some(rest) = line.trim().strip_prefix("RESULT ") else {
                continue;
            };
            for pair in rest.split_whitespace() {
                if let Some((k, v)) = pair.split_once('=') {
                    r.last.insert(k.to_string(), r.pairs.len());
                    r.pairs.push((k.to_string(), v.to_string()));
                }
            }
        }
        r
    }

    /// The last value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.last.get(key).map(|&i| self.pairs[i].1.as_str())
    }

    /// Every value of `key` in order.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.pairs.iter().filter(|(k, _)| k == key).map(|(_, v)| v.as_str()).collect()
    }

    /// All pairs in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
}

/// Parses `123` or `0x7b`.
pub fn parse_u64(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// Waits for `child` (whose stdout/stderr are piped) at most `limit`, killing it after that.
pub fn wait_with_timeout(mut child: Child, limit: Duration, what: String) -> Run {
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let pid = child.id();
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let stdout = out.join().unwrap_or_default();
    let mut stderr = err.join().unwrap_or_default();
    if status.is_none() {
        stderr.push_str(&format!("\n[killed after {limit:?}]\n"));
    }
    let results = Results::parse(&stdout);
    Run { what, pid, status, stdout, stderr, results }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_result_lines() {
        let r = Results::parse("noise\nRESULT a=1 b=0x10\n  RESULT a=2\nRESULTS c=3\nRESULT bad\n");
        assert_eq!(r.get("a"), Some("2"));
        assert_eq!(r.all("a"), vec!["1", "2"]);
        assert_eq!(r.get("b").and_then(parse_u64), Some(16));
        assert_eq!(r.get("c"), None);
        assert_eq!(r.pairs().len(), 3);
    }

    #[test]
    fn timeout_kills() {
        let child = Command::new("sleep").arg("30").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let t = Instant::now();
        let run = wait_with_timeout(child, Duration::from_millis(200), "sleep".into());
        assert!(run.status.is_none() && !run.success());
        assert!(t.elapsed() < Duration::from_secs(10));
        assert!(run.stderr.contains("killed"));
    }
}
