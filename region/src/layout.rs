//! The byte layout of a region file: what every process of a container, and `controld`,
//! maps. It is `#[repr(C)]`, versioned and checked at compile time; `include/tessera.h`
//! describes the same bytes for C, and a test compares the two.
//!
//! Fields that look plain (`magic`, `name`, ...) are written once, while the creator holds
//! the file's `flock`, before [`Header::ready`] is published; everything written later is
//! an atomic. Every value read from a region is untrusted: it may have been written by a
//! buggy or hostile process of the container.

use std::mem::{align_of, offset_of, size_of};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64};

/// First bytes of every region file.
pub const MAGIC: [u8; 8] = *b"TESSERA\0";
/// Version of this layout; bumped whenever a byte moves or changes meaning.
pub const ABI_VERSION: u32 = 4;
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

/// [`Header::timeslice_state`]: nothing asked, or no process has acted on it yet.
pub const TIMESLICE_NONE: u32 = 0;
/// [`Header::timeslice_state`]: the time slice is in force on the channel groups seen.
pub const TIMESLICE_SET: u32 = 1;
/// [`Header::timeslice_state`]: a process launched work, and its driver's channel groups
/// were never seen (a driver whose requests are not the RM's, or not made through `ioctl`).
pub const TIMESLICE_NO_GROUPS: u32 = 2;
/// [`Header::timeslice_state`]: the driver refused the time slice.
pub const TIMESLICE_REFUSED: u32 = 3;
/// Added to an errno in [`Header::timeslice_detail`], to tell it from an RM status.
pub const TIMESLICE_ERRNO: u32 = 0x8000_0000;

/// [`ComputeAccount::mode`]: compute is not limited; launches take the fast path.
pub const COMPUTE_UNLIMITED: u32 = 0;
/// [`ComputeAccount::mode`]: `controld` refills the bucket and sets blocks.
pub const COMPUTE_DAEMON: u32 = 1;
/// [`ComputeAccount::mode`]: no daemon; the container's processes refill the bucket
/// themselves at [`ComputeAccount::local_share_ppm`] (`TESSERA_COMPUTE=fixed:Q`).
pub const COMPUTE_LOCAL: u32 = 2;
/// [`ComputeAccount::priority`]: latency-critical work that preempts offline work.
pub const PRIORITY_ONLINE: u32 = 0;
/// [`ComputeAccount::priority`]: work that yields the GPU while online work has some.
pub const PRIORITY_OFFLINE: u32 = 1;
/// Launches a container may have in flight per device when [`ComputeAccount::window`] is 0:
/// a bound on the events its measurement takes (at most one per launch, on a stream whose
/// queue stays shallow), and on the work a wrong estimate lets in (a kernel function
/// launched small, then large). Deep enough that kernels of a few microseconds keep the GPU
/// busy while the host is late; what bounds the work queued on the GPU otherwise is
/// [`ComputeAccount::window_ns`].
pub const DEFAULT_WINDOW: u32 = 256;
/// GPU time a container may have in flight per device when [`ComputeAccount::window_ns`]
/// is 0: enough launches of short kernels to keep the GPU busy while the library harvests
/// completions, and at most this much of any container's work for others to wait behind.
pub const DEFAULT_WINDOW_NS: u64 = 4_000_000;
/// One share in parts per million: 100% of a device's time.
pub const PPM_ALL: u32 = 1_000_000;
/// Slots of [`ComputeAccount::spans`] (a ring).
pub const SPAN_SLOTS: usize = 256;
/// Low bits of a packed busy span that hold its length in µs; the bits above hold its start
/// in µs of the node clock, modulo 2^40 (0: empty slot).
pub const SPAN_LEN_BITS: u32 = 24;

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
    /// Bit `d` is set while device `d`'s [`ComputeAccount::mode`] is not
    /// [`COMPUTE_UNLIMITED`], so that a launch in a container limited nowhere costs one
    /// load. Written with the modes, through `Region::set_compute_mode` (by `controld`, or
    /// by the library for `TESSERA_COMPUTE`); never write a mode without it.
    pub compute_limited: AtomicU32,
    /// The GPUs the container was given: bit `d` for device `d`; 0 for every device (a
    /// region made without a daemon). Written by `controld` with the caps; the library shows
    /// the container these devices only (device count, ordinals, NVML).
    pub gpus: AtomicU32,
    /// The time slice the GPU should give the container's channel groups, in µs; 0 for the
    /// driver's own. Written by `controld` (or by the library for `TESSERA_TIMESLICE`); the
    /// library sets it on each channel group its processes' driver makes.
    pub timeslice_us: AtomicU32,
    /// What the library last did about `timeslice_us`: one of the `TIMESLICE_*` states.
    /// Written by the library, read by `controld` for status; evidence only.
    pub timeslice_state: AtomicU32,
    /// With [`TIMESLICE_SET`], the channel groups set; with [`TIMESLICE_REFUSED`], the
    /// driver's status (an RM status, or an errno with [`TIMESLICE_ERRNO`] added). Written
    /// by the library.
    pub timeslice_detail: AtomicU32,
    /// The time slice in force on the channel groups set, in µs. Written by the library.
    pub timeslice_set_us: AtomicU32,
    /// Zero; room for later fields without a new header size.
    pub reserved: [u8; 8],
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
    /// What a context of the container costs on the device, in bytes, as the library last
    /// measured one; 0 until then. The library reserves this much before it makes the next
    /// context (and trues the reservation up after), so that a context's memory is counted
    /// before it exists. Written by the library, a hint only: a spoiled value costs the
    /// container a refused or over-reserved context, never memory beyond its cap.
    pub context_bytes: AtomicU64,
    /// The device's UUID (its 16 bytes, two big-endian halves); zero where unknown. Written
    /// by `controld` with the GPUs, from the node's NVML: inside a container the runtime may
    /// renumber the devices it shows (the card given as ordinal 0), so the library finds
    /// this account's device by UUID, never by its node index.
    pub uuid: [AtomicU64; 2],
    /// Zero; pads the account to a cache line.
    pub reserved: [u8; 24],
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

