//! One device's ledger (a shard): live allocations, exact totals and peaks per category,
//! probes, failures, IPC imports, captures, hidden driver costs, timeline and events.
//!
//! Everything here is plain bookkeeping on `&mut self`; the caller holds the shard lock
//! and supplies the current time and sequence number (`Stamp`). Methods report what happened (replaced records, unknown
//! keys) instead of logging, so the caller can warn after the lock is released.

mod events;
mod order;
mod record;
mod stats;

use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasherDefault;

use super::bounded::{FirstLast, FirstN, Sample, Timeline};
use super::table::Table;
use super::{Facts, MemKind, Stamp};
use crate::classify::{self, Category};
pub(crate) use order::Displaced;
use order::{Fresh, Order, RECENT_MIN, RECENT_SHARE};
pub(crate) use record::*;
pub(crate) use stats::*;

/// Probes kept at each end of the run.
pub(crate) const PROBES_KEPT: usize = 256;
/// Failures kept (the first ones).
pub(crate) const FAILURES_KEPT: usize = 256;
/// Events kept (the first ones; past them, alike ones folded: `events.rs`).
pub(crate) const EVENTS_KEPT: usize = 1024;
/// Largest live allocations rendered per device.
pub(crate) const TOP_ALLOCATIONS: usize = 32;
/// Call sites rendered per device (by live bytes).
pub(crate) const TOP_SITES: usize = 64;
/// Distinct call sites kept per hidden-cost API.
pub(crate) const COST_SITES: usize = 8;
/// Named libraries kept apart in a device's driver costs (the rest: [`OTHER_LIBRARIES`]).
pub(crate) const COST_LIBRARIES: usize = 128;
/// The library name of the lazy-loading costs past [`COST_LIBRARIES`].
pub(crate) const OTHER_LIBRARIES: &str = "(other libraries)";

/// One device's shard.
#[derive(Debug, Default)]
pub(crate) struct DeviceLedger {
    pub stats: DeviceStats,
    /// Addressed allocations by base address.
    allocs: Table<Alloc>,
    order: Order,
    /// Records a settle outside an insert displaced, not yet warned about.
    unwarned: Displaced,
    phys: HashMap<u64, Alloc>,
    /// Open IPC imports: pointer to bytes.
    imports: HashMap<u64, u64>,
    /// Streams with an active capture (few; a vector beats a set).
    captures: Vec<u64>,
    /// The entry points records name.
    apis: Apis,
    /// Host-to-device bytes copied into live records (those whose `has_h2d` is set): few,
    /// and kept out of the record so that the others stay 32 bytes.
    h2d: HashMap<Key, u64, BuildHasherDefault<KeyHasher>>,
    /// For report-time categories: the large allocations' history (history.rs).
    pub history: super::history::History,
}

impl DeviceLedger {
    fn get(&self, key: Key) -> Option<&Alloc> {
        match key {
            Key::Addr(base) => self.allocs.get(base),
            Key::Handle(h) => self.phys.get(&h),
        }
    }

    /// Remove a record and account the free.
    fn take(&mut self, key: Key) -> Option<Removed> {
        let a = match key {
            Key::Addr(base) => {
                let a = self.allocs.remove(base)?;
                self.order.forget(&a);
                a
            }
            Key::Handle(h) => self.phys.remove(&h)?,
        };
        let h2d = self.account_gone(key, &a);
        Some(Removed { alloc: a, h2d })
    }

    /// Account the free of `a`, out of the table: its bytes leave the totals; the
    /// host-to-device bytes kept beside it are handed back.
    #[inline]
    fn account_gone(&mut self, key: Key, a: &Alloc) -> u64 {
        let (cat, bytes) = (a.category(), a.bytes());
        self.stats.sub_live(cat, bytes);
        self.stats.site_sub(a.site(), cat, bytes);
        self.stats.free_count += 1;
        if a.has_h2d() {
            self.h2d.remove(&key).unwrap_or(0)
        } else {
            0
        }
    }

