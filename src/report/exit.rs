//! How a process ends or replaces itself, as the report sees it: the final write (from any
//! context, a signal handler's included), the exec write, and the handlers registered for
//! exit, quick exit and fork.
//!
//! Exit: on glibc the exit handler is registered with `on_exit`, which receives the exit
//! status, so `process.exit_code` is known for `exit()` and for a return from `main`
//! without interposing `exit` (elsewhere: `atexit`, code unknown). `_exit` and `_Exit`
//! are exported: they do the final write and then `exit_group` as glibc does. The code is
//! what the parent sees: the low 8 bits.
//!
//! Fork: the `pthread_atfork` child handler forgets the session (write lock included: the
//! parent's flush thread may have held it), records the parent pid and replaces the
//! ledger; only atomic stores and the ledger's lock-free reset. The child writes nothing
//! until one of its own hooks calls `activate()`, which opens a new session and starts a
//! new flush thread.

use super::*;

impl Reporter {
    /// The final write, from any context; true if this call's request wrote the report.
    ///
    /// The exiting thread may be inside a signal handler that interrupted it while it held
    /// a ledger lock or the malloc lock, so when the flush thread runs, the write is done
    /// there and the exiting thread only does async-signal-safe things: atomics, a futex
    /// wake, and a wait bounded by `final_wait` (after which it gives up on the report).
    pub(super) fn final_write(&self, state: ExitState) -> bool {
        let Some(s) = self.ours() else { return false };
        // A signal handler exiting from inside a hook's bookkeeping: this thread may hold
        // the ledger lock the write needs. The last periodic report stands.
        if crate::rt::thread::in_bookkeeping() {
            crate::info!(
                "exit from inside culedger's bookkeeping (a signal handler); keeping the last periodic report"
            );
            return false;
        }
        if !s.helper.load(Ordering::Acquire) || on_flush_thread() {
            return self.final_write_now(s, state);
        }
        let won =
            s.final_code.compare_exchange(NO_REQUEST, encode_final(state), Ordering::AcqRel, Ordering::Acquire).is_ok();
        if won {
            s.final_request.store(1, Ordering::Release);
        }
        let served = self.ask_and_wait(s, &s.final_outcome, |v| v != PENDING);
        if won && !served {
            crate::warn!("the final report write did not finish in time; ending without it");
        }
        won && s.final_outcome.load(Ordering::Acquire) == WRITTEN
    }

    /// Write the final report in this thread (once per session).
    pub(super) fn final_write_now(&self, s: &Session, state: ExitState) -> bool {
        if s.finished.swap(true, Ordering::AcqRel) {
            return false;
        }
        let guard = s.write_lock.try_lock_for(self.final_lock_wait);
        if guard.is_none() {
            crate::warn!("a periodic report write is stuck; writing the final report anyway");
        }
        self.write(s, state)
    }

    /// If a final write is under way, wait for it (bounded): a thread about to end the
    /// process without running our exit handler must not cut it short.
    pub(super) fn wait_for_final_write(&self) {
        let Some(s) = self.ours() else { return };
        if s.final_request.load(Ordering::Acquire) != 0 && !on_flush_thread() {
            self.ask_and_wait(s, &s.final_outcome, |v| v != PENDING);
        }
    }

    /// The final write was made but the process goes on (a re-raised signal was ignored):
    /// write "running" again and accept a later final write.
    pub(super) fn resume_after_final(&self) {
        let Some(s) = self.ours() else { return };
        s.final_request.store(0, Ordering::Release);
        s.final_code.store(NO_REQUEST, Ordering::Release);
        s.final_outcome.store(PENDING, Ordering::Release);
        s.finished.store(false, Ordering::Release);
        s.gate.force();
        s.force.store(true, Ordering::Release);
        self.wake(s);
    }

    /// Before an exec: write the report with `exit = "exec"` and pause periodic writes.
    /// Returns true when the session must hear about a failed exec ([`Reporter::exec_failed`]).
    pub(super) fn exec_begin(&self) -> bool {
        let Some(s) = self.ours() else { return false };
        if s.finished.load(Ordering::Acquire) {
            return false;
        }
        s.exec_pending.fetch_add(1, Ordering::AcqRel);
        if crate::rt::thread::in_bookkeeping() {
            return true;
        }
        if !s.helper.load(Ordering::Acquire) || on_flush_thread() {
            self.exec_write_now(s);
            return true;
        }
        let ticket = s.exec_requested.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        // Served once the flush thread has caught up with this ticket (counters wrap).
        if !self.ask_and_wait(s, &s.exec_served, |v| v.wrapping_sub(ticket) as i32 >= 0) {
            crate::warn!("the report write before exec did not finish in time; executing without it");
        }
        true
    }

