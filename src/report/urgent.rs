//! Urgent writes: the moments that matter are on disk before anyone can kill the process.
//!
//! A launcher kills its whole tree within a second of a worker's exception (SGLang's
//! `kill_process_tree`, vLLM's shutdown): SIGKILL runs no handler, so only what is already
//! on disk survives. Two moments matter, and neither may wait for the periodic write:
//! - **A failed allocation** (every family: the common allocation path, an IPC open,
//!   `cuMemCreate`) returns to its caller only once the report holding it has been written
//!   and renamed into place: the hook asks the flush thread for a write and waits for it,
//!   at most [`URGENT_WAIT`], holding no ledger lock and calling nothing in CUDA. If the
//!   writer does not answer in time, the call returns anyway, the miss is counted, and no
//!   later failure waits until the writer has caught up.
//! - **A free-memory query** (the sizing query: the engine sizes its pool from it and
//!   allocates the pool next) opens a window of [`SIZING_WINDOW`] during which the flush
//!   thread writes every [`WINDOW_PERIOD`] whenever the ledger changed, so the query and the
//!   pool that follows are on disk within tens of milliseconds. Nobody waits for these.
//!
//! A budget keeps a program that fails allocations in a loop (a caching allocator's
//! retries, a test probing for out-of-memory) or queries in a loop from being slowed
//! without bound: urgent writes may take [`BURST`] of writing, then at most 1/[`CPU_SHARE`]
//! of the process's CPU time. Past it, failures and windows fall back to the periodic
//! write (`CULEDGER_FLUSH_MS`), counted in the report (`health.urgent_deferred`), as are the
//! urgent writes made and their time (`health.urgent_writes`, `health.urgent_write_us`).
//! An urgent write asks nothing of the driver or NVML (`crate::gpu::When::Urgent`); the
//! periodic writes add what they say.
//!
//! With `CULEDGER_FLUSH_MS=0` nothing is written before the process ends (what that setting
//! asks for), urgent writes included. The writer is the flush thread: no thread is started
//! per event, and writes stay atomic (temp file and rename, `writer`).

use super::*;

/// How long a failed allocation waits for the report holding it to be on disk.
pub const URGENT_WAIT: Duration = Duration::from_millis(1000);
/// How long after a free-memory query the flush thread writes every [`WINDOW_PERIOD`].
pub const SIZING_WINDOW: Duration = Duration::from_millis(2000);
/// How often the flush thread writes (when the ledger changed) inside a sizing window.
pub const WINDOW_PERIOD: Duration = Duration::from_millis(20);
/// Writing time urgent writes may always take.
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
    /// A wait timed out: later failures do not wait until the writer has served them all.
    stuck: AtomicBool,
    /// End of the sizing window, on the [`now_ns`] clock (0: none).
    window_until: AtomicU64,
    /// Time spent in urgent writes (ns), the writes, and what fell back to the periodic write.
    spent_ns: AtomicU64,
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

    /// Within the budget: [`BURST`] of writing, then 1/[`CPU_SHARE`] of the process's CPU
    /// time (read only once the burst is spent: a system call).
    fn within_budget(&self) -> bool {
        let spent = self.spent_ns.load(Ordering::Relaxed);
        let burst = BURST.as_nanos() as u64;
        spent <= burst || spent <= burst + clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID) / CPU_SHARE
    }

    fn defer(&self) {
        self.deferred.fetch_add(1, Ordering::Relaxed);
    }

    /// The flush thread made an urgent write attempt that started at `t0`.
    fn spent(&self, t0: u64, wrote: bool) {
        self.spent_ns.fetch_add(now_ns().saturating_sub(t0), Ordering::Relaxed);
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
    /// (at most [`URGENT_WAIT`]), unless the budget is spent or the writer cannot.
    pub(super) fn urgent_failure(&self) {
        let Some(s) = self.ours() else { return };
        if s.flush_ms == 0 || s.finished.load(Ordering::Acquire) || on_flush_thread() {
            return;
        }
        let u = &s.urgent;
        u.annotate();
        // Inside bookkeeping (a signal handler): this thread may hold a lock the write needs.
        if !s.helper.load(Ordering::Acquire)
            || crate::rt::thread::in_bookkeeping()
            || u.stuck.load(Ordering::Acquire)
            || !u.within_budget()
        {
            u.defer();
            // The periodic write (or an open window) takes it.
            return;
        }
        let ticket = u.requested.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        self.wake(s);
        // Inside dlopen the loader's lock is held: the write is asked for, never waited on
        // (the writer may need that lock).
        if crate::rt::dlopen::in_dlopen() {
            return;
        }
        let served = futex::wait_until(&u.served, Instant::now() + URGENT_WAIT, |v| v.wrapping_sub(ticket) as i32 >= 0);
        if !served {
            u.stuck.store(true, Ordering::Release);
            u.defer();
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
        let t0 = now_ns();
        // Unchanged since the last write (a periodic one took it), finished (the final write
        // has it) or paused for an exec (the exec write has it): on disk already.
        let wrote = urgent_tick(self, s);
        u.spent(t0, wrote);
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
        let t0 = now_ns();
        let wrote = urgent_tick(self, s);
        if wrote {
            u.spent(t0, true);
        }
    }
}
