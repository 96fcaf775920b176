//! `FAKECUDA_TRACE=<file>`: one appended line per `cuGetProcAddress*` call and per init event, so
//! tests can prove how a runtime reached the driver. Lines are written with a single `write(2)` on
//! an `O_APPEND` descriptor (atomic between processes). Nothing is done when the variable is unset.
//!
//! Formats:
//! * `getproc <name> <version> <flags> -> <result> <symbol or ->` (result is the `CUresult` number)
//! * `init cuInit <flags> -> <result>`
//! * `init cuGetExportTable -> <result>`
//! * `error <entry point> -> <result>` for each call that returned an error, only with
//!   `FAKECUDA_TRACE_ERRORS=1` too (what a real program such as NCCL was refused, and where).
//! * `charge <what> <bytes> dev <ordinal> by <entry point> [lib 0x<handle>] ctx 0x<context> tid <tid>`
//!   for each hidden cost charged (a module loaded, a library loaded lazily into a context),
//!   only with `FAKECUDA_TRACE_CHARGES=1` too: where a tool on top of the driver must see it.
//!   `<entry point>` is the exported entry point the charge happened in, or `(export table)`
//!   for the runtime's private tables; `usage +<bytes>|-<bytes> dev <ordinal> by <entry point>
//!   pid <pid> t <monotonic us>` for every change of a device's usage; and `library 0x<handle> by <entry point>` for each
//!   context-independent library loaded (lazily: nothing charged then).

use std::os::raw::c_int;
use std::sync::OnceLock;

fn fd() -> Option<c_int> {
    static FD: OnceLock<Option<c_int>> = OnceLock::new();
    *FD.get_or_init(|| {
        let path = std::env::var_os("FAKECUDA_TRACE")?;
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())).ok()?;
        // SAFETY: open(2) on a NUL-terminated path.
        let fd =
            unsafe { libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC, 0o644) };
        if fd < 0 {
            crate::warn(&format!("cannot open FAKECUDA_TRACE file {path:?}; tracing disabled"));
            return None;
        }
        Some(fd)
    })
}

/// Passes `rc` through, tracing it when it is an error and `FAKECUDA_TRACE_ERRORS=1`.
pub fn failed(name: &str, rc: crate::types::CUresult) -> crate::types::CUresult {
    static ON: OnceLock<bool> = OnceLock::new();
    if rc != 0 && *ON.get_or_init(|| std::env::var_os("FAKECUDA_TRACE_ERRORS").is_some_and(|v| v == "1")) {
        line(|| format!("error {name} -> {rc}"));
    }
    rc
}

thread_local! {
    /// The entry point the calling thread is in (the innermost), "" outside any.
    static ENTRY: std::cell::Cell<&'static str> = const { std::cell::Cell::new("") };
}

/// The calling thread is inside entry point `name` while this lives (restores the outer one).
pub struct Entry(&'static str);

impl Entry {
    #[inline]
    pub fn enter(name: &'static str) -> Entry {
        Entry(ENTRY.try_with(|e| e.replace(name)).unwrap_or(""))
    }
}

impl Drop for Entry {
    #[inline]
    fn drop(&mut self) {
        let _ = ENTRY.try_with(|e| e.set(self.0));
    }
}

fn charges_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("FAKECUDA_TRACE_CHARGES").is_some_and(|v| v == "1"))
}

fn entry() -> &'static str {
    let entry = ENTRY.try_with(|e| e.get()).unwrap_or("");
    if entry.is_empty() {
        "(export table)"
    } else {
        entry
    }
}

/// A context-independent library was loaded (nothing charged yet): `library 0x<handle> by
/// <entry point>`, with `FAKECUDA_TRACE_CHARGES=1`.
pub fn library_loaded(lib: u64) {
    if charges_on() {
        line(|| format!("library 0x{lib:x} by {}", entry()));
    }
}

/// A hidden cost of `bytes` charged on `dev` (`what`: module, library), traced with the entry
/// point the calling thread is in when `FAKECUDA_TRACE_CHARGES=1`.
pub fn charge(what: &str, bytes: u64, dev: usize, lib: Option<u64>, ctx: u64) {
    if !charges_on() {
        return;
    }
    line(|| {
        let entry = entry();
        let lib = lib.map(|l| format!(" lib 0x{l:x}")).unwrap_or_default();
        // SAFETY: gettid(2) takes no arguments.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        format!("charge {what} {bytes} dev {dev} by {entry}{lib} ctx 0x{ctx:x} pid {} tid {tid}", std::process::id())
    });
}

/// Every change of a device's usage (`+` charged, `-` given back), with the entry point, when
/// `FAKECUDA_TRACE_CHARGES=1`: `usage +<bytes> dev <ordinal> by <entry point> pid <pid> t <us>`
/// (t: CLOCK_MONOTONIC microseconds).
pub fn usage(sign: char, bytes: u64, dev: usize) {
    if !charges_on() || bytes == 0 {
        return;
    }
    line(|| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime(2) writes the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let t = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000;
        format!("usage {sign}{bytes} dev {dev} by {} pid {} t {t}", entry(), std::process::id())
    });
}

/// Appends one line (built only if tracing is on).
pub fn line(f: impl FnOnce() -> String) {
    if let Some(fd) = fd() {
        let mut s = f();
        s.push('\n');
        // SAFETY: writing an owned buffer to our own descriptor.
        unsafe {
            libc::write(fd, s.as_ptr().cast(), s.len());
        }
    }
}
