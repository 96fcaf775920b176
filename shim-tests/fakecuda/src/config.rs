//! The simulated machine's parameters, read once per process from `FAKECUDA_*` environment variables.
//!
//! Bad values never abort the host: they produce one warning line on stderr and the default is used.

use std::sync::OnceLock;

/// Most devices one simulated machine can have (bounded by the shared-file layout and address plan).
pub const MAX_DEVICES: usize = 16;
/// One MiB.
pub const MIB: u64 = 1 << 20;
/// The driver version reported by default: CUDA 12.9.
pub const DEFAULT_DRIVER_VERSION: i32 = 12090;
/// Allocation granularity: every allocation is rounded up to this, and the rounding is charged.
pub const GRANULARITY: u64 = 2 * MIB;

/// Parameters of the simulated machine (see `shim-tests/README.md`, section "Fake driver").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `FAKECUDA_MACHINE`: name of the shared machine file `/dev/shm/fakecuda-<machine>`.
    pub machine: String,
    /// `FAKECUDA_DEVICES`: number of devices (0..=16; 0 makes `cuInit` fail with `CUDA_ERROR_NO_DEVICE`).
    pub devices: usize,
    /// `FAKECUDA_TOTAL_MIB`: memory per device, bytes.
    pub total: u64,
    /// `FAKECUDA_CTX_MIB`: hidden cost of the first context on a device in a process, bytes.
    pub ctx_cost: u64,
    /// `FAKECUDA_PEER_MIB`: hidden cost per enabled peer mapping, bytes.
    pub peer_cost: u64,
    /// `FAKECUDA_GRAPH_MIB`: hidden cost per instantiated graph, bytes.
    pub graph_cost: u64,
    /// `FAKECUDA_MODULE_MIB`: hidden cost per loaded module/library, bytes.
    pub module_cost: u64,
    /// `FAKECUDA_IPC_OPEN_MIB`: hidden cost per opened IPC handle (charged to the opener), bytes.
    pub ipc_open_cost: u64,
    /// `FAKECUDA_RESET=1`: clear the machine's shared usage when this process attaches to it.
    pub reset: bool,
    /// `FAKECUDA_CTX_EXTRA_MIB`: hidden cost of every further context on a device in a process
    /// (`cuCtxCreate*` next to the primary context), bytes; released when that context goes.
    pub ctx_extra_cost: u64,
    /// `FAKECUDA_DRIVER_VERSION`: the CUDA version the driver reports (`cuDriverGetVersion`) and the
    /// newest ABI it resolves: rows of the resolution table introduced after it do not exist.
    pub driver_version: i32,
    /// `CUDA_VISIBLE_DEVICES` as the process was started with it (None: unset, every device).
    pub visible: Option<String>,
    /// `FAKECUDA_MIG`: GPUs in MIG mode, `P:N[,P:N...]` (physical GPU `P` split into `N` MIG
    /// devices of one GPU instance and one compute instance each, 1..=7): see [`Mig`].
    pub mig: Mig,
}

/// The machine's MIG devices. Each is a device of its own in the machine file, in a slot after
/// the physical GPUs (in the order `FAKECUDA_MIG` lists them), with `1/N` of its GPU's memory
/// (rounded down to the allocation granularity), its own UUID (`MIG-...`, what
/// `cuDeviceGetUuid_v2` and NVML give) and its GPU's PCI location; `cuDeviceGetUuid` (the
/// version before MIG UUIDs) gives the GPU's UUID. A GPU in MIG mode is not a CUDA device
/// itself: with `CUDA_VISIBLE_DEVICES` unset a process sees its MIG devices in its place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mig {
    /// (GPU, MIG devices) per GPU in MIG mode, in the order given.
    pub gpus: Vec<(usize, usize)>,
}

