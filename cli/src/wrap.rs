//! `culedger run` as a transparent wrapper, on the signal side: CMD starts with the signal
//! dispositions and mask `culedger run` started with, a signal CMD already got from its
//! sender is not forwarded a second time, and `culedger run` ends by the signal that ended
//! CMD (what shells, `nohup`, `timeout` and CI runners look at).
//!
//! - What the caller left ignored (`nohup`'s SIGHUP, SIGINT in a script's background job,
//!   SIGPIPE) stays ignored in CMD, and SIGPIPE's disposition is passed through. Rust's
//!   runtime ignores SIGPIPE before `main` and `Command` resets it (and the mask) in the
//!   child, so the dispositions are read by a constructor that runs before Rust's runtime,
//!   and put back between fork and exec ([`child_setup`]).
//! - A signal sent to the whole process group (`kill -- -PGID`, `timeout`) or to every
//!   process of a control group (systemd) reaches CMD from its sender; forwarding it too
//!   would deliver it twice ("a second SIGTERM means force quit"). A [`Canary`], a forked
//!   copy of `culedger run` that blocks every signal, shares CMD's process group and control
//!   group: when it got the same signal (now or within [`CANARY_WAIT`]), the sender reached
//!   everyone and nothing is forwarded. A signal sent to `culedger run` alone is forwarded.
//! - When CMD died of a signal, `culedger run` finishes its summary and then ends by the same
//!   signal at its default action ([`end_like_cmd`]), without a core dump of its own: bash
//!   stops a loop only when its child died of SIGINT.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use libc::c_int;

/// Bit `n - 1`: signal `n` was ignored when the process started.
static IGNORED: AtomicU64 = AtomicU64::new(0);
/// Bit `n - 1`: signal `n` was blocked when the process started.
static BLOCKED: AtomicU64 = AtomicU64::new(0);
/// Whether [`capture`] ran (it does, before `main`, in the `culedger` executable).
static CAPTURED: AtomicBool = AtomicBool::new(false);

fn bit(sig: c_int) -> u64 {
    if (1..=64).contains(&sig) {
        1u64 << (sig - 1)
    } else {
        0
    }
}

/// Before `main` (and before Rust's runtime ignores SIGPIPE): which signals are ignored and
/// blocked, as the caller left them.
extern "C" fn capture() {
    let (mut ignored, mut blocked) = (0u64, 0u64);
    // SAFETY: queries into locals.
    unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        let have_mask = libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask) == 0;
        for sig in 1..=64 {
            let mut cur: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut cur) == 0 && cur.sa_sigaction == libc::SIG_IGN {
                ignored |= bit(sig);
            }
            if have_mask && libc::sigismember(&mask, sig) == 1 {
                blocked |= bit(sig);
            }
        }
    }
    IGNORED.store(ignored, Ordering::Relaxed);
    BLOCKED.store(blocked, Ordering::Relaxed);
    CAPTURED.store(true, Ordering::Release);
}

#[used]
#[link_section = ".init_array"]
static CAPTURE: extern "C" fn() = capture;

/// Was `sig` ignored when `culedger` started?
pub fn ignored_at_start(sig: c_int) -> bool {
    if CAPTURED.load(Ordering::Acquire) {
        return IGNORED.load(Ordering::Relaxed) & bit(sig) != 0;
    }
    // No constructor ran: what is there now (SIGPIPE's start is then unknown: default).
    // SAFETY: a query into a local.
    unsafe {
        let mut cur: libc::sigaction = std::mem::zeroed();
        sig != libc::SIGPIPE
            && libc::sigaction(sig, std::ptr::null(), &mut cur) == 0
            && cur.sa_sigaction == libc::SIG_IGN
    }
}

/// The `pre_exec` step of CMD: every signal ignored at start ignored again (SIGPIPE at its
/// start disposition: `Command` has just reset it to the default), the start mask back.
/// Only async-signal-safe calls: it runs between fork and exec.
pub fn child_setup() -> impl FnMut() -> io::Result<()> + Send + Sync + 'static {
    let ignored: Vec<c_int> = (1..=64).filter(|&s| ignored_at_start(s)).collect();
    let blocked = BLOCKED.load(Ordering::Relaxed);
    move || {
        // SAFETY: sigaction and the mask on the child's own process, nothing allocated.
        unsafe {
            for &sig in &ignored {
                libc::signal(sig, libc::SIG_IGN);
            }
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut mask);
            for sig in 1..=64 {
                if blocked & bit(sig) != 0 {
                    libc::sigaddset(&mut mask, sig);
                }
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
        }
        Ok(())
    }
}

/// How long the canary waits for a signal `culedger run` got: a control group's processes
/// are signalled one after another.
pub const CANARY_WAIT: Duration = Duration::from_millis(50);

