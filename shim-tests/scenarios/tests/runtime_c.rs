//! The C scenarios on the fake runtime + driver: allocation, copies, strict errors, OOM, pinned and
//! managed memory, graphs, the per-thread default stream, threads, and cross-process IPC/usage.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::*;
use culedger_scenarios::{elf, Results};

#[test]
fn basic_alloc_copy_errors_and_oom() {
    let sim = machine("rt_basic");
    let run = sim.run_ok(&mut sim.cmd("rt_basic"));
    assert_eq!(run.u64("runtime_version"), 12090);
    assert_eq!(run.u64("driver_version"), 12090);
    assert_eq!(run.u64("device_count"), DEVICES);
    assert_eq!(run.u64("init_error"), 0);
    assert_eq!(run.u64("total"), TOTAL_MIB * MIB);
    // 64 MiB + 3 MiB rounded up to 4 MiB; the context was charged before the first reading.
    assert_eq!(run.u64("alloc_delta"), 68 * MIB, "{}", run.describe());
    assert_eq!(run.u64("free0"), (TOTAL_MIB - CTX_MIB) * MIB);
    assert_eq!(run.u64("copy_ok"), 1);
    // OOM: the driver's CUDA_ERROR_OUT_OF_MEMORY becomes cudaErrorMemoryAllocation, the out
    // pointer is untouched, and the last error is returned once then cleared.
    assert_eq!(run.u64("oom_error"), err::MEMORY_ALLOCATION);
    assert_eq!(run.u64("oom_ptr_unchanged"), 1);
    assert_eq!(run.u64("oom_peek"), err::MEMORY_ALLOCATION);
    assert_eq!(run.u64("oom_last_error"), err::MEMORY_ALLOCATION);
    assert_eq!(run.u64("last_after_get"), 0);
    assert_eq!(run.value("oom_name"), "cudaErrorMemoryAllocation");
    // Strict validation through the runtime.
    assert_eq!(run.u64("bad_free_error"), err::INVALID_VALUE);
    assert_eq!(run.u64("double_free_error"), err::INVALID_VALUE);
    assert_eq!(run.u64("null_out_error"), err::INVALID_VALUE);
    assert_eq!(run.u64("bad_device_error"), err::INVALID_DEVICE);
    assert_eq!(run.u64("zero_size_ptr"), 0);
    // Everything freed: back to the post-context level.
    assert_eq!(run.u64("free_end"), run.u64("free0"));
    assert_eq!(run.u64("peer_error"), 0);
    assert_eq!(run.u64("peer_again_error"), err::PEER_ACCESS_ALREADY_ENABLED);
    assert_eq!(run.u64("peer_self_error"), err::INVALID_DEVICE);
    assert_eq!(run.u64("peer_flags_error"), err::INVALID_VALUE);
    assert_eq!(run.u64("reset_error"), 0);
    assert_eq!(run.u64("after_reset_ok"), 1);
}

#[test]
fn no_driver_is_an_error_not_a_crash() {
    let sim = machine("rt_nodriver");
    // A library directory with the runtime but without libcuda.so.1.
    let lonely = sim.scratch().join("lib");
    std::fs::create_dir_all(&lonely).unwrap();
    std::fs::copy(culedger_scenarios::lib_dir().join("libcudart.so.12"), lonely.join("libcudart.so.12")).unwrap();
    let mut cmd = sim.cmd("rt_basic");
    cmd.env("LD_LIBRARY_PATH", &lonely);
    let run = sim.run(&mut cmd);
    assert_eq!(run.status.and_then(|s| s.code()), Some(3), "{}", run.describe());
    assert_eq!(run.u64("init_error"), err::INSUFFICIENT_DRIVER);
    assert_eq!(run.u64("driver_version"), 0);
    assert_eq!(run.u64("runtime_version"), 12090);
    assert_eq!(run.u64("device_count"), 0);
    assert_eq!(run.u64("malloc_error"), err::INSUFFICIENT_DRIVER);
    assert_eq!(run.u64("last_error"), err::INSUFFICIENT_DRIVER);
    assert!(run.stderr.contains("libcuda.so.1"), "expected a one-line warning: {}", run.describe());
}

