//! Call sites of free-memory queries (issue [9], third stage): a thread's repeated query from
//! the same place reuses its previous site, and a query from another place, even one whose
//! stack pointer and outer frames are the same, gets its own (src/sites/mod.rs,
//! `capture_repeat`; docs/sites.md, "Free-memory queries").
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both).

mod common;

use common::machine;
use culedger_scenarios::repo_root;
use culedger_scenarios::reports::only_report;
use serde_json::Value;

/// The offset in `rt_query_sites` of the innermost frame of `site` that is the program's.
fn program_offset(report: &Value, site: u64) -> u64 {
    let s = report["sites"].as_array().unwrap().iter().find(|s| s["id"] == site).expect("site listed");
    let f = s["native"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["object"] == "rt_query_sites")
        .unwrap_or_else(|| panic!("no frame of the program in {s:#}"));
    u64::from_str_radix(f["offset"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

#[test]
fn a_repeated_query_reuses_its_site_and_another_place_gets_its_own() {
    let lib = repo_root().join("target/release/libculedger.so");
    assert!(lib.is_file(), "{} is missing: run `make` first", lib.display());
    let mut sim = machine("query_sites");
    let out = sim.scratch().join("reports");
    sim.env("LD_PRELOAD", &lib).env("CULEDGER_OUT", &out);
    let run = sim.run_ok(&mut sim.cmd("rt_query_sites"));
    let report = only_report(&out);
    let pattern: Vec<char> = run.value("pattern").chars().collect();
    let probes = report["devices"][0]["probes"].as_array().expect("probes");
    let sites: Vec<u64> = probes.iter().map(|p| p["site"].as_u64().expect("a site")).collect();
    assert_eq!(sites.len(), pattern.len(), "{probes:#?}");
    let (fn_a, fn_b) = (run.u64("fn_a"), run.u64("fn_b"));
    for (site, letter) in sites.iter().zip(&pattern) {
        // The call instruction lies inside the function (return address - 1, within 64 bytes).
        let start = if *letter == 'A' { fn_a } else { fn_b };
        let at = program_offset(&report, *site);
        assert!((start..start + 64).contains(&at), "{letter}: frame at {at:#x}, function at {start:#x}");
    }
    // One site per place and thread: A's (main thread), B's, A's from the second thread (its
    // outer frames differ).
    let a = sites[0];
    let b = sites[3];
    assert_ne!(a, b);
    assert!(sites[..3].iter().all(|&s| s == a) && sites[6..8].iter().all(|&s| s == a), "{sites:?}");
    assert!(sites[3..6].iter().all(|&s| s == b), "{sites:?}");
    assert!(sites[8] != a && sites[8] != b, "{sites:?}");
    // Reused: the second and third query of each run of A or B on the main thread (AAA, BBB,
    // AA): 2 + 2 + 1. The first of a run follows another place (or none), and the second
    // thread had no previous query.
    assert_eq!(report["health"]["site_repeats"], 5, "{:#}", report["health"]);
}
