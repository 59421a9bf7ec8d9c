//! The resource manager (RM): what NVIDIA's kernel module is to libcuda, for the objects
//! the GPU's time-slicing needs. At `cuInit` the driver opens its RM file (a memfd standing in
//! for `/dev/nvidiactl`) and allocates a client and a device object per device; each context
//! gets a channel group (the unit the engine time-slices), whose time slice the driver then
//! sets to the profile's, as libcuda does on its groups. A `SET_TIMESLICE` control on a group
//! sets the context's slice in the engine (`Process::set_timeslice`).
//!
//! The requests are real `ioctl` calls on that file, in the layouts of the RM's protocol
//! (`tessera-nvrm`), so a library that interposes `ioctl` sees and makes them as it would
//! with NVIDIA's driver: the driver sends its own requests through the process's `ioctl`
//! (a preloaded one, if any), and this library exports `ioctl` itself, answering requests on
//! its RM file and passing every other one to the kernel. The answers check what the kernel
//! module checks: the parameters' size for the escape (else `EINVAL`), the client belonging
//! to the caller's file, a control's exact parameter size.

use super::driver;
use simgpu::config::ENV_RM;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_ulong, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};
use tessera_nvrm::{class, control, params, status, AllocLayout, Escape, Request};

/// `ioctl`'s C signature, as in the preload library.
type Ioctl = unsafe extern "C" fn(c_int, c_ulong, *mut c_void) -> c_int;

/// How the RM answers (`SIMGPU_RM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Answers as NVIDIA's module does to root.
    Normal,
    /// Refuses to set a time slice, as NVIDIA's module does to an unprivileged caller.
    RefuseTimeslice,
}

/// An object of the RM.
#[derive(Debug, Clone, Copy)]
struct Object {
    class: u32,
    parent: u32,
    /// The file its client was allocated on.
    fd: c_int,
    /// For a device object and the groups under it: the device's ordinal.
    ordinal: Option<usize>,
    /// For a channel group: its time slice, in µs.
    timeslice_us: u64,
}

/// The RM's objects by (client, handle), and how it answers.
struct Objects {
    map: BTreeMap<(u32, u32), Object>,
    next_client: u32,
    mode: Mode,
    /// The devices it serves.
    devices: usize,
    /// The time slice a new channel group has, in µs (the profile's).
    default_us: u64,
}

struct Rm {
    file: OwnedFd,
    /// Where the driver's own requests go: the process's `ioctl` (a preloaded library's,
    /// which passes them on to ours), or ours directly.
    front: Ioctl,
    client: u32,
    /// The device object of each ordinal.
    devices: Vec<u32>,
    next_handle: Mutex<u32>,
}

static OBJECTS: Mutex<Objects> = Mutex::new(Objects {
    map: BTreeMap::new(),
    next_client: 0,
    mode: Mode::Normal,
    devices: 0,
    default_us: 0,
});
static RM: OnceLock<Option<Rm>> = OnceLock::new();
/// The RM file's descriptor, for `ioctl`'s first look; -1 without one.
static RM_FD: AtomicI32 = AtomicI32::new(-1);

/// Client handles the RM gives out: a made-up prefix, as the driver's have one.
const CLIENT_BASE: u32 = 0xc1d0_0000;
/// Handles the driver picks for its own objects.
const HANDLE_BASE: u32 = 0x5c00_0000;

