//! Urgent writes: the moments that matter are on disk before anyone can kill the process.
//!
//! A launcher kills its whole tree within a second of a worker's exception (SGLang's
//! `kill_process_tree`, vLLM's shutdown): SIGKILL runs no handler, so only what is already
//! on disk survives. Two moments matter, and neither may wait for the periodic write:
//! - **A failed allocation** (every family: the common allocation path, an IPC open,
//!   `cuMemCreate`) returns to its caller only once the report holding it has been written
//!   and renamed into place: the hook asks the flush thread for a write and waits for it,
//!   holding no ledger lock and calling nothing in CUDA, as long as the writer is working
//!   (its CPU time moves: a loaded machine makes a write slow, never lost), at most
//!   [`URGENT_WAIT_MAX`]. A writer that has used no CPU for [`URGENT_WAIT`] is stalled: the
//!   call returns, the miss is counted, and no later failure waits until the writer has
//!   caught up. No budget ever defers a failure: a failing call costs one report write. A
//!   failure inside `dlopen` (a library constructor, the loader's lock held, which the flush
//!   thread may be waiting for) and a failure in a process whose flush thread could not
//!   start are written by the failing thread itself before it returns.
//! - **A free-memory query** (the sizing query: the engine sizes its pool from it and
//!   allocates the pool next) opens a window of [`SIZING_WINDOW`] during which the flush
//!   thread writes every [`WINDOW_PERIOD`] whenever the ledger changed, so the query and the
//!   pool that follows are on disk within tens of milliseconds. Nobody waits for these.
//!
//! A budget keeps a program that queries free memory in a loop from being slowed without
//! bound by windows: urgent writes may take [`BURST`] of the flush thread's CPU time, then at
//! most 1/[`CPU_SHARE`] of the process's CPU time (CPU time against CPU time: on a loaded
//! machine a write's wall time grows, its CPU time does not). Past it, windows fall back to
//! the periodic write (`CULEDGER_FLUSH_MS`), counted in the report
//! (`health.urgent_deferred`), as are the urgent writes made and their (wall) time
//! (`health.urgent_writes`, `health.urgent_write_us`). Failures write past it too: losing one
//! to the budget is what let a loaded `--tp 8` start be killed with no failure on disk (the
//! sizing windows' slow writes had spent a wall-time budget).
//! An urgent write asks nothing of the driver or NVML (`crate::gpu::When::Urgent`); the
//! periodic writes add what they say.
//!
//! With `CULEDGER_FLUSH_MS=0` nothing is written before the process ends (what that setting
//! asks for), urgent writes included. The writer is the flush thread: no thread is started
//! per event, and writes stay atomic (temp file and rename, `writer`).

use super::*;

/// How long a failed allocation waits for the report holding it while the writer uses no CPU
/// (stalled, not slow).
pub const URGENT_WAIT: Duration = Duration::from_millis(1000);
/// How long a failed allocation waits at most for the report holding it, the writer working.
pub const URGENT_WAIT_MAX: Duration = Duration::from_secs(10);
/// How long after a free-memory query the flush thread writes every [`WINDOW_PERIOD`].
pub const SIZING_WINDOW: Duration = Duration::from_millis(2000);
/// How often the flush thread writes (when the ledger changed) inside a sizing window.
pub const WINDOW_PERIOD: Duration = Duration::from_millis(20);
/// The flush thread's CPU time urgent writes may always take.
pub const BURST: Duration = Duration::from_millis(100);
/// Beyond [`BURST`], urgent writes take at most 1/`CPU_SHARE` of the process's CPU time.
pub const CPU_SHARE: u64 = 10;

thread_local! {
    /// Set on the flush thread while it makes an urgent write.
    static WRITING: Cell<bool> = const { Cell::new(false) };
}

/// Is this thread making an urgent write? Such a write asks nothing of the driver or NVML
/// (`crate::gpu::When::Urgent`): what is known already.
pub(super) fn writing() -> bool {
    WRITING.try_with(Cell::get).unwrap_or(false)
}

/// An urgent write: `flush_tick` with [`writing`] set.
fn urgent_tick(r: &Reporter, s: &Session) -> bool {
    let _ = WRITING.try_with(|w| w.set(true));
    let wrote = catch_unwind(AssertUnwindSafe(|| r.flush_tick(s))).unwrap_or(false);
    let _ = WRITING.try_with(|w| w.set(false));
    wrote
}

