//! Real frameworks on the simulated driver under culedger: PyTorch 2.15 (NVIDIA's libcudart
//! 13.2) with each of its allocators, and CuPy 14.2, each compared with the framework's own
//! accounting. The wheels come from `scripts/fetch-frameworks.sh` (`make test` runs it) into
//! `target/frameworks/site`; without network the tests skip with the script's one line.

use culedger_scenarios::reports::{libculedger, only_report, report_of_pid, reports_in};
use culedger_scenarios::{repo_root, Sim};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// The installed frameworks, or None (after one line saying why) when they could not be fetched.
fn frameworks() -> Option<PathBuf> {
    let base = repo_root().join("target/frameworks");
    let site = base.join("site");
    if site.join("torch/__init__.py").is_file() && site.join("cupy/__init__.py").is_file() {
        return Some(site);
    }
    match std::fs::read_to_string(base.join("unavailable")) {
        Ok(reason) => {
            eprintln!("skipped: real-framework test: {}", reason.trim());
            None
        }
        Err(_) => panic!("{} missing: run scripts/fetch-frameworks.sh (make test runs it)", site.display()),
    }
}

/// A 2-device machine with a 13.2 driver and the frameworks on `PYTHONPATH`, without culedger:
/// a failure here is the fake's (or the framework's), not culedger's.
fn bare_machine(test: &str, site: &PathBuf) -> Sim {
    let mut sim = Sim::new(test);
    sim.env("FAKECUDA_DRIVER_VERSION", "13020")
        .env("FAKECUDA_DEVICES", "2")
        .env("FAKECUDA_TOTAL_MIB", "81920")
        .env("PYTHONPATH", site)
        .timeout(Duration::from_secs(600));
    sim
}

/// [`bare_machine`] with culedger preloaded.
fn machine(test: &str, site: &PathBuf) -> (Sim, PathBuf) {
    let mut sim = bare_machine(test, site);
    let out = sim.scratch().join("out");
    sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out);
    (sim, out)
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn dev0(r: &Value) -> &Value {
    r["devices"].as_array().unwrap().iter().find(|d| d["index"] == 0).expect("device 0 in the report")
}

/// The Python functions of a site, innermost first.
fn site_functions(r: &Value, id: &Value) -> Vec<String> {
    let site = r["sites"].as_array().unwrap().iter().find(|s| &s["id"] == id).expect("site listed");
    site["python"].as_array().unwrap().iter().map(|f| f["function"].as_str().unwrap().to_string()).collect()
}

/// Runs torch_alloc.py with `conf` as PYTORCH_CUDA_ALLOC_CONF: (torch's figures, the report).
fn torch_run(test: &str, conf: &str) -> Option<(Value, Value)> {
    let site = frameworks()?;
    let (mut sim, out) = machine(test, &site);
    if !conf.is_empty() {
        sim.env("PYTORCH_CUDA_ALLOC_CONF", conf);
    }
    let figures = sim.scratch().join("torch.json");
    sim.run_ok(sim.python("frameworks/torch_alloc.py").arg(&figures));
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&figures).unwrap()).unwrap();
    Some((t, only_report(&out)))
}

/// What every allocator shares: the probe records what torch was told, the callers of the
/// device's sites are the script's functions, not torch's plumbing.
fn common_checks(t: &Value, r: &Value) {
    let d = dev0(r);
    let probe = &d["probes"].as_array().unwrap()[0];
    assert_eq!(probe["api"], "cudaMemGetInfo");
    assert_eq!(
        (n(&probe["free_bytes"]), n(&probe["total_bytes"])),
        (n(&t["free"]), n(&t["total"])),
        "what torch was told"
    );
    assert!(site_functions(r, &probe["site"]).contains(&"probe_free_memory".to_string()), "{probe}");
    let callers: Vec<&str> = d["sites"].as_array().unwrap().iter().filter_map(|a| a["caller"].as_str()).collect();
    assert!(
        callers.contains(&"torch_alloc.py:load_weights") && callers.contains(&"torch_alloc.py:run_step"),
        "{callers:?}"
    );
    assert!(callers.iter().all(|c| c.starts_with("torch_alloc.py:")), "{callers:?}");
    assert_eq!(n(&r["health"]["lost_events"]), 0);
}

