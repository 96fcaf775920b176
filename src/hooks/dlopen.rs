//! The exported `dlopen`: a few instructions of assembly that record the call in this
//! thread's ring (`crate::rt::dlopen`, which explains why) and TAIL-JUMP into the real
//! `dlopen`, which therefore sees the caller's return address and returns straight to it.
//! On aarch64 the entry is not provided.

#[cfg(target_arch = "x86_64")]
mod entry {
    use crate::rt::dlopen::note_dlopen;
    use libc::{c_char, c_int, c_void};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The real `dlopen`; the assembly entry jumps through it.
    static REAL_DLOPEN: AtomicUsize = AtomicUsize::new(0);

    /// glibc versions of `dlopen`: 2.34 moved it into libc; before that it lived in libdl.
    const VERSIONS: &[&[u8]] = &[b"GLIBC_2.34\0", b"GLIBC_2.2.5\0"];

    extern "C" fn resolve() -> usize {
        let p = REAL_DLOPEN.load(Ordering::Acquire);
        if p != 0 {
            return p;
        }
        for v in VERSIONS {
            // SAFETY: a versioned symbol look-up after libculedger.
            let f =
                unsafe { libc::dlvsym(crate::rt::real::RTLD_NEXT, c"dlopen".as_ptr(), v.as_ptr() as *const c_char) };
            if !f.is_null() {
                REAL_DLOPEN.store(f as usize, Ordering::Release);
                return f as usize;
            }
        }
        0
    }

    /// Record the entry, and make sure the real dlopen is known. Returns it (0: none).
    extern "C" fn enter(slot: *const usize) -> usize {
        match std::panic::catch_unwind(|| {
            note_dlopen(slot);
            resolve()
        }) {
            Ok(p) => p,
            Err(_) => REAL_DLOPEN.load(Ordering::Acquire),
        }
    }

    /// The exported `dlopen` (naked: the tail jump leaves the caller's return address in
    /// place for the real one).
    ///
    /// # Safety
    /// Called by C code as glibc's `void *dlopen(const char *file, int mode)`.
    #[unsafe(naked)]
    #[no_mangle]
    pub unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
        std::arch::naked_asm!(
            // Entry: rsp points at the return address (rsp = 8 mod 16).
            "push rdi",
            "push rsi",
            "sub rsp, 8",
            // The slot holding the return address: rsp + 24 now.
            "lea rdi, [rsp + 24]",
            "call {enter}",
            "add rsp, 8",
            "pop rsi",
            "pop rdi",
            "test rax, rax",
            "jz 2f",
            "jmp rax",
            "2:",
            // No real dlopen (cannot happen with glibc): fail like dlopen does.
            "xor eax, eax",
            "ret",
            enter = sym enter,
        )
    }
}
