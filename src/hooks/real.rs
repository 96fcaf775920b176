//! Real function pointers: the per-symbol slots behind the wrappers, and the few
//! unhooked driver/runtime functions the hooks call for bookkeeping (current device,
//! free memory, address ranges).

use super::table::{exported, wrapper, Kind, Sym, NSLOTS, NSYMS, TABLE};
use super::types::*;
use crate::rt::real::{real_dlsym, RTLD_DEFAULT, RTLD_NEXT};
use libc::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO_ROW: [AtomicUsize; NSLOTS] = [ZERO; NSLOTS];
/// `REAL[sym][slot]`: the real function the wrapper instance (sym, slot) forwards to.
static REAL: [[AtomicUsize; NSLOTS]; NSYMS] = [ZERO_ROW; NSYMS];
/// `BASE[sym][slot]`: load base of the object that defined `REAL[sym][slot]` when the slot
/// was claimed (0: not known). A slot whose object is gone (unloaded, or another object now
/// where it was) is stale and may be claimed again.
static BASE: [[AtomicUsize; NSLOTS]; NSYMS] = [ZERO_ROW; NSYMS];

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
    if p == 0 || p == CHANGING {
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
    if REAL[sym as usize][0].compare_exchange(0, p as usize, Ordering::AcqRel, Ordering::Acquire).is_ok() {
        BASE[sym as usize][0].store(object_base(p as usize).unwrap_or(0), Ordering::Release);
    }
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

/// Load base of the loaded object containing `p` (None when no loaded object does).
fn object_base(p: usize) -> Option<usize> {
    if p == 0 {
        return None;
    }
    // SAFETY: dladdr only reads the loader's tables; `info` is a plain C struct.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        (libc::dladdr(p as *const c_void, &mut info) != 0).then_some(info.dli_fbase as usize)
    }
}

/// Is the pointer in (sym, slot) still in the object it was claimed from?
fn slot_live(sym: Sym, slot: usize, p: usize) -> bool {
    let base = BASE[sym as usize][slot].load(Ordering::Acquire);
    match object_base(p) {
        Some(b) => base == 0 || b == base,
        None => false,
    }
}

/// A wrapper for `sym` that forwards to `real`: the slot already holding `real`, a free
/// slot claimed for it, or a slot whose library has been unloaded since (a driver or runtime
/// dlopened, used and dlclosed, then loaded again at another address). `None` when every
/// slot belongs to a library still loaded.
pub fn claim(sym: Sym, real: *mut c_void) -> Option<*mut c_void> {
    let real = real as usize;
    let row = &REAL[sym as usize];
    let take = |s: usize| {
        BASE[sym as usize][s].store(object_base(real).unwrap_or(0), Ordering::Release);
        Some(wrapper(sym, s))
    };
    if let Some(s) = (0..NSLOTS).find(|&s| row[s].load(Ordering::Acquire) == real) {
        return Some(wrapper(sym, s));
    }
    for (s, cell) in row.iter().enumerate().skip(1) {
        match cell.compare_exchange(0, real, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return take(s),
            Err(cur) if cur == real => return Some(wrapper(sym, s)),
            Err(_) => {}
        }
    }
    // Every slot is taken: reuse one whose library is gone (checked only now, it is rare).
    // A slot changing hands holds `CHANGING` until its base is stored: nobody else takes it
    // meanwhile, and no lock is needed on this path.
    for (s, cell) in row.iter().enumerate().skip(1) {
        let cur = cell.load(Ordering::Acquire);
        if cur != CHANGING
            && !slot_live(sym, s, cur)
            && cell.compare_exchange(cur, CHANGING, Ordering::AcqRel, Ordering::Acquire).is_ok()
        {
            BASE[sym as usize][s].store(object_base(real).unwrap_or(0), Ordering::Release);
            cell.store(real, Ordering::Release);
            return Some(wrapper(sym, s));
        }
    }
    None
}

/// A wrapper slot being handed from an unloaded library to a new one (never a function address).
const CHANGING: usize = 1;

static UNWRAPPED_WARNED: AtomicBool = AtomicBool::new(false);

