//! The machine-wide shared state of one simulated machine: a small file in `/dev/shm` mapped by every
//! process of the machine (`/dev/shm/fakecuda-<FAKECUDA_MACHINE>`).
//!
//! Layout (all fields little-endian atomics, see [`Layout`]): a header with the device count and
//! per-device totals, the machine-wide used bytes per device, a table of [`PROC_SLOTS`] process
//! slots (pid, start time, bytes this process has charged per device) and a table of [`IPC_SLOTS`]
//! exported IPC allocations. Reservations are compare-exchange loops on the per-device used counter,
//! so a reservation that would exceed the device's total fails atomically.
//!
//! Like the real driver, memory of a process that dies is given back: any process attaching, or
//! failing an allocation, or querying `cuMemGetInfo`, sweeps the slots of processes that no longer
//! run (pid gone, zombie, or pid reused: start time differs) and releases their usage.

use crate::config::{Config, MAX_DEVICES};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::sync::OnceLock;

/// Process slots per machine (processes attached at the same time).
pub const PROC_SLOTS: usize = 256;
/// Exported IPC allocations tracked per machine at the same time.
pub const IPC_SLOTS: usize = 4096;
/// Layout magic: "FKCUDA" + layout version 1.
const MAGIC: u64 = 0x4643_5544_414b_0001;
/// `pid` value of a slot being claimed or reclaimed.
const BUSY: u32 = u32::MAX;
/// `id` value of an IPC slot being written.
const WRITING: u64 = u64::MAX;

/// One attached process.
#[repr(C)]
pub struct ProcSlot {
    pub pid: AtomicU32,
    _pad: u32,
    pub start: AtomicU64,
    pub used: [AtomicU64; MAX_DEVICES],
}

/// One exported IPC allocation (`id == 0`: free).
#[repr(C)]
pub struct IpcSlot {
    pub id: AtomicU64,
    pub pid: AtomicU32,
    pub dev: AtomicU32,
    pub start: AtomicU64,
    pub base: AtomicU64,
    pub size: AtomicU64,
}

/// The whole shared file.
#[repr(C)]
pub struct Layout {
    magic: AtomicU64,
    state: AtomicU32,
    devices: AtomicU32,
    total: [AtomicU64; MAX_DEVICES],
    used: [AtomicU64; MAX_DEVICES],
    next_ipc_id: AtomicU64,
    procs: [ProcSlot; PROC_SLOTS],
    ipc: [IpcSlot; IPC_SLOTS],
}

/// A decoded IPC export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpcExport {
    pub slot: u32,
    pub id: u64,
    pub pid: u32,
    pub dev: u32,
    pub base: u64,
    pub size: u64,
}

/// The mapped machine.
pub struct Shm {
    map: &'static Layout,
    pub machine: String,
}

/// Returns the machine of this process, mapping it on first use (None, after one warning, if the
/// file cannot be created or mapped).
pub fn machine() -> Option<&'static Shm> {
    static SHM: OnceLock<Option<Shm>> = OnceLock::new();
    SHM.get_or_init(|| match Shm::open(Config::get()) {
        Ok(s) => Some(s),
        Err(e) => {
            crate::warn(&format!("cannot map the machine file {}: {e}", Config::get().shm_path()));
            None
        }
    })
    .as_ref()
}

