//! Minimal Linux futex wait/wake on an `AtomicU32`: async-signal-safe (raw syscalls, no
//! allocation, no locks), so the exit paths can use them from a signal handler.

use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Sleep while `*word == expected`, at most `timeout` (`None`: until woken). May return
/// early (spurious wake-up, signal); callers re-check their condition.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    crate::sync::atomic(word);
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        // Below 10^9: fits any c_long.
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32 for the duration of the call; FUTEX_WAIT only
    // reads it; `ts_ptr` is null or points to a timespec on this frame.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, expected, ts_ptr);
    }
}

/// Wake every thread waiting on `word`.
pub fn wake_all(word: &AtomicU32) {
    crate::sync::atomic(word);
    // SAFETY: as in `wait`; FUTEX_WAKE does not access memory beyond the address.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX);
    }
}

/// Wait until `done(*word)` or `deadline` passes; returns whether `done` held.
pub fn wait_until(word: &AtomicU32, deadline: Instant, done: impl Fn(u32) -> bool) -> bool {
    crate::sync::atomic(word);
    loop {
        let v = word.load(Ordering::Acquire);
        if done(v) {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        wait(word, v, Some(deadline - now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_times_out_and_wake_releases() {
        static W: AtomicU32 = AtomicU32::new(0);
        let start = Instant::now();
        assert!(!wait_until(&W, start + Duration::from_millis(50), |v| v != 0));
        assert!(start.elapsed() >= Duration::from_millis(50));
        let t = std::thread::spawn(|| wait_until(&W, Instant::now() + Duration::from_secs(30), |v| v == 7));
        std::thread::sleep(Duration::from_millis(20));
        W.store(7, Ordering::Release);
        wake_all(&W);
        assert!(t.join().unwrap());
        // Not equal to `expected`: returns at once.
        wait(&W, 0, None);
    }
}
