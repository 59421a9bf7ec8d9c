//! Graphs and captures. A capture records the kernels and host work submitted to its
//! streams, in submission order; launching the instantiated graph replays them in that order
//! on one stream. (Graph edges are not modelled: the replay is a valid linearization of any
//! captured dependency graph.) Each node has a handle, through which a program lists a
//! graph's nodes, reads a kernel node's launch and changes it in an instantiated graph, as
//! cuBLASLt does to reuse a captured graph with new arguments.

use crate::ffi::{code, write_out, CUstream, DriverResult};
use crate::model::exec::{registry::Registry, HostWork, Work};
use crate::model::kernel::{KernelLaunch, KernelNodeParams};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

pub use tessera_cuda_abi::CUgraph;
pub use tessera_cuda_abi::CUgraphExec;

/// What host work does, for the node type a graph reports for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostKind {
    /// A copy.
    Copy,
    /// A memset.
    Set,
    /// A host function.
    Function,
    /// A stream memory operation (a word written or waited for).
    MemoryOperation,
    /// A stream-ordered free.
    Free,
}

/// `CUgraphNodeType` values.
mod node_type {
    pub const KERNEL: u32 = 0;
    pub const MEMCPY: u32 = 1;
    pub const MEMSET: u32 = 2;
    pub const HOST: u32 = 3;
    pub const MEM_FREE: u32 = 11;
    pub const BATCH_MEM_OP: u32 = 12;
}

/// A graph node: work a graph can hold.
#[derive(Clone)]
pub(crate) enum Node {
    /// A kernel launch, with its arguments as they were at capture.
    Kernel(Arc<KernelLaunch>),
    /// Host work (a host function, a copy, a memset, a memory operation, a free).
    Host(HostKind, HostWork),
}

impl Node {
    /// The stream operation that runs the node.
    pub(crate) fn into_work(self) -> Work {
        match self {
            Node::Kernel(k) => Work::Kernel(k),
            Node::Host(_, h) => Work::Host(h),
        }
    }

    /// Its `CUgraphNodeType`.
    pub(crate) fn node_type(&self) -> u32 {
        match self {
            Node::Kernel(_) => node_type::KERNEL,
            Node::Host(HostKind::Copy, _) => node_type::MEMCPY,
            Node::Host(HostKind::Set, _) => node_type::MEMSET,
            Node::Host(HostKind::Function, _) => node_type::HOST,
            Node::Host(HostKind::MemoryOperation, _) => node_type::BATCH_MEM_OP,
            Node::Host(HostKind::Free, _) => node_type::MEM_FREE,
        }
    }
}

/// A node of a graph, as its handle stands for it.
pub(crate) struct GraphNode {
    pub(crate) node: Node,
    /// For a kernel node: one pointer per parameter into the launch's argument bytes, the
    /// `kernelParams` that `cuGraphKernelNodeGetParams` reports (addresses, as integers).
    arg_pointers: Vec<usize>,
}

impl GraphNode {
    pub(crate) fn new(node: Node) -> Arc<GraphNode> {
        let arg_pointers = match &node {
            Node::Kernel(k) => k.arg_addresses(),
            Node::Host(..) => Vec::new(),
        };
        Arc::new(GraphNode { node, arg_pointers })
    }
}

/// A graph: its nodes in order.
pub(crate) struct Graph {
    nodes: Mutex<Vec<Arc<GraphNode>>>,
}

impl Graph {
    pub(crate) fn new() -> Arc<Graph> {
        Arc::new(Graph {
            nodes: Mutex::new(Vec::new()),
        })
    }

    fn nodes(&self) -> MutexGuard<'_, Vec<Arc<GraphNode>>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a node and makes its handle live.
    fn push(&self, node: Node) {
        let node = GraphNode::new(node);
        NODES.insert(Arc::clone(&node));
        self.nodes().push(node);
    }
}

/// Retires a graph and its nodes' handles.
pub(crate) fn retire(handle: CUgraph) -> Option<Arc<Graph>> {
    let graph = GRAPHS.remove(handle)?;
    for node in graph.nodes().iter() {
        NODES.remove(Registry::handle_of(node));
    }
    Some(graph)
}

