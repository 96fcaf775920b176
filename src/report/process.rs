//! The report document: `schema`, `tool`, `process`, `settings`, merged with the ledger's
//! `devices`, `host`, `health` and `sites` (see `docs/schema.md`), in the report's types.

#[cfg(test)]
use serde_json::{json, Value};

use super::identity;
use crate::config::Config;
use crate::ledger::Rendered;
use culedger_format::redact::redact_argv;
use culedger_format::report::{self, Report};

/// The schema identifier written at the top of every report.
pub const SCHEMA: &str = "culedger/1";
/// The tool name in `tool.name`.
pub const TOOL_NAME: &str = "culedger";

/// How the process stands at the time of a write (`process.exit`, `process.exit_code`,
/// `process.signal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitState {
    /// A periodic write while the process runs.
    Running,
    /// The final write, with the exit status when culedger saw it: what the parent sees,
    /// the low 8 bits of the value given to `exit` (`exit(300)` is 44).
    Exited(Option<i32>),
    /// The final write before a terminating signal (at its default action) ends the process.
    Signaled(i32),
    /// Written just before this process image is replaced by `exec`; the new image writes
    /// a report of its own. Followed by `Running` writes again if the exec fails.
    Exec,
}

impl ExitState {
    /// The exit state for a status given to `exit`/`_exit`: the low 8 bits, as the
    /// parent's `waitpid` sees them.
    pub fn exited(status: Option<i32>) -> ExitState {
        ExitState::Exited(status.map(|s| s & 0xff))
    }
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
    /// `start_unix_ms` with microseconds (the wall-clock origin of `t_us`).
    pub start_unix_us: u64,
    /// The run this process belongs to, and where the id came from (`env`, `process`).
    pub run_id: String,
    pub run_id_source: &'static str,
    /// The process title, when the program rewrote its command line (setproctitle).
    pub title: Option<String>,
    /// `/proc/self/comm`.
    pub comm: Option<String>,
    /// Allow-listed rank hints from the environment.
    pub env: Vec<(&'static str, String)>,
}

impl ProcessInfo {
    /// Gather this process's facts now (pid, ppid, hostname, redacted argv, exe, time).
    pub fn gather(start_unix_ms: u64, exit: ExitState, forked_from: Option<i32>) -> ProcessInfo {
        Self::gather_at(start_unix_ms.saturating_mul(1000), exit, forked_from)
    }

    /// [`Self::gather`] with the start time in microseconds.
    pub fn gather_at(start_unix_us: u64, exit: ExitState, forked_from: Option<i32>) -> ProcessInfo {
        // SAFETY: getpid/getppid have no preconditions.
        let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
        let host = hostname();
        let start_unix_ms = start_unix_us / 1000;
        let id = identity::get();
        let (run_id, run_id_source) = id.run_id_for(host.as_deref(), pid, start_unix_ms);
        let (argv, title) = title_of(read_cmdline());
        ProcessInfo {
            pid,
            ppid,
            host,
            argv: redact_argv(&argv),
            exe: std::fs::read_link("/proc/self/exe").ok().map(|p| p.to_string_lossy().into_owned()),
            start_unix_ms,
            end_unix_ms: unix_ms_now(),
            exit,
            forked_from,
            start_unix_us,
            run_id,
            run_id_source,
            title: title.map(|t| redact_title(&t)),
            comm: std::fs::read_to_string("/proc/self/comm").ok().map(|c| c.trim_end_matches('\n').to_string()),
            env: id.hints.clone(),
        }
    }

