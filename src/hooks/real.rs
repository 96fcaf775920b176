//! Real function pointers: the per-symbol slots behind the wrappers, and the few
//! unhooked driver/runtime functions the hooks call for bookkeeping (current device,
//! free memory, address ranges).

use super::dlsym::{real_dlsym, RTLD_DEFAULT, RTLD_NEXT};
use super::table::{exported, wrapper, Kind, Sym, NSLOTS, NSYMS, TABLE};
use super::types::*;
use libc::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO_ROW: [AtomicUsize; NSLOTS] = [ZERO; NSLOTS];
/// `REAL[sym][slot]`: the real function the wrapper instance (sym, slot) forwards to.
static REAL: [[AtomicUsize; NSLOTS]; NSYMS] = [ZERO_ROW; NSYMS];

/// The real function for (sym, slot), as `F` (a function pointer type). Slot 0 is resolved
/// lazily with `dlsym(RTLD_NEXT)`: the definition after us in the global scope.
#[inline]
pub fn get<F: Copy>(sym: Sym, slot: usize) -> Option<F> {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
    let cell = &REAL[sym as usize][slot.min(NSLOTS - 1)];
    let mut p = cell.load(Ordering::Acquire);
    if p == 0 && slot == 0 {
        p = resolve_next(sym, false);
    }
    if p == 0 {
        None
    } else {
        // SAFETY: F is the wrapper's own `Real` fn-pointer type, the size of a pointer.
        Some(unsafe { std::mem::transmute_copy::<usize, F>(&p) })
    }
}

/// Resolve slot 0 of `sym`: the definition after libculedger in the global scope
/// (`RTLD_NEXT`). When the library defining it was loaded with `RTLD_LOCAL` (a runtime
/// opened by ctypes, a driver opened by the runtime) and hands out the address of our
/// export for its own symbol (symbol interposition inside that library), the definition
/// is looked up on that library's handle instead.
/// `global_only` keeps to the global scope (what `dlsym(RTLD_DEFAULT)` would find without
/// us), as the dlsym path must.
pub fn resolve_next(sym: Sym, global_only: bool) -> usize {
    let e = &TABLE[sym as usize];
    let name = e.cname.as_ptr() as *const c_char;
    let mut p = unsafe { real_dlsym(RTLD_NEXT, name) };
    if (p.is_null() || is_ours(p)) && !global_only {
        p = unsafe { lookup_in_owner(e.kind, name) };
    }
    if p.is_null() || is_ours(p) {
        return 0;
    }
    let _ = REAL[sym as usize][0].compare_exchange(0, p as usize, Ordering::AcqRel, Ordering::Acquire);
    REAL[sym as usize][0].load(Ordering::Acquire)
}

/// `name` in the library that owns symbols of this kind, if it is loaded.
unsafe fn lookup_in_owner(kind: Kind, name: *const c_char) -> *mut c_void {
    match kind {
        Kind::Driver => {
            let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if h.is_null() {
                return std::ptr::null_mut();
            }
            let p = real_dlsym(h, name);
            libc::dlclose(h);
            p
        }
        Kind::Runtime => match runtime_owner() {
            Some(h) => {
                let p = real_dlsym(h, name);
                libc::dlclose(h);
                p
            }
            None => std::ptr::null_mut(),
        },
    }
}

/// A wrapper for `sym` that forwards to `real`: the slot already holding `real`, or a
/// free slot claimed for it. `None` when every slot is taken by other definitions.
pub fn claim(sym: Sym, real: *mut c_void) -> Option<*mut c_void> {
    let real = real as usize;
    let row = &REAL[sym as usize];
    if let Some(s) = (0..NSLOTS).find(|&s| row[s].load(Ordering::Acquire) == real) {
        return Some(wrapper(sym, s));
    }
    for (s, cell) in row.iter().enumerate().skip(1) {
        match cell.compare_exchange(0, real, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(wrapper(sym, s)),
            Err(cur) if cur == real => return Some(wrapper(sym, s)),
            Err(_) => {}
        }
    }
    None
}

/// Is `p` one of our own functions (an exported hook or a wrapper instance)?
pub fn is_ours(p: *mut c_void) -> bool {
    TABLE.iter().any(|e| exported(e.sym) == p || (0..NSLOTS).any(|s| wrapper(e.sym, s) == p))
}

/// Any real pointer known for `sym` (the first filled slot).
pub fn any(sym: Sym) -> usize {
    REAL[sym as usize].iter().map(|c| c.load(Ordering::Acquire)).find(|&p| p != 0).unwrap_or(0)
}