/// `sym`'s real pointer is handed out unwrapped because every wrapper slot belongs to
/// another loaded copy of its library: listed in `health.unwrapped_symbols`, and said once
/// per process on stderr and in the report's warnings.
pub fn unwrapped(sym: Sym) {
    let name = TABLE[sym as usize].name;
    let l = crate::ledger::global();
    l.note_unwrapped(name);
    if !UNWRAPPED_WARNED.swap(true, Ordering::AcqRel) {
        crate::warn!(
            "{name}: all {} wrappers are held by other loaded copies of its library; calls through this copy are not accounted (health.unwrapped_symbols lists every such entry point)",
            NSLOTS - 1
        );
        l.note_warning(&format!(
            "{name} and the entry points in unwrapped_symbols were handed out unwrapped (more than {} copies of their library loaded at once): calls through them are not accounted",
            NSLOTS - 1
        ));
    }
}

/// Is `p` one of our own functions (an exported hook or a wrapper instance)?
pub fn is_ours(p: *mut c_void) -> bool {
    TABLE.iter().any(|e| exported(e.sym) == p || (0..NSLOTS).any(|s| wrapper(e.sym, s) == p))
}

/// Any real pointer known for `sym` whose library is still loaded (the first such slot).
pub fn any(sym: Sym) -> usize {
    (0..NSLOTS)
        .map(|s| (s, REAL[sym as usize][s].load(Ordering::Acquire)))
        .find(|&(s, p)| p > CHANGING && slot_live(sym, s, p))
        .map_or(0, |(_, p)| p)
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

/// What looking up an unhooked function found.
enum Found {
    At(usize),
    /// The loaded driver does not have it (its own resolver said so): never asked again.
    Absent,
    /// Nothing to ask yet (no driver loaded): asked again next time.
    Unknown,
}

/// `Lazy::ptr` once the function is known to be absent.
const ABSENT: usize = 1;

/// A lazily resolved unhooked function, cached once found (and kept loaded), or once known
/// to be absent from the driver.
struct Lazy {
    ptr: AtomicUsize,
    resolve: unsafe fn() -> Found,
}

impl Lazy {
    const fn new(resolve: unsafe fn() -> Found) -> Self {
        Lazy { ptr: AtomicUsize::new(0), resolve }
    }

    /// The function if already found; never looks it up.
    fn peek(&self) -> usize {
        match self.ptr.load(Ordering::Acquire) {
            ABSENT => 0,
            p => p,
        }
    }

    fn get(&self) -> usize {
        match self.ptr.load(Ordering::Acquire) {
            0 => {}
            ABSENT => return 0,
            p => return p,
        }
        match unsafe { (self.resolve)() } {
            Found::At(p) if unsafe { keep_loaded(p) } => {
                self.ptr.store(p, Ordering::Release);
                p
            }
            Found::Absent => {
                self.ptr.store(ABSENT, Ordering::Release);
                0
            }
            _ => 0,
        }
    }
}

type GetProcV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type GetProcV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int;

/// A real driver resolver (`cuGetProcAddress_v2` or the 11.3 form), never one of our
/// wrappers: one seen through dlsym or a resolver whose library is still loaded, else the
/// definition in libcuda (a program linking it directly never looks it up).
unsafe fn real_resolver(sym: Sym) -> usize {
    let seen = any(sym);
    let p = if seen != 0 {
        seen
    } else {
        let name = TABLE[sym as usize].cname.as_ptr() as *const c_char;
        let p = lookup_in_owner(Kind::Driver, name);
        if p.is_null() || is_ours(p) {
            0
        } else {
            p as usize
        }
    };
    if p != 0 && keep_loaded(p) {
        p
    } else {
        0
    }
}

/// Resolve an unhooked driver function without going through any of our wrappers: through
/// the driver's own resolver (its answer is final: a driver older than the function does not
/// have it), else by name in libcuda.
unsafe fn resolve_driver(base: &[u8], version: c_int, exported_name: &[u8]) -> Found {
    let mut out: *mut c_void = std::ptr::null_mut();
    let symbol = base.as_ptr() as *const c_char;
    let v2 = real_resolver(Sym::cuGetProcAddress_v2);
    if v2 != 0 {
        let f: GetProcV2 = std::mem::transmute::<usize, GetProcV2>(v2);
        let mut status: c_int = 0;
        let rc = f(symbol, &mut out, version, 0, &mut status);
        return if rc == 0 && !out.is_null() { Found::At(out as usize) } else { Found::Absent };
    }
    let v1 = real_resolver(Sym::cuGetProcAddress);
    if v1 != 0 {
        let f: GetProcV1 = std::mem::transmute::<usize, GetProcV1>(v1);
        let rc = f(symbol, &mut out, version, 0);
        return if rc == 0 && !out.is_null() { Found::At(out as usize) } else { Found::Absent };
    }
    let name = exported_name.as_ptr() as *const c_char;
    for p in [lookup_in_owner(Kind::Driver, name), real_dlsym(RTLD_DEFAULT, name)] {
        if !p.is_null() && !is_ours(p) {
            return Found::At(p as usize);
        }
    }
    Found::Unknown
}

macro_rules! driver_fn {
    ($name:ident, $base:literal, $version:literal, $exported:literal) => {
        static $name: Lazy = Lazy::new({
            unsafe fn resolve() -> Found {
                resolve_driver($base, $version, $exported)
            }
            resolve
        });
    };
}

driver_fn!(CU_CTX_GET_DEVICE, b"cuCtxGetDevice\0", 2000, b"cuCtxGetDevice\0");
driver_fn!(CU_CTX_GET_CURRENT, b"cuCtxGetCurrent\0", 4000, b"cuCtxGetCurrent\0");
driver_fn!(CU_MEM_GET_INFO, b"cuMemGetInfo\0", 3020, b"cuMemGetInfo_v2\0");
driver_fn!(CU_MEM_GET_ADDRESS_RANGE, b"cuMemGetAddressRange\0", 3020, b"cuMemGetAddressRange_v2\0");
driver_fn!(CU_POINTER_GET_ATTRIBUTE, b"cuPointerGetAttribute\0", 4000, b"cuPointerGetAttribute\0");
// CUDA 12.8; older drivers give the stream's context instead (the 9.2 form).
driver_fn!(CU_STREAM_GET_DEVICE, b"cuStreamGetDevice\0", 12080, b"cuStreamGetDevice\0");
driver_fn!(CU_STREAM_GET_CTX, b"cuStreamGetCtx\0", 9020, b"cuStreamGetCtx\0");
driver_fn!(CU_CTX_PUSH_CURRENT, b"cuCtxPushCurrent\0", 4000, b"cuCtxPushCurrent_v2\0");
driver_fn!(CU_CTX_POP_CURRENT, b"cuCtxPopCurrent\0", 4000, b"cuCtxPopCurrent_v2\0");
// Context-free questions about a device, asked by the report writer (`crate::gpu`).
driver_fn!(CU_DEVICE_GET_UUID, b"cuDeviceGetUuid\0", 11040, b"cuDeviceGetUuid_v2\0");
// The version before MIG UUIDs: a MIG device's GPU's UUID (see `device_identity`).
driver_fn!(CU_DEVICE_GET_UUID_V1, b"cuDeviceGetUuid\0", 9020, b"cuDeviceGetUuid\0");
driver_fn!(CU_DEVICE_GET_PCI_BUS_ID, b"cuDeviceGetPCIBusId\0", 4010, b"cuDeviceGetPCIBusId\0");

driver_fn!(CU_DEVICE_GET_COUNT, b"cuDeviceGetCount\0", 2000, b"cuDeviceGetCount\0");

/// How many devices the process sees (`cuDeviceGetCount`; None when the driver cannot say).
pub fn device_count() -> Option<i32> {
    let f = CU_DEVICE_GET_COUNT.get();
    if f == 0 {
        return None;
    }
    let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute::<usize, _>(f) };
    let mut n: c_int = 0;
    // SAFETY: the driver's own function with its cuda.h signature, on a local.
    (unsafe { f(&mut n) } == 0).then_some(n)
}

