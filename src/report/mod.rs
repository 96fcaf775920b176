//! The JSON report: file names, atomic writes, the flush thread, and every way a process
//! ends or replaces itself (exit, signals, exec, fork, `pthread_exit`). The guarantees are
//! stated in docs/reliability.md.
//!
//! API CONTRACT (used by src/hooks):
//! - [`activate()`]: called by every hook that recorded something. The first call in a
//!   process (and again in a fork child) registers the exit, quick-exit and fork handlers
//!   (once per process image), takes over the terminating signals the program leaves at
//!   their default action (`signals`), creates the output directory and starts the
//!   `culedger-flush` thread. Afterwards it is one relaxed atomic load.
//! - [`final_write(state)`](final_write): the final write (`process.exit` = `"exit"` or
//!   `"signal"`). Idempotent, never unwinds, safe from the exit handler, from our `_exit`,
//!   from a signal handler. A no-op before activation, and in a process other than the one
//!   that activated (a `vfork` child that shares our memory).
//! - [`exec_begin()`]/[`exec_failed()`]: around a hooked `exec*`: the report is written
//!   with `process.exit = "exec"`, periodic writes pause; if the exec fails they resume
//!   (the next write says `"running"` again).
//! - [`gate::enter()`]: before `exit`/`quick_exit` and when the main thread starts `exit`:
//!   one thread ends the process, the others wait (see `gate`).
//!
//! Layout: `flush` (the flush thread, which does all writing), `exit` (the final and exec
//! writes, the exit, quick-exit and fork handlers), `writer` and `naming` (atomic files and
//! their names), `process` (the document), `signals`, `gate`, `identity`, `procfs`.

mod exit;
mod flush;
mod futex;
pub mod gate;
pub mod identity;
pub mod naming;
mod process;
mod procfs;
pub mod signals;
mod urgent;
mod writer;

use std::cell::Cell;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::sync::Mutex;
use libc::{c_int, c_void};
use once_cell::sync::OnceCell;

pub use culedger_format::redact::{is_secret_name, redact_argv, REDACTED};
use exit::install_process_handlers;
pub use exit::{exit_process, note_quick_exit_status};
#[cfg(test)]
use flush::{block_all_signals, signals_blocked};
pub use process::{build_document, unix_ms_now, ExitState, ProcessInfo, SCHEMA, TOOL_NAME};
pub use urgent::{UrgentCounts, BURST, CPU_SHARE, SIZING_WINDOW, URGENT_WAIT, URGENT_WAIT_MAX, WINDOW_PERIOD};
pub use writer::AtomicWriter;

use crate::config::Config;
use naming::Writer;

