//! Legacy CUDA IPC: memory (`cuIpcGetMemHandle` / `cuIpcOpenMemHandle` / `cuIpcCloseMemHandle`)
//! and events (`cuIpcGetEventHandle` / `cuIpcOpenEventHandle`).
//!
//! A memory handle is 64 bytes: magic, machine hash, device, exporter pid, export slot, export id,
//! base, size and a checksum (little-endian, see [`encode`]). The export is also recorded in the
//! machine file so an opener can check that the allocation is still alive.
//!
//! An event handle has the same layout under its own magic ([`encode_event`]): machine hash,
//! the event's device, the exporter's pid and start time, and the exporter's event handle. Work
//! on the fake completes at once, so an opened event needs nothing shared: it is a local event
//! with `CU_EVENT_DISABLE_TIMING`, as cuda.h describes what `cuIpcOpenEventHandle` returns.

use crate::config::{machine_hash, round_up, Config};
use crate::shm::process_alive;
use crate::state::{tag, with_init, Alloc, Event, Kind, R};
use crate::types::*;
use std::os::raw::{c_uint, c_void};

/// Magic of a fake IPC memory handle ("FKIPC" + version 1).
const IPC_MAGIC: u64 = 0x464b_4950_4300_0001;
/// Magic of a fake IPC event handle ("FKIPE" + version 1).
const IPC_EVENT_MAGIC: u64 = 0x464b_4950_4500_0001;
/// `CU_EVENT_DISABLE_TIMING` and `CU_EVENT_INTERPROCESS` (cuda.h `CUevent_flags`).
const EVENT_DISABLE_TIMING: c_uint = 0x2;
const EVENT_INTERPROCESS: c_uint = 0x4;

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

/// Encodes a memory handle.
pub fn encode(d: &Decoded) -> CUipcMemHandle {
    encode_with(IPC_MAGIC, d)
}

/// Decodes a memory handle (None for garbage: wrong magic or checksum).
pub fn decode(h: &CUipcMemHandle) -> Option<Decoded> {
    decode_with(IPC_MAGIC, h)
}

/// The fields of an event handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodedEvent {
    pub machine: u64,
    pub dev: u32,
    pub pid: u32,
    /// The exporter's start time (`/proc/<pid>/stat`), so a reused pid is not taken for it.
    pub start: u64,
    pub event: u64,
}

/// Encodes an event handle (same layout as a memory handle: `slot` 0, `id` the event, `base`
/// the exporter's start time).
pub fn encode_event(e: &DecodedEvent) -> CUipcEventHandle {
    encode_with(
        IPC_EVENT_MAGIC,
        &Decoded { machine: e.machine, dev: e.dev, pid: e.pid, slot: 0, id: e.event, base: e.start, size: 0 },
    )
}

/// Decodes an event handle (None for garbage, or for a memory handle).
pub fn decode_event(h: &CUipcEventHandle) -> Option<DecodedEvent> {
    let d = decode_with(IPC_EVENT_MAGIC, h)?;
    Some(DecodedEvent { machine: d.machine, dev: d.dev, pid: d.pid, start: d.base, event: d.id })
}

fn encode_with(magic: u64, d: &Decoded) -> CUipcMemHandle {
    let mut b = [0u8; CU_IPC_HANDLE_SIZE];
    b[0..8].copy_from_slice(&magic.to_le_bytes());
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

fn decode_with(magic: u64, h: &CUipcMemHandle) -> Option<Decoded> {
    let b = &h.reserved;
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
    if u64_at(0) != magic || u64_at(56) != checksum(&b[..56]) {
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
        if (e.pid, e.dev, e.base, e.size) != (d.pid, d.dev, d.base, d.size) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        // The handle names the physical device; this process may see it by another ordinal.
        let e_dev = p.ordinal_of(e.dev as usize).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
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
        let base = match p.reserve_va(e_dev, span, false) {
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
                dev: e_dev,
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
            let (base, size, dev, export) = (a.base, a.size, p.visible[a.dev] as u32, a.export);
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

    /// As cuda.h documents it: the event must have been created with `CU_EVENT_INTERPROCESS`
    /// and `CU_EVENT_DISABLE_TIMING` (otherwise `CUDA_ERROR_INVALID_VALUE`); an event this
    /// process did not create is `CUDA_ERROR_INVALID_HANDLE`.
    fn cuIpcGetEventHandle(p_handle: *mut CUipcEventHandle, event: *mut c_void) {
        if p_handle.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let e = with_init(|p| {
            let ev = p.events.get(&(event as u64)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            let need = EVENT_INTERPROCESS | EVENT_DISABLE_TIMING;
            if ev.flags & need != need {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            let dev = p.visible[p.ctx(ev.ctx)?.dev] as u32;
            Ok(DecodedEvent { machine: machine_hash(&Config::get().machine), dev, pid: p.pid, start: p.start, event: event as u64 })
        })?;
        p_handle.write(encode_event(&e));
        Ok(())
    }

    /// Opens an event handle exported by another live process of this machine into the current
    /// context: a new local event with `CU_EVENT_DISABLE_TIMING` (to be destroyed with
    /// `cuEventDestroy`). No current context: `CUDA_ERROR_INVALID_CONTEXT`; garbage, a handle of
    /// another machine or of a process that is gone: `CUDA_ERROR_INVALID_HANDLE`.
    fn cuIpcOpenEventHandle(ph_event: *mut *mut c_void, handle: CUipcEventHandle) {
        if ph_event.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = with_init(|p| {
            let (ctx, _) = p.current()?;
            let e = decode_event(&handle).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if e.machine != machine_hash(&Config::get().machine) || p.ordinal_of(e.dev as usize).is_none() {
                return Err(CUDA_ERROR_INVALID_HANDLE);
            }
            if e.pid != p.pid && !process_alive(e.pid, e.start) {
                return Err(CUDA_ERROR_INVALID_HANDLE);
            }
            let h = p.new_handle(tag::EVENT);
            p.events.insert(h, Event { ctx, flags: EVENT_DISABLE_TIMING });
            Ok(h)
        })?;
        ph_event.write(h as *mut c_void);
        Ok(())
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

    #[test]
    fn event_handle_round_trip_and_not_a_memory_handle() {
        let e = DecodedEvent { machine: 7, dev: 1, pid: 4242, start: 123_456, event: 0x0e7e_0000_0009 };
        let h = encode_event(&e);
        assert_eq!(decode_event(&h), Some(e));
        assert_eq!(decode(&h), None, "an event handle opens no memory");
        let m = encode(&Decoded { machine: 7, dev: 3, pid: 4242, slot: 17, id: 99, base: 0x7000_0020_0000, size: 8 << 20 });
        assert_eq!(decode_event(&m), None, "a memory handle is no event");
        let mut bad = h;
        bad.reserved[33] ^= 1;
        assert_eq!(decode_event(&bad), None);
    }
}
