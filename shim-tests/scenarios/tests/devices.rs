//! One physical GPU is one GPU: each report names the physical device behind every ordinal it
//! used (UUID and PCI bus id, asked of the driver), and the device's memory now as NVML sees it,
//! from which `untracked_bytes` is worked out, on the simulated machine under
//! `CUDA_VISIBLE_DEVICES` layouts (issue [20]).
//!
//! Needs `make sim` and the release `libculedger.so` (`make test` builds both).

use culedger_scenarios::cli::culedger;
use culedger_scenarios::reports::libculedger;
use culedger_scenarios::Sim;
use serde_json::Value;
use std::path::{Path, PathBuf};

const MIB: i64 = 1 << 20;

/// A machine of 4 GPUs of 8 GiB, contexts of 512 MiB, modules of 300 MiB, writing into `out`.
fn machine(name: &str) -> (Sim, PathBuf) {
    machine_of(name, 4)
}

fn machine_of(name: &str, gpus: u32) -> (Sim, PathBuf) {
    let mut sim = Sim::new(name);
    let out = sim.scratch().join("out");
    sim.env("LD_PRELOAD", libculedger())
        .env("CULEDGER_OUT", &out)
        .env("CULEDGER_FLUSH_MS", "100")
        .env("CULEDGER_RUN_ID", name)
        .env("FAKECUDA_DEVICES", gpus.to_string())
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
    run(&sim, Some("0"), &["200", "none", "0.3"]);
    run(&sim, Some("1"), &["300", "none", "0.3"]);
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
    run(&sim, Some("1,0"), &["100", "none", "0.3"]);
    run(&sim, None, &["100", "none", "0.3", "1"]);
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

/// `culedger report DIR --format json`.
fn report_json(dir: &Path) -> Value {
    let (code, out) = culedger(&["report", dir.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The overview's (GPU number, processes, tracked MiB) rows.
fn rows(report: &Value) -> Vec<(i64, u64, i64)> {
    report["overview"]
        .as_array()
        .expect("overview")
        .iter()
        .map(|r| {
            (r["index"].as_i64().unwrap(), r["processes"].as_u64().unwrap(), r["tracked_bytes"].as_i64().unwrap() / MIB)
        })
        .collect()
}

/// Starts `devices.py` with `CUDA_VISIBLE_DEVICES=visible` and returns the running child.
fn start(sim: &Sim, visible: &str, args: &[&str]) -> std::process::Child {
    let mut cmd = sim.python("devices.py");
    cmd.args(args).env("CUDA_VISIBLE_DEVICES", visible);
    cmd.spawn().expect("start devices.py")
}

fn wait_all(children: Vec<std::process::Child>) {
    for c in children {
        let o = c.wait_with_output().expect("wait");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// An SGLang-like server start (`--tp 1`, a 4 GiB model, fraction 0.80) seeing `visible`.
fn sglang_tp1(sim: &Sim, visible: &str) {
    let mut server = sim.python("engines/sglang_server.py");
    server.args(["--tp", "1", "--model-mib", "4096", "--layers", "4", "--mem-fraction-static", "0.80"]);
    sim.run_ok(server.env("CUDA_VISIBLE_DEVICES", visible));
}

/// Starts `devices.py args` (SECONDS -1: it stays until its stdin closes) seeing `visible`, and
/// returns it once it holds its memory (its first RESULT line).
fn holding(sim: &Sim, visible: &str, args: &[&str]) -> std::process::Child {
    let mut cmd = sim.python("devices.py");
    cmd.args(args).env("CUDA_VISIBLE_DEVICES", visible);
    let mut child = cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().expect("start");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
    assert!(line.starts_with("RESULT ptr="), "{line}");
    child
}

/// (a) and (b) as `culedger report` tells them: two ranks on their ordinals 0 of GPUs 0 and 1
/// are two GPUs with their own figures; one GPU reached through ordinal 0 of
/// `CUDA_VISIBLE_DEVICES=1,0` and ordinal 1 of a process seeing all is one GPU, GPU 1, its
/// figures summed, with the process whose ordinal differs shown by its ordinal.
#[test]
fn the_cli_keys_gpus_by_physical_device() {
    let (sim, out) = machine("devices_cli_two_ranks");
    wait_all(vec![start(&sim, "0", &["200", "none", "0.3"]), start(&sim, "1", &["300", "none", "0.3"])]);
    assert_eq!(rows(&report_json(&out)), vec![(0, 1, 200), (1, 1, 300)]);

    let (sim, out) = machine("devices_cli_one_gpu");
    let mut all = sim.python("devices.py");
    all.args(["100", "none", "0.5", "1"]);
    let children = vec![start(&sim, "1,0", &["150", "none", "0.5"]), all.spawn().expect("start")];
    wait_all(children);
    let r = report_json(&out);
    assert_eq!(rows(&r), vec![(1, 2, 250)], "one GPU, both processes");
    let dev = &r["devices"][0];
    assert!(dev["uuid"].as_str().is_some_and(|u| u.starts_with("GPU-")), "{dev}");
    let ordinals: Vec<Option<i64>> =
        dev["processes"].as_array().unwrap().iter().map(|p| p["ordinal"].as_i64()).collect();
    assert!(
        ordinals.contains(&Some(0)) && ordinals.contains(&None),
        "the CUDA_VISIBLE_DEVICES=1,0 process is its ordinal 0: {ordinals:?}"
    );
}

/// (c) A Ray-style run: four workers, each seeing one GPU as its device 0: four GPUs, 0-3.
#[test]
fn ray_style_workers_are_four_gpus() {
    let (sim, out) = machine("devices_ray");
    wait_all((0..4).map(|i| start(&sim, &i.to_string(), &["100", "none", "0.2"])).collect());
    let r = report_json(&out);
    assert_eq!(rows(&r), vec![(0, 1, 100), (1, 1, 100), (2, 1, 100), (3, 1, 100)]);
    // The metrics carry the DCGM exporter's labels for each GPU.
    let (code, metrics) = culedger(&["metrics", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{metrics}");
    for (i, d) in r["devices"].as_array().unwrap().iter().enumerate() {
        let series = format!(
            "culedger_device_tracked_bytes{{host=\"{}\",device=\"{i}\",gpu=\"{i}\",UUID=\"{}\"}} {}",
            d["host"].as_str().unwrap(),
            d["uuid"].as_str().unwrap(),
            100 * MIB
        );
        assert!(metrics.contains(&series), "{series} in\n{metrics}");
    }
}

/// (d) Two servers sharing one 8-GPU machine (`CUDA_VISIBLE_DEVICES=0,1,2,3` and `4,5,6,7`),
/// both writing into one directory: eight GPUs numbered as nvidia-smi does, the second
/// server's ordinals 0-3 shown on GPUs 4-7.
#[test]
fn two_servers_on_one_machine_are_eight_gpus() {
    let (sim, out) = machine_of("devices_two_servers", 8);
    wait_all(vec![
        start(&sim, "0,1,2,3", &["100", "none", "0.2", "all"]),
        start(&sim, "4,5,6,7", &["200", "none", "0.2", "all"]),
    ]);
    let r = report_json(&out);
    let want: Vec<(i64, u64, i64)> = (0..8).map(|i| (i, 1, if i < 4 { 100 } else { 200 })).collect();
    assert_eq!(rows(&r), want);
    for (i, d) in r["devices"].as_array().unwrap().iter().enumerate() {
        let ordinal = d["processes"][0]["ordinal"].as_i64();
        assert_eq!(ordinal, (i >= 4).then_some(i as i64 - 4), "GPU {i}");
    }
}

/// (f) and the flag: two ranks at once on GPUs 0 and 1, as a writer before UUIDs wrote them (no
/// `uuid`, `host_index`, `usage`) still load; GPUs fall back to the ordinal, said in one line
/// since the ranks recorded CUDA_VISIBLE_DEVICES, and the two GPUs merged into one hold more
/// than a GPU can: flagged in report and explain, never "nothing alarming".
#[test]
fn old_reports_fall_back_to_ordinals_and_impossible_figures_are_flagged() {
    let (sim, out) = machine("devices_old_reports");
    wait_all(vec![start(&sim, "0", &["5000", "none", "1.5"]), start(&sim, "1", &["5000", "none", "1.5"])]);
    for e in std::fs::read_dir(&out).unwrap().flatten() {
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap();
        for d in v["devices"].as_array_mut().unwrap() {
            let d = d.as_object_mut().unwrap();
            for k in ["uuid", "pci_bus_id", "host_index", "usage", "untracked_source", "untracked_t_us"] {
                d.remove(k);
            }
        }
        std::fs::write(e.path(), serde_json::to_vec(&v).unwrap()).unwrap();
    }
    let r = report_json(&out);
    assert_eq!(rows(&r), vec![(0, 2, 10000)], "merged by ordinal, as before");
    let notes: Vec<&str> = r["notes"].as_array().expect("notes").iter().map(|n| n.as_str().unwrap()).collect();
    assert!(notes.iter().any(|n| n.contains("name no physical GPU")), "{notes:?}");
    let flag = notes.iter().find(|n| n.starts_with("Impossible figures:")).expect("flagged");
    assert!(flag.contains("more than the GPU's") && flag.contains("CUDA_VISIBLE_DEVICES=1"), "{flag}");
    let (code, text) = culedger(&["explain", out.to_str().unwrap()]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("Impossible figures:") && !text.contains("Nothing alarming"), "{text}");
}

/// (e), live: a server idles (its ledger never changes) while another process takes 1000 MiB
/// of its GPU; within about a second its running report's NVML reading, and `culedger top`,
/// show the device used by both, the untracked memory grown with it and its reading fresh.
#[test]
fn an_idle_servers_report_follows_the_device() {
    let (sim, out) = machine("devices_idle_server");
    let mut server = start(&sim, "0", &["100", "none", "30"]);
    let report = || -> Option<Value> {
        let e = std::fs::read_dir(&out).ok()?.flatten().next()?;
        serde_json::from_str(&std::fs::read_to_string(e.path()).ok()?).ok()
    };
    let t0 = std::time::Instant::now();
    while report().and_then(|r| r["devices"][0]["usage"]["used_bytes"].as_i64()).is_none() {
        if t0.elapsed().as_secs() >= 10 {
            let _ = server.kill();
            panic!("no report with a reading: {:?}", report());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Another process on the same GPU, without culedger.
    let mut other = sim.python("devices.py");
    other.args(["1000", "none", "30"]).env("CUDA_VISIBLE_DEVICES", "0").env_remove("LD_PRELOAD");
    let mut other = other.spawn().expect("start the other process");
    // From the moment it holds its memory (its first RESULT line).
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(other.stdout.as_mut().unwrap()), &mut line).unwrap();
    assert!(line.starts_with("RESULT ptr="), "{line}");
    let want = (512 + 100 + 512 + 1000) * MIB;
    let t1 = std::time::Instant::now();
    let seen = loop {
        let r = report().expect("the server's report");
        let d = &r["devices"][0];
        if d["usage"]["used_bytes"].as_i64() == Some(want) {
            break r;
        }
        assert!(t1.elapsed().as_millis() < 2500, "the reading did not follow the device: {d}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(seen["process"]["exit"], "running");
    let d = &seen["devices"][0];
    assert_eq!(d["untracked_bytes"].as_i64(), Some(want - 100 * MIB), "the other process shows as untracked");
    assert_eq!(d["usage"]["processes"].as_array().unwrap().len(), 2, "NVML names both processes");
    let (code, frame) = culedger(&["top", "--once", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{frame}");
    assert!(frame.contains("last NVML reading"), "{frame}");
    assert!(frame.contains(&format!("{:.2} GiB", (want - 100 * MIB) as f64 / (1u64 << 30) as f64)), "{frame}");
    for c in [&mut server, &mut other] {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Every command on the layouts: (a) two ranks on their ordinals 0 of GPUs 0 and 1, and (b) one
/// GPU reached through two ordinals. `check`, `top`, `export --perfetto`, `diff` and `html`
/// each name the physical GPU (nvidia-smi's number), never the process's ordinal alone.
#[test]
fn every_command_names_the_physical_gpu() {
    let (sim_a, a) = machine("devices_commands_two_ranks");
    wait_all(vec![start(&sim_a, "0", &["200", "none", "0.3"]), start(&sim_a, "1", &["300", "none", "0.3"])]);
    let (sim_b, b) = machine("devices_commands_one_gpu");
    let mut all = sim_b.python("devices.py");
    all.args(["100", "none", "0.5", "1"]);
    wait_all(vec![start(&sim_b, "1,0", &["150", "none", "0.5"]), all.spawn().expect("start")]);
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
    let host = report_json(&a)["devices"][0]["host"].as_str().unwrap().to_string();

    // check: a budget per physical GPU; only GPU 1 (300 MiB) breaches 250 MiB.
    let (code, out) = culedger(&["check", a_s, "--budget", "live<=250MiB", "--format", "json"]);
    assert_eq!(code, 1, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["devices"], 2, "{out}");
    let breaches: Vec<(&str, i64)> = v["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["status"] == "breach")
        .map(|o| (o["device"].as_str().unwrap(), o["value_bytes"].as_i64().unwrap() / MIB))
        .collect();
    assert_eq!(breaches, vec![(format!("{host} GPU 1").as_str(), 300)], "{out}");
    // (b): one GPU, the two processes summed.
    let (code, out) = culedger(&["check", b_s, "--budget", "live<=200MiB", "--format", "json"]);
    assert_eq!(code, 1, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["devices"].as_i64(), v["outcomes"][0]["value_bytes"].as_i64()), (Some(1), Some(250 * MIB)), "{out}");

    // top: one row per physical GPU.
    let (code, frame) = culedger(&["top", "--once", a_s]);
    assert_eq!(code, 0, "{frame}");
    for (gpu, mib) in [(0, "200.00 MiB"), (1, "300.00 MiB")] {
        let name = format!("{host} GPU {gpu} ");
        assert!(frame.lines().any(|l| l.contains(&name) && l.contains(mib)), "{name} {mib} in\n{frame}");
    }
    let (_, frame) = culedger(&["top", "--once", b_s]);
    assert!(frame.contains(&format!("{host} GPU 1 ")) && !frame.contains(&format!("{host} GPU 0 ")), "{frame}");

    // export: each process's counter track and its instants name the physical GPU, with the
    // ordinal where it differs.
    let trace_path = sim_a.scratch().join("trace.json");
    let (code, out) = culedger(&["export", a_s, "--perfetto", trace_path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let trace: Value = serde_json::from_slice(&std::fs::read(&trace_path).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let mut tracks: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| e["name"].as_str().unwrap())
        .filter(|n| !n.ends_with(" free") && !n.ends_with(" untracked"))
        .collect();
    tracks.sort();
    tracks.dedup();
    assert_eq!(tracks, vec!["GPU 0", "GPU 1"]);
    let mut probes: Vec<&str> = events
        .iter()
        .filter_map(|e| e["name"].as_str())
        .filter(|n| n.starts_with("probe "))
        .map(|n| n.split(':').next().unwrap())
        .collect();
    probes.sort();
    assert_eq!(probes, vec!["probe GPU 0", "probe GPU 1 (its device 0)"]);

    // diff: (a) against (b), GPU by GPU: GPU 0 only in (a), GPU 1 in both.
    let (code, out) = culedger(&["diff", a_s, b_s, "--format", "json"]);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let devs: Vec<(String, Value)> = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["device"].as_str().unwrap().to_string(), d["only_in"].clone()))
        .collect();
    assert_eq!(devs.len(), 2, "{out}");
    assert!(devs[0].0.ends_with("GPU 0") && devs[0].1 == "a", "{devs:?}");
    assert!(devs[1].0.ends_with("GPU 1") && devs[1].1.is_null(), "{devs:?}");
    let tracked = v["devices"][1]["totals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "tracked live")
        .map(|t| (t["a"].as_i64().unwrap() / MIB, t["b"].as_i64().unwrap() / MIB));
    assert_eq!(tracked, Some((300, 250)), "{out}");

    // html: the page's data holds both physical GPUs (the page draws them from it), and for
    // (b) one.
    for (dir, want) in [(a_s, vec![0, 1]), (b_s, vec![1])] {
        let page = sim_a.scratch().join("page.html");
        let (code, out) = culedger(&["html", dir, "-o", page.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
        let html = std::fs::read_to_string(&page).unwrap();
        let has = |i: i64| html.contains(&format!("\"host\":\"{host}\",\"index\":{i}"));
        let seen: Vec<i64> = (0..4).filter(|i| has(*i)).collect();
        assert_eq!(seen, want, "{dir}");
    }
}

/// A MIG device is a device of its own: on a machine whose GPU 0 is split into two MIG devices
/// of 4 GiB (`FAKECUDA_MIG=0:2`) and whose GPU 1 is whole, a process seeing every device has the
/// two MIG devices in GPU 0's place; each report names a MIG device by its own UUID (`MIG-...`,
/// what `cuDeviceGetUuid_v2` gives), its GPU (`parent_uuid`, the GPU's PCI bus id, nvidia-smi's
/// number of the GPU) and its index under it, and NVML's reading of it is its own (4 GiB, what
/// its processes hold). Two processes on the two MIG devices (`CUDA_VISIBLE_DEVICES=MIG-<uuid>`,
/// and the older `MIG-GPU-<uuid>/<gi>/<ci>` form) and one on GPU 1 are three devices in every
/// view, named "GPU 0 MIG 0", "GPU 0 MIG 1" and "GPU 1", none of them flagged.
#[test]
fn mig_devices_are_devices_of_their_own() {
    let (mut sim, out) = machine_of("devices_mig", 2);
    sim.env("FAKECUDA_MIG", "0:2");
    let seen = sim.scratch().join("seen");
    let mut all = sim.python("devices.py");
    all.args(["10", "none", "0.1", "all"]).env("CULEDGER_OUT", &seen);
    sim.run_ok(&mut all);
    let r = reports(&seen);
    let devs = r[0]["devices"].as_array().expect("devices");
    assert_eq!(devs.len(), 3, "two MIG devices and GPU 1: {devs:?}");
    let (m0, m1, g1) = (&devs[0], &devs[1], &devs[2]);
    let uuid = |d: &Value| d["uuid"].as_str().expect("a uuid").to_string();
    for (i, m) in [m0, m1].into_iter().enumerate() {
        assert!(uuid(m).starts_with("MIG-") && uuid(m).len() == 40, "{m}");
        assert!(m["parent_uuid"].as_str().is_some_and(|p| p.starts_with("GPU-")), "{m}");
        assert_eq!(m["pci_bus_id"], "00000000:01:00.0", "its GPU's");
        assert_eq!((m["host_index"].as_i64(), m["mig_index"].as_i64()), (Some(0), Some(i as i64)));
        assert_eq!(m["total_bytes"].as_i64(), Some(4096 * MIB), "half of GPU 0");
        assert_eq!(m["usage"]["total_bytes"].as_i64(), Some(4096 * MIB), "NVML's reading of the MIG device");
        assert_eq!(m["usage"]["used_bytes"].as_i64(), Some((512 + 10) * MIB), "{m}");
    }
    assert_eq!(m0["parent_uuid"], m1["parent_uuid"]);
    assert_ne!(uuid(m0), uuid(m1));
    assert!(uuid(g1).starts_with("GPU-") && g1["parent_uuid"].is_null() && g1["mig_index"].is_null(), "{g1}");
    assert_eq!((g1["host_index"].as_i64(), g1["total_bytes"].as_i64()), (Some(1), Some(8192 * MIB)));

    let gpu0 = m0["parent_uuid"].as_str().unwrap().to_string();
    wait_all(vec![
        start(&sim, &uuid(m0), &["1000", "none", "0.3"]),
        start(&sim, &format!("MIG-{gpu0}/2/0"), &["1500", "none", "0.3"]),
        start(&sim, "1", &["300", "none", "0.3"]),
    ]);
    let r = report_json(&out);
    assert_eq!(rows(&r), vec![(0, 1, 1000), (0, 1, 1500), (1, 1, 300)], "three devices");
    let migs: Vec<Option<i64>> = r["overview"].as_array().unwrap().iter().map(|o| o["mig_index"].as_i64()).collect();
    assert_eq!(migs, vec![Some(0), Some(1), None]);
    for d in r["devices"].as_array().unwrap() {
        assert!(d.get("impossible").is_none(), "nothing impossible: {d}");
    }
    let (code, text) = culedger(&["report", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    for name in ["GPU 0 MIG 0", "GPU 0 MIG 1", "GPU 1"] {
        assert!(text.contains(name), "{name} in\n{text}");
    }
    let (_, top) = culedger(&["top", "--once", out.to_str().unwrap()]);
    assert!(top.contains("GPU 0 MIG 1"), "{top}");
}

/// A machine of one GPU of 32 GiB split into two MIG devices, writing into `out`: (the
/// machine, `out`, the directory of the process that listed them, their UUIDs).
fn mig_machine(name: &str) -> (Sim, PathBuf, PathBuf, Vec<String>) {
    let (mut sim, out) = machine_of(name, 1);
    sim.env("FAKECUDA_MIG", "0:2").env("FAKECUDA_TOTAL_MIB", "32768");
    let seen = sim.scratch().join("seen");
    let mut all = sim.python("devices.py");
    all.args(["10", "none", "0.1", "all"]).env("CULEDGER_OUT", &seen);
    sim.run_ok(&mut all);
    let migs: Vec<String> =
        reports(&seen)[0]["devices"].as_array().unwrap().iter().map(|d| d["uuid"].as_str().unwrap().to_string()).collect();
    assert_eq!(migs.len(), 2, "{migs:?}");
    (sim, out, seen, migs)
}

/// Rewrites every report in `dir` as written without NVML (no `host_index`, `usage`, nor the
/// untracked figure's NVML source and time); `check` sees each report first.
fn strip_nvml(dir: &Path, check: impl Fn(&Value)) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap();
        check(&v);
        for d in v["devices"].as_array_mut().unwrap() {
            let d = d.as_object_mut().unwrap();
            for k in ["host_index", "usage", "untracked_source", "untracked_t_us"] {
                d.remove(k);
            }
        }
        std::fs::write(e.path(), serde_json::to_vec(&v).unwrap()).unwrap();
    }
}

/// Without NVML (no report has nvidia-smi's number for its GPU), two workers each seeing one
/// GPU as their ordinal 0 are still two GPUs, named apart (they were both "GPU 0" once, and
/// every look-up by that name found the first): as nvidia-smi names a GPU, by its UUID when
/// only some GPUs are seen (no process saw every GPU, so nvidia-smi's numbers are not known),
/// in every command, with one line saying so; by its number in PCI bus order when a process saw
/// every GPU of the host.
#[test]
fn without_nvml_gpus_are_named_by_uuid_unless_every_gpu_is_seen() {
    let (sim, out) = machine("devices_no_nvml");
    wait_all(vec![start(&sim, "2", &["100", "none", "0.3"]), start(&sim, "3", &["300", "none", "0.3"])]);
    strip_nvml(&out, |v| {
        let named = v["devices"].as_array().unwrap().iter().all(|d| d.get("uuid").is_some_and(|u| u.is_string()));
        assert!(named, "the driver named it");
    });
    let r = report_json(&out);
    assert_eq!(rows(&r), vec![(0, 1, 100), (1, 1, 300)], "two GPUs in PCI bus order");
    let notes: Vec<&str> = r["notes"].as_array().expect("notes").iter().map(|n| n.as_str().unwrap()).collect();
    // No process saw every GPU of the host: the numbers need not be nvidia-smi's, and the
    // line names each GPU by its UUID (GPUs 2 and 3 of the machine).
    let uuids: Vec<String> = r["devices"].as_array().unwrap().iter().map(|d| d["uuid"].as_str().unwrap().to_string()).collect();
    let note = notes.iter().find(|n| n.contains("named by their UUIDs")).unwrap_or_else(|| panic!("{notes:?}"));
    assert!(note.contains("nvidia-smi's numbers are not known"), "{note}");
    // The simulated machine's UUIDs share their first group (the machine's hash): whole.
    assert!(note.ends_with(&format!(": {}, {}", uuids[0], uuids[1])), "{note}");
    let (code, text) = culedger(&["explain", out.to_str().unwrap()]);
    // One warning: the two workers hold 100 and 300 MiB (an imbalance, by design of this test).
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("named by their UUIDs") && !text.contains("Impossible"), "{text}");
    // Every command names the two GPUs by UUID, as nvidia-smi does when only some GPUs are
    // seen, never by numbers that need not be nvidia-smi's ("GPU 0" and "GPU 1" here were the
    // machine's GPUs 2 and 3).
    let dir = out.to_str().unwrap();
    let by_uuid = |what: &str, o: &str| {
        let words = o.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(words.contains(&uuids[0]) && words.contains(&uuids[1]), "{what}: both UUIDs in\n{o}");
        assert!(!words.contains("GPU 0") && !words.contains("GPU 1") && !words.contains("GPUs 0"), "{what}: no number in\n{o}");
    };
    let (_, report) = culedger(&["report", dir]);
    by_uuid("report", &report);
    assert!(report.contains(&format!("{} (8.00 GiB total)", uuids[1])), "{report}");
    by_uuid("explain", &text);
    let (_, check) = culedger(&["check", dir, "--budget", "live<=1GiB", "--format", "json"]);
    let v: Value = serde_json::from_str(&check).unwrap_or_else(|e| panic!("{e}: {check}"));
    let devices: Vec<&str> = v["outcomes"].as_array().unwrap().iter().map(|o| o["device"].as_str().unwrap()).collect();
    by_uuid("check", &devices.join(" "));
    let (_, top) = culedger(&["top", "--once", dir]);
    by_uuid("top", &top);
    let (_, diff) = culedger(&["diff", dir, dir]);
    by_uuid("diff", &diff);
    let trace = sim.scratch().join("trace.json");
    let (code, _) = culedger(&["export", dir, "--perfetto", trace.to_str().unwrap()]);
    assert_eq!(code, 0);
    let trace = std::fs::read_to_string(&trace).unwrap();
    for u in &uuids {
        // Its counter track, and its events with the process's own ordinal.
        assert!(trace.contains(&format!("\"name\":\"{u}\"")), "the track of {u}");
        assert!(trace.contains(&format!("{u} (its device 0)")), "the events on {u}");
    }
    // The JSON keeps the numbers and adds the names; the page (html) names the GPUs by them.
    let named: Vec<&str> = r["overview"].as_array().unwrap().iter().map(|o| o["uuid_name"].as_str().unwrap_or("-")).collect();
    assert_eq!(named, vec![uuids[0].as_str(), uuids[1].as_str()], "report --format json overview");
    let (_, ex) = culedger(&["explain", dir, "--format", "json"]);
    let ex: Value = serde_json::from_str(&ex).unwrap();
    let imbalance = ex["findings"].as_array().unwrap().iter().find(|f| f["device"].is_i64()).map(|f| f["gpu_name"].clone());
    if let Some(name) = imbalance {
        assert!(uuids.iter().any(|u| name == u.as_str()), "a finding about one GPU names it: {ex:#}");
    }
    let page = sim.scratch().join("page.html");
    let (code, _) = culedger(&["html", dir, "-o", page.to_str().unwrap()]);
    assert_eq!(code, 0);
    let html = std::fs::read_to_string(&page).unwrap();
    for u in &uuids {
        assert!(html.contains(&format!("\"uuid_name\":\"{u}\"")), "the page's data names {u}");
    }

    // A process that saw every GPU (CUDA_VISIBLE_DEVICES unset, all four) and a worker seeing
    // GPU 3 as its ordinal 0: the run saw the host's every GPU, so its PCI bus order is
    // nvidia-smi's numbering, said so, and GPU 3 is GPU 3 with both processes.
    let (sim, out) = machine("devices_no_nvml_all_seen");
    wait_all(vec![start(&sim, "3", &["300", "none", "0.3"])]);
    let mut all = sim.python("devices.py");
    all.args(["100", "none", "0.3", "all"]);
    sim.run_ok(&mut all);
    strip_nvml(&out, |v| assert!(v["process"]["visible_devices"].as_i64().is_some(), "the writer asked the driver"));
    let r = report_json(&out);
    assert_eq!(rows(&r), vec![(0, 1, 100), (1, 1, 100), (2, 1, 100), (3, 2, 400)], "nvidia-smi's numbers");
    let notes: Vec<&str> = r["notes"].as_array().expect("notes").iter().map(|n| n.as_str().unwrap()).collect();
    let note = notes.iter().find(|n| n.contains("numbered in PCI bus order")).unwrap_or_else(|| panic!("{notes:?}"));
    assert!(note.contains("nvidia-smi's numbers, since a process there saw every GPU"), "{note}");

    // One process with CUDA_VISIBLE_DEVICES=0,1 on the four GPUs: its ordinals are the PCI bus
    // order of what it saw, but nvidia-smi's numbers are not known (it saw only some GPUs): the
    // GPUs are named by UUID, not "GPU 0" and "GPU 1" (which they were, the order being unchanged).
    let (sim, out) = machine("devices_no_nvml_some_seen");
    let mut two = sim.python("devices.py");
    two.args(["100", "none", "0.1", "all"]).env("CUDA_VISIBLE_DEVICES", "0,1");
    sim.run_ok(&mut two);
    strip_nvml(&out, |_| {});
    let (_, report) = culedger(&["report", out.to_str().unwrap()]);
    let r = report_json(&out);
    let named: Vec<&str> = r["overview"].as_array().unwrap().iter().map(|o| o["uuid_name"].as_str().unwrap_or("-")).collect();
    let uuids: Vec<&str> = r["devices"].as_array().unwrap().iter().map(|d| d["uuid"].as_str().unwrap()).collect();
    assert_eq!(named, uuids, "{report}");
    assert!(!report.contains("GPU 0") && !report.contains("GPU 1"), "{report}");
}

/// Two processes on the two MIG devices of one GPU, each with figures of its own, are two
/// devices in every command, never merged under their GPU's number (explain looked a finding's
/// or a rank's device up by host and GPU number, which two MIG devices share). On GPU 0 split
/// into two MIG devices of 16 GiB: an SGLang-like server (`--tp 1`) on each; before the second
/// starts, a job on MIG device 1 takes 500 MiB (and a context) there, and its allocation of
/// 20000 MiB fails; it holds its memory while the second server starts, which is told less.
#[test]
fn two_mig_devices_of_one_gpu_in_every_command() {
    let (sim, out, seen, migs) = mig_machine("devices_mig_commands");
    sglang_tp1(&sim, &migs[0]);
    let mut job = holding(&sim, &migs[1], &["500", "none", "-1", "0", "20000"]);
    sglang_tp1(&sim, &migs[1]);
    drop(job.stdin.take());
    wait_all(vec![job]);
    let dir = out.to_str().unwrap();

    // report: two rows under GPU 0, each with its own figures; the failure is MIG device 1's.
    let r = report_json(&out);
    let overview: Vec<(i64, Option<i64>, i64, i64)> = r["overview"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (o["index"].as_i64().unwrap(), o["mig_index"].as_i64(), o["tracked_bytes"].as_i64().unwrap(), o["failures"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(overview.len(), 2, "{overview:?}");
    assert_eq!((overview[0].0, overview[0].1, overview[0].3), (0, Some(0), 0), "{overview:?}");
    assert_eq!((overview[1].0, overview[1].1, overview[1].3), (0, Some(1), 1), "{overview:?}");
    let tracked = [overview[0].2, overview[1].2];
    assert!(tracked[1] > 500 * MIB && tracked[0] != tracked[1], "{overview:?}");
    let (code, text) = culedger(&["report", dir]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("GPU 0 MIG 0") && text.contains("GPU 0 MIG 1"), "{text}");

    // explain: the failure on MIG device 1, told what that device had free; the sizing rows one
    // per MIG device, with their own pools.
    let (code, out_json) = culedger(&["explain", dir, "--format", "json"]);
    assert_eq!(code, 1, "{out_json}");
    let v: Value = serde_json::from_str(&out_json).unwrap();
    let findings = v["findings"].as_array().unwrap();
    let fail = findings.iter().find(|f| f["kind"] == "failed_allocation").expect("a failure");
    assert_eq!((fail["device"].as_i64(), fail["mig_index"].as_i64()), (Some(0), Some(1)), "{fail:#}");
    assert_eq!(fail["detail"]["bytes"].as_i64(), Some(20000 * MIB));
    let free = fail["detail"]["free_bytes"].as_i64().expect("free at the failure");
    assert!(free <= (16384 - 512 - 500) * MIB, "MIG device 1's free memory, not the GPU's: {fail:#}");
    // The two servers' ranks, each on its MIG device, the second first told less (the job's
    // context and 500 MiB).
    let sizing = findings.iter().find(|f| f["kind"] == "sizing").expect("the sizing rows");
    let rows: Vec<(Option<i64>, i64)> = sizing["detail"]["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["mig_index"].as_i64(), r["first_told_bytes"].as_i64().expect("a first query")))
        .collect();
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), vec![Some(0), Some(1)], "{sizing:#}");
    assert_eq!(rows[0].1 - rows[1].1, (512 + 500) * MIB, "{rows:?}");
    let (_, text) = culedger(&["explain", dir]);
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains("20000 (GPUs ...) could not allocate 19.53 GiB on GPU 0 MIG 1"), "{text}");
    assert!(words.contains("rank 0 (pid ") && words.contains(" 0 MIG 0 ") && !text.contains("Impossible"), "{text}");

    // check: one budget outcome per MIG device, each its own figure.
    let (code, o) = culedger(&["check", dir, "--budget", "live<=100GiB", "--format", "json"]);
    assert_eq!(code, 0, "{o}");
    let v: Value = serde_json::from_str(&o).unwrap();
    let outcomes: Vec<(String, i64)> = v["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["device"].as_str().unwrap().to_string(), o["value_bytes"].as_i64().unwrap()))
        .collect();
    assert_eq!(outcomes.len(), 2, "{o}");
    assert!(outcomes[0].0.ends_with("GPU 0 MIG 0") && outcomes[1].0.ends_with("GPU 0 MIG 1"), "{outcomes:?}");
    assert_eq!((outcomes[0].1, outcomes[1].1), (tracked[0], tracked[1]), "{outcomes:?}");

    // diff (the run against itself): two devices.
    let (code, o) = culedger(&["diff", dir, dir, "--format", "json"]);
    assert_eq!(code, 0, "{o}");
    let v: Value = serde_json::from_str(&o).unwrap();
    let devs: Vec<&str> = v["devices"].as_array().unwrap().iter().map(|d| d["device"].as_str().unwrap()).collect();
    assert_eq!(devs, vec!["GPU 0 MIG 0", "GPU 0 MIG 1"], "{o}");

    // whatif: each server on its own MIG device, with its own pool.
    let (_, o) = culedger(&["whatif", dir, "--set", "mem_fraction_static=0.80", "--format", "json"]);
    let v: Value = serde_json::from_str(&o).unwrap_or_else(|e| panic!("{e}: {o}"));
    let ranks: Vec<(Option<i64>, i64)> = v["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["mig_index"].as_i64(), r["startup_left_bytes"].as_i64().unwrap()))
        .collect();
    assert_eq!(ranks.iter().map(|r| r.0).collect::<Vec<_>>(), vec![Some(0), Some(1)], "{o}");
    assert!(ranks[0].1 > ranks[1].1, "MIG device 1 held the job's memory: {o}");

    // top: one row each, with its own tracked figure.
    let (code, frame) = culedger(&["top", "--once", dir]);
    assert_eq!(code, 0, "{frame}");
    let gib = |b: i64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
    for (name, b) in [("GPU 0 MIG 0 ", tracked[0]), ("GPU 0 MIG 1 ", tracked[1])] {
        assert!(frame.lines().any(|l| l.contains(name) && l.contains(&gib(b))), "{name} {} in\n{frame}", gib(b));
    }

    // metrics: two series per device figure, told apart by `mig`, with the DCGM exporter's MIG
    // labels (the GPU's index and UUID, the GPU instance).
    let (code, m) = culedger(&["metrics", dir]);
    assert_eq!(code, 0, "{m}");
    let gpu_uuid = reports(&seen)[0]["devices"][0]["parent_uuid"].as_str().unwrap().to_string();
    for (i, b) in tracked.iter().enumerate() {
        let series = format!(
            "culedger_device_tracked_bytes{{host=\"{}\",device=\"0\",mig=\"{i}\",gpu=\"0\",UUID=\"{gpu_uuid}\",GPU_I_ID=\"{}\"}} {b}",
            r["devices"][0]["host"].as_str().unwrap(),
            i + 1
        );
        assert!(m.contains(&series), "{series} in\n{m}");
    }
    // The exposition as Prometheus' own checker reads it (`make test-deps` fetches it).
    let promtool = culedger_scenarios::repo_root().join("target/test-deps/prometheus/usr/bin/promtool");
    assert!(promtool.is_file(), "{} is missing: run `make test-deps`", promtool.display());
    let mut check = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start promtool");
    std::io::Write::write_all(&mut check.stdin.take().unwrap(), m.as_bytes()).unwrap();
    let o = check.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );

    // html: the page's data has both devices' charts.
    let page = sim.scratch().join("page.html");
    let (code, o) = culedger(&["html", dir, "-o", page.to_str().unwrap()]);
    assert_eq!(code, 0, "{o}");
    let html = std::fs::read_to_string(&page).unwrap();
    for i in 0..2 {
        // The page's data is written with sorted keys: a chart's `index`, `mig_index`, `queries`.
        assert!(html.contains(&format!("\"index\":0,\"mig_index\":{i},\"queries\"")), "chart of MIG device {i}");
    }

    // export --memory-viz: a trace per MIG device (they shared GPU 0's place before, and one
    // trace held both); the job's 500 MiB and its failed 20000 MiB in MIG device 1's.
    let pickle = sim.scratch().join("snapshot.pickle");
    let o = std::process::Command::new(culedger_scenarios::repo_root().join("target/release/culedger"))
        .args(["export", dir, "--memory-viz", pickle.to_str().unwrap()])
        .output()
        .unwrap();
    let told = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{told}");
    assert!(told.contains("device 1 is ") && told.contains(" GPU 0 MIG 1"), "which GPU the second trace is: {told}");
    let per_trace = traces_with(&pickle, &[("alloc", 500), ("oom", 20000)]);
    assert_eq!(per_trace, vec![vec![0, 0], vec![1, 1]], "MIG device 1's trace alone has the job's");
}

/// A start that failed without a failed allocation names the device of its last free-memory
/// query as every other line does: on a MIG device, `GPU 0 MIG 1` (it said `GPU 0`, its GPU's
/// number, which both MIG devices share). devices.py asks for 1 MiB it expects to fail, gets
/// it, and exits with status 1.
#[test]
fn a_failed_start_on_a_mig_device_names_it() {
    let (sim, out, _, migs) = mig_machine("devices_mig_failed_start");
    let mig1 = &migs[1];
    let o = sim.python("devices.py").args(["10", "none", "0", "0", "1"]).env("CUDA_VISIBLE_DEVICES", mig1).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let (code, text) = culedger(&["explain", out.to_str().unwrap()]);
    assert_eq!(code, 1, "{text}");
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains("after its last free-memory query (on GPU 0 MIG 1 at "), "{text}");
}

/// Per trace of a memory_viz snapshot: how many entries have each (action, MiB).
fn traces_with(pickle: &Path, entries: &[(&str, i64)]) -> Vec<Vec<usize>> {
    let want: Vec<String> = entries.iter().map(|(a, mib)| format!("('{a}', {})", mib * MIB)).collect();
    let read = std::process::Command::new("python3")
        .args([
            "-c",
            &format!(
                "import pickle, sys\ns = pickle.load(open(sys.argv[1], 'rb'))\nfor t in s['device_traces']:\n    \
                 print(' '.join(str(sum((e['action'], e['size']) == w for e in t)) for w in [{}]))",
                want.join(", ")
            ),
        ])
        .arg(pickle)
        .output()
        .unwrap();
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    String::from_utf8_lossy(&read.stdout)
        .lines()
        .map(|l| l.split_whitespace().map(|n| n.parse().unwrap()).collect())
        .collect()
}

/// whatif and `export --memory-viz` on the layouts: (a) two SGLang-like servers (`--tp 1`), each
/// seeing one GPU as its ordinal 0 (`CUDA_VISIBLE_DEVICES=0` and `=1`), are two ranks on GPUs 0
/// and 1, the second told less (a job holds 700 MiB of GPU 1 meanwhile); (b) that job, under
/// `CUDA_VISIBLE_DEVICES=1,0`, on its ordinal 0: GPU 1 itself. The snapshot lists the job's
/// memory under the physical GPU's slot, 1, not its ordinal's.
#[test]
fn whatif_and_memory_viz_key_by_the_physical_gpu() {
    let (mut sim, out) = machine_of("devices_whatif_viz", 2);
    sim.env("FAKECUDA_TOTAL_MIB", "32768");
    sglang_tp1(&sim, "0");
    let mut job = holding(&sim, "1,0", &["700", "none", "-1", "0"]);
    sglang_tp1(&sim, "1");
    drop(job.stdin.take());
    wait_all(vec![job]);
    let dir = out.to_str().unwrap();
    let r = report_json(&out);
    assert_eq!(r["overview"].as_array().unwrap().iter().map(|o| o["processes"].as_u64()).collect::<Vec<_>>(), vec![Some(2), Some(3)]);

    // whatif: one rank per server, on GPUs 0 and 1, the second with less left (the job's).
    let (_, o) = culedger(&["whatif", dir, "--set", "mem_fraction_static=0.80", "--format", "json"]);
    let v: Value = serde_json::from_str(&o).unwrap_or_else(|e| panic!("{e}: {o}"));
    let ranks: Vec<(i64, i64)> = v["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["device"].as_i64().unwrap(), r["startup_left_bytes"].as_i64().unwrap()))
        .collect();
    assert_eq!(ranks.iter().map(|r| r.0).collect::<Vec<_>>(), vec![0, 1], "{o}");
    assert!(ranks[0].1 > ranks[1].1, "GPU 1 held the job's memory: {o}");

    // export --memory-viz: the snapshot's device traces by physical GPU.
    let pickle = sim.scratch().join("snapshot.pickle");
    let (code, o) = culedger(&["export", dir, "--memory-viz", pickle.to_str().unwrap()]);
    assert_eq!(code, 0, "{o}");
    let read = std::process::Command::new("python3")
        .args(["-c", "import pickle, sys\ns = pickle.load(open(sys.argv[1], 'rb'))\nprint(' '.join(str(sum(e['action'] == 'alloc' and e['size'] == 700 << 20 for e in t)) for t in s['device_traces']))"])
        .arg(&pickle)
        .output()
        .unwrap();
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    // Allocations of 700 MiB (the job's) per trace.
    let allocs: Vec<usize> =
        String::from_utf8_lossy(&read.stdout).split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert_eq!(allocs.len(), 2, "two GPUs' traces: {allocs:?}");
    assert_eq!(allocs, vec![0, 1], "the job's 700 MiB under GPU 1, not its ordinal 0");
}
