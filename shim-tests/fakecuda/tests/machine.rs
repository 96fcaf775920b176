//! Several processes on one simulated machine: shared usage, reclaim of dead processes, legacy IPC
//! and VMM shareable handles. Helpers are this test binary re-run with `FAKECUDA_HELPER=<name>`.

mod common;

use common::*;
use fakecuda::api::{ctx::*, ipc::*, mem::*, vmm::*};
use fakecuda::types::*;
use std::io::{BufRead, BufReader, Write};
use std::os::raw::c_int;
use std::process::Stdio;
use std::ptr::null_mut;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn say(kv: &str) {
    println!("RESULT {kv}");
    let _ = std::io::stdout().flush();
}

/// Helper "hold": allocates 100 MiB, reports, and waits for stdin to close.
fn hold() {
    setup(0);
    alloc(100 * MIB);
    say("ready=1");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Starts helper `name` and waits for its `RESULT ready=1` line.
fn start_holder(test: &str) -> std::process::Child {
    let mut child =
        helper_cmd(test, "hold").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn helper");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    while out.read_line(&mut line).expect("read helper") > 0 && !line.contains("RESULT ready=1") {
        line.clear();
    }
    assert!(line.contains("RESULT ready=1"), "helper did not get ready");
    // Keep draining its output so it can finish writing when it exits.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    child
}

#[test]
fn cross_process_usage_and_reclaim() {
    if helper().as_deref() == Some("hold") {
        return hold();
    }
    in_child("cross_process_usage_and_reclaim", &[("FAKECUDA_CTX_MIB", "0"), ("FAKECUDA_TOTAL_MIB", "1024")], || {
        setup(0);
        assert_eq!(used(), 0);
        // A child that exits normally without freeing.
        let mut child = start_holder("cross_process_usage_and_reclaim");
        assert_eq!(used(), 100 * MIB, "the parent sees the child's allocation");
        drop(child.stdin.take());
        assert!(child.wait().expect("wait").success());
        assert_eq!(used(), 0, "an exited process's memory is given back");
        // A child that is killed.
        let mut child = start_holder("cross_process_usage_and_reclaim");
        assert_eq!(used(), 100 * MIB);
        child.kill().expect("kill");
        let _ = child.wait();
        assert_eq!(used(), 0, "a killed process's memory is given back");
        // OOM sees the other process's usage.
        let child = start_holder("cross_process_usage_and_reclaim");
        let mut p = 0;
        assert_eq!(unsafe { cuMemAlloc_v2(&mut p, 1000 * MIB) }, CUDA_ERROR_OUT_OF_MEMORY);
        drop(child);
    });
}

