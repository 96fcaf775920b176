//! Rendering of the `devices`, `host` and `health` parts of the report (docs/schema.md).
//! Each device is copied out under its lock and rendered after the lock is released.

use std::sync::atomic::Ordering;

use serde_json::{json, Map, Value};

use super::device::{Allocation, DeviceStats, Failure, Probe};
use super::final_categories::{self, Final};
use super::history::HistoryView;
use super::{Ledger, MemKind};
use crate::classify::ALL;

/// A category map with all six categories: name to `value(index)`.
fn categories(value: impl Fn(usize) -> Value) -> Value {
    Value::Object(ALL.iter().map(|c| (c.name().to_string(), value(c.index()))).collect())
}

/// A category map of figures per category: with report-time categories (`fin`), every
/// category of `fin.names` (the six first); else the six online ones.
fn cat_values(fin: Option<&Final>, figures: Option<&[u64]>, online: &[u64; 6]) -> Value {
    match (fin, figures) {
        (Some(f), Some(v)) => Value::Object(
            f.names.iter().enumerate().map(|(i, n)| (n.clone(), json!(v.get(i).copied().unwrap_or(0)))).collect(),
        ),
        _ => categories(|i| json!(online[i])),
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

/// A site id, or null for none (0).
fn site(id: u32) -> Value {
    if id == 0 {
        Value::Null
    } else {
        json!(id)
    }
}

fn probe(p: &Probe, fin: Option<&Final>, cats: Option<&[u64]>) -> Value {
    json!({
        "t_ms": p.t_ms,
        "t_us": p.t_us,
        "seq": p.seq,
        "api": p.api,
        "free_bytes": p.free,
        "total_bytes": p.total,
        "error": p.error,
        "live_bytes": p.live,
        "categories": cat_values(fin, cats, &p.cats),
        "site": site(p.site),
    })
}

fn failure(f: &Failure, fin: Option<&Final>, cats: Option<&(Vec<u64>, Option<Vec<u64>>)>) -> Value {
    json!({
        "t_ms": f.t_ms,
        "t_us": f.t_us,
        "seq": f.seq,
        "api": f.api,
        "bytes": f.bytes,
        "error": f.error,
        "error_name": f.error_name,
        "live_bytes": f.live,
        "categories": cat_values(fin, cats.map(|c| c.0.as_slice()), &f.cats),
        "last_probe": f.last_probe.as_ref().map(|p| probe(p, fin, cats.and_then(|c| c.1.as_deref()))),
        "site": site(f.site),
    })
}

fn allocation(a: &Allocation, verdict: Option<&(usize, Option<String>)>, fin: Option<&Final>) -> Value {
    let (category, rule) = match verdict {
        Some((c, r)) => (cat_name(fin, *c), r.as_deref()),
        None => (a.category.name(), None),
    };
    json!({
        "ptr": format!("0x{:x}", a.base),
        "bytes": a.bytes,
        "kind": kind_name(a.kind),
        "api": a.api,
        "t_ms": a.t_us / 1000,
        "t_us": a.t_us,
        "seq": a.seq,
        "category": category,
        "rule": rule,
        "exported": a.facts.exported,
        "captured": a.facts.captured,
        "h2d_bytes": a.facts.h2d_bytes,
        "site": site(a.facts.site),
        // The report fills in the short form of the site (crate::sites::decorate).
        "caller": null,
    })
}

fn device(index: i32, s: &DeviceStats, top: &[Allocation], hist: &HistoryView, fin: Option<&Final>) -> Value {
    let timeline: Vec<Value> = s
        .timeline
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let mut m = Map::new();
            m.insert("t_ms".into(), json!(t.t_ms));
            m.insert("t_us".into(), json!(t.t_us));
            m.insert("seq".into(), json!(t.seq));
            m.insert("live_bytes".into(), json!(t.live));
            match fin.and_then(|f| f.timeline.get(k).map(|v| (f, v))) {
                Some((f, v)) => {
                    for (i, n) in f.names.iter().enumerate() {
                        m.insert(n.clone(), json!(v.get(i).copied().unwrap_or(0)));
                    }
                }
                None => {
                    for c in ALL {
                        m.insert(c.name().into(), json!(t.cats[c.index()]));
                    }
                }
            }
            Value::Object(m)
        })
        .collect();
    let events: Vec<Value> = s
        .events
        .items()
        .iter()
        .map(|e| {
            json!({"t_ms": e.t_ms, "t_us": e.t_us, "seq": e.seq, "kind": e.kind.name(), "api": e.api,
                   "bytes": e.bytes, "t0_us": e.t0_us, "detail": e.detail})
        })
        .collect();
    let driver_costs: Vec<Value> = s
        .driver_costs
        .iter()
        .map(|c| {
            let sites: Vec<u32> = c.sites.iter().copied().filter(|&s| s != 0).collect();
            json!({"api": c.api, "calls": c.calls, "bytes": c.bytes, "approximate": true, "sites": sites})
        })
        .collect();
    let sites: Vec<Value> = s
        .top_sites()
        .into_iter()
        .map(|(id, st)| {
            let (category, rule) = match fin.and_then(|f| f.sites.get(&id)) {
                Some((c, r)) => (cat_name(fin, *c), r.as_deref()),
                None => (ALL[st.category()].name(), None),
            };
            json!({
                "site": id,
                "category": category,
                "rule": rule,
                "live_bytes": st.live,
                "peak_bytes": st.peak,
                "allocs": st.allocs,
                "total_allocs": st.total_allocs,
            })
        })
        .collect();
    let (ipc, g) = (&s.ipc, &s.graphs);
    json!({
        "index": index,
        "total_bytes": s.total_bytes,
        "live_bytes": s.live_bytes,
        "peak_bytes": s.peak_bytes,
        "peak_t_ms": s.peak_t_ms,
        "alloc_count": s.alloc_count,
        "free_count": s.free_count,
        "categories": match fin {
            Some(f) => Value::Object(f.names.iter().enumerate().map(|(i, n)| {
                let v = |x: &[u64]| x.get(i).copied().unwrap_or(0);
                (n.clone(), json!({"live_bytes": v(&f.live), "peak_bytes": v(&f.peak), "allocs": v(&f.allocs)}))
            }).collect()),
            None => categories(|i| {
                let c = &s.cats[i];
                json!({"live_bytes": c.live, "peak_bytes": c.peak, "allocs": c.allocs})
            }),
        },
        "history": {
            "records": hist.recs.len(),
            "frozen": hist.frozen,
            "frozen_upto_seq": (hist.frozen > 0).then_some(hist.frozen_upto_seq),
            "report_time_categories": fin.is_some(),
        },
        "probes": s.probes.iter().enumerate().map(|(k, p)| probe(p, fin, fin.and_then(|f| f.probes.get(k)).map(Vec::as_slice))).collect::<Vec<_>>(),
        "probes_total": s.probes.total(),
        "failures": s.failures.items().iter().enumerate().map(|(k, f)| failure(f, fin, fin.and_then(|x| x.failures.get(k)))).collect::<Vec<_>>(),
        "failures_total": s.failures.total(),
        "untracked_bytes": s.untracked,
        "untracked_max_bytes": s.untracked_max,
        "ipc": {
            "exported_count": ipc.exported_count,
            "exported_bytes": ipc.exported_bytes,
            "imported_count": ipc.imported_count,
            "imported_bytes": ipc.imported_bytes,
            "imported_live_count": ipc.imported_live_count,
            "imported_live_bytes": ipc.imported_live_bytes,
        },
        "graphs": {
            "captures": g.captures,
            "captures_active": g.captures_active,
            "captured_allocs": g.captured_allocs,
            "captured_bytes": g.captured_bytes,
            "instantiations": g.instantiations,
            "instantiate_measured": g.instantiate_measured,
            "instantiate_bytes": g.instantiate_bytes,
        },
        "driver_costs": driver_costs,
        "top_allocations": top.iter().enumerate().map(|(k, a)| allocation(a, fin.and_then(|f| f.top.get(k)), fin)).collect::<Vec<_>>(),
        "sites": sites,
        "timeline": timeline,
        "events": events,
        "events_total": s.events.total(),
    })
}

