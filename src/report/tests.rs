//! Lifecycle tests on private `Reporter`s with a fake ledger (no process handlers).

use super::writer::tests::{entries, TempDir};
use super::*;
use crate::log::Level;
use serde_json::Value;
use std::sync::atomic::AtomicU32;
use std::time::Instant;

#[derive(Default)]
struct FakeLedger {
    generation: AtomicU64,
    renders: AtomicU32,
    resets: AtomicU32,
    panic_on_render: AtomicBool,
    /// Held by a test to make rendering block (like a ledger lock held by the exiting thread).
    render_gate: Mutex<()>,
    warnings: Mutex<Vec<String>>,
    /// How often a write asked whether NVML's reading of a device moved.
    devices_asked: AtomicU32,
}

impl LedgerAccess for FakeLedger {
    fn devices_changed(&self) -> bool {
        self.devices_asked.fetch_add(1, Ordering::SeqCst);
        false
    }
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
    fn start_unix_ms(&self) -> u64 {
        1234
    }
    /// No devices; `health.lost_events` carries the generation rendered, for the tests to
    /// tell which state a file holds.
    fn render(&self) -> crate::ledger::Rendered {
        assert!(!self.panic_on_render.load(Ordering::SeqCst), "render failure requested by the test");
        drop(self.render_gate.lock());
        self.renders.fetch_add(1, Ordering::SeqCst);
        let mut r = crate::ledger::Rendered::default();
        r.health.warnings = self.warnings.lock().clone();
        r.health.lost_events = i64::try_from(self.generation()).unwrap();
        r
    }
    fn note_warning(&self, line: &str) {
        self.warnings.lock().push(line.to_string());
    }
    fn reset_after_fork(&self) {
        self.resets.fetch_add(1, Ordering::SeqCst);
    }
}

struct Harness {
    dir: TempDir,
    ledger: &'static FakeLedger,
    reporter: &'static Reporter,
}

impl Harness {
    /// A private reporter writing under a fresh temp dir (`sub` below it) every `flush_ms`.
    fn new(tag: &str, sub: &str, flush_ms: u64, warnings: &[&str]) -> Harness {
        let dir = TempDir::new(tag);
        let (ledger, reporter) = reporter_for(dir.0.join(sub), flush_ms, warnings);
        Harness { dir, ledger, reporter }
    }

    fn out_dir(&self) -> PathBuf {
        self.reporter.current().expect("session").out_dir.clone()
    }

    fn report(&self) -> Value {
        report_of(self.reporter)
    }

    fn session(&self) -> &'static Session {
        self.reporter.current().expect("session")
    }
}

/// A private reporter (fake ledger, no process handlers) writing into `out_dir`.
fn reporter_for(out_dir: PathBuf, flush_ms: u64, warnings: &[&str]) -> (&'static FakeLedger, &'static Reporter) {
    let config: &'static Config = Box::leak(Box::new(Config {
        out_dir,
        flush_ms,
        log: Level::Off,
        warnings: warnings.iter().map(|w| w.to_string()).collect(),
        ..Config::default()
    }));
    let ledger: &'static FakeLedger = Box::leak(Box::default());
    let reporter = Box::leak(Box::new(Reporter {
        ledger,
        config: ConfigSource::Fixed(config),
        install_handlers: false,
        final_lock_wait: Duration::from_millis(200),
        final_wait: Duration::from_millis(3000),
        state: AtomicU8::new(INACTIVE),
        session: AtomicPtr::new(ptr::null_mut()),
        forked_from: AtomicI32::new(0),
    }));
    (ledger, reporter)
}

/// The report a reporter wrote last.
fn report_of(reporter: &Reporter) -> Value {
    let s = reporter.current().expect("session");
    let bytes = std::fs::read(s.out_dir.join(s.file_name.get().expect("written"))).expect("report file");
    serde_json::from_slice(&bytes).expect("valid JSON")
}

fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn blocking_signals_in_a_helper_thread() {
    let blocked = std::thread::spawn(|| {
        let before = signals_blocked(&[libc::SIGINT]);
        block_all_signals();
        (before, signals_blocked(&[libc::SIGINT, libc::SIGTERM, libc::SIGUSR1, libc::SIGCHLD]))
    })
    .join()
    .unwrap();
    assert_eq!(blocked, (false, true));
    assert!(!signals_blocked(&[libc::SIGINT]), "the calling thread is unaffected");
}

