//! Occupancy of the simulated SM, as an H100's resources give it (ctx.rs's device attributes:
//! 132 SMs in 8 GPCs, 2048 threads and 32 blocks per SM, 233472 bytes of shared memory per SM of which
//! 1024 are reserved per block, 232448 opt-in per block). cuBLASLt asks
//! `cuOccupancyAvailableDynamicSMemPerBlock` in `cublasLtCtxInit` (its runtime answers
//! `cudaErrorCallRequiresNewerDriver` when the driver does not resolve it, and `cublasCreate`
//! fails) and `cuOccupancyMaxActiveClusters` for its cluster kernels.

use crate::api::ctx::attribute;
use crate::api::exec::{attribute_owner, function_value, launchable, CUlaunchConfig};
use crate::api::exec::{FUNC_MAX_DYNAMIC_SHARED, FUNC_NON_PORTABLE_CLUSTER};
use crate::out;
use crate::state::with_init;
use crate::types::*;
use std::os::raw::{c_int, c_uint, c_void};

/// `CU_DEVICE_ATTRIBUTE_*` numbers read here.
const MAX_THREADS_PER_MULTIPROCESSOR: c_int = 39;
const MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: c_int = 81;
const MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: c_int = 97;
const MAX_BLOCKS_PER_MULTIPROCESSOR: c_int = 106;
const RESERVED_SHARED_MEMORY_PER_BLOCK: c_int = 111;
/// A function's thread limit (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`, exec.rs).
const FUNCTION_MAX_THREADS: u64 = 1024;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
const LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: c_int = 4;
/// The largest portable cluster, and the largest a function with
/// NON_PORTABLE_CLUSTER_SIZE_ALLOWED set may use on sm_90.
const PORTABLE_CLUSTER_MAX: u64 = 8;
const NON_PORTABLE_CLUSTER_MAX: u64 = 16;
/// SMs per GPC: a cluster's blocks run in one GPC. An H100 SXM's 132 SMs as 8 GPCs (two of
/// 18, six of 16); clusters of 2 then number 66, as on the real device.
const GPCS: [u64; 8] = [18, 18, 16, 16, 16, 16, 16, 16];

fn attr(a: c_int) -> u64 {
    attribute(a).max(0) as u64
}

/// Blocks of `threads` threads using `smem` bytes of shared memory each that fit on one SM.
fn blocks_per_sm(threads: u64, smem: u64) -> u64 {
    let by_threads = attr(MAX_THREADS_PER_MULTIPROCESSOR) / threads.max(1);
    let by_smem = attr(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) / (smem + attr(RESERVED_SHARED_MEMORY_PER_BLOCK));
    by_threads.min(by_smem).min(attr(MAX_BLOCKS_PER_MULTIPROCESSOR))
}

/// `CUlaunchAttribute`: an id padded to 8 bytes and a 64-byte value.
#[repr(C)]
struct LaunchAttribute {
    id: c_int,
    pad: [u8; 4],
    value: [c_uint; 16],
}

entry! {
    /// The most dynamic shared memory each of `num_blocks` blocks of `block_size` threads can
    /// have on one SM (0 when that many blocks do not fit at all): the SM's shared memory split
    /// between the blocks less each block's reserved 1 KiB, at most the per-block opt-in limit
    /// (the fake's functions have no static shared memory).
    fn cuOccupancyAvailableDynamicSMemPerBlock(dynamic_smem_size: *mut usize, func: *mut c_void, num_blocks: c_int, block_size: c_int) {
        with_init(|p| {
            p.current()?;
            launchable(p, func)
        })?;
        if num_blocks <= 0 || block_size <= 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (n, threads) = (num_blocks as u64, block_size as u64);
        let fits = threads <= FUNCTION_MAX_THREADS
            && n * threads <= attr(MAX_THREADS_PER_MULTIPROCESSOR)
            && n <= attr(MAX_BLOCKS_PER_MULTIPROCESSOR);
        let per_block = (attr(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) / n).saturating_sub(attr(RESERVED_SHARED_MEMORY_PER_BLOCK));
        let avail = if fits { per_block.min(attr(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)) } else { 0 };
        out(dynamic_smem_size, avail as usize)
    }

    /// Clusters of the configured cluster size that the device holds at once: each GPC's blocks
    /// (by the block's threads and dynamic shared memory) grouped by cluster. The cluster size
    /// must be in the launch attributes (the fake's functions have none compiled in), at most 8
    /// blocks, or 16 where the function allows non-portable sizes, else
    /// `CUDA_ERROR_INVALID_CLUSTER_SIZE`; the dynamic shared memory at most the function's
    /// MAX_DYNAMIC_SHARED_SIZE_BYTES.
    fn cuOccupancyMaxActiveClusters(num_clusters: *mut c_int, func: *mut c_void, config: *const CUlaunchConfig) {
        let c = config.as_ref().ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let (max_dynamic, non_portable) = with_init(|p| {
            p.stream(c.h_stream, false)?;
            let owner = attribute_owner(p, func)?;
            Ok((function_value(p, owner, FUNC_MAX_DYNAMIC_SHARED)?, function_value(p, owner, FUNC_NON_PORTABLE_CLUSTER)?))
        })?;
        if num_clusters.is_null() || (c.num_attrs > 0 && c.attrs.is_null()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let attrs = if c.num_attrs == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(c.attrs.cast::<LaunchAttribute>(), c.num_attrs as usize)
        };
        let dims = attrs.iter().rev().find(|a| a.id == LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION).map(|a| a.value);
        let size = match dims {
            Some([x, y, z, ..]) if x > 0 && y > 0 && z > 0 => x as u64 * y as u64 * z as u64,
            _ => return Err(CUDA_ERROR_INVALID_CLUSTER_SIZE),
        };
        let max = if non_portable == 1 { NON_PORTABLE_CLUSTER_MAX } else { PORTABLE_CLUSTER_MAX };
        if size > max {
            return Err(CUDA_ERROR_INVALID_CLUSTER_SIZE);
        }
        let threads = c.dims[3] as u64 * c.dims[4] as u64 * c.dims[5] as u64;
        if threads == 0 || threads > FUNCTION_MAX_THREADS || c.shared_mem_bytes as u64 > max_dynamic.max(0) as u64 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let per_sm = blocks_per_sm(threads, c.shared_mem_bytes as u64);
        let clusters: u64 = GPCS.iter().map(|sms| sms * per_sm / size).sum();
        out(num_clusters, clusters as c_int)
    }
}