impl Mig {
    /// Parses `P:N[,P:N...]` for a machine of `devices` GPUs (None: not valid, with why).
    pub fn parse(spec: &str, devices: usize) -> Result<Mig, String> {
        let mut gpus: Vec<(usize, usize)> = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (p, n) = part.split_once(':').ok_or_else(|| format!("{part:?} is not GPU:COUNT"))?;
            let p: usize = p.trim().parse().map_err(|_| format!("{p:?} is not a GPU index"))?;
            let n: usize = n.trim().parse().map_err(|_| format!("{n:?} is not a count"))?;
            if p >= devices || !(1..=7).contains(&n) || gpus.iter().any(|g| g.0 == p) {
                return Err(format!("{part:?}: GPU below {devices}, listed once, 1 to 7 MIG devices"));
            }
            gpus.push((p, n));
        }
        if devices + gpus.iter().map(|g| g.1).sum::<usize>() > MAX_DEVICES {
            return Err(format!("more than {MAX_DEVICES} devices and MIG devices in all"));
        }
        Ok(Mig { gpus })
    }

    /// Whether physical GPU `gpu` is in MIG mode.
    pub fn is_mig_gpu(&self, gpu: usize) -> bool {
        self.gpus.iter().any(|g| g.0 == gpu)
    }

    /// The machine-file slots of GPU `gpu`'s MIG devices, for a machine of `devices` GPUs.
    pub fn slots_of(&self, gpu: usize, devices: usize) -> std::ops::Range<usize> {
        let mut first = devices;
        for &(p, n) in &self.gpus {
            if p == gpu {
                return first..first + n;
            }
            first += n;
        }
        first..first
    }

    /// (GPU, index among its MIG devices, their count) of slot `slot`, if it is a MIG device.
    pub fn of_slot(&self, slot: usize, devices: usize) -> Option<(usize, usize, usize)> {
        let mut first = devices;
        for &(p, n) in &self.gpus {
            if (first..first + n).contains(&slot) {
                return Some((p, slot - first, n));
            }
            first += n;
        }
        None
    }

    /// Memory of one MIG device of a GPU of `total` bytes split in `n`.
    pub fn total(total: u64, n: usize) -> u64 {
        (total / n as u64) & !(GRANULARITY - 1)
    }
}

impl Config {
    /// Reads the environment (pure function of `get`, so tests can feed it a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Config {
        let mib = |key: &str, default: u64, min: u64| -> u64 {
            match get(key) {
                None => default * MIB,
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if n >= min && n <= (1 << 30) => n * MIB,
                    _ => {
                        crate::warn(&format!("{key}={v:?} is not a number of MiB in [{min}, 2^30]; using {default}"));
                        default * MIB
                    }
                },
            }
        };
        let devices = match get("FAKECUDA_DEVICES") {
            None => 8,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n <= MAX_DEVICES => n,
                _ => {
                    crate::warn(&format!("FAKECUDA_DEVICES={v:?} is not in 0..={MAX_DEVICES}; using 8"));
                    8
                }
            },
        };
        let machine = match get("FAKECUDA_MACHINE") {
            None => "default".to_string(),
            Some(v) if valid_machine_name(&v) => v,
            Some(v) => {
                crate::warn(&format!(
                    "FAKECUDA_MACHINE={v:?} must be 1-100 characters of [A-Za-z0-9._-]; using \"default\""
                ));
                "default".to_string()
            }
        };
        Config {
            machine,
            devices,
            total: mib("FAKECUDA_TOTAL_MIB", 98304, 2),
            ctx_cost: mib("FAKECUDA_CTX_MIB", 512, 0),
            peer_cost: mib("FAKECUDA_PEER_MIB", 64, 0),
            graph_cost: mib("FAKECUDA_GRAPH_MIB", 16, 0),
            module_cost: mib("FAKECUDA_MODULE_MIB", 8, 0),
            ipc_open_cost: mib("FAKECUDA_IPC_OPEN_MIB", 2, 0),
            reset: matches!(get("FAKECUDA_RESET").as_deref().map(str::trim), Some("1")),
            ctx_extra_cost: mib("FAKECUDA_CTX_EXTRA_MIB", 0, 0),
            driver_version: match get("FAKECUDA_DRIVER_VERSION") {
                None => DEFAULT_DRIVER_VERSION,
                Some(v) => match v.trim().parse::<i32>() {
                    Ok(n) if (2000..=99990).contains(&n) && n % 10 == 0 => n,
                    _ => {
                        crate::warn(&format!(
                            "FAKECUDA_DRIVER_VERSION={v:?} is not a CUDA version (1000*major + 10*minor, e.g. 13000); \
                             using {DEFAULT_DRIVER_VERSION}"
                        ));
                        DEFAULT_DRIVER_VERSION
                    }
                },
            },
            visible: get("CUDA_VISIBLE_DEVICES"),
            mig: match get("FAKECUDA_MIG") {
                None => Mig::default(),
                Some(v) => Mig::parse(&v, devices).unwrap_or_else(|why| {
                    crate::warn(&format!("FAKECUDA_MIG={v:?}: {why}; no MIG devices"));
                    Mig::default()
                }),
            },
        }
    }

    /// The process-wide configuration, read from the environment on first use.
    pub fn get() -> &'static Config {
        static CFG: OnceLock<Config> = OnceLock::new();
        CFG.get_or_init(|| Config::from_lookup(|k| std::env::var(k).ok()))
    }

    /// Path of the shared machine file.
    pub fn shm_path(&self) -> String {
        format!("/dev/shm/fakecuda-{}", self.machine)
    }
}

