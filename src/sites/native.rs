//! Native frames: the return addresses of the calling thread, from the unwinder the process
//! already has (`_Unwind_Backtrace`, libgcc_s: it reads `.eh_frame`, so it works without frame
//! pointers), named with `dladdr` (object basename, nearest dynamic symbol, offset).
//!
//! Only called for allocations at or above `CULEDGER_SITE_MIN`, failures, queries and
//! hidden-cost calls; never on the small-allocation path; never while this thread is inside
//! `dlopen` (its constructors run with the loader lock held, see `rt::dlopen`). The
//! callback of `_Unwind_Backtrace` only stores addresses in a fixed array. Names are looked up
//! once per address and cached; `dladdr` runs with no lock of ours held.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_int, c_void, CStr};
use std::sync::Arc;

use crate::sync::Mutex;
use once_cell::sync::OnceCell;

use super::NativeFrame;

/// Frames kept per site.
pub const MAX_NATIVE: usize = 32;
/// Frames inside culedger skipped at most before the count starts.
const MAX_OWN: usize = 24;
/// Names cached (cleared when full).
const NAME_CACHE: usize = 1 << 14;

#[repr(C)]
struct UnwindContext {
    _private: [u8; 0],
}

const URC_NO_REASON: c_int = 0;
const URC_END_OF_STACK: c_int = 5;

extern "C" {
    fn _Unwind_Backtrace(trace: extern "C" fn(*mut UnwindContext, *mut c_void) -> c_int, arg: *mut c_void) -> c_int;
    fn _Unwind_GetIP(ctx: *mut UnwindContext) -> usize;
}

/// Addresses collected by one backtrace.
pub struct Ips {
    pub ips: [u64; MAX_NATIVE + MAX_OWN],
    pub len: usize,
}