/// The caching allocator (cudaMalloc segments): live == memory_reserved(), peak ==
/// max_memory_reserved(), every segment of memory_snapshot() a live allocation at its address
/// with its size, and empty_cache()'s free recorded.
#[test]
fn torch_caching_allocator_matches_torch() {
    let Some((t, r)) = torch_run("fw_torch_native", "") else { return };
    assert_eq!(t["allocator"], "native");
    let d = dev0(&r);
    assert_eq!(n(&d["live_bytes"]), n(&t["reserved"]), "live == torch.cuda.memory_reserved()");
    assert_eq!(n(&d["peak_bytes"]), n(&t["max_reserved"]), "peak == torch.cuda.max_memory_reserved()");
    let live: Vec<(u64, u64)> = d["top_allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (u64::from_str_radix(a["ptr"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap(), n(&a["bytes"]))
        })
        .collect();
    let segments = t["segments"].as_array().unwrap();
    assert!(!segments.is_empty());
    for s in segments {
        let seg = (n(&s["address"]), n(&s["total_size"]));
        assert!(live.contains(&seg), "segment {seg:x?} is not a live allocation of the report: {live:x?}");
    }
    assert_eq!(live.len(), segments.len(), "no live allocation the snapshot does not know");
    assert!(n(&t["reserved_before_empty_cache"]) > n(&t["reserved"]), "empty_cache() gave a segment back");
    assert_eq!(n(&d["free_count"]), 1, "the freed activation segment");
    common_checks(&t, &r);
}

/// Expandable segments (VMM through torch's driver table, NVML loaded): live ==
/// memory_reserved(), peak == max_memory_reserved(), and the physical chunks add up to the
/// snapshot's segments (the report's VMM records are handles, not addresses).
#[test]
fn torch_expandable_segments_match_torch() {
    let Some((t, r)) = torch_run("fw_torch_expandable", "expandable_segments:True") else { return };
    let d = dev0(&r);
    assert_eq!(n(&d["live_bytes"]), n(&t["reserved"]), "live == torch.cuda.memory_reserved()");
    assert_eq!(n(&d["peak_bytes"]), n(&t["max_reserved"]), "peak == torch.cuda.max_memory_reserved()");
    let mapped: u64 = t["segments"].as_array().unwrap().iter().map(|s| n(&s["total_size"])).sum();
    assert_eq!(mapped, n(&d["live_bytes"]), "the snapshot's segments are what is mapped");
    assert!(d["top_allocations"].as_array().unwrap().iter().all(|a| a["kind"] == "vmm_physical"));
    assert!(n(&d["free_count"]) > 0, "empty_cache() unmapped and released chunks");
    common_checks(&t, &r);
}

/// cudaMallocAsync: the pool's allocations are torch's requests, so the probe's live bytes are
/// memory_allocated() at that moment and the peak is max_memory_allocated(); the pool's
/// reserved bytes are the driver's own (granule-rounded) figure. The tensors torch frees at
/// interpreter exit go back to the driver, so the final live figure is not compared.
#[test]
fn torch_cuda_malloc_async_matches_torch() {
    let Some((t, r)) = torch_run("fw_torch_async", "backend:cudaMallocAsync") else { return };
    assert_eq!(t["allocator"], "cudaMallocAsync");
    let d = dev0(&r);
    let probe = &d["probes"].as_array().unwrap()[0];
    assert_eq!(n(&probe["live_bytes"]), n(&t["allocated"]), "live at the probe == torch.cuda.memory_allocated()");
    assert_eq!(n(&d["peak_bytes"]), n(&t["max_allocated"]), "peak == torch.cuda.max_memory_allocated()");
    assert!(n(&t["reserved"]) >= n(&t["allocated"]));
    common_checks(&t, &r);
}

/// `torch.cuda.graph` capture: the segments of the graph's private pool (allocated while the
/// capture is active) land in `graphs`, the instantiation is a measured driver cost, and live
/// is still memory_reserved().
#[test]
fn torch_graph_capture_lands_in_graphs() {
    let Some(site) = frameworks() else { return };
    let (sim, out) = machine("fw_torch_graph", &site);
    let figures = sim.scratch().join("graph.json");
    sim.run_ok(sim.python("frameworks/torch_graph.py").arg(&figures));
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&figures).unwrap()).unwrap();
    let r = only_report(&out);
    let d = dev0(&r);
    assert_eq!(n(&d["live_bytes"]), n(&t["reserved"]), "live == torch.cuda.memory_reserved()");
    assert_eq!(n(&d["peak_bytes"]), n(&t["max_reserved"]));
    let pool = n(&t["reserved"]) - n(&t["reserved_before"]);
    assert!(pool > 0);
    assert_eq!(n(&d["categories"]["graphs"]["live_bytes"]), pool, "the graph pool's segments: {}", d["categories"]);
    assert_eq!((n(&d["graphs"]["captures"]), n(&d["graphs"]["instantiations"])), (1, 1), "{}", d["graphs"]);
    assert_eq!(n(&d["graphs"]["captured_bytes"]), pool);
    let inst = d["driver_costs"].as_array().unwrap().iter().find(|c| c["api"] == "cudaGraphInstantiateWithFlags");
    assert_eq!(inst.map(|c| n(&c["bytes"])), Some(16 << 20), "FAKECUDA_GRAPH_MIB: {}", d["driver_costs"]);
}

