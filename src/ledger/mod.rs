//! Per-device ledgers: pure Rust, no FFI. See docs/schema.md for what they render to.
//!
//! API CONTRACT (used by src/hooks and src/report). Every method takes `&self`: the ledger
//! is shared by all threads; each device is a separate shard behind its own lock, held
//! only for the bookkeeping itself.
//!
//! Locking: the device shards, the VMM table, the host ledger and the two health lists
//! each have their own `parking_lot::Mutex`, and no method ever holds two of them at once
//! (a search over devices locks one shard at a time; warnings are noted after the shard
//! lock is released). Counters are atomics. Nothing here calls out of the module while
//! holding a lock, and nothing panics on any input.
//!
//! Layout: `device` (one shard's bookkeeping), `vmm` (handles to devices, virtual
//! mappings), `host` (pinned and registered host memory), `bounded` (first/last lists,
//! decimated timeline), `json` (rendering).

mod bounded;
mod device;
mod host;
mod json;
#[cfg(test)]
mod tests;
mod vmm;

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::sync::Mutex;
use once_cell::sync::OnceCell;

use device::{DeviceLedger, Key};
use host::HostLedger;
use vmm::{Mapping, VmmTable};

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
    pub caller: Option<String>,
}

/// Result of a free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freed {
    Known { dev: i32, bytes: u64 },
    Unknown,
}

/// Warnings kept in the report.
const WARNINGS_KEPT: usize = 64;
/// Distinct unwrapped symbols kept in the report.
const UNWRAPPED_KEPT: usize = 256;

/// When a record was made: milliseconds since the ledger was created, and the record's
/// place in the process-wide order. `seq` comes from one counter shared by all devices
/// and threads, so it is strictly increasing over the records of the process (with gaps:
/// a call that ends up recording nothing may still have taken a number); within one
/// device both are taken under the shard lock, so they agree with the shard's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub t_ms: u64,
    pub seq: u64,
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

