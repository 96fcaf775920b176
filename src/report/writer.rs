//! Atomic file replacement: write a uniquely named temp file in the target's directory,
//! then `rename` it over the target.
//!
//! The temp file is opened with `O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC`, so an existing
//! file or symlink at the temp name is never opened or followed (we move on to the next
//! name). `rename` replaces a symlink at the target name itself, never its destination.
//! On every error path the temp file is removed. The file gets exactly the writer's mode
//! (`CULEDGER_MODE`, 0600 by default), set on the open descriptor so the umask cannot widen
//! or narrow it, before any byte is written.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many temp names are tried before giving up (each taken name costs one attempt).
pub const TEMP_ATTEMPTS: u32 = 16;

/// Hands out temp-file sequence numbers; one per report session.
#[derive(Debug)]
pub struct AtomicWriter {
    seq: AtomicU64,
    mode: u32,
}

impl Default for AtomicWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl AtomicWriter {
    /// A writer creating files readable and writable by the user only (0600).
    pub const fn new() -> Self {
        Self::with_mode(crate::config::DEFAULT_MODE)
    }

    /// A writer creating files with permission bits `mode` (at most 0777).
    pub const fn with_mode(mode: u32) -> Self {
        AtomicWriter { seq: AtomicU64::new(0), mode: mode & 0o777 }
    }

    /// The temp path for sequence number `n`: `<dir>/.<file_name>.tmp.<n>`.
    pub fn temp_path(dir: &Path, file_name: &str, n: u64) -> PathBuf {
        dir.join(format!(".{file_name}.tmp.{n}"))
    }

    /// Atomically replace `<dir>/<file_name>` with `bytes`. Returns the target path.
    pub fn write(&self, dir: &Path, file_name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
        let target = dir.join(file_name);
        let mut last_err = None;
        for _ in 0..TEMP_ATTEMPTS {
            let temp = Self::temp_path(dir, file_name, self.seq.fetch_add(1, Ordering::Relaxed));
            let file = OpenOptions::new()
                .write(true)
                .create_new(true) // O_CREAT | O_EXCL
                .mode(self.mode)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&temp);
            let mut file = match file {
                Ok(f) => f,
                // Someone else's file or a planted symlink: never touch it, try the next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    last_err = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            // The umask applied to `mode` above; set the exact bits before writing anything.
            let written = file
                .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(self.mode))
                .and_then(|()| file.write_all(bytes));
            drop(file);
            let result = written.and_then(|()| std::fs::rename(&temp, &target));
            return match result {
                Ok(()) => Ok(target),
                Err(e) => {
                    let _ = std::fs::remove_file(&temp);
                    Err(e)
                }
            };
        }
        Err(last_err.unwrap_or_else(|| io::Error::new(io::ErrorKind::AlreadyExists, "no free temp name")))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fresh empty directory under the system temp dir, removed on drop.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "culedger-test-{}-{tag}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).expect("create temp dir");
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(crate) fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn creates_then_replaces_the_target_without_leftovers() {
        let d = TempDir::new("replace");
        let w = AtomicWriter::new();
        let t = w.write(&d.0, "r.json", b"one").expect("first write");
        assert_eq!(t, d.0.join("r.json"));
        assert_eq!(std::fs::read(&t).unwrap(), b"one");
        w.write(&d.0, "r.json", b"two, longer").expect("second write");
        assert_eq!(std::fs::read(&t).unwrap(), b"two, longer");
        assert_eq!(entries(&d.0), ["r.json"]);
    }

    #[test]
    fn symlinked_temp_name_is_refused_and_skipped() {
        let d = TempDir::new("symtemp");
        let victim = d.0.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let w = AtomicWriter::new();
        // The first two temp names are planted symlinks (one dangling).
        symlink(&victim, AtomicWriter::temp_path(&d.0, "r.json", 0)).unwrap();
        symlink(d.0.join("nowhere"), AtomicWriter::temp_path(&d.0, "r.json", 1)).unwrap();
        w.write(&d.0, "r.json", b"report").expect("write uses a free name");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!d.0.join("nowhere").exists(), "dangling symlink must not be followed");
        assert_eq!(std::fs::read(d.0.join("r.json")).unwrap(), b"report");
        assert_eq!(entries(&d.0), [".r.json.tmp.0", ".r.json.tmp.1", "r.json", "victim"]);
    }

    #[test]
    fn gives_up_when_every_temp_name_is_taken() {
        let d = TempDir::new("alltaken");
        for n in 0..u64::from(TEMP_ATTEMPTS) {
            std::fs::write(AtomicWriter::temp_path(&d.0, "r.json", n), b"x").unwrap();
        }
        let err = AtomicWriter::new().write(&d.0, "r.json", b"r").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(!d.0.join("r.json").exists());
        // The next attempt moves past the taken names.
        let w = AtomicWriter::new();
        let _ = w.write(&d.0, "r.json", b"r");
        w.write(&d.0, "r.json", b"r").expect("fresh names after the taken ones");
    }

    #[test]
    fn symlink_at_target_is_replaced_not_followed() {
        let d = TempDir::new("symtarget");
        let victim = d.0.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        symlink(&victim, d.0.join("r.json")).unwrap();
        AtomicWriter::new().write(&d.0, "r.json", b"report").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let meta = std::fs::symlink_metadata(d.0.join("r.json")).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(std::fs::read(d.0.join("r.json")).unwrap(), b"report");
    }

    #[test]
    fn failed_rename_removes_the_temp_file() {
        let d = TempDir::new("renamefail");
        // A non-empty directory at the target name makes rename fail.
        std::fs::create_dir(d.0.join("r.json")).unwrap();
        std::fs::write(d.0.join("r.json").join("keep"), b"k").unwrap();
        assert!(AtomicWriter::new().write(&d.0, "r.json", b"report").is_err());
        assert_eq!(entries(&d.0), ["r.json"]);
    }

    fn mode_of(p: &Path) -> u32 {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions()) & 0o7777
    }

    #[test]
    fn files_are_private_by_default_and_take_the_mode_asked_for() {
        let d = TempDir::new("mode");
        let t = AtomicWriter::new().write(&d.0, "r.json", b"x").unwrap();
        assert_eq!(mode_of(&t), 0o600);
        // Exactly the mode asked for, whatever the umask (a wide one is narrowed, a narrow
        // one does not hide the file from the group that was asked for).
        // SAFETY: umask only changes this process's file creation mask.
        let old = unsafe { libc::umask(0o077) };
        let t = AtomicWriter::with_mode(0o640).write(&d.0, "g.json", b"x").unwrap();
        unsafe { libc::umask(0o000) };
        let u = AtomicWriter::with_mode(0o600).write(&d.0, "u.json", b"x").unwrap();
        unsafe { libc::umask(old) };
        assert_eq!((mode_of(&t), mode_of(&u)), (0o640, 0o600));
        assert_eq!(AtomicWriter::with_mode(0o4755).mode, 0o755, "never setuid");
    }

    #[test]
    fn missing_dir_is_an_error() {
        let d = TempDir::new("missing");
        let err = AtomicWriter::new().write(&d.0.join("absent"), "r.json", b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