/// CuPy's default pool: live == MemoryPool.total_bytes(), each kept array inside a live
/// allocation, and the caller the script's function, not CuPy's `cupy/_creation/basic.py:empty`.
#[test]
fn cupy_pool_matches_cupy() {
    let Some(site) = frameworks() else { return };
    let (sim, out) = machine("fw_cupy", &site);
    let figures = sim.scratch().join("cupy.json");
    sim.run_ok(sim.python("frameworks/cupy_alloc.py").arg(&figures));
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&figures).unwrap()).unwrap();
    let r = only_report(&out);
    let d = dev0(&r);
    assert_eq!(n(&t["runtime"]), 13020, "NVIDIA's runtime, not the fake one");
    assert_eq!(n(&d["live_bytes"]), n(&t["total_bytes"]), "live == MemoryPool.total_bytes()");
    let allocs = d["top_allocations"].as_array().unwrap();
    for a in t["arrays"].as_array().unwrap() {
        let ptr = n(&a["ptr"]);
        let holder = allocs.iter().find(|x| {
            let base = u64::from_str_radix(x["ptr"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
            ptr >= base && ptr + n(&a["nbytes"]) <= base + n(&x["bytes"])
        });
        let holder = holder.unwrap_or_else(|| panic!("array at {ptr:#x} is in no live allocation: {allocs:?}"));
        assert_eq!(holder["caller"], "cupy_alloc.py:make_buffers");
    }
    assert!(allocs.iter().any(|a| a["caller"] == "cupy_alloc.py:scratch"), "the pooled temporary stays live");
}

/// The innermost Python frame of a site outside PyTorch and the interpreter's own files, as
/// `file:function` with the file's basename (docs/schema.md, "The short form").
fn short_caller(r: &Value, id: &Value) -> Option<String> {
    let site = r["sites"].as_array().unwrap().iter().find(|s| &s["id"] == id).expect("site listed");
    site["python"].as_array().unwrap().iter().find_map(|f| {
        let file = f["file"].as_str().unwrap();
        let own = file.contains("/torch/") || file.contains("/lib/python3") || file.starts_with('<');
        (!own).then(|| format!("{}:{}", file.rsplit('/').next().unwrap(), f["function"].as_str().unwrap()))
    })
}

/// CUDA IPC through `torch.multiprocessing` (spawn): torch's `_share_cuda_` exports the caching
/// allocator's block (cudaIpcGetMemHandle on the segment's base, with an interprocess event,
/// cudaIpcGetEventHandle) and the spawned consumer opens both (cudaIpcOpenMemHandle,
/// cudaIpcOpenEventHandle, a stream wait). The exporter's segment is in `ipc` (rule
/// `ipc.exported`) with the bytes memory_snapshot() gives its block; the consumer records the
/// import of exactly that many bytes, never in its own live bytes, opened from the script's
/// function and closed when the tensor died.
#[test]
fn torch_multiprocessing_ipc_lands_in_ipc() {
    let Some(site) = frameworks() else { return };
    let (sim, out) = machine("fw_torch_ipc", &site);
    let figures = sim.scratch().join("ipc.json");
    sim.run_ok(sim.python("frameworks/torch_ipc.py").arg(&figures));
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&figures).unwrap()).unwrap();
    assert_eq!(reports_in(&out).len(), 2, "the exporter's report and the consumer's");
    let segment = n(&t["segment_bytes"]);
    assert_eq!(n(&t["consumer"]["nbytes"]), n(&t["tensor_bytes"]), "the consumer got the whole tensor");

    let e = report_of_pid(&out, n(&t["exporter_pid"]) as u32);
    let d = dev0(&e);
    let held = d["top_allocations"].as_array().unwrap().iter().find(|a| {
        u64::from_str_radix(a["ptr"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
            == n(&t["segment_address"])
    });
    let held = held.unwrap_or_else(|| panic!("the tensor's segment is no live allocation: {}", d["top_allocations"]));
    assert_eq!(n(&held["bytes"]), segment, "the segment memory_snapshot() gives the tensor's block");
    assert_eq!(
        (&held["category"], &held["rule"], &held["exported"]),
        (&"ipc".into(), &"ipc.exported".into(), &true.into())
    );
    assert_eq!(held["caller"], "torch_ipc.py:export_tensor");
    assert_eq!(n(&d["categories"]["ipc"]["live_bytes"]), segment);
    assert_eq!((n(&d["ipc"]["exported_count"]), n(&d["ipc"]["exported_bytes"])), (1, segment), "{}", d["ipc"]);
    let exports: Vec<&Value> = d["events"].as_array().unwrap().iter().filter(|v| v["kind"] == "ipc_export").collect();
    assert_eq!(exports.len(), 1, "{exports:?}");
    assert_eq!((&exports[0]["api"], n(&exports[0]["bytes"])), (&"cudaIpcGetMemHandle".into(), segment));
    assert_eq!(n(&d["live_bytes"]), n(&t["reserved"]), "live == torch.cuda.memory_reserved()");
    assert_eq!(n(&e["health"]["lost_events"]), 0);

    let c = report_of_pid(&out, n(&t["consumer"]["pid"]) as u32);
    let d = dev0(&c);
    let ipc = &d["ipc"];
    assert_eq!((n(&ipc["imported_count"]), n(&ipc["imported_bytes"])), (1, segment), "{ipc}");
    assert_eq!(
        (n(&ipc["imported_live_count"]), n(&ipc["imported_live_bytes"])),
        (0, 0),
        "closed with the tensor: {ipc}"
    );
    assert_eq!(n(&ipc["exported_count"]), 0);
    assert_eq!(n(&d["categories"]["ipc"]["live_bytes"]), 0, "another process's memory is not the consumer's");
    assert!(n(&d["peak_bytes"]) < segment, "the import never counted in the consumer's bytes: {}", d["peak_bytes"]);
    let imports: Vec<&Value> = d["events"].as_array().unwrap().iter().filter(|v| v["kind"] == "ipc_import").collect();
    assert_eq!(imports.len(), 1, "{imports:?}");
    assert_eq!((&imports[0]["api"], n(&imports[0]["bytes"])), (&"cudaIpcOpenMemHandle".into(), segment));
    let open = d["driver_costs"].as_array().unwrap().iter().find(|c| c["api"] == "cudaIpcOpenMemHandle");
    let open = open.unwrap_or_else(|| panic!("the open's mapping cost: {}", d["driver_costs"]));
    assert_eq!(n(&open["bytes"]), 2 << 20, "FAKECUDA_IPC_OPEN_MIB");
    let callers: Vec<Option<String>> =
        open["sites"].as_array().unwrap().iter().map(|id| short_caller(&c, id)).collect();
    assert_eq!(callers, [Some("torch_ipc.py:sum_tensor".to_string())], "the open happens in the consumer's unpickling");
    assert_eq!(n(&c["health"]["lost_events"]), 0);
}

/// The sizes of NCCL's `NCCL_DEBUG=INFO` allocation lines of one kind (`"Cuda Host Alloc"`:
/// `ncclCudaHostCallocDebug` in NCCL's src/include/alloc.h, one line per buffer).
fn nccl_sizes(log: &str, kind: &str) -> Vec<u64> {
    let key = format!(") {kind} Size ");
    log.lines()
        .filter_map(|l| l.split_once(&key))
        .map(|(_, rest)| rest.split_whitespace().next().and_then(|s| s.parse().ok()).expect("a size"))
        .collect()
}

/// torch.distributed with NVIDIA's NCCL 2.30 at world size 1: the communicator's device memory
/// (cuMem through NCCL's ncclCuMemAlloc, called from ncclCommInitRank's init and devCommSetup)
/// lands in `comm` by the rule `comm.collective_libraries` (frames in libnccl.so.2; its internal
/// functions carry no symbols), is what the simulated device's used bytes grew by and gave back
/// with destroy_process_group; its pinned buffers (cudaHostAlloc, NCCL's ncclCudaHostCalloc) are
/// the host ledger's pinned figures, to the byte NCCL logs; and the host-located cuMem of NCCL's
/// ncclCuMemHostEnable probe (src/misc/cudawrap.cc: one granule created and released) is the
/// host ledger's VMM figures, never device memory.
#[test]
fn torch_nccl_world_size_1_lands_in_comm() {
    let Some(site) = frameworks() else { return };
    let (mut sim, out) = machine("fw_torch_nccl", &site);
    sim.env("NCCL_DEBUG", "INFO").env("NCCL_DEBUG_SUBSYS", "INIT,ALLOC,ALLOC_HOST");
    let figures = sim.scratch().join("nccl.json");
    let store = sim.scratch().join("store");
    let run = sim.run_ok(sim.python("frameworks/torch_nccl.py").arg(&figures).arg(&store));
    let log = format!("{}{}", run.stdout, run.stderr);
    assert!(log.contains("Init COMPLETE"), "NCCL's init finished: {log}");
    assert!(!log.contains("cuMem host allocations do not appear to be working"), "host cuMem accepted");
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&figures).unwrap()).unwrap();
    let r = only_report(&out);
    let d = dev0(&r);
    let comm = &d["categories"]["comm"];
    let held = n(&t["used_after"]) - n(&t["used_destroyed"]);
    assert!(held > 0);
    assert_eq!(n(&comm["peak_bytes"]), held, "what the communicator held and gave back: {comm}");
    assert_eq!(n(&comm["live_bytes"]), 0, "destroy_process_group freed it");
    assert_eq!(n(&t["reserved"]), n(&t["reserved_before"]), "no torch segment in between");
    assert_eq!(n(&d["peak_bytes"]), n(&t["reserved"]) + held, "torch's segment and the communicator");
    let comm_sites: Vec<&Value> = d["sites"].as_array().unwrap().iter().filter(|s| s["category"] == "comm").collect();
    assert!(!comm_sites.is_empty());
    for s in &comm_sites {
        assert_eq!(s["rule"], "comm.collective_libraries", "{s}");
        assert_eq!(s["caller"], "torch_nccl.py:make_communicator", "{s}");
    }
    let pinned = nccl_sizes(&log, "Cuda Host Alloc");
    assert!(!pinned.is_empty(), "NCCL logged its pinned buffers");
    let h = &r["host"];
    assert_eq!(n(&h["pinned_peak_bytes"]), pinned.iter().sum::<u64>(), "NCCL's Cuda Host Alloc lines: {h}");
    assert_eq!((n(&h["pinned_alloc_count"]), n(&h["pinned_free_count"])), (pinned.len() as u64, pinned.len() as u64));
    assert_eq!(n(&h["pinned_live_bytes"]), 0);
    assert_eq!(
        (n(&h["vmm_create_count"]), n(&h["vmm_release_count"]), n(&h["vmm_peak_bytes"]), n(&h["vmm_live_bytes"])),
        (1, 1, 2 << 20, 0),
        "the probe: 1 byte aligned to the fake's 2 MiB granularity, created and released"
    );
    assert_eq!(n(&r["health"]["lost_events"]), 0);
}

