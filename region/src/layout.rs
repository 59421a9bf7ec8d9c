//! The byte layout of a region file: what every process of a container, and `controld`,
//! maps. It is `#[repr(C)]`, versioned and checked at compile time; `include/tessera.h`
//! describes the same bytes for C, and a test compares the two.
//!
//! Fields that look plain (`magic`, `name`, ...) are written once, while the creator holds
//! the file's `flock`, before [`Header::ready`] is published; everything written later is
//! an atomic. Every value read from a region is untrusted: it may have been written by a
//! buggy or hostile process of the container.

use std::mem::{align_of, offset_of, size_of};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// First bytes of every region file.
pub const MAGIC: [u8; 8] = *b"TESSERA\0";
/// Version of this layout; bumped whenever a byte moves or changes meaning.
pub const ABI_VERSION: u32 = 1;
/// Devices one container can use (one [`DeviceAccount`] each).
pub const MAX_DEVICES: usize = 16;
/// Process slots in a region: the most processes of one container that use the GPU at once.
pub const MAX_PROCESSES: usize = 1024;
/// Bytes of the container name field; a name holds at most `NAME_LEN - 1` bytes, so the
/// field always ends in NUL.
pub const NAME_LEN: usize = 64;
/// A device's memory cap meaning "no cap".
pub const UNLIMITED: u64 = u64::MAX;
/// Offset of slot 0's liveness byte, locked with an OFD lock: far past the end of the file,
/// so that a lock never covers data (locks past EOF are allowed and cost nothing).
pub const LOCK_BASE: i64 = 1 << 40;
/// Offset of the byte whose OFD lock serialises context-overhead measurements among the
/// processes of a container (two contexts made at once would each be measured with the
/// other's memory): the first byte past the slots' liveness bytes.
pub const MEASURE_LOCK: i64 = LOCK_BASE + MAX_PROCESSES as i64;

/// [`ProcessEntry::state`]: nobody owns the slot.
pub const SLOT_FREE: u32 = 0;
/// [`ProcessEntry::state`]: the slot belongs to a process that held the slot's lock byte
/// when it published this value, and holds it for as long as it lives.
pub const SLOT_LIVE: u32 = 1;

/// The region's first cache lines: what the file is and whom it belongs to.
#[repr(C, align(64))]
pub struct Header {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`ABI_VERSION`].
    pub abi_version: u32,
    /// `size_of::<Header>()`: a reader checks it before trusting any offset.
    pub header_size: u32,
    /// `size_of::<RegionLayout>()`, which is also the file's length.
    pub total_size: u64,
    /// Number of [`DeviceAccount`]s in the file: [`MAX_DEVICES`].
    pub device_count: u32,
    /// 1 once creation has finished. Stored (Release) last by the creator; a reader loads it
    /// (Acquire) before it trusts the plain fields above.
    pub ready: AtomicU32,
    /// The container's name, `[a-z0-9][a-z0-9-]{0,62}`, NUL-padded.
    pub name: [u8; NAME_LEN],
    /// Zero; room for later fields without a new header size.
    pub reserved: [u8; 32],
}

/// One device's memory account for the whole container, alone on its cache line: every
/// allocation of every process of the container compares-and-swaps `used`.
#[repr(C, align(64))]
pub struct DeviceAccount {
    /// The cap in bytes; [`UNLIMITED`] for none. Changed at run time by `controld`.
    pub memory_cap: AtomicU64,
    /// Bytes reserved by all processes of the container. Only a compare-and-swap against
    /// `memory_cap` makes it grow, so it never passes the cap that was in force.
    pub memory_used: AtomicU64,
    /// Zero; pads the account to a cache line.
    pub reserved: [u8; 48],
}

/// One process's slot in the process table.
#[repr(C, align(64))]
pub struct ProcessEntry {
    /// [`SLOT_FREE`] or [`SLOT_LIVE`].
    pub state: AtomicU32,
    /// The owner's pid, in the owner's pid namespace (for people; liveness never uses it).
    pub pid: AtomicU32,
    /// Bytes this process holds on each device; always part of the device's `memory_used`.
    pub memory: [AtomicU64; MAX_DEVICES],
    /// Zero; pads the entry to whole cache lines so that processes do not share lines.
    pub reserved: [u8; 56],
}

