//! cuGetProcAddress / cuGetProcAddress_v2 resolution, and the table cross-checked against
//! `cudaTypedefs.h` and against the symbols the cdylib really exports.

mod common;

use fakecuda::getproc::{resolve_on, Flavor, TABLE};
use fakecuda::types::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};

/// Resolves through the exported `cuGetProcAddress_v2`: (result, status, symbol name or None).
fn getproc_v2(name: &str, version: c_int, flags: u64) -> (CUresult, c_int, Option<&'static str>) {
    let c = CString::new(name).unwrap();
    let mut pfn: *mut c_void = std::ptr::dangling_mut::<c_void>();
    let mut status: c_int = -1;
    let r = unsafe { fakecuda::getproc::cuGetProcAddress_v2(c.as_ptr(), &mut pfn, version, flags, &mut status) };
    let sym = TABLE.iter().find(|e| std::ptr::eq(e.addr.0, pfn)).map(|e| e.symbol);
    if r != CUDA_SUCCESS {
        assert!(pfn.is_null(), "{name}@{version}: pfn must be NULL on failure");
    }
    (r, status, sym)
}

#[test]
fn resolution_table() {
    // (base, version, flags, expected exported symbol)
    let found: &[(&str, c_int, u64, &str)] = &[
        ("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"),
        ("cuMemAlloc", 12090, 0, "cuMemAlloc_v2"),
        ("cuMemAlloc", 3019, 0, "cuMemAlloc"),
        ("cuMemAlloc", 2000, 0, "cuMemAlloc"),
        ("cuMemAlloc", 12000, 2, "cuMemAlloc_v2"),
        ("cuMemFree", 3020, 1, "cuMemFree_v2"),
        ("cuMemGetInfo", 2999, 0, "cuMemGetInfo"),
        ("cuMemGetInfo", 3020, 0, "cuMemGetInfo_v2"),
        ("cuIpcOpenMemHandle", 11000, 0, "cuIpcOpenMemHandle_v2"),
        ("cuIpcOpenMemHandle", 10020, 0, "cuIpcOpenMemHandle"),
        ("cuIpcOpenMemHandle", 4010, 0, "cuIpcOpenMemHandle"),
        ("cuStreamBeginCapture", 10010, 0, "cuStreamBeginCapture_v2"),
        ("cuStreamBeginCapture", 10010, 2, "cuStreamBeginCapture_v2_ptsz"),
        ("cuStreamBeginCapture", 10000, 0, "cuStreamBeginCapture"),
        ("cuStreamBeginCapture", 10000, 2, "cuStreamBeginCapture_ptsz"),
        ("cuStreamBeginCapture", 12090, 1, "cuStreamBeginCapture_v2"),
        ("cuMemHostRegister", 6050, 0, "cuMemHostRegister_v2"),
        ("cuMemHostRegister", 6000, 0, "cuMemHostRegister"),
        ("cuMemcpyHtoD", 7000, 2, "cuMemcpyHtoD_v2_ptds"),
        ("cuMemcpyHtoD", 7000, 0, "cuMemcpyHtoD_v2"),
        ("cuMemcpyHtoD", 6050, 2, "cuMemcpyHtoD_v2"),
        ("cuMemcpyHtoD", 2000, 2, "cuMemcpyHtoD"),
        ("cuMemcpy", 12000, 2, "cuMemcpy_ptds"),
        ("cuMemcpy", 12000, 0, "cuMemcpy"),
        ("cuMemcpyAsync", 12000, 2, "cuMemcpyAsync_ptsz"),
        ("cuMemsetD8Async", 12000, 2, "cuMemsetD8Async_ptsz"),
        ("cuMemAllocAsync", 11020, 2, "cuMemAllocAsync_ptsz"),
        ("cuMemAllocAsync", 11020, 1, "cuMemAllocAsync"),
        ("cuStreamSynchronize", 6000, 2, "cuStreamSynchronize"),
        ("cuStreamSynchronize", 7000, 2, "cuStreamSynchronize_ptsz"),
        ("cuGraphLaunch", 12000, 2, "cuGraphLaunch_ptsz"),
        ("cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2"),
        ("cuGraphInstantiate", 10000, 0, "cuGraphInstantiate"),
        ("cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags"),
        ("cuGraphInstantiateWithFlags", 11040, 0, "cuGraphInstantiateWithFlags"),
        ("cuGetProcAddress", 11030, 0, "cuGetProcAddress"),
        ("cuGetProcAddress", 11080, 0, "cuGetProcAddress"),
        ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
        ("cuCtxCreate", 12090, 0, "cuCtxCreate_v4"),
        ("cuCtxCreate", 11040, 0, "cuCtxCreate_v3"),
        ("cuCtxCreate", 3020, 0, "cuCtxCreate_v2"),
        ("cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2"),
        ("cuDevicePrimaryCtxRelease", 7000, 0, "cuDevicePrimaryCtxRelease"),
        ("cuInit", 2000, 0, "cuInit"),
    ];
    for &(name, version, flags, want) in found {
        assert_eq!(getproc_v2(name, version, flags), (CUDA_SUCCESS, 0, Some(want)), "{name}@{version} flags={flags}");
    }
    // (base, version, flags, result, status)
    let missing: &[(&str, c_int, u64, CUresult, c_int)] = &[
        ("cuMemAlloc", 1999, 0, CUDA_ERROR_NOT_FOUND, 2),
        ("cuMemAllocAsync", 11010, 2, CUDA_ERROR_NOT_FOUND, 2),
        ("cuGetProcAddress", 11020, 0, CUDA_ERROR_NOT_FOUND, 2),
        ("", 12000, 0, CUDA_ERROR_NOT_FOUND, 1),
        ("cuNoSuchFunction", 12000, 0, CUDA_ERROR_NOT_FOUND, 1),
        ("cuMemAlloc_v2", 12000, 0, CUDA_ERROR_NOT_FOUND, 1),
        ("cuMemAlloc", 12000, 4, CUDA_ERROR_INVALID_VALUE, 1),
        ("cuMemAlloc", 12000, 3, CUDA_ERROR_INVALID_VALUE, 1),
    ];
    for &(name, version, flags, rc, status) in missing {
        assert_eq!(getproc_v2(name, version, flags), (rc, status, None), "{name}@{version} flags={flags}");
    }
}

