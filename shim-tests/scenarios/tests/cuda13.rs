//! CUDA 13 without a GPU: the resolver path at the versions 12.x and 13.x runtimes ask for,
//! NVIDIA's real `libcudart.so.13` (13.0.96, what PyTorch 2.11 installs, and 13.5.37) over the
//! fake driver answering as a 13.x driver, and programs built against the CUDA 13 headers.
//!
//! Needs `make` (which runs `make headers`: CUDA 12.9 and 13.x from PyPI into `target/`).

use culedger_scenarios::reports::{libculedger, only_report};
use culedger_scenarios::{elf, repo_root, Run, Sim};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

const MIB: u64 = 1 << 20;

/// Real runtimes with the driver version each is run on and its recorded resolution sequence.
const REAL_RUNTIMES: &[(&str, &str, &str)] = &[
    ("target/cuda-headers/lib/libcudart.so.12", "12090", "cudart-12.9.79.trace"),
    ("target/cuda13/13.0.96/lib/libcudart.so.13", "13000", "cudart-13.0.96.trace"),
    ("target/cuda13/13.5.37/lib/libcudart.so.13", "13050", "cudart-13.5.37.trace"),
];

fn fixture(name: &str) -> PathBuf {
    repo_root().join("shim-tests/fixtures/real-cudart").join(name)
}

/// A machine of `devices` 8 GiB devices whose driver reports `driver`; with `ledger`, programs
/// run under culedger and write into the returned directory.
fn machine(test: &str, driver: &str, ledger: bool) -> (Sim, PathBuf) {
    let mut sim = Sim::new(test);
    sim.env("FAKECUDA_DRIVER_VERSION", driver)
        .env("FAKECUDA_DEVICES", "2")
        .env("FAKECUDA_TOTAL_MIB", "8192")
        .env("FAKECUDA_CTX_MIB", "256")
        .env("FAKECUDA_CTX_EXTRA_MIB", "64");
    let out = sim.scratch().join("out");
    if ledger {
        sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out).env("CULEDGER_FLUSH_MS", "100");
    }
    (sim, out)
}

fn dev(report: &Value, index: u64) -> &Value {
    report["devices"].as_array().unwrap().iter().find(|d| d["index"] == index).expect("device in report")
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `api -> bytes` of a device's hidden driver costs.
fn costs(d: &Value) -> BTreeMap<String, u64> {
    d["driver_costs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["api"].as_str().unwrap().to_string(), n(&c["bytes"])))
        .collect()
}

/// `(name, version, flags)` of the `getproc` lines of a trace.
fn requests(trace: &str) -> Vec<(String, u32, u64)> {
    trace
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            if f.len() != 7 || f[0] != "getproc" {
                return None;
            }
            Some((f[1].to_string(), f[2].parse().ok()?, f[3].parse().ok()?))
        })
        .collect()
}

/// Driver entry points culedger wraps: the `cu*` symbols libculedger.so exports (each table
/// row is exported under its name).
fn wrapped_driver_symbols() -> BTreeSet<String> {
    let info = elf::dyn_info(&libculedger()).unwrap();
    let set: BTreeSet<String> = info
        .defined
        .into_iter()
        .filter(|s| s.starts_with("cu") && !s.starts_with("cuda") && !s.starts_with("culedger"))
        .collect();
    assert!(set.contains("cuMemAlloc_v2") && set.contains("cuGraphInstantiateWithParams"), "{set:?}");
    set
}

/// The base name of a versioned driver symbol: `cuStreamBeginCapture_v2_ptsz` -> `cuStreamBeginCapture`.
fn base_of(symbol: &str) -> &str {
    let mut s = symbol.trim_end_matches("_ptsz").trim_end_matches("_ptds");
    if let Some(i) = s.rfind("_v") {
        if s[i + 2..].chars().all(|c| c.is_ascii_digit()) && i + 2 < s.len() {
            s = &s[..i];
        }
    }
    s
}

/// One answer of resolve_all.py: (rc, status, object, symbol, offset in the object).
type Answer = (i32, i32, String, String, u64);

