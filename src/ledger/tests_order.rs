//! The address order kept lazily beside the exact-key table (`device::order`): interior
//! pointers and partial overlaps answered exactly as an ordered map would, under churn.

use std::collections::BTreeMap;

use super::*;

fn alloc(l: &Ledger, ptr: u64, bytes: u64) {
    l.alloc(0, ptr, bytes, MemKind::Device, "cudaMalloc", Facts::default());
}

fn live_bytes(l: &Ledger) -> u64 {
    l.settle_all();
    l.devices[0].get().map_or(0, |m| m.lock().stats.live_bytes)
}

/// Random allocations (some overlapping older live ones: missed frees), frees and lookups of
/// interior pointers, against a model where a new allocation removes every older record it
/// overlaps.
#[test]
fn interior_lookups_and_overlaps_agree_with_an_ordered_model() {
    agree_with_the_model(|r, _| 0x7f00_0000_0000 + (r % 20_000) * 0x100, 16..=16);
}

/// The same with addresses handed out upwards (a bump allocator, as the driver mostly
/// does), the latest allocation often freed at once, and now and then a range cut again
/// below the top: allocations freed before the next merge leave it (`Order::forget`), and
/// what they overlapped must still be found.
#[test]
fn upward_addresses_freed_at_once_agree_with_the_model() {
    agree_with_the_model(
        |r, top| if r % 13 == 0 { top.saturating_sub((r >> 20) % 0x4000) } else { top + (r >> 30) % 0x300 },
        12..=13,
    );
}

/// Random steps against an ordered model: allocations at `base(random, top of the last
/// allocation)`, frees of a random live record, frees of the latest allocation when the
/// step's number falls in `latest`, and interior lookups.
fn agree_with_the_model(base_of: impl Fn(u64, u64) -> u64, latest: std::ops::RangeInclusive<u64>) {
    let l = Ledger::new();
    let mut top = 0x7f00_0000_0000u64;
    let mut last: Option<u64> = None;
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    };
    for step in 0..60_000u64 {
        let r = next();
        let base = base_of(r >> 8, top).max(0x1000);
        match r % 16 {
            // Mostly a clean allocation (the driver's ranges do not overlap live ones).
            0..=6 => {
                let bytes = 0x100 * (1 + (r >> 40) % 8);
                let end = base + bytes;
                let clean = model.range(..end).next_back().is_none_or(|(&b, &n)| b + n <= base);
                // A partial overlap now and then: a missed free, the range cut again.
                if clean || r % 97 == 0 {
                    let old: Vec<u64> =
                        model.range(..end).filter(|&(&b, &n)| b + n > base || b == base).map(|(&b, _)| b).collect();
                    for b in old {
                        model.remove(&b);
                    }
                    model.insert(base, bytes);
                    alloc(&l, base, bytes);
                    top = top.max(end);
                    last = Some(base);
                }
            }
            k if latest.contains(&k) && last.is_some() => {
                let b = last.take().unwrap_or(base);
                let known = model.remove(&b).is_some();
                assert_eq!(matches!(l.free(b, "cudaFree"), Freed::Known { .. }), known, "step {step}: free 0x{b:x}");
            }
            7..=11 => {
                let b = model.keys().nth((r >> 20) as usize % model.len().max(1)).copied().unwrap_or(base);
                let known = model.remove(&b).is_some();
                assert_eq!(matches!(l.free(b, "cudaFree"), Freed::Known { .. }), known, "step {step}: free 0x{b:x}");
            }
            _ => {
                let p = base + (r >> 33) % 0x800;
                let want = model.range(..=p).next_back().filter(|(&b, &n)| b + n > p).map(|(&b, &n)| (0, b, n));
                assert_eq!(l.lookup(p), want, "step {step}: lookup 0x{p:x}");
            }
        }
        if step % 4999 == 0 {
            assert_eq!(live_bytes(&l), model.values().sum::<u64>(), "step {step}");
        }
    }
    assert_eq!(live_bytes(&l), model.values().sum::<u64>());
}

/// A partial overlap is found when the order is next asked (here: a report), counted as an
/// implicit free of the older record, with a warning.
#[test]
fn a_partial_overlap_is_settled_before_a_report() {
    let l = Ledger::new();
    alloc(&l, 0x10000, 0x1000);
    alloc(&l, 0x10800, 0x1000);
    let j = l.to_json();
    assert_eq!(j["devices"][0]["live_bytes"], 0x1000);
    assert_eq!(j["devices"][0]["free_count"], 1);
    assert_eq!(j["devices"][0]["top_allocations"][0]["ptr"], "0x10800", "the newer record stays");
    assert_eq!(j["health"]["warnings"].as_array().map(Vec::len), Some(1), "{}", j["health"]);
}
