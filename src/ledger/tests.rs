//! Ledger tests: exact accounting against a model, range lookups, reclassification,
//! VMM, bounded lists, IPC, concurrency, JSON shape, fork reset.
//!
//! Longer than the rooms it tests: every test here drives the whole ledger through its public
//! calls and checks it against the one reference model below (`Model`), which they share;
//! tests of a single room's internals live beside it (`tests_order`, `tests_undo`).

use std::collections::HashMap;

use serde_json::Value;

use super::device::DeviceStats;
use super::*;
use crate::classify::{Category, ALL};

const OTHER: usize = 5;
const IPC: usize = 2;
const GRAPHS: usize = 3;

fn stats(l: &Ledger, dev: i32) -> DeviceStats {
    l.settle_all();
    l.devices[dev as usize].get().expect("device shard exists").lock().snapshot().0
}

fn alloc(l: &Ledger, dev: i32, ptr: u64, bytes: u64) {
    l.alloc(dev, ptr, bytes, MemKind::Device, "cudaMalloc", Facts::default());
}

fn device_json(l: &Ledger, dev: i64) -> Value {
    let j = l.to_json();
    j["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["index"] == dev)
        .cloned()
        .unwrap_or_else(|| panic!("device {dev} in {j}"))
}

fn warnings(l: &Ledger) -> Vec<String> {
    l.health.warnings.lock().clone()
}

/// Deterministic xorshift64* generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The simple model of one device: what the ledger must agree with exactly.
#[derive(Default)]
struct Model {
    live: u64,
    peak: u64,
    cat_live: [u64; 6],
    cat_peak: [u64; 6],
    cat_allocs: [u64; 6],
    allocs: u64,
    frees: u64,
}

impl Model {
    fn add(&mut self, cat: usize, bytes: u64) {
        self.live += bytes;
        self.peak = self.peak.max(self.live);
        self.cat_live[cat] += bytes;
        self.cat_allocs[cat] += 1;
        self.cat_peak[cat] = self.cat_peak[cat].max(self.cat_live[cat]);
    }
    fn sub(&mut self, cat: usize, bytes: u64) {
        self.live -= bytes;
        self.cat_live[cat] -= bytes;
        self.cat_allocs[cat] -= 1;
    }
    fn check(&self, s: &DeviceStats, step: usize) {
        assert_eq!(s.live_bytes, self.live, "live at step {step}");
        assert_eq!(s.peak_bytes, self.peak, "peak at step {step}");
        assert_eq!(s.alloc_count, self.allocs, "alloc_count at step {step}");
        assert_eq!(s.free_count, self.frees, "free_count at step {step}");
        for i in 0..6 {
            assert_eq!(s.cats[i].live, self.cat_live[i], "cat {i} live at step {step}");
            assert_eq!(s.cats[i].peak, self.cat_peak[i], "cat {i} peak at step {step}");
            assert_eq!(s.cats[i].allocs, self.cat_allocs[i], "cat {i} allocs at step {step}");
        }
    }
}

#[test]
fn random_sequences_give_exact_totals_and_peaks() {
    let l = Ledger::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut models: Vec<Model> = (0..3).map(|_| Model::default()).collect();
    // slot -> (device, bytes, category index)
    let mut live: HashMap<u64, (i32, u64, usize)> = HashMap::new();
    let slot_base = |slot: u64| 0x7f00_0000_0000 + slot * 0x10_0000;
    for step in 0..20_000 {
        let slot = rng.below(300);
        let base = slot_base(slot);
        match rng.below(10) {
            0..=4 => {
                let dev = rng.below(3) as i32;
                let bytes = 1 + rng.below(0x10_0000 - 1);
                if let Some((odev, obytes, ocat)) = live.remove(&slot) {
                    // The driver reused an address we missed a free for.
                    if odev == dev {
                        models[odev as usize].sub(ocat, obytes);
                        models[odev as usize].frees += 1;
                    } else {
                        // Other device: free it properly first, as a program would.
                        assert_eq!(l.free(base, "cudaFree"), Freed::Known { dev: odev, bytes: obytes });
                        models[odev as usize].sub(ocat, obytes);
                        models[odev as usize].frees += 1;
                    }
                }
                alloc(&l, dev, base, bytes);
                models[dev as usize].add(OTHER, bytes);
                models[dev as usize].allocs += 1;
                live.insert(slot, (dev, bytes, OTHER));
            }
            5..=8 => {
                let got = l.free(base, "cudaFree");
                match live.remove(&slot) {
                    Some((dev, bytes, cat)) => {
                        assert_eq!(got, Freed::Known { dev, bytes }, "step {step}");
                        models[dev as usize].sub(cat, bytes);
                        models[dev as usize].frees += 1;
                    }
                    None => assert_eq!(got, Freed::Unknown, "step {step}"),
                }
            }
            _ => {
                // Export through an interior pointer.
                let inside = base + rng.below(0x10_0000);
                let found = l.mark_exported(inside);
                match live.get_mut(&slot) {
                    Some((dev, bytes, cat)) if inside < base + *bytes => {
                        assert!(found, "step {step}");
                        if *cat != IPC {
                            let m = &mut models[*dev as usize];
                            m.sub(*cat, *bytes);
                            m.add(IPC, *bytes);
                            *cat = IPC;
                        }
                    }
                    _ => assert!(!found, "step {step}: 0x{inside:x} is in no allocation"),
                }
            }
        }
        if step % 499 == 0 {
            for (dev, m) in models.iter().enumerate() {
                if l.devices[dev].get().is_some() {
                    m.check(&stats(&l, dev as i32), step);
                }
            }
        }
    }
    for (dev, m) in models.iter().enumerate() {
        m.check(&stats(&l, dev as i32), usize::MAX);
        let d = device_json(&l, dev as i64);
        assert_eq!(d["live_bytes"], m.live);
        let sum: u64 = ALL.iter().map(|c| d["categories"][c.name()]["live_bytes"].as_u64().unwrap()).sum();
        assert_eq!(sum, m.live, "categories sum to live_bytes");
    }
}

#[test]
fn range_lookups() {
    let l = Ledger::new();
    alloc(&l, 0, 0x1000, 0x1000);
    alloc(&l, 0, 0x2000, 0x100);
    alloc(&l, 1, 0x9000, 0x10);
    alloc(&l, 0, 0x5000, 0);
    assert_eq!(l.lookup(0x1000), Some((0, 0x1000, 0x1000)), "at base");
    assert_eq!(l.lookup(0x1fff), Some((0, 0x1000, 0x1000)), "last byte");
    assert_eq!(l.lookup(0x2000), Some((0, 0x2000, 0x100)), "end of one is the next base");
    assert_eq!(l.lookup(0x2100), None, "one past the end");
    assert_eq!(l.lookup(0x3000), None, "between allocations");
    assert_eq!(l.lookup(0xfff), None, "before the first");
    assert_eq!(l.lookup(0x5000), None, "an empty allocation contains nothing");
    assert_eq!(l.lookup(0x900f), Some((1, 0x9000, 0x10)), "other device");
    assert_eq!(l.lookup(u64::MAX), None);
    assert_eq!(l.free(0x1800, "cudaFree"), Freed::Unknown, "free needs the exact base");
    assert_eq!(l.health.unknown_frees.load(Ordering::Relaxed), 1);
    assert_eq!(l.free(0, "cudaFree"), Freed::Unknown);
    assert_eq!(l.health.unknown_frees.load(Ordering::Relaxed), 1, "free(NULL) is not an unknown free");
}

#[test]
fn export_reclassifies_and_keeps_peaks_right() {
    let l = Ledger::new();
    alloc(&l, 0, 0x10000, 100);
    alloc(&l, 0, 0x20000, 50);
    assert!(l.mark_exported(0x10000 + 99));
    assert!(l.mark_exported(0x10000), "exporting again still finds it");
    let s = stats(&l, 0);
    assert_eq!((s.cats[IPC].live, s.cats[IPC].peak, s.cats[IPC].allocs), (100, 100, 1));
    assert_eq!((s.cats[OTHER].live, s.cats[OTHER].peak, s.cats[OTHER].allocs), (50, 150, 1));
    assert_eq!((s.live_bytes, s.peak_bytes), (150, 150), "moving bytes keeps the device total");
    assert_eq!((s.ipc.exported_count, s.ipc.exported_bytes), (1, 100), "counted once");
    assert_eq!(l.free(0x10000, "cudaFree"), Freed::Known { dev: 0, bytes: 100 });
    let s = stats(&l, 0);
    assert_eq!((s.cats[IPC].live, s.cats[IPC].peak, s.cats[IPC].allocs), (0, 100, 0));
    assert_eq!((s.ipc.exported_count, s.ipc.exported_bytes), (1, 100), "cumulative");
    assert!(!l.mark_exported(0x10000), "freed");
    let d = device_json(&l, 0);
    let last = d["timeline"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["live_bytes"].as_u64(), last["ipc"].as_u64(), last["other"].as_u64()),
        (Some(50), Some(0), Some(50))
    );
    let kinds: Vec<&str> = d["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ipc_export"]);
}

