//! Symbol resolution: `cuGetProcAddress` (CUDA 11.3 ABI) and `cuGetProcAddress_v2` (CUDA 12.0 ABI).
//!
//! [`TABLE`] is the one list of resolvable entry points: (base name, CUDA version that introduced
//! the ABI, per-thread-stream flavour, exported symbol, address). It mirrors the
//! `PFN_<base>_v<version>[_ptsz|_ptds]` typedefs of `cudaTypedefs.h` of CUDA 12.9 and 13.x (a test
//! cross-checks both ways, per header, for the rows up to that header's version). The one alias is
//! `cuGraphInstantiate` from 12000 on, which cuda.h defines as `cuGraphInstantiateWithFlags`
//! (12.9 also `#define PFN_cuGraphInstantiate PFN_cuGraphInstantiateWithFlags_v11040`).
//!
//! Rows introduced after the driver's version (`FAKECUDA_DRIVER_VERSION`, default 12090) do not
//! exist for that driver: a 12.9 driver knows no `cuCtxGetDevice_v2` (13000) and resolves
//! `cuCtxGetDevice` at 13000 to the 2000 ABI, as a real 12.9 driver does.

use crate::api::{
    copy::*, ctx::*, exec::*, export::*, ipc::*, mem::*, module::*, occupancy::*, stream::*, tensormap::*, vmm::*,
};
use crate::types::*;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

/// Stream flavour of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Flavor {
    /// Legacy default stream semantics.
    Legacy,
    /// `_ptsz`: per-thread default stream, stream-taking function.
    Ptsz,
    /// `_ptds`: per-thread default stream, stream-less function.
    Ptds,
}

/// A function address in a static table.
#[derive(Clone, Copy)]
pub struct Addr(pub *const c_void);
// SAFETY: function addresses are immutable and valid from every thread.
unsafe impl Sync for Addr {}
unsafe impl Send for Addr {}

/// One resolvable ABI.
#[derive(Clone, Copy)]
pub struct Entry {
    pub base: &'static str,
    pub version: c_int,
    pub flavor: Flavor,
    pub symbol: &'static str,
    pub addr: Addr,
}

macro_rules! flavor {
    () => {
        Flavor::Legacy
    };
    (ptsz) => {
        Flavor::Ptsz
    };
    (ptds) => {
        Flavor::Ptds
    };
}

macro_rules! table {
    ($( $base:ident $ver:literal $($fl:ident)? => $sym:ident ; )*) => {
        /// Every resolvable (base, version, flavour) and the exported function implementing it.
        pub static TABLE: &[Entry] = &[
            $( Entry {
                base: stringify!($base),
                version: $ver,
                flavor: flavor!($($fl)?),
                symbol: stringify!($sym),
                addr: Addr($sym as *const c_void),
            }, )*
        ];
    };
}

