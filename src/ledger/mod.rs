//! Per-device ledgers: pure Rust, no FFI. See docs/schema.md for what they render to.
//!
//! API CONTRACT (used by src/hooks and src/report). Every method takes `&self`: the ledger
//! is shared by all threads; each device is a separate shard behind its own lock, held
//! only for the bookkeeping itself.
//!
//! Locking: the device shards, the VMM table, the pool places, the host ledger, the lazy-loading
//! table and the two
//! health lists each have their own `parking_lot::Mutex`, and no method ever holds two of
//! them at once (a search over devices locks one shard at a time; warnings are noted after
//! the shard lock is released), but for one: making a shard holds `creating` while it takes
//! each existing shard's lock once (never the other way round). Counters are atomics.
//! Nothing here calls out of the module while holding a lock, and nothing panics on any
//! input.
//!
//! Layout: this file holds the types of the contract, the `Ledger` itself, its clock, its
//! shards and the process-wide instance; the calls are in `allocations` (addressed device
//! memory), `vmm_calls` (VMM handles, mappings, pools), `records` (queries, failures, IPC
//! imports, captures, graphs, hidden costs), `host_calls` and `health_calls`. Below them:
//! `device` (one shard's bookkeeping), `vmm` (handles to devices, virtual mappings), `host`
//! (pinned and registered host memory), `bounded` (first/last lists, decimated timeline),
//! `history` and `final_categories` (report-time categories), `json` (rendering).

mod allocations;
mod bounded;
mod clock;
mod device;
mod final_categories; // report-time categories
mod health_calls;
mod history; // the large allocations' history, for report-time categories
mod host;
mod host_calls;
mod json;
mod lazy; // lazy module loading: which first use of a library to measure
pub use lazy::{FirstUse, LibrarySource};
mod records;
pub use json::{NoSites, Rendered, SiteResolver};
mod table;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_order;
#[cfg(test)]
mod tests_undo;
mod vmm;
mod vmm_calls;

use std::cell::Cell;
use std::collections::HashMap;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::sync::Mutex;
use once_cell::sync::OnceCell;

use device::{DeviceLedger, Key, Removed};
use host::HostLedger;
use vmm::{Change, Mapping, VmmTable, HOST};

/// Upper bound on device ordinals we account (larger ordinals are counted as lost).
pub const MAX_DEVICES: usize = 64;

/// What kind of memory an allocation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    Device,
    Managed,
    Async,
    Pitch,
    /// Physical memory of a VMM handle (cuMemCreate).
    VmmPhysical,
}

/// Facts recorded about an allocation; classification works on these.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    pub exported: bool,
    pub captured: bool,
    pub h2d_bytes: u64,
    /// The call site that made the allocation (its id: the report names it through `SiteResolver`), 0 when none was
    /// captured (below `CULEDGER_SITE_MIN`, or nothing could be read).
    pub site: u32,
    /// The explicit tag current on the allocating thread (`culedger_push_tag`).
    pub tag: Option<crate::classify::tags::TagId>,
}

/// Result of a free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freed {
    Known { dev: i32, bytes: u64 },
    Unknown,
}

/// A record a free took out before its real call (the driver may hand the address to
/// another thread as soon as the call returns), to be put back exactly as it was if the
/// call fails: see [`Ledger::restore`].
#[derive(Debug)]
pub struct Taken {
    dev: i32,
    key: Key,
    alloc: Removed,
    /// The stamp of the take (its timeline sample).
    at: Stamp,
}

impl Taken {
    pub fn dev(&self) -> i32 {
        self.dev
    }

    pub fn bytes(&self) -> u64 {
        self.alloc.alloc.bytes()
    }
}

/// A VMM release or unmap recorded before its real call, for the same reason as a free;
/// [`Ledger::vmm_undo`] reverts it if the call fails.
#[derive(Debug)]
pub struct VmmUndo {
    change: Change,
    /// Physical records whose memory went with the change.
    freed: Vec<Taken>,
    /// Host-located handles whose memory went with it: (handle, bytes).
    host_freed: Vec<(u64, u64)>,
}

impl VmmUndo {
    /// The change removed no mapping (an unmap of a range with none recorded).
    pub fn unmapped_nothing(&self) -> bool {
        self.change.removed() == 0
    }
}

/// Where a memory pool's allocations reside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolPlace {
    Device(i32),
    /// Host memory (a `CU_MEM_LOCATION_TYPE_HOST*` pool): not device memory.
    Host,
}

/// Warnings kept in the report.
const WARNINGS_KEPT: usize = 64;
/// Distinct unwrapped symbols kept in the report.
const UNWRAPPED_KEPT: usize = 256;

