//! Tensor Memory Access descriptors: `cuTensorMapEncodeTiled` (CUDA 12.0), which vLLM's
//! `_C_stable_libtorch.abi3.so` and `_qutlass_C` link directly (without it their import fails
//! with "undefined symbol") and Hopper GEMM libraries call on the host before a launch.
//!
//! The descriptor is opaque (cuda.h: "should only be accessed through CUDA APIs and PTX") and
//! no kernel reads it on the fake, so its 128 bytes are a deterministic packing of the
//! arguments: equal arguments give equal bytes. The arguments are checked as cuda.h 13.x
//! documents them, in its order; any violation is `CUDA_ERROR_INVALID_VALUE`.

use crate::state::{with_init, R};
use crate::types::*;
use std::os::raw::{c_int, c_void};

/// `CUtensorMap`: 16 quad-words, 64-byte aligned at least (cuda.h aligns the type to 128).
pub const TENSOR_MAP_QWORDS: usize = 16;

/// Highest `CUtensorMapDataType` (`CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B`).
const DATA_TYPE_MAX: c_int = 15;
/// `CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B`, `_16U4_ALIGN16B`, `_16U6_ALIGN16B`: packed 4- and
/// 6-bit values.
const U4_ALIGN8B: c_int = 13;
const U4_ALIGN16B: c_int = 14;
const U6_ALIGN16B: c_int = 15;
/// `CU_TENSOR_MAP_INTERLEAVE_NONE`, `_32B` (`_16B` is 1).
const INTERLEAVE_NONE: c_int = 0;
const INTERLEAVE_32B: c_int = 2;
/// `CU_TENSOR_MAP_SWIZZLE_NONE`, `_32B`, `_64B`, `_128B`, `_128B_ATOM_32B`,
/// `_128B_ATOM_32B_FLIP_8B`, `_128B_ATOM_64B`.
const SWIZZLE_NONE: c_int = 0;
const SWIZZLE_32B: c_int = 1;
const SWIZZLE_128B: c_int = 3;
const SWIZZLE_128B_ATOM_32B: c_int = 4;
const SWIZZLE_128B_ATOM_64B: c_int = 6;

/// Size of one element in half-bytes (the packed types hold 16 values in 8 or 16 bytes).
fn element_nibbles(data_type: c_int) -> u64 {
    match data_type {
        0 => 2,                        // UINT8
        1 | 6 | 9 => 4,                // UINT16, FLOAT16, BFLOAT16
        2 | 3 | 7 | 10 | 11 | 12 => 8, // UINT32, INT32, FLOAT32, FLOAT32_FTZ, TFLOAT32(_FTZ)
        4 | 5 | 8 => 16,               // UINT64, INT64, FLOAT64
        U4_ALIGN8B => 1,               // 16 x U4 in 8 bytes
        _ => 2,                        // 16 x U4 or U6 in 16 bytes
    }
}

fn is_float(data_type: c_int) -> bool {
    (6..=12).contains(&data_type)
}

/// The largest inner box, in bytes, a swizzle mode allows (`None`: no swizzle).
fn swizzle_span(swizzle: c_int) -> Option<u64> {
    match swizzle {
        SWIZZLE_32B => Some(32),
        2 => Some(64),
        3..=6 => Some(128),
        _ => None,
    }
}

/// The arguments of an encoding, read from the caller's arrays.
struct Tiled {
    data_type: c_int,
    rank: usize,
    address: u64,
    dims: Vec<u64>,
    strides: Vec<u64>,
    boxes: Vec<u32>,
    element_strides: Vec<u32>,
    interleave: c_int,
    swizzle: c_int,
    l2_promotion: c_int,
    oob_fill: c_int,
}

