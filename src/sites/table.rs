//! The per-process table of call sites: each distinct site stored once, numbered from 1
//! (0 = no site). Two indexes: the raw capture (code-object pointers, instruction positions,
//! return addresses), so that a repeated capture costs one hash look-up and no string read;
//! and the named content, so that two raw captures that name the same frames share an id.
//! Bounded: past [`MAX_SITES`] new sites get id 0 and are counted as dropped. Pure Rust.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use super::{PyFrame, Site};

/// Distinct sites kept per process.
pub const MAX_SITES: usize = 4096;
/// Raw captures remembered (several may name one site); cleared when full.
pub const MAX_RAW: usize = 4 * MAX_SITES;

/// A fast hasher for keys that are already well mixed (addresses): one multiply and rotate
/// per 64-bit word.
#[derive(Default)]
pub struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Slices of u64 arrive here in one piece: eight bytes at a time.
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])));
        }
        for &b in chunks.remainder() {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x100_0000_01b3).rotate_left(29);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

pub(crate) type Fast = BuildHasherDefault<WordHasher>;

#[derive(Default)]
pub(crate) struct Table {
    by_raw: HashMap<Box<[u64]>, u32, Fast>,
    by_content: HashMap<Arc<Site>, u32>,
    sites: Vec<Arc<Site>>,
    /// The Python frames of the sites, each distinct one stored once (the outer frames of a
    /// program's sites are mostly the same). Native frames are shared by their name cache.
    py_frames: HashSet<Arc<PyFrame>>,
    /// New sites refused because the table was full.
    pub dropped: u64,
}

impl Table {
    /// The id a raw capture was given before.
    pub fn by_raw(&self, raw: &[u64]) -> Option<u32> {
        self.by_raw.get(raw).copied()
    }

    /// Intern a named site for a raw capture; 0 when the table is full.
    pub fn intern(&mut self, raw: &[u64], site: Site) -> u32 {
        if let Some(&id) = self.by_raw.get(raw) {
            return id;
        }
        let id = match self.by_content.get(&site) {
            Some(&id) => id,
            None if self.sites.len() >= MAX_SITES => {
                self.dropped += 1;
                return 0;
            }
            None => {
                let mut site = site;
                for f in &mut site.python {
                    match self.py_frames.get(f) {
                        Some(known) => *f = known.clone(),
                        None => {
                            self.py_frames.insert(f.clone());
                        }
                    }
                }
                let site = Arc::new(site);
                self.sites.push(site.clone());
                let id = self.sites.len() as u32;
                self.by_content.insert(site, id);
                id
            }
        };
        if self.by_raw.len() >= MAX_RAW {
            self.by_raw.clear();
        }
        self.by_raw.insert(raw.into(), id);
        id
    }

    pub fn get(&self, id: u32) -> Option<Arc<Site>> {
        self.sites.get((id as usize).checked_sub(1)?).cloned()
    }

    pub fn len(&self) -> usize {
        self.sites.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sites::NativeFrame;

    fn py(f: &str) -> Arc<PyFrame> {
        Arc::new(PyFrame { file: "a.py".into(), function: f.into(), line: 3, line_is_current: true })
    }

    fn site(f: &str) -> Site {
        Site {
            python: vec![py(f)],
            native: vec![Arc::new(NativeFrame { object: "x.so".into(), symbol: None, offset: 1, internal: false })],
        }
    }

    #[test]
    fn interning_by_raw_and_content() {
        let mut t = Table::default();
        let a = t.intern(&[1, 2, 3], site("f"));
        assert_eq!(a, 1);
        assert_eq!(t.by_raw(&[1, 2, 3]), Some(1));
        assert_eq!(t.intern(&[9, 9], site("f")), 1, "same frames, another raw capture: same id");
        assert_eq!(t.intern(&[4], site("g")), 2);
        assert_eq!(t.get(2).unwrap().python[0].function, "g");
        assert!(t.get(0).is_none() && t.get(3).is_none());
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn sites_share_equal_python_frames() {
        let mut t = Table::default();
        let outer = || py("main");
        let a = t.intern(&[1], Site { python: vec![py("f"), outer()], native: vec![] });
        let b = t.intern(&[2], Site { python: vec![py("g"), outer()], native: vec![] });
        let (a, b) = (t.get(a).unwrap(), t.get(b).unwrap());
        assert_ne!(a, b);
        assert_eq!(a.python[1], b.python[1]);
        assert!(Arc::ptr_eq(&a.python[1], &b.python[1]), "one copy of the frame both sites hold");
        assert!(!Arc::ptr_eq(&a.python[0], &b.python[0]));
    }

    #[test]
    fn bounded() {
        let mut t = Table::default();
        for i in 0..MAX_SITES as u64 + 10 {
            t.intern(&[i], site(&i.to_string()));
        }
        assert_eq!(t.len(), MAX_SITES);
        assert_eq!(t.dropped, 10);
        assert_eq!(t.intern(&[u64::MAX], site("new")), 0);
    }
}
