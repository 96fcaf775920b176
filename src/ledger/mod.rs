//! Per-device ledgers: pure Rust, no FFI. See docs/schema.md for what they render to.
//!
//! API CONTRACT (used by src/hooks and src/report). Bodies are filled by the ledger work.
//! Every method takes `&self`: the ledger is shared by all threads; each device is a
//! separate shard behind its own lock, held only for the bookkeeping itself.

use crate::classify::Category;

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

pub struct Ledger {
    _private: (),
}

impl Ledger {
    pub fn new() -> Self { unimplemented!() }
    /// Milliseconds since this ledger was created.
    pub fn t_ms(&self) -> u64 { unimplemented!() }
    pub fn start_unix_ms(&self) -> u64 { unimplemented!() }
    /// Bumped on every change; the flush thread writes when it moved.
    pub fn generation(&self) -> u64 { unimplemented!() }

    // ---- device allocations -------------------------------------------------
    /// A successful allocation of `bytes` at `ptr` on device `dev`. If a capture is active on
    /// `dev`, the allocation is flagged captured.
    pub fn alloc(&self, dev: i32, ptr: u64, bytes: u64, kind: MemKind, api: &'static str, facts: Facts) { let _ = (dev, ptr, bytes, kind, api, facts); unimplemented!() }
    /// A successful free of `ptr` (exact base address). Searches every device.
    pub fn free(&self, ptr: u64, api: &'static str) -> Freed { let _ = (ptr, api); unimplemented!() }
    /// The allocation containing `ptr` (range lookup): (device, base, bytes).
    pub fn lookup(&self, ptr: u64) -> Option<(i32, u64, u64)> { let _ = ptr; unimplemented!() }
    /// Mark the allocation containing `ptr` exported (IPC); reclassifies it. Counted once.
    pub fn mark_exported(&self, ptr: u64) -> bool { let _ = ptr; unimplemented!() }
    /// `bytes` were copied from host memory into the allocation containing `ptr`.
    pub fn add_h2d(&self, ptr: u64, bytes: u64) { let _ = (ptr, bytes); unimplemented!() }

    // ---- VMM ---------------------------------------------------------------------
    pub fn vmm_create(&self, dev: i32, handle: u64, bytes: u64, api: &'static str) { let _ = (dev, handle, bytes, api); unimplemented!() }
    pub fn vmm_release(&self, handle: u64) -> bool { let _ = handle; unimplemented!() }
    /// Virtual range [va, va+size) now maps `handle` at `offset`.
    pub fn vmm_map(&self, va: u64, size: u64, offset: u64, handle: u64) { let _ = (va, size, offset, handle); unimplemented!() }
    pub fn vmm_unmap(&self, va: u64, size: u64) { let _ = (va, size); unimplemented!() }
    /// The VMM handle mapped at `va`, if any.
    pub fn vmm_handle_at(&self, va: u64) -> Option<u64> { let _ = va; unimplemented!() }
    pub fn vmm_export(&self, handle: u64) -> bool { let _ = handle; unimplemented!() }

    // ---- queries, failures -----------------------------------------------------
    pub fn probe(&self, dev: i32, api: &'static str, free: Option<u64>, total: Option<u64>, error: i32) { let _ = (dev, api, free, total, error); unimplemented!() }
    pub fn failure(&self, dev: i32, api: &'static str, bytes: u64, error: i32, error_name: &'static str) { let _ = (dev, api, bytes, error, error_name); unimplemented!() }
    pub fn set_total(&self, dev: i32, total: u64) { let _ = (dev, total); unimplemented!() }

    // ---- IPC imports -------------------------------------------------------------
    /// A peer buffer opened at `ptr` (size if known: the handle's allocation size).
    pub fn ipc_import(&self, dev: i32, ptr: u64, bytes: Option<u64>, api: &'static str) { let _ = (dev, ptr, bytes, api); unimplemented!() }
    pub fn ipc_close(&self, ptr: u64) -> bool { let _ = ptr; unimplemented!() }

    // ---- capture, graphs, hidden costs ----------------------------------------------
    pub fn capture_begin(&self, dev: i32, stream: u64, api: &'static str) { let _ = (dev, stream, api); unimplemented!() }
    pub fn capture_end(&self, dev: i32, stream: u64, api: &'static str) { let _ = (dev, stream, api); unimplemented!() }
    pub fn capturing(&self, dev: i32) -> bool { let _ = dev; unimplemented!() }
    pub fn graph_instantiate(&self, dev: i32, api: &'static str, measured: Option<i64>) { let _ = (dev, api, measured); unimplemented!() }
    /// A call with hidden driver cost: `bytes` = free before - free after (approximate).
    pub fn driver_cost(&self, dev: i32, api: &'static str, bytes: i64) { let _ = (dev, api, bytes); unimplemented!() }

    // ---- host ---------------------------------------------------------------------------
    pub fn host_alloc(&self, ptr: u64, bytes: u64, api: &'static str) { let _ = (ptr, bytes, api); unimplemented!() }
    pub fn host_free(&self, ptr: u64) -> bool { let _ = ptr; unimplemented!() }
    pub fn host_register(&self, ptr: u64, bytes: u64, api: &'static str) { let _ = (ptr, bytes, api); unimplemented!() }
    pub fn host_unregister(&self, ptr: u64) -> bool { let _ = ptr; unimplemented!() }

    // ---- health -------------------------------------------------------------------------
    pub fn note_loss(&self, what: &str) { let _ = what; unimplemented!() }
    pub fn note_unwrapped(&self, symbol: &str) { let _ = symbol; unimplemented!() }
    pub fn note_warning(&self, line: &str) { let _ = line; unimplemented!() }

    /// Render `devices`, `host` and `health` (the caller adds `schema`, `tool`, `process`,
    /// `settings`). Returns an object with exactly those three keys.
    pub fn to_json(&self) -> serde_json::Value { unimplemented!() }
}

/// The process-wide ledger. Never blocks (the pointer is swapped, not locked).
pub fn global() -> &'static Ledger { unimplemented!() }
/// In a fork child: replace the ledger with a fresh one without touching any lock the
/// parent's other threads may have held at fork time (the old one is leaked).
pub fn reset_global_after_fork() { unimplemented!() }

#[allow(dead_code)]
fn _uses(_: Category) {}
