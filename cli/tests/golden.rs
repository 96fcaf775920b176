//! Golden outputs of `report`, `diff` and `check` on the fixtures.
//! Regenerate with `UPDATE_GOLDEN=1 cargo test --release -p culedger-cli`.

mod common;
use common::*;

fn case(name: &str, args: &[&str], code: i32) {
    let o = culedger(args);
    assert_eq!(o.status.code(), Some(code), "{name}: stderr: {}", stderr(&o));
    golden(name, &stdout(&o));
}

#[test]
fn report_goldens() {
    for cfg in ["nccl", "custom-ar"] {
        let dir = format!("tests/fixtures/{cfg}");
        for (fmt, ext) in [("text", "txt"), ("markdown", "md"), ("json", "json")] {
            case(&format!("report-{cfg}.{ext}"), &["report", &dir, "--format", fmt], 0);
        }
    }
}

#[test]
fn diff_goldens() {
    for (fmt, ext) in [("text", "txt"), ("markdown", "md"), ("json", "json")] {
        case(&format!("diff.{ext}"), &["diff", "tests/fixtures/nccl", "tests/fixtures/custom-ar", "--format", fmt], 0);
    }
}

#[test]
fn diff_headline_names_what_changed() {
    let o = culedger(&["diff", "tests/fixtures/nccl", "tests/fixtures/custom-ar"]);
    let first = stdout(&o).lines().next().unwrap_or_default().to_string();
    // The KV pool of custom-ar was sized from a query that saw only its 16 MiB of IPC
    // buffers (the query after the KV pool, in the same millisecond, is not the one); the
    // peer mappings' driver memory came after it, and both ranks' KV allocation failed.
    assert_eq!(
        first,
        "custom-ar/ uses 7.57 GiB less other on GPU 1, \
         saw 16.00 MiB less free memory before its largest allocation (other) on GPU 1 \
         and paid 724.00 MiB more in hidden driver costs on GPU 1; \
         2 allocations failed only in custom-ar/"
    );
    // The same runs the other way round: the failure is on B's side... of A now.
    let o = culedger(&["diff", "tests/fixtures/custom-ar", "tests/fixtures/nccl"]);
    let first = stdout(&o).lines().next().unwrap_or_default().to_string();
    assert!(first.starts_with("nccl/ uses +7.57 GiB other on GPU 1"), "{first}");
    assert!(first.contains("paid 724.00 MiB less in hidden driver costs on GPU 1"), "{first}");
    assert!(first.ends_with("2 allocations failed only in custom-ar/"), "{first}");
    // A run compared with itself.
    let o = culedger(&["diff", "tests/fixtures/nccl", "tests/fixtures/nccl"]);
    assert!(stdout(&o).starts_with("nccl/ and nccl/: no difference"), "{}", stdout(&o));
}

#[test]
fn check_goldens_and_exit_codes() {
    let nccl = "tests/fixtures/nccl";
    let car = "tests/fixtures/custom-ar";
    case(
        "check-pass.txt",
        &[
            "check",
            nccl,
            "--budget",
            "ipc<=64MiB",
            "--budget",
            "peak:other>=20GiB",
            "--budget",
            "untracked<=2GiB",
            "--no-failures",
        ],
        0,
    );
    case(
        "check-breach.txt",
        &[
            "check",
            car,
            "--budget",
            "ipc<=8MiB",
            "--budget",
            "peak:other>=20GiB",
            "--budget",
            "untracked<=2GiB",
            "--budget",
            "driver_costs<=512MiB",
            "--no-failures",
        ],
        1,
    );
}

/// Colour only on a terminal (a pseudo-terminal the test opens itself), never with
/// NO_COLOR, never into a pipe.
#[test]
fn colour_only_on_a_terminal() {
    let on_tty = |no_color: &str| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_culedger"));
        cmd.args(["report", "tests/fixtures/nccl/culedger-4100.json"])
            .current_dir(crate_dir())
            .env("NO_COLOR", no_color);
        let (ok, out) = run_on_a_pty(cmd);
        assert!(ok, "{out}");
        out
    };
    assert!(on_tty("").contains("\x1b[1;36m== Processes ==\x1b[0m"));
    assert!(!on_tty("1").contains('\x1b'));
    let piped = culedger(&["report", "tests/fixtures/nccl/culedger-4100.json"]);
    assert!(!stdout(&piped).contains('\x1b'));
}

/// Runs `cmd` with its stdout on a fresh pseudo-terminal (stderr piped); returns whether it
/// succeeded and what it wrote to the terminal (the line discipline turns "\n" into "\r\n").
fn run_on_a_pty(mut cmd: std::process::Command) -> (bool, String) {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on descriptors this function owns.
    let (master, slave) = unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert!(libc::grantpt(m) == 0 && libc::unlockpt(m) == 0, "{}", std::io::Error::last_os_error());
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(s >= 0, "open the pty: {}", std::io::Error::last_os_error());
        (std::fs::File::from_raw_fd(m), std::fs::File::from_raw_fd(s))
    };
    let child = cmd.stdout(slave).stderr(std::process::Stdio::piped()).spawn().expect("run culedger");
    // The parent's copy of the slave went into `cmd`: drop it so the master sees EIO at the end.
    drop(cmd);
    let reader = std::thread::spawn(move || {
        let mut master = master;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match master.read(&mut chunk) {
                Ok(0) | Err(_) => break, // EIO once the last slave descriptor is closed
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf
    });
    let out = child.wait_with_output().expect("wait for culedger");
    let text = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    (out.status.success(), if out.status.success() { text } else { format!("{text}\n{}", stderr(&out)) })
}
