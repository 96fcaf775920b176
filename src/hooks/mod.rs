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

pub use process::{prefetch_libc, real_sigaction};
pub use table::{Entry, Kind, Sym, NSLOTS, TABLE};

pub(crate) use dlopen::{dlopens, in_dlopen, in_dlopen_unless_none_since};
pub(crate) use dlsym::real_dlsym;

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

/// A thread's hook state, in one thread-local (in a shared library each access to a
/// thread-local is a call: a hook that records reaches this once for its depth and once for
/// its bookkeeping).
struct HookState {
    /// Depth of hooked calls on this thread.
    depth: Cell<u32>,
    /// Set while this thread is inside the ledger's bookkeeping (it may hold a ledger lock).
    in_record: Cell<bool>,
    /// A terminating signal that arrived while this thread was inside the bookkeeping.
    deferred: Cell<libc::c_int>,
}

thread_local! {
    /// Const-initialised `Cell`s without a destructor: a plain ELF TLS block, no lazy
    /// registration, no allocation; it lives as long as its thread.
    static HOOK: HookState =
        const { HookState { depth: Cell::new(0), in_record: Cell::new(false), deferred: Cell::new(0) } };
}

/// This thread's hook state, for the duration of a hook (None while the thread is exiting).
#[inline]
fn hook_state() -> Option<*const HookState> {
    HOOK.try_with(|h| h as *const HookState).ok()
}

/// Is the calling thread inside culedger's bookkeeping? True only when a signal handler
/// interrupted a hook while it recorded (and may hold a ledger lock): an exit from there
/// must not wait for a report write that needs that lock.
pub fn in_bookkeeping() -> bool {
    HOOK.try_with(|h| h.in_record.get()).unwrap_or(false)
}

/// A terminating signal arrived inside this thread's bookkeeping (`in_bookkeeping`): the hook
/// handles it when the bookkeeping is over (`report::signals::after_bookkeeping`).
pub(crate) fn defer_signal(sig: libc::c_int) {
    let _ = HOOK.try_with(|h| h.deferred.set(sig));
}

/// Marks one hooked call on this thread. `outer` is true for the outermost one, which
/// records; calls nested inside it (a runtime function calling down into a driver wrapper)
/// only forward.
pub(crate) struct Depth {
    pub outer: bool,
    /// The thread's state (null while the thread is exiting): the drop needs no second
    /// look-up. A raw pointer: `Depth` stays on its thread.
    state: *const HookState,
}

impl Depth {
    #[inline]
    pub fn enter() -> Depth {
        let Some(state) = hook_state() else { return Depth { outer: false, state: std::ptr::null() } };
        // SAFETY: this thread's own state, alive as long as the thread.
        let d = unsafe { &(*state).depth };
        let v = d.get();
        d.set(v.saturating_add(1));
        Depth { outer: v == 0, state }
    }
}

impl Drop for Depth {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as in `enter`, on the same thread.
        if let Some(h) = unsafe { self.state.as_ref() } {
            h.depth.set(h.depth.get().saturating_sub(1));
        }
    }
}

static INIT: Once = Once::new();

/// First-use initialisation for the hooks that record (never called from the dlsym path
/// or a constructor): silence our own copy of std's panic output unless debugging; load the
/// classification rules.
pub(crate) fn init() {
    INIT.call_once(|| {
        if !crate::log::enabled(crate::log::Level::Debug) {
            std::panic::set_hook(Box::new(|_| {}));
        }
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
    init();
    // SAFETY: this thread's own state, alive as long as the thread.
    let state = hook_state().and_then(|h| unsafe { h.as_ref() });
    if let Some(h) = state {
        h.in_record.set(true);
    }
    let ok = catch_unwind(AssertUnwindSafe(|| f(crate::ledger::global()))).is_ok();
    let deferred = state.map_or(0, |h| {
        h.in_record.set(false);
        h.deferred.replace(0)
    });
    // A terminating signal that arrived during the bookkeeping is handled now.
    crate::report::signals::after_bookkeeping(deferred);
    if !ok {
        let _ = catch_unwind(|| crate::ledger::global().note_loss(what));
    }
    let _ = catch_unwind(crate::report::activate);
}
