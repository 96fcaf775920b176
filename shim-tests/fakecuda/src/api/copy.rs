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

/// `CUDA_MEMCPY2D` (the `_v2` layout, `size_t` offsets and pitches).
#[repr(C)]
pub struct Memcpy2D {
    pub src_x: usize,
    pub src_y: usize,
    pub src_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: *mut c_void,
    pub src_pitch: usize,
    pub dst_x: usize,
    pub dst_y: usize,
    pub dst_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: *mut c_void,
    pub dst_pitch: usize,
    pub width: usize,
    pub height: usize,
}

/// `CUDA_MEMCPY2D_v1` (the 2000 ABI: 32-bit offsets, pitches and device pointers).
#[repr(C)]
pub struct Memcpy2DV1 {
    pub src_x: c_uint,
    pub src_y: c_uint,
    pub src_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptrV1,
    pub src_array: *mut c_void,
    pub src_pitch: c_uint,
    pub dst_x: c_uint,
    pub dst_y: c_uint,
    pub dst_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptrV1,
    pub dst_array: *mut c_void,
    pub dst_pitch: c_uint,
    pub width: c_uint,
    pub height: c_uint,
}

impl From<&Memcpy2DV1> for Memcpy2D {
    fn from(c: &Memcpy2DV1) -> Memcpy2D {
        Memcpy2D {
            src_x: c.src_x as usize,
            src_y: c.src_y as usize,
            src_type: c.src_type,
            src_host: c.src_host,
            src_device: c.src_device as u64,
            src_array: c.src_array,
            src_pitch: c.src_pitch as usize,
            dst_x: c.dst_x as usize,
            dst_y: c.dst_y as usize,
            dst_type: c.dst_type,
            dst_host: c.dst_host,
            dst_device: c.dst_device as u64,
            dst_array: c.dst_array,
            dst_pitch: c.dst_pitch as usize,
            width: c.width as usize,
            height: c.height as usize,
        }
    }
}

/// `CU_DEVICE_ATTRIBUTE_MAX_PITCH` of an H100.
const MAX_PITCH: usize = 2147483647;

/// One end of a 2D copy: the side checker of its memory type and the address of row 0 (arrays:
/// the fake has none, so an array end is `CUDA_ERROR_INVALID_HANDLE`).
fn end_2d(kind: c_uint, host: u64, device: u64, x: usize, y: usize, pitch: usize) -> R<(Side, u64)> {
    let (side, base): (Side, u64) = match kind {
        CU_MEMORYTYPE_HOST => (host_end, host),
        CU_MEMORYTYPE_DEVICE => (device_end, device),
        CU_MEMORYTYPE_UNIFIED => (any_end, device),
        CU_MEMORYTYPE_ARRAY => return Err(CUDA_ERROR_INVALID_HANDLE),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    let off = y.checked_mul(pitch).and_then(|o| o.checked_add(x)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    Ok((side, base.checked_add(off as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?))
}

/// `cuMemcpy2DAsync`: `height` rows of `width` bytes, each row's ends checked like a 1D copy's
/// (a pitch under the width or over MAX_PITCH is `CUDA_ERROR_INVALID_VALUE`); every row is
/// checked before any byte moves.
fn copy_2d(c: &Memcpy2D, stream: CUstream, per_thread: bool) -> R {
    let (src_side, src) = end_2d(c.src_type, c.src_host as u64, c.src_device, c.src_x, c.src_y, c.src_pitch)?;
    let (dst_side, dst) = end_2d(c.dst_type, c.dst_host as u64, c.dst_device, c.dst_x, c.dst_y, c.dst_pitch)?;
    let rows = if c.width == 0 { 0 } else { c.height };
    let pitches_ok = |pitch: usize| pitch <= MAX_PITCH && (rows <= 1 || pitch >= c.width);
    if !pitches_ok(c.src_pitch) || !pitches_ok(c.dst_pitch) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ends = with_init(|p| {
        p.stream(stream, per_thread)?;
        (0..rows)
            .map(|r| {
                let (d, s) = (dst + (r * c.dst_pitch) as u64, src + (r * c.src_pitch) as u64);
                Ok((dst_side(p, d, c.width as u64)?, src_side(p, s, c.width as u64)?))
            })
            .collect::<R<Vec<(End, End)>>>()
    })?;
    for (d, s) in ends {
        // SAFETY: as in `copy`: each real end was checked for `width` bytes.
        unsafe {
            match (d, s) {
                (End::Real(d), End::Real(s)) => std::ptr::copy(s, d, c.width),
                (End::Real(d), End::Fake) => std::ptr::write_bytes(d, 0, c.width),
                _ => {}
            }
        }
    }
    Ok(())
}

entry! {
    fn cuMemcpy2DAsync_v2(p_copy: *const Memcpy2D, h_stream: CUstream) {
        copy_2d(p_copy.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?, h_stream, false)
    }
    fn cuMemcpy2DAsync_v2_ptsz(p_copy: *const Memcpy2D, h_stream: CUstream) {
        copy_2d(p_copy.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?, h_stream, true)
    }
    fn cuMemcpy2DAsync(p_copy: *const Memcpy2DV1, h_stream: CUstream) {
        copy_2d(&p_copy.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?.into(), h_stream, false)
    }

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
