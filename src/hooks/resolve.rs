//! The resolver path: `cuGetProcAddress` (11.3 form), `cuGetProcAddress_v2` (12.x/13.x)
//! and the runtime's `cudaGetDriverEntryPoint`/`ByVersion`.
//!
//! The real resolver is always asked first. On success we substitute our wrapper only when
//! the entry it returned has an ABI we wrap, decided on (base name, cudaVersion, flags)
//! exactly as the driver decides: the newest variant introduced at or before cudaVersion,
//! the per-thread (`_ptsz`/`_ptds`) one when flags ask for the per-thread default stream.
//! `cuMemAlloc` below 3020 is the 32-bit v1 ABI and passes through untouched.

use super::real::{claim, is_ours, unwrapped};
use super::table::{Entry, Kind, Sym, ALIASES, TABLE, UNWRAPPED_VARIANTS};
use super::types::VoidPtr;
use libc::{c_char, c_int, c_uint, c_ulonglong};
use std::ffi::CStr;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` / `cudaEnablePerThreadDefaultStream`.
const PER_THREAD: u64 = 2;

/// The oldest runtime `cudaGetDriverEntryPoint` may come from that culedger supports (12.0).
pub const OLDEST_RUNTIME: u32 = 12000;

/// Which table row the driver hands out for (base, cudaVersion, flags), or `None` when the
/// answer is a variant we do not wrap (or a base we do not hook). A base the driver resolves
/// to another function from some version on ([`ALIASES`]) selects among that function's rows.
pub fn select(base: &[u8], version: u32, flags: u64) -> Option<&'static Entry> {
    match ALIASES.iter().find(|a| a.0.as_bytes() == base && a.1 <= version) {
        Some(&(_, _, target)) => select_variant(target.as_bytes(), version, flags),
        None => select_variant(base, version, flags),
    }
}

/// The row for a request whose cudaVersion we do not know: `cudaGetDriverEntryPoint` resolves
/// with the version of the runtime that implements it (CUDART_VERSION: 12090 for 12.9,
/// 13000 for 13.0, 13050 for 13.5). Only a variant that is the same for every runtime from
/// [`OLDEST_RUNTIME`] on is substituted; anything else stays unwrapped here (the runtime's
/// own call into the driver's resolver, which goes through our `cuGetProcAddress_v2`
/// wrapper with the real version, has normally wrapped it already).
pub fn select_any_runtime(base: &[u8], flags: u64) -> Option<&'static Entry> {
    let oldest = select(base, OLDEST_RUNTIME, flags)?;
    let newest = select(base, u32::MAX, flags)?;
    std::ptr::eq(oldest, newest).then_some(oldest)
}

fn select_variant(base: &[u8], version: u32, flags: u64) -> Option<&'static Entry> {
    let per_thread = flags & PER_THREAD != 0;
    // Newest introduction version <= `version` over every variant the driver has for this
    // base, per-thread ones only in per-thread mode.
    let rows = || TABLE.iter().filter(|e| e.kind == Kind::Driver && e.base.as_bytes() == base);
    let hooked = rows().map(|e| (e.version, e.per_thread));
    let unwrapped = UNWRAPPED_VARIANTS.iter().filter(|v| v.0.as_bytes() == base).map(|v| (v.1, v.2));
    let newest =
        hooked.chain(unwrapped).filter(|&(v, pt)| v <= version && (per_thread || !pt)).map(|(v, _)| v).max()?;
    let at = |pt: bool| rows().find(|e| e.version == newest && e.per_thread == pt);
    let unwrapped_at =
        |pt: bool| UNWRAPPED_VARIANTS.iter().any(|v| v.0.as_bytes() == base && v.1 == newest && v.2 == pt);
    if per_thread {
        if let Some(e) = at(true) {
            return Some(e);
        }
        if unwrapped_at(true) {
            return None;
        }
    }
    if unwrapped_at(false) {
        return None;
    }
    at(false)
}

/// Replace `*pfn` (a real entry the driver returned for `symbol`) by our wrapper when the
/// variant is one we wrap. `version` None: the runtime's own version (not known here).
unsafe fn substitute(symbol: *const c_char, pfn: *mut VoidPtr, version: Option<u32>, flags: u64) {
    if symbol.is_null() || pfn.is_null() {
        return;
    }
    let real = *pfn;
    if real.is_null() || is_ours(real) {
        return;
    }
    let base = CStr::from_ptr(symbol).to_bytes();
    let selected = match version {
        Some(v) => select(base, v, flags),
        None => select_any_runtime(base, flags),
    };
    let Some(entry) = selected else { return };
    match claim(entry.sym, real) {
        Some(w) => *pfn = w,
        None => unwrapped(entry.sym),
    }
}

fn guarded(f: impl FnOnce()) {
    // Substitution is bookkeeping: if it fails, the caller keeps the real pointer.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        let _ = std::panic::catch_unwind(|| crate::ledger::global().note_loss("resolve"));
    }
}

pub(crate) unsafe fn cu_get_proc_address(
    _sym: Sym,
    real: super::table::cuGetProcAddress::Real,
    symbol: *const c_char,
    pfn: *mut VoidPtr,
    version: c_int,
    flags: u64,
) -> c_int {
    let rc = real(symbol, pfn, version, flags);
    if rc == 0 {
        guarded(|| substitute(symbol, pfn, Some(version.max(0) as u32), flags));
    }
    rc
}

pub(crate) unsafe fn cu_get_proc_address_v2(
    _sym: Sym,
    real: super::table::cuGetProcAddress_v2::Real,
    symbol: *const c_char,
    pfn: *mut VoidPtr,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    // The real resolver fills `symbolStatus` on every path; we never change it.
    let rc = real(symbol, pfn, version, flags, status);
    if rc == 0 {
        guarded(|| substitute(symbol, pfn, Some(version.max(0) as u32), flags));
    }
    rc
}

/// The `_ptsz` forms of `cudaGetDriverEntryPoint*` (what the header maps them to under
/// `CUDA_API_PER_THREAD_DEFAULT_STREAM`) read `cudaEnableDefault` (0) as per-thread.
fn runtime_flags(sym: Sym, flags: u64) -> u64 {
    let ptsz = matches!(sym, Sym::cudaGetDriverEntryPoint_ptsz | Sym::cudaGetDriverEntryPointByVersion_ptsz);
    if ptsz && flags == 0 {
        PER_THREAD
    } else {
        flags
    }
}

pub(crate) unsafe fn cuda_get_driver_entry_point(
    sym: Sym,
    real: super::table::cudaGetDriverEntryPoint::Real,
    symbol: *const c_char,
    func: *mut VoidPtr,
    flags: c_ulonglong,
    status: *mut c_int,
) -> c_int {
    let rc = real(symbol, func, flags, status);
    if rc == 0 {
        guarded(|| substitute(symbol, func, None, runtime_flags(sym, flags)));
    }
    rc
}

pub(crate) unsafe fn cuda_get_driver_entry_point_by_version(
    sym: Sym,
    real: super::table::cudaGetDriverEntryPointByVersion::Real,
    symbol: *const c_char,
    func: *mut VoidPtr,
    version: c_uint,
    flags: c_ulonglong,
    status: *mut c_int,
) -> c_int {
    let rc = real(symbol, func, version, flags, status);
    if rc == 0 {
        guarded(|| substitute(symbol, func, Some(version), runtime_flags(sym, flags)));
    }
    rc
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn sel(base: &str, v: u32, flags: u64) -> Option<&'static str> {
        select(base.as_bytes(), v, flags).map(|e| e.name)
    }

    #[test]
    fn mem_alloc_versions() {
        assert_eq!(sel("cuMemAlloc", 3020, 0), Some("cuMemAlloc_v2"));
        assert_eq!(sel("cuMemAlloc", 12090, 0), Some("cuMemAlloc_v2"));
        assert_eq!(sel("cuMemAlloc", 3020, 2), Some("cuMemAlloc_v2"));
        // v1 ABI: 32-bit sizes. Never wrapped.
        assert_eq!(sel("cuMemAlloc", 3010, 0), None);
        assert_eq!(sel("cuMemAlloc", 2000, 0), None);
        assert_eq!(sel("cuMemAlloc", 1000, 0), None);
    }

    #[test]
    fn per_thread_variants() {
        assert_eq!(sel("cuStreamBeginCapture", 10010, 0), Some("cuStreamBeginCapture_v2"));
        assert_eq!(sel("cuStreamBeginCapture", 10010, 1), Some("cuStreamBeginCapture_v2"));
        assert_eq!(sel("cuStreamBeginCapture", 10010, 2), Some("cuStreamBeginCapture_v2_ptsz"));
        assert_eq!(sel("cuStreamBeginCapture", 10000, 0), Some("cuStreamBeginCapture"));
        assert_eq!(sel("cuStreamBeginCapture", 10000, 2), Some("cuStreamBeginCapture_ptsz"));
        assert_eq!(sel("cuMemAllocAsync", 12000, 2), Some("cuMemAllocAsync_ptsz"));
        assert_eq!(sel("cuMemAllocAsync", 11010, 2), None);
        assert_eq!(sel("cuMemcpyHtoD", 12000, 2), Some("cuMemcpyHtoD_v2_ptds"));
        assert_eq!(sel("cuMemcpyHtoD", 12000, 0), Some("cuMemcpyHtoD_v2"));
        assert_eq!(sel("cuMemcpyHtoD", 2000, 0), None);
        // A base with no per-thread form gives its default variant in per-thread mode.
        assert_eq!(sel("cuMemAlloc", 12000, 2), Some("cuMemAlloc_v2"));
    }

    #[test]
    fn resolver_and_graph_variants() {
        assert_eq!(sel("cuGetProcAddress", 11030, 0), Some("cuGetProcAddress"));
        assert_eq!(sel("cuGetProcAddress", 12000, 0), Some("cuGetProcAddress_v2"));
        assert_eq!(sel("cuGetProcAddress", 11020, 0), None);
        assert_eq!(sel("cuGraphInstantiate", 10000, 0), Some("cuGraphInstantiate"));
        assert_eq!(sel("cuGraphInstantiate", 11000, 0), Some("cuGraphInstantiate_v2"));
        assert_eq!(sel("cuGraphInstantiate", 11999, 0), Some("cuGraphInstantiate_v2"));
        // From 12000 the driver answers with cuGraphInstantiateWithFlags (3 arguments).
        assert_eq!(sel("cuGraphInstantiate", 12000, 0), Some("cuGraphInstantiateWithFlags"));
        assert_eq!(sel("cuGraphInstantiate", 12090, 0), Some("cuGraphInstantiateWithFlags"));
        assert_eq!(sel("cuGraphInstantiate", 13000, 2), Some("cuGraphInstantiateWithFlags"));
        assert_eq!(sel("cuIpcOpenMemHandle", 4010, 0), Some("cuIpcOpenMemHandle"));
        assert_eq!(sel("cuIpcOpenMemHandle", 11000, 0), Some("cuIpcOpenMemHandle_v2"));
        assert_eq!(sel("cuMemHostRegister", 6000, 0), None);
        assert_eq!(sel("cuMemHostRegister", 6050, 0), Some("cuMemHostRegister_v2"));
        assert_eq!(sel("cudnnCreate", 12000, 0), None);
        assert_eq!(sel("", 12000, 0), None);
    }

    #[test]
    fn cuda13_variants() {
        assert_eq!(sel("cuCtxCreate", 13000, 0), Some("cuCtxCreate_v4"));
        assert_eq!(sel("cuCtxCreate", 12040, 0), Some("cuCtxCreate_v3"));
        assert_eq!(sel("cuCtxCreate", 3020, 0), Some("cuCtxCreate_v2"));
        assert_eq!(sel("cuCtxCreate", 2000, 0), None);
        assert_eq!(sel("cuMemGetInfo", 13050, 0), Some("cuMemGetInfo_v2"));
        assert_eq!(sel("cuStreamBeginCapture", 13000, 2), Some("cuStreamBeginCapture_v2_ptsz"));
        assert_eq!(sel("cuStreamBeginCaptureToGraph", 13000, 2), Some("cuStreamBeginCaptureToGraph_ptsz"));
        assert_eq!(sel("cuStreamBeginCaptureToGraph", 12020, 0), None);
        assert_eq!(sel("cuStreamBeginRecaptureToGraph", 13030, 0), Some("cuStreamBeginRecaptureToGraph"));
        assert_eq!(sel("cuStreamBeginRecaptureToGraph", 13050, 2), Some("cuStreamBeginRecaptureToGraph_ptsz"));
        assert_eq!(sel("cuStreamBeginRecaptureToGraph", 13020, 0), None);
        assert_eq!(sel("cuGraphInstantiateWithParams", 13000, 2), Some("cuGraphInstantiateWithParams_ptsz"));
        // Unhooked bases whose CUDA 13 ABI changed stay unwrapped at every version.
        assert_eq!(sel("cuCtxGetDevice", 13000, 0), None);
        assert_eq!(sel("cuCtxSynchronize", 13000, 0), None);
    }

    /// `cudaGetDriverEntryPoint` (the runtime's version is not known to the hook): only
    /// variants that are the same for every runtime from 12.0 on are substituted.
    #[test]
    fn unknown_runtime_version() {
        let any = |base: &str, flags: u64| select_any_runtime(base.as_bytes(), flags).map(|e| e.name);
        assert_eq!(any("cuMemAlloc", 0), Some("cuMemAlloc_v2"));
        assert_eq!(any("cuMemCreate", 0), Some("cuMemCreate"));
        assert_eq!(any("cuMemAllocAsync", 2), Some("cuMemAllocAsync_ptsz"));
        assert_eq!(any("cuGraphInstantiate", 0), Some("cuGraphInstantiateWithFlags"));
        // Introduced within 12.x/13.x: the answer depends on the runtime.
        assert_eq!(any("cuStreamBeginCaptureToGraph", 0), None);
        assert_eq!(any("cuStreamBeginRecaptureToGraph", 0), None);
        assert_eq!(any("cuCtxCreate", 0), None);
        assert_eq!(any("cudnnCreate", 0), None);
        // Every hooked base either has one answer for all runtimes or none here.
        for e in TABLE.iter().filter(|e| e.kind == Kind::Driver) {
            for flags in [0, 2] {
                if let Some(hit) = select_any_runtime(e.base.as_bytes(), flags) {
                    for v in [12000, 12090, 13000, 13050, 99990] {
                        assert!(std::ptr::eq(select(e.base.as_bytes(), v, flags).unwrap(), hit), "{}", e.base);
                    }
                }
            }
        }
    }

    #[test]
    fn per_thread_runtime_entry_points() {
        assert_eq!(runtime_flags(Sym::cudaGetDriverEntryPoint_ptsz, 0), PER_THREAD);
        assert_eq!(runtime_flags(Sym::cudaGetDriverEntryPointByVersion_ptsz, 0), PER_THREAD);
        assert_eq!(runtime_flags(Sym::cudaGetDriverEntryPoint_ptsz, 1), 1);
        assert_eq!(runtime_flags(Sym::cudaGetDriverEntryPoint, 0), 0);
    }

    /// Header directories under `target/`: CUDA 12.9, and 13.0.96 (what PyTorch 2.11 installs)
    /// and 13.5.37 (the newest 13.x), all fetched by `make headers`.
    pub(crate) const HEADERS: &[&str] = &["cuda-headers/include", "cuda13/13.0.96/include", "cuda13/13.5.37/include"];

    pub(crate) fn header(dir: &str, file: &str) -> String {
        let path = format!("{}/target/{dir}/{file}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (run `make headers` first)"))
    }

    /// `CUDA_VERSION` of a header directory's cuda.h.
    pub(crate) fn cuda_version(dir: &str) -> u32 {
        let text = header(dir, "cuda.h");
        let line = text.lines().find(|l| l.starts_with("#define CUDA_VERSION ")).expect("CUDA_VERSION");
        line.split_whitespace().nth(2).and_then(|v| v.parse().ok()).expect("CUDA_VERSION value")
    }

    /// (base, version, per-thread) of every `PFN_<base>_v<version>[_ptsz|_ptds]` typedef.
    pub(crate) fn pfn_typedefs(dir: &str) -> std::collections::BTreeSet<(String, u32, bool)> {
        let text = header(dir, "cudaTypedefs.h");
        let mut pfn = std::collections::BTreeSet::new();
        for tok in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let Some(rest) = tok.strip_prefix("PFN_") else { continue };
            let (pt, rest) = match rest.strip_suffix("_ptsz").or_else(|| rest.strip_suffix("_ptds")) {
                Some(r) => (true, r),
                None => (false, rest),
            };
            let Some(i) = rest.rfind("_v") else { continue };
            let Ok(v) = rest[i + 2..].parse::<u32>() else { continue };
            pfn.insert((rest[..i].to_string(), v, pt));
        }
        assert!(pfn.len() > 400, "{dir}: parsed only {} PFN typedefs", pfn.len());
        pfn
    }

    /// Every driver row of the table, and every unwrapped variant, is a real ABI variant of
    /// each header that is at least as new (`PFN_<base>_v<version>[_ptsz|_ptds]` in
    /// cudaTypedefs.h of 12.9, 13.0 and 13.5), and every PFN variant of a hooked base is known
    /// to the table (wrapped or deliberately not). The aliases are the headers' own.
    #[test]
    fn table_matches_cuda_typedefs() {
        for dir in HEADERS {
            let (version, pfn) = (cuda_version(dir), pfn_typedefs(dir));
            let mut known = std::collections::BTreeSet::new();
            for e in TABLE.iter().filter(|e| e.kind == crate::hooks::Kind::Driver) {
                let key = (e.base.to_string(), e.version, e.per_thread);
                if e.version <= version {
                    assert!(pfn.contains(&key), "{dir}: {} claims {:?}, not in cudaTypedefs.h", e.name, key);
                }
                known.insert(key);
            }
            for v in UNWRAPPED_VARIANTS {
                let key = (v.0.to_string(), v.1, v.2);
                assert!(pfn.contains(&key), "{dir}: unwrapped variant {:?} not in cudaTypedefs.h", key);
                known.insert(key);
            }
            let bases: std::collections::BTreeSet<_> = known.iter().map(|k| k.0.clone()).collect();
            for key in pfn.iter().filter(|k| bases.contains(&k.0)) {
                assert!(known.contains(key), "{dir}: cudaTypedefs.h has {:?}, unknown to the hook table", key);
            }
            // cuda.h maps the aliased base to its target in every release; 12.x also says so
            // in cudaTypedefs.h.
            let cuda_h = header(dir, "cuda.h");
            for (base, _, target) in ALIASES {
                let mapped = cuda_h.lines().any(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    w.len() == 3 && w[0] == "#define" && w[1] == *base && w[2] == *target
                });
                assert!(mapped, "{dir}/cuda.h does not #define {base} {target}");
            }
        }
        let typedefs_129 = header(HEADERS[0], "cudaTypedefs.h");
        let pfn_alias = ["#define", "PFN_cuGraphInstantiate", "PFN_cuGraphInstantiateWithFlags_v11040"];
        assert!(typedefs_129.lines().any(|l| l.split_whitespace().eq(pfn_alias)), "12.9: PFN_cuGraphInstantiate alias");
    }
}
