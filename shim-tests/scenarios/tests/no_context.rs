//! Driver calls made with no context current, from inside a runtime's own initialisation.
//!
//! NVIDIA's libcudart loads its modules with `cuLibraryLoadData` while it initialises, before
//! any context is current, with its entry points waiting for that initialisation. A driver
//! hook that asked the runtime (`cudaGetDevice`) for the device when `cuCtxGetDevice` failed
//! waited for itself there: real PyTorch hung at its first CUDA call. `init_reentry`
//! (shim-tests/native/init_reentry.c) is such a runtime; its `cudaGetDevice` gives up after
//! 3 s with exit status 3 instead of spinning for ever.

use culedger_scenarios::reports::{culedger_lines, device, int, libculedger, only_report};
use culedger_scenarios::Sim;

const MIB: u64 = 1 << 20;

#[test]
fn driver_calls_during_the_runtimes_init_never_call_the_runtime() {
    let plain = Sim::new("noctx_plain");
    let a = plain.run(&mut plain.cmd("init_reentry"));
    a.assert_success();

    let mut sim = Sim::new("noctx");
    let out = sim.scratch().join("out");
    sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out);
    let b = sim.run(&mut sim.cmd("init_reentry"));
    assert!(!b.stderr.contains("entered during the runtime's own initialisation"), "{}", b.describe());
    b.assert_success();
    assert!(culedger_lines(&b).is_empty(), "{}", b.stderr);
    // The program sees what it sees without culedger: the loads work, the device and the
    // free-memory questions and an allocation fail for want of a context (201).
    for key in ["no_ctx_loaded", "no_ctx_get_device_rc", "no_ctx_mem_get_info_rc", "no_ctx_alloc_rc"] {
        assert_eq!(a.value(key), b.value(key), "{key}");
    }
    assert_eq!(b.u64("no_ctx_loaded"), 4);
    assert_eq!(b.u64("no_ctx_get_device_rc"), 201);

    let r = only_report(&out);
    // Nothing charged for the calls without a context: the four loads, the query, the failed
    // allocation (not an out-of-memory) and the primary context's retain, which leaves none
    // current; each counted.
    assert_eq!(int(&r["health"]["no_context_calls"]), 7, "{}", r["health"]);
    let d = device(&r, 0);
    assert_eq!(int(&d["live_bytes"]), 2 * MIB);
    assert_eq!(int(&d["peak_bytes"]), 4 * MIB);
    assert_eq!(d["failures"].as_array().map(Vec::len), Some(0), "{}", d["failures"]);
    // Only the load made with the primary context current is measured.
    let loads: Vec<_> = d["driver_costs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["api"] == "cuLibraryLoadData")
        .map(|c| int(&c["calls"]))
        .collect();
    assert_eq!(loads, [1], "{}", d["driver_costs"]);
    assert_eq!(d["probes"].as_array().map(Vec::len), Some(1), "{}", d["probes"]);
}