#[test]
fn null_arguments_and_four_argument_form() {
    unsafe {
        let mut status: c_int = -1;
        let name = CString::new("cuMemAlloc").unwrap();
        let r = fakecuda::getproc::cuGetProcAddress_v2(name.as_ptr(), std::ptr::null_mut(), 12000, 0, &mut status);
        assert_eq!((r, status), (CUDA_ERROR_INVALID_VALUE, 1));
        let mut pfn: *mut c_void = std::ptr::null_mut();
        status = -1;
        let r = fakecuda::getproc::cuGetProcAddress_v2(std::ptr::null(), &mut pfn, 12000, 0, &mut status);
        assert_eq!((r, status), (CUDA_ERROR_INVALID_VALUE, 1));
        // Status is optional.
        let r = fakecuda::getproc::cuGetProcAddress_v2(name.as_ptr(), &mut pfn, 12000, 0, std::ptr::null_mut());
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(pfn as usize, fakecuda::api::mem::cuMemAlloc_v2 as *const () as usize);
        // The 11.3 four-argument ABI resolves the same way.
        pfn = std::ptr::null_mut();
        let r = fakecuda::getproc::cuGetProcAddress(name.as_ptr(), &mut pfn, 2000, 0);
        assert_eq!((r, pfn as usize), (CUDA_SUCCESS, fakecuda::api::mem::cuMemAlloc as *const () as usize));
        let r = fakecuda::getproc::cuGetProcAddress(CString::default().as_ptr(), &mut pfn, 12000, 0);
        assert_eq!((r, pfn as usize), (CUDA_ERROR_NOT_FOUND, 0));
    }
}

#[test]
fn resolves_before_cuinit() {
    common::in_child("resolves_before_cuinit", &[], || unsafe {
        let (r, status, sym) = getproc_v2("cuInit", 2000, 0);
        assert_eq!((r, status, sym), (CUDA_SUCCESS, 0, Some("cuInit")));
        let mut pfn: *mut c_void = std::ptr::null_mut();
        assert_eq!(
            fakecuda::getproc::cuGetProcAddress_v2(
                CString::new("cuMemAlloc").unwrap().as_ptr(),
                &mut pfn,
                3020,
                0,
                std::ptr::null_mut()
            ),
            0
        );
        let alloc: unsafe extern "C" fn(*mut u64, usize) -> CUresult = std::mem::transmute(pfn);
        let mut p = 0u64;
        assert_eq!(alloc(&mut p, 1), CUDA_ERROR_NOT_INITIALIZED);
    });
}

