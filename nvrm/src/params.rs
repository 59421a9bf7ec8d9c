//! The parameters of the escapes and controls Tessera reads or sends, in the RM's layout
//! (`#[repr(C)]`; the size of each is checked where it is declared, since the driver picks a
//! layout by size and refuses any other).

/// `NV_ESC_RM_ALLOC`'s parameters in their 48-byte form (`NVOS64_PARAMETERS`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Alloc64 {
    /// The client (`hRoot`).
    pub client: u32,
    /// The parent object.
    pub parent: u32,
    /// The new object's handle: chosen by the caller, or 0 for the RM to choose and write
    /// back.
    pub object: u32,
    /// The new object's class.
    pub class: u32,
    /// The class's allocation parameters (a user pointer).
    pub params: u64,
    /// Rights requested (a user pointer, or 0).
    pub rights: u64,
    /// The size of the allocation parameters.
    pub params_size: u32,
    pub flags: u32,
    /// The RM's status, written back.
    pub status: u32,
    pub pad: u32,
}

/// `NV_ESC_RM_ALLOC`'s parameters in their 32-byte form (`NVOS21_PARAMETERS`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Alloc21 {
    pub client: u32,
    pub parent: u32,
    pub object: u32,
    pub class: u32,
    pub params: u64,
    pub params_size: u32,
    pub status: u32,
}

/// `NV_ESC_RM_CONTROL`'s parameters (`NVOS54_PARAMETERS`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Control {
    pub client: u32,
    /// The object the control is sent to.
    pub object: u32,
    /// The command: the object's class in the top 16 bits.
    pub cmd: u32,
    pub flags: u32,
    /// The command's parameters (a user pointer).
    pub params: u64,
    /// Their size, which must be the command's exactly.
    pub params_size: u32,
    pub status: u32,
}

/// `NV_ESC_RM_FREE`'s parameters (`NVOS00_PARAMETERS`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Free {
    pub client: u32,
    pub parent: u32,
    /// The object freed, with every object under it.
    pub object: u32,
    pub status: u32,
}

/// `NV_ESC_IOCTL_XFER_CMD`'s parameters (`nv_ioctl_xfer_t`): the escape carried and its
/// parameters by pointer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Xfer {
    /// The escape number carried.
    pub cmd: u32,
    /// The size of its parameters.
    pub size: u32,
    /// Its parameters (a user pointer).
    pub ptr: u64,
}

/// The parameters of a channel group's `SET_TIMESLICE` and `GET_TIMESLICE`
/// (`NVA06C_CTRL_TIMESLICE_PARAMS`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeslice {
    /// The group's time slice, in µs.
    pub us: u64,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<Alloc64>() == 48);
    assert!(offset_of!(Alloc64, object) == 8);
    assert!(offset_of!(Alloc64, class) == 12);
    assert!(offset_of!(Alloc64, params) == 16);
    assert!(offset_of!(Alloc64, params_size) == 32);
    assert!(offset_of!(Alloc64, status) == 40);
    assert!(size_of::<Alloc21>() == 32);
    assert!(offset_of!(Alloc21, params_size) == 24);
    assert!(offset_of!(Alloc21, status) == 28);
    assert!(size_of::<Control>() == 32);
    assert!(offset_of!(Control, cmd) == 8);
    assert!(offset_of!(Control, params) == 16);
    assert!(offset_of!(Control, params_size) == 24);
    assert!(offset_of!(Control, status) == 28);
    assert!(size_of::<Free>() == 16);
    assert!(offset_of!(Free, status) == 12);
    assert!(size_of::<Xfer>() == 16);
    assert!(size_of::<Timeslice>() == 8);
};

/// What an allocation request says, whichever its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub client: u32,
    pub parent: u32,
    pub object: u32,
    pub class: u32,
    pub status: u32,
}

impl From<Alloc64> for Allocation {
    fn from(a: Alloc64) -> Self {
        Allocation {
            client: a.client,
            parent: a.parent,
            object: a.object,
            class: a.class,
            status: a.status,
        }
    }
}

impl From<Alloc21> for Allocation {
    fn from(a: Alloc21) -> Self {
        Allocation {
            client: a.client,
            parent: a.parent,
            object: a.object,
            class: a.class,
            status: a.status,
        }
    }
}

/// The layout an allocation of `size` bytes of parameters has; `None` for a size the RM
/// refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocLayout {
    Os64,
    Os21,
}

impl AllocLayout {
    pub const fn of_size(size: usize) -> Option<AllocLayout> {
        match size {
            48 => Some(AllocLayout::Os64),
            32 => Some(AllocLayout::Os21),
            _ => None,
        }
    }
}
