//! The report over a process's life: every way it ends (return, `exit` from several threads at
//! once, `pthread_exit` from `main`, `quick_exit`, statuses above 255, signals at their default
//! action or handled by the program), every way it replaces itself (each `exec*` form, a failing
//! exec), `fork` with busy threads, `posix_spawn`/`system`/`vfork`, processes that share a pid
//! (containers), and the temporaries a killed writer leaves behind. Scenario: `c/rt_life.c`.
//!
//! The periodic write is pushed out of reach (`CULEDGER_FLUSH_MS=60000`) unless a test says
//! otherwise: every report checked here is one the lifecycle itself wrote.
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both); `CULEDGER_LIB`
//! runs the same tests against another build of the library (to see them fail before a fix).

use culedger_scenarios::{bin, repo_root, Run, Sim};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn libculedger() -> PathBuf {
    let p = std::env::var_os("CULEDGER_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/release/libculedger.so"));
    assert!(p.is_file(), "{} is missing: run `make` first", p.display());
    p
}

/// A simulated machine whose programs run under culedger, writing into `out`.
struct Lab {
    sim: Sim,
    out: PathBuf,
}

impl Lab {
    fn new(name: &str) -> Lab {
        let mut sim = Sim::new(name);
        let out = sim.scratch().join("out");
        sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out).env("CULEDGER_FLUSH_MS", "60000");
        sim.timeout(Duration::from_secs(20));
        Lab { sim, out }
    }

    /// `rt_life ARGS` with the signals culedger may catch at their default action, whatever
    /// the test runner inherited (`nohup`, a shell's background job).
    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = self.sim.cmd("rt_life");
        cmd.args(args);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        cmd
    }

    fn run(&self, args: &[&str]) -> Run {
        self.sim.run(&mut self.cmd(args))
    }

    /// Start `rt_life ARGS`, wait for its `READY`, send `sig`, and wait for its end.
    fn signal_when_ready(&self, args: &[&str], sig: i32) -> (ExitStatus, String) {
        let mut child = self.cmd(args).spawn().expect("start rt_life");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line == "READY" {
                    let _ = tx.send(());
                }
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} never became ready:\n{}", reader.join().unwrap());
        }
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = wait_at_most(&mut child, Duration::from_secs(20));
        (status, reader.join().unwrap())
    }

    /// Every report written: (file name, document).
    fn reports(&self) -> Vec<(String, Value)> {
        let Ok(rd) = std::fs::read_dir(&self.out) else { return Vec::new() };
        let mut v: Vec<(String, Value)> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("culedger-") && n.ends_with(".json"))
            .map(|n| {
                let text = std::fs::read_to_string(self.out.join(&n)).unwrap();
                let doc = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{n}: {e}\n{text}"));
                (n, doc)
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// The only report; panics if there is not exactly one.
    fn report(&self) -> Value {
        let mut all = self.reports();
        assert_eq!(all.len(), 1, "expected one report in {}: {:?}", self.out.display(), names(&all));
        all.remove(0).1
    }

    fn clear(&self) {
        let _ = std::fs::remove_dir_all(&self.out);
    }
}

fn names(reports: &[(String, Value)]) -> Vec<&str> {
    reports.iter().map(|(n, _)| n.as_str()).collect()
}

fn wait_at_most(child: &mut std::process::Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the process did not end within {limit:?} (killed)");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn live(report: &Value) -> u64 {
    report["devices"].as_array().and_then(|d| d.first()).and_then(|d| d["live_bytes"].as_u64()).unwrap_or(0)
}

/// `process.exit`, `process.exit_code`, `process.signal`.
fn ending(report: &Value) -> (String, Option<i64>, Option<i64>) {
    let p = &report["process"];
    (p["exit"].as_str().unwrap_or("?").to_string(), p["exit_code"].as_i64(), p["signal"].as_i64())
}

fn exited(code: i64) -> (String, Option<i64>, Option<i64>) {
    ("exit".into(), Some(code), None)
}

// ---- how a process ends -------------------------------------------------------------------------

/// `main` ending with `pthread_exit` once hung forever under culedger: the flush thread kept
/// the process alive and blocked every signal. It must end as it does without culedger (exit
/// status 0 once the last program thread is gone), with its final report.
#[test]
fn main_ending_with_pthread_exit_ends_the_process_with_its_final_report() {
    // The last: a worker that allocates, then calls exit(4), after main's pthread_exit.
    for (mode, code) in [("pthread_exit", 0), ("pthread_exit_worker", 0), ("pthread_exit_worker_exit4", 4)] {
        let lab = Lab::new(mode);
        let start = Instant::now();
        let run = lab.run(&[mode]);
        assert_eq!(run.status.and_then(|s| s.code()), Some(code as i32), "{mode}: {}", run.describe());
        assert!(start.elapsed() < Duration::from_secs(10), "{mode}: took {:?}", start.elapsed());
        let r = lab.report();
        assert_eq!(ending(&r), exited(code), "{mode}");
        assert_eq!(live(&r), run.u64("live"), "{mode}");
    }
}

/// A program that blocks SIGTERM in every thread and takes it with sigwait must keep
/// getting it: the flush thread never takes a process-directed signal for itself.
#[test]
fn a_signal_every_program_thread_blocks_stays_the_programs() {
    let lab = Lab::new("sigwait");
    let (status, out) = lab.signal_when_ready(&["sigwait"], libc::SIGTERM);
    assert_eq!(status.code(), Some(5), "{out}");
    assert!(out.contains("RESULT got=15"), "{out}");
    assert_eq!(ending(&lab.report()), exited(5));
}

/// SIGTERM, SIGINT and SIGHUP at their default action: the final report is written, and the
/// process still ends by the signal.
#[test]
fn default_action_signals_write_the_final_report_and_keep_the_status() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let lab = Lab::new("hold");
        let (status, out) = lab.signal_when_ready(&["hold"], sig);
        assert_eq!(status.signal(), Some(sig), "ended by the signal itself: {status:?}\n{out}");
        let r = lab.report();
        assert_eq!(ending(&r), ("signal".into(), None, Some(i64::from(sig))));
        assert_eq!(live(&r), 300 * MIB, "both allocations");
    }
}