/// What the report needs from the ledger. The process uses [`GlobalLedger`]; unit tests
/// substitute their own.
pub trait LedgerAccess: Sync {
    fn generation(&self) -> u64;
    fn start_unix_ms(&self) -> u64;
    /// The start with microseconds (the origin of the ledger's `t_us`).
    fn start_unix_us(&self) -> u64 {
        self.start_unix_ms().saturating_mul(1000)
    }
    /// `devices`, `host`, `health` and `sites`.
    fn render(&self) -> crate::ledger::Rendered;
    fn note_warning(&self, line: &str);
    /// In a fork child: replace the ledger without touching locks (see `ledger`).
    fn reset_after_fork(&self);
    /// Add what the driver and NVML say of the rendered devices now (`crate::gpu`), as much
    /// as a write at `exit` may ask. Tests' ledgers add nothing.
    fn annotate_devices(&self, _devices: &mut [culedger_format::report::Device], _exit: ExitState) {}
    /// On the flush thread when it starts (`crate::gpu::prepare`).
    fn prepare_flush_thread(&self) {}
    /// Whether a device's usage moved since the last write (`crate::gpu::usage_changed`).
    fn devices_changed(&self) -> bool {
        false
    }
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
    fn start_unix_us(&self) -> u64 {
        crate::ledger::global().start_unix_us()
    }
    fn render(&self) -> crate::ledger::Rendered {
        crate::ledger::global().render(&crate::sites::TableResolver)
    }
    fn note_warning(&self, line: &str) {
        crate::ledger::global().note_warning(line)
    }
    fn reset_after_fork(&self) {
        crate::ledger::reset_global_after_fork();
        crate::sites::reset_after_fork();
    }
    fn annotate_devices(&self, devices: &mut [culedger_format::report::Device], exit: ExitState) {
        let now_us = i64::try_from(crate::ledger::global().t_us()).unwrap_or(i64::MAX);
        let when = match exit {
            // An urgent write asks nothing of the driver or NVML: a program thread waits for it
            // (`urgent`), and the window writes every 20 ms.
            ExitState::Running if urgent::writing() => crate::gpu::When::Urgent,
            ExitState::Running => crate::gpu::When::Periodic,
            ExitState::Exited(_) => crate::gpu::When::Exit,
            ExitState::Signaled(_) | ExitState::Exec => crate::gpu::When::Urgent,
        };
        crate::gpu::annotate(devices, now_us, when);
    }
    fn prepare_flush_thread(&self) {
        crate::gpu::prepare();
    }
    fn devices_changed(&self) -> bool {
        crate::gpu::usage_changed()
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
    /// Write again at the next chance, changed or not (the file says something else now).
    pub fn force(&self) {
        self.written.store(false, Ordering::Relaxed);
    }
}

/// Per-activation state: one per process (and per fork child that activates). Leaked on
/// purpose: the flush thread and the exit paths hold `&'static` references.
struct Session {
    pid: i32,
    forked_from: Option<i32>,
    out_dir: PathBuf,
    /// `culedger-<host>-<pid>-<start_ms>`: the report is `<stem>.json`, or `<stem>-<k>.json`
    /// when that name was taken (see `naming`).
    stem: String,
    /// The report's file name, once the first write created it.
    file_name: OnceCell<String>,
    /// This process as temp-file names identify it (None: `/proc` could not tell).
    writer_id: Option<Writer>,
    flush_ms: u64,
    /// Serialises the flush thread and the final write.
    write_lock: Mutex<()>,
    gate: FlushGate,
    /// Set by the final write; the flush thread stops writing.
    finished: AtomicBool,
    /// The flush thread runs, and serves write requests.
    helper: AtomicBool,
    /// Bumped (and futex-woken) by whoever wants the flush thread to look at its requests.
    wake: AtomicU32,
    /// The first final-write request, encoded (`NO_REQUEST` until then).
    final_code: AtomicI64,
    /// 1 once a final write was requested from the flush thread.
    final_request: AtomicU32,
    /// `PENDING`, `WRITTEN` or `NOT_WRITTEN`: how the requested final write went (futex word).
    final_outcome: AtomicU32,
    /// Threads inside a hooked exec: periodic writes pause (the file says "exec").
    exec_pending: AtomicU32,
    /// Exec writes requested / served (the latter is a futex word for the requesters).
    exec_requested: AtomicU32,
    exec_served: AtomicU32,
    /// Write at the next chance even if the ledger did not change (after a failed exec).
    force: AtomicBool,
    /// The stale temporaries of the directory were looked at (once per session).
    cleaned: AtomicBool,
    /// The one "cannot write" warning has been given.
    warned_write: AtomicBool,
    writer: AtomicWriter,
    /// Failed allocations and sizing windows written at once (`urgent`).
    urgent: urgent::Urgent,
}

const INACTIVE: u8 = 0;
const STARTING: u8 = 1;
const ACTIVE: u8 = 2;

const NO_REQUEST: i64 = 0;
const PENDING: u32 = 0;
const WRITTEN: u32 = 1;
const NOT_WRITTEN: u32 = 2;

/// Name of the flush thread.
pub const FLUSH_THREAD_NAME: &str = "culedger-flush";
/// How long the final write waits for a flush in progress before writing anyway.
pub const FINAL_LOCK_WAIT: Duration = Duration::from_millis(2000);
/// How long an exiting (or exec'ing, or signalled) thread waits for the flush thread's write.
pub const FINAL_WAIT: Duration = Duration::from_millis(5000);
/// How often the flush thread checks whether it is the last thread of the process.
pub const LIVENESS_POLL: Duration = Duration::from_millis(25);

thread_local! {
    /// Set on the flush thread: a write it asks for, it does itself.
    static ON_FLUSH_THREAD: Cell<bool> = const { Cell::new(false) };
}

fn on_flush_thread() -> bool {
    ON_FLUSH_THREAD.try_with(Cell::get).unwrap_or(false)
}

/// The report lifecycle, parameterised by its ledger and configuration so that tests can
/// run private instances; the process uses the static [`GLOBAL`].
struct Reporter {
    ledger: &'static dyn LedgerAccess,
    config: ConfigSource,
    /// Register exit, quick-exit and fork handlers, take over signals (only the process
    /// instance).
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

/// A final request as stored in `final_code` (`NO_REQUEST` is never a valid encoding).
fn encode_final(state: ExitState) -> i64 {
    let (kind, value) = match state {
        ExitState::Exited(None) => (1, 0),
        ExitState::Exited(Some(code)) => (2, code),
        ExitState::Signaled(sig) => (3, sig),
        // Not final states; kept distinct so that a misuse shows.
        ExitState::Running | ExitState::Exec => (4, 0),
    };
    (kind << 32) | i64::from(value as u32)
}

fn decode_final(v: i64) -> ExitState {
    let value = v as u32 as i32;
    match v >> 32 {
        2 => ExitState::Exited(Some(value)),
        3 => ExitState::Signaled(value),
        _ => ExitState::Exited(None),
    }
}

impl Reporter {
    /// For helgrind (`valgrind` feature; a no-op otherwise): the state, the session pointer
    /// and the fork parent are atomics read by every thread without a lock (an exiting thread
    /// asks whether reporting is ours while another activates it).
    #[inline(always)]
    fn annotate(&self) {
        crate::sync::atomic(&self.state);
        crate::sync::atomic(&self.session);
        crate::sync::atomic(&self.forked_from);
    }