/// What the driver says of device `ordinal` without a context.
pub struct Identity {
    /// `cuDeviceGetUuid_v2`: a MIG device's own UUID in MIG mode, else the GPU's.
    pub uuid: [u8; 16],
    /// `cuDeviceGetUuid`, where the driver still has it: the GPU's UUID (the version before MIG
    /// UUIDs; cuda.h 12.x: only `_v2` "returns its MIG UUID" in MIG mode).
    pub gpu_uuid: Option<[u8; 16]>,
    /// `cuDeviceGetPCIBusId` (a MIG device's is its GPU's).
    pub pci_bus_id: String,
}

/// Device `ordinal`'s UUIDs and PCI bus id, asked of the driver: each is context-free and
/// creates nothing.
pub fn device_identity(ordinal: i32, resolve: bool) -> Option<Identity> {
    let (u, b, v1) = if resolve {
        (CU_DEVICE_GET_UUID.get(), CU_DEVICE_GET_PCI_BUS_ID.get(), CU_DEVICE_GET_UUID_V1.get())
    } else {
        (CU_DEVICE_GET_UUID.peek(), CU_DEVICE_GET_PCI_BUS_ID.peek(), CU_DEVICE_GET_UUID_V1.peek())
    };
    if u == 0 || b == 0 {
        return None;
    }
    type GetUuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> c_int;
    let get_uuid: GetUuid = unsafe { std::mem::transmute::<usize, _>(u) };
    let get_bus: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int =
        unsafe { std::mem::transmute::<usize, _>(b) };
    let mut uuid = [0u8; 16];
    let mut bus = [0 as c_char; 64];
    // SAFETY: the driver's own functions with their cuda.h signatures, on local buffers.
    let ok =
        unsafe { get_uuid(&mut uuid, ordinal) == 0 && get_bus(bus.as_mut_ptr(), bus.len() as c_int - 1, ordinal) == 0 };
    if !ok {
        return None;
    }
    let gpu_uuid = (v1 != 0).then(|| {
        let f: GetUuid = unsafe { std::mem::transmute::<usize, _>(v1) };
        let mut g = [0u8; 16];
        // SAFETY: as above.
        (unsafe { f(&mut g, ordinal) } == 0).then_some(g)
    });
    // SAFETY: NUL-terminated by the driver within the length given (the last byte stays 0).
    let bus = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }.to_string_lossy().into_owned();
    Some(Identity { uuid, gpu_uuid: gpu_uuid.flatten(), pci_bus_id: bus })
}

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