/// Helper "ipc": opens the handle in `FAKECUDA_IPC_HANDLE` on device 1 and reports.
fn ipc_helper() {
    unsafe {
        setup(1);
        let mut h = CUipcMemHandle { reserved: [0; 64] };
        h.reserved.copy_from_slice(&unhex(&std::env::var("FAKECUDA_IPC_HANDLE").expect("handle")));
        let mut p = 0;
        let rc = cuIpcOpenMemHandle_v2(&mut p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        say(&format!("open={rc}"));
        if rc != 0 {
            return;
        }
        say(&format!("used={}", used()));
        let mut v = 0u64;
        assert_eq!(cuPointerGetAttribute((&mut v as *mut u64).cast(), 9, p), 0);
        say(&format!("device={}", v as u32));
        let (mut base, mut size) = (0, 0);
        assert_eq!(cuMemGetAddressRange_v2(&mut base, &mut size, p + 1), 0);
        say(&format!("size={size}"));
        let mut again = 0;
        assert_eq!(cuIpcOpenMemHandle(&mut again, h, 0), 0);
        say(&format!("same={}", (again == p) as u8));
        // One context per device may open a given process's handles; another device's may too.
        let mut c = null_mut();
        assert_eq!(cuCtxCreate_v2(&mut c, 0, 1), 0);
        let mut other = 0;
        say(&format!("second_ctx_same_device={}", cuIpcOpenMemHandle_v2(&mut other, h, 0)));
        assert_eq!(cuCtxDestroy_v2(c), 0);
        assert_eq!(cuCtxCreate_v2(&mut c, 0, 0), 0);
        say(&format!("ctx_other_device={}", cuIpcOpenMemHandle_v2(&mut other, h, 0)));
        say(&format!("other_mapping={}", (other != p && other != 0) as u8));
        assert_eq!(cuIpcCloseMemHandle(other), 0);
        assert_eq!(cuCtxDestroy_v2(c), 0);
        assert_eq!(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE, "opened memory is not freed with cuMemFree");
        assert_eq!(cuIpcCloseMemHandle(p), 0);
        assert_eq!(cuIpcCloseMemHandle(p), 0);
        say(&format!("closed_used={}", used()));
        say(&format!("third_close={}", cuIpcCloseMemHandle(p)));
        let mut garbage = h;
        garbage.reserved[41] ^= 1;
        say(&format!("garbage={}", cuIpcOpenMemHandle_v2(&mut p, garbage, 0)));
        say(&format!("zeros={}", cuIpcOpenMemHandle_v2(&mut p, CUipcMemHandle { reserved: [0; 64] }, 0)));
    }
}

fn run_ipc_helper(test: &str, handle: &CUipcMemHandle, machine: Option<&str>) -> String {
    let mut cmd = helper_cmd(test, "ipc");
    cmd.env("FAKECUDA_IPC_HANDLE", hex(&handle.reserved));
    if let Some(m) = machine {
        cmd.env("FAKECUDA_MACHINE", m);
    }
    let out = cmd.output().expect("run helper");
    if let Some(m) = machine {
        let _ = std::fs::remove_file(format!("/dev/shm/fakecuda-{m}"));
    }
    assert!(out.status.success(), "ipc helper failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn ipc_handles_across_processes() {
    if helper().as_deref() == Some("ipc") {
        return ipc_helper();
    }
    let test = "ipc_handles_across_processes";
    in_child(
        test,
        &[("FAKECUDA_CTX_MIB", "0"), ("FAKECUDA_IPC_OPEN_MIB", "2"), ("FAKECUDA_DEVICES", "2")],
        || unsafe {
            setup(0);
            let p = alloc(8 * MIB);
            let mut h = CUipcMemHandle { reserved: [0; 64] };
            assert_eq!(cuIpcGetMemHandle(&mut h, p + 4096), 0, "any pointer inside the allocation");
            let mut h2 = CUipcMemHandle { reserved: [0; 64] };
            assert_eq!(cuIpcGetMemHandle(&mut h2, p), 0);
            assert_eq!(h, h2, "one handle per allocation");
            assert_eq!(cuIpcGetMemHandle(null_mut(), p), CUDA_ERROR_INVALID_VALUE);
            let mut q = 0;
            assert_eq!(
                cuIpcOpenMemHandle_v2(&mut q, h, 0),
                CUDA_ERROR_INVALID_CONTEXT,
                "the exporting process cannot open"
            );

            let out = run_ipc_helper(test, &h, None);
            assert_eq!(result(&out, "open").as_deref(), Some("0"), "{out}");
            assert_eq!(result(&out, "used"), Some((2 * MIB).to_string()), "open cost on the opener's device");
            assert_eq!(result(&out, "device").as_deref(), Some("0"), "memory of the exporter's device");
            assert_eq!(result(&out, "size"), Some((8 * MIB).to_string()));
            assert_eq!(result(&out, "same").as_deref(), Some("1"));
            assert_eq!(result(&out, "second_ctx_same_device").as_deref(), Some("201"));
            assert_eq!(result(&out, "ctx_other_device").as_deref(), Some("0"));
            assert_eq!(result(&out, "other_mapping").as_deref(), Some("1"));
            assert_eq!(result(&out, "closed_used").as_deref(), Some("0"));
            assert_eq!(result(&out, "third_close").as_deref(), Some("1"));
            assert_eq!(result(&out, "garbage").as_deref(), Some("400"));
            assert_eq!(result(&out, "zeros").as_deref(), Some("400"));

            let other = format!("{}-other", machine_name(test));
            let out = run_ipc_helper(test, &h, Some(&other));
            assert_eq!(result(&out, "open").as_deref(), Some("400"), "another machine: {out}");

            assert_eq!(cuMemFree_v2(p), 0);
            let out = run_ipc_helper(test, &h, None);
            assert_eq!(result(&out, "open").as_deref(), Some("400"), "freed allocation: {out}");
            // A new allocation at the same address gets a new handle; the old one stays dead.
            let p2 = alloc(8 * MIB);
            assert_eq!(cuIpcGetMemHandle(&mut h2, p2), 0);
            assert_ne!(h, h2);
            let out = run_ipc_helper(test, &h, None);
            assert_eq!(result(&out, "open").as_deref(), Some("400"));
            let out = run_ipc_helper(test, &h2, None);
            assert_eq!(result(&out, "open").as_deref(), Some("0"));
        },
    );
}

/// Helper "vmm": imports the fd number in `FAKECUDA_VMM_FD`, maps it, reports.
fn vmm_helper() {
    unsafe {
        setup(0);
        let fd: usize = std::env::var("FAKECUDA_VMM_FD").expect("fd").parse().expect("fd number");
        let mut h = 0;
        let rc = cuMemImportFromShareableHandle(
            &mut h,
            fd as *mut std::ffi::c_void,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        );
        say(&format!("import={rc}"));
        if rc != 0 {
            return;
        }
        let mut va = 0;
        assert_eq!(cuMemAddressReserve(&mut va, 4 * MIB, 0, 0, 0), 0);
        assert_eq!(cuMemMap(va, 4 * MIB, 0, h, 0), 0);
        say(&format!("used={}", used()));
        let mut pr = prop(9, 0);
        assert_eq!(cuMemGetAllocationPropertiesFromHandle(&mut pr, h), 0);
        say(&format!("device={}", pr.location.id));
    }
}

#[test]
fn vmm_accounting_and_sharing() {
    if helper().as_deref() == Some("vmm") {
        return vmm_helper();
    }
    let test = "vmm_accounting_and_sharing";
    in_child(test, &[("FAKECUDA_CTX_MIB", "0"), ("FAKECUDA_DEVICES", "2")], || unsafe {
        setup(0);
        let pr = prop(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        let mut gran = 0;
        assert_eq!(cuMemGetAllocationGranularity(&mut gran, &pr, 0), 0);
        assert_eq!(gran, 2 * MIB);
        assert_eq!(cuMemGetAllocationGranularity(&mut gran, &prop(5, 0), 0), CUDA_ERROR_INVALID_DEVICE);
        let mut h = 0;
        assert_eq!(cuMemCreate(&mut h, 3 * MIB, &pr, 0), CUDA_ERROR_INVALID_VALUE, "not a multiple of the granularity");
        assert_eq!(cuMemCreate(&mut h, 4 * MIB, std::ptr::null(), 0), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemCreate(&mut h, 4 * MIB, &pr, 0), 0);
        assert_eq!(used(), 4 * MIB, "physical memory is charged at creation");
        let mut va = 0;
        assert_eq!(cuMemAddressReserve(&mut va, 16 * MIB, 0, 0, 0), 0);
        assert_eq!(used(), 4 * MIB, "address space is free");
        assert_eq!(
            cuMemMap(va + 14 * MIB as u64, 4 * MIB, 0, h, 0),
            CUDA_ERROR_INVALID_VALUE,
            "outside the reservation"
        );
        assert_eq!(cuMemMap(va, 4 * MIB, 0, h, 0), 0);
        assert_eq!(cuMemMap(va + 2 * MIB as u64, 2 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "overlapping mapping");
        assert_eq!(cuMemMap(va + 4 * MIB as u64, 4 * MIB, 0, h, 0), 0, "a handle may be mapped twice");
        let desc = CUmemAccessDesc { location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: 0 }, flags: 3 };
        assert_eq!(cuMemSetAccess(va, 8 * MIB, &desc, 1), 0);
        assert_eq!(cuMemSetAccess(va, 10 * MIB, &desc, 1), CUDA_ERROR_INVALID_VALUE, "unmapped tail");
        let mut v = 0u64;
        assert_eq!(cuPointerGetAttribute((&mut v as *mut u64).cast(), 11, va + 5 * MIB as u64), 0);
        assert_eq!(v, va + 4 * MIB as u64, "RANGE_START_ADDR of the second mapping");
        let mut r = 0;
        assert_eq!(cuMemRetainAllocationHandle(&mut r, (va + 100) as *mut _), 0);
        assert_eq!(r, h);
        assert_eq!(cuMemRelease(r), 0);
        assert_eq!(cuMemRelease(h), 0);
        assert_eq!(used(), 4 * MIB, "released but still mapped");
        assert_eq!(cuMemAddressFree(va, 16 * MIB), CUDA_ERROR_INVALID_VALUE, "still mapped");
        assert_eq!(cuMemUnmap(va, 2 * MIB), CUDA_ERROR_INVALID_VALUE, "partial mapping");
        assert_eq!(cuMemUnmap(va, 8 * MIB), 0, "two whole mappings at once");
        assert_eq!(used(), 0, "freed with the last mapping");
        assert_eq!(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemAddressFree(va, 8 * MIB), CUDA_ERROR_INVALID_VALUE, "wrong size");
        assert_eq!(cuMemAddressFree(va, 16 * MIB), 0);

        // Shareable handles: a memfd that this or another process of the machine imports.
        assert_eq!(cuMemCreate(&mut h, 4 * MIB, &prop(1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), 0), 0);
        let mut fd: c_int = -1;
        assert_eq!(cuMemExportToShareableHandle((&mut fd as *mut c_int).cast(), h, 0x8, 0), CUDA_ERROR_NOT_SUPPORTED);
        assert_eq!(
            cuMemExportToShareableHandle(
                (&mut fd as *mut c_int).cast(),
                h,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0
            ),
            0
        );
        assert!(fd >= 0);
        let mut not_shareable = 0;
        assert_eq!(cuMemCreate(&mut not_shareable, 2 * MIB, &prop(0, 0), 0), 0);
        let mut fd2: c_int = -1;
        assert_eq!(
            cuMemExportToShareableHandle(
                (&mut fd2 as *mut c_int).cast(),
                not_shareable,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0
            ),
            CUDA_ERROR_INVALID_VALUE,
            "not created with the POSIX fd handle type"
        );
        assert_eq!(cuMemRelease(not_shareable), 0);
        let mut imported = 0;
        assert_eq!(
            cuMemImportFromShareableHandle(
                &mut imported,
                fd as usize as *mut _,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
            ),
            0
        );
        assert_ne!(imported, h);
        let bad = libc::memfd_create(c"junk".as_ptr(), 0);
        assert_eq!(
            cuMemImportFromShareableHandle(
                &mut imported,
                bad as usize as *mut _,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
            ),
            CUDA_ERROR_INVALID_VALUE
        );

        let out = helper_cmd(test, "vmm").env("FAKECUDA_VMM_FD", fd.to_string()).output().expect("helper");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(result(&stdout, "import").as_deref(), Some("0"), "{stdout}");
        assert_eq!(result(&stdout, "used").as_deref(), Some("0"), "imported memory belongs to the exporter");
        assert_eq!(result(&stdout, "device").as_deref(), Some("1"));
        let other = format!("{}-other", machine_name(test));
        let out = helper_cmd(test, "vmm")
            .env("FAKECUDA_VMM_FD", fd.to_string())
            .env("FAKECUDA_MACHINE", &other)
            .output()
            .expect("helper");
        let _ = std::fs::remove_file(format!("/dev/shm/fakecuda-{other}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(result(&stdout, "import").as_deref(), Some("1"), "another machine: {stdout}");
    });
}

/// fork() while other threads use the driver: the child never inherits a held lock and starts
/// with a fresh driver (it must call cuInit again), as with the real driver.
#[test]
fn fork_while_threads_allocate() {
    in_child("fork_while_threads_allocate", &[("FAKECUDA_CTX_MIB", "0")], || unsafe {
        let ctx = setup(0) as usize;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    assert_eq!(cuCtxSetCurrent(ctx as CUcontext), 0);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let p = alloc(MIB);
                        assert_eq!(cuMemFree_v2(p), 0);
                    }
                })
            })
            .collect();
        for _ in 0..20 {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                libc::alarm(5); // a deadlocked child dies of SIGALRM
                let mut p = 0;
                let fresh = cuMemAlloc_v2(&mut p, MIB) == CUDA_ERROR_NOT_INITIALIZED;
                let mut c = null_mut();
                let ok = fresh
                    && cuInit(0) == 0
                    && cuDevicePrimaryCtxRetain(&mut c, 0) == 0
                    && cuCtxSetCurrent(c) == 0
                    && cuMemAlloc_v2(&mut p, MIB) == 0
                    && cuMemFree_v2(p) == 0;
                libc::_exit(if ok { 0 } else { 1 });
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "forked child failed: status {status:#x}"
            );
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in workers {
            w.join().expect("worker");
        }
        assert_eq!(used(), 0, "children's usage is gone, the parent's is untouched");
    });
}

