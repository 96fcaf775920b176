//! The packed record a shard keeps per live allocation, its key, and the small tables beside
//! it (the entry points records name, the hasher of keys).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::super::table::Keyed;
use super::super::{Facts, MemKind, Stamp};
use crate::classify::{self, Category};

/// One live allocation (or VMM physical handle) as the shard keeps it: 32 bytes, so that a
/// million live allocations cost at most 64 bytes each with the table's slack and the
/// address order. Fields are packed into words; read them through the methods.
/// Limits (saturating; documented in docs/reliability.md): sizes up to 2^48-1 bytes (256 TiB),
/// times up to 2^48 us (8.9 years), sequence numbers up to 2^48.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Alloc {
    /// Base address; for VMM physical memory, the handle. 0 only in an empty table slot.
    pub base: u64,
    /// Bytes (low 48 bits) | call site (high 16).
    sized: u64,
    /// Per-process record order (low 48, see `Stamp`) | tag (high 16, 0: none).
    ordered: u64,
    /// When it was made, us (low 48) | api (8: index into the shard's `Apis`) | flags (8).
    timed: u64,
}

pub(super) const LOW48: u64 = (1 << 48) - 1;
/// `timed`'s flag byte: kind (3 bits), category (3 bits), exported, captured.
pub(super) const F_EXPORTED: u64 = 1 << 6;
pub(super) const F_CAPTURED: u64 = 1 << 7;
/// In the api byte: host-to-device bytes were copied in (kept in `DeviceLedger::h2d`).
pub(super) const A_H2D: u64 = 1 << 7;

/// By discriminant (the order `MemKind` declares them in).
pub(super) const KINDS: [MemKind; 5] =
    [MemKind::Device, MemKind::Managed, MemKind::Async, MemKind::Pitch, MemKind::VmmPhysical];
const _: () = {
    let mut i = 0;
    while i < KINDS.len() {
        assert!(KINDS[i] as usize == i);
        i += 1;
    }
};

// Site ids and tag ids fit their 16 bits.
const _: () = assert!(crate::sites::MAX_SITE_ID <= u16::MAX as usize && crate::classify::tags::MAX_TAGS <= 1 << 16);

impl Alloc {
    /// A record of `bytes` at `base` made at `now`, with its facts and category; `api` is an
    /// index into the shard's [`Apis`].
    pub(crate) fn new(
        base: u64,
        bytes: u64,
        kind: MemKind,
        api: u8,
        now: Stamp,
        facts: &Facts,
        category: Category,
    ) -> Alloc {
        let site = u64::from(u16::try_from(facts.site).unwrap_or(0));
        let tag = u64::from(facts.tag.map_or(0, crate::classify::tags::TagId::raw));
        let kind = kind as u64;
        let flags = kind
            | (category.index() as u64) << 3
            | if facts.exported { F_EXPORTED } else { 0 }
            | if facts.captured { F_CAPTURED } else { 0 };
        let api = u64::from(api) & !A_H2D;
        Alloc {
            base,
            sized: bytes.min(LOW48) | site << 48,
            ordered: now.seq.min(LOW48) | tag << 48,
            timed: now.t_us.min(LOW48) | api << 48 | flags << 56,
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.sized & LOW48
    }

    pub(crate) fn site(&self) -> u32 {
        (self.sized >> 48) as u32
    }

    pub(crate) fn seq(&self) -> u64 {
        self.ordered & LOW48
    }

    pub(crate) fn tag(&self) -> Option<crate::classify::tags::TagId> {
        crate::classify::tags::TagId::from_raw((self.ordered >> 48) as u16)
    }

    pub(crate) fn t_us(&self) -> u64 {
        self.timed & LOW48
    }

    pub(super) fn api_byte(&self) -> u64 {
        (self.timed >> 48) & 0xff
    }

    pub(super) fn api_index(&self) -> u8 {
        (self.api_byte() & !A_H2D) as u8
    }

    /// Host-to-device bytes were copied into it (their count is kept beside the table).
    pub(super) fn has_h2d(&self) -> bool {
        self.api_byte() & A_H2D != 0
    }

    pub(super) fn flags(&self) -> u64 {
        self.timed >> 56
    }

    pub(crate) fn kind(&self) -> MemKind {
        KINDS[(self.flags() & 7) as usize % KINDS.len()]
    }

    pub(crate) fn category(&self) -> Category {
        classify::ALL[((self.flags() >> 3) & 7) as usize % classify::ALL.len()]
    }

    pub(crate) fn exported(&self) -> bool {
        self.flags() & F_EXPORTED != 0
    }

    pub(crate) fn captured(&self) -> bool {
        self.flags() & F_CAPTURED != 0
    }

    pub(super) fn set_category(&mut self, c: Category) {
        self.timed = self.timed & !(7 << 59) | (c.index() as u64) << 59;
    }

    pub(super) fn set_flag(&mut self, flag: u64, on: bool) {
        let bit = flag << 56;
        self.timed = if on { self.timed | bit } else { self.timed & !bit };
    }

    pub(super) fn set_h2d(&mut self) {
        self.timed |= A_H2D << 48;
    }

    /// Its facts, given the host-to-device bytes kept beside it.
    pub(crate) fn facts(&self, h2d_bytes: u64) -> Facts {
        Facts { exported: self.exported(), captured: self.captured(), h2d_bytes, site: self.site(), tag: self.tag() }
    }

    pub(super) fn end(&self) -> u64 {
        self.base.saturating_add(self.bytes())
    }
}

impl Keyed for Alloc {
    fn key(&self) -> u64 {
        self.base
    }

