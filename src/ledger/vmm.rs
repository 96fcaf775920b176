//! VMM bookkeeping that is not per device: which device each physical handle lives on,
//! and which virtual ranges map which handle. The physical records themselves (and their
//! bytes) live in the device shards; mapping never adds bytes.

use std::collections::{BTreeMap, HashMap};

/// A virtual range mapping (part of) a physical handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub va: u64,
    pub size: u64,
    pub offset: u64,
    pub handle: u64,
}

#[derive(Debug, Default)]
pub(crate) struct VmmTable {
    /// Live physical handle to its device.
    handles: HashMap<u64, i32>,
    /// Mappings keyed by virtual base.
    maps: BTreeMap<u64, Mapping>,
}

impl VmmTable {
    /// Record `handle` on `dev`; returns the device of a live record it replaces.
    pub(crate) fn create(&mut self, handle: u64, dev: i32) -> Option<i32> {
        self.handles.insert(handle, dev)
    }

    pub(crate) fn release(&mut self, handle: u64) -> Option<i32> {
        self.handles.remove(&handle)
    }

    pub(crate) fn device_of(&self, handle: u64) -> Option<i32> {
        self.handles.get(&handle).copied()
    }

    pub(crate) fn map(&mut self, m: Mapping) {
        self.maps.insert(m.va, m);
    }

    /// Remove every mapping overlapping [va, va+size); returns how many.
    pub(crate) fn unmap(&mut self, va: u64, size: u64) -> usize {
        let end = va.saturating_add(size.max(1));
        let mut removed = 0;
        while let Some((&k, _)) = self.maps.range(..end).next_back().filter(|(_, m)| m.va.saturating_add(m.size) > va) {
            self.maps.remove(&k);
            removed += 1;
        }
        removed
    }

    /// The mapping containing `va`.
    pub(crate) fn mapping_at(&self, va: u64) -> Option<Mapping> {
        let (_, m) = self.maps.range(..=va).next_back()?;
        (m.va.saturating_add(m.size) > va).then_some(*m)
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
        assert_eq!(t.unmap(0x10000, 0x3000), 2);
        assert_eq!(t.mapping_at(0x10000), None);
        assert_eq!(t.mapping_at(0x20000).map(|m| m.handle), Some(9));
        assert_eq!(t.unmap(0x10000, 0x3000), 0);
    }
}
