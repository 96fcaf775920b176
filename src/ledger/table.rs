//! An exact-key hash table of records keyed by a non-zero `u64` the record holds (a base
//! address): open addressing, linear probing with Robin Hood placement (a lookup of an absent
//! key stops as soon as it passes where the key would be) and backward-shift removal (no
//! tombstones). The records sit in the slots themselves, so a live allocation costs its
//! record divided by the load (7/8 at most; the table grows by half when full).
//!
//! The newest record waits beside the slots (`young`) until another key is inserted. A
//! record freed before the next allocation (the alloc+free pair of a loop, a temporary) then
//! never enters the slots: with fresh keys, as a driver handing out addresses upwards gives
//! them, each such record would otherwise land at a new home inside some run, shift that run
//! up on insert and back down on removal, where a key that comes back finds its old slot.

use crate::pages::Zeroed;

/// A record with a key of its own: non-zero for a record, 0 for the vacant value that marks an
/// empty slot (so a slot is the record itself, with no tag beside it).
pub(crate) trait Keyed: Sized {
    /// The record's key; 0 only for [`Keyed::vacant`].
    fn key(&self) -> u64;
    /// The empty slot: all zero bytes (new slots are zeroed memory).
    fn vacant() -> Self;
}

const MIN_CAPACITY: usize = 16;

pub(crate) struct Table<T: Copy> {
    /// In memory of their own once large (`crate::pages`: growing a table of tens of MiB through
    /// malloc would leave holes in the program's heap).
    slots: Zeroed<T>,
    /// Records in the slots (`young` not counted).
    len: usize,
    /// The most recently inserted record, not in the slots yet; vacant when none (it was
    /// removed, or none was inserted since the last one moved in).
    young: T,
}

impl<T: Copy + Keyed> Default for Table<T> {
    fn default() -> Self {
        Table { slots: Zeroed::default(), len: 0, young: T::vacant() }
    }
}

impl<T: Copy + Keyed> std::fmt::Debug for Table<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("len", &self.len()).field("capacity", &self.slots.len()).finish()
    }
}

impl<T: Keyed + Copy> Table<T> {
    /// The home slot of `key` among `cap` slots: a multiplicative hash, reduced by the
    /// high half of a 128-bit product (any capacity, no division).
    #[inline]
    fn home(key: u64, cap: usize) -> usize {
        let h = (key ^ (key >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((u128::from(h) * cap as u128) >> 64) as usize
    }

    /// How far slot `i` is from the home of `key`.
    #[inline]
    fn distance(key: u64, i: usize, cap: usize) -> usize {
        let home = Self::home(key, cap);
        if i >= home {
            i - home
        } else {
            i + cap - home
        }
    }

    /// Records held, `young` included.
    pub(crate) fn len(&self) -> usize {
        self.len + usize::from(self.young.key() != 0)
    }

    /// Is `key` the young record's (never for 0)?
    #[inline]
    fn is_young(&self, key: u64) -> bool {
        key != 0 && self.young.key() == key
    }

    /// The slot holding `key` (never 0).
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        let cap = self.slots.len();
        if cap == 0 || self.len == 0 || key == 0 {
            return None;
        }
        let mut i = Self::home(key, cap);
        let mut dist = 0;
        loop {
            let k = self.slots[i].key();
            if k == key {
                return Some(i);
            }
            if k == 0 || Self::distance(k, i, cap) < dist {
                return None;
            }
            dist += 1;
            i = if i + 1 == cap { 0 } else { i + 1 };
        }
    }

    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<&T> {
        if self.is_young(key) {
            return Some(&self.young);
        }
        self.find(key).map(|i| &self.slots[i])
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, key: u64) -> Option<&mut T> {
        if self.is_young(key) {
            return Some(&mut self.young);
        }
        self.find(key).map(|i| &mut self.slots[i])
    }

    pub(crate) fn contains(&self, key: u64) -> bool {
        self.is_young(key) || self.find(key).is_some()
    }

    /// Put `r` (key non-zero) in; the record it replaces (same key), if any. `r` becomes the
    /// young record; the previous young one moves into the slots.
    #[inline]
    pub(crate) fn insert(&mut self, r: T) -> Option<T> {
        debug_assert!(r.key() != 0);
        if self.is_young(r.key()) {
            return Some(std::mem::replace(&mut self.young, r));
        }
        if let Some(i) = self.find(r.key()) {
            return Some(std::mem::replace(&mut self.slots[i], r));
        }
        let older = std::mem::replace(&mut self.young, r);
        if older.key() != 0 {
            self.settle(older);
        }
        None
    }

    /// Put `r`, whose key is in neither the slots nor `young`, in the slots.
    #[inline]
    fn settle(&mut self, r: T) {
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.grow();
        }
        match self.slot_for(r.key()) {
            // Not reached: the caller looked the key up.
            Ok(i) => self.slots[i] = r,
            Err(i) => {
                self.slots[i] = r;
                self.len += 1;
            }
        }
    }

