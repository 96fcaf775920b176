//! The `dlsym` path.
//!
//! We export `dlsym`. Its entry is a few instructions of assembly that ask
//! [`dlsym_hook`] whether the lookup is for a hooked CUDA symbol; if not, they restore the
//! arguments and TAIL-JUMP into the real `dlsym`, so the real one sees the original
//! caller's return address. That matters: `dlsym(RTLD_NEXT, name)` searches "after the
//! object that called dlsym", which glibc derives from the return address; an ordinary
//! Rust call would make libculedger the caller and break every other interposer (and
//! OpenMP's tool loader under `import torch`).
//!
//! The Rust side touches no thread-local storage, takes no lock and allocates nothing:
//! it runs inside the dynamic loader's callers, before anything else is initialised.
//! The real `dlsym` is found with `dlvsym` over the glibc versions that define it.
//!
//! A look-up that only our own export answers (`dlsym(RTLD_DEFAULT, "cudaMalloc")` in a
//! process without CUDA) returns NULL, with the `dlerror()` the program would get without
//! culedger: glibc names the object the look-up was made for (the caller for
//! `RTLD_DEFAULT`, the handle's object otherwise; `DSO_FILENAME` in elf/dl-lookup.c,
//! `_dl_lookup_symbol_x`), so the failing look-up we make from here is made under that
//! object's name (see [`fail_as`]).

use super::real::{claim, is_ours, note_runtime_symbol, resolve_next, unwrapped};
use super::table::{by_name, exported, Kind};
use crate::rt::real::{real_dlsym, resolve_real_dlsym, REAL_DLSYM, RTLD_DEFAULT, RTLD_NEXT};
use libc::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

/// What `dlsym_hook` tells the assembly entry when the answer is "not found" and the
/// real dlsym must not be asked again (it would find our own export).
const RETURN_NULL: usize = 1;

/// The public head of glibc's `struct link_map` (<link.h>): what `dlopen` returns and
/// `dladdr1(RTLD_DL_LINKMAP)` finds.
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *mut c_char,
    l_ld: *mut c_void,
    l_next: *mut LinkMap,
    l_prev: *mut LinkMap,
}

/// glibc's `struct r_debug` (<link.h>): `r_map` is the main program's map.
#[repr(C)]
struct RDebug {
    r_version: c_int,
    r_map: *mut LinkMap,
}

const RTLD_DL_LINKMAP: c_int = 2;

extern "C" {
    fn dladdr1(addr: *const c_void, info: *mut libc::Dl_info, extra: *mut *mut c_void, flags: c_int) -> c_int;
    static _r_debug: RDebug;
}

/// The map of the object holding `addr`; the main program's when none does (as glibc's
/// `do_sym` assumes for a caller it cannot place).
unsafe fn map_of(addr: *const c_void) -> *mut LinkMap {
    let mut info: libc::Dl_info = std::mem::zeroed();
    let mut map: *mut c_void = std::ptr::null_mut();
    if dladdr1(addr, &mut info, &mut map, RTLD_DL_LINKMAP) != 0 && !map.is_null() {
        return map.cast();
    }
    std::ptr::addr_of!(_r_debug).read().r_map
}

/// Held while our map carries the main program's name.
static RENAMED: AtomicBool = AtomicBool::new(false);

/// Make `name`'s failing look-up for the caller's `dlerror()`, worded as glibc words it for
/// the caller's own look-up, which names the object it was made for.
///
/// - That object's own scope, when it does not hold us (a library calling with
///   `RTLD_DEFAULT`, a handle of a library): the same look-up on its map fails with that
///   object's name, as the caller's would without culedger. Nothing of the loader's is
///   written.
/// - The main program (a call from it with `RTLD_DEFAULT`, or `dlopen(NULL)`'s handle): its
///   scope holds us. The look-up behind us (`RTLD_NEXT`) is made while our map bears the
///   main program's name, the empty string, which no `dlopen` by name can match; another
///   thread's `dladdr` or `dl_iterate_phdr` in those few instructions would see our object
///   unnamed.
/// - Anything else (our own map, none found, a library whose scope holds us): the look-up
///   behind us, named after us.
unsafe fn fail_as(handle: *mut c_void, caller: *const c_void, name: *const c_char) {
    let named = if handle == RTLD_DEFAULT { map_of(caller) } else { handle.cast::<LinkMap>() };
    let ours = map_of(dlsym_hook as *const c_void);
    if named.is_null() || ours.is_null() || named == ours {
        let _ = real_dlsym(RTLD_NEXT, name);
        return;
    }
    let main = std::ptr::addr_of!(_r_debug).read().r_map;
    if named != main {
        if !real_dlsym(named.cast(), name).is_null() {
            // Its scope holds a definition (ours, through a dependency on us).
            let _ = real_dlsym(RTLD_NEXT, name);
        }
        return;
    }
    let main_name = if main.is_null() { std::ptr::null_mut() } else { (*main).l_name };
    if main_name.is_null() || *main_name != 0 {
        let _ = real_dlsym(RTLD_NEXT, name);
        return;
    }
    crate::sync::atomic(&RENAMED);
    while RENAMED.swap(true, Ordering::Acquire) {
        std::hint::spin_loop();
    }
    let saved = (*ours).l_name;
    (*ours).l_name = main_name;
    let _ = real_dlsym(RTLD_NEXT, name);
    (*ours).l_name = saved;
    RENAMED.store(false, Ordering::Release);
}

