//! Copies and memsets. Device ranges must lie inside one live allocation; no device data exists,
//! so only real memory (host, pinned, managed) is written: a copy from fake device memory into real
//! memory writes zeros, a copy into fake device memory writes nothing.

use crate::state::{with_init, Kind, Proc, R};
use crate::types::*;
use std::os::raw::{c_uint, c_void};

/// One side of a copy: real memory the fake may touch, or fake device memory.
#[derive(Clone, Copy)]
enum End {
    Real(*mut u8),
    Fake,
}

/// A device side: must be a live allocation covering `[ptr, ptr+len)`.
fn device_end(p: &Proc, ptr: u64, len: u64) -> R<End> {
    let a = p.check_range(ptr, len)?;
    Ok(if a.kind == Kind::Managed { End::Real(ptr as *mut u8) } else { End::Fake })
}

/// A host side: any non-NULL pointer outside the fake device windows.
fn host_end(p: &Proc, ptr: u64, len: u64) -> R<End> {
    if ptr == 0 || p.in_fake_window(ptr) || ptr.checked_add(len).is_none() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(End::Real(ptr as *mut u8))
}

/// A unified-addressing side (`cuMemcpy`): a live allocation if the pointer is one, else host.
fn any_end(p: &Proc, ptr: u64, len: u64) -> R<End> {
    if p.find(ptr).is_some() {
        device_end(p, ptr, len)
    } else {
        host_end(p, ptr, len)
    }
}

type Side = fn(&Proc, u64, u64) -> R<End>;

/// Validates both sides (and the stream, for async forms) under the lock, then moves real bytes.
fn copy(dst: u64, dst_side: Side, src: u64, src_side: Side, len: usize, stream: Option<(CUstream, bool)>) -> R {
    let (d, s) = with_init(|p| {
        match stream {
            Some((h, per_thread)) => p.stream(h, per_thread).map(|_| ())?,
            None => p.current().map(|_| ())?,
        }
        if len == 0 {
            return Ok((End::Fake, End::Fake));
        }
        Ok((dst_side(p, dst, len as u64)?, src_side(p, src, len as u64)?))
    })?;
    // SAFETY: real sides are host memory the caller handed us for `len` bytes, or managed memory
    // the table says is mapped for at least `len` bytes from this pointer.
    unsafe {
        match (d, s) {
            (End::Real(d), End::Real(s)) => std::ptr::copy(s, d, len),
            (End::Real(d), End::Fake) => std::ptr::write_bytes(d, 0, len),
            _ => {}
        }
    }
    Ok(())
}

fn memset(dst: u64, value: u8, n: usize, stream: Option<(CUstream, bool)>) -> R {
    memset_wide(dst, &[value], n, stream)
}

/// Sets `n` elements of `pattern.len()` bytes each (`cuMemsetD8/D16/D32`).
fn memset_wide(dst: u64, pattern: &[u8], n: usize, stream: Option<(CUstream, bool)>) -> R {
    let bytes = n.checked_mul(pattern.len()).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if !dst.is_multiple_of(pattern.len() as u64) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let d = with_init(|p| {
        match stream {
            Some((h, per_thread)) => p.stream(h, per_thread).map(|_| ())?,
            None => p.current().map(|_| ())?,
        }
        if bytes == 0 {
            return Ok(End::Fake);
        }
        device_end(p, dst, bytes as u64)
    })?;
    if let End::Real(d) = d {
        // SAFETY: managed memory mapped for at least `bytes` bytes from d (checked above).
        unsafe {
            for i in 0..bytes {
                d.add(i).write(pattern[i % pattern.len()]);
            }
        }
    }
    Ok(())
}