/// SIGTERM while threads are inside hooks (a signal that lands inside culedger's bookkeeping
/// is handled when the bookkeeping ends): always a final report, never a hang.
#[test]
fn a_signal_landing_inside_a_hook_still_writes_the_final_report() {
    // The main thread blocks the signal: it goes to a worker, inside a hook about a third of
    // the time.
    for round in 0..12 {
        let lab = Lab::new("churn");
        let (status, out) = lab.signal_when_ready(&["churn_hold"], libc::SIGTERM);
        assert_eq!(status.signal(), Some(libc::SIGTERM), "round {round}\n{out}");
        let r = lab.report();
        assert_eq!(ending(&r), ("signal".into(), None, Some(15)), "round {round}");
        assert!(live(&r) >= 32 * MIB, "round {round}");
    }
}

/// A signal that comes just after culedger started reporting, on a loaded machine: the
/// flush thread starts with every signal blocked, so no handler ever runs on it (ours, run
/// there, waited for the flush thread itself and gave up after 5 s without a report).
#[test]
fn a_signal_right_after_the_first_hooked_call_never_runs_on_the_flush_thread() {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hogs: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let mut failures = Vec::new();
    for round in 0..20 {
        let lab = Lab::new("early_signal");
        let start = Instant::now();
        let (status, _) = lab.signal_when_ready(&["hold"], libc::SIGTERM);
        let reports = lab.reports();
        if status.signal() != Some(libc::SIGTERM) || reports.len() != 1 || start.elapsed() > Duration::from_secs(4) {
            failures.push(format!("round {round}: {status:?}, {} report(s), {:?}", reports.len(), start.elapsed()));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    hogs.into_iter().for_each(|h| h.join().unwrap());
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The caught signals as /proc shows them (`SigCgt`), for a process at its READY line.
fn caught_signals(lab: &Lab) -> u64 {
    let mut child = lab.cmd(&["hold"]).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let field = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).unwrap();
    u64::from_str_radix(field.trim(), 16).unwrap()
}

#[test]
fn signals_are_caught_as_configured_and_not_at_all_when_off() {
    let bit = |sig: i32| 1u64 << (sig - 1);
    let lab = Lab::new("sigcgt");
    let caught = caught_signals(&lab);
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        assert_ne!(caught & bit(sig), 0, "signal {sig} is not caught: {caught:x}");
    }
    assert_eq!(caught & bit(libc::SIGQUIT), 0, "QUIT is not in the default set");
    let mut lab = Lab::new("sigcgt_off");
    lab.sim.env("CULEDGER_SIGNALS", "off");
    assert_eq!(caught_signals(&lab) & (bit(libc::SIGTERM) | bit(libc::SIGINT) | bit(libc::SIGHUP)), 0);
    let (status, _) = lab.signal_when_ready(&["hold"], libc::SIGTERM);
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    assert!(lab.reports().is_empty(), "opted out: no final report, and no periodic one yet");
    let mut lab = Lab::new("sigcgt_quit");
    lab.sim.env("CULEDGER_SIGNALS", "QUIT,usr1");
    let caught = caught_signals(&lab);
    assert_eq!(
        caught & (bit(libc::SIGQUIT) | bit(libc::SIGUSR1) | bit(libc::SIGTERM)),
        bit(libc::SIGQUIT) | bit(libc::SIGUSR1)
    );
}

/// A program that installs its own handler keeps full control, and its queries never see
/// culedger's handler; the cleanup-then-reraise idiom ends the process by the signal, with a
/// final report.
#[test]
fn the_program_keeps_control_of_its_signals() {
    for how in ["sigaction", "signal"] {
        let lab = Lab::new(how);
        let (status, out) = lab.signal_when_ready(&["handler", how], libc::SIGTERM);
        assert_eq!(status.code(), Some(7), "{how}: the program's handler ran and exited\n{out}");
        for key in ["dfl_before=1", "prev_dfl=1", "own_after=1", "int_prev_dfl=1", "int_now_dfl=1", "handled=15"] {
            assert!(out.contains(key), "{how}: {key}\n{out}");
        }
        assert_eq!(ending(&lab.report()), exited(7), "{how}");
    }
    let lab = Lab::new("reraise");
    let (status, out) = lab.signal_when_ready(&["handler", "reraise"], libc::SIGTERM);
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{out}");
    assert_eq!(ending(&lab.report()), ("signal".into(), None, Some(15)));
}

/// `rt_life ARGS` run without culedger, as ground truth.
fn bare(lab: &Lab, args: &[&str]) -> Run {
    let mut cmd = lab.cmd(args);
    cmd.env_remove("LD_PRELOAD");
    lab.sim.run(&mut cmd)
}

fn result_lines(run: &Run) -> Vec<&str> {
    run.stdout.lines().filter(|l| l.starts_with("RESULT ")).collect()
}

/// Every answer about the dispositions of the signals culedger catches is the one glibc
/// gives without culedger, field for field: the handler, the flags (with the `SA_RESTORER`
/// glibc adds, without the bits the kernel drops, `SA_RESTART` as `siginterrupt` left it),
/// the mask as set (less `SIGKILL` and `SIGSTOP`) and the restorer, through `sigaction`,
/// `signal`, `bsd_signal`, `sysv_signal` and `siginterrupt`.
#[test]
fn every_answer_about_a_disposition_is_glibcs() {
    let lab = Lab::new("sigview");
    let want = bare(&lab, &["sigview"]);
    want.assert_success();
    let got = lab.run(&["sigview"]);
    got.assert_success();
    let (want, got) = (result_lines(&want), result_lines(&got));
    assert!(want.len() > 100, "{want:?}");
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(g, w, "under culedger (left) and without it (right)");
    }
    assert_eq!(got.len(), want.len());
    assert_eq!(ending(&lab.report()), exited(0), "the program ran under culedger to its end");
}

