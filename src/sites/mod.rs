//! Call sites: who made an allocation that matters. The Python frames of the calling thread
//! (read raw, without the GIL: `python.rs`, `layouts.rs`, `linetable.rs`, through the
//! fault-free reader of `maps.rs`) and its native frames (`native.rs`), interned once per
//! process (`table.rs`); the ledger keeps only the `u32` id (0 = none).
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
mod table;
mod unwind;

pub mod layouts;

/// The largest call-site id (ids run from 1; 0 is "none").
pub const MAX_SITE_ID: usize = table::MAX_SITES;

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use crate::sync::Mutex;
use culedger_format::report::{Health, SiteRec};

pub use linetable::{line_v310, line_v311};
pub use maps::{REFRESHES, SLOW_READS};
pub use native::internal_object;
pub use python::version_from_name;
pub use render::{short, site_rec};

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

/// What a previous [`capture_repeat`] or [`capture_alloc`] of a thread saw: its key, stack
/// pointer, Python frames (raw), native return addresses with the stack slots they were read
/// from, and the site they made.
#[derive(Clone)]
struct Last {
    epoch: u64,
    key: usize,
    sp: u64,
    py: Vec<(u64, u32)>,
    ips: Vec<u64>,
    slots: Vec<u64>,
    id: u32,
    /// The mapping cache's generation (`maps::generation`) in which every slot lay in one
    /// cached readable range; None when they did not. While the cache is that same one, the
    /// fault-free reader would find them readable again: they are read directly.
    slots_known: Option<u64>,
}

/// How many allocation sites a thread remembers: weights and buffers are made by a few lines
/// taking turns (a layer's tensors, a pool's key and value buffers), which one remembered site
/// would miss every time.
const ALLOC_WAYS: usize = 4;

/// The remembered captures of one kind of call: tried most recent hit first, a miss replaces
/// the oldest replaced.
struct Ways<const N: usize> {
    last: [Option<Last>; N],
    /// The way that answered last (tried first).
    hit: usize,
    /// The way the next miss replaces.
    next: usize,
}

impl<const N: usize> Ways<N> {
    const fn new() -> Self {
        Ways { last: [const { None }; N], hit: 0, next: 0 }
    }
}

/// A thread's state for [`capture_repeat`] and [`capture_alloc`], in one thread-local.
struct Repeat {
    /// Free-memory queries: one remembered site.
    queries: std::cell::RefCell<Ways<1>>,
    /// Allocations of at least `CULEDGER_SITE_MIN` bytes.
    allocs: std::cell::RefCell<Ways<ALLOC_WAYS>>,
    /// Calls left before the Python runtime is looked for by the clock even though no
    /// `dlopen` entered since the last look (`python::runtime_unless_unchanged`).
    py_recheck_in: std::cell::Cell<u8>,
    /// See `rt::dlopen::in_dlopen_unless_none_since`.
    dlopen_clear_at: std::cell::Cell<u64>,
}

/// Every this many repeated captures, a thread without a Python runtime asks the clock
/// whether to look for one again even though no `dlopen` has entered since the last look.
const PY_RECHECK_EVERY: u8 = 64;

