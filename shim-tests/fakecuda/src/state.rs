//! The process-local state of the fake driver: contexts, the allocation table, address arenas,
//! streams, captures, graphs, modules, VMM handles, IPC mappings and the charges this process holds
//! on its machine.
//!
//! Everything sits behind one mutex ([`with`]). The fake never calls back into user code, so no
//! lock is ever held across a foreign call. After `fork()` the child starts from a fresh,
//! uninitialised state (its inherited handles are invalid, as with the real driver).
//!
//! One file although long: the state is one struct behind one lock, and its invariants (what
//! a context, an allocation or a handle holds on the machine, and what dropping each gives
//! back) are kept together where every entry point's bookkeeping can be read against them.

use crate::config::{round_up, Config, GRANULARITY, MAX_DEVICES};
use crate::shm::{self, Shm};
use crate::types::*;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

/// Result of an entry point body: `Err` carries the `CUresult` to return.
pub type R<T = ()> = Result<T, CUresult>;

/// Start of device `dev`'s address window: `0x7000_0000_0000 + dev * 2^39` (512 GiB each).
pub fn device_window(dev: usize) -> (u64, u64) {
    (0x7000_0000_0000 + ((dev as u64) << 39), 1 << 39)
}
/// Device `dev`'s window for the 32-bit (`_v1`) ABI: `0x1000_0000 * (dev + 1)`, 256 MiB each.
pub fn low_window(dev: usize) -> Option<(u64, u64)> {
    (dev < 15).then(|| (0x1000_0000 * (dev as u64 + 1), 0x1000_0000))
}
/// Window of `cuMemAddressReserve` (16 TiB, not tied to a device: VMM is device-agnostic VA).
pub const VMM_WINDOW: (u64, u64) = (0x6000_0000_0000, 0x1000_0000_0000);

/// Handle tags (the high bits of every opaque handle, so a stream passed as a context is refused).
pub mod tag {
    pub const CTX: u64 = 0x0c7c;
    pub const STREAM: u64 = 0x05e7;
    pub const GRAPH: u64 = 0x06a4;
    pub const EXEC: u64 = 0x0e8e;
    pub const MODULE: u64 = 0x0d0d;
    pub const LIBRARY: u64 = 0x0b1b;
    /// A device's default pool (the id is the device ordinal).
    pub const POOL: u64 = 0x0b00;
    /// A pool made by `cuMemPoolCreate`.
    pub const MADE_POOL: u64 = 0x0b01;
    pub const PHYS: u64 = 0x0a11;
    pub const EVENT: u64 = 0x0e7e;
    /// A kernel of a library (the id is the library's).
    pub const KERNEL: u64 = 0x0ce1;
    /// A function: of a library's kernel in a context, or of a module (the id is theirs).
    pub const FUNC: u64 = 0x0f0c;
    /// A library's module in a context (`cuLibraryGetModule`; the id is the library's).
    pub const LIBRARY_MODULE: u64 = 0x0d1b;
    /// A pending JIT link (`cuLinkCreate`).
    pub const LINK: u64 = 0x0111;
}

/// Builds a handle value from a tag and an id.
pub fn handle(tag: u64, id: u64) -> u64 {
    (tag << 32) | (id & 0xffff_ffff)
}
/// Tag of a handle value.
pub fn tag_of(h: u64) -> u64 {
    h >> 32
}

/// A first-fit address allocator over one window, with coalescing of freed ranges.
#[derive(Debug, Clone)]
pub struct Arena {
    free: BTreeMap<u64, u64>,
}

impl Arena {
    pub fn new((start, len): (u64, u64)) -> Arena {
        Arena { free: BTreeMap::from([(start, len)]) }
    }

    /// Allocates `size` bytes aligned to `align` (a power of two).
    pub fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        let (s, l, a) = self.free.iter().find_map(|(&s, &l)| {
            let a = s.checked_add(align - 1)? & !(align - 1);
            (a.checked_add(size)? <= s + l).then_some((s, l, a))
        })?;
        self.free.remove(&s);
        if a > s {
            self.free.insert(s, a - s);
        }
        if a + size < s + l {
            self.free.insert(a + size, s + l - a - size);
        }
        Some(a)
    }

    /// Takes the exact range `[start, start+size)` if it is free.
    pub fn take(&mut self, start: u64, size: u64) -> bool {
        let Some((&s, &l)) = self.free.range(..=start).next_back() else {
            return false;
        };
        let Some(end) = start.checked_add(size) else {
            return false;
        };
        if end > s + l {
            return false;
        }
        self.free.remove(&s);
        if start > s {
            self.free.insert(s, start - s);
        }
        if end < s + l {
            self.free.insert(end, s + l - end);
        }
        true
    }

    /// Gives `[start, start+size)` back.
    pub fn release(&mut self, start: u64, size: u64) {
        let (mut s, mut e) = (start, start + size);
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            if ps + pl == s {
                self.free.remove(&ps);
                s = ps;
            }
        }
        if let Some(nl) = self.free.remove(&e) {
            e += nl;
        }
        self.free.insert(s, e - s);
    }
}