    /// The slot of `key` (Ok), or the slot made free for it (Err; there is a free slot). One
    /// walk from the key's home: it ends at the key, at an empty slot, or where a record sits
    /// closer to its own home than the key would (Robin Hood order: the key is not further
    /// on). In the last case the records from there to the next empty slot move up by one, in
    /// one copy (within a run, records are in the order of their homes: this is their Robin
    /// Hood placement).
    #[inline]
    fn slot_for(&mut self, key: u64) -> Result<usize, usize> {
        let cap = self.slots.len();
        let mut i = Self::home(key, cap);
        let mut dist = 0;
        loop {
            let k = self.slots[i].key();
            if k == key {
                return Ok(i);
            }
            if k == 0 {
                return Err(i);
            }
            if Self::distance(k, i, cap) < dist {
                self.shift_up(i);
                return Err(i);
            }
            dist += 1;
            i = next(i, cap);
        }
    }

    /// Move the records from slot `i` to the next empty slot up by one (cyclically), leaving
    /// `i` free to be written.
    fn shift_up(&mut self, i: usize) {
        let cap = self.slots.len();
        let mut e = next(i, cap);
        while self.slots[e].key() != 0 {
            e = next(e, cap);
        }
        if e > i {
            move_run(&mut self.slots, i, i + 1, e - i);
        } else {
            // The run wraps: [i, cap) then [0, e).
            self.slots.copy_within(0..e, 1);
            self.slots[0] = self.slots[cap - 1];
            self.slots.copy_within(i..cap - 1, i + 1);
        }
    }

    /// Place `r`, whose key is not in the table (there is a free slot), while growing.
    fn place(&mut self, r: T) {
        let (Ok(i) | Err(i)) = self.slot_for(r.key());
        self.slots[i] = r;
    }

    fn grow(&mut self) {
        let cap = (self.slots.len() + self.slots.len() / 2).max(MIN_CAPACITY);
        // SAFETY: the vacant record is all zero bytes (`Keyed::vacant`).
        let old = std::mem::replace(&mut self.slots, unsafe { Zeroed::new(cap) });
        for &r in old.iter().filter(|r| r.key() != 0) {
            self.place(r);
        }
    }

    /// Take the record under `key` out. The records after it that are not at their home move
    /// back by one, in one copy (backward-shift removal: no tombstones).
    #[inline]
    pub(crate) fn remove(&mut self, key: u64) -> Option<T> {
        if self.is_young(key) {
            return Some(std::mem::replace(&mut self.young, T::vacant()));
        }
        let i = self.find(key)?;
        let r = self.slots[i];
        self.len -= 1;
        let cap = self.slots.len();
        let mut j = next(i, cap);
        loop {
            let k = self.slots[j].key();
            if k == 0 || Self::distance(k, j, cap) == 0 {
                break;
            }
            j = next(j, cap);
        }
        // Slots (i, j) move to [i, j - 1); the last of them is left empty.
        let last = if j > i {
            move_run(&mut self.slots, i + 1, i, j - i - 1);
            j - 1
        } else if j == 0 {
            self.slots.copy_within(i + 1..cap, i);
            cap - 1
        } else {
            // The run wraps: (i, cap) then [0, j).
            self.slots.copy_within(i + 1..cap, i);
            self.slots[cap - 1] = self.slots[0];
            self.slots.copy_within(1..j, 0);
            j - 1
        };
        self.slots[last] = T::vacant();
        Some(r)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().chain(std::iter::once(&self.young)).filter(|r| r.key() != 0)
    }
}

