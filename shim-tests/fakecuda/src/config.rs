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
        assert_eq!((c.ctx_extra_cost, c.driver_version), (0, 12090));
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
