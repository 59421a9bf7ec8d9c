//! NVIDIA's resource-manager (RM) interface, as far as Tessera speaks it: the requests that
//! the CUDA driver sends the kernel driver through `ioctl` on `/dev/nvidiactl`, declared
//! here once from the facts of the protocol, for the preload library (which watches them
//! and issues its own) and for simgpu (which answers them).
//!
//! The RM is object-based: a process allocates a client, under it a device, and under the
//! device the objects it works with, each named by a 32-bit handle; it sends controls to an
//! object and frees it. The one object Tessera acts on is the channel group (TSG): the unit
//! the GPU time-slices between. Every request's status is in its parameters (`NV_OK` is
//! 0); `ioctl` itself returns 0 whenever the request reached the RM.
//!
//! Nothing here allocates or depends on anything: the preload library uses it inside other
//! people's `ioctl` calls.

#![no_std]

pub mod params;
pub mod request;

pub use params::{Alloc21, Alloc64, AllocLayout, Allocation, Control, Free, Timeslice, Xfer};
pub use request::{Escape, Request};

/// The ioctl type byte of every RM request (`'F'`).
pub const IOCTL_TYPE: u8 = b'F';

/// Object classes.
pub mod class {
    /// The client, the root of a process's objects.
    pub const ROOT_CLIENT: u32 = 0x0041;
    /// A device (one GPU, or an SLI group) under a client.
    pub const DEVICE: u32 = 0x0080;
    /// A subdevice (one GPU) under a device.
    pub const SUBDEVICE: u32 = 0x2080;
    /// The channel group (`KEPLER_CHANNEL_GROUP_A`), a device's child; the same class on
    /// every GPU since Kepler, Hopper included. The GPU time-slices channel groups.
    pub const CHANNEL_GROUP: u32 = 0xa06c;
}

/// Controls on a channel group (class [`class::CHANNEL_GROUP`]); the class is the top 16
/// bits of a command.
pub mod control {
    /// Schedules or unschedules the group's channels.
    pub const GPFIFO_SCHEDULE: u32 = 0xa06c_0101;
    /// Sets the group's time slice ([`crate::Timeslice`]).
    pub const SET_TIMESLICE: u32 = 0xa06c_0103;
    /// Reads the group's time slice ([`crate::Timeslice`]).
    pub const GET_TIMESLICE: u32 = 0xa06c_0104;
    /// Preempts the group off the GPU.
    pub const PREEMPT: u32 = 0xa06c_0105;
    /// Information on the group.
    pub const GET_INFO: u32 = 0xa06c_0106;
}

/// RM status codes (the `status` field of a request's parameters).
pub mod status {
    pub const OK: u32 = 0x00;
    pub const INSUFFICIENT_PERMISSIONS: u32 = 0x1b;
    pub const INVALID_ARGUMENT: u32 = 0x1f;
    pub const INVALID_CLASS: u32 = 0x22;
    pub const INVALID_CLIENT: u32 = 0x23;
    pub const INVALID_COMMAND: u32 = 0x24;
    pub const INVALID_OBJECT_HANDLE: u32 = 0x33;
    pub const INVALID_OBJECT_PARENT: u32 = 0x36;
    pub const INVALID_PARAM_STRUCT: u32 = 0x3a;
    pub const NOT_SUPPORTED: u32 = 0x56;
    pub const OBJECT_NOT_FOUND: u32 = 0x57;

    /// A status's name, for logs.
    pub fn name(status: u32) -> &'static str {
        match status {
            OK => "NV_OK",
            INSUFFICIENT_PERMISSIONS => "NV_ERR_INSUFFICIENT_PERMISSIONS",
            INVALID_ARGUMENT => "NV_ERR_INVALID_ARGUMENT",
            INVALID_CLASS => "NV_ERR_INVALID_CLASS",
            INVALID_CLIENT => "NV_ERR_INVALID_CLIENT",
            INVALID_COMMAND => "NV_ERR_INVALID_COMMAND",
            INVALID_OBJECT_HANDLE => "NV_ERR_INVALID_OBJECT_HANDLE",
            INVALID_OBJECT_PARENT => "NV_ERR_INVALID_OBJECT_PARENT",
            INVALID_PARAM_STRUCT => "NV_ERR_INVALID_PARAM_STRUCT",
            NOT_SUPPORTED => "NV_ERR_NOT_SUPPORTED",
            OBJECT_NOT_FOUND => "NV_ERR_OBJECT_NOT_FOUND",
            _ => "an RM error",
        }
    }
}