/// A session's urgent-write state (one per process image and per fork child's session).
#[derive(Default)]
pub(super) struct Urgent {
    /// Failed allocations asking for a write (a ticket each) / served up to (futex word).
    pub(super) requested: AtomicU32,
    pub(super) served: AtomicU32,
    /// A wait found the writer stalled: later failures do not wait until it has served them all.
    stuck: AtomicBool,
    /// The flush thread's CPU-time clock (`pthread_getcpuclockid`), once it runs.
    writer_clock: AtomicI64,
    writer_clock_set: AtomicBool,
    /// End of the sizing window, on the [`now_ns`] clock (0: none).
    window_until: AtomicU64,
    /// Time spent in urgent writes (wall ns, reported; the flush thread's CPU ns, the budget),
    /// the writes, and what fell back to the periodic write.
    spent_ns: AtomicU64,
    cpu_ns: AtomicU64,
    writes: AtomicU64,
    deferred: AtomicU64,
}

/// What the report says of urgent writes (`health.urgent_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UrgentCounts {
    pub writes: u64,
    pub write_us: u64,
    pub deferred: u64,
}

/// Monotonic nanoseconds (async-signal-safe, vDSO).
pub(super) fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: fills a local timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

impl Urgent {
    /// For helgrind (`valgrind` feature; a no-op otherwise): every field is an atomic that the
    /// hooking threads and the flush thread use without a lock.
    #[inline(always)]
    fn annotate(&self) {
        crate::sync::atomic(&self.requested);
        crate::sync::atomic(&self.served);
        crate::sync::atomic(&self.stuck);
        crate::sync::atomic(&self.writer_clock);
        crate::sync::atomic(&self.writer_clock_set);
        crate::sync::atomic(&self.cpu_ns);
        crate::sync::atomic(&self.window_until);
        crate::sync::atomic(&self.spent_ns);
        crate::sync::atomic(&self.writes);
        crate::sync::atomic(&self.deferred);
    }

    pub(super) fn counts(&self) -> UrgentCounts {
        UrgentCounts {
            writes: self.writes.load(Ordering::Relaxed),
            write_us: self.spent_ns.load(Ordering::Relaxed) / 1000,
            deferred: self.deferred.load(Ordering::Relaxed),
        }
    }

    /// Within the budget: [`BURST`] of the flush thread's CPU time in urgent writes, then
    /// 1/[`CPU_SHARE`] of the process's CPU time (read only once the burst is spent: a system
    /// call).
    fn within_budget(&self) -> bool {
        let spent = self.cpu_ns.load(Ordering::Relaxed);
        let burst = BURST.as_nanos() as u64;
        spent <= burst || spent <= burst + clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID) / CPU_SHARE
    }

    fn defer(&self) {
        self.deferred.fetch_add(1, Ordering::Relaxed);
    }

    /// On the flush thread, first thing: its CPU-time clock, which a waiting failure reads to
    /// tell a slow writer from a stalled one.
    pub(super) fn set_writer_clock(&self) {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: the calling thread's own id and a local out-parameter.
        if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } == 0 {
            self.writer_clock.store(clock as i64, Ordering::Relaxed);
            self.writer_clock_set.store(true, Ordering::Release);
        }
    }

    /// The flush thread's CPU time so far (None: unknown).
    fn writer_cpu(&self) -> Option<u64> {
        if !self.writer_clock_set.load(Ordering::Acquire) {
            return None;
        }
        let clock = self.writer_clock.load(Ordering::Relaxed) as libc::clockid_t;
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: fills a local timespec; a clock of a thread that ended is an error, not UB.
        (unsafe { libc::clock_gettime(clock, &mut ts) } == 0)
            .then(|| (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64))
    }

    /// Wait until ticket `ticket` is served: as long as the writer works (its CPU time moved
    /// in the last [`URGENT_WAIT`]), at most [`URGENT_WAIT_MAX`]. False: it was not.
    fn wait_served(&self, ticket: u32) -> bool {
        let done = |v: u32| v.wrapping_sub(ticket) as i32 >= 0;
        let give_up = Instant::now() + URGENT_WAIT_MAX;
        let mut cpu = self.writer_cpu();
        loop {
            let slice = (Instant::now() + URGENT_WAIT).min(give_up);
            if futex::wait_until(&self.served, slice, done) {
                return true;
            }
            let now_cpu = self.writer_cpu();
            if Instant::now() >= give_up || now_cpu.is_none() || now_cpu == cpu {
                return false;
            }
            cpu = now_cpu;
        }
    }

    /// The flush thread made an urgent write attempt that started at `t0` (wall) and `c0`
    /// (its CPU time).
    fn spent(&self, t0: u64, c0: u64, wrote: bool) {
        self.spent_ns.fetch_add(now_ns().saturating_sub(t0), Ordering::Relaxed);
        self.cpu_ns.fetch_add(clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).saturating_sub(c0), Ordering::Relaxed);
        if wrote {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The end of the open sizing window, if one is open at `now`.
    pub(super) fn window(&self, now: u64) -> Option<u64> {
        self.annotate();
        let until = self.window_until.load(Ordering::Acquire);
        (until > now).then_some(until)
    }
}