/// Decide a `dlsym` call. Returns 0 to let the real dlsym answer (tail jump),
/// [`RETURN_NULL`] to answer NULL, anything else is the address to return.
extern "C" fn dlsym_hook(handle: *mut c_void, name: *const c_char, caller: *const c_void) -> usize {
    // Never unwind into the loader's caller.
    match std::panic::catch_unwind(|| unsafe { decide(handle, name, caller) }) {
        Ok(v) => v,
        Err(_) => {
            resolve_real_dlsym();
            0
        }
    }
}

unsafe fn decide(handle: *mut c_void, name: *const c_char, caller: *const c_void) -> usize {
    if resolve_real_dlsym() == 0 {
        // Cannot happen with glibc; without a real dlsym we must not jump to 0.
        return RETURN_NULL;
    }
    if handle == RTLD_NEXT || name.is_null() {
        return 0;
    }
    let bytes = std::ffi::CStr::from_ptr(name).to_bytes();
    let Some(entry) = by_name(bytes) else { return 0 };
    let found = real_dlsym(handle, name);
    if found.is_null() {
        return 0; // let the real dlsym fail again for the caller, setting dlerror
    }
    if is_ours(found) {
        // A global-scope lookup (RTLD_DEFAULT, dlopen(NULL)) found our own export first.
        // Hand it out only if a real definition exists behind it.
        return if resolve_next(entry.sym, true) != 0 {
            exported(entry.sym) as usize
        } else {
            // The caller's dlerror() state, then NULL.
            fail_as(handle, caller, name);
            RETURN_NULL
        };
    }
    if entry.kind == Kind::Runtime {
        note_runtime_symbol(found);
    }
    match claim(entry.sym, found) {
        Some(w) => w as usize,
        None => {
            unwrapped(entry.sym);
            found as usize
        }
    }
}

/// The exported `dlsym` (a naked function: no prologue, so the tail jump leaves the
/// caller's return address in place for the real one).
///
/// # Safety
/// Called by C code as glibc's `dlsym(void *handle, const char *name)`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    std::arch::naked_asm!(
        // Keep the caller's arguments; 16-byte alignment for the call (entry rsp = 8 mod 16);
        // the caller's return address is the hook's third argument.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "mov rdx, [rsp + 24]",
        "call {hook}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "cmp rax, 1",
        "je 3f",
        "ret",
        "3:",
        "xor eax, eax",
        "ret",
        "2:",
        // Tail jump: the real dlsym returns straight to our caller and sees its address.
        "jmp qword ptr [rip + {real}]",
        hook = sym dlsym_hook,
        real = sym REAL_DLSYM,
    )
}

/// aarch64 form of the same entry.
///
/// # Safety
/// Called by C code as glibc's `dlsym(void *handle, const char *name)`.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    std::arch::naked_asm!(
        "stp x29, x30, [sp, #-32]!",
        "mov x29, sp",
        "stp x0, x1, [sp, #16]",
        "mov x2, x30",
        "bl {hook}",
        "mov x9, x0",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "cbz x9, 2f",
        "cmp x9, #1",
        "b.eq 3f",
        "mov x0, x9",
        "ret",
        "3:",
        "mov x0, #0",
        "ret",
        "2:",
        // x30 holds the caller's return address again: the real dlsym sees the caller.
        "adrp x16, {real}",
        "ldr x16, [x16, :lo12:{real}]",
        "br x16",
        hook = sym dlsym_hook,
        real = sym REAL_DLSYM,
    )
}