    #[inline]
    fn activate(&'static self) {
        self.annotate();
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
        if self.install_handlers && another_copy_first() {
            // No session: no report, no handlers, no flush thread; the hooks go on
            // forwarding (the other copy's hooks call ours as the next definition).
            crate::debug!("another copy of libculedger is loaded before this one and reports; this one stands down");
            self.state.store(ACTIVE, Ordering::Release);
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
        let config = self.config.get();
        if self.install_handlers {
            install_process_handlers();
            crate::rt::real::prefetch_libc();
        }
        let parent = self.forked_from.load(Ordering::Relaxed);
        let writer_id = Writer::current();
        let session: &'static Session = Box::leak(Box::new(Session {
            pid,
            forked_from: (parent != 0).then_some(parent),
            out_dir: config.out_dir.clone(),
            stem: naming::report_stem(process::hostname().as_deref(), pid, self.ledger.start_unix_ms()),
            file_name: OnceCell::new(),
            writer: AtomicWriter::with_mode(naming::writer_tag(writer_id.as_ref()), config.mode),
            writer_id,
            flush_ms: config.flush_ms,
            write_lock: Mutex::new(()),
            gate: FlushGate::new(),
            finished: AtomicBool::new(false),
            helper: AtomicBool::new(false),
            wake: AtomicU32::new(0),
            final_code: AtomicI64::new(NO_REQUEST),
            final_request: AtomicU32::new(0),
            final_outcome: AtomicU32::new(PENDING),
            exec_pending: AtomicU32::new(0),
            exec_requested: AtomicU32::new(0),
            exec_served: AtomicU32::new(0),
            force: AtomicBool::new(false),
            cleaned: AtomicBool::new(false),
            warned_write: AtomicBool::new(false),
            urgent: urgent::Urgent::default(),
        }));
        for w in &config.warnings {
            self.ledger.note_warning(w);
        }
        // The run id and rank hints: read now, in the hook's thread, never by the flush thread.
        for w in &identity::get().warnings {
            crate::warn!("{w}");
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
        // For helgrind: the session's fields are written before this store, read after the
        // load in `current` (a release/acquire pair it cannot see).
        crate::sync::published(session);
        self.session.store(session as *const Session as *mut Session, Ordering::Release);
        if self.install_handlers {
            // After the session exists: our handler may run as soon as it is installed.
            signals::install(&config.signals);
        }
        crate::info!("reporting to {}", session.out_dir.join(naming::report_name(&session.stem, 0)).display());
    }

    fn current(&self) -> Option<&'static Session> {
        self.annotate();
        // SAFETY: sessions are leaked boxes, never freed.
        let session = unsafe { self.session.load(Ordering::Acquire).as_ref() };
        if let Some(s) = session {
            crate::sync::published(s);
        }
        session
    }

