//! One device's ledger (a shard): live allocations, exact totals and peaks per category,
//! probes, failures, IPC imports, captures, hidden driver costs, timeline and events.
//!
//! Everything here is plain bookkeeping on `&mut self`; the caller holds the shard lock
//! and supplies the current time and sequence number (`Stamp`). Methods report what happened (replaced records, unknown
//! keys) instead of logging, so the caller can warn after the lock is released.

use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use super::bounded::{FirstLast, FirstN, Sample, Timeline};
use super::table::{Keyed, Table};
use super::{Facts, MemKind, Stamp};
use crate::classify::{self, Category};

/// Probes kept at each end of the run.
pub(crate) const PROBES_KEPT: usize = 256;
/// Failures kept (the first ones).
pub(crate) const FAILURES_KEPT: usize = 256;
/// Events kept (the first ones).
pub(crate) const EVENTS_KEPT: usize = 1024;
/// Largest live allocations rendered per device.
pub(crate) const TOP_ALLOCATIONS: usize = 32;
/// Call sites rendered per device (by live bytes).
pub(crate) const TOP_SITES: usize = 64;
/// Distinct call sites kept per hidden-cost API.
pub(crate) const COST_SITES: usize = 8;

/// One live allocation (or VMM physical handle) as the shard keeps it: 32 bytes, so that a
/// million live allocations cost at most 64 bytes each with the table's slack and the
/// address order. Fields are packed into words; read them through the methods.
/// Limits (saturating; documented in docs/reliability.md): sizes up to 2^48-1 bytes (256 TiB),
/// times up to 2^48 us (8.9 years), sequence numbers up to 2^48.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Alloc {
    /// Base address; for VMM physical memory, the handle. 0 only in an empty table slot.
    pub base: u64,
    /// Bytes (low 48 bits) | call site (high 16).
    sized: u64,
    /// Per-process record order (low 48, see `Stamp`) | tag (high 16, 0: none).
    ordered: u64,
    /// When it was made, us (low 48) | api (8: index into the shard's `Apis`) | flags (8).
    timed: u64,
}

const LOW48: u64 = (1 << 48) - 1;
/// `timed`'s flag byte: kind (3 bits), category (3 bits), exported, captured.
const F_EXPORTED: u64 = 1 << 6;
const F_CAPTURED: u64 = 1 << 7;
/// In the api byte: host-to-device bytes were copied in (kept in `DeviceLedger::h2d`).
const A_H2D: u64 = 1 << 7;

/// By discriminant (the order `MemKind` declares them in).
const KINDS: [MemKind; 5] = [MemKind::Device, MemKind::Managed, MemKind::Async, MemKind::Pitch, MemKind::VmmPhysical];
const _: () = {
    let mut i = 0;
    while i < KINDS.len() {
        assert!(KINDS[i] as usize == i);
        i += 1;
    }
};

// Site ids and tag ids fit their 16 bits.
const _: () = assert!(crate::sites::MAX_SITE_ID <= u16::MAX as usize && crate::classify::tags::MAX_TAGS <= 1 << 16);

