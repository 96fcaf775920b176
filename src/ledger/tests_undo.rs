//! Ledger tests for changes undone after their real call failed (frees, VMM releases and
//! unmaps, pinned frees), VMM reference counts, and pool places.

use serde_json::Value;

use super::*;

fn live(l: &Ledger, dev: i32) -> u64 {
    l.devices[dev as usize].get().map_or(0, |m| m.lock().stats.live_bytes)
}

fn device(l: &Ledger, dev: i64) -> Value {
    let j = l.to_json();
    j["devices"].as_array().unwrap().iter().find(|d| d["index"] == dev).cloned().unwrap()
}

/// Everything the report says about a device except times and sequence numbers.
fn without_times(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, _| !matches!(k.as_str(), "t_ms" | "seq" | "peak_t_ms"));
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

#[test]
fn a_failed_free_restores_the_record_verbatim() {
    let l = Ledger::new();
    let facts = Facts { h2d_bytes: 77, site: 7, ..Facts::default() };
    l.alloc(0, 0x10000, 100, MemKind::Managed, "cudaMallocManaged", facts);
    l.alloc(0, 0x20000, 50, MemKind::Device, "cudaMalloc", Facts::default());
    assert!(l.mark_exported(0x20010));
    let before = without_times(device(&l, 0));
    // A capture starts: the failed free must not re-enter the allocations as captured.
    l.capture_begin(0, 9, "cudaStreamBeginCapture");
    let before_capture = without_times(device(&l, 0));
    for ptr in [0x10000, 0x20000] {
        let t = l.free_take(ptr).expect("known");
        assert_eq!((t.dev(), live(&l, 0)), (0, 150 - t.bytes()));
        assert!(l.restore(t));
    }
    assert_eq!(without_times(device(&l, 0)), before_capture, "nothing changed but the capture");
    l.capture_end(0, 9, "cudaStreamEndCapture");
    let mut after = without_times(device(&l, 0));
    // The capture left its counters and events; everything else is as before.
    for k in ["graphs", "events", "events_total"] {
        after[k] = before[k].clone();
    }
    assert_eq!(after, before);
    let d = device(&l, 0);
    assert_eq!((d["alloc_count"].as_u64(), d["free_count"].as_u64()), (Some(2), Some(0)));
    let lives: Vec<u64> = d["timeline"].as_array().unwrap().iter().map(|s| s["live_bytes"].as_u64().unwrap()).collect();
    assert_eq!(lives, [100, 150, 150], "allocations and the export; no dip for the failed frees");
    // Exporting again counts nothing twice.
    assert!(l.mark_exported(0x20000));
    assert_eq!(device(&l, 0)["ipc"]["exported_count"], 1);
}

#[test]
fn a_restore_never_overwrites_a_newer_record() {
    let l = Ledger::new();
    l.alloc(1, 0x1000, 64, MemKind::Device, "cudaMalloc", Facts::default());
    let t = l.free_take(0x1000).unwrap();
    // The address was handed out again meanwhile (the free did happen after all).
    l.alloc(1, 0x1000, 32, MemKind::Async, "cudaMallocAsync", Facts::default());
    assert!(!l.restore(t));
    let d = device(&l, 1);
    assert_eq!((d["live_bytes"].as_u64(), d["free_count"].as_u64()), (Some(32), Some(1)));
    assert_eq!(d["top_allocations"][0]["api"], "cudaMallocAsync");
    assert!(l.health.warnings.lock().iter().any(|w| w.contains("could not be undone")));
    assert!(l.free_take(0).is_none());
    assert!(l.free_take(0x9999).is_none());
    assert_eq!(l.health.unknown_frees.load(Ordering::Relaxed), 1, "NULL is not an unknown free");
}