/// What kind of device-visible range an [`Alloc`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `cuMemAlloc*`.
    Device,
    /// `cuMemAllocPitch*`.
    Pitch,
    /// `cuMemAllocManaged`: real host memory (the base is its host address).
    Managed,
    /// Stream-ordered (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`), from `pool`.
    Async { pool: u64 },
    /// A mapping of another process's allocation (`cuIpcOpenMemHandle`), exported by `exporter`.
    IpcOpen { slot: u32, id: u64, refs: u32, exporter: u32 },
    /// A VMM mapping of physical handle `phys` (`cuMemMap`).
    VmmMap { phys: u64 },
    /// The global variables of a module loaded in a context (part of the module's memory, charged
    /// with it): [`Proc::global`].
    Globals,
}

/// Address space of one module's globals in one context, and the bytes each name gets: the fake
/// reads no images, so every name is a global of [`GLOBAL_BYTES`] (the most a `__constant__`
/// variable holds), handed out in the order names are first asked for.
pub const GLOBALS_SPAN: u64 = 16 << 20;
pub const GLOBAL_BYTES: u64 = 64 << 10;

/// A pending JIT link: the inputs added so far and the image `cuLinkComplete` handed out (owned
/// by the link until `cuLinkDestroy`).
#[derive(Debug, Clone, Default)]
pub struct Link {
    pub inputs: Vec<u8>,
    pub image: Vec<u8>,
}

/// The globals handed out for one (module or library, context).
#[derive(Debug, Clone)]
pub struct Globals {
    pub base: u64,
    /// Name -> offset from `base`.
    pub names: HashMap<String, u64>,
}

/// One entry of the process's device-pointer table.
#[derive(Debug, Clone)]
pub struct Alloc {
    pub base: u64,
    /// Size as requested (the address range).
    pub size: u64,
    /// Bytes reserved in the address window (and charged, for owned memory).
    pub span: u64,
    pub dev: usize,
    pub kind: Kind,
    /// Context that owns it (0 for VMM mappings, which are context-independent).
    pub ctx: u64,
    /// Bytes charged to the machine and to which device (owned memory or hidden costs).
    pub charge: Option<(usize, u64)>,
    /// IPC export slot/id while exported.
    pub export: Option<(u32, u64)>,
    /// Set when the address came from the 32-bit window.
    pub low: bool,
}

/// A page of [`GRANULARITY`] bytes that small allocations of one context share: charged when
/// the first is made, given back with the last.
#[derive(Debug, Clone)]
pub struct SmallPage {
    pub ctx: u64,
    pub dev: usize,
    /// Offset of the next allocation (the page is filled in order; freed space is reused only
    /// once the whole page is free).
    pub next: u64,
    /// Live allocations in the page.
    pub live: u32,
}

/// `cuMemAlloc` requests below this share pages ([`Proc::alloc_small`]).
pub const SMALL_ALLOC: u64 = GRANULARITY;
/// Where a small allocation may start in its page: cudaMalloc's documented alignment is at least
/// 256 bytes (CUDA C++ Programming Guide, "Device Memory Accesses").
pub const SMALL_ALIGN: u64 = 512;

/// Pinned or registered host memory.
#[derive(Debug, Clone)]
pub struct HostRange {
    pub base: u64,
    pub size: u64,
    /// `Some(mapped length)` for memory the fake allocated (`cuMemHostAlloc`), None if registered.
    pub owned: Option<usize>,
    /// Mapped into the device address space (`cuMemHostGetDevicePointer` answers): all allocated
    /// host memory on a device with unified addressing, registered memory only with
    /// `CU_MEMHOSTREGISTER_DEVICEMAP`.
    pub mapped: bool,
    pub ctx: u64,
    pub dev: usize,
}

/// A context.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub dev: usize,
    pub primary: bool,
    /// `FAKECUDA_CTX_EXTRA_MIB` charged for this context (not the first on its device).
    pub extra: u64,
    /// Its memory is committed (the context cost charged). A primary context the runtime's
    /// private table handed out ([`Proc::inactive_primary`]) is not, until it is retained or
    /// made current ([`Proc::activate`]).
    pub active: bool,
}

/// A VMM physical allocation (`cuMemCreate` / `cuMemImportFromShareableHandle`).
#[derive(Debug, Clone)]
pub struct Phys {
    pub dev: usize,
    pub size: u64,
    /// Handle references (create/import = 1, each `cuMemRetainAllocationHandle` + 1).
    pub refs: u32,
    /// Live mappings.
    pub maps: u32,
    /// Bytes charged (0 for imported memory, owned by the exporter, and for host memory).
    pub charged: u64,
    pub handle_types: i32,
    /// Host-located memory (`CU_MEM_LOCATION_TYPE_HOST*`): real memory the CPU reads and writes.
    pub host: Option<HostPhys>,
}

/// The backing of host-located VMM memory: a memfd whose first page holds the export record
/// and whose data follows at [`HOST_PHYS_DATA`], so every mapping, in this process or an
/// importing one, sees the same bytes.
#[derive(Debug, Clone)]
pub struct HostPhys {
    pub fd: libc::c_int,
    pub location: CUmemLocation,
}

/// Offset of the data in a [`HostPhys`] memfd.
pub const HOST_PHYS_DATA: u64 = 4096;

/// A created stream.
#[derive(Debug, Clone)]
pub struct Stream {
    pub ctx: u64,
    pub dev: usize,
    pub flags: u32,
    pub priority: i32,
}

/// A created event.
#[derive(Debug, Clone)]
pub struct Event {
    pub ctx: u64,
    pub flags: u32,
}

