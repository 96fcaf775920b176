//! The JSON report: atomic writes, the flush thread, exit and fork.
//!
//! API CONTRACT (used by src/hooks):
//! - [`activate()`]: called by every hook that recorded something. The first call in a
//!   process (and again in a fork child) registers the exit and fork handlers (once per
//!   process image), creates the output directory and starts the `culedger-flush` thread.
//!   Afterwards it is one relaxed atomic load.
//! - [`final_write(exit_code)`](final_write): the final write (`process.exit = "exit"`).
//!   Idempotent, never unwinds, safe from the exit handler, from our `_exit`, even from a
//!   signal handler. A no-op before activation, and in a process other than the one that
//!   activated (a `vfork` child that shares our memory).
//!
//! The flush thread does all writing: every `flush_ms` when the ledger changed, and the
//! final write when an exit path asks for it (it runs even with `flush_ms = 0`, then only
//! for that). The exiting thread may have been interrupted by a signal while it held a
//! ledger lock or the malloc lock, so it only sets atomics, wakes the flush thread with a
//! futex and waits, at most [`FINAL_WAIT`]; if the write cannot finish (it needs the lock
//! the exiting thread holds), the process exits without the final report (the last
//! periodic one stays). The flush thread blocks all signals. Should it fail to start, the
//! exiting thread writes itself.
//!
//! Exit: on glibc the exit handler is registered with `on_exit`, which receives the exit
//! status, so `process.exit_code` is known for `exit()` and for a return from `main`
//! without interposing `exit` (elsewhere: `atexit`, code unknown). `_exit` and `_Exit`
//! are exported: they do the final write and then `exit_group` as glibc does.
//!
//! Fork: the `pthread_atfork` child handler forgets the session (write lock included: the
//! parent's flush thread may have held it), records the parent pid and replaces the
//! ledger; only atomic stores and the ledger's lock-free reset. The child writes nothing
//! until one of its own hooks calls `activate()`, which opens a new session and starts a
//! new flush thread.

mod futex;
mod process;
mod redact;
mod writer;

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::sync::Mutex;
use libc::{c_int, c_void};
use serde_json::Value;

pub use process::{build_document, unix_ms_now, ExitState, ProcessInfo, SCHEMA, TOOL_NAME};
pub use redact::{is_secret_name, redact_argv, REDACTED};
pub use writer::AtomicWriter;

use crate::config::Config;

/// What the report needs from the ledger. The process uses [`GlobalLedger`]; unit tests
/// substitute their own.
pub trait LedgerAccess: Sync {
    fn generation(&self) -> u64;
    fn start_unix_ms(&self) -> u64;
    /// `devices`, `host` and `health`.
    fn to_json(&self) -> Value;
    fn note_warning(&self, line: &str);
    /// In a fork child: replace the ledger without touching locks (see `ledger`).
    fn reset_after_fork(&self);
}

/// The process-wide ledger, `ledger::global()`.
pub struct GlobalLedger;

impl LedgerAccess for GlobalLedger {
    fn generation(&self) -> u64 {
        crate::ledger::global().generation()
    }
    fn start_unix_ms(&self) -> u64 {
        crate::ledger::global().start_unix_ms()
    }
    fn to_json(&self) -> Value {
        crate::ledger::global().to_json()
    }
    fn note_warning(&self, line: &str) {
        crate::ledger::global().note_warning(line)
    }
    fn reset_after_fork(&self) {
        crate::ledger::reset_global_after_fork()
    }
}

/// When the flush thread writes: when nothing was written yet, or the ledger's generation
/// moved since the last successful write. Only used under the session's write lock.
#[derive(Debug, Default)]
pub struct FlushGate {
    written: AtomicBool,
    last: AtomicU64,
}

impl FlushGate {
    pub const fn new() -> Self {
        FlushGate { written: AtomicBool::new(false), last: AtomicU64::new(0) }
    }
    pub fn should_write(&self, generation: u64) -> bool {
        !self.written.load(Ordering::Relaxed) || self.last.load(Ordering::Relaxed) != generation
    }
    /// Record a successful write of the state at `generation` (read before rendering).
    pub fn mark_written(&self, generation: u64) {
        self.last.store(generation, Ordering::Relaxed);
        self.written.store(true, Ordering::Relaxed);
    }
}

