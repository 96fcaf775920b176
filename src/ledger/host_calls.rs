//! The ledger's calls for host memory (pinned, registered).

use super::*;

impl Ledger {
    /// Add a host range to one pool, warning when it replaces a live one.
    pub(super) fn host_add(&self, pool: fn(&mut HostLedger) -> &mut host::HostPool, ptr: u64, bytes: u64, api: &str) {
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
}
