//! Explicit tags, the C face: `culedger_push_tag(const char*)` and `culedger_pop_tag()`.
//!
//! Each thread has a small stack of tag ids (thread-local, const-initialised, no destructor:
//! a plain TLS slot, no lazy registration). A push copies the string into the process's tag
//! table (`classify::tags`), which never blocks; an allocation records the innermost tag of
//! the thread that makes it. Nothing here calls CUDA, takes a ledger lock or panics across
//! the ABI.
//!
//! Programs call these through a weak lookup (`dlsym(RTLD_DEFAULT, "culedger_push_tag")`,
//! or Python's `culedger.tag`), so they keep working when culedger is not loaded.
//!
//! Return values: the depth after the call (>= 1 after a push, >= 0 after a pop), or -1 when
//! the tag was refused (NULL, empty, longer than 64 bytes, not UTF-8, whitespace or quotes,
//! table full) or a pop found the stack empty. A refused push still counts for nesting (its
//! pop is expected), but tags nothing: the enclosing tag stays current. Deeper than 32 pushes
//! are counted but not stored: pops balance, and the 32nd tag stays current.

use std::cell::RefCell;
use std::panic::catch_unwind;

use libc::{c_char, c_int};

use crate::classify::tags::{self, TagId};

/// Stored nesting depth per thread.
pub const MAX_DEPTH: usize = 32;

struct Stack {
    ids: [Option<TagId>; MAX_DEPTH],
    /// Pushes minus pops; may exceed MAX_DEPTH (entries beyond are not stored).
    depth: usize,
}

impl Stack {
    const fn new() -> Stack {
        Stack { ids: [None; MAX_DEPTH], depth: 0 }
    }

    fn push(&mut self, id: Option<TagId>) -> usize {
        if self.depth < MAX_DEPTH {
            self.ids[self.depth] = id;
        }
        self.depth += 1;
        self.depth
    }

    fn pop(&mut self) -> Option<usize> {
        self.depth = self.depth.checked_sub(1)?;
        if self.depth < MAX_DEPTH {
            self.ids[self.depth] = None;
        }
        Some(self.depth)
    }

    fn current(&self) -> Option<TagId> {
        self.ids[..self.depth.min(MAX_DEPTH)].iter().rev().find_map(|id| *id)
    }
}

thread_local! {
    static STACK: RefCell<Stack> = const { RefCell::new(Stack::new()) };
}

/// The innermost tag of the calling thread (what a new allocation records).
#[inline]
pub fn current() -> Option<TagId> {
    super::current_tag()
}

/// Apply `f` to the calling thread's stack, then publish its innermost tag to the hooks'
/// per-thread state (where an allocation reads it without another TLS access).
fn with_stack<R>(f: impl FnOnce(&mut Stack) -> R) -> Option<R> {
    STACK
        .try_with(|s| {
            let mut s = s.try_borrow_mut().ok()?;
            let r = f(&mut s);
            super::set_current_tag(s.current());
            Some(r)
        })
        .ok()
        .flatten()
}

/// Interns `raw` and pushes it (or a refusal marker); the depth, or -1 when refused.
fn push_bytes(raw: Option<&[u8]>) -> c_int {
    let id = raw.ok_or(tags::TagError::Empty).and_then(|b| tags::intern(tags::validate(b)?));
    if let Err(e) = id {
        crate::warn_once!(
            "culedger_push_tag: {} was ignored (it tags nothing; its pop is still expected)",
            e.describe()
        );
    }
    let depth = with_stack(|s| s.push(id.ok()));
    match (depth, id) {
        (Some(d), Ok(_)) => c_int::try_from(d).unwrap_or(c_int::MAX),
        _ => -1,
    }
}

fn pop() -> c_int {
    let depth = with_stack(|s| s.pop()).flatten();
    depth.map_or(-1, |d| c_int::try_from(d).unwrap_or(c_int::MAX))
}

/// Push `tag` on the calling thread's tag stack. See the module documentation.
///
/// # Safety
/// `tag` is NULL or points to a NUL-terminated string (at most 65 bytes are read).
#[no_mangle]
pub unsafe extern "C" fn culedger_push_tag(tag: *const c_char) -> c_int {
    let raw = if tag.is_null() {
        None
    } else {
        let len = libc::strnlen(tag, tags::MAX_TAG_LEN + 1);
        // SAFETY: strnlen found `len` readable bytes before the NUL or the bound.
        Some(std::slice::from_raw_parts(tag.cast::<u8>(), len))
    };
    catch_unwind(|| push_bytes(raw)).unwrap_or(-1)
}

/// Pop the innermost tag of the calling thread. See the module documentation.
#[no_mangle]
pub extern "C" fn culedger_pop_tag() -> c_int {
    catch_unwind(pop).unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn push(s: &str) -> c_int {
        let c = CString::new(s).unwrap();
        unsafe { culedger_push_tag(c.as_ptr()) }
    }

    fn current_name() -> Option<&'static str> {
        current().map(tags::name)
    }

    #[test]
    fn nesting_and_balance() {
        assert_eq!(current_name(), None);
        assert_eq!(culedger_pop_tag(), -1, "pop of an empty stack");
        assert_eq!(push("weights"), 1);
        assert_eq!(push("kv_pool"), 2);
        assert_eq!(current_name(), Some("kv_pool"));
        assert_eq!(culedger_pop_tag(), 1);
        assert_eq!(current_name(), Some("weights"));
        assert_eq!(culedger_pop_tag(), 0);
        assert_eq!(current_name(), None);
    }

    #[test]
    fn refused_tags_keep_nesting_and_the_enclosing_tag() {
        assert_eq!(push("outer"), 1);
        assert_eq!(unsafe { culedger_push_tag(std::ptr::null()) }, -1);
        assert_eq!(push("has space"), -1);
        assert_eq!(push(&"x".repeat(65)), -1);
        assert_eq!(current_name(), Some("outer"), "refused pushes tag nothing");
        assert_eq!(culedger_pop_tag(), 3);
        assert_eq!(culedger_pop_tag(), 2);
        assert_eq!(culedger_pop_tag(), 1);
        assert_eq!(culedger_pop_tag(), 0);
        assert_eq!(current_name(), None);
    }

    #[test]
    fn deep_nesting_is_bounded_and_balanced() {
        for i in 0..40 {
            assert_eq!(push(&format!("d{i}")), i + 1);
        }
        assert_eq!(current_name(), Some("d31"), "entries past 32 are counted, not stored");
        for i in (0..40).rev() {
            assert_eq!(culedger_pop_tag(), i);
        }
        assert_eq!(current_name(), None);
    }

    #[test]
    fn tags_are_per_thread() {
        assert_eq!(push("main-thread"), 1);
        let other = std::thread::spawn(|| {
            let before = current();
            push("worker");
            (before, current_name())
        })
        .join()
        .unwrap();
        assert_eq!(other, (None, Some("worker")));
        assert_eq!(current_name(), Some("main-thread"));
        culedger_pop_tag();
    }
}