/// An ongoing stream capture.
#[derive(Debug, Clone)]
pub struct Capture {
    pub mode: i32,
    pub thread: u64,
    pub graph: u64,
    pub invalidated: bool,
    /// Capturing into a graph the caller owns (`cuStreamBeginCaptureToGraph`,
    /// `cuStreamBeginRecaptureToGraph`): an invalidated capture leaves it to the caller.
    pub into_existing: bool,
}

/// A graph (captured or created) and an instantiated one.
#[derive(Debug, Clone)]
pub struct Graph {
    pub dev: usize,
    /// Stream-ordered allocations made while capturing into this graph.
    pub alloc_nodes: Vec<u64>,
}

/// An object whose only effect is a hidden cost (graph exec, module, library, peer mapping).
#[derive(Debug, Clone)]
pub struct Costly {
    pub ctx: u64,
    pub dev: usize,
    pub charged: u64,
}

/// Key of a stream for capture bookkeeping (created streams: their handle; per-thread default
/// stream: [`PER_THREAD_KEY`] | thread token).
pub type StreamKey = u64;
pub const PER_THREAD_KEY: u64 = 1 << 63;

/// The whole process state.
pub struct Proc {
    pub pid: u32,
    pub start: u64,
    pub initialized: bool,
    pub shm: Option<&'static Shm>,
    pub slot: Option<usize>,
    /// Devices this process sees (`CUDA_VISIBLE_DEVICES`): its ordinals.
    pub devices: usize,
    /// The physical device of each ordinal: usage is charged to the machine's physical device,
    /// which every process of the machine shares whatever ordinal it reaches it by.
    pub visible: Vec<usize>,
    next_id: u64,
    pub ctxs: HashMap<u64, Ctx>,
    /// Primary context per device: (handle while retained, reference count); whether its memory
    /// is committed is the context's own `active`.
    pub primary: Vec<(Option<u64>, u32)>,
    /// Active contexts per device (the hidden context cost is held while > 0).
    pub ctx_count: Vec<u32>,
    pub allocs: BTreeMap<u64, Alloc>,
    pub host: BTreeMap<u64, HostRange>,
    arenas: Vec<Arena>,
    low: Vec<Option<Arena>>,
    pub vmm_va: Arena,
    pub reservations: BTreeMap<u64, u64>,
    pub phys: HashMap<u64, Phys>,
    /// Pools made by `cuMemPoolCreate`: handle to device.
    pub pools: HashMap<u64, usize>,
    pub streams: HashMap<u64, Stream>,
    pub captures: HashMap<StreamKey, Capture>,
    pub graphs: HashMap<u64, Graph>,
    pub execs: HashMap<u64, Costly>,
    pub modules: HashMap<u64, Costly>,
    /// Pages that small `cuMemAlloc` allocations share: page base -> its use ([`Proc::alloc_small`]).
    pub small_pages: BTreeMap<u64, SmallPage>,
    /// Loaded context-independent libraries (`cuLibraryLoad*`). A real driver loads them lazily
    /// (`CUDA_MODULE_LOADING=LAZY`, the default since CUDA 12.2): nothing is charged until a kernel
    /// of the library is first used in a context ([`Proc::use_library`]).
    pub libraries: HashMap<u64, ()>,
    /// A library loaded into a context: (library, context) -> its cost there.
    pub lib_loads: HashMap<(u64, u64), Costly>,
    /// Globals asked for: (module or library, context) -> their address range.
    pub globals: HashMap<(u64, u64), Globals>,
    /// Pending JIT links: handle -> what was added, and the image of the last completion.
    pub links: HashMap<u64, Link>,
    /// Function attributes set (`cuFuncSetAttribute`, `cuKernelSetAttribute`): (module or
    /// library, device) -> attribute -> value. The fake tells no two functions of one module
    /// apart (any name is a function of it), so they share what was set.
    pub func_attrs: HashMap<(u64, usize), HashMap<c_int, c_int>>,
    pub events: HashMap<u64, Event>,
    /// Context-local storage of the runtime's private table: (context, key) -> value.
    pub ctx_storage: HashMap<(u64, usize), usize>,
    /// High-water marks of stream-ordered pools: pool -> (reserved, used) bytes.
    pub pool_high: HashMap<u64, (u64, u64)>,
    /// Enabled peer mappings: (context, peer context) -> cost.
    pub peers: HashMap<(u64, u64), Costly>,
    /// Opened IPC handles: (slot, id, opening context) -> mapped base.
    pub ipc_opens: HashMap<(u32, u64, u64), u64>,
}

thread_local! {
    /// The calling thread's context stack (top = current context).
    static CTX_STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// The calling thread's stream capture interaction mode.
    static CAPTURE_MODE: Cell<i32> = const { Cell::new(CU_STREAM_CAPTURE_MODE_GLOBAL) };
    static TOKEN: u64 = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
}
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);
static PROC: Mutex<Option<Proc>> = Mutex::new(None);

thread_local! {
    /// The state lock held by the forking thread across `fork()` (see [`register_atfork`]).
    static FORK_GUARD: RefCell<Option<MutexGuard<'static, Option<Proc>>>> = const { RefCell::new(None) };
}

extern "C" fn before_fork() {
    let g = PROC.lock().unwrap_or_else(|e| e.into_inner());
    FORK_GUARD.with(|f| *f.borrow_mut() = Some(g));
}

extern "C" fn after_fork() {
    FORK_GUARD.with(|f| drop(f.borrow_mut().take()));
}

