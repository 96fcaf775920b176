//! The locks of the ledger, the report and the call sites: `parking_lot::Mutex` and
//! `parking_lot::RwLock`.
//!
//! Built with the `valgrind` feature (`make valgrind` does, into its own target directory), the
//! same lock also tells helgrind when it is taken and released, through valgrind client
//! requests (a no-op instruction sequence when not running under valgrind). Helgrind only
//! understands pthread mutexes; parking_lot's futex lock is invisible to it, so without this every
//! access the lock protects would be reported as a race.

#[cfg(not(all(feature = "valgrind", target_arch = "x86_64")))]
pub use parking_lot::{Mutex, RwLock, RwLockReadGuard};

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

/// Whether memcheck knows any of the `len` (at most 16) bytes at `at` to be undefined: false
/// when not running under memcheck (the request then answers 0 and changes nothing) or when
/// it cannot tell. Asking memcheck is not a read of the bytes, so it never counts as a use of
/// an uninitialised value. In every build (memcheck runs the release library): a handful of
/// no-op instructions outside valgrind.
pub fn undefined_under_memcheck(at: usize, len: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // memcheck.h: VG_USERREQ__GET_VBITS = VG_USERREQ_TOOL_BASE('M','C') + 8; it answers 1
        // when it copied the validity bits (a set bit: an undefined bit), 0 outside valgrind.
        const GET_VBITS: usize = 0x4d43_0008;
        let mut vbits = [0u8; 16];
        let len = len.min(vbits.len());
        let answer = client_request(GET_VBITS, at, vbits.as_mut_ptr() as usize, len);
        answer == 1 && vbits[..len].iter().any(|&b| b != 0)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (at, len);
        false
    }
}

/// One valgrind client request with three arguments (valgrind.h, amd64
/// `VALGRIND_DO_CLIENT_REQUEST_EXPR`: the special preamble, then `xchg rbx, rbx` with RAX
/// pointing at the request and its arguments). Answers 0 outside valgrind.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn client_request(code: usize, a1: usize, a2: usize, a3: usize) -> usize {
    let args: [usize; 6] = [code, a1, a2, a3, 0, 0];
    let mut result: usize = 0;
    // SAFETY: rotating RDI by 3+13+61+51 bits leaves it unchanged and `xchg rbx, rbx` is a
    // no-op; only valgrind gives the sequence a meaning (it reads `args`, and for some
    // requests writes the memory they name, which is why this block may access memory). The
    // rotations change CF and OF, so the flags are not declared preserved.
    unsafe {
        std::arch::asm!(
            "rol rdi, 3", "rol rdi, 13", "rol rdi, 61", "rol rdi, 51", "xchg rbx, rbx",
            inout("rdx") result, in("rax") args.as_ptr(), options(nostack)
        );
    }
    result
}

#[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
pub type Mutex<T> = parking_lot::lock_api::Mutex<annotated::RawMutex, T>;
#[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
pub type RwLock<T> = parking_lot::lock_api::RwLock<annotated::RawRwLock, T>;
#[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
pub type RwLockReadGuard<'a, T> = parking_lot::lock_api::RwLockReadGuard<'a, annotated::RawRwLock, T>;

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
    // The reader-writer lock requests (helgrind.h: _VG_USERREQ__HG_PTHREAD_RWLOCK_LOCK_PRE,
    // the ANNOTATE_RWLOCK_ACQUIRED / _RELEASED requests, _UNLOCK_POST).
    const RW_LOCK_PRE: usize = 0x4847_0110;
    const RW_ACQUIRED: usize = 0x4847_0111;
    const RW_RELEASED: usize = 0x4847_0112;
    const RW_UNLOCK_POST: usize = 0x4847_0113;

    pub fn untracked(at: usize, len: usize) {
        request(ARANGE_MAKE_UNTRACKED, at, len);
    }

    /// Each caller sends, then receives, on the object's address: whoever obtains the object
    /// after its initialiser's send sees its initialisation.
    pub fn published(tag: usize) {
        request(USERSO_SEND_PRE, tag, 0);
        request(USERSO_RECV_POST, tag, 0);
    }

    #[inline(always)]
    fn request(code: usize, a1: usize, a2: usize) {
        super::client_request(code, a1, a2, 0);
    }

    /// The lock's address as helgrind's name for it, its own words excluded from race checking
    /// (parking_lot only accesses them atomically).
    fn lock_id<L>(lock: &L) -> usize {
        let id = lock as *const L as usize;
        untracked(id, std::mem::size_of::<L>());
        id
    }

    pub struct RawMutex(parking_lot::RawMutex);

    impl RawMutex {
        /// The lock's address, as helgrind's name for it. Its state byte is only ever accessed
        /// atomically by parking_lot, so it is excluded from race checking.
        fn id(&self) -> usize {
            lock_id(self)
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

    pub struct RawRwLock(parking_lot::RawRwLock);

    impl RawRwLock {
        /// Tell helgrind that the lock was taken (`write`: exclusively).
        fn acquired(&self, write: bool) {
            request(RW_ACQUIRED, lock_id(self), write as usize);
        }

        fn released(&self) {
            request(RW_RELEASED, lock_id(self), 0);
        }

        /// Before blocking on the lock: helgrind checks the lock order here.
        fn before(&self, write: bool) {
            request(RW_LOCK_PRE, lock_id(self), write as usize);
        }

        fn after_unlock(&self) {
            request(RW_UNLOCK_POST, lock_id(self), 0);
        }
    }

    // SAFETY: a wrapper forwarding to parking_lot's RawRwLock, which upholds the contract.
    unsafe impl lock_api::RawRwLock for RawRwLock {
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: RawRwLock = RawRwLock(parking_lot::RawRwLock::INIT);
        type GuardMarker = GuardNoSend;

        fn lock_shared(&self) {
            self.before(false);
            self.0.lock_shared();
            self.acquired(false);
        }

        fn try_lock_shared(&self) -> bool {
            let ok = self.0.try_lock_shared();
            if ok {
                self.acquired(false);
            }
            ok
        }

        unsafe fn unlock_shared(&self) {
            self.released();
            // SAFETY: the caller holds a shared lock (the trait's contract).
            unsafe { self.0.unlock_shared() };
            self.after_unlock();
        }

        fn lock_exclusive(&self) {
            self.before(true);
            self.0.lock_exclusive();
            self.acquired(true);
        }

        fn try_lock_exclusive(&self) -> bool {
            let ok = self.0.try_lock_exclusive();
            if ok {
                self.acquired(true);
            }
            ok
        }

        unsafe fn unlock_exclusive(&self) {
            self.released();
            // SAFETY: the caller holds the exclusive lock (the trait's contract).
            unsafe { self.0.unlock_exclusive() };
            self.after_unlock();
        }
    }
}