/// `siginterrupt(SIGTERM, 1)` then a handler by `signal()`: a blocking read the signal
/// interrupts fails with `EINTR` (it does not restart and wait for the data), whether
/// `siginterrupt` came before culedger's activation or after.
#[test]
fn siginterrupt_keeps_a_handler_interrupting() {
    for when in ["before", "after"] {
        let lab = Lab::new(&format!("sigintr_{when}"));
        let want = bare(&lab, &["sigintr", when]);
        assert_eq!(want.value("read"), "-1", "{}", want.describe());
        let got = lab.run(&["sigintr", when]);
        got.assert_success();
        assert_eq!(
            (got.value("read"), got.value("eintr"), got.value("handled")),
            ("-1", "1", "15"),
            "{when}: {}",
            got.describe()
        );
        assert_eq!(ending(&lab.report()), exited(0), "{when}");
    }
}

/// Two copies of the library preloaded (a wheel's and a build's): the copy ahead in the
/// search order reports, the other stands down without a report, and each allocation is
/// counted once. In either order.
#[test]
fn a_second_preloaded_copy_stands_down_without_a_report() {
    for first in [true, false] {
        let mut lab = Lab::new(&format!("two_copies_{first}"));
        let copy = lab.sim.scratch().join("wheel/culedger/libculedger.so");
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::copy(libculedger(), &copy).unwrap();
        let (a, b) = if first { (libculedger(), copy) } else { (copy, libculedger()) };
        lab.sim.env("LD_PRELOAD", format!("{}:{}", a.display(), b.display()));
        let run = lab.run(&["exec_child"]);
        run.assert_success();
        assert!(!run.stderr.contains("culedger:"), "{}", run.describe());
        let report = lab.report();
        assert_eq!(live(&report), run.u64("child_live"), "counted once");
        assert_eq!(ending(&report), exited(0));
    }
}