#[test]
fn flush_gate_writes_first_time_and_on_change_only() {
    let g = FlushGate::new();
    assert!(g.should_write(0), "nothing written yet");
    assert!(g.should_write(7));
    g.mark_written(7);
    assert!(!g.should_write(7));
    assert!(g.should_write(8));
    g.mark_written(8);
    assert!(!g.should_write(8));
    assert!(g.should_write(7), "any movement counts, even backwards (new ledger)");
}

#[test]
fn activation_creates_dir_and_notes_config_warnings() {
    let h = Harness::new("activate", "out/nested", 0, &["CULEDGER_LOG=\"x\" is bad"]);
    assert_eq!(h.reporter.state.load(Ordering::SeqCst), INACTIVE);
    assert!(!h.reporter.final_write(ExitState::Exited(None)), "final write before activation is a no-op");
    h.reporter.activate();
    assert_eq!(h.reporter.state.load(Ordering::SeqCst), ACTIVE);
    assert!(h.out_dir().is_dir());
    assert_eq!(*h.ledger.warnings.lock(), ["CULEDGER_LOG=\"x\" is bad"]);
    let s = h.session();
    assert_eq!(s.pid, getpid());
    let host = naming::host_part(process::hostname().as_deref());
    assert_eq!(s.stem, format!("culedger-{host}-{}-1234", getpid()));
    assert!(s.file_name.get().is_none(), "named at the first write");
    assert_eq!(s.forked_from, None);
    assert!(s.helper.load(Ordering::SeqCst), "flush thread started even with flush_ms = 0");
    // Activating again changes nothing.
    h.reporter.activate();
    assert!(std::ptr::eq(s, h.session()));
    assert_eq!(h.ledger.warnings.lock().len(), 1);
    assert!(entries(&h.out_dir()).is_empty(), "nothing written before a flush");
}

#[test]
fn concurrent_activation_opens_one_session() {
    let h = Harness::new("concurrent", "o", 0, &["w"]);
    let r = h.reporter;
    std::thread::scope(|sc| {
        for _ in 0..8 {
            sc.spawn(|| r.activate());
        }
    });
    assert_eq!(h.reporter.state.load(Ordering::SeqCst), ACTIVE);
    assert_eq!(h.ledger.warnings.lock().len(), 1, "config warnings noted once");
}

#[test]
fn flush_tick_writes_only_when_generation_changed() {
    let h = Harness::new("tick", "o", 0, &[]);
    h.reporter.activate();
    let s = h.session();
    assert!(h.reporter.flush_tick(s), "first tick writes even at generation 0");
    assert_eq!(h.report()["process"]["exit"], "running");
    assert!(!h.reporter.flush_tick(s), "unchanged");
    assert!(!h.reporter.flush_tick(s), "unchanged");
    assert_eq!(h.ledger.renders.load(Ordering::SeqCst), 1);
    h.ledger.generation.store(5, Ordering::SeqCst);
    assert!(h.reporter.flush_tick(s));
    assert_eq!(h.report()["health"]["lost_events"], 5);
    assert!(!h.reporter.flush_tick(s));
    assert_eq!(h.ledger.renders.load(Ordering::SeqCst), 2);
    assert_eq!(entries(&h.out_dir()), [format!("{}.json", s.stem)], "no temp files left");
}

