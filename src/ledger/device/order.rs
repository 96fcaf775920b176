//! The address order of a shard's allocations, and what it decides that an exact-key table
//! cannot: the allocation containing an interior pointer, and records a newer allocation
//! overlaps (frees that were missed), freed implicitly.

use super::super::Stamp;
use super::{Alloc, DeviceLedger, Key, Removed};

/// Bases in address order, for what an exact-key table cannot answer: the allocation
/// containing an interior pointer, and allocations partially overlapping a newer one (frees
/// we missed, the range handed out again in another cut). Kept lazily, off the alloc/free
/// path: an allocation appends (base, end, seq) to `recent`; a free only counts in `stale`
/// (its base stays in `sorted` until a clean-up, its `recent` entry until the next merge).
/// [`DeviceLedger::settle`] merges `recent` in when an ordered question is asked, when
/// `recent` reaches a sixteenth of `sorted` (at least 64 entries), and before each report; it
/// then frees implicitly every live record older than a `recent` entry it overlaps, whether
/// that entry is still live or was freed since (the driver handed its range out, so the
/// older record's memory was gone either way).
#[derive(Debug, Default)]
pub(super) struct Order {
    /// Ascending, no duplicates; may hold bases no longer live (`stale` of them at most).
    pub(super) sorted: Vec<u64>,
    /// Allocations since the last merge, in no order; some may be dead already.
    pub(super) recent: Vec<Fresh>,
    /// Frees since `sorted` was last cleaned (an upper bound on its dead entries).
    pub(super) stale: usize,
    /// The greatest seq merged into `sorted` so far: a record with a greater one is not
    /// there yet, and its free leaves nothing stale.
    pub(super) merged_seq: u64,
    /// At or above the end of every record merged so far and of every entry of `recent` but
    /// its last (an upper bound: it never goes down). An allocation at or above it overlaps
    /// nothing older, so when it is freed while still the last of `recent` its entry can go
    /// at once (a pair allocated and freed between merges leaves nothing to merge).
    pub(super) reach: u64,
}

impl Order {
    /// An allocation not merged yet.
    #[inline]
    pub(super) fn push(&mut self, f: Fresh) {
        if let Some(last) = self.recent.last() {
            self.reach = self.reach.max(last.end);
        }
        self.recent.push(f);
    }

    /// The record `a` was freed: its base is stale in `sorted` if it was merged; if it is the
    /// last allocation not merged and lies at or above `reach`, its entry goes now.
    #[inline]
    pub(super) fn forget(&mut self, a: &Alloc) {
        if a.seq() <= self.merged_seq {
            self.stale += 1;
        } else if self.recent.last().is_some_and(|f| f.base == a.base && f.seq == a.seq() && f.base >= self.reach) {
            self.recent.pop();
        }
    }
}

/// An allocation not merged into the order yet.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fresh {
    pub(super) base: u64,
    pub(super) end: u64,
    pub(super) seq: u64,
}

/// Merge `recent` into `sorted` when it reaches this share of it (a sixteenth: its entries
/// are 24 bytes, and a million live allocations should not carry a quarter of a million).
pub(super) const RECENT_SHARE: usize = 16;
pub(super) const RECENT_MIN: usize = 64;

/// What an insert displaced: records still live at an overlapping address or the same
/// handle, whose frees we missed. They were counted as implicit frees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Displaced {
    pub count: u64,
    pub bytes: u64,
}

impl Displaced {
    pub(super) fn add(&mut self, other: Displaced) {
        self.count += other.count;
        self.bytes = self.bytes.saturating_add(other.bytes);
    }
}