    fn vacant() -> Self {
        Alloc { base: 0, sized: 0, ordered: 0, timed: 0 }
    }
}

/// The entry points named by one shard's records (few: the hooked allocation functions),
/// looked up by address first (the names are the table's `&'static str`s).
#[derive(Debug, Default)]
pub(crate) struct Apis(Vec<&'static str>);

/// Api indices: up to 127 names, then the last one stands for every other.
pub(super) const APIS_KEPT: usize = 127;

impl Apis {
    #[inline]
    pub(super) fn index(&mut self, api: &'static str) -> u8 {
        if let Some(i) = self.0.iter().position(|a| std::ptr::eq(a.as_ptr(), api.as_ptr()) && a.len() == api.len()) {
            return i as u8;
        }
        self.index_slow(api)
    }

    #[cold]
    pub(super) fn index_slow(&mut self, api: &'static str) -> u8 {
        if let Some(i) = self.0.iter().position(|a| *a == api) {
            return i as u8;
        }
        if self.0.len() < APIS_KEPT {
            self.0.push(api);
            return (self.0.len() - 1) as u8;
        }
        (APIS_KEPT - 1) as u8
    }

    pub(crate) fn name(&self, i: u8) -> &'static str {
        self.0.get(usize::from(i)).copied().unwrap_or("?")
    }
}

/// A live record as the report shows it (unpacked, with its api named and its host-to-device
/// bytes): what [`DeviceLedger::top_allocations`] hands out.
#[derive(Clone, Debug)]
pub(crate) struct Allocation {
    pub base: u64,
    pub bytes: u64,
    pub kind: MemKind,
    pub api: &'static str,
    pub t_us: u64,
    pub seq: u64,
    pub facts: Facts,
    pub category: Category,
}

/// A hasher for [`Key`]s (a discriminant and an address or handle) and ids: a multiply and
/// a fold per word, instead of SipHash on the path of a host-to-device copy. Its keys are
/// culedger's or the driver's, not a program's input.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let m = u128::from(self.0 ^ v) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (m as u64) ^ (m >> 64) as u64;
    }

    fn write_isize(&mut self, v: isize) {
        self.write_u64(v as u64);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
}

/// A map keyed by culedger's own ids and addresses, hashed by [`KeyHasher`]: the per-site
/// figures and the history's index are updated on every large allocation and free, where
/// SipHash was several times the rest of the update.
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

/// A record taken out of a shard, with the host-to-device bytes kept beside it: what a
/// failed free puts back ([`DeviceLedger::restore`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Removed {
    pub alloc: Alloc,
    pub h2d: u64,
}

/// Where a record lives in a shard: addressed allocations are keyed by base address,
/// VMM physical memory by handle (handles are not addresses and may collide with them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Addr(u64),
    Handle(u64),
}
