//! Device allocations and frees (runtime and driver), and host-to-device copies.

use super::{allocation, allocation_on, api, free, on_success, out, Word};
use crate::hooks::real::{pointer_device, stream_device};
use crate::hooks::table::*;
use crate::hooks::types::*;
use crate::ledger::{MemKind, PoolPlace};
use libc::{c_int, c_uint, c_void};

pub unsafe fn cuda_malloc(sym: Sym, real: cudaMalloc::Real, p: *mut VoidPtr, size: usize) -> c_int {
    allocation(sym, MemKind::Device, size as u64, || real(p, size), || out(p).map(|a| (a, size as u64)))
}

/// A stream-ordered allocation from the current pool of the STREAM's device (the
/// runtime's stream handles are the driver's).
fn stream_ordered(
    sym: Sym,
    size: usize,
    s: CUstream,
    call: impl FnOnce() -> c_int,
    p: impl FnOnce() -> Option<u64>,
) -> c_int {
    let place = |l: &_, _| super::charged(l, stream_device(sym, s as u64));
    allocation_on(sym, MemKind::Async, size as u64, place, call, || p().map(|a| (a, size as u64)))
}

pub unsafe fn cuda_malloc_async(
    sym: Sym,
    real: cudaMallocAsync::Real,
    p: *mut VoidPtr,
    size: usize,
    s: cudaStream_t,
) -> c_int {
    stream_ordered(sym, size, s, || real(p, size, s), || out(p))
}

pub unsafe fn cuda_malloc_managed(
    sym: Sym,
    real: cudaMallocManaged::Real,
    p: *mut VoidPtr,
    size: usize,
    flags: c_uint,
) -> c_int {
    allocation(sym, MemKind::Managed, size as u64, || real(p, size, flags), || out(p).map(|a| (a, size as u64)))
}

/// A pitched allocation: `pitch * height` bytes as the driver chose the pitch, or
/// `width * height` when it failed (or gave no pitch back).
unsafe fn pitched<T: Word>(
    sym: Sym,
    p: *mut T,
    pitch: *mut usize,
    w: usize,
    h: usize,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let want = (w as u64).saturating_mul(h as u64);
    allocation(sym, MemKind::Pitch, want, call, || {
        let size = out(pitch).map(|pitch| pitch.saturating_mul(h as u64)).unwrap_or(want);
        out(p).map(|a| (a, size))
    })
}

pub unsafe fn cuda_malloc_pitch(
    sym: Sym,
    real: cudaMallocPitch::Real,
    p: *mut VoidPtr,
    pitch: *mut usize,
    w: usize,
    h: usize,
) -> c_int {
    pitched(sym, p, pitch, w, h, || real(p, pitch, w, h))
}

pub unsafe fn cuda_free(sym: Sym, real: cudaFree::Real, p: VoidPtr) -> c_int {
    free(sym, p as u64, || real(p))
}

pub unsafe fn cuda_free_async(sym: Sym, real: cudaFreeAsync::Real, p: VoidPtr, s: cudaStream_t) -> c_int {
    free(sym, p as u64, || real(p, s))
}

pub unsafe fn cu_mem_alloc(sym: Sym, real: cuMemAlloc_v2::Real, p: *mut CUdeviceptr, size: usize) -> c_int {
    allocation(sym, MemKind::Device, size as u64, || real(p, size), || out(p).map(|a| (a, size as u64)))
}

pub unsafe fn cu_mem_alloc_managed(
    sym: Sym,
    real: cuMemAllocManaged::Real,
    p: *mut CUdeviceptr,
    size: usize,
    flags: c_uint,
) -> c_int {
    allocation(sym, MemKind::Managed, size as u64, || real(p, size, flags), || out(p).map(|a| (a, size as u64)))
}

pub unsafe fn cu_mem_alloc_pitch(
    sym: Sym,
    real: cuMemAllocPitch_v2::Real,
    p: *mut CUdeviceptr,
    pitch: *mut usize,
    w: usize,
    h: usize,
    elem: c_uint,
) -> c_int {
    pitched(sym, p, pitch, w, h, || real(p, pitch, w, h, elem))
}