entry! {
    fn cuMemcpyHtoD_v2(dst_device: CUdeviceptr, src_host: *const c_void, byte_count: usize) {
        copy(dst_device, device_end, src_host as u64, host_end, byte_count, None)
    }
    fn cuMemcpyHtoD_v2_ptds(dst_device: CUdeviceptr, src_host: *const c_void, byte_count: usize) {
        copy(dst_device, device_end, src_host as u64, host_end, byte_count, None)
    }
    fn cuMemcpyHtoD(dst_device: CUdeviceptrV1, src_host: *const c_void, byte_count: c_uint) {
        copy(dst_device as u64, device_end, src_host as u64, host_end, byte_count as usize, None)
    }

    fn cuMemcpyDtoH_v2(dst_host: *mut c_void, src_device: CUdeviceptr, byte_count: usize) {
        copy(dst_host as u64, host_end, src_device, device_end, byte_count, None)
    }
    fn cuMemcpyDtoH_v2_ptds(dst_host: *mut c_void, src_device: CUdeviceptr, byte_count: usize) {
        copy(dst_host as u64, host_end, src_device, device_end, byte_count, None)
    }
    fn cuMemcpyDtoH(dst_host: *mut c_void, src_device: CUdeviceptrV1, byte_count: c_uint) {
        copy(dst_host as u64, host_end, src_device as u64, device_end, byte_count as usize, None)
    }

    fn cuMemcpyDtoD_v2(dst_device: CUdeviceptr, src_device: CUdeviceptr, byte_count: usize) {
        copy(dst_device, device_end, src_device, device_end, byte_count, None)
    }
    fn cuMemcpyDtoD_v2_ptds(dst_device: CUdeviceptr, src_device: CUdeviceptr, byte_count: usize) {
        copy(dst_device, device_end, src_device, device_end, byte_count, None)
    }
    fn cuMemcpyDtoD(dst_device: CUdeviceptrV1, src_device: CUdeviceptrV1, byte_count: c_uint) {
        copy(dst_device as u64, device_end, src_device as u64, device_end, byte_count as usize, None)
    }

    fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize) {
        copy(dst, any_end, src, any_end, byte_count, None)
    }
    fn cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize) {
        copy(dst, any_end, src, any_end, byte_count, None)
    }

    fn cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize, h_stream: CUstream) {
        copy(dst, any_end, src, any_end, byte_count, Some((h_stream, false)))
    }
    fn cuMemcpyAsync_ptsz(dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize, h_stream: CUstream) {
        copy(dst, any_end, src, any_end, byte_count, Some((h_stream, true)))
    }

    fn cuMemcpyHtoDAsync_v2(dst_device: CUdeviceptr, src_host: *const c_void, byte_count: usize, h_stream: CUstream) {
        copy(dst_device, device_end, src_host as u64, host_end, byte_count, Some((h_stream, false)))
    }
    fn cuMemcpyHtoDAsync_v2_ptsz(dst_device: CUdeviceptr, src_host: *const c_void, byte_count: usize, h_stream: CUstream) {
        copy(dst_device, device_end, src_host as u64, host_end, byte_count, Some((h_stream, true)))
    }
    fn cuMemcpyHtoDAsync(dst_device: CUdeviceptrV1, src_host: *const c_void, byte_count: c_uint, h_stream: CUstream) {
        copy(dst_device as u64, device_end, src_host as u64, host_end, byte_count as usize, Some((h_stream, false)))
    }

    fn cuMemcpyDtoHAsync_v2(dst_host: *mut c_void, src_device: CUdeviceptr, byte_count: usize, h_stream: CUstream) {
        copy(dst_host as u64, host_end, src_device, device_end, byte_count, Some((h_stream, false)))
    }
    fn cuMemcpyDtoHAsync_v2_ptsz(dst_host: *mut c_void, src_device: CUdeviceptr, byte_count: usize, h_stream: CUstream) {
        copy(dst_host as u64, host_end, src_device, device_end, byte_count, Some((h_stream, true)))
    }
    fn cuMemcpyDtoHAsync(dst_host: *mut c_void, src_device: CUdeviceptrV1, byte_count: c_uint, h_stream: CUstream) {
        copy(dst_host as u64, host_end, src_device as u64, device_end, byte_count as usize, Some((h_stream, false)))
    }

    fn cuMemsetD8_v2(dst_device: CUdeviceptr, uc: u8, n: usize) {
        memset(dst_device, uc, n, None)
    }
    fn cuMemsetD8_v2_ptds(dst_device: CUdeviceptr, uc: u8, n: usize) {
        memset(dst_device, uc, n, None)
    }
    fn cuMemsetD8(dst_device: CUdeviceptrV1, uc: u8, n: c_uint) {
        memset(dst_device as u64, uc, n as usize, None)
    }

    fn cuMemsetD8Async(dst_device: CUdeviceptr, uc: u8, n: usize, h_stream: CUstream) {
        memset(dst_device, uc, n, Some((h_stream, false)))
    }
    fn cuMemsetD8Async_ptsz(dst_device: CUdeviceptr, uc: u8, n: usize, h_stream: CUstream) {
        memset(dst_device, uc, n, Some((h_stream, true)))
    }

    fn cuMemsetD16_v2(dst_device: CUdeviceptr, us: u16, n: usize) {
        memset_wide(dst_device, &us.to_ne_bytes(), n, None)
    }
    fn cuMemsetD16_v2_ptds(dst_device: CUdeviceptr, us: u16, n: usize) {
        memset_wide(dst_device, &us.to_ne_bytes(), n, None)
    }
    fn cuMemsetD16(dst_device: CUdeviceptrV1, us: u16, n: c_uint) {
        memset_wide(dst_device as u64, &us.to_ne_bytes(), n as usize, None)
    }
    fn cuMemsetD16Async(dst_device: CUdeviceptr, us: u16, n: usize, h_stream: CUstream) {
        memset_wide(dst_device, &us.to_ne_bytes(), n, Some((h_stream, false)))
    }
    fn cuMemsetD16Async_ptsz(dst_device: CUdeviceptr, us: u16, n: usize, h_stream: CUstream) {
        memset_wide(dst_device, &us.to_ne_bytes(), n, Some((h_stream, true)))
    }
    fn cuMemsetD32_v2(dst_device: CUdeviceptr, ui: u32, n: usize) {
        memset_wide(dst_device, &ui.to_ne_bytes(), n, None)
    }
    fn cuMemsetD32_v2_ptds(dst_device: CUdeviceptr, ui: u32, n: usize) {
        memset_wide(dst_device, &ui.to_ne_bytes(), n, None)
    }
    fn cuMemsetD32(dst_device: CUdeviceptrV1, ui: u32, n: c_uint) {
        memset_wide(dst_device as u64, &ui.to_ne_bytes(), n as usize, None)
    }
    fn cuMemsetD32Async(dst_device: CUdeviceptr, ui: u32, n: usize, h_stream: CUstream) {
        memset_wide(dst_device, &ui.to_ne_bytes(), n, Some((h_stream, false)))
    }
    fn cuMemsetD32Async_ptsz(dst_device: CUdeviceptr, ui: u32, n: usize, h_stream: CUstream) {
        memset_wide(dst_device, &ui.to_ne_bytes(), n, Some((h_stream, true)))
    }
    fn cuMemcpyDtoDAsync_v2(dst_device: CUdeviceptr, src_device: CUdeviceptr, byte_count: usize, h_stream: CUstream) {
        copy(dst_device, device_end, src_device, device_end, byte_count, Some((h_stream, false)))
    }
    fn cuMemcpyDtoDAsync_v2_ptsz(dst_device: CUdeviceptr, src_device: CUdeviceptr, byte_count: usize, h_stream: CUstream) {
        copy(dst_device, device_end, src_device, device_end, byte_count, Some((h_stream, true)))
    }
    fn cuMemcpyDtoDAsync(dst_device: CUdeviceptrV1, src_device: CUdeviceptrV1, byte_count: c_uint, h_stream: CUstream) {
        copy(dst_device as u64, device_end, src_device as u64, device_end, byte_count as usize, Some((h_stream, false)))
    }
}