/// When a record was made: microseconds (and milliseconds, `t_us / 1000`) since the ledger
/// was created, and the record's place in the process-wide order. `seq` comes from one counter shared by all devices
/// and threads, so it is strictly increasing over the records of the process (with gaps:
/// a call that ends up recording nothing may still have taken a number); within one
/// device both are taken under the shard lock, so they agree with the shard's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub t_us: u64,
    pub seq: u64,
}

impl Stamp {
    /// Milliseconds (`t_us / 1000`), worked out only where a record keeps them.
    pub fn t_ms(&self) -> u64 {
        self.t_us / 1000
    }
}

/// What culedger could not account.
#[derive(Default)]
struct Health {
    lost_events: AtomicU64,
    unknown_frees: AtomicU64,
    unwrapped: Mutex<Vec<String>>,
    warnings: Mutex<Vec<String>>,
    /// Distinct warnings not kept because the list was full.
    warnings_dropped: AtomicU64,
    /// Hooked calls made with no context current on the calling thread: nothing charged.
    no_context_calls: AtomicU64,
}

/// The record a pointer resolved to, and the address range it was found in: the
/// allocation itself, or for VMM the mapping containing the pointer.
#[derive(Clone, Copy, Debug)]
struct Hit {
    dev: i32,
    key: Key,
    base: u64,
    bytes: u64,
}

/// A counter on a cache line of its own (one per device: threads on different devices do not
/// bounce one line between them).
#[derive(Default)]
#[repr(align(64))]
struct PaddedCounter(AtomicU64);

impl PaddedCounter {
    /// One more; only ever called under the lock of the counter's shard, so a load and a
    /// store (no locked read-modify-write) are enough.
    fn bump_locked(&self) {
        crate::sync::atomic(&self.0);
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
    }
}

thread_local! {
    /// The device of this thread's last free: a free looks there first (threads keep to
    /// one device). Const-initialised, no destructor.
    static FREE_HINT: Cell<usize> = const { Cell::new(0) };
}

pub struct Ledger {
    clock: clock::Clock,
    start_unix_ms: u64,
    start_unix_us: u64,
    /// Changes outside the device shards (and those made without their lock).
    generation: AtomicU64,
    /// Changes per device shard, bumped under its lock.
    device_generation: [PaddedCounter; MAX_DEVICES],
    /// Device shards created (a free in a one-device process skips the thread's hint).
    shards_made: AtomicUsize,
    /// The index of the first shard created: where a one-device process's frees look.
    first_shard: AtomicUsize,
    /// The next record's sequence number (see `Stamp`).
    seq: AtomicU64,
    /// At most one device shard exists: every stamp is then taken under that shard's lock,
    /// and `seq` moves by a plain load and store instead of a locked read-modify-write.
    /// Cleared when a second shard is made (see `make_shard`).
    one_shard: AtomicBool,
    /// Held while a shard is made (never with a shard lock held).
    creating: Mutex<()>,
    devices: [OnceCell<Mutex<DeviceLedger>>; MAX_DEVICES],
    vmm: Mutex<VmmTable>,
    /// Memory pools whose place is known (created or looked up through a hook).
    pools: Mutex<HashMap<u64, PoolPlace>>,
    host: Mutex<HostLedger>,
    /// Libraries, their kernels and where they are loaded (lazy module loading).
    lazy: Mutex<lazy::LazyTable>,
    health: Health,
}

impl Default for Ledger {
    fn default() -> Self {
        Self::new()
    }
}

impl Ledger {
    pub fn new() -> Self {
        let clock = clock::Clock::new();
        let start_unix_us = clock.start_unix_us();
        Ledger {
            clock,
            start_unix_ms: start_unix_us / 1000,
            start_unix_us,
            generation: AtomicU64::new(0),
            device_generation: std::array::from_fn(|_| PaddedCounter::default()),
            shards_made: AtomicUsize::new(0),
            first_shard: AtomicUsize::new(0),
            seq: AtomicU64::new(1),
            one_shard: AtomicBool::new(true),
            creating: Mutex::new(()),
            devices: std::array::from_fn(|_| OnceCell::new()),
            vmm: Mutex::new(VmmTable::default()),
            pools: Mutex::new(HashMap::new()),
            host: Mutex::new(HostLedger::default()),
            lazy: Mutex::new(lazy::LazyTable::default()),
            health: Health::default(),
        }
    }

    /// Milliseconds since this ledger was created.
    pub fn t_ms(&self) -> u64 {
        self.t_us() / 1000
    }