unsafe fn resolve_cuda_get_device() -> Found {
    let name = c"cudaGetDevice".as_ptr();
    let p = real_dlsym(RTLD_DEFAULT, name);
    if !p.is_null() && !is_ours(p) {
        return Found::At(p as usize);
    }
    match runtime_owner() {
        Some(h) => {
            let p = real_dlsym(h, name);
            libc::dlclose(h);
            if p.is_null() {
                Found::Unknown
            } else {
                Found::At(p as usize)
            }
        }
        None => Found::Unknown,
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

/// What the driver (and, for a runtime hook, the runtime) says of the calling thread's
/// current context.
pub enum Current {
    Device(i32),
    /// No context is current (or the driver refused the question): a runtime in its own
    /// initialisation loading its modules, a thread that never made one current.
    NoContext,
    /// The driver has no `cuCtxGetDevice` at all (none loaded, or one without it).
    Unknowable,
}

fn driver_current() -> Current {
    let f = CU_CTX_GET_DEVICE.get();
    if f == 0 {
        return Current::Unknowable;
    }
    let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute::<usize, _>(f) };
    let mut dev: c_int = -1;
    if unsafe { f(&mut dev) } == 0 && dev >= 0 {
        Current::Device(dev)
    } else {
        Current::NoContext
    }
}

/// The calling thread's current context, asked of the driver (`cuCtxGetCurrent`); None when
/// none is current or the driver cannot tell.
#[inline]
pub fn current_context() -> Option<u64> {
    let f = CU_CTX_GET_CURRENT.get();
    if f == 0 {
        return None;
    }
    let f: unsafe extern "C" fn(*mut CUcontext) -> c_int = unsafe { std::mem::transmute::<usize, _>(f) };
    let mut ctx: CUcontext = std::ptr::null_mut();
    (unsafe { f(&mut ctx) } == 0 && !ctx.is_null()).then_some(ctx as u64)
}

/// The runtime's current device (`cudaGetDevice`), for runtime hooks only.
fn runtime_current() -> Option<i32> {
    let f = CUDA_GET_DEVICE.get();
    if f == 0 {
        return None;
    }
    let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute::<usize, _>(f) };
    let mut dev: c_int = -1;
    (unsafe { f(&mut dev) } == 0 && dev >= 0).then_some(dev)
}

/// The device a call of `sym` is charged to: the device of the calling thread's current
/// context, asked of the driver. None when no context is current: there is no device to
/// charge (the caller records nothing and counts the call, `Ledger::no_context`).
///
/// Only a runtime hook may then ask the runtime's `cudaGetDevice`: the program called the
/// runtime entry point, so no runtime code is on the stack. A driver hook may be running
/// inside a runtime (cudart loads its fatbins with `cuLibraryLoadData` from its own
/// initialisation, with no context current, under its init lock): calling the runtime from
/// there re-enters that initialisation, which waits for itself for ever. A driver hook asks
/// the driver alone.
///
/// A driver without `cuCtxGetDevice` cannot tell the device at all: memory is counted on
/// device 0, said once.
pub fn current_device(sym: Sym) -> Option<i32> {
    match device_of(sym) {
        Current::Device(dev) => Some(dev),
        Current::NoContext => None,
        Current::Unknowable => {
            static NO_DEVICE_FUNCTION: AtomicBool = AtomicBool::new(false);
            if !NO_DEVICE_FUNCTION.swap(true, Ordering::Relaxed) {
                let line = "cannot tell the current device: the driver has no cuCtxGetDevice (and no runtime \
                            cudaGetDevice could be asked); memory is counted on device 0";
                crate::warn!("{line}");
                crate::ledger::global().note_warning(line);
            }
            Some(0)
        }
    }
}

