//! Rendering of the `devices`, `host` and `health` parts of the report (docs/schema.md).
//! Each device is copied out under its lock and rendered after the lock is released.

use std::sync::atomic::Ordering;

use serde_json::{json, Map, Value};

use super::device::{Alloc, DeviceStats, Failure, Probe};
use super::{Ledger, MemKind};
use crate::classify::ALL;

/// A category map with all six categories: name to `value(index)`.
fn categories(value: impl Fn(usize) -> Value) -> Value {
    Value::Object(ALL.iter().map(|c| (c.name().to_string(), value(c.index()))).collect())
}

fn kind_name(kind: MemKind) -> &'static str {
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

fn probe(p: &Probe) -> Value {
    json!({
        "t_ms": p.t_ms,
        "t_us": p.t_us,
        "seq": p.seq,
        "api": p.api,
        "free_bytes": p.free,
        "total_bytes": p.total,
        "error": p.error,
        "live_bytes": p.live,
        "categories": categories(|i| json!(p.cats[i])),
        "site": site(p.site),
    })
}

fn failure(f: &Failure) -> Value {
    json!({
        "t_ms": f.t_ms,
        "t_us": f.t_us,
        "seq": f.seq,
        "api": f.api,
        "bytes": f.bytes,
        "error": f.error,
        "error_name": f.error_name,
        "live_bytes": f.live,
        "categories": categories(|i| json!(f.cats[i])),
        "last_probe": f.last_probe.as_ref().map(probe),
        "site": site(f.site),
    })
}

fn allocation(a: &Alloc) -> Value {
    json!({
        "ptr": format!("0x{:x}", a.base),
        "bytes": a.bytes,
        "kind": kind_name(a.kind),
        "api": a.api,
        "t_ms": a.t_us / 1000,
        "t_us": a.t_us,
        "seq": a.seq,
        "category": a.category.name(),
        "exported": a.facts.exported,
        "captured": a.facts.captured,
        "h2d_bytes": a.facts.h2d_bytes,
        "site": site(a.facts.site),
        // The report fills in the short form of the site (crate::sites::decorate).
        "caller": null,
    })
}

fn device(index: i32, s: &DeviceStats, top: &[Alloc]) -> Value {
    let timeline: Vec<Value> = s
        .timeline
        .iter()
        .map(|t| {
            let mut m = Map::new();
            m.insert("t_ms".into(), json!(t.t_ms));
            m.insert("t_us".into(), json!(t.t_us));
            m.insert("seq".into(), json!(t.seq));
            m.insert("live_bytes".into(), json!(t.live));
            for c in ALL {
                m.insert(c.name().into(), json!(t.cats[c.index()]));
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
            json!({
                "site": id,
                "category": ALL[st.category()].name(),
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
        "categories": categories(|i| {
            let c = &s.cats[i];
            json!({"live_bytes": c.live, "peak_bytes": c.peak, "allocs": c.allocs})
        }),
        "probes": s.probes.iter().map(probe).collect::<Vec<_>>(),
        "probes_total": s.probes.total(),
        "failures": s.failures.items().iter().map(failure).collect::<Vec<_>>(),
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
        "top_allocations": top.iter().map(allocation).collect::<Vec<_>>(),
        "sites": sites,
        "timeline": timeline,
        "events": events,
        "events_total": s.events.total(),
    })
}

pub(super) fn render(l: &Ledger) -> Value {
    l.settle_all();
    let devices: Vec<Value> = l
        .shards()
        .map(|(index, shard)| {
            let (stats, top) = shard.lock().snapshot();
            device(index, &stats, &top)
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
    });
    json!({"devices": devices, "host": host, "health": health})
}