/// NVIDIA's cuBLAS 13.4 and cuBLASLt under real torch: the GEMMs of an engine's forward pass
/// (`torch.mm` fp32 and bf16, `F.linear` with a bias in bf16 and fp32, a batched `torch.matmul`)
/// return, first without culedger (a failure there is the fake driver's: before it had the
/// occupancy queries, the globals, the linker, the private tables cuBLASLt reads and the
/// CIG limit, `cublasCreate` failed or `cublasGemmEx` answered NOT_SUPPORTED), then under it
/// with the same results. cuBLAS's workspace is a segment of torch's caching allocator made by
/// the first GEMM (its caller the script's forward pass), every snapshot segment a live
/// allocation; what else is live is cuBLAS's and cuBLASLt's own device memory (their static
/// runtime's cudaMalloc, reaching the driver as `cuMemAlloc_v2`), which torch does not count:
/// live == memory_reserved() + those.
#[test]
fn torch_gemms_run_on_cublas() {
    let Some(site) = frameworks() else { return };
    let plain = bare_machine("fw_torch_gemm_plain", &site);
    let plain_figures = plain.scratch().join("gemm.json");
    plain.run_ok(plain.python("frameworks/torch_gemm.py").arg(&plain_figures));
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&plain_figures).unwrap()).unwrap();
    let expected = serde_json::json!({
        "mm_fp32": [[64, 128], "float32"],
        "mm_bf16": [[64, 128], "bfloat16"],
        "linear_bf16": [[64, 384], "bfloat16"],
        "linear_fp32": [[64, 256], "float32"],
        "matmul_batched": [[8, 64, 16], "float32"],
    });
    assert_eq!(p["shapes"], expected, "without culedger");
    assert_eq!(p["blas_handle"], true);

    let (sim, out) = machine("fw_torch_gemm", &site);
    let figures = sim.scratch().join("gemm.json");
    sim.run_ok(sim.python("frameworks/torch_gemm.py").arg(&figures));
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&figures).unwrap()).unwrap();
    assert_eq!(t["shapes"], expected, "under culedger");
    assert_eq!(t["reserved"], p["reserved"], "torch's memory is the same under culedger");
    let r = only_report(&out);
    let d = dev0(&r);
    // (address, bytes, caller, api) of each live allocation.
    let live: Vec<(u64, u64, String, String)> = d["top_allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let ptr = u64::from_str_radix(a["ptr"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
            let text = |k: &str| a[k].as_str().unwrap_or("").to_string();
            (ptr, n(&a["bytes"]), text("caller"), text("api"))
        })
        .collect();
    let segments: Vec<(u64, u64)> =
        t["segments"].as_array().unwrap().iter().map(|s| (n(&s["address"]), n(&s["total_size"]))).collect();
    for seg in &segments {
        assert!(live.iter().any(|a| (a.0, a.1) == *seg), "segment {seg:x?} is no live allocation: {live:x?}");
    }
    let workspace = live.iter().find(|a| a.1 == 32 << 20 && segments.contains(&(a.0, a.1)));
    let workspace = workspace.unwrap_or_else(|| panic!("cuBLAS's 32 MiB workspace segment: {live:x?}"));
    assert_eq!(workspace.2, "torch_gemm.py:forward", "made by the first GEMM");
    let own: Vec<&(u64, u64, String, String)> = live.iter().filter(|a| !segments.contains(&(a.0, a.1))).collect();
    assert!(!own.is_empty() && own.iter().all(|a| a.3 == "cuMemAlloc_v2"), "cuBLAS's own memory: {own:x?}");
    let own_bytes: u64 = own.iter().map(|a| a.1).sum();
    assert_eq!(n(&d["live_bytes"]), n(&t["reserved"]) + own_bytes, "torch's segments and cuBLAS's own: {live:x?}");
    assert!(d["failures"].as_array().unwrap().is_empty(), "{}", d["failures"]);
    assert_eq!(n(&r["health"]["lost_events"]), 0);
}

