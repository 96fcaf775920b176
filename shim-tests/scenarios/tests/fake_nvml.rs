//! The simulated NVML (`shim-tests/fakenvml/fakenvml.c`, built against NVIDIA's nvml.h) under
//! NVIDIA's own Python bindings (nvidia-ml-py's pynvml, what SGLang and vLLM call NVML through;
//! `scripts/fetch-nvml.sh`, run by `make headers`), with no culedger: what the engines are told
//! about the simulated machine.

use culedger_scenarios::{repo_root, Run, Sim};

/// A 2-device machine of 80 GiB devices with pynvml on `PYTHONPATH`.
fn run(test: &str, mode: &str) -> Run {
    run_with(test, mode, &[])
}

fn run_with(test: &str, mode: &str, env: &[(&str, &str)]) -> Run {
    let py = repo_root().join("target/nvml/py");
    assert!(py.join("pynvml.py").is_file(), "{} missing: run `make headers` (scripts/fetch-nvml.sh)", py.display());
    let mut sim = Sim::new(test);
    sim.env("FAKECUDA_DEVICES", "2")
        .env("FAKECUDA_TOTAL_MIB", "81920")
        .env("FAKECUDA_CTX_MIB", "512")
        .env("PYTHONPATH", py);
    for (k, v) in env {
        sim.env(k, v);
    }
    sim.run_ok(sim.python("nvml_sessions.py").arg(mode))
}

/// NVML counts initialisations (nvml.h, nvmlInit_v2: "Shutdown will only occur after the
/// reference count reaches zero"): SGLang's pynvml peer check, init to shutdown inside NCCL's
/// session, leaves NCCL's handle look-ups working; the last shutdown ends the session, and one
/// more answers NVML_ERROR_UNINITIALIZED. Failed before the count: NCCL's next comm split read
/// "nvmlDeviceGetHandleByPciBusId() failed: Uninitialized".
#[test]
fn a_nested_session_does_not_end_the_outer_one() {
    let r = run("nvml_sessions", "sessions");
    assert_eq!((r.u64("devices"), r.u64("p2p")), (2, 0));
    assert_eq!(r.u64("after_peer_check"), 0, "NCCL's session survives SGLang's shutdown");
    assert_eq!(r.u64("after_last_shutdown"), 1, "NVML_ERROR_UNINITIALIZED once every init is undone");
    assert_eq!(r.u64("extra_shutdown"), 1, "a shutdown too many");
}

/// vLLM's queries: the device's name is the driver's; memory comes from the simulated machine,
/// so NVML's free and total are what cuMemGetInfo told the same process after its context
/// (512 MiB) and a 100 MiB allocation, v1 and v2 alike (v2 with nvml.h's version stamp, else
/// NVML_ERROR_ARGUMENT_VERSION_MISMATCH), and the untouched device shows nothing used; a short
/// name buffer is NVML_ERROR_INSUFFICIENT_SIZE; one NUMA node holding every online CPU.
#[test]
fn vllm_queries_answer_from_the_simulated_machine() {
    let r = run("nvml_queries", "queries");
    let (free, total) = (r.u64("cu_free"), r.u64("cu_total"));
    assert_eq!(total, 80 << 30);
    assert_eq!(total - free, (512 + 100) << 20, "the context and the allocation");
    assert_eq!((r.u64("v1_free"), r.u64("v1_total"), r.u64("v1_used")), (free, total, total - free));
    assert_eq!((r.u64("v2_free"), r.u64("v2_total"), r.u64("v2_used")), (free, total, total - free));
    assert_eq!(r.u64("v2_reserved"), 0);
    assert_eq!((r.u64("dev1_used"), r.u64("dev1_total")), (0, total));
    assert_eq!(r.u64("bad_version"), 25, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH");
    assert_eq!(r.u64("short_name"), 7, "NVML_ERROR_INSUFFICIENT_SIZE");
    assert_eq!(r.u64("numa"), 0);
    assert_eq!(r.u64("affinity_cpus"), r.u64("online_cpus"));
    assert_eq!(r.u64("same_socket"), 1, "one node, one socket");
    assert_eq!(r.u64("bad_scope"), 2, "NVML_ERROR_INVALID_ARGUMENT");
}

/// One physical device, two views: a process started with `CUDA_VISIBLE_DEVICES=1` reaches
/// physical device 1 as its ordinal 0; NVML (which indexes every device, as the real one does)
/// finds it by the UUID and PCI bus id the driver gives that ordinal, names the same UUID, and
/// lists this process with the bytes it holds there (its context and 100 MiB, what cuMemGetInfo
/// counts); no process on the other device.
#[test]
fn nvml_and_the_driver_name_one_device_alike() {
    let r = run_with("nvml_identity", "identity", &[("CUDA_VISIBLE_DEVICES", "1")]);
    assert_eq!((r.u64("index"), r.u64("same_device")), (1, 1));
    assert_eq!((r.u64("uuid_match"), r.u64("bus_match")), (1, 1));
    assert_eq!((r.u64("procs"), r.u64("mine"), r.u64("held")), (1, (512 + 100) << 20, (512 + 100) << 20));
    assert_eq!(r.u64("others"), 0);
}