    /// The exec returned (failed): the process goes on, so does its report.
    pub(super) fn exec_failed(&self) {
        let Some(s) = self.ours() else { return };
        s.exec_pending.fetch_sub(1, Ordering::AcqRel);
        s.gate.force();
        s.force.store(true, Ordering::Release);
        self.wake(s);
    }

    pub(super) fn exec_write_now(&self, s: &Session) -> bool {
        let _guard = s.write_lock.try_lock_for(self.final_lock_wait);
        !s.finished.load(Ordering::Acquire) && self.write(s, ExitState::Exec)
    }

    /// In a fork child (pthread_atfork child handler): only atomic stores and the ledger's
    /// lock-free reset. The parent's session, lock and flush thread are left behind.
    pub(super) fn after_fork_child(&self, parent_pid: i32) {
        // Our own state first, so that a failing ledger reset cannot leave the child
        // holding the parent's session.
        self.session.store(ptr::null_mut(), Ordering::Relaxed);
        self.forked_from.store(parent_pid, Ordering::Relaxed);
        self.state.store(INACTIVE, Ordering::Release);
        self.ledger.reset_after_fork();
    }
}

// ---- process handlers -------------------------------------------------------------------

static HANDLERS_INSTALLED: AtomicBool = AtomicBool::new(false);
/// Our pid, stored by the prepare handler just before `fork` (the child's parent pid).
static PRE_FORK_PID: AtomicI32 = AtomicI32::new(0);
/// The status given to our `quick_exit` (`NO_STATUS` when unknown).
static QUICK_EXIT_STATUS: AtomicI64 = AtomicI64::new(NO_STATUS);
const NO_STATUS: i64 = i64::MIN;

/// Remember the status of a `quick_exit` for the quick-exit handler (called by our export).
pub fn note_quick_exit_status(status: c_int) {
    QUICK_EXIT_STATUS.store(i64::from(status), Ordering::Release);
}

#[cfg(target_env = "gnu")]
extern "C" {
    /// glibc: like `atexit`, and the handler receives the exit status.
    pub(super) fn on_exit(function: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
}

extern "C" {
    /// C11: register a handler for `quick_exit`.
    pub(super) fn at_quick_exit(function: extern "C" fn()) -> c_int;
}

#[cfg(target_env = "gnu")]
extern "C" fn exit_handler(status: c_int, _arg: *mut c_void) {
    final_write(ExitState::exited(Some(status)));
}

#[cfg(not(target_env = "gnu"))]
extern "C" fn exit_handler() {
    final_write(ExitState::Exited(None));
}

extern "C" fn quick_exit_handler() {
    let status = QUICK_EXIT_STATUS.load(Ordering::Acquire);
    final_write(ExitState::exited(i32::try_from(status).ok()));
}

unsafe extern "C" fn atfork_prepare() {
    PRE_FORK_PID.store(getpid(), Ordering::Relaxed);
}

unsafe extern "C" fn atfork_child() {
    gate::reset_after_fork();
    signals::reset_after_fork();
    let _ = catch_unwind(|| GLOBAL.after_fork_child(PRE_FORK_PID.load(Ordering::Relaxed)));
}

/// Register the exit, quick-exit and fork handlers, once per process image (fork children
/// inherit them).
pub(super) fn install_process_handlers() {
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
    if unsafe { at_quick_exit(quick_exit_handler) } != 0 {
        crate::warn!("cannot register the quick_exit handler; quick_exit will leave no final report");
    }
    // SAFETY: as above.
    let rc = unsafe { libc::pthread_atfork(Some(atfork_prepare), None, Some(atfork_child)) };
    if rc != 0 {
        crate::warn!("cannot register fork handlers; fork children may report their parent's ledger");
    }
}

/// Final write (when active and ours), then end the process the way glibc's `_exit` does.
pub fn exit_process(status: c_int) -> ! {
    if is_active() {
        final_write(ExitState::exited(Some(status)));
    }
    loop {
        // SAFETY: terminating syscalls; they do not return on success.
        unsafe {
            libc::syscall(libc::SYS_exit_group, status);
            libc::syscall(libc::SYS_exit, status);
        }
    }
}
