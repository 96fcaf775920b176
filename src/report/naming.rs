//! Report and temporary file names, and the cleanup of temporaries that dead writers left.
//!
//! A report is `culedger-<host>-<pid>-<start_ms>.json`, created exclusively: when the name is
//! taken (another process with the same host name, pid and start millisecond: two containers
//! whose programs are both pid 1, a pid reused after a restart, an `exec`'d image of the same
//! process), the writer moves on to `...-<start_ms>-2.json`, `-3`, and so on. A report is never
//! written over another process's file. Readers also accept the names of older writers,
//! `culedger-<pid>.json`: every `culedger-*.json` is a report.
//!
//! A temporary is `.<report name>.tmp.<writer>.<n>` with `<writer>` =
//! `<boot>-<pidns>-<pid>-<start>`: the first 16 hex digits of the boot id, the inode of the
//! writer's pid namespace, its pid and its start time in clock ticks since boot (`x` when
//! `/proc` could not tell). A writer killed between creating a temporary and renaming it
//! leaves it behind; the next writer in the directory removes it when it is provably stale:
//! written on this boot, in this pid namespace, by a pid that is gone or now belongs to a
//! process started at another time. Temporaries it cannot judge (another host, boot or
//! container, an older writer's name) are removed only once they are [`STALE_AGE`] old.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::procfs::{self, Liveness};

/// Temporaries nobody can prove stale are removed once this old (no write takes a day).
pub const STALE_AGE: Duration = Duration::from_secs(24 * 3600);
/// How many names a report tries before giving up (`-2` ... `-<N>`).
pub const NAME_ATTEMPTS: u32 = 64;
/// Longest host name part kept in a file name.
const HOST_MAX: usize = 64;

/// The host name as it appears in a file name: `[A-Za-z0-9._-]`, others become `_`.
pub fn host_part(host: Option<&str>) -> String {
    let clean: String = host
        .unwrap_or("")
        .chars()
        .take(HOST_MAX)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    // A leading dot would make the report a hidden file.
    match clean.trim_start_matches('.') {
        "" => "unknown".into(),
        s => s.to_string(),
    }
}

/// The name stem of a process's report: `culedger-<host>-<pid>-<start_ms>`.
pub fn report_stem(host: Option<&str>, pid: i32, start_unix_ms: u64) -> String {
    format!("culedger-{}-{pid}-{start_unix_ms}", host_part(host))
}

/// The `attempt`-th candidate name (0: `<stem>.json`, then `<stem>-2.json`, ...).
pub fn report_name(stem: &str, attempt: u32) -> String {
    match attempt {
        0 => format!("{stem}.json"),
        n => format!("{stem}-{}.json", n + 1),
    }
}

/// Is `name` a report a reader should load (any writer's, old names included)?
pub fn is_report_name(name: &str) -> bool {
    name.starts_with("culedger-") && name.ends_with(".json")
}

/// Is `name` one of our temporaries (any writer's, old names included)?
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with(".culedger-") && name.contains(".json.tmp.")
}

/// Who writes a temporary: enough to tell later whether that process still runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writer {
    pub boot: String,
    pub pidns: u64,
    pub pid: i32,
    pub start: u64,
}

impl Writer {
    /// This process, or `None` when `/proc` cannot identify it. `/proc` must belong to our
    /// pid namespace (its pid for us is `getpid()`), or later liveness checks would look up
    /// another namespace's pids.
    pub fn current() -> Option<Writer> {
        let (proc_pid, start) = procfs::self_pid_and_start()?;
        // SAFETY: no preconditions.
        if proc_pid != unsafe { libc::getpid() } {
            return None;
        }
        Some(Writer { boot: procfs::boot_id()?, pidns: procfs::pid_namespace()?, pid: proc_pid, start })
    }

    /// `<boot>-<pidns>-<pid>-<start>`.
    pub fn tag(&self) -> String {
        format!("{}-{}-{}-{}", self.boot, self.pidns, self.pid, self.start)
    }

