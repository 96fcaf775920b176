//! `cuGetExportTable`: the private tables NVIDIA's runtime (libcudart 12.x/13.x, and the static
//! runtime inside cuBLAS and NCCL) asks its driver for right after resolving its entry points.
//! Without them `cudaGetDeviceCount` fails with 801 and nothing past initialisation runs.
//!
//! The tables are undocumented by NVIDIA; their layout is known from the public ZLUDA project
//! (`dark_api/src/lib.rs`, `zluda/src/impl/driver.rs`), which runs the real runtime on another
//! driver. Each table is an array of pointers; where the first slot is not a function it holds the
//! table's size in bytes. Slots the runtime never calls stay NULL, as ZLUDA leaves them.
//! What is implemented, by table:
//! * CUDART_INTERFACE: module loading from a fat binary (slots 1, 6, 8: a module of the current
//!   context, like `cuModuleLoadData`), a device's primary context, retained with nothing
//!   committed until it is made current (slot 2), and two
//!   calls with nothing to do here (7, and 12 which loads the JIT compilers).
//! * TOOLS_RUNTIME_CALLBACK_HOOKS: two zeroed buffers of tools' state (slots 2 and 6).
//! * TOOLS_TLS: the calling thread's current context (slot 2).
//! * CONTEXT_LOCAL_STORAGE: put/delete/get of a value per (context, key). The destroy callbacks
//!   are recorded but never called: the fake never calls back into its caller's code.
//! * CONTEXT_CHECKS: every context passes (slot 2 writes 0; slot 3 returns 0).
//! * INTEGRITY_CHECK: the runtime proves it talks to a genuine driver by comparing slot 1's answer
//!   with its own computation: two fixed words for versions ending in 0 and 1, otherwise an
//!   HMAC-MD2 (RFC 2104 over RFC 1319) of the call's context ([`integrity`]).
//! * CONTEXT_INFO (`21318c60-...`, no public name; cudart 13.5 and cuBLASLt 13 ask for it): a
//!   context's id (slot 4), which cuBLASLt needs for every GEMM. Its layout (90 functions) is
//!   Wine's nvcuda relay's; what slot 4 does was read from how cuBLASLt and cudart 13.5 call it.
//! * `1734dc26-...` (no public name): a driver-held blob cuBLASLt 13 asks for (slot 4) and gives
//!   back (slot 13) before its half-precision heuristics; the simulated driver holds none.
//!
//! The skip-init probe (`f8cff951-...`) answers `CUDA_ERROR_NOT_FOUND`, as a real driver does;
//! any other id answers `CUDA_ERROR_NOT_SUPPORTED`. Every call is traced
//! (`init cuGetExportTable <uuid> -> <rc>`).

use crate::api::ctx::{device_pci, device_uuid, retain_primary};
use crate::config::Config;
use crate::state::{self, with_init};
use crate::types::*;
use std::os::raw::{c_int, c_uint, c_void};

/// From the first table handed out, the fake is never unmapped by `dlclose`: a runtime that
/// gives up during its initialisation (13.5's, on a private table the fake lacks) closes the
/// driver but still reads the tables it got in its exit handlers. Only then: a program that
/// never asks for a table (one that dlopens, uses and dlcloses the driver several times) sees
/// it unloaded, as a driver without a runtime on it is.
fn keep_mapped() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(keep_mapped as *const c_void, &mut info) != 0 && !info.dli_fname.is_null() {
            // RTLD_NODELETE on a NOLOAD reopen marks the loaded object; the extra reference
            // is never closed either.
            libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE);
        }
    });
}

/// A table of pointers that lives for the whole process.
#[repr(transparent)]
pub struct Table<const N: usize>(pub [*const c_void; N]);
// SAFETY: the tables are immutable after construction and hold function addresses and sizes.
unsafe impl<const N: usize> Sync for Table<N> {}

/// The id of a table, as the runtime passes it (the 16 bytes of the UUID in string order).
pub type Uuid = [u8; 16];

const fn hex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    }
}

