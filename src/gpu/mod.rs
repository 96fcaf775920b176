//! What the driver and NVML say about the physical GPUs this process used, asked by the
//! report writer on the flush thread and never by a hook: each device's UUID and PCI bus id
//! (once per ordinal, `cuDeviceGetUuid_v2` / `cuDeviceGetPCIBusId`, context-free), and the
//! whole device's memory now (NVML, `nvmlDeviceGetMemoryInfo_v2` and
//! `nvmlDeviceGetComputeRunningProcesses_v3`, by UUID, at every write). `untracked_bytes` is
//! then worked out from the freshest of NVML's reading and the program's last query.
//!
//! The final write asks nothing of the driver: a signal may have stopped a program thread
//! inside a driver call, holding the driver's lock, while it waits for that write. So every
//! device the process sees is named by [`prepare`], on the flush thread when it starts (with
//! any look-up: one takes the loader's lock, which that waiting thread may hold too), and the
//! periodic writes name any seen later. NVML (`libnvidia-ml.so.1`) is opened there too, and
//! read at every periodic write and at a normal exit, never at a write a signal asked for
//! (or an exec's). Where it cannot be opened the query-based figure stays, marked
//! `untracked_source = "query"`, and one debug line says so.

mod nvml;

use culedger_format::report as fmt;
use once_cell::sync::OnceCell;

/// Ordinals whose identity is kept (the ledger's devices are fewer).
const ORDINALS: usize = 64;

/// What names one ordinal's device.
struct Named {
    /// `GPU-...`, or `MIG-...` for a MIG device.
    uuid: String,
    pci_bus_id: String,
    /// A MIG device's GPU (`GPU-...`).
    parent_uuid: Option<String>,
}

#[allow(clippy::declare_interior_mutable_const)]
const UNKNOWN: OnceCell<Named> = OnceCell::new();
/// Each ordinal's device, once the driver told it.
static IDENTITY: [OnceCell<Named>; ORDINALS] = [UNKNOWN; ORDINALS];

/// A MIG device's index among its GPU's, once NVML told it (-1: not yet).
static MIG_INDEX: [std::sync::atomic::AtomicI64; ORDINALS] =
    [const { std::sync::atomic::AtomicI64::new(-1) }; ORDINALS];

/// A MIG device's GPU instance id, once NVML told it (-1: not yet).
static GPU_INSTANCE: [std::sync::atomic::AtomicI64; ORDINALS] =
    [const { std::sync::atomic::AtomicI64::new(-1) }; ORDINALS];

/// The highest NVML-based `untracked_bytes` written per ordinal (the ledger keeps only the
/// query-based maximum).
static UNTRACKED_MAX: [std::sync::atomic::AtomicI64; ORDINALS] =
    [const { std::sync::atomic::AtomicI64::new(i64::MIN) }; ORDINALS];

/// NVML's index of each ordinal's device, once read (-1: not yet).
static HOST_INDEX: [std::sync::atomic::AtomicI64; ORDINALS] =
    [const { std::sync::atomic::AtomicI64::new(-1) }; ORDINALS];

/// The device's used bytes at the reading last written per ordinal (-1: none).
static LAST_USED: [std::sync::atomic::AtomicI64; ORDINALS] =
    [const { std::sync::atomic::AtomicI64::new(-1) }; ORDINALS];

/// The ordinals a report has held (its devices), whose usage a write should keep current.
static IN_REPORT: [std::sync::atomic::AtomicBool; ORDINALS] =
    [const { std::sync::atomic::AtomicBool::new(false) }; ORDINALS];

/// A UUID as nvidia-smi writes it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_string(u: &[u8; 16]) -> String {
    format!("GPU-{}", uuid_hex(u))
}

fn uuid_hex(u: &[u8; 16]) -> String {
    let h = |r: std::ops::Range<usize>| u[r].iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("{}-{}-{}-{}-{}", h(0..4), h(4..6), h(6..8), h(8..10), h(10..16))
}

/// How a device is named from what the driver said: a MIG device (its `_v2` UUID is not its
/// GPU's, which the version before MIG UUIDs gives) is `MIG-...` with its GPU as parent.
fn named(id: crate::hooks::real::Identity) -> Named {
    match id.gpu_uuid {
        Some(gpu) if gpu != id.uuid => Named {
            uuid: format!("MIG-{}", uuid_hex(&id.uuid)),
            pci_bus_id: id.pci_bus_id,
            parent_uuid: Some(uuid_string(&gpu)),
        },
        _ => Named { uuid: uuid_string(&id.uuid), pci_bus_id: id.pci_bus_id, parent_uuid: None },
    }
}

/// On the flush thread, when it starts: name every device the process sees, and open NVML
/// (see the module's note).
pub fn prepare() {
    let count = crate::hooks::real::device_count();
    if let Some(c) = count {
        VISIBLE.store(i64::from(c), std::sync::atomic::Ordering::Relaxed);
    }
    let n = count.unwrap_or(0).clamp(0, ORDINALS as i32);
    for ordinal in 0..n as usize {
        identity(ordinal, true);
    }
    nvml::get(true);
}