#[test]
fn h2d_bytes_accumulate_on_the_containing_allocation() {
    let l = Ledger::new();
    alloc(&l, 0, 0x10000, 1000);
    l.add_h2d(0x10000 + 10, 300);
    l.add_h2d(0x10000 + 500, 200);
    l.add_h2d(0x90000, 7);
    let d = device_json(&l, 0);
    assert_eq!(d["top_allocations"][0]["h2d_bytes"], 500);
    assert_eq!(d["top_allocations"][0]["category"], "other");
}

#[test]
fn h2d_bytes_leave_with_their_record() {
    let l = Ledger::new();
    alloc(&l, 0, 0x10000, 1000);
    l.add_h2d(0x10000, 600);
    // Freed, then the base handed out again: the new record starts with none.
    assert_eq!(l.free(0x10000, "cudaFree"), Freed::Known { dev: 0, bytes: 1000 });
    alloc(&l, 0, 0x10000, 1000);
    assert_eq!(device_json(&l, 0)["top_allocations"][0]["h2d_bytes"], 0);
    // A missed free (the same base allocated again): neither.
    l.add_h2d(0x10000, 900);
    alloc(&l, 0, 0x10000, 2000);
    let d = device_json(&l, 0);
    assert_eq!(
        (d["top_allocations"][0]["bytes"].as_u64(), d["top_allocations"][0]["h2d_bytes"].as_u64()),
        (Some(2000), Some(0))
    );
}

#[test]
fn a_size_beyond_the_record_counts_alike_both_ways() {
    let l = Ledger::new();
    alloc(&l, 0, 0x10000, 1 << 50);
    assert_eq!(stats(&l, 0).live_bytes, (1 << 48) - 1);
    assert_eq!(l.free(0x10000, "cudaFree"), Freed::Known { dev: 0, bytes: (1 << 48) - 1 });
    assert_eq!((stats(&l, 0).live_bytes, stats(&l, 0).peak_bytes), (0, (1 << 48) - 1));
}

#[test]
fn the_packed_record_keeps_every_field() {
    // 32 bytes: a million live allocations within 64 bytes each with the table's slack.
    assert_eq!(std::mem::size_of::<device::Alloc>(), 32);
    let l = Ledger::new();
    let tag = crate::classify::tags::intern("kv_pool").unwrap();
    let kinds = [MemKind::Device, MemKind::Managed, MemKind::Async, MemKind::Pitch];
    let apis = ["cudaMalloc", "cuMemAlloc_v2", "cudaMallocAsync", "cudaMallocPitch"];
    for (i, (&kind, &api)) in kinds.iter().zip(&apis).enumerate() {
        let facts = Facts { site: 4000 + i as u32, tag: (i % 2 == 1).then_some(tag), ..Facts::default() };
        l.alloc(0, (i as u64 + 1) << 42, (1 << 40) + i as u64, kind, api, facts);
    }
    l.capture_begin(0, 5, "cudaStreamBeginCapture");
    l.alloc(0, 0x10, 7, MemKind::Device, "cudaMalloc", Facts::default());
    l.vmm_create(0, 0x99, 1 << 30, "cuMemCreate");
    assert!(l.mark_exported(1 << 42));
    let d = device_json(&l, 0);
    let top = d["top_allocations"].as_array().unwrap();
    let get = |ptr: &str| top.iter().find(|a| a["ptr"] == ptr).unwrap_or_else(|| panic!("{ptr} in {top:?}"));
    for (i, (&kind, &api)) in kinds.iter().zip(&apis).enumerate() {
        let a = get(&format!("0x{:x}", (i as u64 + 1) << 42));
        assert_eq!(a["bytes"].as_u64(), Some((1 << 40) + i as u64));
        assert_eq!(a["api"], api);
        assert_eq!(a["kind"], json::kind_name(kind));
        assert_eq!(a["seq"].as_u64(), Some(i as u64 + 1));
        assert_eq!(a["site"].as_u64(), Some(4000 + i as u64));
        let category = match (i, i % 2) {
            (0, _) => "ipc",
            (_, 1) => "kv_pool",
            _ => "other",
        };
        assert_eq!(
            (a["category"].as_str(), a["exported"].as_bool(), a["captured"].as_bool()),
            (Some(category), Some(i == 0), Some(false)),
            "{a}"
        );
    }
    let captured = get("0x10");
    assert_eq!((captured["captured"].as_bool(), captured["category"].as_str()), (Some(true), Some("graphs")));
    let handle = get("0x99");
    assert_eq!(
        (handle["kind"].as_str(), handle["bytes"].as_u64()),
        (Some(json::kind_name(MemKind::VmmPhysical)), Some(1 << 30))
    );
}

#[test]
fn allocations_during_capture_are_flagged() {
    let l = Ledger::new();
    l.capture_begin(0, 0xabc, "cudaStreamBeginCapture");
    assert!(l.capturing(0));
    assert!(!l.capturing(1));
    assert!(!l.capturing(-3) && !l.capturing(1000), "out of range is simply false");
    alloc(&l, 0, 0x1000, 64);
    alloc(&l, 1, 0x2000, 32);
    // The capture ends while device 1 is current: found by stream on device 0.
    l.capture_end(1, 0xabc, "cudaStreamEndCapture");
    assert!(!l.capturing(0));
    alloc(&l, 0, 0x3000, 16);
    let s0 = stats(&l, 0);
    assert_eq!((s0.cats[GRAPHS].live, s0.cats[OTHER].live), (64, 16));
    assert_eq!((s0.graphs.captured_allocs, s0.graphs.captured_bytes), (1, 64));
    assert_eq!((s0.graphs.captures, s0.graphs.captures_active), (1, 0));
    assert_eq!(stats(&l, 1).cats[OTHER].live, 32);
    assert!(warnings(&l).is_empty(), "{:?}", warnings(&l));
    l.capture_end(0, 0xabc, "cudaStreamEndCapture");
    assert_eq!(warnings(&l).len(), 1, "end of a capture never begun is a warning");
    l.capture_end(7, 0xabc, "cudaStreamEndCapture");
    assert!(l.devices[7].get().is_none(), "an unknown end creates no device");
    assert!(l.free(0x1000, "cudaFree") != Freed::Unknown);
    assert_eq!(stats(&l, 0).graphs.captured_bytes, 64, "cumulative");
    let d = device_json(&l, 0);
    let top = &d["top_allocations"][0];
    assert_eq!((top["captured"].as_bool(), top["ptr"].as_str()), (Some(false), Some("0x3000")));
}