/// Move `n` records from `src` to `dst` (the ranges may overlap): a loop for the usual few,
/// one `memmove` for a longer run.
#[inline]
fn move_run<T: Copy>(slots: &mut [T], src: usize, dst: usize, n: usize) {
    if n > 8 {
        slots.copy_within(src..src + n, dst);
    } else if dst > src {
        for k in (0..n).rev() {
            slots[dst + k] = slots[src + k];
        }
    } else {
        for k in 0..n {
            slots[dst + k] = slots[src + k];
        }
    }
}

/// The slot after `i` among `cap`.
#[inline]
fn next(i: usize, cap: usize) -> usize {
    if i + 1 == cap {
        0
    } else {
        i + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone, Copy, PartialEq)]
    struct R(u64, u32);
    impl Keyed for R {
        fn key(&self) -> u64 {
            self.0
        }
        fn vacant() -> Self {
            R(0, 0)
        }
    }

    /// The newest record stays out of the slots until another key comes: a record removed
    /// before that (an alloc+free pair) never moves a slot; a key met again, young or settled,
    /// is replaced where it is.
    #[test]
    fn the_newest_record_waits_beside_the_slots() {
        let mut t: Table<R> = Table::default();
        let base = 0x7f00_0000_0000u64;
        for i in 0..1000 {
            t.insert(R(base + i * 0x1_0000, 1));
        }
        let settled = t.len;
        assert_eq!(settled, 999, "all but the newest are in the slots");
        assert!(t.find(base + 999 * 0x1_0000).is_none() && t.get(base + 999 * 0x1_0000).is_some());
        assert_eq!(t.remove(base + 999 * 0x1_0000), Some(R(base + 999 * 0x1_0000, 1)));
        // Pairs on growing, never reused addresses.
        for i in 0..5000u64 {
            let key = base + (1 << 32) + i * (2 << 20);
            assert_eq!(t.insert(R(key, 2)), None);
            assert_eq!((t.len, t.len()), (settled, settled + 1), "pair {i}: no slot taken");
            assert!(t.find(key).is_none() && t.contains(key));
            t.get_mut(key).unwrap().1 = 3;
            assert_eq!(t.remove(key), Some(R(key, 3)));
            assert_eq!(t.len(), settled);
        }
        // A young key inserted again is replaced in place; a settled one too, the young kept.
        let (a, b) = (base + (2 << 32), base + (3 << 32));
        assert_eq!(t.insert(R(a, 4)), None);
        assert_eq!(t.insert(R(a, 5)), Some(R(a, 4)));
        assert_eq!(t.insert(R(b, 6)), None, "a moves into the slots");
        assert!(t.find(a).is_some() && t.find(b).is_none());
        assert_eq!(t.insert(R(a, 7)), Some(R(a, 5)));
        assert_eq!(t.get(b), Some(&R(b, 6)), "b is still the young one");
        assert_eq!(t.values().filter(|r| r.0 == a || r.0 == b).count(), 2);
        assert_eq!(t.values().count(), t.len());
    }

    #[test]
    fn agrees_with_a_hash_map() {
        let mut t: Table<R> = Table::default();
        let mut m: HashMap<u64, u32> = HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..200_000u32 {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
            // Keys from a small, clustered space (addresses 256 bytes apart), many collisions.
            let key = 0x7f00_0000_0000 + (r % 3000) * 256;
            if r >> 62 == 0 {
                assert_eq!(t.remove(key).map(|r| r.1), m.remove(&key), "step {step}");
            } else {
                assert_eq!(t.insert(R(key, step)).map(|r| r.1), m.insert(key, step), "step {step}");
            }
            assert_eq!(t.len(), m.len());
            if step % 9973 == 0 {
                for (&k, &v) in &m {
                    assert_eq!(t.get(k), Some(&R(k, v)));
                }
                assert_eq!(t.values().count(), m.len());
                assert!(t.get(0x1234).is_none() && !t.contains(0x7f00_0000_0001));
            }
        }
    }
}