/// The whole region file.
#[repr(C)]
pub struct RegionLayout {
    /// What the file is.
    pub header: Header,
    /// The container's per-device memory accounts.
    pub devices: [DeviceAccount; MAX_DEVICES],
    /// The process table.
    pub processes: [ProcessEntry; MAX_PROCESSES],
}

/// Size of the header.
pub const HEADER_SIZE: usize = size_of::<Header>();
/// Size of every region file of this version.
pub const TOTAL_SIZE: usize = size_of::<RegionLayout>();

const _: () = assert!(size_of::<Header>() == 128);
const _: () = assert!(offset_of!(Header, abi_version) == 8);
const _: () = assert!(offset_of!(Header, header_size) == 12);
const _: () = assert!(offset_of!(Header, total_size) == 16);
const _: () = assert!(offset_of!(Header, device_count) == 24);
const _: () = assert!(offset_of!(Header, ready) == 28);
const _: () = assert!(offset_of!(Header, name) == 32);
const _: () = assert!(offset_of!(Header, reserved) == 96);
const _: () = assert!(size_of::<DeviceAccount>() == 64);
const _: () = assert!(offset_of!(DeviceAccount, memory_used) == 8);
const _: () = assert!(size_of::<ProcessEntry>() == 192);
const _: () = assert!(offset_of!(ProcessEntry, pid) == 4);
const _: () = assert!(offset_of!(ProcessEntry, memory) == 8);
const _: () = assert!(offset_of!(RegionLayout, devices) == 128);
const _: () = assert!(offset_of!(RegionLayout, processes) == 128 + 64 * MAX_DEVICES);
const _: () = assert!(TOTAL_SIZE == 128 + 64 * MAX_DEVICES + 192 * MAX_PROCESSES);
const _: () = assert!(align_of::<RegionLayout>() == 64);
// The atomics must be plain integers in memory for C (and for the other side's mapping).
const _: () = assert!(size_of::<AtomicU64>() == 8 && align_of::<AtomicU64>() == 8);
const _: () = assert!(MAX_PROCESSES.is_multiple_of(64));

/// One field of the layout: its C-style name (`struct.field`), offset in its struct and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLayout {
    /// `tessera_<struct>.<field>`, as `include/tessera.h` names it.
    pub name: &'static str,
    /// Offset within its struct, in bytes.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// Every struct and field of the layout, for checking other descriptions of it (the C
/// header) against this one. Structs appear as `tessera_<struct>` with offset 0.
pub fn describe() -> Vec<FieldLayout> {
    macro_rules! field {
        ($c:literal, $t:ty, $f:ident) => {
            FieldLayout {
                name: concat!($c, ".", stringify!($f)),
                offset: offset_of!($t, $f),
                size: size_of_field(|s: &$t| &s.$f),
            }
        };
    }
    macro_rules! whole {
        ($c:literal, $t:ty) => {
            FieldLayout {
                name: $c,
                offset: 0,
                size: size_of::<$t>(),
            }
        };
    }
    vec![
        whole!("tessera_header", Header),
        field!("tessera_header", Header, magic),
        field!("tessera_header", Header, abi_version),
        field!("tessera_header", Header, header_size),
        field!("tessera_header", Header, total_size),
        field!("tessera_header", Header, device_count),
        field!("tessera_header", Header, ready),
        field!("tessera_header", Header, name),
        field!("tessera_header", Header, reserved),
        whole!("tessera_device_account", DeviceAccount),
        field!("tessera_device_account", DeviceAccount, memory_cap),
        field!("tessera_device_account", DeviceAccount, memory_used),
        field!("tessera_device_account", DeviceAccount, reserved),
        whole!("tessera_process_entry", ProcessEntry),
        field!("tessera_process_entry", ProcessEntry, state),
        field!("tessera_process_entry", ProcessEntry, pid),
        field!("tessera_process_entry", ProcessEntry, memory),
        field!("tessera_process_entry", ProcessEntry, reserved),
        whole!("tessera_region", RegionLayout),
        field!("tessera_region", RegionLayout, header),
        field!("tessera_region", RegionLayout, devices),
        field!("tessera_region", RegionLayout, processes),
    ]
}

/// The size of the field that `get` projects to, without needing a value of `T`.
const fn size_of_field<T, F>(_get: fn(&T) -> &F) -> usize {
    size_of::<F>()
}
