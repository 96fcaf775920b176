//! `cudaError_t` codes of CUDA 12.9 (`driver_types.h`, enum `cudaError`) and their names.
//!
//! The code/name table below was generated from the official header; the descriptions returned by
//! `cudaGetErrorString` are our own short wording.

#![allow(non_upper_case_globals, non_camel_case_types)]

/// The runtime's error type (`enum cudaError`, an `int` in the C ABI).
pub type cudaError_t = i32;

macro_rules! error_codes {
    ($($name:ident = $code:literal,)*) => {
        $(#[doc = concat!("`", stringify!($name), "`")] pub const $name: cudaError_t = $code;)*
        /// Every known code with its C enumerator name, ascending by code.
        pub(crate) static ERROR_NAMES: &[(cudaError_t, &str)] = &[$(($code, concat!(stringify!($name), "\0")),)*];
    };
}

error_codes! {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorCudartUnloading = 4,
    cudaErrorProfilerDisabled = 5,
    cudaErrorProfilerNotInitialized = 6,
    cudaErrorProfilerAlreadyStarted = 7,
    cudaErrorProfilerAlreadyStopped = 8,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidPitchValue = 12,
    cudaErrorInvalidSymbol = 13,
    cudaErrorInvalidHostPointer = 16,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidTexture = 18,
    cudaErrorInvalidTextureBinding = 19,
    cudaErrorInvalidChannelDescriptor = 20,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorAddressOfConstant = 22,
    cudaErrorTextureFetchFailed = 23,
    cudaErrorTextureNotBound = 24,
    cudaErrorSynchronizationError = 25,
    cudaErrorInvalidFilterSetting = 26,
    cudaErrorInvalidNormSetting = 27,
    cudaErrorMixedDeviceExecution = 28,
    cudaErrorNotYetImplemented = 31,
    cudaErrorMemoryValueTooLarge = 32,
    cudaErrorStubLibrary = 34,
    cudaErrorInsufficientDriver = 35,
    cudaErrorCallRequiresNewerDriver = 36,
    cudaErrorInvalidSurface = 37,
    cudaErrorDuplicateVariableName = 43,
    cudaErrorDuplicateTextureName = 44,
    cudaErrorDuplicateSurfaceName = 45,
    cudaErrorDevicesUnavailable = 46,
    cudaErrorIncompatibleDriverContext = 49,
    cudaErrorMissingConfiguration = 52,
    cudaErrorPriorLaunchFailure = 53,
    cudaErrorLaunchMaxDepthExceeded = 65,
    cudaErrorLaunchFileScopedTex = 66,
    cudaErrorLaunchFileScopedSurf = 67,
    cudaErrorSyncDepthExceeded = 68,
    cudaErrorLaunchPendingCountExceeded = 69,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorDeviceNotLicensed = 102,
    cudaErrorSoftwareValidityNotEstablished = 103,
    cudaErrorStartupFailure = 127,
    cudaErrorInvalidKernelImage = 200,
    cudaErrorDeviceUninitialized = 201,
    cudaErrorMapBufferObjectFailed = 205,
    cudaErrorUnmapBufferObjectFailed = 206,
    cudaErrorArrayIsMapped = 207,
    cudaErrorAlreadyMapped = 208,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorAlreadyAcquired = 210,
    cudaErrorNotMapped = 211,
    cudaErrorNotMappedAsArray = 212,
    cudaErrorNotMappedAsPointer = 213,
    cudaErrorECCUncorrectable = 214,
    cudaErrorUnsupportedLimit = 215,
    cudaErrorDeviceAlreadyInUse = 216,
    cudaErrorPeerAccessUnsupported = 217,
    cudaErrorInvalidPtx = 218,
    cudaErrorInvalidGraphicsContext = 219,
    cudaErrorNvlinkUncorrectable = 220,
    cudaErrorJitCompilerNotFound = 221,
    cudaErrorUnsupportedPtxVersion = 222,
    cudaErrorJitCompilationDisabled = 223,
    cudaErrorUnsupportedExecAffinity = 224,
    cudaErrorUnsupportedDevSideSync = 225,
    cudaErrorContained = 226,
    cudaErrorInvalidSource = 300,
    cudaErrorFileNotFound = 301,
    cudaErrorSharedObjectSymbolNotFound = 302,
    cudaErrorSharedObjectInitFailed = 303,
    cudaErrorOperatingSystem = 304,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorLossyQuery = 402,
    cudaErrorSymbolNotFound = 500,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchTimeout = 702,
    cudaErrorLaunchIncompatibleTexturing = 703,
    cudaErrorPeerAccessAlreadyEnabled = 704,
    cudaErrorPeerAccessNotEnabled = 705,
    cudaErrorSetOnActiveProcess = 708,
    cudaErrorContextIsDestroyed = 709,
    cudaErrorAssert = 710,
    cudaErrorTooManyPeers = 711,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorHardwareStackError = 714,
    cudaErrorIllegalInstruction = 715,
    cudaErrorMisalignedAddress = 716,
    cudaErrorInvalidAddressSpace = 717,
    cudaErrorInvalidPc = 718,
    cudaErrorLaunchFailure = 719,
    cudaErrorCooperativeLaunchTooLarge = 720,
    cudaErrorTensorMemoryLeak = 721,
    cudaErrorNotPermitted = 800,
    cudaErrorNotSupported = 801,
    cudaErrorSystemNotReady = 802,
    cudaErrorSystemDriverMismatch = 803,
    cudaErrorCompatNotSupportedOnDevice = 804,
    cudaErrorMpsConnectionFailed = 805,
    cudaErrorMpsRpcFailure = 806,
    cudaErrorMpsServerNotReady = 807,
    cudaErrorMpsMaxClientsReached = 808,
    cudaErrorMpsMaxConnectionsReached = 809,
    cudaErrorMpsClientTerminated = 810,
    cudaErrorCdpNotSupported = 811,
    cudaErrorCdpVersionMismatch = 812,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureMerge = 902,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureIsolation = 905,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorCapturedEvent = 907,
    cudaErrorStreamCaptureWrongThread = 908,
    cudaErrorTimeout = 909,
    cudaErrorGraphExecUpdateFailure = 910,
    cudaErrorExternalDevice = 911,
    cudaErrorInvalidClusterSize = 912,
    cudaErrorFunctionNotLoaded = 913,
    cudaErrorInvalidResourceType = 914,
    cudaErrorInvalidResourceConfiguration = 915,
    cudaErrorUnknown = 999,
    cudaErrorApiFailureBase = 10000,
}

/// Short description of the codes programs commonly meet; other known codes are described by name.
fn description(code: cudaError_t) -> Option<&'static str> {
    Some(match code {
        cudaSuccess => "no error\0",
        cudaErrorInvalidValue => "invalid argument\0",
        cudaErrorMemoryAllocation => "out of memory\0",
        cudaErrorInitializationError => "initialization error\0",
        cudaErrorInvalidMemcpyDirection => "invalid copy direction for memcpy\0",
        cudaErrorInsufficientDriver => "CUDA driver version is insufficient for CUDA runtime version\0",
        cudaErrorCallRequiresNewerDriver => "API call is not supported in the installed CUDA driver\0",
        cudaErrorNoDevice => "no CUDA-capable device is detected\0",
        cudaErrorInvalidDevice => "invalid device ordinal\0",
        cudaErrorDeviceUninitialized => "invalid device context\0",
        cudaErrorInvalidResourceHandle => "invalid resource handle\0",
        cudaErrorSymbolNotFound => "named symbol not found\0",
        cudaErrorPeerAccessAlreadyEnabled => "peer access is already enabled\0",
        cudaErrorPeerAccessNotEnabled => "peer access has not been enabled\0",
        cudaErrorHostMemoryAlreadyRegistered => "part or all of the requested memory range is already mapped\0",
        cudaErrorHostMemoryNotRegistered => "pointer does not correspond to a registered memory region\0",
        cudaErrorNotSupported => "operation not supported\0",
        cudaErrorStreamCaptureUnsupported => "operation not permitted when stream is capturing\0",
        cudaErrorStreamCaptureInvalidated => "operation failed due to a previous error during capture\0",
        cudaErrorStreamCaptureUnmatched => "capture was not initiated in this stream\0",
        cudaErrorStreamCaptureWrongThread => {
            "attempt to terminate a thread-local capture sequence from another thread\0"
        }
        cudaErrorUnknown => "unknown error\0",
        _ => return None,
    })
}