pub struct Ledger {
    start: Instant,
    start_unix_ms: u64,
    generation: AtomicU64,
    /// The next record's sequence number (see `Stamp`).
    seq: AtomicU64,
    devices: [OnceCell<Mutex<DeviceLedger>>; MAX_DEVICES],
    vmm: Mutex<VmmTable>,
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
        let start_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Ledger {
            start: Instant::now(),
            start_unix_ms,
            generation: AtomicU64::new(0),
            seq: AtomicU64::new(1),
            devices: std::array::from_fn(|_| OnceCell::new()),
            vmm: Mutex::new(VmmTable::default()),
            host: Mutex::new(HostLedger::default()),
            health: Health::default(),
        }
    }

    /// Milliseconds since this ledger was created.
    pub fn t_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The time and a fresh sequence number for a record being made now. Callers take it
    /// under the lock of the shard the record goes to.
    fn stamp(&self) -> Stamp {
        Stamp { t_ms: self.t_ms(), seq: self.seq.fetch_add(1, Ordering::Relaxed) }
    }

    pub fn start_unix_ms(&self) -> u64 {
        self.start_unix_ms
    }

    /// Bumped on every change; the flush thread writes when it moved.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The shard of `dev`, created on first use. Ordinals outside 0..MAX_DEVICES are a loss.
    fn shard(&self, dev: i32, api: &str) -> Option<&Mutex<DeviceLedger>> {
        match usize::try_from(dev).ok().and_then(|i| self.devices.get(i)) {
            Some(cell) => {
                let shard = cell.get_or_init(Default::default);
                crate::sync::published(shard);
                Some(shard)
            }
            None => {
                self.note_loss(&format!("{api}: device ordinal {dev} is outside 0..{MAX_DEVICES}"));
                None
            }
        }
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
        drop(d);
        self.bump();
        Some(r)
    }

    /// Run `f` on the record containing `ptr` under its shard's lock: an addressed
    /// allocation on any device (one shard locked at a time), else the physical handle
    /// mapped at `ptr`.
    fn at_ptr<R>(&self, ptr: u64, f: impl FnOnce(&mut DeviceLedger, Hit) -> R) -> Option<R> {
        for (dev, shard) in self.shards() {
            let mut d = shard.lock();
            if let Some((base, bytes)) = d.containing(ptr) {
                return Some(f(&mut d, Hit { dev, key: Key::Addr(base), base, bytes }));
            }
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
        if ptr == 0 {
            self.note_warning(&format!("{api}: allocation of {bytes} bytes at NULL on device {dev} ignored"));
            return;
        }
        if let Some(d) = self.on_device(dev, api, |d, now| d.insert(Key::Addr(ptr), bytes, kind, api, facts, now)) {
            self.warn_displaced(api, dev, format_args!("allocation at 0x{ptr:x}"), d);
        }
    }

    /// A successful free of `ptr` (exact base address). Searches every device, one lock at
    /// a time. A pointer never seen allocated is `Unknown` and counted in
    /// `health.unknown_frees`; freeing NULL is a no-op and counts nothing.
    pub fn free(&self, ptr: u64, _api: &'static str) -> Freed {
        if ptr == 0 {
            return Freed::Unknown;
        }
        for (dev, shard) in self.shards() {
            let key = Key::Addr(ptr);
            let mut d = shard.lock();
            let freed = d.has(key).then(|| d.remove(key, self.stamp())).flatten();
            drop(d);
            if let Some(bytes) = freed {
                self.bump();
                return Freed::Known { dev, bytes };
            }
        }
        self.health.unknown_frees.fetch_add(1, Ordering::Relaxed);
        self.bump();
        Freed::Unknown
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
        let add = |f: &mut Facts| f.h2d_bytes = f.h2d_bytes.saturating_add(bytes);
        if self.at_ptr(ptr, |d, h| d.update_facts(h.key, self.stamp(), add)).flatten().is_some() {
            self.bump();
        }
    }

    // ---- VMM ---------------------------------------------------------------------
    /// Physical memory `handle` of `bytes` created on `dev`: counted like an allocation.
    pub fn vmm_create(&self, dev: i32, handle: u64, bytes: u64, api: &'static str) {
        if self.shard(dev, api).is_none() {
            return;
        }
        let previous = self.vmm.lock().create(handle, dev);
        if let Some(old_dev) = previous.filter(|&d| d != dev) {
            // The handle value was live on another device: its release was missed.
            let gone = self.on_device(old_dev, api, |d, now| d.remove(Key::Handle(handle), now)).flatten();
            let displaced = device::Displaced { count: 1, bytes: gone.unwrap_or(0) };
            self.warn_displaced(api, old_dev, format_args!("handle 0x{handle:x}"), displaced);
        }
        let kind = MemKind::VmmPhysical;
        if let Some(d) =
            self.on_device(dev, api, |d, now| d.insert(Key::Handle(handle), bytes, kind, api, Facts::default(), now))
        {
            self.warn_displaced(api, dev, format_args!("handle 0x{handle:x}"), d);
        }
    }

    /// Physical memory `handle` released; false when it is unknown.
    pub fn vmm_release(&self, handle: u64) -> bool {
        let Some(dev) = self.vmm.lock().release(handle) else {
            return false;
        };
        self.on_device(dev, "vmm_release", |d, now| d.remove(Key::Handle(handle), now)).flatten().is_some()
    }

    /// Virtual range [va, va+size) now maps `handle` at `offset`.
    pub fn vmm_map(&self, va: u64, size: u64, offset: u64, handle: u64) {
        self.vmm.lock().map(Mapping { va, size, offset, handle });
        self.bump();
    }

    /// Mappings in [va, va+size) removed. Unmapping never frees bytes (release does).
    pub fn vmm_unmap(&self, va: u64, size: u64) {
        let removed = self.vmm.lock().unmap(va, size);
        self.bump();
        if removed == 0 {
            self.note_warning(&format!("unmap of 0x{va:x} ({size} bytes): no mapping recorded there"));
        }
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

    // ---- queries, failures -----------------------------------------------------
    /// A free-memory query; `free`/`total` None when not known (NULL pointer, failed call).
    pub fn probe(&self, dev: i32, api: &'static str, free: Option<u64>, total: Option<u64>, error: i32) {
        self.on_device(dev, api, |d, now| d.probe(api, free, total, error, now));
    }

    /// A failed allocation of `bytes`.
    pub fn failure(&self, dev: i32, api: &'static str, bytes: u64, error: i32, error_name: &'static str) {
        self.on_device(dev, api, |d, now| d.failure(api, bytes, error, error_name, now));
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
        self.on_device(dev, api, |d, now| d.driver_cost(api, bytes, now));
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
        let freed = self.host.lock().pinned.remove(ptr).is_some();
        if !freed {
            self.health.unknown_frees.fetch_add(1, Ordering::Relaxed);
        }
        self.bump();
        freed
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
