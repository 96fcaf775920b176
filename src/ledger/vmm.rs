//! VMM bookkeeping that is not per device: which device each physical handle lives on, how
//! many references and mappings keep it alive, and which virtual ranges map which handle.
//! The physical records themselves (and their bytes) live in the device shards; mapping
//! never adds bytes.
//!
//! Lifetime, as the driver documents it (`cuMemRelease`: "freed when all outstanding
//! mappings to the memory are unmapped and when all outstanding references to the handle
//! ... are also released"): `cuMemCreate` holds one reference, `cuMemRetainAllocationHandle`
//! adds one, `cuMemRelease` drops one, `cuMemMap`/`cuMemUnmap` add and drop a mapping; the
//! memory goes when both counts are zero. Releasing right after mapping (cuda-samples
//! `vectorAddMMAP`) keeps it until the unmap.

use std::collections::{BTreeMap, HashMap};

/// The device of a host-located handle (`cuMemCreate` with a `CU_MEM_LOCATION_TYPE_HOST*`
/// location): its bytes are in the host ledger, not in a device shard.
pub(crate) const HOST: i32 = -1;

/// A virtual range mapping (part of) a physical handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub va: u64,
    pub size: u64,
    pub offset: u64,
    pub handle: u64,
}

/// A live physical handle: its device and what keeps it alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Phys {
    pub dev: i32,
    pub refs: u32,
    pub maps: u32,
}

/// What a release, map or unmap changed: enough to undo it exactly, and the handles whose
/// memory went with it.
#[derive(Debug, Default)]
pub(crate) struct Change {
    /// Mappings removed.
    removed: Vec<Mapping>,
    /// A mapping added (at most one).
    added: Option<Mapping>,
    /// Handles touched, each with its state before the change (None: not known before).
    before: Vec<(u64, Option<Phys>)>,
    /// Handles left without references and mappings: (handle, device). Their records are
    /// freed by the caller.
    pub gone: Vec<(u64, i32)>,
}

impl Change {
    /// Mappings the change removed.
    pub(crate) fn removed(&self) -> usize {
        self.removed.len()
    }
}

#[derive(Debug, Default)]
pub(crate) struct VmmTable {
    /// Live physical handles.
    handles: HashMap<u64, Phys>,
    /// Mappings keyed by virtual base.
    maps: BTreeMap<u64, Mapping>,
}

impl VmmTable {
    /// Record `handle` on `dev` with one reference; returns the device of a live record it
    /// replaces (its release was missed).
    pub(crate) fn create(&mut self, handle: u64, dev: i32) -> Option<i32> {
        self.handles.insert(handle, Phys { dev, refs: 1, maps: 0 }).map(|p| p.dev)
    }

    pub(crate) fn device_of(&self, handle: u64) -> Option<i32> {
        self.handles.get(&handle).map(|p| p.dev)
    }

    /// Note the state of `handle` before `change` touches it (once per handle).
    fn remember(&self, change: &mut Change, handle: u64) {
        if !change.before.iter().any(|(h, _)| *h == handle) {
            change.before.push((handle, self.handles.get(&handle).copied()));
        }
    }

    /// Drop `handle` from the table if nothing keeps it alive any more.
    fn settle(&mut self, change: &mut Change, handle: u64) {
        if let Some(p) = self.handles.get(&handle).copied() {
            if p.refs == 0 && p.maps == 0 {
                self.handles.remove(&handle);
                change.gone.push((handle, p.dev));
            }
        }
    }

    /// One more reference (`cuMemRetainAllocationHandle`); false when `handle` is unknown.
    pub(crate) fn retain(&mut self, handle: u64) -> bool {
        match self.handles.get_mut(&handle) {
            Some(p) => {
                p.refs = p.refs.saturating_add(1);
                true
            }
            None => false,
        }
    }

    /// One reference fewer; None when `handle` is unknown or has no reference left.
    pub(crate) fn release(&mut self, handle: u64) -> Option<Change> {
        let mut change = Change::default();
        self.remember(&mut change, handle);
        let p = self.handles.get_mut(&handle).filter(|p| p.refs > 0)?;
        p.refs -= 1;
        self.settle(&mut change, handle);
        Some(change)
    }

    /// A new mapping. A live mapping at the same base (its unmap was missed) is replaced.
    pub(crate) fn map(&mut self, m: Mapping) -> Change {
        let mut change = Change::default();
        self.remember(&mut change, m.handle);
        if let Some(p) = self.handles.get_mut(&m.handle) {
            p.maps = p.maps.saturating_add(1);
        }
        if let Some(old) = self.maps.insert(m.va, m) {
            self.unmapped(&mut change, old);
        }
        change.added = Some(m);
        change
    }

    /// `m` is no longer mapped: one mapping fewer for its handle.
    fn unmapped(&mut self, change: &mut Change, m: Mapping) {
        self.remember(change, m.handle);
        if let Some(p) = self.handles.get_mut(&m.handle) {
            p.maps = p.maps.saturating_sub(1);
        }
        change.removed.push(m);
        self.settle(change, m.handle);
    }