extern "C" fn collect(ctx: *mut UnwindContext, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Ips` passed to `_Unwind_Backtrace` below, alive for the call.
    let ips = unsafe { &mut *(arg as *mut Ips) };
    if ips.len >= ips.ips.len() {
        return URC_END_OF_STACK;
    }
    // SAFETY: `ctx` is the unwinder's context for this frame.
    let ip = unsafe { _Unwind_GetIP(ctx) } as u64;
    if ip == 0 {
        return URC_END_OF_STACK;
    }
    ips.ips[ips.len] = ip;
    ips.len += 1;
    URC_NO_REASON
}

/// The address range of culedger's own code.
fn own_range() -> (u64, u64) {
    static RANGE: OnceCell<(u64, u64)> = OnceCell::new();
    *RANGE.get_or_init(|| {
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr on one of our own functions.
        if unsafe { libc::dladdr(own_range as *const c_void, &mut info) } == 0 {
            return (0, 0);
        }
        let base = info.dli_fbase as u64;
        let mut range = (base, base);
        struct Find {
            base: u64,
            range: (u64, u64),
        }
        extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, arg: *mut c_void) -> c_int {
            // SAFETY: the loader passes a valid info; `arg` is our `Find`.
            let (info, find) = unsafe { (&*info, &mut *(arg as *mut Find)) };
            if info.dlpi_addr != find.base {
                return 0;
            }
            for i in 0..usize::from(info.dlpi_phnum) {
                // SAFETY: dlpi_phdr has dlpi_phnum entries.
                let ph = unsafe { &*info.dlpi_phdr.add(i) };
                if ph.p_type == libc::PT_LOAD {
                    let start = info.dlpi_addr + ph.p_vaddr;
                    let end = start + ph.p_memsz;
                    find.range = (find.range.0.min(start), find.range.1.max(end));
                }
            }
            1
        }
        let mut find = Find { base, range: (u64::MAX, 0) };
        // SAFETY: the callback only reads the info it is given.
        unsafe { libc::dl_iterate_phdr(Some(each), &mut find as *mut Find as *mut c_void) };
        if find.range.0 < find.range.1 {
            range = find.range;
        }
        range
    })
}

/// Is `ip` inside culedger?
pub fn is_own(ip: u64) -> bool {
    let (a, b) = own_range();
    a <= ip && ip < b
}

/// Return addresses with libgcc's `_Unwind_Backtrace`, at most `max` (and `MAX_NATIVE +
/// MAX_OWN`), innermost first.
pub fn gcc_backtrace(out: &mut Vec<u64>, max: usize) {
    let mut ips = Ips { ips: [0; MAX_NATIVE + MAX_OWN], len: 0 };
    // SAFETY: `collect` only writes into `ips`, which outlives the call.
    unsafe { _Unwind_Backtrace(collect, &mut ips as *mut Ips as *mut c_void) };
    out.extend(ips.ips[..ips.len].iter().take(max));
}

/// Backtraces the caching unwinder could not take (libgcc's was used).
pub static FALLBACKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `CULEDGER_UNWIND=gcc`: always unwind with libgcc (read once; for diagnosis).
fn gcc_only() -> bool {
    static GCC: OnceCell<bool> = OnceCell::new();
    *GCC.get_or_init(|| std::env::var_os("CULEDGER_UNWIND").is_some_and(|v| v == "gcc"))
}

/// The calling thread's return addresses, innermost first: culedger's own frames are dropped
/// except the outermost one (the hooked entry point the program called), then up to
/// `MAX_NATIVE` in all. The caching unwinder first; libgcc's when it cannot.
pub fn backtrace(out: &mut Vec<u64>) {
    backtrace_noting(out, None);
}

/// [`backtrace`]; with `slots`, also the stack address each kept return address was read
/// from (pushed only when the caching unwinder took the backtrace: `slots` stays empty
/// when libgcc's did).
#[inline(always)]
pub fn backtrace_noting(out: &mut Vec<u64>, slots: Option<&mut Vec<u64>>) {
    let mut buf = [0u64; MAX_NATIVE + MAX_OWN];
    let mut at = [0u64; MAX_NATIVE + MAX_OWN];
    let want_slots = slots.is_some();
    let fast = if gcc_only() {
        None
    } else if want_slots {
        super::unwind::backtrace_noting(&mut buf, &mut at)
    } else {
        super::unwind::backtrace(&mut buf)
    };
    let mut slow = Vec::new();
    let all: &[u64] = match fast {
        Some(n) => &buf[..n],
        None => {
            if !gcc_only() {
                FALLBACKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            gcc_backtrace(&mut slow, MAX_NATIVE + MAX_OWN);
            &slow
        }
    };
    let first_foreign = all.iter().position(|&ip| !is_own(ip)).unwrap_or(all.len());
    let start = first_foreign.saturating_sub(1);
    let kept = all.len().saturating_sub(start).min(MAX_NATIVE);
    out.extend_from_slice(&all[start..start + kept]);
    if let (Some(slots), Some(_)) = (slots, fast) {
        slots.extend_from_slice(&at[start..start + kept]);
    }
}

/// Objects whose frames are culedger's, the CUDA runtime's and driver's, or the C library's.
pub fn internal_object(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "libculedger",
        "libcuda.so",
        "libcudart.so",
        "libc.so",
        "ld-linux",
        "ld64.so",
        "libpthread.so",
        "libdl.so",
        "libgcc_s.so",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The cached frames, by return address, and the names they hold: each distinct object or
/// symbol name is stored once (the frames of one object, of one function, and the sites that
/// hold them share it). Both are cleared together when full; frames already handed out keep
/// their names.
#[derive(Default)]
struct Names {
    frames: HashMap<u64, Arc<NativeFrame>>,
    strings: HashSet<Arc<str>>,
}

impl Names {
    fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(v) = self.strings.get(s) {
            return v.clone();
        }
        let v: Arc<str> = Arc::from(s);
        self.strings.insert(v.clone());
        v
    }
}

static NAMES: super::Leaky<Mutex<Names>> = super::Leaky::new(|| Mutex::new(Names::default()));

fn names() -> &'static Mutex<Names> {
    NAMES.get()
}

/// Name one return address (cached). No lock is held during `dladdr`.
pub fn name(ip: u64) -> Arc<NativeFrame> {
    if let Some(f) = names().lock().frames.get(&ip) {
        return f.clone();
    }
    let found = lookup(ip);
    let mut n = names().lock();
    if n.frames.len() >= NAME_CACHE {
        n.frames.clear();
        n.strings.clear();
    }
    let f = Arc::new(NativeFrame {
        object: n.intern(&found.object),
        symbol: found.symbol.as_deref().map(|s| n.intern(s)),
        offset: found.offset,
        internal: found.internal,
    });
    n.frames.insert(ip, f.clone());
    f
}

/// What `dladdr` says of one return address.
struct Found {
    object: String,
    symbol: Option<String>,
    offset: u64,
    internal: bool,
}

fn lookup(ip: u64) -> Found {
    // The call instruction is just before the return address.
    let pc = ip.saturating_sub(1);
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables.
    let ok = unsafe { libc::dladdr(pc as *const c_void, &mut info) } != 0;
    if !ok {
        return Found { object: "?".into(), symbol: None, offset: pc, internal: false };
    }
    let path = if info.dli_fname.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated name owned by the loader.
        unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned()
    };
    let object = path.rsplit('/').next().unwrap_or("").to_string();
    let object = if object.is_empty() { "?".to_string() } else { object };
    let symbol = (!info.dli_sname.is_null()).then(|| {
        // SAFETY: as above.
        let s = unsafe { CStr::from_ptr(info.dli_sname) }.to_string_lossy();
        s.chars().take(256).collect::<String>()
    });
    let internal = is_own(ip) || internal_object(&object);
    Found { object, symbol, offset: pc.wrapping_sub(info.dli_fbase as u64), internal }
}

/// Forget cached names (a fork child: the lock may be held by a thread that is gone).
pub fn reset_after_fork() {
    NAMES.reset();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_objects() {
        for n in ["libcuda.so.1", "libcudart.so.12", "libc.so.6", "ld-linux-x86-64.so.2", "libculedger.so"] {
            assert!(internal_object(n), "{n}");
        }
        for n in ["libnccl.so.2", "libc10_cuda.so", "_C.cpython-312-x86_64-linux-gnu.so", "python3.11", "libcudnn.so"] {
            assert!(!internal_object(n), "{n}");
        }
    }

    #[test]
    fn backtrace_names_this_test() {
        let mut ips = Vec::new();
        backtrace(&mut ips);
        assert!(!ips.is_empty() && ips.len() <= MAX_NATIVE);
        let frames: Vec<_> = ips.iter().map(|&ip| name(ip)).collect();
        assert!(frames.iter().all(|f| !f.object.is_empty()), "{frames:?}");
        assert!(Arc::ptr_eq(&name(ips[0]), &frames[0]), "cached by return address");
    }

    /// Two return addresses in one function: two frames, one copy of each name they share.
    #[test]
    fn frames_share_their_names() {
        let at = lookup as *const () as u64;
        let (fa, fb) = (name(at + 2), name(at + 3));
        assert_eq!(fb.offset, fa.offset + 1);
        assert_eq!(fa.object, fb.object);
        assert!(Arc::ptr_eq(&fa.object, &fb.object), "{fa:?} {fb:?}");
        if let (Some(x), Some(y)) = (&fa.symbol, &fb.symbol) {
            assert!(Arc::ptr_eq(x, y), "{fa:?} {fb:?}");
        }
    }
}