fn resolve_all(sim: &Sim, requests: &[(String, u32, u64)], tag: &str) -> BTreeMap<(String, u32, u64), Answer> {
    let input = sim.scratch().join(format!("requests-{tag}.txt"));
    let output = sim.scratch().join(format!("answers-{tag}.txt"));
    let text: String = requests.iter().map(|(n, v, f)| format!("{n} {v} {f}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let run = sim.run_ok(sim.python("resolve_all.py").arg(&input).arg(&output));
    assert_eq!(run.u64("resolved"), requests.len() as u64);
    std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let key = (f[0].to_string(), f[1].parse().unwrap(), f[2].parse().unwrap());
            let offset = u64::from_str_radix(f[7].trim_start_matches("0x"), 16).unwrap_or(0);
            (key, (f[3].parse().unwrap(), f[4].parse().unwrap(), f[5].to_string(), f[6].to_string(), offset))
        })
        .collect()
}

/// The table row a culedger wrapper instance belongs to, from its mangled `.symtab` name
/// (`_ZN8culedger5hooks5table20cuMemAllocAsync_ptsz4wrap17h...E` -> `cuMemAllocAsync_ptsz`).
fn wrapper_row(symbol: &str) -> Option<&str> {
    let rest = symbol.strip_prefix("_ZN8culedger5hooks5table")?;
    let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
    let len: usize = rest[..digits].parse().ok()?;
    let name = rest.get(digits..digits + len)?;
    rest[digits + len..].starts_with("4wrap").then_some(name)
}

/// Every hooked base, and every entry the 12.x and 13.x runtimes ask for, resolved through the
/// fake driver at those versions, on a 12.9 and on a 13.5 driver: the answer under culedger is
/// culedger's wrapper for exactly the variant the driver selected when culedger hooks that
/// variant, and otherwise the driver's own function; results and statuses are the driver's.
#[test]
fn every_variant_resolves_wrapped_exactly_when_culedger_wraps_it() {
    let wrapped = wrapped_driver_symbols();
    let ours = elf::dyn_info(&libculedger()).unwrap();
    assert!(!ours.symtab.is_empty(), "libculedger.so has no .symtab (stripped?)");
    let mut reqs: BTreeSet<(String, u32, u64)> = BTreeSet::new();
    // What the runtimes ask for: the recorded real 12.9/13.0/13.5 sequences and the fake 12.9 runtime.
    for (_, _, trace) in REAL_RUNTIMES {
        let text = std::fs::read_to_string(fixture(trace)).unwrap();
        reqs.extend(requests(&text));
    }
    let (mut fake_rt, _) = machine("c13_fake_rt", "12090", false);
    fake_rt.enable_trace();
    fake_rt.run_ok(&mut fake_rt.cmd("rt_basic"));
    reqs.extend(requests(&fake_rt.trace()));
    // Every hooked base at every version boundary of 2.0 .. 13.5, each stream mode.
    let bases: BTreeSet<&str> = wrapped.iter().map(|s| base_of(s)).collect();
    for base in &bases {
        for v in [
            2000, 3000, 3020, 4000, 4010, 6050, 7000, 10000, 10010, 11000, 11020, 11030, 11040, 12000, 12030, 12050,
            12090, 13000, 13010, 13030, 13050,
        ] {
            for flags in [0, 1, 2] {
                reqs.insert((base.to_string(), v, flags));
            }
        }
    }
    let reqs: Vec<_> = reqs.into_iter().collect();
    assert!(reqs.len() > 1500, "{} requests", reqs.len());
    let mut wrapped_seen = BTreeSet::new();
    for driver in ["12090", "13050"] {
        let (plain, _) = machine("c13_resolve_plain", driver, false);
        let (ledgered, _) = machine("c13_resolve", driver, true);
        let a = resolve_all(&plain, &reqs, "plain");
        let b = resolve_all(&ledgered, &reqs, "culedger");
        for key in &reqs {
            let ((rc, status, obj, sym, _), (rc2, status2, obj2, sym2, at)) = (&a[key], &b[key]);
            assert_eq!((rc, status), (rc2, status2), "driver {driver}: {key:?} answered differently under culedger");
            if *rc != 0 {
                assert_eq!((obj2.as_str(), sym2.as_str()), ("-", "-"), "{key:?}");
                continue;
            }
            assert_eq!(obj, "libcuda.so.1", "driver {driver}: {key:?} without culedger: {obj} {sym}");
            if wrapped.contains(sym) {
                assert_eq!(obj2, "libculedger.so", "driver {driver}: {key:?} -> {sym} must come back wrapped");
                let row = ours.symbol_at(*at).and_then(wrapper_row);
                assert_eq!(
                    row,
                    Some(sym.as_str()),
                    "driver {driver}: {key:?} -> {sym} wrapped by another row's wrapper"
                );
                wrapped_seen.insert(sym.clone());
            } else {
                assert_eq!((obj2, sym2), (obj, sym), "driver {driver}: {key:?} -> {sym} must come back unwrapped");
            }
        }
    }
    // Every wrapped driver symbol was handed out (and wrapped) by some request.
    let never: Vec<&String> = wrapped.iter().filter(|s| !wrapped_seen.contains(*s)).collect();
    assert!(never.is_empty(), "hooked variants no request reached: {never:?}");
}