    /// Remove every mapping overlapping [va, va+size).
    pub(crate) fn unmap(&mut self, va: u64, size: u64) -> Change {
        let end = va.saturating_add(size.max(1));
        let mut change = Change::default();
        while let Some((&k, _)) = self.maps.range(..end).next_back().filter(|(_, m)| m.va.saturating_add(m.size) > va) {
            if let Some(m) = self.maps.remove(&k) {
                self.unmapped(&mut change, m);
            }
        }
        change
    }

    /// Put the table back as it was before `change`.
    pub(crate) fn undo(&mut self, change: Change) {
        if let Some(m) = change.added {
            self.maps.remove(&m.va);
        }
        for m in change.removed {
            self.maps.insert(m.va, m);
        }
        for (h, before) in change.before {
            match before {
                Some(p) => self.handles.insert(h, p),
                None => self.handles.remove(&h),
            };
        }
    }

    /// The mapping containing `va`.
    pub(crate) fn mapping_at(&self, va: u64) -> Option<Mapping> {
        let (_, m) = self.maps.range(..=va).next_back()?;
        (m.va.saturating_add(m.size) > va).then_some(*m)
    }

    #[cfg(test)]
    pub(crate) fn phys(&self, handle: u64) -> Option<Phys> {
        self.handles.get(&handle).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_resolve_and_unmap() {
        let mut t = VmmTable::default();
        t.map(Mapping { va: 0x10000, size: 0x2000, offset: 0, handle: 7 });
        t.map(Mapping { va: 0x12000, size: 0x1000, offset: 0x2000, handle: 7 });
        t.map(Mapping { va: 0x20000, size: 0x1000, offset: 0, handle: 9 });
        assert_eq!(t.mapping_at(0x10000).map(|m| m.handle), Some(7));
        assert_eq!(t.mapping_at(0x12fff).map(|m| m.offset), Some(0x2000));
        assert_eq!(t.mapping_at(0x13000), None, "one past the end");
        assert_eq!(t.mapping_at(0xffff), None);
        assert_eq!(t.unmap(0x10000, 0x3000).removed(), 2);
        assert_eq!(t.mapping_at(0x10000), None);
        assert_eq!(t.mapping_at(0x20000).map(|m| m.handle), Some(9));
        assert_eq!(t.unmap(0x10000, 0x3000).removed(), 0);
    }

    #[test]
    fn memory_goes_with_the_last_reference_or_mapping() {
        let mut t = VmmTable::default();
        assert_eq!(t.create(7, 1), None);
        assert!(t.map(Mapping { va: 0x10000, size: 0x1000, offset: 0, handle: 7 }).gone.is_empty());
        // Released right after mapping: still alive.
        assert!(t.release(7).is_some_and(|c| c.gone.is_empty()));
        assert_eq!(t.phys(7), Some(Phys { dev: 1, refs: 0, maps: 1 }));
        assert!(t.release(7).is_none(), "no reference left to release");
        // Retain from the mapping, then NCCL's order: release, unmap, release.
        assert!(t.retain(7));
        assert!(t.retain(7));
        assert!(t.release(7).is_some_and(|c| c.gone.is_empty()));
        assert!(t.unmap(0x10000, 0x1000).gone.is_empty());
        assert_eq!(t.release(7).map(|c| c.gone), Some(vec![(7, 1)]));
        assert_eq!(t.device_of(7), None);
        assert!(!t.retain(7));
    }

    #[test]
    fn changes_undo_exactly() {
        let mut t = VmmTable::default();
        t.create(7, 0);
        t.map(Mapping { va: 0x10000, size: 0x1000, offset: 0, handle: 7 });
        t.map(Mapping { va: 0x11000, size: 0x1000, offset: 0, handle: 7 });
        let before = (t.phys(7), t.mapping_at(0x10000), t.mapping_at(0x11000));
        let c = t.unmap(0x10000, 0x2000);
        assert_eq!(c.removed(), 2);
        t.undo(c);
        assert_eq!((t.phys(7), t.mapping_at(0x10000), t.mapping_at(0x11000)), before);
        t.unmap(0x10000, 0x2000);
        let c = t.release(7).unwrap();
        assert_eq!(c.gone, vec![(7, 0)]);
        t.undo(c);
        assert_eq!(t.phys(7), Some(Phys { dev: 0, refs: 1, maps: 0 }));
        // A map replacing a mapping whose unmap was missed; undone, the old one is back.
        t.create(8, 0);
        let c = t.map(Mapping { va: 0x20000, size: 0x1000, offset: 0, handle: 7 });
        let c2 = t.map(Mapping { va: 0x20000, size: 0x1000, offset: 0, handle: 8 });
        assert_eq!((t.phys(7).map(|p| p.maps), t.phys(8).map(|p| p.maps)), (Some(0), Some(1)));
        t.undo(c2);
        assert_eq!(t.mapping_at(0x20000).map(|m| m.handle), Some(7));
        assert_eq!((t.phys(7).map(|p| p.maps), t.phys(8).map(|p| p.maps)), (Some(1), Some(0)));
        t.undo(c);
        assert_eq!(t.mapping_at(0x20000), None);
    }
}