#[test]
fn report_document_fields() {
    let h = Harness::new("doc", "o", 0, &[]);
    h.reporter.activate();
    assert!(h.reporter.flush_tick(h.session()));
    let doc = h.report();
    assert_eq!(doc["schema"], "culedger/1");
    assert_eq!(doc["tool"]["name"], "culedger");
    assert_eq!(doc["settings"]["flush_ms"], 0);
    assert_eq!(doc["settings"]["log"], "off");
    assert_eq!(doc["settings"]["out_dir"], h.out_dir().to_string_lossy().as_ref());
    let p = &doc["process"];
    assert_eq!(p["pid"], getpid());
    assert_eq!(p["start_unix_ms"], 1234);
    assert!(p["end_unix_ms"].as_u64().unwrap() >= unix_ms_now() - 60_000);
    assert_eq!(p["exit_code"], Value::Null);
    assert_eq!(p["forked_from"], Value::Null);
    assert!(p["argv"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(doc["devices"].is_array() && doc["host"].is_object() && doc["health"].is_object());
}

#[test]
fn final_write_is_idempotent_and_stops_flushes() {
    let h = Harness::new("final", "o", 0, &[]);
    h.reporter.activate();
    assert!(h.reporter.final_write(ExitState::Exited(Some(3))));
    let doc = h.report();
    assert_eq!(doc["process"]["exit"], "exit");
    assert_eq!(doc["process"]["exit_code"], 3);
    assert!(!h.reporter.final_write(ExitState::Exited(Some(9))), "second final write is a no-op");
    h.ledger.generation.store(1, Ordering::SeqCst);
    assert!(!h.reporter.flush_tick(h.session()), "no periodic write after the final one");
    assert_eq!(h.report()["process"]["exit_code"], 3);
    assert_eq!(h.ledger.renders.load(Ordering::SeqCst), 1);
}

#[test]
fn final_write_with_unknown_code() {
    let h = Harness::new("finalnull", "o", 0, &[]);
    h.reporter.activate();
    assert!(h.reporter.final_write(ExitState::Exited(None)));
    assert_eq!(h.report()["process"]["exit"], "exit");
    assert_eq!(h.report()["process"]["exit_code"], Value::Null);
}

#[test]
fn final_write_does_not_wait_forever_for_a_stuck_flush() {
    let h = Harness::new("stuck", "o", 0, &[]);
    h.reporter.activate();
    let s = h.session();
    let held = s.write_lock.lock(); // a flush "stuck" mid-write
    let start = Instant::now();
    assert!(h.reporter.final_write(ExitState::Exited(Some(1))), "writes anyway after the bounded wait");
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(5), "{waited:?}");
    drop(held);
    assert_eq!(h.report()["process"]["exit"], "exit");
}

#[test]
fn final_write_from_a_thread_holding_a_ledger_lock_gives_up_instead_of_deadlocking() {
    // What `_exit` from a signal handler sees when it interrupted its thread inside the
    // ledger: rendering needs a lock this very thread holds.
    let h = Harness::new("siglock", "o", 0, &[]);
    h.reporter.activate();
    let held = h.ledger.render_gate.lock();
    let start = Instant::now();
    assert!(!h.reporter.final_write(ExitState::Exited(Some(42))), "no report while the lock is held");
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(3000) && waited < Duration::from_secs(10), "{waited:?}");
    // Had the thread not exited, the flush thread finishes the write once the lock is free.
    drop(held);
    wait_for("late final write", Duration::from_secs(5), || {
        h.session().final_outcome.load(Ordering::Acquire) == WRITTEN
    });
    assert_eq!(h.report()["process"]["exit_code"], 42);
}

#[test]
fn concurrent_final_writes_write_once() {
    let h = Harness::new("finalrace", "o", 0, &[]);
    h.reporter.activate();
    let r = h.reporter;
    let wrote: Vec<bool> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..4).map(|i| sc.spawn(move || r.final_write(ExitState::Exited(Some(i))))).collect();
        hs.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(wrote.iter().filter(|w| **w).count(), 1, "{wrote:?}");
    let code = h.report()["process"]["exit_code"].as_i64().unwrap();
    assert!((0..4).contains(&code));
    assert_eq!(h.ledger.renders.load(Ordering::SeqCst), 1);
}

#[test]
fn final_write_without_flush_thread_writes_in_the_caller() {
    let h = Harness::new("nohelper", "o", 0, &[]);
    h.reporter.activate();
    h.session().helper.store(false, Ordering::SeqCst); // as if the thread could not start
    assert!(h.reporter.final_write(ExitState::Exited(Some(8))));
    assert_eq!(h.session().final_request.load(Ordering::SeqCst), 0, "the flush thread was not asked");
    assert_eq!(h.report()["process"]["exit_code"], 8);
    assert!(!h.reporter.final_write(ExitState::Exited(Some(9))));
}