pub unsafe fn cu_mem_alloc_async(
    sym: Sym,
    real: cuMemAllocAsync::Real,
    p: *mut CUdeviceptr,
    size: usize,
    s: CUstream,
) -> c_int {
    stream_ordered(sym, size, s, || real(p, size, s), || out(p))
}

/// From `pool`, on the pool's location: known when the pool was created or looked up
/// through a hook; otherwise the device the driver says the new pointer is on, else the
/// stream's device. A host-located pool's memory is not device memory (not recorded).
pub unsafe fn cu_mem_alloc_from_pool_async(
    sym: Sym,
    real: cuMemAllocFromPoolAsync::Real,
    p: *mut CUdeviceptr,
    size: usize,
    pool: CUmemoryPool,
    s: CUstream,
) -> c_int {
    let place = |l: &crate::ledger::Ledger, ptr: Option<u64>| match l.pool_of(pool as u64) {
        Some(PoolPlace::Device(dev)) => Some(dev),
        Some(PoolPlace::Host) => None,
        None => match ptr.and_then(pointer_device) {
            Some(dev) => Some(dev),
            None => super::charged(l, stream_device(sym, s as u64)),
        },
    };
    allocation_on(
        sym,
        MemKind::Async,
        size as u64,
        place,
        || real(p, size, pool, s),
        || out(p).map(|a| (a, size as u64)),
    )
}

pub unsafe fn cu_mem_free(sym: Sym, real: cuMemFree_v2::Real, p: CUdeviceptr) -> c_int {
    free(sym, p, || real(p))
}

pub unsafe fn cu_mem_free_async(sym: Sym, real: cuMemFreeAsync::Real, p: CUdeviceptr, s: CUstream) -> c_int {
    free(sym, p, || real(p, s))
}

/// Bytes copied from host memory into a tracked allocation: a fact for classification
/// (weights are loaded this way). `cudaMemcpyDefault` counts when the destination is a
/// tracked device allocation and the source is not.
fn host_to_device(depth: &crate::hooks::Depth, sym: Sym, rc: c_int, dst: u64, src: u64, count: usize, kind: c_int) {
    if rc != 0 || count == 0 {
        return;
    }
    depth.record(api(sym), |l| {
        if kind == CUDA_MEMCPY_HOST_TO_DEVICE || (kind == CUDA_MEMCPY_DEFAULT && l.lookup(src).is_none()) {
            l.add_h2d(dst, count as u64);
        }
    });
}

/// Copies only record host-to-device traffic; everything else is a plain forward.
#[inline]
fn copy(sym: Sym, dst: u64, src: u64, count: usize, kind: c_int, call: impl FnOnce() -> c_int) -> c_int {
    if kind != CUDA_MEMCPY_HOST_TO_DEVICE && kind != CUDA_MEMCPY_DEFAULT {
        return call();
    }
    let depth = crate::hooks::Depth::enter();
    let rc = call();
    if depth.outer {
        host_to_device(&depth, sym, rc, dst, src, count, kind);
    }
    rc
}

pub unsafe fn cuda_memcpy(
    sym: Sym,
    real: cudaMemcpy::Real,
    dst: VoidPtr,
    src: *const c_void,
    n: usize,
    kind: c_int,
) -> c_int {
    copy(sym, dst as u64, src as u64, n, kind, || real(dst, src, n, kind))
}

pub unsafe fn cuda_memcpy_async(
    sym: Sym,
    real: cudaMemcpyAsync::Real,
    dst: VoidPtr,
    src: *const c_void,
    n: usize,
    kind: c_int,
    s: cudaStream_t,
) -> c_int {
    copy(sym, dst as u64, src as u64, n, kind, || real(dst, src, n, kind, s))
}

pub unsafe fn cu_memcpy_htod(
    sym: Sym,
    real: cuMemcpyHtoD_v2::Real,
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
) -> c_int {
    on_success(sym, || real(dst, src, n), |l| l.add_h2d(dst, n as u64))
}

pub unsafe fn cu_memcpy_htod_async(
    sym: Sym,
    real: cuMemcpyHtoDAsync_v2::Real,
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    s: CUstream,
) -> c_int {
    on_success(sym, || real(dst, src, n, s), |l| l.add_h2d(dst, n as u64))
}