impl Reporter {
    /// A failed allocation was just recorded: return once a report holding it is on disk
    /// (while the writer works, at most [`URGENT_WAIT_MAX`]), unless the writer cannot. No
    /// budget applies: a failure is never left to the periodic write while it could be
    /// written.
    pub(super) fn urgent_failure(&self) {
        let Some(s) = self.ours() else { return };
        if s.flush_ms == 0 || s.finished.load(Ordering::Acquire) || on_flush_thread() {
            return;
        }
        let u = &s.urgent;
        u.annotate();
        // Inside bookkeeping (a signal handler): this thread may hold a lock the write needs.
        if crate::rt::thread::in_bookkeeping() {
            u.defer();
            // The periodic write (or an open window) takes it.
            return;
        }
        // No flush thread (it could not start): no periodic write either. Inside dlopen (a
        // library constructor) the loader's lock is held, and the flush thread may be waiting
        // for it (its first moments open NVML): waiting for it would wait URGENT_WAIT for
        // nothing. Either way this thread writes, as the final write does without a flush
        // thread (`exit.rs`): an urgent write takes no loader lock (it names no frame, asks
        // nothing of the driver or NVML, only writes and renames a file).
        if !s.helper.load(Ordering::Acquire) || crate::rt::dlopen::in_dlopen() {
            self.urgent_write_here(s);
            return;
        }
        if u.stuck.load(Ordering::Acquire) {
            u.defer();
            return;
        }
        let ticket = u.requested.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        self.wake(s);
        if !u.wait_served(ticket) {
            u.stuck.store(true, Ordering::Release);
            u.defer();
        }
    }

    /// An urgent write on the calling thread (not the flush thread), waiting at most
    /// [`URGENT_WAIT`] for the write lock (a periodic write holding it may itself wait for a
    /// lock the caller holds); past that the failure is left to the next write (counted).
    fn urgent_write_here(&self, s: &Session) {
        let u = &s.urgent;
        let (t0, c0) = (now_ns(), clock_ns(libc::CLOCK_THREAD_CPUTIME_ID));
        let _ = WRITING.try_with(|w| w.set(true));
        let wrote = catch_unwind(AssertUnwindSafe(|| self.try_flush_tick(s, URGENT_WAIT))).unwrap_or(Some(false));
        let _ = WRITING.try_with(|w| w.set(false));
        match wrote {
            Some(wrote) => u.spent(t0, c0, wrote),
            None => u.defer(),
        }
    }

    /// A free-memory query was just recorded: open (or extend) the sizing window and wake the
    /// flush thread, which writes the query at once and what follows every [`WINDOW_PERIOD`].
    pub(super) fn urgent_query(&self) {
        let Some(s) = self.ours() else { return };
        if s.flush_ms == 0 || !s.helper.load(Ordering::Acquire) || on_flush_thread() {
            return;
        }
        let u = &s.urgent;
        u.annotate();
        let now = now_ns();
        let was_open = u.window(now).is_some();
        if !was_open && !u.within_budget() {
            u.defer();
            return;
        }
        u.window_until.fetch_max(now + SIZING_WINDOW.as_nanos() as u64, Ordering::AcqRel);
        if !was_open {
            self.wake(s);
        }
    }

    /// On the flush thread: serve the failed allocations waiting for a write.
    pub(super) fn serve_urgent(&self, s: &Session) {
        let u = &s.urgent;
        u.annotate();
        let want = u.requested.load(Ordering::Acquire);
        if want == u.served.load(Ordering::Acquire) {
            return;
        }
        let (t0, c0) = (now_ns(), clock_ns(libc::CLOCK_THREAD_CPUTIME_ID));
        // Unchanged since the last write (a periodic one took it), finished (the final write
        // has it) or paused for an exec (the exec write has it): on disk already.
        let wrote = urgent_tick(self, s);
        u.spent(t0, c0, wrote);
        u.stuck.store(false, Ordering::Release);
        u.served.store(want, Ordering::Release);
        futex::wake_all(&u.served);
    }

    /// On the flush thread, inside a sizing window: write if the ledger changed, within the
    /// budget; past it the window closes (counted) and the periodic write goes on.
    pub(super) fn window_tick(&self, s: &Session) {
        let u = &s.urgent;
        u.annotate();
        if !u.within_budget() {
            u.window_until.store(0, Ordering::Release);
            u.defer();
            return;
        }
        let (t0, c0) = (now_ns(), clock_ns(libc::CLOCK_THREAD_CPUTIME_ID));
        let wrote = urgent_tick(self, s);
        if wrote {
            u.spent(t0, c0, true);
        }
    }
}
