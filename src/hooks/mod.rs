//! The C ABI face of culedger.
//!
//! One table (`table.rs`) lists every hooked entry point, runtime and driver, with its C
//! signature and the function that implements it. The same table drives the three ways a
//! program can reach CUDA:
//! 1. exported symbols, found first because we are preloaded (`table.rs` generates them);
//! 2. `dlsym` on any handle (`dlsym.rs`, with an assembly entry that tail-jumps into the
//!    real `dlsym` so `RTLD_NEXT` keeps its meaning for the caller);
//! 3. `cuGetProcAddress`/`_v2`, `cudaGetDriverEntryPoint`/`ByVersion` (`resolve.rs`).
//!
//! Every hooked function receives the real function pointer it wraps. Hooks follow one
//! pattern (see `families`): the real function runs with no lock held; the outermost hooked
//! call on a thread records (a runtime call that reaches a driver wrapper counts once);
//! recording runs under `catch_unwind`, and a failure there is noted as a loss.

#[cfg(test)]
mod coverage;
mod dlopen;
mod dlsym;
mod families;
mod process;
pub mod real;
pub mod resolve;
mod table;
pub mod tags;
pub mod types;

pub use table::{Entry, Kind, Sym, NSLOTS, TABLE};

use crate::rt::thread::{state, ThreadState};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

/// The calling thread's innermost explicit tag.
#[inline]
pub fn current_tag() -> Option<crate::classify::tags::TagId> {
    state().and_then(|s| crate::classify::tags::TagId::from_raw(s.tag.get()))
}

/// Set by `tags.rs` after each push and pop.
pub(crate) fn set_current_tag(tag: Option<crate::classify::tags::TagId>) {
    if let Some(s) = state() {
        s.tag.set(tag.map_or(0, crate::classify::tags::TagId::raw));
    }
}

/// Marks one hooked call on this thread. `outer` is true for the outermost one, which
/// records; calls nested inside it (a runtime function calling down into a driver wrapper)
/// only forward.
pub(crate) struct Depth {
    pub outer: bool,
    state: Option<&'static ThreadState>,
}

impl Depth {
    #[inline]
    pub fn enter() -> Depth {
        let state = state();
        let outer = state.is_some_and(|s| {
            let v = s.depth.get();
            s.depth.set(v.saturating_add(1));
            v == 0
        });
        Depth { outer, state }
    }

    /// [`record`] with this thread's state at hand.
    #[inline]
    pub fn record<F: FnOnce(&crate::ledger::Ledger)>(&self, what: &'static str, f: F) {
        record_in(self.state, what, f)
    }

    /// The thread's innermost explicit tag.
    #[inline]
    pub fn tag(&self) -> Option<crate::classify::tags::TagId> {
        self.state.and_then(|s| crate::classify::tags::TagId::from_raw(s.tag.get()))
    }
}

impl Drop for Depth {
    #[inline]
    fn drop(&mut self) {
        if let Some(s) = self.state {
            s.depth.set(s.depth.get().saturating_sub(1));
        }
    }
}

static INIT: Once = Once::new();

/// First-use initialisation for the hooks that record (never called from the dlsym path
/// or a constructor): silence our own copy of std's panic output unless debugging; load the
/// classification rules.
pub(crate) fn init() {
    INIT.call_once(|| {
        crate::rt::quiet_panics();
        // The classification rules, with the user's file (one warning if it is bad).
        let loaded = catch_unwind(|| {
            let cwd = std::env::current_dir().ok();
            let path = crate::config::rules_path(|name| std::env::var_os(name), cwd.as_deref());
            crate::classify::init(path.as_deref())
        });
        if let Ok(Some(warning)) = loaded {
            crate::warn!("{warning}");
            let _ = catch_unwind(AssertUnwindSafe(|| crate::ledger::global().note_warning(&warning)));
        }
    });
}

/// Record something about a hooked call. Runs the closure under `catch_unwind`; a panic
/// becomes a noted loss, never an unwind into C. Activates the report writer.
#[inline]
pub(crate) fn record<F: FnOnce(&crate::ledger::Ledger)>(what: &'static str, f: F) {
    record_in(state(), what, f)
}

#[inline]
fn record_in<F: FnOnce(&crate::ledger::Ledger)>(state: Option<&ThreadState>, what: &'static str, f: F) {
    init();
    if let Some(s) = state {
        s.in_record.set(true);
    }
    let ok = catch_unwind(AssertUnwindSafe(|| f(crate::ledger::global()))).is_ok();
    // A terminating signal that arrived during the bookkeeping is handled now.
    if let Some(s) = state {
        s.in_record.set(false);
        let sig = s.deferred.replace(0);
        if sig != 0 {
            crate::report::signals::after_bookkeeping(sig);
        }
    }
    if !ok {
        let _ = catch_unwind(|| crate::ledger::global().note_loss(what));
    }
    let _ = catch_unwind(crate::report::activate);
}