/// Machine names become file names: keep them to a safe alphabet.
pub fn valid_machine_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        && s != "."
        && s != ".."
}

/// The UUID of physical device `phys` of machine `machine`: the machine's hash (so two simulated
/// machines never share a GPU), 0xface, and the device's index. The fake driver
/// (`cuDeviceGetUuid_v2`) and the fake NVML (`nvmlDeviceGetUUID`, fakenvml.c `uuid_of`) give the
/// same 16 bytes.
pub fn device_uuid(machine: &str, phys: usize) -> [u8; 16] {
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&machine_hash(machine).to_be_bytes());
    u[8..10].copy_from_slice(&[0xfa, 0xce]);
    u[10..].copy_from_slice(&(phys as u64).to_be_bytes()[2..]);
    u
}

/// The UUID of MIG device slot `slot` of machine `machine` (`cuDeviceGetUuid_v2`, NVML): the
/// machine's hash, 0x319c, and the slot.
pub fn mig_uuid(machine: &str, slot: usize) -> [u8; 16] {
    let mut u = device_uuid(machine, slot);
    u[8..10].copy_from_slice(&[0x31, 0x9c]);
    u
}

/// A UUID as nvidia-smi and `CUDA_VISIBLE_DEVICES` write it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_string(u: &[u8; 16]) -> String {
    format!("GPU-{}", uuid_hex(u))
}

/// A MIG device's UUID as nvidia-smi writes it: `MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn mig_uuid_string(u: &[u8; 16]) -> String {
    format!("MIG-{}", uuid_hex(u))
}

fn uuid_hex(u: &[u8; 16]) -> String {
    let h = |r: std::ops::Range<usize>| u[r].iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("{}-{}-{}-{}-{}", h(0..4), h(4..6), h(6..8), h(8..10), h(10..16))
}

/// The devices a process sees (machine-file slots: GPUs, and MIG devices after them), in its
/// ordinal order, from `CUDA_VISIBLE_DEVICES` as the real driver reads it (CUDA C Programming
/// Guide, "CUDA Environment Variables"; NVIDIA MIG User Guide, "CUDA Device Enumeration"): a
/// comma-separated list of device indices, `GPU-` UUIDs (any unique prefix of the UUID string),
/// `MIG-` UUIDs (likewise) or `MIG-GPU-<uuid>/<gi>/<ci>` (the form before R470: GPU instance
/// `gi` is here the MIG device's index + 1, compute instance 0), read up to the first entry that
/// names no device ("only the devices whose index precedes the invalid index are visible"). A
/// GPU in MIG mode is no device by its index or `GPU-` UUID; nor is an ambiguous prefix, nor a
/// device listed twice. Unset: every GPU, a GPU in MIG mode replaced by its MIG devices.
pub fn visible_devices(spec: Option<&str>, physical: usize, machine: &str, mig: &Mig) -> Vec<usize> {
    let unset = || -> Vec<usize> {
        (0..physical)
            .flat_map(|d| if mig.is_mig_gpu(d) { mig.slots_of(d, physical).collect() } else { vec![d] })
            .collect()
    };
    let Some(spec) = spec else { return unset() };
    let gpus: Vec<String> = (0..physical).map(|d| uuid_string(&device_uuid(machine, d)).to_ascii_lowercase()).collect();
    let migs: Vec<(usize, String)> = mig
        .gpus
        .iter()
        .flat_map(|&(p, _)| mig.slots_of(p, physical))
        .map(|s| (s, mig_uuid_string(&mig_uuid(machine, s)).to_ascii_lowercase()))
        .collect();
    let unique = |hits: Vec<usize>| if hits.len() == 1 { Some(hits[0]) } else { None };
    let mut seen = Vec::new();
    for entry in spec.split(',') {
        let e = entry.trim().to_ascii_lowercase();
        let dev = if let Some(rest) = e.strip_prefix("mig-gpu-") {
            // MIG-GPU-<uuid>/<gi>/<ci>
            let mut it = rest.split('/');
            let (u, gi, ci) = (it.next().unwrap_or(""), it.next(), it.next());
            let gpu = unique((0..physical).filter(|d| gpus[*d] == format!("gpu-{u}")).collect());
            match (gpu, gi.and_then(|g| g.parse::<usize>().ok()), ci, it.next()) {
                (Some(g), Some(gi), Some("0"), None) if gi >= 1 => mig.slots_of(g, physical).nth(gi - 1),
                _ => None,
            }
        } else if e.starts_with("mig-") {
            if e.len() <= 4 {
                None
            } else {
                unique(migs.iter().filter(|(_, u)| u.starts_with(&e)).map(|(s, _)| *s).collect())
            }
        } else if e.starts_with("gpu-") {
            if e.len() <= 4 {
                None
            } else {
                unique((0..physical).filter(|d| gpus[*d].starts_with(&e)).collect()).filter(|d| !mig.is_mig_gpu(*d))
            }
        } else {
            e.parse::<usize>().ok().filter(|d| *d < physical && !mig.is_mig_gpu(*d))
        };
        match dev {
            Some(d) if !seen.contains(&d) => seen.push(d),
            _ => break,
        }
    }
    seen
}

