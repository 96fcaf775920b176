//! The ledger's calls for addressed device memory: allocations, frees (and their undo), the
//! pointer lookups, exports and host-to-device copies.

use super::*;

impl Ledger {
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
    pub(super) fn take_from(&self, d: &mut DeviceLedger, dev: i32, key: Key) -> Option<Taken> {
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
}
