//! The process's attachment to the node.
//!
//! `cuInit` ([`attach`]) opens the node state named by the environment, claims this
//! process's slot in it and caches the devices, once; every later entry point reaches them
//! through [`process`] and [`device`].
//!
//! After `fork`, the child inherits the parent's slot, contexts and allocations but not its
//! executor threads, so it must not use any of them: as with a real driver, every entry point
//! of a child forked from an initialized process fails with `CUDA_ERROR_NOT_INITIALIZED`,
//! `cuInit` included. A child forked before `cuInit` initializes normally.

use crate::ffi::{code, CUdevice, CUresult};
use simgpu::node::{DeviceInfo, Node, NodeError, Process};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The driver version reported by `cuDriverGetVersion`.
pub(crate) const DRIVER_VERSION: i32 = simgpu::CUDA_DRIVER_VERSION;

/// What a successful `cuInit` established.
struct Driver {
    process: Process,
    devices: Vec<DeviceInfo>,
}

/// The outcome of the first `cuInit`; later calls return the same.
static DRIVER: OnceLock<Result<Driver, CUresult>> = OnceLock::new();

/// Set in a child forked from an initialized process.
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn forked_child() {
    // Relaxed: the child has one thread, which runs this handler before anything else.
    FORKED.store(true, Ordering::Relaxed);
    // The parent's slot must die with the parent, not live on through the child.
    if let Some(Ok(d)) = DRIVER.get() {
        d.process.node().release_after_fork();
    }
}

fn init_error(e: &NodeError) -> CUresult {
    match e {
        NodeError::Devices(_) => code::CUDA_ERROR_NO_DEVICE,
        _ => code::CUDA_ERROR_OPERATING_SYSTEM,
    }
}

fn open() -> Result<Driver, CUresult> {
    let node = Node::open_from_env().map_err(|e| {
        eprintln!("simgpu: {e}");
        init_error(&e)
    })?;
    let node: &'static Node = Box::leak(Box::new(node));
    let process = node.attach().map_err(|e| {
        eprintln!("simgpu: {e}");
        init_error(&e)
    })?;
    crate::init::set_host_costs(node.config().profile().host);
    // What a container runtime shows the process, numbered from 0; CUDA_VISIBLE_DEVICES
    // picks among those, as a real driver's does among the devices a container has.
    let shown = simgpu::node::container_devices(node);
    let all: Vec<DeviceInfo> = shown.iter().map(|&i| node.device(i)).collect();
    let visible: Vec<usize> =
        visible_devices(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(), &all)
            .into_iter()
            .map(|k| shown[k])
            .collect();
    let devices = visible.iter().map(|&i| node.device(i)).collect();
    let process = process.see_only(visible);
    // SAFETY: registers a plain function with no preconditions as the fork child handler.
    let rc = unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    if rc != 0 {
        eprintln!("simgpu: pthread_atfork failed ({rc}); forked children must not use CUDA");
    }
    Ok(Driver { process, devices })
}

/// The node devices a process sees, in ordinal order: `CUDA_VISIBLE_DEVICES` picks among
/// those `all` lists (indexes into it, or UUIDs); unset, all of them.
pub(crate) fn visible_devices(setting: Option<&str>, all: &[DeviceInfo]) -> Vec<usize> {
    simgpu::node::devices_named(setting, all)
}

fn driver() -> Result<&'static Driver, CUresult> {
    if FORKED.load(Ordering::Relaxed) {
        return Err(code::CUDA_ERROR_NOT_INITIALIZED);
    }
    match DRIVER.get() {
        Some(Ok(d)) => Ok(d),
        _ => Err(code::CUDA_ERROR_NOT_INITIALIZED),
    }
}

/// This process's slot in the node; `CUDA_ERROR_NOT_INITIALIZED` before a successful
/// `cuInit` (or in a forked child).
pub(crate) fn process() -> Result<&'static Process, CUresult> {
    driver().map(|d| &d.process)
}

/// The devices of the node, in ordinal order.
pub(crate) fn devices() -> Result<&'static [DeviceInfo], CUresult> {
    driver().map(|d| d.devices.as_slice())
}

/// Checks a device ordinal: `CUDA_ERROR_INVALID_DEVICE` if the node has no such device.
pub(crate) fn check_device(dev: CUdevice) -> Result<usize, CUresult> {
    let count = devices()?.len();
    usize::try_from(dev)
        .ok()
        .filter(|&d| d < count)
        .ok_or(code::CUDA_ERROR_INVALID_DEVICE)
}

/// The description of a device ordinal.
pub(crate) fn device(dev: CUdevice) -> Result<&'static DeviceInfo, CUresult> {
    let index = check_device(dev)?;
    Ok(&devices()?[index])
}

/// `cuInit`: attaches the process to the node on the first call (later calls report what
/// the first found); the number of devices it sees.
pub(crate) fn attach(flags: u32) -> Result<usize, CUresult> {
    if FORKED.load(Ordering::Relaxed) {
        return Err(code::CUDA_ERROR_NOT_INITIALIZED);
    }
    if flags != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let driver = DRIVER.get_or_init(open).as_ref().map_err(|&e| e)?;
    Ok(driver.devices.len())
}
