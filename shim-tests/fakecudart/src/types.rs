//! C types of `cuda.h` / `driver_types.h` used by the runtime's ABI (64-bit Linux).

#![allow(non_camel_case_types, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_void};

/// `CUresult` (an enum: `int`).
pub type CUresult = c_int;
/// `CUdevice` (`int`).
pub type CUdevice = c_int;
/// `CUdeviceptr` (`CUdeviceptr_v2`, `unsigned long long` on LP64).
pub type CUdeviceptr = u64;
/// `CUcontext`.
pub type CUcontext = *mut c_void;
/// `CUstream`.
pub type CUstream = *mut c_void;
/// `CUgraph`.
pub type CUgraph = *mut c_void;
/// `CUgraphExec`.
pub type CUgraphExec = *mut c_void;

/// `cudaStream_t` (the same opaque handle as `CUstream`).
pub type cudaStream_t = *mut c_void;
/// `cudaGraph_t`.
pub type cudaGraph_t = *mut c_void;
/// `cudaGraphExec_t`.
pub type cudaGraphExec_t = *mut c_void;
/// `enum cudaMemcpyKind`.
pub type cudaMemcpyKind = c_int;
/// `enum cudaStreamCaptureMode`.
pub type cudaStreamCaptureMode = c_int;
/// `enum cudaStreamCaptureStatus`.
pub type cudaStreamCaptureStatus = c_int;
/// `enum cudaDriverEntryPointQueryResult`.
pub type cudaDriverEntryPointQueryResult = c_int;

/// `CU_IPC_HANDLE_SIZE` / `CUDA_IPC_HANDLE_SIZE`.
pub const IPC_HANDLE_SIZE: usize = 64;

/// `cudaIpcMemHandle_t` and `CUipcMemHandle`: 64 opaque bytes, passed BY VALUE to the open calls.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpcMemHandle {
    pub reserved: [c_char; IPC_HANDLE_SIZE],
}

/// `cudaIpcMemHandle_t`.
pub type cudaIpcMemHandle_t = IpcMemHandle;

impl Default for IpcMemHandle {
    fn default() -> Self {
        Self { reserved: [0; IPC_HANDLE_SIZE] }
    }
}

/// `cudaStreamLegacy`: the legacy default stream, whatever the compilation mode.
pub const CUDA_STREAM_LEGACY: usize = 0x1;
/// `cudaStreamPerThread`: the calling thread's default stream.
pub const CUDA_STREAM_PER_THREAD: usize = 0x2;

/// `enum cudaMemcpyKind` values.
pub const cudaMemcpyHostToHost: cudaMemcpyKind = 0;
pub const cudaMemcpyHostToDevice: cudaMemcpyKind = 1;
pub const cudaMemcpyDeviceToHost: cudaMemcpyKind = 2;
pub const cudaMemcpyDeviceToDevice: cudaMemcpyKind = 3;
pub const cudaMemcpyDefault: cudaMemcpyKind = 4;

/// `cudaIpcMemLazyEnablePeerAccess`.
pub const cudaIpcMemLazyEnablePeerAccess: u32 = 0x1;

/// `cudaGetDriverEntryPoint` flags (same values as the driver's `CU_GET_PROC_ADDRESS_*`).
pub const cudaEnableDefault: u64 = 0x0;
pub const cudaEnableLegacyStream: u64 = 0x1;
pub const cudaEnablePerThreadDefaultStream: u64 = 0x2;
