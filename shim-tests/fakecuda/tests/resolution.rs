//! cuGetProcAddress / cuGetProcAddress_v2 resolution, and the table cross-checked against
//! `cudaTypedefs.h` and against the symbols the cdylib really exports.

mod common;

use fakecuda::getproc::{resolve, Flavor, TABLE};
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

/// `PFN_<base>_v<version>[_ptsz|_ptds]` typedefs of cudaTypedefs.h, and `#define PFN_<base> PFN_<x>_v<n>`.
type Typedefs = BTreeSet<(String, c_int, Flavor)>;
type Aliases = BTreeMap<String, (String, c_int)>;

fn header_typedefs() -> (Typedefs, Aliases) {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/cuda-headers/include/cudaTypedefs.h");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}; run `make headers` first", path.display()));
    let mut typedefs = BTreeSet::new();
    let mut defines = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("typedef CUresult (CUDAAPI *PFN_") {
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
    assert!(typedefs.len() > 500, "cudaTypedefs.h parsed only {} typedefs", typedefs.len());
    (typedefs, defines)
}

#[test]
fn table_matches_cuda_typedefs() {
    let (typedefs, defines) = header_typedefs();
    for e in TABLE {
        let key = (e.base.to_string(), e.version, e.flavor);
        if typedefs.contains(&key) {
            continue;
        }
        // The only allowed alias: a base that cuda.h redefines to another function
        // (cuGraphInstantiate -> cuGraphInstantiateWithFlags since CUDA 12.0).
        let (target, target_version) = defines.get(e.base).unwrap_or_else(|| panic!("row {key:?} has no PFN typedef"));
        assert!(
            target != e.base
                && target == e.symbol
                && typedefs.contains(&(target.clone(), *target_version, Flavor::Legacy)),
            "row {key:?} -> {} is neither a typedef nor the header's PFN_{} alias",
            e.symbol,
            e.base
        );
        assert!(e.version >= 12000, "alias row {key:?} must only apply from CUDA 12.0");
    }
    let bases: BTreeSet<&str> = TABLE.iter().map(|e| e.base).collect();
    for (base, version, flavor) in &typedefs {
        if bases.contains(base.as_str()) {
            assert!(
                TABLE.iter().any(|e| e.base == base && e.version == *version && e.flavor == *flavor),
                "PFN_{base}_v{version} {flavor:?} is missing from the table"
            );
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
        assert_eq!(resolve(e.base, e.version, flags).map(|r| r.symbol), Ok(e.symbol), "{}@{}", e.base, e.version);
    }
}
