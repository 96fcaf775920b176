//! Helpers shared by the fake driver's integration tests.
//!
//! The driver reads its `FAKECUDA_*` configuration once per process, so every test that touches
//! driver state runs its body in a fresh child process of the test binary ([`in_child`]) with its
//! own machine (`FAKECUDA_MACHINE=t<pid>-<test>`), whose shared file is removed afterwards.
#![allow(dead_code)]

use fakecuda::api::{ctx::*, mem::*};
use fakecuda::types::*;
use std::process::{Command, Stdio};

pub const MIB: usize = 1 << 20;

/// Machine name unique to this test run.
pub fn machine_name(test: &str) -> String {
    format!("t{}-{}", std::process::id(), test)
}

/// Runs `body` in a child process of this test binary with `FAKECUDA_MACHINE` set to a fresh
/// machine and `env` applied; fails if the child does not run exactly that test successfully.
pub fn in_child(test: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    if std::env::var("FAKECUDA_TEST_CHILD").as_deref() == Ok(test) {
        body();
        return;
    }
    let machine = machine_name(test);
    let out = Command::new(std::env::current_exe().expect("test binary path"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("FAKECUDA_TEST_CHILD", test)
        .env("FAKECUDA_MACHINE", &machine)
        .env_remove("FAKECUDA_HELPER")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("spawn test child");
    let _ = std::fs::remove_file(format!("/dev/shm/fakecuda-{machine}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child run of {test} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

/// A command running helper `name` of this test binary (see [`helper`]) on the current machine.
pub fn helper_cmd(test_fn: &str, name: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("test binary path"));
    c.args([test_fn, "--exact", "--nocapture", "--test-threads=1"])
        .env_remove("FAKECUDA_TEST_CHILD")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env("FAKECUDA_HELPER", name);
    c
}

/// The helper this process was started as, if any.
pub fn helper() -> Option<String> {
    std::env::var("FAKECUDA_HELPER").ok()
}

/// `KEY=value` from a helper's `RESULT KEY=value` stdout lines.
pub fn result(stdout: &str, key: &str) -> Option<String> {
    // libtest may print "test name ... " on the same line before the helper's output.
    stdout.lines().filter_map(|l| l.find("RESULT ").map(|i| &l[i + 7..])).find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.to_string())
    })
}

/// cuInit + primary context of `dev` made current.
pub fn setup(dev: i32) -> CUcontext {
    unsafe {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        let mut ctx: CUcontext = std::ptr::null_mut();
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, dev), CUDA_SUCCESS);
        assert_eq!(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        ctx
    }
}

/// (free, total) of the current device.
pub fn info() -> (usize, usize) {
    let (mut f, mut t) = (0usize, 0usize);
    assert_eq!(unsafe { cuMemGetInfo_v2(&mut f, &mut t) }, CUDA_SUCCESS);
    (f, t)
}

/// Used bytes of the current device.
pub fn used() -> usize {
    let (f, t) = info();
    t - f
}

/// cuMemAlloc_v2 that must succeed.
pub fn alloc(size: usize) -> CUdeviceptr {
    let mut p = 0;
    assert_eq!(unsafe { cuMemAlloc_v2(&mut p, size) }, CUDA_SUCCESS, "cuMemAlloc_v2({size})");
    p
}

/// A pinned VMM allocation property on device `dev`, with the shareable handle types asked.
pub fn prop(dev: std::os::raw::c_int, handle_types: std::os::raw::c_int) -> CUmemAllocationProp {
    CUmemAllocationProp {
        type_: CU_MEM_ALLOCATION_TYPE_PINNED,
        requested_handle_types: handle_types,
        location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: dev },
        win32_handle_meta_data: std::ptr::null_mut(),
        compression_type: 0,
        gpu_direct_rdma_capable: 0,
        usage: 0,
        reserved: [0; 4],
    }
}
