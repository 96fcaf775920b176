//! The "static runtime" path: this binary embeds `fakecudart` as an rlib (as NCCL and nvcc-built
//! extensions embed libcudart_static), so no `cuda*` symbol is exported or imported dynamically;
//! the embedded runtime still reaches the driver through dlopen + dlsym("cuGetProcAddress_v2").
//! It allocates, exports an IPC handle, does an NCCL-style VMM round trip through
//! `cudaGetDriverEntryPoint`, and uses the per-thread default stream.
//! RESULT keys: alloc_delta ipc_export ptsz_ok entry_status vmm_granularity vmm_mapped_delta
//!              vmm_released_delta entry_missing_status by_version_v1_differs by_version_old_status

use std::ffi::{c_int, c_void, CString};
use std::process::ExitCode;
use std::ptr::null_mut;

use culedger_scenarios::cuda::Vmm;
use fakecudart as rt;

const MIB: usize = 1 << 20;

fn ck(what: &str, e: rt::cudaError_t) -> Result<(), String> {
    if e == rt::cudaSuccess {
        Ok(())
    } else {
        Err(format!("{what} failed with cudaError {e}"))
    }
}

fn free_bytes() -> Result<usize, String> {
    let (mut f, mut t) = (0usize, 0usize);
    ck("cudaMemGetInfo", unsafe { rt::cudaMemGetInfo(&mut f, &mut t) })?;
    Ok(f)
}

/// `cudaGetDriverEntryPoint(name)`, returning the pointer and the query status.
fn entry_point(name: &str) -> Result<(*mut c_void, c_int), String> {
    let c = CString::new(name).map_err(|e| e.to_string())?;
    let mut p = null_mut();
    let mut status: c_int = -1;
    ck("cudaGetDriverEntryPoint", unsafe {
        rt::cudaGetDriverEntryPoint(c.as_ptr(), &mut p, rt::cudaEnableDefault, &mut status)
    })?;
    Ok((p, status))
}

fn run() -> Result<(), String> {
    unsafe {
        ck("cudaSetDevice", rt::cudaSetDevice(0))?;
        let f0 = free_bytes()?;
        let mut p = null_mut();
        ck("cudaMalloc", rt::cudaMalloc(&mut p, 16 * MIB))?;
        println!("RESULT alloc_delta={}", f0 - free_bytes()?);

        let mut h = rt::cudaIpcMemHandle_t::default();
        ck("cudaIpcGetMemHandle", rt::cudaIpcGetMemHandle(&mut h, p))?;
        println!("RESULT ipc_export={}", h.reserved.iter().any(|&b| b != 0) as u8);

        // cudaStreamPerThread routes to the per-thread driver table; the _ptsz export too.
        let mut q = null_mut();
        ck("cudaMallocAsync", rt::cudaMallocAsync(&mut q, 4 * MIB, rt::CUDA_STREAM_PER_THREAD as rt::cudaStream_t))?;
        ck("cudaFreeAsync", rt::cudaFreeAsync(q, rt::CUDA_STREAM_PER_THREAD as rt::cudaStream_t))?;
        ck("cudaMallocAsync_ptsz", rt::cudaMallocAsync_ptsz(&mut q, 2 * MIB, null_mut()))?;
        ck("cudaFreeAsync_ptsz", rt::cudaFreeAsync_ptsz(q, null_mut()))?;
        ck("cudaStreamSynchronize", rt::cudaStreamSynchronize(rt::CUDA_STREAM_PER_THREAD as rt::cudaStream_t))?;
        println!("RESULT ptsz_ok=1");

        let (_, status) = entry_point("cuMemCreate")?;
        println!("RESULT entry_status={status}");
        let (missing, missing_status) = entry_point("cuNoSuchFunction")?;
        println!("RESULT entry_missing_status={missing_status} entry_missing_null={}", missing.is_null() as u8);
        // By version: cuMemAlloc at 2000 is the v1 ABI (another entry than at 12090); cuMemCreate
        // did not exist in 10.0.
        let by_version = |name: &str, version: u32| -> Result<(*mut c_void, c_int), String> {
            let c = CString::new(name).map_err(|e| e.to_string())?;
            let (mut p, mut status) = (null_mut(), -1);
            ck(
                "cudaGetDriverEntryPointByVersion",
                rt::cudaGetDriverEntryPointByVersion(c.as_ptr(), &mut p, version, rt::cudaEnableDefault, &mut status),
            )?;
            Ok((p, status))
        };
        let (v1, _) = by_version("cuMemAlloc", 2000)?;
        let (v2, _) = entry_point("cuMemAlloc")?;
        println!("RESULT by_version_v1_differs={}", (!v1.is_null() && v1 != v2) as u8);
        let (old, old_status) = by_version("cuMemCreate", 10000)?;
        println!("RESULT by_version_old_status={old_status} by_version_old_null={}", old.is_null() as u8);

        let vmm = Vmm::resolve(|name, _version| entry_point(name).map(|(p, _)| p).unwrap_or(null_mut()))?;
        let r = vmm.round_trip(0, 3)?;
        println!(
            "RESULT vmm_granularity={} vmm_mapped_delta={} vmm_released_delta={}",
            r.granularity, r.mapped_delta, r.released_delta
        );
        ck("cudaFree", rt::cudaFree(p))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("static_runtime: {e}");
            ExitCode::FAILURE
        }
    }
}
