//! Interposer scenario for the static-runtime path (NCCL, nvcc-built extensions): this
//! binary embeds `fakecudart`, so no `cuda*` symbol is visible to LD_PRELOAD; the only way
//! culedger sees its memory is through the embedded runtime's `dlsym("cuGetProcAddress_v2")`
//! and the driver entries it resolves, plus `cudaGetDriverEntryPoint` (how NCCL gets
//! `cuMemCreate`). It keeps its memory live and prints what it holds as RESULT lines.

use std::ffi::{c_int, c_void, CString};
use std::process::ExitCode;
use std::ptr::null_mut;

use culedger_scenarios::cuda::{
    CUmemAllocFlags, CUmemAllocationProp, CUmemLocation, CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE,
};
use fakecudart as rt;

const MIB: usize = 1 << 20;

fn ck(what: &str, e: c_int) -> Result<(), String> {
    if e == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed with {e}"))
    }
}

type CuMemCreate = unsafe extern "C" fn(*mut u64, usize, *const CUmemAllocationProp, u64) -> c_int;

fn run() -> Result<(), String> {
    unsafe {
        ck("cudaSetDevice", rt::cudaSetDevice(1))?;
        let mut a = null_mut();
        ck("cudaMalloc", rt::cudaMalloc(&mut a, 24 * MIB))?;
        let mut b = null_mut();
        ck("cudaMalloc", rt::cudaMalloc(&mut b, 8 * MIB))?;
        let mut h = rt::cudaIpcMemHandle_t::default();
        ck("cudaIpcGetMemHandle", rt::cudaIpcGetMemHandle(&mut h, b))?;
        // Per-thread default stream: the embedded runtime uses the driver's _ptsz entry.
        let mut c = null_mut();
        let pts = rt::CUDA_STREAM_PER_THREAD as rt::cudaStream_t;
        ck("cudaMallocAsync", rt::cudaMallocAsync(&mut c, 6 * MIB, pts))?;
        let (mut free, mut total) = (0usize, 0usize);
        ck("cudaMemGetInfo", rt::cudaMemGetInfo(&mut free, &mut total))?;
        // NCCL's cuMem path: the driver entry from the runtime, physical memory on device 1.
        let name = CString::new("cuMemCreate").unwrap();
        let mut f: *mut c_void = null_mut();
        let mut status: c_int = -1;
        ck(
            "cudaGetDriverEntryPoint",
            rt::cudaGetDriverEntryPoint(name.as_ptr(), &mut f, rt::cudaEnableDefault, &mut status),
        )?;
        if f.is_null() {
            return Err(format!("the driver has no cuMemCreate (status {status})"));
        }
        let create = std::mem::transmute::<*mut c_void, CuMemCreate>(f);
        let prop = CUmemAllocationProp {
            kind: CU_MEM_ALLOCATION_TYPE_PINNED,
            requested_handle_types: 0,
            location: CUmemLocation { kind: CU_MEM_LOCATION_TYPE_DEVICE, id: 1 },
            win32_handle_meta_data: null_mut(),
            alloc_flags: CUmemAllocFlags::default(),
        };
        let mut handle = 0u64;
        ck("cuMemCreate", create(&mut handle, 4 * MIB, &prop, 0))?;
        println!(
            "RESULT live={} ipc={} other={} vmm={} probe_free={free} allocs=4",
            (24 + 8 + 6 + 4) * MIB,
            8 * MIB,
            (24 + 6 + 4) * MIB,
            4 * MIB
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("static_ledger: {e}");
            ExitCode::FAILURE
        }
    }
}