/// Opens the RM for `devices` devices at `cuInit`; without it (`SIMGPU_RM=hidden`, or no
/// memfd) contexts simply have no channel group anyone can see.
pub(crate) fn open(devices: usize) {
    RM.get_or_init(|| {
        let mode = match std::env::var(ENV_RM).as_deref().map(str::trim) {
            Err(_) | Ok("") => Mode::Normal,
            Ok("refuse-timeslice") => Mode::RefuseTimeslice,
            Ok("hidden") => return None,
            Ok(other) => {
                eprintln!("simgpu: {ENV_RM}={other:?} is not refuse-timeslice or hidden; ignored");
                Mode::Normal
            }
        };
        {
            let mut objects = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
            objects.mode = mode;
            objects.devices = devices;
            objects.default_us =
                driver::process().map_or(0, |p| p.node().config().quantum_ns.div_ceil(1000));
        }
        // SAFETY: the name is NUL-terminated; memfd_create has no other precondition.
        let fd = unsafe { libc::memfd_create(c"simgpu-nvidiactl".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: a descriptor we just opened and own.
        let file = unsafe { OwnedFd::from_raw_fd(fd) };
        RM_FD.store(fd, Ordering::Relaxed);
        let mut rm = Rm {
            file,
            front: front(),
            client: 0,
            devices: Vec::new(),
            next_handle: Mutex::new(HANDLE_BASE),
        };
        rm.client = rm.alloc(0, 0, class::ROOT_CLIENT, None)?;
        for ordinal in 0..devices {
            let handle = rm.next_handle();
            let device_id = ordinal as u32;
            rm.alloc(rm.client, handle, class::DEVICE, Some(&device_id))?;
            rm.devices.push(handle);
        }
        Some(rm)
    });
}

/// Where the driver's own requests go. The process's `ioctl` is a preloaded library's when
/// one interposes it; when it is the C library's (this driver was loaded on its own, where
/// its export does not come first), ours is called directly. The program's handle is asked,
/// whose lookup runs over the program and the libraries loaded with it, preloads first: a
/// lookup from this library's scope could find its own `ioctl` first.
fn front() -> Ioctl {
    // SAFETY: a null name opens the program itself; the names are NUL-terminated;
    // RTLD_NOLOAD only finds a loaded library. The program's handle is never closed.
    let (found, libc_ioctl) = unsafe {
        let program = libc::dlopen(std::ptr::null(), libc::RTLD_LAZY);
        let found = if program.is_null() {
            std::ptr::null_mut()
        } else {
            libc::dlsym(program, c"ioctl".as_ptr())
        };
        let libc = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        let libc_ioctl = if libc.is_null() {
            std::ptr::null_mut()
        } else {
            libc::dlsym(libc, c"ioctl".as_ptr())
        };
        (found, libc_ioctl)
    };
    if found.is_null() || found == libc_ioctl {
        return serve;
    }
    // SAFETY: the process's `ioctl`, whose C signature this is.
    unsafe { std::mem::transmute::<*mut c_void, Ioctl>(found) }
}

impl Rm {
    fn next_handle(&self) -> u32 {
        let mut h = self.next_handle.lock().unwrap_or_else(|e| e.into_inner());
        *h += 1;
        *h
    }

    /// Allocates `class` as `handle` (0: the RM picks) under `parent` through the front;
    /// the handle, or `None` if the RM refused.
    fn alloc(&self, parent: u32, handle: u32, class: u32, data: Option<&u32>) -> Option<u32> {
        let mut p = params::Alloc64 {
            client: if class == class::ROOT_CLIENT {
                0
            } else {
                self.client
            },
            parent,
            object: handle,
            class,
            params: data.map_or(0, |d| d as *const u32 as u64),
            params_size: data.map_or(0, |_| 4),
            ..Default::default()
        };
        let req = Request::encode(Escape::Alloc, size_of::<params::Alloc64>());
        // SAFETY: an RM request with its parameters in locals that outlive the call.
        let rc = unsafe { (self.front)(self.file.as_raw_fd(), req, (&raw mut p).cast()) };
        (rc == 0 && p.status == status::OK).then_some(p.object)
    }

    fn free(&self, parent: u32, object: u32) {
        let mut p = params::Free {
            client: self.client,
            parent,
            object,
            status: 0,
        };
        let req = Request::encode(Escape::Free, size_of::<params::Free>());
        // SAFETY: as in `alloc`.
        unsafe { (self.front)(self.file.as_raw_fd(), req, (&raw mut p).cast()) };
    }

    fn control(&self, object: u32, cmd: u32, us: u64) -> u32 {
        let mut t = params::Timeslice { us };
        let mut c = params::Control {
            client: self.client,
            object,
            cmd,
            flags: 0,
            params: (&raw mut t) as u64,
            params_size: size_of::<params::Timeslice>() as u32,
            status: 0,
        };
        let req = Request::encode(Escape::Control, size_of::<params::Control>());
        // SAFETY: as in `alloc`.
        let rc = unsafe { (self.front)(self.file.as_raw_fd(), req, (&raw mut c).cast()) };
        if rc == 0 {
            c.status
        } else {
            status::INVALID_ARGUMENT
        }
    }
}

/// A channel group for a new context on `ordinal`, with the profile's time slice set as
/// libcuda sets its own; its handle, or 0 without an RM.
pub(crate) fn make_group(ordinal: usize) -> u32 {
    let Some(Some(rm)) = RM.get() else {
        return 0;
    };
    let Some(&device) = rm.devices.get(ordinal) else {
        return 0;
    };
    let handle = rm.next_handle();
    if rm
        .alloc(device, handle, class::CHANNEL_GROUP, None)
        .is_none()
    {
        return 0;
    }
    if let Ok(process) = driver::process() {
        let us = process.node().config().quantum_ns.div_ceil(1000);
        rm.control(handle, control::SET_TIMESLICE, us);
    }
    handle
}

/// Frees a context's channel group (the RM puts the engine's slice back to the node's
/// quantum).
pub(crate) fn free_group(ordinal: usize, handle: u32) {
    let Some(Some(rm)) = RM.get() else {
        return;
    };
    if handle == 0 {
        return;
    }
    if let Some(&device) = rm.devices.get(ordinal) {
        rm.free(device, handle);
    }
}

/// The process's `ioctl`, with this driver's RM behind its RM file: requests on that file
/// are answered here, every other one is the kernel's. The library exports it as `ioctl`
/// (`crate::rm`); the driver's own requests come here directly when nothing interposes.
///
/// # Safety
/// Called from C with `ioctl`'s contract.
pub(crate) unsafe extern "C" fn serve(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let rm_fd = RM_FD.load(Ordering::Relaxed);
    if fd < 0 || fd != rm_fd || !Request::decode(request).is_rm() {
        // SAFETY: the caller's request, made as the C library makes it.
        return unsafe { libc::syscall(libc::SYS_ioctl, fd, request, arg) as c_int };
    }
    // SAFETY: the caller's request on our RM file, with `ioctl`'s contract.
    let answer = std::panic::catch_unwind(|| unsafe { answer(fd, request, arg) });
    match answer.unwrap_or(Err(libc::EIO)) {
        Ok(()) => 0,
        Err(errno) => {
            // SAFETY: the calling thread's errno location is always valid.
            unsafe { *libc::__errno_location() = errno };
            -1
        }
    }
}

/// Answers an RM request: `Err(errno)` where the kernel module fails the call itself (a
/// parameter size it does not know, a null pointer), else the RM's status in the
/// parameters.
///
/// # Safety
/// `arg` points to `Request::decode(request).size` writable bytes, if not null.
unsafe fn answer(fd: c_int, request: c_ulong, arg: *mut c_void) -> Result<(), c_int> {
    let req = Request::decode(request);
    let (escape, size, arg) = match req.escape() {
        Some(Escape::Xfer) => {
            // SAFETY: `arg` holds `req.size` bytes (this function's contract).
            let xfer: params::Xfer = unsafe { read(arg, req.size)? };
            let escape = u8::try_from(xfer.cmd)
                .ok()
                .and_then(Escape::from_number)
                .filter(|e| *e != Escape::Xfer)
                .ok_or(libc::EINVAL)?;
            (escape, xfer.size as usize, xfer.ptr as *mut c_void)
        }
        Some(escape) => (escape, req.size, arg),
        None => return Err(libc::EINVAL),
    };
    let mut objects = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    match escape {
        Escape::Alloc => {
            let layout = AllocLayout::of_size(size).ok_or(libc::EINVAL)?;
            let (a, data) = match layout {
                AllocLayout::Os64 => {
                    // SAFETY: `size` bytes at `arg`: the request's own, or those an XFER names (the                    // caller's, as the module takes them from user memory).
                    let p: params::Alloc64 = unsafe { read(arg, size)? };
                    (tessera_nvrm::Allocation::from(p), (p.params, p.params_size))
                }
                AllocLayout::Os21 => {
                    // SAFETY: `size` bytes at `arg`: the request's own, or those an XFER names (the                    // caller's, as the module takes them from user memory).
                    let p: params::Alloc21 = unsafe { read(arg, size)? };
                    (tessera_nvrm::Allocation::from(p), (p.params, p.params_size))
                }
            };
            let (object, status) = objects.alloc(fd, a, data);
            let status_at = match layout {
                AllocLayout::Os64 => std::mem::offset_of!(params::Alloc64, status),
                AllocLayout::Os21 => std::mem::offset_of!(params::Alloc21, status),
            };
            let object_at = std::mem::offset_of!(params::Alloc64, object);
            // SAFETY: both fields lie inside the caller's `size` bytes (the layouts'
            // asserts), written unaligned as the caller's buffer may be.
            unsafe {
                arg.byte_add(object_at)
                    .cast::<u32>()
                    .write_unaligned(object);
                arg.byte_add(status_at)
                    .cast::<u32>()
                    .write_unaligned(status);
            }
        }
        Escape::Free => {
            // SAFETY: `size` bytes at `arg`: the request's own, or those an XFER names (the            // caller's, as the module takes them from user memory).
            let p: params::Free = unsafe { read(arg, size)? };
            let status = objects.free(fd, p.client, p.object);
            let at = std::mem::offset_of!(params::Free, status);
            // SAFETY: as above.
            unsafe { arg.byte_add(at).cast::<u32>().write_unaligned(status) };
        }
        Escape::Control => {
            if size != size_of::<params::Control>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: `size` bytes at `arg`: the request's own, or those an XFER names (the            // caller's, as the module takes them from user memory).
            let p: params::Control = unsafe { read(arg, size)? };
            let status = objects.control(fd, &p);
            let at = std::mem::offset_of!(params::Control, status);
            // SAFETY: as above.
            unsafe { arg.byte_add(at).cast::<u32>().write_unaligned(status) };
        }
        Escape::Xfer => return Err(libc::EINVAL),
    }
    Ok(())
}

/// Reads a `T` from the caller's `size` bytes at `arg`: `EINVAL` for another size, `EFAULT`
/// for a null pointer.
///
/// # Safety
/// `arg`, if not null, points to `size` readable bytes.
unsafe fn read<T: Copy>(arg: *const c_void, size: usize) -> Result<T, c_int> {
    if size != size_of::<T>() {
        return Err(libc::EINVAL);
    }
    if arg.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: `size_of::<T>()` readable bytes (the caller's contract), read unaligned.
    Ok(unsafe { arg.cast::<T>().read_unaligned() })
}

impl Objects {
    /// Allocates what `a` asks on the file `fd`: the handle given out and the status.
    fn alloc(&mut self, fd: c_int, a: tessera_nvrm::Allocation, data: (u64, u32)) -> (u32, u32) {
        if a.class == class::ROOT_CLIENT {
            let handle = if a.object == 0 {
                self.next_client += 1;
                CLIENT_BASE + self.next_client
            } else {
                a.object
            };
            if self.map.contains_key(&(handle, handle)) {
                return (a.object, status::INVALID_OBJECT_HANDLE);
            }
            self.map.insert(
                (handle, handle),
                Object {
                    class: a.class,
                    parent: 0,
                    fd,
                    ordinal: None,
                    timeslice_us: 0,
                },
            );
            return (handle, status::OK);
        }
        let Some(client) = self.map.get(&(a.client, a.client)) else {
            return (a.object, status::INVALID_CLIENT);
        };
        if client.fd != fd {
            return (a.object, status::INVALID_CLIENT);
        }
        let Some(parent) = self.map.get(&(a.client, a.parent)).copied() else {
            return (a.object, status::INVALID_OBJECT_PARENT);
        };
        if a.object == 0 || self.map.contains_key(&(a.client, a.object)) {
            return (a.object, status::INVALID_OBJECT_HANDLE);
        }
        let ordinal = match a.class {
            class::DEVICE => {
                let (ptr, len) = data;
                if ptr == 0 || len < 4 {
                    return (a.object, status::INVALID_PARAM_STRUCT);
                }
                // SAFETY: the caller's device parameters, whose first word is the device's
                // number (`deviceId`).
                let id = unsafe { (ptr as *const u32).read_unaligned() };
                if id as usize >= self.devices {
                    return (a.object, status::INVALID_ARGUMENT);
                }
                Some(id as usize)
            }
            class::SUBDEVICE | class::CHANNEL_GROUP => parent.ordinal,
            _ => return (a.object, status::INVALID_CLASS),
        };
        if ordinal.is_none() {
            return (a.object, status::INVALID_OBJECT_PARENT);
        }
        self.map.insert(
            (a.client, a.object),
            Object {
                class: a.class,
                parent: a.parent,
                fd,
                ordinal,
                timeslice_us: self.default_us,
            },
        );
        (a.object, status::OK)
    }

    /// Frees `object` of `client` and what lies under it.
    fn free(&mut self, fd: c_int, client: u32, object: u32) -> u32 {
        match self.map.get(&(client, client)) {
            Some(c) if c.fd == fd => {}
            _ => return status::INVALID_CLIENT,
        }
        if !self.map.contains_key(&(client, object)) {
            return status::OBJECT_NOT_FOUND;
        }
        let mut gone = vec![object];
        while let Some(h) = gone.pop() {
            if let Some(o) = self.map.remove(&(client, h)) {
                if o.class == class::CHANNEL_GROUP {
                    if let (Some(ordinal), Ok(process)) = (o.ordinal, driver::process()) {
                        process.set_timeslice(ordinal, 0);
                    }
                }
            }
            gone.extend(
                self.map
                    .iter()
                    .filter(|(&(c, _), o)| c == client && o.parent == h)
                    .map(|(&(_, child), _)| child),
            );
        }
        status::OK
    }

    /// A control on a channel group: its time slice set or read.
    fn control(&mut self, fd: c_int, p: &params::Control) -> u32 {
        let mode = self.mode;
        match self.map.get(&(p.client, p.client)) {
            Some(c) if c.fd == fd => {}
            _ => return status::INVALID_CLIENT,
        }
        let Some(group) = self.map.get_mut(&(p.client, p.object)) else {
            return status::INVALID_OBJECT_HANDLE;
        };
        if group.class != class::CHANNEL_GROUP {
            return status::NOT_SUPPORTED;
        }
        if p.cmd != control::SET_TIMESLICE && p.cmd != control::GET_TIMESLICE {
            return status::NOT_SUPPORTED;
        }
        if p.params_size as usize != size_of::<params::Timeslice>() || p.params == 0 {
            return status::INVALID_PARAM_STRUCT;
        }
        let at = p.params as *mut params::Timeslice;
        if p.cmd == control::GET_TIMESLICE {
            // SAFETY: the caller's parameters, of the size checked above.
            unsafe {
                at.write_unaligned(params::Timeslice {
                    us: group.timeslice_us,
                })
            };
            return status::OK;
        }
        if mode == Mode::RefuseTimeslice {
            return status::INSUFFICIENT_PERMISSIONS;
        }
        // SAFETY: as above.
        let us = unsafe { at.read_unaligned() }.us;
        if us == 0 {
            return status::NOT_SUPPORTED;
        }
        group.timeslice_us = us;
        if let (Some(ordinal), Ok(process)) = (group.ordinal, driver::process()) {
            process.set_timeslice(ordinal, us.saturating_mul(1000));
        }
        status::OK
    }
}