#[test]
fn vmm_create_map_export_unmap_release() {
    let l = Ledger::new();
    let (h, va) = (0x1000_u64, 0x7f00_0000_0000_u64);
    l.vmm_create(1, h, 1 << 21, "cuMemCreate");
    alloc(&l, 1, 0x1000, 64); // an address equal to the handle value: no collision
    let s = stats(&l, 1);
    assert_eq!((s.live_bytes, s.cats[OTHER].allocs, s.alloc_count), ((1 << 21) + 64, 2, 2));
    assert_eq!(l.lookup(va), None, "not mapped yet");
    l.vmm_map(va, 1 << 20, 0, h);
    l.vmm_map(va + (1 << 20), 1 << 20, 1 << 20, h);
    assert_eq!(stats(&l, 1).live_bytes, (1 << 21) + 64, "mapping adds no bytes");
    assert_eq!(l.vmm_handle_at(va + (1 << 20) + 5), Some(h));
    assert_eq!(l.lookup(va + (1 << 20) + 5), Some((1, va + (1 << 20), 1 << 20)));
    assert!(l.mark_exported(va + 7));
    assert!(l.vmm_export(h), "exporting the handle again finds it");
    l.add_h2d(va + 3, 4096);
    let s = stats(&l, 1);
    assert_eq!((s.cats[IPC].live, s.ipc.exported_count, s.ipc.exported_bytes), (1 << 21, 1, 1 << 21));
    let d = device_json(&l, 1);
    let top = &d["top_allocations"][0];
    assert_eq!(
        (top["kind"].as_str(), top["h2d_bytes"].as_u64(), top["exported"].as_bool()),
        (Some("vmm_physical"), Some(4096), Some(true))
    );
    l.vmm_unmap(va, 1 << 21);
    assert_eq!((l.lookup(va), l.vmm_handle_at(va + (1 << 20))), (None, None));
    assert_eq!(l.free(0x1000, "cudaFree"), Freed::Known { dev: 1, bytes: 64 }, "free does not touch handles");
    assert!(l.vmm_release(h));
    assert!(!l.vmm_release(h), "second release");
    assert!(!l.vmm_export(h));
    let s = stats(&l, 1);
    assert_eq!((s.live_bytes, s.peak_bytes, s.free_count, s.cats[IPC].live), (0, (1 << 21) + 64, 2, 0));
    assert!(warnings(&l).is_empty(), "{:?}", warnings(&l));
    l.vmm_unmap(va, 4096);
    assert_eq!(warnings(&l).len(), 1, "unmapping nothing is a warning");
}

#[test]
fn vmm_handle_recreated_on_another_device_moves() {
    let l = Ledger::new();
    l.vmm_create(0, 9, 100, "cuMemCreate");
    l.vmm_create(2, 9, 30, "cuMemCreate");
    assert_eq!((stats(&l, 0).live_bytes, stats(&l, 0).free_count), (0, 1));
    assert_eq!(stats(&l, 2).live_bytes, 30);
    assert_eq!(warnings(&l).len(), 1);
}

#[test]
fn missed_frees_are_replaced_by_overlapping_allocations() {
    let l = Ledger::new();
    alloc(&l, 0, 0x1000, 0x1000);
    alloc(&l, 0, 0x3000, 0x1000);
    alloc(&l, 0, 0x1800, 0x2000); // overlaps both: both frees were missed
    let s = stats(&l, 0);
    assert_eq!((s.live_bytes, s.alloc_count, s.free_count, s.cats[OTHER].allocs), (0x2000, 3, 2, 1));
    alloc(&l, 0, 0x1800, 0x10); // same base
    assert_eq!(stats(&l, 0).live_bytes, 0x10);
    assert_eq!(warnings(&l).len(), 2);
    alloc(&l, 0, 0, 10);
    assert_eq!(stats(&l, 0).alloc_count, 4, "NULL allocations are not recorded");
}

#[test]
fn probes_are_bounded_and_compute_untracked() {
    let l = Ledger::new();
    alloc(&l, 0, 0x1000, 1000);
    l.probe(0, "cudaMemGetInfo", Some(4000), Some(10_000), 0);
    let s = stats(&l, 0);
    assert_eq!((s.total_bytes, s.untracked, s.untracked_max), (Some(10_000), Some(5000), Some(5000)));
    alloc(&l, 0, 0x10000, 7000);
    l.probe(0, "cuMemGetInfo_v2", Some(3000), Some(10_000), 0);
    let s = stats(&l, 0);
    assert_eq!((s.untracked, s.untracked_max), (Some(-1000), Some(5000)), "may be negative");
    l.probe(0, "cudaMemGetInfo", None, Some(10_000), 0);
    l.probe(0, "cudaMemGetInfo", Some(1), Some(2), 2);
    let s = stats(&l, 0);
    assert_eq!(s.untracked, Some(-1000), "NULL outputs and failed calls do not update untracked");
    assert_eq!(s.probes.total(), 4);
    for i in 0..996u64 {
        l.probe(0, "cudaMemGetInfo", Some(i), Some(10_000), 0);
    }
    let d = device_json(&l, 0);
    let probes = d["probes"].as_array().unwrap();
    assert_eq!((probes.len(), d["probes_total"].as_u64()), (512, Some(1000)));
    assert_eq!(probes[0]["free_bytes"], 4000, "the first ones are kept");
    assert_eq!(probes[2]["free_bytes"], Value::Null);
    assert_eq!(probes[3]["error"], 2);
    assert_eq!(probes[511]["free_bytes"], 995, "the last ones are kept");
    assert_eq!(probes[256]["free_bytes"], 995 - 255);
    assert_eq!((probes[1]["live_bytes"].as_u64(), probes[1]["categories"]["other"].as_u64()), (Some(8000), Some(8000)));
    let events = d["events"].as_array().unwrap();
    assert_eq!((events.len(), d["events_total"].as_u64()), (1000, Some(1000)), "one event per probe");
}

#[test]
fn events_are_bounded() {
    let l = Ledger::new();
    for i in 0..3000 {
        l.driver_cost(0, if i % 2 == 0 { "cuModuleLoadData" } else { "cuCtxEnablePeerAccess" }, 10);
    }
    let d = device_json(&l, 0);
    // Past the bound, alike calls (no query between them) are folded, never dropped: every
    // call is counted in a kept event and their sizes add up.
    let events = d["events"].as_array().unwrap();
    assert!(events.len() <= 1024, "{}", events.len());
    assert_eq!(d["events_total"].as_u64(), Some(3000));
    let calls = |api: &str| -> (u64, i64) {
        events.iter().filter(|e| e["api"] == api).fold((0, 0), |(c, b), e| {
            (c + e["calls"].as_u64().unwrap_or(1), b + e["bytes"].as_i64().unwrap())
        })
    };
    assert_eq!(calls("cuModuleLoadData"), (1500, 15_000));
    assert_eq!(calls("cuCtxEnablePeerAccess"), (1500, 15_000));
    let folded = events.iter().find(|e| e["calls"].as_u64() > Some(1)).unwrap();
    assert_eq!(folded["detail"], format!("{} bytes", folded["bytes"]), "{folded}");
    let costs = d["driver_costs"].as_array().unwrap();
    assert_eq!(costs.len(), 2);
    assert_eq!(
        (costs[0]["api"].as_str(), costs[0]["calls"].as_u64(), costs[0]["bytes"].as_i64()),
        (Some("cuModuleLoadData"), Some(1500), Some(15_000))
    );
}

