//! Which CUDA entry points culedger hooks, and why the others are left alone: a checked
//! inventory (test-only; nothing here is in the library's code path).
//!
//! Scope: every driver base (`PFN_<base>_v<n>` in cudaTypedefs.h) and every runtime function
//! (`cuda_runtime_api.h`) that allocates, frees, queries, exports/imports (IPC), captures,
//! instantiates or maps device memory, or costs the driver memory (contexts, peers,
//! modules), in CUDA 12.9, 13.0 and 13.5 ([`DRIVER_SCOPE`], [`RUNTIME_SCOPE`]). The tests fail
//! when a header has an in-scope entry point that is neither hooked (a row of `table.rs`) nor
//! listed here with a reason, and when an entry listed here is hooked or exists in no header.

/// Name prefixes that put a driver base in scope.
pub const DRIVER_SCOPE: &[&str] = &[
    "cuMemAlloc",
    "cuMemFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemHost",
    "cuMemGetInfo",
    "cuMemGetAddressRange",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemAddress",
    "cuMemSetAccess",
    "cuMemRetainAllocationHandle",
    "cuMemExport",
    "cuMemImport",
    "cuMemPool",
    "cuMemGetHandleForAddressRange",
    "cuIpc",
    "cuArrayCreate",
    "cuArray3DCreate",
    "cuArrayDestroy",
    "cuMipmappedArrayCreate",
    "cuMipmappedArrayDestroy",
    "cuMulticastCreate",
    "cuMulticastBind",
    "cuImportExternalMemory",
    "cuExternalMemoryGetMapped",
    "cuDestroyExternalMemory",
    "cuStreamBeginCapture",
    "cuStreamEndCapture",
    "cuStreamBeginRecapture",
    "cuGraphInstantiate",
    "cuGraphExecDestroy",
    "cuGraphUpload",
    "cuGraphAddMemAllocNode",
    "cuGraphAddMemFreeNode",
    "cuDeviceGraphMemTrim",
    "cuCtxCreate",
    "cuCtxDestroy",
    "cuGreenCtxCreate",
    "cuDevicePrimaryCtx",
    "cuCtxEnablePeerAccess",
    "cuCtxDisablePeerAccess",
    "cuModuleLoad",
    "cuModuleUnload",
    "cuLibraryLoad",
    "cuLibraryUnload",
    "cuDeviceTotalMem",
    "cuGetProcAddress",
    "cuLogicalEndpointBind",
    "cuLogicalEndpointExport",
    "cuLogicalEndpointImport",
];

/// Name prefixes that put a runtime function in scope.
pub const RUNTIME_SCOPE: &[&str] = &[
    "cudaMalloc",
    "cudaFree",
    "cudaHostAlloc",
    "cudaHostRegister",
    "cudaHostUnregister",
    "cudaMemGetInfo",
    "cudaIpc",
    "cudaStreamBeginCapture",
    "cudaStreamEndCapture",
    "cudaStreamBeginRecapture",
    "cudaGraphInstantiate",
    "cudaGraphExecDestroy",
    "cudaGraphUpload",
    "cudaGraphAddMemAllocNode",
    "cudaGraphAddMemFreeNode",
    "cudaDeviceGraphMemTrim",
    "cudaMemPool",
    "cudaImportExternalMemory",
    "cudaExternalMemoryGetMapped",
    "cudaDestroyExternalMemory",
    "cudaDeviceEnablePeerAccess",
    "cudaDeviceDisablePeerAccess",
    "cudaGetDriverEntryPoint",
    "cudaDeviceReset",
    "cudaGreenCtxCreate",
    "cudaLibraryLoad",
    "cudaLibraryUnload",
];

const COSTS_CUMULATIVE: &str = "releases a hidden driver cost; `driver_costs` are cumulative per API (what the calls took), so there is nothing to take back";
const POOL: &str = "stream-ordered pool management: allocations from pools are hooked (cuMemAllocAsync, cuMemAllocFromPoolAsync); what a pool keeps reserved beyond its live allocations shows as untracked (docs/hooks.md, limits)";
const POOL_IPC: &str = "IPC of stream-ordered pools is not followed yet: an exported pool allocation keeps its category, an imported one is not recorded (it is the exporter's memory) and its mapping cost shows as untracked";
const ARRAYS: &str = "CUDA arrays (texture/surface memory) are opaque handles, not device pointers, and inference engines do not allocate them; their memory shows as untracked";
const EXTERNAL: &str =
    "graphics/Vulkan/NvSci interop: the memory belongs to another API and is mapped, not allocated, by CUDA";
const GRAPH_MEM_NODES: &str = "graph memory nodes get their physical memory from the device's graph memory pool when the graph is launched, not when the node is added; it shows as untracked";

