//! The driver library loaded at several addresses, entries fetched with `dlsym` on its handle
//! (as ctypes users and PyTorch's older driver table do). Modes:
//! - `reload N`: N times dlopen `libcuda.so.1`, dlsym the hooked entries, dlclose; a page is
//!   then kept mapped where that copy started, so the next copy loads at a new address. Then
//!   load it once more and really use it: a 64 MiB allocation and a free-memory query.
//!   RESULT keys: loads distinct_bases unloaded live probe_free
//! - `copies DIR N`: N copies `DIR/c<i>/libcuda.so.1`, all loaded at once; the allocation entry
//!   is fetched from each; 16 MiB are allocated through the first copy and 8 MiB through the
//!   last. RESULT keys: copies live_first live_last

use std::collections::BTreeSet;
use std::ffi::{c_int, c_uint, c_void, CString};
use std::process::ExitCode;
use std::ptr::null_mut;

const MIB: usize = 1 << 20;
/// Hooked entries fetched from every copy (exported names, as a dlsym user asks for them).
const HOOKED: [&str; 5] =
    ["cuDevicePrimaryCtxRetain", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuMemHostAlloc"];

struct Lib {
    handle: *mut c_void,
}

impl Lib {
    fn open(path: &str) -> Result<Lib, String> {
        let c = CString::new(path).map_err(|e| e.to_string())?;
        // SAFETY: plain dlopen with a NUL-terminated path.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("dlopen({path}) failed"));
        }
        Ok(Lib { handle })
    }

    fn sym(&self, name: &str) -> Result<*mut c_void, String> {
        let c = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: valid handle and NUL-terminated name.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        if p.is_null() {
            Err(format!("dlsym({name}) failed"))
        } else {
            Ok(p)
        }
    }

    /// Typed lookup.
    ///
    /// # Safety
    /// `F` must be the function-pointer type of `name`.
    unsafe fn get<F: Copy>(&self, name: &str) -> Result<F, String> {
        let p = self.sym(name)?;
        Ok(std::mem::transmute_copy::<*mut c_void, F>(&p))
    }

    /// Load base of the object that defines `cuInit`.
    fn base(&self) -> Result<usize, String> {
        let p = self.sym("cuInit")?;
        object_base(p).ok_or_else(|| "dladdr(cuInit) failed".to_string())
    }

    fn close(self) {
        // SAFETY: the handle came from dlopen and is closed once.
        unsafe { libc::dlclose(self.handle) };
    }
}

/// Load base of the loaded object containing `p`, if any.
fn object_base(p: *const c_void) -> Option<usize> {
    // SAFETY: dladdr only reads the loader's tables.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        (libc::dladdr(p, &mut info) != 0).then_some(info.dli_fbase as usize)
    }
}

fn ck(what: &str, r: c_int) -> Result<(), String> {
    if r == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed with CUresult {r}"))
    }
}

/// cuInit, primary context of device 0 made current, `bytes` allocated; returns free memory after.
unsafe fn allocate(lib: &Lib, bytes: usize) -> Result<usize, String> {
    let init: unsafe extern "C" fn(c_uint) -> c_int = lib.get("cuInit")?;
    let retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int = lib.get("cuDevicePrimaryCtxRetain")?;
    let set_current: unsafe extern "C" fn(*mut c_void) -> c_int = lib.get("cuCtxSetCurrent")?;
    let alloc: unsafe extern "C" fn(*mut u64, usize) -> c_int = lib.get("cuMemAlloc_v2")?;
    let info: unsafe extern "C" fn(*mut usize, *mut usize) -> c_int = lib.get("cuMemGetInfo_v2")?;
    ck("cuInit", init(0))?;
    let mut ctx = null_mut();
    ck("cuDevicePrimaryCtxRetain", retain(&mut ctx, 0))?;
    ck("cuCtxSetCurrent", set_current(ctx))?;
    let mut p = 0u64;
    ck("cuMemAlloc_v2", alloc(&mut p, bytes))?;
    let (mut f, mut t) = (0, 0);
    ck("cuMemGetInfo_v2", info(&mut f, &mut t))?;
    Ok(f)
}

fn reload(n: usize) -> Result<(), String> {
    let mut bases = BTreeSet::new();
    let mut unloaded = 0;
    for _ in 0..n {
        let lib = Lib::open("libcuda.so.1")?;
        let base = lib.base()?;
        bases.insert(base);
        for name in HOOKED {
            lib.sym(name)?;
        }
        let probe = lib.sym("cuInit")?;
        lib.close();
        if object_base(probe).is_none() {
            unloaded += 1;
        }
        // Keep the copy's first page taken: the next copy cannot start there.
        // SAFETY: an anonymous mapping at a hint that must not replace anything.
        let m = unsafe {
            libc::mmap(
                base as *mut c_void,
                4096,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if m == libc::MAP_FAILED {
            return Err(format!("cannot keep 0x{base:x} taken after dlclose (was the library unloaded?)"));
        }
    }
    let lib = Lib::open("libcuda.so.1")?;
    bases.insert(lib.base()?);
    // SAFETY: the entry types are those of cuda.h.
    let free = unsafe { allocate(&lib, 64 * MIB)? };
    println!(
        "RESULT loads={} distinct_bases={} unloaded={unloaded} live={} probe_free={free}",
        n + 1,
        bases.len(),
        64 * MIB
    );
    Ok(())
}

fn copies(dir: &str, n: usize) -> Result<(), String> {
    let libs: Vec<Lib> = (1..=n).map(|i| Lib::open(&format!("{dir}/c{i}/libcuda.so.1"))).collect::<Result<_, _>>()?;
    for lib in &libs {
        lib.sym("cuMemAlloc_v2")?;
    }
    let (first, last) = (&libs[0], &libs[n - 1]);
    // SAFETY: the entry types are those of cuda.h.
    unsafe {
        allocate(first, 16 * MIB)?;
        allocate(last, 8 * MIB)?;
    }
    println!("RESULT copies={n} live_first={} live_last={}", 16 * MIB, 8 * MIB);
    Ok(())
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize| -> Result<usize, String> {
        args.get(i).and_then(|s| s.parse().ok()).ok_or_else(|| format!("argument {i} must be a number"))
    };
    match args.get(1).map(String::as_str) {
        Some("reload") => reload(num(2)?),
        Some("copies") => copies(args.get(2).ok_or("copies DIR N")?, num(3)?.max(1)),
        _ => Err("usage: driver_reload reload N | copies DIR N".into()),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("driver_reload: {e}");
            ExitCode::FAILURE
        }
    }
}