/// Takes the state lock around `fork()`, so a child never inherits it locked by a thread that
/// does not exist there (the child then starts from a fresh state, see [`with`]).
fn register_atfork() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers plain extern "C" handlers that only lock/unlock our own mutex.
        unsafe {
            libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork));
        }
    });
}

/// A small unique number for the calling thread.
pub fn thread_token() -> u64 {
    TOKEN.with(|t| *t)
}

/// The calling thread's current context handle (0 if none). During thread or process exit,
/// after the stack is destroyed (torch's static destructors still call `cudaGetDevice`), there
/// is none.
pub fn current_handle() -> u64 {
    CTX_STACK.try_with(|s| s.borrow().last().copied().unwrap_or(0)).unwrap_or(0)
}

/// Replaces the top of the calling thread's context stack (0 pops, as cuCtxSetCurrent(NULL)).
pub fn set_current(ctx: u64) {
    let _ = CTX_STACK.try_with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        if ctx != 0 {
            s.push(ctx);
        }
    });
}

/// Pushes / pops the calling thread's context stack.
pub fn push_current(ctx: u64) {
    let _ = CTX_STACK.try_with(|s| s.borrow_mut().push(ctx));
}
pub fn pop_current() -> Option<u64> {
    CTX_STACK.try_with(|s| s.borrow_mut().pop()).ok().flatten()
}

/// Exchanges the calling thread's capture mode.
pub fn exchange_capture_mode(mode: i32) -> i32 {
    CAPTURE_MODE.with(|m| m.replace(mode))
}

/// Runs `f` on the process state (fresh after a fork).
pub fn with<T>(f: impl FnOnce(&mut Proc) -> T) -> T {
    register_atfork();
    let mut g = PROC.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if g.as_ref().is_none_or(|p| p.pid != pid) {
        *g = Some(Proc::new(pid));
    }
    match g.as_mut() {
        Some(p) => f(p),
        None => unreachable_state(),
    }
}

#[cold]
fn unreachable_state() -> ! {
    // `with` has just stored Some; this cannot happen, and guard() turns it into CUDA_ERROR_UNKNOWN.
    panic!("fakecuda: process state missing")
}

/// Like [`with`], but `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
pub fn with_init<T>(f: impl FnOnce(&mut Proc) -> R<T>) -> R<T> {
    with(|p| if p.initialized { f(p) } else { Err(CUDA_ERROR_NOT_INITIALIZED) })
}

/// Process exit: give this process's usage and exports back to the machine right away.
pub fn at_exit() {
    let Ok(mut g) = PROC.try_lock() else { return };
    if let Some(p) = g.as_mut() {
        if p.pid == std::process::id() {
            if let (Some(shm), Some(slot)) = (p.shm, p.slot.take()) {
                shm.detach(slot, p.pid);
            }
        }
    }
}

impl Proc {
    fn new(pid: u32) -> Proc {
        Proc {
            pid,
            start: 0,
            initialized: false,
            shm: None,
            slot: None,
            devices: 0,
            visible: Vec::new(),
            next_id: 0,
            ctxs: HashMap::new(),
            primary: Vec::new(),
            ctx_count: Vec::new(),
            allocs: BTreeMap::new(),
            host: BTreeMap::new(),
            arenas: (0..MAX_DEVICES).map(|d| Arena::new(device_window(d))).collect(),
            low: (0..MAX_DEVICES).map(|d| low_window(d).map(Arena::new)).collect(),
            vmm_va: Arena::new(VMM_WINDOW),
            reservations: BTreeMap::new(),
            phys: HashMap::new(),
            pools: HashMap::new(),
            streams: HashMap::new(),
            captures: HashMap::new(),
            graphs: HashMap::new(),
            execs: HashMap::new(),
            modules: HashMap::new(),
            small_pages: BTreeMap::new(),
            libraries: HashMap::new(),
            lib_loads: HashMap::new(),
            globals: HashMap::new(),
            links: HashMap::new(),
            func_attrs: HashMap::new(),
            events: HashMap::new(),
            ctx_storage: HashMap::new(),
            pool_high: HashMap::new(),
            peers: HashMap::new(),
            ipc_opens: HashMap::new(),
        }
    }

    /// `cuInit`: attach to the machine.
    pub fn init(&mut self) -> R {
        if self.initialized {
            return Ok(());
        }
        if Config::get().devices == 0 {
            return Err(CUDA_ERROR_NO_DEVICE);
        }
        let shm = shm::machine().ok_or(CUDA_ERROR_OPERATING_SYSTEM)?;
        let cfg = Config::get();
        let visible = crate::config::visible_devices(cfg.visible.as_deref(), shm.devices(), &cfg.machine, &cfg.mig);
        if visible.is_empty() {
            // The real driver: CUDA_VISIBLE_DEVICES naming no device is CUDA_ERROR_NO_DEVICE.
            return Err(CUDA_ERROR_NO_DEVICE);
        }
        self.start = shm::self_start_time();
        self.slot = shm.attach(self.pid, self.start);
        self.shm = Some(shm);
        self.devices = visible.len();
        self.visible = visible;
        self.primary = vec![(None, 0); self.devices];
        self.ctx_count = vec![0; self.devices];
        self.initialized = true;
        Ok(())
    }

    /// A fresh handle with `tag`.
    pub fn new_handle(&mut self, tag: u64) -> u64 {
        self.next_id += 1;
        handle(tag, self.next_id)
    }

