//! The history one device keeps for report-time categories (docs/categories.md,
//! "Implementation: applying the rules when the report is written"): a compact record of
//! every allocation of at least `CULEDGER_SITE_MIN` bytes (the ones with a call site), live or
//! freed. Pure Rust; the shard calls in from a few marked lines of `device.rs`, under its lock.
//!
//! Smaller allocations keep no record: the live ledger's per-category totals (online
//! categories: tag, capture, export) already hold them, and the report writer takes their
//! share at each point of the timeline as "the device's online totals minus the large
//! records' online totals" (`report_time::classify_history`). Nothing is added to their path
//! but one size comparison.
//!
//! Bounded: at [`CAP`] records, the oldest freed records (up to half the cap) are *frozen*:
//! dropped, their count and the last seq they cover kept (`frozen`, `frozen_upto_seq`, shown
//! in the report). Their effect on the report is kept by the last report write before (each
//! write stores the per-category peaks it computed, [`History::set_floor`]): the peaks of a
//! frozen stretch stay, and the timeline points inside it keep the categories the live
//! ledger gave them. Live records are never frozen (they are bounded by the live set).

use super::device::{Alloc, Key};
use crate::classify::tags::TagId;

/// Records kept per device before the oldest freed ones are frozen (56 bytes each: 224 KiB;
/// a long run that churns large allocations keeps its resident memory flat, see longrun.rs).
pub(crate) const CAP: usize = 1 << 12;

/// One large allocation (56 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rec {
    pub alloc_seq: u64,
    /// The seq of its free; 0 while live.
    pub free_seq: u64,
    pub bytes: u64,
    pub h2d_bytes: u64,
    /// The seq of its first export; 0 when never exported.
    pub export_seq: u64,
    pub site: u32,
    pub tag: Option<TagId>,
    /// Index into [`History::apis`].
    pub api: u8,
    /// The live ledger's category (index into `classify::ALL`) before and after its export.
    pub online: u8,
    pub online_exported: u8,
    pub captured: bool,
}

/// Peaks a report write computed, kept for when the records behind them are frozen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Floor {
    pub upto_seq: u64,
    pub peaks: Vec<(String, u64)>,
}

/// One device's history.
#[derive(Clone, Debug)]
pub(crate) struct History {
    /// Smallest allocation recorded (`CULEDGER_SITE_MIN`).
    pub min: u64,
    /// In allocation order (seqs increase: stamps are taken under the shard lock).
    pub recs: Vec<Rec>,
    /// Live records by key: (is a VMM handle, base or handle) to index in `recs`.
    live: super::device::FastMap<(bool, u64), u32>,
    /// Entry points named by records (few: the hooked allocation functions).
    pub apis: Vec<&'static str>,
    /// Records frozen so far, and the last seq a frozen record covered.
    pub frozen: u64,
    pub frozen_upto_seq: u64,
    /// Set by the report writer after each write.
    pub floor: Option<Floor>,
    cap: usize,
    /// Records at which the next freeze is tried: the cap, or half as many again as the
    /// records a freeze kept when more are live (so a device holding more large allocations
    /// than the cap is not rescanned on every insert: amortised constant time).
    limit: usize,
    /// Records looked at by freezes (a measure of their work, for tests).
    scanned: u64,
}

/// The smallest allocation the history keeps, whatever `CULEDGER_SITE_MIN` says: lowering
/// that setting adds call sites to small allocations, not a record each (1M live 4 KiB
/// allocations with sites would otherwise cost a record and an index entry each, and a copy
/// at every report write). Smaller ones keep the live ledger's category.
pub(crate) const HISTORY_MIN: u64 = 1 << 20;

impl Default for History {
    fn default() -> Self {
        History::with(crate::config::get().site_min.max(HISTORY_MIN), CAP)
    }
}

fn key_of(key: Key) -> (bool, u64) {
    match key {
        Key::Addr(b) => (false, b),
        Key::Handle(h) => (true, h),
    }
}

impl History {
    pub(crate) fn with(min: u64, cap: usize) -> History {
        History {
            min,
            recs: Vec::new(),
            live: Default::default(),
            apis: Vec::new(),
            frozen: 0,
            frozen_upto_seq: 0,
            floor: None,
            cap: cap.max(2),
            limit: cap.max(2),
            scanned: 0,
        }
    }

    fn api_index(&mut self, api: &'static str) -> u8 {
        if let Some(i) = self.apis.iter().position(|&a| std::ptr::eq(a, api) || a == api) {
            return i as u8;
        }
        if self.apis.len() < usize::from(u8::MAX) {
            self.apis.push(api);
            return (self.apis.len() - 1) as u8;
        }
        u8::MAX
    }

    /// A new allocation `a` under `key` (after the shard counted it).
    #[inline]
    pub(crate) fn inserted(&mut self, key: Key, a: &Alloc, api: &'static str, h2d_bytes: u64) {
        if a.bytes() >= self.min {
            self.insert_record(key, a, api, h2d_bytes);
        }
    }

