//! Streams, stream capture, graphs and modules/libraries.

use crate::config::Config;
use crate::out;
use crate::state::{self, tag, tag_of, with_init, Capture, Costly, Graph, Proc, Stream, R};
use crate::types::*;
use std::os::raw::{c_char, c_int, c_uint, c_void};

/// `cuGraphInstantiateWithFlags` flags: AUTO_FREE_ON_LAUNCH | UPLOAD | DEVICE_LAUNCH | USE_NODE_PRIORITY.
const INSTANTIATE_FLAGS_ALL: u64 = 0x1 | 0x2 | 0x4 | 0x8;

fn valid_mode(mode: c_int) -> bool {
    (CU_STREAM_CAPTURE_MODE_GLOBAL..=CU_STREAM_CAPTURE_MODE_RELAXED).contains(&mode)
}

fn destroy_stream(h: CUstream) -> R {
    with_init(|p| {
        let key = h as u64;
        if p.streams.remove(&key).is_none() {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        p.captures.remove(&key);
        Ok(())
    })
}

fn synchronize(h: CUstream, per_thread: bool) -> R {
    with_init(|p| {
        let (key, _) = p.stream(h, per_thread)?;
        match key.and_then(|k| p.captures.get_mut(&k)) {
            Some(c) => {
                c.invalidated = true;
                Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
            }
            None => Ok(()),
        }
    })
}

/// Starts capturing `h` into a new graph. The legacy NULL stream cannot be captured.
fn begin_capture(h: CUstream, mode: c_int, per_thread: bool) -> R {
    begin_capture_into(h, mode, per_thread, None)
}

/// Starts capturing `h` into `existing` (a graph the caller created), or into a new graph.
fn begin_capture_into(h: CUstream, mode: c_int, per_thread: bool, existing: Option<CUgraph>) -> R {
    with_init(|p| {
        if !valid_mode(mode) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if let Some(g) = existing {
            if !p.graphs.contains_key(&(g as u64)) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
        }
        let (key, dev) = p.stream(h, per_thread)?;
        let key = key.ok_or(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)?;
        if p.captures.contains_key(&key) {
            return Err(CUDA_ERROR_ILLEGAL_STATE);
        }
        let graph = match existing {
            Some(g) => g as u64,
            None => {
                let g = p.new_handle(tag::GRAPH);
                p.graphs.insert(g, Graph { dev, alloc_nodes: Vec::new() });
                g
            }
        };
        let thread = state::thread_token();
        let into_existing = existing.is_some();
        p.captures.insert(key, Capture { mode, thread, graph, invalidated: false, into_existing });
        Ok(())
    })
}

/// `cuStreamBeginCaptureToGraph` (12030): dependencies must come as an array when there are any.
fn begin_capture_to_graph(h: CUstream, g: CUgraph, deps: *const CUgraphNode, n: usize, mode: c_int, pt: bool) -> R {
    if n > 0 && deps.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    begin_capture_into(h, mode, pt, Some(g))
}

/// Ends a capture: the graph, or NULL and `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`.
unsafe fn end_capture(h: CUstream, ph_graph: *mut CUgraph, per_thread: bool) -> R {
    if ph_graph.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let r = with_init(|p| {
        let (key, _) = p.stream(h, per_thread)?;
        let key = key.ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        let c = p.captures.get(&key).ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        if c.mode != CU_STREAM_CAPTURE_MODE_RELAXED && c.thread != state::thread_token() {
            return Err(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
        }
        let c = p.captures.remove(&key).ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        if c.invalidated {
            if !c.into_existing {
                p.graphs.remove(&c.graph);
            }
            return Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        }
        Ok(c.graph)
    });
    ph_graph.write(r.unwrap_or(0) as CUgraph);
    r.map(|_| ())
}

unsafe fn is_capturing(h: CUstream, status: *mut c_int, per_thread: bool) -> R {
    let s = with_init(|p| {
        let (key, _) = p.stream(h, per_thread)?;
        Ok(match key.and_then(|k| p.captures.get(&k)) {
            None => CU_STREAM_CAPTURE_STATUS_NONE,
            Some(c) if c.invalidated => CU_STREAM_CAPTURE_STATUS_INVALIDATED,
            Some(_) => CU_STREAM_CAPTURE_STATUS_ACTIVE,
        })
    })?;
    out(status, s)
}

/// Instantiates a graph: costs `FAKECUDA_GRAPH_MIB` on the current device until the exec is destroyed.
unsafe fn instantiate(p_exec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> R {
    if p_exec.is_null() || flags & !INSTANTIATE_FLAGS_ALL != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let h = with_init(|p| {
        let (ctx, dev) = p.current()?;
        if !p.graphs.contains_key(&(graph as u64)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let cost = Config::get().graph_cost;
        p.charge(dev, cost)?;
        let h = p.new_handle(tag::EXEC);
        p.execs.insert(h, Costly { ctx, dev, charged: cost });
        Ok(h)
    })?;
    p_exec.write(h as CUgraphExec);
    Ok(())
}

/// The 10000/11000 ABIs: no error node, empty log.
unsafe fn instantiate_with_log(
    p_exec: *mut CUgraphExec,
    graph: CUgraph,
    err_node: *mut CUgraphNode,
    log: *mut c_char,
    size: usize,
) -> R {
    if !err_node.is_null() {
        err_node.write(std::ptr::null_mut());
    }
    if !log.is_null() && size > 0 {
        log.write(0);
    }
    instantiate(p_exec, graph, 0)
}

/// `cuGraphInstantiateWithParams` (12000): the flags come in `params`, which also receives the
/// result (`CUDA_GRAPH_INSTANTIATE_SUCCESS` 0 / `CUDA_GRAPH_INSTANTIATE_ERROR` 1) and no error node.
/// An upload stream, when `CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD` asks for one, must be valid.
unsafe fn instantiate_with_params(
    p_exec: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut CUDA_GRAPH_INSTANTIATE_PARAMS,
    per_thread: bool,
) -> R {
    let Some(params) = params.as_mut() else { return Err(CUDA_ERROR_INVALID_VALUE) };
    params.h_err_node_out = std::ptr::null_mut();
    let upload = params.h_upload_stream;
    let r = if params.flags & 0x2 != 0 { with_init(|p| p.stream(upload, per_thread).map(|_| ())) } else { Ok(()) }
        .and_then(|()| instantiate(p_exec, graph, params.flags));
    params.result_out = if r.is_ok() { 0 } else { 1 };
    r
}

fn launch(exec: CUgraphExec, h: CUstream, per_thread: bool) -> R {
    with_init(|p| {
        p.stream(h, per_thread)?;
        if p.execs.contains_key(&(exec as u64)) {
            Ok(())
        } else {
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    })
}

/// Loads a module/library: costs `FAKECUDA_MODULE_MIB` on `dev` until unloaded.
fn load_costly(p: &mut Proc, tag: u64, ctx: u64, dev: usize) -> R<u64> {
    let cost = Config::get().module_cost;
    p.charge(dev, cost)?;
    crate::trace::charge("module", cost, dev, None, ctx);
    let h = p.new_handle(tag);
    p.modules.insert(h, Costly { ctx, dev, charged: cost });
    Ok(h)
}

/// Loads a module for the current context from an image (`image` non-NULL).
///
/// # Safety
/// `module` is the caller's C out-pointer (NULL or writable).
pub unsafe fn module_load(module: *mut CUmodule, image_ok: bool) -> R {
    if module.is_null() || !image_ok {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let h = with_init(|p| {
        let (ctx, dev) = p.current()?;
        load_costly(p, tag::MODULE, ctx, dev)
    })?;
    module.write(h as CUmodule);
    Ok(())
}

/// Loads a context-independent library. Nothing is charged yet: a real driver loads lazily, and
/// the cost comes when a kernel of it is first used in a context ([`Proc::use_library`]).
unsafe fn library_load(library: *mut CUlibrary, source_ok: bool, options_ok: bool) -> R {
    if library.is_null() || !source_ok || !options_ok {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let h = with_init(|p| {
        let h = p.new_handle(tag::LIBRARY);
        p.libraries.insert(h, ());
        Ok(h)
    })?;
    crate::trace::library_loaded(h);
    library.write(h as CUlibrary);
    Ok(())
}

/// True if `n` options come with both arrays (or there are none).
fn options_ok<A, B>(n: c_uint, a: *const A, b: *const B) -> bool {
    n == 0 || (!a.is_null() && !b.is_null())
}

/// `CUlibraryOption`s (cuda.h): HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE (0) takes a value (its
/// table), BINARY_IS_PRESERVED (1) none (only for `cuLibraryLoadData`), so the values array may
/// be NULL when no option needs one. cuBLASLt 13 loads its CUTLASS kernels with
/// `{BINARY_IS_PRESERVED}` and no values; refusing that left every such kernel unknown.
unsafe fn library_options_ok(n: c_uint, options: *const c_int, values: *const *mut c_void, from_data: bool) -> bool {
    if n == 0 {
        return true;
    }
    if options.is_null() {
        return false;
    }
    std::slice::from_raw_parts(options, n as usize).iter().all(|&o| match o {
        0 => !values.is_null(),
        1 => from_data,
        _ => false,
    })
}

/// A file to load must exist (`CUDA_ERROR_FILE_NOT_FOUND` otherwise).
unsafe fn check_file(fname: *const c_char) -> R<bool> {
    if fname.is_null() {
        return Ok(false);
    }
    let path = std::ffi::CStr::from_ptr(fname).to_string_lossy().into_owned();
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => Ok(true),
        _ => Err(CUDA_ERROR_FILE_NOT_FOUND),
    }
}

fn unload_module(h: u64) -> R {
    with_init(|p| {
        if tag_of(h) != tag::MODULE {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let c = p.modules.remove(&h).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        p.drop_costly(c);
        p.forget_module(h);
        Ok(())
    })
}

/// Unloads a library from every context it was loaded into.
fn unload_library(h: u64) -> R {
    with_init(|p| {
        if tag_of(h) != tag::LIBRARY || p.libraries.remove(&h).is_none() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let loads: Vec<(u64, u64)> = p.lib_loads.keys().filter(|(l, _)| *l == h).copied().collect();
        for k in loads {
            if let Some(c) = p.lib_loads.remove(&k) {
                p.drop_costly(c);
            }
        }
        p.forget_module(h);
        Ok(())
    })
}

/// A graph node handle: the fake's graphs have none (their captured work is not recorded), so
/// every node is `CUDA_ERROR_INVALID_VALUE`, as an unknown node is to the driver.
fn no_node() -> R {
    Err(CUDA_ERROR_INVALID_VALUE)
}

/// A node of an instantiated graph: the exec must be live, and then the node is unknown.
fn exec_node(p: &Proc, exec: CUgraphExec) -> R {
    if !p.execs.contains_key(&(exec as u64)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    no_node()
}

/// The context and device of a stream: a created stream's own; for the default streams (NULL,
/// legacy, per-thread) the calling thread's current context.
pub fn stream_ctx(h: CUstream) -> R<(u64, usize)> {
    with_init(|p| match h as usize {
        0 | CU_STREAM_LEGACY | CU_STREAM_PER_THREAD => p.current(),
        v => p.streams.get(&(v as u64)).map(|s| (s.ctx, s.dev)).ok_or(CUDA_ERROR_INVALID_HANDLE),
    })
}

unsafe fn stream_get_ctx(h: CUstream, pctx: *mut CUcontext, green: *mut *mut c_void) -> R {
    if pctx.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (ctx, _) = stream_ctx(h)?;
    pctx.write(ctx as CUcontext);
    if !green.is_null() {
        green.write(std::ptr::null_mut());
    }
    Ok(())
}

unsafe fn stream_get_device(h: CUstream, device: *mut CUdevice) -> R {
    if device.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (_, dev) = stream_ctx(h)?;
    device.write(dev as CUdevice);
    Ok(())
}

entry! {
    /// The stream's context (9.2 ABI).
    fn cuStreamGetCtx(h_stream: CUstream, pctx: *mut CUcontext) {
        stream_get_ctx(h_stream, pctx, std::ptr::null_mut())
    }

    fn cuStreamGetCtx_ptsz(h_stream: CUstream, pctx: *mut CUcontext) {
        stream_get_ctx(h_stream, pctx, std::ptr::null_mut())
    }

    /// The stream's context and green context (12.5 ABI; the fake has no green contexts).
    fn cuStreamGetCtx_v2(h_stream: CUstream, pctx: *mut CUcontext, p_green_ctx: *mut *mut c_void) {
        stream_get_ctx(h_stream, pctx, p_green_ctx)
    }

    fn cuStreamGetCtx_v2_ptsz(h_stream: CUstream, pctx: *mut CUcontext, p_green_ctx: *mut *mut c_void) {
        stream_get_ctx(h_stream, pctx, p_green_ctx)
    }

    /// The device of the stream's context (CUDA 12.8).
    fn cuStreamGetDevice(h_stream: CUstream, device: *mut CUdevice) {
        stream_get_device(h_stream, device)
    }

    fn cuStreamGetDevice_ptsz(h_stream: CUstream, device: *mut CUdevice) {
        stream_get_device(h_stream, device)
    }

    fn cuStreamCreate(ph_stream: *mut CUstream, flags: c_uint) {
        if ph_stream.is_null() || flags & !CU_STREAM_NON_BLOCKING != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = with_init(|p| {
            let (ctx, dev) = p.current()?;
            let h = p.new_handle(tag::STREAM);
            p.streams.insert(h, Stream { ctx, dev, flags, priority: 0 });
            Ok(h)
        })?;
        ph_stream.write(h as CUstream);
        Ok(())
    }

    fn cuStreamDestroy_v2(h_stream: CUstream) {
        destroy_stream(h_stream)
    }

    /// The 2000 ABI (same signature).
    fn cuStreamDestroy(h_stream: CUstream) {
        destroy_stream(h_stream)
    }

    fn cuStreamSynchronize(h_stream: CUstream) {
        synchronize(h_stream, false)
    }

    fn cuStreamSynchronize_ptsz(h_stream: CUstream) {
        synchronize(h_stream, true)
    }

    fn cuStreamBeginCapture_v2(h_stream: CUstream, mode: c_int) {
        begin_capture(h_stream, mode, false)
    }

    fn cuStreamBeginCapture_v2_ptsz(h_stream: CUstream, mode: c_int) {
        begin_capture(h_stream, mode, true)
    }

    /// The 10000 ABI: global capture mode.
    fn cuStreamBeginCapture(h_stream: CUstream) {
        begin_capture(h_stream, CU_STREAM_CAPTURE_MODE_GLOBAL, false)
    }

    fn cuStreamBeginCapture_ptsz(h_stream: CUstream) {
        begin_capture(h_stream, CU_STREAM_CAPTURE_MODE_GLOBAL, true)
    }

    fn cuStreamBeginCaptureToGraph(h_stream: CUstream, h_graph: CUgraph, dependencies: *const CUgraphNode, dependency_data: *const c_void, num_dependencies: usize, mode: c_int) {
        let _ = dependency_data;
        begin_capture_to_graph(h_stream, h_graph, dependencies, num_dependencies, mode, false)
    }

    fn cuStreamBeginCaptureToGraph_ptsz(h_stream: CUstream, h_graph: CUgraph, dependencies: *const CUgraphNode, dependency_data: *const c_void, num_dependencies: usize, mode: c_int) {
        let _ = dependency_data;
        begin_capture_to_graph(h_stream, h_graph, dependencies, num_dependencies, mode, true)
    }

    /// CUDA 13.3: capture again into an existing graph (the fake does not compare topologies
    /// and never calls the callback).
    fn cuStreamBeginRecaptureToGraph(h_stream: CUstream, mode: c_int, h_graph: CUgraph, callback: *mut c_void, user_data: *mut c_void) {
        let _ = (callback, user_data);
        begin_capture_into(h_stream, mode, false, Some(h_graph))
    }

    fn cuStreamBeginRecaptureToGraph_ptsz(h_stream: CUstream, mode: c_int, h_graph: CUgraph, callback: *mut c_void, user_data: *mut c_void) {
        let _ = (callback, user_data);
        begin_capture_into(h_stream, mode, true, Some(h_graph))
    }

    fn cuStreamEndCapture(h_stream: CUstream, ph_graph: *mut CUgraph) {
        end_capture(h_stream, ph_graph, false)
    }

    fn cuStreamEndCapture_ptsz(h_stream: CUstream, ph_graph: *mut CUgraph) {
        end_capture(h_stream, ph_graph, true)
    }

    fn cuStreamIsCapturing(h_stream: CUstream, capture_status: *mut c_int) {
        is_capturing(h_stream, capture_status, false)
    }

    fn cuStreamIsCapturing_ptsz(h_stream: CUstream, capture_status: *mut c_int) {
        is_capturing(h_stream, capture_status, true)
    }

    fn cuThreadExchangeStreamCaptureMode(mode: *mut c_int) {
        with_init(|_| Ok(()))?;
        if mode.is_null() || !valid_mode(mode.read()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        mode.write(state::exchange_capture_mode(mode.read()));
        Ok(())
    }

    fn cuGraphCreate(ph_graph: *mut CUgraph, flags: c_uint) {
        if ph_graph.is_null() || flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = with_init(|p| {
            let (_, dev) = p.current()?;
            let h = p.new_handle(tag::GRAPH);
            p.graphs.insert(h, Graph { dev, alloc_nodes: Vec::new() });
            Ok(h)
        })?;
        ph_graph.write(h as CUgraph);
        Ok(())
    }

    fn cuGraphDestroy(h_graph: CUgraph) {
        with_init(|p| p.graphs.remove(&(h_graph as u64)).map(|_| ()).ok_or(CUDA_ERROR_INVALID_VALUE))
    }

    fn cuGraphInstantiateWithFlags(ph_graph_exec: *mut CUgraphExec, h_graph: CUgraph, flags: u64) {
        instantiate(ph_graph_exec, h_graph, flags)
    }

    fn cuGraphInstantiateWithParams(ph_graph_exec: *mut CUgraphExec, h_graph: CUgraph, params: *mut CUDA_GRAPH_INSTANTIATE_PARAMS) {
        instantiate_with_params(ph_graph_exec, h_graph, params, false)
    }

    fn cuGraphInstantiateWithParams_ptsz(ph_graph_exec: *mut CUgraphExec, h_graph: CUgraph, params: *mut CUDA_GRAPH_INSTANTIATE_PARAMS) {
        instantiate_with_params(ph_graph_exec, h_graph, params, true)
    }

    fn cuGraphInstantiate_v2(ph_graph_exec: *mut CUgraphExec, h_graph: CUgraph, ph_error_node: *mut CUgraphNode, log_buffer: *mut c_char, buffer_size: usize) {
        instantiate_with_log(ph_graph_exec, h_graph, ph_error_node, log_buffer, buffer_size)
    }

    /// The 10000 ABI (same signature as `_v2`).
    fn cuGraphInstantiate(ph_graph_exec: *mut CUgraphExec, h_graph: CUgraph, ph_error_node: *mut CUgraphNode, log_buffer: *mut c_char, buffer_size: usize) {
        instantiate_with_log(ph_graph_exec, h_graph, ph_error_node, log_buffer, buffer_size)
    }

    /// The fake's graphs have no nodes (cuGraphGetNodes lists none), so no node handle is valid.
    fn cuGraphNodeGetType(h_node: CUgraphNode, type_: *mut c_int) {
        let _ = (h_node, type_);
        with_init(|_| no_node())
    }

    fn cuGraphKernelNodeGetParams(h_node: CUgraphNode, node_params: *mut c_void) {
        let _ = (h_node, node_params);
        with_init(|_| no_node())
    }

    fn cuGraphKernelNodeGetParams_v2(h_node: CUgraphNode, node_params: *mut c_void) {
        let _ = (h_node, node_params);
        with_init(|_| no_node())
    }

    fn cuGraphExecKernelNodeSetParams(h_graph_exec: CUgraphExec, h_node: CUgraphNode, node_params: *const c_void) {
        let _ = (h_node, node_params);
        with_init(|p| exec_node(p, h_graph_exec))
    }

    fn cuGraphExecKernelNodeSetParams_v2(h_graph_exec: CUgraphExec, h_node: CUgraphNode, node_params: *const c_void) {
        let _ = (h_node, node_params);
        with_init(|p| exec_node(p, h_graph_exec))
    }

    fn cuGraphExecDestroy(h_graph_exec: CUgraphExec) {
        with_init(|p| {
            let c = p.execs.remove(&(h_graph_exec as u64)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            p.drop_costly(c);
            Ok(())
        })
    }

    fn cuGraphLaunch(h_graph_exec: CUgraphExec, h_stream: CUstream) {
        launch(h_graph_exec, h_stream, false)
    }

    fn cuGraphLaunch_ptsz(h_graph_exec: CUgraphExec, h_stream: CUstream) {
        launch(h_graph_exec, h_stream, true)
    }

    fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) {
        module_load(module, !image.is_null())
    }

    fn cuModuleLoadDataEx(module: *mut CUmodule, image: *const c_void, num_options: c_uint, options: *mut c_int, option_values: *mut *mut c_void) {
        module_load(module, !image.is_null() && options_ok(num_options, options, option_values))
    }

    /// A fat binary image (not parsed).
    fn cuModuleLoadFatBinary(module: *mut CUmodule, fat_cubin: *const c_void) {
        module_load(module, !fat_cubin.is_null())
    }

    /// The file must exist (its content is not parsed).
    fn cuModuleLoad(module: *mut CUmodule, fname: *const c_char) {
        let exists = check_file(fname)?;
        module_load(module, exists)
    }

    fn cuModuleUnload(hmod: CUmodule) {
        unload_module(hmod as u64)
    }

    /// Context-independent and lazy: nothing is charged until a kernel of it is used.
    fn cuLibraryLoadData(library: *mut CUlibrary, code: *const c_void, jit_options: *mut c_int, jit_options_values: *mut *mut c_void, num_jit_options: c_uint, library_options: *mut c_int, library_option_values: *mut *mut c_void, num_library_options: c_uint) {
        let opts = options_ok(num_jit_options, jit_options, jit_options_values)
            && library_options_ok(num_library_options, library_options, library_option_values, true);
        library_load(library, !code.is_null(), opts)
    }

    fn cuLibraryLoadFromFile(library: *mut CUlibrary, file_name: *const c_char, jit_options: *mut c_int, jit_options_values: *mut *mut c_void, num_jit_options: c_uint, library_options: *mut c_int, library_option_values: *mut *mut c_void, num_library_options: c_uint) {
        let opts = options_ok(num_jit_options, jit_options, jit_options_values)
            && library_options_ok(num_library_options, library_options, library_option_values, false);
        let exists = check_file(file_name)?;
        library_load(library, exists, opts)
    }

    fn cuLibraryUnload(library: CUlibrary) {
        unload_library(library as u64)
    }
}