impl Alloc {
    /// A record of `bytes` at `base` made at `now`, with its facts and category; `api` is an
    /// index into the shard's [`Apis`].
    pub(crate) fn new(
        base: u64,
        bytes: u64,
        kind: MemKind,
        api: u8,
        now: Stamp,
        facts: &Facts,
        category: Category,
    ) -> Alloc {
        let site = u64::from(u16::try_from(facts.site).unwrap_or(0));
        let tag = u64::from(facts.tag.map_or(0, crate::classify::tags::TagId::raw));
        let kind = kind as u64;
        let flags = kind
            | (category.index() as u64) << 3
            | if facts.exported { F_EXPORTED } else { 0 }
            | if facts.captured { F_CAPTURED } else { 0 };
        let api = u64::from(api) & !A_H2D;
        Alloc {
            base,
            sized: bytes.min(LOW48) | site << 48,
            ordered: now.seq.min(LOW48) | tag << 48,
            timed: now.t_us.min(LOW48) | api << 48 | flags << 56,
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.sized & LOW48
    }

    pub(crate) fn site(&self) -> u32 {
        (self.sized >> 48) as u32
    }

    pub(crate) fn seq(&self) -> u64 {
        self.ordered & LOW48
    }

    pub(crate) fn tag(&self) -> Option<crate::classify::tags::TagId> {
        crate::classify::tags::TagId::from_raw((self.ordered >> 48) as u16)
    }

    pub(crate) fn t_us(&self) -> u64 {
        self.timed & LOW48
    }

    fn api_byte(&self) -> u64 {
        (self.timed >> 48) & 0xff
    }

    fn api_index(&self) -> u8 {
        (self.api_byte() & !A_H2D) as u8
    }

    /// Host-to-device bytes were copied into it (their count is kept beside the table).
    fn has_h2d(&self) -> bool {
        self.api_byte() & A_H2D != 0
    }

    fn flags(&self) -> u64 {
        self.timed >> 56
    }

    pub(crate) fn kind(&self) -> MemKind {
        KINDS[(self.flags() & 7) as usize % KINDS.len()]
    }

    pub(crate) fn category(&self) -> Category {
        classify::ALL[((self.flags() >> 3) & 7) as usize % classify::ALL.len()]
    }

    pub(crate) fn exported(&self) -> bool {
        self.flags() & F_EXPORTED != 0
    }

    pub(crate) fn captured(&self) -> bool {
        self.flags() & F_CAPTURED != 0
    }

    fn set_category(&mut self, c: Category) {
        self.timed = self.timed & !(7 << 59) | (c.index() as u64) << 59;
    }

    fn set_flag(&mut self, flag: u64, on: bool) {
        let bit = flag << 56;
        self.timed = if on { self.timed | bit } else { self.timed & !bit };
    }

    fn set_h2d(&mut self) {
        self.timed |= A_H2D << 48;
    }

    /// Its facts, given the host-to-device bytes kept beside it.
    pub(crate) fn facts(&self, h2d_bytes: u64) -> Facts {
        Facts { exported: self.exported(), captured: self.captured(), h2d_bytes, site: self.site(), tag: self.tag() }
    }

    fn end(&self) -> u64 {
        self.base.saturating_add(self.bytes())
    }
}

impl Keyed for Alloc {
    fn key(&self) -> u64 {
        self.base
    }

    fn vacant() -> Self {
        Alloc { base: 0, sized: 0, ordered: 0, timed: 0 }
    }
}

/// The entry points named by one shard's records (few: the hooked allocation functions),
/// looked up by address first (the names are the table's `&'static str`s).
#[derive(Debug, Default)]
pub(crate) struct Apis(Vec<&'static str>);

/// Api indices: up to 127 names, then the last one stands for every other.
const APIS_KEPT: usize = 127;

impl Apis {
    #[inline]
    fn index(&mut self, api: &'static str) -> u8 {
        if let Some(i) = self.0.iter().position(|a| std::ptr::eq(a.as_ptr(), api.as_ptr()) && a.len() == api.len()) {
            return i as u8;
        }
        self.index_slow(api)
    }

    #[cold]
    fn index_slow(&mut self, api: &'static str) -> u8 {
        if let Some(i) = self.0.iter().position(|a| *a == api) {
            return i as u8;
        }
        if self.0.len() < APIS_KEPT {
            self.0.push(api);
            return (self.0.len() - 1) as u8;
        }
        (APIS_KEPT - 1) as u8
    }

    pub(crate) fn name(&self, i: u8) -> &'static str {
        self.0.get(usize::from(i)).copied().unwrap_or("?")
    }
}

/// A live record as the report shows it (unpacked, with its api named and its host-to-device
/// bytes): what [`DeviceLedger::top_allocations`] hands out.
#[derive(Clone, Debug)]
pub(crate) struct Allocation {
    pub base: u64,
    pub bytes: u64,
    pub kind: MemKind,
    pub api: &'static str,
    pub t_us: u64,
    pub seq: u64,
    pub facts: Facts,
    pub category: Category,
}

/// A hasher for [`Key`]s (a discriminant and an address or handle) and ids: a multiply and
/// a fold per word, instead of SipHash on the path of a host-to-device copy. Its keys are
/// culedger's or the driver's, not a program's input.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let m = u128::from(self.0 ^ v) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (m as u64) ^ (m >> 64) as u64;
    }

    fn write_isize(&mut self, v: isize) {
        self.write_u64(v as u64);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
}

/// A map keyed by culedger's own ids and addresses, hashed by [`KeyHasher`]: the per-site
/// figures and the history's index are updated on every large allocation and free, where
/// SipHash was several times the rest of the update.
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

