//! Call sites: who made an allocation that matters. The Python frames of the calling thread
//! (read raw, without the GIL: `python.rs`, `layouts.rs`, `linetable.rs`, through the
//! fault-free reader of `maps.rs`) and its native frames (`native.rs`), interned once per
//! process (`table.rs`); the ledger keeps only the `u32` id (0 = none). The rooms: this
//! file captures and interns; `repeat.rs` is the repeat-proof cache ([`capture_repeat`],
//! [`capture_alloc`]); `table.rs` the bounded table; `render.rs` a site in the report's words.
//!
//! INTERFACE (used by src/hooks, src/report and the classification rules):
//! - [`capture()`] -> site id, for the calling thread, now. Never panics, never blocks on a
//!   lock held across a call out of culedger, never takes the GIL. Hooks call it only for
//!   allocations of at least `CULEDGER_SITE_MIN` bytes ([`wanted`]), failures, free-memory
//!   queries and hidden-cost calls.
//! - [`get(id)`](get) -> the [`Site`]: Python frames then native frames, innermost first.
//! - [`short`] -> the `caller` string of a site.
//! - [`TableResolver`]: the table as the report's rendering asks it (`ledger::SiteResolver`):
//!   the sites the records name, their `caller`, the call sites' health fields;
//!   [`reset_after_fork`] gives a fork child fresh tables.

mod linetable;
mod maps;
mod native;
mod python;
mod render;
mod repeat;
mod table;
mod unwind;

pub mod layouts;

/// The largest call-site id (ids run from 1; 0 is "none").
pub const MAX_SITE_ID: usize = table::MAX_SITES;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use crate::sync::Mutex;

pub use linetable::{line_v310, line_v311};
pub use maps::{REFRESHES, SLOW_READS};
pub use native::internal_object;
pub use python::version_from_name;
pub use render::{short, site_rec, TableResolver};
pub use repeat::{capture_alloc, capture_repeat, repeats};

/// One Python frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PyFrame {
    /// `co_filename`.
    pub file: String,
    /// `co_qualname` (3.11+, e.g. `MHATokenToKVPool._create_buffers`); `co_name` on 3.10.
    pub function: String,
    /// The line being executed when `line_is_current`, else the function's first line.
    pub line: u32,
    pub line_is_current: bool,
}

/// One native frame. Its names are shared (`native::name` interns them): each distinct
/// object or symbol name is stored once among the cached frames.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NativeFrame {
    /// Basename of the shared object or executable (`libnccl.so.2`), `?` when unknown.
    pub object: Arc<str>,
    /// The nearest dynamic symbol `dladdr` gives, if any.
    pub symbol: Option<Arc<str>>,
    /// Offset of the call instruction (return address - 1) from the object's load base.
    pub offset: u64,
    /// A frame of culedger, the CUDA runtime or driver, or the C library / loader.
    pub internal: bool,
}

/// A call site: frames innermost first. Frames are shared, not copied: a native frame is
/// the one cached for its return address (`native::name`), and the table stores each
/// distinct Python frame once among its sites (`table.rs`), equal sites compare and hash
/// by content all the same.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Site {
    pub python: Vec<Arc<PyFrame>>,
    pub native: Vec<Arc<NativeFrame>>,
}

/// A process-wide value reached through a pointer, replaced (the old one leaked) in a fork
/// child, whose copy of any lock inside may be held by a thread that does not exist there.
struct Leaky<T> {
    ptr: AtomicPtr<T>,
    /// The value a fork child inherited and replaced: never freed (a lock inside may be held)
    /// and never read, but kept reachable so that leak checkers see a deliberate orphan, one
    /// per value, rather than a lost block.
    inherited: AtomicPtr<T>,
    make: fn() -> T,
}

impl<T> Leaky<T> {
    const fn new(make: fn() -> T) -> Self {
        Leaky { ptr: AtomicPtr::new(ptr::null_mut()), inherited: AtomicPtr::new(ptr::null_mut()), make }
    }

