//! The ledger's calls for VMM memory (`cuMemCreate` handles, their mappings, exports) and the
//! places of memory pools.

use super::*;

impl Ledger {
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

    /// `vmm_export`, naming the exporting entry point in the event list. A host-located
    /// handle (NCCL's and vLLM's `CU_MEM_LOCATION_TYPE_HOST*` memory, shared between ranks
    /// through a POSIX file descriptor) is host memory: known, and nothing on a device changes.
    pub fn vmm_export_by(&self, handle: u64, api: &'static str) -> bool {
        let Some(dev) = self.vmm.lock().device_of(handle) else {
            return false;
        };
        if dev == HOST {
            return true;
        }
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
}
