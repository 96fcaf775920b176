//! The resolver path: `cuGetProcAddress` (11.3 form), `cuGetProcAddress_v2` (12.x/13.x)
//! and the runtime's `cudaGetDriverEntryPoint`/`ByVersion`.
//!
//! The real resolver is always asked first. On success we substitute our wrapper only when
//! the entry it returned has an ABI we wrap, decided on (base name, cudaVersion, flags)
//! exactly as the driver decides: the newest variant introduced at or before cudaVersion,
//! the per-thread (`_ptsz`/`_ptds`) one when flags ask for the per-thread default stream.
//! `cuMemAlloc` below 3020 is the 32-bit v1 ABI and passes through untouched.

use super::real::{claim, is_ours, unwrapped};
use super::table::{Entry, Kind, Sym, TABLE, UNWRAPPED_VARIANTS};
use super::types::VoidPtr;
use libc::{c_char, c_int, c_uint, c_ulonglong};
use std::ffi::CStr;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` / `cudaEnablePerThreadDefaultStream`.
const PER_THREAD: u64 = 2;

/// CUDA version the runtime's `cudaGetDriverEntryPoint` resolves with when the caller
/// gives none (the runtime's own version; we wrap for the 12.9 headers we are built on).
pub const RUNTIME_VERSION: u32 = 12090;

/// Which table row the driver hands out for (base, cudaVersion, flags), or `None` when the
/// answer is a variant we do not wrap (or a base we do not hook).
pub fn select(base: &[u8], version: u32, flags: u64) -> Option<&'static Entry> {
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
/// variant is one we wrap.
unsafe fn substitute(symbol: *const c_char, pfn: *mut VoidPtr, version: u32, flags: u64) {
    if symbol.is_null() || pfn.is_null() {
        return;
    }
    let real = *pfn;
    if real.is_null() || is_ours(real) {
        return;
    }
    let base = CStr::from_ptr(symbol).to_bytes();
    let Some(entry) = select(base, version, flags) else { return };
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
        guarded(|| substitute(symbol, pfn, version.max(0) as u32, flags));
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
        guarded(|| substitute(symbol, pfn, version.max(0) as u32, flags));
    }
    rc
}

pub(crate) unsafe fn cuda_get_driver_entry_point(
    _sym: Sym,
    real: super::table::cudaGetDriverEntryPoint::Real,
    symbol: *const c_char,
    func: *mut VoidPtr,
    flags: c_ulonglong,
    status: *mut c_int,
) -> c_int {
    let rc = real(symbol, func, flags, status);
    if rc == 0 {
        guarded(|| substitute(symbol, func, RUNTIME_VERSION, flags));
    }
    rc
}

pub(crate) unsafe fn cuda_get_driver_entry_point_by_version(
    _sym: Sym,
    real: super::table::cudaGetDriverEntryPointByVersion::Real,
    symbol: *const c_char,
    func: *mut VoidPtr,
    version: c_uint,
    flags: c_ulonglong,
    status: *mut c_int,
) -> c_int {
    let rc = real(symbol, func, version, flags, status);
    if rc == 0 {
        guarded(|| substitute(symbol, func, version, flags));
    }
    rc
}

#[cfg(test)]
mod tests {
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
        assert_eq!(sel("cuGraphInstantiate", 12090, 0), Some("cuGraphInstantiate_v2"));
        assert_eq!(sel("cuIpcOpenMemHandle", 4010, 0), Some("cuIpcOpenMemHandle"));
        assert_eq!(sel("cuIpcOpenMemHandle", 11000, 0), Some("cuIpcOpenMemHandle_v2"));
        assert_eq!(sel("cuMemHostRegister", 6000, 0), None);
        assert_eq!(sel("cuMemHostRegister", 6050, 0), Some("cuMemHostRegister_v2"));
        assert_eq!(sel("cudnnCreate", 12000, 0), None);
        assert_eq!(sel("", 12000, 0), None);
    }

    /// Every driver row of the table, and every unwrapped variant, is a real ABI variant of
    /// cuda.h 12.9 (`PFN_<base>_v<version>[_ptsz|_ptds]` in cudaTypedefs.h), and every PFN
    /// variant of a hooked base is known to the table (wrapped or deliberately not).
    #[test]
    fn table_matches_cuda_typedefs() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/cuda-headers/include/cudaTypedefs.h");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e} (run `make headers` first)"));
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
        assert!(pfn.len() > 400, "parsed only {} PFN typedefs", pfn.len());
        let mut known = std::collections::BTreeSet::new();
        for e in TABLE.iter().filter(|e| e.kind == crate::hooks::Kind::Driver) {
            let key = (e.base.to_string(), e.version, e.per_thread);
            assert!(pfn.contains(&key), "{} claims {:?}, not in cudaTypedefs.h", e.name, key);
            known.insert(key);
        }
        for v in UNWRAPPED_VARIANTS {
            let key = (v.0.to_string(), v.1, v.2);
            assert!(pfn.contains(&key), "unwrapped variant {:?} not in cudaTypedefs.h", key);
            known.insert(key);
        }
        let bases: std::collections::BTreeSet<_> = known.iter().map(|k| k.0.clone()).collect();
        for key in pfn.iter().filter(|k| bases.contains(&k.0)) {
            assert!(known.contains(key), "cudaTypedefs.h has {:?}, unknown to the hook table", key);
        }
    }
}