/// The NUL-terminated enumerator name of `code`, if it is a known code.
fn name_of(code: cudaError_t) -> Option<&'static str> {
    ERROR_NAMES.binary_search_by_key(&code, |&(c, _)| c).ok().map(|i| ERROR_NAMES[i].1)
}

/// `cudaGetErrorName`: the enumerator name; like the real one, an unrecognised code yields
/// `"unrecognized error code"`.
pub(crate) fn error_name(code: cudaError_t) -> &'static str {
    name_of(code).unwrap_or("unrecognized error code\0")
}

/// `cudaGetErrorString`: a human description (our wording), or the name, or `"unrecognized error code"`.
pub(crate) fn error_string(code: cudaError_t) -> &'static str {
    description(code).or_else(|| name_of(code)).unwrap_or("unrecognized error code\0")
}

/// Maps a driver `CUresult` to the runtime's code. Since CUDA 11 the two enumerations share their
/// numeric values for every driver error the runtime forwards (OOM 2 -> cudaErrorMemoryAllocation 2,
/// CUDA_ERROR_INVALID_CONTEXT 201 -> cudaErrorDeviceUninitialized 201, ...); a code the runtime does
/// not know becomes `cudaErrorUnknown`.
pub(crate) fn from_driver(res: i32) -> cudaError_t {
    if name_of(res).is_some() {
        res
    } else {
        cudaErrorUnknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_nul_terminated() {
        assert!(ERROR_NAMES.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(ERROR_NAMES.iter().all(|(_, n)| n.ends_with('\0') && n.starts_with("cuda")));
    }

    #[test]
    fn names_strings_and_mapping() {
        assert_eq!(error_name(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation\0");
        assert_eq!(error_string(cudaErrorMemoryAllocation), "out of memory\0");
        assert_eq!(error_string(cudaErrorIllegalAddress), "cudaErrorIllegalAddress\0");
        assert_eq!(error_name(12345), "unrecognized error code\0");
        assert_eq!(from_driver(2), cudaErrorMemoryAllocation);
        assert_eq!(from_driver(201), cudaErrorDeviceUninitialized);
        assert_eq!(from_driver(4242), cudaErrorUnknown);
    }
}
