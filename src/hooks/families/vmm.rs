//! Virtual memory management: `cuMemCreate` is physical memory on `prop.location.id`,
//! live while a handle reference (`cuMemCreate`, `cuMemRetainAllocationHandle`) or a
//! mapping remains; maps tie virtual ranges to handles so pointer lookups work.

use super::{api, on_success, out, undoable};
use crate::hooks::real::current_device;
use crate::hooks::table::*;
use crate::hooks::types::*;
use crate::hooks::{record, Depth};
use libc::c_int;

pub unsafe fn cu_mem_create(
    sym: Sym,
    real: cuMemCreate::Real,
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationPropHead,
    flags: u64,
) -> c_int {
    let depth = Depth::enter();
    let rc = real(handle, size, prop, flags);
    if !depth.outer || prop.is_null() {
        return rc;
    }
    let location = (*prop).location;
    let name = api(sym);
    let wanted = location.type_ == CU_MEM_LOCATION_TYPE_DEVICE && (rc != 0 || crate::sites::wanted(size as u64));
    let (site, repeated) = match wanted {
        true if rc == 0 => crate::sites::capture_alloc(sym as usize),
        true => (crate::sites::capture(), false),
        false => (0, false),
    };
    let tag = depth.tag();
    let mut failed = false;
    depth.record(name, |l| {
        if location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
            // Host-located VMM memory (NCCL's ncclCuMemHostAlloc) is host memory, not device memory.
            if let (0, Some(h)) = (rc, out(handle)) {
                l.host_vmm_create(h, size as u64, name);
            }
            return;
        }
        let dev = if location.id >= 0 { Some(location.id) } else { super::charged(l, current_device(sym)) };
        let Some(dev) = dev else { return };
        if rc == 0 {
            if let Some(h) = out(handle) {
                let facts = crate::ledger::Facts { tag, site, ..Default::default() };
                l.vmm_create_site(dev, h, size as u64, name, facts, repeated);
            }
        } else {
            l.failure_at(dev, name, size as u64, rc, error_name(TABLE[sym as usize].kind, rc), site);
            failed = true;
        }
    });
    if failed {
        // On disk before the call returns (`report::failed_allocation`).
        crate::report::failed_allocation();
    }
    rc
}

/// One handle reference dropped: the memory goes only when no reference and no mapping
/// is left (recorded before the call, undone if it fails).
pub unsafe fn cu_mem_release(sym: Sym, real: cuMemRelease::Real, handle: CUmemGenericAllocationHandle) -> c_int {
    undoable(sym, |l| l.vmm_release_begin(handle), || real(handle), |l, _, u| l.vmm_undo(u))
}

/// `cuMemRetainAllocationHandle`: one more reference to the handle mapped at `addr`.
pub unsafe fn cu_mem_retain_allocation_handle(
    sym: Sym,
    real: cuMemRetainAllocationHandle::Real,
    handle: *mut CUmemGenericAllocationHandle,
    addr: VoidPtr,
) -> c_int {
    on_success(
        sym,
        || real(handle, addr),
        |l| {
            if let Some(h) = out(handle) {
                l.vmm_retain(h);
            }
        },
    )
}

pub unsafe fn cu_mem_map(
    sym: Sym,
    real: cuMemMap::Real,
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> c_int {
    on_success(sym, || real(ptr, size, offset, handle, flags), |l| l.vmm_map(ptr, size as u64, offset as u64, handle))
}

/// Mappings removed (recorded before the call, undone if it fails): the memory of a
/// released handle goes with its last mapping.
pub unsafe fn cu_mem_unmap(sym: Sym, real: cuMemUnmap::Real, ptr: CUdeviceptr, size: usize) -> c_int {
    let mut nothing = false;
    let begin = |l: &crate::ledger::Ledger| {
        let u = l.vmm_unmap_begin(ptr, size as u64);
        nothing = u.unmapped_nothing();
        Some(u)
    };
    let rc = undoable(sym, begin, || real(ptr, size), |l, _, u| l.vmm_undo(u));
    if rc == 0 && nothing {
        record(api(sym), |l| l.vmm_unmapped_nothing(ptr, size as u64));
    }
    rc
}

pub unsafe fn cu_mem_export_to_shareable_handle(
    sym: Sym,
    real: cuMemExportToShareableHandle::Real,
    shareable: VoidPtr,
    handle: CUmemGenericAllocationHandle,
    handle_type: c_int,
    flags: u64,
) -> c_int {
    on_success(
        sym,
        || real(shareable, handle, handle_type, flags),
        |l| {
            l.vmm_export_by(handle, api(sym));
        },
    )
}
