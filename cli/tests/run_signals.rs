//! `culedger run` and signals, with a stand-in interposer (an empty shared library built
//! here): forwarding to CMD, death by a signal, the dispositions CMD inherits, hangups and
//! interrupts of the whole process group, `timeout` over a real run.

mod common;
use common::*;
use serde_json::Value;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

#[test]
fn signals_are_forwarded_to_the_child() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let out = d.path().join("out");
    let script = r#"trap 'echo term > "$CULEDGER_OUT/got-term"; exit 7' TERM
touch "$CULEDGER_OUT/ready"
while :; do sleep 0.05; done"#;
    let mut child = run_cmd(&out, &lib).args(["sh", "-c", script]).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !out.join("ready").exists() {
        assert!(Instant::now() < deadline, "the child never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SIGTERM to culedger only (not its process group): culedger must pass it on.
    let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(7), "culedger exits with the child's status");
            break;
        }
        assert!(Instant::now() < deadline, "the child did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(std::fs::read_to_string(out.join("got-term")).unwrap(), "term\n");
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("no process touched CUDA"), "{err}");
}

/// CMD died of a signal: the summary says 128+N, and `culedger run` itself ends by the same
/// signal (what a shell looks at), without a core dump of its own.
#[test]
fn death_by_signal_is_128_plus_the_signal() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let o = run_cmd(&d.path().join("out"), &lib).args(["sh", "-c", "kill -KILL $$"]).output().unwrap();
    assert_eq!(o.status.signal(), Some(9), "{}", stderr(&o));
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("out/summary.json")).unwrap()).unwrap();
    assert_eq!(summary["exit_code"], 137);
    assert_eq!((summary["signal"].as_i64(), summary["signal_name"].as_str()), (Some(9), Some("SIGKILL")));
    assert_eq!(summary["processes"], serde_json::json!([]));
}

/// A command killed by SIGTERM (default action: no final report) is shown as killed.
#[test]
fn a_command_killed_by_sigterm_is_reported_as_killed() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let out = d.path().join("out");
    let fixture = fixtures().join("nccl/culedger-4101.json");
    // The stand-in interposer's last periodic report says "running", then SIGTERM.
    let script = format!(
        r#"sed -e "s/\"pid\": 4101,/\"pid\": $$,/" -e 's/"exit": "exit"/"exit": "running"/' \
    -e "s/\"nccl-run\"/\"$CULEDGER_RUN_ID\"/" '{}' > "$CULEDGER_OUT/culedger-$$.json"
kill -TERM $$"#,
        fixture.display()
    );
    // Wide enough that the status cell is not wrapped beside the pinned host memory column.
    let o = run_cmd(&out, &lib).args(["sh", "-c", &script]).env("COLUMNS", "200").output().unwrap();
    assert_eq!(o.status.signal(), Some(15), "{}", stderr(&o));
    assert!(stderr(&o).contains("killed by SIGTERM"), "{}", stderr(&o));
    let r = culedger_env(&["report", out.to_str().unwrap()], &[("COLUMNS", "200")]);
    assert!(stdout(&r).contains("killed by SIGTERM"), "{}", stdout(&r));
}

// ---- `culedger run` as a wrapper: signals ----------------------------------------------------

/// `cmd` in a process group of its own (so that the test can signal the whole group), with
/// `ignored` ignored and `blocked` blocked, as a caller (`nohup`, a script's background job)
/// would leave them, and every other signal at its default action whatever the test itself
/// inherited (`cargo test` started as a background job has SIGINT and SIGQUIT ignored).
fn as_caller_leaves<'a>(cmd: &'a mut Command, ignored: &'static [i32], blocked: &'static [i32]) -> &'a mut Command {
    cmd.process_group(0);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            for &sig in ignored {
                libc::signal(sig, libc::SIG_IGN);
            }
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &sig in blocked {
                libc::sigaddset(&mut set, sig);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            Ok(())
        })
    }
}

