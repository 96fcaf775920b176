//! The ground floor: what the hooks, the report writer and the call sites all stand on, and
//! which itself stands on nothing of culedger's above it (only `config`, `log` and `sync`).
//!
//! - `thread`: the per-thread state of a hooked call (its depth, whether it is inside the
//!   bookkeeping, a terminating signal deferred until that ends, the innermost explicit tag),
//!   in one const-initialised TLS slot.
//! - `dlopen`: "is this thread inside `dlopen`?", from the ring of entries the exported
//!   `dlopen` (`hooks::dlopen`) records, and how many `dlopen` calls have entered.
//! - `real`: the real libc and loader entry points culedger calls itself (`dlsym`,
//!   `sigaction`, the exit, exec and signal family), found after libculedger.
//!
//! Nothing here records, allocates on a hot path or takes a lock.

pub mod dlopen;
pub mod real;
pub mod thread;

use std::sync::Once;

static QUIET: Once = Once::new();

/// Silence our own copy of std's panic output unless debugging, before anything that may
/// panic inside culedger (and be caught) runs: a program sees no output of ours.
pub fn quiet_panics() {
    QUIET.call_once(|| {
        if !crate::log::enabled(crate::log::Level::Debug) {
            std::panic::set_hook(Box::new(|_| {}));
        }
    });
}