/// A record taken out of a shard, with the host-to-device bytes kept beside it: what a
/// failed free puts back ([`DeviceLedger::restore`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Removed {
    pub alloc: Alloc,
    pub h2d: u64,
}

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
struct Order {
    /// Ascending, no duplicates; may hold bases no longer live (`stale` of them at most).
    sorted: Vec<u64>,
    /// Allocations since the last merge, in no order; some may be dead already.
    recent: Vec<Fresh>,
    /// Frees since `sorted` was last cleaned (an upper bound on its dead entries).
    stale: usize,
    /// The greatest seq merged into `sorted` so far: a record with a greater one is not
    /// there yet, and its free leaves nothing stale.
    merged_seq: u64,
    /// At or above the end of every record merged so far and of every entry of `recent` but
    /// its last (an upper bound: it never goes down). An allocation at or above it overlaps
    /// nothing older, so when it is freed while still the last of `recent` its entry can go
    /// at once (a pair allocated and freed between merges leaves nothing to merge).
    reach: u64,
}

impl Order {
    /// An allocation not merged yet.
    #[inline]
    fn push(&mut self, f: Fresh) {
        if let Some(last) = self.recent.last() {
            self.reach = self.reach.max(last.end);
        }
        self.recent.push(f);
    }

    /// The record `a` was freed: its base is stale in `sorted` if it was merged; if it is the
    /// last allocation not merged and lies at or above `reach`, its entry goes now.
    #[inline]
    fn forget(&mut self, a: &Alloc) {
        if a.seq() <= self.merged_seq {
            self.stale += 1;
        } else if self.recent.last().is_some_and(|f| f.base == a.base && f.seq == a.seq() && f.base >= self.reach) {
            self.recent.pop();
        }
    }
}

/// An allocation not merged into the order yet.
#[derive(Clone, Copy, Debug)]
struct Fresh {
    base: u64,
    end: u64,
    seq: u64,
}

/// Merge `recent` into `sorted` when it reaches this share of it (a sixteenth: its entries
/// are 24 bytes, and a million live allocations should not carry a quarter of a million).
const RECENT_SHARE: usize = 16;
const RECENT_MIN: usize = 64;

/// Where a record lives in a shard: addressed allocations are keyed by base address,
/// VMM physical memory by handle (handles are not addresses and may collide with them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Addr(u64),
    Handle(u64),
}

/// Live bytes, their peak, and the live allocation count of one category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CatStats {
    pub live: u64,
    pub peak: u64,
    pub allocs: u64,
}

impl CatStats {
    fn add(&mut self, bytes: u64) {
        self.live = self.live.saturating_add(bytes);
        self.allocs += 1;
        self.peak = self.peak.max(self.live);
    }

    fn sub(&mut self, bytes: u64) {
        self.live = self.live.saturating_sub(bytes);
        self.allocs = self.allocs.saturating_sub(1);
    }
}

/// A free-memory query and the ledger at that moment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Probe {
    pub t_ms: u64,
    pub t_us: u64,
    pub seq: u64,
    pub api: &'static str,
    pub free: Option<u64>,
    pub total: Option<u64>,
    pub error: i32,
    pub live: u64,
    pub cats: [u64; 6],
    /// Call site of the query (0: none).
    pub site: u32,
}

/// A failed allocation, the ledger at that moment and the last probe before it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Failure {
    pub t_ms: u64,
    pub t_us: u64,
    pub seq: u64,
    pub api: &'static str,
    pub bytes: u64,
    pub error: i32,
    pub error_name: &'static str,
    pub live: u64,
    pub cats: [u64; 6],
    pub last_probe: Option<Probe>,
    /// Call site of the allocation (0: none).
    pub site: u32,
}

/// Kinds of timeline events, as named in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventKind {
    Probe,
    Failure,
    CaptureBegin,
    CaptureEnd,
    Instantiate,
    IpcExport,
    IpcImport,
    DriverCost,
    PeerAccess,
}

impl EventKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            EventKind::Probe => "probe",
            EventKind::Failure => "failure",
            EventKind::CaptureBegin => "capture_begin",
            EventKind::CaptureEnd => "capture_end",
            EventKind::Instantiate => "instantiate",
            EventKind::IpcExport => "ipc_export",
            EventKind::IpcImport => "ipc_import",
            EventKind::DriverCost => "driver_cost",
            EventKind::PeerAccess => "peer_access",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub t_ms: u64,
    pub t_us: u64,
    pub seq: u64,
    pub kind: EventKind,
    pub api: &'static str,
    /// Bytes the event is about (requested, exported, opened, measured), when it has a size.
    pub bytes: Option<i64>,
    /// Start of the call's measurement window (`driver_cost`, `peer_access`), same clock as `t_us`.
    pub t0_us: Option<u64>,
    pub detail: String,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IpcStats {
    pub exported_count: u64,
    pub exported_bytes: u64,
    pub imported_count: u64,
    pub imported_bytes: u64,
    pub imported_live_count: u64,
    pub imported_live_bytes: u64,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GraphStats {
    pub captures: u64,
    pub captures_active: u64,
    pub captured_allocs: u64,
    pub captured_bytes: u64,
    pub instantiations: u64,
    /// Instantiations whose device-memory delta was measured.
    pub instantiate_measured: u64,
    pub instantiate_bytes: i64,
}

/// Hidden driver memory of one API, summed over its calls.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DriverCost {
    pub api: &'static str,
    pub calls: u64,
    pub bytes: i64,
    /// Distinct call sites of the calls, first `COST_SITES` (0 entries are not kept).
    pub sites: [u32; COST_SITES],
}

