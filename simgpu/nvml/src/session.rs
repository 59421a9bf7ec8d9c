//! NVML's initialization state: the node, opened by the first `nvmlInit` and dropped by the
//! matching last `nvmlShutdown` (NVML counts them), and the device handles.

use crate::ffi::{code, NvmlDevice, NvmlResult, NvmlReturn};
use crate::sampling::{History, Sample};
use simgpu::device::MAX_DEVICES;
use simgpu::node::{Node, NodeError, Snapshot};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One byte per possible device: a handle is the address of its device's byte, so handles are
/// stable across init and shutdown and a stray pointer is recognised, never dereferenced.
static HANDLES: [u8; MAX_DEVICES] = [0; MAX_DEVICES];

/// The node as this process's NVML sees it between init and shutdown.
pub struct Session {
    node: Node,
    /// The node devices this process's NVML shows, by NVML index: those a container runtime
    /// gave it ([`simgpu::config::ENV_CONTAINER_DEVICES`]), else all.
    shown: Vec<usize>,
    history: Mutex<History>,
}

struct State {
    inits: u32,
    session: Option<Arc<Session>>,
}

static STATE: Mutex<State> = Mutex::new(State {
    inits: 0,
    session: None,
});

// A panic while the lock is held (caught by the export's guard) leaves the state consistent:
// every update below is a single assignment.
fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Opens the node on the first call; later calls only count.
pub fn init() -> NvmlResult {
    let mut state = state();
    if state.session.is_none() {
        let node = Node::open_from_env().map_err(|e| {
            eprintln!("simgpu: {e}");
            init_error(&e)
        })?;
        let session = Session {
            shown: simgpu::node::container_devices(&node),
            node,
            history: Mutex::new(History::default()),
        };
        // A first sample at init, so that the first utilization query has a window behind it.
        session.sample();
        state.session = Some(Arc::new(session));
    }
    state.inits += 1;
    Ok(())
}

/// Undoes one [`init`]; the last one closes the node.
pub fn shutdown() -> NvmlResult {
    let mut state = state();
    if state.inits == 0 {
        return Err(code::UNINITIALIZED);
    }
    state.inits -= 1;
    if state.inits == 0 {
        state.session = None;
    }
    Ok(())
}

/// The open node, or `NVML_ERROR_UNINITIALIZED`.
pub fn session() -> Result<Arc<Session>, NvmlReturn> {
    state().session.clone().ok_or(code::UNINITIALIZED)
}

/// The NVML code for a node that cannot be opened: a bad configuration is a driver that does
/// not come up; an unusable state file is the system's refusal.
fn init_error(e: &NodeError) -> NvmlReturn {
    match e {
        NodeError::Devices(_) | NodeError::Config(_) => code::DRIVER_NOT_LOADED,
        NodeError::Full(_) => code::INSUFFICIENT_RESOURCES,
        _ => code::OPERATING_SYSTEM,
    }
}

/// The handle of device `index`.
pub fn handle(index: usize) -> NvmlDevice {
    std::ptr::from_ref(&HANDLES[index])
        .cast::<c_void>()
        .cast_mut()
}

impl Session {
    /// The node.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The device a handle names (its node index): `NVML_ERROR_INVALID_ARGUMENT` for null, a
    /// foreign pointer, or a device this process is not shown.
    pub fn device(&self, handle: NvmlDevice) -> Result<usize, NvmlReturn> {
        let base = HANDLES.as_ptr() as usize;
        (handle as usize)
            .checked_sub(base)
            .filter(|i| self.shown.contains(i))
            .ok_or(code::INVALID_ARGUMENT)
    }

    /// The node devices shown, by NVML index.
    pub fn shown(&self) -> &[usize] {
        &self.shown
    }

    /// The NVML index of node device `device`, if shown.
    pub fn index_of(&self, device: usize) -> Option<usize> {
        self.shown.iter().position(|&d| d == device)
    }

    /// Reads the node's counters now and keeps them for later windows.
    pub fn sample(&self) -> (Snapshot, Sample) {
        let snapshot = self.node.snapshot();
        let sample = Sample::from_snapshot(&snapshot, wall_us());
        self.history().record(sample.clone());
        (snapshot, sample)
    }

    /// The samples kept so far.
    pub fn history(&self) -> MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Microseconds since the Unix epoch.
pub fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