/// cuda.h's requirements for `cuTensorMapEncodeTiled`, in its order.
fn check(t: &Tiled) -> R {
    let bad = Err(CUDA_ERROR_INVALID_VALUE);
    let packed16 = matches!(t.data_type, U4_ALIGN16B | U6_ALIGN16B);
    if !(0..=DATA_TYPE_MAX).contains(&t.data_type) || !(0..=2).contains(&t.interleave) {
        return bad;
    }
    if t.interleave != INTERLEAVE_NONE && t.rank < 3 {
        return bad;
    }
    let align = if t.interleave == INTERLEAVE_32B || packed16 { 32 } else { 16 };
    if t.address % align != 0 {
        return bad;
    }
    if t.dims.iter().any(|&d| d == 0 || d > 1 << 31)
        || (packed16 && t.dims[0] % 128 != 0)
        || (t.data_type == U4_ALIGN8B && t.dims[0] % 2 != 0)
    {
        return bad;
    }
    let stride_align = if t.interleave == INTERLEAVE_32B || packed16 { 32 } else { 16 };
    if t.strides.iter().any(|&s| s % stride_align != 0 || s >= 1 << 40) {
        return bad;
    }
    if t.boxes.iter().any(|&b| b == 0 || b > 256) || (packed16 && t.boxes[0] != 128) {
        return bad;
    }
    let inner_nibbles = t.boxes[0] as u64 * element_nibbles(t.data_type);
    if t.interleave == INTERLEAVE_NONE && inner_nibbles % 32 != 0 {
        return bad;
    }
    if t.element_strides.iter().any(|&e| e == 0 || e > 8) {
        return bad;
    }
    if !(SWIZZLE_NONE..=SWIZZLE_128B_ATOM_64B).contains(&t.swizzle) {
        return bad;
    }
    if t.interleave == INTERLEAVE_NONE {
        if let Some(span) = swizzle_span(t.swizzle) {
            if inner_nibbles > 2 * span {
                return bad;
            }
        }
    }
    if t.interleave == INTERLEAVE_32B && t.swizzle != SWIZZLE_32B {
        return bad;
    }
    if t.data_type == U6_ALIGN16B
        && (t.interleave != INTERLEAVE_NONE
            || !matches!(t.swizzle, SWIZZLE_NONE | SWIZZLE_128B | SWIZZLE_128B_ATOM_32B | SWIZZLE_128B_ATOM_64B))
    {
        return bad;
    }
    if t.data_type == U4_ALIGN16B && !matches!(t.swizzle, SWIZZLE_NONE | SWIZZLE_128B | SWIZZLE_128B_ATOM_32B) {
        return bad;
    }
    if !(0..=3).contains(&t.l2_promotion) || !(0..=1).contains(&t.oob_fill) {
        return bad;
    }
    if t.oob_fill == 1 && !is_float(t.data_type) {
        return bad;
    }
    Ok(())
}

/// The descriptor: address; the enums; dims; strides; box and element strides as (u16, u16)
/// pairs. Unused words are zero.
fn pack(t: &Tiled) -> [u64; TENSOR_MAP_QWORDS] {
    let mut q = [0u64; TENSOR_MAP_QWORDS];
    q[0] = t.address;
    q[1] = t.data_type as u64
        | (t.rank as u64) << 8
        | (t.interleave as u64) << 16
        | (t.swizzle as u64) << 24
        | (t.l2_promotion as u64) << 32
        | (t.oob_fill as u64) << 40;
    q[2..2 + t.rank].copy_from_slice(&t.dims);
    q[7..7 + t.strides.len()].copy_from_slice(&t.strides);
    for i in 0..t.rank {
        let pair = t.boxes[i] as u64 | (t.element_strides[i] as u64) << 16;
        q[11 + i / 2] |= pair << (32 * (i % 2));
    }
    q
}

/// Reads `n` elements of a caller's array (NULL with `n > 0` is `CUDA_ERROR_INVALID_VALUE`).
///
/// # Safety
/// `p` is NULL or valid for `n` reads.
unsafe fn array<T: Copy>(p: *const T, n: usize) -> R<Vec<T>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(std::slice::from_raw_parts(p, n).to_vec())
}

