//! Atomic file writes: write a uniquely named temp file in the target's directory, then
//! `rename` it over the target (replace) or `link` it to the target (create exclusively).
//!
//! The temp file is opened with `O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC`, so an existing
//! file or symlink at the temp name is never opened or followed (we move on to the next
//! name). `rename` replaces a symlink at the target name itself, never its destination;
//! `link` fails on anything at the target name, a symlink included. On every error path
//! the temp file is removed. Temp names carry the writer's identity (see `naming`).
//! The file gets exactly the writer's mode (`CULEDGER_MODE`, 0600 by default), set on the
//! open descriptor so the umask cannot widen or narrow it, before any byte is written.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::naming::temp_name;

/// How many temp names are tried before giving up (each taken name costs one attempt).
pub const TEMP_ATTEMPTS: u32 = 16;

/// Hands out temp-file sequence numbers; one per report session.
#[derive(Debug)]
pub struct AtomicWriter {
    seq: AtomicU64,
    /// The writer tag in temp names (`naming::writer_tag`).
    tag: String,
    /// Permission bits of the files (at most 0777).
    mode: u32,
}

impl AtomicWriter {
    /// A writer with temp names tagged `tag`, creating files readable and writable by the
    /// user only (0600).
    pub fn new(tag: impl Into<String>) -> Self {
        Self::with_mode(tag, crate::config::DEFAULT_MODE)
    }

    /// A writer creating files with permission bits `mode` (at most 0777).
    pub fn with_mode(tag: impl Into<String>, mode: u32) -> Self {
        AtomicWriter { seq: AtomicU64::new(0), tag: tag.into(), mode: mode & 0o777 }
    }

    /// The temp path for sequence number `n`: `<dir>/.<file_name>.tmp.<tag>.<n>`.
    pub fn temp_path(&self, dir: &Path, file_name: &str, n: u64) -> PathBuf {
        dir.join(temp_name(file_name, &self.tag, n))
    }

    /// Create a fresh temp file next to `<dir>/<file_name>` holding `bytes`.
    fn write_temp(&self, dir: &Path, file_name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
        let mut last_err = None;
        for _ in 0..TEMP_ATTEMPTS {
            let temp = self.temp_path(dir, file_name, self.seq.fetch_add(1, Ordering::Relaxed));
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
            return match written {
                Ok(()) => Ok(temp),
                Err(e) => {
                    let _ = std::fs::remove_file(&temp);
                    Err(e)
                }
            };
        }
        Err(last_err.unwrap_or_else(|| io::Error::new(io::ErrorKind::AlreadyExists, "no free temp name")))
    }

    /// Atomically replace `<dir>/<file_name>` with `bytes`. Returns the target path.
    pub fn write(&self, dir: &Path, file_name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
        let target = dir.join(file_name);
        let temp = self.write_temp(dir, file_name, bytes)?;
        match std::fs::rename(&temp, &target) {
            Ok(()) => Ok(target),
            Err(e) => {
                let _ = std::fs::remove_file(&temp);
                Err(e)
            }
        }
    }