    fn insert_record(&mut self, key: Key, a: &Alloc, api: &'static str, h2d_bytes: u64) {
        if self.recs.is_empty() {
            // Once, at full size: the pages are touched as records are written, and the
            // vector never reallocates (no copies, no freed halves left in the heap).
            self.recs.reserve_exact(self.cap);
        }
        if self.recs.len() >= self.limit {
            self.freeze_oldest();
            let kept = self.recs.len();
            self.limit = self.cap.max(kept + kept / 2);
        }
        let online = a.category().index() as u8;
        let rec = Rec {
            alloc_seq: a.seq(),
            free_seq: 0,
            bytes: a.bytes(),
            h2d_bytes,
            export_seq: 0,
            site: a.site(),
            tag: a.tag(),
            api: self.api_index(api),
            online,
            online_exported: online,
            captured: a.captured(),
        };
        self.live.insert(key_of(key), self.recs.len() as u32);
        self.recs.push(rec);
    }

    /// The allocation `a` under `key` was freed (or displaced) by the record `seq`.
    #[inline]
    pub(crate) fn freed(&mut self, key: Key, a: &Alloc, seq: u64) {
        if a.bytes() >= self.min {
            self.free_record(key, seq);
        }
    }

    fn free_record(&mut self, key: Key, seq: u64) {
        if let Some(i) = self.live.remove(&key_of(key)) {
            if let Some(r) = self.recs.get_mut(i as usize) {
                r.free_seq = seq;
            }
        }
    }

    /// A free whose real call failed put `a` back under `key`: live again.
    pub(crate) fn restored(&mut self, key: Key, a: &Alloc) {
        if a.bytes() < self.min {
            return;
        }
        if let Ok(i) = self.recs.binary_search_by_key(&a.seq(), |r| r.alloc_seq) {
            self.recs[i].free_seq = 0;
            self.live.insert(key_of(key), i as u32);
        }
    }

    /// The facts of `a` changed at `seq` (bytes copied from host, now `h2d_bytes` in all; an
    /// export).
    pub(crate) fn facts_changed(&mut self, key: Key, a: &Alloc, h2d_bytes: u64, seq: u64) {
        if a.bytes() < self.min {
            return;
        }
        let Some(&i) = self.live.get(&key_of(key)) else { return };
        let Some(r) = self.recs.get_mut(i as usize) else { return };
        r.h2d_bytes = h2d_bytes;
        if a.exported() && r.export_seq == 0 {
            r.export_seq = seq;
            r.online_exported = a.category().index() as u8;
        }
    }

    /// Drop the oldest freed records, up to half the cap, and reindex the live ones.
    fn freeze_oldest(&mut self) {
        // Down to half the cap (plus the live ones): at the cap, half of it as before.
        let want = (self.cap / 2).max(self.recs.len().saturating_sub(self.cap / 2));
        self.scanned += self.recs.len() as u64;
        let mut upto = self.frozen_upto_seq;
        // new_index[i]: where record i goes (records dropped before it shift it down).
        let mut new_index = Vec::with_capacity(self.recs.len());
        let mut dropped = 0usize;
        for r in &self.recs {
            new_index.push((new_index.len() - dropped) as u32);
            if dropped < want && r.free_seq != 0 {
                dropped += 1;
                upto = upto.max(r.free_seq);
            }
        }
        if dropped == 0 {
            return;
        }
        let mut seen = 0usize;
        self.recs.retain(|r| {
            let drop = seen < want && r.free_seq != 0;
            seen += usize::from(drop);
            !drop
        });
        for i in self.live.values_mut() {
            *i = new_index[*i as usize];
        }
        self.frozen += dropped as u64;
        self.frozen_upto_seq = upto;
    }

    /// What the report writer needs, copied out under the shard lock.
    pub(crate) fn snapshot(&self) -> HistoryView {
        HistoryView {
            recs: self.recs.clone(),
            apis: self.apis.clone(),
            frozen: self.frozen,
            frozen_upto_seq: self.frozen_upto_seq,
            floor: self.floor.clone(),
        }
    }

    /// The report writer's peaks (a write computed them over everything up to `upto_seq`).
    pub(crate) fn set_floor(&mut self, floor: Floor) {
        if self.floor.as_ref().is_none_or(|f| f.upto_seq <= floor.upto_seq) {
            self.floor = Some(floor);
        }
    }

    #[cfg(test)]
    pub(crate) fn live_index(&self, key: Key) -> Option<&Rec> {
        self.recs.get(*self.live.get(&key_of(key))? as usize)
    }
}

/// A copy of a history, for the report writer.
#[derive(Clone, Debug, Default)]
pub(crate) struct HistoryView {
    pub recs: Vec<Rec>,
    pub apis: Vec<&'static str>,
    pub frozen: u64,
    pub frozen_upto_seq: u64,
    pub floor: Option<Floor>,
}