    /// A new allocation under `key`. Records it displaces are counted as implicit frees.
    /// While a capture is active the allocation is flagged captured.
    pub(crate) fn insert(
        &mut self,
        key: Key,
        bytes: u64,
        kind: MemKind,
        api: &'static str,
        mut facts: Facts,
        now: Stamp,
    ) -> Displaced {
        let mut displaced = Displaced::default();
        let base = match key {
            Key::Addr(base) => base,
            Key::Handle(h) => h,
        };
        // What the record can hold (2^48 - 1 bytes), counted alike on allocation and free.
        let bytes = bytes.min(LOW48);
        if !self.captures.is_empty() {
            facts.captured = true;
        }
        if facts.captured {
            self.stats.graphs.captured_allocs += 1;
            self.stats.graphs.captured_bytes = self.stats.graphs.captured_bytes.saturating_add(bytes);
        }
        let category = classify::online(facts.tag, facts.captured, facts.exported);
        let mut a = Alloc::new(base, bytes, kind, self.apis.index(api), now, &facts, category);
        if facts.h2d_bytes > 0 {
            a.set_h2d();
        }
        // One walk of the table: the same base (or handle) still live is a free we missed,
        // replaced here (partial overlaps are found by `settle`, off this path).
        let old = match key {
            Key::Addr(_) => self.allocs.insert(a),
            Key::Handle(h) => self.phys.insert(h, a),
        };
        if let Some(old) = old {
            self.account_gone(key, &old);
            self.history.freed(key, &old, now.seq);
            displaced.count += 1;
            displaced.bytes = displaced.bytes.saturating_add(old.bytes());
        }
        if facts.h2d_bytes > 0 {
            self.h2d.insert(key, facts.h2d_bytes);
        }
        self.stats.add_live(category, bytes, now);
        self.stats.site_add(facts.site, category, bytes, true);
        self.stats.alloc_count += 1;
        self.stats.sample(now);
        self.history.inserted(key, &a, api, facts.h2d_bytes);
        if let Key::Addr(b) = key {
            self.order.push(Fresh { base: b, end: a.end(), seq: a.seq() });
            let o = &self.order;
            if o.recent.len() >= RECENT_MIN.max(o.sorted.len() / RECENT_SHARE) {
                displaced.add(self.settle(|| now));
            }
        }
        displaced
    }

    /// Free the record under `key`; its bytes, or None when unknown.
    pub(crate) fn remove(&mut self, key: Key, now: Stamp) -> Option<u64> {
        self.take_sampled(key, now).map(|r| r.alloc.bytes())
    }

    /// Free the record under `key` and hand it out, so that a free whose real call then
    /// fails can put it back ([`DeviceLedger::restore`]).
    pub(crate) fn take_sampled(&mut self, key: Key, now: Stamp) -> Option<Removed> {
        self.take_stamped(key, || now).map(|(r, _)| r)
    }

    /// [`DeviceLedger::take_sampled`] with the stamp made only when the record is found
    /// (one lookup, and no clock read or sequence number for a pointer that is not here).
    pub(crate) fn take_stamped(&mut self, key: Key, stamp: impl FnOnce() -> Stamp) -> Option<(Removed, Stamp)> {
        let r = self.take(key)?;
        let now = stamp();
        self.history.freed(key, &r.alloc, now.seq);
        self.stats.sample(now);
        Some((r, now))
    }

    /// Put back, exactly as it was, a record taken at `taken` by a free whose real call
    /// failed: facts, category, kind, api and times unchanged, the free uncounted, and the
    /// timeline sample the free took withdrawn when nothing came after it (the failed free
    /// leaves no dip). False (nothing restored) when a live record now occupies its
    /// place: the driver handed the address out again, so the free did happen.
    pub(crate) fn restore(&mut self, key: Key, r: Removed, taken: Stamp, now: Stamp) -> bool {
        let a = r.alloc;
        let occupied = match key {
            Key::Addr(base) => {
                self.settle_unwarned(|| now);
                self.overlapping(base, a.end()).is_some()
            }
            Key::Handle(h) => self.phys.contains_key(&h),
        };
        if occupied {
            return false;
        }
        self.stats.add_live(a.category(), a.bytes(), now);
        self.stats.site_add(a.site(), a.category(), a.bytes(), false);
        self.stats.free_count = self.stats.free_count.saturating_sub(1);
        if a.has_h2d() {
            self.h2d.insert(key, r.h2d);
        }
        let current = self.stats.current(now);
        self.stats.timeline.undo(taken.seq, current);
        self.history.restored(key, &a);
        match key {
            Key::Addr(b) => {
                self.order.push(Fresh { base: b, end: a.end(), seq: a.seq() });
                self.allocs.insert(a);
            }
            Key::Handle(h) => {
                self.phys.insert(h, a);
            }
        };
        true
    }

