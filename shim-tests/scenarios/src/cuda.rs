//! Driver-API pieces shared by the Rust scenario programs: the VMM structures of `cuda.h` and a
//! create/reserve/map/set-access/unmap/release round trip over entry points obtained any way
//! (`cudaGetDriverEntryPoint` in the static-runtime scenario, `cuGetProcAddress` in the
//! driver-direct one), as NCCL's cuMem allocator and PyTorch's expandable segments do it.

#![allow(non_camel_case_types)]

use std::ffi::{c_int, c_void};

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct CUmemLocation {
    pub kind: c_int,
    pub id: c_int,
}

/// The `allocFlags` member of `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct CUmemAllocFlags {
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `CUmemAllocationProp` (`_v1`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemAllocationProp {
    pub kind: c_int,
    pub requested_handle_types: c_int,
    pub location: CUmemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: CUmemAllocFlags,
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: c_int,
}

pub const CU_MEM_ALLOCATION_TYPE_PINNED: c_int = 1;
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
pub const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_int = 3;
pub const CU_MEM_ALLOC_GRANULARITY_MINIMUM: c_int = 0;

type R = c_int;

/// Declares [`Vmm`]: one typed field per entry point, resolved by base name and version.
macro_rules! vmm_entries {
    ($($field:ident: $base:literal @ $ver:literal => fn($($arg:ty),*);)*) => {
        /// The VMM entry points (and `cuMemGetInfo_v2` to observe usage).
        pub struct Vmm {
            $($field: unsafe extern "C" fn($($arg),*) -> R,)*
        }

        impl Vmm {
            /// Resolves every entry with `lookup(base_name, cuda_version)`, which returns NULL if absent.
            ///
            /// # Safety
            /// `lookup` must return driver entry points with the ABI of `PFN_<base>_v<version>`.
            pub unsafe fn resolve(mut lookup: impl FnMut(&str, c_int) -> *mut c_void) -> Result<Vmm, String> {
                Ok(Vmm { $($field: {
                    let p = lookup($base, $ver);
                    if p.is_null() {
                        return Err(format!("{} is not resolved", $base));
                    }
                    std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> R>(p)
                },)* })
            }
        }
    };
}

vmm_entries! {
    granularity: "cuMemGetAllocationGranularity" @ 10020 => fn(*mut usize, *const CUmemAllocationProp, c_int);
    create: "cuMemCreate" @ 10020 => fn(*mut u64, usize, *const CUmemAllocationProp, u64);
    release: "cuMemRelease" @ 10020 => fn(u64);
    reserve: "cuMemAddressReserve" @ 10020 => fn(*mut u64, usize, usize, u64, u64);
    address_free: "cuMemAddressFree" @ 10020 => fn(u64, usize);
    map: "cuMemMap" @ 10020 => fn(u64, usize, usize, u64, u64);
    unmap: "cuMemUnmap" @ 10020 => fn(u64, usize);
    set_access: "cuMemSetAccess" @ 10020 => fn(u64, usize, *const CUmemAccessDesc, usize);
    mem_get_info: "cuMemGetInfo" @ 3020 => fn(*mut usize, *mut usize);
}

/// What [`Vmm::round_trip`] observed (bytes of device usage relative to the start).
#[derive(Debug)]
pub struct VmmReport {
    pub granularity: usize,
    pub mapped_delta: i64,
    pub released_delta: i64,
}

impl Vmm {
    fn free_bytes(&self) -> Result<i64, String> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        ck("cuMemGetInfo", unsafe { (self.mem_get_info)(&mut free, &mut total) })?;
        Ok(free as i64)
    }

    /// Creates `chunks` physical chunks of one granule each on `device`, maps them into one
    /// reserved range with read-write access, then unmaps and releases everything.
    /// A context must be current.
    pub fn round_trip(&self, device: c_int, chunks: usize) -> Result<VmmReport, String> {
        let location = CUmemLocation { kind: CU_MEM_LOCATION_TYPE_DEVICE, id: device };
        let prop = CUmemAllocationProp {
            kind: CU_MEM_ALLOCATION_TYPE_PINNED,
            requested_handle_types: 0,
            location,
            win32_handle_meta_data: std::ptr::null_mut(),
            alloc_flags: CUmemAllocFlags::default(),
        };
        let access = CUmemAccessDesc { location, flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        let start = self.free_bytes()?;
        // SAFETY: the entries have their PFN typedef ABIs; every pointer is valid for the call.
        unsafe {
            let mut gran = 0usize;
            ck(
                "cuMemGetAllocationGranularity",
                (self.granularity)(&mut gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            )?;
            let size = gran * chunks;
            let mut base = 0u64;
            ck("cuMemAddressReserve", (self.reserve)(&mut base, size, 0, 0, 0))?;
            let mut handles = Vec::with_capacity(chunks);
            for i in 0..chunks {
                let mut h = 0u64;
                ck("cuMemCreate", (self.create)(&mut h, gran, &prop, 0))?;
                ck("cuMemMap", (self.map)(base + (i * gran) as u64, gran, 0, h, 0))?;
                handles.push(h);
            }
            ck("cuMemSetAccess", (self.set_access)(base, size, &access, 1))?;
            let mapped_delta = start - self.free_bytes()?;
            ck("cuMemUnmap", (self.unmap)(base, size))?;
            for h in handles {
                ck("cuMemRelease", (self.release)(h))?;
            }
            ck("cuMemAddressFree", (self.address_free)(base, size))?;
            Ok(VmmReport { granularity: gran, mapped_delta, released_delta: start - self.free_bytes()? })
        }
    }
}

fn ck(what: &str, r: R) -> Result<(), String> {
    if r == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed with CUresult {r}"))
    }
}