    /// The `process` object.
    pub fn to_record(&self) -> report::Process {
        let (exit, code, signal) = match self.exit {
            ExitState::Running => (report::Exit::Running, None, None),
            ExitState::Exited(code) => (report::Exit::Exit, code, None),
            ExitState::Signaled(sig) => (report::Exit::Signal, None, Some(sig)),
            ExitState::Exec => (report::Exit::Exec, None, None),
        };
        let n = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
        report::Process {
            pid: i64::from(self.pid),
            ppid: i64::from(self.ppid),
            // None is written as null (`report::Process::host`).
            host: self.host.clone().unwrap_or_default(),
            argv: self.argv.clone(),
            exe: self.exe.clone(),
            start_unix_ms: n(self.start_unix_ms),
            end_unix_ms: n(self.end_unix_ms),
            exit,
            exit_code: code.map(i64::from),
            signal: signal.map(i64::from),
            forked_from: self.forked_from.map(i64::from),
            start_unix_us: Some(n(self.start_unix_us)),
            run_id: Some(self.run_id.clone()),
            run_id_source: Some(self.run_id_source.to_string()),
            title: self.title.clone(),
            comm: self.comm.clone(),
            env: self.env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            visible_devices: crate::gpu::visible_devices(),
        }
    }

    /// [`Self::to_record`] as JSON.
    #[cfg(test)]
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.to_record()).expect("a process serializes")
    }
}

/// A title redacted like argv, word by word (titles may carry a whole command line).
fn redact_title(title: &str) -> String {
    let words: Vec<String> = std::iter::once(String::new()).chain(title.split(' ').map(String::from)).collect();
    redact_argv(&words)[1..].join(" ")
}

