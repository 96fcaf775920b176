//! Legacy CUDA IPC (`cuIpcGetMemHandle` / `cuIpcOpenMemHandle` / `cuIpcCloseMemHandle`).
//!
//! A handle is 64 bytes: magic, machine hash, device, exporter pid, export slot, export id, base,
//! size and a checksum (little-endian, see [`encode`]). The export is also recorded in the machine
//! file so an opener can check that the allocation is still alive.

use crate::config::{machine_hash, round_up, Config};
use crate::state::{with_init, Alloc, Kind, R};
use crate::types::*;
use std::os::raw::c_uint;

/// Magic of a fake IPC handle ("FKIPC" + version 1).
const IPC_MAGIC: u64 = 0x464b_4950_4300_0001;

/// The fields of a handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    pub machine: u64,
    pub dev: u32,
    pub pid: u32,
    pub slot: u32,
    pub id: u64,
    pub base: u64,
    pub size: u64,
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0x9e37_79b9_7f4a_7c15u64, |h, b| (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3).rotate_left(5))
}

/// Encodes a handle.
pub fn encode(d: &Decoded) -> CUipcMemHandle {
    let mut b = [0u8; CU_IPC_HANDLE_SIZE];
    b[0..8].copy_from_slice(&IPC_MAGIC.to_le_bytes());
    b[8..16].copy_from_slice(&d.machine.to_le_bytes());
    b[16..20].copy_from_slice(&d.dev.to_le_bytes());
    b[20..24].copy_from_slice(&d.pid.to_le_bytes());
    b[24..28].copy_from_slice(&d.slot.to_le_bytes());
    b[32..40].copy_from_slice(&d.id.to_le_bytes());
    b[40..48].copy_from_slice(&d.base.to_le_bytes());
    b[48..56].copy_from_slice(&d.size.to_le_bytes());
    let sum = checksum(&b[..56]);
    b[56..64].copy_from_slice(&sum.to_le_bytes());
    CUipcMemHandle { reserved: b }
}

/// Decodes a handle (None for garbage: wrong magic or checksum).
pub fn decode(h: &CUipcMemHandle) -> Option<Decoded> {
    let b = &h.reserved;
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
    if u64_at(0) != IPC_MAGIC || u64_at(56) != checksum(&b[..56]) {
        return None;
    }
    Some(Decoded {
        machine: u64_at(8),
        dev: u32_at(16),
        pid: u32_at(20),
        slot: u32_at(24),
        id: u64_at(32),
        base: u64_at(40),
        size: u64_at(48),
    })
}

