//! Memory pools: where each pool's allocations reside, learnt when a pool is created or
//! looked up. `cuMemAllocFromPoolAsync` allocates on the POOL's location, not on the
//! current device (cuda.h), and the driver offers no query for a pool's location.

use super::on_success;
use crate::hooks::table::*;
use crate::hooks::types::*;
use crate::ledger::PoolPlace;
use libc::c_int;

/// `cuMemPoolCreate`: the pool's allocations reside at `props->location`.
pub unsafe fn cu_mem_pool_create(
    sym: Sym,
    real: cuMemPoolCreate::Real,
    pool: *mut CUmemoryPool,
    props: *const CUmemPoolPropsHead,
) -> c_int {
    let location = props.as_ref().map(|p| p.location);
    on_success(
        sym,
        || real(pool, props),
        |l| {
            if let (Some(p), Some(loc)) = (pool.as_ref(), location) {
                let place =
                    if loc.type_ == CU_MEM_LOCATION_TYPE_DEVICE { PoolPlace::Device(loc.id) } else { PoolPlace::Host };
                l.pool_place(*p as u64, place);
            }
        },
    )
}

pub unsafe fn cu_mem_pool_destroy(sym: Sym, real: cuMemPoolDestroy::Real, pool: CUmemoryPool) -> c_int {
    on_success(sym, || real(pool), |l| l.pool_destroyed(pool as u64))
}

/// `cuDeviceGetDefaultMemPool` / `cuDeviceGetMemPool`: a pool of device `dev`.
pub unsafe fn cu_device_get_mem_pool(
    sym: Sym,
    real: cuDeviceGetMemPool::Real,
    pool: *mut CUmemoryPool,
    dev: CUdevice,
) -> c_int {
    on_success(
        sym,
        || real(pool, dev),
        |l| {
            if let Some(p) = pool.as_ref() {
                l.pool_place(*p as u64, PoolPlace::Device(dev));
            }
        },
    )
}
