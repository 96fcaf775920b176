//! Call sites on the simulated stack: the Python frames culedger reads raw (no GIL) must be
//! the frames Python itself reports at that point, on every interpreter present; native
//! frames name the library that allocated; unreadable Pythons give native frames only, one
//! warning, and a working process.
//!
//! Needs `make sim`, the release `libculedger.so`, `cc`, and the interpreters of
//! `scripts/fetch-pythons.sh` where present (`make test` does all of it).

use culedger_scenarios::pythons::{self, Python};
use culedger_scenarios::reports::{libculedger, only_report};
use culedger_scenarios::{repo_root, Run, Sim};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

fn machine(name: &str) -> (Sim, PathBuf) {
    let mut sim = Sim::new(name);
    let out = sim.scratch().join("out");
    sim.env("LD_PRELOAD", libculedger()).env("CULEDGER_OUT", &out).env("CULEDGER_FLUSH_MS", "0");
    (sim, out)
}

/// Compile C sources with the CUDA headers into `out`.
fn cc(out: &Path, args: &[&str]) {
    let hdr = repo_root().join("target/cuda-headers/include");
    let o = Command::new("cc")
        .args(["-O1", "-g", "-w", "-fPIC", &format!("-I{}", hdr.display())])
        .args(args)
        .arg("-o")
        .arg(out)
        .output()
        .expect("cc");
    assert!(o.status.success(), "cc {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

fn src(name: &str) -> String {
    repo_root().join("shim-tests/sites").join(name).display().to_string()
}

fn sites_of(r: &Value) -> &Vec<Value> {
    r["sites"].as_array().expect("sites[]")
}

fn site<'a>(r: &'a Value, id: &Value) -> &'a Value {
    let id = id.as_u64().unwrap_or_else(|| panic!("no site id: {id}"));
    sites_of(r).iter().find(|s| s["id"] == id).unwrap_or_else(|| panic!("site {id} not in sites[]"))
}

/// The top allocation at `ptr` on any device.
fn allocation(r: &Value, ptr: u64) -> &Value {
    let want = format!("0x{ptr:x}");
    r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["top_allocations"].as_array().unwrap())
        .find(|a| a["ptr"] == want.as_str())
        .unwrap_or_else(|| panic!("no allocation at {want}"))
}

