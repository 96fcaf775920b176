//! An exact-key hash table of records keyed by a non-zero `u64` the record holds (a base
//! address): open addressing, linear probing with Robin Hood placement (a lookup of an absent
//! key stops as soon as it passes where the key would be) and backward-shift removal (no
//! tombstones). The records sit in the slots themselves, so a live allocation costs its
//! record divided by the load (7/8 at most; the table grows by half when full).

/// A record with a non-zero key of its own.
pub(crate) trait Keyed {
    fn key(&self) -> u64;
}

const MIN_CAPACITY: usize = 16;

pub(crate) struct Table<T> {
    slots: Vec<Option<T>>,
    len: usize,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table { slots: Vec::new(), len: 0 }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Table<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("len", &self.len).field("capacity", &self.slots.len()).finish()
    }
}

impl<T: Keyed> Table<T> {
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

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The slot holding `key`.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        let cap = self.slots.len();
        if cap == 0 || self.len == 0 {
            return None;
        }
        let mut i = Self::home(key, cap);
        let mut dist = 0;
        loop {
            let r = self.slots[i].as_ref()?;
            let k = r.key();
            if k == key {
                return Some(i);
            }
            if Self::distance(k, i, cap) < dist {
                return None;
            }
            dist += 1;
            i = if i + 1 == cap { 0 } else { i + 1 };
        }
    }

    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<&T> {
        self.find(key).and_then(|i| self.slots[i].as_ref())
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, key: u64) -> Option<&mut T> {
        self.find(key).and_then(|i| self.slots[i].as_mut())
    }

    pub(crate) fn contains(&self, key: u64) -> bool {
        self.find(key).is_some()
    }

    /// Put `r` in; the record it replaces (same key), if any.
    pub(crate) fn insert(&mut self, r: T) -> Option<T> {
        if let Some(i) = self.find(r.key()) {
            return self.slots[i].replace(r);
        }
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.grow();
        }
        self.place(r);
        self.len += 1;
        None
    }

    /// Robin Hood placement of a key not in the table (there is a free slot).
    fn place(&mut self, mut r: T) {
        let cap = self.slots.len();
        let mut i = Self::home(r.key(), cap);
        let mut dist = 0;
        loop {
            match &mut self.slots[i] {
                slot @ None => {
                    *slot = Some(r);
                    return;
                }
                Some(here) => {
                    let d = Self::distance(here.key(), i, cap);
                    if d < dist {
                        std::mem::swap(here, &mut r);
                        dist = d;
                    }
                }
            }
            dist += 1;
            i = if i + 1 == cap { 0 } else { i + 1 };
        }
    }

    fn grow(&mut self) {
        let cap = (self.slots.len() + self.slots.len() / 2).max(MIN_CAPACITY);
        let old = std::mem::take(&mut self.slots);
        self.slots.reserve_exact(cap);
        self.slots.resize_with(cap, || None);
        for r in old.into_iter().flatten() {
            self.place(r);
        }
    }

    /// Take the record under `key` out.
    pub(crate) fn remove(&mut self, key: u64) -> Option<T> {
        let mut i = self.find(key)?;
        let r = self.slots[i].take();
        self.len -= 1;
        // Shift the following records of the run back by one while they are not at home.
        let cap = self.slots.len();
        loop {
            let next = if i + 1 == cap { 0 } else { i + 1 };
            match self.slots[next].as_ref() {
                Some(n) if Self::distance(n.key(), next, cap) > 0 => {
                    self.slots[i] = self.slots[next].take();
                    i = next;
                }
                _ => break,
            }
        }
        r
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone, PartialEq)]
    struct R(u64, u32);
    impl Keyed for R {
        fn key(&self) -> u64 {
            self.0
        }
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
