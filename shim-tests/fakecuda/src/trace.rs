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