/// torch.topk, as vLLM 0.33's sampler runs it in its profile run: torch sizes its grid from the
/// SM count, registers per SM and blocks per SM and divides by them (TensorTopK.cu
/// get_items_per_thread). Before the fake answered MAX_REGISTERS_PER_MULTIPROCESSOR (65536 on an
/// H100), torch read 0 and the process died of SIGFPE (the real vLLM server's workers did).
#[test]
fn torch_topk_sizes_its_grid_from_the_device() {
    let Some(site) = frameworks() else { return };
    let sim = bare_machine("fw_torch_topk", &site);
    let run = sim.run_ok(&mut sim.python("frameworks/torch_topk.py"));
    assert_eq!(run.u64("regs_per_sm"), 65536);
    assert_eq!(run.u64("sms"), 132);
    assert_eq!(run.value("topk"), "256x5");
}

/// A runtime holds memory only on the devices it used: PyTorch's own test_cuda_primary_ctx.py
/// (no primary context active after `torch.cuda.device_count()`; a tensor on `cuda:1` activates
/// `cuda:1`'s only), with what the simulated machine charged each device (the fake's trace of
/// every change of usage). NVIDIA's runtime 13.2 asks the driver for every device's primary
/// context as it initialises (CUDART_INTERFACE slot 2); the fake committed 512 MiB on each
/// there, so every process of the real SGLang --tp 8 server held a context on all eight GPUs
/// (4.00 GiB unnamed on each, from processes that never used the device).
#[test]
fn torch_holds_a_context_only_on_the_device_it_uses() {
    let Some(site) = frameworks() else { return };
    let mut sim = bare_machine("fw_torch_primary_ctx", &site);
    let trace = sim.scratch().join("trace");
    sim.env("FAKECUDA_TRACE", &trace).env("FAKECUDA_TRACE_CHARGES", "1");
    let run = sim.run_ok(&mut sim.python("frameworks/torch_primary_ctx.py"));
    assert_eq!(run.u64("devices"), 2);
    assert_eq!(run.value("after_init"), "0,0", "no context after device_count");
    assert_eq!(run.value("after_tensor"), "0,1", "a context on cuda:1 only");
    // usage +<bytes>|-<bytes> dev <ordinal> by <entry point> ...: charged per device.
    let text = std::fs::read_to_string(&trace).unwrap();
    let mut charged = [0u64; 2];
    for w in text.lines().filter(|l| l.starts_with("usage +")).map(|l| l.split_whitespace().collect::<Vec<_>>()) {
        charged[w[3].parse::<usize>().unwrap()] += w[1][1..].parse::<u64>().unwrap();
    }
    assert_eq!(charged[0], 0, "nothing on the device never used:\n{text}");
    assert!(charged[1] >= 512 << 20, "cuda:1's context: {charged:?}");
}

