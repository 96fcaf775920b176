//! Rendering of the `devices`, `host`, `health` and `sites` parts of the report
//! (docs/schema.md) into the report's types (`culedger_format::report`). Each device is
//! copied out under its lock and rendered after the lock is released; the call sites the
//! records name are resolved once, through the [`SiteResolver`] the caller passes in (the
//! ledger keeps only their ids).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use culedger_format::report::{self as fmt, Frozen, HostMem, SiteRec};
use serde::Serialize;

use super::device::{Allocation, DeviceStats, Failure, Probe, SiteStats};
use super::final_categories::{self, Final};
use super::history::HistoryView;
use super::{Ledger, MemKind};
use crate::classify::ALL;

/// What rendering needs from the process's call-site table: the ledger records site ids
/// only, the table (`crate::sites`) knows what they name.
pub trait SiteResolver {
    /// The sites among `ids` that the table knows, by id: each as the report writes it
    /// (`sites[]`) with its short form (`caller`).
    fn resolve(&self, ids: &BTreeSet<u32>) -> BTreeMap<u32, (SiteRec, Option<String>)>;
    /// Fill the call sites' health fields (`site_misses`, `sites_dropped`,
    /// `native_skipped_in_dlopen`, `native_unwind_fallbacks`, `python_version`).
    fn health(&self, health: &mut fmt::Health);
}

/// No call-site table: no site is known, its health fields stay zero.
pub struct NoSites;

impl SiteResolver for NoSites {
    fn resolve(&self, _: &BTreeSet<u32>) -> BTreeMap<u32, (SiteRec, Option<String>)> {
        BTreeMap::new()
    }
    fn health(&self, _: &mut fmt::Health) {}
}

/// The ledger's part of the report; the caller adds `schema`, `tool`, `process` and
/// `settings` (`report::build_document`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Rendered {
    pub devices: Vec<fmt::Device>,
    pub host: HostMem,
    pub health: fmt::Health,
    /// The sites the records name (those the table knows), by id.
    pub sites: Vec<SiteRec>,
}

/// A count in the report's integer type (the ledger's counts stay far below `i64::MAX`).
fn n(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

/// A site id, or None for none (0).
fn site(id: u32) -> Option<i64> {
    (id != 0).then_some(i64::from(id))
}

/// A category map of figures per category: with report-time categories (`fin`), every
/// category of `fin.names` (the six first); else the six online ones.
fn cat_values(fin: Option<&Final>, figures: Option<&[u64]>, online: &[u64; 6]) -> BTreeMap<String, i64> {
    match (fin, figures) {
        (Some(f), Some(v)) => {
            f.names.iter().enumerate().map(|(i, c)| (c.clone(), n(v.get(i).copied().unwrap_or(0)))).collect()
        }
        _ => ALL.iter().map(|c| (c.name().to_string(), n(online[c.index()]))).collect(),
    }
}

/// The name of category `i` of `fin`, else of the online six.
fn cat_name(fin: Option<&Final>, i: usize) -> &str {
    match fin {
        Some(f) => f.names.get(i).map_or("other", String::as_str),
        None => ALL.get(i).map_or("other", |c| c.name()),
    }
}

pub(super) fn kind_name(kind: MemKind) -> &'static str {
    match kind {
        MemKind::Device => "device",
        MemKind::Managed => "managed",
        MemKind::Async => "async",
        MemKind::Pitch => "pitch",
        MemKind::VmmPhysical => "vmm_physical",
    }
}

fn probe(p: &Probe, fin: Option<&Final>, cats: Option<&[u64]>) -> fmt::Probe {
    fmt::Probe {
        t_ms: n(p.t_ms),
        t_us: Some(n(p.t_us)),
        seq: Some(n(p.seq)),
        api: p.api.to_string(),
        free_bytes: p.free.map(n),
        total_bytes: p.total.map(n),
        error: i64::from(p.error),
        live_bytes: n(p.live),
        categories: cat_values(fin, cats, &p.cats),
        site: site(p.site),
    }
}