/// Opens a handle in the current context (the mapping costs `FAKECUDA_IPC_OPEN_MIB` on the
/// opener's device). As documented in cuda.h: opening the same handle again in the same context
/// returns the same address (reference counted), and handles of one exporting process may be
/// opened by only one context per device (another context on that device gets
/// `CUDA_ERROR_INVALID_CONTEXT`).
unsafe fn open(pdptr: *mut CUdeviceptr, handle: CUipcMemHandle, flags: c_uint) -> R {
    if pdptr.is_null() || flags & !CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let base = with_init(|p| {
        let (ctx, my_dev) = p.current()?;
        let d = decode(&handle).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if d.machine != machine_hash(&Config::get().machine) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let shm = p.shm.ok_or(CUDA_ERROR_NOT_INITIALIZED)?;
        let e = shm.lookup_export(d.slot, d.id).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if (e.pid, e.dev, e.base, e.size) != (d.pid, d.dev, d.base, d.size) || e.dev as usize >= p.devices {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        if e.pid == p.pid {
            // The real driver refuses to open a handle in the process that exported it.
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        if let Some(&base) = p.ipc_opens.get(&(d.slot, d.id, ctx)) {
            if let Some(Alloc { kind: Kind::IpcOpen { refs, .. }, .. }) = p.allocs.get_mut(&base) {
                *refs += 1;
            }
            return Ok(base);
        }
        let other_ctx_same_device = p.allocs.values().any(|a| {
            matches!(a.kind, Kind::IpcOpen { exporter, .. } if exporter == e.pid)
                && a.ctx != ctx
                && a.charge.is_some_and(|(dev, _)| dev == my_dev)
        });
        if other_ctx_same_device {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        let cost = Config::get().ipc_open_cost;
        let span = round_up(e.size).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        p.charge(my_dev, cost)?;
        let base = match p.reserve_va(e.dev as usize, span, false) {
            Ok(b) => b,
            Err(err) => {
                p.uncharge(my_dev, cost);
                return Err(err);
            }
        };
        p.allocs.insert(
            base,
            Alloc {
                base,
                size: e.size,
                span,
                dev: e.dev as usize,
                kind: Kind::IpcOpen { slot: d.slot, id: d.id, refs: 1, exporter: e.pid },
                ctx,
                charge: Some((my_dev, cost)),
                export: None,
                low: false,
            },
        );
        p.ipc_opens.insert((d.slot, d.id, ctx), base);
        Ok(base)
    })?;
    pdptr.write(base);
    Ok(())
}

entry! {
    /// Exports a `cuMemAlloc`/`cuMemAllocPitch` allocation (any pointer inside it).
    fn cuIpcGetMemHandle(p_handle: *mut CUipcMemHandle, dptr: CUdeviceptr) {
        if p_handle.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let d = with_init(|p| {
            p.current()?;
            let (pid, start, shm) = (p.pid, p.start, p.shm.ok_or(CUDA_ERROR_NOT_INITIALIZED)?);
            let a = p.find(dptr).filter(|a| matches!(a.kind, Kind::Device | Kind::Pitch)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            let (base, size, dev, export) = (a.base, a.size, a.dev as u32, a.export);
            let (slot, id) = match export {
                Some(e) => e,
                None => {
                    let e = shm.export(pid, start, dev, base, size).ok_or_else(|| {
                        crate::warn("the machine's IPC export table is full");
                        CUDA_ERROR_OUT_OF_MEMORY
                    })?;
                    if let Some(a) = p.allocs.get_mut(&base) {
                        a.export = Some(e);
                    }
                    e
                }
            };
            Ok(Decoded { machine: machine_hash(&Config::get().machine), dev, pid, slot, id, base, size })
        })?;
        p_handle.write(encode(&d));
        Ok(())
    }

    fn cuIpcOpenMemHandle_v2(pdptr: *mut CUdeviceptr, handle: CUipcMemHandle, flags: c_uint) {
        open(pdptr, handle, flags)
    }

    /// The 4010 ABI (same signature).
    fn cuIpcOpenMemHandle(pdptr: *mut CUdeviceptr, handle: CUipcMemHandle, flags: c_uint) {
        open(pdptr, handle, flags)
    }

    fn cuIpcCloseMemHandle(dptr: CUdeviceptr) {
        with_init(|p| {
            p.current()?;
            match p.allocs.get_mut(&dptr).map(|a| &mut a.kind) {
                Some(Kind::IpcOpen { refs, .. }) => {
                    *refs -= 1;
                    if *refs == 0 {
                        p.remove_alloc(dptr);
                    }
                    Ok(())
                }
                _ => Err(CUDA_ERROR_INVALID_VALUE),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_round_trip_and_garbage() {
        let d = Decoded { machine: 7, dev: 3, pid: 4242, slot: 17, id: 99, base: 0x7000_0020_0000, size: 8 << 20 };
        let h = encode(&d);
        assert_eq!(decode(&h), Some(d));
        for i in [0, 9, 17, 30, 45, 60] {
            let mut bad = h;
            bad.reserved[i] ^= 0x40;
            assert_eq!(decode(&bad), None, "byte {i} flipped");
        }
        assert_eq!(decode(&CUipcMemHandle { reserved: [0; 64] }), None);
    }
}