/// The `SigIgn` and `SigBlk` lines of `grep`'s own /proc status.
fn dispositions_of(cmd: &mut Command) -> String {
    let o = cmd.args(["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]).output().unwrap();
    stdout(&o).lines().filter(|l| l.starts_with("Sig")).collect::<Vec<_>>().join("\n")
}

/// CMD starts with the signals ignored and blocked that `culedger run` started with:
/// SIGHUP under `nohup`, SIGINT in a background job, SIGPIPE (passed through either way).
#[test]
fn cmd_keeps_the_ignored_and_blocked_signals_of_its_caller() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let cases: [(&[i32], &[i32]); 3] = [
        (&[], &[]),
        (&[libc::SIGHUP, libc::SIGINT, libc::SIGPIPE, libc::SIGQUIT], &[]),
        (&[libc::SIGPIPE], &[libc::SIGUSR1, libc::SIGTERM]),
    ];
    for (n, (ignored, blocked)) in cases.into_iter().enumerate() {
        let want = dispositions_of(as_caller_leaves(&mut Command::new("env"), ignored, blocked));
        assert!(want.contains("SigIgn"), "{want}");
        let out = d.path().join(format!("out{n}"));
        let got = dispositions_of(as_caller_leaves(&mut run_cmd(&out, &lib), ignored, blocked));
        assert_eq!(got, want, "ignored {ignored:?}, blocked {blocked:?}");
    }
}

/// Wait for `file` to appear (CMD is ready), at most 20 s.
fn wait_for(file: &Path, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{} never appeared", file.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_at_most(child: &mut std::process::Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            // SAFETY: kill(2) on the test's own process group.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `nohup culedger run -- CMD` survives a hangup of the whole group as `nohup CMD` does.
#[test]
fn nohup_keeps_cmd_alive_through_a_hangup() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let script = r#"touch "$READY"; sleep 1"#;
    for wrapped in [false, true] {
        let ready = d.path().join(format!("ready-{wrapped}"));
        let mut cmd = Command::new("nohup");
        if wrapped {
            cmd.arg(culedger_bin()).args(["run", "-o"]).arg(d.path().join("out")).arg("--lib").arg(&lib).arg("--");
        }
        cmd.args(["sh", "-c", script]).env("READY", &ready).current_dir(d.path()).stderr(Stdio::null());
        let mut child = as_caller_leaves(&mut cmd, &[], &[]).spawn().unwrap();
        wait_for(&ready, &mut child);
        // SAFETY: kill(2) on the group the child leads.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGHUP) };
        let status = wait_at_most(&mut child, Duration::from_secs(20));
        assert_eq!(status.code(), Some(0), "wrapped={wrapped}: {status:?}");
    }
}

/// A C program that counts the SIGTERMs it gets: it writes `ready`, and 1.5 s after the
/// first SIGTERM writes the count into `count` and exits.
fn term_counter(dir: &Path) -> PathBuf {
    let src = dir.join("term_counter.c");
    std::fs::write(
        &src,
        r#"#include <signal.h>
#include <stdio.h>
#include <time.h>
static volatile sig_atomic_t n;
static void on_term(int sig) { (void)sig; n++; }
int main(int argc, char **argv) {
    (void)argc;
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    fclose(fopen(argv[1], "w"));
    while (!n) { struct timespec t = {0, 1000000}; nanosleep(&t, NULL); }
    struct timespec rest = {1, 500000000};
    while (nanosleep(&rest, &rest) != 0) {}
    FILE *f = fopen(argv[2], "w");
    fprintf(f, "%d", (int)n);
    fclose(f);
    return 0;
}
"#,
    )
    .unwrap();
    let bin = dir.join("term_counter");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    assert!(Command::new(cc).arg("-o").arg(&bin).arg(&src).status().unwrap().success());
    bin
}

/// A SIGTERM sent to the whole process group reaches CMD once (from the kernel), not a
/// second time forwarded; one sent to `culedger run` alone is forwarded, once.
#[test]
fn a_group_signal_reaches_cmd_once_and_a_targeted_one_is_forwarded() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let counter = term_counter(d.path());
    for (n, to_group) in [true, false, true].into_iter().enumerate() {
        let (ready, count) = (d.path().join(format!("ready{n}")), d.path().join(format!("count{n}")));
        let mut cmd = run_cmd(&d.path().join(format!("out{n}")), &lib);
        cmd.arg(&counter).arg(&ready).arg(&count).stderr(Stdio::null());
        let mut child = as_caller_leaves(&mut cmd, &[], &[]).spawn().unwrap();
        wait_for(&ready, &mut child);
        let pid = child.id() as i32;
        // SAFETY: kill(2) on our child or the group it leads.
        unsafe { libc::kill(if to_group { -pid } else { pid }, libc::SIGTERM) };
        let status = wait_at_most(&mut child, Duration::from_secs(20));
        assert_eq!(status.code(), Some(0), "{status:?}");
        let got = std::fs::read_to_string(&count).unwrap();
        assert_eq!(got.trim(), "1", "SIGTERM to the {}", if to_group { "group" } else { "wrapper alone" });
    }
}

