//! The entry points the fake driver gained for CUDA 13 and for the capture/instantiation forms the
//! hook table covers: capture into an existing graph (12030), capture again into it (13030),
//! instantiation with a parameter struct (12000), the 13000 context ABIs, and the cost of every
//! further context on a device (`FAKECUDA_CTX_EXTRA_MIB`).

mod common;

use common::*;
use fakecuda::api::{ctx::*, mem::*, stream::*};
use fakecuda::types::*;
use std::ptr::{null, null_mut};

#[test]
fn capture_into_existing_graph_and_instantiate_with_params() {
    let env = [("FAKECUDA_CTX_MIB", "0"), ("FAKECUDA_GRAPH_MIB", "16"), ("FAKECUDA_DRIVER_VERSION", "13050")];
    in_child("capture_into_existing_graph_and_instantiate_with_params", &env, || unsafe {
        setup(0);
        let mut s = null_mut();
        assert_eq!(cuStreamCreate(&mut s, CU_STREAM_NON_BLOCKING), 0);
        let mut g = null_mut();
        assert_eq!(cuGraphCreate(&mut g, 0), 0);
        // Into a graph that does not exist, with dependencies but no array: refused.
        assert_eq!(cuStreamBeginCaptureToGraph(s, 0x99 as CUgraph, null(), null(), 0, 0), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuStreamBeginCaptureToGraph(s, g, null(), null(), 1, 0), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuStreamBeginCaptureToGraph(s, g, null(), null(), 0, CU_STREAM_CAPTURE_MODE_RELAXED), 0);
        let mut status = -1;
        assert_eq!(cuStreamIsCapturing(s, &mut status), 0);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
        let mut p = 0;
        assert_eq!(cuMemAllocAsync(&mut p, MIB, s), 0, "captured and charged");
        let mut out = null_mut();
        assert_eq!(cuStreamEndCapture(s, &mut out), 0);
        assert_eq!(out, g, "the capture ends in the caller's graph");
        // Capture again into it (13.3), per-thread default stream form.
        assert_eq!(
            cuStreamBeginRecaptureToGraph_ptsz(null_mut(), CU_STREAM_CAPTURE_MODE_RELAXED, g, null_mut(), null_mut()),
            0
        );
        assert_eq!(cuStreamEndCapture_ptsz(null_mut(), &mut out), 0);
        assert_eq!(out, g);
        // An invalidated capture into an existing graph leaves the graph to its owner.
        assert_eq!(cuStreamBeginRecaptureToGraph(s, CU_STREAM_CAPTURE_MODE_GLOBAL, g, null_mut(), null_mut()), 0);
        let mut q = 0;
        assert_eq!(cuMemAlloc_v2(&mut q, MIB), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        assert_eq!(cuStreamEndCapture(s, &mut out), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert!(out.is_null());
        // Instantiation with a parameter struct: the result is written back, the exec costs
        // FAKECUDA_GRAPH_MIB until destroyed; an upload stream must be valid.
        let before = used();
        let mut params = CUDA_GRAPH_INSTANTIATE_PARAMS {
            flags: 0,
            h_upload_stream: null_mut(),
            h_err_node_out: 1 as CUgraphNode,
            result_out: -1,
        };
        let mut e = null_mut();
        assert_eq!(cuGraphInstantiateWithParams(&mut e, g, &mut params), 0);
        assert_eq!((params.result_out, params.h_err_node_out), (0, null_mut()));
        assert_eq!(used(), before + 16 * MIB);
        params.flags = 0x2; // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
        params.h_upload_stream = 0x77 as CUstream;
        let mut e2 = null_mut();
        assert_eq!(cuGraphInstantiateWithParams(&mut e2, g, &mut params), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(params.result_out, 1);
        params.h_upload_stream = null_mut();
        assert_eq!(cuGraphInstantiateWithParams_ptsz(&mut e2, g, &mut params), 0, "per-thread NULL stream");
        assert_eq!(cuGraphInstantiateWithParams(&mut e2, g, null_mut()), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(used(), before + 32 * MIB);
        assert_eq!(cuGraphExecDestroy(e), 0);
        assert_eq!(cuGraphExecDestroy(e2), 0);
        assert_eq!(used(), before);
        assert_eq!(cuMemFreeAsync(p, s), 0);
    });
}

#[test]
fn further_contexts_cost_extra_until_destroyed() {
    let env = [("FAKECUDA_CTX_MIB", "256"), ("FAKECUDA_CTX_EXTRA_MIB", "64")];
    in_child("further_contexts_cost_extra_until_destroyed", &env, || unsafe {
        let primary = setup(0);
        assert_eq!(used(), 256 * MIB, "the first context on the device");
        let mut ctx = null_mut();
        assert_eq!(cuCtxCreate_v4(&mut ctx, null_mut(), 0, 0), 0);
        assert_eq!(used(), (256 + 64) * MIB);
        let mut other = null_mut();
        assert_eq!(cuCtxCreate_v2(&mut other, 0, 0), 0);
        assert_eq!(used(), (256 + 128) * MIB);
        let mut dev = -1;
        assert_eq!(cuCtxGetDevice_v2(&mut dev, primary), 0);
        assert_eq!(dev, 0);
        assert_eq!(cuCtxDestroy_v2(other), 0);
        assert_eq!(cuCtxDestroy_v2(ctx), 0);
        assert_eq!(used(), 256 * MIB);
    });
}