/// Per-activation state: one per process (and per fork child that activates). Leaked on
/// purpose: the flush thread and the exit paths hold `&'static` references.
struct Session {
    pid: i32,
    forked_from: Option<i32>,
    out_dir: PathBuf,
    file_name: String,
    flush_ms: u64,
    /// Serialises the flush thread and the final write.
    write_lock: Mutex<()>,
    gate: FlushGate,
    /// Set by the final write; the flush thread stops writing.
    finished: AtomicBool,
    /// The flush thread runs, and serves final-write requests.
    helper: AtomicBool,
    /// Exit code of the first final-write request (`NO_REQUEST` until then).
    final_code: AtomicI64,
    /// 1 once a final write was requested from the flush thread (futex word).
    final_request: AtomicU32,
    /// `PENDING`, `WRITTEN` or `NOT_WRITTEN`: how the requested final write went (futex word).
    final_outcome: AtomicU32,
    /// The one "cannot write" warning has been given.
    warned_write: AtomicBool,
    writer: AtomicWriter,
}

const INACTIVE: u8 = 0;
const STARTING: u8 = 1;
const ACTIVE: u8 = 2;

const NO_REQUEST: i64 = i64::MAX;
const NO_CODE: i64 = i64::MIN;
const PENDING: u32 = 0;
const WRITTEN: u32 = 1;
const NOT_WRITTEN: u32 = 2;

/// Name of the flush thread.
pub const FLUSH_THREAD_NAME: &str = "culedger-flush";
/// How long the final write waits for a flush in progress before writing anyway.
pub const FINAL_LOCK_WAIT: Duration = Duration::from_millis(2000);
/// How long an exiting thread waits for the flush thread's final write.
pub const FINAL_WAIT: Duration = Duration::from_millis(5000);

/// The report lifecycle, parameterised by its ledger and configuration so that tests can
/// run private instances; the process uses the static [`GLOBAL`].
struct Reporter {
    ledger: &'static dyn LedgerAccess,
    config: ConfigSource,
    /// Register on_exit/atexit and pthread_atfork handlers (only the process instance).
    install_handlers: bool,
    final_lock_wait: Duration,
    final_wait: Duration,
    state: AtomicU8,
    session: AtomicPtr<Session>,
    /// Parent pid recorded by the fork child handler; 0 = not a fork child.
    forked_from: AtomicI32,
}

/// Where a reporter's settings come from.
enum ConfigSource {
    /// `config::get()`, parsed from the environment.
    Global,
    /// Fixed settings (tests).
    #[cfg_attr(not(test), allow(dead_code))]
    Fixed(&'static Config),
}

impl ConfigSource {
    fn get(&self) -> &'static Config {
        match self {
            ConfigSource::Global => crate::config::get(),
            ConfigSource::Fixed(c) => c,
        }
    }
}

static GLOBAL: Reporter = Reporter {
    ledger: &GlobalLedger,
    config: ConfigSource::Global,
    install_handlers: true,
    final_lock_wait: FINAL_LOCK_WAIT,
    final_wait: FINAL_WAIT,
    state: AtomicU8::new(INACTIVE),
    session: AtomicPtr::new(ptr::null_mut()),
    forked_from: AtomicI32::new(0),
};

fn getpid() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::getpid() }
}

impl Reporter {
    #[inline]
    fn activate(&'static self) {
        if self.state.load(Ordering::Relaxed) != ACTIVE {
            self.activate_slow();
        }
    }

    #[cold]
    fn activate_slow(&'static self) {
        // One winner starts the session; concurrent callers go on (their records are
        // written by the session's flushes and final write).
        if self.state.compare_exchange(INACTIVE, STARTING, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return;
        }
        if catch_unwind(AssertUnwindSafe(|| self.start(getpid()))).is_err() {
            crate::warn!("internal error while starting the report; continuing");
        }
        // Even after a failure: never retry on every hooked call.
        self.state.store(ACTIVE, Ordering::Release);
    }

