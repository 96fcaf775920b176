//! Per-device ledgers: pure Rust, no FFI. See docs/schema.md for what they render to.
//!
//! API CONTRACT (used by src/hooks and src/report). Every method takes `&self`: the ledger
//! is shared by all threads; each device is a separate shard behind its own lock, held
//! only for the bookkeeping itself.
//!
//! Locking: the device shards, the VMM table, the pool places, the host ledger and the two
//! health lists each have their own `parking_lot::Mutex`, and no method ever holds two of
//! them at once (a search over devices locks one shard at a time; warnings are noted after
//! the shard lock is released), but for one: making a shard holds `creating` while it takes
//! each existing shard's lock once (never the other way round). Counters are atomics.
//! Nothing here calls out of the module while holding a lock, and nothing panics on any
//! input.
//!
//! Layout: `device` (one shard's bookkeeping), `vmm` (handles to devices, virtual
//! mappings), `host` (pinned and registered host memory), `bounded` (first/last lists,
//! decimated timeline), `json` (rendering).

mod bounded;
mod clock;
mod device;
mod final_categories; // report-time categories
mod history; // the large allocations' history, for report-time categories
mod host;
mod json;
mod table;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_order;
#[cfg(test)]
mod tests_undo;
mod vmm;

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
    /// The call site that made the allocation (`crate::sites::get`), 0 when none was
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

    // ---- device allocations -------------------------------------------------
    /// A successful allocation of `bytes` at `ptr` on device `dev`. If a capture is active on
    /// `dev`, the allocation is flagged captured. Live allocations overlapping the new one
    /// (frees we missed) are replaced and counted as implicit frees, with a warning.
    pub fn alloc(&self, dev: i32, ptr: u64, bytes: u64, kind: MemKind, api: &'static str, facts: Facts) {
        self.alloc_site(dev, ptr, bytes, kind, api, facts, false)
    }

    /// [`alloc`](Self::alloc) whose `facts.site` came from `sites::capture_alloc`: `repeated`
    /// when it was proven equal to a previous one, counted in [`site_repeats`](Self::site_repeats).
    #[allow(clippy::too_many_arguments)]
    pub fn alloc_site(
        &self,
        dev: i32,
        ptr: u64,
        bytes: u64,
        kind: MemKind,
        api: &'static str,
        facts: Facts,
        repeated: bool,
    ) {
        if ptr == 0 {
            self.note_warning(&format!("{api}: allocation of {bytes} bytes at NULL on device {dev} ignored"));
            return;
        }
        let displaced = self.on_device(dev, api, |d, now| {
            d.stats.site_repeats += u64::from(repeated);
            d.insert(Key::Addr(ptr), bytes, kind, api, facts, now)
        });
        if let Some(d) = displaced.filter(|d| d.count > 0) {
            self.warn_displaced(api, dev, format_args!("allocation at 0x{ptr:x}"), d);
        }
    }

    /// A successful free of `ptr` (exact base address). Searches every device, one lock at
    /// a time. A pointer never seen allocated is `Unknown` and counted in
    /// `health.unknown_frees`; freeing NULL is a no-op and counts nothing.
    pub fn free(&self, ptr: u64, _api: &'static str) -> Freed {
        match self.free_take(ptr) {
            Some(t) => Freed::Known { dev: t.dev, bytes: t.bytes() },
            None => Freed::Unknown,
        }
    }

    /// The free of `ptr`, keeping the record it removed so that [`Ledger::restore`] can put
    /// it back if the real free fails. None for NULL and for unknown pointers (counted in
    /// `health.unknown_frees`).
    pub fn free_take(&self, ptr: u64) -> Option<Taken> {
        if ptr == 0 {
            return None;
        }
        let key = Key::Addr(ptr);
        // The device of this thread's last free first, then the others in order.
        crate::sync::atomic(&self.shards_made);
        crate::sync::atomic(&self.first_shard);
        let multi = self.shards_made.load(Ordering::Acquire) > 1;
        let hint =
            if multi { FREE_HINT.try_with(Cell::get).unwrap_or(0) } else { self.first_shard.load(Ordering::Relaxed) };
        let first = self.existing(hint as i32).map(|s| (hint as i32, s));
        for (dev, shard) in first.into_iter().chain(self.shards().filter(|&(d, _)| d as usize != hint)) {
            let mut d = shard.lock();
            let taken = d.take_stamped(key, || self.stamp()).map(|(alloc, at)| Taken { dev, key, alloc, at });
            if taken.is_some() {
                self.device_generation[dev as usize].bump_locked();
                drop(d);
                if multi && dev as usize != hint {
                    let _ = FREE_HINT.try_with(|h| h.set(dev as usize));
                }
                return taken;
            }
        }
        self.health.unknown_frees.fetch_add(1, Ordering::Relaxed);
        self.bump();
        None
    }

    /// Take the record under `key` out of a locked shard (stamped under that lock).
    fn take_from(&self, d: &mut DeviceLedger, dev: i32, key: Key) -> Option<Taken> {
        d.take_stamped(key, || self.stamp()).map(|(alloc, at)| Taken { dev, key, alloc, at })
    }

    /// A free whose real call failed: put its record back exactly as it was (facts,
    /// category, kind, api, times), the free uncounted. False, with a warning, when another
    /// record took its place meanwhile (then the free did happen).
    pub fn restore(&self, t: Taken) -> bool {
        let (dev, key, base) = (t.dev, t.key, t.alloc.alloc.base);
        let restored = self.on_device(dev, "restore", |d, now| d.restore(key, t.alloc, t.at, now)) == Some(true);
        if !restored {
            self.note_warning(&format!(
                "a failed free of 0x{base:x} on device {dev} could not be undone: the address is in use again"
            ));
        }
        restored
    }

    /// The allocation containing `ptr` (range lookup): (device, base, bytes). For a VA in a
    /// VMM mapping of a known handle: (the handle's device, mapping base, mapping size).
    pub fn lookup(&self, ptr: u64) -> Option<(i32, u64, u64)> {
        self.at_ptr(ptr, |_, h| (h.dev, h.base, h.bytes))
    }

    /// Mark the allocation containing `ptr` exported (IPC); reclassifies it. Counted once.
    /// False when `ptr` is in no known allocation.
    pub fn mark_exported(&self, ptr: u64) -> bool {
        self.mark_exported_by(ptr, "ipc_export")
    }

    /// `mark_exported`, naming the exporting entry point in the event list.
    pub fn mark_exported_by(&self, ptr: u64, api: &'static str) -> bool {
        let found = self.at_ptr(ptr, |d, h| d.mark_exported(h.key, api, self.stamp())).unwrap_or(false);
        if found {
            self.bump();
        }
        found
    }

    /// `bytes` were copied from host memory into the allocation containing `ptr`.
    /// Copies into memory we do not track are ignored.
    pub fn add_h2d(&self, ptr: u64, bytes: u64) {
        self.at_ptr(ptr, |d, h| {
            if d.add_h2d(h.key, bytes) {
                self.device_generation[h.dev as usize].bump_locked();
            }
        });
    }

    // ---- VMM ---------------------------------------------------------------------
    /// Physical memory `handle` of `bytes` created on `dev`: counted like an allocation,
    /// live until its last reference is released and its last mapping unmapped.
    pub fn vmm_create(&self, dev: i32, handle: u64, bytes: u64, api: &'static str) {
        self.vmm_create_with(dev, handle, bytes, api, Facts::default());
    }

    /// `vmm_create` with the facts known when it was made (the thread's tag).
    pub fn vmm_create_with(&self, dev: i32, handle: u64, bytes: u64, api: &'static str, facts: Facts) {
        self.vmm_create_site(dev, handle, bytes, api, facts, false)
    }

    /// [`vmm_create_with`](Self::vmm_create_with) with a site from `sites::capture_alloc`
    /// (`repeated` as in [`alloc_site`](Self::alloc_site)).
    pub fn vmm_create_site(&self, dev: i32, handle: u64, bytes: u64, api: &'static str, facts: Facts, repeated: bool) {
        if self.shard(dev, api).is_none() {
            return;
        }
        let previous = self.vmm.lock().create(handle, dev);
        if previous == Some(HOST) {
            self.host_vmm_displaced(handle, api);
        } else if let Some(old_dev) = previous.filter(|&d| d != dev) {
            // The handle value was live on another device: its release was missed.
            let gone = self.on_device(old_dev, api, |d, now| d.remove(Key::Handle(handle), now)).flatten();
            let displaced = device::Displaced { count: 1, bytes: gone.unwrap_or(0) };
            self.warn_displaced(api, old_dev, format_args!("handle 0x{handle:x}"), displaced);
        }
        let kind = MemKind::VmmPhysical;
        let inserted = self.on_device(dev, api, |d, now| {
            d.stats.site_repeats += u64::from(repeated);
            d.insert(Key::Handle(handle), bytes, kind, api, facts, now)
        });
        if let Some(d) = inserted {
            self.warn_displaced(api, dev, format_args!("handle 0x{handle:x}"), d);
        }
    }

    /// Host-located physical memory `handle` of `bytes` (`cuMemCreate` with a
    /// `CU_MEM_LOCATION_TYPE_HOST*` location: NCCL's `ncclCuMemHostAlloc`): counted in the host
    /// ledger, live as long as device-located memory would be.
    pub fn host_vmm_create(&self, handle: u64, bytes: u64, api: &'static str) {
        let previous = self.vmm.lock().create(handle, HOST);
        match previous {
            Some(HOST) => self.host_vmm_displaced(handle, api),
            Some(old_dev) => {
                let gone = self.on_device(old_dev, api, |d, now| d.remove(Key::Handle(handle), now)).flatten();
                let displaced = device::Displaced { count: 1, bytes: gone.unwrap_or(0) };
                self.warn_displaced(api, old_dev, format_args!("handle 0x{handle:x}"), displaced);
            }
            None => {}
        }
        self.host_add(|h| &mut h.vmm, handle, bytes, api);
    }

    /// A host-located handle value was created again: its release was missed.
    fn host_vmm_displaced(&self, handle: u64, api: &str) {
        if let Some(old) = self.host.lock().vmm.remove(handle) {
            self.note_warning(&format!(
                "{api}: host VMM handle 0x{handle:x} was still live ({old} bytes); its release was missed, counted as released"
            ));
        }
    }

    /// One more reference to `handle` (`cuMemRetainAllocationHandle`); false when unknown.
    pub fn vmm_retain(&self, handle: u64) -> bool {
        let known = self.vmm.lock().retain(handle);
        if known {
            self.bump();
        }
        known
    }

    /// Free the records of the handles a change left without references and mappings.
    fn vmm_settle(&self, change: Change) -> VmmUndo {
        let freed = change
            .gone
            .iter()
            .filter(|&&(_, dev)| dev != HOST)
            .filter_map(|&(handle, dev)| {
                let mut d = self.existing(dev)?.lock();
                self.take_from(&mut d, dev, Key::Handle(handle))
            })
            .collect();
        let host_freed = {
            let mut h = self.host.lock();
            change
                .gone
                .iter()
                .filter(|&&(_, dev)| dev == HOST)
                .filter_map(|&(handle, _)| Some((handle, h.vmm.remove(handle)?)))
                .collect()
        };
        self.bump();
        VmmUndo { change, freed, host_freed }
    }

    /// One reference to `handle` released; its memory goes when no reference and no
    /// mapping is left. None when the handle is unknown (or has no reference left).
    pub fn vmm_release_begin(&self, handle: u64) -> Option<VmmUndo> {
        let change = self.vmm.lock().release(handle)?;
        Some(self.vmm_settle(change))
    }

    /// [`Ledger::vmm_release_begin`] for a release that succeeded; false when unknown.
    pub fn vmm_release(&self, handle: u64) -> bool {
        self.vmm_release_begin(handle).is_some()
    }

    /// Virtual range [va, va+size) now maps `handle` at `offset`.
    pub fn vmm_map(&self, va: u64, size: u64, offset: u64, handle: u64) {
        let change = self.vmm.lock().map(Mapping { va, size, offset, handle });
        self.vmm_settle(change);
    }

    /// Mappings in [va, va+size) removed; the memory of a handle goes with its last mapping
    /// when it has no reference left.
    pub fn vmm_unmap_begin(&self, va: u64, size: u64) -> VmmUndo {
        let change = self.vmm.lock().unmap(va, size);
        self.vmm_settle(change)
    }

    /// [`Ledger::vmm_unmap_begin`] for an unmap that succeeded.
    pub fn vmm_unmap(&self, va: u64, size: u64) {
        if self.vmm_unmap_begin(va, size).unmapped_nothing() {
            self.vmm_unmapped_nothing(va, size);
        }
    }

    /// A successful unmap of a range where no mapping was recorded.
    pub fn vmm_unmapped_nothing(&self, va: u64, size: u64) {
        self.note_warning(&format!("unmap of 0x{va:x} ({size} bytes): no mapping recorded there"));
    }

    /// The real release or unmap failed: put back the records and the table as they were.
    pub fn vmm_undo(&self, u: VmmUndo) {
        for t in u.freed {
            self.restore(t);
        }
        for (handle, bytes) in u.host_freed {
            self.host.lock().vmm.restore(handle, bytes);
        }
        self.vmm.lock().undo(u.change);
        self.bump();
    }

    /// The VMM handle mapped at `va`, if any.
    pub fn vmm_handle_at(&self, va: u64) -> Option<u64> {
        self.vmm.lock().mapping_at(va).map(|m| m.handle)
    }

    /// The physical memory of `handle` was exported (shareable handle); reclassifies it.
    pub fn vmm_export(&self, handle: u64) -> bool {
        self.vmm_export_by(handle, "vmm_export")
    }

    /// `vmm_export`, naming the exporting entry point in the event list.
    pub fn vmm_export_by(&self, handle: u64, api: &'static str) -> bool {
        let Some(dev) = self.vmm.lock().device_of(handle) else {
            return false;
        };
        self.on_device(dev, api, |d, now| d.mark_exported(Key::Handle(handle), api, now)).unwrap_or(false)
    }

    // ---- memory pools --------------------------------------------------------------
    /// Where the allocations of `pool` reside (a pool was created or looked up).
    pub fn pool_place(&self, pool: u64, place: PoolPlace) {
        self.pools.lock().insert(pool, place);
    }

    /// `pool` was destroyed.
    pub fn pool_destroyed(&self, pool: u64) {
        self.pools.lock().remove(&pool);
    }

    /// Where the allocations of `pool` reside, if known.
    pub fn pool_of(&self, pool: u64) -> Option<PoolPlace> {
        self.pools.lock().get(&pool).copied()
    }

    // ---- queries, failures -----------------------------------------------------
    /// A free-memory query; `free`/`total` None when not known (NULL pointer, failed call).
    pub fn probe(&self, dev: i32, api: &'static str, free: Option<u64>, total: Option<u64>, error: i32) {
        self.probe_at(dev, api, free, total, error, 0)
    }

    /// `probe` with the call site of the query (0: none).
    pub fn probe_at(&self, dev: i32, api: &'static str, free: Option<u64>, total: Option<u64>, error: i32, site: u32) {
        self.probe_site(dev, api, free, total, error, (site, false))
    }

    /// `probe_at` with the call site as `sites::capture_repeat` gives it: its id, and whether
    /// it was the thread's previous one, counted in [`site_repeats`](Self::site_repeats).
    pub fn probe_site(
        &self,
        dev: i32,
        api: &'static str,
        free: Option<u64>,
        total: Option<u64>,
        error: i32,
        (site, repeated): (u32, bool),
    ) {
        self.on_device(dev, api, |d, now| d.probe(api, free, total, error, (site, repeated), now));
    }

    /// Probes and allocations recorded with a repeated call site (`probe_site`, `alloc_site`),
    /// on every device.
    pub fn site_repeats(&self) -> u64 {
        self.shards().map(|(_, shard)| shard.lock().stats.site_repeats).sum()
    }

    /// A failed allocation of `bytes`.
    pub fn failure(&self, dev: i32, api: &'static str, bytes: u64, error: i32, error_name: &'static str) {
        self.failure_at(dev, api, bytes, error, error_name, 0)
    }

    /// `failure` with the call site of the allocation (0: none).
    pub fn failure_at(&self, dev: i32, api: &'static str, bytes: u64, error: i32, error_name: &'static str, site: u32) {
        self.on_device(dev, api, |d, now| d.failure(api, bytes, error, error_name, site, now));
    }

    /// The device memory size, known from a property query.
    pub fn set_total(&self, dev: i32, total: u64) {
        self.on_device(dev, "set_total", |d, _| d.set_total(total));
    }

    // ---- IPC imports -------------------------------------------------------------
    /// A peer buffer opened at `ptr` (size if known: the handle's allocation size).
    pub fn ipc_import(&self, dev: i32, ptr: u64, bytes: Option<u64>, api: &'static str) {
        if self.on_device(dev, api, |d, now| d.ipc_import(ptr, bytes, api, now)) == Some(true) {
            self.note_warning(&format!("{api}: 0x{ptr:x} opened again on device {dev} without a close"));
        }
    }

    /// The peer buffer opened at `ptr` closed; false (and a warning) when it is not open.
    pub fn ipc_close(&self, ptr: u64) -> bool {
        for (_, shard) in self.shards() {
            let closed = shard.lock().ipc_close(ptr);
            if closed {
                self.bump();
                return true;
            }
        }
        self.note_warning(&format!("IPC close of 0x{ptr:x}, which is not open"));
        false
    }

    // ---- capture, graphs, hidden costs ----------------------------------------------
    pub fn capture_begin(&self, dev: i32, stream: u64, api: &'static str) {
        if self.on_device(dev, api, |d, now| d.capture_begin(stream, api, now)) == Some(false) {
            self.note_warning(&format!("{api}: stream 0x{stream:x} on device {dev} was already capturing"));
        }
    }

    /// The capture on `stream` ended. Looked up on `dev` first, then on the other devices
    /// (the current device may have changed since the capture began).
    pub fn capture_end(&self, dev: i32, stream: u64, api: &'static str) {
        let others = self.shards().filter(|&(other, _)| other != dev).map(|(_, s)| s);
        for shard in self.existing(dev).into_iter().chain(others) {
            let mut d = shard.lock();
            let ended = d.capturing_on(stream) && d.capture_end(stream, api, self.stamp());
            drop(d);
            if ended {
                self.bump();
                return;
            }
        }
        self.note_warning(&format!("{api}: stream 0x{stream:x} (device {dev}) ended a capture it never began"));
    }

    /// Whether a capture is active on `dev`.
    pub fn capturing(&self, dev: i32) -> bool {
        self.existing(dev).is_some_and(|m| m.lock().capturing())
    }

    /// A graph instantiated; `measured` = device-memory delta, None when not measured.
    pub fn graph_instantiate(&self, dev: i32, api: &'static str, measured: Option<i64>) {
        self.on_device(dev, api, |d, now| d.graph_instantiate(api, measured, now));
    }

    /// A call with hidden driver cost: `bytes` = free before - free after (approximate).
    pub fn driver_cost(&self, dev: i32, api: &'static str, bytes: i64) {
        self.driver_cost_at(dev, api, bytes, 0, None)
    }

    /// `driver_cost` with the call site of the call (0: none) and the start of the measurement
    /// window: `start_us` (on the [`Self::t_us`] clock) is when the free-memory figure before the
    /// call was read, so a reader can tell which other processes' activity on the device fell
    /// inside it.
    pub fn driver_cost_at(&self, dev: i32, api: &'static str, bytes: i64, site: u32, start_us: Option<u64>) {
        self.on_device(dev, api, |d, now| d.driver_cost(api, bytes, site, start_us, now));
    }

    /// This process enabled access to device `peer` from another device: the driver keeps
    /// a context of this process on `peer` (created by the call when there was none), whose
    /// memory no free-memory figure of the calling device shows. Recorded as an event on
    /// `peer` with the call's window, so the device lists this process among its holders.
    pub fn peer_access(&self, peer: i32, api: &'static str, from: i32, start_us: u64) {
        self.on_device(peer, api, |d, now| d.peer_access(api, from, start_us, now));
    }

    // ---- host ---------------------------------------------------------------------------
    /// Add a host range to one pool, warning when it replaces a live one.
    fn host_add(&self, pool: fn(&mut HostLedger) -> &mut host::HostPool, ptr: u64, bytes: u64, api: &str) {
        let replaced = pool(&mut self.host.lock()).add(ptr, bytes);
        self.bump();
        if let Some(old) = replaced {
            self.note_warning(&format!(
                "{api}: host 0x{ptr:x} was still live ({old} bytes); its release was missed, counted as released"
            ));
        }
    }

    /// Page-locked host memory allocated through CUDA.
    pub fn host_alloc(&self, ptr: u64, bytes: u64, api: &'static str) {
        self.host_add(|h| &mut h.pinned, ptr, bytes, api);
    }

    /// Pinned host memory freed; false (and an unknown free) when never seen allocated.
    pub fn host_free(&self, ptr: u64) -> bool {
        self.host_take(ptr).is_some()
    }

    /// [`Ledger::host_free`] before the real call: the bytes freed, to put back with
    /// [`Ledger::host_restore`] if the call fails.
    pub fn host_take(&self, ptr: u64) -> Option<u64> {
        let bytes = self.host.lock().pinned.remove(ptr);
        if bytes.is_none() {
            self.health.unknown_frees.fetch_add(1, Ordering::Relaxed);
        }
        self.bump();
        bytes
    }

    /// A pinned free that failed: the range is live again, the free uncounted.
    pub fn host_restore(&self, ptr: u64, bytes: u64) {
        if !self.host.lock().pinned.restore(ptr, bytes) {
            self.note_warning(&format!("a failed free of host 0x{ptr:x} could not be undone: it is live again"));
        }
        self.bump();
    }

    /// Host memory registered with CUDA.
    pub fn host_register(&self, ptr: u64, bytes: u64, api: &'static str) {
        self.host_add(|h| &mut h.registered, ptr, bytes, api);
    }

    /// Host memory unregistered; false when it was not registered.
    pub fn host_unregister(&self, ptr: u64) -> bool {
        let removed = self.host.lock().registered.remove(ptr).is_some();
        if removed {
            self.bump();
        }
        removed
    }

    // ---- health -------------------------------------------------------------------------
    /// A hooked call that was forwarded but could not be recorded.
    pub fn note_loss(&self, what: &str) {
        self.health.lost_events.fetch_add(1, Ordering::Relaxed);
        self.note_warning(&format!("not recorded: {what}"));
    }

    /// A hooked call made while no context was current on the calling thread (a runtime
    /// loading its modules during its own initialisation): there was no device to charge.
    pub fn no_context(&self) {
        self.health.no_context_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Hooked calls counted by [`no_context`](Self::no_context).
    pub fn no_context_calls(&self) -> u64 {
        self.health.no_context_calls.load(Ordering::Relaxed)
    }

    /// An entry point handed out unwrapped (listed once).
    pub fn note_unwrapped(&self, symbol: &str) {
        {
            let mut list = self.health.unwrapped.lock();
            if list.len() < UNWRAPPED_KEPT && !list.iter().any(|s| s == symbol) {
                list.push(symbol.to_string());
            }
        }
        self.bump();
    }

    /// A one-line warning for the report (newlines are flattened). Distinct warnings
    /// are kept up to 64; later ones are counted.
    pub fn note_warning(&self, line: &str) {
        let line = line.replace(['\n', '\r'], " ");
        {
            let mut list = self.health.warnings.lock();
            if !list.contains(&line) {
                if list.len() < WARNINGS_KEPT {
                    list.push(line);
                } else {
                    self.health.warnings_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.bump();
    }

    /// Render `devices`, `host` and `health` (the caller adds `schema`, `tool`, `process`,
    /// `settings`). Returns an object with exactly those three keys.
    pub fn to_json(&self) -> serde_json::Value {
        json::render(self)
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
