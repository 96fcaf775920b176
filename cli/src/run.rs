//! `culedger run [-o DIR] [--lib PATH] -- CMD ARGS...`: runs CMD with the interposer
//! preloaded, forwards SIGINT/SIGTERM/SIGHUP, then merges the per-process reports into
//! `DIR/summary.json` and prints the report to stderr.

use crate::analysis::summarize;
use crate::doc::{use_color, Format};
use crate::error::{Fail, Result};
use crate::load::{report_from_value, Run};
use crate::model::SUMMARY_SCHEMA;
use serde_json::{json, Value};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;
use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// The file name of the interposer.
const LIB_NAME: &str = "libculedger.so";

/// `--lib`, else `$CULEDGER_LIB`, else `libculedger.so` next to this executable.
fn find_lib(explicit: Option<PathBuf>) -> Result<PathBuf> {
    let (candidate, origin) = match (explicit, std::env::var_os("CULEDGER_LIB").filter(|v| !v.is_empty())) {
        (Some(p), _) => (p, "--lib"),
        (None, Some(p)) => (PathBuf::from(p), "CULEDGER_LIB"),
        (None, None) => {
            let exe =
                std::env::current_exe().map_err(|e| Fail::input(format!("cannot locate this executable: {e}")))?;
            (exe.with_file_name(LIB_NAME), "next to the culedger binary")
        }
    };
    if !candidate.is_file() {
        return Err(Fail::input(format!(
            "{}: interposer not found ({origin}); build it with `make lib` or pass --lib PATH",
            candidate.display()
        )));
    }
    std::fs::canonicalize(&candidate).map_err(|e| Fail::input(format!("{}: {e}", candidate.display())))
}

/// `LD_PRELOAD` with the interposer first, keeping what was there.
pub fn preload_value(lib: &Path, existing: Option<&str>) -> String {
    match existing.map(str::trim).filter(|s| !s.is_empty()) {
        Some(rest) => format!("{}:{rest}", lib.display()),
        None => lib.display().to_string(),
    }
}

fn out_dir(explicit: Option<PathBuf>) -> Result<PathBuf> {
    let dir =
        explicit.unwrap_or_else(|| PathBuf::from(format!("culedger-{}", chrono::Local::now().format("%Y%m%d-%H%M%S"))));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Fail::input(format!("{}: cannot create output directory: {e}", dir.display())))?;
    std::fs::canonicalize(&dir).map_err(|e| Fail::input(format!("{}: {e}", dir.display())))
}

pub fn run(output: Option<PathBuf>, lib: Option<PathBuf>, command: Vec<String>) -> Result<i32> {
    let lib = find_lib(lib)?;
    let dir = out_dir(output)?;
    let started = SystemTime::now();

    // Registered before the child exists, so no signal slips through unforwarded.
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| Fail::input(format!("cannot install signal handlers: {e}")))?;
    let handle = signals.handle();

    let preload = preload_value(&lib, std::env::var("LD_PRELOAD").ok().as_deref());
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .env("LD_PRELOAD", preload)
        .env("CULEDGER_OUT", &dir)
        .spawn()
        .map_err(|e| Fail { code: 127, message: format!("{}: cannot run: {e}", command[0]) })?;
    let pid = child.id() as libc::pid_t;

    let forwarder = std::thread::spawn(move || {
        for origin in signals.forever() {
            // A terminal's ^C or hangup comes from the kernel to the whole foreground process
            // group, child included: forwarding it would deliver it twice.
            if origin.cause != Cause::Kernel {
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

    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let reports = collect(&dir, started);
    let summary = json!({
        "schema": SUMMARY_SCHEMA,
        "command": command,
        "exit_code": code,
        "processes": reports.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
    });
    write_atomic(&dir.join("summary.json"), &summary)?;
    if reports.is_empty() {
        eprintln!("culedger: no process touched CUDA (no culedger-*.json in {})", dir.display());
        return Ok(code);
    }
    let mut run = Run { label: format!("{}/", dir.display()), procs: Vec::new(), sources: Vec::new() };
    for (path, value) in reports {
        if let Ok(r) = report_from_value(value, &path) {
            run.procs.push(r);
            run.sources.push(path);
        }
    }
    run.procs.sort_by_key(|r| (r.process.host.clone(), r.process.start_unix_ms, r.process.pid));
    let text =
        crate::report::document(&summarize(&run)).render(Format::Text, use_color(std::io::stderr().is_terminal()));
    eprint!("{text}");
    eprintln!("culedger: {} report(s) merged into {}", run.procs.len(), dir.join("summary.json").display());
    Ok(code)
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

/// The run's `culedger-*.json` files (written since it started), parsed; bad ones are
/// reported and skipped.
fn collect(dir: &Path, started: SystemTime) -> Vec<(PathBuf, Value)> {
    let since = started.checked_sub(Duration::from_secs(1)).unwrap_or(started);
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.retain(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let fresh = p.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= since);
        name.starts_with("culedger-") && name.ends_with(".json") && fresh
    });
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let parsed = std::fs::read(&p)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<Value>(&b).map_err(|e| e.to_string()))
                .and_then(|v| report_from_value(v.clone(), &p).map(|_| v));
            match parsed {
                Ok(v) => Some((p, v)),
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

/// Writes JSON to a temporary file in the same directory, then renames it into place. The
/// temporary file is created exclusively without following symlinks (a planted name is
/// skipped) and gets the mode of the reports before anything is written into it.
fn write_atomic(path: &Path, value: &Value) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let text = serde_json::to_string_pretty(value).map_err(|e| Fail::input(e.to_string()))? + "\n";
    let fail = |e: std::io::Error| Fail::input(format!("{}: cannot write: {e}", path.display()));
    let mode = summary_mode();
    let mut last = None;
    for n in 0..16 {
        let tmp = path.with_extension(format!("json.tmp.{}.{n}", std::process::id()));
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp);
        let mut file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(fail(e)),
        };
        let written = file
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .and_then(|()| file.write_all(text.as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        return written.map_err(fail);
    }
    Err(fail(last.unwrap_or_else(|| std::io::ErrorKind::AlreadyExists.into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_is_prepended() {
        let lib = Path::new("/x/libculedger.so");
        assert_eq!(preload_value(lib, None), "/x/libculedger.so");
        assert_eq!(preload_value(lib, Some("")), "/x/libculedger.so");
        assert_eq!(preload_value(lib, Some("/y/a.so")), "/x/libculedger.so:/y/a.so");
    }
}