    /// The inverse of [`Writer::tag`].
    pub fn parse(tag: &str) -> Option<Writer> {
        let mut it = tag.split('-');
        let boot = it.next().filter(|b| b.len() == 16 && b.bytes().all(|c| c.is_ascii_hexdigit()))?;
        let w = Writer {
            boot: boot.to_string(),
            pidns: it.next()?.parse().ok()?,
            pid: it.next()?.parse().ok()?,
            start: it.next()?.parse().ok()?,
        };
        it.next().is_none().then_some(w)
    }
}

/// The writer tag for temporary names: the writer's tag, or `x` when unknown.
pub fn writer_tag(w: Option<&Writer>) -> String {
    w.map_or_else(|| "x".into(), Writer::tag)
}

/// `.<file_name>.tmp.<writer_tag>.<n>`.
pub fn temp_name(file_name: &str, writer_tag: &str, n: u64) -> String {
    format!(".{file_name}.tmp.{writer_tag}.{n}")
}

/// The writer recorded in a temporary's name, if it has one.
fn temp_writer(name: &str) -> Option<Writer> {
    let rest = &name[name.rfind(".json.tmp.")? + ".json.tmp.".len()..];
    let (tag, n) = rest.rsplit_once('.')?;
    n.parse::<u64>().ok()?;
    Writer::parse(tag)
}

/// May the temporary `name` be removed? `age` is how long ago it was last written; `me` is
/// the judging process (`None`: unknown, only age counts); `alive` looks up a pid in the
/// judge's `/proc`.
pub fn is_stale(name: &str, age: Option<Duration>, me: Option<&Writer>, alive: impl Fn(i32) -> Liveness) -> bool {
    if !is_temp_name(name) {
        return false;
    }
    if let (Some(w), Some(me)) = (temp_writer(name), me) {
        if w.boot == me.boot && w.pidns == me.pidns {
            if w.pid == me.pid && w.start == me.start {
                return false; // our own: possibly being written right now
            }
            match alive(w.pid) {
                Liveness::Gone => return true,
                Liveness::Started(t) => return t != w.start,
                Liveness::Unknown => {}
            }
        }
    }
    age.is_some_and(|a| a >= STALE_AGE)
}