    /// Microseconds since this ledger was created (monotonic clock).
    pub fn t_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// The time and a fresh sequence number for a record being made now. Callers take it
    /// under the lock of the shard the record goes to.
    #[inline]
    fn stamp(&self) -> Stamp {
        let t_us = self.t_us();
        crate::sync::atomic(&self.one_shard);
        let seq = if self.one_shard.load(Ordering::Relaxed) {
            // Only stamps under the one shard's lock move it: no other writer.
            let seq = self.seq.load(Ordering::Relaxed);
            self.seq.store(seq + 1, Ordering::Relaxed);
            seq
        } else {
            self.seq.fetch_add(1, Ordering::Relaxed)
        };
        Stamp { t_us, seq }
    }

    pub fn start_unix_ms(&self) -> u64 {
        self.start_unix_ms
    }

    /// When this ledger was created, in microseconds since the Unix epoch (the wall-clock
    /// reading `t_us` counts from).
    pub fn start_unix_us(&self) -> u64 {
        self.start_unix_us
    }

    /// Moves on every change; the flush thread writes when it moved. The sum of the
    /// process-wide counter and the per-device ones.
    pub fn generation(&self) -> u64 {
        crate::sync::atomic(&self.device_generation);
        let devices = self.device_generation.iter().map(|g| g.0.load(Ordering::Acquire));
        devices.fold(self.generation.load(Ordering::Acquire), u64::wrapping_add)
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The shard of `dev`, created on first use. Ordinals outside 0..MAX_DEVICES are a loss.
    fn shard(&self, dev: i32, api: &str) -> Option<&Mutex<DeviceLedger>> {
        match usize::try_from(dev).ok().and_then(|i| self.devices.get(i)) {
            Some(cell) => {
                let shard = match cell.get() {
                    Some(shard) => shard,
                    None => self.make_shard(cell, dev),
                };
                crate::sync::published(shard);
                Some(shard)
            }
            None => {
                self.note_loss(&format!("{api}: device ordinal {dev} is outside 0..{MAX_DEVICES}"));
                None
            }
        }
    }

    /// Make the shard of `dev` in `cell`, one shard at a time (`creating`; taken with no
    /// shard lock held, as `shard` always is). When it is the second, stamps go back to a
    /// locked increment of `seq` before it is published: any stamp that saw `one_shard` set
    /// ran under the first shard's lock, so taking that lock once here orders it before the
    /// new shard's first stamp, and every later stamp on the first shard sees the flag
    /// cleared. Shards are published under `creating`, so none is missed.
    #[cold]
    fn make_shard<'a>(&'a self, cell: &'a OnceCell<Mutex<DeviceLedger>>, dev: i32) -> &'a Mutex<DeviceLedger> {
        let _creating = self.creating.lock();
        if let Some(shard) = cell.get() {
            return shard;
        }
        crate::sync::atomic(&self.one_shard);
        if self.shards_made.load(Ordering::Relaxed) == 0 {
            self.first_shard.store(dev as usize, Ordering::Relaxed);
        } else if self.one_shard.swap(false, Ordering::SeqCst) {
            for (_, shard) in self.shards() {
                drop(shard.lock());
            }
        }
        let shard = cell.get_or_init(Default::default);
        self.shards_made.fetch_add(1, Ordering::Release);
        shard
    }

    /// The shard of `dev` if it saw an event (queries create nothing).
    fn existing(&self, dev: i32) -> Option<&Mutex<DeviceLedger>> {
        let shard = self.devices.get(usize::try_from(dev).ok()?)?.get()?;
        crate::sync::published(shard);
        Some(shard)
    }

    /// Devices that saw an event, in index order.
    fn shards(&self) -> impl Iterator<Item = (i32, &Mutex<DeviceLedger>)> {
        self.devices.iter().enumerate().filter_map(|(i, c)| {
            c.get().map(|m| {
                crate::sync::published(m);
                (i as i32, m)
            })
        })
    }

    /// Run `f` on the shard of `dev` under its lock, with a stamp for now, and count a change.
    fn on_device<R>(&self, dev: i32, api: &str, f: impl FnOnce(&mut DeviceLedger, Stamp) -> R) -> Option<R> {
        let mut d = self.shard(dev, api)?.lock();
        // Stamp under the lock so each device's records are in time and sequence order.
        let now = self.stamp();
        let r = f(&mut d, now);
        self.device_generation[dev as usize].bump_locked();
        drop(d);
        Some(r)
    }

    /// Run `f` on the record containing `ptr` under its shard's lock: an addressed
    /// allocation on any device (one shard locked at a time), else the physical handle
    /// mapped at `ptr`.
    fn at_ptr<R>(&self, ptr: u64, f: impl FnOnce(&mut DeviceLedger, Hit) -> R) -> Option<R> {
        for (dev, shard) in self.shards() {
            let mut d = shard.lock();
            let found = d.containing(ptr, || self.stamp());
            let displaced = d.take_unwarned();
            if let Some((base, bytes)) = found {
                let r = f(&mut d, Hit { dev, key: Key::Addr(base), base, bytes });
                drop(d);
                self.warn_settled(dev, displaced);
                return Some(r);
            }
            drop(d);
            self.warn_settled(dev, displaced);
        }
        let (m, dev) = {
            let vmm = self.vmm.lock();
            let m = vmm.mapping_at(ptr)?;
            (m, vmm.device_of(m.handle)?)
        };
        let mut d = self.existing(dev)?.lock();
        let key = Key::Handle(m.handle);
        d.has(key).then(|| f(&mut d, Hit { dev, key, base: m.va, bytes: m.size }))
    }

    /// Bring the address order of `d` up to date (see `device::order`), warning about the
    /// overlapping records it found, once the lock is released.
    fn settle(&self, dev: i32, shard: &Mutex<DeviceLedger>) {
        let displaced = {
            let mut d = shard.lock();
            d.settle_unwarned(|| self.stamp());
            d.take_unwarned()
        };
        self.warn_settled(dev, displaced);
    }

    /// Bring every device's address order up to date (before a report is rendered).
    pub(crate) fn settle_all(&self) {
        for (dev, shard) in self.shards() {
            self.settle(dev, shard);
        }
    }

    fn warn_settled(&self, dev: i32, d: device::Displaced) {
        if d.count > 0 {
            self.bump();
            self.warn_displaced("allocation", dev, format_args!("an allocation overlapping older records"), d);
        }
    }

    fn warn_displaced(&self, api: &str, dev: i32, at: std::fmt::Arguments<'_>, d: device::Displaced) {
        if d.count > 0 {
            self.note_warning(&format!(
                "{api}: {at} on device {dev} replaced {} live record(s) ({} bytes) whose free was missed; counted as freed",
                d.count, d.bytes
            ));
        }
    }

    /// Render `devices`, `host`, `health` and `sites`, the call sites named through
    /// `sites` (the caller adds `schema`, `tool`, `process`, `settings`).
    pub fn render(&self, sites: &dyn SiteResolver) -> Rendered {
        json::render(self, sites)
    }

    /// [`Self::render`] with no call-site table, as JSON (for tests).
    #[cfg(test)]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.render(&NoSites)).expect("a rendering serializes")
    }
}