#[test]
fn quick_exit_writes_the_final_report_after_the_programs_handlers() {
    let lab = Lab::new("quick_exit");
    let run = lab.run(&["quick_exit"]);
    assert_eq!(run.status.and_then(|s| s.code()), Some(9), "{}", run.describe());
    let r = lab.report();
    assert_eq!(ending(&r), exited(9));
    assert_eq!(live(&r), run.u64("live"), "the program's at_quick_exit handler freed 2 MiB first");
}

/// `exit(300)` ends with status 44: the report says what the parent sees.
#[test]
fn the_exit_code_is_what_the_parent_sees() {
    for mode in ["exit300", "_exit300"] {
        let lab = Lab::new(mode);
        let run = lab.run(&[mode]);
        assert_eq!(run.status.and_then(|s| s.code()), Some(44), "{mode}");
        assert_eq!(ending(&lab.report()), exited(44), "{mode}");
    }
}

/// Two threads calling `exit` at once (and a third returning from `main`): with glibc 2.36
/// the second one ended the process while the first was writing the report.
#[test]
fn concurrent_exits_keep_the_final_report() {
    for (who, threads) in [("workers", "2"), ("main", "2"), ("workers", "4")] {
        let lab = Lab::new("exit_race");
        for round in 0..8 {
            lab.clear();
            let run = lab.run(&["exit_race", who, threads]);
            let code = run.status.and_then(|s| s.code()).unwrap_or_else(|| panic!("{}", run.describe()));
            assert!(code == 3 || (10..14).contains(&code), "{who} round {round}: {code}");
            let r = lab.report();
            assert_eq!(ending(&r), exited(i64::from(code)), "{who} {threads} round {round}");
            assert_eq!(live(&r), run.u64("live"));
        }
    }
}

// ---- how a process replaces itself --------------------------------------------------------------

