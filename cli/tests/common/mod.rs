//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The crate directory: tests run the binary from here so paths in outputs are stable.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixtures() -> PathBuf {
    crate_dir().join("tests/fixtures")
}

/// `culedger ARGS...` run in the crate directory, without colour, in UTC, at the default
/// width (no COLUMNS, not a terminal: 100 columns).
pub fn culedger(args: &[&str]) -> Output {
    culedger_env(args, &[])
}

/// [`culedger`] with extra environment variables.
pub fn culedger_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(culedger_bin())
        .args(args)
        .current_dir(crate_dir())
        .env("NO_COLOR", "1")
        .env("TZ", "UTC")
        .env_remove("COLUMNS")
        .env_remove("FORCE_COLOR")
        .env_remove("CULEDGER_LIB")
        .env_remove("CULEDGER_RUN_ID")
        .envs(env.iter().copied())
        .output()
        .expect("run culedger")
}

/// The widest line of a text.
pub fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

/// Copies the reports of fixture runs into one new directory (as a reused `-o DIR` would
/// leave them).
pub fn mixed_dir(runs: &[&str]) -> tempfile::TempDir {
    let d = tempdir();
    for run in runs {
        for e in std::fs::read_dir(fixtures().join(run)).unwrap().flatten() {
            std::fs::copy(e.path(), d.path().join(e.file_name())).unwrap();
        }
    }
    d
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Compares `actual` with `tests/golden/NAME`; `UPDATE_GOLDEN=1` rewrites the file.
pub fn golden(name: &str, actual: &str) {
    let path = crate_dir().join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run UPDATE_GOLDEN=1 cargo test -p culedger-cli)", path.display()));
    if expected != actual {
        let first = expected.lines().zip(actual.lines()).position(|(a, b)| a != b);
        panic!(
            "{name} differs from the golden file (first differing line: {:?}); rerun with UPDATE_GOLDEN=1 if the change is intended\n--- actual ---\n{actual}",
            first.map(|i| i + 1)
        );
    }
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Compiles an empty shared library (a stand-in interposer) with the C compiler.
pub fn stub_lib(dir: &Path, name: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, "int culedger_stub_marker(void) { return 42; }\n").unwrap();
    let out = dir.join(format!("{name}.so"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("the C compiler `{cc}` is needed for this test: {e}"));
    assert!(status.success(), "building {name}.so failed");
    out
}

/// The `culedger` under test: this build, or `CULEDGER_CLI` (another build, to see a test
/// fail before a fix).
pub fn culedger_bin() -> PathBuf {
    std::env::var_os("CULEDGER_CLI").map(PathBuf::from).unwrap_or_else(|| env!("CARGO_BIN_EXE_culedger").into())
}

pub fn run_cmd(out: &Path, lib: &Path) -> Command {
    let mut c = Command::new(culedger_bin());
    c.current_dir(crate_dir()).env("NO_COLOR", "1").env_remove("CULEDGER_LIB");
    c.args(["run", "-o", out.to_str().unwrap(), "--lib", lib.to_str().unwrap(), "--"]);
    c
}

/// A pseudo-terminal: (master, slave), both close-on-exec; the slave is not made anyone's
/// controlling terminal.
pub fn open_pty() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on descriptors this function owns.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert!(libc::grantpt(m) == 0 && libc::unlockpt(m) == 0, "{}", std::io::Error::last_os_error());
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(s >= 0, "open the pty: {}", std::io::Error::last_os_error());
        (std::fs::File::from_raw_fd(m), std::fs::File::from_raw_fd(s))
    }
}
