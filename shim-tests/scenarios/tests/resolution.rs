//! How the runtime reaches the driver, proven from the outside: the fakes' `FAKECUDA_TRACE` and the
//! ELF dynamic sections of the built libraries and programs.

mod common;

use common::*;
use culedger_scenarios::{bin_dir, elf, lib_dir};

/// One `getproc <name> <version> <flags> -> <result> <symbol>` trace line.
#[derive(Debug, PartialEq)]
struct GetProc {
    name: String,
    version: u32,
    flags: u64,
    result: i32,
    symbol: String,
}

fn parse_getproc(line: &str) -> Option<GetProc> {
    // The driver writes the probe's empty name as `""`.
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() != 7 || f[0] != "getproc" || f[4] != "->" {
        return None;
    }
    Some(GetProc {
        name: if f[1] == "\"\"" { String::new() } else { f[1].to_string() },
        version: f[2].parse().ok()?,
        flags: f[3].parse().ok()?,
        result: f[5].parse().ok()?,
        symbol: f[6].to_string(),
    })
}

fn position(lines: &[&str], what: impl Fn(&str) -> bool, msg: &str, trace: &str) -> usize {
    lines.iter().position(|l| what(l)).unwrap_or_else(|| panic!("trace lacks {msg}:\n{trace}"))
}

#[test]
fn runtime_resolves_driver_like_cudart_12_9() {
    let mut sim = machine("trace");
    sim.enable_trace();
    sim.run_ok(&mut sim.cmd("rt_basic"));
    let trace = sim.trace();
    let lines: Vec<&str> = trace.lines().collect();

    // dlopen, then the single dlsym of cuGetProcAddress_v2.
    let dlopen = position(&lines, |l| l == "rt dlopen libcuda.so.1 -> ok", "the dlopen", &trace);
    let dlsyms: Vec<_> = lines.iter().filter(|l| l.starts_with("rt dlsym")).collect();
    assert_eq!(dlsyms, vec![&"rt dlsym cuGetProcAddress_v2 -> ok"], "{trace}");
    let dlsym = position(&lines, |l| l.starts_with("rt dlsym"), "the dlsym", &trace);

    let calls: Vec<(usize, GetProc)> =
        lines.iter().enumerate().filter_map(|(i, l)| parse_getproc(l).map(|g| (i, g))).collect();
    let find = |name: &str, version: u32, flags: u64| {
        calls
            .iter()
            .find(|(_, g)| g.name == name && g.version == version && g.flags == flags)
            .unwrap_or_else(|| panic!("no getproc {name} {version} {flags} in:\n{trace}"))
    };

    // The probe with "" fails (CUDA_ERROR_NOT_FOUND) and comes first.
    let (probe_at, probe) = &calls[0];
    assert_eq!(probe.name, "", "{trace}");
    assert_eq!(probe.result, 500);
    // cuInit at 2000, called with 0, then cuGetProcAddress through itself at 11030 and 12000.
    let (init_at, init) = find("cuInit", 2000, 0);
    assert_eq!((init.result, init.symbol.as_str()), (0, "cuInit"));
    let init_call = position(&lines, |l| l.starts_with("init cuInit 0 -> 0"), "cuInit(0)", &trace);
    let (gp11_at, gp11) = find("cuGetProcAddress", 11030, 0);
    assert_eq!(gp11.symbol, "cuGetProcAddress");
    let (gp12_at, gp12) = find("cuGetProcAddress", 12000, 0);
    assert_eq!(gp12.symbol, "cuGetProcAddress_v2");
    assert!(dlopen < dlsym && dlsym < *probe_at && probe_at < init_at && *init_at < init_call, "{trace}");
    assert!(init_call < *gp11_at && gp11_at < gp12_at, "{trace}");

    // Base names with the runtime's ABI versions, and the versioned symbols the driver gave back.
    for (name, version, flags, symbol) in [
        ("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"),
        ("cuMemFree", 3020, 0, "cuMemFree_v2"),
        ("cuMemGetInfo", 3020, 0, "cuMemGetInfo_v2"),
        ("cuIpcGetMemHandle", 4010, 0, "cuIpcGetMemHandle"),
        ("cuIpcOpenMemHandle", 11000, 0, "cuIpcOpenMemHandle_v2"),
        ("cuStreamBeginCapture", 10010, 0, "cuStreamBeginCapture_v2"),
        ("cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2"),
        ("cuGraphInstantiateWithFlags", 11040, 0, "cuGraphInstantiateWithFlags"),
        ("cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"),
        ("cuMemHostRegister", 6050, 0, "cuMemHostRegister_v2"),
        ("cuStreamDestroy", 4000, 0, "cuStreamDestroy_v2"),
        // The per-thread pass.
        ("cuMemAllocAsync", 11020, 2, "cuMemAllocAsync_ptsz"),
        ("cuMemFreeAsync", 11020, 2, "cuMemFreeAsync_ptsz"),
        ("cuStreamBeginCapture", 10010, 2, "cuStreamBeginCapture_v2_ptsz"),
        ("cuMemcpyHtoD", 7000, 2, "cuMemcpyHtoD_v2_ptds"),
        ("cuGraphLaunch", 10000, 2, "cuGraphLaunch_ptsz"),
    ] {
        let (at, g) = find(name, version, flags);
        assert!(at > gp12_at, "{name} resolved before cuGetProcAddress@12000:\n{trace}");
        assert_eq!((g.result, g.symbol.as_str()), (0, symbol), "{name} {version} {flags}:\n{trace}");
    }
    // Only base names are ever asked for.
    for (_, g) in &calls {
        let versioned = ["_v2", "_v3", "_ptsz", "_ptds"].iter().any(|s| g.name.ends_with(s));
        assert!(!versioned, "versioned name requested: {g:?}");
    }
}

