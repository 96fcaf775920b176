//! NVML, opened lazily (`libnvidia-ml.so.1`) and initialised once (`nvmlInit_v2`; NVML counts
//! initialisations, so the program's own sessions are untouched). Structures and signatures
//! as NVIDIA's nvml.h declares them (`nvmlMemory_t`, `nvmlMemory_v2_t`, `nvmlProcessInfo_t`);
//! the simulated NVML, compiled against that header, is read through them in the tests.

use super::Reading;
use crate::rt::real::real_dlsym;
use libc::{c_char, c_int, c_uint, c_void};
use once_cell::sync::OnceCell;

/// nvml.h `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// nvml.h `nvmlMemory_v2_t`; `version` is `nvmlMemory_v2`:
/// `NVML_STRUCT_VERSION(Memory, 2)` = `sizeof(nvmlMemory_v2_t) | 2 << 24`.
#[repr(C)]
#[derive(Default)]
struct MemoryV2 {
    version: c_uint,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}
const MEMORY_V2: c_uint = std::mem::size_of::<MemoryV2>() as c_uint | 2 << 24;

/// nvml.h `nvmlProcessInfo_t` (`nvmlProcessInfo_v2_st`), what `_v3` fills.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// nvml.h: `NVML_SUCCESS`, `NVML_ERROR_INSUFFICIENT_SIZE`, `NVML_VALUE_NOT_AVAILABLE`.
const SUCCESS: c_int = 0;
const INSUFFICIENT_SIZE: c_int = 7;
const NOT_AVAILABLE: u64 = u64::MAX;

type Device = *mut c_void;

pub(super) struct Nvml {
    by_uuid: unsafe extern "C" fn(*const c_char, *mut Device) -> c_int,
    index: Option<unsafe extern "C" fn(Device, *mut c_uint) -> c_int>,
    memory_v2: Option<unsafe extern "C" fn(Device, *mut MemoryV2) -> c_int>,
    memory: Option<unsafe extern "C" fn(Device, *mut Memory) -> c_int>,
    processes: Option<unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> c_int>,
    /// `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`: a MIG device's GPU (R470 and later).
    parent: Option<unsafe extern "C" fn(Device, *mut Device) -> c_int>,
    /// `nvmlDeviceGetGpuInstanceId`: a MIG device's GPU instance (R470 and later).
    gpu_instance: Option<unsafe extern "C" fn(Device, *mut c_uint) -> c_int>,
}

static NVML: OnceCell<Option<Nvml>> = OnceCell::new();

/// NVML once opened; `open`: it may be opened now (else only an earlier opening is used).
pub(super) fn get(open: bool) -> Option<&'static Nvml> {
    if !open {
        return NVML.get().and_then(Option::as_ref);
    }
    NVML.get_or_init(|| {
        // SAFETY: loader calls with NUL-terminated names; the handle is never closed.
        let n = unsafe { load() };
        if n.is_none() {
            crate::debug!(
                "NVML (libnvidia-ml.so.1) is not available: untracked memory is from the program's last query"
            );
        }
        n
    })
    .as_ref()
}

unsafe fn load() -> Option<Nvml> {
    let h = libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
    if h.is_null() {
        return None;
    }
    let sym = |name: &std::ffi::CStr| {
        let p = real_dlsym(h, name.as_ptr());
        (!p.is_null()).then_some(p as usize)
    };
    let init: unsafe extern "C" fn() -> c_int = std::mem::transmute::<usize, _>(sym(c"nvmlInit_v2")?);
    if init() != SUCCESS {
        return None;
    }
    Some(Nvml {
        by_uuid: std::mem::transmute::<usize, _>(sym(c"nvmlDeviceGetHandleByUUID")?),
        index: sym(c"nvmlDeviceGetIndex").map(|p| std::mem::transmute::<usize, _>(p)),
        memory_v2: sym(c"nvmlDeviceGetMemoryInfo_v2").map(|p| std::mem::transmute::<usize, _>(p)),
        memory: sym(c"nvmlDeviceGetMemoryInfo").map(|p| std::mem::transmute::<usize, _>(p)),
        processes: sym(c"nvmlDeviceGetComputeRunningProcesses_v3").map(|p| std::mem::transmute::<usize, _>(p)),
        parent: sym(c"nvmlDeviceGetDeviceHandleFromMigDeviceHandle").map(|p| std::mem::transmute::<usize, _>(p)),
        gpu_instance: sym(c"nvmlDeviceGetGpuInstanceId").map(|p| std::mem::transmute::<usize, _>(p)),
    })
}