/// One device's compute account for the whole container: the launch gate's state, its
/// GPU-time token bucket and its measurements. Three cache lines of words, then the busy
/// bins: the first line is written by whoever sets limits (`controld`, or the library in
/// [`COMPUTE_LOCAL`] mode) and read at every gated launch; the second is written by the
/// library's gated launches; the third holds rarely written timestamps. All times are
/// nanoseconds of `CLOCK_MONOTONIC` (the node clock) unless named otherwise.
#[repr(C, align(64))]
pub struct ComputeAccount {
    /// [`COMPUTE_UNLIMITED`], [`COMPUTE_DAEMON`] or [`COMPUTE_LOCAL`]. Written by
    /// `controld` (or by the library for `TESSERA_COMPUTE`), only through
    /// `Region::set_compute_mode`, which keeps [`Header::compute_limited`] in step.
    pub mode: AtomicU32,
    /// 1 while the container may launch nothing new on the device (an offline container
    /// while online work runs). Written by `controld`.
    pub blocked: AtomicU32,
    /// Launches the container may have in flight on the device; 0 means
    /// [`DEFAULT_WINDOW`]. Written by `controld` (set at creation).
    pub window: AtomicU32,
    /// [`PRIORITY_ONLINE`] or [`PRIORITY_OFFLINE`]. Written by `controld`.
    pub priority: AtomicU32,
    /// The share the processes refill themselves with in [`COMPUTE_LOCAL`] mode, in parts
    /// per million of the device's time. Written by the library (`TESSERA_COMPUTE`), or by
    /// `controld` every tick as the share the container keeps if the daemon goes silent
    /// (what it gets when every container on the device has work).
    pub local_share_ppm: AtomicU32,
    /// The share the scheduler gives the container now, in ppm. Written by `controld`, for
    /// status and metrics.
    pub share_target_ppm: AtomicU32,
    /// The share the container got lately (normalised), in ppm. Written by `controld`.
    pub share_measured_ppm: AtomicU32,
    /// The container's bit on the node's [`BoardLayout`] plus one, 0 for none: an online
    /// container's library sets bit `board_bit - 1` of the device's word there while it
    /// has work. Written by `controld`.
    pub board_bit: AtomicU32,
    /// Times `controld` blocked the container for online work. Written by `controld`.
    pub preemptions: AtomicU64,
    /// Estimated GPU time the container may have in flight on the device, in ns; 0 means
    /// [`DEFAULT_WINDOW_NS`]. A launch is admitted into an empty window whatever its
    /// estimate, else only while the estimates in flight and its own fit. Written by
    /// `controld` (set at creation).
    pub window_ns: AtomicU64,
    /// The end, on the node clock, of the second that [`ComputeAccount::share_measured_ppm`]
    /// covers. Written by `controld`, for status.
    pub share_measured_until_ns: AtomicU64,
    /// The rate `controld` refills the bucket at now, in ppm of the device's time; 0 while
    /// the container waits for its turn or is blocked. The library counts what has accrued
    /// since `last_refill_ns` as credit (up to a tick's worth), so that a container admits
    /// its launches as its credit accrues, not in bursts at each tick. Written by
    /// `controld`.
    pub refill_ppm: AtomicU32,
    /// Zero; ends the first cache line.
    pub reserved1: [u8; 4],
    /// Futex word the throttled launches sleep on; bumped (then woken) by whoever refills
    /// the bucket or lifts a block: `controld`, or the processes in [`COMPUTE_LOCAL`] mode.
    pub gate: AtomicU32,
    /// Futex word: 1 while the container has launches in flight or waiting. Raised and
    /// cleared by the library; `controld` sleeps on it for online containers.
    pub active: AtomicU32,
    /// Launches of the container sleeping in the gate now. Written by the library.
    pub waiting: AtomicU32,
    /// Launches admitted and not yet seen complete. Written by the library (a dead
    /// process's share is taken back by `controld`'s reaper only through the slot's own
    /// counts, so this may stay high after a crash; `controld` clamps it).
    pub inflight: AtomicU32,
    /// The GPU-time token bucket in ns; negative is debt. Charged by the library as kernels
    /// complete, refilled by `controld` (or the processes in [`COMPUTE_LOCAL`] mode).
    pub bucket_ns: AtomicI64,
    /// When the bucket was last refilled. Written by the refiller.
    pub last_refill_ns: AtomicU64,
    /// GPU time measured for the container on the device, raw (overlap included). Written
    /// by the library.
    pub measured_ns: AtomicU64,
    /// Time launches spent waiting in the gate, summed over threads. Written by the
    /// library.
    pub throttled_ns: AtomicU64,
    /// Launches admitted through the gate (launches on the fast path are not counted).
    /// Written by the library.
    pub launches: AtomicU64,
    /// When an online container last raised `active`. Written by the library.
    pub active_raised_ns: AtomicU64,
    /// When a launch first found the container blocked after the last unblock; 0 once
    /// `controld` lifts the block. Written by the library (cleared by `controld`).
    pub blocked_seen_ns: AtomicU64,
    /// When `controld` last set `blocked` (stamped right after the store). Written by
    /// `controld`; with `active_raised_ns` it gives the preemption latency.
    pub blocked_at_ns: AtomicU64,
    /// When the library of an online container last set its bit on the board (from clear),
    /// on the node clock, right after the store: from then on offline launches on the
    /// device are refused. With `active_raised_ns` it gives the preemption latency.
    pub board_set_ns: AtomicU64,
    /// The estimated GPU time of the launches admitted and not yet seen complete, in ns
    /// (each launch's estimate is added when it is admitted and taken away, the same
    /// amount, when it completes). Written by the library; `controld` clears it with
    /// `inflight` once no process of the container is left.
    pub inflight_ns: AtomicU64,
    /// Where the next busy span is put in `spans` (round robin). Written by the library.
    pub span_cursor: AtomicU32,
    /// Zero; ends the third cache line.
    pub reserved2: [u8; 28],
    /// Ring of busy spans: when the container's measured kernels ran, on the node clock
    /// (`spans.rs` in the region crate has the packing). Added to by the library as kernels
    /// complete, emptied by `controld` (or a local-mode refill) as it settles overlap.
    pub spans: [AtomicU64; SPAN_SLOTS],
}

