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

pub(crate) use dlopen::in_dlopen;
pub(crate) use dlsym::real_dlsym;

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Depth of hooked calls on this thread. Const-initialised `Cell` without a destructor:
    /// compiles to a plain ELF TLS slot, no lazy registration, no allocation.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Set while this thread is inside the ledger's bookkeeping (it may hold a ledger lock).
    static IN_RECORD: Cell<bool> = const { Cell::new(false) };
}

/// Is the calling thread inside culedger's bookkeeping? True only when a signal handler
/// interrupted a hook while it recorded (and may hold a ledger lock): an exit from there
/// must not wait for a report write that needs that lock.
pub fn in_bookkeeping() -> bool {
    IN_RECORD.try_with(|r| r.get()).unwrap_or(false)
}

/// Marks one hooked call on this thread. `outer` is true for the outermost one, which
/// records; calls nested inside it (a runtime function calling down into a driver wrapper)
/// only forward.
pub(crate) struct Depth {
    pub outer: bool,
}

impl Depth {
    #[inline]
    pub fn enter() -> Depth {
        let outer = DEPTH
            .try_with(|d| {
                let v = d.get();
                d.set(v.saturating_add(1));
                v == 0
            })
            .unwrap_or(false);
        Depth { outer }
    }
}

impl Drop for Depth {
    #[inline]
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
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
    let _ = IN_RECORD.try_with(|r| r.set(true));
    let ok = catch_unwind(AssertUnwindSafe(|| f(crate::ledger::global()))).is_ok();
    let _ = IN_RECORD.try_with(|r| r.set(false));
    // A terminating signal that arrived during the bookkeeping is handled now.
    crate::report::signals::after_bookkeeping();
    if !ok {
        let _ = catch_unwind(|| crate::ledger::global().note_loss(what));
    }
    let _ = catch_unwind(crate::report::activate);
}
