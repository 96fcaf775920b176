//! The ledger's calls that record rather than hold memory: free-memory queries, failed
//! allocations, IPC imports, captures, graph instantiations, hidden driver costs, peer access.

use super::*;

impl Ledger {
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

    /// A graph's executable destroyed; `measured` = device-memory delta (negative: memory
    /// given back), None when not measured. A measured one is also a (negative) driver cost.
    pub fn graph_exec_destroy(&self, dev: i32, api: &'static str, measured: Option<i64>, site: u32, start_us: Option<u64>) {
        self.on_device(dev, api, |d, now| d.graph_exec_destroy(api, measured, site, start_us, now));
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
}