    fn get(&self) -> &T {
        crate::sync::atomic(&self.ptr);
        let p = self.ptr.load(Ordering::Acquire);
        let value = if !p.is_null() {
            // SAFETY: only leaked boxes are stored, never freed.
            unsafe { &*p }
        } else {
            let fresh = Box::into_raw(Box::new((self.make)()));
            match self.ptr.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                // SAFETY: just stored, never freed.
                Ok(_) => unsafe { &*fresh },
                Err(winner) => {
                    // SAFETY: `fresh` was never shared; `winner` is leaked.
                    unsafe {
                        drop(Box::from_raw(fresh));
                        &*winner
                    }
                }
            }
        };
        crate::sync::published(value);
        value
    }

    fn reset(&self) {
        crate::sync::atomic(&self.ptr);
        crate::sync::atomic(&self.inherited);
        let old = self.ptr.swap(ptr::null_mut(), Ordering::AcqRel);
        if !old.is_null() {
            self.inherited.store(old, Ordering::Release);
        }
    }
}

static TABLE: Leaky<Mutex<table::Table>> = Leaky::new(|| Mutex::new(table::Table::default()));
/// Captures whose Python frames could not be read (the site keeps its native frames).
static MISSES: AtomicU64 = AtomicU64::new(0);
/// Set once (no lock: a fork child keeps it, as it keeps the runtime it describes).
static PY_VERSION: once_cell::sync::OnceCell<String> = once_cell::sync::OnceCell::new();
/// Captures skipped because the thread was inside `dlopen`.
static IN_DLOPEN_SKIPS: AtomicU64 = AtomicU64::new(0);

/// Milliseconds on the coarse monotonic clock (a read of the vDSO's page, no counter read:
/// a few nanoseconds; ticks of a few milliseconds, enough for "at most once a second").
pub(crate) fn coarse_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes the timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1000) + (ts.tv_nsec as u64) / 1_000_000
}

fn set_python_version(v: &str) {
    let _ = PY_VERSION.set(v.to_string());
}

fn note_unreadable_python(why: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    set_python_version(why.split(':').next().unwrap_or(why).trim_start_matches("Python "));
    let line = format!("{why}; call sites carry native frames only");
    if crate::warn_once!(WARNED; "{line}") {
        crate::ledger::global().note_warning(&line);
    }
}

fn miss(why: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    MISSES.fetch_add(1, Ordering::Relaxed);
    let line = format!("could not read the Python frames of a call site ({why}); counted in health.site_misses");
    if crate::warn_once!(WARNED; "{line}") {
        crate::ledger::global().note_warning(&line);
    }
}

/// Should an allocation of `bytes` carry a site (`CULEDGER_SITE_MIN`)?
#[inline]
pub fn wanted(bytes: u64) -> bool {
    bytes >= crate::config::get().site_min
}

/// Tell helgrind (`valgrind` build; a no-op otherwise) that the counters and flags of the
/// call sites are only ever accessed atomically.
fn announce_atomics() {
    crate::sync::atomic(&MISSES);
    crate::sync::atomic(&IN_DLOPEN_SKIPS);
    crate::sync::atomic(&native::FALLBACKS);
    maps::announce_atomics();
}

/// The file name of the loaded object holding `addr` (`libtorch_cuda.so`), None outside every
/// object (cached per address, no lock held during the loader's lookup).
pub fn object_at(addr: u64) -> Option<std::sync::Arc<str>> {
    // `native::name` takes a return address: it looks one byte before it.
    let frame = native::name(addr.wrapping_add(1));
    (!frame.object.is_empty() && &*frame.object != "?").then(|| frame.object.clone())
}

/// The call site of the calling thread, now: its id in the process table (0 when nothing
/// could be captured). Never panics.
pub fn capture() -> u32 {
    crate::rt::quiet_panics();
    announce_atomics();
    catch_unwind(AssertUnwindSafe(capture_inner)).unwrap_or_else(|_| {
        miss("internal error");
        0
    })
}

fn capture_inner() -> u32 {
    // Inside dlopen (a library constructor, the loader lock held): no frames at all.
    if crate::rt::dlopen::in_dlopen() {
        IN_DLOPEN_SKIPS.fetch_add(1, Ordering::Relaxed);
        return 0;
    }
    maps::before_capture();
    let (rt, py) = python_raw();
    let mut ips: Vec<u64> = Vec::new();
    native::backtrace(&mut ips);
    intern_raw(rt, &py, &ips)
}