impl HistoryView {
    pub(crate) fn api(&self, r: &Rec) -> &'static str {
        self.apis.get(usize::from(r.api)).copied().unwrap_or("?")
    }

    /// The record of the allocation made by the record `seq`, if it is large.
    pub(crate) fn by_seq(&self, seq: u64) -> Option<usize> {
        self.recs.binary_search_by_key(&seq, |r| r.alloc_seq).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::Category;
    use crate::ledger::{Facts, MemKind};

    const MIB: u64 = 1 << 20;

    fn alloc(seq: u64, base: u64, bytes: u64) -> Alloc {
        with(seq, base, bytes, Facts { site: 7, ..Facts::default() }, Category::Other)
    }

    fn with(seq: u64, base: u64, bytes: u64, facts: Facts, category: Category) -> Alloc {
        let now = crate::ledger::Stamp { t_us: 0, seq };
        Alloc::new(base, bytes, MemKind::Device, 0, now, &facts, category)
    }

    #[test]
    fn large_allocations_only_with_their_frees_restores_and_exports() {
        let mut h = History::with(MIB, 16);
        let (a, b, small) = (alloc(1, 0x1000, 4 * MIB), alloc(2, 0x9000_0000, 2 * MIB), alloc(3, 0x50, 4096));
        h.inserted(Key::Addr(a.base), &a, "cudaMalloc", 0);
        h.inserted(Key::Handle(9), &b, "cudaMalloc", 0);
        h.inserted(Key::Addr(small.base), &small, "cudaMalloc", 0);
        assert_eq!(h.recs.len(), 2, "below the threshold: no record");
        let facts = Facts { site: 7, exported: true, ..Facts::default() };
        let exported = with(1, 0x1000, 4 * MIB, facts, Category::Ipc);
        h.facts_changed(Key::Addr(a.base), &exported, MIB, 5);
        let r = h.live_index(Key::Addr(a.base)).copied().unwrap();
        assert_eq!((r.export_seq, r.h2d_bytes, r.online, r.online_exported), (5, MIB, 5, 2));
        assert_eq!(h.live_index(Key::Handle(9)).map(|r| r.alloc_seq), Some(2), "handles and addresses apart");
        h.freed(Key::Addr(a.base), &exported, 6);
        assert!(h.live_index(Key::Addr(a.base)).is_none());
        assert_eq!(h.recs[0].free_seq, 6);
        h.restored(Key::Addr(a.base), &exported);
        assert_eq!(h.live_index(Key::Addr(a.base)).map(|r| r.free_seq), Some(0), "a failed free undone");
        let v = h.snapshot();
        assert_eq!((v.recs.len(), v.api(&v.recs[0]), v.by_seq(2), v.by_seq(3)), (2, "cudaMalloc", Some(1), None));
    }

    #[test]
    fn the_oldest_freed_records_are_frozen_at_the_cap() {
        let mut h = History::with(MIB, 8);
        let mut live = Vec::new();
        for i in 0..40u64 {
            let a = alloc(2 * i + 1, 0x1000 * (i + 1), MIB);
            h.inserted(Key::Addr(a.base), &a, "cudaMalloc", 0);
            if i % 4 == 0 {
                live.push(a); // one in four stays live
            } else {
                h.freed(Key::Addr(a.base), &a, 2 * i + 2);
            }
            assert!(h.recs.len() <= 8.max((live.len() + 4) * 3 / 2 + 1), "{} records", h.recs.len());
        }
        assert!(h.frozen > 0 && h.frozen_upto_seq > 0);
        // Every live record is kept and still found by its key.
        for a in &live {
            assert_eq!(h.live_index(Key::Addr(a.base)).map(|r| r.alloc_seq), Some(a.seq()));
        }
        assert!(h.recs.windows(2).all(|w| w[0].alloc_seq < w[1].alloc_seq), "still in allocation order");
        assert_eq!(h.frozen + h.recs.len() as u64, 40);
        // A floor from a write is kept unless an older one comes later.
        h.set_floor(Floor { upto_seq: 10, peaks: vec![("other".into(), 5)] });
        h.set_floor(Floor { upto_seq: 3, peaks: vec![] });
        assert_eq!(h.floor.as_ref().map(|f| f.upto_seq), Some(10));
    }

    #[test]
    fn more_live_records_than_the_cap_are_not_rescanned_at_every_insert() {
        // 1,000 large allocations live at once with a cap of 16: every insert used to scan
        // every record (quadratic: about 500,000 looked at).
        let mut h = History::with(MIB, 16);
        for i in 0..1000u64 {
            let a = alloc(i + 1, 0x1000 * (i + 1), MIB);
            h.inserted(Key::Addr(a.base), &a, "cudaMalloc", 0);
        }
        assert_eq!(h.recs.len(), 1000);
        assert!(h.scanned < 5_000, "{} records scanned", h.scanned);
        // Freed again, they are frozen down to the cap's half at the next freeze.
        for i in 0..1000u64 {
            let a = alloc(i + 1, 0x1000 * (i + 1), MIB);
            h.freed(Key::Addr(a.base), &a, 2000 + i);
        }
        for i in 0..600u64 {
            let a = alloc(3000 + i, 0x1000_0000 + 0x1000 * i, MIB);
            h.inserted(Key::Addr(a.base), &a, "cudaMalloc", 0);
            h.freed(Key::Addr(a.base), &a, 4000 + i);
        }
        assert!(h.recs.len() <= 1000, "{} records", h.recs.len());
        assert!(h.frozen >= 1000);
    }
}
