//! The entry points of graphs: building, capture, instantiation and launch.
//!
//! They check and translate the C arguments, call into [`crate::model::graph`], and
//! write its results out as the driver API does.

use crate::ffi::{code, write_out, CUstream};
use crate::model::capture::*;
use crate::model::graph::*;
use crate::model::kernel::{KernelNodeParams, KernelNodeParamsV2};
use crate::model::launch::{launch_graph, upload_graph};
use std::ffi::c_void;

cuda_entry! {
    fn cuGraphGetNodes(graph: CUgraph, nodes: *mut CUgraphNode, count: *mut usize) {
        get_nodes(graph, nodes, count)
    }

    fn cuGraphNodeGetType(node: CUgraphNode, kind: *mut u32) {
        crate::model::driver::process()?;
        let n = NODES.get(node).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: write_out checks null; the caller provides a CUgraphNodeType to write.
        unsafe { write_out(kind, n.node.node_type()) }
    }

    fn cuGraphKernelNodeGetParams(node: CUgraphNode, out: *mut KernelNodeParams) {
        let params = kernel_node_params(node)?;
        // SAFETY: write_out checks null; the caller provides the (first) structure to write.
        unsafe { write_out(out, params) }
    }

    fn cuGraphKernelNodeGetParams_v2(node: CUgraphNode, out: *mut KernelNodeParamsV2) {
        let params = kernel_node_params(node)?;
        let kernel = params.func;
        // The context is left null: the node runs in the context of the stream it is
        // launched on, as the driver reads a null context.
        let ctx = std::ptr::null_mut();
        // SAFETY: write_out checks null; the caller provides the (second) structure to write.
        unsafe { write_out(out, KernelNodeParamsV2 { v1: params, kern: kernel, ctx }) }
    }

    fn cuGraphExecKernelNodeSetParams(exec: CUgraphExec, node: CUgraphNode, params: *const KernelNodeParams) {
        // SAFETY: the caller passes the parameters, by the contract.
        unsafe { exec_set_kernel_params(exec, node, params, std::ptr::null_mut()) }
    }

    fn cuGraphExecKernelNodeSetParams_v2(
        exec: CUgraphExec,
        node: CUgraphNode,
        params: *const KernelNodeParamsV2,
    ) {
        if params.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes the second structure, whose start is the first.
        let kernel = unsafe { (*params).kern };
        // SAFETY: as above.
        unsafe { exec_set_kernel_params(exec, node, params.cast(), kernel) }
    }

    fn cuStreamBeginCapture(stream: CUstream) {
        begin(stream, 0, false)
    }

    fn cuStreamBeginCapture_ptsz(stream: CUstream) {
        begin(stream, 0, true)
    }

    fn cuStreamBeginCapture_v2(stream: CUstream, mode: u32) {
        begin(stream, mode, false)
    }

    fn cuStreamBeginCapture_v2_ptsz(stream: CUstream, mode: u32) {
        begin(stream, mode, true)
    }

    fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) {
        end(stream, graph, false)
    }

    fn cuStreamEndCapture_ptsz(stream: CUstream, graph: *mut CUgraph) {
        end(stream, graph, true)
    }

    fn cuStreamIsCapturing(stream: CUstream, status: *mut u32) {
        is_capturing(stream, status, false)
    }

    fn cuStreamIsCapturing_ptsz(stream: CUstream, status: *mut u32) {
        is_capturing(stream, status, true)
    }

    fn cuStreamGetCaptureInfo(stream: CUstream, status: *mut u32, id: *mut u64) {
        let null = std::ptr::null_mut();
        capture_info(stream, false, status, id, null, null.cast(), null.cast(), null.cast())
    }

    fn cuStreamGetCaptureInfo_ptsz(stream: CUstream, status: *mut u32, id: *mut u64) {
        let null = std::ptr::null_mut();
        capture_info(stream, true, status, id, null, null.cast(), null.cast(), null.cast())
    }

    fn cuStreamGetCaptureInfo_v2(
        stream: CUstream,
        status: *mut u32,
        id: *mut u64,
        graph: *mut CUgraph,
        deps: *mut *const c_void,
        num_deps: *mut usize,
    ) {
        capture_info(stream, false, status, id, graph, deps, std::ptr::null_mut(), num_deps)
    }

    fn cuStreamGetCaptureInfo_v2_ptsz(
        stream: CUstream,
        status: *mut u32,
        id: *mut u64,
        graph: *mut CUgraph,
        deps: *mut *const c_void,
        num_deps: *mut usize,
    ) {
        capture_info(stream, true, status, id, graph, deps, std::ptr::null_mut(), num_deps)
    }

    fn cuStreamGetCaptureInfo_v3(
        stream: CUstream,
        status: *mut u32,
        id: *mut u64,
        graph: *mut CUgraph,
        deps: *mut *const c_void,
        edges: *mut *const c_void,
        num_deps: *mut usize,
    ) {
        capture_info(stream, false, status, id, graph, deps, edges, num_deps)
    }

    fn cuStreamGetCaptureInfo_v3_ptsz(
        stream: CUstream,
        status: *mut u32,
        id: *mut u64,
        graph: *mut CUgraph,
        deps: *mut *const c_void,
        edges: *mut *const c_void,
        num_deps: *mut usize,
    ) {
        capture_info(stream, true, status, id, graph, deps, edges, num_deps)
    }

    fn cuThreadExchangeStreamCaptureMode(mode: *mut u32) {
        crate::model::driver::process()?;
        if mode.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null; the caller provides a CUstreamCaptureMode to read and write.
        let wanted = unsafe { mode.read() };
        if wanted > CAPTURE_MODE_RELAXED {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let previous = THREAD_CAPTURE_MODE.with(|m| m.replace(wanted));
        // SAFETY: as above.
        unsafe { write_out(mode, previous) }
    }

    fn cuGraphCreate(out: *mut CUgraph, flags: u32) {
        crate::model::driver::process()?;
        if out.is_null() || flags != 0 {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let handle = GRAPHS.insert(Graph::new());
        // SAFETY: checked non-null; the caller provides a CUgraph to write.
        unsafe { write_out(out, handle) }
    }

    fn cuGraphDestroy(graph: CUgraph) {
        crate::model::driver::process()?;
        retire(graph).map(drop).ok_or(code::CUDA_ERROR_INVALID_VALUE)
    }

    /// The pre-12.0 form: error node and log are left empty, there being no errors to
    /// report.
    fn cuGraphInstantiate(
        out: *mut CUgraphExec,
        graph: CUgraph,
        _error_node: *mut *mut c_void,
        _log: *mut std::ffi::c_char,
        _log_size: usize,
    ) {
        instantiate(out, graph)
    }

    fn cuGraphInstantiate_v2(
        out: *mut CUgraphExec,
        graph: CUgraph,
        _error_node: *mut *mut c_void,
        _log: *mut std::ffi::c_char,
        _log_size: usize,
    ) {
        instantiate(out, graph)
    }

    fn cuGraphInstantiateWithFlags(out: *mut CUgraphExec, graph: CUgraph, _flags: u64) {
        instantiate(out, graph)
    }

    fn cuGraphInstantiateWithParams(out: *mut CUgraphExec, graph: CUgraph, params: *mut InstantiateParams) {
        instantiate_with_params(out, graph, params)
    }

    fn cuGraphInstantiateWithParams_ptsz(
        out: *mut CUgraphExec,
        graph: CUgraph,
        params: *mut InstantiateParams,
    ) {
        instantiate_with_params(out, graph, params)
    }

    fn cuGraphExecDestroy(exec: CUgraphExec) {
        crate::model::driver::process()?;
        EXECS.remove(exec).map(drop).ok_or(code::CUDA_ERROR_INVALID_VALUE)
    }

    fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) {
        launch_graph(exec, stream, false)
    }

    fn cuGraphLaunch_ptsz(exec: CUgraphExec, stream: CUstream) {
        launch_graph(exec, stream, true)
    }

    fn cuGraphUpload(exec: CUgraphExec, stream: CUstream) {
        upload_graph(exec, stream, false)
    }

    fn cuGraphUpload_ptsz(exec: CUgraphExec, stream: CUstream) {
        upload_graph(exec, stream, true)
    }
}