/// What one call site holds on a device: live bytes (and their peak), live allocations,
/// allocations ever made, and live bytes per category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SiteStats {
    pub live: u64,
    pub peak: u64,
    pub allocs: u64,
    pub total_allocs: u64,
    pub cats: [u64; 6],
    /// Category of the latest allocation (named when nothing is live).
    pub last_cat: usize,
}

impl SiteStats {
    /// The category holding most of the site's live bytes (the latest one when none).
    pub(crate) fn category(&self) -> usize {
        if self.live == 0 {
            return self.last_cat;
        }
        (0..6).fold(0, |best, i| if self.cats[i] > self.cats[best] { i } else { best })
    }
}

/// Everything a device renders except the live maps; cloned out under the lock so the
/// JSON is built without holding it.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeviceStats {
    pub total_bytes: Option<u64>,
    pub live_bytes: u64,
    pub peak_bytes: u64,
    pub peak_t_ms: Option<u64>,
    pub alloc_count: u64,
    pub free_count: u64,
    pub cats: [CatStats; 6],
    pub probes: FirstLast<Probe, PROBES_KEPT>,
    pub failures: FirstN<Failure, FAILURES_KEPT>,
    pub untracked: Option<i64>,
    pub untracked_max: Option<i64>,
    /// Probes and allocations whose call site was proven equal to the thread's previous one
    /// from that place (`sites::capture_repeat`, `sites::capture_alloc`), counted here under
    /// the lock the record takes anyway (`health.site_repeats`; a process-wide atomic would
    /// be one more shared cache line per call).
    pub site_repeats: u64,
    pub ipc: IpcStats,
    pub graphs: GraphStats,
    pub driver_costs: Vec<DriverCost>,
    pub timeline: Timeline,
    pub events: FirstN<Event, EVENTS_KEPT>,
    /// Per call site (bounded by the site table's size).
    pub sites: FastMap<u32, SiteStats>,
}

impl DeviceStats {
    /// Count an allocation of `bytes` in `cat` for its site: a new one (`fresh`), or one put
    /// back after a failed free (live again, but not allocated twice).
    fn site_add(&mut self, site: u32, cat: Category, bytes: u64, fresh: bool) {
        if site == 0 {
            return;
        }
        let s = self.sites.entry(site).or_default();
        s.live = s.live.saturating_add(bytes);
        s.peak = s.peak.max(s.live);
        s.allocs += 1;
        s.total_allocs += u64::from(fresh);
        s.cats[cat.index()] = s.cats[cat.index()].saturating_add(bytes);
        s.last_cat = cat.index();
    }

    fn site_sub(&mut self, site: u32, cat: Category, bytes: u64) {
        if site == 0 {
            return;
        }
        if let Some(s) = self.sites.get_mut(&site) {
            s.live = s.live.saturating_sub(bytes);
            s.allocs = s.allocs.saturating_sub(1);
            s.cats[cat.index()] = s.cats[cat.index()].saturating_sub(bytes);
        }
    }

    /// Up to `TOP_SITES` sites: most live bytes first, then highest peak, then lowest id.
    pub(crate) fn top_sites(&self) -> Vec<(u32, SiteStats)> {
        let mut v: Vec<(u32, SiteStats)> = self.sites.iter().map(|(&id, &s)| (id, s)).collect();
        v.sort_unstable_by(|a, b| b.1.live.cmp(&a.1.live).then(b.1.peak.cmp(&a.1.peak)).then(a.0.cmp(&b.0)));
        v.truncate(TOP_SITES);
        v
    }

    fn cat_live(&self) -> [u64; 6] {
        self.cats.map(|c| c.live)
    }

    /// Count `bytes` live in `cat`, updating the peaks.
    fn add_live(&mut self, cat: Category, bytes: u64, now: Stamp) {
        self.live_bytes = self.live_bytes.saturating_add(bytes);
        if self.live_bytes > self.peak_bytes {
            self.peak_bytes = self.live_bytes;
            self.peak_t_ms = Some(now.t_ms());
        }
        self.cats[cat.index()].add(bytes);
    }

