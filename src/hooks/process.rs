//! libc's process lifecycle: how a process ends (`exit`, `quick_exit`, `_exit`, `_Exit`),
//! replaces itself (`execve`, `execv`, `execvp`, `execvpe`, `execl`, `execle`, `execlp`,
//! `fexecve`, `execveat`), and who handles its signals (`sigaction`, `signal`,
//! `bsd_signal`, `sysv_signal`, `siginterrupt`). Each export does culedger's part (`crate::report`) and
//! forwards to the real function (`crate::rt::real`), found once with `dlsym(RTLD_NEXT)` (at activation, so
//! that a fork child about to exec does not need the loader).
//!
//! glibc's own functions call each other internally (`execl` -> `__execve`, `signal` ->
//! `__sigaction`, a return from `main` -> `exit`), never through these exports: that is why
//! each form is exported, and why the main thread's `exit` is caught by a thread-local
//! destructor registered at load time (see `report::gate`).
//!
//! `execl`, `execle` and `execlp` are variadic, which Rust cannot define: their entries are
//! a few instructions of assembly that spill the register arguments next to the stack ones
//! and call [`exec_list`] with both, which walks the list to its NULL as C's `va_arg` would.

#![cfg_attr(test, allow(dead_code))]

use crate::report::signals::{self, SignalKind};
use crate::rt::real::{
    real_sigaction, Real, BSD_SIGNAL, EXECV, EXECVE, EXECVEAT, EXECVP, EXECVPE, EXIT, FEXECVE, QUICK_EXIT,
    SIGINTERRUPT, SIGNAL, SYSV_SIGNAL,
};
use libc::{c_char, c_int, sighandler_t};

type ExitFn = unsafe extern "C" fn(c_int) -> !;
type ExecveFn = unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type ExecvFn = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
type FexecveFn = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
type ExecveatFn =
    unsafe extern "C" fn(c_int, *const c_char, *const *const c_char, *const *const c_char, c_int) -> c_int;
type SignalFn = unsafe extern "C" fn(c_int, sighandler_t) -> sighandler_t;
type SiginterruptFn = unsafe extern "C" fn(c_int, c_int) -> c_int;

fn errno() -> c_int {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e }
}

fn enosys() -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

/// Run a real exec: the report is written first (`exit: "exec"`); if the exec returns, it
/// failed, the process goes on and so does its report. errno is the exec's.
fn exec_with(exec: impl FnOnce() -> c_int) -> c_int {
    let began = crate::report::exec_begin();
    let rc = exec();
    let err = errno();
    if began {
        crate::report::exec_failed();
    }
    set_errno(err);
    rc
}

/// Kinds of [`exec_list`].
const EXECL: usize = 0;
const EXECLE: usize = 1;
const EXECLP: usize = 2;

/// Argument registers after the first argument (path), where variadic arguments start.
#[cfg(target_arch = "x86_64")]
const ARG_REGS: usize = 5;
#[cfg(target_arch = "aarch64")]
const ARG_REGS: usize = 7;

/// The common body of `execl`, `execle`, `execlp`: `regs` holds the argument registers
/// after `path`, `stack` points at the arguments passed on the stack. Walks `arg0, ...,
/// NULL` (then `envp` for `execle`) and calls the `execv*` form.
unsafe extern "C" fn exec_list(
    path: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
    kind: usize,
) -> c_int {
    let arg = |i: usize| if i < ARG_REGS { *regs.add(i) } else { *stack.add(i - ARG_REGS) };
    let mut n = 0;
    while !arg(n).is_null() {
        n += 1;
    }
    // No allocation for the usual few arguments: exec is async-signal-safe.
    let mut inline = [std::ptr::null::<c_char>(); 64];
    let mut heap = Vec::new();
    let argv: &mut [*const c_char] = if n < inline.len() {
        &mut inline[..=n]
    } else {
        heap.resize(n + 1, std::ptr::null());
        &mut heap
    };
    for (i, slot) in argv.iter_mut().enumerate().take(n) {
        *slot = arg(i);
    }
    match kind {
        EXECLE => execve(path, argv.as_ptr(), arg(n + 1) as *const *const c_char),
        EXECLP => execvp(path, argv.as_ptr()),
        _ => execv(path, argv.as_ptr()),
    }
}

/// The body of an `execl`-style entry: spill the argument registers after `path`, point at
/// the stack arguments, call `exec_list` with the kind in the fourth argument register.
#[cfg(target_arch = "x86_64")]
macro_rules! exec_list_asm {
    () => {
        concat!(
            // Entry rsp = 8 mod 16; 56 bytes keep the call aligned.
            "sub rsp, 56\n",
            "mov [rsp], rsi\n",
            "mov [rsp + 8], rdx\n",
            "mov [rsp + 16], rcx\n",
            "mov [rsp + 24], r8\n",
            "mov [rsp + 32], r9\n",
            "mov rsi, rsp\n",
            "lea rdx, [rsp + 64]\n",
            "mov ecx, {kind}\n",
            "call {imp}\n",
            "add rsp, 56\n",
            "ret",
        )
    };
}

#[cfg(target_arch = "aarch64")]
macro_rules! exec_list_asm {
    () => {
        concat!(
            "stp x29, x30, [sp, #-80]!\n",
            "mov x29, sp\n",
            "stp x1, x2, [sp, #16]\n",
            "stp x3, x4, [sp, #32]\n",
            "stp x5, x6, [sp, #48]\n",
            "str x7, [sp, #64]\n",
            "add x1, sp, #16\n",
            "add x2, sp, #80\n",
            "mov x3, #{kind}\n",
            "bl {imp}\n",
            "ldp x29, x30, [sp], #80\n",
            "ret",
        )
    };
}

