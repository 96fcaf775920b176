//! The Rust scenarios: the runtime embedded as an rlib ("static runtime") and the driver used
//! directly through dlsym + cuGetProcAddress; plus the C driver-API scenario.

mod common;

use common::*;
use culedger_scenarios::elf;

#[test]
fn static_runtime_allocates_exports_and_maps() {
    let mut sim = machine("static_runtime");
    sim.enable_trace();
    let exe = env!("CARGO_BIN_EXE_static_runtime");
    let run = sim.run_ok(&mut sim.cmd(exe));
    assert_eq!(run.u64("alloc_delta"), 16 * MIB);
    assert_eq!(run.u64("ipc_export"), 1);
    assert_eq!(run.u64("ptsz_ok"), 1);
    assert_eq!(run.u64("entry_status"), 0, "cudaDriverEntryPointSuccess");
    assert_eq!(run.u64("entry_missing_status"), 1, "cudaDriverEntryPointSymbolNotFound");
    assert_eq!(run.u64("entry_missing_null"), 1);
    assert_eq!(run.u64("by_version_v1_differs"), 1);
    assert_eq!(run.u64("by_version_old_status"), 2, "cudaDriverEntryPointVersionNotSufficent");
    assert_eq!(run.u64("by_version_old_null"), 1);
    assert_eq!(run.u64("vmm_granularity"), 2 * MIB);
    assert_eq!(run.u64("vmm_mapped_delta"), 6 * MIB);
    assert_eq!(run.u64("vmm_released_delta"), 0);
    // The embedded runtime still went through dlsym + cuGetProcAddress, and
    // cudaGetDriverEntryPoint asked at the runtime's own version.
    let trace = sim.trace();
    assert_eq!(trace.matches("rt dlsym cuGetProcAddress_v2 -> ok").count(), 1, "{trace}");
    assert!(trace.contains("getproc cuMemCreate 12090 0 -> 0 cuMemCreate"), "{trace}");
    // ... and the binary neither exports nor imports any CUDA symbol dynamically.
    let info = elf::dyn_info(std::path::Path::new(exe)).unwrap();
    let cuda: Vec<_> = info.defined.iter().chain(&info.undefined).filter(|s| s.starts_with("cu")).collect();
    assert!(cuda.is_empty(), "dynamic CUDA symbols in static_runtime: {cuda:?}");
    assert!(!info.needed.iter().any(|n| n.starts_with("libcuda")), "{:?}", info.needed);
}

#[test]
fn driver_direct_table() {
    let mut sim = machine("driver_direct");
    sim.enable_trace();
    let run = sim.run_ok(&mut sim.cmd(env!("CARGO_BIN_EXE_driver_direct")));
    assert_eq!(run.u64("alloc_delta"), 20 * MIB);
    assert_eq!(run.u64("freed_delta"), 0);
    assert_eq!(run.u64("async_ok"), 1);
    assert_eq!(run.u64("vmm_mapped_delta"), 8 * MIB);
    assert_eq!(run.u64("vmm_released_delta"), 0);
    let trace = sim.trace();
    assert!(trace.contains("getproc cuMemAllocAsync 11020 2 -> 0 cuMemAllocAsync_ptsz"), "{trace}");
}

#[test]
fn driver_api_program() {
    let sim = machine("drv_basic");
    let run = sim.run_ok(&mut sim.cmd("drv_basic"));
    assert_eq!(run.u64("devices"), DEVICES);
    assert_eq!(run.u64("alloc_delta"), 10 * MIB);
    assert_eq!(run.u64("vmm_granularity"), 2 * MIB);
    assert_eq!(run.u64("vmm_bad_size_error"), 1, "CUDA_ERROR_INVALID_VALUE");
    assert_eq!(run.u64("vmm_map_delta"), 4 * MIB);
    // Unmapping does not free physical memory; releasing the handle does.
    assert_eq!(run.u64("vmm_unmapped_delta"), 4 * MIB);
    assert_eq!(run.u64("vmm_released_delta"), 0);
    assert_eq!(run.u64("getproc_v2_matches"), 1);
    assert_eq!(run.u64("getproc_v1_differs"), 1);
    assert_eq!(run.u64("getproc_empty_error"), 500, "CUDA_ERROR_NOT_FOUND");
    assert_eq!(run.u64("getproc_empty_status"), 1, "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND");
    assert_eq!(run.u64("getproc_old_error"), 500);
    assert_eq!(run.u64("getproc_old_status"), 2, "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT");
}
