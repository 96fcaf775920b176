//! The lock of the ledger and the report: `parking_lot::Mutex`.
//!
//! Built with the `valgrind` feature (`make valgrind` does, into its own target directory), the
//! same lock also tells helgrind when it is taken and released, through valgrind client
//! requests (a no-op instruction sequence when not running under valgrind). Helgrind only
//! understands pthread mutexes; parking_lot's futex lock is invisible to it, so without this every
//! access the lock protects would be reported as a race.

#[cfg(not(all(feature = "valgrind", target_arch = "x86_64")))]
pub use parking_lot::Mutex;

/// Tell helgrind that `atomic` (an `Atomic*` value) is only ever accessed atomically: on x86_64
/// its loads and stores are plain moves, which helgrind would otherwise report as races. A no-op
/// unless built with the `valgrind` feature.
#[inline(always)]
pub fn atomic<T>(atomic: &T) {
    #[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
    annotated::untracked(atomic as *const T as usize, std::mem::size_of::<T>());
    #[cfg(not(all(feature = "valgrind", target_arch = "x86_64")))]
    let _ = atomic;
}

/// Tell helgrind that `object` was just published to other threads by a mechanism it cannot
/// see (a `OnceCell` initialised by one thread, read by others), so that its initialisation
/// happens before the later accesses of every thread that calls this after obtaining it. A
/// no-op unless built with the `valgrind` feature.
#[inline(always)]
pub fn published<T>(object: &T) {
    #[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
    annotated::published(object as *const T as usize);
    #[cfg(not(all(feature = "valgrind", target_arch = "x86_64")))]
    let _ = object;
}

#[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
pub type Mutex<T> = parking_lot::lock_api::Mutex<annotated::RawMutex, T>;

#[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
mod annotated {
    use parking_lot::lock_api::{self, GuardNoSend};
    use std::time::{Duration, Instant};

    // helgrind.h: VG_USERREQ_TOOL_BASE('H','G') + the mutex requests of VALGRIND_HG_MUTEX_*.
    const ACQUIRE_PRE: usize = 0x4847_0107;
    const ACQUIRE_POST: usize = 0x4847_0108;
    const UNLOCK_PRE: usize = 0x4847_0105;
    const UNLOCK_POST: usize = 0x4847_0106;
    const USERSO_SEND_PRE: usize = 0x4847_0121;
    const USERSO_RECV_POST: usize = 0x4847_0122;
    const ARANGE_MAKE_UNTRACKED: usize = 0x4847_0127;

    pub fn untracked(at: usize, len: usize) {
        request(ARANGE_MAKE_UNTRACKED, at, len);
    }

    /// Each caller sends, then receives, on the object's address: whoever obtains the object
    /// after its initialiser's send sees its initialisation.
    pub fn published(tag: usize) {
        request(USERSO_SEND_PRE, tag, 0);
        request(USERSO_RECV_POST, tag, 0);
    }

    /// One valgrind client request with two arguments (valgrind.h, amd64
    /// `VALGRIND_DO_CLIENT_REQUEST_EXPR`: the special preamble, then `xchg rbx, rbx` with RAX
    /// pointing at the request and its arguments).
    #[inline(always)]
    fn request(code: usize, a1: usize, a2: usize) {
        let args: [usize; 6] = [code, a1, a2, 0, 0, 0];
        let mut _result: usize = 0;
        // SAFETY: rotating RDI by 3+13+61+51 bits leaves it unchanged and `xchg rbx, rbx` is a
        // no-op; only valgrind gives the sequence a meaning (it reads `args`).
        unsafe {
            std::arch::asm!(
                "rol rdi, 3", "rol rdi, 13", "rol rdi, 61", "rol rdi, 51", "xchg rbx, rbx",
                inout("rdx") _result, in("rax") args.as_ptr(), options(nostack, preserves_flags)
            );
        }
    }

    pub struct RawMutex(parking_lot::RawMutex);

    impl RawMutex {
        /// The lock's address, as helgrind's name for it. Its state byte is only ever accessed
        /// atomically by parking_lot, so it is excluded from race checking.
        fn id(&self) -> usize {
            let id = self as *const Self as usize;
            untracked(id, std::mem::size_of::<Self>());
            id
        }
    }

    // SAFETY: a wrapper forwarding to parking_lot's RawMutex, which upholds the contract.
    unsafe impl lock_api::RawMutex for RawMutex {
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: RawMutex = RawMutex(parking_lot::RawMutex::INIT);
        type GuardMarker = GuardNoSend;

        fn lock(&self) {
            request(ACQUIRE_PRE, self.id(), 0);
            self.0.lock();
            request(ACQUIRE_POST, self.id(), 0);
        }

        fn try_lock(&self) -> bool {
            request(ACQUIRE_PRE, self.id(), 1);
            let ok = self.0.try_lock();
            if ok {
                request(ACQUIRE_POST, self.id(), 0);
            }
            ok
        }

        unsafe fn unlock(&self) {
            request(UNLOCK_PRE, self.id(), 0);
            self.0.unlock();
            request(UNLOCK_POST, self.id(), 0);
        }
    }

    // SAFETY: as above.
    unsafe impl lock_api::RawMutexTimed for RawMutex {
        type Duration = Duration;
        type Instant = Instant;

        fn try_lock_for(&self, timeout: Duration) -> bool {
            request(ACQUIRE_PRE, self.id(), 1);
            let ok = self.0.try_lock_for(timeout);
            if ok {
                request(ACQUIRE_POST, self.id(), 0);
            }
            ok
        }

        fn try_lock_until(&self, deadline: Instant) -> bool {
            request(ACQUIRE_PRE, self.id(), 1);
            let ok = self.0.try_lock_until(deadline);
            if ok {
                request(ACQUIRE_POST, self.id(), 0);
            }
            ok
        }
    }
}