table! {
    cuGetErrorString 6000 => cuGetErrorString;
    cuGetErrorName 6000 => cuGetErrorName;
    cuInit 2000 => cuInit;
    cuDriverGetVersion 2020 => cuDriverGetVersion;
    cuGetExportTable 3000 => cuGetExportTable;
    cuGetProcAddress 11030 => cuGetProcAddress;
    cuGetProcAddress 12000 => cuGetProcAddress_v2;
    cuDeviceGet 2000 => cuDeviceGet;
    cuDeviceGetCount 2000 => cuDeviceGetCount;
    cuDeviceGetName 2000 => cuDeviceGetName;
    cuDeviceTotalMem 2000 => cuDeviceTotalMem;
    cuDeviceTotalMem 3020 => cuDeviceTotalMem_v2;
    cuDeviceGetAttribute 2000 => cuDeviceGetAttribute;
    cuDeviceCanAccessPeer 4000 => cuDeviceCanAccessPeer;
    cuDevicePrimaryCtxRetain 7000 => cuDevicePrimaryCtxRetain;
    cuDevicePrimaryCtxRelease 7000 => cuDevicePrimaryCtxRelease;
    cuDevicePrimaryCtxRelease 11000 => cuDevicePrimaryCtxRelease_v2;
    cuDevicePrimaryCtxGetState 7000 => cuDevicePrimaryCtxGetState;
    cuCtxCreate 2000 => cuCtxCreate;
    cuCtxCreate 3020 => cuCtxCreate_v2;
    cuCtxCreate 11040 => cuCtxCreate_v3;
    cuCtxCreate 12050 => cuCtxCreate_v4;
    cuCtxDestroy 2000 => cuCtxDestroy;
    cuCtxDestroy 4000 => cuCtxDestroy_v2;
    cuCtxPushCurrent 2000 => cuCtxPushCurrent;
    cuCtxPushCurrent 4000 => cuCtxPushCurrent_v2;
    cuCtxPopCurrent 2000 => cuCtxPopCurrent;
    cuCtxPopCurrent 4000 => cuCtxPopCurrent_v2;
    cuCtxSetCurrent 4000 => cuCtxSetCurrent;
    cuCtxGetCurrent 4000 => cuCtxGetCurrent;
    cuCtxGetApiVersion 3020 => cuCtxGetApiVersion;
    cuCtxGetDevice 2000 => cuCtxGetDevice;
    cuCtxGetDevice 13000 => cuCtxGetDevice_v2;
    cuCtxSynchronize 2000 => cuCtxSynchronize;
    cuCtxSynchronize 13000 => cuCtxSynchronize_v2;
    cuCtxEnablePeerAccess 4000 => cuCtxEnablePeerAccess;
    cuCtxDisablePeerAccess 4000 => cuCtxDisablePeerAccess;
    cuMemGetInfo 2000 => cuMemGetInfo;
    cuMemGetInfo 3020 => cuMemGetInfo_v2;
    cuMemAlloc 2000 => cuMemAlloc;
    cuMemAlloc 3020 => cuMemAlloc_v2;
    cuMemAllocPitch 2000 => cuMemAllocPitch;
    cuMemAllocPitch 3020 => cuMemAllocPitch_v2;
    cuMemFree 2000 => cuMemFree;
    cuMemFree 3020 => cuMemFree_v2;
    cuMemGetAddressRange 2000 => cuMemGetAddressRange;
    cuMemGetAddressRange 3020 => cuMemGetAddressRange_v2;
    cuMemAllocHost 2000 => cuMemAllocHost;
    cuMemAllocHost 3020 => cuMemAllocHost_v2;
    cuMemFreeHost 2000 => cuMemFreeHost;
    cuMemHostAlloc 2020 => cuMemHostAlloc;
    cuMemAllocManaged 6000 => cuMemAllocManaged;
    cuMemHostRegister 4000 => cuMemHostRegister;
    cuMemHostRegister 6050 => cuMemHostRegister_v2;
    cuMemHostUnregister 4000 => cuMemHostUnregister;
    cuMemPrefetchAsync 8000 => cuMemPrefetchAsync;
    cuMemPrefetchAsync 8000 ptsz => cuMemPrefetchAsync_ptsz;
    cuMemPrefetchAsync 12020 => cuMemPrefetchAsync_v2;
    cuMemPrefetchAsync 12020 ptsz => cuMemPrefetchAsync_v2_ptsz;
    cuMemHostGetDevicePointer 2020 => cuMemHostGetDevicePointer;
    cuMemHostGetDevicePointer 3020 => cuMemHostGetDevicePointer_v2;
    cuPointerGetAttribute 4000 => cuPointerGetAttribute;
    cuPointerGetAttributes 7000 => cuPointerGetAttributes;
    cuMemAllocAsync 11020 => cuMemAllocAsync;
    cuMemAllocAsync 11020 ptsz => cuMemAllocAsync_ptsz;
    cuMemFreeAsync 11020 => cuMemFreeAsync;
    cuMemFreeAsync 11020 ptsz => cuMemFreeAsync_ptsz;
    cuMemAllocFromPoolAsync 11020 => cuMemAllocFromPoolAsync;
    cuMemAllocFromPoolAsync 11020 ptsz => cuMemAllocFromPoolAsync_ptsz;
    cuDeviceGetDefaultMemPool 11020 => cuDeviceGetDefaultMemPool;
    cuDeviceGetMemPool 11020 => cuDeviceGetMemPool;
    cuMemPoolCreate 11020 => cuMemPoolCreate;
    cuMemPoolDestroy 11020 => cuMemPoolDestroy;
    cuMemAddressReserve 10020 => cuMemAddressReserve;
    cuMemAddressFree 10020 => cuMemAddressFree;
    cuMemCreate 10020 => cuMemCreate;
    cuMemRelease 10020 => cuMemRelease;
    cuMemMap 10020 => cuMemMap;
    cuMemUnmap 10020 => cuMemUnmap;
    cuMemSetAccess 10020 => cuMemSetAccess;
    cuMemExportToShareableHandle 10020 => cuMemExportToShareableHandle;
    cuMemImportFromShareableHandle 10020 => cuMemImportFromShareableHandle;
    cuMemGetAllocationGranularity 10020 => cuMemGetAllocationGranularity;
    cuMemGetAllocationPropertiesFromHandle 10020 => cuMemGetAllocationPropertiesFromHandle;
    cuMemRetainAllocationHandle 11000 => cuMemRetainAllocationHandle;
    cuIpcGetMemHandle 4010 => cuIpcGetMemHandle;
    cuIpcOpenMemHandle 4010 => cuIpcOpenMemHandle;
    cuIpcOpenMemHandle 11000 => cuIpcOpenMemHandle_v2;
    cuIpcCloseMemHandle 4010 => cuIpcCloseMemHandle;
    cuIpcGetEventHandle 4010 => cuIpcGetEventHandle;
    cuIpcOpenEventHandle 4010 => cuIpcOpenEventHandle;
    cuMemcpyHtoD 2000 => cuMemcpyHtoD;
    cuMemcpyHtoD 3020 => cuMemcpyHtoD_v2;
    cuMemcpyHtoD 7000 ptds => cuMemcpyHtoD_v2_ptds;
    cuMemcpyDtoH 2000 => cuMemcpyDtoH;
    cuMemcpyDtoH 3020 => cuMemcpyDtoH_v2;
    cuMemcpyDtoH 7000 ptds => cuMemcpyDtoH_v2_ptds;
    cuMemcpyDtoD 2000 => cuMemcpyDtoD;
    cuMemcpyDtoD 3020 => cuMemcpyDtoD_v2;
    cuMemcpyDtoD 7000 ptds => cuMemcpyDtoD_v2_ptds;
    cuMemcpy 4000 => cuMemcpy;
    cuMemcpy 7000 ptds => cuMemcpy_ptds;
    cuMemcpyAsync 4000 => cuMemcpyAsync;
    cuMemcpyAsync 7000 ptsz => cuMemcpyAsync_ptsz;
    cuMemcpyHtoDAsync 2000 => cuMemcpyHtoDAsync;
    cuMemcpyHtoDAsync 3020 => cuMemcpyHtoDAsync_v2;
    cuMemcpyHtoDAsync 7000 ptsz => cuMemcpyHtoDAsync_v2_ptsz;
    cuMemcpyDtoHAsync 2000 => cuMemcpyDtoHAsync;
    cuMemcpyDtoHAsync 3020 => cuMemcpyDtoHAsync_v2;
    cuMemcpyDtoHAsync 7000 ptsz => cuMemcpyDtoHAsync_v2_ptsz;
    cuMemsetD8 2000 => cuMemsetD8;
    cuMemsetD8 3020 => cuMemsetD8_v2;
    cuMemsetD8 7000 ptds => cuMemsetD8_v2_ptds;
    cuMemsetD8Async 3020 => cuMemsetD8Async;
    cuMemsetD8Async 7000 ptsz => cuMemsetD8Async_ptsz;
    cuStreamCreate 2000 => cuStreamCreate;
    cuStreamDestroy 2000 => cuStreamDestroy;
    cuStreamDestroy 4000 => cuStreamDestroy_v2;
    cuStreamGetCtx 9020 => cuStreamGetCtx;
    cuStreamGetCtx 9020 ptsz => cuStreamGetCtx_ptsz;
    cuStreamGetCtx 12050 => cuStreamGetCtx_v2;
    cuStreamGetCtx 12050 ptsz => cuStreamGetCtx_v2_ptsz;
    cuStreamGetDevice 12080 => cuStreamGetDevice;
    cuStreamGetDevice 12080 ptsz => cuStreamGetDevice_ptsz;
    cuStreamSynchronize 2000 => cuStreamSynchronize;
    cuStreamSynchronize 7000 ptsz => cuStreamSynchronize_ptsz;
    cuStreamBeginCapture 10000 => cuStreamBeginCapture;
    cuStreamBeginCapture 10000 ptsz => cuStreamBeginCapture_ptsz;
    cuStreamBeginCapture 10010 => cuStreamBeginCapture_v2;
    cuStreamBeginCapture 10010 ptsz => cuStreamBeginCapture_v2_ptsz;
    cuStreamBeginCaptureToGraph 12030 => cuStreamBeginCaptureToGraph;
    cuStreamBeginCaptureToGraph 12030 ptsz => cuStreamBeginCaptureToGraph_ptsz;
    cuStreamBeginRecaptureToGraph 13030 => cuStreamBeginRecaptureToGraph;
    cuStreamBeginRecaptureToGraph 13030 ptsz => cuStreamBeginRecaptureToGraph_ptsz;
    cuStreamEndCapture 10000 => cuStreamEndCapture;
    cuStreamEndCapture 10000 ptsz => cuStreamEndCapture_ptsz;
    cuStreamIsCapturing 10000 => cuStreamIsCapturing;
    cuStreamIsCapturing 10000 ptsz => cuStreamIsCapturing_ptsz;
    cuThreadExchangeStreamCaptureMode 10010 => cuThreadExchangeStreamCaptureMode;
    cuGraphCreate 10000 => cuGraphCreate;
    cuGraphDestroy 10000 => cuGraphDestroy;
    cuGraphInstantiate 10000 => cuGraphInstantiate;
    cuGraphInstantiate 11000 => cuGraphInstantiate_v2;
    cuGraphInstantiate 12000 => cuGraphInstantiateWithFlags;
    cuGraphInstantiateWithFlags 11040 => cuGraphInstantiateWithFlags;
    cuGraphInstantiateWithParams 12000 => cuGraphInstantiateWithParams;
    cuGraphInstantiateWithParams 12000 ptsz => cuGraphInstantiateWithParams_ptsz;
    cuGraphExecDestroy 10000 => cuGraphExecDestroy;
    cuGraphNodeGetType 10000 => cuGraphNodeGetType;
    cuGraphKernelNodeGetParams 10000 => cuGraphKernelNodeGetParams;
    cuGraphKernelNodeGetParams 12000 => cuGraphKernelNodeGetParams_v2;
    cuGraphExecKernelNodeSetParams 10010 => cuGraphExecKernelNodeSetParams;
    cuGraphExecKernelNodeSetParams 12000 => cuGraphExecKernelNodeSetParams_v2;
    cuGraphLaunch 10000 => cuGraphLaunch;
    cuGraphLaunch 10000 ptsz => cuGraphLaunch_ptsz;
    cuModuleLoad 2000 => cuModuleLoad;
    cuModuleLoadData 2000 => cuModuleLoadData;
    cuModuleLoadDataEx 2010 => cuModuleLoadDataEx;
    cuModuleLoadFatBinary 2000 => cuModuleLoadFatBinary;
    cuModuleUnload 2000 => cuModuleUnload;
    cuLibraryLoadData 12000 => cuLibraryLoadData;
    cuLibraryLoadFromFile 12000 => cuLibraryLoadFromFile;
    cuLibraryUnload 12000 => cuLibraryUnload;
    cuDeviceGetUuid 9020 => cuDeviceGetUuid;
    cuDeviceGetUuid 11040 => cuDeviceGetUuid_v2;
    cuDeviceGetPCIBusId 4010 => cuDeviceGetPCIBusId;
    cuDeviceGetByPCIBusId 4010 => cuDeviceGetByPCIBusId;
    cuDeviceGetP2PAttribute 8000 => cuDeviceGetP2PAttribute;
    cuDevicePrimaryCtxSetFlags 7000 => cuDevicePrimaryCtxSetFlags;
    cuDevicePrimaryCtxSetFlags 11000 => cuDevicePrimaryCtxSetFlags_v2;
    cuCtxGetStreamPriorityRange 5050 => cuCtxGetStreamPriorityRange;
    cuCtxGetFlags 7000 => cuCtxGetFlags;
    cuCtxGetId 12000 => cuCtxGetId;
    cuCtxGetLimit 3010 => cuCtxGetLimit;
    cuCtxSetLimit 3010 => cuCtxSetLimit;
    cuEventCreate 2000 => cuEventCreate;
    cuEventRecord 2000 => cuEventRecord;
    cuEventRecord 7000 ptsz => cuEventRecord_ptsz;
    cuEventRecordWithFlags 11010 => cuEventRecordWithFlags;
    cuEventRecordWithFlags 11010 ptsz => cuEventRecordWithFlags_ptsz;
    cuEventQuery 2000 => cuEventQuery;
    cuEventSynchronize 2000 => cuEventSynchronize;
    cuEventDestroy 2000 => cuEventDestroy;
    cuEventDestroy 4000 => cuEventDestroy_v2;
    cuEventElapsedTime 2000 => cuEventElapsedTime;
    cuEventElapsedTime 12080 => cuEventElapsedTime_v2;
    cuStreamCreateWithPriority 5050 => cuStreamCreateWithPriority;
    cuStreamGetPriority 5050 => cuStreamGetPriority;
    cuStreamGetPriority 7000 ptsz => cuStreamGetPriority_ptsz;
    cuStreamGetFlags 5050 => cuStreamGetFlags;
    cuStreamGetFlags 7000 ptsz => cuStreamGetFlags_ptsz;
    cuStreamGetId 12000 => cuStreamGetId;
    cuStreamGetId 12000 ptsz => cuStreamGetId_ptsz;
    cuStreamQuery 2000 => cuStreamQuery;
    cuStreamQuery 7000 ptsz => cuStreamQuery_ptsz;
    cuStreamWaitEvent 3020 => cuStreamWaitEvent;
    cuStreamWaitEvent 7000 ptsz => cuStreamWaitEvent_ptsz;
    cuStreamGetCaptureInfo 10010 => cuStreamGetCaptureInfo;
    cuStreamGetCaptureInfo 10010 ptsz => cuStreamGetCaptureInfo_ptsz;
    cuStreamGetCaptureInfo 11030 => cuStreamGetCaptureInfo_v2;
    cuStreamGetCaptureInfo 11030 ptsz => cuStreamGetCaptureInfo_v2_ptsz;
    cuStreamGetCaptureInfo 12030 => cuStreamGetCaptureInfo_v3;
    cuStreamGetCaptureInfo 12030 ptsz => cuStreamGetCaptureInfo_v3_ptsz;
    cuStreamWriteValue32 8000 => cuStreamWriteValue32;
    cuStreamWriteValue32 8000 ptsz => cuStreamWriteValue32_ptsz;
    cuStreamWriteValue32 11070 => cuStreamWriteValue32_v2;
    cuStreamWriteValue32 11070 ptsz => cuStreamWriteValue32_v2_ptsz;
    cuStreamWaitValue32 8000 => cuStreamWaitValue32;
    cuStreamWaitValue32 8000 ptsz => cuStreamWaitValue32_ptsz;
    cuStreamWaitValue32 11070 => cuStreamWaitValue32_v2;
    cuStreamWaitValue32 11070 ptsz => cuStreamWaitValue32_v2_ptsz;
    cuStreamWriteValue64 9000 => cuStreamWriteValue64;
    cuStreamWriteValue64 9000 ptsz => cuStreamWriteValue64_ptsz;
    cuStreamWriteValue64 11070 => cuStreamWriteValue64_v2;
    cuStreamWriteValue64 11070 ptsz => cuStreamWriteValue64_v2_ptsz;
    cuStreamWaitValue64 9000 => cuStreamWaitValue64;
    cuStreamWaitValue64 9000 ptsz => cuStreamWaitValue64_ptsz;
    cuStreamWaitValue64 11070 => cuStreamWaitValue64_v2;
    cuStreamWaitValue64 11070 ptsz => cuStreamWaitValue64_v2_ptsz;
    cuStreamBatchMemOp 8000 => cuStreamBatchMemOp;
    cuStreamBatchMemOp 8000 ptsz => cuStreamBatchMemOp_ptsz;
    cuStreamBatchMemOp 11070 => cuStreamBatchMemOp_v2;
    cuStreamBatchMemOp 11070 ptsz => cuStreamBatchMemOp_v2_ptsz;
    cuLaunchHostFunc 10000 => cuLaunchHostFunc;
    cuLaunchHostFunc 10000 ptsz => cuLaunchHostFunc_ptsz;
    cuLaunchHostFunc 13010 => cuLaunchHostFunc_v2;
    cuLaunchHostFunc 13010 ptsz => cuLaunchHostFunc_v2_ptsz;
    cuLibraryGetKernel 12000 => cuLibraryGetKernel;
    cuLibraryGetModule 12000 => cuLibraryGetModule;
    cuKernelGetFunction 12000 => cuKernelGetFunction;
    cuKernelGetAttribute 12000 => cuKernelGetAttribute;
    cuKernelSetAttribute 12000 => cuKernelSetAttribute;
    cuKernelSetCacheConfig 12000 => cuKernelSetCacheConfig;
    cuKernelGetName 12030 => cuKernelGetName;
    cuKernelGetLibrary 12050 => cuKernelGetLibrary;
    cuLibraryGetGlobal 12000 => cuLibraryGetGlobal;
    cuModuleGetGlobal 2000 => cuModuleGetGlobal;
    cuModuleGetGlobal 3020 => cuModuleGetGlobal_v2;
    cuLinkCreate 5050 => cuLinkCreate;
    cuLinkCreate 6050 => cuLinkCreate_v2;
    cuLinkAddData 5050 => cuLinkAddData;
    cuLinkAddData 6050 => cuLinkAddData_v2;
    cuLinkComplete 5050 => cuLinkComplete;
    cuLinkDestroy 5050 => cuLinkDestroy;
    cuModuleGetFunction 2000 => cuModuleGetFunction;
    cuFuncGetAttribute 2020 => cuFuncGetAttribute;
    cuFuncSetAttribute 9000 => cuFuncSetAttribute;
    cuFuncSetCacheConfig 3000 => cuFuncSetCacheConfig;
    cuLaunchKernel 4000 => cuLaunchKernel;
    cuLaunchKernel 7000 ptsz => cuLaunchKernel_ptsz;
    cuLaunchKernelEx 11060 => cuLaunchKernelEx;
    cuLaunchKernelEx 11060 ptsz => cuLaunchKernelEx_ptsz;
    cuLaunchCooperativeKernel 9000 => cuLaunchCooperativeKernel;
    cuLaunchCooperativeKernel 9000 ptsz => cuLaunchCooperativeKernel_ptsz;
    cuOccupancyMaxActiveBlocksPerMultiprocessor 6050 => cuOccupancyMaxActiveBlocksPerMultiprocessor;
    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags 7000 => cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags;
    cuOccupancyAvailableDynamicSMemPerBlock 10020 => cuOccupancyAvailableDynamicSMemPerBlock;
    cuOccupancyMaxActiveClusters 11070 => cuOccupancyMaxActiveClusters;
    cuMemPoolGetAttribute 11020 => cuMemPoolGetAttribute;
    cuMemPoolSetAttribute 11020 => cuMemPoolSetAttribute;
    cuMemPoolTrimTo 11020 => cuMemPoolTrimTo;
    cuMemPoolSetAccess 11020 => cuMemPoolSetAccess;
    cuMemPoolGetAccess 11020 => cuMemPoolGetAccess;
    cuMemGetDefaultMemPool 13000 => cuMemGetDefaultMemPool;
    cuGraphGetNodes 10000 => cuGraphGetNodes;
    cuGraphUpload 11010 => cuGraphUpload;
    cuGraphUpload 11010 ptsz => cuGraphUpload_ptsz;
    cuDeviceGetGraphMemAttribute 11040 => cuDeviceGetGraphMemAttribute;
    cuDeviceSetGraphMemAttribute 11040 => cuDeviceSetGraphMemAttribute;
    cuDeviceGraphMemTrim 11040 => cuDeviceGraphMemTrim;
    cuDeviceSetMemPool 11020 => cuDeviceSetMemPool;
    cuMemGetMemPool 13000 => cuMemGetMemPool;
    cuMemSetMemPool 13000 => cuMemSetMemPool;
    cuMemsetD16 2000 => cuMemsetD16;
    cuMemsetD16 3020 => cuMemsetD16_v2;
    cuMemsetD16 7000 ptds => cuMemsetD16_v2_ptds;
    cuMemsetD16Async 3020 => cuMemsetD16Async;
    cuMemsetD16Async 7000 ptsz => cuMemsetD16Async_ptsz;
    cuMemsetD32 2000 => cuMemsetD32;
    cuMemsetD32 3020 => cuMemsetD32_v2;
    cuMemsetD32 7000 ptds => cuMemsetD32_v2_ptds;
    cuMemsetD32Async 3020 => cuMemsetD32Async;
    cuMemsetD32Async 7000 ptsz => cuMemsetD32Async_ptsz;
    cuMemcpy2DAsync 2000 => cuMemcpy2DAsync;
    cuMemcpy2DAsync 3020 => cuMemcpy2DAsync_v2;
    cuMemcpy2DAsync 7000 ptsz => cuMemcpy2DAsync_v2_ptsz;
    cuMemcpyDtoDAsync 3000 => cuMemcpyDtoDAsync;
    cuMemcpyDtoDAsync 3020 => cuMemcpyDtoDAsync_v2;
    cuMemcpyDtoDAsync 7000 ptsz => cuMemcpyDtoDAsync_v2_ptsz;
    cuMulticastCreate 12010 => cuMulticastCreate;
    cuMulticastAddDevice 12010 => cuMulticastAddDevice;
    cuMulticastBindMem 12010 => cuMulticastBindMem;
    cuMulticastBindMem 13010 => cuMulticastBindMem_v2;
    cuMulticastBindAddr 12010 => cuMulticastBindAddr;
    cuMulticastBindAddr 13010 => cuMulticastBindAddr_v2;
    cuMulticastUnbind 12010 => cuMulticastUnbind;
    cuMulticastGetGranularity 12010 => cuMulticastGetGranularity;
    cuCtxFromGreenCtx 12040 => cuCtxFromGreenCtx;
    cuGreenCtxCreate 12040 => cuGreenCtxCreate;
    cuGreenCtxDestroy 12040 => cuGreenCtxDestroy;
    cuGreenCtxStreamCreate 12050 => cuGreenCtxStreamCreate;
    cuDevSmResourceSplitByCount 12040 => cuDevSmResourceSplitByCount;
    cuDeviceGetDevResource 12040 => cuDeviceGetDevResource;
    cuDevResourceGenerateDesc 12040 => cuDevResourceGenerateDesc;
    cuTensorMapEncodeTiled 12000 => cuTensorMapEncodeTiled;
    cuLogsRegisterCallback 12090 => cuLogsRegisterCallback;
    cuLogsUnregisterCallback 12090 => cuLogsUnregisterCallback;
}

