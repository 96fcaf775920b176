//! C types from cuda.h / cuda_runtime_api.h (CUDA 12.9), as far as the hooks need them.
#![allow(non_camel_case_types)]

use libc::{c_int, c_void};

pub type CUresult = c_int;
pub type cudaError_t = c_int;
/// `CUdeviceptr_v2`: `unsigned long long` (the `_v1` form is 32-bit `unsigned int`).
pub type CUdeviceptr = u64;
pub type CUstream = *mut c_void;
pub type cudaStream_t = *mut c_void;
pub type CUcontext = *mut c_void;
pub type CUgraph = *mut c_void;
pub type CUgraphExec = *mut c_void;
pub type CUgraphNode = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUlibrary = *mut c_void;
pub type CUmemoryPool = *mut c_void;
pub type CUdevice = c_int;
pub type CUmemGenericAllocationHandle = u64;
pub type cuuint64_t = u64;

/// `CUipcMemHandle_v1` / `cudaIpcMemHandle_t`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcMemHandle {
    pub reserved: [u8; 64],
}

/// `CUmemLocation_v1`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemLocation {
    pub type_: c_int,
    pub id: c_int,
}

/// Leading fields of `CUmemAllocationProp_v1` (we only read `type` and `location`).
#[repr(C)]
pub struct CUmemAllocationPropHead {
    pub type_: c_int,
    pub requested_handle_types: c_int,
    pub location: CUmemLocation,
}

/// Leading fields of `CUmemPoolProps_v1` (`allocType`, `handleTypes`, `location`): the
/// same layout as those of `CUmemAllocationProp_v1`.
pub type CUmemPoolPropsHead = CUmemAllocationPropHead;

pub const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
/// `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD` (and NULL): streams of the current context.
pub const CU_STREAM_PER_THREAD: u64 = 2;
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`.
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;

pub const CUDA_SUCCESS: CUresult = 0;
/// `cudaMemcpyHostToDevice` and `cudaMemcpyDefault` (cudaMemcpyKind).
pub const CUDA_MEMCPY_HOST_TO_DEVICE: c_int = 1;
pub const CUDA_MEMCPY_DEFAULT: c_int = 4;

/// Name of an error code for the report, for the codes an allocation can return.
pub fn error_name(kind: crate::hooks::Kind, code: c_int) -> &'static str {
    use crate::hooks::Kind;
    match (kind, code) {
        (Kind::Runtime, 1) => "cudaErrorInvalidValue",
        (Kind::Runtime, 2) => "cudaErrorMemoryAllocation",
        (Kind::Runtime, 3) => "cudaErrorInitializationError",
        (Kind::Runtime, 35) => "cudaErrorInsufficientDriver",
        (Kind::Runtime, 100) => "cudaErrorNoDevice",
        (Kind::Runtime, 101) => "cudaErrorInvalidDevice",
        (Kind::Runtime, 201) => "cudaErrorDeviceUninitialized",
        (Kind::Runtime, 801) => "cudaErrorNotSupported",
        (Kind::Runtime, 999) => "cudaErrorUnknown",
        (Kind::Runtime, _) => "cudaError",
        (Kind::Driver, 1) => "CUDA_ERROR_INVALID_VALUE",
        (Kind::Driver, 2) => "CUDA_ERROR_OUT_OF_MEMORY",
        (Kind::Driver, 3) => "CUDA_ERROR_NOT_INITIALIZED",
        (Kind::Driver, 101) => "CUDA_ERROR_INVALID_DEVICE",
        (Kind::Driver, 201) => "CUDA_ERROR_INVALID_CONTEXT",
        (Kind::Driver, 801) => "CUDA_ERROR_NOT_SUPPORTED",
        (Kind::Driver, 999) => "CUDA_ERROR_UNKNOWN",
        (Kind::Driver, _) => "CUresult",
    }
}

#[allow(dead_code)]
fn _assert_layout() {
    const _: () = assert!(std::mem::size_of::<IpcMemHandle>() == 64);
    const _: () = assert!(std::mem::size_of::<CUmemAllocationPropHead>() == 16);
}

pub type VoidPtr = *mut c_void;