/// `PFN_<base>_v<version>[_ptsz|_ptds]` typedefs of a cudaTypedefs.h, and its aliases: `#define
/// PFN_<base> PFN_<x>_v<n>` (12.x) or cuda.h's `#define <base> <x>` to another function (13.x has no
/// PFN aliases any more; cuda.h keeps `#define cuGraphInstantiate cuGraphInstantiateWithFlags`).
type Typedefs = BTreeSet<(String, c_int, Flavor)>;
type Aliases = BTreeMap<String, (String, c_int)>;

/// The headers the table is checked against: CUDA 12.9 and the two CUDA 13 releases `make headers`
/// fetches (13.0.96, what PyTorch 2.11 installs, and 13.5.37, the newest 13.x).
const HEADERS: &[&str] = &["cuda-headers/include", "cuda13/13.0.96/include", "cuda13/13.5.37/include"];

fn read_header(dir: &str, file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target").join(dir).join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}; run `make headers` first", path.display()))
}

/// (`CUDA_VERSION` of cuda.h, typedefs, aliases) of one header directory.
fn header_typedefs(dir: &str) -> (c_int, Typedefs, Aliases) {
    let text = read_header(dir, "cudaTypedefs.h");
    let mut typedefs = BTreeSet::new();
    let mut defines = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        // Both spellings occur (the green-context and device-resource typedefs have no space).
        let typedef = line
            .strip_prefix("typedef CUresult (CUDAAPI *PFN_")
            .or_else(|| line.strip_prefix("typedef CUresult(CUDAAPI *PFN_"));
        if let Some(rest) = typedef {
            let name = &rest[..rest.find(')').expect("typedef name")];
            let (base, tail) = name.split_once("_v").unwrap_or((name, ""));
            let (ver, flavor) = match tail.split_once('_') {
                Some((v, "ptsz")) => (v, Flavor::Ptsz),
                Some((v, "ptds")) => (v, Flavor::Ptds),
                Some((v, other)) => panic!("unknown typedef suffix {other} in {name} ({v})"),
                None => (tail, Flavor::Legacy),
            };
            if let Ok(v) = ver.parse() {
                typedefs.insert((base.to_string(), v, flavor));
            }
        } else if let Some(rest) = line.strip_prefix("#define PFN_") {
            let mut words = rest.split_whitespace();
            if let (Some(base), Some(target)) = (words.next(), words.next()) {
                if let Some((tb, tv)) = target.strip_prefix("PFN_").and_then(|t| t.split_once("_v")) {
                    if let Ok(v) = tv.parse() {
                        defines.insert(base.to_string(), (tb.to_string(), v));
                    }
                }
            }
        }
    }
    assert!(typedefs.len() > 500, "{dir}/cudaTypedefs.h parsed only {} typedefs", typedefs.len());
    let cuda_h = read_header(dir, "cuda.h");
    let mut version = 0;
    for line in cuda_h.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("#define"), Some("CUDA_VERSION"), Some(v), None) => version = v.parse().expect("CUDA_VERSION"),
            // `#define cuGraphInstantiate cuGraphInstantiateWithFlags`: a base cuda.h maps to
            // another function, whose newest legacy typedef is the alias.
            (Some("#define"), Some(base), Some(target), None)
                if base.starts_with("cu")
                    && target.starts_with("cu")
                    && !target.strip_prefix(base).is_some_and(|r| r.is_empty() || r.starts_with('_')) =>
            {
                let newest = typedefs.iter().filter(|(b, _, f)| b == target && *f == Flavor::Legacy).map(|k| k.1).max();
                if let Some(v) = newest {
                    defines.entry(base.to_string()).or_insert((target.to_string(), v));
                }
            }
            _ => {}
        }
    }
    assert!(version >= 12090, "{dir}/cuda.h: no CUDA_VERSION");
    (version, typedefs, defines)
}