/// Every exec form: the old image's report is final (`exec`), the new image writes its own
/// (same pid, another file).
#[test]
fn exec_writes_the_report_and_the_new_image_starts_its_own() {
    for how in ["execve", "execv", "execvp", "execvpe", "execl", "execle", "execlp", "fexecve", "execveat", "threaded"]
    {
        let lab = Lab::new(how);
        // `threaded`: execv from a second thread while a third allocates without pause;
        // `execveat`: `execveat(fd, "", AT_EMPTY_PATH)`.
        let run = if how == "threaded" { lab.run(&["exec_threaded"]) } else { lab.run(&["exec", how, "child"]) };
        assert_eq!(run.status.and_then(|s| s.code()), Some(0), "{how}: {}", run.describe());
        let reports = lab.reports();
        assert_eq!(reports.len(), 2, "{how}: {:?}", names(&reports));
        let pid = run.u64("parent_pid");
        assert_eq!(run.u64("child_pid"), pid, "{how}: exec keeps the pid");
        let old = &reports.iter().find(|(_, r)| r["process"]["exit"] == "exec").expect("the old image's").1;
        let new = &reports.iter().find(|(_, r)| r["process"]["exit"] == "exit").expect("the new image's").1;
        assert_eq!(old["process"]["pid"].as_u64(), Some(pid));
        assert_eq!(new["process"]["pid"].as_u64(), Some(pid));
        assert_eq!(live(old), run.u64("parent_live"), "{how}");
        assert_eq!(ending(old), ("exec".into(), None, None), "{how}");
        assert_eq!(live(new), run.u64("child_live"), "{how}");
        assert_eq!(ending(new), exited(0), "{how}");
    }
    // A new image that never touches CUDA writes nothing: the old report stays.
    let lab = Lab::new("exec_true");
    let run = lab.run(&["exec", "execv", "true"]);
    assert_eq!(run.status.and_then(|s| s.code()), Some(0), "{}", run.describe());
    let r = lab.report();
    assert_eq!(ending(&r), ("exec".into(), None, None));
    assert_eq!(live(&r), run.u64("parent_live"));
}

/// `execl` (a variadic entry culedger writes in assembly) passes every argument, 0 to 130 of
/// them (past the argument registers, and past the 64 kept without allocating).
#[test]
fn execl_passes_any_number_of_arguments() {
    for n in ["0", "1", "4", "5", "6", "63", "64", "65", "130"] {
        let lab = Lab::new(&format!("execl_{n}"));
        let run = lab.run(&["execl_many", n]);
        run.assert_success();
        assert_eq!((run.value("args"), run.value("in_order")), (n, "1"), "{}", run.describe());
        assert_eq!(ending(&lab.report()), ("exec".into(), None, None), "{n}");
    }
}

/// A failing exec returns to the program, which goes on: so does its report (the exec write
/// is not final), and errno is the exec's.
#[test]
fn a_failed_exec_goes_on_reporting() {
    let mut lab = Lab::new("exec_fail");
    lab.sim.env("CULEDGER_FLUSH_MS", "20");
    let run = lab.run(&["exec_fail"]);
    run.assert_success();
    assert_eq!(run.value("exec_rc"), "-1");
    assert_eq!(run.u64("exec_errno"), libc::ENOENT as u64);
    let r = lab.report();
    assert_eq!(ending(&r), exited(0));
    assert_eq!(live(&r), run.u64("live"), "the allocation after the failed exec counts");
}

// ---- fork, posix_spawn, system, vfork ------------------------------------------------------------