// The ledger is shared by every thread through `global()`.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Ledger>();
};

/// The process-wide ledger, or null before first use.
static GLOBAL: AtomicPtr<Ledger> = AtomicPtr::new(ptr::null_mut());

/// The process-wide ledger, created on first use. Never blocks (the pointer is swapped,
/// not locked).
#[inline]
pub fn global() -> &'static Ledger {
    crate::sync::atomic(&GLOBAL);
    let current = GLOBAL.load(Ordering::Acquire);
    if !current.is_null() {
        // SAFETY: GLOBAL only ever holds pointers from `Box::into_raw` that are never freed.
        return unsafe { &*current };
    }
    create_global()
}

/// The first call's slow path, kept out of line: building a `Ledger` takes a stack frame of
/// tens of KiB, and a function with such a frame probes every page of it on each call (this
/// was 16% of an alloc+free pair while `global()` did both).
#[cold]
#[inline(never)]
fn create_global() -> &'static Ledger {
    let fresh = Box::into_raw(Box::new(Ledger::new()));
    match GLOBAL.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: just leaked into GLOBAL, never freed.
        Ok(_) => unsafe { &*fresh },
        Err(winner) => {
            // SAFETY: `fresh` lost the race and was never shared; `winner` is leaked.
            unsafe {
                drop(Box::from_raw(fresh));
                &*winner
            }
        }
    }
}

/// In a fork child: replace the ledger with a fresh one without touching any lock the
/// parent's other threads may have held at fork time (the old one is leaked).
pub fn reset_global_after_fork() {
    crate::sync::atomic(&GLOBAL);
    let inherited = GLOBAL.swap(Box::into_raw(Box::new(Ledger::new())), Ordering::AcqRel);
    // Kept reachable (it is never freed: another thread of the parent may have held one of its
    // locks at the fork), so that leak checkers see a deliberate, bounded orphan.
    INHERITED.store(inherited, Ordering::Release);
}

/// The parent's ledger a fork child inherited and replaced (see `reset_global_after_fork`).
/// `#[used]`: never read by culedger, only by leak checkers scanning memory for pointers.
#[used]
static INHERITED: AtomicPtr<Ledger> = AtomicPtr::new(ptr::null_mut());
