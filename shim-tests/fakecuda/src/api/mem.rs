//! Device, managed, stream-ordered and host memory; memory info and pointer queries.

use crate::out;
use crate::state::{self, handle, tag, tag_of, with_init, HostRange, Kind, Proc, R};
use crate::types::*;
use std::os::raw::{c_int, c_uint, c_void};

/// Pitch alignment of `cuMemAllocPitch`.
const PITCH_ALIGN: u64 = 512;

/// Synchronous allocation for the current context (refused during a protected capture).
unsafe fn alloc_sync(dptr: *mut CUdeviceptr, size: u64, kind: Kind, low: bool) -> R<u64> {
    if dptr.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let base = with_init(|p| {
        let (ctx, dev) = p.current()?;
        p.check_capture_safe()?;
        p.alloc_device(ctx, dev, size, kind, low)
    })?;
    dptr.write(base);
    Ok(base)
}

/// Frees an owned allocation given its exact base (`CUDA_ERROR_INVALID_VALUE` otherwise).
fn free_owned(p: &mut Proc, dptr: u64) -> R {
    match p.allocs.get(&dptr).map(|a| &a.kind) {
        Some(Kind::Device | Kind::Pitch | Kind::Managed | Kind::Async { .. }) => {
            p.remove_alloc(dptr);
            Ok(())
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// A NULL pointer frees nothing and succeeds: NVIDIA's runtime forwards `cudaFree(NULL)` (the
/// documented no-op that starts a context) as `cuMemFree_v2(0)` (the static cudart 13.3 inside
/// NCCL 2.30's `libnccl.so.2` does, from `ncclCommInitRankDev`).
fn free_sync(dptr: u64) -> R {
    with_init(|p| {
        p.current()?;
        if dptr == 0 {
            return Ok(());
        }
        p.check_capture_safe()?;
        free_owned(p, dptr)
    })
}

fn mem_get_info() -> R<(u64, u64)> {
    with_init(|p| p.current().map(|(_, dev)| p.mem_info(dev)))
}

/// Pitch and total size of a pitched allocation.
fn pitch_of(width: u64, height: u64, element_size: c_uint) -> R<(u64, u64)> {
    if width == 0 || height == 0 || !matches!(element_size, 4 | 8 | 16) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let pitch = width.checked_add(PITCH_ALIGN - 1).ok_or(CUDA_ERROR_INVALID_VALUE)? & !(PITCH_ALIGN - 1);
    Ok((pitch, pitch.checked_mul(height).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?))
}

fn address_range(dptr: u64) -> R<(u64, u64)> {
    with_init(|p| {
        p.current()?;
        p.find(dptr).map(|a| (a.base, a.size)).ok_or(CUDA_ERROR_NOT_FOUND)
    })
}

/// Stream-ordered allocation on `stream` from `pool` (None: the device's default pool).
unsafe fn alloc_async(
    dptr: *mut CUdeviceptr,
    size: usize,
    pool: Option<CUmemoryPool>,
    stream: CUstream,
    per_thread: bool,
) -> R {
    if dptr.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let base = with_init(|p| {
        let (ctx, _) = p.current()?;
        let (key, stream_dev) = p.stream(stream, per_thread)?;
        let (dev, pool_h) = match pool {
            None => (stream_dev, handle(tag::POOL, stream_dev as u64)),
            Some(h) => (pool_device(p, h)?, h as u64),
        };
        let base = p.alloc_device(ctx, dev, size as u64, Kind::Async { pool: pool_h }, false)?;
        p.note_pool(pool_h);
        if let Some(graph) = key.and_then(|k| p.captures.get(&k)).map(|c| c.graph) {
            if let Some(g) = p.graphs.get_mut(&graph) {
                g.alloc_nodes.push(base);
            }
        }
        Ok(base)
    })?;
    dptr.write(base);
    Ok(())
}

fn free_async(dptr: u64, stream: CUstream, per_thread: bool) -> R {
    with_init(|p| {
        p.stream(stream, per_thread)?;
        free_owned(p, dptr)
    })
}

/// Device of a memory pool handle: a device's default pool or a live pool made by
/// `cuMemPoolCreate` (`CUDA_ERROR_INVALID_VALUE` if it is neither).
pub fn pool_device(p: &Proc, pool: CUmemoryPool) -> R<usize> {
    let h = pool as u64;
    let dev = (h & 0xffff_ffff) as usize;
    match tag_of(h) {
        tag::POOL if dev < p.devices => Ok(dev),
        tag::MADE_POOL => p.pools.get(&h).copied().ok_or(CUDA_ERROR_INVALID_VALUE),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// Pinned host allocation (real memory, not charged to any device).
unsafe fn host_alloc(pp: *mut *mut c_void, size: u64, flags: c_uint) -> R {
    if pp.is_null() || size == 0 || flags & !CU_MEMHOSTALLOC_ALL != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ptr = with_init(|p| {
        let (ctx, dev) = p.current()?;
        p.check_capture_safe()?;
        let len = size.checked_add(4095).ok_or(CUDA_ERROR_OUT_OF_MEMORY)? & !4095;
        let ptr = state::map_host(len)?;
        let base = ptr as u64;
        // cuda.h (Unified Addressing, "Automatic Mapping of Host Allocated Host Memory"): every
        // cuMemHostAlloc allocation is reachable from all devices, DEVICEMAP or not.
        p.host.insert(base, HostRange { base, size, owned: Some(len as usize), mapped: true, ctx, dev });
        Ok(ptr)
    })?;
    pp.write(ptr);
    Ok(())
}

fn host_register(ptr: *mut c_void, size: usize, flags: c_uint) -> R {
    if ptr.is_null() || size == 0 || flags & !CU_MEMHOSTREGISTER_ALL != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    with_init(|p| {
        let (ctx, dev) = p.current()?;
        let (base, size) = (ptr as u64, size as u64);
        let end = base.checked_add(size).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let overlaps = p.host.range(..end).next_back().is_some_and(|(_, r)| r.base + r.size > base);
        if overlaps {
            return Err(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
        }
        let mapped = flags & CU_MEMHOSTREGISTER_DEVICEMAP != 0;
        p.host.insert(base, HostRange { base, size, owned: None, mapped, ctx, dev });
        Ok(())
    })
}

/// The device address of mapped pinned host memory: every simulated device reads host memory at
/// its host address (`CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM` is 1), so, as cuda.h says of
/// such a machine, it is the host pointer itself. In cuda.h's order: a current context, then
/// `Flags` (must be 0), then `p` inside host memory allocated by the driver or registered with
/// `CU_MEMHOSTREGISTER_DEVICEMAP` (anything else, pageable memory included, is
/// `CUDA_ERROR_INVALID_VALUE`).
fn host_device_pointer(ptr: *mut c_void, flags: c_uint) -> R<u64> {
    with_init(|p| {
        p.current()?;
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        match p.find_host(ptr as u64) {
            Some(r) if r.mapped => Ok(ptr as u64),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

/// `cuMemPrefetchAsync` (both ABIs): the stream, the destination (a device, or the host), then
/// the range, which must lie in managed memory (the simulated devices have no
/// PAGEABLE_MEMORY_ACCESS). Nothing moves: managed memory is host memory on the fake.
fn prefetch(ptr: CUdeviceptr, count: usize, to_host: bool, dev: CUdevice, stream: CUstream, per_thread: bool) -> R {
    with_init(|p| {
        p.stream(stream, per_thread)?;
        if !to_host {
            p.device(dev).map_err(|_| CUDA_ERROR_INVALID_DEVICE)?;
        }
        match p.check_range(ptr, count as u64) {
            Ok(a) if a.kind == Kind::Managed && count > 0 => Ok(()),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

/// `CU_DEVICE_CPU`.
const DEVICE_CPU: CUdevice = -1;

/// A `cuMemPrefetchAsync_v2` location: a device, or the host (any NUMA form); flags must be 0.
fn prefetch_v2(
    ptr: CUdeviceptr,
    count: usize,
    loc: CUmemLocation,
    flags: c_uint,
    stream: CUstream,
    per_thread: bool,
) -> R {
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match loc.type_ {
        CU_MEM_LOCATION_TYPE_DEVICE => prefetch(ptr, count, false, loc.id, stream, per_thread),
        CU_MEM_LOCATION_TYPE_HOST | CU_MEM_LOCATION_TYPE_HOST_NUMA | CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => {
            prefetch(ptr, count, true, 0, stream, per_thread)
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// Value of one pointer attribute.
enum Attr {
    U32(u32),
    U64(u64),
}

/// Computes `cuPointerGetAttribute` for `ptr`.
fn pointer_attribute(p: &Proc, attr: c_int, ptr: u64) -> R<Attr> {
    struct Info {
        ctx: u64,
        base: u64,
        size: u64,
        dev: usize,
        memtype: c_uint,
        managed: bool,
        host_visible: bool,
        ipc_capable: bool,
        pool: u64,
    }
    let info = if let Some(a) = p.find(ptr) {
        Info {
            ctx: a.ctx,
            base: a.base,
            size: a.size,
            dev: a.dev,
            memtype: CU_MEMORYTYPE_DEVICE,
            managed: a.kind == Kind::Managed,
            host_visible: a.kind == Kind::Managed,
            ipc_capable: matches!(a.kind, Kind::Device | Kind::Pitch),
            pool: match a.kind {
                Kind::Async { pool } => pool,
                _ => 0,
            },
        }
    } else if let Some(r) = p.find_host(ptr) {
        Info {
            ctx: r.ctx,
            base: r.base,
            size: r.size,
            dev: r.dev,
            memtype: CU_MEMORYTYPE_HOST,
            managed: false,
            host_visible: true,
            ipc_capable: false,
            pool: 0,
        }
    } else {
        return Err(CUDA_ERROR_INVALID_VALUE);
    };
    Ok(match attr {
        1 => Attr::U64(info.ctx),                 // CONTEXT
        2 => Attr::U32(info.memtype),             // MEMORY_TYPE
        3 => Attr::U64(ptr),                      // DEVICE_POINTER
        4 if info.host_visible => Attr::U64(ptr), // HOST_POINTER
        4 => return Err(CUDA_ERROR_INVALID_VALUE),
        6 => Attr::U32(0),                        // SYNC_MEMOPS
        7 => Attr::U64(info.base),                // BUFFER_ID
        8 => Attr::U32(info.managed as u32),      // IS_MANAGED
        9 => Attr::U32(info.dev as u32),          // DEVICE_ORDINAL
        10 => Attr::U32(info.ipc_capable as u32), // IS_LEGACY_CUDA_IPC_CAPABLE
        11 | 19 => Attr::U64(info.base),          // RANGE_START_ADDR, MAPPING_BASE_ADDR
        12 | 18 => Attr::U64(info.size),          // RANGE_SIZE, MAPPING_SIZE
        13 => Attr::U32(1),                       // MAPPED
        15 => Attr::U32(0),                       // IS_GPU_DIRECT_RDMA_CAPABLE
        16 => Attr::U32(3),                       // ACCESS_FLAGS: read-write
        17 => Attr::U64(info.pool),               // MEMPOOL_HANDLE
        5 | 14 | 20 | 21 => return Err(CUDA_ERROR_NOT_SUPPORTED),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

/// Whether attribute `attr` is written as 8 bytes (handles, addresses, sizes, ids) rather than
/// 4 (enums, booleans, ordinals, flags), by the types cuda.h gives `*data` for each.
fn attribute_is_u64(attr: c_int) -> bool {
    matches!(attr, 1 | 3 | 4 | 7 | 11 | 12 | 14 | 17 | 18 | 19 | 20)
}

entry! {
    fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) {
        alloc_sync(dptr, bytesize as u64, Kind::Device, false).map(|_| ())
    }

    /// 32-bit ABI: the address comes from the device's 32-bit window.
    fn cuMemAlloc(dptr: *mut CUdeviceptrV1, bytesize: c_uint) {
        if dptr.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut wide: CUdeviceptr = 0;
        let base = alloc_sync(&mut wide, bytesize as u64, Kind::Device, true)?;
        dptr.write(base as CUdeviceptrV1);
        Ok(())
    }

    fn cuMemFree_v2(dptr: CUdeviceptr) {
        free_sync(dptr)
    }

    fn cuMemFree(dptr: CUdeviceptrV1) {
        free_sync(dptr as u64)
    }

    /// Either out-pointer may be NULL (not both).
    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        if free.is_null() && total.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (f, t) = mem_get_info()?;
        if !free.is_null() {
            free.write(f as usize);
        }
        if !total.is_null() {
            total.write(t as usize);
        }
        Ok(())
    }

    /// 32-bit ABI: values saturate at `UINT_MAX`.
    fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) {
        if free.is_null() && total.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (f, t) = mem_get_info()?;
        let sat = |v: u64| v.min(c_uint::MAX as u64) as c_uint;
        if !free.is_null() {
            free.write(sat(f));
        }
        if !total.is_null() {
            total.write(sat(t));
        }
        Ok(())
    }

    /// Managed memory is real host memory (programs write into it), charged to the current device.
    fn cuMemAllocManaged(dptr: *mut CUdeviceptr, bytesize: usize, flags: c_uint) {
        if flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        alloc_sync(dptr, bytesize as u64, Kind::Managed, false).map(|_| ())
    }

    fn cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, p_pitch: *mut usize, width_in_bytes: usize, height: usize, element_size_bytes: c_uint) {
        if p_pitch.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (pitch, size) = pitch_of(width_in_bytes as u64, height as u64, element_size_bytes)?;
        alloc_sync(dptr, size, Kind::Pitch, false)?;
        p_pitch.write(pitch as usize);
        Ok(())
    }

    fn cuMemAllocPitch(dptr: *mut CUdeviceptrV1, p_pitch: *mut c_uint, width_in_bytes: c_uint, height: c_uint, element_size_bytes: c_uint) {
        if dptr.is_null() || p_pitch.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (pitch, size) = pitch_of(width_in_bytes as u64, height as u64, element_size_bytes)?;
        if size > c_uint::MAX as u64 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut wide: CUdeviceptr = 0;
        let base = alloc_sync(&mut wide, size, Kind::Pitch, true)?;
        dptr.write(base as CUdeviceptrV1);
        p_pitch.write(pitch as c_uint);
        Ok(())
    }

    /// Both out-pointers are optional; an unknown pointer gives `CUDA_ERROR_NOT_FOUND`.
    fn cuMemGetAddressRange_v2(pbase: *mut CUdeviceptr, psize: *mut usize, dptr: CUdeviceptr) {
        let (b, s) = address_range(dptr)?;
        if !pbase.is_null() {
            pbase.write(b);
        }
        if !psize.is_null() {
            psize.write(s as usize);
        }
        Ok(())
    }

    fn cuMemGetAddressRange(pbase: *mut CUdeviceptrV1, psize: *mut c_uint, dptr: CUdeviceptrV1) {
        let (b, s) = address_range(dptr as u64)?;
        if !pbase.is_null() {
            pbase.write(b as CUdeviceptrV1);
        }
        if !psize.is_null() {
            psize.write(s as c_uint);
        }
        Ok(())
    }

    fn cuPointerGetAttribute(data: *mut c_void, attribute: c_int, ptr: CUdeviceptr) {
        if data.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        match with_init(|p| pointer_attribute(p, attribute, ptr))? {
            Attr::U32(v) => data.cast::<u32>().write_unaligned(v),
            Attr::U64(v) => data.cast::<u64>().write_unaligned(v),
        }
        Ok(())
    }

    /// Unlike `cuPointerGetAttribute`, as cuda.h says, a pointer the driver does not know (or an
    /// attribute that has no value for it, such as the host pointer of device memory) gets the
    /// default NULL value and `CUDA_SUCCESS`; an attribute number cuda.h does not define, or the
    /// P2P tokens (a struct the fake cannot fill), is `CUDA_ERROR_INVALID_VALUE` /
    /// `CUDA_ERROR_NOT_SUPPORTED`. NVIDIA's `cudaPointerGetAttributes` is this call.
    fn cuPointerGetAttributes(num_attributes: c_uint, attributes: *mut c_int, data: *mut *mut c_void, ptr: CUdeviceptr) {
        if num_attributes > 0 && (attributes.is_null() || data.is_null()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let n = num_attributes as usize;
        let attrs: Vec<c_int> = (0..n).map(|i| attributes.add(i).read()).collect();
        let outs: Vec<*mut c_void> = (0..n).map(|i| data.add(i).read()).collect();
        for &a in &attrs {
            if !(1..=21).contains(&a) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            if a == 5 {
                return Err(CUDA_ERROR_NOT_SUPPORTED);
            }
        }
        let values: Vec<Attr> = with_init(|p| {
            Ok(attrs
                .iter()
                .map(|&a| {
                    pointer_attribute(p, a, ptr)
                        .unwrap_or(if attribute_is_u64(a) { Attr::U64(0) } else { Attr::U32(0) })
                })
                .collect())
        })?;
        for (out, v) in outs.into_iter().zip(values) {
            if out.is_null() {
                continue;
            }
            match v {
                Attr::U32(v) => out.cast::<u32>().write_unaligned(v),
                Attr::U64(v) => out.cast::<u64>().write_unaligned(v),
            }
        }
        Ok(())
    }

    fn cuMemAllocAsync(dptr: *mut CUdeviceptr, bytesize: usize, h_stream: CUstream) {
        alloc_async(dptr, bytesize, None, h_stream, false)
    }

    fn cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, h_stream: CUstream) {
        alloc_async(dptr, bytesize, None, h_stream, true)
    }

    fn cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, h_stream: CUstream) {
        alloc_async(dptr, bytesize, Some(pool), h_stream, false)
    }

    fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, h_stream: CUstream) {
        alloc_async(dptr, bytesize, Some(pool), h_stream, true)
    }

    fn cuMemFreeAsync(dptr: CUdeviceptr, h_stream: CUstream) {
        free_async(dptr, h_stream, false)
    }

    fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, h_stream: CUstream) {
        free_async(dptr, h_stream, true)
    }

    fn cuDeviceGetDefaultMemPool(pool_out: *mut CUmemoryPool, dev: CUdevice) {
        let d = with_init(|p| p.device(dev))?;
        out(pool_out, handle(tag::POOL, d as u64) as CUmemoryPool)
    }

    /// The current pool of a device is always its default pool in the fake.
    fn cuDeviceGetMemPool(pool: *mut CUmemoryPool, dev: CUdevice) {
        let d = with_init(|p| p.device(dev))?;
        out(pool, handle(tag::POOL, d as u64) as CUmemoryPool)
    }

    /// A pool on a device (pinned device memory only; no handle types beyond POSIX fds).
    fn cuMemPoolCreate(pool: *mut CUmemoryPool, pool_props: *const CUmemPoolProps) {
        let props = pool_props.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if pool.is_null()
            || props.alloc_type != CU_MEM_ALLOCATION_TYPE_PINNED
            || props.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE
            || props.handle_types & !CU_MEM_HANDLE_TYPE_ALL != 0
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = with_init(|p| {
            let dev = p.device(props.location.id)?;
            let h = p.new_handle(tag::MADE_POOL);
            p.pools.insert(h, dev);
            Ok(h)
        })?;
        pool.write(h as CUmemoryPool);
        Ok(())
    }

    /// Destroys a made pool (default pools cannot be destroyed). Allocations still live from it
    /// stay valid until freed, as the driver keeps the pool's resources until then.
    fn cuMemPoolDestroy(pool: CUmemoryPool) {
        with_init(|p| p.pools.remove(&(pool as u64)).map(|_| ()).ok_or(CUDA_ERROR_INVALID_VALUE))
    }

    fn cuMemHostAlloc(pp: *mut *mut c_void, bytesize: usize, flags: c_uint) {
        host_alloc(pp, bytesize as u64, flags)
    }

    fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) {
        host_alloc(pp, bytesize as u64, 0)
    }

    fn cuMemAllocHost(pp: *mut *mut c_void, bytesize: c_uint) {
        host_alloc(pp, bytesize as u64, 0)
    }

    fn cuMemFreeHost(ptr: *mut c_void) {
        with_init(|p| {
            p.current()?;
            p.check_capture_safe()?;
            match p.host.get(&(ptr as u64)) {
                Some(r) if r.owned.is_some() => {
                    p.remove_host(ptr as u64);
                    Ok(())
                }
                _ => Err(CUDA_ERROR_INVALID_VALUE),
            }
        })
    }

    fn cuMemHostRegister_v2(p: *mut c_void, bytesize: usize, flags: c_uint) {
        host_register(p, bytesize, flags)
    }

    /// The 4000 ABI (same signature).
    fn cuMemHostRegister(p: *mut c_void, bytesize: usize, flags: c_uint) {
        host_register(p, bytesize, flags)
    }

    fn cuMemPrefetchAsync(dev_ptr: CUdeviceptr, count: usize, dst_device: CUdevice, h_stream: CUstream) {
        prefetch(dev_ptr, count, dst_device == DEVICE_CPU, dst_device, h_stream, false)
    }

    fn cuMemPrefetchAsync_ptsz(dev_ptr: CUdeviceptr, count: usize, dst_device: CUdevice, h_stream: CUstream) {
        prefetch(dev_ptr, count, dst_device == DEVICE_CPU, dst_device, h_stream, true)
    }

    fn cuMemPrefetchAsync_v2(dev_ptr: CUdeviceptr, count: usize, location: CUmemLocation, flags: c_uint, h_stream: CUstream) {
        prefetch_v2(dev_ptr, count, location, flags, h_stream, false)
    }

    fn cuMemPrefetchAsync_v2_ptsz(dev_ptr: CUdeviceptr, count: usize, location: CUmemLocation, flags: c_uint, h_stream: CUstream) {
        prefetch_v2(dev_ptr, count, location, flags, h_stream, true)
    }

    fn cuMemHostGetDevicePointer_v2(pdptr: *mut CUdeviceptr, p: *mut c_void, flags: c_uint) {
        let d = host_device_pointer(p, flags)?;
        out(pdptr, d)
    }

    /// The 32-bit ABI: an address above 4 GiB does not fit its device pointer.
    fn cuMemHostGetDevicePointer(pdptr: *mut CUdeviceptrV1, p: *mut c_void, flags: c_uint) {
        let d = host_device_pointer(p, flags)?;
        out(pdptr, CUdeviceptrV1::try_from(d).map_err(|_| CUDA_ERROR_INVALID_VALUE)?)
    }

    fn cuMemHostUnregister(ptr: *mut c_void) {
        with_init(|p| {
            p.current()?;
            match p.host.get(&(ptr as u64)) {
                Some(r) if r.owned.is_none() => {
                    p.remove_host(ptr as u64);
                    Ok(())
                }
                _ => Err(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED),
            }
        })
    }
}