#[test]
fn failures_snapshot_the_ledger_and_last_probe() {
    let l = Ledger::new();
    l.failure(0, "cudaMalloc", 1 << 40, 2, "cudaErrorMemoryAllocation");
    alloc(&l, 0, 0x1000, 1000);
    l.probe(0, "cudaMemGetInfo", Some(123), Some(456), 0);
    l.failure(0, "cuMemAlloc_v2", 1 << 40, 2, "CUDA_ERROR_OUT_OF_MEMORY");
    for _ in 0..300 {
        l.failure(0, "cudaMalloc", 1, 2, "cudaErrorMemoryAllocation");
    }
    let d = device_json(&l, 0);
    let f = d["failures"].as_array().unwrap();
    assert_eq!((f.len(), d["failures_total"].as_u64()), (256, Some(302)));
    assert_eq!((f[0]["live_bytes"].as_u64(), f[0]["last_probe"].is_null()), (Some(0), true));
    assert_eq!(f[1]["error_name"], "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!((f[1]["bytes"].as_u64(), f[1]["error"].as_i64()), (Some(1 << 40), Some(2)));
    assert_eq!((f[1]["live_bytes"].as_u64(), f[1]["categories"]["other"].as_u64()), (Some(1000), Some(1000)));
    assert_eq!(f[1]["last_probe"]["free_bytes"], 123);
}

#[test]
fn ipc_imports_are_not_local_memory() {
    let l = Ledger::new();
    l.ipc_import(2, 0x5000, Some(1000), "cudaIpcOpenMemHandle");
    l.ipc_import(2, 0x9000, None, "cuIpcOpenMemHandle");
    let s = stats(&l, 2);
    assert_eq!(s.live_bytes, 0);
    assert_eq!(
        (s.ipc.imported_count, s.ipc.imported_bytes, s.ipc.imported_live_count, s.ipc.imported_live_bytes),
        (2, 1000, 2, 1000)
    );
    assert_eq!(l.lookup(0x5000), None);
    assert!(l.ipc_close(0x5000));
    assert!(!l.ipc_close(0x5000), "double close");
    let s = stats(&l, 2);
    assert_eq!(
        (s.ipc.imported_count, s.ipc.imported_bytes, s.ipc.imported_live_count, s.ipc.imported_live_bytes),
        (2, 1000, 1, 0)
    );
    assert_eq!(warnings(&l).len(), 1);
}

#[test]
fn timeline_is_bounded_and_ends_with_current_state() {
    let l = Ledger::new();
    for i in 0..6000u64 {
        alloc(&l, 0, 0x1000 + i * 0x100, 0x10);
        if i % 3 == 0 {
            l.free(0x1000 + i * 0x100, "cudaFree");
        }
    }
    l.mark_exported(0x1000 + 5999 * 0x100);
    let d = device_json(&l, 0);
    let t = d["timeline"].as_array().unwrap();
    assert!(t.len() <= 2048 && t.len() > 1024, "{}", t.len());
    let last = t.last().unwrap();
    assert_eq!(last["live_bytes"], d["live_bytes"]);
    for c in ALL {
        assert_eq!(last[c.name()], d["categories"][c.name()]["live_bytes"], "{}", c.name());
    }
    assert_eq!(last["ipc"], 0x10);
}

#[test]
fn many_threads_give_exact_totals() {
    let l = Ledger::new();
    let threads = 8u64;
    let per = 5000u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let l = &l;
            s.spawn(move || {
                let dev = (t % 2) as i32;
                let base = 0x1_0000_0000 * (t + 1);
                for i in 0..per {
                    alloc(l, dev, base + i * 0x1000, i % 97 + 1);
                    if i % 2 == 1 {
                        assert_eq!(
                            l.free(base + (i - 1) * 0x1000, "cudaFree"),
                            Freed::Known { dev, bytes: (i - 1) % 97 + 1 }
                        );
                    }
                    if i % 100 == 0 {
                        l.probe(dev, "cudaMemGetInfo", Some(1), Some(2), 0);
                    }
                }
            });
        }
        // A reader renders concurrently.
        s.spawn(|| {
            for _ in 0..20 {
                let _ = l.to_json();
            }
        });
    });
    for dev in 0..2 {
        let s = stats(&l, dev);
        let kept: u64 = (0..per).filter(|i| i % 2 == 1).map(|i| i % 97 + 1).sum();
        assert_eq!(s.live_bytes, kept * threads / 2);
        assert_eq!((s.alloc_count, s.free_count), (per * threads / 2, per / 2 * threads / 2));
        assert_eq!(s.cats[OTHER].allocs, per / 2 * threads / 2);
    }
}

#[test]
fn out_of_range_devices_are_losses() {
    let l = Ledger::new();
    alloc(&l, -1, 0x1000, 10);
    alloc(&l, MAX_DEVICES as i32, 0x2000, 10);
    l.probe(i32::MIN, "cudaMemGetInfo", None, None, 0);
    assert_eq!(l.health.lost_events.load(Ordering::Relaxed), 3);
    assert_eq!(l.lookup(0x1000), None);
    let j = l.to_json();
    assert_eq!(j["devices"].as_array().unwrap().len(), 0);
    assert_eq!(j["health"]["lost_events"], 3);
    assert_eq!(j["health"]["warnings"].as_array().unwrap().len(), 3);
}