    /// Change the facts of a record (its export and capture flags, its host-to-device bytes;
    /// not its site or tag) and reclassify it. Returns what `change` returned, or None when
    /// the record is unknown. `now` is called (a stamp made) only when the category changes.
    pub(crate) fn update_facts<R>(
        &mut self,
        key: Key,
        now: impl FnOnce() -> Stamp,
        export_seq: u64,
        change: impl FnOnce(&mut Facts) -> R,
    ) -> Option<R> {
        let a = match key {
            Key::Addr(base) => self.allocs.get_mut(base),
            Key::Handle(h) => self.phys.get_mut(&h),
        }?;
        let h2d = if a.has_h2d() { self.h2d.get(&key).copied().unwrap_or(0) } else { 0 };
        let mut facts = a.facts(h2d);
        let r = change(&mut facts);
        a.set_flag(F_EXPORTED, facts.exported);
        a.set_flag(F_CAPTURED, facts.captured);
        if facts.h2d_bytes != h2d {
            a.set_h2d();
            self.h2d.insert(key, facts.h2d_bytes);
        }
        self.stats.reclassify(a, now);
        // The history, in the same lookup: `export_seq` is when an export happened (0: the
        // change was not one).
        self.history.facts_changed(key, a, facts.h2d_bytes, export_seq);
        Some(r)
    }

    /// `bytes` copied from host memory into the record under `key`. The live category does
    /// not depend on it (only the report-time rules do), so nothing is reclassified or
    /// stamped. False when the record is unknown.
    pub(crate) fn add_h2d(&mut self, key: Key, bytes: u64) -> bool {
        let Some(a) = (match key {
            Key::Addr(base) => self.allocs.get_mut(base),
            Key::Handle(h) => self.phys.get_mut(&h),
        }) else {
            return false;
        };
        a.set_h2d();
        let h2d = self.h2d.entry(key).or_insert(0);
        *h2d = h2d.saturating_add(bytes);
        self.history.facts_changed(key, a, *h2d, 0);
        true
    }

    /// Flag a record exported and reclassify it; counted in `ipc.exported_*` only the
    /// first time. False when the record is unknown.
    pub(crate) fn mark_exported(&mut self, key: Key, api: &'static str, now: Stamp) -> bool {
        let Some(newly) = self.update_facts(key, || now, now.seq, |f| !std::mem::replace(&mut f.exported, true)) else {
            return false;
        };
        if newly {
            let (base, bytes) = self.get(key).map_or((0, 0), |a| (a.base, a.bytes()));
            let ipc = &mut self.stats.ipc;
            ipc.exported_count += 1;
            ipc.exported_bytes = ipc.exported_bytes.saturating_add(bytes);
            let size = i64::try_from(bytes).ok();
            self.stats.sized_event(now, EventKind::IpcExport, api, size, None, || format!("0x{base:x} {bytes} bytes"));
        }
        true
    }

    pub(crate) fn probe(
        &mut self,
        api: &'static str,
        free: Option<u64>,
        total: Option<u64>,
        error: i32,
        (site, repeated): (u32, bool),
        now: Stamp,
    ) {
        let s = &mut self.stats;
        s.site_repeats += u64::from(repeated);
        let (live, cats) = (s.live_bytes, s.cat_live());
        s.probes.push_with(|| Probe {
            t_ms: now.t_ms(),
            t_us: now.t_us,
            seq: now.seq,
            api,
            free,
            total,
            error,
            live,
            cats,
            site,
        });
        if error == 0 {
            if let Some(t) = total {
                s.total_bytes = Some(t);
            }
            if let (Some(f), Some(t)) = (free, total) {
                let used = i128::from(t) - i128::from(f) - i128::from(s.live_bytes);
                let untracked = used.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
                s.untracked = Some(untracked);
                s.untracked_t_us = i64::try_from(now.t_us).ok();
                s.untracked_max = Some(s.untracked_max.map_or(untracked, |m| m.max(untracked)));
            }
        }
        s.event(now, EventKind::Probe, api, || {
            let show = |v: Option<u64>| v.map_or_else(|| "null".to_string(), |v| v.to_string());
            format!("free={} total={} error={error}", show(free), show(total))
        });
    }

    pub(crate) fn failure(
        &mut self,
        api: &'static str,
        bytes: u64,
        error: i32,
        error_name: &'static str,
        site: u32,
        now: Stamp,
    ) {
        let s = &mut self.stats;
        let (live, cats, last_probe) = (s.live_bytes, s.cat_live(), s.probes.last().copied());
        s.failures.push_with(|| Failure {
            t_ms: now.t_ms(),
            t_us: now.t_us,
            seq: now.seq,
            api,
            bytes,
            error,
            error_name,
            live,
            cats,
            last_probe,
            site,
        });
        let size = i64::try_from(bytes).ok();
        s.sized_event(now, EventKind::Failure, api, size, None, || format!("{bytes} bytes: {error_name} ({error})"));
    }