/// The lines of NCCL's INFO log (`host:pid:tid [rank] NCCL INFO ...`) written by one process.
fn nccl_lines_of(log: &str, pid: u64) -> impl Iterator<Item = &str> {
    log.lines().filter(move |l| {
        let prefix = l.split_whitespace().next().unwrap_or("");
        prefix.rsplit(':').nth(1).and_then(|p| p.parse::<u64>().ok()) == Some(pid)
    })
}

/// NCCL's "SHM legacy" lines of one process: the size of each buffer it shared with its device
/// through cudaHostRegister + cudaHostGetDevicePointer (NCCL's src/transport/shm.cc).
fn nccl_shm_buffers(log: &str, pid: u64) -> Vec<u64> {
    nccl_lines_of(log, pid)
        .filter(|l| l.contains("SHM legacy: sharing buffer with GPU"))
        .map(|l| l.rsplit("size ").next().and_then(|s| s.trim_end_matches(')').parse().ok()).expect("a size"))
        .collect()
}

/// `frameworks/torch_nccl_shm.py` (two NCCL ranks on two devices, peer access off) with NCCL's
/// log on and `cumem` as NCCL_CUMEM_ENABLE: first without culedger (a failure there is the
/// fake's), then under it. Returns the log of the run under culedger and the reports of its two
/// ranks, after checking that both runs connected through shared memory and both ranks finished.
fn two_nccl_ranks_over_shm(name: &str, site: &PathBuf, cumem: &str, subsys: &str) -> (String, Vec<Value>) {
    let setup = |sim: &mut Sim| {
        sim.env("NCCL_DEBUG", "INFO")
            .env("NCCL_DEBUG_SUBSYS", subsys)
            .env("NCCL_CUMEM_ENABLE", cumem)
            .env("NCCL_P2P_DISABLE", "1");
    };
    let run_shm = |sim: &Sim| {
        let run =
            sim.run_ok(sim.python("frameworks/torch_nccl_shm.py").arg(sim.scratch().join("o.json")).arg(sim.scratch().join("s")));
        let log = format!("{}{}", run.stdout, run.stderr);
        assert!(log.contains("via SHM/direct"), "the channels connect through shared memory: {log}");
        assert_eq!(run.u64("ranks_done"), 2);
        log
    };
    let mut plain = bare_machine(&format!("{name}_plain"), site);
    setup(&mut plain);
    let plain_log = run_shm(&plain);
    if cumem == "1" {
        assert!(plain_log.contains("CUMEM Host Alloc Size "), "host-located cuMem: {plain_log}");
    }
    let (mut sim, out) = machine(name, site);
    setup(&mut sim);
    let log = run_shm(&sim);
    let ranks: Vec<Value> = reports_in(&out)
        .into_iter()
        .map(|(_, r)| r)
        .filter(|r| r["devices"].as_array().is_some_and(|d| !d.is_empty()))
        .collect();
    assert_eq!(ranks.len(), 2, "one report per rank with a device");
    (log, ranks)
}