/// Each header: every row up to its `CUDA_VERSION` is one of its typedefs (or its alias), and
/// every typedef of a base the table implements is a row.
#[test]
fn table_matches_cuda_typedefs() {
    for dir in HEADERS {
        let (version, typedefs, defines) = header_typedefs(dir);
        for e in TABLE.iter().filter(|e| e.version <= version) {
            let key = (e.base.to_string(), e.version, e.flavor);
            if typedefs.contains(&key) {
                continue;
            }
            // The only allowed alias: a base that cuda.h redefines to another function
            // (cuGraphInstantiate -> cuGraphInstantiateWithFlags since CUDA 12.0).
            let (target, target_version) =
                defines.get(e.base).unwrap_or_else(|| panic!("{dir}: row {key:?} has no PFN typedef"));
            assert!(
                target != e.base
                    && target == e.symbol
                    && typedefs.contains(&(target.clone(), *target_version, Flavor::Legacy)),
                "{dir}: row {key:?} -> {} is neither a typedef nor the header's alias of {}",
                e.symbol,
                e.base
            );
            assert!(e.version >= 12000, "alias row {key:?} must only apply from CUDA 12.0");
        }
        let bases: BTreeSet<&str> = TABLE.iter().map(|e| e.base).collect();
        for (base, v, flavor) in &typedefs {
            if bases.contains(base.as_str()) {
                assert!(
                    TABLE.iter().any(|e| e.base == base && e.version == *v && e.flavor == *flavor),
                    "{dir}: PFN_{base}_v{v} {flavor:?} is missing from the table"
                );
            }
        }
    }
    // No duplicate rows.
    let rows: BTreeSet<(&str, c_int, Flavor)> = TABLE.iter().map(|e| (e.base, e.version, e.flavor)).collect();
    assert_eq!(rows.len(), TABLE.len());
}

/// Every row's symbol is exported by the built `libcuda.so.1` under that exact name, and the
/// library's own cuGetProcAddress_v2 returns exactly that export.
#[test]
fn table_symbols_are_exported() {
    common::in_child("table_symbols_are_exported", &[("FAKECUDA_DRIVER_VERSION", "99990")], table_symbols_exported);
}

fn table_symbols_exported() {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().and_then(|d| d.parent()).unwrap().join("libfakecuda.so");
    assert!(lib.exists(), "{} missing: build the cdylib (cargo build --release -p fakecuda)", lib.display());
    let path = CString::new(lib.to_str().unwrap()).unwrap();
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null(), "dlopen {}: {:?}", lib.display(), CStr::from_ptr(libc::dlerror()));
        type GetProc = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;
        let gp = libc::dlsym(h, CString::new("cuGetProcAddress_v2").unwrap().as_ptr());
        assert!(!gp.is_null());
        let gp: GetProc = std::mem::transmute(gp);
        for e in TABLE {
            let sym = CString::new(e.symbol).unwrap();
            let exported = libc::dlsym(h, sym.as_ptr());
            assert!(!exported.is_null(), "{} is not exported", e.symbol);
            let base = CString::new(e.base).unwrap();
            let flags = if e.flavor == Flavor::Legacy { 1 } else { 2 };
            let mut pfn = std::ptr::null_mut();
            let mut status = -1;
            assert_eq!(gp(base.as_ptr(), &mut pfn, e.version, flags, &mut status), CUDA_SUCCESS);
            assert_eq!(
                pfn, exported,
                "{}@{} resolves to another address than the export {}",
                e.base, e.version, e.symbol
            );
        }
    }
}

#[test]
fn resolve_is_consistent_with_table() {
    for e in TABLE {
        let flags = if e.flavor == Flavor::Legacy { 1 } else { 2 };
        let got = resolve_on(c_int::MAX, e.base, e.version, flags).map(|r| r.symbol);
        assert_eq!(got, Ok(e.symbol), "{}@{}", e.base, e.version);
    }
}

