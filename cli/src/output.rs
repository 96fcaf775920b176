//! Where the CLI's outputs go: every file written atomically, standard output with its errors.
//!
//! A file is written into an exclusive, unique temporary file in its own directory (created
//! with `O_EXCL | O_NOFOLLOW`, so a name planted there, a symlink included, is never
//! written through), synced, then renamed over the target. A failed write (full disk, file
//! size limit, a directory named as the output) leaves the previous file as it was and no
//! temporary behind. Standard output's write errors are errors (`metrics DIR > x.prom.tmp
//! && mv ...` must not install an empty file), except a reader that hung up
//! (`culedger report x | head`), which is not worth a message.

use crate::error::{Fail, Result};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Writes text to stdout; a closed pipe (`culedger report x | head`) is not an error worth
/// a message, any other failure is.
pub fn print_stdout(text: &str) -> Result<()> {
    stdout(text.as_bytes())
}

/// How many temporary names are tried before giving up (each is new: pid and a counter).
const TRIES: u32 = 64;

/// Writes `bytes` to `path` atomically. `mode` sets the file's permission bits exactly;
/// `None` gives a new file's usual `0666` less the umask.
pub fn write_file(path: &Path, bytes: &[u8], mode: Option<u32>) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    if path.is_dir() {
        return Err(std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"));
    }
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?
        .to_string_lossy();
    let mut last = None;
    for _ in 0..TRIES {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Hidden and never `culedger-*.json`: no reader takes a temporary for a report.
        let tmp = path.with_file_name(format!(".{name}.tmp.{}.{n}", std::process::id()));
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode.unwrap_or(0o666))
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp);
        let mut file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let written = mode
            .map_or(Ok(()), |m| file.set_permissions(std::fs::Permissions::from_mode(m)))
            .and_then(|()| file.write_all(bytes))
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        } else if let Some(dir) = path.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p }) {
            // The rename itself durable; a directory that cannot be synced is no failure.
            let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
        }
        return written;
    }
    Err(last.unwrap_or_else(|| std::io::ErrorKind::AlreadyExists.into()))
}

/// Writes `bytes` to standard output. A closed pipe is not an error; any other failure is,
/// in one line.
pub fn stdout(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Fail::input(format!("cannot write to standard output: {e}")))
        }
        _ => Ok(()),
    }
}

/// Writes an output the user named: `-` is standard output, anything else a file written
/// atomically.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    if path.as_os_str() == "-" {
        return stdout(bytes);
    }
    write_file(path, bytes, None).map_err(|e| Fail::input(format!("{}: cannot write: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_planted_temporary_is_neither_followed_nor_reused() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        // Every name this process could pick next, planted as a symlink to the victim.
        let out = d.path().join("out.html");
        let next = 0..TRIES;
        for n in next {
            let _ =
                std::os::unix::fs::symlink(&victim, d.path().join(format!(".out.html.tmp.{}.{n}", std::process::id())));
        }
        let _ = write_file(&out, b"page", None);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(!out.is_symlink());
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("a.svg");
        write_file(&out, b"old", None).unwrap();
        assert_eq!(leftovers(d.path()), ["a.svg"]);
        // A directory named as the output.
        let sub = d.path().join("sub.svg");
        std::fs::create_dir(&sub).unwrap();
        assert!(write_file(&sub, b"new", None).is_err());
        assert_eq!(leftovers(d.path()), ["a.svg", "sub.svg"]);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
        // The mode is set exactly when asked.
        write_file(&out, b"new", Some(0o640)).unwrap();
        assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o640);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "new");
    }
}