fn failure(
    f: &Failure,
    fin: Option<&Final>,
    cats: Option<&(Vec<u64>, Option<Vec<u64>>)>,
    verdict: Option<&(String, Option<String>)>,
) -> fmt::Failure {
    fmt::Failure {
        t_ms: n(f.t_ms),
        t_us: Some(n(f.t_us)),
        seq: Some(n(f.seq)),
        api: f.api.to_string(),
        bytes: n(f.bytes),
        error: i64::from(f.error),
        error_name: f.error_name.to_string(),
        live_bytes: n(f.live),
        categories: cat_values(fin, cats.map(|c| c.0.as_slice()), &f.cats),
        last_probe: f.last_probe.as_ref().map(|p| probe(p, fin, cats.and_then(|c| c.1.as_deref()))),
        site: site(f.site),
        category: verdict.map(|v| v.0.clone()),
        rule: verdict.and_then(|v| v.1.clone()),
    }
}

/// The short form of site `id`, when the table knows it.
fn caller(sites: &BTreeMap<u32, (SiteRec, Option<String>)>, id: u32) -> Option<String> {
    sites.get(&id).and_then(|(_, short)| short.clone())
}

fn allocation(
    a: &Allocation,
    verdict: Option<&(usize, Option<String>)>,
    fin: Option<&Final>,
    sites: &BTreeMap<u32, (SiteRec, Option<String>)>,
) -> fmt::Allocation {
    let (category, rule) = match verdict {
        Some((c, r)) => (cat_name(fin, *c), r.clone()),
        None => (a.category.name(), None),
    };
    fmt::Allocation {
        ptr: format!("0x{:x}", a.base),
        bytes: n(a.bytes),
        kind: kind_name(a.kind).to_string(),
        api: a.api.to_string(),
        t_ms: n(a.t_us / 1000),
        t_us: Some(n(a.t_us)),
        seq: Some(n(a.seq)),
        category: category.to_string(),
        rule,
        exported: a.facts.exported,
        captured: a.facts.captured,
        h2d_bytes: n(a.facts.h2d_bytes),
        site: site(a.facts.site),
        caller: caller(sites, a.facts.site),
    }
}

/// One device copied out of its lock, with its report-time categories when they could be
/// computed.
struct Copied {
    index: i32,
    stats: DeviceStats,
    top: Vec<Allocation>,
    hist: HistoryView,
    fin: Option<Final>,
    /// `DeviceStats::top_sites`, ranked once.
    top_sites: Vec<(u32, SiteStats)>,
}

impl Copied {
    /// Every call site the device's rendering names (0, none, left out).
    fn site_ids(&self, ids: &mut BTreeSet<u32>) {
        let s = &self.stats;
        ids.extend(s.probes.iter().map(|p| p.site));
        for f in s.failures.items() {
            ids.insert(f.site);
            ids.extend(f.last_probe.as_ref().map(|p| p.site));
        }
        for c in &s.driver_costs {
            ids.extend(c.sites.iter().copied());
        }
        ids.extend(self.top.iter().map(|a| a.facts.site));
        ids.extend(self.top_sites.iter().map(|(id, _)| *id));
        ids.remove(&0);
    }
}