const fn uuid(s: &str) -> Uuid {
    let b = s.as_bytes();
    let mut out = [0u8; 16];
    let (mut i, mut n) = (0, 0);
    while i < b.len() {
        if b[i] != b'-' {
            out[n / 2] |= hex(b[i]) << if n % 2 == 0 { 4 } else { 0 };
            n += 1;
        }
        i += 1;
    }
    out
}

pub const SKIP_INIT_PROBE: Uuid = uuid("f8cff951-2146-8b4e-b9e2-fb469e7c0dd9");
pub const CUDART_INTERFACE: Uuid = uuid("6bd5fb6c-5bf4-e74a-8987-d93912fd9df9");
pub const TOOLS_RUNTIME_CALLBACK_HOOKS: Uuid = uuid("a094798c-2e74-2e74-93f2-0800200c0a66");
pub const TOOLS_TLS: Uuid = uuid("42d85a81-23f6-cb47-8298-f6e78a3aecdc");
pub const CONTEXT_LOCAL_STORAGE: Uuid = uuid("c693336e-1121-df11-a8c3-68f355d89593");
pub const CONTEXT_CHECKS: Uuid = uuid("263e8860-7cd2-6143-92f6-bbd5006dfa7e");
pub const INTEGRITY_CHECK: Uuid = uuid("d4082055-bde6-704b-8d34-ba123c66e1f2");
pub const CONTEXT_INFO: Uuid = uuid("21318c60-9714-3248-8ca6-41ff7324c8f2");
pub const DRIVER_BLOB: Uuid = uuid("1734dc26-800d-4745-8726-c0f1e7dd8bca");

/// The first slot of a table that starts with its size in bytes.
const fn size_of<const N: usize>() -> *const c_void {
    (N * std::mem::size_of::<usize>()) as *const c_void
}
const NULL: *const c_void = std::ptr::null();

/// Runs a table function body like an entry point (no panic crosses into C).
fn guarded(f: impl FnOnce() -> state::R) -> CUresult {
    crate::guard(f)
}

// ---- CUDART_INTERFACE ----

/// Slot 1: a module of the current context from a `__fatBinC_Wrapper_t`.
unsafe extern "C" fn module_from_fatbin(module: *mut CUmodule, wrapper: *const c_void) -> CUresult {
    guarded(|| crate::api::stream::module_load(module, !wrapper.is_null()))
}

/// Slot 2: `dev`'s primary context, retained (as ZLUDA's `cudart_interface_fn2` does, through
/// its `primary_context_retain`). NVIDIA's runtime 13.x calls it for every device while it
/// initialises (PyTorch 2.15's `torch.cuda.is_available()`: eight calls on eight devices, before
/// any device is set), so it commits nothing: the context's memory is charged when it is first
/// made current or retained through `cuDevicePrimaryCtxRetain` (`ctx::retain_primary`).
unsafe extern "C" fn primary_ctx(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    guarded(|| retain_primary(pctx, dev, false))
}

/// Slot 6: slot 1 with three extra arguments the runtime passes as NULL/0.
unsafe extern "C" fn module_from_fatbin_ext(
    module: *mut CUmodule,
    wrapper: *const c_void,
    _a: *mut c_void,
    _b: *mut c_void,
    _c: c_uint,
) -> CUresult {
    module_from_fatbin(module, wrapper)
}

/// Slot 7: nothing to do.
unsafe extern "C" fn cudart_noop(_arg: usize) {}

/// Slot 8: like slot 6, given the fat binary header itself.
unsafe extern "C" fn module_from_fatbin_header(
    header: *const c_void,
    module: *mut CUmodule,
    _a: *mut c_void,
    _b: *mut c_void,
    _c: c_uint,
) -> CUresult {
    module_from_fatbin(module, header)
}

/// Slot 12: loads the JIT compilers; the fake has none to load.
unsafe extern "C" fn load_compilers() -> CUresult {
    CUDA_SUCCESS
}