#[test]
fn resolution_happens_once_across_threads() {
    let mut sim = machine("trace_threads");
    sim.enable_trace();
    sim.run_ok(sim.cmd("rt_threads").args(["8", "5"]));
    let trace = sim.trace();
    assert_eq!(trace.matches("rt dlsym cuGetProcAddress_v2").count(), 1, "{trace}");
    assert_eq!(trace.matches("init cuInit 0").count(), 1, "{trace}");
    assert_eq!(trace.lines().filter(|l| l.starts_with("getproc cuMemAlloc 3020 ")).count(), 1, "{trace}");
}

#[test]
fn cudart_never_links_the_driver() {
    let info = elf::dyn_info(&lib_dir().join("libcudart.so.12")).unwrap();
    assert_eq!(info.soname.as_deref(), Some("libcudart.so.12"));
    assert!(!info.needed.iter().any(|n| n.starts_with("libcuda.")), "DT_NEEDED: {:?}", info.needed);
    let cu: Vec<_> = info.undefined.iter().filter(|s| s.starts_with("cu")).collect();
    assert!(cu.is_empty(), "undefined cu* symbols: {cu:?}");
    // dlsym is imported, so an LD_PRELOAD interposer of dlsym sees the runtime's lookup.
    assert!(info.undefined.iter().any(|s| s == "dlsym"), "{:?}", info.undefined);
    for sym in [
        "cudaMalloc",
        "cudaMallocAsync",
        "cudaMallocAsync_ptsz",
        "cudaMemcpy_ptds",
        "cudaMemset_ptds",
        "cudaGraphInstantiate",
        "cudaGraphLaunch_ptsz",
        "cudaGetDriverEntryPoint",
        "cudaGetDriverEntryPoint_ptsz",
        "cudaGetDriverEntryPointByVersion_ptsz",
        "cudaIpcOpenMemHandle",
        "cudaGetLastError",
    ] {
        assert!(info.defined.iter().any(|s| s == sym), "libcudart.so.12 does not export {sym}");
    }
}

#[test]
fn c_programs_link_the_right_library() {
    let rt = elf::dyn_info(&bin_dir().join("rt_basic")).unwrap();
    assert!(rt.needed.iter().any(|n| n == "libcudart.so.12"), "{:?}", rt.needed);
    assert!(!rt.needed.iter().any(|n| n.starts_with("libcuda.")), "{:?}", rt.needed);
    let drv = elf::dyn_info(&bin_dir().join("drv_basic")).unwrap();
    assert!(drv.needed.iter().any(|n| n == "libcuda.so.1"), "{:?}", drv.needed);
    // The cuMemAlloc macro of cuda.h names the _v2 ABI.
    assert!(drv.undefined.iter().any(|s| s == "cuMemAlloc_v2"), "{:?}", drv.undefined);
    assert!(!drv.undefined.iter().any(|s| s == "cuMemAlloc"), "{:?}", drv.undefined);
}

#[test]
fn nothing_is_resolved_at_load_time() {
    let mut sim = machine("load_time");
    sim.enable_trace();
    // Load the runtime and call only what needs no driver: no dlopen of libcuda may happen.
    let script = "import ctypes\n\
        rt = ctypes.CDLL('libcudart.so.12')\n\
        v = ctypes.c_int()\n\
        assert rt.cudaRuntimeGetVersion(ctypes.byref(v)) == 0\n\
        rt.cudaGetErrorName.restype = ctypes.c_char_p\n\
        print(f'RESULT version={v.value} name={rt.cudaGetErrorName(2).decode()} last={rt.cudaGetLastError()}')\n";
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let run = sim.run_ok(sim.cmd(python).args(["-c", script]));
    assert_eq!(run.u64("version"), 12090);
    assert_eq!(run.value("name"), "cudaErrorMemoryAllocation");
    assert_eq!(run.u64("last"), 0);
    assert_eq!(sim.trace(), "", "the runtime touched the driver without need");
}