/// What the calling thread's current device is for a call of `sym`, as [`current_device`]
/// decides it, without its device-0 stand-in: a measurement (a hidden driver cost) is
/// left out rather than charged to a guessed device.
pub fn device_of(sym: Sym) -> Current {
    let driver = driver_current();
    if let Current::Device(_) = driver {
        return driver;
    }
    if TABLE[sym as usize].kind == Kind::Runtime {
        if let Some(dev) = runtime_current() {
            return Current::Device(dev);
        }
    }
    driver
}

/// The device of stream `s` (a driver stream; the runtime's stream handles are the same):
/// the current device for the default streams (NULL, `CU_STREAM_LEGACY`,
/// `CU_STREAM_PER_THREAD`), else `cuStreamGetDevice` (CUDA 12.8+), else the device of the
/// stream's context (`cuStreamGetCtx`, made current for the question and popped again),
/// else the current device. Real driver functions only: no hook, no lock.
pub fn stream_device(sym: Sym, s: u64) -> Option<i32> {
    if s <= CU_STREAM_PER_THREAD {
        return current_device(sym);
    }
    type GetDevice = unsafe extern "C" fn(CUstream, *mut c_int) -> c_int;
    type GetCtx = unsafe extern "C" fn(CUstream, *mut CUcontext) -> c_int;
    type Push = unsafe extern "C" fn(CUcontext) -> c_int;
    type Pop = unsafe extern "C" fn(*mut CUcontext) -> c_int;
    let stream = s as CUstream;
    let f = CU_STREAM_GET_DEVICE.get();
    if f != 0 {
        let f: GetDevice = unsafe { std::mem::transmute::<usize, GetDevice>(f) };
        let mut dev: c_int = -1;
        if unsafe { f(stream, &mut dev) } == 0 && dev >= 0 {
            return Some(dev);
        }
    }
    let (get_ctx, push, pop, get_dev) =
        (CU_STREAM_GET_CTX.get(), CU_CTX_PUSH_CURRENT.get(), CU_CTX_POP_CURRENT.get(), CU_CTX_GET_DEVICE.get());
    if get_ctx != 0 && push != 0 && pop != 0 && get_dev != 0 {
        // SAFETY: real driver functions with their cuda.h signatures.
        unsafe {
            let get_ctx: GetCtx = std::mem::transmute::<usize, GetCtx>(get_ctx);
            let mut ctx: CUcontext = std::ptr::null_mut();
            if get_ctx(stream, &mut ctx) == 0 && !ctx.is_null() {
                let push: Push = std::mem::transmute::<usize, Push>(push);
                if push(ctx) == 0 {
                    let get_dev: unsafe extern "C" fn(*mut c_int) -> c_int = std::mem::transmute::<usize, _>(get_dev);
                    let mut dev: c_int = -1;
                    let rc = get_dev(&mut dev);
                    let pop: Pop = std::mem::transmute::<usize, Pop>(pop);
                    let mut popped: CUcontext = std::ptr::null_mut();
                    pop(&mut popped);
                    if rc == 0 && dev >= 0 {
                        return Some(dev);
                    }
                }
            }
        }
    }
    current_device(sym)
}

/// The device the driver says `ptr` was allocated on (`CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`).
pub fn pointer_device(ptr: u64) -> Option<i32> {
    let f = CU_POINTER_GET_ATTRIBUTE.get();
    if f == 0 {
        return None;
    }
    let f: unsafe extern "C" fn(*mut c_void, c_int, CUdeviceptr) -> c_int =
        unsafe { std::mem::transmute::<usize, _>(f) };
    let mut dev: c_int = -1;
    let rc = unsafe { f((&mut dev as *mut c_int).cast(), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) };
    (rc == 0 && dev >= 0).then_some(dev)
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
