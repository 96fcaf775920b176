//! Writes that fail and outputs that must not be lost ([23] 16-20): standard output's write
//! errors, every file written atomically through an exclusive temporary, and one
//! `culedger run` per output directory. `CULEDGER_CLI=/path/to/old/culedger` runs these
//! against another build.

mod common;
use common::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn nccl() -> String {
    fixtures().join("nccl").display().to_string()
}

/// `culedger ARGS` with its standard output on /dev/full.
fn to_full_disk(args: &[&str]) -> Output {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    Command::new(culedger_bin())
        .args(args)
        .current_dir(crate_dir())
        .env("NO_COLOR", "1")
        .stdout(Stdio::from(full))
        .output()
        .unwrap()
}

#[test]
fn a_failed_write_to_standard_output_fails() {
    let f = nccl();
    let cases: [&[&str]; 6] = [
        &["metrics", &f],
        &["report", &f, "--format", "json"],
        &["report", &f],
        &["export", &f, "--perfetto", "-"],
        &["export", &f, "--memory-viz", "-"],
        &["plot", &f, "-o", "-"],
    ];
    for args in cases {
        let o = to_full_disk(args);
        let err = stderr(&o);
        assert_ne!(o.status.code(), Some(0), "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("culedger: wrote")).collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line: {err}");
        assert!(lines[0].contains("standard output") && lines[0].contains("No space left"), "{args:?}: {err}");
    }
    // A reader that hung up is not an error (`culedger report x | head`).
    let mut child = Command::new(culedger_bin())
        .args(["export", &f, "--perfetto", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// `culedger ARGS` under a file size limit of `limit` bytes (SIGXFSZ ignored: writes fail
/// with EFBIG, as on a full disk).
fn with_file_limit(args: &[&str], limit: u64) -> Output {
    let mut c = Command::new(culedger_bin());
    c.args(args).current_dir(crate_dir()).env("NO_COLOR", "1");
    // SAFETY: signal(2) and setrlimit(2) are async-signal-safe.
    unsafe {
        c.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let r = libc::rlimit { rlim_cur: limit, rlim_max: limit };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    c.output().unwrap()
}

#[test]
fn a_failed_write_keeps_the_previous_file_and_leaves_nothing_behind() {
    let f = nccl();
    let d = tempdir();
    for (name, flag) in [("a.svg", "-o"), ("t.json", "--perfetto"), ("m.pickle", "--memory-viz"), ("p.html", "-o")] {
        let out = d.path().join(name);
        let out_s = out.to_str().unwrap();
        let cmd = match name {
            "a.svg" => "plot",
            "p.html" => "html",
            _ => "export",
        };
        let o = culedger(&[cmd, &f, flag, out_s]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let before = std::fs::read(&out).unwrap();
        assert!(before.len() > 4096, "{name}");
        let o = with_file_limit(&[cmd, &f, flag, out_s], 4096);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains("File too large"), "{name}: {err}");
        assert!(std::fs::read(&out).unwrap() == before, "{name}: the previous file is kept whole");
        let left: Vec<String> = names(d.path()).into_iter().filter(|n| n.contains("tmp")).collect();
        assert!(left.is_empty(), "{name}: temporaries left behind: {left:?}");
    }
    // `-o` naming an existing directory.
    let dir = d.path().join("dir.html");
    std::fs::create_dir(&dir).unwrap();
    let o = culedger(&["html", &f, "-o", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(names(d.path()).iter().all(|n| !n.contains("tmp")), "{:?}", names(d.path()));
    assert!(names(&dir).is_empty());
}

#[test]
fn a_planted_temporary_is_never_written_through() {
    let f = nccl();
    let d = tempdir();
    let victim = d.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let out = d.path().join("page.html");
    // The temporary names of the old writer and of this one's first tries.
    std::os::unix::fs::symlink(&victim, d.path().join("page.html.tmp")).unwrap();
    let o = culedger(&["html", &f, "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let meta = std::fs::symlink_metadata(&out).unwrap();
    assert!(meta.file_type().is_file(), "the page is a file of its own, not the planted link");
    assert!(std::fs::read_to_string(&out).unwrap().contains("culedger-data"));
}

#[test]
fn two_runs_into_one_directory_the_second_is_refused() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let out = d.path().join("out");
    let gate = d.path().join("gate");
    // The first run holds the directory until the gate file appears (bounded: 30 s).
    let script = format!("i=0; while [ ! -e '{}' ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done", gate.display());
    let first = run_cmd(&out, &lib).args(["sh", "-c", &script]).stderr(Stdio::piped()).spawn().unwrap();
    // Until the first run has made and taken the directory.
    for _ in 0..300 {
        if out.is_dir() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    for append in [false, true] {
        let mut c = run_cmd(&out, &lib);
        if append {
            c = Command::new(culedger_bin());
            c.current_dir(crate_dir()).env("NO_COLOR", "1").args([
                "run",
                "--append",
                "-o",
                out.to_str().unwrap(),
                "--lib",
                lib.to_str().unwrap(),
                "--",
            ]);
        }
        let second = c.args(["sh", "-c", "echo ran > \"$CULEDGER_OUT/second-ran\""]).output().unwrap();
        let err = stderr(&second);
        assert_eq!(second.status.code(), Some(2), "append {append}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("another `culedger run`"), "{err}");
        assert!(!out.join("second-ran").exists(), "the second command never started");
    }
    std::fs::write(&gate, "").unwrap();
    let o = first.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.join("summary.json").is_file());
    // Once the first has ended, the directory can be appended to.
    let mut c = Command::new(culedger_bin());
    c.current_dir(crate_dir()).env("NO_COLOR", "1");
    let o = c
        .args(["run", "--append", "-o", out.to_str().unwrap(), "--lib", lib.to_str().unwrap(), "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
