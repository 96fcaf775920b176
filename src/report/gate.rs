//! The exit gate: one thread ends the process, the others wait for it.
//!
//! glibc 2.36 (Debian 12, Ubuntu 22.04/24.04, RHEL 9) does not serialise `exit`:
//! `__run_exit_handlers` (stdlib/exit.c) pops the handlers one by one under
//! `__exit_funcs_lock` and releases the lock while each runs, so two threads calling `exit`
//! share out the handlers between them, and whichever finds the list empty first calls
//! `_exit` and kills the process, while the other may still be inside a handler: ours,
//! writing the final report. glibc 2.41 fixed this (commit f6ba993e0c, BZ 31997, "stdlib:
//! Allow concurrent exit"): a recursive `__exit_lock` taken at the start of
//! `__run_exit_handlers` makes every other caller block until the first one has ended the
//! process, while a handler's own call to `exit` goes on (recursive lock). The gate gives
//! every glibc those semantics while culedger reports: our `exit` and `quick_exit` enter
//! it before the real function, and so does the main thread when it starts `exit` after
//! returning from `main` (a thread-local destructor of the main thread, which
//! `__run_exit_handlers` runs first; glibc's own call to `exit` cannot be interposed).
//!
//! A waiting thread gives up after [`EXIT_GRACE`] (the owner may be waiting for it, say
//! joining it from an atexit handler: with glibc 2.36 alone, the second `exit` would have
//! ended the process at once) and goes on into `exit` as glibc 2.36 would, once any final
//! write under way has finished. If the owner thread disappears without ending the process,
//! the next waiter takes over. Only atomics, `tgkill(tid, 0)` and futex waits: safe in a
//! signal handler.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::futex;

/// Thread id of the thread ending the process; 0 while nobody does.
static OWNER: AtomicU32 = AtomicU32::new(0);

/// How long a second thread calling `exit` waits for the first before going on.
pub const EXIT_GRACE: Duration = Duration::from_secs(10);
/// How often a waiter checks that the owner still exists.
const OWNER_POLL: Duration = Duration::from_millis(50);

fn gettid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Does thread `tid` of this process still exist?
fn thread_alive(tid: u32) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Enter the gate before ending the process: returns at once for the first thread (and for
/// it again, from a handler), after the owner ended the process (never, then) or after
/// [`EXIT_GRACE`] for any other. Does nothing when culedger does not report for this process.
pub fn enter() {
    if !super::is_ours() {
        return;
    }
    enter_with(gettid(), EXIT_GRACE, || super::GLOBAL.wait_for_final_write());
}

/// [`enter`] for thread `me`, waiting at most `grace`; `before_giving_up` runs when the wait
/// times out.
fn enter_with(me: u32, grace: Duration, before_giving_up: impl FnOnce()) {
    let deadline = Instant::now() + grace;
    loop {
        let owner = match OWNER.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(owner) if owner == me => return,
            Err(owner) => owner,
        };
        if !thread_alive(owner) {
            // The owner ended without ending the process: take over.
            let _ = OWNER.compare_exchange(owner, 0, Ordering::AcqRel, Ordering::Acquire);
            continue;
        }
        let now = Instant::now();
        if now >= deadline {
            crate::warn!("another thread has been ending the process for {grace:?}; this exit goes on");
            before_giving_up();
            return;
        }
        futex::wait(&OWNER, owner, Some(OWNER_POLL.min(deadline - now)));
    }
}

/// In a fork child: the thread that owned the gate is not there.
pub fn reset_after_fork() {
    OWNER.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    // One test: the gate is process-wide.
    #[test]
    fn first_thread_owns_others_wait_recursion_passes_and_dead_owners_are_replaced() {
        reset_after_fork();
        let me = gettid();
        enter_with(me, Duration::from_secs(5), || panic!("the first thread never waits"));
        enter_with(me, Duration::from_secs(5), || panic!("a handler's exit is recursive"));
        assert_eq!(OWNER.load(Ordering::SeqCst), me);

        // Another thread waits the whole grace period, then goes on.
        let gave_up = AtomicBool::new(false);
        let start = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| enter_with(gettid(), Duration::from_millis(300), || gave_up.store(true, Ordering::SeqCst)));
        });
        assert!(gave_up.load(Ordering::SeqCst));
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert_eq!(OWNER.load(Ordering::SeqCst), me, "the owner stays");

        // An owner thread that ended: the next thread takes over without waiting.
        reset_after_fork();
        let gone = std::thread::spawn(|| {
            let t = gettid();
            enter_with(t, Duration::from_secs(5), || {});
            t
        })
        .join()
        .unwrap();
        assert_eq!(OWNER.load(Ordering::SeqCst), gone);
        let start = Instant::now();
        enter_with(me, Duration::from_secs(5), || panic!("must take over, not time out"));
        assert_eq!(OWNER.load(Ordering::SeqCst), me);
        assert!(start.elapsed() < Duration::from_secs(2));
        reset_after_fork();
    }
}
