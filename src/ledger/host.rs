//! Host memory CUDA knows about: pinned allocations and registered ranges, keyed by pointer,
//! and host-located VMM physical memory, keyed by handle.

use std::collections::HashMap;

/// Live host ranges of one kind, with exact totals and counts.
#[derive(Debug, Default)]
pub(crate) struct HostPool {
    live: HashMap<u64, u64>,
    pub live_bytes: u64,
    pub peak_bytes: u64,
    /// Allocations (or registrations) recorded.
    pub added: u64,
    /// Frees (or unregistrations) recorded, implicit ones included.
    pub removed: u64,
}

impl HostPool {
    /// A new range at `ptr`. Returns the bytes of a live range it replaced (its removal
    /// was missed; counted as an implicit removal).
    pub(crate) fn add(&mut self, ptr: u64, bytes: u64) -> Option<u64> {
        let old = self.live.insert(ptr, bytes);
        if let Some(old) = old {
            self.live_bytes = self.live_bytes.saturating_sub(old);
            self.removed += 1;
        }
        self.added += 1;
        self.live_bytes = self.live_bytes.saturating_add(bytes);
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
        old
    }

    /// Put back a range whose removal was undone (its free failed): live again, the
    /// removal uncounted. False when `ptr` is live already.
    pub(crate) fn restore(&mut self, ptr: u64, bytes: u64) -> bool {
        if self.live.contains_key(&ptr) {
            return false;
        }
        self.live.insert(ptr, bytes);
        self.live_bytes = self.live_bytes.saturating_add(bytes);
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
        self.removed = self.removed.saturating_sub(1);
        true
    }

    /// Remove the range at `ptr`; its bytes, or None when it is not live.
    pub(crate) fn remove(&mut self, ptr: u64) -> Option<u64> {
        let bytes = self.live.remove(&ptr)?;
        self.live_bytes = self.live_bytes.saturating_sub(bytes);
        self.removed += 1;
        Some(bytes)
    }
}

/// Pinned and registered host memory, and host-located VMM memory (keyed by handle).
#[derive(Debug, Default)]
pub(crate) struct HostLedger {
    pub pinned: HostPool,
    pub registered: HostPool,
    pub vmm: HostPool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_totals_peaks_and_replacement() {
        let mut p = HostPool::default();
        assert_eq!(p.add(0x1000, 100), None);
        assert_eq!(p.add(0x2000, 50), None);
        assert_eq!((p.live_bytes, p.peak_bytes), (150, 150));
        assert_eq!(p.remove(0x1000), Some(100));
        assert_eq!(p.remove(0x1000), None, "double free is unknown");
        assert_eq!(p.add(0x2000, 10), Some(50), "same pointer replaces");
        assert_eq!((p.live_bytes, p.peak_bytes, p.added, p.removed), (10, 150, 3, 2));
        // A removal undone: as if it never happened.
        assert_eq!(p.remove(0x2000), Some(10));
        assert!(p.restore(0x2000, 10));
        assert_eq!((p.live_bytes, p.peak_bytes, p.added, p.removed), (10, 150, 3, 2));
        assert!(!p.restore(0x2000, 10), "already live");
    }
}