/// NCCL 2.30 between two ranks on two simulated devices through its shared-memory transport, as
/// SGLang runs it by default (NCCL_CUMEM_ENABLE=0) when peer access is off: each rank maps
/// /dev/shm segments into its device with cudaHostRegister(Portable | Mapped) and
/// cudaHostGetDevicePointer. Before the fake had cuMemHostGetDevicePointer, NCCL failed ("Error
/// while creating shared memory segment") and so did the ranks. Without culedger (a failure there
/// is the fake's), then under it: every channel connects "via SHM", both ranks finish, and each
/// rank's report holds exactly the registrations NCCL logged (count and bytes), all undone.
#[test]
fn torch_nccl_two_ranks_over_shared_memory() {
    let Some(site) = frameworks() else { return };
    let (log, ranks) = two_nccl_ranks_over_shm("fw_nccl_shm", &site, "0", "INIT,ALLOC");
    for r in &ranks {
        let buffers = nccl_shm_buffers(&log, n(&r["process"]["pid"]));
        assert!(!buffers.is_empty(), "NCCL logged its shared buffers for {}", r["process"]["pid"]);
        let h = &r["host"];
        assert_eq!(n(&h["registered_count"]), buffers.len() as u64, "{h}");
        assert_eq!(n(&h["registered_peak_bytes"]), buffers.iter().sum::<u64>(), "{h}");
        assert_eq!((n(&h["unregistered_count"]), n(&h["registered_live_bytes"])), (buffers.len() as u64, 0), "{h}");
        assert_eq!(n(&r["health"]["lost_events"]), 0);
    }
}

