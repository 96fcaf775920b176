//! Arrays of plain records that start all-zero, in memory of their own: a large one in an
//! anonymous mapping straight from the kernel (unmapped when dropped), a small one on the
//! heap.
//!
//! Why not a `Vec`: a ledger table of a million live allocations is tens of MiB, reallocated
//! as it grows. glibc serves such blocks with `mmap`, and when one is freed it raises its
//! threshold for doing so to the freed block's size (up to 32 MiB). From then on, blocks below
//! that size, the program's and culedger's, come from the main heap, where the ones freed in
//! its middle stay resident as holes: 11 to 16 MB at a million live allocations, measured
//! (BENCHMARKS.md, "Resident memory (fourth stage)"). A mapping of our own moves no threshold
//! of the program's allocator and leaves no hole when it goes.

use std::alloc::Layout;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// From this size on, an array gets a mapping of its own.
const MAP_MIN: usize = 64 << 10;

pub(crate) struct Zeroed<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    /// In a mapping of its own (else on the heap, or empty).
    mapped: bool,
}

// SAFETY: it owns its records like a `Vec` does.
unsafe impl<T: Copy + Send> Send for Zeroed<T> {}
// SAFETY: as above; shared access only reads.
unsafe impl<T: Copy + Sync> Sync for Zeroed<T> {}

impl<T: Copy> Default for Zeroed<T> {
    fn default() -> Self {
        Zeroed { ptr: NonNull::dangling(), len: 0, mapped: false }
    }
}

impl<T: Copy> Zeroed<T> {
    /// `len` records whose bytes are all zero.
    ///
    /// # Safety
    /// All-zero bytes must be a valid `T`.
    pub(crate) unsafe fn new(len: usize) -> Self {
        let Ok(layout) = Layout::array::<T>(len) else { std::alloc::handle_alloc_error(Layout::new::<T>()) };
        if layout.size() == 0 {
            return Self::default();
        }
        if layout.size() >= MAP_MIN {
            let prot = libc::PROT_READ | libc::PROT_WRITE;
            let p =
                libc::mmap(std::ptr::null_mut(), layout.size(), prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            if let Some(ptr) = NonNull::new(p.cast::<T>()).filter(|_| p != libc::MAP_FAILED) {
                return Zeroed { ptr, len, mapped: true };
            }
        }
        // SAFETY: a non-zero size.
        let p = std::alloc::alloc_zeroed(layout);
        match NonNull::new(p.cast::<T>()) {
            Some(ptr) => Zeroed { ptr, len, mapped: false },
            None => std::alloc::handle_alloc_error(layout),
        }
    }
}

impl<T: Copy> Drop for Zeroed<T> {
    fn drop(&mut self) {
        let Ok(layout) = Layout::array::<T>(self.len) else { return };
        if layout.size() == 0 {
            return;
        }
        // SAFETY: made by `new` with this layout, in the way `mapped` says.
        unsafe {
            if self.mapped {
                libc::munmap(self.ptr.as_ptr().cast(), layout.size());
            } else {
                std::alloc::dealloc(self.ptr.as_ptr().cast(), layout);
            }
        }
    }
}

impl<T: Copy> Deref for Zeroed<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised records (or a dangling pointer and 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for Zeroed<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and owned.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_on_the_heap_large_mapped_all_zero_and_writable() {
        for len in [0usize, 1, 100, 1 << 20] {
            // SAFETY: zero is a valid u64.
            let mut z: Zeroed<u64> = unsafe { Zeroed::new(len) };
            assert_eq!((z.len(), z.mapped), (len, len * 8 >= MAP_MIN));
            assert!(z.iter().all(|&v| v == 0));
            if let Some(last) = z.last_mut() {
                *last = 7;
            }
            assert_eq!(z.iter().sum::<u64>(), if len > 0 { 7 } else { 0 });
        }
    }
}