#[test]
fn driver_without_get_proc_address_is_refused() {
    let sim = machine("rt_baddriver");
    // A "libcuda.so.1" that loads but has no cuGetProcAddress_v2 (it is the runtime itself).
    let dir = sim.scratch().join("lib");
    std::fs::create_dir_all(&dir).unwrap();
    let rt = culedger_scenarios::lib_dir().join("libcudart.so.12");
    std::fs::copy(&rt, dir.join("libcudart.so.12")).unwrap();
    std::fs::copy(&rt, dir.join("libcuda.so.1")).unwrap();
    let mut cmd = sim.cmd("rt_basic");
    cmd.env("LD_LIBRARY_PATH", &dir);
    let run = sim.run(&mut cmd);
    assert_eq!(run.status.and_then(|s| s.code()), Some(3), "{}", run.describe());
    assert_eq!(run.u64("init_error"), err::INSUFFICIENT_DRIVER);
    assert_eq!(run.u64("malloc_error"), err::INSUFFICIENT_DRIVER);
    assert!(run.stderr.contains("cuGetProcAddress_v2"), "{}", run.describe());
}

#[test]
fn pinned_and_managed_memory() {
    let sim = machine("rt_pinned");
    let run = sim.run_ok(&mut sim.cmd("rt_pinned"));
    for key in ["host_alloc_ok", "host_alloc_mapped_ok", "register_ok", "managed_ok", "copy_ok"] {
        assert_eq!(run.u64(key), 1, "{key}\n{}", run.describe());
    }
    assert_eq!(run.u64("reregister_error"), err::HOST_MEMORY_ALREADY_REGISTERED);
    assert_eq!(run.u64("unregister_again_error"), err::HOST_MEMORY_NOT_REGISTERED);
    assert_eq!(run.u64("bad_free_host_error"), err::INVALID_VALUE);
    // Pinned host memory does not use device memory.
    assert_eq!(run.u64("device_delta_pinned"), 0);
}