fn device(d: &Copied, sites: &BTreeMap<u32, (SiteRec, Option<String>)>) -> fmt::Device {
    let (s, top, hist, fin) = (&d.stats, &d.top, &d.hist, d.fin.as_ref());
    let timeline = s
        .timeline
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let cats = match fin.and_then(|f| f.timeline.get(k).map(|v| (f, v))) {
                Some((f, v)) => f
                    .names
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.clone(), serde_json::Value::from(v.get(i).copied().unwrap_or(0))))
                    .collect(),
                None => {
                    ALL.iter().map(|c| (c.name().to_string(), serde_json::Value::from(t.cats[c.index()]))).collect()
                }
            };
            fmt::Sample { t_ms: n(t.t_ms), t_us: Some(n(t.t_us)), seq: Some(n(t.seq)), live_bytes: n(t.live), cats }
        })
        .collect();
    let events = s
        .events
        .items()
        .iter()
        .map(|e| fmt::Event {
            t_ms: n(e.t_ms),
            t_us: Some(n(e.t_us)),
            seq: Some(n(e.seq)),
            kind: e.kind.name().to_string(),
            api: e.api.to_string(),
            bytes: e.bytes,
            t0_us: e.t0_us.map(n),
            detail: e.detail.clone(),
            calls: (e.calls > 1).then_some(i64::from(e.calls)),
        })
        .collect();
    let driver_costs = s
        .driver_costs
        .iter()
        .map(|c| fmt::DriverCost {
            api: c.api.to_string(),
            library: c.library.as_deref().map(str::to_string),
            calls: n(c.calls),
            bytes: c.bytes,
            approximate: true,
            sites: c.sites.iter().filter(|&&s| s != 0).map(|&s| i64::from(s)).collect(),
        })
        .collect();
    let dev_sites = d
        .top_sites
        .iter()
        .map(|&(id, st)| {
            let (category, rule) = match fin.and_then(|f| f.sites.get(&id)) {
                Some((c, r)) => (cat_name(fin, *c), r.clone()),
                None => (ALL[st.category()].name(), None),
            };
            fmt::DevSite {
                site: i64::from(id),
                category: category.to_string(),
                rule,
                caller: caller(sites, id),
                live_bytes: n(st.live),
                peak_bytes: n(st.peak),
                allocs: n(st.allocs),
                total_allocs: n(st.total_allocs),
            }
        })
        .collect();
    let categories = match fin {
        Some(f) => f
            .names
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let v = |x: &[u64]| n(x.get(i).copied().unwrap_or(0));
                (c.clone(), fmt::CatStats { live_bytes: v(&f.live), peak_bytes: v(&f.peak), allocs: v(&f.allocs) })
            })
            .collect(),
        None => ALL
            .iter()
            .map(|c| {
                let st = &s.cats[c.index()];
                (
                    c.name().to_string(),
                    fmt::CatStats { live_bytes: n(st.live), peak_bytes: n(st.peak), allocs: n(st.allocs) },
                )
            })
            .collect(),
    };
    let (ipc, g) = (&s.ipc, &s.graphs);
    fmt::Device {
        index: i64::from(d.index),
        total_bytes: s.total_bytes.map(n),
        live_bytes: n(s.live_bytes),
        peak_bytes: n(s.peak_bytes),
        peak_t_ms: s.peak_t_ms.map(n),
        alloc_count: n(s.alloc_count),
        free_count: n(s.free_count),
        categories,
        history: fmt::History {
            records: hist.recs.len() as u64,
            frozen: hist.frozen,
            frozen_upto_seq: (hist.frozen > 0).then_some(hist.frozen_upto_seq),
            report_time_categories: fin.is_some(),
        },
        probes: s
            .probes
            .iter()
            .enumerate()
            .map(|(k, p)| probe(p, fin, fin.and_then(|f| f.probes.get(k)).map(Vec::as_slice)))
            .collect(),
        probes_total: n(s.probes.total()),
        failures: s
            .failures
            .items()
            .iter()
            .enumerate()
            .map(|(k, f)| {
                failure(
                    f,
                    fin,
                    fin.and_then(|x| x.failures.get(k)),
                    fin.and_then(|x| x.failure_verdicts.get(k)).and_then(Option::as_ref),
                )
            })
            .collect(),
        failures_total: n(s.failures.total()),
        untracked_bytes: s.untracked,
        untracked_max_bytes: s.untracked_max,
        ipc: fmt::Ipc {
            exported_count: n(ipc.exported_count),
            exported_bytes: n(ipc.exported_bytes),
            imported_count: n(ipc.imported_count),
            imported_bytes: n(ipc.imported_bytes),
            imported_live_count: n(ipc.imported_live_count),
            imported_live_bytes: n(ipc.imported_live_bytes),
        },
        graphs: fmt::Graphs {
            captures: n(g.captures),
            captures_active: n(g.captures_active),
            captured_allocs: n(g.captured_allocs),
            captured_bytes: n(g.captured_bytes),
            instantiations: n(g.instantiations),
            instantiate_measured: g.instantiate_measured,
            instantiate_bytes: g.instantiate_bytes,
            exec_destroys: n(g.exec_destroys),
            exec_destroy_measured: g.exec_destroy_measured,
            exec_destroy_bytes: g.exec_destroy_bytes,
        },
        driver_costs,
        top_allocations: top
            .iter()
            .enumerate()
            .map(|(k, a)| allocation(a, fin.and_then(|f| f.top.get(k)), fin, sites))
            .collect(),
        timeline,
        events,
        events_total: s.events.total(),
        sites: dev_sites,
        // The device's identity and NVML's reading are the writer's (`crate::gpu`), added
        // after rendering, off the ledger's locks.
        untracked_source: s.untracked.map(|_| "query".to_string()),
        untracked_t_us: s.untracked_t_us,
        ..Default::default()
    }
}

