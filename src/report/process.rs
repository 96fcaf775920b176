//! The report document: `schema`, `tool`, `process`, `settings`, merged with the ledger's
//! `devices`, `host` and `health` (see `docs/schema.md`).

use serde_json::{json, Map, Value};

use super::redact::redact_argv;
use crate::config::Config;

/// The schema identifier written at the top of every report.
pub const SCHEMA: &str = "culedger/1";
/// The tool name in `tool.name`.
pub const TOOL_NAME: &str = "culedger";

/// How the process stands at the time of a write (`process.exit`, `process.exit_code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitState {
    /// A periodic write while the process runs.
    Running,
    /// The final write, with the exit status when culedger saw it.
    Exited(Option<i32>),
}

/// The `process` object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: i32,
    pub ppid: i32,
    pub host: Option<String>,
    /// Already redacted.
    pub argv: Vec<String>,
    pub exe: Option<String>,
    pub start_unix_ms: u64,
    pub end_unix_ms: u64,
    pub exit: ExitState,
    pub forked_from: Option<i32>,
}

impl ProcessInfo {
    /// Gather this process's facts now (pid, ppid, hostname, redacted argv, exe, time).
    pub fn gather(start_unix_ms: u64, exit: ExitState, forked_from: Option<i32>) -> ProcessInfo {
        // SAFETY: getpid/getppid have no preconditions.
        let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
        ProcessInfo {
            pid,
            ppid,
            host: hostname(),
            argv: redact_argv(&read_cmdline()),
            exe: std::fs::read_link("/proc/self/exe").ok().map(|p| p.to_string_lossy().into_owned()),
            start_unix_ms,
            end_unix_ms: unix_ms_now(),
            exit,
            forked_from,
        }
    }

    pub fn to_json(&self) -> Value {
        let (exit, code) = match self.exit {
            ExitState::Running => ("running", None),
            ExitState::Exited(code) => ("exit", code),
        };
        json!({
            "pid": self.pid,
            "ppid": self.ppid,
            "host": self.host,
            "argv": self.argv,
            "exe": self.exe,
            "start_unix_ms": self.start_unix_ms,
            "end_unix_ms": self.end_unix_ms,
            "exit": exit,
            "exit_code": code,
            "forked_from": self.forked_from,
        })
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The host name, or `None` if it cannot be read.
fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length; we keep the last byte as NUL.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..len]).into_owned())
}

/// `argv` from `/proc/self/cmdline` (NUL-separated; lossy UTF-8). Empty if unreadable.
fn read_cmdline() -> Vec<String> {
    std::fs::read("/proc/self/cmdline").map(|raw| split_cmdline(&raw)).unwrap_or_default()
}

/// Split a NUL-separated, NUL-terminated command line.
fn split_cmdline(raw: &[u8]) -> Vec<String> {
    let raw = raw.strip_suffix(b"\0").unwrap_or(raw);
    if raw.is_empty() {
        return Vec::new();
    }
    raw.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

/// Assemble the whole report: our four keys plus every key of the ledger's object
/// (`devices`, `host`, `health`). A non-object from the ledger is ignored.
pub fn build_document(process: &ProcessInfo, config: &Config, ledger_json: Value) -> Value {
    let mut doc = Map::new();
    doc.insert("schema".into(), SCHEMA.into());
    doc.insert("tool".into(), json!({"name": TOOL_NAME, "version": env!("CARGO_PKG_VERSION")}));
    doc.insert("process".into(), process.to_json());
    doc.insert("settings".into(), config.settings_json());
    if let Value::Object(ledger) = ledger_json {
        for (k, v) in ledger {
            // Our keys win: the ledger only renders devices, host, health.
            doc.entry(k).or_insert(v);
        }
    }
    Value::Object(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(exit: ExitState) -> ProcessInfo {
        ProcessInfo {
            pid: 42,
            ppid: 7,
            host: Some("box".into()),
            argv: vec!["python".into(), "--token".into(), "<redacted>".into()],
            exe: None,
            start_unix_ms: 1000,
            end_unix_ms: 2500,
            exit,
            forked_from: Some(7),
        }
    }

    #[test]
    fn process_json_running() {
        assert_eq!(
            info(ExitState::Running).to_json(),
            json!({
                "pid": 42, "ppid": 7, "host": "box",
                "argv": ["python", "--token", "<redacted>"],
                "exe": null, "start_unix_ms": 1000, "end_unix_ms": 2500,
                "exit": "running", "exit_code": null, "forked_from": 7,
            })
        );
    }

    #[test]
    fn process_json_exit_codes() {
        let j = info(ExitState::Exited(Some(3))).to_json();
        assert_eq!((&j["exit"], &j["exit_code"]), (&json!("exit"), &json!(3)));
        let j = info(ExitState::Exited(None)).to_json();
        assert_eq!((&j["exit"], &j["exit_code"]), (&json!("exit"), &Value::Null));
    }

    #[test]
    fn gather_reads_this_process() {
        let p = ProcessInfo::gather(5, ExitState::Running, None);
        assert_eq!(p.pid, std::process::id() as i32);
        assert!(p.ppid > 0);
        assert!(p.host.as_deref().is_some_and(|h| !h.is_empty()));
        assert!(!p.argv.is_empty(), "argv from /proc/self/cmdline");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(p.exe.as_deref(), Some(exe.to_string_lossy().as_ref()));
        assert_eq!(p.start_unix_ms, 5);
        assert!(p.end_unix_ms > 1_600_000_000_000);
        assert_eq!(p.forked_from, None);
    }

    #[test]
    fn cmdline_splitting() {
        assert_eq!(split_cmdline(b"a\0b c\0\0d\0"), ["a", "b c", "", "d"]);
        assert_eq!(split_cmdline(b"no-terminator"), ["no-terminator"]);
        assert!(split_cmdline(b"").is_empty());
        assert!(split_cmdline(b"\0").is_empty());
        assert_eq!(split_cmdline(b"\xff\0"), ["\u{fffd}"]);
    }

    #[test]
    fn document_merges_ledger_keys() {
        let cfg =
            Config { out_dir: "/o".into(), flush_ms: 5, log: crate::log::Level::Info, mode: 0o600, warnings: vec![] };
        let ledger =
            json!({"devices": [], "host": {"pinned_live_bytes": 0}, "health": {"warnings": []}, "schema": "bogus"});
        let doc = build_document(&info(ExitState::Running), &cfg, ledger);
        let obj = doc.as_object().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["devices", "health", "host", "process", "schema", "settings", "tool"]);
        assert_eq!(doc["schema"], "culedger/1");
        assert_eq!(doc["tool"], json!({"name": "culedger", "version": "0.1.0"}));
        assert_eq!(doc["settings"], json!({"out_dir": "/o", "flush_ms": 5, "log": "info", "mode": "0600"}));
        assert_eq!(doc["host"]["pinned_live_bytes"], 0);
        // A non-object ledger rendering contributes nothing.
        let doc = build_document(&info(ExitState::Running), &cfg, Value::Null);
        assert_eq!(doc.as_object().unwrap().len(), 4);
    }
}