pub(super) fn render(l: &Ledger) -> Value {
    l.settle_all();
    // Devices whose history of large allocations was frozen in part (history.rs).
    let mut frozen = Vec::new();
    let devices: Vec<Value> = l
        .shards()
        .map(|(index, shard)| {
            let ((stats, top), hist) = {
                let d = shard.lock();
                (d.snapshot(), d.history.snapshot())
            };
            // Report-time categories, outside the lock; a panic falls back to the online ones.
            let fin = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                final_categories::compute(crate::classify::ruleset(), &stats, &top, &hist)
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
            if hist.frozen > 0 {
                frozen.push(json!({"device": index, "records": hist.frozen, "upto_seq": hist.frozen_upto_seq}));
            }
            device(index, &stats, &top, &hist, fin.as_ref())
        })
        .collect();
    let host = {
        let h = l.host.lock();
        json!({
            "pinned_live_bytes": h.pinned.live_bytes,
            "pinned_peak_bytes": h.pinned.peak_bytes,
            "pinned_alloc_count": h.pinned.added,
            "pinned_free_count": h.pinned.removed,
            "registered_live_bytes": h.registered.live_bytes,
            "registered_peak_bytes": h.registered.peak_bytes,
            "registered_count": h.registered.added,
            "unregistered_count": h.registered.removed,
            "vmm_live_bytes": h.vmm.live_bytes,
            "vmm_peak_bytes": h.vmm.peak_bytes,
            "vmm_create_count": h.vmm.added,
            "vmm_release_count": h.vmm.removed,
        })
    };
    let h = &l.health;
    // One lock at a time: copy each list out.
    let unwrapped = h.unwrapped.lock().clone();
    let warnings = h.warnings.lock().clone();
    let health = json!({
        "lost_events": h.lost_events.load(Ordering::Relaxed),
        "unknown_frees": h.unknown_frees.load(Ordering::Relaxed),
        "unwrapped_symbols": unwrapped,
        "warnings": warnings,
        "warnings_dropped": h.warnings_dropped.load(Ordering::Relaxed),
        "no_context_calls": h.no_context_calls.load(Ordering::Relaxed),
        "history_frozen": frozen,
    });
    json!({"devices": devices, "host": host, "health": health})
}