thread_local! {
    static REPEAT: Repeat = const {
        Repeat {
            queries: std::cell::RefCell::new(Ways::new()),
            allocs: std::cell::RefCell::new(Ways::new()),
            py_recheck_in: std::cell::Cell::new(0),
            dlopen_clear_at: std::cell::Cell::new(u64::MAX),
        }
    };
}
/// Bumped in a fork child: a site id remembered by a thread before the fork names nothing
/// in the child's fresh table.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// The stack pointer of the calling function (x86_64; 0 elsewhere: no repeats).
#[inline(always)]
fn stack_pointer() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let sp: u64;
        // SAFETY: reads a register.
        unsafe { std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
        sp
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// [`capture`] for calls a thread repeats from the same place (free-memory queries): the
/// site of this thread's previous call with the same `key` is reused when the Python frames
/// are the same (code objects and instruction positions, walked raw as always) and the
/// native frames provably are: the stack pointer is the same and every stack slot the
/// previous backtrace read a return address from still holds that address. Otherwise a full
/// capture, remembered for the next call. See docs/sites.md, "Free-memory queries".
///
/// Returns the id and whether it was the previous call's: the caller counts those in the
/// record it makes under its device's lock (`Ledger::probe_site`, `health.site_repeats`),
/// which costs nothing there, where a process-wide atomic increment here would be paid on every query.
pub fn capture_repeat(key: usize) -> (u32, bool) {
    crate::rt::quiet_panics();
    catch_unwind(AssertUnwindSafe(|| repeat_inner(key, |r| &r.queries))).unwrap_or_else(|_| {
        miss("internal error");
        (0, false)
    })
}

/// [`capture_repeat`] for allocations (keyed by the entry point): the thread remembers the
/// sites of its last [`ALLOC_WAYS`] distinct allocating places, so lines that take turns are
/// each proven equal to their own previous capture. The hook counts a reused site in the
/// record it makes (`Ledger::alloc_site`). See docs/sites.md, "Repeated allocation sites".
pub fn capture_alloc(key: usize) -> (u32, bool) {
    crate::rt::quiet_panics();
    catch_unwind(AssertUnwindSafe(|| repeat_inner(key, |r| &r.allocs))).unwrap_or_else(|_| {
        miss("internal error");
        (0, false)
    })
}

#[inline(never)]
fn repeat_inner<const N: usize>(key: usize, ways: fn(&Repeat) -> &std::cell::RefCell<Ways<N>>) -> (u32, bool) {
    let sp = stack_pointer();
    let epoch = EPOCH.load(Ordering::Relaxed);
    // One access to the thread-local (each is a call in a shared library): the proof, and
    // on a miss the full capture remembered in place.
    REPEAT
        .try_with(|state| {
            if crate::rt::dlopen::in_dlopen_unless_none_since(&state.dlopen_clear_at) {
                IN_DLOPEN_SKIPS.fetch_add(1, Ordering::Relaxed);
                return (0, false);
            }
            let rt = if crate::config::get().py_frames > 0 {
                let left = state.py_recheck_in.get();
                state.py_recheck_in.set(left.checked_sub(1).unwrap_or(PY_RECHECK_EVERY - 1));
                python::runtime_unless_unchanged(left == 0)
            } else {
                None
            };
            // try_: a signal handler's call inside this thread's own capture finds it busy, and
            // captures without remembering.
            let mut ways = ways(state).try_borrow_mut().ok();
            // The mapping cache is loaded by the first (full) capture; the Python walk wants it
            // fresh, a repeat of native frames only does not.
            let known = ways.as_ref().is_some_and(|w| w.last.iter().any(Option::is_some));
            if !known || rt.is_some() {
                maps::before_capture();
            }
            let py = if rt.is_some() { python_raw_with(rt) } else { Vec::new() };
            if let Some(w) = ways.as_mut() {
                // The way that answered last first, then the others in order.
                let first = w.hit;
                for i in std::iter::once(first).chain((0..N).filter(|&i| i != first)) {
                    let Some(l) = &w.last[i] else { continue };
                    let fits = l.epoch == epoch
                        && l.key == key
                        && l.sp == sp
                        && sp != 0
                        && l.py.len() == py.len()
                        && l.py.iter().zip(&py).all(|(&(c, u), f)| c == f.code && u == f.unit.unwrap_or(u32::MAX));
                    if fits && slots_hold(sp, l) {
                        let id = l.id;
                        w.hit = i;
                        return (id, true);
                    }
                }
            }
            if known && rt.is_none() {
                maps::before_capture();
            }
            let mut ips: Vec<u64> = Vec::new();
            let mut slots: Vec<u64> = Vec::new();
            native::backtrace_noting(&mut ips, Some(&mut slots));
            let id = intern_raw(rt, &py, &ips);
            // Remembered only when every kept return address has its slot (the caching unwinder
            // took the backtrace), each above the stack pointer, and the site was interned.
            let usable = id != 0 && sp != 0 && slots.len() == ips.len() && slots.iter().all(|&s| s > sp && s % 8 == 0);
            if let (Some(w), true) = (ways.as_mut(), usable) {
                let i = w.next;
                w.next = (i + 1) % N;
                w.hit = i;
                w.last[i] = Some(Last {
                    epoch,
                    key,
                    sp,
                    py: py.iter().map(|f| (f.code, f.unit.unwrap_or(u32::MAX))).collect(),
                    slots_known: maps::covering(&slots),
                    ips,
                    slots,
                    id,
                });
            }
            (id, false)
        })
        .unwrap_or((0, false))
}

/// Whether every slot of `l` still holds its return address. The slots lie on this thread's
/// stack above `sp`, but a coroutine's stack may have been replaced since: they are read
/// fault-free, directly when the mapping cache that found them all readable is still the
/// current one (the reader would decide the same), else through the reader.
fn slots_hold(sp: u64, l: &Last) -> bool {
    if l.slots_known.is_some_and(|g| g == maps::generation()) {
        return l.slots.iter().zip(&l.ips).all(|(&s, &ip)| {
            // SAFETY: `s` lay in a readable range of the mapping cache, which has not been
            // refreshed since (the reader would copy from it the same way); 8-aligned.
            s > sp && unsafe { std::ptr::read_volatile(s as *const u64) } == ip
        });
    }
    let mut r = maps::Reader::default();
    l.slots.iter().zip(&l.ips).all(|(&s, &ip)| s > sp && r.u64(s) == Some(ip))
}

/// Captures answered from the thread's previous one (`health.site_repeats`): counted by the
/// probes that carry them (`Ledger::site_repeats`).
pub fn repeats() -> u64 {
    crate::ledger::global().site_repeats()
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

/// The process's call-site table as the report's rendering asks it (`ledger::SiteResolver`):
/// the sites the records name, their short forms, and the call sites' health fields.
pub struct TableResolver;

impl crate::ledger::SiteResolver for TableResolver {
    fn resolve(&self, ids: &BTreeSet<u32>) -> BTreeMap<u32, (SiteRec, Option<String>)> {
        // One lock to copy the sites out; they are rendered without it.
        let found: Vec<(u32, Arc<Site>)> = {
            let t = TABLE.get().lock();
            ids.iter().filter_map(|&id| t.get(id).map(|s| (id, s))).collect()
        };
        found.into_iter().map(|(id, s)| (id, (site_rec(id, &s), short(&s)))).collect()
    }

    fn health(&self, h: &mut Health) {
        h.site_misses = misses();
        h.sites_dropped = TABLE.get().lock().dropped;
        h.native_skipped_in_dlopen = IN_DLOPEN_SKIPS.load(Ordering::Relaxed);
        h.native_unwind_fallbacks = native::FALLBACKS.load(Ordering::Relaxed);
        h.python_version = python_version();
    }
}

/// In a fork child: fresh tables (the parent's locks may be held by threads that are gone).
/// Counters start over with the child's ledger.
pub fn reset_after_fork() {
    announce_atomics();
    TABLE.reset();
    EPOCH.fetch_add(1, Ordering::Relaxed);
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

    fn py(file: &str, function: &str) -> Arc<PyFrame> {
        Arc::new(PyFrame { file: file.into(), function: function.into(), line: 1, line_is_current: true })
    }

    #[test]
    fn the_resolver_names_known_sites_and_fills_the_health_fields() {
        use crate::ledger::SiteResolver;
        let id =
            TABLE.get().lock().intern(&[0xdead_beef, 1], Site { python: vec![py("/a/m.py", "f")], native: vec![] });
        let unknown = u32::MAX;
        let got = TableResolver.resolve(&[id, unknown].into_iter().collect());
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), [id], "an id the table does not know is left out");
        let (rec, caller) = &got[&id];
        assert_eq!(caller.as_deref(), Some("m.py:f"));
        assert_eq!((rec.id, rec.python[0].function.as_str()), (i64::from(id), "f"));
        let mut h = Health { site_misses: u64::MAX, ..Health::default() };
        TableResolver.health(&mut h);
        assert_eq!(h.site_misses, misses());
    }

    #[inline(never)]
    fn query_here() -> u32 {
        std::hint::black_box(capture_repeat(0x5151).0)
    }

    /// A repeat reads its remembered slots directly while the mapping cache that found them
    /// readable is current, else through the reader; either way a changed return address is
    /// caught. What the thread remembers is altered between identical calls: a remembered id
    /// that comes back (`MARK`) was reused, the true one was captured again.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_repeat_proves_its_slots_directly_or_through_the_reader() {
        const MARK: u32 = 999_999;
        let edit =
            |f: &dyn Fn(&mut Last)| REPEAT.with(|r| f(r.queries.borrow_mut().last[0].as_mut().expect("remembered")));
        let mut got = Vec::new();
        for step in 0..7 {
            match step {
                0 | 1 => {}
                2 => edit(&|l| l.id = MARK),
                3 => edit(&|l| {
                    l.id = MARK;
                    l.ips[0] ^= 1;
                }),
                4 => edit(&|l| {
                    l.id = MARK;
                    l.slots_known = None;
                }),
                5 => edit(&|l| {
                    l.id = MARK;
                    l.slots_known = None;
                    l.ips[1] ^= 1;
                }),
                _ => {
                    edit(&|l| l.id = MARK);
                    maps::refresh();
                }
            }
            if step == 2 {
                let known = REPEAT.with(|r| r.queries.borrow().last[0].as_ref().and_then(|l| l.slots_known));
                assert_eq!(known, Some(maps::generation()), "the slots lie in the cached stack");
            }
            got.push(query_here());
        }
        let id = got[0];
        assert_ne!(id, 0);
        assert_eq!(
            got,
            [id, id, MARK, id, MARK, id, MARK],
            "reused, caught directly, reused through the reader, caught there, reused after a refresh"
        );
    }

    const ALLOC_KEY: usize = 0xa110c;

    fn ways<R>(f: impl FnOnce(&mut Ways<ALLOC_WAYS>) -> R) -> R {
        REPEAT.with(|r| f(&mut r.allocs.borrow_mut()))
    }

    #[inline(never)]
    fn alloc_here() -> (u32, bool) {
        std::hint::black_box(capture_alloc(std::hint::black_box(ALLOC_KEY)))
    }

    /// What breaks an allocation site's proof. A test binary's frames are all culedger's (one
    /// native frame is kept), so places cannot differ here by their frames: what the thread
    /// remembers is altered instead, each way given a marked id. A marked id that comes back
    /// was proven; the true one was captured again. (Native callers, Python lines, callers two
    /// frames up and threads: tests/alloc_sites.rs, on the simulated stack.)
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn an_allocation_site_is_reused_only_while_its_proof_holds() {
        const GOOD: u32 = 999_001;
        const BAD: u32 = 999_002;
        let mut truth: Option<Last> = None;
        let variant = |t: &Option<Last>, how: usize, id: u32| -> Last {
            let mut l = Last { id, ..t.clone().expect("captured") };
            match how {
                0 => {}
                1 => l.key ^= 1,
                2 => l.sp -= 16,
                3 => l.py.push((0x1234, 7)),
                4 => l.ips[0] ^= 1,
                _ => l.epoch += 1,
            }
            l
        };
        let mut got = Vec::new();
        let mut hits = Vec::new();
        for step in 0..10 {
            match step {
                0 => ways(|w| *w = Ways::new()),
                1 => {
                    truth = ways(|w| w.last[0].take());
                    let good = variant(&truth, 0, GOOD);
                    ways(|w| w.last[0] = Some(good.clone()));
                }
                // Another key, stack pointer, Python frame, return address, or a fork since:
                // each alone breaks the proof.
                2..=6 => {
                    let bad = variant(&truth, step - 1, BAD);
                    ways(|w| {
                        *w = Ways::new();
                        w.last[0] = Some(bad.clone());
                    })
                }
                // Broken proofs in three ways and a good one in the last: the good one answers.
                7 | 8 => {
                    let v: Vec<Last> =
                        [1, 2, 4, 0].iter().map(|&h| variant(&truth, h, if h == 0 { GOOD } else { BAD })).collect();
                    ways(|w| {
                        *w = Ways::new();
                        for (i, l) in v.iter().enumerate() {
                            w.last[i] = Some(l.clone());
                        }
                        w.next = 0;
                    })
                }
                _ => {}
            }
            got.push(alloc_here());
            hits.push(ways(|w| w.hit));
        }
        let id = got[0].0;
        assert!(id != 0 && id != GOOD && id != BAD);
        let miss = (id, false);
        assert_eq!(
            got,
            [miss, (GOOD, true), miss, miss, miss, miss, miss, (GOOD, true), (GOOD, true), (GOOD, true)],
            "captured, proven, five broken proofs, the fourth way proven"
        );
        assert_eq!(&hits[7..], [3, 3, 3], "the way that answered is tried first");
    }

    /// Queries and allocations are remembered apart: a query between two allocations from
    /// one place does not cost the second its proof, nor the allocation the next query's.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn queries_and_allocations_are_remembered_apart() {
        REPEAT.with(|r| *r.allocs.borrow_mut() = Ways::new());
        let seen: Vec<((u32, bool), (u32, bool))> =
            (0..3).map(|_| (alloc_here(), std::hint::black_box(capture_repeat(0x5151)))).collect();
        let reused: Vec<(bool, bool)> = seen.iter().map(|(a, q)| (a.1, q.1)).collect();
        assert!(seen.iter().all(|(a, q)| a.0 != 0 && q.0 != 0), "{seen:?}");
        assert_eq!(&reused[1..], [(true, true), (true, true)], "{seen:?}");
        let kept =
            REPEAT.with(|r| (r.queries.borrow().last[0].is_some(), r.allocs.borrow().last.iter().flatten().count()));
        assert_eq!(kept, (true, 1));
    }

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