/// Runs NVIDIA's runtime on the fake driver of its generation, with and without culedger.
fn real_runtime(path: &str, driver: &str, test: &str) -> (Run, Run, String, String, PathBuf) {
    let real = repo_root().join(path);
    assert!(real.is_file(), "{} missing: run `make headers`", real.display());
    let (mut plain, _) = machine(&format!("{test}_plain"), driver, false);
    plain.enable_trace();
    let a = plain.run_ok(plain.python("real_cudart.py").arg(&real));
    let (mut ledgered, out) = machine(test, driver, true);
    ledgered.enable_trace();
    let b = ledgered.run_ok(ledgered.python("real_cudart.py").arg(&real));
    let (ta, tb) = (plain.trace(), ledgered.trace());
    // Keep the scratch directory (and the report) alive past the Sims: copy the report out.
    let keep = std::env::temp_dir().join(format!("culedger-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&keep);
    std::fs::create_dir_all(&keep).unwrap();
    for e in std::fs::read_dir(&out).map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default() {
        std::fs::copy(e.path(), keep.join(e.file_name())).unwrap();
    }
    (a, b, ta, tb, keep)
}

/// NVIDIA's libcudart.so.13 (13.0.96 and 13.5.37) on a fake 13.x driver: identical results and an
/// identical resolution sequence with and without culedger, and culedger records exactly what
/// the program was told. Both get their private tables from `cuGetExportTable` (the skip-init
/// probe is not found, as on a real driver; 13.5 also asks for `21318c60-...`, a context's id,
/// which it stopped without, every call failing with cudaErrorNotSupported, 801) and run: the
/// malloc, the query and the free succeed, and the ledger has the allocation and its free.
#[test]
fn real_libcudart_13_behaves_identically_under_culedger() {
    for (path, driver, _) in &REAL_RUNTIMES[1..] {
        let (a, b, ta, tb, keep) = real_runtime(path, driver, "c13_real");
        assert_eq!(a.stdout, b.stdout, "{path}");
        assert_eq!(b.u64("runtime"), driver.parse::<u64>().unwrap(), "{path}: the runtime's own version");
        assert_eq!(b.u64("driver"), driver.parse::<u64>().unwrap());
        assert_eq!((b.u64("malloc_rc"), b.u64("info_rc"), b.u64("free_rc")), (0, 0, 0), "{path}");
        assert!(ta.lines().filter(|l| l.starts_with("getproc ")).count() > 400, "{ta}");
        let mut lines = vec![
            "getproc cuMemAlloc 3020 0 -> 0 cuMemAlloc_v2",
            "getproc cuCtxGetDevice 13000 0 -> 0 cuCtxGetDevice_v2",
            "getproc cuGraphInstantiateWithParams 12000 2 -> 0 cuGraphInstantiateWithParams_ptsz",
            "getproc cuStreamBeginCaptureToGraph 12030 0 -> 0 cuStreamBeginCaptureToGraph",
            "init cuGetExportTable f8cff951-2146-8b4e-b9e2-fb469e7c0dd9 -> 500",
            "init cuGetExportTable 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9 -> 0",
            "init cuGetExportTable d4082055-bde6-704b-8d34-ba123c66e1f2 -> 0",
        ];
        if path.contains("13.5.37") {
            lines.push("init cuGetExportTable 21318c60-9714-3248-8ca6-41ff7324c8f2 -> 0");
        }
        for line in lines {
            assert!(ta.lines().any(|l| l == line), "{path}: no `{line}` in\n{ta}");
        }
        assert_eq!(
            ta.lines().collect::<Vec<_>>(),
            culedger_scenarios::trace_without_culedger(&tb),
            "{path}: the real runtime asked the driver for something else under culedger"
        );
        let r = only_report(&keep);
        let d = dev(&r, 0);
        assert_eq!(d["probes"][0]["api"], "cudaMemGetInfo");
        assert_eq!(n(&d["probes"][0]["error"]), 0);
        assert_eq!(d["failures"].as_array().unwrap().len(), 0, "{path}");
        assert_eq!((n(&d["alloc_count"]), n(&d["free_count"]), n(&d["live_bytes"])), (1, 1, 0), "{path}");
        assert_eq!(n(&d["peak_bytes"]), MIB, "{path}: the 1 MiB cudaMalloc");
        assert_eq!(n(&d["probes"][0]["free_bytes"]), b.u64("free"), "{path}: what the program was told");
        let _ = std::fs::remove_dir_all(&keep);
    }
}

/// The resolution sequence of each real runtime (12.9.79, 13.0.96, 13.5.37) is recorded in
/// `shim-tests/fixtures/real-cudart/`: a fresh trace must match it line for line, so a change in
/// the fake driver (or a new runtime) that changes what the runtime asks for shows up here.
/// `CULEDGER_BLESS=1` rewrites the fixtures.
#[test]
fn real_runtime_resolution_sequences_match_fixtures() {
    for (path, driver, name) in REAL_RUNTIMES {
        let (_, _, fresh, _, keep) = real_runtime(path, driver, "c13_fixture");
        let _ = std::fs::remove_dir_all(&keep);
        let file = fixture(name);
        if std::env::var_os("CULEDGER_BLESS").is_some() {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &fresh).unwrap();
        }
        let recorded = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if recorded != fresh {
            let old: BTreeSet<&str> = recorded.lines().collect();
            let new: BTreeSet<&str> = fresh.lines().collect();
            panic!(
                "{path} on driver {driver}: resolution differs from {} (CULEDGER_BLESS=1 rewrites it)\nonly recorded: {:?}\nonly fresh: {:?}",
                file.display(),
                old.difference(&new).collect::<Vec<_>>(),
                new.difference(&old).collect::<Vec<_>>()
            );
        }
    }
}

fn run_both(program: &str, mode: &str, test: &str) -> (Run, Value) {
    let (plain, _) = machine(&format!("{test}_plain"), "13050", false);
    let a = plain.run_ok(plain.cmd(program).arg(mode));
    let (ledgered, out) = machine(test, "13050", true);
    let b = ledgered.run_ok(ledgered.cmd(program).arg(mode));
    assert_eq!(a.stdout, b.stdout, "{program} {mode}: output differs under culedger");
    (b, only_report(&out))
}

/// A program built against CUDA 13.5's cuda.h: `cuCtxCreate` is `cuCtxCreate_v4`; a second
/// context next to the primary one costs driver memory (measured), the first one on another
/// device cannot be measured (untracked); allocations land on the right devices although
/// `cuCtxGetDevice` has a 2-argument ABI from 13000 (culedger asks for the 2000 one).
#[test]
fn cuda13_program_contexts() {
    let (run, r) = run_both("cu13_driver", "ctx", "c13_ctx");
    assert_eq!(run.u64("driver"), 13050);
    assert_eq!((run.u64("of_primary"), run.u64("current")), (0, 1));
    let (d0, d1) = (dev(&r, 0), dev(&r, 1));
    assert_eq!(n(&d0["live_bytes"]), run.u64("dev0_live"));
    assert_eq!(n(&d1["live_bytes"]), run.u64("dev1_live"));
    assert_eq!(costs(d0).get("cuCtxCreate_v4"), Some(&(64 * MIB)), "{:?}", costs(d0));
    assert!(!costs(d1).contains_key("cuCtxCreate_v4"), "{:?}", costs(d1));
    assert!(r["health"]["unwrapped_symbols"].as_array().unwrap().is_empty());
}

/// Capture into an existing graph and capture again into it (13.3): allocations meanwhile are
/// graph memory; instantiation with a parameter struct is measured; `cuGraphInstantiate`
/// resolved at 12000 is the driver's cuGraphInstantiateWithFlags and is recorded as such.
#[test]
fn cuda13_program_graphs() {
    let (run, r) = run_both("cu13_driver", "graphs", "c13_graphs");
    assert_eq!((run.u64("same_graph"), run.u64("instantiate_result")), (1, 0));
    let d = dev(&r, 0);
    assert_eq!(n(&d["live_bytes"]), run.u64("live"));
    assert_eq!(n(&d["categories"]["graphs"]["live_bytes"]), run.u64("captured"));
    assert_eq!(n(&d["graphs"]["captures"]), 2);
    assert_eq!(n(&d["graphs"]["instantiations"]), 2);
    let c = costs(d);
    assert_eq!(c.get("cuGraphInstantiateWithParams"), Some(&(16 * MIB)), "{c:?}");
    assert_eq!(c.get("cuGraphInstantiateWithFlags"), Some(&(16 * MIB)), "cuGraphInstantiate@12000: {c:?}");
}

/// Module loads (`cuModuleLoadDataEx`, `cuModuleLoadFatBinary`) are hidden costs like
/// `cuModuleLoadData`; a library (`cuLibraryLoadFromFile`) loads lazily, as a real driver does:
/// its load costs nothing, the first use of one of its kernels in a context costs the module.
#[test]
fn cuda13_program_modules() {
    let (run, r) = run_both("cu13_driver", "modules", "c13_modules");
    assert_eq!(run.u64("loads"), 3);
    let c = costs(dev(&r, 0));
    for api in ["cuModuleLoadDataEx", "cuModuleLoadFatBinary"] {
        assert_eq!(c.get(api), Some(&(8 * MIB)), "{api}: {c:?}");
    }
    assert_eq!(c.get("cuLibraryLoadFromFile"), Some(&0), "lazy: {c:?}");
    assert_eq!(run.u64("lazy"), 8 * MIB, "the kernel's first use loaded the library");
}

/// The runtime forms: `cudaStreamBeginCaptureToGraph` and `cudaGraphInstantiateWithParams`.
#[test]
fn runtime_capture_into_graph_and_instantiate_with_params() {
    let (run, r) = run_both("rt_capture_graph", "", "c13_rt_graphs");
    assert_eq!((run.u64("same_graph"), run.u64("result")), (1, 0));
    let d = dev(&r, 0);
    assert_eq!(n(&d["live_bytes"]), run.u64("live"));
    assert_eq!(n(&d["categories"]["graphs"]["live_bytes"]), run.u64("captured"));
    assert_eq!(n(&d["graphs"]["captures"]), 1);
    assert_eq!(costs(d).get("cudaGraphInstantiateWithParams"), Some(&(16 * MIB)), "{:?}", costs(d));
}

/// The runtimes culedger meets: libcudart.so.13 exports its symbols under the version node
/// `libcudart.so.13` (12.x: `libcudart.so.12`); culedger's unversioned exports interpose both.
#[test]
fn cuda13_runtime_exports_what_culedger_hooks() {
    let ours = elf::dyn_info(&libculedger()).unwrap().defined;
    for (path, _, _) in &REAL_RUNTIMES[1..] {
        let rt = elf::dyn_info(&repo_root().join(path)).unwrap();
        assert_eq!(rt.soname.as_deref(), Some("libcudart.so.13"));
        for name in [
            "cudaMalloc",
            "cudaFree",
            "cudaMemGetInfo",
            "cudaMallocAsync_ptsz",
            "cudaIpcOpenMemHandle",
            "cudaStreamBeginCaptureToGraph",
            "cudaGraphInstantiateWithParams_ptsz",
            "cudaGetDriverEntryPoint_ptsz",
        ] {
            assert!(rt.defined.iter().any(|s| s == name), "{path} does not export {name}");
            assert!(ours.iter().any(|s| s == name), "libculedger.so does not hook {name}");
        }
    }
}

/// `cuTensorMapEncodeTiled`, linked directly (vLLM's `_C_stable_libtorch.abi3.so` fails its
/// import without it): the documented order (`CUDA_ERROR_NOT_INITIALIZED` before cuInit,
/// `CUDA_ERROR_INVALID_CONTEXT` without a context), a Hopper GEMM operand's descriptor encoded
/// twice to the same bytes, and each documented limit broken alone is `CUDA_ERROR_INVALID_VALUE`
/// (map not 64-byte aligned, rank 0 and 6, address not 16-byte aligned, stride not a multiple
/// of 16, box over 256, element stride over 8, an inner box wider than its swizzle, a zero
/// dimension). The same with and without culedger.
#[test]
fn tensor_map_encode_tiled_checks_what_cuda_h_documents() {
    let (run, _) = run_both("cu13_tensormap", "", "c13_tensormap");
    assert_eq!((run.u64("before_init"), run.u64("no_context")), (3, 201));
    assert_eq!((run.u64("ok"), run.u64("again"), run.u64("same")), (0, 0, 1));
    for key in
        ["misaligned_map", "rank0", "rank6", "misaligned_address", "stride", "box", "element_stride", "swizzle", "dim"]
    {
        assert_eq!(run.u64(key), 1, "{key}: CUDA_ERROR_INVALID_VALUE");
    }
}

/// `cuMemHostGetDevicePointer` (cuda.h 13.5's `_v2`): with unified addressing and
/// CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM (an H100 on x86-64 Linux), allocated pinned memory
/// and memory registered with DEVICEMAP are reached at their host address (an interior pointer
/// too); memory registered without DEVICEMAP, pageable memory, unregistered and freed memory and
/// non-zero flags are `CUDA_ERROR_INVALID_VALUE`; no context is `CUDA_ERROR_INVALID_CONTEXT`.
#[test]
fn host_device_pointer_of_mapped_pinned_memory() {
    let (run, _) = run_both("cu13_hostptr", "", "c13_hostptr");
    assert_eq!((run.u64("no_context"), run.u64("can_use_host_pointer")), (201, 1));
    assert_eq!((run.u64("allocated_same"), run.u64("interior_same"), run.u64("registered_same")), (1, 1, 1));
    for key in ["flags", "null_out", "registered_unmapped", "not_pinned", "unregistered", "freed"] {
        assert_eq!(run.u64(key), 1, "{key}: CUDA_ERROR_INVALID_VALUE");
    }
}

/// NVIDIA's runtimes (12.9.79, 13.0.96) mapping pinned memory on the fake: `cudaHostAlloc`
/// (mapped and default) and `cudaHostRegister(Portable | Mapped)` (NCCL's shared-memory
/// transport) give device pointers equal to the host pointers; registered-unmapped and pageable
/// memory are cudaErrorInvalidValue. Identical with and without culedger. Before the fake had
/// `cuMemHostGetDevicePointer`, the runtime's call failed.
#[test]
fn real_runtime_host_get_device_pointer() {
    for (path, driver, _) in &REAL_RUNTIMES[..2] {
        let real = repo_root().join(path);
        let (plain, _) = machine("c13_hostmap_plain", driver, false);
        let a = plain.run_ok(plain.python("real_cudart_hostmap.py").arg(&real));
        let (ledgered, _) = machine("c13_hostmap", driver, true);
        let b = ledgered.run_ok(ledgered.python("real_cudart_hostmap.py").arg(&real));
        assert_eq!(a.stdout, b.stdout, "{path}: differs under culedger");
        for key in ["set_rc", "alloc_rc", "alloc_ptr_rc", "default_rc", "register_rc", "registered_rc", "free_rc"] {
            assert_eq!(a.u64(key), 0, "{path}: {key}\n{}", a.stdout);
        }
        assert_eq!((a.u64("alloc_same"), a.u64("default_same"), a.u64("registered_same")), (1, 1, 1), "{path}");
        for key in ["flags_rc", "unmapped_rc", "pageable_rc"] {
            assert_eq!(a.u64(key), 1, "{path}: {key}: cudaErrorInvalidValue");
        }
    }
}