/// ^C (SIGINT to the group) stops a shell loop over `culedger run` as it stops one over
/// CMD: bash goes on only when its child did not die of SIGINT.
#[test]
fn interrupt_stops_a_shell_loop() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    for wrapped in [false, true] {
        let log = d.path().join(format!("iterations-{wrapped}"));
        let wrapper = if wrapped {
            format!(
                "'{}' run --append -o '{}' --lib '{}' --",
                culedger_bin().display(),
                d.path().join("out").display(),
                lib.display()
            )
        } else {
            String::new()
        };
        let ready = d.path().join(format!("ready-{wrapped}"));
        let script = format!(
            r#"for i in 1 2 3; do echo $i >> '{}'; {wrapper} sh -c 'touch "$READY"; exec sleep 2'; done"#,
            log.display()
        );
        let mut cmd = Command::new("bash");
        cmd.args(["-c", &script]).env("READY", &ready).stderr(Stdio::null());
        let mut child = as_caller_leaves(&mut cmd, &[], &[]).spawn().unwrap();
        wait_for(&ready, &mut child);
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: kill(2) on the group bash leads.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
        let status = wait_at_most(&mut child, Duration::from_secs(30));
        assert_eq!(status.signal(), Some(libc::SIGINT), "wrapped={wrapped}: {status:?}");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "1\n", "wrapped={wrapped}: the loop stopped");
    }
}

/// `timeout -s TERM|INT|HUP N culedger run -- CMD` (timeout signals its child, then its whole
/// process group) gives timeout's 124, and CMD's final report says which signal ended it:
/// CMD got the signal once, from the group, and the real interposer wrote the report.
#[test]
fn timeout_ends_a_real_run_with_124_and_a_final_report() {
    let repo = crate_dir().join("..");
    let lib = Path::new(env!("CARGO_BIN_EXE_culedger")).with_file_name("libculedger.so");
    let (sim, program) = (repo.join("target/sim/lib"), repo.join("target/sim/bin/rt_life"));
    if !lib.exists() || !program.exists() {
        eprintln!(
            "timeout_ends_a_real_run_with_124_and_a_final_report: needs {} (make all): not run",
            program.display()
        );
        return;
    }
    let d = tempdir();
    for (name, sig) in [("TERM", libc::SIGTERM), ("INT", libc::SIGINT), ("HUP", libc::SIGHUP)] {
        let out = d.path().join(name);
        let machine = format!("culedger-cli-timeout-{name}-{}", std::process::id());
        let mut cmd = Command::new("timeout");
        cmd.args(["-s", name, "2"]).arg(culedger_bin()).arg("run").arg("-o").arg(&out).arg("--lib").arg(&lib);
        cmd.arg("--").arg(&program).arg("hold");
        cmd.env("LD_LIBRARY_PATH", &sim).env("FAKECUDA_MACHINE", &machine).env("NO_COLOR", "1");
        // Whatever the test runner inherited (a background job ignores SIGINT).
        as_caller_leaves(&mut cmd, &[], &[]);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                    libc::signal(s, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let o = cmd.output().unwrap();
        let _ = std::fs::remove_file(format!("/dev/shm/fakecuda-{machine}"));
        assert_eq!(o.status.code(), Some(124), "{name}: {}", stderr(&o));
        let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
        assert_eq!(summary["signal"], sig, "{name}");
        let procs = summary["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 1, "{name}: {}", stderr(&o));
        let process = &procs[0]["process"];
        assert_eq!(
            (process["exit"].as_str(), process["signal"].as_i64()),
            (Some("signal"), Some(i64::from(sig))),
            "{name}"
        );
    }
}