/// The whole region file.
#[repr(C)]
pub struct RegionLayout {
    /// What the file is.
    pub header: Header,
    /// The container's per-device memory accounts.
    pub devices: [DeviceAccount; MAX_DEVICES],
    /// The container's per-device compute accounts.
    pub compute: [ComputeAccount; MAX_DEVICES],
    /// The process table.
    pub processes: [ProcessEntry; MAX_PROCESSES],
}

/// First bytes of the node's board file.
pub const BOARD_MAGIC: [u8; 8] = *b"TSRBOARD";

/// The node's priority board, one file beside the regions (`board` in `controld`'s state
/// dir): a word per device whose bits say which online containers have work there. The
/// library of an online container sets its bit at its first launch after idle and clears
/// it when nothing is left in flight; an offline container's library refuses to launch
/// while its device's word is not zero. Online work so stops offline launches with one
/// store, without waiting for the daemon; `controld` assigns the bits (`board_bit` in each
/// region), clears those of containers that are gone, and still blocks offline regions
/// itself. Every value is untrusted: any non-zero word means online work.
#[repr(C, align(64))]
pub struct BoardLayout {
    /// [`BOARD_MAGIC`].
    pub magic: [u8; 8],
    /// [`ABI_VERSION`].
    pub abi_version: u32,
    /// Zero.
    pub reserved: [u8; 52],
    /// Per device, a bit per online container with work there.
    pub online: [AtomicU64; MAX_DEVICES],
}

