//! What `/proc` tells about this process and others: whether the flush thread is the last
//! thread left, a process's start time (to tell a live writer from a reused pid), this
//! boot's id and this process's pid namespace. Every function answers "unknown" (`None`)
//! rather than guess when `/proc` is missing or says something unexpected.

use std::path::Path;

/// Is the calling thread the only live thread of the process? `None` when `/proc` cannot
/// tell. Must not be called by the main thread (it is never the last one in the sense
/// used here: when it lives, the process lives through it).
///
/// `/proc/self/task` has a link count of 2 + the number of threads, and a main thread that
/// ended with `pthread_exit` stays counted (a zombie until the process ends): so 2 threads
/// means "us and the main thread", and the main thread is gone when the process state in
/// `/proc/self/stat` is `Z`.
pub fn only_thread_left() -> Option<bool> {
    let threads = task_count()?;
    match threads {
        0 => None,
        1 => Some(true),
        2 => Some(matches!(self_state()?, b'Z' | b'X')),
        _ => Some(false),
    }
}

/// Number of threads of this process (`/proc/self/task` link count minus 2).
fn task_count() -> Option<u64> {
    // SAFETY: stat into a zeroed local struct; the path is NUL-terminated.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::stat(c"/proc/self/task".as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::useless_conversion)] // u32 on aarch64
    u64::from(st.st_nlink).checked_sub(2)
}

/// The state letter of the process (its main thread) from `/proc/self/stat`.
fn self_state() -> Option<u8> {
    let raw = std::fs::read("/proc/self/stat").ok()?;
    stat_fields(&raw)?.first().and_then(|f| f.first().copied())
}

/// The fields of a `/proc/<pid>/stat` line after the command name, which may itself hold
/// spaces and parentheses: field 3 (state) is index 0, field 22 (starttime) index 19.
fn stat_fields(raw: &[u8]) -> Option<Vec<&[u8]>> {
    let close = raw.iter().rposition(|&b| b == b')')?;
    let rest = raw.get(close + 1..)?;
    Some(rest.split(|b| b.is_ascii_whitespace()).filter(|f| !f.is_empty()).collect())
}

/// Pid (field 1) and start time in clock ticks since boot (field 22) of a stat line.
fn parse_stat(raw: &[u8]) -> Option<(i32, u64)> {
    let pid = std::str::from_utf8(raw.split(|&b| b == b' ').next()?).ok()?.parse().ok()?;
    let start = std::str::from_utf8(stat_fields(raw)?.get(19)?).ok()?.parse().ok()?;
    Some((pid, start))
}

/// Pid (as `/proc` numbers it) and start time of this process.
pub fn self_pid_and_start() -> Option<(i32, u64)> {
    parse_stat(&std::fs::read("/proc/self/stat").ok()?)
}

/// What `/proc` says about a pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// No such process.
    Gone,
    /// A process with this start time (clock ticks since boot).
    Started(u64),
    /// Cannot tell.
    Unknown,
}

/// Is there a process `pid` (in our pid namespace, which `proc_root` must show), and when
/// did it start? "Gone" is decided by `kill(pid, 0)`, not by a missing `/proc` entry: a
/// `/proc` mounted with `hidepid=invisible` hides other users' live processes.
pub fn liveness(proc_root: &Path, pid: i32) -> Liveness {
    if let Ok(raw) = std::fs::read(proc_root.join(pid.to_string()).join("stat")) {
        return parse_stat(&raw).map_or(Liveness::Unknown, |(_, start)| Liveness::Started(start));
    }
    // SAFETY: signal 0 only checks existence and permission.
    if pid > 0
        && unsafe { libc::kill(pid, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        Liveness::Gone
    } else {
        Liveness::Unknown
    }
}

/// The first 16 hex digits of this boot's random id (`/proc/sys/kernel/random/boot_id`).
pub fn boot_id() -> Option<String> {
    let raw = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hex: String = raw.chars().filter(char::is_ascii_hexdigit).take(16).collect();
    (hex.len() == 16).then(|| hex.to_ascii_lowercase())
}

/// The inode number of this process's pid namespace (`/proc/self/ns/pid` -> `pid:[N]`).
pub fn pid_namespace() -> Option<u64> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let s = link.to_str()?;
    s.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_awkward_names() {
        let line =
            b"4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 123456 1000 10 18446744073709551615";
        assert_eq!(parse_stat(line), Some((4242, 123456)));
        assert_eq!(stat_fields(line).unwrap()[0], b"S");
        assert_eq!(parse_stat(b"12 (x) R 1"), None, "too short");
        assert_eq!(parse_stat(b"garbage"), None);
    }

    #[test]
    fn this_process() {
        let (pid, start) = self_pid_and_start().expect("/proc/self/stat");
        assert_eq!(pid, std::process::id() as i32);
        assert_eq!(liveness(Path::new("/proc"), pid), Liveness::Started(start));
        assert!(boot_id().is_some_and(|b| b.len() == 16));
        assert!(pid_namespace().is_some());
        // The test harness runs tests on threads other than main: more than one thread.
        assert_eq!(only_thread_left(), Some(false));
    }

    #[test]
    fn a_reaped_child_is_gone() {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id() as i32;
        c.wait().unwrap();
        // The pid may be reused at once in theory; then it has another start time.
        match liveness(Path::new("/proc"), pid) {
            Liveness::Gone | Liveness::Started(_) => {}
            Liveness::Unknown => panic!("cannot tell"),
        }
    }
}
