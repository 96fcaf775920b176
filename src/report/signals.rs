//! Terminating signals at their default action: write the final report, then let the
//! signal end the process exactly as it would have.
//!
//! At activation, for each signal of `CULEDGER_SIGNALS` (default `TERM,INT,HUP`) that the
//! program leaves at `SIG_DFL`, culedger installs its own handler. When the signal comes,
//! the handler asks the flush thread for the final report (`exit: "signal"`, bounded wait,
//! async-signal-safe: see `Reporter::final_write`), puts the default action back and
//! re-raises the signal on its own thread, unblocked: the process ends by that signal, with
//! the status (and core dump) it would have had. A signal that lands while the thread is
//! inside culedger's bookkeeping (holding a ledger lock the write needs) is handled the
//! moment the bookkeeping ends.
//!
//! The program keeps full control: `sigaction`, `signal`, `bsd_signal` and `sysv_signal` are
//! hooked (`hooks::process`). Installing a handler (or `SIG_IGN`) replaces ours for real;
//! setting `SIG_DFL` keeps ours in place; every query answers what the program itself set
//! last (or what was there before culedger), never our handler. Not covered: `sigset` and
//! raw `rt_sigaction` system calls (they see our handler; a handler they install replaces
//! ours all the same). A process that is pid 1 of its namespace is left alone: the kernel
//! does not deliver default-action signals to it, and catching them would change that.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use libc::{c_int, sighandler_t};

use super::ExitState;

/// The real `sigaction`.
pub type SigactionFn = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

const NSIG: usize = 65;

/// Signals culedger catches when left at their default action (bit n = signal n).
static WANTED: AtomicU64 = AtomicU64::new(0);

/// What the program set (or found) for each wanted signal while our handler stands in for
/// its `SIG_DFL`: the answer to its queries. Guarded by [`Guard`].
struct Dispositions(UnsafeCell<[libc::sigaction; NSIG]>);
// SAFETY: only accessed with the spin lock held (see `Guard`).
unsafe impl Sync for Dispositions {}
// SAFETY: an all-zero sigaction is SIG_DFL with no flags and an empty mask.
static PROGRAM: Dispositions = Dispositions(UnsafeCell::new(unsafe { MaybeUninit::zeroed().assume_init() }));

static LOCK: AtomicBool = AtomicBool::new(false);

fn bit(sig: c_int) -> u64 {
    if (1..NSIG as c_int).contains(&sig) {
        1u64 << sig
    } else {
        0
    }
}

fn wanted(sig: c_int) -> bool {
    WANTED.load(Ordering::Acquire) & bit(sig) != 0
}

/// The spin lock over the dispositions, held with every signal blocked in the holder (so a
/// handler on the same thread can never wait for it).
struct Guard {
    old: libc::sigset_t,
}

impl Guard {
    fn lock() -> Guard {
        // SAFETY: sets on this frame.
        let old = unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            old
        };
        crate::sync::atomic(&LOCK);
        while LOCK.swap(true, Ordering::Acquire) {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
        Guard { old }
    }

    /// The disposition table (the lock is held while `self` lives).
    #[allow(clippy::mut_from_ref)]
    fn table(&self) -> &mut [libc::sigaction; NSIG] {
        // SAFETY: exclusive while the lock is held; `self` proves it is.
        unsafe { &mut *PROGRAM.0.get() }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        LOCK.store(false, Ordering::Release);
        // SAFETY: restores the mask saved in `lock`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, ptr::null_mut()) };
    }
}

fn real() -> Option<SigactionFn> {
    crate::hooks::real_sigaction()
}

fn our_handler() -> sighandler_t {
    on_signal as extern "C" fn(c_int) as sighandler_t
}

/// Install our handler for `sig` (the lock is held).
unsafe fn install_ours(real: SigactionFn, sig: c_int) -> bool {
    let mut act: libc::sigaction = std::mem::zeroed();
    act.sa_sigaction = our_handler();
    // SA_ONSTACK: some runtimes (Go) require it of every handler in the process.
    act.sa_flags = libc::SA_RESTART | libc::SA_ONSTACK;
    libc::sigemptyset(&mut act.sa_mask);
    let wanted = WANTED.load(Ordering::Acquire);
    for s in 1..NSIG as c_int {
        if wanted & bit(s) != 0 {
            libc::sigaddset(&mut act.sa_mask, s);
        }
    }
    real(sig, &act, ptr::null_mut()) == 0
}

/// At activation: catch each of `signals` the program leaves at its default action.
pub fn install(signals: &[c_int]) {
    // SAFETY: no preconditions.
    if signals.is_empty() || unsafe { libc::getpid() } == 1 {
        return;
    }
    let Some(real) = real() else {
        crate::warn!("cannot find sigaction; terminating signals will leave no final report");
        return;
    };
    let bits = signals.iter().fold(0, |acc, &s| acc | bit(s));
    WANTED.fetch_or(bits, Ordering::AcqRel);
    let g = Guard::lock();
    for &sig in signals {
        // SAFETY: query into a local, then install (lock held).
        unsafe {
            let mut cur: libc::sigaction = std::mem::zeroed();
            if real(sig, ptr::null(), &mut cur) != 0 || cur.sa_sigaction != libc::SIG_DFL {
                continue; // the program's handler, SIG_IGN, or ours already (a fork child)
            }
            g.table()[sig as usize] = cur;
            install_ours(real, sig);
        }
    }
}