/// Remove the stale temporaries of `dir` (see [`is_stale`]); returns how many. Never
/// follows a symlink (a link at a temporary's name is removed itself) and never touches
/// anything that is not named like one of our temporaries.
pub fn clean_stale_temps(dir: &Path, me: Option<&Writer>) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let now = SystemTime::now();
    let proc_root = Path::new("/proc");
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|n| is_temp_name(n)) else { continue };
        let path = entry.path();
        let age = std::fs::symlink_metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .map(|t| now.duration_since(t).unwrap_or(Duration::ZERO));
        if is_stale(name, age, me, |pid| procfs::liveness(proc_root, pid)) && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Writer {
        Writer { boot: "0123456789abcdef".into(), pidns: 4026531836, pid: 100, start: 5000 }
    }

    fn temp(w: &Writer) -> String {
        temp_name("culedger-h-7-1.json", &w.tag(), 3)
    }

    #[test]
    fn names() {
        assert_eq!(report_stem(Some("gpu-01.lab"), 42, 1_700_000_000_123), "culedger-gpu-01.lab-42-1700000000123");
        assert_eq!(report_stem(Some("a/b c\u{e9}"), 1, 5), "culedger-a_b_c_-1-5");
        assert_eq!(report_stem(Some("..."), 1, 5), "culedger-unknown-1-5");
        assert_eq!(report_stem(None, 1, 5), "culedger-unknown-1-5");
        assert_eq!(host_part(Some(&"h".repeat(300))).len(), HOST_MAX);
        assert_eq!(report_name("culedger-h-1-5", 0), "culedger-h-1-5.json");
        assert_eq!(report_name("culedger-h-1-5", 1), "culedger-h-1-5-2.json");
        for n in ["culedger-4100.json", "culedger-h-1-5.json", "culedger-h-1-5-2.json"] {
            assert!(is_report_name(n) && !is_temp_name(n), "{n}");
        }
        let t = temp(&me());
        assert_eq!(t, ".culedger-h-7-1.json.tmp.0123456789abcdef-4026531836-100-5000.3");
        assert!(is_temp_name(&t) && !is_report_name(&t));
        assert!(is_temp_name(".culedger-4100.json.tmp.7"), "an older writer's temporary");
        assert!(!is_temp_name(".bashrc") && !is_temp_name("culedger-1.json.tmp.3"));
    }

    #[test]
    fn writer_tags_round_trip() {
        let w = me();
        assert_eq!(Writer::parse(&w.tag()), Some(w.clone()));
        assert_eq!(temp_writer(&temp(&w)), Some(w));
        for bad in ["", "x", "0123-1-2-3", "0123456789abcdef-1-2", "0123456789abcdef-1-2-3-4", "0123456789abcdeg-1-2-3"]
        {
            assert_eq!(Writer::parse(bad), None, "{bad}");
        }
        assert_eq!(temp_writer(".culedger-4100.json.tmp.7"), None);
        assert_eq!(temp_writer(&temp_name("culedger-h-1-5.json", "x", 0)), None);
    }

    #[test]
    fn only_provably_stale_temporaries_go() {
        let m = me();
        let young = Some(Duration::from_secs(5));
        let old = Some(STALE_AGE);
        let other = |pid, start| Writer { pid, start, ..me() };
        let gone = |_| Liveness::Gone;
        // Our own temporary: never, whatever its age.
        assert!(!is_stale(&temp(&m), old, Some(&m), gone));
        // A dead writer of this boot and namespace: at once.
        assert!(is_stale(&temp(&other(200, 9)), young, Some(&m), gone));
        // Its pid now belongs to a process started at another time: the writer is dead.
        assert!(is_stale(&temp(&other(200, 9)), young, Some(&m), |_| Liveness::Started(10)));
        // The writer runs: never, even when old (a stopped process).
        assert!(!is_stale(&temp(&other(200, 9)), old, Some(&m), |_| Liveness::Started(9)));
        // Cannot tell: only by age.
        assert!(!is_stale(&temp(&other(200, 9)), young, Some(&m), |_| Liveness::Unknown));
        assert!(is_stale(&temp(&other(200, 9)), old, Some(&m), |_| Liveness::Unknown));
        // Another boot or pid namespace (another host, a container): only by age.
        let foreign =
            [Writer { boot: "fedcba9876543210".into(), ..other(200, 9) }, Writer { pidns: 1, ..other(200, 9) }];
        for w in &foreign {
            assert!(!is_stale(&temp(w), young, Some(&m), gone), "{w:?}");
            assert!(is_stale(&temp(w), old, Some(&m), gone), "{w:?}");
        }
        // The judge cannot identify itself, or the name carries no writer: only by age.
        assert!(!is_stale(&temp(&other(200, 9)), young, None, gone));
        assert!(!is_stale(".culedger-4100.json.tmp.7", young, Some(&m), gone));
        assert!(is_stale(".culedger-4100.json.tmp.7", old, Some(&m), gone));
        // Not ours at all: never.
        assert!(!is_stale("notes.txt", old, Some(&m), gone));
        assert!(!is_stale("culedger-1.json", old, Some(&m), gone));
    }

    #[test]
    fn this_process_identifies_itself() {
        let w = Writer::current().expect("/proc is usable in the tests");
        assert_eq!(w.pid, std::process::id() as i32);
        assert_eq!(procfs::liveness(Path::new("/proc"), w.pid), Liveness::Started(w.start));
    }
}
