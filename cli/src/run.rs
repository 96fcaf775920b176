//! `culedger run [-o DIR] [--append] [--lib PATH] -- CMD ARGS...`: runs CMD with the
//! interposer preloaded and a run id for the whole process tree (`CULEDGER_RUN_ID`),
//! forwards SIGINT/SIGTERM/SIGHUP sent to it alone, then merges this run's reports into
//! `DIR/summary.json` (with how CMD ended) and ends with one screen on stderr (`screen`: the
//! verdict, one line per set of alike GPUs, explain's headline, the commands that go
//! further), or the full report with `--report`. CMD starts with the signal dispositions and
//! mask `culedger run` got, and when a signal ended CMD, it ends `culedger run` too (`wrap`).

use crate::doc::Format;
use crate::error::{Fail, Result};
use crate::layout::{ColorChoice, Stream, Style};
use crate::load::{is_report_file_name, report_from_value, Run, SummaryMeta};
use crate::model::SUMMARY_SCHEMA;
use crate::wrap;
use serde_json::{json, Value};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// The file name of the interposer.
const LIB_NAME: &str = "libculedger.so";
/// The variable that gives every process of the run its id (read by the interposer).
pub const ENV_RUN_ID: &str = "CULEDGER_RUN_ID";

/// What `culedger run` was asked.
pub struct Request {
    pub output: Option<PathBuf>,
    pub append: bool,
    pub lib: Option<PathBuf>,
    pub command: Vec<String>,
    pub color: ColorChoice,
    /// End with the full report rather than the one screen.
    pub report: bool,
}

/// `--lib`, else `$CULEDGER_LIB`, else `libculedger.so` next to this executable, else the
/// one a `pip install culedger` put beside it (see [`installed_next_to`]).
fn find_lib(explicit: Option<PathBuf>) -> Result<PathBuf> {
    let (candidate, origin) = match (explicit, std::env::var_os("CULEDGER_LIB").filter(|v| !v.is_empty())) {
        (Some(p), _) => (p, "--lib"),
        (None, Some(p)) => (PathBuf::from(p), "CULEDGER_LIB"),
        (None, None) => {
            let exe =
                std::env::current_exe().map_err(|e| Fail::input(format!("cannot locate this executable: {e}")))?;
            let next_to = exe.with_file_name(LIB_NAME);
            let found = exe.parent().filter(|_| !next_to.is_file()).and_then(installed_next_to);
            (found.unwrap_or(next_to), "next to the culedger binary or in its Python package")
        }
    };
    if !candidate.is_file() {
        return Err(Fail::input(format!(
            "{}: interposer not found ({origin}); build it with `make lib`, `pip install culedger`, or pass --lib PATH",
            candidate.display()
        )));
    }
    std::fs::canonicalize(&candidate).map_err(|e| Fail::input(format!("{}: {e}", candidate.display())))
}

/// The interposer of the wheel whose `culedger` executable lives in `bin_dir`: pip puts the
/// executable in `PREFIX/bin` and the package in `PREFIX/lib/pythonX.Y/site-packages/culedger/`
/// (a venv, `--user`, `/usr/local`; `dist-packages` on Debian; `lib64` on some distributions)
/// or, with `pip install --target DIR`, in `DIR/bin` and `DIR/culedger/`. The newest Python
/// version wins when several hold one.
pub fn installed_next_to(bin_dir: &Path) -> Option<PathBuf> {
    let prefix = bin_dir.parent()?;
    let target_layout = prefix.join("culedger").join(LIB_NAME);
    if target_layout.is_file() {
        return Some(target_layout);
    }
    let mut found: Vec<((u32, u32), PathBuf)> = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(prefix.join(lib)) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((major, minor)) = name.strip_prefix("python").and_then(|v| v.split_once('.')) else { continue };
            let (Ok(major), Ok(minor)) = (major.parse::<u32>(), minor.trim_end_matches('t').parse::<u32>()) else {
                continue;
            };
            for packages in ["site-packages", "dist-packages"] {
                let p = e.path().join(packages).join("culedger").join(LIB_NAME);
                if p.is_file() {
                    found.push(((major, minor), p));
                }
            }
        }
    }
    found.sort();
    found.pop().map(|(_, p)| p)
}

/// `LD_PRELOAD` with the interposer first, keeping what was there.
pub fn preload_value(lib: &Path, existing: Option<&str>) -> String {
    match existing.map(str::trim).filter(|s| !s.is_empty()) {
        Some(rest) => format!("{}:{rest}", lib.display()),
        None => lib.display().to_string(),
    }
}

