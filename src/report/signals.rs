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
//! The program keeps full control: `sigaction`, `signal`, `bsd_signal`, `sysv_signal` and
//! `siginterrupt` are hooked (`hooks::process`). Installing a handler (or `SIG_IGN`) replaces
//! ours for real; setting `SIG_DFL` keeps ours in place; every query answers what glibc would
//! answer for what the program itself set last (or what was there before culedger), field for
//! field, never our handler: glibc's `__libc_sigaction` adds `SA_RESTORER` and its own
//! restorer to every action it installs (x86_64), and the kernel drops `SIGKILL` and `SIGSTOP`
//! from a mask. `signal`/`bsd_signal` set `SA_RESTART` unless `siginterrupt` marked the
//! signal (glibc's `__bsd_signal` and its `_sigintr` set, sysdeps/posix/signal.c,
//! siginterrupt.c); `sysv_signal` sets `SA_RESETHAND | SA_NODEFER | SA_INTERRUPT`
//! (sysdeps/posix/sysv_signal.c). Not covered: `sigset` and
//! raw `rt_sigaction` system calls (they see our handler; a handler they install replaces
//! ours all the same). A process that is pid 1 of its namespace is left alone: the kernel
//! does not deliver default-action signals to it, and catching them would change that.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use libc::{c_int, sighandler_t};

use super::ExitState;

pub use crate::rt::real::SigactionFn;

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

/// Signals `siginterrupt(sig, 1)` marked (bit n = signal n): glibc's `signal` leaves
/// `SA_RESTART` off for them.
static INTERRUPTING: AtomicU64 = AtomicU64::new(0);

/// What glibc's `sigaction` adds to every action it installs, as the kernel then answers:
/// `SA_RESTORER` (0 where glibc does not set one) and the restorer. Learned from our own
/// handler once it is installed.
static RESTORER_FLAG: AtomicU64 = AtomicU64::new(0);
static RESTORER: AtomicU64 = AtomicU64::new(0);

/// The flag bits the kernel keeps (Linux 5.11 and later clear those outside its uapi set,
/// `SA_INTERRUPT` among them; older kernels keep every bit). Learned with our handler, which
/// is installed with `SA_INTERRUPT` (a no-op) to tell.
static KEPT_FLAGS: AtomicU64 = AtomicU64::new(u32::MAX as u64);

/// Linux's `UAPI_SA_FLAGS` (include/linux/signal_types.h), with the arch's `SA_RESTORER` and
/// arm64's `SA_EXPOSE_TAGBITS`.
const UAPI_SA_FLAGS: c_int = libc::SA_NOCLDSTOP
    | libc::SA_NOCLDWAIT
    | libc::SA_SIGINFO
    | libc::SA_ONSTACK
    | libc::SA_RESTART
    | libc::SA_NODEFER
    | libc::SA_RESETHAND
    | SA_RESTORER
    | 0x800;

/// Linux's `SA_RESTORER` (x86_64, aarch64; the libc crate leaves it out).
const SA_RESTORER: c_int = 0x0400_0000;

/// glibc's `SA_INTERRUPT` (a historical no-op flag the kernel keeps; `sysv_signal` sets it).
const SA_INTERRUPT: c_int = 0x2000_0000;

/// Which `signal`-style function a registration comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SignalKind {
    /// `signal`, `bsd_signal`: the signal masked while its handler runs, `SA_RESTART` unless
    /// `siginterrupt` marked it.
    Bsd,
    /// `sysv_signal`: one-shot, not masked.
    Sysv,
}

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
    crate::rt::real::real_sigaction()
}

fn our_handler() -> sighandler_t {
    on_signal as extern "C" fn(c_int) as sighandler_t
}

/// Install our handler for `sig` (the lock is held).
unsafe fn install_ours(real: SigactionFn, sig: c_int) -> bool {
    let mut act: libc::sigaction = std::mem::zeroed();
    act.sa_sigaction = our_handler();
    // SA_ONSTACK: some runtimes (Go) require it of every handler in the process.
    act.sa_flags = libc::SA_RESTART | libc::SA_ONSTACK | SA_INTERRUPT;
    libc::sigemptyset(&mut act.sa_mask);
    let wanted = WANTED.load(Ordering::Acquire);
    for s in 1..NSIG as c_int {
        if wanted & bit(s) != 0 {
            libc::sigaddset(&mut act.sa_mask, s);
        }
    }
    if real(sig, &act, ptr::null_mut()) != 0 {
        return false;
    }
    let mut now: libc::sigaction = std::mem::zeroed();
    if real(sig, ptr::null(), &mut now) == 0 && now.sa_sigaction == our_handler() {
        RESTORER_FLAG.store((now.sa_flags & SA_RESTORER) as u64, Ordering::Relaxed);
        RESTORER.store(now.sa_restorer.map_or(0, |f| f as usize as u64), Ordering::Relaxed);
        let kept = if now.sa_flags & SA_INTERRUPT != 0 { -1 } else { UAPI_SA_FLAGS };
        KEPT_FLAGS.store(kept as u32 as u64, Ordering::Relaxed);
    }
    true
}

