//! Virtual memory management: physical handles, address reservations, mappings, and POSIX-fd
//! shareable handles (a memfd holding a small record; see `shim-tests/README.md`).

use crate::config::{machine_hash, Config, GRANULARITY};
use crate::out;
use crate::state::{tag, with_init, Alloc, HostPhys, Kind, Phys, Proc, HOST_PHYS_DATA, R};
use crate::types::*;
use std::os::raw::{c_int, c_void};

/// Magic of the record in an exported memfd ("FKVMM" + version 1).
const FD_MAGIC: u64 = 0x464b_564d_4d00_0001;
/// Magic of the record of exported host-located memory (its data follows at
/// [`HOST_PHYS_DATA`] in the same memfd).
const FD_MAGIC_HOST: u64 = 0x464b_564d_4d48_0001;
/// Record: magic, machine hash, device, size, exporter pid, exporter handle.
const FD_RECORD: usize = 6 * 8;

/// Where an allocation property puts its memory.
enum Place {
    Device(usize),
    /// `CU_MEM_LOCATION_TYPE_HOST`, `HOST_NUMA` (node 0, the only one: device attribute
    /// `HOST_NUMA_ID` says so) or `HOST_NUMA_CURRENT`: NCCL's `ncclCuMemHostAlloc` asks for them.
    Host(CUmemLocation),
}

/// A host location the fake knows.
fn host_location(l: &CUmemLocation) -> bool {
    match l.type_ {
        CU_MEM_LOCATION_TYPE_HOST | CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => true,
        CU_MEM_LOCATION_TYPE_HOST_NUMA => l.id == 0,
        _ => false,
    }
}

/// Validates an allocation property and returns where its memory goes.
fn prop_place(p: &Proc, prop: *const CUmemAllocationProp) -> R<Place> {
    // SAFETY: the caller passes NULL or a valid CUmemAllocationProp.
    let prop = unsafe { prop.as_ref() }.ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if prop.type_ != CU_MEM_ALLOCATION_TYPE_PINNED || prop.requested_handle_types & !CU_MEM_HANDLE_TYPE_ALL != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if prop.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE {
        return p.device(prop.location.id).map(Place::Device);
    }
    if host_location(&prop.location) {
        return Ok(Place::Host(prop.location));
    }
    Err(CUDA_ERROR_INVALID_VALUE)
}