#[test]
fn graph_capture_instantiate_launch_destroy() {
    let sim = machine("rt_graph");
    let run = sim.run_ok(&mut sim.cmd("rt_graph"));
    assert_eq!(run.u64("legacy_capture_error"), err::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(run.u64("capture_status"), 1, "cudaStreamCaptureStatusActive");
    assert_eq!(run.u64("graph_nonnull"), 1);
    assert_eq!(run.u64("legacy_handle_capture_error"), err::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(run.u64("per_thread_capture_error"), 0, "cudaStreamPerThread reaches the _ptsz entries");
    assert_eq!(run.u64("exchange_old_mode"), 0, "cudaStreamCaptureModeGlobal");
    assert!(run.u64("instantiate_delta") >= GRAPH_MIB * MIB, "{}", run.describe());
    assert_eq!(run.u64("launches"), 3);
    assert_eq!(run.u64("after_destroy_delta"), 0, "graph costs released");
}

#[test]
fn per_thread_default_stream_exports() {
    let sim = machine("rt_ptds");
    let run = sim.run_ok(&mut sim.cmd("rt_ptds"));
    for key in ["async_ok", "memcpy_ok", "entry_point_ok", "graph_launches"] {
        assert_eq!(run.u64(key), 1, "{key}\n{}", run.describe());
    }
    // NULL means the per-thread stream in the _ptsz exports; cudaStreamLegacy stays legacy.
    assert_eq!(run.u64("null_capture_error"), 0);
    assert_eq!(run.u64("legacy_capture_error"), err::STREAM_CAPTURE_UNSUPPORTED);
    // Compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM, the program imports the _ptsz/_ptds names.
    let info = elf::dyn_info(&culedger_scenarios::bin_dir().join("rt_ptds")).unwrap();
    for sym in [
        "cudaMallocAsync_ptsz",
        "cudaFreeAsync_ptsz",
        "cudaMemcpy_ptds",
        "cudaMemset_ptds",
        "cudaMemcpyAsync_ptsz",
        "cudaMemsetAsync_ptsz",
        "cudaStreamBeginCapture_ptsz",
        "cudaStreamEndCapture_ptsz",
        "cudaGraphLaunch_ptsz",
        "cudaGetDriverEntryPoint_ptsz",
        "cudaStreamSynchronize_ptsz",
    ] {
        assert!(info.undefined.iter().any(|s| s == sym), "rt_ptds does not import {sym}: {:?}", info.undefined);
    }
}

#[test]
fn threads_allocate_concurrently_without_leaks() {
    let sim = machine("rt_threads");
    let run = sim.run_ok(sim.cmd("rt_threads").args(["16", "100"]));
    assert_eq!(run.u64("threads"), 16);
    assert_eq!(run.u64("errors"), 0, "{}", run.describe());
    assert_eq!(run.u64("device_mismatch"), 0, "cudaSetDevice is thread-local");
    assert_eq!(run.u64("main_device"), 0);
    assert_eq!(run.u64("devices"), DEVICES);
    for d in 0..DEVICES {
        assert_eq!(run.value(&format!("leak_dev{d}")), "0", "{}", run.describe());
    }
}

#[test]
fn ipc_across_processes() {
    let sim = machine("rt_ipc");
    let run = sim.run_ok(&mut sim.cmd("rt_ipc"));
    assert_eq!(run.value("handle_hex").len(), 128);
    assert_ne!(run.u64("self_open_error"), 0, "the exporting process cannot open its own handle");
    assert_eq!(run.u64("garbage_open_error"), err::INVALID_RESOURCE_HANDLE);
    assert_eq!(run.u64("bad_flags_error"), err::INVALID_VALUE);
    assert_eq!(run.u64("child_status"), 0, "{}", run.describe());
    assert_eq!(run.u64("child_open_error"), 0, "{}", run.describe());
    assert_eq!(run.u64("child_device"), 1);
    assert_ne!(run.u64("child_ptr"), 0);
    assert_eq!(run.u64("child_close_error"), 0);
    assert_ne!(run.u64("child_close_again_error"), 0);
    // After the exporter freed the buffer, the handle is stale.
    assert_eq!(run.u64("stale_status"), 0);
    assert_eq!(run.u64("stale_open_error"), err::INVALID_RESOURCE_HANDLE);
}

/// Starts `rt_hold` and waits for its `ready` line; returns the child and its results so far.
fn hold(sim: &culedger_scenarios::Sim, args: &[&str]) -> (std::process::Child, Results) {
    let mut child = sim.cmd("rt_hold").args(args).stdin(Stdio::piped()).spawn().expect("start rt_hold");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    while !text.contains("RESULT ready=1") {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("rt_hold exited early: {text}");
        }
        text.push_str(&line);
    }
    (child, Results::parse(&text))
}

#[test]
fn usage_is_shared_across_processes() {
    let sim = machine("cross_process");
    let (mut a, ra) = hold(&sim, &["1000"]);
    assert_eq!(ra.get("free"), Some(((TOTAL_MIB - CTX_MIB - 1000) * MIB).to_string().as_str()));
    // A second process sees the first one's context and allocation, and cannot exceed the card.
    let left_mib = TOTAL_MIB - 2 * CTX_MIB - 1000 - 100;
    let (mut b, rb) = hold(&sim, &["100", &(left_mib + 10).to_string()]);
    assert_eq!(rb.get("free"), Some((left_mib * MIB).to_string().as_str()));
    assert_eq!(rb.get("try_error"), Some(err::MEMORY_ALLOCATION.to_string().as_str()));
    for child in [&mut a, &mut b] {
        drop(child.stdin.take()); // EOF: rt_hold frees and exits
        assert!(child.wait().unwrap().success());
    }
    // Both exited after freeing: a third process sees only its own context.
    let run = sim.run_ok(&mut sim.cmd("rt_basic"));
    assert_eq!(run.u64("free0"), (TOTAL_MIB - CTX_MIB) * MIB, "{}", run.describe());
}