/// A fresh run id: the local start time and 24 random bits, e.g. `20260101-120000-3fa9c1`.
pub fn new_run_id() -> String {
    let mut bytes = [0u8; 3];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map(|_| u32::from_le_bytes([bytes[0], bytes[1], bytes[2], 0]))
        .unwrap_or_else(|_| {
            let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
            (nanos ^ std::process::id().rotate_left(16)) & 0xff_ffff
        });
    format!("{}-{random:06x}", chrono::Local::now().format("%Y%m%d-%H%M%S"))
}

/// The report files already in `dir`, and their run ids.
fn existing_reports(dir: &Path) -> (usize, Vec<String>) {
    let mut ids: Vec<String> = Vec::new();
    let mut n = 0;
    for p in std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_else(|_| Vec::new())
    {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
        let report = name.starts_with("culedger-") && name.ends_with(".json");
        if !report && name != "summary.json" {
            continue;
        }
        n += 1;
        let id =
            crate::load::read_bounded(&p).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()).and_then(|v| {
                v.get("run_id").or_else(|| v.pointer("/process/run_id")).and_then(Value::as_str).map(String::from)
            });
        if let Some(id) = id.filter(|id| !ids.contains(id)) {
            ids.push(id);
        }
    }
    (n, ids)
}

/// Takes the output directory for this run: an exclusive `flock(2)` on the directory itself,
/// held until `culedger run` ends (the file stays open; CMD does not inherit it). A second
/// `culedger run` into the same directory while the first runs is refused (exit 2), with
/// `--append` too: two runs would merge into one `summary.json`.
fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    use std::os::unix::io::AsRawFd;
    let file = std::fs::File::open(dir)
        .map_err(|e| Fail::input(format!("{}: cannot open output directory: {e}", dir.display())))?;
    // SAFETY: flock(2) on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Fail::input(if e.kind() == std::io::ErrorKind::WouldBlock {
            format!("{}: another `culedger run` is writing into this directory; choose another -o", dir.display())
        } else {
            format!("{}: cannot lock output directory: {e}", dir.display())
        }));
    }
    Ok(file)
}

/// The output directory: `explicit` (made if missing; refused when another `culedger run`
/// holds it or it holds another run's reports, unless `append`), or a new
/// `./culedger-<YYYYmmdd-HHMMSS>[-N]`; with the lock that keeps it this run's.
fn out_dir(explicit: Option<PathBuf>, append: bool) -> Result<(PathBuf, std::fs::File)> {
    let (dir, lock) = match explicit {
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .map_err(|e| Fail::input(format!("{}: cannot create output directory: {e}", dir.display())))?;
            let lock = lock_dir(&dir)?;
            let (n, ids) = existing_reports(&dir);
            if n > 0 && !append {
                let runs = if ids.is_empty() { String::new() } else { format!(", run {}", ids.join(", ")) };
                return Err(Fail::input(format!(
                    "{}: holds the reports of another run ({}{runs}); choose another -o, remove them, or pass \
                     --append to add this run",
                    dir.display(),
                    crate::units::count(n, "file", "files")
                )));
            }
            (dir, lock)
        }
        None => {
            let base = format!("culedger-{}", chrono::Local::now().format("%Y%m%d-%H%M%S"));
            let mut k = 1;
            loop {
                let dir = PathBuf::from(if k == 1 { base.clone() } else { format!("{base}-{k}") });
                match std::fs::create_dir(&dir) {
                    Ok(()) => {
                        let lock = lock_dir(&dir)?;
                        break (dir, lock);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && k < 1000 => k += 1,
                    Err(e) => {
                        return Err(Fail::input(format!("{}: cannot create output directory: {e}", dir.display())))
                    }
                }
            }
        }
    };
    let dir = std::fs::canonicalize(&dir).map_err(|e| Fail::input(format!("{}: {e}", dir.display())))?;
    Ok((dir, lock))
}