entry! {
    /// A tiled-mode descriptor. In cuda.h's order: initialised, a current context, then the
    /// arguments (`tensorMap` 64-byte aligned, rank 1..=5, and each array's limits).
    fn cuTensorMapEncodeTiled(
        tensor_map: *mut c_void,
        tensor_data_type: c_int,
        tensor_rank: u32,
        global_address: *mut c_void,
        global_dim: *const u64,
        global_strides: *const u64,
        box_dim: *const u32,
        element_strides: *const u32,
        interleave: c_int,
        swizzle: c_int,
        l2_promotion: c_int,
        oob_fill: c_int,
    ) {
        with_init(|p| p.current().map(|_| ()))?;
        if tensor_map.is_null() || tensor_map as usize % 64 != 0 || !(1..=5).contains(&tensor_rank) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let rank = tensor_rank as usize;
        let t = Tiled {
            data_type: tensor_data_type,
            rank,
            address: global_address as u64,
            dims: array(global_dim, rank)?,
            strides: array(global_strides, rank - 1)?,
            boxes: array(box_dim, rank)?,
            element_strides: array(element_strides, rank)?,
            interleave,
            swizzle,
            l2_promotion,
            oob_fill,
        };
        check(&t)?;
        tensor_map.cast::<[u64; TENSOR_MAP_QWORDS]>().write(pack(&t));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bf16_2d() -> Tiled {
        Tiled {
            data_type: 9,
            rank: 2,
            address: 0x7f00_0000_0000,
            dims: vec![4096, 1024],
            strides: vec![8192],
            boxes: vec![64, 128],
            element_strides: vec![1, 1],
            interleave: INTERLEAVE_NONE,
            swizzle: SWIZZLE_128B,
            l2_promotion: 2,
            oob_fill: 0,
        }
    }

    /// A Hopper GEMM's operand (bf16, 64 x 128 box, 128-byte swizzle) passes; each documented
    /// limit, broken alone, is refused.
    #[test]
    fn documented_limits() {
        assert_eq!(check(&bf16_2d()), Ok(()));
        let refused: &[(&str, fn(&mut Tiled))] = &[
            ("data type", |t| t.data_type = 16),
            ("address 16-aligned", |t| t.address += 8),
            ("dim 0", |t| t.dims[1] = 0),
            ("dim 2^31", |t| t.dims[0] = (1 << 31) + 1),
            ("stride multiple of 16", |t| t.strides[0] = 8200),
            ("stride < 2^40", |t| t.strides[0] = 1 << 40),
            ("box 256", |t| t.boxes[1] = 257),
            ("inner box bytes multiple of 16", |t| t.boxes[0] = 4),
            ("inner box within the swizzle", |t| t.boxes[0] = 128),
            ("element stride 8", |t| t.element_strides[1] = 9),
            ("element stride 0", |t| t.element_strides[0] = 0),
            ("interleave needs rank 3", |t| t.interleave = 1),
            ("swizzle", |t| t.swizzle = 7),
            ("l2 promotion", |t| t.l2_promotion = 4),
            ("oob fill", |t| t.oob_fill = 2),
            ("NaN fill of integers", |t| {
                t.data_type = 1;
                t.oob_fill = 1
            }),
        ];
        for (what, f) in refused {
            let mut t = bf16_2d();
            f(&mut t);
            assert_eq!(check(&t), Err(CUDA_ERROR_INVALID_VALUE), "{what}");
        }
        let mut t = bf16_2d();
        t.oob_fill = 1;
        assert_eq!(check(&t), Ok(()), "NaN fill of bf16");
    }

    #[test]
    fn packing_is_deterministic_and_keeps_the_address() {
        let (a, b) = (pack(&bf16_2d()), pack(&bf16_2d()));
        assert_eq!(a, b);
        assert_eq!(a[0], 0x7f00_0000_0000);
        let mut t = bf16_2d();
        t.boxes[1] = 64;
        assert_ne!(pack(&t), a);
    }
}