/// Rounds `bytes` up to the allocation granularity (None on overflow).
pub fn round_up(bytes: u64) -> Option<u64> {
    bytes.checked_add(GRANULARITY - 1).map(|v| v & !(GRANULARITY - 1))
}

/// FNV-1a hash of the machine name: identifies the machine inside IPC handles and shareable fds.
pub fn machine_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> Config {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults() {
        let c = cfg(&[]);
        assert_eq!((c.machine.as_str(), c.devices, c.total), ("default", 8, 98304 * MIB));
        assert_eq!(
            (c.ctx_cost, c.peer_cost, c.graph_cost, c.module_cost, c.ipc_open_cost),
            (512 * MIB, 64 * MIB, 16 * MIB, 8 * MIB, 2 * MIB)
        );
        assert!(!c.reset);
        assert_eq!((c.ctx_extra_cost, c.driver_version, c.visible), (0, 12090, None));
    }

    #[test]
    fn visible_devices_as_the_driver_reads_them() {
        let none = Mig::default();
        let v = |s: &str| visible_devices(Some(s), 8, "m", &none);
        assert_eq!(visible_devices(None, 3, "m", &none), vec![0, 1, 2]);
        assert_eq!(v("1"), vec![1]);
        assert_eq!(v("4,5,6,7"), vec![4, 5, 6, 7]);
        assert_eq!(v("1,0"), vec![1, 0]);
        assert_eq!(v(" 2 , 3"), vec![2, 3]);
        assert_eq!(v("0,9,1"), vec![0], "stops at the first invalid entry");
        assert_eq!(v("0,-1,1"), vec![0]);
        assert_eq!(v("1,1,2"), vec![1], "a repeated device ends the list");
        assert_eq!(v(""), Vec::<usize>::new());
        assert_eq!(v("MIG-0"), Vec::<usize>::new());
        let u3 = uuid_string(&device_uuid("m", 3));
        assert!(u3.starts_with("GPU-") && u3.len() == 40, "{u3}");
        assert_eq!(v(&u3), vec![3]);
        assert_eq!(v(&format!("{},0", u3.to_uppercase())), vec![3, 0]);
        let u0 = uuid_string(&device_uuid("m", 0));
        assert_eq!(visible_devices(Some(&u0[..12]), 1, "m", &none), vec![0], "a unique prefix");
        assert_eq!(v(&u3[..u3.len() - 1]), Vec::<usize>::new(), "a prefix of devices 0-9 is ambiguous");
        assert_eq!(v("GPU-"), Vec::<usize>::new());
        assert_eq!(v(&format!("0,{}", &u3[..12])), vec![0], "a prefix every device shares is ambiguous");
        assert_ne!(device_uuid("m", 0), device_uuid("n", 0), "machines do not share GPUs");
        assert_ne!(device_uuid("m", 0), device_uuid("m", 1));
    }

    #[test]
    fn mig_devices_as_the_driver_enumerates_them() {
        assert!(Mig::parse("0:3,8:1", 8).is_err(), "GPU 8 of 8");
        assert!(Mig::parse("0:8", 8).is_err(), "at most 7");
        assert!(Mig::parse("0:2,0:2", 8).is_err(), "listed twice");
        assert!(Mig::parse("0:7,1:7", 8).is_err(), "more than 16 slots");
        let mig = Mig::parse("1:3, 4:2", 8).unwrap();
        assert_eq!(mig.slots_of(1, 8), 8..11);
        assert_eq!(mig.slots_of(4, 8), 11..13);
        assert_eq!(mig.of_slot(12, 8), Some((4, 1, 2)));
        assert_eq!(mig.of_slot(7, 8), None);
        assert_eq!(Mig::total(80 * 1024 * MIB, 3), 27306 * MIB);
        let v = |s: Option<&str>| visible_devices(s, 8, "m", &mig);
        assert_eq!(v(None), vec![0, 8, 9, 10, 2, 3, 11, 12, 5, 6, 7], "a MIG GPU's devices in its place");
        assert_eq!(v(Some("1")), Vec::<usize>::new(), "a GPU in MIG mode is no CUDA device");
        assert_eq!(v(Some("0,1,2")), vec![0]);
        let m9 = mig_uuid_string(&mig_uuid("m", 9));
        assert!(m9.starts_with("MIG-") && m9.len() == 40, "{m9}");
        assert_eq!(v(Some(&m9)), vec![9]);
        assert_eq!(v(Some(&format!("{},{}", &m9.to_uppercase(), "3"))), vec![9, 3]);
        let g4 = uuid_string(&device_uuid("m", 4));
        assert_eq!(v(Some(&format!("MIG-{g4}/2/0"))), vec![12], "MIG-GPU-<uuid>/<gi>/<ci>");
        assert_eq!(v(Some(&format!("MIG-{g4}/3/0"))), Vec::<usize>::new(), "GPU 4 has two");
        assert_eq!(v(Some(&g4)), Vec::<usize>::new());
        assert_ne!(mig_uuid("m", 9), device_uuid("m", 9));
    }

    #[test]
    fn driver_version_and_extra_context_cost() {
        let c = cfg(&[("FAKECUDA_DRIVER_VERSION", "13000"), ("FAKECUDA_CTX_EXTRA_MIB", "64")]);
        assert_eq!((c.driver_version, c.ctx_extra_cost), (13000, 64 * MIB));
        for bad in ["13", "13.0", "13001", "100000", ""] {
            assert_eq!(cfg(&[("FAKECUDA_DRIVER_VERSION", bad)]).driver_version, 12090, "{bad:?}");
        }
    }

    #[test]
    fn values_and_bad_values() {
        let c = cfg(&[
            ("FAKECUDA_DEVICES", "2"),
            ("FAKECUDA_TOTAL_MIB", " 64 "),
            ("FAKECUDA_CTX_MIB", "0"),
            ("FAKECUDA_RESET", "1"),
            ("FAKECUDA_MACHINE", "t1-x.y"),
            ("FAKECUDA_DRIVER_VERSION", "12040"),
        ]);
        assert_eq!(c.driver_version, 12040);
        assert_eq!((c.devices, c.total, c.ctx_cost, c.reset, c.machine.as_str()), (2, 64 * MIB, 0, true, "t1-x.y"));
        let c = cfg(&[
            ("FAKECUDA_DEVICES", "17"),
            ("FAKECUDA_TOTAL_MIB", "lots"),
            ("FAKECUDA_CTX_MIB", "-1"),
            ("FAKECUDA_MACHINE", "../etc"),
            ("FAKECUDA_DRIVER_VERSION", "13001"),
        ]);
        assert_eq!(c.driver_version, 12090, "not a CUDA version");
        assert_eq!((c.devices, c.total, c.ctx_cost, c.machine.as_str()), (8, 98304 * MIB, 512 * MIB, "default"));
        assert_eq!(c.shm_path(), "/dev/shm/fakecuda-default");
    }

    #[test]
    fn rounding() {
        assert_eq!(round_up(1), Some(GRANULARITY));
        assert_eq!(round_up(GRANULARITY), Some(GRANULARITY));
        assert_eq!(round_up(GRANULARITY + 1), Some(2 * GRANULARITY));
        assert_eq!(round_up(u64::MAX), None);
        assert_ne!(machine_hash("a"), machine_hash("b"));
    }
}