static CUDART: Table<13> = Table([
    size_of::<13>(),
    module_from_fatbin as *const c_void,
    primary_ctx as *const c_void,
    NULL,
    NULL,
    NULL,
    module_from_fatbin_ext as *const c_void,
    cudart_noop as *const c_void,
    module_from_fatbin_header as *const c_void,
    NULL,
    NULL,
    NULL,
    load_compilers as *const c_void,
]);

// ---- TOOLS_RUNTIME_CALLBACK_HOOKS, TOOLS_TLS ----

/// Zeroed memory the runtime may write into for the whole process: the tools' callback state.
/// The runtime reads flags in it on every API call (13.2's `cudaGetDriverEntryPointByVersion`
/// tests the word at byte 0x750 to decide whether a tool subscribed), so it must be larger than
/// any offset the runtime reads and stay zero: no tool is ever attached to the fake.
struct Buffer<const N: usize>(std::cell::UnsafeCell<[u8; N]>);
// SAFETY: the fake never reads the buffers; only the runtime writes them.
unsafe impl<const N: usize> Sync for Buffer<N> {}
const HOOKS_BUFFER_1_SIZE: usize = 16 << 10;
static HOOKS_BUFFER_1: Buffer<HOOKS_BUFFER_1_SIZE> = Buffer(std::cell::UnsafeCell::new([0; HOOKS_BUFFER_1_SIZE]));
static HOOKS_BUFFER_2: Buffer<4096> = Buffer(std::cell::UnsafeCell::new([0; 4096]));

unsafe extern "C" fn hooks_buffer_1(ptr: *mut *mut c_void, size: *mut usize) {
    if !ptr.is_null() && !size.is_null() {
        ptr.write(HOOKS_BUFFER_1.0.get().cast());
        size.write(HOOKS_BUFFER_1_SIZE);
    }
}

unsafe extern "C" fn hooks_buffer_2(ptr: *mut *mut c_void, size: *mut usize) {
    if !ptr.is_null() && !size.is_null() {
        ptr.write(HOOKS_BUFFER_2.0.get().cast());
        size.write(4096);
    }
}

static TOOLS_HOOKS: Table<7> =
    Table([size_of::<7>(), NULL, hooks_buffer_1 as *const c_void, NULL, NULL, NULL, hooks_buffer_2 as *const c_void]);

/// TOOLS_TLS slot 2: `CUresult (CUcontext *ctx)`, the calling thread's current context (NULL when
/// it has none), what a runtime puts in a tool's callback record: cudart 13.5 (cudaDeviceReset,
/// cudaStreamGetPriority, ... with a tool subscribed) hands it to slot 4 of the callback-hooks
/// table for the context's id. cuBLASLt 13 calls it on every `cublasLt*MatmulAlgoGetHeuristic`
/// (an unguarded indirect call: NULL here was a SIGSEGV in `cublasGemmEx`) and keys its
/// per-context heuristics by the id table `21318c60-...` gives that context ([`context_id`]).
unsafe extern "C" fn current_context(ctx: *mut CUcontext) -> CUresult {
    if ctx.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    ctx.write(state::current_handle() as CUcontext);
    CUDA_SUCCESS
}

static TOOLS_TLS_TABLE: Table<4> = Table([size_of::<4>(), NULL, current_context as *const c_void, NULL]);

// ---- CONTEXT_INFO (21318c60-...) ----

/// Slot 4: `CUresult (CUcontext ctx, unsigned long long *id)`, a context's unique id (what
/// `cuCtxGetId` answers). cuBLASLt 13 asks it for the current context (TOOLS_TLS slot 2) before
/// every heuristic query and answers CUBLAS_STATUS_NOT_SUPPORTED when it cannot: without this
/// table no GEMM runs.
unsafe extern "C" fn context_id(ctx: CUcontext, id: *mut u64) -> CUresult {
    guarded(|| {
        let h = with_init(|p| p.ctx(ctx as u64).map(|_| ctx as u64))?;
        crate::out(id, h & 0xffff_ffff)
    })
}