/// `a` and `b` (each ascending, without duplicates) merged, without duplicates.
pub(super) fn merge(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(a.len() + b.len());

    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        out.push(x.min(y));
        i += usize::from(x <= y);
        j += usize::from(y <= x);
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

impl DeviceLedger {
    /// (base, bytes) of the addressed allocation containing `ptr`: the one at `ptr`, else
    /// the one with the greatest base below `ptr` if its end is past `ptr` (after
    /// [`DeviceLedger::settle`], whose displaced records go in `displaced`).
    pub(crate) fn containing(&mut self, ptr: u64, now: impl FnOnce() -> Stamp) -> Option<(u64, u64)> {
        if let Some(a) = self.allocs.get(ptr) {
            // Live records do not overlap: an empty one at `ptr` contains nothing.
            return (a.bytes() > 0).then_some((ptr, a.bytes()));
        }
        self.settle_unwarned(now);
        let a = self.live_before(ptr.saturating_add(1))?;
        (a.end() > ptr).then_some((a.base, a.bytes()))
    }

    pub(crate) fn has(&self, key: Key) -> bool {
        self.get(key).is_some()
    }

    /// The live record with the greatest base below `end` (`order` settled).
    pub(super) fn live_before(&self, end: u64) -> Option<&Alloc> {
        let sorted = &self.order.sorted;
        sorted[..sorted.partition_point(|&b| b < end)].iter().rev().find_map(|&b| self.allocs.get(b))
    }

    /// A live addressed allocation overlapping [base, end) (or at `base` when empty);
    /// `order` settled.
    pub(super) fn overlapping(&self, base: u64, end: u64) -> Option<u64> {
        if self.allocs.contains(base) {
            return Some(base);
        }
        let a = self.live_before(end.max(base.saturating_add(1)))?;
        (a.base >= base || a.end() > base).then_some(a.base)
    }

    /// Bring `order` up to date: drop dead bases when there are many, merge `recent` in,
    /// and count as implicit frees (at `now`) the live records older than a `recent` entry
    /// they overlap (see [`Order`]).
    pub(crate) fn settle(&mut self, now: impl FnOnce() -> Stamp) -> Displaced {
        let mut displaced = Displaced::default();
        let order = &mut self.order;
        if order.stale > 0 && order.stale * 2 >= order.sorted.len() {
            let allocs = &self.allocs;
            order.sorted.retain(|&b| allocs.contains(b));
            order.stale = 0;
        }
        if order.recent.is_empty() {
            return displaced;
        }
        let mut fresh = std::mem::take(&mut order.recent);
        // Usually in order already (addresses handed out upwards).
        if !fresh.is_sorted_by_key(|f| (f.base, f.seq)) {
            fresh.sort_unstable_by_key(|f| (f.base, f.seq));
        }
        let mut now = Some(now);
        let mut stamp = None;
        let mut at = || *stamp.get_or_insert_with(|| now.take().map_or(Stamp { t_us: 0, seq: 0 }, |f| f()));
        // Against the records merged before (all older, but for restored ones). None reaches
        // the fresh entries when they all lie above the live record with the greatest base
        // and past its end (addresses handed out upwards): then nothing is searched.
        // Dead bases at the end of `sorted` go first (a pair allocated and freed between
        // merges leaves one there each time), so that the greatest live base is its last.
        while let Some(&last) = self.order.sorted.last() {
            if self.allocs.contains(last) {
                break;
            }
            self.order.sorted.pop();
            self.order.stale = self.order.stale.saturating_sub(1);
        }
        let mut tail = None;
        let above = self.order.sorted.last().is_none_or(|&last| fresh[0].base > last) && {
            let top = self.order.sorted.last().and_then(|&b| self.allocs.get(b)).map(|a| (a.base, a.end(), a.seq()));
            tail = Some(top);
            top.is_none_or(|(_, end, _)| end <= fresh[0].base)
        };
        for f in fresh.iter().filter(|_| !above) {
            self.displace_older(f, &mut tail, &mut displaced, &mut at);
        }
        // Among themselves: a sweep in base order, keeping the entries still reaching past it
        // (none to do when each ends before the next begins).
        let apart = fresh.windows(2).all(|w| w[0].end <= w[1].base && w[0].base != w[1].base);
        let mut reaching: Vec<Fresh> = Vec::new();
        for f in fresh.iter().filter(|_| !apart) {
            reaching.retain(|r| r.end > f.base || r.base == f.base);
            for r in &reaching {
                let older = if r.seq < f.seq { r } else { f };
                if self.allocs.get(older.base).is_some_and(|a| a.seq() == older.seq) {
                    self.displace(older.base, &mut displaced, &mut at);
                }
            }
            reaching.push(*f);
        }
        let live = |f: &&Fresh| self.allocs.get(f.base).is_some_and(|a| a.seq() == f.seq);
        let bases: Vec<u64> = fresh.iter().filter(live).map(|f| f.base).collect();
        self.order.merged_seq = fresh.iter().fold(self.order.merged_seq, |m, f| m.max(f.seq));
        if self.order.sorted.last().is_none_or(|&last| bases.first().is_some_and(|&first| first > last)) {
            // All above the others (addresses handed out upwards): appended in place, growing
            // by an eighth at a time (not doubling: it holds 8 bytes per live allocation).
            let sorted = &mut self.order.sorted;
            if sorted.capacity() - sorted.len() < bases.len() {
                sorted.reserve_exact(bases.len().max(sorted.len() / 8));
            }
            sorted.extend_from_slice(&bases);
        } else if !bases.is_empty() {
            let old = std::mem::take(&mut self.order.sorted);
            self.order.sorted = merge(&old, &bases);
        }
        self.order.reach = fresh.iter().fold(self.order.reach, |m, f| m.max(f.end));
        fresh.clear();
        if fresh.capacity() <= RECENT_MIN.max(self.order.sorted.len() / RECENT_SHARE) * 2 {
            self.order.recent = fresh;
        }
        displaced
    }

    /// Free implicitly the live records older than `f` that overlap its range. `tail` caches
    /// the live record with the greatest base (base, end, seq) between calls: an allocation
    /// above every other (fresh addresses) is checked against it alone, without a search.
    #[allow(clippy::type_complexity)]
    pub(super) fn displace_older(
        &mut self,
        f: &Fresh,
        tail: &mut Option<Option<(u64, u64, u64)>>,
        displaced: &mut Displaced,
        now: &mut dyn FnMut() -> Stamp,
    ) {
        let older = |a: &Alloc| a.seq() < f.seq;
        loop {
            let sorted = &self.order.sorted;
            if sorted.last().is_none_or(|&last| f.base > last) {
                let allocs = &self.allocs;
                let t = *tail.get_or_insert_with(|| {
                    sorted.iter().rev().find_map(|&b| allocs.get(b)).map(|a| (a.base, a.end(), a.seq()))
                });
                match t {
                    Some((base, end, seq)) if end > f.base && seq < f.seq => {
                        *tail = None;
                        self.displace(base, displaced, now);
                        continue;
                    }
                    _ => return,
                }
            }
            let at = sorted.partition_point(|&b| b < f.base);
            // The live record with the greatest base below f's, if it reaches into f.
            let before = sorted[..at].iter().rev().find_map(|&b| self.allocs.get(b)).filter(|a| a.end() > f.base);
            // Records starting inside f (an empty f: at its base).
            let inside = || {
                sorted[at..]
                    .iter()
                    .take_while(|&&b| b < f.end.max(f.base.saturating_add(1)))
                    .filter_map(|&b| self.allocs.get(b))
                    .find(|a| older(a))
            };
            let Some(victim) = before.filter(|a| older(a)).or_else(inside).map(|a| a.base) else { return };
            *tail = None;
            self.displace(victim, displaced, now);
        }
    }

    /// Free the record at `base` implicitly (a free we missed), with a timeline sample.
    pub(super) fn displace(&mut self, base: u64, displaced: &mut Displaced, now: &mut dyn FnMut() -> Stamp) {
        if let Some(Removed { alloc: old, .. }) = self.take(Key::Addr(base)) {
            displaced.count += 1;
            displaced.bytes = displaced.bytes.saturating_add(old.bytes());
            let now = now();
            self.history.freed(Key::Addr(base), &old, now.seq);
            self.stats.sample(now);
        }
    }

    /// [`DeviceLedger::settle`] outside an insert: what it displaced waits in `unwarned` for
    /// the caller to warn about once the lock is released ([`DeviceLedger::take_unwarned`]).
    pub(crate) fn settle_unwarned(&mut self, now: impl FnOnce() -> Stamp) {
        let d = self.settle(now);
        self.unwarned.add(d);
    }

    /// Records displaced by a settle not yet warned about.
    pub(crate) fn take_unwarned(&mut self) -> Displaced {
        std::mem::take(&mut self.unwarned)
    }
}