    /// Open a session for process `pid`: handlers, out dir, config warnings, flush thread.
    fn start(&'static self, pid: i32) {
        if self.install_handlers {
            install_process_handlers();
        }
        let config = self.config.get();
        let parent = self.forked_from.load(Ordering::Relaxed);
        let session: &'static Session = Box::leak(Box::new(Session {
            pid,
            forked_from: (parent != 0).then_some(parent),
            out_dir: config.out_dir.clone(),
            file_name: format!("culedger-{pid}.json"),
            flush_ms: config.flush_ms,
            write_lock: Mutex::new(()),
            gate: FlushGate::new(),
            finished: AtomicBool::new(false),
            helper: AtomicBool::new(false),
            final_code: AtomicI64::new(NO_REQUEST),
            final_request: AtomicU32::new(0),
            final_outcome: AtomicU32::new(PENDING),
            warned_write: AtomicBool::new(false),
            writer: AtomicWriter::with_mode(config.mode),
        }));
        for w in &config.warnings {
            self.ledger.note_warning(w);
        }
        if let Err(e) = std::fs::create_dir_all(&session.out_dir) {
            self.warn_write_failure(session, &e);
        }
        match self.spawn_flush_thread(session) {
            Ok(()) => session.helper.store(true, Ordering::Release),
            Err(e) => {
                let line = format!(
                    "cannot start the {FLUSH_THREAD_NAME} thread ({e}); the report is written only at exit, by the exiting thread"
                );
                crate::warn!("{line}");
                self.ledger.note_warning(&line);
            }
        }
        self.session.store(session as *const Session as *mut Session, Ordering::Release);
        crate::info!("reporting to {}", session.out_dir.join(&session.file_name).display());
    }

    fn current(&self) -> Option<&'static Session> {
        // SAFETY: sessions are leaked boxes, never freed.
        unsafe { self.session.load(Ordering::Acquire).as_ref() }
    }

    fn spawn_flush_thread(&'static self, s: &'static Session) -> io::Result<()> {
        std::thread::Builder::new().name(FLUSH_THREAD_NAME.into()).spawn(move || self.flush_loop(s)).map(drop)
        // detached: process exit simply ends it
    }

    /// The flush thread: periodic writes every `flush_ms` (none when 0), and the final
    /// write when an exit path asks for it. Host signal handlers never run on it.
    fn flush_loop(&self, s: &'static Session) {
        static TICK_FAILED: AtomicBool = AtomicBool::new(false);
        block_all_signals();
        let period = (s.flush_ms > 0).then(|| Duration::from_millis(s.flush_ms));
        let mut next_tick = period.map(|p| Instant::now() + p);
        loop {
            if s.final_request.load(Ordering::Acquire) != 0 {
                let code = decode_code(s.final_code.load(Ordering::Acquire));
                let wrote = catch_unwind(AssertUnwindSafe(|| self.final_write_now(s, code))).unwrap_or(false);
                s.final_outcome.store(if wrote { WRITTEN } else { NOT_WRITTEN }, Ordering::Release);
                futex::wake_all(&s.final_outcome);
                return;
            }
            let (Some(period), Some(due)) = (period, next_tick) else {
                futex::wait(&s.final_request, 0, None);
                continue;
            };
            let now = Instant::now();
            if now < due {
                futex::wait(&s.final_request, 0, Some(due - now));
                continue;
            }
            if catch_unwind(AssertUnwindSafe(|| self.flush_tick(s))).is_err()
                && crate::warn_once!(TICK_FAILED; "internal error during a periodic report write; continuing")
            {
                let _ = catch_unwind(AssertUnwindSafe(|| {
                    self.ledger.note_warning("internal error during a periodic report write")
                }));
            }
            next_tick = Some(Instant::now() + period);
        }
    }

    /// One flush: write if the ledger changed since the last write. Returns true if written.
    fn flush_tick(&self, s: &Session) -> bool {
        let _guard = s.write_lock.lock();
        if s.finished.load(Ordering::Acquire) {
            return false;
        }
        let generation = self.ledger.generation();
        if !s.gate.should_write(generation) {
            return false;
        }
        let written = self.write(s, ExitState::Running);
        if written {
            s.gate.mark_written(generation);
        }
        written
    }

    /// The final write, from any context; true if this call's request wrote the report.
    ///
    /// The exiting thread may be inside a signal handler that interrupted it while it held
    /// a ledger lock or the malloc lock, so when the flush thread runs, the write is done
    /// there and the exiting thread only does async-signal-safe things: atomics, a futex
    /// wake, and a wait bounded by `final_wait` (after which it gives up on the report).
    fn final_write(&self, exit_code: Option<i32>) -> bool {
        if self.state.load(Ordering::Acquire) != ACTIVE {
            return false;
        }
        let Some(s) = self.current() else { return false };
        // A vfork child (or a raw clone) runs in our memory with another pid: not ours.
        if s.pid != getpid() {
            return false;
        }
        // A signal handler exiting from inside a hook's bookkeeping: this thread may hold
        // the ledger lock the write needs. The last periodic report stands.
        if crate::hooks::in_bookkeeping() {
            crate::info!(
                "exit from inside culedger's bookkeeping (a signal handler); keeping the last periodic report"
            );
            return false;
        }
        if !s.helper.load(Ordering::Acquire) {
            return self.final_write_now(s, exit_code);
        }
        let won = s
            .final_code
            .compare_exchange(NO_REQUEST, encode_code(exit_code), Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            s.final_request.store(1, Ordering::Release);
            futex::wake_all(&s.final_request);
        }
        let outcome = futex::wait_while(&s.final_outcome, PENDING, Instant::now() + self.final_wait);
        if won && outcome == PENDING {
            crate::warn!("the final report write did not finish in time; exiting without it");
        }
        won && outcome == WRITTEN
    }

    /// Write the final report in this thread (once per session).
    fn final_write_now(&self, s: &Session, exit_code: Option<i32>) -> bool {
        if s.finished.swap(true, Ordering::AcqRel) {
            return false;
        }
        let guard = s.write_lock.try_lock_for(self.final_lock_wait);
        if guard.is_none() {
            crate::warn!("a periodic report write is stuck; writing the final report anyway");
        }
        self.write(s, ExitState::Exited(exit_code))
    }

    /// Render and write the report. Failures warn once per session, then stay quiet.
    fn write(&self, s: &Session, exit: ExitState) -> bool {
        let ledger_json = self.ledger.to_json();
        let process = ProcessInfo::gather(self.ledger.start_unix_ms(), exit, s.forked_from);
        let doc = build_document(&process, self.config.get(), ledger_json);
        let mut bytes = match serde_json::to_vec(&doc) {
            Ok(b) => b,
            Err(e) => {
                self.warn_write_failure(s, &io::Error::new(io::ErrorKind::InvalidData, e));
                return false;
            }
        };
        bytes.push(b'\n');
        let result = s.writer.write(&s.out_dir, &s.file_name, &bytes).or_else(|e| {
            // The directory may have been removed since: recreate it and retry once.
            if e.kind() != io::ErrorKind::NotFound {
                return Err(e);
            }
            std::fs::create_dir_all(&s.out_dir)?;
            s.writer.write(&s.out_dir, &s.file_name, &bytes)
        });
        match result {
            Ok(path) => {
                crate::debug!("wrote {}", path.display());
                true
            }
            Err(e) => {
                self.warn_write_failure(s, &e);
                false
            }
        }
    }

    fn warn_write_failure(&self, s: &Session, e: &io::Error) {
        if s.warned_write.swap(true, Ordering::Relaxed) {
            return;
        }
        let line = format!(
            "cannot write the report in {}: {e}; the process continues, later writes retry quietly",
            s.out_dir.display()
        );
        crate::warn!("{line}");
        self.ledger.note_warning(&line);
    }

    /// In a fork child (pthread_atfork child handler): only atomic stores and the ledger's
    /// lock-free reset. The parent's session, lock and flush thread are left behind.
    fn after_fork_child(&self, parent_pid: i32) {
        // Our own state first, so that a failing ledger reset cannot leave the child
        // holding the parent's session.
        self.session.store(ptr::null_mut(), Ordering::Relaxed);
        self.forked_from.store(parent_pid, Ordering::Relaxed);
        self.state.store(INACTIVE, Ordering::Release);
        self.ledger.reset_after_fork();
    }
}