/// 90 function slots after the size (the layout Wine's nvcuda relay gives this table). The
/// runtimes call the others only from a tool's callbacks, which never run on the fake.
const CONTEXT_INFO_SLOTS: usize = 91;
static CONTEXT_INFO_TABLE: Table<CONTEXT_INFO_SLOTS> = {
    let mut t = [NULL; CONTEXT_INFO_SLOTS];
    t[0] = size_of::<CONTEXT_INFO_SLOTS>();
    t[4] = context_id as *const c_void;
    Table(t)
};

// ---- CONTEXT_LOCAL_STORAGE ----

/// The context a storage call means: `ctx`, or the current one when NULL.
fn storage_ctx(p: &state::Proc, ctx: CUcontext) -> state::R<u64> {
    if ctx.is_null() {
        p.current().map(|(h, _)| h)
    } else {
        p.ctx(ctx as u64).map(|_| ctx as u64)
    }
}

unsafe extern "C" fn storage_put(
    ctx: CUcontext,
    key: *mut c_void,
    value: *mut c_void,
    _dtor: *const c_void,
) -> CUresult {
    guarded(|| {
        with_init(|p| {
            let h = storage_ctx(p, ctx)?;
            p.ctx_storage.insert((h, key as usize), value as usize);
            Ok(())
        })
    })
}

unsafe extern "C" fn storage_delete(ctx: CUcontext, key: *mut c_void) -> CUresult {
    guarded(|| {
        with_init(|p| {
            let h = storage_ctx(p, ctx)?;
            p.ctx_storage.remove(&(h, key as usize));
            Ok(())
        })
    })
}

/// A key never put answers `CUDA_ERROR_INVALID_HANDLE` (the runtime then puts its own value).
unsafe extern "C" fn storage_get(value: *mut *mut c_void, ctx: CUcontext, key: *mut c_void) -> CUresult {
    guarded(|| {
        let v = with_init(|p| {
            let h = storage_ctx(p, ctx)?;
            p.ctx_storage.get(&(h, key as usize)).copied().ok_or(CUDA_ERROR_INVALID_HANDLE)
        })?;
        crate::out(value, v as *mut c_void)
    })
}

static STORAGE: Table<4> =
    Table([storage_put as *const c_void, storage_delete as *const c_void, storage_get as *const c_void, NULL]);

// ---- CONTEXT_CHECKS ----

unsafe extern "C" fn context_check(_ctx: CUcontext, result: *mut u32, _detail: *mut *const c_void) -> CUresult {
    if !result.is_null() {
        result.write(0);
    }
    CUDA_SUCCESS
}

unsafe extern "C" fn context_check_flags() -> u32 {
    0
}

static CHECKS: Table<4> =
    Table([size_of::<4>(), NULL, context_check as *const c_void, context_check_flags as *const c_void]);

// ---- INTEGRITY_CHECK ----

/// Slot 1: `(version, unix seconds, out: 2 words)`.
unsafe extern "C" fn integrity_check(version: u32, unix_seconds: u64, result: *mut [u64; 2]) -> CUresult {
    guarded(|| {
        if result.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let visible = with_init(|p| Ok(p.visible.clone()))?;
        let ctx = integrity::Context {
            driver_version: Config::get().driver_version as u32,
            version,
            pid: std::process::id(),
            // The runtime mixes in the low half of pthread_self(), as it computes it itself.
            thread: libc::pthread_self() as u32,
            cudart_table: CUDART.0.as_ptr() as u64,
            integrity_table: INTEGRITY.0.as_ptr() as u64,
            function: integrity_check as *const c_void as u64,
            unix_seconds,
        };
        let devs: Vec<integrity::Device> = visible
            .iter()
            .map(|&d| {
                let (domain, bus, device) = device_pci(d as c_int);
                integrity::Device {
                    uuid: device_uuid(d as c_int),
                    pci_domain: domain,
                    pci_bus: bus,
                    pci_device: device,
                }
            })
            .collect();
        result.write(integrity::answer(&ctx, &devs));
        Ok(())
    })
}

static INTEGRITY: Table<3> = Table([size_of::<3>(), integrity_check as *const c_void, NULL]);

