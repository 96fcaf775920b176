//! Reading memory that may not be there, without faulting.
//!
//! The Python frame walker follows pointers it cannot fully trust (a layout it guessed wrong,
//! an interpreter it does not know), so every read goes through [`read`], which copies bytes
//! only from a range known to be readable:
//! 1. a cache of the readable mappings of `/proc/self/maps` (sorted ranges, binary search):
//!    a hit is a plain copy, a few nanoseconds;
//! 2. on a miss, `process_vm_readv` on our own pid, which returns `EFAULT` instead of
//!    faulting (one system call; refused under some seccomp profiles, then never tried again);
//! 3. when that is not available, the cache is refreshed (at most once per
//!    [`REFRESH_EVERY`]) and consulted again.
//!
//! Reading `/proc/self/maps` is the expensive part (tens to hundreds of microseconds in a big
//! process), so it happens once at first use and then only when misses pile up: after a
//! capture that needed `process_vm_readv` more than [`SLOW_READS_BEFORE_REFRESH`] times.
//! The cache lives behind a `crate::sync::RwLock` (parking_lot's; announced to helgrind in the
//! `valgrind` build); nothing that can block on another lock is called while it is held (the
//! file is read into a buffer first).
//!
//! A mapping recorded readable may be unmapped later; the walker only follows pointers of
//! objects that the calling thread keeps alive (its own frames and their code objects), and
//! checks each object's type before reading further, so a stale entry is not a practical risk.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sync::{RwLock, RwLockReadGuard};

/// Minimum time between two refreshes of the cache.
pub const REFRESH_EVERY: Duration = Duration::from_millis(50);
/// Slow reads in one capture that schedule a refresh.
pub const SLOW_READS_BEFORE_REFRESH: u32 = 4;

struct Cache {
    /// Sorted, non-overlapping readable ranges [start, end).
    ranges: Vec<(u64, u64)>,
    refreshed: Option<Instant>,
}

/// The cache; replaced (the old one leaked) in a fork child, whose copy of the lock may be held.
static CACHE: super::Leaky<RwLock<Cache>> =
    super::Leaky::new(|| RwLock::new(Cache { ranges: Vec::new(), refreshed: None }));

fn cache() -> &'static RwLock<Cache> {
    CACHE.get()
}

