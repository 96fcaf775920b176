//! One physical GPU is one GPU: each report names the physical device behind every ordinal it
//! used (UUID and PCI bus id, asked of the driver), and the device's memory now as NVML sees it,
//! from which `untracked_bytes` is worked out, on the simulated machine under
//! `CUDA_VISIBLE_DEVICES` layouts (issue [20]).
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both).

use culedger_scenarios::reports::libculedger;
use culedger_scenarios::Sim;
use serde_json::Value;
use std::path::{Path, PathBuf};

const MIB: i64 = 1 << 20;

/// A machine of 4 GPUs of 8 GiB, contexts of 512 MiB, modules of 300 MiB, writing into `out`.
fn machine(name: &str) -> (Sim, PathBuf) {
    let mut sim = Sim::new(name);
    let out = sim.scratch().join("out");
    sim.env("LD_PRELOAD", libculedger())
        .env("CULEDGER_OUT", &out)
        .env("CULEDGER_FLUSH_MS", "100")
        .env("FAKECUDA_DEVICES", "4")
        .env("FAKECUDA_TOTAL_MIB", "8192")
        .env("FAKECUDA_CTX_MIB", "512")
        .env("FAKECUDA_MODULE_MIB", "300");
    (sim, out)
}

fn reports(dir: &Path) -> Vec<Value> {
    let mut v: Vec<Value> = std::fs::read_dir(dir)
        .expect("the report directory")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap())
        .collect();
    v.sort_by_key(|r| r["process"]["env"]["CUDA_VISIBLE_DEVICES"].as_str().unwrap_or("").to_string());
    v
}

/// Runs `devices.py MIB AFTER SECONDS` with `CUDA_VISIBLE_DEVICES=visible` (None: unset).
fn run(sim: &Sim, visible: Option<&str>, args: &[&str]) {
    let mut cmd = sim.python("devices.py");
    cmd.args(args);
    if let Some(v) = visible {
        cmd.env("CUDA_VISIBLE_DEVICES", v);
    }
    sim.run_ok(&mut cmd);
}

fn dev0(r: &Value) -> &Value {
    let devs = r["devices"].as_array().expect("devices");
    assert_eq!(devs.len(), 1, "one device: {devs:?}");
    &devs[0]
}

/// (a) Two ranks each on their ordinal 0 with `CUDA_VISIBLE_DEVICES=0` and `=1`: two physical
/// GPUs, told apart by UUID and PCI bus id; NVML's reading of each holds that rank alone.
#[test]
fn each_rank_names_its_own_physical_gpu() {
    let (sim, out) = machine("devices_two_ranks");
    run(&sim, Some("0"), &["200", "none", "0"]);
    run(&sim, Some("1"), &["300", "none", "0"]);
    let r = reports(&out);
    assert_eq!(r.len(), 2);
    let (a, b) = (dev0(&r[0]), dev0(&r[1]));
    assert_eq!((a["index"].as_i64(), b["index"].as_i64()), (Some(0), Some(0)), "both are their ordinal 0");
    let (ua, ub) = (a["uuid"].as_str().expect("a uuid"), b["uuid"].as_str().expect("a uuid"));
    assert!(ua.starts_with("GPU-") && ua.len() == 40, "{ua}");
    assert_ne!(ua, ub, "two physical GPUs");
    assert_eq!(a["pci_bus_id"], "00000000:01:00.0");
    assert_eq!(b["pci_bus_id"], "00000000:02:00.0");
    assert_eq!((a["host_index"].as_i64(), b["host_index"].as_i64()), (Some(0), Some(1)), "nvidia-smi's numbers");
    for (d, mib) in [(a, 200), (b, 300)] {
        assert_eq!(d["live_bytes"].as_i64(), Some(mib * MIB));
        // At exit the process still holds its context and allocation: NVML sees them.
        let u = &d["usage"];
        assert_eq!(u["source"], "nvml", "{d}");
        assert_eq!(u["used_bytes"].as_i64(), Some((512 + mib) * MIB), "{u}");
        assert_eq!(u["total_bytes"].as_i64(), Some(8192 * MIB));
        assert_eq!(d["untracked_bytes"].as_i64(), Some(512 * MIB), "the context");
        assert_eq!(d["untracked_source"], "nvml");
    }
}

/// (b) One physical GPU reached through two ordinals: `CUDA_VISIBLE_DEVICES=1,0` ordinal 0 and
/// every device visible, ordinal 1, are the same UUID and bus.
#[test]
fn two_ordinals_of_one_gpu_are_one_uuid() {
    let (sim, out) = machine("devices_one_gpu_two_ordinals");
    run(&sim, Some("1,0"), &["100", "none", "0"]);
    run(&sim, None, &["100", "none", "0", "1"]);
    let r = reports(&out);
    assert_eq!(r.len(), 2);
    // Sorted by CUDA_VISIBLE_DEVICES: unset first.
    assert_eq!((dev0(&r[0])["index"].as_i64(), dev0(&r[1])["index"].as_i64()), (Some(1), Some(0)));
    assert_eq!(dev0(&r[0])["uuid"], dev0(&r[1])["uuid"]);
    assert_eq!((dev0(&r[0])["host_index"].as_i64(), dev0(&r[1])["host_index"].as_i64()), (Some(1), Some(1)));
    assert_eq!(dev0(&r[0])["pci_bus_id"], "00000000:02:00.0");
    assert_eq!(dev0(&r[1])["pci_bus_id"], "00000000:02:00.0");
}

/// (e) Driver memory taken after the program's last query (a module loaded after it) shows in
/// `untracked_bytes` through NVML's reading, with its time; the query alone said 512 MiB.
#[test]
fn untracked_is_current_not_the_last_query() {
    let (sim, out) = machine("devices_untracked_now");
    run(&sim, None, &["100", "module", "0.5"]);
    let r = reports(&out);
    let d = dev0(&r[0]);
    let probe = &d["probes"][0];
    assert_eq!(probe["total_bytes"].as_i64().unwrap() - probe["free_bytes"].as_i64().unwrap(), 612 * MIB);
    assert_eq!(d["untracked_bytes"].as_i64(), Some((512 + 300) * MIB), "{d}");
    assert_eq!(d["untracked_source"], "nvml");
    let t = d["untracked_t_us"].as_i64().expect("when");
    assert!(t > probe["t_us"].as_i64().unwrap(), "the reading is after the query");
    assert_eq!(d["usage"]["process_bytes"].as_i64(), Some((512 + 300 + 100) * MIB), "NVML lists this process");
    assert_eq!(d["usage"]["processes"].as_array().unwrap().len(), 1);
}