/// The integrity answer, computed as the runtime computes it to compare.
pub mod integrity {
    /// What the runtime mixes in, in this order and these widths (48 bytes, little-endian).
    pub struct Context {
        pub driver_version: u32,
        pub version: u32,
        pub pid: u32,
        pub thread: u32,
        pub cudart_table: u64,
        pub integrity_table: u64,
        pub function: u64,
        pub unix_seconds: u64,
    }

    /// Per device, after the context: UUID, PCI domain, bus and device (28 bytes).
    pub struct Device {
        pub uuid: [u8; 16],
        pub pci_domain: i32,
        pub pci_bus: i32,
        pub pci_device: i32,
    }

    /// The HMAC key (one MD2 block).
    const KEY: [u8; 16] =
        [0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52, 0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F];

    /// Versions ending in 0 and 1 get fixed answers.
    pub fn answer(ctx: &Context, devices: &[Device]) -> [u64; 2] {
        match ctx.version % 10 {
            0 => return [0x3341_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
            1 => return [0x1841_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
            _ => {}
        }
        let mut msg = Vec::with_capacity(48 + 28 * devices.len());
        for w in [ctx.driver_version, ctx.version, ctx.pid, ctx.thread] {
            msg.extend_from_slice(&w.to_le_bytes());
        }
        for w in [ctx.cudart_table, ctx.integrity_table, ctx.function, ctx.unix_seconds] {
            msg.extend_from_slice(&w.to_le_bytes());
        }
        for d in devices {
            msg.extend_from_slice(&d.uuid);
            for w in [d.pci_domain, d.pci_bus, d.pci_device] {
                msg.extend_from_slice(&w.to_le_bytes());
            }
        }
        let mac = hmac_md2(&KEY, &msg);
        let word = |i: usize| u64::from_le_bytes(mac[i..i + 8].try_into().unwrap_or_default());
        [word(0), word(8)]
    }

    /// HMAC (RFC 2104) with MD2; the key is exactly one block.
    pub fn hmac_md2(key: &[u8; 16], msg: &[u8]) -> [u8; 16] {
        let pad = |x: u8| key.iter().map(|k| k ^ x).collect::<Vec<u8>>();
        let mut inner = pad(0x36);
        inner.extend_from_slice(msg);
        let mut outer = pad(0x5c);
        outer.extend_from_slice(&md2(&inner));
        md2(&outer)
    }

    /// MD2's substitution: RFC 1319's permutation of 0..=255 built from the digits of pi (the
    /// unit test checks the RFC's test vectors).
    const S: [u8; 256] = [
        0x29, 0x2E, 0x43, 0xC9, 0xA2, 0xD8, 0x7C, 0x01, 0x3D, 0x36, 0x54, 0xA1, 0xEC, 0xF0, 0x06, 0x13, 0x62, 0xA7,
        0x05, 0xF3, 0xC0, 0xC7, 0x73, 0x8C, 0x98, 0x93, 0x2B, 0xD9, 0xBC, 0x4C, 0x82, 0xCA, 0x1E, 0x9B, 0x57, 0x3C,
        0xFD, 0xD4, 0xE0, 0x16, 0x67, 0x42, 0x6F, 0x18, 0x8A, 0x17, 0xE5, 0x12, 0xBE, 0x4E, 0xC4, 0xD6, 0xDA, 0x9E,
        0xDE, 0x49, 0xA0, 0xFB, 0xF5, 0x8E, 0xBB, 0x2F, 0xEE, 0x7A, 0xA9, 0x68, 0x79, 0x91, 0x15, 0xB2, 0x07, 0x3F,
        0x94, 0xC2, 0x10, 0x89, 0x0B, 0x22, 0x5F, 0x21, 0x80, 0x7F, 0x5D, 0x9A, 0x5A, 0x90, 0x32, 0x27, 0x35, 0x3E,
        0xCC, 0xE7, 0xBF, 0xF7, 0x97, 0x03, 0xFF, 0x19, 0x30, 0xB3, 0x48, 0xA5, 0xB5, 0xD1, 0xD7, 0x5E, 0x92, 0x2A,
        0xAC, 0x56, 0xAA, 0xC6, 0x4F, 0xB8, 0x38, 0xD2, 0x96, 0xA4, 0x7D, 0xB6, 0x76, 0xFC, 0x6B, 0xE2, 0x9C, 0x74,
        0x04, 0xF1, 0x45, 0x9D, 0x70, 0x59, 0x64, 0x71, 0x87, 0x20, 0x86, 0x5B, 0xCF, 0x65, 0xE6, 0x2D, 0xA8, 0x02,
        0x1B, 0x60, 0x25, 0xAD, 0xAE, 0xB0, 0xB9, 0xF6, 0x1C, 0x46, 0x61, 0x69, 0x34, 0x40, 0x7E, 0x0F, 0x55, 0x47,
        0xA3, 0x23, 0xDD, 0x51, 0xAF, 0x3A, 0xC3, 0x5C, 0xF9, 0xCE, 0xBA, 0xC5, 0xEA, 0x26, 0x2C, 0x53, 0x0D, 0x6E,
        0x85, 0x28, 0x84, 0x09, 0xD3, 0xDF, 0xCD, 0xF4, 0x41, 0x81, 0x4D, 0x52, 0x6A, 0xDC, 0x37, 0xC8, 0x6C, 0xC1,
        0xAB, 0xFA, 0x24, 0xE1, 0x7B, 0x08, 0x0C, 0xBD, 0xB1, 0x4A, 0x78, 0x88, 0x95, 0x8B, 0xE3, 0x63, 0xE8, 0x6D,
        0xE9, 0xCB, 0xD5, 0xFE, 0x3B, 0x00, 0x1D, 0x39, 0xF2, 0xEF, 0xB7, 0x0E, 0x66, 0x58, 0xD0, 0xE4, 0xA6, 0x77,
        0x72, 0xF8, 0xEB, 0x75, 0x4B, 0x0A, 0x31, 0x44, 0x50, 0xB4, 0x8F, 0xED, 0x1F, 0x1A, 0xDB, 0x99, 0x8D, 0x33,
        0x9F, 0x11, 0x83, 0x14,
    ];

    /// MD2 (RFC 1319, with the published correction: the checksum XORs the substituted byte).
    pub fn md2(data: &[u8]) -> [u8; 16] {
        let pad = 16 - data.len() % 16;
        let mut m = data.to_vec();
        m.extend(std::iter::repeat_n(pad as u8, pad));
        let mut checksum = [0u8; 16];
        let mut last = 0u8;
        for block in m.chunks(16) {
            for (c, b) in checksum.iter_mut().zip(block) {
                *c ^= S[(b ^ last) as usize];
                last = *c;
            }
        }
        m.extend_from_slice(&checksum);
        let mut x = [0u8; 48];
        for block in m.chunks(16) {
            for j in 0..16 {
                x[16 + j] = block[j];
                x[32 + j] = block[j] ^ x[j];
            }
            let mut t = 0u8;
            for round in 0..18u8 {
                for v in x.iter_mut() {
                    *v ^= S[t as usize];
                    t = *v;
                }
                t = t.wrapping_add(round);
            }
        }
        x[..16].try_into().unwrap_or_default()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn hex(b: &[u8]) -> String {
            b.iter().map(|v| format!("{v:02x}")).collect()
        }

        #[test]
        fn md2_matches_rfc_1319_test_vectors() {
            assert_eq!(hex(&md2(b"")), "8350e5a3e24c153df2275c9f80692773");
            assert_eq!(hex(&md2(b"abc")), "da853b0d3f88d99b30283a69e6ded6bb");
            assert_eq!(hex(&md2(b"message digest")), "ab4f496bfb2a530b219ff33031fe06b0");
            let alnum = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
            assert_eq!(hex(&md2(alnum)), "da33def2a42df13975352846c30338cd");
        }

        #[test]
        fn versions_ending_in_0_and_1_have_fixed_answers() {
            let ctx = |version| Context {
                driver_version: 13020,
                version,
                pid: 1,
                thread: 2,
                cudart_table: 3,
                integrity_table: 4,
                function: 5,
                unix_seconds: 6,
            };
            assert_eq!(answer(&ctx(13020), &[]), answer(&ctx(13000), &[]));
            assert_ne!(answer(&ctx(13021), &[]), answer(&ctx(13020), &[]));
            let a = answer(&ctx(13022), &[]);
            assert_ne!(a, answer(&ctx(13002), &[]), "the version is mixed in");
            let dev = Device { uuid: [7; 16], pci_domain: 0, pci_bus: 1, pci_device: 0 };
            assert_ne!(a, answer(&ctx(13022), &[dev]), "the devices are mixed in");
        }
    }
}

// ---- 1734dc26-... ----

/// Slot 4: `CUresult (void **data, size_t *size)`, a driver-held blob cuBLASLt 13 reads before
/// its bf16/fp16 heuristics (it walks the bytes when it gets some, and hands them back through
/// slot 13). cuBLASLt calls the table without checking that `cuGetExportTable` found it (a
/// SIGSEGV in `cublasLtTSTMatmulAlgoGetHeuristic` without it), but goes on without the blob when
/// slot 4 fails or gives NULL. The simulated driver holds none: NULL, 0 and
/// `CUDA_ERROR_NOT_FOUND`.
unsafe extern "C" fn driver_blob(data: *mut *mut c_void, size: *mut usize) -> CUresult {
    if data.is_null() || size.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    data.write(std::ptr::null_mut());
    size.write(0);
    CUDA_ERROR_NOT_FOUND
}

/// Slot 13: gives back what slot 4 handed out (nothing, on the fake).
unsafe extern "C" fn driver_blob_release(data: *mut c_void, size: usize) -> CUresult {
    let _ = size;
    if data.is_null() {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_VALUE
    }
}

const DRIVER_BLOB_SLOTS: usize = 16;
static DRIVER_BLOB_TABLE: Table<DRIVER_BLOB_SLOTS> = {
    let mut t = [NULL; DRIVER_BLOB_SLOTS];
    t[0] = size_of::<DRIVER_BLOB_SLOTS>();
    t[4] = driver_blob as *const c_void;
    t[13] = driver_blob_release as *const c_void;
    Table(t)
};

/// The table for `id`, if the fake has it.
fn table(id: &Uuid) -> Option<*const c_void> {
    Some(match *id {
        CUDART_INTERFACE => CUDART.0.as_ptr().cast(),
        TOOLS_RUNTIME_CALLBACK_HOOKS => TOOLS_HOOKS.0.as_ptr().cast(),
        TOOLS_TLS => TOOLS_TLS_TABLE.0.as_ptr().cast(),
        CONTEXT_LOCAL_STORAGE => STORAGE.0.as_ptr().cast(),
        CONTEXT_CHECKS => CHECKS.0.as_ptr().cast(),
        INTEGRITY_CHECK => INTEGRITY.0.as_ptr().cast(),
        CONTEXT_INFO => CONTEXT_INFO_TABLE.0.as_ptr().cast(),
        DRIVER_BLOB => DRIVER_BLOB_TABLE.0.as_ptr().cast(),
        _ => return None,
    })
}

fn show(id: &Uuid) -> String {
    let h: String = id.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

entry! {
    /// The private table `p_export_table_id` (a 16-byte id), or the error described above.
    fn cuGetExportTable(pp_export_table: *mut *const c_void, p_export_table_id: *const Uuid) {
        if pp_export_table.is_null() || p_export_table_id.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let id = p_export_table_id.read_unaligned();
        let found = table(&id);
        pp_export_table.write(found.unwrap_or(std::ptr::null()));
        if found.is_some() {
            keep_mapped();
        }
        let rc = match found {
            Some(_) => CUDA_SUCCESS,
            None if id == SKIP_INIT_PROBE => CUDA_ERROR_NOT_FOUND,
            None => CUDA_ERROR_NOT_SUPPORTED,
        };
        crate::trace::line(|| format!("init cuGetExportTable {} -> {rc}", show(&id)));
        if rc == CUDA_SUCCESS { Ok(()) } else { Err(rc) }
    }
}