#[test]
fn a_failure_without_flush_thread_is_written_by_the_failing_thread() {
    // The flush thread could not start, so no periodic write will come: the failed allocation
    // is on disk when the failing call returns, written by its own thread (it was deferred to
    // that write, and lost to a SIGKILL: no file at all here).
    let h = Harness::new("urgentnohelper", "o", 3_600_000, &[]);
    h.reporter.activate();
    h.session().helper.store(false, Ordering::SeqCst); // as if the thread could not start
    h.ledger.generation.store(7, Ordering::SeqCst); // the failure recorded
    h.reporter.urgent_failure();
    assert_eq!(h.report()["health"]["lost_events"], 7, "the report holding the failure");
    let counts = h.session().urgent.counts();
    assert_eq!((counts.writes, counts.deferred), (1, 0), "{counts:?}");
    // A second failure whose state is already on disk: nothing to write, and NVML is not
    // asked whether a device moved (an urgent write on a program thread asks nothing of it).
    h.reporter.urgent_failure();
    assert_eq!(h.ledger.devices_asked.load(Ordering::SeqCst), 0);
}

#[test]
fn final_write_in_another_process_is_refused() {
    let h = Harness::new("vfork", "o", 0, &[]);
    // A session opened by a different pid: what a vfork child sees in our memory.
    h.reporter.state.store(STARTING, Ordering::SeqCst);
    h.reporter.start(getpid() + 1);
    h.reporter.state.store(ACTIVE, Ordering::SeqCst);
    assert!(!h.reporter.final_write(ExitState::Exited(Some(0))));
    let s = h.session();
    assert!(!s.finished.load(Ordering::SeqCst), "the owner's state is untouched");
    assert_eq!(s.final_code.load(Ordering::SeqCst), NO_REQUEST);
    assert!(entries(&h.out_dir()).is_empty());
}

#[test]
fn unwritable_dir_warns_once_and_keeps_retrying() {
    let h = Harness::new("unwritable", "file/sub", 0, &[]);
    // A regular file where a directory is needed: fails even for root.
    std::fs::write(h.dir.0.join("file"), b"not a dir").unwrap();
    h.reporter.activate();
    assert_eq!(h.reporter.state.load(Ordering::SeqCst), ACTIVE, "the process carries on");
    let s = h.session();
    assert!(!h.reporter.flush_tick(s));
    assert!(!h.reporter.flush_tick(s), "retried: nothing was written");
    assert_eq!(h.ledger.renders.load(Ordering::SeqCst), 2);
    let warnings = h.ledger.warnings.lock().clone();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("cannot write the report in "), "{warnings:?}");
    // The obstacle goes away: the next write succeeds quietly.
    std::fs::remove_file(h.dir.0.join("file")).unwrap();
    assert!(h.reporter.flush_tick(s));
    assert_eq!(h.report()["process"]["exit"], "running");
    assert_eq!(h.ledger.warnings.lock().len(), 1);
}

#[test]
fn removed_dir_is_recreated() {
    let h = Harness::new("recreate", "o", 0, &[]);
    h.reporter.activate();
    std::fs::remove_dir_all(h.out_dir()).unwrap();
    assert!(h.reporter.final_write(ExitState::Exited(None)));
    assert_eq!(h.report()["process"]["exit"], "exit");
    assert!(h.ledger.warnings.lock().is_empty());
}

#[test]
fn fork_child_reset_then_reactivation() {
    let h = Harness::new("fork", "o", 0, &[]);
    h.reporter.activate();
    let parent_session = h.session();
    let held = parent_session.write_lock.lock(); // the parent's flush thread held it at fork
    h.reporter.after_fork_child(4321);
    assert_eq!(h.ledger.resets.load(Ordering::SeqCst), 1);
    assert_eq!(h.reporter.state.load(Ordering::SeqCst), INACTIVE);
    assert!(h.reporter.current().is_none());
    assert!(!h.reporter.final_write(ExitState::Exited(Some(0))), "child writes nothing before its own hook");
    h.reporter.activate();
    let child = h.session();
    assert!(!std::ptr::eq(child, parent_session), "fresh session, fresh lock");
    assert_eq!(child.forked_from, Some(4321));
    assert!(h.reporter.final_write(ExitState::Exited(Some(0))), "does not touch the parent's held lock");
    assert_eq!(h.report()["process"]["forked_from"], 4321);
    drop(held);
}

