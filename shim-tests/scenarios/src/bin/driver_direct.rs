//! The driver-table path of PyTorch and friends: dlopen("libcuda.so.1"), dlsym
//! "cuGetProcAddress_v2", then every entry by base name and version through it (per-thread
//! variants with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), no runtime involved.
//! RESULT keys: alloc_delta freed_delta async_ok vmm_granularity vmm_mapped_delta vmm_released_delta

// NUL-terminated byte strings rather than `c""` literals: the workspace's MSRV is 1.75.
#![allow(clippy::manual_c_str_literals)]

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::process::ExitCode;
use std::ptr::null_mut;

use culedger_scenarios::cuda::Vmm;

const MIB: usize = 1 << 20;

type GetProc = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;

struct Driver {
    get_proc: GetProc,
}

impl Driver {
    fn open() -> Result<Driver, String> {
        // SAFETY: plain dlopen/dlsym with NUL-terminated names.
        unsafe {
            let h = libc::dlopen(b"libcuda.so.1\0".as_ptr().cast(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if h.is_null() {
                return Err("dlopen(libcuda.so.1) failed".into());
            }
            let p = libc::dlsym(h, b"cuGetProcAddress_v2\0".as_ptr().cast());
            if p.is_null() {
                return Err("dlsym(cuGetProcAddress_v2) failed".into());
            }
            Ok(Driver { get_proc: std::mem::transmute::<*mut c_void, GetProc>(p) })
        }
    }

    /// The entry for `base` at `version` with `flags`, or NULL.
    fn raw(&self, base: &str, version: c_int, flags: u64) -> *mut c_void {
        let Ok(name) = CString::new(base) else {
            return null_mut();
        };
        let mut p = null_mut();
        let mut status = 0;
        // SAFETY: valid name and out-pointers.
        let r = unsafe { (self.get_proc)(name.as_ptr(), &mut p, version, flags, &mut status) };
        if r == 0 {
            p
        } else {
            null_mut()
        }
    }

    /// Typed lookup; the caller names the `PFN_<base>_v<version>` signature as `F`.
    ///
    /// # Safety
    /// `F` must be the function-pointer type of that typedef.
    unsafe fn get<F: Copy>(&self, base: &str, version: c_int, flags: u64) -> Result<F, String> {
        let p = self.raw(base, version, flags);
        if p.is_null() {
            return Err(format!("{base}@{version} flags={flags} not resolved"));
        }
        Ok(std::mem::transmute_copy::<*mut c_void, F>(&p))
    }
}

fn ck(what: &str, r: c_int) -> Result<(), String> {
    if r == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed with CUresult {r}"))
    }
}

fn run() -> Result<(), String> {
    let d = Driver::open()?;
    unsafe {
        let init: unsafe extern "C" fn(c_uint) -> c_int = d.get("cuInit", 2000, 0)?;
        ck("cuInit", init(0))?;
        let device_get: unsafe extern "C" fn(*mut c_int, c_int) -> c_int = d.get("cuDeviceGet", 2000, 0)?;
        let retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int =
            d.get("cuDevicePrimaryCtxRetain", 7000, 0)?;
        let set_current: unsafe extern "C" fn(*mut c_void) -> c_int = d.get("cuCtxSetCurrent", 4000, 0)?;
        let alloc: unsafe extern "C" fn(*mut u64, usize) -> c_int = d.get("cuMemAlloc", 3020, 0)?;
        let free: unsafe extern "C" fn(u64) -> c_int = d.get("cuMemFree", 3020, 0)?;
        let info: unsafe extern "C" fn(*mut usize, *mut usize) -> c_int = d.get("cuMemGetInfo", 3020, 0)?;
        let alloc_async: unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> c_int =
            d.get("cuMemAllocAsync", 11020, 2)?;
        let free_async: unsafe extern "C" fn(u64, *mut c_void) -> c_int = d.get("cuMemFreeAsync", 11020, 2)?;

        let mut dev = 0;
        ck("cuDeviceGet", device_get(&mut dev, 0))?;
        let mut ctx = null_mut();
        ck("cuDevicePrimaryCtxRetain", retain(&mut ctx, dev))?;
        ck("cuCtxSetCurrent", set_current(ctx))?;

        let free_bytes = || -> Result<usize, String> {
            let (mut f, mut t) = (0, 0);
            ck("cuMemGetInfo", info(&mut f, &mut t))?;
            Ok(f)
        };
        let f0 = free_bytes()?;
        let mut p = 0u64;
        ck("cuMemAlloc", alloc(&mut p, 20 * MIB))?;
        println!("RESULT alloc_delta={}", f0 - free_bytes()?);
        ck("cuMemFree", free(p))?;
        println!("RESULT freed_delta={}", f0 - free_bytes()?);

        let mut q = 0u64;
        ck("cuMemAllocAsync_ptsz", alloc_async(&mut q, 4 * MIB, null_mut()))?;
        ck("cuMemFreeAsync_ptsz", free_async(q, null_mut()))?;
        println!("RESULT async_ok=1");

        let vmm = Vmm::resolve(|name, version| d.raw(name, version, 0))?;
        let r = vmm.round_trip(dev, 4)?;
        println!(
            "RESULT vmm_granularity={} vmm_mapped_delta={} vmm_released_delta={}",
            r.granularity, r.mapped_delta, r.released_delta
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("driver_direct: {e}");
            ExitCode::FAILURE
        }
    }
}