#[test]
fn vmm_memory_lives_until_the_last_reference_and_mapping() {
    let l = Ledger::new();
    let (h, va) = (0xa11, 0x6000_0000_0000_u64);
    l.vmm_create(0, h, 1 << 21, "cuMemCreate");
    l.vmm_map(va, 1 << 21, 0, h);
    // vectorAddMMAP: released right after mapping.
    assert!(l.vmm_release(h));
    assert_eq!(live(&l, 0), 1 << 21, "still mapped");
    assert_eq!(l.lookup(va + 5), Some((0, va, 1 << 21)), "still resolvable");
    assert!(!l.vmm_release(h), "no reference left");
    // NCCL's free path: retain, release, unmap, release.
    assert!(l.vmm_retain(h));
    assert!(l.vmm_release(h));
    assert_eq!(live(&l, 0), 1 << 21);
    assert!(l.vmm_retain(h));
    l.vmm_unmap(va, 1 << 21);
    assert_eq!(live(&l, 0), 1 << 21, "unmapped, one reference left");
    assert!(l.vmm_release(h));
    assert_eq!(live(&l, 0), 0);
    let d = device(&l, 0);
    assert_eq!((d["alloc_count"].as_u64(), d["free_count"].as_u64()), (Some(1), Some(1)));
    assert!(!l.vmm_retain(h), "gone");
}

#[test]
fn failed_vmm_release_and_unmap_are_undone() {
    let l = Ledger::new();
    let (h, va) = (0xa12, 0x6000_0000_0000_u64);
    l.vmm_create(2, h, 1 << 21, "cuMemCreate");
    l.vmm_map(va, 1 << 20, 0, h);
    l.vmm_map(va + (1 << 20), 1 << 20, 1 << 20, h);
    assert!(l.vmm_export(h));
    let before = without_times(device(&l, 2));
    let u = l.vmm_release_begin(h).unwrap();
    assert_eq!(live(&l, 2), 1 << 21);
    l.vmm_undo(u);
    let u = l.vmm_unmap_begin(va, 1 << 21);
    assert_eq!(l.lookup(va), None);
    l.vmm_undo(u);
    assert_eq!(l.lookup(va + (1 << 20)), Some((2, va + (1 << 20), 1 << 20)));
    assert_eq!(without_times(device(&l, 2)), before);
    // Undo after the memory went: the record comes back as it was (exported, ipc).
    assert!(l.vmm_release(h));
    let u = l.vmm_unmap_begin(va, 1 << 21);
    assert_eq!(live(&l, 2), 0);
    l.vmm_undo(u);
    let d = device(&l, 2);
    assert_eq!((d["live_bytes"].as_u64(), d["free_count"].as_u64()), (Some(1 << 21), Some(0)));
    assert_eq!(d["categories"]["ipc"]["live_bytes"].as_u64(), Some(1 << 21));
    l.vmm_unmap(va, 1 << 21);
    assert_eq!(live(&l, 2), 0, "the release before still counts");
    assert!(l.health.warnings.lock().is_empty(), "{:?}", l.health.warnings.lock());
}

#[test]
fn failed_pinned_free_is_undone() {
    let l = Ledger::new();
    l.host_alloc(0x5000, 4096, "cudaMallocHost");
    let bytes = l.host_take(0x5000).unwrap();
    l.host_restore(0x5000, bytes);
    let h = &l.to_json()["host"];
    assert_eq!((h["pinned_live_bytes"].as_u64(), h["pinned_free_count"].as_u64()), (Some(4096), Some(0)));
    assert!(l.host_take(0x6000).is_none());
    assert_eq!(l.health.unknown_frees.load(Ordering::Relaxed), 1);
}

#[test]
fn pool_places() {
    let l = Ledger::new();
    assert_eq!(l.pool_of(0xb00), None);
    l.pool_place(0xb00, PoolPlace::Device(3));
    l.pool_place(0xb01, PoolPlace::Host);
    assert_eq!((l.pool_of(0xb00), l.pool_of(0xb01)), (Some(PoolPlace::Device(3)), Some(PoolPlace::Host)));
    l.pool_destroyed(0xb00);
    assert_eq!(l.pool_of(0xb00), None);
}