#[test]
fn forks_with_busy_threads_give_each_child_its_own_exact_report() {
    let lab = Lab::new("fork_busy");
    let run = lab.run(&["fork_busy", "150"]);
    run.assert_success();
    assert_eq!(run.u64("ok"), 150);
    let parent = run.u64("parent_pid");
    let reports = lab.reports();
    assert_eq!(reports.len(), 151, "the parent and every child");
    for (name, r) in &reports {
        assert_eq!(ending(r), exited(0), "{name}");
        if r["process"]["pid"].as_u64() == Some(parent) {
            assert_eq!(live(r), run.u64("live"));
            continue;
        }
        assert_eq!(r["process"]["forked_from"].as_u64(), Some(parent), "{name}");
        let d = &r["devices"][0];
        assert_eq!(d["live_bytes"].as_u64(), Some(0), "{name}: nothing of the parent's");
        assert_eq!(d["alloc_count"].as_u64(), Some(0), "{name}");
        assert_eq!(d["failures"][0]["bytes"].as_u64(), Some(run.u64("child_want")), "{name}");
    }
}

#[test]
fn posix_spawn_system_and_vfork_children_leave_the_report_alone() {
    let lab = Lab::new("spawners");
    let run = lab.run(&["spawners"]);
    run.assert_success();
    for (key, want) in [("system", 3), ("posix_spawn", 0), ("vfork_exec", 0), ("vfork_exit", 5)] {
        assert_eq!(run.u64(key), want, "{key}: {}", run.describe());
    }
    let r = lab.report();
    assert_eq!(ending(&r), exited(0), "a vfork child's exec or _exit is not ours");
    assert_eq!(live(&r), run.u64("live"));
}

// ---- names and temporaries --------------------------------------------------------------------------

/// Runs `rt_life exec_child` as pid 1 of a new pid namespace (a container's view) with host
/// name `host`; None when this machine does not allow it (no privileges for namespaces).
fn in_container(lab: &Lab, host: &str) -> Option<Command> {
    let probe = Command::new("unshare").args(["--pid", "--fork", "--mount-proc", "--uts", "true"]).output().ok()?;
    if !probe.status.success() {
        return None;
    }
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", "--uts", "sh", "-c", "hostname \"$0\" && exec \"$1\" exec_child"])
        .arg(host)
        .arg(bin("rt_life"));
    lab.sim.apply_env(&mut cmd);
    Some(cmd)
}

/// Two containers' programs, both pid 1 on one host name, writing into one directory; then a
/// restart that gets pid 1 again; then another host name: every process keeps its report.
/// (Without privileges for namespaces, the unit test
/// `same_pid_host_and_start_never_overwrite_each_other` covers the same naming path.)
#[test]
fn processes_with_the_same_pid_keep_their_own_reports() {
    let lab = Lab::new("samepid");
    let Some(_) = in_container(&lab, "box") else {
        eprintln!("note: unshare is not permitted here; the naming path is covered by the unit tests");
        return;
    };
    let spawn = |host: &str| in_container(&lab, host).unwrap().stdout(Stdio::null()).spawn().unwrap();
    let (mut a, mut b) = (spawn("box"), spawn("box"));
    for child in [&mut a, &mut b] {
        assert!(wait_at_most(child, Duration::from_secs(20)).success());
    }
    let restarted = lab.sim.run_ok(&mut in_container(&lab, "box").unwrap());
    assert_eq!(restarted.u64("child_pid"), 1, "a container's first process");
    assert!(wait_at_most(&mut spawn("other-box"), Duration::from_secs(20)).success());
    let reports = lab.reports();
    assert_eq!(reports.len(), 4, "{:?}", names(&reports));
    for (name, r) in &reports {
        assert_eq!(r["process"]["pid"].as_u64(), Some(1), "{name}");
        assert_eq!(ending(r), exited(0), "{name}");
        assert_eq!(live(r), 20 * MIB, "{name}");
        let host = r["process"]["host"].as_str().unwrap();
        assert!(name.starts_with(&format!("culedger-{host}-1-")), "{name} names its host and pid");
    }
    assert_eq!(reports.iter().filter(|(n, _)| n.starts_with("culedger-other-box-1-")).count(), 1);
}

/// This boot's id as temporaries' names carry it (16 hex digits).
fn boot_id() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    raw.chars().filter(char::is_ascii_hexdigit).take(16).collect::<String>().to_ascii_lowercase()
}

