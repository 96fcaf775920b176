//! `culedger run` end to end with a stand-in interposer (an empty shared library built
//! here): environment, exit status, signal forwarding and the summary merge. The child is
//! a shell script that plays the interposer's part by writing a report into $CULEDGER_OUT.

mod common;
use common::*;
use serde_json::Value;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `culedger` under test: this build, or `CULEDGER_CLI` (another build, to see a test
/// fail before a fix).
fn culedger_bin() -> PathBuf {
    std::env::var_os("CULEDGER_CLI").map(PathBuf::from).unwrap_or_else(|| env!("CARGO_BIN_EXE_culedger").into())
}

fn run_cmd(out: &Path, lib: &Path) -> Command {
    let mut c = Command::new(culedger_bin());
    c.current_dir(crate_dir()).env("NO_COLOR", "1").env_remove("CULEDGER_LIB");
    c.args(["run", "-o", out.to_str().unwrap(), "--lib", lib.to_str().unwrap(), "--"]);
    c
}

#[test]
fn environment_exit_status_and_summary() {
    let d = tempdir();
    let (lib, other) = (stub_lib(d.path(), "libstub"), stub_lib(d.path(), "libother"));
    let out = d.path().join("out");
    let fixture = fixtures().join("nccl/culedger-4101.json");
    let script = format!(
        r#"printf '%s\n%s\n%s\n' "$LD_PRELOAD" "$CULEDGER_OUT" "$CULEDGER_RUN_ID" > "$CULEDGER_OUT/env.txt"
sed -e "s/\"pid\": 4101,/\"pid\": $$,/" -e "s/\"nccl-run\"/\"$CULEDGER_RUN_ID\"/" '{}' > "$CULEDGER_OUT/culedger-$$.json"
echo 'not json' > "$CULEDGER_OUT/culedger-1.json"
exit 3"#,
        fixture.display()
    );
    let o = run_cmd(&out, &lib).args(["sh", "-c", &script]).env("LD_PRELOAD", &other).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");

    let env = std::fs::read_to_string(out.join("env.txt")).unwrap();
    let lines: Vec<&str> = env.lines().collect();
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap().display().to_string();
    assert_eq!(lines[0], format!("{}:{}", canon(&lib), other.display()), "LD_PRELOAD prepended");
    assert_eq!(lines[1], canon(&out), "CULEDGER_OUT is the absolute output directory");
    let run_id = lines[2];
    assert_eq!(run_id.len(), "20260101-120000-3fa9c1".len(), "CULEDGER_RUN_ID for the whole tree: {run_id}");

    let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["schema"], "culedger-summary/1");
    assert_eq!(summary["run_id"], run_id);
    assert_eq!(summary["exit_code"], 3);
    assert_eq!(summary["signal"], Value::Null);
    assert!(summary["pid"].as_i64().unwrap() > 0);
    assert_eq!(summary["command"][0], "sh");
    assert_eq!(summary["command"][2], script.as_str());
    let procs = summary["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "the broken report is skipped");
    assert_eq!(procs[0]["schema"], "culedger/1");
    assert_ne!(procs[0]["process"]["pid"], 4101);
    assert!(err.contains("skipping") && err.contains("culedger-1.json"), "{err}");
    // The one screen: the run, how CMD ended, the verdict, a line per GPU, where to go next.
    let screen: Vec<&str> = err.lines().skip_while(|l| !l.starts_with("culedger: /")).collect();
    assert!(screen[0].ends_with("/out (1 process, 1 GPU; exit status 3)"), "{err}");
    assert!(screen[1].starts_with("no allocation failed; the fullest device was sim-host GPU 0"), "{err}");
    assert!(screen.iter().any(|l| l.starts_with("| GPU 0 ")), "{err}");
    assert!(screen.iter().any(|l| l.starts_with("  culedger report /") && l.contains("/out ")), "{err}");
    assert!(!err.contains("== sim-host GPU 0"), "the full report only with --report: {err}");
    assert!(err.contains("1 report(s) merged into"), "{err}");

    // The merged summary reads back like the run directory.
    let o = culedger(&["report", out.join("summary.json").to_str().unwrap(), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

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

/// `culedger run` never adds its reports to another run's directory by accident.
#[test]
fn a_directory_of_another_run_is_refused_unless_appending() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let out = d.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(fixtures().join("nccl/culedger-4101.json"), out.join("culedger-4101.json")).unwrap();
    let o = run_cmd(&out, &lib).args(["sh", "-c", "touch \"$CULEDGER_OUT/ran\""]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("holds the reports of another run (1 file, run nccl-run); choose another -o"), "{err}");
    assert!(!out.join("ran").exists(), "the command did not run");
    // --append: this run writes there too, and its summary holds only its own reports,
    // though the other run's file was rewritten (fresh) meanwhile.
    let fixture = fixtures().join("nccl/culedger-4102.json");
    let script = format!(
        r#"touch "$CULEDGER_OUT/culedger-4101.json"
sed -e "s/\"pid\": 4102,/\"pid\": $$,/" -e "s/\"nccl-run\"/\"$CULEDGER_RUN_ID\"/" '{}' > "$CULEDGER_OUT/culedger-$$.json""#,
        fixture.display()
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_culedger"));
    cmd.current_dir(crate_dir()).env("NO_COLOR", "1");
    cmd.args([
        "run",
        "--append",
        "-o",
        out.to_str().unwrap(),
        "--lib",
        lib.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let procs = summary["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "only this run's report");
    assert_eq!(procs[0]["process"]["run_id"], summary["run_id"]);
    // Reading the directory now needs a choice.
    let o = culedger(&["report", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("reports of 2 different runs"), "{}", stderr(&o));
}

#[test]
fn default_directories_are_unique() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let dirs: Vec<String> = (0..3)
        .map(|_| {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_culedger"))
                .current_dir(d.path())
                .args(["run", "--lib", lib.to_str().unwrap(), "--", "sh", "-c", "echo \"$CULEDGER_OUT\""])
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            stdout(&o).trim().to_string()
        })
        .collect();
    let unique: std::collections::BTreeSet<&String> = dirs.iter().collect();
    assert_eq!(unique.len(), 3, "{dirs:?}");
}

/// The command in summary.json is redacted like the per-process reports' argv.
#[test]
fn the_summary_command_is_redacted() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let out = d.path().join("out");
    let o = run_cmd(&out, &lib)
        .args([
            "sh",
            "-c",
            "exit 0",
            "serve",
            "--api-key",
            "sk-secret",
            "--hf-token=hf_abc",
            "HF_TOKEN=x",
            "--port",
            "80",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(!text.contains("sk-secret") && !text.contains("hf_abc") && !text.contains("HF_TOKEN=x"), "{text}");
    let summary: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        summary["command"],
        serde_json::json!([
            "sh",
            "-c",
            "exit 0",
            "serve",
            "--api-key",
            "<redacted>",
            "--hf-token=<redacted>",
            "HF_TOKEN=<redacted>",
            "--port",
            "80"
        ])
    );
}

#[test]
fn interposer_lookup() {
    let d = tempdir();
    let out = d.path().join("out");
    // An explicit --lib that does not exist.
    let o = culedger(&["run", "-o", out.to_str().unwrap(), "--lib", "/nonexistent/libculedger.so", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/libculedger.so: interposer not found (--lib)"), "{}", stderr(&o));
    // CULEDGER_LIB is used when --lib is absent.
    let lib = stub_lib(d.path(), "libstub");
    let o = Command::new(env!("CARGO_BIN_EXE_culedger"))
        .args(["run", "-o", d.path().join("out2").to_str().unwrap(), "--", "sh", "-c", "echo \"$LD_PRELOAD\""])
        .env("CULEDGER_LIB", &lib)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), std::fs::canonicalize(&lib).unwrap().display().to_string());
    // Otherwise the library next to the binary (target/release/libculedger.so).
    let next_to = Path::new(env!("CARGO_BIN_EXE_culedger")).with_file_name("libculedger.so");
    let o = culedger(&["run", "-o", d.path().join("out3").to_str().unwrap(), "--", "true"]);
    if next_to.exists() {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    } else {
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("interposer not found (next to the culedger binary)"), "{}", stderr(&o));
    }
}

#[test]
fn default_output_directory_is_timestamped() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let o = Command::new(env!("CARGO_BIN_EXE_culedger"))
        .current_dir(d.path())
        .args(["run", "--lib", lib.to_str().unwrap(), "--", "sh", "-c", "echo \"$CULEDGER_OUT\""])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dir = stdout(&o).trim().to_string();
    let name = Path::new(&dir).file_name().unwrap().to_str().unwrap().to_string();
    // culedger-YYYYmmdd-HHMMSS
    assert_eq!(name.len(), "culedger-20260101-000000".len(), "{name}");
    assert!(name.starts_with("culedger-") && name[9..17].chars().all(|c| c.is_ascii_digit()) && &name[17..18] == "-");
    assert!(Path::new(&dir).join("summary.json").is_file());
}

/// `--report` ends with the full report, as before the one screen.
#[test]
fn the_full_report_on_request() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let out = d.path().join("out");
    let fixture = fixtures().join("nccl/culedger-4101.json");
    let script = format!(
        r#"sed -e "s/\"pid\": 4101,/\"pid\": $$,/" -e "s/\"nccl-run\"/\"$CULEDGER_RUN_ID\"/" '{}' > "$CULEDGER_OUT/culedger-$$.json""#,
        fixture.display()
    );
    let o = Command::new(env!("CARGO_BIN_EXE_culedger"))
        .current_dir(crate_dir())
        .env("NO_COLOR", "1")
        .env_remove("CULEDGER_LIB")
        .args(["run", "--report", "-o", out.to_str().unwrap(), "--lib", lib.to_str().unwrap(), "--"])
        .args(["sh", "-c", &script])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("culedger report:") && err.contains("== sim-host GPU 0"), "{err}");
}

#[test]
fn a_command_that_cannot_start() {
    let d = tempdir();
    let lib = stub_lib(d.path(), "libstub");
    let o = run_cmd(&d.path().join("out"), &lib).arg("/nonexistent/program").output().unwrap();
    assert_eq!(o.status.code(), Some(127));
    assert!(stderr(&o).contains("/nonexistent/program: cannot run"), "{}", stderr(&o));
    assert!(!d.path().join("out").exists(), "the directory made for it is not left behind");
    // Nor the default one; a directory that was there before stays.
    let o = Command::new(env!("CARGO_BIN_EXE_culedger"))
        .current_dir(d.path())
        .args(["run", "--lib", lib.to_str().unwrap(), "--", "no_such_cmd"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    let left: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("culedger-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::create_dir(d.path().join("mine")).unwrap();
    let o = run_cmd(&d.path().join("mine"), &lib).arg("/nonexistent/program").output().unwrap();
    assert_eq!(o.status.code(), Some(127));
    assert!(d.path().join("mine").is_dir());
}

/// With the real interposer and the simulated CUDA stack built (`make all`), the demo
/// scenario end to end in both configurations. Without them there is nothing to run this
/// against (the CLI is built and tested on its own), and the test says so.
#[test]
fn real_interposer_on_the_simulated_stack() {
    let repo = crate_dir().join("..");
    let lib = Path::new(env!("CARGO_BIN_EXE_culedger")).with_file_name("libculedger.so");
    let sim = repo.join("target/sim/lib");
    if !lib.exists() || !sim.join("libcudart.so.12").exists() {
        eprintln!(
            "real_interposer_on_the_simulated_stack: needs {} and {} (make all): not run",
            lib.display(),
            sim.display()
        );
        return;
    }
    let d = tempdir();
    for (cfg, expected) in [("nccl", 0), ("custom", 1)] {
        let out = d.path().join(cfg);
        let machine = format!("culedger-cli-test-{cfg}-{}", std::process::id());
        let o = Command::new(env!("CARGO_BIN_EXE_culedger"))
            .current_dir(&repo)
            .args(["run", "-o", out.to_str().unwrap(), "--lib", lib.to_str().unwrap(), "--", "python3"])
            .args(["shim-tests/py/engines/sglang_server.py", "--tp", "2", "--model-mib", "1024", "--layers", "4"])
            .args(["--attention-workspace-mib", "64", "--mem-fraction-static", "0.85"])
            .args(["--allreduce", cfg])
            .env("LD_LIBRARY_PATH", &sim)
            .env("FAKECUDA_MACHINE", &machine)
            .env("FAKECUDA_DEVICES", "2")
            .env("FAKECUDA_TOTAL_MIB", "4096")
            .env("FAKECUDA_PEER_MIB", "256")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let _ = std::fs::remove_file(format!("/dev/shm/fakecuda-{machine}"));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(expected), "{cfg}: {}{err}", stdout(&o));
        let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
        let procs = summary["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 3, "{cfg}: the launcher and two ranks: {err}");
        let failures: i64 = procs
            .iter()
            .flat_map(|p| p["devices"].as_array().unwrap().iter())
            .map(|d| d["failures_total"].as_i64().unwrap())
            .sum();
        assert_eq!(failures > 0, expected == 1, "{cfg}: failures recorded {failures}");
        assert!(err.contains("| GPU 1 "), "{cfg}: {err}");
        // One run id for the process tree; the ranks named by their titles.
        let ids: std::collections::BTreeSet<&str> =
            procs.iter().map(|p| p["process"]["run_id"].as_str().unwrap()).collect();
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), [summary["run_id"].as_str().unwrap()], "{cfg}");
        let report = stdout(&culedger(&["report", out.to_str().unwrap()]));
        assert!(report.contains("sglang::scheduler_TP1 (rank 1/2)"), "{cfg}: {report}");
        // The program's own output comes first; culedger's screen starts at its title.
        let screen = err.lines().skip_while(|l| !l.starts_with("culedger: /")).count();
        assert!(screen > 5 && screen <= 30, "{cfg}: one screen of {screen} lines: {err}");
    }
    let o = culedger(&["diff", d.path().join("nccl").to_str().unwrap(), d.path().join("custom").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("custom/ ran out of memory:"), "{}", stdout(&o));
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