pub(super) fn render(l: &Ledger, resolver: &dyn SiteResolver) -> Rendered {
    l.settle_all();
    let copied: Vec<Copied> = l
        .shards()
        .map(|(index, shard)| {
            let ((stats, top), hist) = {
                let d = shard.lock();
                (d.snapshot(), d.history.snapshot())
            };
            // Report-time categories, outside the lock; a panic falls back to the online ones.
            let fin = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                final_categories::compute(crate::classify::ruleset(), &stats, &top, &hist, resolver)
            }));
            let fin = match fin {
                Ok(f) => {
                    shard.lock().history.set_floor(f.floor.clone());
                    Some(f)
                }
                Err(_) => {
                    l.note_warning(&format!(
                        "device {index}: report-time classification failed; categories are the live ledger's (tags, exports, captures only)"
                    ));
                    None
                }
            };
            let top_sites = stats.top_sites();
            Copied { index, stats, top, hist, fin, top_sites }
        })
        .collect();
    let mut ids = BTreeSet::new();
    for d in &copied {
        d.site_ids(&mut ids);
    }
    let sites = resolver.resolve(&ids);
    let devices = copied.iter().map(|d| device(d, &sites)).collect();
    // Devices whose history of large allocations was frozen in part (history.rs).
    let history_frozen = copied
        .iter()
        .filter(|d| d.hist.frozen > 0)
        .map(|d| Frozen { device: i64::from(d.index), records: d.hist.frozen, upto_seq: d.hist.frozen_upto_seq })
        .collect();
    let host = {
        let h = l.host.lock();
        HostMem {
            pinned_live_bytes: n(h.pinned.live_bytes),
            pinned_peak_bytes: n(h.pinned.peak_bytes),
            pinned_alloc_count: n(h.pinned.added),
            pinned_free_count: n(h.pinned.removed),
            registered_live_bytes: n(h.registered.live_bytes),
            registered_peak_bytes: n(h.registered.peak_bytes),
            registered_count: n(h.registered.added),
            unregistered_count: n(h.registered.removed),
            vmm_live_bytes: n(h.vmm.live_bytes),
            vmm_peak_bytes: n(h.vmm.peak_bytes),
            vmm_create_count: n(h.vmm.added),
            vmm_release_count: n(h.vmm.removed),
        }
    };
    let h = &l.health;
    // One lock at a time: copy each list out.
    let unwrapped_symbols = h.unwrapped.lock().clone();
    let warnings = h.warnings.lock().clone();
    let mut health = fmt::Health {
        lost_events: n(h.lost_events.load(Ordering::Relaxed)),
        unknown_frees: n(h.unknown_frees.load(Ordering::Relaxed)),
        unwrapped_symbols,
        warnings,
        warnings_dropped: h.warnings_dropped.load(Ordering::Relaxed),
        no_context_calls: h.no_context_calls.load(Ordering::Relaxed),
        history_frozen,
        // Counted under the devices' locks (`DeviceStats::site_repeats`).
        site_repeats: copied.iter().map(|d| d.stats.site_repeats).sum(),
        ..fmt::Health::default()
    };
    resolver.health(&mut health);
    Rendered { devices, host, health, sites: sites.into_values().map(|(rec, _)| rec).collect() }
}