/// An instantiated graph: each node with the handle of the graph node it came from.
pub(crate) struct GraphExec {
    nodes: Mutex<Vec<(usize, Node)>>,
}

impl GraphExec {
    fn nodes(&self) -> MutexGuard<'_, Vec<(usize, Node)>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its nodes as they stand now, in the order a launch replays them.
    pub(crate) fn replay(&self) -> Vec<Node> {
        self.nodes().iter().map(|(_, n)| n.clone()).collect()
    }
}

pub(crate) static GRAPHS: Registry<Graph> = Registry::new();
pub(crate) static NODES: Registry<GraphNode> = Registry::new();
pub(crate) static EXECS: Registry<GraphExec> = Registry::new();
static NEXT_CAPTURE_ID: AtomicU64 = AtomicU64::new(1);

/// A stream's part in captures: the capture it belongs to, while one is in progress.
#[derive(Default)]
pub(crate) struct CaptureSlot(Mutex<Option<Arc<Capture>>>);

impl CaptureSlot {
    /// The capture in progress, if any.
    pub(crate) fn get(&self) -> Option<Arc<Capture>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Starts or ends the stream's part in a capture.
    pub(crate) fn set(&self, capture: Option<Arc<Capture>>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = capture;
    }
}

/// A capture in progress.
pub(crate) struct Capture {
    id: u64,
    /// The stream that began it; only it may end it.
    origin: u64,
    graph: Arc<Graph>,
    graph_handle: CUgraph,
    invalidated: AtomicBool,
    /// The slots of the streams that joined through events, to be released at the end.
    members: Mutex<Vec<Weak<CaptureSlot>>>,
}

// SAFETY: `graph_handle` is only an identifier (the graph's address), never dereferenced
// through this field.
unsafe impl Send for Capture {}
// SAFETY: as for Send; the other fields are thread-safe.
unsafe impl Sync for Capture {}

impl Capture {
    /// A capture begun on the stream `origin`, into a new graph.
    pub(crate) fn new(origin: u64) -> Arc<Capture> {
        let graph = Graph::new();
        let graph_handle = GRAPHS.insert(Arc::clone(&graph));
        Arc::new(Capture {
            id: NEXT_CAPTURE_ID.fetch_add(1, Relaxed),
            origin,
            graph,
            graph_handle,
            invalidated: AtomicBool::new(false),
            members: Mutex::new(Vec::new()),
        })
    }

    /// Unique in the process (`cuStreamGetCaptureInfo`).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The id of the stream that began it.
    pub(crate) fn origin(&self) -> u64 {
        self.origin
    }

    /// The handle of its graph.
    pub(crate) fn graph_handle(&self) -> CUgraph {
        self.graph_handle
    }

    /// Whether an unsupported operation spoiled it.
    pub(crate) fn is_invalidated(&self) -> bool {
        self.invalidated.load(Relaxed)
    }

    fn members(&self) -> MutexGuard<'_, Vec<Weak<CaptureSlot>>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A stream that joined through an event: its slot is cleared at the end.
    pub(crate) fn add_member(&self, slot: &Arc<CaptureSlot>) {
        self.members().push(Arc::downgrade(slot));
    }