/// Helper "visible": what a process started with `CUDA_VISIBLE_DEVICES` sees; with 100 MiB on
/// its ordinal 0 and 30 MiB on its ordinal 1, it opens the handle in `FAKECUDA_IPC_HANDLE` (if
/// any) on its ordinal 0, reports and waits for stdin to close.
fn visible_helper() {
    unsafe {
        let rc = cuInit(0);
        say(&format!("init={rc}"));
        if rc != 0 {
            return;
        }
        let mut n = 0;
        assert_eq!(cuDeviceGetCount(&mut n), 0);
        say(&format!("count={n}"));
        let mut u = [0u8; 16];
        assert_eq!(cuDeviceGetUuid_v2(&mut u, 0), 0);
        say(&format!("uuid0={}", hex(&u)));
        let mut bus = [0 as std::os::raw::c_char; 32];
        assert_eq!(cuDeviceGetPCIBusId(bus.as_mut_ptr(), 32, 0), 0);
        say(&format!("bus0={}", std::ffi::CStr::from_ptr(bus.as_ptr()).to_str().unwrap()));
        let mut a = 0;
        assert_eq!(cuDeviceGetAttribute(&mut a, 33, 0), 0);
        say(&format!("bus_attr0={a}"));
        let mut d = -1;
        let rc = cuDeviceGetByPCIBusId(&mut d, c"0000:02:00.0".as_ptr());
        say(&format!("by_bus2={rc},{d}"));
        say(&format!("by_bus1={}", cuDeviceGetByPCIBusId(&mut d, c"00000000:01:00.0".as_ptr())));
        if n >= 2 {
            setup(1);
            alloc(30 * MIB);
        }
        setup(0);
        alloc(100 * MIB);
        if let Ok(h) = std::env::var("FAKECUDA_IPC_HANDLE") {
            let mut handle = CUipcMemHandle { reserved: [0; 64] };
            handle.reserved.copy_from_slice(&unhex(&h));
            let mut p = 0;
            say(&format!("open={}", cuIpcOpenMemHandle_v2(&mut p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)));
            let mut v = 0u64;
            assert_eq!(cuPointerGetAttribute((&mut v as *mut u64).cast(), 9, p), 0);
            say(&format!("opened_ordinal={}", v as u32));
        }
    }
    say("ready=1");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Runs helper "visible" with `CUDA_VISIBLE_DEVICES=spec` to its report; returns its stdout
/// (and the child, holding its memory until its stdin closes, when it got ready).
fn run_visible(test: &str, spec: &str, handle: Option<&CUipcMemHandle>) -> (String, Option<std::process::Child>) {
    let mut cmd = helper_cmd(test, "visible");
    cmd.env("CUDA_VISIBLE_DEVICES", spec).stdin(Stdio::piped()).stdout(Stdio::piped());
    if let Some(h) = handle {
        cmd.env("FAKECUDA_IPC_HANDLE", hex(&h.reserved));
    }
    let mut child = cmd.spawn().expect("spawn helper");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let (mut text, mut line) = (String::new(), String::new());
    while out.read_line(&mut line).expect("read helper") > 0 {
        text.push_str(&line);
        if line.contains("RESULT ready=1") {
            std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
            return (text, Some(child));
        }
        line.clear();
    }
    let _ = child.wait();
    (text, None)
}

/// `CUDA_VISIBLE_DEVICES` as the real driver reads it: a process sees the listed physical
/// devices as its ordinals 0, 1, ... (indices or `GPU-` UUIDs, up to the first entry naming no
/// device; none at all is CUDA_ERROR_NO_DEVICE); each physical device keeps its UUID and PCI bus
/// id whatever ordinal reaches it, and every process of the machine sees the memory another holds
/// on it, and opens its IPC handles through its own ordinal.
#[test]
fn visible_devices_are_physical_devices() {
    if helper().as_deref() == Some("visible") {
        return visible_helper();
    }
    const T: &str = "visible_devices_are_physical_devices";
    in_child(T, &[("FAKECUDA_CTX_MIB", "0"), ("FAKECUDA_DEVICES", "4"), ("FAKECUDA_TOTAL_MIB", "1024")], || unsafe {
        setup(2);
        let mine = alloc(10 * MIB);
        let mut handle = CUipcMemHandle { reserved: [0; 64] };
        assert_eq!(cuIpcGetMemHandle(&mut handle, mine), 0);
        let mut uuid2 = [0u8; 16];
        assert_eq!(cuDeviceGetUuid_v2(&mut uuid2, 2), 0);
        let text = |u: &[u8; 16]| fakecuda::config::uuid_string(u);

        let (out, child) = run_visible(T, "2,1", Some(&handle));
        let mut child = child.unwrap_or_else(|| panic!("helper failed:\n{out}"));
        assert_eq!(result(&out, "count").as_deref(), Some("2"));
        assert_eq!(result(&out, "uuid0"), Some(hex(&uuid2)), "its ordinal 0 is physical device 2");
        assert_eq!(result(&out, "bus0").as_deref(), Some("00000000:03:00.0"));
        assert_eq!(result(&out, "bus_attr0").as_deref(), Some("3"));
        assert_eq!(result(&out, "by_bus2").as_deref(), Some("0,1"), "bus 2 (physical 1) is its ordinal 1");
        assert_eq!(result(&out, "by_bus1").as_deref(), Some(&*CUDA_ERROR_INVALID_DEVICE.to_string()), "not visible");
        assert_eq!(result(&out, "open").as_deref(), Some("0"), "the handle opens through its ordinal 0");
        assert_eq!(result(&out, "opened_ordinal").as_deref(), Some("0"));
        // This process sees the helper's memory on the physical devices it charged.
        assert_eq!(used(), (10 + 100 + 2) * MIB, "device 2: mine, the helper's and its IPC mapping");
        setup(1);
        assert_eq!(used(), 30 * MIB, "device 1");
        setup(0);
        assert_eq!(used(), 0, "device 0: nobody's");
        drop(child.stdin.take());
        assert!(child.wait().expect("wait").success());
        setup(2);
        assert_eq!(used(), 10 * MIB, "the helper's memory is given back to the physical device");

        // A UUID (upper case too) names the device; a MIG- entry, an unknown index and an empty
        // list end the list.
        let (out, child) = run_visible(T, &format!("{},9,0", text(&uuid2).to_uppercase()), None);
        drop(child);
        assert_eq!((result(&out, "count").as_deref(), result(&out, "uuid0")), (Some("1"), Some(hex(&uuid2))));
        for none in ["", "MIG-4f1b2c3d-0000-0000-0000-000000000000", "7", "-1"] {
            let (out, _) = run_visible(T, none, None);
            assert_eq!(result(&out, "init"), Some(CUDA_ERROR_NO_DEVICE.to_string()), "{none:?}:\n{out}");
        }
    });
}