/// Driver bases in scope that culedger does not hook, with the reason.
pub const NOT_HOOKED_DRIVER: &[(&str, &str)] = &[
    ("cuArrayCreate", ARRAYS),
    ("cuArray3DCreate", ARRAYS),
    ("cuArrayDestroy", ARRAYS),
    ("cuMipmappedArrayCreate", ARRAYS),
    ("cuMipmappedArrayDestroy", ARRAYS),
    ("cuMemMapArrayAsync", ARRAYS),
    ("cuCtxDestroy", "destroying a context releases its own cost (driver costs are cumulative) and frees what it still owns, which the ledger keeps until the program frees it: programs free before they destroy"),
    ("cuCtxDisablePeerAccess", COSTS_CUMULATIVE),
    ("cuDevicePrimaryCtxRelease", "as cuCtxDestroy, for the primary context's last reference"),
    ("cuDevicePrimaryCtxReset", "as cuCtxDestroy, for the primary context"),
    ("cuDevicePrimaryCtxGetState", "a query without memory"),
    ("cuDevicePrimaryCtxSetFlags", "sets flags, no memory"),
    ("cuDeviceTotalMem", "the device's total alone says nothing about its use; probes (cuMemGetInfo) record the total with the free bytes"),
    ("cuGreenCtxCreate", "a green context partitions the SMs of a device whose context already exists; any memory it costs shows as untracked"),
    ("cuGraphUpload", "uploads an instantiated graph: no allocation the program sees (the instantiation cost is measured)"),
    ("cuGraphAddMemAllocNode", GRAPH_MEM_NODES),
    ("cuGraphAddMemFreeNode", GRAPH_MEM_NODES),
    ("cuDeviceGraphMemTrim", GRAPH_MEM_NODES),
    ("cuImportExternalMemory", EXTERNAL),
    ("cuExternalMemoryGetMappedBuffer", EXTERNAL),
    ("cuExternalMemoryGetMappedMipmappedArray", EXTERNAL),
    ("cuDestroyExternalMemory", EXTERNAL),
    ("cuIpcGetEventHandle", "IPC of events, not memory"),
    ("cuIpcOpenEventHandle", "IPC of events, not memory"),
    ("cuModuleUnload", COSTS_CUMULATIVE),
    ("cuLogicalEndpointBindAddr", "CUDA 13.3 fabric logical endpoints bind memory the process already owns (an address or a cuMemCreate handle): no new device memory"),
    ("cuLogicalEndpointBindMem", "as cuLogicalEndpointBindAddr"),
    ("cuLogicalEndpointExport", "exports a logical endpoint id, not memory"),
    ("cuLogicalEndpointImport", "imports a logical endpoint id, not memory"),
    ("cuMemAddressReserve", "virtual address space only: no memory until cuMemMap (hooked, with cuMemCreate)"),
    ("cuMemAddressFree", "virtual address space only"),
    ("cuMemGetAddressRange", "a pointer query (culedger calls it itself to size opened IPC buffers)"),
    ("cuMemGetHandleForAddressRange", "a dma-buf for a NIC (GPUDirect RDMA), not a CUDA peer: the memory keeps its category"),
    ("cuMemHostGetDevicePointer", "a query on pinned host memory"),
    ("cuMemHostGetFlags", "a query on pinned host memory"),
    ("cuMemImportFromShareableHandle", "an imported VMM handle is the exporter's memory, never local; the exporter's cuMemExportToShareableHandle is hooked"),
    ("cuMemSetAccess", "access rights on a mapped range, no memory"),
    ("cuMemPoolTrimTo", POOL),
    ("cuMemPoolSetAttribute", POOL),
    ("cuMemPoolGetAttribute", POOL),
    ("cuMemPoolSetAccess", POOL),
    ("cuMemPoolGetAccess", POOL),
    ("cuMemPoolExportPointer", POOL_IPC),
    ("cuMemPoolImportPointer", POOL_IPC),
    ("cuMemPoolExportToShareableHandle", POOL_IPC),
    ("cuMemPoolImportFromShareableHandle", POOL_IPC),
    ("cuMulticastCreate", "NVLink SHARP multicast objects (NCCL NVLS) have no memory of their own: device memory the process already owns (cuMemCreate, hooked) is bound to them"),
    ("cuMulticastBindAddr", "binds memory the process already owns to a multicast object"),
    ("cuMulticastBindMem", "binds memory the process already owns to a multicast object"),
    ("cuStreamBeginCaptureToCig", "CUDA 13.1 CIG capture records into a graphics command list, not a CUDA graph: allocations meanwhile are not graph memory (stream-ordered allocation is refused on CIG streams)"),
    ("cuStreamEndCaptureToCig", "ends a CIG capture (see cuStreamBeginCaptureToCig)"),
];

const VIA_DRIVER: &str = "reaches the driver through the runtime's driver table, which the hooked resolver wrapped: recorded under the driver entry point's name";