#[test]
fn render_panic_is_contained() {
    let h = Harness::new("panic", "o", 0, &[]);
    h.reporter.activate();
    h.ledger.panic_on_render.store(true, Ordering::SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| h.reporter.flush_tick(h.session())));
    assert!(r.is_err());
    // The lock was released by the unwind; the next write works.
    h.ledger.panic_on_render.store(false, Ordering::SeqCst);
    assert!(h.reporter.flush_tick(h.session()));
}

#[test]
fn flush_thread_writes_periodically_and_stops_after_final() {
    let h = Harness::new("thread", "o", 20, &[]);
    h.reporter.activate();
    let s = h.session();
    let file = s.out_dir.join(format!("{}.json", s.stem));
    wait_for("first periodic write", Duration::from_secs(5), || file.exists());
    let flushers = flush_thread_sigblk();
    assert!(!flushers.is_empty(), "a thread named {FLUSH_THREAD_NAME}");
    let (int, term) = (1u64 << (libc::SIGINT - 1), 1u64 << (libc::SIGTERM - 1));
    assert!(flushers.iter().all(|m| m & int != 0 && m & term != 0), "signals blocked: {flushers:x?}");
    h.ledger.generation.store(2, Ordering::SeqCst);
    wait_for("write after a change", Duration::from_secs(5), || {
        std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|d| d["health"]["lost_events"] == 2)
    });
    let renders = h.ledger.renders.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(h.ledger.renders.load(Ordering::SeqCst), renders, "idle ledger: no rewrites");
    assert!(h.reporter.final_write(ExitState::Exited(Some(0))));
    h.ledger.generation.store(3, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(h.report()["process"]["exit"], "exit", "no periodic write after the final one");
}

/// The blocked-signal masks (`SigBlk` in /proc) of this process's flush threads.
fn flush_thread_sigblk() -> Vec<u64> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    tasks
        .filter_map(|e| {
            let status = std::fs::read_to_string(e.ok()?.path().join("status")).ok()?;
            let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(str::trim);
            (field("Name:")? == FLUSH_THREAD_NAME).then(|| u64::from_str_radix(field("SigBlk:")?, 16).ok())?
        })
        .collect()
}

// ---- names, exec, cleanup -------------------------------------------------------------------

#[test]
fn same_pid_host_and_start_never_overwrite_each_other() {
    // Two processes that look alike (pid 1 in two containers of one host, started in the
    // same millisecond), and a file an older run left at the first name.
    let h = Harness::new("samepid", "o", 0, &[]);
    let out = h.dir.0.join("o");
    let (_, twin) = reporter_for(out.clone(), 0, &[]);
    h.reporter.activate();
    twin.activate();
    let stem = h.session().stem.clone();
    assert_eq!(twin.current().unwrap().stem, stem, "same host, pid and start");
    std::fs::write(out.join(format!("{stem}.json")), b"an older run's report").unwrap();
    assert!(h.reporter.final_write(ExitState::Exited(Some(1))));
    assert!(twin.final_write(ExitState::Exited(Some(2))));
    assert_eq!(entries(&out), [format!("{stem}-2.json"), format!("{stem}-3.json"), format!("{stem}.json")]);
    assert_eq!(std::fs::read(out.join(format!("{stem}.json"))).unwrap(), b"an older run's report");
    assert_eq!(h.report()["process"]["exit_code"], 1);
    assert_eq!(report_of(twin)["process"]["exit_code"], 2);
    // A symlink at a name counts as taken and is never followed.
    let (_, third) = reporter_for(out.clone(), 0, &[]);
    third.activate();
    std::os::unix::fs::symlink(h.dir.0.join("victim"), out.join(format!("{stem}-4.json"))).unwrap();
    assert!(third.final_write(ExitState::Exited(None)));
    assert!(!h.dir.0.join("victim").exists());
    assert!(out.join(format!("{stem}-5.json")).is_file());
}