    fn sub_live(&mut self, cat: Category, bytes: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(bytes);
        self.cats[cat.index()].sub(bytes);
    }

    /// The current totals, as a timeline sample taken by the record `now`.
    fn current(&self, now: Stamp) -> Sample {
        Sample { t_ms: now.t_ms(), t_us: now.t_us, seq: now.seq, live: self.live_bytes, cats: self.cat_live() }
    }

    /// Record the current totals on the timeline (after any change of them).
    #[inline]
    fn sample(&mut self, now: Stamp) {
        let (live, cats) = (self.live_bytes, &self.cats);
        let current = || Sample { t_ms: now.t_ms(), t_us: now.t_us, seq: now.seq, live, cats: cats.map(|c| c.live) };
        self.timeline.push_with(now.t_us, now.seq, current);
    }

    /// Reclassify `a` from its facts, moving its bytes between categories. The device
    /// total does not change, so neither does the device peak.
    fn reclassify(&mut self, a: &mut Alloc, now: impl FnOnce() -> Stamp) {
        let cat = classify::online(a.tag(), a.captured(), a.exported());
        let (old, bytes, site) = (a.category(), a.bytes(), a.site());
        if cat != old {
            self.cats[old.index()].sub(bytes);
            self.cats[cat.index()].add(bytes);
            if let Some(s) = self.sites.get_mut(&site).filter(|_| site != 0) {
                s.cats[old.index()] = s.cats[old.index()].saturating_sub(bytes);
                s.cats[cat.index()] = s.cats[cat.index()].saturating_add(bytes);
                s.last_cat = cat.index();
            }
            a.set_category(cat);
            self.sample(now());
        }
    }

    fn event(&mut self, now: Stamp, kind: EventKind, api: &'static str, detail: impl FnOnce() -> String) {
        self.sized_event(now, kind, api, None, None, detail);
    }

    /// An event with a size and, for measured calls, the start of the measurement window.
    fn sized_event(
        &mut self,
        now: Stamp,
        kind: EventKind,
        api: &'static str,
        bytes: Option<i64>,
        t0_us: Option<u64>,
        detail: impl FnOnce() -> String,
    ) {
        self.events.push_with(|| Event {
            t_ms: now.t_ms(),
            t_us: now.t_us,
            seq: now.seq,
            kind,
            api,
            bytes,
            t0_us,
            detail: detail(),
        });
    }
}

/// What an insert displaced: records still live at an overlapping address or the same
/// handle, whose frees we missed. They were counted as implicit frees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Displaced {
    pub count: u64,
    pub bytes: u64,
}

impl Displaced {
    fn add(&mut self, other: Displaced) {
        self.count += other.count;
        self.bytes = self.bytes.saturating_add(other.bytes);
    }
}

/// `a` and `b` (each ascending, without duplicates) merged, without duplicates.
fn merge(a: &[u64], b: &[u64]) -> Vec<u64> {
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
    fn live_before(&self, end: u64) -> Option<&Alloc> {
        let sorted = &self.order.sorted;
        sorted[..sorted.partition_point(|&b| b < end)].iter().rev().find_map(|&b| self.allocs.get(b))
    }

    /// A live addressed allocation overlapping [base, end) (or at `base` when empty);
    /// `order` settled.
    fn overlapping(&self, base: u64, end: u64) -> Option<u64> {
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
    fn displace_older(
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
    fn displace(&mut self, base: u64, displaced: &mut Displaced, now: &mut dyn FnMut() -> Stamp) {
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

    /// A measured hidden cost; `start_us` is the start of the measurement window, if known.
    pub(crate) fn driver_cost(&mut self, api: &'static str, bytes: i64, site: u32, start_us: Option<u64>, now: Stamp) {
        let costs = &mut self.stats.driver_costs;
        let i = match costs.iter().position(|c| c.api == api) {
            Some(i) => {
                let c = &mut costs[i];
                c.calls += 1;
                c.bytes = c.bytes.saturating_add(bytes);
                i
            }
            None => {
                costs.push(DriverCost { api, calls: 1, bytes, sites: [0; COST_SITES] });
                costs.len() - 1
            }
        };
        let sites = &mut costs[i].sites;
        if site != 0 && !sites.contains(&site) {
            if let Some(free) = sites.iter_mut().find(|s| **s == 0) {
                *free = site;
            }
        }
        self.stats.sized_event(now, EventKind::DriverCost, api, Some(bytes), start_us, || format!("{bytes} bytes"));
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