#[test]
fn warnings_are_bounded_and_deduplicated() {
    let l = Ledger::new();
    for i in 0..100 {
        l.note_warning(&format!("warning {i}\nsecond line"));
        l.note_warning("same");
    }
    l.note_unwrapped("cudaMalloc");
    l.note_unwrapped("cudaMalloc");
    let j = l.to_json();
    let w = j["health"]["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 64);
    assert_eq!(w[0], "warning 0 second line");
    assert_eq!(w[1], "same");
    assert_eq!(j["health"]["warnings_dropped"], 100 - 63);
    assert_eq!(j["health"]["unwrapped_symbols"], serde_json::json!(["cudaMalloc"]));
}

#[test]
fn host_pinned_and_registered() {
    let l = Ledger::new();
    l.host_alloc(0x1000, 100, "cudaMallocHost");
    l.host_alloc(0x2000, 50, "cuMemHostAlloc");
    assert!(l.host_free(0x1000));
    assert!(!l.host_free(0x1000));
    l.host_register(0x9000, 4096, "cudaHostRegister");
    assert!(l.host_unregister(0x9000));
    assert!(!l.host_unregister(0x9000));
    let j = l.to_json();
    let h = &j["host"];
    let got: Vec<u64> = [
        "pinned_live_bytes",
        "pinned_peak_bytes",
        "pinned_alloc_count",
        "pinned_free_count",
        "registered_live_bytes",
        "registered_peak_bytes",
        "registered_count",
        "unregistered_count",
    ]
    .iter()
    .map(|k| h[*k].as_u64().unwrap_or_else(|| panic!("{k}")))
    .collect();
    assert_eq!(got, [50, 150, 2, 1, 0, 4096, 1, 1]);
    assert_eq!(j["health"]["unknown_frees"], 1);
    assert_eq!(j["devices"].as_array().unwrap().len(), 0, "host memory is no device");
}

/// Host-located VMM memory (NCCL's ncclCuMemHostAlloc / ncclCuMemHostFree order: create, map,
/// then retain, release, unmap, release) is host memory: never on a device, gone with its last
/// reference and mapping; a failed release is undone.
#[test]
fn host_vmm_memory_lives_like_device_vmm() {
    let l = Ledger::new();
    l.host_vmm_create(0x77, 4 << 20, "cuMemCreate");
    l.vmm_map(0x6000_0000_0000, 4 << 20, 0, 0x77);
    let host = |l: &Ledger| {
        let j = l.to_json();
        let h = &j["host"];
        ["vmm_live_bytes", "vmm_peak_bytes", "vmm_create_count", "vmm_release_count"].map(|k| h[k].as_u64().unwrap())
    };
    assert_eq!(host(&l), [4 << 20, 4 << 20, 1, 0]);
    assert!(l.vmm_export(0x77), "a host-located handle is exported as host memory");
    assert_eq!(l.to_json()["health"]["lost_events"], 0, "no device ordinal -1: nothing lost");
    assert_eq!(l.vmm_handle_at(0x6000_0000_1000), Some(0x77));
    assert!(l.vmm_retain(0x77));
    assert!(l.vmm_release(0x77));
    l.vmm_unmap(0x6000_0000_0000, 4 << 20);
    assert_eq!(host(&l)[0], 4 << 20, "one reference left");
    let u = l.vmm_release_begin(0x77).expect("known handle");
    assert_eq!(host(&l), [0, 4 << 20, 1, 1]);
    l.vmm_undo(u);
    assert_eq!(host(&l), [4 << 20, 4 << 20, 1, 0], "the failed release is undone");
    assert!(l.vmm_release(0x77));
    assert_eq!(host(&l), [0, 4 << 20, 1, 1]);
    assert!(!l.vmm_export(0x77), "gone");
    let j = l.to_json();
    assert_eq!(j["devices"].as_array().unwrap().len(), 0, "host memory is no device");
    assert_eq!(j["host"]["pinned_live_bytes"], 0);
}

#[test]
fn graphs_and_generation() {
    let l = Ledger::new();
    let g0 = l.generation();
    l.graph_instantiate(0, "cudaGraphInstantiate", Some(4096));
    l.graph_instantiate(0, "cuGraphInstantiateWithFlags", None);
    l.graph_instantiate(0, "cudaGraphInstantiate", Some(-96));
    assert!(l.generation() >= g0 + 3);
    let g1 = l.generation();
    let _ = (l.lookup(1), l.capturing(0), l.to_json());
    assert_eq!(l.generation(), g1, "queries change nothing");
    let d = device_json(&l, 0);
    assert_eq!(
        (d["graphs"]["instantiations"].as_u64(), d["graphs"]["instantiate_bytes"].as_i64()),
        (Some(3), Some(4000))
    );
    assert!(d["graphs"].get("exec_destroys").is_none(), "absent until a destroy: {}", d["graphs"]);
}

#[test]
fn a_destroyed_graph_gives_its_memory_back() {
    let l = Ledger::new();
    l.graph_instantiate(0, "cudaGraphInstantiateWithFlags", Some(16 << 20));
    l.driver_cost_at(0, "cudaGraphInstantiateWithFlags", 16 << 20, 0, Some(1));
    l.graph_exec_destroy(0, "cudaGraphExecDestroy", Some(-(16 << 20)), 0, Some(2));
    l.graph_exec_destroy(0, "cuGraphExecDestroy", None, 0, Some(3));
    let d = device_json(&l, 0);
    let g = &d["graphs"];
    assert_eq!(
        (g["exec_destroys"].as_u64(), g["exec_destroy_measured"].as_u64(), g["exec_destroy_bytes"].as_i64()),
        (Some(2), Some(1), Some(-(16 << 20)))
    );
    // The measured one is a negative cost of its own, with its window, so a rise between two
    // queries that a thrown-away graph spans adds up to what is still held.
    let costs = d["driver_costs"].as_array().unwrap();
    let destroy = costs.iter().find(|c| c["api"] == "cudaGraphExecDestroy").unwrap();
    assert_eq!((destroy["calls"].as_u64(), destroy["bytes"].as_i64()), (Some(1), Some(-(16 << 20))));
    let ev = d["events"].as_array().unwrap().iter().find(|e| e["api"] == "cudaGraphExecDestroy").unwrap();
    assert_eq!((ev["kind"].as_str(), ev["bytes"].as_i64(), ev["t0_us"].as_u64()), (Some("driver_cost"), Some(-(16 << 20)), Some(2)));
    let sum: i64 = costs.iter().map(|c| c["bytes"].as_i64().unwrap()).sum();
    assert_eq!(sum, 0);
}

type Check = fn(&Value) -> bool;
const INT: Check = |v| v.is_i64() || v.is_u64();
const UINT: Check = |v| v.is_u64();
const STR: Check = |v| v.is_string();
const BOOL: Check = |v| v.is_boolean();
const ARR: Check = |v| v.is_array();
const OBJ: Check = |v| v.is_object();
const OPT_UINT: Check = |v| v.is_null() || v.is_u64();
const OPT_INT: Check = |v| v.is_null() || INT(v);
const OPT_STR: Check = |v| v.is_null() || v.is_string();
const OPT_OBJ: Check = |v| v.is_null() || v.is_object();

fn check_fields(what: &str, v: &Value, fields: &[(&str, Check)]) {
    for (name, ok) in fields {
        let f = v.get(name).unwrap_or_else(|| panic!("{what}: missing {name} in {v}"));
        assert!(ok(f), "{what}.{name} has the wrong type: {f}");
    }
}

fn check_categories(what: &str, v: &Value, each: Check) {
    let m = v.as_object().unwrap_or_else(|| panic!("{what}: not an object: {v}"));
    assert_eq!(m.len(), 6, "{what}: {v}");
    for c in ALL {
        assert!(each(&m[c.name()]), "{what}.{}: {v}", c.name());
    }
}

#[test]
fn json_has_every_documented_field() {
    let l = Ledger::new();
    l.set_total(0, 1 << 30);
    l.probe(0, "cudaMemGetInfo", Some(1 << 29), Some(1 << 30), 0);
    l.capture_begin(0, 1, "cudaStreamBeginCapture");
    l.alloc(0, 0x1000, 4096, MemKind::Async, "cudaMallocAsync", Facts { site: 7, ..Facts::default() });
    l.capture_end(0, 1, "cudaStreamEndCapture");
    alloc(&l, 0, 0x9000, 10);
    l.mark_exported(0x9000);
    l.failure(0, "cudaMalloc", 1 << 40, 2, "cudaErrorMemoryAllocation");
    l.graph_instantiate(0, "cudaGraphInstantiate", Some(1));
    l.ipc_import(0, 0xa0000, Some(5), "cudaIpcOpenMemHandle");
    l.driver_cost(0, "cuDevicePrimaryCtxRetain", 300 << 20);
    l.peer_access(0, "cudaDeviceEnablePeerAccess", 3, l.t_us());
    l.vmm_create(3, 0x42, 1 << 21, "cuMemCreate");
    l.host_alloc(0x1, 1, "cudaMallocHost");
    l.note_unwrapped("cuMemAlloc");
    let j = l.to_json();
    let top = j.as_object().unwrap();
    assert_eq!(top.keys().collect::<Vec<_>>(), ["devices", "health", "host", "sites"]);
    assert_eq!(j["sites"], serde_json::json!([]), "no call-site table here: no site is known");
    check_fields(
        "health",
        &j["health"],
        &[("lost_events", UINT), ("unknown_frees", UINT), ("unwrapped_symbols", ARR), ("warnings", ARR)],
    );
    check_fields(
        "host",
        &j["host"],
        &[
            ("pinned_live_bytes", UINT),
            ("pinned_peak_bytes", UINT),
            ("pinned_alloc_count", UINT),
            ("pinned_free_count", UINT),
            ("registered_live_bytes", UINT),
            ("registered_peak_bytes", UINT),
            ("registered_count", UINT),
            ("unregistered_count", UINT),
            ("vmm_live_bytes", UINT),
            ("vmm_peak_bytes", UINT),
            ("vmm_create_count", UINT),
            ("vmm_release_count", UINT),
        ],
    );
    let devices = j["devices"].as_array().unwrap();
    assert_eq!(
        devices.iter().map(|d| d["index"].as_i64().unwrap()).collect::<Vec<_>>(),
        [0, 3],
        "sorted, only used devices"
    );
    for d in devices {
        check_fields(
            "device",
            d,
            &[
                ("index", INT),
                ("total_bytes", OPT_UINT),
                ("live_bytes", UINT),
                ("peak_bytes", UINT),
                ("peak_t_ms", OPT_UINT),
                ("alloc_count", UINT),
                ("free_count", UINT),
                ("categories", OBJ),
                ("probes", ARR),
                ("probes_total", UINT),
                ("failures", ARR),
                ("failures_total", UINT),
                ("untracked_bytes", OPT_INT),
                ("untracked_max_bytes", OPT_INT),
                ("ipc", OBJ),
                ("graphs", OBJ),
                ("driver_costs", ARR),
                ("top_allocations", ARR),
                ("sites", ARR),
                ("timeline", ARR),
                ("events", ARR),
            ],
        );
        check_categories("categories", &d["categories"], |c| {
            [&c["live_bytes"], &c["peak_bytes"], &c["allocs"]].iter().all(|v| v.is_u64())
        });
        check_fields(
            "ipc",
            &d["ipc"],
            &[
                ("exported_count", UINT),
                ("exported_bytes", UINT),
                ("imported_count", UINT),
                ("imported_bytes", UINT),
                ("imported_live_count", UINT),
                ("imported_live_bytes", UINT),
            ],
        );
        check_fields(
            "graphs",
            &d["graphs"],
            &[
                ("captures", UINT),
                ("captures_active", UINT),
                ("captured_allocs", UINT),
                ("captured_bytes", UINT),
                ("instantiations", UINT),
                ("instantiate_bytes", INT),
            ],
        );
        for p in d["probes"].as_array().unwrap() {
            check_fields(
                "probe",
                p,
                &[
                    ("t_ms", UINT),
                    ("t_us", UINT),
                    ("seq", UINT),
                    ("api", STR),
                    ("free_bytes", OPT_UINT),
                    ("total_bytes", OPT_UINT),
                    ("error", INT),
                    ("live_bytes", UINT),
                    ("categories", OBJ),
                    ("site", OPT_UINT),
                ],
            );
            check_categories("probe.categories", &p["categories"], UINT);
        }
        for f in d["failures"].as_array().unwrap() {
            check_fields(
                "failure",
                f,
                &[
                    ("t_ms", UINT),
                    ("t_us", UINT),
                    ("seq", UINT),
                    ("api", STR),
                    ("bytes", UINT),
                    ("error", INT),
                    ("error_name", STR),
                    ("live_bytes", UINT),
                    ("categories", OBJ),
                    ("last_probe", OPT_OBJ),
                    ("site", OPT_UINT),
                ],
            );
            check_categories("failure.categories", &f["categories"], UINT);
        }
        for c in d["driver_costs"].as_array().unwrap() {
            check_fields(
                "driver_cost",
                c,
                &[("api", STR), ("calls", UINT), ("bytes", INT), ("approximate", BOOL), ("sites", ARR)],
            );
            assert_eq!(c["approximate"], true);
        }
        for a in d["top_allocations"].as_array().unwrap() {
            check_fields(
                "allocation",
                a,
                &[
                    ("ptr", STR),
                    ("bytes", UINT),
                    ("api", STR),
                    ("t_ms", UINT),
                    ("t_us", UINT),
                    ("seq", UINT),
                    ("category", STR),
                    ("exported", BOOL),
                    ("captured", BOOL),
                    ("h2d_bytes", UINT),
                    ("site", OPT_UINT),
                    ("caller", OPT_STR),
                ],
            );
            assert!(a["ptr"].as_str().unwrap().starts_with("0x"));
        }
        for t in d["timeline"].as_array().unwrap() {
            let mut fields: Vec<(&str, Check)> =
                vec![("t_ms", UINT), ("t_us", UINT), ("seq", UINT), ("live_bytes", UINT)];
            fields.extend(ALL.iter().map(|c| (c.name(), UINT)));
            check_fields("timeline", t, &fields);
        }
        for e in d["events"].as_array().unwrap() {
            check_fields(
                "event",
                e,
                &[
                    ("t_ms", UINT),
                    ("t_us", UINT),
                    ("seq", UINT),
                    ("kind", STR),
                    ("api", STR),
                    ("bytes", OPT_INT),
                    ("t0_us", OPT_UINT),
                    ("detail", STR),
                ],
            );
        }
        // Every record's t_ms is its t_us in whole milliseconds.
        let mut stamped: Vec<&Value> = Vec::new();
        for list in ["probes", "failures", "top_allocations", "timeline", "events"] {
            stamped.extend(d[list].as_array().unwrap());
        }
        for r in stamped {
            assert_eq!(r["t_ms"].as_u64().unwrap(), r["t_us"].as_u64().unwrap() / 1000, "{r}");
        }
    }
    let d0 = &devices[0];
    let kinds: Vec<&str> = d0["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "probe",
            "capture_begin",
            "capture_end",
            "ipc_export",
            "failure",
            "instantiate",
            "ipc_import",
            "driver_cost",
            "peer_access"
        ]
    );
    let peer = d0["events"].as_array().unwrap().last().unwrap();
    assert_eq!((peer["bytes"].clone(), peer["detail"].as_str()), (Value::Null, Some("peer access from device 3")));
    assert!(peer["t0_us"].as_u64().unwrap() <= peer["t_us"].as_u64().unwrap());
    let top: Vec<(&str, &str)> = d0["top_allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["ptr"].as_str().unwrap(), a["category"].as_str().unwrap()))
        .collect();
    assert_eq!(top, [("0x1000", "graphs"), ("0x9000", "ipc")], "largest first");
    assert_eq!(d0["top_allocations"][0]["site"], 7);
    assert_eq!(d0["top_allocations"][1]["site"], Value::Null);
    // The ledger knows ids only; the site resolver names the caller (none here: `NoSites`).
    assert_eq!(d0["top_allocations"][0]["caller"], Value::Null);
    assert_eq!(d0["sites"][0]["site"], 7);
    assert_eq!(d0["untracked_bytes"], 1u64 << 29);
    let d3 = &devices[1];
    assert_eq!(
        (d3["total_bytes"].clone(), d3["untracked_bytes"].clone(), d3["peak_t_ms"].is_u64()),
        (Value::Null, Value::Null, true)
    );
}

#[test]
fn top_allocations_are_the_32_largest() {
    let l = Ledger::new();
    for i in 0..100u64 {
        // Sizes in a scrambled order, all distinct.
        alloc(&l, 0, 0x1000 * (i + 1), (i * 37) % 100 + 1);
    }
    let d = device_json(&l, 0);
    let sizes: Vec<u64> =
        d["top_allocations"].as_array().unwrap().iter().map(|a| a["bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, (69..=100).rev().collect::<Vec<_>>());
}

#[test]
fn reset_after_fork_gives_an_empty_ledger() {
    // Other tests in this binary may use the global ledger too: only device 63 and this
    // address are this test's.
    let dev = MAX_DEVICES as i32 - 1;
    let before = global();
    assert!(std::ptr::eq(before, global()), "one ledger");
    before.alloc(dev, 0xdead_0000, 77, MemKind::Device, "cudaMalloc", Facts::default());
    assert_eq!(global().lookup(0xdead_0000), Some((dev, 0xdead_0000, 77)));
    reset_global_after_fork();
    let after = global();
    assert!(!std::ptr::eq(before, after));
    assert_eq!(after.lookup(0xdead_0000), None);
    assert!(after.devices[dev as usize].get().is_none(), "no shard carried over");
    assert_eq!(after.free(0xdead_0000, "cudaFree"), Freed::Unknown);
    assert_eq!(before.lookup(0xdead_0000), Some((dev, 0xdead_0000, 77)), "the old one is leaked, not freed");
}

#[test]
fn classify_is_consistent_with_categories() {
    assert_eq!(ALL.map(Category::index), [0, 1, 2, 3, 4, 5]);
    assert_eq!((ALL[IPC], ALL[GRAPHS], ALL[OTHER]), (Category::Ipc, Category::Graphs, Category::Other));
}

/// The `seq` of every element of `d[key]`, in list order.
fn seqs(d: &Value, key: &str) -> Vec<u64> {
    d[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} in {d}"))
        .iter()
        .map(|v| v["seq"].as_u64().unwrap_or_else(|| panic!("seq in {v}")))
        .collect()
}

fn strictly_increasing(v: &[u64]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

#[test]
fn seq_orders_records_across_devices_within_one_millisecond() {
    let l = Ledger::new();
    // Issued in this order, alternating devices, all well within one millisecond.
    l.probe(0, "cudaMemGetInfo", Some(100), Some(200), 0); // 1
    alloc(&l, 1, 0x1000, 10); // 2
    alloc(&l, 0, 0x2000, 20); // 3
    l.probe(1, "cudaMemGetInfo", Some(100), Some(200), 0); // 4
    l.failure(0, "cudaMalloc", 1 << 40, 2, "cudaErrorMemoryAllocation"); // 5
    l.free(0x1000, "cudaFree"); // 6
    l.free(0xbad, "cudaFree"); // unknown: records nothing
    l.probe(0, "cudaMemGetInfo", Some(50), Some(200), 0); // 7
    let (d0, d1) = (device_json(&l, 0), device_json(&l, 1));
    assert_eq!(seqs(&d0, "probes"), [1, 7]);
    assert_eq!(seqs(&d1, "probes"), [4]);
    assert_eq!(seqs(&d0, "top_allocations"), [3]);
    assert_eq!(seqs(&d0, "failures"), [5]);
    assert_eq!(d0["failures"][0]["last_probe"]["seq"], 1, "the embedded last probe keeps its seq");
    assert_eq!(seqs(&d0, "events"), [1, 5, 7], "an event shares its record's seq");
    assert_eq!(seqs(&d1, "events"), [4]);
    assert_eq!(seqs(&d0, "timeline"), [3], "a sample shares its allocation's seq");
    assert_eq!(seqs(&d1, "timeline"), [2, 6], "the free is sampled with its own seq");
    // The whole point: same millisecond, order still known.
    let probe0 = &d0["probes"][0];
    let alloc0 = &d0["top_allocations"][0];
    assert!(probe0["t_ms"].as_u64() <= alloc0["t_ms"].as_u64());
    assert!(probe0["seq"].as_u64() < alloc0["seq"].as_u64());
}

#[test]
fn seq_is_strictly_increasing_across_threads_and_devices() {
    let l = Ledger::new();
    let (threads, per) = (4u64, 100u64);
    std::thread::scope(|s| {
        for t in 0..threads {
            let l = &l;
            s.spawn(move || {
                for i in 0..per {
                    // The probe's free value names its thread and step.
                    let dev = ((t + i) % 2) as i32;
                    l.probe(dev, "cudaMemGetInfo", Some(t * 1000 + i), Some(1 << 40), 0);
                    alloc(l, dev, 0x1_0000_0000 * (t + 1) + i * 0x1000, 1);
                }
            });
        }
    });
    let mut all = Vec::new();
    for dev in 0..2 {
        let d = device_json(&l, dev);
        for key in ["probes", "events", "timeline"] {
            assert!(strictly_increasing(&seqs(&d, key)), "device {dev} {key} in seq order");
        }
        for p in d["probes"].as_array().unwrap() {
            let tag = p["free_bytes"].as_u64().unwrap();
            all.push((tag / 1000, tag % 1000, p["seq"].as_u64().unwrap()));
        }
    }
    assert_eq!(all.len() as u64, threads * per, "every probe kept");
    let mut distinct: Vec<u64> = all.iter().map(|&(_, _, seq)| seq).collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), all.len(), "no seq handed out twice");
    for t in 0..threads {
        let mut mine: Vec<(u64, u64)> =
            all.iter().filter(|&&(owner, _, _)| owner == t).map(|&(_, step, seq)| (step, seq)).collect();
        mine.sort_unstable();
        let by_step: Vec<u64> = mine.iter().map(|&(_, seq)| seq).collect();
        assert!(strictly_increasing(&by_step), "thread {t}: program order across devices is seq order");
    }
}

/// A fork child gets a fresh `Ledger::new()` (`reset_global_after_fork`): its numbering
/// starts over, independent of the parent's.
#[test]
fn seq_restarts_with_the_ledger_after_fork() {
    let l = Ledger::new();
    alloc(&l, 0, 0x1000, 1);
    alloc(&l, 0, 0x2000, 1);
    let fresh = Ledger::new();
    alloc(&fresh, 0, 0x1000, 1);
    assert_eq!(seqs(&device_json(&l, 0), "timeline"), [1, 2]);
    assert_eq!(seqs(&device_json(&fresh, 0), "timeline"), [1]);
}

#[test]
fn per_site_stats_follow_allocations_frees_and_reclassification() {
    let l = Ledger::new();
    let at = |site| Facts { site, ..Facts::default() };
    l.alloc(0, 0x1000, 100, MemKind::Device, "cudaMalloc", at(1));
    l.alloc(0, 0x2000, 50, MemKind::Device, "cudaMalloc", at(1));
    l.alloc(0, 0x3000, 300, MemKind::Device, "cudaMalloc", at(2));
    l.alloc(0, 0x4000, 7, MemKind::Device, "cudaMalloc", Facts::default());
    l.free(0x1000, "cudaFree");
    l.mark_exported(0x2000);
    l.probe_at(0, "cudaMemGetInfo", Some(1), Some(2), 0, 3);
    l.failure_at(0, "cudaMalloc", 1 << 40, 2, "cudaErrorMemoryAllocation", 4);
    for site in [5, 5, 6] {
        l.driver_cost_at(0, "cuIpcOpenMemHandle", 10, site, None);
    }
    l.driver_cost_at(0, "cuIpcOpenMemHandle", 10, 0, None);
    let j = l.to_json();
    let d = &j["devices"][0];
    let sites: Vec<(u64, &str, u64, u64, u64, u64)> = d["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["site"].as_u64().unwrap(),
                s["category"].as_str().unwrap(),
                s["live_bytes"].as_u64().unwrap(),
                s["peak_bytes"].as_u64().unwrap(),
                s["allocs"].as_u64().unwrap(),
                s["total_allocs"].as_u64().unwrap(),
            )
        })
        .collect();
    // Site 1: 150 at its peak, 50 live after the free, reclassified ipc by the export.
    assert_eq!(sites, [(2, "other", 300, 300, 1, 1), (1, "ipc", 50, 150, 1, 2)], "largest live first; site 0 absent");
    assert_eq!(d["probes"][0]["site"], 3);
    assert_eq!(d["failures"][0]["site"], 4);
    assert_eq!(d["failures"][0]["last_probe"]["site"], 3);
    assert_eq!(d["driver_costs"][0]["calls"], 4);
    assert_eq!(d["driver_costs"][0]["sites"], serde_json::json!([5, 6]), "distinct, 0 not kept");
}