/// How a temporary's name identifies its writer: boot id, pid namespace, pid, start time
/// in clock ticks.
fn writer_tag(boot: &str, pid: u32, start: u64) -> String {
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let ns = ns.to_str().unwrap().trim_start_matches("pid:[").trim_end_matches(']').to_string();
    format!("{boot}-{ns}-{pid}-{start}")
}

fn start_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split_whitespace().nth(19).unwrap().parse().unwrap()
}

fn age_by_two_days(path: &Path) {
    let old = libc::timespec {
        tv_sec: (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - 2 * 86_400)
            as libc::time_t,
        tv_nsec: 0,
    };
    let times = [old, old];
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid path and two timespecs.
    assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) }, 0);
}

/// A writer killed between creating a temporary and renaming it leaves the temporary behind;
/// the next writer in the directory removes those of dead writers, and only those.
#[test]
fn the_next_writer_removes_the_temporaries_of_dead_writers_only() {
    let lab = Lab::new("stale");
    std::fs::create_dir_all(&lab.out).unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let me = std::process::id();
    let boot = boot_id();
    let other_boot = if boot == "0000000000000000" { "1111111111111111" } else { "0000000000000000" };
    // A writer of this boot and pid namespace that is gone, one that runs (this test), and
    // a dead pid of another boot (another host sharing the directory): not ours to judge.
    let dead = format!(".culedger-h-{gone_pid}-1.json.tmp.{}.0", writer_tag(&boot, gone_pid, 1));
    let alive = format!(".culedger-h-{me}-1.json.tmp.{}.0", writer_tag(&boot, me, start_ticks(me)));
    let foreign = format!(".culedger-h-{gone_pid}-1.json.tmp.{}.0", writer_tag(other_boot, gone_pid, 1));
    let old_style_young = ".culedger-4242.json.tmp.0".to_string();
    let old_style_old = ".culedger-4243.json.tmp.0".to_string();
    let bystanders = ["notes.txt".to_string(), ".culedger-notes".to_string()];
    let all = [&dead, &alive, &foreign, &old_style_young, &old_style_old, &bystanders[0], &bystanders[1]];
    for name in all {
        std::fs::write(lab.out.join(name), b"{\"schema\": \"culedger/1\", \"proc").unwrap();
    }
    age_by_two_days(&lab.out.join(&old_style_old));
    lab.run(&["exec_child"]).assert_success();
    let left: Vec<String> =
        std::fs::read_dir(&lab.out).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    for name in [&dead, &old_style_old] {
        assert!(!left.contains(name), "{name} must be gone: {left:?}");
    }
    for name in [&alive, &foreign, &old_style_young, &bystanders[0], &bystanders[1]] {
        assert!(left.contains(name), "{name} must stay: {left:?}");
    }
    assert_eq!(lab.reports().len(), 1, "temporaries are not reports");
}

/// Kill writers with SIGKILL while they rewrite a large report every 10 ms; whatever they
/// leave, the next writer in the directory cleans up.
#[test]
fn temporaries_left_by_sigkill_are_cleaned_up_by_the_next_writer() {
    let mut lab = Lab::new("sigkill_temps");
    lab.sim.env("CULEDGER_FLUSH_MS", "10");
    let mut left_behind = 0;
    for round in 0..12 {
        // Four threads allocating without end: the ledger changes all the time, every flush writes.
        let mut child =
            lab.sim.cmd("rt_ledger").args(["threads", "4", "100000000"]).stdout(Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(150 + 17 * round));
        let _ = child.kill();
        let _ = child.wait();
        left_behind = std::fs::read_dir(&lab.out)
            .map(|rd| rd.flatten().filter(|e| e.file_name().to_string_lossy().contains(".tmp.")).count())
            .unwrap_or(0);
    }
    eprintln!("note: {left_behind} temporaries left by the killed writers");
    lab.run(&["exec_child"]).assert_success();
    let temps: Vec<String> = std::fs::read_dir(&lab.out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp."))
        .collect();
    assert!(temps.is_empty(), "{temps:?}");
}