/// A memfd for host-located memory of `size` bytes (after the record page).
fn host_memfd(size: u64) -> R<c_int> {
    // SAFETY: plain system calls on a descriptor this function owns until it returns it.
    unsafe {
        let fd = libc::memfd_create(c"fakecuda-vmm-host".as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        if libc::ftruncate(fd, (HOST_PHYS_DATA + size) as libc::off_t) != 0 {
            libc::close(fd);
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        Ok(fd)
    }
}

fn aligned(size: usize) -> bool {
    size > 0 && (size as u64).is_multiple_of(GRANULARITY)
}

/// The VMM mappings overlapping `[ptr, ptr+size)`, which must cover it exactly and contiguously.
fn covering_maps(p: &Proc, ptr: u64, size: usize) -> R<Vec<u64>> {
    let end = ptr.checked_add(size as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let mut next = ptr;
    let mut maps = Vec::new();
    for (base, a) in p.allocs.range(..end) {
        if base + a.size <= ptr {
            continue;
        }
        if !matches!(a.kind, Kind::VmmMap { .. }) || *base != next {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        next = base + a.size;
        maps.push(*base);
    }
    if size == 0 || next != end {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(maps)
}

entry! {
    /// Device memory, and host memory (`HOST`, `HOST_NUMA`, `HOST_NUMA_CURRENT`: NCCL asks for
    /// them), share one granularity.
    fn cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const CUmemAllocationProp, option: c_int) {
        with_init(|p| prop_place(p, prop))?;
        if !(0..=CU_MEM_ALLOC_GRANULARITY_RECOMMENDED).contains(&option) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        out(granularity, GRANULARITY as usize)
    }

    /// Physical memory on `prop->location`; `size` must be a multiple of 2 MiB. Device memory is
    /// charged at once; host memory is real memory (a memfd), mapped where `cuMemMap` puts it.
    fn cuMemCreate(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: u64) {
        if handle.is_null() || flags != 0 || !aligned(size) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = with_init(|p| {
            let place = prop_place(p, prop)?;
            // SAFETY: prop_place checked it non-NULL.
            let handle_types = unsafe { (*prop).requested_handle_types };
            let size = size as u64;
            let phys = match place {
                Place::Device(dev) => {
                    p.charge(dev, size)?;
                    Phys { dev, size, refs: 1, maps: 0, charged: size, handle_types, host: None }
                }
                Place::Host(location) => {
                    let fd = host_memfd(size)?;
                    Phys { dev: 0, size, refs: 1, maps: 0, charged: 0, handle_types, host: Some(HostPhys { fd, location }) }
                }
            };
            let h = p.new_handle(tag::PHYS);
            p.phys.insert(h, phys);
            Ok(h)
        })?;
        handle.write(h);
        Ok(())
    }

    /// Drops one handle reference; the memory goes once it is also unmapped everywhere.
    fn cuMemRelease(handle: CUmemGenericAllocationHandle) {
        with_init(|p| {
            let ph = p.phys.get_mut(&handle).filter(|ph| ph.refs > 0).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            ph.refs -= 1;
            p.maybe_free_phys(handle);
            Ok(())
        })
    }

    fn cuMemRetainAllocationHandle(handle: *mut CUmemGenericAllocationHandle, addr: *mut c_void) {
        if handle.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = with_init(|p| {
            let h = match p.find(addr as u64).map(|a| &a.kind) {
                Some(Kind::VmmMap { phys }) => *phys,
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            };
            if let Some(ph) = p.phys.get_mut(&h) {
                ph.refs += 1;
            }
            Ok(h)
        })?;
        handle.write(h);
        Ok(())
    }

    fn cuMemGetAllocationPropertiesFromHandle(prop: *mut CUmemAllocationProp, handle: CUmemGenericAllocationHandle) {
        let (location, types) = with_init(|p| {
            let ph = p.phys.get(&handle).filter(|ph| ph.refs > 0).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            let device = CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: ph.dev as c_int };
            Ok((ph.host.as_ref().map_or(device, |h| h.location), ph.handle_types))
        })?;
        out(prop, CUmemAllocationProp {
            type_: CU_MEM_ALLOCATION_TYPE_PINNED,
            requested_handle_types: types,
            location,
            win32_handle_meta_data: std::ptr::null_mut(),
            compression_type: 0,
            gpu_direct_rdma_capable: 0,
            usage: 0,
            reserved: [0; 4],
        })
    }

    /// Reserves virtual addresses (the hint `addr` is honoured when that range is free).
    fn cuMemAddressReserve(ptr: *mut CUdeviceptr, size: usize, alignment: usize, addr: CUdeviceptr, flags: u64) {
        if ptr.is_null() || flags != 0 || !aligned(size) || (alignment != 0 && !alignment.is_power_of_two()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let align = (alignment as u64).max(GRANULARITY);
        let base = with_init(|p| {
            let size = size as u64;
            let hinted = addr != 0 && addr.is_multiple_of(align) && p.vmm_va.take(addr, size);
            let base = if hinted { addr } else { p.vmm_va.alloc(size, align).ok_or(CUDA_ERROR_OUT_OF_MEMORY)? };
            p.reservations.insert(base, size);
            Ok(base)
        })?;
        ptr.write(base);
        Ok(())
    }

    /// Frees a whole reservation (exact base and size) that has no mappings left.
    fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) {
        with_init(|p| {
            if p.reservations.get(&ptr) != Some(&(size as u64)) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            if p.allocs.range(ptr..ptr + size as u64).next().is_some() {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            p.reservations.remove(&ptr);
            p.vmm_va.release(ptr, size as u64);
            Ok(())
        })
    }

    /// Maps `size` bytes of `handle` at `ptr` (inside one reservation, not overlapping a mapping).
    /// Host-located memory is mapped for real there, so the CPU can use the address.
    fn cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: u64) {
        if flags != 0 || offset != 0 || !aligned(size) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        with_init(|p| {
            let size = size as u64;
            let (dev, host_fd) = match p.phys.get(&handle) {
                Some(ph) if ph.refs > 0 && size <= ph.size => (ph.dev, ph.host.as_ref().map(|h| h.fd)),
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            };
            let end = ptr.checked_add(size).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            let reserved = p.reservations.range(..=ptr).next_back().is_some_and(|(b, s)| end <= b + s);
            let overlaps = p.allocs.range(..end).next_back().is_some_and(|(b, a)| b + a.size > ptr);
            if !reserved || overlaps {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            if let Some(fd) = host_fd {
                // SAFETY: maps the memfd at an address of our own reservation, refusing to replace
                // anything the process has mapped there.
                let at = unsafe {
                    libc::mmap(
                        ptr as *mut c_void,
                        size as usize,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE,
                        fd,
                        HOST_PHYS_DATA as libc::off_t,
                    )
                };
                if at != ptr as *mut c_void {
                    if at != libc::MAP_FAILED {
                        // SAFETY: an old kernel placed it elsewhere; undo that mapping.
                        unsafe { libc::munmap(at, size as usize) };
                    }
                    crate::warn(&format!("cannot map host VMM memory at {ptr:#x}: the address is in use"));
                    return Err(CUDA_ERROR_OUT_OF_MEMORY);
                }
            }
            if let Some(ph) = p.phys.get_mut(&handle) {
                ph.maps += 1;
            }
            p.allocs.insert(ptr, Alloc {
                base: ptr,
                size,
                span: size,
                dev,
                kind: Kind::VmmMap { phys: handle },
                ctx: 0,
                charge: None,
                export: None,
                low: false,
            });
            Ok(())
        })
    }

    /// Unmaps whole mappings covering exactly `[ptr, ptr+size)`.
    fn cuMemUnmap(ptr: CUdeviceptr, size: usize) {
        with_init(|p| {
            for base in covering_maps(p, ptr, size)? {
                p.remove_alloc(base);
            }
            Ok(())
        })
    }

    fn cuMemSetAccess(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize) {
        if desc.is_null() || count == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let descs = std::slice::from_raw_parts(desc, count);
        with_init(|p| {
            for d in descs {
                if !matches!(d.flags, 0 | 1 | 3) {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                // Access from the CPU (NCCL sets it on its host memory) or from a device.
                if d.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE {
                    p.device(d.location.id)?;
                } else if !host_location(&d.location) {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
            }
            covering_maps(p, ptr, size).map(|_| ())
        })
    }

    /// POSIX fd export: a memfd (inheritable, not close-on-exec) holding machine, device and size;
    /// for host-located memory, the memfd holding the memory itself, the record in its first page.
    fn cuMemExportToShareableHandle(shareable_handle: *mut c_void, handle: CUmemGenericAllocationHandle, handle_type: c_int, flags: u64) {
        if shareable_handle.is_null() || flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (dev, size, types, pid, host) = with_init(|p| {
            let ph = p.phys.get(&handle).filter(|ph| ph.refs > 0).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            Ok((ph.dev, ph.size, ph.handle_types, p.pid, ph.host.clone()))
        })?;
        if handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        if types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (magic, place) = match &host {
            // The location's type and id in the device word.
            Some(h) => (FD_MAGIC_HOST, ((h.location.type_ as u64) << 32) | h.location.id as u32 as u64),
            None => (FD_MAGIC, dev as u64),
        };
        let words = [magic, machine_hash(&Config::get().machine), place, size, pid as u64, handle];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let fd = match &host {
            Some(h) => libc::dup(h.fd),
            None => libc::memfd_create(c"fakecuda-vmm".as_ptr(), 0),
        };
        if fd < 0 {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        if libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), 0) != bytes.len() as isize {
            libc::close(fd);
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        shareable_handle.cast::<c_int>().write(fd);
        Ok(())
    }

    /// Imports an fd from [`cuMemExportToShareableHandle`] (this or another process of the machine).
    /// The imported memory is owned (and charged) by the exporter.
    fn cuMemImportFromShareableHandle(handle: *mut CUmemGenericAllocationHandle, os_handle: *mut c_void, sh_handle_type: c_int) {
        if handle.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if sh_handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let fd = os_handle as usize as c_int;
        let mut buf = [0u8; FD_RECORD];
        if libc::pread(fd, buf.as_mut_ptr().cast(), FD_RECORD, 0) != FD_RECORD as isize {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let w = |i: usize| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        let host = w(0) == FD_MAGIC_HOST;
        if !(host || w(0) == FD_MAGIC) || w(1) != machine_hash(&Config::get().machine) || !aligned(w(3) as usize) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let location = CUmemLocation { type_: (w(2) >> 32) as c_int, id: w(2) as u32 as c_int };
        let h = with_init(|p| {
            let types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
            let phys = if host {
                // The importer keeps its own descriptor of the memory (the caller may close `fd`).
                let own = libc::dup(fd);
                if own < 0 {
                    return Err(CUDA_ERROR_OUT_OF_MEMORY);
                }
                libc::fcntl(own, libc::F_SETFD, libc::FD_CLOEXEC);
                let host = Some(HostPhys { fd: own, location });
                Phys { dev: 0, size: w(3), refs: 1, maps: 0, charged: 0, handle_types: types, host }
            } else {
                let dev = p.device(w(2) as c_int).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
                Phys { dev, size: w(3), refs: 1, maps: 0, charged: 0, handle_types: types, host: None }
            };
            let h = p.new_handle(tag::PHYS);
            p.phys.insert(h, phys);
            Ok(h)
        })?;
        handle.write(h);
        Ok(())
    }
}