/// How many devices the process sees (`cuDeviceGetCount` when the flush thread started; -1:
/// not asked, or the driver could not say).
static VISIBLE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(-1);

/// The devices the process sees, once the flush thread asked the driver.
pub fn visible_devices() -> Option<i64> {
    let n = VISIBLE.load(std::sync::atomic::Ordering::Relaxed);
    (n >= 0).then_some(n)
}

/// When a write is made, which decides what it may ask (see the module's note).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// A periodic write: anything.
    Periodic,
    /// The final write of a process that exits normally: the driver, and NVML if already open.
    Exit,
    /// A write a signal or an exec asked for: nothing, what is known already.
    Urgent,
}

/// Ordinal `ordinal`'s device, asked of the driver when `ask` and not known yet.
fn identity(ordinal: usize, ask: bool) -> Option<&'static Named> {
    let cell = IDENTITY.get(ordinal)?;
    if cell.get().is_none() && ask {
        if let Some(id) = crate::hooks::real::device_identity(ordinal as i32, true) {
            let _ = cell.set(named(id));
        }
    }
    cell.get()
}

/// Adds each rendered device's identity and NVML's reading, and works `untracked_bytes` out
/// from the freshest figure. `now_us`: microseconds since the process started.
pub fn annotate(devices: &mut [fmt::Device], now_us: i64, when: When) {
    for d in devices.iter_mut() {
        let Ok(ordinal) = usize::try_from(d.index) else { continue };
        if ordinal >= ORDINALS {
            continue;
        }
        IN_REPORT[ordinal].store(true, std::sync::atomic::Ordering::Relaxed);
        // A normal exit may ask the driver (no thread is stopped inside it); only a write a
        // signal, an exec or a failed allocation asked for may not.
        if let Some(n) = identity(ordinal, when != When::Urgent) {
            d.uuid = Some(n.uuid.clone());
            d.pci_bus_id = Some(n.pci_bus_id.clone());
            d.parent_uuid = n.parent_uuid.clone();
        }
        let nvml = match when {
            When::Periodic => nvml::get(true),
            When::Exit => nvml::get(false),
            When::Urgent => None,
        };
        let reading = match (&d.uuid, nvml) {
            (Some(uuid), Some(n)) => n.read(uuid),
            _ => None,
        };
        if let Some(r) = reading {
            if let Some(i) = r.index {
                HOST_INDEX[ordinal].store(i64::from(i), std::sync::atomic::Ordering::Relaxed);
            }
            if let Some(i) = r.mig_index {
                MIG_INDEX[ordinal].store(i64::from(i), std::sync::atomic::Ordering::Relaxed);
            }
            if let Some(i) = r.gpu_instance_id {
                GPU_INSTANCE[ordinal].store(i64::from(i), std::sync::atomic::Ordering::Relaxed);
            }
            LAST_USED[ordinal].store(i64::try_from(r.used).unwrap_or(i64::MAX), std::sync::atomic::Ordering::Relaxed);
            apply(d, ordinal, r, now_us);
        }
        let index = HOST_INDEX[ordinal].load(std::sync::atomic::Ordering::Relaxed);
        d.host_index = (index >= 0).then_some(index);
        let mig = MIG_INDEX[ordinal].load(std::sync::atomic::Ordering::Relaxed);
        d.mig_index = (mig >= 0).then_some(mig);
        let gi = GPU_INSTANCE[ordinal].load(std::sync::atomic::Ordering::Relaxed);
        d.gpu_instance_id = (gi >= 0).then_some(gi);
    }
}

/// Whether NVML reads another used figure now than the last write recorded, for a device of
/// the report (the flush thread, between writes; never opens NVML).
pub fn usage_changed() -> bool {
    let Some(n) = nvml::get(false) else { return false };
    (0..ORDINALS).filter(|o| IN_REPORT[*o].load(std::sync::atomic::Ordering::Relaxed)).any(|ordinal| {
        let last = LAST_USED[ordinal].load(std::sync::atomic::Ordering::Relaxed);
        let uuid = IDENTITY[ordinal].get().map(|n| &n.uuid);
        // A device named but never read in a write (its writes were all urgent ones) counts
        // as changed: its first reading is due.
        match uuid {
            Some(u) => n.read(u).is_some_and(|r| i64::try_from(r.used).unwrap_or(i64::MAX) != last),
            None => false,
        }
    })
}

/// One NVML reading of a device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// NVML's index of the device (nvidia-smi's; a MIG device's GPU's), when it could say.
    pub index: Option<u32>,
    /// A MIG device's index among its GPU's.
    pub mig_index: Option<u32>,
    /// A MIG device's GPU instance id.
    pub gpu_instance_id: Option<u32>,
    pub used: u64,
    pub total: u64,
    /// (pid, bytes) of every process NVML lists on the device; None when it could not list them.
    pub processes: Option<Vec<(u32, u64)>>,
}