/// `act` as the kernel would keep it had glibc's `sigaction` installed it, which is what a
/// later query would answer.
fn as_installed(act: &libc::sigaction) -> libc::sigaction {
    let mut kept = *act;
    kept.sa_flags &= KEPT_FLAGS.load(Ordering::Relaxed) as u32 as c_int;
    let flag = RESTORER_FLAG.load(Ordering::Relaxed) as c_int;
    if flag != 0 {
        kept.sa_flags |= flag;
        let f = RESTORER.load(Ordering::Relaxed) as usize;
        // SAFETY: the restorer glibc itself installs (an `extern "C" fn()`), or none.
        kept.sa_restorer = (f != 0).then(|| unsafe { std::mem::transmute::<usize, extern "C" fn()>(f) });
    }
    // SAFETY: a valid set.
    unsafe {
        libc::sigdelset(&mut kept.sa_mask, libc::SIGKILL);
        libc::sigdelset(&mut kept.sa_mask, libc::SIGSTOP);
    }
    kept
}

/// Copy `answer` into the program's `old`, as glibc's `sigaction` fills it in: where glibc
/// keeps no restorer (the kernel answers none), `old.sa_restorer` is left as it was.
fn answer(old: &mut libc::sigaction, answer: &libc::sigaction) {
    let restorer = old.sa_restorer;
    *old = *answer;
    if RESTORER_FLAG.load(Ordering::Relaxed) == 0 && answer.sa_flags & SA_RESTORER == 0 {
        old.sa_restorer = restorer;
    }
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
            g.table()[sig as usize] = as_installed(new);
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
        answer(old, &believed);
    }
    0
}

/// `signal`-style registration through [`program_sigaction`], with the flags and mask
/// glibc's function of that `kind` uses; `None` when `sig` is not one culedger may catch
/// (the caller forwards).
///
/// # Safety
/// As `signal(2)`.
pub unsafe fn program_signal(sig: c_int, handler: sighandler_t, kind: SignalKind) -> Option<sighandler_t> {
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
    libc::sigemptyset(&mut act.sa_mask);
    match kind {
        SignalKind::Bsd => {
            libc::sigaddset(&mut act.sa_mask, sig);
            let interrupting = INTERRUPTING.load(Ordering::Acquire) & bit(sig) != 0;
            act.sa_flags = if interrupting { 0 } else { libc::SA_RESTART };
        }
        SignalKind::Sysv => act.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER | SA_INTERRUPT,
    }
    let mut old: libc::sigaction = std::mem::zeroed();
    if program_sigaction(real, sig, &act, &mut old) != 0 {
        return Some(libc::SIG_ERR);
    }
    Some(old.sa_sigaction)
}

/// Our `siginterrupt`: glibc's (which keeps the set its `signal` reads and changes the
/// installed action's `SA_RESTART`), then, while our handler stands in for the program's
/// default, the same change to what the program believes is installed, and our handler's
/// own flags back.
///
/// # Safety
/// `real` is glibc's `siginterrupt`.
pub unsafe fn program_siginterrupt(real: unsafe extern "C" fn(c_int, c_int) -> c_int, sig: c_int, on: c_int) -> c_int {
    let guard = wanted(sig).then(Guard::lock);
    let rc = real(sig, on);
    if rc != 0 {
        return rc;
    }
    if on != 0 {
        INTERRUPTING.fetch_or(bit(sig), Ordering::AcqRel);
    } else {
        INTERRUPTING.fetch_and(!bit(sig), Ordering::AcqRel);
    }
    let (Some(g), Some(real_sa)) = (guard, self::real()) else { return rc };
    let mut cur: libc::sigaction = std::mem::zeroed();
    if real_sa(sig, ptr::null(), &mut cur) == 0 && cur.sa_sigaction == our_handler() {
        let mut believed = g.table()[sig as usize];
        if on != 0 {
            believed.sa_flags &= !libc::SA_RESTART;
        } else {
            believed.sa_flags |= libc::SA_RESTART;
        }
        g.table()[sig as usize] = as_installed(&believed);
        install_ours(real_sa, sig);
    }
    rc
}

/// Our handler. Only async-signal-safe work: the final write is done by the flush thread.
extern "C" fn on_signal(sig: c_int) {
    // SAFETY: errno is thread-local; saved and restored around everything we do.
    let errno = unsafe { *libc::__errno_location() };
    if crate::rt::thread::in_bookkeeping() {
        // This thread may hold the ledger lock the write needs: finish the bookkeeping
        // first (`after_bookkeeping`).
        crate::rt::thread::defer_signal(sig);
    } else {
        end_by(sig);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Called by a hook when it leaves culedger's bookkeeping with a signal `sig` that arrived
/// meanwhile (`rt::thread::defer_signal`): it ends the process now.
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