/// Size of the board file.
pub const BOARD_SIZE: usize = size_of::<BoardLayout>();

const _: () = assert!(offset_of!(BoardLayout, online) == 64);
const _: () = assert!(BOARD_SIZE == 64 + 8 * MAX_DEVICES);

/// First bytes of a container's limits file.
pub const LIMITS_MAGIC: [u8; 8] = *b"TSRLIMIT";

/// A container's limits where its processes can only read them: the file `<region>.limits`
/// beside its region, written by `controld` alone and given to the container read-only (a
/// read-only mount, or a file mode its processes cannot write). Whatever a process writes
/// into its region, the library never lets the container's memory pass these caps, never
/// takes a device for unlimited that the daemon limits, and never launches on a device the
/// daemon holds, while the daemon's heartbeat here is fresh. A region without this file (no
/// daemon) is held to the caps in the region alone.
#[repr(C, align(64))]
pub struct LimitsLayout {
    /// [`LIMITS_MAGIC`].
    pub magic: [u8; 8],
    /// [`ABI_VERSION`].
    pub abi_version: u32,
    /// Bit `d` set while the daemon limits device `d`'s compute (its copy of the region
    /// header's `compute_limited`, which the container can clear).
    pub compute_limited: AtomicU32,
    /// When the daemon last ticked, on the node clock (ns of `CLOCK_MONOTONIC`): the
    /// compute words below are obeyed while it is fresh (within
    /// [`DAEMON_SILENT_NS`](crate::DAEMON_SILENT_NS)), so a daemon that died holds nobody.
    pub heartbeat_ns: AtomicU64,
    /// Zero.
    pub reserved: [u8; 40],
    /// Per device, the declared memory cap in bytes; [`UNLIMITED`] for none.
    pub memory_caps: [AtomicU64; MAX_DEVICES],
    /// Per device, the compute mode the daemon set (`COMPUTE_*`), its copy of the region's.
    pub compute_mode: [AtomicU32; MAX_DEVICES],
    /// Per device, why the container's launches must wait ([`HOLD_BLOCKED`],
    /// [`HOLD_OVER_GRANT`]); 0 when they may go.
    pub compute_hold: [AtomicU32; MAX_DEVICES],
    /// Per device, the board bits an offline container's library ignores: all but those of
    /// the live online containers on the device whose claims of work are true by the
    /// daemon's own measure and whose bit no neighbour keeps setting (the daemon still
    /// blocks offline work for their real work, through `compute_hold`).
    pub board_ignore: [AtomicU64; MAX_DEVICES],
}

/// [`LimitsLayout::compute_hold`]: offline, while online work runs on the device.
pub const HOLD_BLOCKED: u32 = 1;
/// [`LimitsLayout::compute_hold`]: its processes ran past the share it was granted, by the
/// daemon's own measure, until they have paid it back.
pub const HOLD_OVER_GRANT: u32 = 2;

/// Size of a limits file.
pub const LIMITS_SIZE: usize = size_of::<LimitsLayout>();