/// Records reading `r` of ordinal `ordinal` in `d`, taken at `now_us`: `usage`, and
/// `untracked_bytes` from it (NVML's reading is always fresher than the program's last query).
fn apply(d: &mut fmt::Device, ordinal: usize, r: Reading, now_us: i64) {
    let n = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    let pid = std::process::id();
    let process_bytes = r.processes.as_ref().map(|ps| ps.iter().filter(|(p, _)| *p == pid).map(|(_, b)| n(*b)).sum());
    d.usage = Some(fmt::Usage {
        source: "nvml".into(),
        t_ms: now_us / 1000,
        t_us: now_us,
        used_bytes: n(r.used),
        total_bytes: n(r.total),
        process_bytes,
        processes: r
            .processes
            .unwrap_or_default()
            .into_iter()
            .map(|(pid, b)| fmt::UsageProcess { pid: i64::from(pid), used_bytes: n(b) })
            .collect(),
    });
    if d.total_bytes.is_none() {
        d.total_bytes = Some(n(r.total));
    }
    let untracked = n(r.used).saturating_sub(d.live_bytes);
    d.untracked_bytes = Some(untracked);
    d.untracked_source = Some("nvml".into());
    d.untracked_t_us = Some(now_us);
    let max = &UNTRACKED_MAX[ordinal];
    let highest = max.fetch_max(untracked, std::sync::atomic::Ordering::Relaxed).max(untracked);
    d.untracked_max_bytes = Some(d.untracked_max_bytes.map_or(highest, |m| m.max(highest)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_text_is_nvidia_smi_s() {
        let u = [0x8f, 0x2e, 0x1a, 0x0b, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0, 1, 2, 3, 4, 0xff];
        assert_eq!(uuid_string(&u), "GPU-8f2e1a0b-1122-3344-5566-0001020304ff");
    }

    #[test]
    fn a_mig_device_is_named_apart_from_its_gpu() {
        use crate::hooks::real::Identity;
        let gpu = [1u8; 16];
        let mut mig = gpu;
        mig[9] = 7;
        let n = named(Identity { uuid: mig, gpu_uuid: Some(gpu), pci_bus_id: "00000000:01:00.0".into() });
        assert_eq!(n.uuid, "MIG-01010101-0101-0101-0107-010101010101");
        assert_eq!(n.parent_uuid.as_deref(), Some("GPU-01010101-0101-0101-0101-010101010101"));
        let n = named(Identity { uuid: gpu, gpu_uuid: Some(gpu), pci_bus_id: String::new() });
        assert_eq!((n.uuid.as_str(), n.parent_uuid), ("GPU-01010101-0101-0101-0101-010101010101", None));
        let n = named(Identity { uuid: gpu, gpu_uuid: None, pci_bus_id: String::new() });
        assert!(n.uuid.starts_with("GPU-") && n.parent_uuid.is_none(), "a driver without the old entry point");
    }

    #[test]
    fn a_reading_makes_untracked_current() {
        let mut d = fmt::Device {
            index: 3,
            live_bytes: 100 << 20,
            untracked_bytes: Some(10 << 20),
            untracked_max_bytes: Some(10 << 20),
            untracked_source: Some("query".into()),
            untracked_t_us: Some(1_000),
            ..Default::default()
        };
        let pid = std::process::id();
        let r = Reading {
            index: Some(3),
            mig_index: None,
            gpu_instance_id: None,
            used: 900 << 20,
            total: 1 << 30,
            processes: Some(vec![(pid, 612 << 20), (1, 288 << 20)]),
        };
        apply(&mut d, 3, r, 5_000_000);
        assert_eq!(
            d.untracked_bytes,
            Some(800 << 20),
            "everything used on the device now, less what this process tracks"
        );
        assert_eq!((d.untracked_source.as_deref(), d.untracked_t_us), (Some("nvml"), Some(5_000_000)));
        assert_eq!(d.untracked_max_bytes, Some(800 << 20));
        assert_eq!(d.total_bytes, Some(1 << 30));
        let u = d.usage.as_ref().unwrap();
        assert_eq!((u.t_ms, u.used_bytes, u.process_bytes, u.processes.len()), (5_000, 900 << 20, Some(612 << 20), 2));
        // A later, lower reading keeps the highest.
        apply(&mut d, 3, Reading { index: None, mig_index: None, gpu_instance_id: None, used: 200 << 20, total: 1 << 30, processes: None }, 6_000_000);
        assert_eq!((d.untracked_bytes, d.untracked_max_bytes), (Some(100 << 20), Some(800 << 20)));
        assert_eq!(d.usage.as_ref().unwrap().process_bytes, None);
    }
}