static MISSING_WARNED: [AtomicBool; NSYMS] = {
    #[allow(clippy::declare_interior_mutable_const)]
    const F: AtomicBool = AtomicBool::new(false);
    [F; NSYMS]
};

/// A hooked symbol was called but no real definition exists (e.g. our export was found
/// while the real library is absent). Warn once and return an error code of its kind.
pub fn missing(sym: Sym) -> c_int {
    let e = &TABLE[sym as usize];
    if !MISSING_WARNED[sym as usize].swap(true, Ordering::Relaxed) {
        crate::warn!("{} was called but no real definition was found; returning an error", e.name);
    }
    match e.kind {
        Kind::Runtime => 999, // cudaErrorUnknown
        Kind::Driver => 500,  // CUDA_ERROR_NOT_FOUND
    }
}

// ---- unhooked helpers ------------------------------------------------------------------

/// Keep the loaded object that contains `p` loaded, and say whether there is one.
///
/// Bookkeeping calls functions it found earlier (the driver's resolver, `cuCtxGetDevice`).
/// A runtime whose initialisation failed `dlclose`s libcuda, leaving such pointers
/// dangling; the real libcudart 12.9 does exactly that on a driver it cannot use. Before
/// a pointer is cached it is checked against the loaded objects (`dladdr`) and its object
/// gets one more reference (`dlopen(RTLD_NOLOAD)`, never closed), so a cached pointer
/// stays callable. Returns false when no loaded object contains `p`.
unsafe fn keep_loaded(p: usize) -> bool {
    if p == 0 {
        return false;
    }
    let mut info: libc::Dl_info = std::mem::zeroed();
    if libc::dladdr(p as *const c_void, &mut info) == 0 {
        return false;
    }
    if !info.dli_fname.is_null() {
        // Best effort: the main program has no name to reopen, and cannot go away anyway.
        let _ = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
    }
    true
}

/// A lazily resolved unhooked function, cached once found (and kept loaded).
struct Lazy {
    ptr: AtomicUsize,
    resolve: unsafe fn() -> usize,
}

impl Lazy {
    const fn new(resolve: unsafe fn() -> usize) -> Self {
        Lazy { ptr: AtomicUsize::new(0), resolve }
    }

    fn get(&self) -> usize {
        let p = self.ptr.load(Ordering::Acquire);
        if p != 0 {
            return p;
        }
        let p = unsafe { (self.resolve)() };
        if p != 0 && unsafe { keep_loaded(p) } {
            self.ptr.store(p, Ordering::Release);
            return p;
        }
        0
    }
}

type GetProcV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type GetProcV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int;

/// Resolve an unhooked driver function without going through any of our wrappers: through
/// a real resolver we saw (if its library is still loaded), else by name in libcuda.
unsafe fn resolve_driver(base: &[u8], version: c_int, exported_name: &[u8]) -> usize {
    let mut out: *mut c_void = std::ptr::null_mut();
    let v2 = any(Sym::cuGetProcAddress_v2);
    if v2 != 0 && keep_loaded(v2) {
        let f: GetProcV2 = std::mem::transmute::<usize, GetProcV2>(v2);
        let mut status: c_int = 0;
        if f(base.as_ptr() as *const c_char, &mut out, version, 0, &mut status) == 0 && !out.is_null() {
            return out as usize;
        }
    }
    let v1 = any(Sym::cuGetProcAddress);
    if v1 != 0 && keep_loaded(v1) {
        let f: GetProcV1 = std::mem::transmute::<usize, GetProcV1>(v1);
        if f(base.as_ptr() as *const c_char, &mut out, version, 0) == 0 && !out.is_null() {
            return out as usize;
        }
    }
    let name = exported_name.as_ptr() as *const c_char;
    for p in [lookup_in_owner(Kind::Driver, name), real_dlsym(RTLD_DEFAULT, name)] {
        if !p.is_null() && !is_ours(p) {
            return p as usize;
        }
    }
    0
}

macro_rules! driver_fn {
    ($name:ident, $base:literal, $version:literal, $exported:literal) => {
        static $name: Lazy = Lazy::new({
            unsafe fn resolve() -> usize {
                resolve_driver($base, $version, $exported)
            }
            resolve
        });
    };
}