fn encode_code(code: Option<i32>) -> i64 {
    code.map_or(NO_CODE, i64::from)
}

fn decode_code(v: i64) -> Option<i32> {
    i32::try_from(v).ok()
}

/// Block every blockable signal in the calling thread. Used by the flush thread: the
/// host's signal handlers must never run on it, where they could interrupt a report write
/// (holding the write lock or a ledger lock) and, say, call `_exit`, which writes again.
fn block_all_signals() {
    // SAFETY: `set` is a properly initialised sigset_t owned by this frame.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, ptr::null_mut());
    }
}

/// The calling thread's blocked signal set contains every one of `signals`.
#[cfg(test)]
fn signals_blocked(signals: &[c_int]) -> bool {
    // SAFETY: reads the calling thread's mask into a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, ptr::null(), &mut set) == 0
            && signals.iter().all(|&sig| libc::sigismember(&set, sig) == 1)
    }
}

// ---- the process-wide API ---------------------------------------------------------------

/// Start reporting for this process if not done yet. Cheap after the first call.
#[inline]
pub fn activate() {
    GLOBAL.activate()
}

/// Has this process (or this fork child) activated reporting?
pub fn is_active() -> bool {
    GLOBAL.state.load(Ordering::Relaxed) == ACTIVE
}

/// Write the final report now (idempotent; no-op when not active). Never unwinds.
pub fn final_write(exit_code: Option<i32>) {
    let _ = catch_unwind(|| GLOBAL.final_write(exit_code));
}

