//! The flush thread.
//!
//! The flush thread does all writing: every `flush_ms` when the ledger changed, the exec
//! write and the final write when asked (it runs even with `flush_ms = 0`). The asking
//! thread may have been interrupted by a signal while it held a ledger lock or the malloc
//! lock, so it only sets atomics, wakes the flush thread with a futex and waits, at most
//! [`FINAL_WAIT`](super::FINAL_WAIT); if the write cannot finish (it needs the lock the asking thread holds),
//! the process goes on without it (the last periodic report stays). The flush thread blocks
//! all signals: it is invisible to signal delivery, so a process-directed signal goes where
//! it would go without culedger (a program that blocks it everywhere and takes it with
//! `sigwait` or a signalfd keeps getting it). Every [`LIVENESS_POLL`](super::LIVENESS_POLL) it checks whether it
//! is the last thread left (the program's threads all ended, the main one with
//! `pthread_exit`); then it ends, and glibc ends the process with `exit(0)` as it would
//! have for the program's last thread (the exit handler writes the final report). Should
//! the thread fail to start, the asking thread writes itself.

use super::*;

impl Reporter {
    /// Start the flush thread with every signal blocked from its first instruction: a
    /// thread starts with its creator's mask, and a signal delivered before it blocked them
    /// itself would run a handler (ours or the program's) on it.
    pub(super) fn spawn_flush_thread(&'static self, s: &'static Session) -> io::Result<()> {
        let program_mask = block_all_signals();
        let spawned = std::thread::Builder::new()
            .name(FLUSH_THREAD_NAME.into())
            .spawn(move || self.flush_loop(s, program_mask))
            .map(drop);
        restore_signal_mask(&program_mask);
        spawned
        // detached: process exit simply ends it
    }

    /// Wake the flush thread to look at its requests.
    pub(super) fn wake(&self, s: &Session) {
        s.wake.fetch_add(1, Ordering::AcqRel);
        futex::wake_all(&s.wake);
    }