driver_fn!(CU_CTX_GET_DEVICE, b"cuCtxGetDevice\0", 2000, b"cuCtxGetDevice\0");
driver_fn!(CU_MEM_GET_INFO, b"cuMemGetInfo\0", 3020, b"cuMemGetInfo_v2\0");
driver_fn!(CU_MEM_GET_ADDRESS_RANGE, b"cuMemGetAddressRange\0", 3020, b"cuMemGetAddressRange_v2\0");

/// Runtime `cudaGetDevice`: from the global scope, else from the library in which a
/// runtime symbol was last found through dlsym (ctypes loads libcudart `RTLD_LOCAL`).
static CUDA_GET_DEVICE: Lazy = Lazy::new(resolve_cuda_get_device);
/// Address of a runtime function found through dlsym on a handle (not the handle: the
/// program may close it; an address can be checked against the loaded objects).
static RUNTIME_SYMBOL: AtomicUsize = AtomicUsize::new(0);

/// Remember a runtime symbol found through dlsym on a handle (dlsym path: a store only).
pub fn note_runtime_symbol(found: *mut c_void) {
    RUNTIME_SYMBOL.store(found as usize, Ordering::Release);
}

unsafe fn resolve_cuda_get_device() -> usize {
    let name = c"cudaGetDevice".as_ptr();
    let p = real_dlsym(RTLD_DEFAULT, name);
    if !p.is_null() && !is_ours(p) {
        return p as usize;
    }
    match runtime_owner() {
        Some(h) => {
            let p = real_dlsym(h, name);
            libc::dlclose(h);
            p as usize
        }
        None => 0,
    }
}

/// A handle on the runtime library a dlsym'd runtime symbol came from, if still loaded
/// (the caller closes it).
unsafe fn runtime_owner() -> Option<*mut c_void> {
    let found = RUNTIME_SYMBOL.load(Ordering::Acquire);
    if found == 0 {
        return None;
    }
    let mut info: libc::Dl_info = std::mem::zeroed();
    if libc::dladdr(found as *const c_void, &mut info) == 0 || info.dli_fname.is_null() {
        return None;
    }
    let h = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
    (!h.is_null()).then_some(h)
}

/// The device of the calling thread's current context (driver), else the runtime's
/// current device, else 0 (with one warning when neither function exists at all).
pub fn current_device() -> i32 {
    static NO_DEVICE_FUNCTION: AtomicBool = AtomicBool::new(false);
    let f = CU_CTX_GET_DEVICE.get();
    if f == 0 && CUDA_GET_DEVICE.get() == 0 && !NO_DEVICE_FUNCTION.swap(true, Ordering::Relaxed) {
        let line = "cannot tell the current device: the driver has no cuCtxGetDevice and no runtime \
                    cudaGetDevice was found; memory is counted on device 0";
        crate::warn!("{line}");
        crate::ledger::global().note_warning(line);
    }
    if f != 0 {
        let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute::<usize, _>(f) };
        let mut dev: c_int = -1;
        if unsafe { f(&mut dev) } == 0 && dev >= 0 {
            return dev;
        }
    }
    let f = CUDA_GET_DEVICE.get();
    if f != 0 {
        let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute::<usize, _>(f) };
        let mut dev: c_int = -1;
        if unsafe { f(&mut dev) } == 0 && dev >= 0 {
            return dev;
        }
    }
    0
}

/// (free, total) of the current device from the driver, without recording a probe.
pub fn measure_free() -> Option<(u64, u64)> {
    let f = CU_MEM_GET_INFO.get();
    if f == 0 {
        return None;
    }
    let f: unsafe extern "C" fn(*mut usize, *mut usize) -> c_int = unsafe { std::mem::transmute::<usize, _>(f) };
    let (mut free, mut total) = (0usize, 0usize);
    if unsafe { f(&mut free, &mut total) } == 0 {
        Some((free as u64, total as u64))
    } else {
        None
    }
}

/// Size of the allocation containing `ptr`, from the driver.
pub fn address_range_size(ptr: CUdeviceptr) -> Option<u64> {
    let f = CU_MEM_GET_ADDRESS_RANGE.get();
    if f == 0 {
        return None;
    }
    let f: unsafe extern "C" fn(*mut CUdeviceptr, *mut usize, CUdeviceptr) -> c_int =
        unsafe { std::mem::transmute::<usize, _>(f) };
    let (mut base, mut size) = (0u64, 0usize);
    if unsafe { f(&mut base, &mut size, ptr) } == 0 {
        Some(size as u64)
    } else {
        None
    }
}