/// The Python frames of the calling thread, raw (code objects and instruction positions),
/// with the runtime that read them; none when there is no Python or the walk failed (counted
/// in `health.site_misses`). The reader holds the mapping cache's read lock; it is dropped
/// before anything else. The caller has called `maps::before_capture` when there is Python.
fn python_raw() -> (Option<&'static python::Runtime>, Vec<python::RawPy>) {
    let rt = if crate::config::get().py_frames > 0 { python::runtime() } else { None };
    (rt, python_raw_with(rt))
}

/// [`python_raw`] with the runtime already looked up.
fn python_raw_with(rt: Option<&'static python::Runtime>) -> Vec<python::RawPy> {
    let max_py = crate::config::get().py_frames;
    let mut py: Vec<python::RawPy> = Vec::new();
    let mut walk_failed = None;
    if let Some(rt) = rt {
        let mut r = maps::Reader::default();
        if let Err(python::Miss(why)) = rt.walk(&mut r, max_py, &mut py) {
            walk_failed = Some(why);
            py.clear();
        }
        maps::after_capture(r.slow);
    }
    if let Some(why) = walk_failed {
        miss(why);
    }
    py
}

/// The id of the site made of these raw frames, named and interned the first time.
fn intern_raw(rt: Option<&'static python::Runtime>, py: &[python::RawPy], ips: &[u64]) -> u32 {
    let mut raw: Vec<u64> = Vec::with_capacity(2 * py.len() + ips.len() + 1);
    raw.push(py.len() as u64);
    for f in py {
        raw.push(f.code);
        raw.push(f.unit.map_or(u64::MAX, u64::from));
    }
    raw.extend_from_slice(ips);
    if let Some(id) = TABLE.get().lock().by_raw(&raw) {
        return id;
    }
    // First time: name the frames, with no lock of ours held.
    let mut site = Site::default();
    if let Some(rt) = rt.filter(|_| !py.is_empty()) {
        let mut r = maps::Reader::default();
        let named: Result<Vec<PyFrame>, python::Miss> = py.iter().map(|&f| rt.frame(&mut r, f)).collect();
        drop(r);
        match named {
            Ok(frames) => site.python = frames.into_iter().map(Arc::new).collect(),
            Err(python::Miss(why)) => miss(why),
        }
    }
    site.native = ips.iter().map(|&ip| native::name(ip)).collect();
    if site.python.is_empty() && site.native.is_empty() {
        return 0;
    }
    TABLE.get().lock().intern(&raw, site)
}

/// The site with id `id`.
pub fn get(id: u32) -> Option<Arc<Site>> {
    TABLE.get().lock().get(id)
}

/// Number of distinct sites so far.
pub fn count() -> usize {
    TABLE.get().lock().len()
}

/// Captures whose Python frames could not be read.
pub fn misses() -> u64 {
    MISSES.load(Ordering::Relaxed)
}

/// The Python version seen in this process (`3.11.7`), if any.
pub fn python_version() -> Option<String> {
    PY_VERSION.get().cloned()
}

/// In a fork child: fresh tables (the parent's locks may be held by threads that are gone).
/// Counters start over with the child's ledger.
pub fn reset_after_fork() {
    announce_atomics();
    TABLE.reset();
    repeat::EPOCH.fetch_add(1, Ordering::Relaxed);
    MISSES.store(0, Ordering::Relaxed);
    IN_DLOPEN_SKIPS.store(0, Ordering::Relaxed);
    native::FALLBACKS.store(0, Ordering::Relaxed);
    maps::reset_after_fork();
    native::reset_after_fork();
    unwind::reset_after_fork();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_in_a_process_without_python() {
        // The test binary has no Python runtime: native frames only, one id per call site.
        let ids: Vec<u32> = (0..3).map(|_| capture()).collect();
        assert_ne!(ids[0], 0);
        assert!(ids.iter().all(|&i| i == ids[0]), "{ids:?}");
        let s = get(ids[0]).expect("a site");
        assert!(s.python.is_empty());
        assert!(!s.native.is_empty());
    }
}
