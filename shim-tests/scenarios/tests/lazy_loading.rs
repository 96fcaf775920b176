//! Lazy module loading: a library's device memory is taken where it is first used in a context
//! (a launch of one of its kernels, cuKernelGetFunction, cuLibraryGetModule, cuLibraryGetGlobal,
//! and what asks about a kernel: its attributes, its occupancy),
//! not at cuLibraryLoadData. The simulated driver charges `FAKECUDA_MODULE_MIB` there, as a real
//! driver under CUDA_MODULE_LOADING=LAZY does; culedger names that cost for the library's file
//! and the entry point that triggered it, measured once per (library, context).

mod common;

use common::*;
use culedger_scenarios::reports::{libculedger, only_report};
use serde_json::Value;

const MODULE_MIB: u64 = 24;

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The driver costs of device `dev`: (api, library, calls, bytes), sorted.
fn costs(r: &Value, dev: u64) -> Vec<(String, String, u64, u64)> {
    let d = r["devices"].as_array().unwrap().iter().find(|d| d["index"] == dev).expect("the device in the report");
    let mut v: Vec<(String, String, u64, u64)> = d["driver_costs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["api"] != "cuDevicePrimaryCtxRetain")
        .map(|c| {
            let lib = c["library"].as_str().unwrap_or("").to_string();
            (c["api"].as_str().unwrap().to_string(), lib, n(&c["calls"]), n(&c["bytes"]))
        })
        .collect();
    v.sort();
    v
}

/// Two libraries used lazily on two devices: without culedger the driver's own free-memory figure
/// moves by `FAKECUDA_MODULE_MIB` exactly at each first use (and at nothing else); under it the
/// program sees the same figures, and each device's driver costs hold one entry per first use,
/// named for the library's file (the program itself for the image in its data, the file's name
/// for the other) and the entry point that triggered it, with what the driver took.
#[test]
fn first_uses_of_two_libraries_are_named_driver_costs() {
    let setup = |name: &str| {
        let mut sim = machine(name);
        sim.env("FAKECUDA_MODULE_MIB", MODULE_MIB.to_string());
        let file = sim.scratch().join("kernels_b.cubin");
        std::fs::write(&file, [0u8; 64]).unwrap();
        (sim, file)
    };
    let expected = [
        ("load_bytes", 0),
        ("dev0_a_launch", MODULE_MIB * MIB),
        ("dev0_a_again", 0),
        ("dev0_b_launch_ex", MODULE_MIB * MIB),
        ("dev0_b_again", 0),
        ("dev1_a_get_function", MODULE_MIB * MIB),
        ("dev1_a_launch", 0),
        ("dev1_b_get_module", MODULE_MIB * MIB),
        ("dev1_b_global", 0),
        ("dev2_a_get_attribute", MODULE_MIB * MIB),
        ("dev2_a_set_attribute", 0),
        ("dev2_b_occupancy", MODULE_MIB * MIB),
        ("dev2_b_occupancy_flags", 0),
        ("dev3_b_set_attribute", MODULE_MIB * MIB),
        ("dev3_a_dynamic_smem", MODULE_MIB * MIB),
    ];
    let (plain, file) = setup("lazy_plain");
    let run = plain.run_ok(plain.cmd("drv_lazy").arg(&file));
    for (k, v) in expected {
        assert_eq!(run.u64(k), v, "{k} without culedger: what the simulated driver charges");
    }

    let (mut sim, file) = setup("lazy_culedger");
    let out = sim.scratch().join("out");
    sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out);
    let run = sim.run_ok(sim.cmd("drv_lazy").arg(&file));
    for (k, v) in expected {
        assert_eq!(run.u64(k), v, "{k} under culedger: the program sees the same");
    }
    let r = only_report(&out);
    let b = MODULE_MIB * MIB;
    let s = |a: &str, l: &str| (a.to_string(), l.to_string(), 1, b);
    let load = |a: &str| (a.to_string(), String::new(), 1, 0);
    assert_eq!(
        costs(&r, 0),
        [
            s("cuLaunchKernel", "drv_lazy"),
            s("cuLaunchKernelEx", "kernels_b.cubin"),
            load("cuLibraryLoadData"),
            load("cuLibraryLoadFromFile")
        ],
        "the loads took nothing (measured, unnamed), the first launches took the libraries' memory"
    );
    assert_eq!(costs(&r, 1), [s("cuKernelGetFunction", "drv_lazy"), s("cuLibraryGetModule", "kernels_b.cubin")]);
    // What asks about a kernel loads its library too (the real SGLang server's torch and
    // cuBLAS do this for hundreds of kernels: unnamed before, 6 GiB per GPU at --tp 8).
    assert_eq!(
        costs(&r, 2),
        [s("cuFuncGetAttribute", "drv_lazy"), s("cuOccupancyMaxActiveBlocksPerMultiprocessor", "kernels_b.cubin")]
    );
    assert_eq!(
        costs(&r, 3),
        [s("cuFuncSetAttribute", "kernels_b.cubin"), s("cuOccupancyAvailableDynamicSMemPerBlock", "drv_lazy")]
    );
    let events: Vec<&Value> = r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["events"].as_array().unwrap())
        .filter(|e| e["kind"] == "driver_cost" && e["detail"].as_str().unwrap_or("").contains("lazy loading of"))
        .collect();
    assert_eq!(events.len(), 8, "one event per first use: {events:?}");
    assert!(events.iter().all(|e| n(&e["bytes"]) == b && e["t0_us"].is_u64()), "{events:?}");
    assert_eq!(n(&r["health"]["lost_events"]), 0);
}