/// A call-site table that knows the sites `known`, records the ids it was asked about, and
/// marks the health fields it fills.
struct FakeSites {
    known: Vec<u32>,
    asked: std::sync::Mutex<Vec<u32>>,
}

impl SiteResolver for FakeSites {
    fn resolve(
        &self,
        ids: &std::collections::BTreeSet<u32>,
    ) -> std::collections::BTreeMap<u32, (culedger_format::report::SiteRec, Option<String>)> {
        self.asked.lock().unwrap().extend(ids.iter().copied());
        ids.iter()
            .filter(|id| self.known.contains(id))
            .map(|&id| {
                let rec = culedger_format::report::SiteRec { id: i64::from(id), ..Default::default() };
                (id, (rec, Some(format!("f{id}.py:g"))))
            })
            .collect()
    }
    fn health(&self, h: &mut culedger_format::report::Health) {
        h.site_misses = 11;
        h.python_version = Some("3.11.7".into());
    }
}

/// The rendering asks the resolver once about every site its records name (allocations,
/// per-site lists, probes, failures and their last probes, driver costs), names the callers
/// of those it knows, lists them in `sites`, and takes its health fields.
#[test]
fn sites_are_resolved_from_the_ids_the_records_name() {
    let l = Ledger::new();
    let at = |site| Facts { site, ..Facts::default() };
    l.alloc(0, 0x1000, 100, MemKind::Device, "cudaMalloc", at(1));
    l.alloc(0, 0x2000, 300, MemKind::Device, "cudaMalloc", at(2));
    l.alloc(3, 0x3000, 50, MemKind::Device, "cudaMalloc", Facts::default());
    l.probe_at(3, "cudaMemGetInfo", Some(1), Some(2), 0, 3);
    l.failure_at(3, "cudaMalloc", 1 << 40, 2, "cudaErrorMemoryAllocation", 4);
    l.driver_cost_at(0, "cuIpcOpenMemHandle", 10, 5, None);
    let sites = FakeSites { known: vec![2, 3, 5, 9], asked: Default::default() };
    let j = serde_json::to_value(l.render(&sites)).unwrap();
    // The report-time categories ask first about the failure's site (its category is its own
    // call site's), then the rendering about each named id once; none for 0.
    assert_eq!(*sites.asked.lock().unwrap(), [4, 1, 2, 3, 4, 5], "each named id once, none for 0");
    let d0 = &j["devices"][0];
    let callers = |list: &str| -> Vec<(Value, Value)> {
        d0[list].as_array().unwrap().iter().map(|a| (a["site"].clone(), a["caller"].clone())).collect()
    };
    let named = vec![(2.into(), "f2.py:g".into()), (1.into(), Value::Null)];
    assert_eq!(callers("top_allocations"), named, "largest first; site 1 is not known");
    assert_eq!(callers("sites"), named);
    let ids: Vec<&Value> = j["sites"].as_array().unwrap().iter().map(|s| &s["id"]).collect();
    assert_eq!(ids, [2, 3, 5], "the known sites among those named, by id");
    assert_eq!((&j["health"]["site_misses"], &j["health"]["python_version"]), (&11.into(), &"3.11.7".into()));
}