    /// Validates a device ordinal.
    pub fn device(&self, dev: CUdevice) -> R<usize> {
        usize::try_from(dev).ok().filter(|d| *d < self.devices).ok_or(CUDA_ERROR_INVALID_DEVICE)
    }

    /// The physical device of ordinal `dev` (validated).
    pub fn physical(&self, dev: CUdevice) -> R<usize> {
        self.device(dev).map(|d| self.visible[d])
    }

    /// The ordinal by which this process sees physical device `phys`, if it sees it.
    pub fn ordinal_of(&self, phys: usize) -> Option<usize> {
        self.visible.iter().position(|p| *p == phys)
    }

    /// The calling thread's current context and its device (`CUDA_ERROR_INVALID_CONTEXT` if none).
    pub fn current(&self) -> R<(u64, usize)> {
        let h = current_handle();
        self.ctxs.get(&h).map(|c| (h, c.dev)).ok_or(CUDA_ERROR_INVALID_CONTEXT)
    }

    /// Validates a context handle.
    pub fn ctx(&self, h: u64) -> R<&Ctx> {
        self.ctxs.get(&h).ok_or(CUDA_ERROR_INVALID_CONTEXT)
    }

    /// Charges `bytes` to ordinal `dev`'s physical device on the machine
    /// (`CUDA_ERROR_OUT_OF_MEMORY` if it does not fit).
    pub fn charge(&mut self, dev: usize, bytes: u64) -> R {
        let shm = self.shm.ok_or(CUDA_ERROR_NOT_INITIALIZED)?;
        if bytes == 0 || shm.reserve(self.slot, self.visible[dev], bytes) {
            crate::trace::usage('+', bytes, dev);
            Ok(())
        } else {
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        }
    }

    /// Gives `bytes` of ordinal `dev`'s physical device back to the machine.
    pub fn uncharge(&mut self, dev: usize, bytes: u64) {
        if let (Some(shm), true) = (self.shm, bytes > 0) {
            shm.release(self.slot, self.visible[dev], bytes);
            crate::trace::usage('-', bytes, dev);
        }
    }

    /// (free, total) of ordinal `dev` as `cuMemGetInfo` reports them: its physical device's,
    /// every process of the machine counted.
    pub fn mem_info(&self, dev: usize) -> (u64, u64) {
        match self.shm {
            Some(shm) => {
                let dev = self.visible[dev];
                shm.sweep_with(false);
                let total = shm.total(dev);
                (total.saturating_sub(shm.used(dev)), total)
            }
            None => (0, 0),
        }
    }

    /// Creates a context on `dev` (charging the hidden context cost if it is the device's first).
    pub fn create_ctx(&mut self, dev: usize, primary: bool) -> R<u64> {
        let extra = self.charge_ctx(dev)?;
        let h = self.new_handle(tag::CTX);
        self.ctxs.insert(h, Ctx { dev, primary, extra, active: true });
        Ok(h)
    }

    /// The primary context of `dev` as a handle only: nothing committed on the device. What the
    /// runtime's private table gives it for every device when it initialises; the memory is
    /// committed when the context is retained or first made current ([`Proc::activate`]).
    pub fn inactive_primary(&mut self, dev: usize) -> u64 {
        let h = self.new_handle(tag::CTX);
        self.ctxs.insert(h, Ctx { dev, primary: true, extra: 0, active: false });
        h
    }

    /// Commits context `h`'s memory if it is not yet (the context cost, as [`Proc::create_ctx`]).
    pub fn activate(&mut self, h: u64) -> R {
        let c = self.ctxs.get(&h).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        if c.active {
            return Ok(());
        }
        let extra = self.charge_ctx(c.dev)?;
        if let Some(c) = self.ctxs.get_mut(&h) {
            c.extra = extra;
            c.active = true;
        }
        Ok(())
    }

    /// Charges a context on `dev`: the hidden context cost for the device's first, the extra
    /// cost for each other; returns the extra charged.
    fn charge_ctx(&mut self, dev: usize) -> R<u64> {
        let extra = if self.ctx_count[dev] == 0 {
            self.charge(dev, Config::get().ctx_cost)?;
            0
        } else {
            let extra = Config::get().ctx_extra_cost;
            self.charge(dev, extra)?;
            extra
        };
        self.ctx_count[dev] += 1;
        Ok(extra)
    }