impl Nvml {
    /// The device of `uuid` now: used (`total - free`, what `cuMemGetInfo` calls used) and
    /// total, and the processes holding memory there.
    pub(super) fn read(&self, uuid: &str) -> Option<Reading> {
        let name = std::ffi::CString::new(uuid).ok()?;
        let mut dev: Device = std::ptr::null_mut();
        // SAFETY: nvml.h signatures, on local buffers.
        unsafe {
            if (self.by_uuid)(name.as_ptr(), &mut dev) != SUCCESS {
                return None;
            }
            let v2 = self.memory_v2.and_then(|f| {
                let mut m = MemoryV2 { version: MEMORY_V2, ..Default::default() };
                (f(dev, &mut m) == SUCCESS).then_some((m.total, m.free))
            });
            let (total, free) = match v2 {
                Some(v) => v,
                None => self.memory_v1(dev)?,
            };
            let index_of = |d: Device| {
                let mut i: c_uint = 0;
                self.index.and_then(|f| (f(d, &mut i) == SUCCESS).then_some(i))
            };
            // A MIG device's index is its index among its GPU's MIG devices (nvml.h,
            // nvmlDeviceGetIndex): the GPU's number is its parent's.
            let (index, mig_index, gpu_instance_id) = if uuid.starts_with("MIG-") {
                let mut gpu: Device = std::ptr::null_mut();
                let parent = self.parent.and_then(|f| (f(dev, &mut gpu) == SUCCESS).then_some(gpu));
                let mut gi: c_uint = 0;
                let gi = self.gpu_instance.and_then(|f| (f(dev, &mut gi) == SUCCESS).then_some(gi));
                (parent.and_then(index_of), index_of(dev), gi)
            } else {
                (index_of(dev), None, None)
            };
            Some(Reading {
                index,
                mig_index,
                gpu_instance_id,
                used: total.saturating_sub(free),
                total,
                processes: self.processes(dev),
            })
        }
    }

    unsafe fn memory_v1(&self, dev: Device) -> Option<(u64, u64)> {
        let mut m = Memory::default();
        (self.memory?(dev, &mut m) == SUCCESS).then_some((m.total, m.free))
    }

    unsafe fn processes(&self, dev: Device) -> Option<Vec<(u32, u64)>> {
        let f = self.processes?;
        let mut buf = vec![ProcessInfo::default(); 64];
        for _ in 0..3 {
            let mut count = buf.len() as c_uint;
            match f(dev, &mut count, buf.as_mut_ptr()) {
                SUCCESS => {
                    buf.truncate(count as usize);
                    return Some(
                        buf.iter()
                            .filter(|p| p.used_gpu_memory != NOT_AVAILABLE)
                            .map(|p| (p.pid, p.used_gpu_memory))
                            .collect(),
                    );
                }
                INSUFFICIENT_SIZE => buf.resize(count as usize + 8, ProcessInfo::default()),
                _ => return None,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes nvml.h's structures have on x86-64 and aarch64 Linux.
    #[test]
    fn structures_are_nvml_h_s() {
        assert_eq!((std::mem::size_of::<Memory>(), std::mem::size_of::<MemoryV2>()), (24, 40));
        assert_eq!(MEMORY_V2, 40 | 2 << 24);
        assert_eq!(std::mem::size_of::<ProcessInfo>(), 24);
    }
}