/// A forked copy of `culedger run` in the same process group and control group as CMD,
/// with every signal blocked: a signal sent to all of them stays pending in it, where it can
/// be asked for.
pub struct Canary {
    pid: libc::pid_t,
    ask: OwnedFd,
    answer: OwnedFd,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills in two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are fresh descriptors.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Canary {
    /// Fork the canary. Call it while the process has a single thread (fork copies only the
    /// caller), after the signals to forward have handlers.
    pub fn start() -> io::Result<Canary> {
        let (ask_r, ask_w) = pipe()?;
        let (answer_r, answer_w) = pipe()?;
        // SAFETY: the child blocks every signal before anything can reach a handler (the mask
        // is inherited), and only makes async-signal-safe calls until it `_exit`s.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            let parent = libc::getpid();
            let pid = libc::fork();
            if pid == 0 {
                canary_loop(parent, ask_r.as_raw_fd(), answer_w.as_raw_fd());
            }
            let err = io::Error::last_os_error();
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            if pid < 0 {
                return Err(err);
            }
            drop((ask_r, answer_w));
            Ok(Canary { pid, ask: ask_w, answer: answer_r })
        }
    }

    /// Did the canary get `sig` too, by now or within [`CANARY_WAIT`]? Consumes it there.
    pub fn got(&self, sig: c_int) -> bool {
        let Ok(byte) = u8::try_from(sig) else { return false };
        // SAFETY: one byte to and from our own pipes; poll bounds the wait.
        unsafe {
            if libc::write(self.ask.as_raw_fd(), (&byte as *const u8).cast(), 1) != 1 {
                return false;
            }
            let mut pfd = libc::pollfd { fd: self.answer.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let limit = (CANARY_WAIT.as_millis() as c_int) * 4;
            if libc::poll(&mut pfd, 1, limit) != 1 {
                return false;
            }
            let mut got = 0u8;
            libc::read(self.answer.as_raw_fd(), (&mut got as *mut u8).cast(), 1) == 1 && got == 1
        }
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        // SAFETY: our own child, reaped here.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The canary's life: answer each signal number asked with 1 when that signal is pending or
/// arrives within [`CANARY_WAIT`] (taking it), else 0; end with its parent.
unsafe fn canary_loop(parent: libc::pid_t, ask: c_int, answer: c_int) -> ! {
    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    if libc::getppid() != parent {
        libc::_exit(0);
    }
    // Hold nothing of the caller's open (its stdout pipe, the terminal) but the two pipes.
    for fd in 0..1024 {
        if fd != ask && fd != answer {
            libc::close(fd);
        }
    }
    let wait = libc::timespec { tv_sec: 0, tv_nsec: CANARY_WAIT.as_nanos() as libc::c_long };
    loop {
        let mut sig = 0u8;
        if libc::read(ask, (&mut sig as *mut u8).cast(), 1) != 1 {
            libc::_exit(0);
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, c_int::from(sig));
        let got = u8::from(libc::sigtimedwait(&set, std::ptr::null_mut(), &wait) == c_int::from(sig));
        libc::write(answer, (&got as *const u8).cast(), 1);
    }
}

/// The signal that ended CMD, if one did (0: none).
static DIED_BY: AtomicI32 = AtomicI32::new(0);

/// Note how CMD ended, for [`end_like_cmd`].
pub fn note_end(status: &ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    DIED_BY.store(status.signal().unwrap_or(0), Ordering::Relaxed);
}

/// When CMD died of a signal: end this process by it too, at its default action and without
/// a core dump. Returns when CMD exited (or, should the signal not end us, at once).
pub fn end_like_cmd() {
    let sig = DIED_BY.load(Ordering::Relaxed);
    if sig == 0 {
        return;
    }
    use std::io::Write;
    let _ = io::stdout().flush();
    let _ = io::stderr().flush();
    // SAFETY: process-wide settings of our own, then the signal to ourselves.
    unsafe {
        let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::raise(sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_cover_every_signal_once() {
        assert_eq!(bit(0), 0);
        assert_eq!(bit(65), 0);
        assert_eq!(bit(1), 1);
        assert_eq!(bit(64), 1 << 63);
    }

    #[test]
    fn the_start_dispositions_were_captured_before_main() {
        assert!(CAPTURED.load(Ordering::Acquire));
        // Rust's runtime ignores SIGPIPE after the capture: what was captured is the test
        // runner's own start (the default, unless it was started with SIGPIPE ignored).
        // SAFETY: a query into a local.
        let now_ignored = unsafe {
            let mut cur: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut cur) == 0 && cur.sa_sigaction == libc::SIG_IGN
        };
        assert!(now_ignored, "Rust's runtime ignores SIGPIPE");
    }
}
