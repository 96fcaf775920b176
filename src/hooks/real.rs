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
        Kind::Runtime => match RUNTIME_HANDLE.load(Ordering::Acquire) {
            0 => std::ptr::null_mut(),
            h => real_dlsym(h as *mut c_void, name),
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
    REAL[sym as usize]
        .iter()
        .map(|c| c.load(Ordering::Acquire))
        .find(|&p| p != 0)
        .unwrap_or(0)
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

/// A lazily resolved unhooked driver function, found through the real resolver we saw
/// (`cuGetProcAddress_v2`/`cuGetProcAddress`), else in an already loaded `libcuda.so.1`.
struct DriverFn {
    base: &'static [u8],
    version: c_int,
    exported: &'static [u8],
    ptr: AtomicUsize,
}

impl DriverFn {
    const fn new(base: &'static [u8], version: c_int, exported: &'static [u8]) -> Self {
        DriverFn { base, version, exported, ptr: AtomicUsize::new(0) }
    }

    fn get(&self) -> usize {
        let p = self.ptr.load(Ordering::Acquire);
        if p != 0 {
            return p;
        }
        let p = unsafe { resolve_driver(self.base, self.version, self.exported) };
        if p != 0 {
            self.ptr.store(p, Ordering::Release);
        }
        p
    }
}

type GetProcV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type GetProcV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int;

/// Resolve an unhooked driver function without going through any of our wrappers.
unsafe fn resolve_driver(base: &[u8], version: c_int, exported_name: &[u8]) -> usize {
    let mut out: *mut c_void = std::ptr::null_mut();
    let v2 = any(Sym::cuGetProcAddress_v2);
    if v2 != 0 {
        let f: GetProcV2 = std::mem::transmute::<usize, GetProcV2>(v2);
        let mut status: c_int = 0;
        if f(base.as_ptr() as *const c_char, &mut out, version, 0, &mut status) == 0 && !out.is_null() {
            return out as usize;
        }
    }
    let v1 = any(Sym::cuGetProcAddress);
    if v1 != 0 {
        let f: GetProcV1 = std::mem::transmute::<usize, GetProcV1>(v1);
        if f(base.as_ptr() as *const c_char, &mut out, version, 0) == 0 && !out.is_null() {
            return out as usize;
        }
    }
    let p = lookup_in_owner(Kind::Driver, exported_name.as_ptr() as *const c_char);
    if !p.is_null() && !is_ours(p) {
        return p as usize;
    }
    let p = real_dlsym(RTLD_DEFAULT, exported_name.as_ptr() as *const c_char);
    if !p.is_null() && !is_ours(p) {
        return p as usize;
    }
    0
}

static CU_CTX_GET_DEVICE: DriverFn = DriverFn::new(b"cuCtxGetDevice\0", 2000, b"cuCtxGetDevice\0");
static CU_MEM_GET_INFO: DriverFn = DriverFn::new(b"cuMemGetInfo\0", 3020, b"cuMemGetInfo_v2\0");
static CU_MEM_GET_ADDRESS_RANGE: DriverFn =
    DriverFn::new(b"cuMemGetAddressRange\0", 3020, b"cuMemGetAddressRange_v2\0");

/// Runtime `cudaGetDevice`, from the global scope or the handle a runtime symbol was
/// looked up on (ctypes loads libcudart with RTLD_LOCAL).
static CUDA_GET_DEVICE: AtomicUsize = AtomicUsize::new(0);
static RUNTIME_HANDLE: AtomicUsize = AtomicUsize::new(0);

/// Remember a handle on which a runtime symbol was found (dlsym path).
pub fn note_runtime_handle(handle: *mut c_void) {
    RUNTIME_HANDLE.store(handle as usize, Ordering::Release);
}

fn cuda_get_device() -> usize {
    let p = CUDA_GET_DEVICE.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    let name = c"cudaGetDevice".as_ptr();
    let mut p = unsafe { real_dlsym(RTLD_DEFAULT, name) };
    if p.is_null() {
        let h = RUNTIME_HANDLE.load(Ordering::Acquire);
        if h != 0 {
            p = unsafe { real_dlsym(h as *mut c_void, name) };
        }
    }
    let p = p as usize;
    if p != 0 {
        CUDA_GET_DEVICE.store(p, Ordering::Release);
    }
    p
}

/// The device of the calling thread's current context (driver), else the runtime's
/// current device, else 0.
pub fn current_device() -> i32 {
    let f = CU_CTX_GET_DEVICE.get();
    if f != 0 {
        let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute::<usize, _>(f) };
        let mut dev: c_int = -1;
        if unsafe { f(&mut dev) } == 0 && dev >= 0 {
            return dev;
        }
    }
    let f = cuda_get_device();
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
    let mut f = any(Sym::cuMemGetInfo_v2);
    if f == 0 {
        f = CU_MEM_GET_INFO.get();
    }
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