const _: () = assert!(offset_of!(LimitsLayout, compute_limited) == 12);
const _: () = assert!(offset_of!(LimitsLayout, heartbeat_ns) == 16);
const _: () = assert!(offset_of!(LimitsLayout, memory_caps) == 64);
const _: () = assert!(offset_of!(LimitsLayout, compute_mode) == 64 + 8 * MAX_DEVICES);
const _: () = assert!(offset_of!(LimitsLayout, compute_hold) == 64 + 12 * MAX_DEVICES);
const _: () = assert!(offset_of!(LimitsLayout, board_ignore) == 64 + 16 * MAX_DEVICES);
const _: () = assert!(LIMITS_SIZE == 64 + 24 * MAX_DEVICES);

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
const _: () = assert!(offset_of!(Header, compute_limited) == 96);
const _: () = assert!(offset_of!(Header, gpus) == 100);
const _: () = assert!(offset_of!(Header, timeslice_us) == 104);
const _: () = assert!(offset_of!(Header, timeslice_state) == 108);
const _: () = assert!(offset_of!(Header, timeslice_detail) == 112);
const _: () = assert!(offset_of!(Header, timeslice_set_us) == 116);
const _: () = assert!(offset_of!(Header, reserved) == 120);
const _: () = assert!(size_of::<DeviceAccount>() == 64);
const _: () = assert!(offset_of!(DeviceAccount, memory_used) == 8);
const _: () = assert!(offset_of!(DeviceAccount, context_bytes) == 16);
const _: () = assert!(size_of::<ProcessEntry>() == 192);
const _: () = assert!(offset_of!(ProcessEntry, pid) == 4);
const _: () = assert!(offset_of!(ProcessEntry, memory) == 8);
const _: () = assert!(offset_of!(RegionLayout, devices) == 128);
const _: () = assert!(offset_of!(ComputeAccount, blocked) == 4);
const _: () = assert!(offset_of!(ComputeAccount, window) == 8);
const _: () = assert!(offset_of!(ComputeAccount, priority) == 12);
const _: () = assert!(offset_of!(ComputeAccount, local_share_ppm) == 16);
const _: () = assert!(offset_of!(ComputeAccount, share_target_ppm) == 20);
const _: () = assert!(offset_of!(ComputeAccount, share_measured_ppm) == 24);
const _: () = assert!(offset_of!(ComputeAccount, preemptions) == 32);
const _: () = assert!(offset_of!(ComputeAccount, gate) == 64);
const _: () = assert!(offset_of!(ComputeAccount, active) == 68);
const _: () = assert!(offset_of!(ComputeAccount, waiting) == 72);
const _: () = assert!(offset_of!(ComputeAccount, inflight) == 76);
const _: () = assert!(offset_of!(ComputeAccount, bucket_ns) == 80);
const _: () = assert!(offset_of!(ComputeAccount, last_refill_ns) == 88);
const _: () = assert!(offset_of!(ComputeAccount, measured_ns) == 96);
const _: () = assert!(offset_of!(ComputeAccount, throttled_ns) == 104);
const _: () = assert!(offset_of!(ComputeAccount, launches) == 112);
const _: () = assert!(offset_of!(ComputeAccount, active_raised_ns) == 120);
const _: () = assert!(offset_of!(ComputeAccount, blocked_seen_ns) == 128);
const _: () = assert!(offset_of!(ComputeAccount, blocked_at_ns) == 136);
const _: () = assert!(offset_of!(ComputeAccount, board_bit) == 28);
const _: () = assert!(offset_of!(ComputeAccount, board_set_ns) == 144);
const _: () = assert!(offset_of!(ComputeAccount, window_ns) == 40);
const _: () = assert!(offset_of!(ComputeAccount, share_measured_until_ns) == 48);
const _: () = assert!(offset_of!(ComputeAccount, refill_ppm) == 56);
const _: () = assert!(offset_of!(ComputeAccount, reserved1) == 60);
const _: () = assert!(offset_of!(ComputeAccount, inflight_ns) == 152);
const _: () = assert!(offset_of!(ComputeAccount, span_cursor) == 160);
const _: () = assert!(offset_of!(ComputeAccount, reserved2) == 164);
const _: () = assert!(offset_of!(ComputeAccount, spans) == 192);
const _: () = assert!(size_of::<ComputeAccount>() == 192 + 8 * SPAN_SLOTS);
const _: () = assert!(size_of::<ComputeAccount>().is_multiple_of(64));
const _: () = assert!(offset_of!(RegionLayout, compute) == 128 + 64 * MAX_DEVICES);
const _: () =
    assert!(offset_of!(RegionLayout, processes) == 128 + (64 + 192 + 8 * SPAN_SLOTS) * MAX_DEVICES);
const _: () =
    assert!(TOTAL_SIZE == 128 + (64 + 192 + 8 * SPAN_SLOTS) * MAX_DEVICES + 192 * MAX_PROCESSES);
