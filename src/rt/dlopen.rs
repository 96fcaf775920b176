//! "Is this thread inside `dlopen`?" — asked before unwinding native frames for a call site.
//! The exported entry that records the calls lives with the other exports (`hooks::dlopen`);
//! the ring it records into, and the answer, live here.
//!
//! Constructors of a library being opened run with the dynamic loader's lock held, and a
//! `cudaMalloc` from a constructor must not make culedger walk the loader's tables (unwinding
//! and `dladdr` take loader locks; another thread waiting for that lock while holding
//! something this one needs would deadlock). So culedger exports `dlopen`.
//!
//! `dlopen` looks at its return address to find the calling object (for its `DT_RUNPATH`
//! search and namespace), so a wrapper that calls the real one would change what it opens.
//! The entry (`hooks::dlopen`) is a few instructions of assembly, like `dlsym`'s: it records the stack
//! slot holding the caller's return address and the address in it (a small per-thread ring,
//! const-initialised thread-locals: no allocation), then TAIL-JUMPS into the real `dlopen`,
//! which therefore sees the caller and returns straight to it.
//!
//! [`in_dlopen`] then tells whether a recorded `dlopen` is still running on this thread: its
//! slot is above the current stack pointer (the stack grows down, so anything called from
//! inside `dlopen` runs below it) and still holds the same return address (once `dlopen` has
//! returned, the next call made at that depth overwrites the slot with its own return
//! address). A stale record can only err towards "inside", which skips native frames for
//! that site: never unsafe. The slot of a stale record may lie in a frame that has not written
//! it, so its content is indeterminate; under valgrind's memcheck such a slot is recognised
//! (memcheck is asked whether it is defined, `crate::sync::undefined_under_memcheck`) and
//! skipped without being read, which is also the right answer: a live slot is always defined.
//! On aarch64 the entry is not provided and the answer is "no".

use std::cell::Cell;

/// Recorded dlopen entries per thread (nesting: a constructor that dlopens).
const RING: usize = 8;

/// A thread's recorded entries, in one thread-local (each access is a call in a shared
/// library): a ring of (slot, return address), the next index, and a bit per entry that may
/// still be running (cleared once it is known to have returned).
struct Entries {
    ring: [Cell<(usize, usize)>; RING],
    next: Cell<usize>,
    live: Cell<u8>,
}

thread_local! {
    static ENTRIES: Entries = const {
        Entries { ring: [const { Cell::new((0, 0)) }; RING], next: Cell::new(0), live: Cell::new(0) }
    };
}

/// `dlopen` calls entered so far, by every thread (see [`dlopens`]).
#[cfg(target_arch = "x86_64")]
static DLOPENS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many `dlopen` calls have entered so far in the process: an object that was not in
/// the process when this was N is only there after a later call (or while one that counted
/// is still running). None where the entry is not provided (aarch64): nothing is known.
#[inline]
pub fn dlopens() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        crate::sync::atomic(&DLOPENS);
        Some(DLOPENS.load(std::sync::atomic::Ordering::Acquire))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Called by the exported entry with the address of the slot holding the return address.
#[cfg(target_arch = "x86_64")]
pub(crate) fn note_dlopen(slot: *const usize) {
    crate::sync::atomic(&DLOPENS);
    DLOPENS.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    // SAFETY: `slot` is the caller's stack slot holding dlopen's return address.
    let ret = unsafe { *slot };
    let _ = ENTRIES.try_with(|e| {
        let i = e.next.get() % RING;
        e.next.set(i + 1);
        e.ring[i].set((slot as usize, ret));
        e.live.set(e.live.get() | 1 << i);
    });
}

/// Whether a `dlopen` entered on this thread is still running.
///
/// An entry whose slot no longer holds its return address (or, under memcheck, is undefined)
/// belongs to a `dlopen` that has returned: a running one's slot is not written until it
/// returns. Its bit is cleared, so that a thread whose `dlopen`s are over answers from one
/// load. (An entry whose slot lies below the stack pointer is skipped but kept: the thread
/// may be on another stack, a signal handler's, for now.)
#[inline(never)]
pub fn in_dlopen() -> bool {
    check().0
}

/// [`in_dlopen`] for a caller that keeps, for its thread, `clear_at`: the [`dlopens`] count at
/// which this thread last had no entry left that could be running. While no `dlopen` has
/// entered since (on any thread), none can have been recorded on this one: the answer is
/// "no" without looking at the entries.
#[inline]
pub fn in_dlopen_unless_none_since(clear_at: &Cell<u64>) -> bool {
    let Some(n) = dlopens() else { return in_dlopen() };
    if clear_at.get() == n {
        return false;
    }
    let (running, none_left) = check();
    if none_left {
        clear_at.set(n);
    }
    running
}