#[test]
fn per_site_list_is_bounded() {
    let l = Ledger::new();
    for i in 1..=100u64 {
        l.alloc(0, i << 20, i, MemKind::Device, "cudaMalloc", Facts { site: i as u32, ..Facts::default() });
    }
    let j = l.to_json();
    let s = j["devices"][0]["sites"].as_array().unwrap();
    assert_eq!(s.len(), 64);
    assert_eq!(s[0]["site"], 100);
    assert_eq!(s[63]["site"], 37);
}

#[test]
fn measured_costs_keep_their_window_and_size() {
    let l = Ledger::new();
    let start = l.t_us();
    std::thread::sleep(std::time::Duration::from_millis(2));
    l.driver_cost_at(1, "cudaIpcOpenMemHandle", 2 << 20, 0, Some(start));
    l.driver_cost(1, "cuModuleLoadData", 8 << 20);
    let j = l.to_json();
    let events = j["devices"][0]["events"].as_array().unwrap();
    let (ipc, module) = (&events[0], &events[1]);
    assert_eq!((ipc["kind"].as_str(), ipc["bytes"].as_i64()), (Some("driver_cost"), Some(2 << 20)));
    assert_eq!(ipc["t0_us"].as_u64(), Some(start));
    assert!(ipc["t_us"].as_u64().unwrap() >= start + 2000, "the window spans the call: {ipc}");
    assert_eq!((module["bytes"].as_i64(), module["t0_us"].clone()), (Some(8 << 20), Value::Null));
    // The per-API sums are unchanged by the window.
    assert_eq!(j["devices"][0]["driver_costs"][0]["bytes"], 2 << 20);
}