fn python_frames(site: &Value) -> Vec<(String, String, u64, bool)> {
    site["python"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["file"].as_str().unwrap().to_string(),
                f["function"].as_str().unwrap().to_string(),
                f["line"].as_u64().unwrap(),
                f["line_is_current"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn native_objects(site: &Value) -> Vec<String> {
    site["native"].as_array().unwrap().iter().map(|f| f["object"].as_str().unwrap().to_string()).collect()
}

/// Build the `simext` extension for `py` into `dir`; None without headers.
fn build_extension(py: &Python, dir: &Path) -> Option<PathBuf> {
    py.include.as_ref()?;
    let ext = dir.join("ext");
    std::fs::create_dir_all(&ext).unwrap();
    let flags = py.include_flags();
    let mut args: Vec<&str> = vec!["-shared"];
    args.extend(flags.iter().map(String::as_str));
    let s = src("simext.c");
    args.extend([s.as_str(), "-lpthread"]);
    cc(&ext.join("simext.so"), &args);
    Some(ext)
}

/// Run `run_sites.py` with `py` on `sim`, with the C extension when it can be built.
fn run_sites(sim: &Sim, py: &Python) -> (Run, Option<PathBuf>) {
    let ext = build_extension(py, sim.scratch());
    let mut cmd = sim.cmd(&py.command);
    cmd.arg(repo_root().join("shim-tests/py/sitespkg/run_sites.py"));
    if let Some(ext) = &ext {
        cmd.arg("--ext").arg(ext);
    }
    (sim.run_ok(&mut cmd), ext)
}

/// One interpreter: allocations from named functions of a package (runtime and driver, main
/// thread and a Python thread, through a C extension that releases the GIL and one that calls
/// back into Python), compared with what Python reports at each of them.
fn check_interpreter(py: &Python) -> String {
    let (sim, out) = machine(&format!("sites_py{}{}", py.major, py.minor));
    let (run, ext) = run_sites(&sim, py);
    let r = only_report(&out);
    let label = py.label();
    assert_eq!(run.u64("gil_released"), 1, "{label}: ctypes calls run without the GIL\n{}", run.describe());
    // 3.10 has no Py_Version: only the minor version is known (from the library's name).
    let version = if py.minor == 10 { "3.10".to_string() } else { py.version.clone() };
    assert_eq!(r["health"]["python_version"], version.as_str(), "{label}");
    assert_eq!(r["health"]["site_misses"], 0, "{label}: {:#}", r["health"]);
    assert!(!run.stderr.contains("culedger:"), "{label}: no warning expected\n{}", run.stderr);
    let mut seen = Vec::new();
    for line in run.stdout.lines().filter_map(|l| l.strip_prefix("SITE ")) {
        let s: Value = serde_json::from_str(line).unwrap();
        let path = s["path"].as_str().unwrap().to_string();
        let id = if s["rc"] == 0 {
            allocation(&r, s["ptr"].as_u64().unwrap())["site"].clone()
        } else {
            // A failed allocation carries its site too.
            let failures: Vec<&Value> =
                r["devices"].as_array().unwrap().iter().flat_map(|d| d["failures"].as_array().unwrap()).collect();
            assert_eq!(failures.len(), 1, "{label}: {failures:#?}");
            failures[0]["site"].clone()
        };
        let got = python_frames(site(&r, &id));
        let want: Vec<(String, String, u64)> = s["want"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f[0].as_str().unwrap().into(), f[1].as_str().unwrap().into(), f[2].as_u64().unwrap()))
            .collect();
        let got_plain: Vec<(String, String, u64)> = got.iter().map(|(f, n, l, _)| (f.clone(), n.clone(), *l)).collect();
        assert_eq!(got_plain, want, "{label}: {path} allocation: recorded frames (innermost first) vs Python's");
        assert!(got.iter().all(|f| f.3), "{label}: every line is the current one: {got:?}");
        // traceback.extract_stack() agrees: same files and names, outermost first.
        if let Some(tb) = s["tb"].as_array().filter(|t| !t.is_empty()) {
            let tb: Vec<(String, String)> =
                tb.iter().map(|f| (f[0].as_str().unwrap().into(), f[1].as_str().unwrap().into())).collect();
            let ours: Vec<(String, String)> = got
                .iter()
                .rev()
                .map(|(f, q, _, _)| (f.clone(), q.rsplit('.').next().unwrap_or(q).to_string()))
                .collect();
            assert_eq!(ours, tb, "{label}: {path}: traceback.extract_stack() files and names");
        }
        seen.push(path);
    }
    seen.sort();
    let mut expect = vec!["driver", "driver", "runtime"];
    if ext.is_some() {
        expect.push("extension");
    }
    expect.sort();
    assert_eq!(seen, expect, "{label}: allocations reported by the script\n{}", run.describe());
    // The short form: the innermost frame outside the interpreter's files.
    let model = run.stdout.lines().filter_map(|l| l.strip_prefix("SITE ")).find(|l| l.contains("\"runtime\"")).unwrap();
    let model: Value = serde_json::from_str(model).unwrap();
    let function = if py.minor == 10 { "load_weights" } else { "Model.load_weights" }; // 3.10: co_name
    assert_eq!(allocation(&r, model["ptr"].as_u64().unwrap())["caller"], format!("model.py:{function}"), "{label}");
    if ext.is_some() {
        // A thread created by C has no Python thread state: native frames only, the
        // extension's thread among them.
        let a = allocation(&r, run.u64("c_thread_ptr"));
        let s = site(&r, &a["site"]);
        assert!(s["python"].as_array().unwrap().is_empty(), "{label}: {s:#}");
        assert!(native_objects(s).iter().any(|o| o == "simext.so"), "{label}: {s:#}");
    }
    format!("{label}{}", if ext.is_some() { " + C extension" } else { "" })
}

#[test]
fn python_frames_match_what_python_reports_on_every_interpreter() {
    let found = pythons::supported();
    assert!(!found.is_empty(), "no Python 3.10..3.14 found");
    let checked: Vec<String> = found.iter().map(check_interpreter).collect();
    eprintln!("call sites checked on: {checked:#?}");
}

#[test]
fn a_native_library_with_its_own_driver_path_is_named_and_a_c_program_has_no_python_frames() {
    let (sim, out) = machine("sites_staticrt");
    let lib = sim.scratch().join("libstaticrt.so");
    cc(&lib, &["-shared", &src("staticrt.c"), "-ldl"]);
    let main = sim.scratch().join("sites_main");
    let lib_dir = culedger_scenarios::lib_dir();
    cc(&main, &[&src("sites_main.c"), &format!("-L{}", lib_dir.display()), "-l:libcudart.so.12", "-ldl", "-rdynamic"]);
    let run = sim.run_ok(sim.cmd(&main).args(["static", lib.to_str().unwrap()]));
    let r = only_report(&out);
    let ptr = u64::from_str_radix(run.value("static_ptr").trim_start_matches("0x"), 16).unwrap();
    let a = allocation(&r, ptr);
    assert_eq!(a["api"], "cuMemAlloc_v2");
    assert_eq!(a["caller"], "libstaticrt.so!staticrt_alloc", "{a:#}");
    let s = site(&r, &a["site"]);
    assert!(s["python"].as_array().unwrap().is_empty());
    let native = s["native"].as_array().unwrap();
    assert!(native.len() >= 3 && native.len() <= 32, "{s:#}");
    assert_eq!((&native[0]["object"], &native[0]["internal"]), (&Value::from("libculedger.so"), &Value::from(true)));
    assert!(native.iter().any(|f| f["object"] == "sites_main" && f["symbol"] == "main"), "{s:#}");
    assert_eq!(r["health"]["python_version"], Value::Null);
    assert_eq!(r["health"]["site_misses"], 0);
}

#[test]
fn allocations_inside_dlopen_skip_native_frames_and_later_ones_do_not() {
    let (sim, out) = machine("sites_ctor");
    let lib = sim.scratch().join("libctor.so");
    let lib_dir = culedger_scenarios::lib_dir();
    cc(&lib, &["-shared", &src("ctorlib.c"), &format!("-L{}", lib_dir.display()), "-l:libcudart.so.12"]);
    let main = sim.scratch().join("sites_main");
    cc(&main, &[&src("sites_main.c"), &format!("-L{}", lib_dir.display()), "-l:libcudart.so.12", "-ldl", "-rdynamic"]);
    let run = sim.run_ok(sim.cmd(&main).args(["ctor", lib.to_str().unwrap()]));
    assert_eq!(run.u64("ctor_rc"), 0, "{}", run.describe());
    let r = only_report(&out);
    let parse = |k: &str| u64::from_str_radix(run.value(k).trim_start_matches("0x"), 16).unwrap();
    let in_ctor = allocation(&r, parse("ctor_ptr"));
    assert_eq!(in_ctor["site"], Value::Null, "inside dlopen: nothing captured (no Python, no unwinding)");
    assert_eq!(r["health"]["native_skipped_in_dlopen"], 1);
    let later = allocation(&r, parse("main_ptr"));
    assert_eq!(later["caller"], "sites_main!main", "{later:#}");
}

#[test]
fn small_allocations_carry_no_site_unless_asked() {
    for (min, expect_site) in [(None, false), (Some("0"), true), (Some("64KiB"), true)] {
        let (mut sim, out) = machine("sites_min");
        if let Some(m) = min {
            sim.env("CULEDGER_SITE_MIN", m);
        }
        let main = sim.scratch().join("sites_main");
        let lib_dir = culedger_scenarios::lib_dir();
        cc(&main, &[&src("sites_main.c"), &format!("-L{}", lib_dir.display()), "-l:libcudart.so.12", "-ldl"]);
        let run = sim.run_ok(sim.cmd(&main).args(["small", "262144"]));
        let r = only_report(&out);
        let a = allocation(&r, u64::from_str_radix(run.value("ptr").trim_start_matches("0x"), 16).unwrap());
        assert_eq!(a["site"].is_u64(), expect_site, "CULEDGER_SITE_MIN={min:?}: {a:#}");
        assert_eq!(r["settings"]["site_min_bytes"], min.map_or(MIB, |m| if m == "0" { 0 } else { 64 << 10 }));
    }
}

/// A fake Python runtime in various states of wrongness.
fn fake_python(mode: &str) -> (Run, Value) {
    let (sim, out) = machine(&format!("sites_fakepy_{mode}"));
    let exe = sim.scratch().join("fakepy");
    let lib_dir = culedger_scenarios::lib_dir();
    cc(&exe, &[&src("fakepy.c"), &format!("-L{}", lib_dir.display()), "-l:libcudart.so.12", "-rdynamic"]);
    let run = sim.run_ok(sim.cmd(&exe).arg(mode));
    (run, only_report(&out))
}

#[test]
fn an_unreadable_python_gives_native_frames_one_warning_and_a_working_process() {
    for (mode, says) in [
        ("badcookie", "no valid cookie"),
        ("badversion", "debug_offsets says version"),
        ("unknown", "not known to culedger"),
        ("old", "not supported"),
        ("garbage", "could not read the Python frames"),
    ] {
        let (run, r) = fake_python(mode);
        assert_eq!(run.u64("ok"), 1, "{mode}");
        let warnings: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("culedger:")).collect();
        assert_eq!(warnings.len(), 1, "{mode}: one warning\n{}", run.stderr);
        assert!(warnings[0].contains(says), "{mode}: {}", warnings[0]);
        let health = r["health"]["warnings"].as_array().unwrap();
        assert!(health.iter().any(|w| w.as_str().unwrap().contains(says)), "{mode}: {health:?}");
        let sites = sites_of(&r);
        assert!(!sites.is_empty(), "{mode}");
        for s in sites {
            assert!(s["python"].as_array().unwrap().is_empty(), "{mode}: {s:#}");
            assert!(native_objects(s).iter().any(|o| o == "fakepy"), "{mode}: {s:#}");
        }
        let misses = r["health"]["site_misses"].as_u64().unwrap();
        assert_eq!(misses, if mode == "garbage" { 2 } else { 0 }, "{mode}");
    }
}

#[test]
fn an_old_real_python_is_refused_with_a_warning() {
    let Some(old) = pythons::all().into_iter().rfind(|p| p.major == 3 && p.minor < 10) else {
        eprintln!("no Python older than 3.10 here; skipped");
        return;
    };
    let (sim, out) = machine("sites_oldpy");
    let mut cmd = sim.cmd(&old.command);
    cmd.args(["-c", "import ctypes; p = ctypes.c_void_p(); rt = ctypes.CDLL('libcudart.so.12'); print('RESULT rc=%d' % rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(8 << 20)))"]);
    let run = sim.run_ok(&mut cmd);
    assert_eq!(run.u64("rc"), 0);
    let r = only_report(&out);
    assert!(run.stderr.contains("not supported (3.10 and later are)"), "{}", run.stderr);
    assert!(sites_of(&r).iter().all(|s| s["python"].as_array().unwrap().is_empty()));
    // Before 3.11 only the minor version is known (from the interpreter's file name).
    assert_eq!(r["health"]["python_version"], format!("{}.{}", old.major, old.minor));
}

/// The demo's server (shim-tests/py/engines/sglang_server.py: a launcher and 2 ranks with the
/// custom all-reduce, SGLang's module tree over the simulated PyTorch and its caching
/// allocator) on `py`: the caller of every call site a device holds, and of every allocation of
/// at least 1 MiB, is the innermost function of the engine's own code (never the simulated
/// torch's), named `file.py:Class.function` after that frame; every free-memory query has an
/// engine frame. Returns the callers, functions only (3.10 has no qualified names).
fn check_demo_sim(py: &Python) -> BTreeSet<String> {
    let (mut sim, out) = machine(&format!("sites_demo{}{}", py.major, py.minor));
    sim.env("FAKECUDA_DEVICES", "2").env("FAKECUDA_TOTAL_MIB", "24576").env("CULEDGER_SIM_PYTHON", &py.command);
    let mut cmd = sim.cmd(&py.command);
    cmd.arg(repo_root().join("shim-tests/py/engines/sglang_server.py"));
    cmd.args(["--tp", "2", "--model-mib", "512", "--layers", "4", "--allreduce", "custom"]);
    let run = sim.run_ok(&mut cmd);
    let label = py.label();
    let reports: Vec<Value> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap())
        .collect();
    assert_eq!(reports.len(), 3, "{label}: launcher and two ranks\n{}", run.describe());
    let engine = |file: &str| file.contains("/shim-tests/py/engines/") && !file.contains("/engines/torch/");
    let function = |f: &str| if py.minor == 10 { f.rsplit('.').next().unwrap().to_string() } else { f.to_string() };
    let mut callers = BTreeSet::new();
    for r in &reports {
        for d in r["devices"].as_array().unwrap() {
            for s in d["sites"].as_array().unwrap() {
                let frames = python_frames(site(r, &s["site"]));
                let inner = frames
                    .iter()
                    .find(|f| engine(&f.0) && !f.1.ends_with("comp>") && f.1 != "<genexpr>")
                    .unwrap_or_else(|| panic!("{label}: no engine frame in {frames:?}"));
                let file = inner.0.rsplit('/').next().unwrap();
                assert_eq!(s["caller"].as_str(), Some(format!("{file}:{}", inner.1).as_str()), "{label}: {frames:?}");
                callers.insert(format!("{file}:{}", function(&inner.1)));
            }
            for a in d["top_allocations"].as_array().unwrap().iter().filter(|a| a["bytes"].as_u64().unwrap() >= MIB) {
                let caller = a["caller"].as_str().unwrap_or_else(|| panic!("{label}: no caller: {a:#}"));
                assert!(callers.contains(&function_of(caller, py.minor)), "{label}: {caller} is not a site's caller");
            }
            for p in d["probes"].as_array().unwrap() {
                let frames = python_frames(site(r, &p["site"]));
                assert!(frames.iter().any(|f| engine(&f.0)), "{label}: probe {frames:?}");
            }
        }
    }
    callers
}