#[test]
fn exec_writes_exec_then_a_failed_exec_goes_back_to_running() {
    let h = Harness::new("exec", "o", 0, &[]);
    h.reporter.activate();
    let s = h.session();
    assert!(h.reporter.flush_tick(s));
    assert!(h.reporter.exec_begin(), "the session must hear about a failure");
    assert_eq!(h.report()["process"]["exit"], "exec");
    assert_eq!(s.exec_served.load(Ordering::SeqCst), 1, "written by the flush thread");
    // While the exec is under way, periodic writes keep their hands off the file.
    h.ledger.generation.store(4, Ordering::SeqCst);
    assert!(!h.reporter.flush_tick(s));
    assert_eq!(h.report()["process"]["exit"], "exec");
    h.reporter.exec_failed();
    wait_for("running again", Duration::from_secs(5), || {
        std::fs::read(s.out_dir.join(s.file_name.get().unwrap()))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|d| d["process"]["exit"] == "running")
    });
    assert!(h.reporter.final_write(ExitState::Exited(Some(0))));
    assert_eq!(h.report()["process"]["exit"], "exit");
    assert!(!h.reporter.exec_begin(), "after the final write an exec has nothing to write");
    assert_eq!(h.report()["process"]["exit"], "exit");
}

#[test]
fn exec_without_flush_thread_writes_in_the_caller() {
    let h = Harness::new("execnohelper", "o", 0, &[]);
    h.reporter.activate();
    h.session().helper.store(false, Ordering::SeqCst);
    assert!(h.reporter.exec_begin());
    assert_eq!(h.report()["process"]["exit"], "exec");
    h.reporter.exec_failed();
    // Forced: the file must say running again. exec_failed also wakes a flush thread, which
    // may take the forced write first (it holds the write lock while writing, so once this
    // tick returns the file is written either way).
    h.reporter.flush_tick(h.session());
    assert_eq!(h.report()["process"]["exit"], "running");
}

#[test]
fn a_final_write_can_be_taken_back_when_the_process_survives() {
    let h = Harness::new("resume", "o", 0, &[]);
    h.reporter.activate();
    assert!(h.reporter.final_write(ExitState::Signaled(15)));
    assert_eq!(h.report()["process"]["exit"], "signal");
    assert_eq!(h.report()["process"]["signal"], 15);
    h.reporter.resume_after_final();
    wait_for("running again", Duration::from_secs(5), || {
        std::fs::read(h.out_dir().join(h.session().file_name.get().unwrap()))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|d| d["process"]["exit"] == "running")
    });
    assert!(h.reporter.final_write(ExitState::Exited(Some(3))), "a later final write is served");
    assert_eq!(h.report()["process"]["exit_code"], 3);
}

#[test]
fn first_write_removes_only_provably_stale_temporaries() {
    let h = Harness::new("stale", "o", 0, &[]);
    let out = h.dir.0.join("o");
    std::fs::create_dir_all(&out).unwrap();
    let me = Writer::current().expect("/proc");
    // A writer of this boot and namespace that is gone (a reaped child), one that runs (us,
    // as another session would see us), one of another boot, and files that are not ours.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = child.id() as i32;
    child.wait().unwrap();
    let dead = Writer { pid: dead_pid, start: 1, ..me.clone() };
    let foreign = Writer { boot: "ffffffffffffffff".into(), ..dead.clone() };
    let names = [
        naming::temp_name("culedger-h-1-1.json", &dead.tag(), 0),
        naming::temp_name("culedger-h-2-1.json", &me.tag(), 0),
        naming::temp_name("culedger-h-3-1.json", &foreign.tag(), 0),
        ".culedger-77.json.tmp.3".to_string(),
        "notes.txt".to_string(),
        "culedger-5.json".to_string(),
    ];
    for n in &names {
        std::fs::write(out.join(n), b"{\"partial").unwrap();
    }
    h.reporter.activate();
    assert!(h.reporter.flush_tick(h.session()));
    let left = entries(&out);
    assert!(!left.contains(&names[0]), "the dead writer's temporary must go: {left:?}");
    for kept in &names[1..] {
        assert!(left.contains(kept), "{kept} must stay: {left:?}");
    }
}