impl Shm {
    fn open(cfg: &Config) -> std::io::Result<Shm> {
        use std::ffi::CString;
        let path = CString::new(cfg.shm_path()).map_err(|_| std::io::Error::other("bad path"))?;
        let size = std::mem::size_of::<Layout>();
        // SAFETY: plain POSIX calls on a path we own; the mapping is checked and never unmapped.
        let map = unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC, 0o666);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut st: libc::stat = std::mem::zeroed();
            let short = libc::fstat(fd, &mut st) != 0 || (st.st_size as usize) < size;
            if short && libc::ftruncate(fd, size as libc::off_t) != 0 {
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                return Err(e);
            }
            let p = libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            libc::close(fd);
            if p == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            &*(p as *const Layout)
        };
        let shm = Shm { map, machine: cfg.machine.clone() };
        shm.initialise(cfg);
        Ok(shm)
    }

    /// First process writes the header; the others wait for it (and take over if it died midway).
    fn initialise(&self, cfg: &Config) {
        let m = self.map;
        if m.state.compare_exchange(0, 1, AcqRel, Acquire).is_ok() {
            self.write_header(cfg);
        } else {
            let t0 = std::time::Instant::now();
            while m.state.load(Acquire) != 2 {
                if t0.elapsed() > std::time::Duration::from_secs(2) {
                    crate::warn("machine file initialisation stalled; re-initialising it");
                    self.write_header(cfg);
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        if m.magic.load(Acquire) != MAGIC {
            crate::warn("machine file has an unknown layout; resetting it");
            self.reset(cfg);
        } else if cfg.reset {
            self.reset(cfg);
        } else if self.devices() != cfg.devices || self.total(0) != cfg.total {
            crate::warn(&format!(
                "machine {} was created with {} devices of {} MiB; ignoring this process's FAKECUDA_DEVICES/FAKECUDA_TOTAL_MIB",
                cfg.machine,
                self.devices(),
                self.total(0) >> 20
            ));
        }
    }

    fn write_header(&self, cfg: &Config) {
        let m = self.map;
        m.devices.store(cfg.devices as u32, Release);
        for (slot, t) in m.total.iter().enumerate() {
            // A MIG device's slot holds its share of its GPU (config.rs, `Mig`).
            let total = match cfg.mig.of_slot(slot, cfg.devices) {
                Some((_, _, n)) => crate::config::Mig::total(cfg.total, n),
                None => cfg.total,
            };
            t.store(total, Release);
        }
        m.magic.store(MAGIC, Release);
        m.state.store(2, Release);
    }

    /// `FAKECUDA_RESET=1`: forget every process's usage and every IPC export of this machine.
    fn reset(&self, cfg: &Config) {
        let m = self.map;
        for u in &m.used {
            u.store(0, Release);
        }
        for p in m.procs.iter() {
            p.pid.store(0, Release);
            p.start.store(0, Release);
            p.used.iter().for_each(|u| u.store(0, Release));
        }
        for s in m.ipc.iter() {
            s.id.store(0, Release);
        }
        self.write_header(cfg);
    }

    pub fn devices(&self) -> usize {
        (self.map.devices.load(Acquire) as usize).clamp(1, MAX_DEVICES)
    }

    pub fn total(&self, dev: usize) -> u64 {
        self.map.total[dev].load(Acquire)
    }

    pub fn used(&self, dev: usize) -> u64 {
        self.map.used[dev].load(Acquire)
    }

    /// Claims a process slot for `pid` (after sweeping dead processes). None if the table is full.
    pub fn attach(&self, pid: u32, start: u64) -> Option<usize> {
        self.sweep();
        for (i, s) in self.map.procs.iter().enumerate() {
            if s.pid.compare_exchange(0, BUSY, AcqRel, Acquire).is_ok() {
                s.used.iter().for_each(|u| u.store(0, Release));
                s.start.store(start, Release);
                s.pid.store(pid, Release);
                return Some(i);
            }
        }
        crate::warn(&format!(
            "all {PROC_SLOTS} process slots of the machine are taken; this process's usage is not reclaimed if it dies"
        ));
        None
    }

    /// Gives back everything charged through `slot` and frees the slot (process exit).
    pub fn detach(&self, slot: usize, pid: u32) {
        let s = &self.map.procs[slot];
        if s.pid.compare_exchange(pid, BUSY, AcqRel, Acquire).is_ok() {
            self.drain_slot(slot);
        }
        self.drop_exports_of(pid);
    }

    fn drain_slot(&self, slot: usize) {
        let s = &self.map.procs[slot];
        for (dev, u) in s.used.iter().enumerate() {
            let v = u.swap(0, AcqRel);
            if v > 0 {
                sub_saturating(&self.map.used[dev], v);
            }
        }
        s.start.store(0, Release);
        s.pid.store(0, Release);
    }

    /// Releases the usage of processes that no longer run. Returns how many were reclaimed.
    ///
    /// The quick form (used by `cuMemGetInfo`) only asks the kernel whether each pid exists; the
    /// full form (attach, failed reservation) also reads `/proc/<pid>/stat` to catch zombies and
    /// reused pids.
    pub fn sweep_with(&self, full: bool) -> usize {
        let me = std::process::id();
        let mut n = 0;
        for (i, s) in self.map.procs.iter().enumerate() {
            let pid = s.pid.load(Acquire);
            if pid == 0 || pid == BUSY || pid == me {
                continue;
            }
            let alive = if full { process_alive(pid, s.start.load(Acquire)) } else { pid_exists(pid) };
            if alive {
                continue;
            }
            if s.pid.compare_exchange(pid, BUSY, AcqRel, Acquire).is_ok() {
                self.drain_slot(i);
                self.drop_exports_of(pid);
                n += 1;
            }
        }
        n
    }

    /// Full sweep (see [`Shm::sweep_with`]).
    pub fn sweep(&self) -> usize {
        self.sweep_with(true)
    }

    /// Atomically adds `bytes` to the device's usage unless that would exceed its total.
    pub fn reserve(&self, slot: Option<usize>, dev: usize, bytes: u64) -> bool {
        if self.try_reserve(dev, bytes) || (self.sweep() > 0 && self.try_reserve(dev, bytes)) {
            if let Some(s) = slot {
                self.map.procs[s].used[dev].fetch_add(bytes, AcqRel);
            }
            return true;
        }
        false
    }

    fn try_reserve(&self, dev: usize, bytes: u64) -> bool {
        let total = self.total(dev);
        self.map.used[dev].fetch_update(AcqRel, Acquire, |u| u.checked_add(bytes).filter(|n| *n <= total)).is_ok()
    }

    /// Gives back `bytes` of the device.
    pub fn release(&self, slot: Option<usize>, dev: usize, bytes: u64) {
        sub_saturating(&self.map.used[dev], bytes);
        if let Some(s) = slot {
            sub_saturating(&self.map.procs[s].used[dev], bytes);
        }
    }

    /// Records an exported allocation; returns its slot and unique id (None: table full).
    pub fn export(&self, pid: u32, start: u64, dev: u32, base: u64, size: u64) -> Option<(u32, u64)> {
        for attempt in 0..2 {
            for (i, s) in self.map.ipc.iter().enumerate() {
                if s.id.compare_exchange(0, WRITING, AcqRel, Acquire).is_ok() {
                    s.pid.store(pid, Release);
                    s.dev.store(dev, Release);
                    s.start.store(start, Release);
                    s.base.store(base, Release);
                    s.size.store(size, Release);
                    let id = self.map.next_ipc_id.fetch_add(1, AcqRel) + 1;
                    s.id.store(id, Release);
                    return Some((i as u32, id));
                }
            }
            if attempt == 0 {
                self.sweep();
            }
        }
        None
    }

    /// Looks an export up; None if the slot no longer holds export `id` or its exporter is gone.
    pub fn lookup_export(&self, slot: u32, id: u64) -> Option<IpcExport> {
        let s = self.map.ipc.get(slot as usize)?;
        if id == 0 || id == WRITING || s.id.load(Acquire) != id {
            return None;
        }
        let e = IpcExport {
            slot,
            id,
            pid: s.pid.load(Acquire),
            dev: s.dev.load(Acquire),
            base: s.base.load(Acquire),
            size: s.size.load(Acquire),
        };
        let start = s.start.load(Acquire);
        (s.id.load(Acquire) == id && process_alive(e.pid, start)).then_some(e)
    }

    /// The exporter freed the allocation: the handle no longer opens.
    pub fn unexport(&self, slot: u32, id: u64) {
        if let Some(s) = self.map.ipc.get(slot as usize) {
            let _ = s.id.compare_exchange(id, 0, AcqRel, Acquire);
        }
    }

    fn drop_exports_of(&self, pid: u32) {
        for s in self.map.ipc.iter() {
            let id = s.id.load(Acquire);
            if id != 0 && id != WRITING && s.pid.load(Acquire) == pid {
                let _ = s.id.compare_exchange(id, 0, AcqRel, Acquire);
            }
        }
    }
}

fn sub_saturating(a: &AtomicU64, v: u64) {
    let _ = a.fetch_update(AcqRel, Acquire, |u| Some(u.saturating_sub(v)));
}

/// Start time (clock ticks since boot, field 22 of `/proc/<pid>/stat`) and state letter of a process.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    // After the state (field 3) comes field 4; start time is field 22, i.e. 18 further fields.
    let start = f.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Start time of this process (0 if /proc is unavailable).
pub fn self_start_time() -> u64 {
    proc_stat(std::process::id()).map(|(_, t)| t).unwrap_or(0)
}

/// True unless the kernel says no process `pid` exists (zombies and reused pids count as existing).
fn pid_exists(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// True if `pid` runs and is the process that started at `start` (not a zombie, not a reused pid).
pub fn process_alive(pid: u32, start: u64) -> bool {
    match proc_stat(pid) {
        Some((state, t)) => state != 'Z' && state != 'X' && (start == 0 || t == start),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// The simulated NVML (shim-tests/fakenvml/fakenvml.c, `struct machine_head`) reads the
    /// device count, totals and used bytes at these offsets.
    #[test]
    fn the_head_the_simulated_nvml_reads() {
        assert_eq!(MAGIC, 0x4643_5544_414b_0001);
        assert_eq!((offset_of!(Layout, magic), offset_of!(Layout, state), offset_of!(Layout, devices)), (0, 8, 12));
        assert_eq!((offset_of!(Layout, total), offset_of!(Layout, used)), (16, 16 + 8 * MAX_DEVICES));
        assert_eq!(MAX_DEVICES, 16);
        // ... and, for nvmlDeviceGetComputeRunningProcesses, each process slot's pid and bytes.
        assert_eq!((offset_of!(Layout, procs), std::mem::size_of::<ProcSlot>(), PROC_SLOTS), (280, 144, 256));
        assert_eq!((offset_of!(ProcSlot, pid), offset_of!(ProcSlot, used)), (0, 16));
    }
}