pub fn run(req: Request) -> Result<i32> {
    let Request { output, append, lib, command, color, report } = req;
    let lib = find_lib(lib)?;
    let made = output.as_deref().is_none_or(|d| !d.exists());
    // Held to the end, after the summary is written.
    let (dir, _lock) = out_dir(output, append)?;
    // A directory made for a command that could not start is not left behind empty.
    let _empty = RemoveIfEmpty(made.then(|| dir.clone()));
    let started = SystemTime::now();
    let run_id = new_run_id();

    // Registered before the child exists, so no signal slips through unforwarded. A signal
    // ignored at our start stays ignored here and in CMD (`nohup`: see `wrap`).
    let forwarded: Vec<i32> = [SIGINT, SIGTERM, SIGHUP].into_iter().filter(|&s| !wrap::ignored_at_start(s)).collect();
    let mut signals = SignalsInfo::<WithOrigin>::new(&forwarded)
        .map_err(|e| Fail::input(format!("cannot install signal handlers: {e}")))?;
    let handle = signals.handle();
    // While this process has one thread. Without it, every signal a sender gave CMD too
    // is forwarded once more.
    let canary = wrap::Canary::start()
        .map_err(|e| eprintln!("culedger: cannot tell group signals from ours ({e}); forwarding every one"))
        .ok();

    let preload = preload_value(&lib, std::env::var("LD_PRELOAD").ok().as_deref());
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]).env("LD_PRELOAD", preload).env("CULEDGER_OUT", &dir).env(ENV_RUN_ID, &run_id);
    // SAFETY: the step only makes async-signal-safe calls (see `wrap::child_setup`).
    unsafe { cmd.pre_exec(wrap::child_setup()) };
    let mut child = cmd.spawn().map_err(|e| Fail { code: 127, message: format!("{}: cannot run: {e}", command[0]) })?;
    let pid = child.id() as libc::pid_t;

    let forwarder = std::thread::spawn(move || {
        for origin in signals.forever() {
            // Sent to the whole process group or control group (a terminal's ^C or hangup,
            // `kill -- -PGID`, `timeout`, systemd), CMD got it from its sender: forwarding it
            // would deliver it twice. The canary is asked every time, so that it keeps no
            // stale signal.
            let everyone = canary.as_ref().is_some_and(|c| c.got(origin.signal));
            if origin.cause != Cause::Kernel && !everyone {
                // SAFETY: kill(2) on the child's pid, which stays valid: the child is reaped
                // only after this thread has stopped (see `wait_unreaped`).
                unsafe { libc::kill(pid, origin.signal) };
            }
        }
    });
    wait_unreaped(pid);
    handle.close();
    let _ = forwarder.join();
    let status = child.wait().map_err(|e| Fail::input(format!("waiting for {}: {e}", command[0])))?;
    wrap::note_end(&status);

    let signal = status.signal();
    let code = status.code().unwrap_or_else(|| 128 + signal.unwrap_or(0));
    let reports = collect(&dir, &run_id, started);
    let ended = SystemTime::now();
    let unix_ms = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let summary = json!({
        "schema": SUMMARY_SCHEMA,
        "run_id": run_id,
        "command": culedger_format::redact::redact_argv(&command),
        "pid": pid,
        "exit_code": code,
        "signal": signal,
        "signal_name": signal.map(|s| crate::runs::signal_name(s.into())),
        "started_unix_ms": unix_ms(started),
        "ended_unix_ms": unix_ms(ended),
        "processes": reports.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
    });
    write_atomic(&dir.join("summary.json"), &summary)?;
    if reports.is_empty() {
        eprintln!("culedger: no process touched CUDA (no report of run {run_id} in {})", dir.display());
        return Ok(code);
    }
    let meta = SummaryMeta {
        run_id: Some(run_id.clone()),
        pid: Some(i64::from(pid)),
        exit_code: Some(i64::from(code)),
        signal: signal.map(i64::from),
        command: command.clone(),
    };
    let mut run = Run { label: format!("{}/", dir.display()), summary: Some(meta), ..Run::default() };
    for (path, value) in reports {
        if let Ok(r) = report_from_value(value, &path) {
            run.procs.push(r);
            run.sources.push(path);
        }
    }
    run.procs.sort_by_key(|r| (r.process.host.clone(), r.process.start_us(), r.process.pid));
    run.run_ids = vec![run_id];
    let style = Style::for_stream(color, Stream::Stderr);
    let analysis = crate::run_analysis::of(&run);
    let doc = if report {
        crate::report::document(analysis.summary(false), Default::default())
    } else {
        crate::screen::document(&analysis, &crate::screen::shell_word(&shown_dir(&dir)))
    };
    eprint!("{}", doc.render(Format::Text, style));
    eprintln!("culedger: {} report(s) merged into {}", run.procs.len(), dir.join("summary.json").display());
    Ok(code)
}