    /// The session, when reporting is active in this very process (not in a `vfork` child
    /// or raw clone that runs in our memory with another pid).
    fn ours(&self) -> Option<&'static Session> {
        self.annotate();
        if self.state.load(Ordering::Acquire) != ACTIVE {
            return None;
        }
        self.current().filter(|s| s.pid == getpid())
    }

    /// Render and write the report. Failures warn once per session, then stay quiet.
    fn write(&self, s: &Session, exit: ExitState) -> bool {
        if !s.cleaned.swap(true, Ordering::AcqRel) {
            let removed = naming::clean_stale_temps(&s.out_dir, s.writer_id.as_ref());
            if removed > 0 {
                crate::debug!("removed {removed} stale temporary file(s) in {}", s.out_dir.display());
            }
        }
        let mut ledger = self.ledger.render();
        if catch_unwind(AssertUnwindSafe(|| self.ledger.annotate_devices(&mut ledger.devices, exit))).is_err() {
            crate::debug!("internal error while asking about the devices; the report goes without it");
        }
        let process = ProcessInfo::gather_at(self.ledger.start_unix_us(), exit, s.forked_from);
        let mut doc = build_document(&process, self.config.get(), ledger);
        let urgent = s.urgent.counts();
        doc.health.urgent_writes = urgent.writes;
        doc.health.urgent_write_us = urgent.write_us;
        doc.health.urgent_deferred = urgent.deferred;
        let mut bytes = match serde_json::to_vec(&doc) {
            Ok(b) => b,
            Err(e) => {
                self.warn_write_failure(s, &io::Error::new(io::ErrorKind::InvalidData, e));
                return false;
            }
        };
        bytes.push(b'\n');
        let result = self.store(s, &bytes).or_else(|e| {
            // The directory may have been removed since: recreate it and retry once.
            if e.kind() != io::ErrorKind::NotFound {
                return Err(e);
            }
            std::fs::create_dir_all(&s.out_dir)?;
            self.store(s, &bytes)
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

    /// Replace our report, or create it under the first free name of the session's stem.
    fn store(&self, s: &Session, bytes: &[u8]) -> io::Result<PathBuf> {
        if let Some(name) = s.file_name.get() {
            return s.writer.write(&s.out_dir, name, bytes);
        }
        for attempt in 0..naming::NAME_ATTEMPTS {
            let name = naming::report_name(&s.stem, attempt);
            if let Some(path) = s.writer.create_new(&s.out_dir, &name, bytes)? {
                let _ = s.file_name.set(name);
                return Ok(path);
            }
            // Taken: by another process, or by a write of ours that raced this one.
            if let Some(name) = s.file_name.get() {
                return s.writer.write(&s.out_dir, name, bytes);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} names starting with {} are taken", naming::NAME_ATTEMPTS, s.stem),
        ))
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
}

/// Is another copy of libculedger (a wheel's and a build's, both preloaded) ahead of this one
/// in the global scope? Its exports then answer the program (and call ours as the next
/// definition): it writes the report, this copy must not write a second one. Told by the
/// object defining the first `culedger_push_tag`: another one that defines the first
/// `cuMemAlloc_v2` too.
fn another_copy_first() -> bool {
    use crate::rt::real::{real_dlsym, RTLD_DEFAULT};
    /// An address in this very object (taking the address of one of our exports would give
    /// the first copy's: references to exported symbols are interposed too).
    static HERE: u8 = 0;
    let object = |p: *const c_void| {
        // SAFETY: dladdr fills in a local.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        (!p.is_null() && unsafe { libc::dladdr(p, &mut info) } != 0).then_some(info.dli_fbase)
    };
    // SAFETY: NUL-terminated names.
    let (tag, alloc) = unsafe {
        (real_dlsym(RTLD_DEFAULT, c"culedger_push_tag".as_ptr()), real_dlsym(RTLD_DEFAULT, c"cuMemAlloc_v2".as_ptr()))
    };
    let first = object(tag);
    first.is_some() && first != object(&HERE as *const u8 as *const c_void) && first == object(alloc)
}

// ---- the process-wide API ---------------------------------------------------------------

/// Start reporting for this process if not done yet. Cheap after the first call.
#[inline]
pub fn activate() {
    GLOBAL.activate()
}

/// Has this process (or this fork child) activated reporting?
pub fn is_active() -> bool {
    GLOBAL.annotate();
    GLOBAL.state.load(Ordering::Relaxed) == ACTIVE
}

/// Is reporting active in this very process (not a vfork child running in our memory)?
pub fn is_ours() -> bool {
    GLOBAL.ours().is_some()
}

/// Write the final report now (idempotent; no-op when not active). Never unwinds.
pub fn final_write(state: ExitState) {
    let _ = catch_unwind(|| GLOBAL.final_write(state));
}

/// A failed allocation was just recorded (no lock held): returns once the report holding it
/// is on disk, while the writer works at most [`URGENT_WAIT_MAX`] (see `urgent`). Never unwinds.
pub fn failed_allocation() {
    let _ = catch_unwind(|| GLOBAL.urgent_failure());
}

/// A free-memory query was just recorded: the sizing window opens (see `urgent`). Never
/// unwinds.
pub fn free_memory_query() {
    let _ = catch_unwind(|| GLOBAL.urgent_query());
}

/// See [`Reporter::exec_begin`]. Never unwinds.
pub fn exec_begin() -> bool {
    catch_unwind(|| GLOBAL.exec_begin()).unwrap_or(false)
}

/// See [`Reporter::exec_failed`]. Never unwinds.
pub fn exec_failed() {
    let _ = catch_unwind(|| GLOBAL.exec_failed());
}

#[cfg(test)]
mod tests;