    pub(crate) fn set_total(&mut self, total: u64) {
        self.stats.total_bytes = Some(total);
    }

    /// A peer buffer opened at `ptr`. True when `ptr` was already open (the earlier open is
    /// replaced: we missed its close).
    pub(crate) fn ipc_import(&mut self, ptr: u64, bytes: Option<u64>, api: &'static str, now: Stamp) -> bool {
        let b = bytes.unwrap_or(0);
        let old = self.imports.insert(ptr, b);
        let ipc = &mut self.stats.ipc;
        ipc.imported_count += 1;
        ipc.imported_bytes = ipc.imported_bytes.saturating_add(b);
        if let Some(old) = old {
            ipc.imported_live_bytes = ipc.imported_live_bytes.saturating_sub(old);
        } else {
            ipc.imported_live_count += 1;
        }
        ipc.imported_live_bytes = ipc.imported_live_bytes.saturating_add(b);
        let size = bytes.and_then(|b| i64::try_from(b).ok());
        self.stats.sized_event(now, EventKind::IpcImport, api, size, None, || match bytes {
            Some(b) => format!("0x{ptr:x} {b} bytes"),
            None => format!("0x{ptr:x} size unknown"),
        });
        old.is_some()
    }

    /// Close the import opened at `ptr`; false when it is not open here.
    pub(crate) fn ipc_close(&mut self, ptr: u64) -> bool {
        let Some(b) = self.imports.remove(&ptr) else {
            return false;
        };
        let ipc = &mut self.stats.ipc;
        ipc.imported_live_count = ipc.imported_live_count.saturating_sub(1);
        ipc.imported_live_bytes = ipc.imported_live_bytes.saturating_sub(b);
        true
    }

    /// A capture begun on `stream`. False when one was already active there.
    pub(crate) fn capture_begin(&mut self, stream: u64, api: &'static str, now: Stamp) -> bool {
        let fresh = !self.captures.contains(&stream);
        if fresh {
            self.captures.push(stream);
        }
        let g = &mut self.stats.graphs;
        g.captures += 1;
        g.captures_active = self.captures.len() as u64;
        self.stats.event(now, EventKind::CaptureBegin, api, || format!("stream 0x{stream:x}"));
        fresh
    }

    /// The capture on `stream` ended. False when none was active there.
    pub(crate) fn capture_end(&mut self, stream: u64, api: &'static str, now: Stamp) -> bool {
        let Some(i) = self.captures.iter().position(|&s| s == stream) else {
            return false;
        };
        self.captures.swap_remove(i);
        self.stats.graphs.captures_active = self.captures.len() as u64;
        self.stats.event(now, EventKind::CaptureEnd, api, || format!("stream 0x{stream:x}"));
        true
    }

    /// Whether a capture is active on `stream`.
    pub(crate) fn capturing_on(&self, stream: u64) -> bool {
        self.captures.contains(&stream)
    }

    pub(crate) fn capturing(&self) -> bool {
        !self.captures.is_empty()
    }

    pub(crate) fn graph_instantiate(&mut self, api: &'static str, measured: Option<i64>, now: Stamp) {
        let g = &mut self.stats.graphs;
        g.instantiations += 1;
        if let Some(m) = measured {
            g.instantiate_measured += 1;
            g.instantiate_bytes = g.instantiate_bytes.saturating_add(m);
        }
        self.stats.sized_event(now, EventKind::Instantiate, api, measured, None, || match measured {
            Some(m) => format!("{m} bytes"),
            None => "not measured".to_string(),
        });
    }

    /// A graph's executable destroyed (`cuGraphExecDestroy`): what its instantiation took
    /// comes back, measured like it (a negative cost: `measured` is free before minus after).
    pub(crate) fn graph_exec_destroy(
        &mut self,
        api: &'static str,
        measured: Option<i64>,
        site: u32,
        start_us: Option<u64>,
        now: Stamp,
    ) {
        let g = &mut self.stats.graphs;
        g.exec_destroys += 1;
        if let Some(m) = measured {
            g.exec_destroy_measured += 1;
            g.exec_destroy_bytes = g.exec_destroy_bytes.saturating_add(m);
            self.driver_cost(api, m, site, start_us, now);
        }
    }