/// `dir` as the user would type it: relative to the current directory when inside it.
fn shown_dir(dir: &Path) -> String {
    let cwd = std::env::current_dir().ok().and_then(|c| std::fs::canonicalize(c).ok());
    match cwd.as_deref().and_then(|c| dir.strip_prefix(c).ok()) {
        Some(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
        _ => dir.display().to_string(),
    }
}

/// Removes a directory this run made when it is still empty at the end (the command could
/// not be started, or nothing at all was written).
struct RemoveIfEmpty(Option<PathBuf>);

impl Drop for RemoveIfEmpty {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            // Fails, as it should, when anything is inside.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Waits until the child has exited, leaving it unreaped (a zombie keeps its pid reserved,
/// so forwarding a late signal cannot hit another process).
fn wait_unreaped(pid: libc::pid_t) {
    loop {
        // SAFETY: waitid(2) with a zeroed siginfo_t to fill in; WNOWAIT leaves the child
        // to be reaped by `Child::wait`.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// The reports of this run in `dir`: those with its run id, and those without any run id
/// (writers before run ids) written since it started; bad ones are reported and skipped,
/// other runs' reports left alone.
fn collect(dir: &Path, run_id: &str, started: SystemTime) -> Vec<(PathBuf, Value)> {
    let since = started.checked_sub(Duration::from_secs(1)).unwrap_or(started);
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.retain(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        is_report_file_name(name)
    });
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let parsed = crate::load::read_bounded(&p)
                .map_err(|e| crate::load::file_error(&e))
                .and_then(|b| serde_json::from_slice::<Value>(&b).map_err(|e| e.to_string()))
                .and_then(|v| report_from_value(v.clone(), &p).map(|_| v).map_err(|e| crate::load::file_error(&e)));
            match parsed {
                Ok(v) => {
                    let fresh = p.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= since);
                    let ours = match v.pointer("/process/run_id").and_then(Value::as_str) {
                        Some(id) => id == run_id,
                        None => fresh,
                    };
                    ours.then_some((p, v))
                }
                Err(e) => {
                    eprintln!("culedger: skipping {}: {e}", p.display());
                    None
                }
            }
        })
        .collect()
}

/// Permission bits of the summary: those of the reports it merges (`CULEDGER_MODE` when it
/// is octal, at most 0777 and lets the owner read and write, as the library accepts; else
/// 0600). The library warns about a bad value; the summary just stays private.
fn summary_mode() -> u32 {
    let raw = std::env::var("CULEDGER_MODE").unwrap_or_default();
    let raw = raw.trim();
    let octal = !raw.is_empty() && raw.len() <= 4 && raw.bytes().all(|b| (b'0'..=b'7').contains(&b));
    match u32::from_str_radix(raw, 8) {
        Ok(m) if octal && m <= 0o777 && m & 0o600 == 0o600 => m,
        _ => 0o600,
    }
}

/// Writes JSON atomically (`output::write_file`) with the mode of the reports.
fn write_atomic(path: &Path, value: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Fail::input(e.to_string()))? + "\n";
    crate::output::write_file(path, text.as_bytes(), Some(summary_mode()))
        .map_err(|e| Fail::input(format!("{}: cannot write: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_fresh_and_valid() {
        let (a, b) = (new_run_id(), new_run_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), "20260101-120000-3fa9c1".len(), "{a}");
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'), "{a}");
    }

    #[test]
    fn preload_is_prepended() {
        let lib = Path::new("/x/libculedger.so");
        assert_eq!(preload_value(lib, None), "/x/libculedger.so");
        assert_eq!(preload_value(lib, Some("")), "/x/libculedger.so");
        assert_eq!(preload_value(lib, Some("/y/a.so")), "/x/libculedger.so:/y/a.so");
    }

    #[test]
    fn the_wheel_layouts_are_found() {
        let root = tempfile::tempdir().unwrap();
        let put = |rel: &str| {
            let p = root.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b"").unwrap();
            p
        };
        let venv = root.path().join("venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        assert_eq!(installed_next_to(&venv.join("bin")), None);
        put("venv/lib/python3.9/site-packages/other/libculedger.so");
        put("venv/lib/python3.not/site-packages/culedger/libculedger.so");
        assert_eq!(installed_next_to(&venv.join("bin")), None);
        let old = put("venv/lib/python3.9/site-packages/culedger/libculedger.so");
        assert_eq!(installed_next_to(&venv.join("bin")), Some(old));
        // The newest Python wins (3.12 > 3.9 numerically), Debian's dist-packages and lib64 count.
        let new = put("venv/lib64/python3.12/dist-packages/culedger/libculedger.so");
        assert_eq!(installed_next_to(&venv.join("bin")), Some(new));
        // pip install --target DIR: DIR/bin/culedger and DIR/culedger/libculedger.so.
        let target = put("t/culedger/libculedger.so");
        assert_eq!(installed_next_to(&root.path().join("t/bin")), Some(target));
    }
}