/// The sizes of NCCL's "CUMEM Host Alloc" lines of one process (`ncclCuMemHostAllocDebug` in
/// NCCL's src/include/alloc.h: host-located cuMem, CU_MEM_LOCATION_TYPE_HOST_NUMA).
fn nccl_cumem_host_allocs(log: &str, pid: u64) -> Vec<u64> {
    nccl_lines_of(log, pid)
        .filter(|l| l.contains("CUMEM Host Alloc Size "))
        .map(|l| {
            l.split("CUMEM Host Alloc Size ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
                .expect("a size")
        })
        .collect()
}

/// NCCL 2.30 between two ranks with its cuMem allocator on (NCCL_CUMEM_ENABLE=1, as SGLang and
/// vLLM ranks often run it) and peer access off: the shared-memory transport's buffers are
/// host-located cuMem (ncclCuMemHostAlloc: CU_MEM_LOCATION_TYPE_HOST_NUMA) exported to the peer
/// with cuMemExportToShareableHandle. Before culedger treated such an export as host memory,
/// every rank lost its exports ("cuMemExportToShareableHandle: device ordinal -1 is outside
/// 0..64"). Without culedger (a failure there is the fake's), then under it: both ranks finish,
/// no event is lost, no device holds host memory, and each rank's host VMM figures are NCCL's
/// own "CUMEM Host Alloc" lines (count and bytes) plus its one-granule probe, all released.
/// Failed on main before the fix: 8 events lost per rank.
#[test]
fn torch_nccl_two_ranks_over_cumem_host_memory() {
    let Some(site) = frameworks() else { return };
    let (log, ranks) = two_nccl_ranks_over_shm("fw_nccl_cumem", &site, "1", "ALL");
    for r in &ranks {
        let pid = n(&r["process"]["pid"]);
        let allocs = nccl_cumem_host_allocs(&log, pid);
        let h = &r["host"];
        assert!(!allocs.is_empty(), "NCCL logged its host cuMem for {pid}");
        assert_eq!(n(&r["health"]["lost_events"]), 0, "{}", r["health"]);
        assert_eq!(n(&h["vmm_create_count"]), allocs.len() as u64 + 1, "NCCL's allocations and its probe: {h}");
        assert_eq!(
            n(&h["vmm_peak_bytes"]),
            allocs.iter().sum::<u64>(),
            "all live at once (the probe was released): {h}"
        );
        assert_eq!((n(&h["vmm_release_count"]), n(&h["vmm_live_bytes"])), (allocs.len() as u64 + 1, 0), "{h}");
        for d in r["devices"].as_array().unwrap() {
            assert!(d["failures"].as_array().unwrap().is_empty(), "{}", d["failures"]);
        }
    }
}

/// Real PyTorch's first kernels under lazy module loading: NVIDIA's runtime (13.2) loads torch's
/// fatbins with cuLibraryLoadData before any context (0 B), and the simulated driver takes each
/// library's memory where one of its kernels is first launched, as a real driver with
/// CUDA_MODULE_LOADING=LAZY does. Without culedger (a failure there is the fake's), the device's
/// used memory grows at each first operation by more than torch reserved, and not at their
/// repeat; under culedger the program sees the same, and the report names that memory: driver
/// costs of libtorch_cuda.so first used by a launch, summing to exactly what the driver took.
#[test]
fn torch_first_kernels_name_their_library() {
    let Some(site) = frameworks() else { return };
    let took = |t: &Value| -> Vec<(String, u64)> {
        t["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["name"].as_str().unwrap().to_string(), n(&s["used"]) - n(&s["reserved"])))
            .collect()
    };
    let plain = bare_machine("fw_torch_lazy_plain", &site);
    let figures = plain.scratch().join("lazy.json");
    plain.run_ok(plain.python("frameworks/torch_lazy.py").arg(&figures));
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&figures).unwrap()).unwrap();
    let driver = took(&p);
    assert!(driver[..3].iter().all(|(_, b)| *b > 0), "each first operation loads a library: {driver:?}");
    assert_eq!(driver[3].1, 0, "their repeat loads nothing: {driver:?}");

    let (sim, out) = machine("fw_torch_lazy", &site);
    let figures = sim.scratch().join("lazy.json");
    sim.run_ok(sim.python("frameworks/torch_lazy.py").arg(&figures));
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&figures).unwrap()).unwrap();
    assert_eq!(took(&t), driver, "the program sees the same under culedger");
    let r = only_report(&out);
    let lazy: Vec<&Value> =
        dev0(&r)["driver_costs"].as_array().unwrap().iter().filter(|c| c["library"].is_string()).collect();
    assert!(!lazy.is_empty(), "{}", dev0(&r)["driver_costs"]);
    for c in &lazy {
        assert_eq!(c["library"], "libtorch_cuda.so", "{c}");
        assert!(c["api"].as_str().unwrap().starts_with("cuLaunchKernel"), "a launch loaded it: {c}");
    }
    let named: u64 = lazy.iter().map(|c| n(&c["bytes"])).sum();
    assert_eq!(named, driver.iter().map(|(_, b)| b).sum::<u64>(), "what the driver took, named: {lazy:?}");
    assert_eq!(n(&r["health"]["lost_events"]), 0);
}