/// `process_vm_readv` was refused (EPERM, ENOSYS): do not try again.
static VM_READV_OFF: AtomicBool = AtomicBool::new(false);
/// A refresh was asked for by a capture that had many slow reads.
static WANT_REFRESH: AtomicBool = AtomicBool::new(false);
/// Reads that needed the slow path (for the bench and tests).
pub static SLOW_READS: AtomicU64 = AtomicU64::new(0);
/// Refreshes of the cache done so far.
pub static REFRESHES: AtomicU64 = AtomicU64::new(0);
/// Moves whenever the cache's ranges change: at each refresh, and in a fork child.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Parse the readable ranges of a `/proc/<pid>/maps` text, sorted and merged.
pub fn parse_maps(text: &str) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = text
        .lines()
        .filter_map(|line| {
            let mut it = line.split_ascii_whitespace();
            let range = it.next()?;
            let perms = it.next()?;
            if !perms.starts_with('r') {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            let (a, b) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
            // [vvar] and friends are readable but special; [vsyscall] is fine too. Keep all.
            (a < b).then_some((a, b))
        })
        .collect();
    v.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// Whether [addr, addr+len) lies inside one of `ranges`.
#[cfg(test)]
pub fn covered(ranges: &[(u64, u64)], addr: u64, len: u64) -> bool {
    // Same test as `Reader::known`, on a given list.
    let Some(end) = addr.checked_add(len) else { return false };
    let i = ranges.partition_point(|&(start, _)| start <= addr);
    i > 0 && ranges[i - 1].1 >= end
}

pub(super) fn refresh() {
    let Ok(text) = std::fs::read_to_string("/proc/self/maps") else { return };
    let ranges = parse_maps(&text);
    let mut c = cache().write();
    c.ranges = ranges;
    c.refreshed = Some(Instant::now());
    GENERATION.fetch_add(1, Ordering::Release);
    REFRESHES.fetch_add(1, Ordering::Relaxed);
}

/// Refresh now unless it was done within `REFRESH_EVERY` (or `force` on the first use).
fn maybe_refresh() -> bool {
    let due = cache().read().refreshed.is_none_or(|t| t.elapsed() >= REFRESH_EVERY);
    if due {
        refresh();
    }
    due
}

/// See `super::announce_atomics`.
pub(super) fn announce_atomics() {
    crate::sync::atomic(&VM_READV_OFF);
    crate::sync::atomic(&WANT_REFRESH);
    crate::sync::atomic(&SLOW_READS);
    crate::sync::atomic(&REFRESHES);
    crate::sync::atomic(&GENERATION);
    crate::sync::atomic(&PID);
}

/// Called at the start of a capture: loads the cache the first time, and refreshes it when
/// an earlier capture asked for it.
pub fn before_capture() {
    if cache().read().refreshed.is_none() || WANT_REFRESH.swap(false, Ordering::Relaxed) {
        maybe_refresh();
    }
}

/// Called at the end of a capture with the number of slow reads it needed.
pub fn after_capture(slow: u32) {
    if slow > SLOW_READS_BEFORE_REFRESH {
        WANT_REFRESH.store(true, Ordering::Relaxed);
    }
}

/// Forget everything (a fork child keeps the parent's mappings, but its lock may be held).
pub fn reset_after_fork() {
    // The lock may have been held by another thread of the parent: leak it, start over.
    CACHE.reset();
    GENERATION.fetch_add(1, Ordering::Release);
    WANT_REFRESH.store(false, Ordering::Relaxed);
    PID.store(0, Ordering::Relaxed);
}

/// Which contents of the cache are current: moves at every refresh (and in a fork child,
/// whose cache starts over). Two reads that see the same generation saw the same ranges.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The [`generation`] of the cache in which every address of `slots` (8-byte words) lies in
/// one cached readable range, so that a [`Reader`] would copy each of them directly; None
/// when one does not (or there are none). The generation is read before the ranges: a
/// refresh in between makes the answer older, never newer, than the ranges it checked.
pub fn covering(slots: &[u64]) -> Option<u64> {
    let (&lo, &hi) = (slots.iter().min()?, slots.iter().max()?);
    let generation = generation();
    let c = cache().read();
    let end = hi.checked_add(8)?;
    let i = c.ranges.partition_point(|&(start, _)| start <= lo);
    (i > 0 && c.ranges[i - 1].1 >= end).then_some(generation)
}

/// Our pid (glibc does not cache it); 0 until known, reset in a fork child.
static PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

fn pid() -> i32 {
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: no preconditions.
    let p = unsafe { libc::getpid() };
    PID.store(p, Ordering::Relaxed);
    p
}

fn vm_readv(addr: u64, out: &mut [u8]) -> bool {
    if VM_READV_OFF.load(Ordering::Relaxed) {
        return false;
    }
    let local = libc::iovec { iov_base: out.as_mut_ptr().cast(), iov_len: out.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: out.len() };
    // SAFETY: `local` describes our own writable buffer; the kernel validates `remote`.
    let n = unsafe { libc::process_vm_readv(pid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        let e = std::io::Error::last_os_error().raw_os_error();
        if matches!(e, Some(libc::EPERM) | Some(libc::ENOSYS) | Some(libc::EACCES)) {
            VM_READV_OFF.store(true, Ordering::Relaxed);
        }
        return false;
    }
    n as usize == out.len()
}

/// A reader for one capture: holds the cache's read lock while it lives (drop it before
/// anything that may block), remembers the last range it hit, and counts its slow reads.
#[derive(Default)]
pub struct Reader {
    pub slow: u32,
    guard: Option<RwLockReadGuard<'static, Cache>>,
    /// The readable ranges of the last two hits: reads alternate between a frame (the
    /// thread's stack or the interpreter's frame chunks) and the heap.
    memo: [(u64, u64); 2],
}

impl Reader {
    /// Let go of the mapping cache's lock (taken again at the next read).
    pub fn release(&mut self) {
        self.guard = None;
    }

    /// Whether [addr, addr+len) is in a cached readable range.
    #[inline]
    fn known(&mut self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else { return false };
        if self.memo.iter().any(|&(a, b)| a <= addr && end <= b) {
            return true;
        }
        let ranges = &self.guard.get_or_insert_with(|| cache().read()).ranges;
        let i = ranges.partition_point(|&(start, _)| start <= addr);
        if i > 0 && ranges[i - 1].1 >= end {
            self.memo = [ranges[i - 1], self.memo[0]];
            return true;
        }
        false
    }

    /// Copy `out.len()` bytes from `addr`, or false when the range is not known readable.
    pub fn read(&mut self, addr: u64, out: &mut [u8]) -> bool {
        if addr == 0 || out.is_empty() {
            return out.is_empty();
        }
        let len = out.len() as u64;
        if self.known(addr, len) {
            // SAFETY: the range is inside a readable mapping (see the module comment).
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
            return true;
        }
        self.slow += 1;
        SLOW_READS.fetch_add(1, Ordering::Relaxed);
        if vm_readv(addr, out) {
            return true;
        }
        if VM_READV_OFF.load(Ordering::Relaxed) {
            self.guard = None;
            if maybe_refresh() && self.known(addr, len) {
                // SAFETY: as above, after a refresh.
                unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
                return true;
            }
        }
        false
    }

    pub fn u64(&mut self, addr: u64) -> Option<u64> {
        if addr != 0 && self.known(addr, 8) {
            // SAFETY: inside a readable mapping; an unaligned read of 8 bytes.
            return Some(unsafe { (addr as *const u64).read_unaligned() });
        }
        let mut b = [0u8; 8];
        self.read(addr, &mut b).then(|| u64::from_ne_bytes(b))
    }

    pub fn u32(&mut self, addr: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b).then(|| u32::from_ne_bytes(b))
    }

    pub fn i32(&mut self, addr: u64) -> Option<i32> {
        self.u32(addr).map(|v| v as i32)
    }

    pub fn u8(&mut self, addr: u64) -> Option<u8> {
        if addr != 0 && self.known(addr, 1) {
            // SAFETY: inside a readable mapping.
            return Some(unsafe { (addr as *const u8).read() });
        }
        let mut b = [0u8; 1];
        self.read(addr, &mut b).then_some(b[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_merges_readable_ranges() {
        let text = "\
00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/dbus-daemon
00651000-00652000 r--p 00051000 08:02 173521 /usr/bin/dbus-daemon
00652000-00655000 rw-p 00052000 08:02 173521 /usr/bin/dbus-daemon
00e03000-00e24000 ---p 00000000 00:00 0 [guard]
7fff8000-7fff9000 rw-p 00000000 00:00 0 [stack]
garbage line
";
        let r = parse_maps(text);
        assert_eq!(r, vec![(0x400000, 0x452000), (0x651000, 0x655000), (0x7fff8000, 0x7fff9000)]);
        assert!(covered(&r, 0x400000, 8));
        assert!(covered(&r, 0x654ff8, 8));
        assert!(!covered(&r, 0x654ff9, 8), "crosses the end");
        assert!(!covered(&r, 0x452000, 1));
        assert!(!covered(&r, 0xe03000, 1), "not readable");
        assert!(!covered(&r, u64::MAX - 2, 8), "overflow");
        assert!(!covered(&[], 0x1000, 1));
    }

    #[test]
    fn reads_own_memory_and_refuses_unmapped() {
        before_capture();
        let value: u64 = 0x1122_3344_5566_7788;
        let mut r = Reader::default();
        assert_eq!(r.u64(&value as *const u64 as u64), Some(value));
        // A heap object allocated after the cache was loaded may be in a new mapping.
        let boxed = vec![7u8; 1 << 22];
        assert_eq!(r.u8(boxed.as_ptr() as u64 + 12345), Some(7));
        assert_eq!(r.u64(8), None, "page zero");
        assert_eq!(r.u64(0xdead_0000_0000), None, "unmapped");
    }

    #[test]
    fn covering_names_the_generation_that_found_every_slot_readable() {
        before_capture();
        let words = [1u64, 2, 3];
        let at = |i: usize| &words[i] as *const u64 as u64;
        let g = covering(&[at(0), at(2)]).expect("this stack is cached readable");
        assert!(g == generation() || g < generation(), "never newer than the cache");
        assert_eq!(covering(&[at(1), 0xdead_0000_0000]), None, "one slot outside");
        assert_eq!(covering(&[]), None);
        // A refresh moves the generation: a remembered one no longer vouches for the slots.
        refresh();
        assert!(generation() > g);
    }
}
