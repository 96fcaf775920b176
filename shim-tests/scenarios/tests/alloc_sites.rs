//! Call sites of repeated large allocations: a thread's allocation from a place it allocated
//! from lately reuses that site when its frames provably match, and every allocation's site is
//! the one its own place gives: two functions with identical frames called from one loop, one
//! function reached through two callers two frames up, another thread; a Python program's two
//! lines of one function, its callers two frames up and a Python thread (src/sites/mod.rs,
//! `capture_alloc`; docs/sites.md, "Repeated allocation sites").
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both).

mod common;

use common::machine;
use culedger_scenarios::repo_root;
use culedger_scenarios::reports::only_report;
use serde_json::Value;
use std::collections::BTreeMap;

/// The site id of the live allocation at `ptr` (device 0's top allocations).
fn site_at(report: &Value, ptr: u64) -> u64 {
    let want = format!("0x{ptr:x}");
    let a = report["devices"][0]["top_allocations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["ptr"] == want.as_str())
        .unwrap_or_else(|| panic!("no allocation at {want}"));
    a["site"].as_u64().unwrap_or_else(|| panic!("no site: {a}"))
}

fn site(report: &Value, id: u64) -> &Value {
    report["sites"].as_array().unwrap().iter().find(|s| s["id"] == id).expect("site listed")
}

/// Offsets of the frames of `object` in a site, innermost first.
fn offsets(report: &Value, id: u64, object: &str) -> Vec<u64> {
    site(report, id)["native"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["object"] == object)
        .map(|f| u64::from_str_radix(f["offset"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
        .collect()
}

#[test]
fn native_callers_each_get_their_own_site_and_repeats_are_proven() {
    let lib = repo_root().join("target/release/libculedger.so");
    assert!(lib.is_file(), "{} is missing: run `make` first", lib.display());
    let mut sim = machine("alloc_sites");
    let out = sim.scratch().join("reports");
    sim.env("LD_PRELOAD", &lib).env("CULEDGER_OUT", &out);
    let run = sim.run_ok(&mut sim.cmd("rt_alloc_sites"));
    let report = only_report(&out);
    let allocs: Vec<(char, u64)> = run
        .all("alloc")
        .iter()
        .map(|v| {
            let (l, p) = v.split_once(':').unwrap();
            (l.chars().next().unwrap(), p.parse().unwrap())
        })
        .collect();
    assert_eq!(allocs.iter().map(|a| a.0).collect::<String>(), "AAABBBAAXYXYTT");
    let f = |k: &str| run.u64(k);
    let within = |at: u64, start: u64| (start..start + 64).contains(&at);
    let mut by_letter: BTreeMap<char, Vec<u64>> = BTreeMap::new();
    for &(letter, ptr) in &allocs {
        let id = site_at(&report, ptr);
        let own = offsets(&report, id, "rt_alloc_sites");
        // The call instruction of the innermost program frame lies in the allocating function;
        // for X and Y the next one lies in the caller two frames up from the runtime.
        let (inner, outer) = match letter {
            'A' | 'T' => (f("fn_a"), None),
            'B' => (f("fn_b"), None),
            'X' => (f("fn_mid"), Some(f("fn_x"))),
            _ => (f("fn_mid"), Some(f("fn_y"))),
        };
        assert!(within(own[0], inner), "{letter}: frame at {:#x}, function at {inner:#x}: {own:x?}", own[0]);
        if let Some(o) = outer {
            assert!(within(own[1], o), "{letter}: caller frame at {:#x}, function at {o:#x}", own[1]);
        }
        by_letter.entry(letter).or_default().push(id);
    }
    // One site per place and thread.
    for (letter, ids) in &by_letter {
        assert!(ids.iter().all(|&i| i == ids[0]), "{letter}: {ids:?}");
    }
    let first: Vec<u64> = by_letter.values().map(|ids| ids[0]).collect();
    let distinct: std::collections::BTreeSet<u64> = first.iter().copied().collect();
    assert_eq!(distinct.len(), first.len(), "A, B, T, X, Y each their own: {by_letter:?}");
    // Reused: AAABBBAA gives 2 + 2 + 2 (A is still remembered after B), XYXY 2 (both
    // remembered), the thread's second 1.
    assert_eq!(report["health"]["site_repeats"], 9, "{:#}", report["health"]);
}

/// The Python frames of a site, innermost first: (function, line).
fn python_frames(report: &Value, id: u64) -> Vec<(String, u64)> {
    site(report, id)["python"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let function = f["function"].as_str().unwrap();
            // 3.11+ name the qualified name; Python's frame gives the plain one.
            (function.rsplit('.').next().unwrap().to_string(), f["line"].as_u64().unwrap())
        })
        .collect()
}

#[test]
fn python_lines_callers_and_threads_each_get_their_own_site() {
    let lib = repo_root().join("target/release/libculedger.so");
    let mut sim = machine("alloc_sites_py");
    let out = sim.scratch().join("reports");
    sim.env("LD_PRELOAD", &lib).env("CULEDGER_OUT", &out);
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    let mut cmd = sim.cmd(python);
    cmd.arg(repo_root().join("shim-tests/py/alloc_sites_rt.py"));
    let run = sim.run_ok(&mut cmd);
    let report = only_report(&out);
    assert_eq!(report["health"]["site_misses"], 0, "{:#}", report["health"]);
    let mut by_tag: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let allocs = run.all("alloc");
    assert_eq!(allocs.len(), 15, "{}", run.describe());
    for line in allocs {
        let a: Value = serde_json::from_str(line).unwrap();
        let id = site_at(&report, a["ptr"].as_u64().unwrap());
        let want: Vec<(String, u64)> = a["want"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f[0].as_str().unwrap().to_string(), f[1].as_u64().unwrap()))
            .collect();
        let got = python_frames(&report, id);
        let tag = a["tag"].as_str().unwrap().to_string();
        assert_eq!(got[..want.len().min(got.len())], want[..], "{tag}: site {id}");
        by_tag.entry(tag).or_default().push(id);
    }
    // Places whose native frames are the same differ by their Python frames: never one site.
    let sets: BTreeMap<&String, std::collections::BTreeSet<u64>> =
        by_tag.iter().map(|(t, ids)| (t, ids.iter().copied().collect())).collect();
    for (a, sa) in &sets {
        for (b, sb) in &sets {
            assert!(a == b || sa.is_disjoint(sb), "{a} and {b} share a site: {by_tag:?}");
        }
    }
    // The warm-up rounds and the measured ones repeat every place: most are proven.
    let repeats = report["health"]["site_repeats"].as_u64().unwrap();
    assert!(repeats >= 15, "site_repeats {repeats} of {} allocations", 19 * 5);
}