/// Our `sigaction`: the program's view of the dispositions of the signals culedger may
/// catch, and its control over them. Other signals go straight to the real function.
///
/// # Safety
/// As `sigaction(2)`: `act` and `old` are null or valid.
pub unsafe fn program_sigaction(
    real: SigactionFn,
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if !wanted(sig) {
        return real(sig, act, old);
    }
    let g = Guard::lock();
    let mut cur: libc::sigaction = std::mem::zeroed();
    if real(sig, ptr::null(), &mut cur) != 0 {
        drop(g);
        return real(sig, act, old);
    }
    let ours_now = cur.sa_sigaction == our_handler();
    let believed = if ours_now { g.table()[sig as usize] } else { cur };
    if let Some(new) = act.as_ref() {
        if new.sa_sigaction == libc::SIG_DFL && super::is_ours() && libc::getpid() != 1 {
            // The default, as far as the program can tell: ours stays (or comes back).
            g.table()[sig as usize] = *new;
            if !ours_now {
                install_ours(real, sig);
            }
        } else {
            let rc = real(sig, act, ptr::null_mut());
            if rc != 0 {
                return rc;
            }
        }
    }
    if let Some(old) = old.as_mut() {
        *old = believed;
    }
    0
}

/// `signal`-style registration (`signal`, `bsd_signal`: `SA_RESTART` and the signal masked
/// while it runs; `sysv_signal`: `SA_RESETHAND | SA_NODEFER`) through [`program_sigaction`];
/// `None` when `sig` is not one culedger may catch (the caller forwards).
///
/// # Safety
/// As `signal(2)`.
pub unsafe fn program_signal(sig: c_int, handler: sighandler_t, flags: c_int) -> Option<sighandler_t> {
    if !wanted(sig) {
        return None;
    }
    let real = real()?;
    if handler == libc::SIG_ERR {
        *libc::__errno_location() = libc::EINVAL;
        return Some(libc::SIG_ERR);
    }
    let mut act: libc::sigaction = std::mem::zeroed();
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    libc::sigemptyset(&mut act.sa_mask);
    if flags & libc::SA_NODEFER == 0 {
        libc::sigaddset(&mut act.sa_mask, sig);
    }
    let mut old: libc::sigaction = std::mem::zeroed();
    if program_sigaction(real, sig, &act, &mut old) != 0 {
        return Some(libc::SIG_ERR);
    }
    Some(old.sa_sigaction)
}

/// Our handler. Only async-signal-safe work: the final write is done by the flush thread.
extern "C" fn on_signal(sig: c_int) {
    // SAFETY: errno is thread-local; saved and restored around everything we do.
    let errno = unsafe { *libc::__errno_location() };
    if crate::hooks::in_bookkeeping() {
        // This thread may hold the ledger lock the write needs: finish the bookkeeping
        // first (`after_bookkeeping`).
        crate::hooks::defer_signal(sig);
    } else {
        end_by(sig);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Called by a hook when it leaves culedger's bookkeeping with a signal `sig` that arrived
/// meanwhile (`hooks::defer_signal`): it ends the process now.
#[cold]
pub fn after_bookkeeping(sig: c_int) {
    crate::debug!("signal {sig} arrived during culedger's bookkeeping; handling it now");
    end_by(sig);
}

/// Final report, default action back, signal raised again and unblocked: the process ends
/// here, by `sig`. Should it survive (the signal is ignored after all), reporting resumes
/// and our handler stands in for the default again.
fn end_by(sig: c_int) {
    super::final_write(ExitState::Signaled(sig));
    let Some(real) = real() else { return };
    // SAFETY: sigaction/tgkill/sigprocmask on locals; all async-signal-safe.
    unsafe {
        {
            let g = Guard::lock();
            let mut cur: libc::sigaction = std::mem::zeroed();
            if real(sig, ptr::null(), &mut cur) == 0 && cur.sa_sigaction == our_handler() {
                // What the program set (SIG_DFL, with its flags); otherwise the program
                // installed its own handler meanwhile, and the raise below goes to it.
                let dfl = g.table()[sig as usize];
                real(sig, &dfl, ptr::null_mut());
            }
        }
        libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::syscall(libc::SYS_gettid), sig);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, ptr::null_mut());
        // Still here: the default action did not end the process.
        let _ = std::panic::catch_unwind(|| super::GLOBAL.resume_after_final());
        let g = Guard::lock();
        let mut cur: libc::sigaction = std::mem::zeroed();
        if super::is_ours() && real(sig, ptr::null(), &mut cur) == 0 && cur.sa_sigaction == libc::SIG_DFL {
            g.table()[sig as usize] = cur;
            install_ours(real, sig);
        }
    }
}

/// In a fork child: the lock may have been held by a thread that is not there.
pub fn reset_after_fork() {
    crate::sync::atomic(&LOCK);
    LOCK.store(false, Ordering::Relaxed);
}