/// Why a resolution failed: the `CUresult` and the `CUdriverProcAddressQueryResult`.
pub type Miss = (CUresult, CUdriverProcAddressQueryResult);

/// Resolves a base name for `version` and `flags` (0 default = legacy in the driver, 1 legacy,
/// 2 per-thread default stream: the `_ptsz`/`_ptds` row when one exists at least as new as the
/// legacy row that would be chosen), on a driver of the configured version.
pub fn resolve(name: &str, version: c_int, flags: u64) -> Result<&'static Entry, Miss> {
    resolve_on(crate::config::Config::get().driver_version, name, version, flags)
}

/// [`resolve`] on a driver of version `driver`: rows newer than it do not exist.
pub fn resolve_on(driver: c_int, name: &str, version: c_int, flags: u64) -> Result<&'static Entry, Miss> {
    if flags & !(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0
        || flags == CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
    {
        return Err((CUDA_ERROR_INVALID_VALUE, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
    }
    let rows = || TABLE.iter().filter(|e| e.base == name && e.version <= driver);
    if rows().next().is_none() {
        return Err((CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
    }
    let newest = |per_thread: bool| {
        rows().filter(|e| (e.flavor != Flavor::Legacy) == per_thread && e.version <= version).max_by_key(|e| e.version)
    };
    let legacy = newest(false);
    let per_thread = if flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM { newest(true) } else { None };
    match (per_thread, legacy) {
        (Some(pt), Some(l)) if pt.version >= l.version => Ok(pt),
        (Some(pt), None) => Ok(pt),
        (_, Some(l)) => Ok(l),
        (None, None) => Err((CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)),
    }
}

/// Shared body of both ABIs: fills `pfn` (NULL on failure) and `status` on every path.
unsafe fn get_proc(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut CUdriverProcAddressQueryResult,
) -> CUresult {
    let name = if symbol.is_null() { None } else { CStr::from_ptr(symbol).to_str().ok() };
    let result = match (name, pfn.is_null()) {
        (None, _) | (_, true) => Err((CUDA_ERROR_INVALID_VALUE, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)),
        (Some(n), false) => resolve(n, version, flags),
    };
    if !pfn.is_null() {
        pfn.write(result.map_or(std::ptr::null_mut(), |e| e.addr.0 as *mut c_void));
    }
    if !status.is_null() {
        status.write(result.map_or_else(|(_, s)| s, |_| CU_GET_PROC_ADDRESS_SUCCESS));
    }
    crate::trace::line(|| {
        let shown = match name {
            Some("") => "\"\"".to_string(),
            Some(n) => n.to_string(),
            None => "(null)".to_string(),
        };
        match result {
            Ok(e) => format!("getproc {shown} {version} {flags} -> 0 {}", e.symbol),
            Err((code, _)) => format!("getproc {shown} {version} {flags} -> {code} -"),
        }
    });
    result.map_or_else(|(code, _)| code, |_| CUDA_SUCCESS)
}

/// CUDA 11.3 ABI.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CUresult {
    std::panic::catch_unwind(|| get_proc(symbol, pfn, cuda_version, flags, std::ptr::null_mut()))
        .unwrap_or(CUDA_ERROR_UNKNOWN)
}

/// CUDA 12.0 ABI, with the symbol status.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    symbol_status: *mut CUdriverProcAddressQueryResult,
) -> CUresult {
    std::panic::catch_unwind(|| get_proc(symbol, pfn, cuda_version, flags, symbol_status)).unwrap_or(CUDA_ERROR_UNKNOWN)
}