#[test]
fn peer_access_lists_the_peer_device() {
    let l = Ledger::new();
    l.alloc(0, 0x1000, 4096, MemKind::Device, "cudaMalloc", Facts::default());
    l.peer_access(1, "cudaDeviceEnablePeerAccess", 0, l.t_us());
    let j = l.to_json();
    let devices = j["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "the peer device is listed: this process holds a context there");
    assert_eq!((devices[1]["index"].as_i64(), devices[1]["live_bytes"].as_u64()), (Some(1), Some(0)));
    assert_eq!(devices[1]["events"][0]["kind"], "peer_access");
}

#[test]
fn start_has_microseconds() {
    let l = Ledger::new();
    assert_eq!(l.start_unix_ms(), l.start_unix_us() / 1000);
    assert!(l.start_unix_us() > 1_600_000_000_000_000);
    let a = l.t_us();
    std::thread::sleep(std::time::Duration::from_micros(300));
    assert!(l.t_us() >= a + 300);
}

#[test]
fn seqs_stay_unique_when_a_second_device_appears() {
    // One shard: stamps move `seq` without a locked increment; a second shard made while
    // threads stamp on the first must not let two records share a number.
    for round in 0..20 {
        let l = std::sync::Arc::new(Ledger::new());
        l.on_device(0, "t", |_, _| ());
        let go = std::sync::Arc::new(std::sync::Barrier::new(4));
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let (l, go) = (l.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    let dev = if w == 3 { 1 + round % 7 } else { 0 };
                    (0..2000).filter_map(|_| l.on_device(dev, "t", |_, now| now.seq)).collect::<Vec<u64>>()
                })
            })
            .collect();
        let mut seqs: Vec<u64> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
        let n = seqs.len();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), n, "round {round}: a seq was handed out twice");
        assert!(!l.one_shard.load(Ordering::Relaxed), "two shards: locked increments");
    }
}
