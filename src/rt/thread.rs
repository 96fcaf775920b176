//! What a hooked call keeps per thread, in one TLS slot: in a shared library every access
//! to a `thread_local!` is a call to `__tls_get_addr`, so a hook reaches this once and
//! passes it on (`hooks::Depth`). Const-initialised `Cell`s without a destructor: a plain
//! ELF TLS slot, no lazy registration, no allocation.

use libc::c_int;
use std::cell::Cell;

pub(crate) struct ThreadState {
    /// Depth of hooked calls on this thread.
    pub(crate) depth: Cell<u32>,
    /// Set while this thread is inside the ledger's bookkeeping (it may hold a ledger lock).
    pub(crate) in_record: Cell<bool>,
    /// A terminating signal that arrived during the bookkeeping, handled when it ends.
    pub(crate) deferred: Cell<c_int>,
    /// The innermost explicit tag (`TagId::raw`, 0: none), kept by `hooks::tags`.
    pub(crate) tag: Cell<u16>,
}

thread_local! {
    static STATE: ThreadState = const {
        ThreadState { depth: Cell::new(0), in_record: Cell::new(false), deferred: Cell::new(0), tag: Cell::new(0) }
    };
}

/// This thread's state; None while its TLS is being torn down.
#[inline]
pub(crate) fn state() -> Option<&'static ThreadState> {
    // SAFETY: the slot lives as long as the thread and has no destructor; `ThreadState` is
    // not `Sync`, so the reference cannot leave the thread.
    STATE.try_with(|s| unsafe { &*(s as *const ThreadState) }).ok()
}

/// Is the calling thread inside culedger's bookkeeping? True only when a signal handler
/// interrupted a hook while it recorded (and may hold a ledger lock): an exit from there
/// must not wait for a report write that needs that lock.
pub fn in_bookkeeping() -> bool {
    state().is_some_and(|s| s.in_record.get())
}

/// A terminating signal arrived during the bookkeeping: handled when it ends (`hooks::record`).
pub fn defer_signal(sig: c_int) {
    if let Some(s) = state() {
        s.deferred.set(sig);
    }
}