/// `file.py:Class.function` as [`check_demo_sim`] keeps it on Python 3.`minor`.
fn function_of(caller: &str, minor: u32) -> String {
    let (file, f) = caller.split_once(':').unwrap();
    if minor == 10 {
        format!("{file}:{}", f.rsplit('.').next().unwrap())
    } else {
        caller.to_string()
    }
}

#[test]
fn the_demo_sim_names_the_function_of_every_large_allocation_on_every_interpreter() {
    // What SGLang's own functions allocate (its module tree in shim-tests/py/engines/sglang),
    // and the communicators' and the model's (simcomm.py, simmodel.py).
    let key = [
        "memory_pool.py:MHATokenToKVPool._create_buffers",
        "memory_pool.py:ReqToTokenPool.__init__",
        "model_runner.py:ModelRunner.init_cublas",
        "custom_all_reduce.py:CustomAllreduce.__init__",
        "simcomm.py:CudaRTLibraryBase.cudaMalloc",
        "simcomm.py:NCCLLibraryBase.ncclCommInitRank",
        "simmodel.py:Linear.__init__",
        "simmodel.py:LlamaForCausalLMBase.forward",
    ];
    let mut seen: Vec<(u32, BTreeSet<String>)> = Vec::new();
    for py in pythons::supported() {
        let callers = check_demo_sim(&py);
        for k in key {
            assert!(callers.contains(&function_of(k, py.minor)), "{}: {k} missing from {callers:?}", py.label());
        }
        seen.push((py.minor, callers));
    }
    // The same callers on every interpreter with qualified names.
    let qualified: Vec<&BTreeSet<String>> = seen.iter().filter(|(m, _)| *m >= 11).map(|(_, c)| c).collect();
    assert!(qualified.windows(2).all(|w| w[0] == w[1]), "{seen:#?}");
}