/// Whether a recorded `dlopen` is running on this thread, and whether no entry is left.
#[inline(never)]
fn check() -> (bool, bool) {
    let here = 0u8;
    let sp = &here as *const u8 as usize;
    ENTRIES
        .try_with(|e| {
            let live = e.live.get();
            if live == 0 {
                return (false, true);
            }
            let mut over = 0u8;
            let mut running = false;
            for (i, c) in e.ring.iter().enumerate() {
                if live & (1 << i) == 0 {
                    continue;
                }
                let (slot, ret) = c.get();
                if slot <= sp || ret == 0 {
                    continue;
                }
                // A record whose dlopen has returned names a slot that now lies in some live
                // frame's storage, possibly never written since that frame was allocated: an
                // indeterminate value (any value is safe here; see the module's note). A live
                // dlopen's slot always holds a written return address, so where memcheck can
                // tell (running under it), a slot it knows to be undefined is a stale record
                // and is not read at all.
                // SAFETY (the read): a slot above our stack pointer on our own stack is readable.
                if crate::sync::undefined_under_memcheck(slot, std::mem::size_of::<usize>())
                    || unsafe { std::ptr::read_volatile(slot as *const usize) } != ret
                {
                    over |= 1 << i;
                } else {
                    running = true;
                }
            }
            // A signal handler's dlopen may have replaced an entry meanwhile; it has returned
            // by now, so clearing its bit too is right.
            e.live.set(e.live.get() & !over);
            (running, e.live.get() == 0)
        })
        .unwrap_or((true, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_inside_dlopen_normally() {
        assert!(!in_dlopen());
    }

    /// Entries recorded by hand, as the assembly entry would: slots in this test's frame
    /// (above `in_dlopen`'s stack pointer) holding "return addresses". A returned dlopen's
    /// entry is cleared; a running one's is kept, whatever returned around it.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_returned_dlopen_is_forgotten_and_a_running_one_is_not() {
        let live_bits = || ENTRIES.with(|e| e.live.get());
        let outer = std::hint::black_box([0x1111usize; 1]);
        let inner = std::hint::black_box([0x2222usize; 1]);
        note_dlopen(outer.as_ptr());
        note_dlopen(inner.as_ptr());
        assert_eq!(live_bits().count_ones(), 2);
        assert!(in_dlopen(), "both running");
        // The inner dlopen returned: its slot was reused by another call.
        unsafe { std::ptr::write_volatile(inner.as_ptr() as *mut usize, 0x3333) };
        assert!(in_dlopen(), "the outer one is still running");
        assert_eq!(live_bits().count_ones(), 1, "the inner entry is forgotten");
        // The same value again later is another call's, not the returned dlopen's.
        unsafe { std::ptr::write_volatile(inner.as_ptr() as *mut usize, 0x2222) };
        assert!(in_dlopen());
        assert_eq!(live_bits().count_ones(), 1);
        let clear_at = Cell::new(u64::MAX);
        assert!(in_dlopen_unless_none_since(&clear_at));
        assert_eq!(clear_at.get(), u64::MAX, "an entry may be running");
        unsafe { std::ptr::write_volatile(outer.as_ptr() as *mut usize, 0x4444) };
        assert!(!in_dlopen(), "both returned");
        assert_eq!(live_bits(), 0, "answered from one load from now on");
        assert!(!in_dlopen_unless_none_since(&clear_at));
        // (Other tests may dlopen meanwhile: not an exact count.)
        assert!(clear_at.get() <= dlopens().unwrap(), "none left: no look until the next dlopen");
        // A dlopen entered since is looked at, whatever the thread noted before.
        let again = std::hint::black_box([0x5555usize; 1]);
        note_dlopen(again.as_ptr());
        assert!(in_dlopen_unless_none_since(&clear_at));
        unsafe { std::ptr::write_volatile(again.as_ptr() as *mut usize, 0) };
        assert!(!in_dlopen_unless_none_since(&clear_at));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn each_dlopen_is_counted() {
        let before = dlopens().unwrap();
        // The test binary's own calls reach the exported entry.
        let h = unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        assert!(!h.is_null());
        assert!(dlopens().unwrap() > before);
        assert!(!in_dlopen(), "it returned");
        unsafe { libc::dlclose(h) };
    }
}
