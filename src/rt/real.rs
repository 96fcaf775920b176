//! The real libc and loader entry points culedger calls itself, found after libculedger
//! (`RTLD_NEXT`): `dlsym` through `dlvsym` (our own `dlsym` export is in the way of a plain
//! look-up), the rest through that `dlsym`. The hooks forward to them, the report writer
//! installs its signal handlers with the real `sigaction`, and the call sites look up the
//! Python runtime's symbols with the real `dlsym`.

use libc::{c_char, c_int, c_void};
use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

pub const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;
pub const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

/// The real `dlsym`; the assembly entry jumps through it.
pub(crate) static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// glibc versions of `dlsym`: 2.34 moved it into libc; before that it lived in libdl.
#[cfg(target_arch = "x86_64")]
const DLSYM_VERSIONS: &[&[u8]] = &[b"GLIBC_2.34\0", b"GLIBC_2.2.5\0"];
#[cfg(target_arch = "aarch64")]
const DLSYM_VERSIONS: &[&[u8]] = &[b"GLIBC_2.34\0", b"GLIBC_2.17\0"];

pub(crate) fn resolve_real_dlsym() -> usize {
    let p = REAL_DLSYM.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    for v in DLSYM_VERSIONS {
        let f = unsafe { libc::dlvsym(RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr() as *const c_char) };
        if !f.is_null() {
            REAL_DLSYM.store(f as usize, Ordering::Release);
            return f as usize;
        }
    }
    0
}

/// Call the real `dlsym` from inside libculedger (for our own lookups: `RTLD_NEXT` then
/// means "after libculedger", which is what we want).
///
/// # Safety
/// As `dlsym`: `handle` is a handle `dlopen` gave, `RTLD_DEFAULT` or `RTLD_NEXT`; `name` is
/// a NUL-terminated string.
pub unsafe fn real_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let p = resolve_real_dlsym();
    if p == 0 {
        return std::ptr::null_mut();
    }
    let f: DlsymFn = std::mem::transmute::<usize, DlsymFn>(p);
    f(handle, name)
}

/// A libc function found with `dlsym(RTLD_NEXT)` on first use.
pub(crate) struct Real {
    name: &'static CStr,
    addr: AtomicUsize,
}

impl Real {
    const fn new(name: &'static CStr) -> Real {
        Real { name, addr: AtomicUsize::new(0) }
    }

    fn resolve(&self) -> usize {
        let mut p = self.addr.load(Ordering::Acquire);
        if p == 0 {
            // SAFETY: NUL-terminated name; RTLD_NEXT from libculedger means "after us".
            p = unsafe { real_dlsym(RTLD_NEXT, self.name.as_ptr()) } as usize;
            self.addr.store(p, Ordering::Release);
        }
        p
    }

    /// The function as `F` (its C signature), if libc has it.
    pub(crate) fn get<F: Copy>(&self) -> Option<F> {
        debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
        let p = self.resolve();
        // SAFETY: `F` is the function-pointer type of this symbol's C signature.
        (p != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&p) })
    }
}

pub(crate) static EXIT: Real = Real::new(c"exit");
pub(crate) static QUICK_EXIT: Real = Real::new(c"quick_exit");
pub(crate) static EXECVE: Real = Real::new(c"execve");
pub(crate) static EXECV: Real = Real::new(c"execv");
pub(crate) static EXECVP: Real = Real::new(c"execvp");
pub(crate) static EXECVPE: Real = Real::new(c"execvpe");
pub(crate) static FEXECVE: Real = Real::new(c"fexecve");
pub(crate) static EXECVEAT: Real = Real::new(c"execveat");
pub(crate) static SIGACTION: Real = Real::new(c"sigaction");
pub(crate) static SIGNAL: Real = Real::new(c"signal");
pub(crate) static BSD_SIGNAL: Real = Real::new(c"bsd_signal");
pub(crate) static SYSV_SIGNAL: Real = Real::new(c"sysv_signal");
pub(crate) static SIGINTERRUPT: Real = Real::new(c"siginterrupt");

const ALL: [&Real; 13] = [
    &EXIT,
    &QUICK_EXIT,
    &EXECVE,
    &EXECV,
    &EXECVP,
    &EXECVPE,
    &FEXECVE,
    &EXECVEAT,
    &SIGACTION,
    &SIGNAL,
    &BSD_SIGNAL,
    &SYSV_SIGNAL,
    &SIGINTERRUPT,
];

/// The real `sigaction`'s C signature.
pub type SigactionFn = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

/// Resolve every real function now (called at activation).
pub fn prefetch_libc() {
    for r in ALL {
        r.resolve();
    }
}

/// The real `sigaction`.
pub fn real_sigaction() -> Option<SigactionFn> {
    SIGACTION.get()
}