/// A native frame as the report has it: object, symbol, offset.
type NativeRow = (String, Option<String>, String);

/// The native frames of every site, per allocation pointer, of one run of `run_sites.py`.
fn native_by_ptr(py: &Python, unwind: Option<&str>) -> Vec<(u64, Vec<NativeRow>)> {
    let (mut sim, out) = machine("sites_unwind");
    if let Some(u) = unwind {
        sim.env("CULEDGER_UNWIND", u);
    }
    let (run, _) = run_sites(&sim, py);
    let r = only_report(&out);
    assert_eq!(r["health"]["native_unwind_fallbacks"], 0, "the caching unwinder handled every frame");
    let mut v: Vec<(u64, Vec<NativeRow>)> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("SITE "))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|s| s["rc"] == 0)
        .map(|s| {
            let ptr = s["ptr"].as_u64().unwrap();
            let site = site(&r, &allocation(&r, ptr)["site"]);
            let frames = site["native"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    (
                        f["object"].as_str().unwrap().to_string(),
                        f["symbol"].as_str().map(String::from),
                        f["offset"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            (ptr, frames)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn the_caching_unwinder_finds_the_frames_libgcc_finds() {
    // Python, ctypes, libffi's assembly, a C extension, threads: every native frame of every
    // site is the same with culedger's caching unwinder and with libgcc's _Unwind_Backtrace.
    for py in pythons::supported() {
        let fast = native_by_ptr(&py, None);
        let gcc = native_by_ptr(&py, Some("gcc"));
        assert!(fast.len() >= 3 && fast.iter().all(|(_, f)| f.len() >= 5), "{fast:#?}");
        assert_eq!(fast, gcc, "{}", py.label());
    }
}

#[test]
fn a_fork_child_starts_with_its_own_sites() {
    // The parent captures sites (its tables, caches and their locks are in use), forks, and the
    // child allocates from another function (which fails, as CUDA does in a fork child of an
    // initialised parent; the failure has a site): each report names its own call sites only.
    let (sim, out) = machine("sites_fork");
    let script = r#"
import ctypes, os, sys
rt = ctypes.CDLL("libcudart.so.12")
def parent_alloc():
    p = ctypes.c_void_p(); return rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(4 << 20))
def child_alloc():
    p = ctypes.c_void_p(); return rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(6 << 20))
assert parent_alloc() == 0
pid = os.fork()
if pid == 0:
    child_alloc()
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("RESULT child_status=%d child=%d" % (status, pid))
"#;
    let run = sim.run_ok(sim.cmd("python3").args(["-c", script]));
    assert_eq!(run.u64("child_status"), 0);
    let child = run.u64("child");
    let reports: Vec<Value> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap())
        .collect();
    assert_eq!(reports.len(), 2);
    for r in &reports {
        let is_child = r["process"]["pid"] == child;
        let funcs: Vec<String> = sites_of(r)
            .iter()
            .flat_map(|s| python_frames(s).into_iter().map(|f| f.1))
            .filter(|f| f.ends_with("_alloc"))
            .collect();
        assert_eq!(funcs, [if is_child { "child_alloc" } else { "parent_alloc" }], "{r:#}");
        assert_eq!(r["sites"].as_array().unwrap().len(), 1);
        assert_eq!(r["sites"][0]["id"], 1, "ids start over in the child");
    }
}

/// On CPython 3.10 and 3.11 an allocation inside a subinterpreter is attributed to the
/// subinterpreter's own frames (the calling thread's own thread state there), not to the
/// main interpreter's `run_string` line (`PyGILState_GetThisThreadState` answers the main
/// interpreter's state). Runs on each such interpreter present.
#[test]
fn a_subinterpreters_allocation_names_its_own_frames() {
    let found: Vec<Python> = pythons::supported().into_iter().filter(|p| matches!(p.minor, 10 | 11)).collect();
    if found.is_empty() {
        eprintln!("a_subinterpreters_allocation_names_its_own_frames: no CPython 3.10 or 3.11 here: not run");
        return;
    }
    for py in found {
        let (sim, out) = machine(&format!("subinterp_{}", py.minor));
        let script = repo_root().join("shim-tests/py/subinterp_rt.py");
        let mut cmd = sim.cmd(&py.command);
        cmd.arg(&script);
        let run = sim.run_ok(&mut cmd);
        assert_eq!(run.value("rc"), "0", "{}", run.describe());
        let r = only_report(&out);
        let a = allocation(&r, run.u64("sub_ptr"));
        let frames = python_frames(site(&r, &a["site"]));
        let functions: Vec<&str> = frames.iter().map(|f| f.1.as_str()).collect();
        assert_eq!(functions.first(), Some(&"alloc_in_subinterpreter"), "{}: {frames:?}", py.label());
        assert!(
            frames.iter().all(|f| f.0 == "<string>"),
            "{}: only the subinterpreter's frames: {frames:?}",
            py.label()
        );
    }
}

/// The raw frame walker through a generator, an asyncio coroutine, 800 frames of recursion
/// and `sys.settrace`; a `multiprocessing` child ended by `terminate()` dies of SIGTERM as
/// without culedger; a daemon thread allocating while the interpreter exits does not stop
/// it from exiting, and the report is written.
#[test]
fn frames_through_generators_coroutines_recursion_and_tracing() {
    let (sim, out) = machine("frames_rt");
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    let mut cmd = sim.cmd(python);
    cmd.arg(repo_root().join("shim-tests/py/frames_rt.py"));
    let run = sim.run_ok(&mut cmd);
    assert_eq!(run.value("mp_exitcode"), "-15", "{}", run.describe());
    let r = only_report(&out);
    for (tag, caller) in
        [("generator", "in_generator"), ("coroutine", "in_coroutine"), ("recursion", "deep"), ("settrace", "traced")]
    {
        let a = allocation(&r, run.u64(tag));
        let frames = python_frames(site(&r, &a["site"]));
        let functions: Vec<&str> = frames.iter().map(|f| f.1.as_str()).take(2).collect();
        assert_eq!(functions, ["alloc", caller], "{tag}: {frames:?}");
    }
    assert_eq!(r["health"]["site_misses"], 0, "{:#}", r["health"]);
}