    /// Destroys a context and everything it owns (allocations, host memory, streams, graph execs,
    /// modules, peer mappings, IPC mappings), giving their memory back.
    pub fn destroy_ctx(&mut self, h: u64) -> R {
        let ctx = self.ctxs.remove(&h).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        let owned: Vec<u64> = self.allocs.values().filter(|a| a.ctx == h).map(|a| a.base).collect();
        for base in owned {
            self.remove_alloc(base);
        }
        let hosts: Vec<u64> = self.host.values().filter(|r| r.ctx == h).map(|r| r.base).collect();
        for base in hosts {
            self.remove_host(base);
        }
        self.streams.retain(|_, s| s.ctx != h);
        self.captures.retain(|k, _| *k & PER_THREAD_KEY != 0 || self.streams.contains_key(k));
        for costly in [&mut self.execs, &mut self.modules] {
            let gone: Vec<u64> = costly.iter().filter(|(_, c)| c.ctx == h).map(|(k, _)| *k).collect();
            for k in gone {
                if let Some(c) = costly.remove(&k) {
                    if let Some(shm) = self.shm {
                        shm.release(self.slot, self.visible[c.dev], c.charged);
                    }
                }
            }
        }
        let loads: Vec<(u64, u64)> = self.lib_loads.keys().filter(|(_, c)| *c == h).copied().collect();
        for k in loads {
            if let Some(c) = self.lib_loads.remove(&k) {
                self.uncharge(c.dev, c.charged);
            }
        }
        self.globals.retain(|(_, c), _| *c != h);
        self.events.retain(|_, e| e.ctx != h);
        self.ctx_storage.retain(|(c, _), _| *c != h);
        let peers: Vec<(u64, u64)> = self.peers.keys().filter(|(a, b)| *a == h || *b == h).copied().collect();
        for k in peers {
            if let Some(c) = self.peers.remove(&k) {
                self.uncharge(c.dev, c.charged);
            }
        }
        if ctx.active {
            self.uncharge(ctx.dev, ctx.extra);
            self.ctx_count[ctx.dev] -= 1;
            if self.ctx_count[ctx.dev] == 0 {
                self.uncharge(ctx.dev, Config::get().ctx_cost);
            }
        }
        let _ = CTX_STACK.try_with(|s| s.borrow_mut().retain(|c| *c != h));
        Ok(())
    }

    /// A kernel of library `lib` is used in the current context: the first use there loads the
    /// library into it (charging `FAKECUDA_MODULE_MIB` on the context's device until the library
    /// is unloaded or the context destroyed).
    pub fn use_library(&mut self, lib: u64) -> R<(u64, usize)> {
        if !self.libraries.contains_key(&lib) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let (ctx, dev) = self.current()?;
        if !self.lib_loads.contains_key(&(lib, ctx)) {
            let cost = Config::get().module_cost;
            self.charge(dev, cost)?;
            crate::trace::charge("library", cost, dev, Some(lib), ctx);
            self.lib_loads.insert((lib, ctx), Costly { ctx, dev, charged: cost });
        }
        Ok((ctx, dev))
    }

    /// (reserved, used) bytes of `pool`: the granules its live allocations hold, and their sizes
    /// as requested (the fake's pools keep nothing cached: a free gives the memory back at once).
    pub fn pool_bytes(&self, pool: u64) -> (u64, u64) {
        self.allocs
            .values()
            .filter(|a| a.kind == Kind::Async { pool })
            .fold((0, 0), |(r, u), a| (r + a.span, u + a.size))
    }

    /// Raises `pool`'s high-water marks to its current bytes.
    pub fn note_pool(&mut self, pool: u64) {
        let (reserved, used) = self.pool_bytes(pool);
        let high = self.pool_high.entry(pool).or_insert((0, 0));
        *high = (high.0.max(reserved), high.1.max(used));
    }

    /// Reserves device address space: from the 32-bit window when `low`.
    pub fn reserve_va(&mut self, dev: usize, span: u64, low: bool) -> R<u64> {
        let arena = if low { self.low[dev].as_mut() } else { Some(&mut self.arenas[dev]) };
        arena.and_then(|a| a.alloc(span, GRANULARITY)).ok_or(CUDA_ERROR_OUT_OF_MEMORY)
    }

    fn release_va(&mut self, a: &Alloc) {
        if a.kind == Kind::Managed {
            return;
        }
        let arena = if a.low { self.low[a.dev].as_mut() } else { Some(&mut self.arenas[a.dev]) };
        if let Some(arena) = arena {
            arena.release(a.base, a.span);
        }
    }

    /// Allocates owned device memory of `size` bytes on `dev` for the current context: rounds up,
    /// charges, reserves an address (or maps real memory for managed) and records it.
    pub fn alloc_device(&mut self, ctx: u64, dev: usize, size: u64, kind: Kind, low: bool) -> R<u64> {
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if kind == Kind::Device && !low && size < SMALL_ALLOC {
            return self.alloc_small(ctx, dev, size);
        }
        let span = round_up(size).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        self.charge(dev, span)?;
        let base =
            if kind == Kind::Managed { map_host(span).map(|p| p as u64) } else { self.reserve_va(dev, span, low) };
        let base = match base {
            Ok(b) => b,
            Err(e) => {
                self.uncharge(dev, span);
                return Err(e);
            }
        };
        self.allocs
            .insert(base, Alloc { base, size, span, dev, kind, ctx, charge: Some((dev, span)), export: None, low });
        Ok(base)
    }

    /// A small `cuMemAlloc` (below [`SMALL_ALLOC`]): a real driver does not give each its own
    /// 2 MiB page but packs them, so that many small allocations of a context lie in one page
    /// ("cudaMalloc() would return multiple memory chunks located in the same GPU page", VILLASfpga
    /// commit "gpu: always allocate page-sized chunks"). The page is charged when it is opened and
    /// given back when its last allocation is freed; an allocation keeps its own address range
    /// (`cuMemGetAddressRange`, IPC export) and is recorded with no charge of its own.
    fn alloc_small(&mut self, ctx: u64, dev: usize, size: u64) -> R<u64> {
        let step = (size + SMALL_ALIGN - 1) & !(SMALL_ALIGN - 1);
        let room = self
            .small_pages
            .iter_mut()
            .find(|(_, pg)| pg.ctx == ctx && pg.dev == dev && pg.next + step <= GRANULARITY);
        let base = match room {
            Some((page, pg)) => {
                let at = page + pg.next;
                pg.next += step;
                pg.live += 1;
                at
            }
            None => {
                self.charge(dev, GRANULARITY)?;
                let page = match self.reserve_va(dev, GRANULARITY, false) {
                    Ok(b) => b,
                    Err(e) => {
                        self.uncharge(dev, GRANULARITY);
                        return Err(e);
                    }
                };
                self.small_pages.insert(page, SmallPage { ctx, dev, next: step, live: 1 });
                page
            }
        };
        let kind = Kind::Device;
        self.allocs.insert(base, Alloc { base, size, span: step, dev, kind, ctx, charge: None, export: None, low: false });
        Ok(base)
    }

