//! Explicit tags (`culedger_push_tag`, Python `culedger.tag(...)`), interned into small ids.
//!
//! An allocation records the id of the tag current on its thread (`Facts::tag`); the rules
//! see the name. The table is append-only and lock-free: a fixed array of write-once slots
//! and a counter, so interning never blocks (a fork child whose parent was interning on
//! another thread still works) and reading a name is a plain load. Two threads interning
//! the same new name at the same moment may get two ids; both carry the same name, which
//! is all that classification looks at.

use std::num::NonZeroU16;
use std::sync::atomic::{AtomicUsize, Ordering};

use once_cell::sync::OnceCell;

/// Distinct tags per process; later new names are refused.
pub const MAX_TAGS: usize = 1024;
/// Longest accepted tag, in bytes.
pub const MAX_TAG_LEN: usize = 64;

/// An interned tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TagId(NonZeroU16);

impl TagId {
    /// The id as a number (never 0), for compact records.
    pub fn raw(self) -> u16 {
        self.0.get()
    }

    /// The id [`TagId::raw`] gave; None for 0.
    pub fn from_raw(raw: u16) -> Option<TagId> {
        NonZeroU16::new(raw).map(TagId)
    }
}

static NAMES: [OnceCell<Box<str>>; MAX_TAGS] = [const { OnceCell::new() }; MAX_TAGS];
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Why a tag was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagError {
    Empty,
    TooLong,
    NotUtf8,
    /// Control characters, whitespace or quotes: tags become category names in reports.
    BadChar,
    TableFull,
}

impl TagError {
    pub fn describe(self) -> &'static str {
        match self {
            TagError::Empty => "an empty tag",
            TagError::TooLong => "a tag longer than 64 bytes",
            TagError::NotUtf8 => "a tag that is not UTF-8",
            TagError::BadChar => "a tag with whitespace, quotes or control characters",
            TagError::TableFull => "more than 1024 distinct tags",
        }
    }
}

/// Check a candidate tag (raw bytes from C).
pub fn validate(raw: &[u8]) -> Result<&str, TagError> {
    if raw.is_empty() {
        return Err(TagError::Empty);
    }
    if raw.len() > MAX_TAG_LEN {
        return Err(TagError::TooLong);
    }
    let s = std::str::from_utf8(raw).map_err(|_| TagError::NotUtf8)?;
    if s.chars().any(|c| c.is_control() || c.is_whitespace() || c == '"' || c == '\'' || c == '\\') {
        return Err(TagError::BadChar);
    }
    Ok(s)
}

/// The id of `name` (validated), interning it on first use.
pub fn intern(name: &str) -> Result<TagId, TagError> {
    let name = validate(name.as_bytes())?;
    let filled = NEXT.load(Ordering::Acquire).min(MAX_TAGS);
    if let Some(i) = (0..filled).find(|&i| NAMES[i].get().is_some_and(|n| &**n == name)) {
        return Ok(id_of(i));
    }
    let slot = NEXT.fetch_add(1, Ordering::AcqRel);
    if slot >= MAX_TAGS {
        NEXT.store(MAX_TAGS, Ordering::Release);
        return Err(TagError::TableFull);
    }
    // A fresh slot is ours alone: `set` cannot fail.
    let _ = NAMES[slot].set(name.into());
    Ok(id_of(slot))
}

fn id_of(slot: usize) -> TagId {
    // slot < MAX_TAGS < u16::MAX, so slot + 1 is a valid non-zero u16.
    TagId(NonZeroU16::new(slot as u16 + 1).unwrap_or(NonZeroU16::MIN))
}

/// The name of an interned tag ("" only for an id this process never handed out).
pub fn name(id: TagId) -> &'static str {
    NAMES.get(usize::from(id.0.get()) - 1).and_then(|c| c.get()).map_or("", |n| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_names_round_trip() {
        let a = intern("rules-test-kv_pool").unwrap();
        let b = intern("rules-test-weights").unwrap();
        assert_ne!(a, b);
        assert_eq!(intern("rules-test-kv_pool").unwrap(), a);
        assert_eq!(name(a), "rules-test-kv_pool");
        assert_eq!(name(b), "rules-test-weights");
    }

    #[test]
    fn bad_tags_are_refused() {
        assert_eq!(validate(b""), Err(TagError::Empty));
        assert_eq!(validate(&[b'x'; 65]), Err(TagError::TooLong));
        assert_eq!(validate(&[b'x'; 64]).map(str::len), Ok(64));
        assert_eq!(validate(b"\xff\xfe"), Err(TagError::NotUtf8));
        assert_eq!(validate(b"kv pool"), Err(TagError::BadChar));
        assert_eq!(validate(b"kv\npool"), Err(TagError::BadChar));
        assert_eq!(validate(b"a\"b"), Err(TagError::BadChar));
        assert_eq!(validate("poids-é".as_bytes()), Ok("poids-é"));
        assert!(intern("").is_err());
        assert!(!TagError::TableFull.describe().is_empty());
    }

    #[test]
    fn concurrent_interning_gives_one_name_per_id() {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                std::thread::spawn(move || {
                    (0..20).map(|i| intern(&format!("rt-{}", (i + t) % 10)).unwrap()).collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for id in h.join().unwrap() {
                assert!(name(id).starts_with("rt-"));
            }
        }
    }
}