const _: () = assert!(size_of::<AtomicI64>() == 8 && align_of::<AtomicI64>() == 8);
const _: () = assert!(MAX_DEVICES <= 32); // one bit each in `Header::compute_limited`
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
        field!("tessera_header", Header, compute_limited),
        field!("tessera_header", Header, gpus),
        field!("tessera_header", Header, timeslice_us),
        field!("tessera_header", Header, timeslice_state),
        field!("tessera_header", Header, timeslice_detail),
        field!("tessera_header", Header, timeslice_set_us),
        field!("tessera_header", Header, reserved),
        whole!("tessera_device_account", DeviceAccount),
        field!("tessera_device_account", DeviceAccount, memory_cap),
        field!("tessera_device_account", DeviceAccount, memory_used),
        field!("tessera_device_account", DeviceAccount, context_bytes),
        field!("tessera_device_account", DeviceAccount, uuid),
        field!("tessera_device_account", DeviceAccount, reserved),
        whole!("tessera_compute_account", ComputeAccount),
        field!("tessera_compute_account", ComputeAccount, mode),
        field!("tessera_compute_account", ComputeAccount, blocked),
        field!("tessera_compute_account", ComputeAccount, window),
        field!("tessera_compute_account", ComputeAccount, priority),
        field!("tessera_compute_account", ComputeAccount, local_share_ppm),
        field!("tessera_compute_account", ComputeAccount, share_target_ppm),
        field!(
            "tessera_compute_account",
            ComputeAccount,
            share_measured_ppm
        ),
        field!("tessera_compute_account", ComputeAccount, board_bit),
        field!("tessera_compute_account", ComputeAccount, preemptions),
        field!("tessera_compute_account", ComputeAccount, window_ns),
        field!(
            "tessera_compute_account",
            ComputeAccount,
            share_measured_until_ns
        ),
        field!("tessera_compute_account", ComputeAccount, refill_ppm),
        field!("tessera_compute_account", ComputeAccount, reserved1),
        field!("tessera_compute_account", ComputeAccount, gate),
        field!("tessera_compute_account", ComputeAccount, active),
        field!("tessera_compute_account", ComputeAccount, waiting),
        field!("tessera_compute_account", ComputeAccount, inflight),
        field!("tessera_compute_account", ComputeAccount, bucket_ns),
        field!("tessera_compute_account", ComputeAccount, last_refill_ns),
        field!("tessera_compute_account", ComputeAccount, measured_ns),
        field!("tessera_compute_account", ComputeAccount, throttled_ns),
        field!("tessera_compute_account", ComputeAccount, launches),
        field!("tessera_compute_account", ComputeAccount, active_raised_ns),
        field!("tessera_compute_account", ComputeAccount, blocked_seen_ns),
        field!("tessera_compute_account", ComputeAccount, blocked_at_ns),
        field!("tessera_compute_account", ComputeAccount, board_set_ns),
        field!("tessera_compute_account", ComputeAccount, inflight_ns),
        field!("tessera_compute_account", ComputeAccount, span_cursor),
        field!("tessera_compute_account", ComputeAccount, reserved2),
        field!("tessera_compute_account", ComputeAccount, spans),
        whole!("tessera_process_entry", ProcessEntry),
        field!("tessera_process_entry", ProcessEntry, state),
        field!("tessera_process_entry", ProcessEntry, pid),
        field!("tessera_process_entry", ProcessEntry, memory),
        field!("tessera_process_entry", ProcessEntry, reserved),
        whole!("tessera_region", RegionLayout),
        field!("tessera_region", RegionLayout, header),
        field!("tessera_region", RegionLayout, devices),
        field!("tessera_region", RegionLayout, compute),
        field!("tessera_region", RegionLayout, processes),
        whole!("tessera_board", BoardLayout),
        field!("tessera_board", BoardLayout, magic),
        field!("tessera_board", BoardLayout, abi_version),
        field!("tessera_board", BoardLayout, reserved),
        field!("tessera_board", BoardLayout, online),
        whole!("tessera_limits", LimitsLayout),
        field!("tessera_limits", LimitsLayout, magic),
        field!("tessera_limits", LimitsLayout, abi_version),
        field!("tessera_limits", LimitsLayout, compute_limited),
        field!("tessera_limits", LimitsLayout, heartbeat_ns),
        field!("tessera_limits", LimitsLayout, reserved),
        field!("tessera_limits", LimitsLayout, memory_caps),
        field!("tessera_limits", LimitsLayout, compute_mode),
        field!("tessera_limits", LimitsLayout, compute_hold),
        field!("tessera_limits", LimitsLayout, board_ignore),
    ]
}

/// The size of the field that `get` projects to, without needing a value of `T`.
const fn size_of_field<T, F>(_get: fn(&T) -> &F) -> usize {
    size_of::<F>()
}