/// Runtime functions in scope that culedger does not hook, with the reason.
pub const NOT_HOOKED_RUNTIME: &[(&str, &str)] = &[
    ("cudaMallocFromPoolAsync", VIA_DRIVER),
    ("cudaMalloc3D", VIA_DRIVER),
    ("cudaMalloc3DArray", ARRAYS),
    ("cudaMallocArray", ARRAYS),
    ("cudaMallocMipmappedArray", ARRAYS),
    ("cudaFreeArray", ARRAYS),
    ("cudaFreeMipmappedArray", ARRAYS),
    ("cudaDeviceReset", "as cuDevicePrimaryCtxReset"),
    ("cudaDeviceDisablePeerAccess", COSTS_CUMULATIVE),
    ("cudaGraphUpload", "as cuGraphUpload"),
    ("cudaGraphAddMemAllocNode", GRAPH_MEM_NODES),
    ("cudaGraphAddMemFreeNode", GRAPH_MEM_NODES),
    ("cudaDeviceGraphMemTrim", GRAPH_MEM_NODES),
    ("cudaImportExternalMemory", EXTERNAL),
    ("cudaExternalMemoryGetMappedBuffer", EXTERNAL),
    ("cudaExternalMemoryGetMappedMipmappedArray", EXTERNAL),
    ("cudaDestroyExternalMemory", EXTERNAL),
    ("cudaIpcGetEventHandle", "IPC of events, not memory"),
    ("cudaIpcOpenEventHandle", "IPC of events, not memory"),
    ("cudaGreenCtxCreate", "as cuGreenCtxCreate (CUDA 13.5 runtime)"),
    ("cudaLibraryLoadData", VIA_DRIVER),
    ("cudaLibraryLoadFromFile", VIA_DRIVER),
    ("cudaLibraryUnload", COSTS_CUMULATIVE),
    ("cudaMemPoolCreate", POOL),
    ("cudaMemPoolDestroy", POOL),
    ("cudaMemPoolTrimTo", POOL),
    ("cudaMemPoolSetAttribute", POOL),
    ("cudaMemPoolGetAttribute", POOL),
    ("cudaMemPoolSetAccess", POOL),
    ("cudaMemPoolGetAccess", POOL),
    ("cudaMemPoolExportPointer", POOL_IPC),
    ("cudaMemPoolImportPointer", POOL_IPC),
    ("cudaMemPoolExportToShareableHandle", POOL_IPC),
    ("cudaMemPoolImportFromShareableHandle", POOL_IPC),
    ("cudaStreamBeginRecaptureToGraph", "CUDA 13.5 runtime only: reaches the driver's cuStreamBeginRecaptureToGraph (hooked) through the runtime's driver table"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::resolve::tests::{header, pfn_typedefs, HEADERS};
    use crate::hooks::{Kind, TABLE};
    use std::collections::BTreeSet;

    fn in_scope(name: &str, scope: &[&str]) -> bool {
        scope.iter().any(|p| name.starts_with(p))
    }

    /// Runtime function names declared in a cuda_runtime_api.h (`... CUDARTAPI name(`).
    fn runtime_functions(dir: &str) -> BTreeSet<String> {
        let text = header(dir, "cuda_runtime_api.h");
        let mut out = BTreeSet::new();
        for (i, _) in text.match_indices("CUDARTAPI ") {
            let rest = text[i + 10..].trim_start();
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if rest[name.len()..].trim_start().starts_with('(') && !name.is_empty() {
                out.insert(name);
            }
        }
        assert!(out.len() > 250, "{dir}: only {} runtime functions", out.len());
        out
    }

    fn check(kind: Kind, all: &BTreeSet<String>, scope: &[&str], not_hooked: &[(&str, &str)]) {
        let hooked: BTreeSet<&str> = TABLE
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| if kind == Kind::Driver { e.base } else { e.name })
            .collect();
        let listed: BTreeSet<&str> = not_hooked.iter().map(|e| e.0).collect();
        assert_eq!(listed.len(), not_hooked.len(), "{kind:?}: duplicate entries");
        let missing: Vec<&String> = all
            .iter()
            .filter(|n| in_scope(n, scope) && !hooked.contains(n.as_str()) && !listed.contains(n.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "{kind:?} entry points in scope, neither hooked nor listed with a reason: {missing:?}"
        );
        for (name, reason) in not_hooked {
            assert!(!hooked.contains(name), "{name} is hooked now: remove it from coverage.rs");
            assert!(all.contains(*name), "{name} is in no header");
            assert!(in_scope(name, scope), "{name} is out of scope");
            assert!(reason.len() > 10, "{name}: give a reason");
        }
    }

    #[test]
    fn every_driver_entry_point_in_scope_is_hooked_or_explained() {
        let all: BTreeSet<String> = HEADERS.iter().flat_map(|d| pfn_typedefs(d)).map(|k| k.0).collect();
        check(Kind::Driver, &all, DRIVER_SCOPE, NOT_HOOKED_DRIVER);
    }

    #[test]
    fn every_runtime_function_in_scope_is_hooked_or_explained() {
        let all: BTreeSet<String> = HEADERS.iter().flat_map(|d| runtime_functions(d)).collect();
        check(Kind::Runtime, &all, RUNTIME_SCOPE, NOT_HOOKED_RUNTIME);
    }
}
