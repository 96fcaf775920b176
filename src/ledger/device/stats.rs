//! What a device's ledger counts, as plain values: totals and peaks per category, probes,
//! failures, events, IPC, graphs, hidden driver costs and call sites.

use super::*;

/// Live bytes, their peak, and the live allocation count of one category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CatStats {
    pub live: u64,
    pub peak: u64,
    pub allocs: u64,
}

impl CatStats {
    pub(super) fn add(&mut self, bytes: u64) {
        self.live = self.live.saturating_add(bytes);
        self.allocs += 1;
        self.peak = self.peak.max(self.live);
    }

    pub(super) fn sub(&mut self, bytes: u64) {
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
    /// Calls this event stands for (more than 1 once alike events were folded: `events.rs`).
    pub calls: u32,
    /// The device's queries and failures before it: events fold only within one epoch.
    pub epoch: u64,
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
    /// Executables destroyed (`cuGraphExecDestroy`), those measured, and what the measured
    /// ones gave back (free before minus after: negative).
    pub exec_destroys: u64,
    pub exec_destroy_measured: u64,
    pub exec_destroy_bytes: i64,
}

/// Hidden driver memory of one API, summed over its calls.
#[derive(Clone, Debug)]
pub(crate) struct DriverCost {
    pub api: &'static str,
    /// The library whose lazy loading into a context the calls triggered (the file of its
    /// image), None for every other cost.
    pub library: Option<std::sync::Arc<str>>,
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
    /// When `untracked` was measured (the query's `t_us`).
    pub untracked_t_us: Option<i64>,
    /// Probes and allocations whose call site was proven equal to the thread's previous one
    /// from that place (`sites::capture_repeat`, `sites::capture_alloc`), counted here under
    /// the lock the record takes anyway (`health.site_repeats`; a process-wide atomic would
    /// be one more shared cache line per call).
    pub site_repeats: u64,
    pub ipc: IpcStats,
    pub graphs: GraphStats,
    pub driver_costs: Vec<DriverCost>,
    pub timeline: Timeline,
    pub events: super::events::Events<EVENTS_KEPT>,
    /// Per call site (bounded by the site table's size).
    pub sites: FastMap<u32, SiteStats>,
}

impl DeviceStats {
    /// Count an allocation of `bytes` in `cat` for its site: a new one (`fresh`), or one put
    /// back after a failed free (live again, but not allocated twice).
    pub(super) fn site_add(&mut self, site: u32, cat: Category, bytes: u64, fresh: bool) {
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

    pub(super) fn site_sub(&mut self, site: u32, cat: Category, bytes: u64) {
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

    pub(super) fn cat_live(&self) -> [u64; 6] {
        self.cats.map(|c| c.live)
    }

    /// Count `bytes` live in `cat`, updating the peaks.
    pub(super) fn add_live(&mut self, cat: Category, bytes: u64, now: Stamp) {
        self.live_bytes = self.live_bytes.saturating_add(bytes);
        if self.live_bytes > self.peak_bytes {
            self.peak_bytes = self.live_bytes;
            self.peak_t_ms = Some(now.t_ms());
        }
        self.cats[cat.index()].add(bytes);
    }

    pub(super) fn sub_live(&mut self, cat: Category, bytes: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(bytes);
        self.cats[cat.index()].sub(bytes);
    }

    /// The current totals, as a timeline sample taken by the record `now`.
    pub(super) fn current(&self, now: Stamp) -> Sample {
        Sample { t_ms: now.t_ms(), t_us: now.t_us, seq: now.seq, live: self.live_bytes, cats: self.cat_live() }
    }

    /// Record the current totals on the timeline (after any change of them).
    #[inline]
    pub(super) fn sample(&mut self, now: Stamp) {
        let (live, cats) = (self.live_bytes, &self.cats);
        let current = || Sample { t_ms: now.t_ms(), t_us: now.t_us, seq: now.seq, live, cats: cats.map(|c| c.live) };
        self.timeline.push_with(now.t_us, now.seq, current);
    }

    /// Reclassify `a` from its facts, moving its bytes between categories. The device
    /// total does not change, so neither does the device peak.
    pub(super) fn reclassify(&mut self, a: &mut Alloc, now: impl FnOnce() -> Stamp) {
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

    pub(super) fn event(&mut self, now: Stamp, kind: EventKind, api: &'static str, detail: impl FnOnce() -> String) {
        self.sized_event(now, kind, api, None, None, detail);
    }

    /// An event with a size and, for measured calls, the start of the measurement window.
    pub(super) fn sized_event(
        &mut self,
        now: Stamp,
        kind: EventKind,
        api: &'static str,
        bytes: Option<i64>,
        t0_us: Option<u64>,
        detail: impl FnOnce() -> String,
    ) {
        let epoch = self.probes.total() + self.failures.total();
        self.events.push_with(|| Event {
            t_ms: now.t_ms(),
            t_us: now.t_us,
            seq: now.seq,
            kind,
            api,
            bytes,
            t0_us,
            detail: detail(),
            calls: 1,
            epoch,
        });
    }
}