    /// A measured hidden cost; `start_us` is the start of the measurement window, if known.
    pub(crate) fn driver_cost(&mut self, api: &'static str, bytes: i64, site: u32, start_us: Option<u64>, now: Stamp) {
        self.driver_cost_of(api, None, bytes, site, start_us, now)
    }

    /// [`driver_cost`](Self::driver_cost) kept apart per `library`: the lazy loading of a
    /// library into a context, named for the library's file. Past [`COST_LIBRARIES`] named
    /// libraries on the device, further ones are counted under [`OTHER_LIBRARIES`].
    pub(crate) fn driver_cost_of(
        &mut self,
        api: &'static str,
        library: Option<&std::sync::Arc<str>>,
        bytes: i64,
        site: u32,
        start_us: Option<u64>,
        now: Stamp,
    ) {
        let costs = &mut self.stats.driver_costs;
        let mut library = library.cloned();
        let known = |c: &DriverCost, library: &Option<std::sync::Arc<str>>| c.api == api && c.library == *library;
        if library.is_some()
            && !costs.iter().any(|c| known(c, &library))
            && costs.iter().filter(|c| c.library.is_some()).count() >= COST_LIBRARIES
        {
            library = Some(std::sync::Arc::from(OTHER_LIBRARIES));
        }
        let i = match costs.iter().position(|c| known(c, &library)) {
            Some(i) => {
                let c = &mut costs[i];
                c.calls += 1;
                c.bytes = c.bytes.saturating_add(bytes);
                i
            }
            None => {
                costs.push(DriverCost { api, library: library.clone(), calls: 1, bytes, sites: [0; COST_SITES] });
                costs.len() - 1
            }
        };
        let sites = &mut costs[i].sites;
        if site != 0 && !sites.contains(&site) {
            if let Some(free) = sites.iter_mut().find(|s| **s == 0) {
                *free = site;
            }
        }
        self.stats.sized_event(now, EventKind::DriverCost, api, Some(bytes), start_us, || match &library {
            Some(l) => format!("{bytes} bytes: lazy loading of {l} (first used by {api})"),
            None => format!("{bytes} bytes"),
        });
    }

    /// This process's context on this device serves peer access from device `from`
    /// (created by the call when the process had none here); its size is not measured.
    pub(crate) fn peer_access(&mut self, api: &'static str, from: i32, start_us: u64, now: Stamp) {
        self.stats.sized_event(now, EventKind::PeerAccess, api, None, Some(start_us), || {
            format!("peer access from device {from}")
        });
    }

    /// A live record as the report shows it.
    pub(crate) fn unpack(&self, key: Key, a: &Alloc) -> Allocation {
        let h2d = if a.has_h2d() { self.h2d.get(&key).copied().unwrap_or(0) } else { 0 };
        Allocation {
            base: a.base,
            bytes: a.bytes(),
            kind: a.kind(),
            api: self.apis.name(a.api_index()),
            t_us: a.t_us(),
            seq: a.seq(),
            facts: a.facts(h2d),
            category: a.category(),
        }
    }

    /// Up to `TOP_ALLOCATIONS` largest live records, largest first (ties: lower base first).
    pub(crate) fn top_allocations(&self) -> Vec<Allocation> {
        // A min-heap of the best so far, keyed so that the smallest sits on top.
        let mut heap: BinaryHeap<std::cmp::Reverse<(u64, std::cmp::Reverse<u64>, bool)>> = BinaryHeap::new();
        let all = self.allocs.values().map(|a| (a, false)).chain(self.phys.values().map(|a| (a, true)));
        for (a, phys) in all {
            let k = std::cmp::Reverse((a.bytes(), std::cmp::Reverse(a.base), phys));
            if heap.len() < TOP_ALLOCATIONS {
                heap.push(k);
            } else if heap.peek().is_some_and(|top| k < *top) {
                heap.pop();
                heap.push(k);
            }
        }
        heap.into_sorted_vec()
            .into_iter()
            .filter_map(|std::cmp::Reverse((_, std::cmp::Reverse(base), phys))| {
                let key = if phys { Key::Handle(base) } else { Key::Addr(base) };
                self.get(key).map(|a| self.unpack(key, a))
            })
            .collect()
    }

    /// Everything to render, copied out so the lock can be released.
    pub(crate) fn snapshot(&self) -> (DeviceStats, Vec<Allocation>) {
        let mut stats = self.stats.clone();
        stats.timeline.fill_pending(stats.live_bytes, stats.cat_live());
        (stats, self.top_allocations())
    }
}