// ---- process handlers -------------------------------------------------------------------

static HANDLERS_INSTALLED: AtomicBool = AtomicBool::new(false);
/// Our pid, stored by the prepare handler just before `fork` (the child's parent pid).
static PRE_FORK_PID: AtomicI32 = AtomicI32::new(0);

#[cfg(target_env = "gnu")]
extern "C" {
    /// glibc: like `atexit`, and the handler receives the exit status.
    fn on_exit(function: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
}

#[cfg(target_env = "gnu")]
extern "C" fn exit_handler(status: c_int, _arg: *mut c_void) {
    final_write(Some(status));
}

#[cfg(not(target_env = "gnu"))]
extern "C" fn exit_handler() {
    final_write(None);
}

unsafe extern "C" fn atfork_prepare() {
    PRE_FORK_PID.store(getpid(), Ordering::Relaxed);
}

unsafe extern "C" fn atfork_child() {
    let _ = catch_unwind(|| GLOBAL.after_fork_child(PRE_FORK_PID.load(Ordering::Relaxed)));
}

/// Register the exit and fork handlers, once per process image (fork children inherit them).
fn install_process_handlers() {
    if HANDLERS_INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: registering extern "C" functions that live as long as the process (an
    // LD_PRELOAD library is never unloaded).
    #[cfg(target_env = "gnu")]
    let rc = unsafe { on_exit(exit_handler, ptr::null_mut()) };
    #[cfg(not(target_env = "gnu"))]
    let rc = unsafe { libc::atexit(exit_handler) };
    if rc != 0 {
        crate::warn!("cannot register the exit handler; the final report may be missing");
    }
    // SAFETY: as above.
    let rc = unsafe { libc::pthread_atfork(Some(atfork_prepare), None, Some(atfork_child)) };
    if rc != 0 {
        crate::warn!("cannot register fork handlers; fork children may report their parent's ledger");
    }
}

/// Final write (when active and ours), then end the process the way glibc's `_exit` does.
#[cfg_attr(test, allow(dead_code))]
fn exit_process(status: c_int) -> ! {
    if is_active() {
        final_write(Some(status));
    }
    loop {
        // SAFETY: terminating syscalls; they do not return on success.
        unsafe {
            libc::syscall(libc::SYS_exit_group, status);
            libc::syscall(libc::SYS_exit, status);
        }
    }
}

/// Interposes libc's `_exit` (used by `os._exit` and multiprocessing workers).
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    exit_process(status)
}

/// Interposes libc's `_Exit` (same as `_exit`).
#[cfg(not(test))]
#[no_mangle]
#[allow(non_snake_case)]
pub extern "C" fn _Exit(status: c_int) -> ! {
    exit_process(status)
}

#[cfg(test)]
mod tests;