/// What a CUDA 13 driver hands out that a 12.9 driver does not: the 13000 ABIs of
/// `cuCtxGetDevice`/`cuCtxSynchronize` (a context argument), capture into an existing graph
/// again (13030). On a 12.9 driver the same requests give the old ABIs, or nothing.
#[test]
fn cuda13_driver_resolution() {
    let ask = |driver: c_int, name: &str, version: c_int, flags: u64| {
        resolve_on(driver, name, version, flags).map(|e| e.symbol).map_err(|(_, status)| status)
    };
    for (name, version, flags, on13, on129) in [
        ("cuCtxGetDevice", 13000, 0, Ok("cuCtxGetDevice_v2"), Ok("cuCtxGetDevice")),
        ("cuCtxGetDevice", 12090, 0, Ok("cuCtxGetDevice"), Ok("cuCtxGetDevice")),
        ("cuCtxGetDevice", 2000, 0, Ok("cuCtxGetDevice"), Ok("cuCtxGetDevice")),
        ("cuCtxSynchronize", 13000, 0, Ok("cuCtxSynchronize_v2"), Ok("cuCtxSynchronize")),
        ("cuCtxCreate", 13000, 0, Ok("cuCtxCreate_v4"), Ok("cuCtxCreate_v4")),
        ("cuMemAlloc", 13000, 0, Ok("cuMemAlloc_v2"), Ok("cuMemAlloc_v2")),
        ("cuMemGetInfo", 13050, 0, Ok("cuMemGetInfo_v2"), Ok("cuMemGetInfo_v2")),
        ("cuGraphInstantiate", 13000, 0, Ok("cuGraphInstantiateWithFlags"), Ok("cuGraphInstantiateWithFlags")),
        ("cuStreamBeginCapture", 13000, 2, Ok("cuStreamBeginCapture_v2_ptsz"), Ok("cuStreamBeginCapture_v2_ptsz")),
        (
            "cuStreamBeginCaptureToGraph",
            13000,
            2,
            Ok("cuStreamBeginCaptureToGraph_ptsz"),
            Ok("cuStreamBeginCaptureToGraph_ptsz"),
        ),
        ("cuStreamBeginRecaptureToGraph", 13030, 0, Ok("cuStreamBeginRecaptureToGraph"), Err(1)),
        ("cuStreamBeginRecaptureToGraph", 13050, 2, Ok("cuStreamBeginRecaptureToGraph_ptsz"), Err(1)),
        ("cuStreamBeginRecaptureToGraph", 13000, 0, Err(2), Err(1)),
        (
            "cuGraphInstantiateWithParams",
            13000,
            2,
            Ok("cuGraphInstantiateWithParams_ptsz"),
            Ok("cuGraphInstantiateWithParams_ptsz"),
        ),
    ] {
        assert_eq!(ask(13050, name, version, flags), on13, "13.5 driver: {name}@{version} flags={flags}");
        assert_eq!(ask(12090, name, version, flags), on129, "12.9 driver: {name}@{version} flags={flags}");
    }
}

/// `FAKECUDA_DRIVER_VERSION` sets what `cuDriverGetVersion` reports and what resolves, through
/// the exported entry points.
#[test]
fn driver_version_from_environment() {
    common::in_child("driver_version_from_environment", &[("FAKECUDA_DRIVER_VERSION", "13000")], || unsafe {
        let mut v: c_int = 0;
        assert_eq!(fakecuda::api::ctx::cuDriverGetVersion(&mut v), CUDA_SUCCESS);
        assert_eq!(v, 13000);
        assert_eq!(getproc_v2("cuCtxGetDevice", 13000, 0), (CUDA_SUCCESS, 0, Some("cuCtxGetDevice_v2")));
        // 13030 is newer than this driver: the base does not exist for it.
        assert_eq!(getproc_v2("cuStreamBeginRecaptureToGraph", 13030, 0), (CUDA_ERROR_NOT_FOUND, 1, None));
        assert_eq!(fakecuda::api::ctx::cuInit(0), CUDA_SUCCESS);
        let (mut dev, mut ctx) = (0, std::ptr::null_mut());
        assert_eq!(fakecuda::api::ctx::cuDevicePrimaryCtxRetain(&mut ctx, 1), CUDA_SUCCESS);
        // The 13000 ABI takes a context: NULL is the current one (none yet), else the given one.
        assert_eq!(fakecuda::api::ctx::cuCtxGetDevice_v2(&mut dev, std::ptr::null_mut()), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(fakecuda::api::ctx::cuCtxGetDevice_v2(&mut dev, ctx), CUDA_SUCCESS);
        assert_eq!(dev, 1);
        assert_eq!(fakecuda::api::ctx::cuCtxSynchronize_v2(ctx), CUDA_SUCCESS);
    });
}

#[test]
fn driver_version_default() {
    common::in_child("driver_version_default", &[], || unsafe {
        let mut v: c_int = 0;
        assert_eq!(fakecuda::api::ctx::cuDriverGetVersion(&mut v), CUDA_SUCCESS);
        assert_eq!(v, 12090);
    });
}