    /// The slots of the streams that joined and are still alive, taken at the end.
    pub(crate) fn take_members(&self) -> Vec<Arc<CaptureSlot>> {
        std::mem::take(&mut *self.members())
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Fails if an unsupported operation spoiled the capture.
    pub(crate) fn check(&self) -> DriverResult {
        if self.invalidated.load(Relaxed) {
            Err(code::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
        } else {
            Ok(())
        }
    }

    /// Appends a node.
    pub(crate) fn add(&self, node: Node) -> DriverResult {
        self.check()?;
        self.graph.push(node);
        Ok(())
    }

    /// Spoils the capture: ending it will fail.
    pub(crate) fn invalidate(&self) {
        self.invalidated.store(true, Relaxed);
    }
}

pub(crate) fn instantiate(out: *mut CUgraphExec, graph: CUgraph) -> DriverResult {
    crate::model::driver::process()?;
    if out.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let graph = GRAPHS.get(graph).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    let nodes = graph
        .nodes()
        .iter()
        .map(|n| (Registry::handle_of(n) as usize, n.node.clone()))
        .collect();
    let handle = EXECS.insert(Arc::new(GraphExec {
        nodes: Mutex::new(nodes),
    }));
    // SAFETY: checked non-null; the caller provides a CUgraphExec to write.
    unsafe { write_out(out, handle) }
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS`.
#[repr(C)]
pub struct InstantiateParams {
    flags: u64,
    upload_stream: CUstream,
    error_node: *mut c_void,
    result: u32,
}

pub(crate) fn instantiate_with_params(
    out: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut InstantiateParams,
) -> DriverResult {
    if params.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    instantiate(out, graph)?;
    // SAFETY: non-null; the caller provides the parameter block for reading and writing.
    unsafe {
        (*params).error_node = std::ptr::null_mut();
        (*params).result = 0;
    }
    Ok(())
}

/// `cuGraphGetNodes`: with no array, the count; else up to `*count` handles, the rest of the
/// array cleared, and the count written.
pub(crate) fn get_nodes(graph: CUgraph, out: *mut CUgraphNode, count: *mut usize) -> DriverResult {
    crate::model::driver::process()?;
    let graph = GRAPHS.get(graph).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    if count.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let nodes = graph.nodes();
    if out.is_null() {
        // SAFETY: checked non-null; the caller provides a size_t to write.
        return unsafe { write_out(count, nodes.len()) };
    }
    // SAFETY: checked non-null; the caller provides a size_t to read and write.
    let room = unsafe { count.read() };
    for i in 0..room {
        let handle = nodes
            .get(i)
            .map_or(std::ptr::null_mut(), Registry::handle_of);
        // SAFETY: the array holds `room` handles, by the contract.
        unsafe { out.add(i).write(handle) };
    }
    // SAFETY: as above.
    unsafe { write_out(count, room.min(nodes.len())) }
}

fn kernel_node(node: CUgraphNode) -> Result<(Arc<GraphNode>, Arc<KernelLaunch>), u32> {
    crate::model::driver::process()?;
    let n = NODES.get(node).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    match &n.node {
        Node::Kernel(k) => {
            let k = Arc::clone(k);
            Ok((n, k))
        }
        Node::Host(..) => Err(code::CUDA_ERROR_INVALID_VALUE),
    }
}

/// `cuGraphKernelNodeGetParams`: the launch as captured, its arguments through pointers
/// into the node's own copy of them.
pub(crate) fn kernel_node_params(node: CUgraphNode) -> Result<KernelNodeParams, u32> {
    let (n, k) = kernel_node(node)?;
    let mut params = k.node_params();
    if !n.arg_pointers.is_empty() {
        params.params = n.arg_pointers.as_ptr() as *mut *mut c_void;
    }
    Ok(params)
}

/// `cuGraphExecKernelNodeSetParams`: the instantiated graph's copy of a kernel node launches
/// with new geometry and arguments from now on; its function may change, within its device.
///
/// # Safety
/// `params` must be null or a kernel node's parameters as the driver API defines them.
pub(crate) unsafe fn exec_set_kernel_params(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const KernelNodeParams,
    kernel: *mut c_void,
) -> DriverResult {
    let exec = EXECS.get(exec).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    let (_, old) = kernel_node(node)?;
    if params.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes the parameters, by the contract.
    let new = unsafe { KernelLaunch::from_node_params(&*params, kernel) }?;
    if new.device() != old.device() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let mut nodes = exec.nodes();
    let slot = nodes
        .iter_mut()
        .find(|(origin, _)| *origin == node as usize)
        .ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    slot.1 = Node::Kernel(Arc::new(new));
    Ok(())
}

pub use tessera_cuda_abi::CUgraphNode;