/// An `execl`-style entry named `$name` for `exec_list` kind `$kind`.
macro_rules! exec_list_entry {
    ($name:ident, $kind:expr) => {
        /// # Safety
        /// Called by C code as the variadic libc function of the same name.
        #[unsafe(naked)]
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name() {
            std::arch::naked_asm!(exec_list_asm!(), kind = const $kind, imp = sym exec_list)
        }
    };
}

exec_list_entry!(execl, EXECL);
exec_list_entry!(execle, EXECLE);
exec_list_entry!(execlp, EXECLP);

// ---- the exports ------------------------------------------------------------------------------

/// Interposes libc's `exit`: enter the exit gate (one thread ends the process), then exit.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn exit(status: c_int) -> ! {
    crate::report::gate::enter();
    match EXIT.get::<ExitFn>() {
        Some(real) => real(status),
        None => crate::report::exit_process(status),
    }
}

/// Interposes libc's `quick_exit`: as `exit`; the status is kept for the quick-exit handler.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn quick_exit(status: c_int) -> ! {
    crate::report::gate::enter();
    crate::report::note_quick_exit_status(status);
    match QUICK_EXIT.get::<ExitFn>() {
        Some(real) => real(status),
        None => crate::report::exit_process(status),
    }
}

/// Interposes libc's `_exit` (used by `os._exit` and multiprocessing workers).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn _exit(status: c_int) -> ! {
    crate::report::exit_process(status)
}

/// Interposes libc's `_Exit` (same as `_exit`).
#[cfg_attr(not(test), no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn _Exit(status: c_int) -> ! {
    crate::report::exit_process(status)
}

/// Interposes `execve`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    let Some(real) = EXECVE.get::<ExecveFn>() else { return enosys() };
    exec_with(|| real(path, argv, envp))
}

/// Interposes `execv`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(real) = EXECV.get::<ExecvFn>() else { return enosys() };
    exec_with(|| real(path, argv))
}

/// Interposes `execvp`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(real) = EXECVP.get::<ExecvFn>() else { return enosys() };
    exec_with(|| real(file, argv))
}

/// Interposes `execvpe`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    let Some(real) = EXECVPE.get::<ExecveFn>() else { return enosys() };
    exec_with(|| real(file, argv, envp))
}

/// Interposes `fexecve`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    let Some(real) = FEXECVE.get::<FexecveFn>() else { return enosys() };
    exec_with(|| real(fd, argv, envp))
}

/// Interposes `execveat` (glibc 2.34 and later).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    let Some(real) = EXECVEAT.get::<ExecveatFn>() else { return enosys() };
    exec_with(|| real(dirfd, path, argv, envp, flags))
}

/// Interposes `sigaction`: see `report::signals`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    match real_sigaction() {
        Some(real) => signals::program_sigaction(real, sig, act, old),
        None => enosys(),
    }
}

/// A `signal`-family export: culedger's view for the signals it may catch, else the real one.
unsafe fn signal_via(real: &Real, sig: c_int, handler: sighandler_t, kind: SignalKind) -> sighandler_t {
    if let Some(old) = signals::program_signal(sig, handler, kind) {
        return old;
    }
    match real.get::<SignalFn>() {
        Some(f) => f(sig, handler),
        None => {
            set_errno(libc::ENOSYS);
            libc::SIG_ERR
        }
    }
}

/// Interposes `signal` (BSD semantics, as glibc's).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    signal_via(&SIGNAL, sig, handler, SignalKind::Bsd)
}

/// Interposes `bsd_signal` (same as `signal`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    signal_via(&BSD_SIGNAL, sig, handler, SignalKind::Bsd)
}

/// Interposes `sysv_signal` (one-shot, not masked while it runs).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    signal_via(&SYSV_SIGNAL, sig, handler, SignalKind::Sysv)
}

/// Interposes `siginterrupt`: glibc's `signal` reads the set it keeps, which culedger's
/// `signal` cannot see (see `report::signals`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn siginterrupt(sig: c_int, flag: c_int) -> c_int {
    match SIGINTERRUPT.get::<SiginterruptFn>() {
        Some(real) => signals::program_siginterrupt(real, sig, flag),
        None => enosys(),
    }
}

// ---- the main thread's exit ---------------------------------------------------------------------

#[cfg(all(target_env = "gnu", not(test)))]
extern "C" {
    /// glibc (2.18+): register a destructor of the calling thread's thread-local data; it
    /// runs first thing in `exit` when that thread calls it (also glibc's own call after
    /// `main` returns).
    fn __cxa_thread_atexit_impl(
        dtor: extern "C" fn(*mut libc::c_void),
        obj: *mut libc::c_void,
        dso: *mut libc::c_void,
    ) -> c_int;
}

/// The main thread is starting `exit` (from `main` returning, or any call): enter the gate.
#[cfg(all(target_env = "gnu", not(test)))]
extern "C" fn main_thread_exiting(_: *mut libc::c_void) {
    crate::report::gate::enter();
}

/// At load time, on the main thread (an LD_PRELOAD library is loaded there): register
/// [`main_thread_exiting`]. Nothing else runs at load time.
#[cfg(all(target_env = "gnu", not(test)))]
extern "C" fn on_load() {
    // SAFETY: getpid/gettid have no preconditions; the registration takes a function and a
    // symbol of this library (which is never unloaded while the destructor is pending).
    unsafe {
        if libc::syscall(libc::SYS_gettid) == libc::getpid() as libc::c_long {
            let dso = main_thread_exiting as *const () as *mut libc::c_void;
            __cxa_thread_atexit_impl(main_thread_exiting, std::ptr::null_mut(), dso);
        }
    }
}

#[cfg(all(target_env = "gnu", not(test)))]
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
