//! The repeat-proof cache: a thread remembers what its last captures from a place saw, and
//! reuses the site when the frames provably have not changed (docs/sites.md, "Free-memory
//! queries", "Repeated allocation sites"). Its state is thread-local; a fork child's fresh
//! table is told apart by [`EPOCH`].

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{intern_raw, maps, miss, native, python, python_raw_with, IN_DLOPEN_SKIPS};

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
pub(super) static EPOCH: AtomicU64 = AtomicU64::new(0);

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