/// The command line without trailing empty arguments, and the process title when the
/// program rewrote it (setproctitle): the text is followed by NUL padding (the kernel then
/// returns the whole argument area: the title and empty strings), or it is one string that
/// holds spaces or `::` (a title written past the original arguments).
fn title_of(mut args: Vec<String>) -> (Vec<String>, Option<String>) {
    let padded = args.len() > 1 && args.last().is_some_and(String::is_empty);
    while args.last().is_some_and(String::is_empty) {
        args.pop();
    }
    let title = match args.as_slice() {
        [one] if padded || one.contains(' ') || one.contains("::") => Some(one.trim().to_string()),
        _ => None,
    };
    (args, title)
}

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The host name, or `None` if it cannot be read.
pub(crate) fn hostname() -> Option<String> {
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

/// Assemble the whole report: our four parts (`schema`, `tool`, `process`, `settings`) and
/// the ledger's (`devices`, `host`, `health`, `sites`).
pub fn build_document(process: &ProcessInfo, config: &Config, ledger: Rendered) -> Report {
    let Rendered { devices, host, health, sites } = ledger;
    Report {
        schema: SCHEMA.to_string(),
        tool: report::Tool { name: TOOL_NAME.to_string(), version: env!("CARGO_PKG_VERSION").to_string() },
        process: process.to_record(),
        settings: config.settings(),
        health,
        devices,
        host,
        sites,
    }
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
            start_unix_us: 1_000_123,
            run_id: "r1".into(),
            run_id_source: "env",
            title: None,
            comm: Some("python3".into()),
            env: vec![("RANK", "0".into())],
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
                "exit": "running", "exit_code": null, "signal": null, "forked_from": 7,
                "start_unix_us": 1_000_123, "run_id": "r1", "run_id_source": "env",
                "title": null, "comm": "python3", "env": {"RANK": "0"},
                "visible_devices": null,
            })
        );
    }

    #[test]
    fn process_json_exit_codes() {
        let j = info(ExitState::Exited(Some(3))).to_json();
        assert_eq!((&j["exit"], &j["exit_code"]), (&json!("exit"), &json!(3)));
        let j = info(ExitState::Exited(None)).to_json();
        assert_eq!((&j["exit"], &j["exit_code"]), (&json!("exit"), &Value::Null));
        let j = info(ExitState::Signaled(15)).to_json();
        assert_eq!((&j["exit"], &j["exit_code"], &j["signal"]), (&json!("signal"), &Value::Null, &json!(15)));
        let j = info(ExitState::Exec).to_json();
        assert_eq!((&j["exit"], &j["exit_code"], &j["signal"]), (&json!("exec"), &Value::Null, &Value::Null));
    }

    #[test]
    fn exit_status_is_what_the_parent_sees() {
        assert_eq!(ExitState::exited(Some(300)), ExitState::Exited(Some(44)));
        assert_eq!(ExitState::exited(Some(-1)), ExitState::Exited(Some(255)));
        assert_eq!(ExitState::exited(Some(256)), ExitState::Exited(Some(0)));
        assert_eq!(ExitState::exited(Some(7)), ExitState::Exited(Some(7)));
        assert_eq!(ExitState::exited(None), ExitState::Exited(None));
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
    fn titles_set_with_setproctitle() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // NUL padding after the title: the kernel returns the whole argument area.
        let (argv, title) = title_of(v(&["sglang::scheduler_TP0", "", "", ""]));
        assert_eq!((argv, title.as_deref()), (v(&["sglang::scheduler_TP0"]), Some("sglang::scheduler_TP0")));
        // Written past the original arguments: one string.
        assert_eq!(title_of(v(&["VLLM::Worker_TP1"])).1.as_deref(), Some("VLLM::Worker_TP1"));
        assert_eq!(title_of(v(&["ray::IDLE worker"])).1.as_deref(), Some("ray::IDLE worker"));
        // An ordinary command line has no title.
        assert_eq!(title_of(v(&["python3", "-m", "x"])), (v(&["python3", "-m", "x"]), None));
        assert_eq!(title_of(v(&["/usr/bin/engine"])).1, None);
        assert_eq!(title_of(v(&[])), (v(&[]), None));
    }

    #[test]
    fn titles_are_redacted() {
        assert_eq!(redact_title("server --api-key sk-1 --port 80"), "server --api-key <redacted> --port 80");
        assert_eq!(redact_title("sglang::scheduler_TP0"), "sglang::scheduler_TP0");
    }

    #[test]
    fn gather_records_the_identity() {
        let p = ProcessInfo::gather_at(5_000_123, ExitState::Running, None);
        assert_eq!((p.start_unix_ms, p.start_unix_us), (5_000, 5_000_123));
        assert!(!p.run_id.is_empty());
        if std::env::var_os(identity::ENV_RUN_ID).is_none() {
            assert_eq!(p.run_id_source, "process");
            assert!(p.run_id.ends_with(&format!("-{}-5000", p.pid)), "{}", p.run_id);
        }
        assert!(p.comm.as_deref().is_some_and(|c| !c.is_empty()));
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
    fn document_joins_our_parts_and_the_ledgers() {
        let cfg = Config { out_dir: "/o".into(), flush_ms: 5, log: crate::log::Level::Info, ..Config::default() };
        let mut ledger = Rendered::default();
        ledger.host.pinned_live_bytes = 3;
        ledger.health.warnings.push("w".into());
        let doc = serde_json::to_value(build_document(&info(ExitState::Running), &cfg, ledger)).unwrap();
        let obj = doc.as_object().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["devices", "health", "host", "process", "schema", "settings", "sites", "tool"]);
        assert_eq!(doc["schema"], "culedger/1");
        assert_eq!(doc["tool"], json!({"name": "culedger", "version": "0.1.0"}));
        assert_eq!(
            doc["settings"],
            json!({"out_dir": "/o", "flush_ms": 5, "log": "info", "site_min_bytes": 1048576, "py_frames": 64, "signals": ["TERM", "INT", "HUP"], "mode": "0600"})
        );
        assert_eq!(doc["process"], info(ExitState::Running).to_json());
        assert_eq!((&doc["host"]["pinned_live_bytes"], &doc["health"]["warnings"]), (&json!(3), &json!(["w"])));
        assert_eq!((&doc["devices"], &doc["sites"]), (&json!([]), &json!([])));
    }

    #[test]
    fn no_host_name_is_written_as_null() {
        let p = ProcessInfo { host: None, ..info(ExitState::Running) };
        assert_eq!(p.to_json()["host"], Value::Null);
        let read: report::Process = serde_json::from_value(p.to_json()).unwrap();
        assert_eq!(read.host, "");
    }
}