    /// Create `<dir>/<file_name>` with `bytes`, atomically and only if nothing is at that
    /// name (no file, no symlink): `Ok(None)` when the name is taken. Without hard links on
    /// the file system, the name is claimed with `O_EXCL` and the content renamed over it.
    pub fn create_new(&self, dir: &Path, file_name: &str, bytes: &[u8]) -> io::Result<Option<PathBuf>> {
        let target = dir.join(file_name);
        let temp = self.write_temp(dir, file_name, bytes)?;
        let result = match std::fs::hard_link(&temp, &target) {
            Ok(()) => Ok(Some(target)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) if no_hard_links(&e) => {
                let claim = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(self.mode)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&target);
                match claim {
                    Ok(_) => std::fs::rename(&temp, &target).map(|()| Some(target)),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        // After a link the temp is a second name of the report; after a rename it is gone.
        let _ = std::fs::remove_file(&temp);
        result
    }
}

/// Errors by which a file system says it has no hard links.
fn no_hard_links(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOSYS | libc::EMLINK | libc::EXDEV))
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
        let w = AtomicWriter::new("t");
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
        let w = AtomicWriter::new("t");
        // The first two temp names are planted symlinks (one dangling).
        symlink(&victim, w.temp_path(&d.0, "r.json", 0)).unwrap();
        symlink(d.0.join("nowhere"), w.temp_path(&d.0, "r.json", 1)).unwrap();
        w.write(&d.0, "r.json", b"report").expect("write uses a free name");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!d.0.join("nowhere").exists(), "dangling symlink must not be followed");
        assert_eq!(std::fs::read(d.0.join("r.json")).unwrap(), b"report");
        assert_eq!(entries(&d.0), [".r.json.tmp.t.0", ".r.json.tmp.t.1", "r.json", "victim"]);
    }

    #[test]
    fn gives_up_when_every_temp_name_is_taken() {
        let d = TempDir::new("alltaken");
        let planted = AtomicWriter::new("t");
        for n in 0..u64::from(TEMP_ATTEMPTS) {
            std::fs::write(planted.temp_path(&d.0, "r.json", n), b"x").unwrap();
        }
        let err = AtomicWriter::new("t").write(&d.0, "r.json", b"r").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(!d.0.join("r.json").exists());
        // The next attempt moves past the taken names.
        let w = AtomicWriter::new("t");
        let _ = w.write(&d.0, "r.json", b"r");
        w.write(&d.0, "r.json", b"r").expect("fresh names after the taken ones");
    }

    #[test]
    fn symlink_at_target_is_replaced_not_followed() {
        let d = TempDir::new("symtarget");
        let victim = d.0.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        symlink(&victim, d.0.join("r.json")).unwrap();
        AtomicWriter::new("t").write(&d.0, "r.json", b"report").unwrap();
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
        assert!(AtomicWriter::new("t").write(&d.0, "r.json", b"report").is_err());
        assert_eq!(entries(&d.0), ["r.json"]);
    }

    fn mode_of(p: &Path) -> u32 {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions()) & 0o7777
    }

    #[test]
    fn files_are_private_by_default_and_take_the_mode_asked_for() {
        let d = TempDir::new("mode");
        let t = AtomicWriter::new("t").write(&d.0, "r.json", b"x").unwrap();
        assert_eq!(mode_of(&t), 0o600);
        // Exactly the mode asked for, whatever the umask (a wide one is narrowed, a narrow
        // one does not hide the file from the group that was asked for).
        // SAFETY: umask only changes this process's file creation mask.
        let old = unsafe { libc::umask(0o077) };
        let t = AtomicWriter::with_mode("t", 0o640).write(&d.0, "g.json", b"x").unwrap();
        unsafe { libc::umask(0o000) };
        let u = AtomicWriter::with_mode("t", 0o600).write(&d.0, "u.json", b"x").unwrap();
        unsafe { libc::umask(old) };
        assert_eq!((mode_of(&t), mode_of(&u)), (0o640, 0o600));
        assert_eq!(AtomicWriter::with_mode("t", 0o4755).mode, 0o755, "never setuid");
    }

    #[test]
    fn missing_dir_is_an_error() {
        let d = TempDir::new("missing");
        let err = AtomicWriter::new("t").write(&d.0.join("absent"), "r.json", b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn create_new_never_replaces_anything() {
        let d = TempDir::new("createnew");
        let w = AtomicWriter::new("t");
        let p = w.create_new(&d.0, "r.json", b"mine").unwrap().expect("free name");
        assert_eq!(p, d.0.join("r.json"));
        assert_eq!(std::fs::read(&p).unwrap(), b"mine");
        assert_eq!(entries(&d.0), ["r.json"], "the temp file is gone");
        // Taken by a file, a symlink (dangling or not): refused, nothing followed or left.
        assert_eq!(w.create_new(&d.0, "r.json", b"other").unwrap(), None);
        assert_eq!(std::fs::read(&p).unwrap(), b"mine");
        symlink(d.0.join("nowhere"), d.0.join("s.json")).unwrap();
        assert_eq!(w.create_new(&d.0, "s.json", b"x").unwrap(), None);
        assert!(!d.0.join("nowhere").exists());
        assert_eq!(entries(&d.0), ["r.json", "s.json"]);
        // Once created, the owner replaces its own file as usual.
        w.write(&d.0, "r.json", b"mine, again").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"mine, again");
    }

    #[test]
    fn created_files_take_the_writer_mode_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let d = TempDir::new("umask");
        // The umask is per process: only a test that creates files cares; 022 is the norm.
        let old = unsafe { libc::umask(0o027) };
        let created = AtomicWriter::new("t").create_new(&d.0, "r.json", b"x");
        let group = AtomicWriter::with_mode("t", 0o660).create_new(&d.0, "g.json", b"x");
        unsafe { libc::umask(old) };
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(created.unwrap().unwrap()), mode(group.unwrap().unwrap())), (0o600, 0o660));
    }
}