    /// A small allocation at `base` was freed: its page goes back with its last one.
    fn free_small(&mut self, base: u64) {
        let page = base & !(GRANULARITY - 1);
        let Some(pg) = self.small_pages.get_mut(&page) else { return };
        pg.live -= 1;
        if pg.live == 0 {
            let dev = pg.dev;
            self.small_pages.remove(&page);
            self.arenas[dev].release(page, GRANULARITY);
            self.uncharge(dev, GRANULARITY);
        }
    }

    /// The allocation containing `ptr`.
    pub fn find(&self, ptr: u64) -> Option<&Alloc> {
        self.allocs.range(..=ptr).next_back().map(|(_, a)| a).filter(|a| ptr - a.base < a.size.max(1))
    }

    /// Checks that `[ptr, ptr+len)` lies inside one live device-visible allocation.
    pub fn check_range(&self, ptr: u64, len: u64) -> R<&Alloc> {
        let a = self.find(ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        match ptr.checked_add(len) {
            Some(end) if end <= a.base + a.size => Ok(a),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    }

    /// True if `ptr` lies in one of the fake address windows (it must then be a live allocation).
    pub fn in_fake_window(&self, ptr: u64) -> bool {
        let inside = |(s, l): (u64, u64)| ptr >= s && ptr - s < l;
        inside(VMM_WINDOW) || (0..MAX_DEVICES).any(|d| inside(device_window(d)) || low_window(d).is_some_and(inside))
    }

    /// Removes an allocation: gives back its charge, address range, export and real memory.
    pub fn remove_alloc(&mut self, base: u64) -> Option<Alloc> {
        let a = self.allocs.remove(&base)?;
        if let Some((dev, bytes)) = a.charge {
            self.uncharge(dev, bytes);
        }
        if let (Some((slot, id)), Some(shm)) = (a.export, self.shm) {
            shm.unexport(slot, id);
        }
        match a.kind {
            // SAFETY: managed memory was mapped by map_host with this span; the entry is gone now.
            Kind::Managed => unsafe { unmap_host(a.base as *mut libc::c_void, a.span as usize) },
            Kind::IpcOpen { slot, id, .. } => {
                self.ipc_opens.remove(&(slot, id, a.ctx));
                self.release_va(&a);
            }
            Kind::VmmMap { phys } => {
                if let Some(p) = self.phys.get_mut(&phys) {
                    p.maps -= 1;
                    if p.host.is_some() {
                        // SAFETY: cuMemMap mapped the memfd at exactly this range for this entry.
                        unsafe { libc::munmap(a.base as *mut libc::c_void, a.size as usize) };
                    }
                }
                self.maybe_free_phys(phys);
            }
            Kind::Device if a.charge.is_none() => self.free_small(a.base),
            _ => self.release_va(&a),
        }
        for g in self.graphs.values_mut() {
            g.alloc_nodes.retain(|b| *b != base);
        }
        Some(a)
    }

    /// Frees a VMM physical allocation once it has neither handle references nor mappings.
    pub fn maybe_free_phys(&mut self, h: u64) {
        if let Some(p) = self.phys.get(&h) {
            if p.refs == 0 && p.maps == 0 {
                let (dev, charged) = (p.dev, p.charged);
                if let Some(host) = self.phys.remove(&h).and_then(|p| p.host) {
                    // SAFETY: the memfd is owned by this entry, which is gone now.
                    unsafe { libc::close(host.fd) };
                }
                self.uncharge(dev, charged);
            }
        }
    }

    /// The host range (pinned or registered) containing `ptr`.
    pub fn find_host(&self, ptr: u64) -> Option<&HostRange> {
        self.host.range(..=ptr).next_back().map(|(_, r)| r).filter(|r| ptr - r.base < r.size.max(1))
    }

    /// Removes a host range, unmapping memory the fake allocated.
    pub fn remove_host(&mut self, base: u64) -> Option<HostRange> {
        let r = self.host.remove(&base)?;
        if let Some(len) = r.owned {
            // SAFETY: owned host memory was mapped by map_host with this length; the entry is gone now.
            unsafe { unmap_host(r.base as *mut libc::c_void, len) };
        }
        Some(r)
    }

    /// Releases a costly object's hidden cost.
    /// The address of global `name` of `owner` (a module, or a library's module) in context
    /// `ctx` on `dev`: the first name asked for in a (module, context) reserves its globals'
    /// address range, a device range owned by the context that cannot be freed.
    pub fn global(&mut self, owner: u64, ctx: u64, dev: usize, name: &str) -> R<u64> {
        if !self.globals.contains_key(&(owner, ctx)) {
            let base = self.reserve_va(dev, GLOBALS_SPAN, false)?;
            let a = Alloc {
                base,
                size: GLOBALS_SPAN,
                span: GLOBALS_SPAN,
                dev,
                kind: Kind::Globals,
                ctx,
                charge: None,
                export: None,
                low: false,
            };
            self.allocs.insert(base, a);
            self.globals.insert((owner, ctx), Globals { base, names: HashMap::new() });
        }
        let g = self.globals.get_mut(&(owner, ctx)).ok_or(CUDA_ERROR_UNKNOWN)?;
        if let Some(off) = g.names.get(name) {
            return Ok(g.base + off);
        }
        let off = g.names.len() as u64 * GLOBAL_BYTES;
        if off + GLOBAL_BYTES > GLOBALS_SPAN {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        g.names.insert(name.to_string(), off);
        Ok(g.base + off)
    }

    /// Forgets what belonged to module or library `owner` (unloaded) in every context: its
    /// globals and the attributes set on its functions.
    pub fn forget_module(&mut self, owner: u64) {
        self.func_attrs.retain(|(o, _), _| *o != owner);
        self.drop_globals(owner);
    }

    fn drop_globals(&mut self, owner: u64) {
        let gone: Vec<(u64, u64)> = self.globals.keys().filter(|(o, _)| *o == owner).copied().collect();
        for k in gone {
            if let Some(g) = self.globals.remove(&k) {
                self.remove_alloc(g.base);
            }
        }
    }

    pub fn drop_costly(&mut self, c: Costly) {
        self.uncharge(c.dev, c.charged);
    }

    /// Refuses a "potentially unsafe" call (synchronous allocation/free) while a capture that the
    /// calling thread's capture mode protects is ongoing, invalidating that capture, like the real
    /// driver (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`).
    pub fn check_capture_safe(&mut self) -> R {
        let mode = CAPTURE_MODE.with(|m| m.get());
        if mode == CU_STREAM_CAPTURE_MODE_RELAXED {
            return Ok(());
        }
        let me = thread_token();
        let mut refused = false;
        for c in self.captures.values_mut() {
            let applies = c.mode != CU_STREAM_CAPTURE_MODE_RELAXED
                && (c.thread == me
                    || (mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL));
            if applies {
                c.invalidated = true;
                refused = true;
            }
        }
        if refused {
            Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
        } else {
            Ok(())
        }
    }

    /// Resolves a stream handle: (capture key or None for the legacy stream, device).
    /// `per_thread` is true for `_ptsz`/`_ptds` entry points, where NULL means the per-thread stream.
    pub fn stream(&self, s: CUstream, per_thread: bool) -> R<(Option<StreamKey>, usize)> {
        let v = s as usize;
        let (_, dev) = self.current()?;
        match v {
            0 if per_thread => Ok((Some(PER_THREAD_KEY | thread_token()), dev)),
            0 | CU_STREAM_LEGACY => Ok((None, dev)),
            CU_STREAM_PER_THREAD => Ok((Some(PER_THREAD_KEY | thread_token()), dev)),
            _ => self.streams.get(&(v as u64)).map(|st| (Some(v as u64), st.dev)).ok_or(CUDA_ERROR_INVALID_HANDLE),
        }
    }
}

/// Maps `len` bytes of real, zeroed host memory.
pub fn map_host(len: u64) -> R<*mut libc::c_void> {
    let len = usize::try_from(len).map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: anonymous private mapping, checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(CUDA_ERROR_OUT_OF_MEMORY)
    } else {
        Ok(p)
    }
}

/// Unmaps memory from [`map_host`].
///
/// # Safety
/// `p`/`len` must come from a successful [`map_host`] and be unmapped once.
pub unsafe fn unmap_host(p: *mut libc::c_void, len: usize) {
    libc::munmap(p, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_first_fit_alignment_and_coalescing() {
        let mut a = Arena::new((0x1000_0000, 8 << 20));
        let x = a.alloc(2 << 20, 2 << 20).unwrap();
        let y = a.alloc(2 << 20, 2 << 20).unwrap();
        let z = a.alloc(4 << 20, 2 << 20).unwrap();
        assert_eq!((x, y, z), (0x1000_0000, 0x1020_0000, 0x1040_0000));
        assert_eq!(a.alloc(2 << 20, 2 << 20), None, "full");
        a.release(y, 2 << 20);
        assert_eq!(a.alloc(4 << 20, 2 << 20), None, "a 2 MiB hole does not fit 4 MiB");
        a.release(x, 2 << 20);
        assert_eq!(a.alloc(4 << 20, 2 << 20), Some(x), "freed neighbours coalesce");
        a.release(x, 4 << 20);
        a.release(z, 4 << 20);
        assert_eq!(a.free.len(), 1, "everything coalesces back into one range");
        assert!(a.take(0x1030_0000, 1 << 20));
        assert!(!a.take(0x1030_0000, 1 << 20), "taken twice");
        assert_eq!(a.alloc(8 << 20, 2 << 20), None);
    }

    #[test]
    fn windows_do_not_overlap() {
        let mut ranges: Vec<(u64, u64)> = (0..MAX_DEVICES).map(device_window).collect();
        ranges.extend((0..MAX_DEVICES).filter_map(low_window));
        ranges.push(VMM_WINDOW);
        ranges.sort();
        for w in ranges.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{w:x?}");
        }
        let last = device_window(MAX_DEVICES - 1);
        assert!(last.0 + last.1 <= 0x7800_0000_0000, "below typical host mappings");
        assert!(low_window(14).is_some_and(|(s, l)| s + l <= 1 << 32));
        assert!(low_window(15).is_none());
    }
}