    /// The flush thread: periodic writes every `flush_ms` (none when 0), the exec and final
    /// writes when asked, and the end of the process when it is the last thread left.
    /// Signal handlers never run on it.
    pub(super) fn flush_loop(&self, s: &'static Session, program_mask: libc::sigset_t) {
        static TICK_FAILED: AtomicBool = AtomicBool::new(false);
        block_all_signals(); // already blocked by the creator; stays so even if that changes
        let _ = ON_FLUSH_THREAD.try_with(|f| f.set(true));
        s.urgent.set_writer_clock();
        let period = (s.flush_ms > 0).then(|| Duration::from_millis(s.flush_ms));
        let mut next_tick = period.map(|p| Instant::now() + p);
        let mut next_probe = Instant::now() + LIVENESS_POLL;
        // The next write of an open sizing window (`urgent`).
        let mut next_window: Option<Instant> = None;
        let mut prepared = false;
        loop {
            let seen = s.wake.load(Ordering::Acquire);
            // The devices are named and NVML opened here, never at the final write: first
            // thing, unless a write that may not wait was asked for already (a signal right
            // after the start, an exec, a failed allocation), which is served first. A
            // normal exit's final write waits for it: a program that ends before this thread
            // first ran would otherwise have its only report written without NVML (no
            // `usage`, no `total_bytes` where it never queried).
            if !prepared && (seen == 0 || self.only_a_normal_exit_asked(s)) {
                prepared = true;
                let _ = catch_unwind(AssertUnwindSafe(|| self.ledger.prepare_flush_thread()));
            }
            self.serve_requests(s);
            if !prepared {
                prepared = true;
                let _ = catch_unwind(AssertUnwindSafe(|| self.ledger.prepare_flush_thread()));
                continue;
            }
            let now = Instant::now();
            if let (Some(period), Some(due)) = (period, next_tick) {
                if now >= due {
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
            if s.urgent.window(urgent::now_ns()).is_some() {
                let due = *next_window.get_or_insert(now);
                if now >= due {
                    self.window_tick(s);
                    next_window = Some(Instant::now() + urgent::WINDOW_PERIOD);
                }
            } else {
                next_window = None;
            }
            if now >= next_probe {
                if procfs::only_thread_left() == Some(true) {
                    break;
                }
                next_probe = now + LIVENESS_POLL;
            }
            let until = next_tick.map_or(next_probe, |t| t.min(next_probe));
            let until = next_window.map_or(until, |w| w.min(until));
            let now = Instant::now();
            if until > now {
                futex::wait(&s.wake, seen, Some(until - now));
            }
        }
        // Every program thread has ended (the main one with pthread_exit). Returning ends
        // this thread, and glibc then ends the process with exit(0), as it does when the
        // program's last thread returns; the exit handler writes the final report here.
        s.helper.store(false, Ordering::Release);
        restore_signal_mask(&program_mask);
        crate::debug!("the program's threads have all ended; ending the process");
    }

    /// Whether the only write asked for is the final one of a normal exit (which may ask the
    /// driver and NVML).
    fn only_a_normal_exit_asked(&self, s: &Session) -> bool {
        s.exec_requested.load(Ordering::Acquire) == s.exec_served.load(Ordering::Acquire)
            && s.urgent.requested.load(Ordering::Acquire) == s.urgent.served.load(Ordering::Acquire)
            && !s.force.load(Ordering::Acquire)
            && (s.final_request.load(Ordering::Acquire) == 0
                || matches!(decode_final(s.final_code.load(Ordering::Acquire)), ExitState::Exited(_)))
    }

    /// Serve what other threads asked for: exec writes first (a final write asked at the
    /// same time comes after and wins), then the final write, then a forced rewrite.
    pub(super) fn serve_requests(&self, s: &Session) {
        self.serve_urgent(s);
        let want = s.exec_requested.load(Ordering::Acquire);
        if want != s.exec_served.load(Ordering::Acquire) {
            let _ = catch_unwind(AssertUnwindSafe(|| self.exec_write_now(s)));
            s.exec_served.store(want, Ordering::Release);
            futex::wake_all(&s.exec_served);
        }
        if s.final_request.load(Ordering::Acquire) != 0 && s.final_outcome.load(Ordering::Acquire) == PENDING {
            let state = decode_final(s.final_code.load(Ordering::Acquire));
            let wrote = catch_unwind(AssertUnwindSafe(|| self.final_write_now(s, state))).unwrap_or(false);
            s.final_outcome.store(if wrote { WRITTEN } else { NOT_WRITTEN }, Ordering::Release);
            futex::wake_all(&s.final_outcome);
        }
        if s.force.swap(false, Ordering::AcqRel) {
            let _ = catch_unwind(AssertUnwindSafe(|| self.flush_tick(s)));
        }
    }

    /// One flush: write if the ledger changed since the last write, or the device's usage as
    /// NVML reads it. Returns true if written.
    pub(super) fn flush_tick(&self, s: &Session) -> bool {
        let _guard = s.write_lock.lock();
        self.tick_locked(s)
    }

    /// [`Reporter::flush_tick`] for a thread that must not wait long for the write lock:
    /// None when it was not had within `wait`.
    pub(super) fn try_flush_tick(&self, s: &Session, wait: Duration) -> Option<bool> {
        let _guard = s.write_lock.try_lock_for(wait)?;
        Some(self.tick_locked(s))
    }

    /// A periodic write's body, the write lock held.
    fn tick_locked(&self, s: &Session) -> bool {
        if s.finished.load(Ordering::Acquire) || s.exec_pending.load(Ordering::Acquire) != 0 {
            return false;
        }
        let generation = self.ledger.generation();
        // An idle program changes nothing, but the device may: a write also when NVML's
        // reading moved (`crate::gpu`), so the report's device usage stays current. Not
        // asked in an urgent write on a program thread (`urgent_write_here`), which asks
        // nothing of NVML: nothing new in the ledger is nothing to write there.
        if !s.gate.should_write(generation) && (super::urgent::writing() || !self.ledger.devices_changed()) {
            return false;
        }
        let written = self.write(s, ExitState::Running);
        if written {
            s.gate.mark_written(generation);
        }
        written
    }

    /// Wake the flush thread and wait until `done(*word)`, at most `final_wait`. Only
    /// atomics, a futex wake and a bounded futex wait: safe in a signal handler.
    pub(super) fn ask_and_wait(&self, s: &Session, word: &AtomicU32, done: impl Fn(u32) -> bool) -> bool {
        self.wake(s);
        futex::wait_until(word, Instant::now() + self.final_wait, done)
    }
}

/// Block every blockable signal in the calling thread; returns the mask it had. For the
/// flush thread: the host's signal handlers must never run on it, where they could
/// interrupt a report write (holding the write lock or a ledger lock) and, say, call
/// `_exit`, which writes again; nor ours, which would wait for the flush thread itself.
pub(super) fn block_all_signals() -> libc::sigset_t {
    // SAFETY: both sets are properly initialised sigset_t values owned by this frame.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

/// Put back a mask saved by [`block_all_signals`].
pub(super) fn restore_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: `mask` is a valid sigset_t.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, mask, ptr::null_mut());
    }
}

/// The calling thread's blocked signal set contains every one of `signals`.
#[cfg(test)]
pub(super) fn signals_blocked(signals: &[c_int]) -> bool {
    // SAFETY: reads the calling thread's mask into a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, ptr::null(), &mut set) == 0
            && signals.iter().all(|&sig| libc::sigismember(&set, sig) == 1)
    }
}
