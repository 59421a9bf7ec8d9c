//! The process's channel groups, as the driver's own requests make and free them: a fixed
//! table of atomics (no allocation, no lock: it is written inside other people's `ioctl`
//! calls, and read by the launch path's rare lever checks).
//!
//! A group is known by its client and handle, and by the file its client lives on: the
//! descriptor, and that file's device and inode when the group was made, so that a
//! control of ours never goes to another file that took the descriptor's number over
//! after the driver's was closed (which also frees the group, unseen).

use std::ffi::{c_int, c_ulong, c_void};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use tessera_nvrm::{class, control, params, status, AllocLayout, Escape, Request};

/// Channel groups one process can have known at once; a process of the H200's driver makes
/// four per context.
const SLOTS: usize = 64;

/// [`Slot::state`]: unused.
const FREE: u32 = 0;
/// [`Slot::state`]: being written by the thread that claimed it.
const CLAIMED: u32 = 1;
/// [`Slot::state`]: a live group.
const LIVE: u32 = 2;

struct Slot {
    state: AtomicU32,
    fd: AtomicI32,
    file_dev: AtomicU64,
    file_ino: AtomicU64,
    client: AtomicU32,
    parent: AtomicU32,
    object: AtomicU32,
    /// The time slice the driver gave the group, in µs, as its own request said or a
    /// reading of ours found; 0 while unknown.
    driver_us: AtomicU64,
    /// The time slice we set on the group, in µs; 0 for none.
    ours_us: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU32::new(FREE),
            fd: AtomicI32::new(-1),
            file_dev: AtomicU64::new(0),
            file_ino: AtomicU64::new(0),
            client: AtomicU32::new(0),
            parent: AtomicU32::new(0),
            object: AtomicU32::new(0),
            driver_us: AtomicU64::new(0),
            ours_us: AtomicU64::new(0),
        }
    }
}

static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

/// A live group, as read from the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Group {
    /// Its index in the table.
    pub(crate) slot: usize,
    pub(crate) fd: c_int,
    pub(crate) client: u32,
    pub(crate) object: u32,
    file: (u64, u64),
}

impl Group {
    /// Whether `fd` is still the file the group's client lives on.
    pub(crate) fn file_is_current(&self) -> bool {
        file_id(self.fd) == Some(self.file)
    }

    /// The time slice the driver gave the group, in µs, if known.
    pub(crate) fn driver_us(&self) -> Option<u64> {
        // Relaxed: a value of its own, no other data behind it.
        let us = TABLE[self.slot].driver_us.load(Ordering::Relaxed);
        (us != 0).then_some(us)
    }

    pub(crate) fn set_driver_us(&self, us: u64) {
        // Relaxed: see `driver_us`.
        TABLE[self.slot].driver_us.store(us, Ordering::Relaxed);
    }

    /// The time slice we set on the group, in µs, if any.
    pub(crate) fn ours_us(&self) -> Option<u64> {
        // Relaxed: see `driver_us`.
        let us = TABLE[self.slot].ours_us.load(Ordering::Relaxed);
        (us != 0).then_some(us)
    }

    pub(crate) fn set_ours_us(&self, us: Option<u64>) {
        // Relaxed: see `driver_us`.
        TABLE[self.slot]
            .ours_us
            .store(us.unwrap_or(0), Ordering::Relaxed);
    }
}

/// The device and inode of the file open on `fd`.
fn file_id(fd: c_int) -> Option<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `stat` to the valid buffer given, or fails.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so it wrote the whole struct.
    let st = unsafe { st.assume_init() };
    Some((st.st_dev, st.st_ino))
}

/// What [`after`] saw of a group, for the time slice lever.
#[derive(Debug, Clone, Copy)]
pub(super) enum Seen {
    /// The driver made this group.
    Made(Group),
    /// The driver set this group's time slice, to this many µs.
    DriverSet(Group, u64),
}

/// Reads the driver's answer to an RM request it accepted: a channel group made, a group
/// (or the object it lives under) freed, or the driver setting a group's time slice.
///
/// # Safety
/// The driver accepted `request` on `fd` with `arg` (`ioctl` returned 0), so `arg` and the
/// parameters it points to are valid for the request's size.
pub(super) unsafe fn after(fd: c_int, request: c_ulong, arg: *mut c_void) -> Option<Seen> {
    let req = Request::decode(request);
    let escape = req.escape()?;
    let (escape, size, params) = match escape {
        Escape::Xfer => {
            if req.size != size_of::<params::Xfer>() {
                return None;
            }
            // SAFETY: the driver read these bytes (see above).
            let x = unsafe { arg.cast::<params::Xfer>().read_unaligned() };
            let inner = u8::try_from(x.cmd).ok().and_then(Escape::from_number)?;
            if inner == Escape::Xfer {
                return None;
            }
            (inner, x.size as usize, x.ptr as *mut c_void)
        }
        other => (other, req.size, arg),
    };
    if params.is_null() {
        return None;
    }
    match escape {
        Escape::Alloc => {
            let a: params::Allocation = match AllocLayout::of_size(size) {
                // SAFETY: the driver read the parameters, of the size the layout has.
                Some(AllocLayout::Os64) => unsafe {
                    params.cast::<params::Alloc64>().read_unaligned().into()
                },
                // SAFETY: as above.
                Some(AllocLayout::Os21) => unsafe {
                    params.cast::<params::Alloc21>().read_unaligned().into()
                },
                None => return None,
            };
            if a.status == status::OK && a.class == class::CHANNEL_GROUP {
                return add(fd, a.client, a.parent, a.object).map(Seen::Made);
            }
        }
        Escape::Free => {
            if size != size_of::<params::Free>() {
                return None;
            }
            // SAFETY: as above.
            let f = unsafe { params.cast::<params::Free>().read_unaligned() };
            if f.status == status::OK {
                remove(f.client, f.object);
            }
        }
        Escape::Control => {
            if size != size_of::<params::Control>() {
                return None;
            }
            // SAFETY: as above.
            let c = unsafe { params.cast::<params::Control>().read_unaligned() };
            if c.status != status::OK
                || c.cmd != control::SET_TIMESLICE
                || c.params_size as usize != size_of::<params::Timeslice>()
                || c.params == 0
            {
                return None;
            }
            if let Some(group) = find(c.client, c.object) {
                // SAFETY: the driver read the control's parameters, of this size.
                let t = unsafe { (c.params as *const params::Timeslice).read_unaligned() };
                return Some(Seen::DriverSet(group, t.us));
            }
        }
        Escape::Xfer => {}
    }
    None
}

/// Adds a group; `None` when the table is full (the group is then left as the driver made
/// it).
fn add(fd: c_int, client: u32, parent: u32, object: u32) -> Option<Group> {
    let file = file_id(fd)?;
    for (i, s) in TABLE.iter().enumerate() {
        // Acquire: the slot's earlier writes (by a thread that freed it) are behind us.
        if s.state
            .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        // Relaxed (all): published by the Release store of LIVE below.
        s.fd.store(fd, Ordering::Relaxed);
        s.file_dev.store(file.0, Ordering::Relaxed);
        s.file_ino.store(file.1, Ordering::Relaxed);
        s.client.store(client, Ordering::Relaxed);
        s.parent.store(parent, Ordering::Relaxed);
        s.object.store(object, Ordering::Relaxed);
        s.driver_us.store(0, Ordering::Relaxed);
        s.ours_us.store(0, Ordering::Relaxed);
        // Release: pairs with the Acquire load in `read`.
        s.state.store(LIVE, Ordering::Release);
        return Some(Group {
            slot: i,
            fd,
            client,
            object,
            file,
        });
    }
    crate::tlog!(
        warn,
        "more than {SLOTS} channel groups in this process; the others keep the driver's time slice"
    );
    None
}

/// The live group in slot `i`.
fn read(i: usize) -> Option<Group> {
    let s = &TABLE[i];
    // Acquire: pairs with the Release in `add`.
    if s.state.load(Ordering::Acquire) != LIVE {
        return None;
    }
    // Relaxed (all): published by the state's Release store.
    Some(Group {
        slot: i,
        fd: s.fd.load(Ordering::Relaxed),
        client: s.client.load(Ordering::Relaxed),
        object: s.object.load(Ordering::Relaxed),
        file: (
            s.file_dev.load(Ordering::Relaxed),
            s.file_ino.load(Ordering::Relaxed),
        ),
    })
}

fn find(client: u32, object: u32) -> Option<Group> {
    (0..SLOTS)
        .filter_map(read)
        .find(|g| g.client == client && g.object == object)
}

/// Takes out what freeing `object` of `client` frees: the group itself, the groups under it
/// (a freed device), or every group of the client (a freed client).
fn remove(client: u32, object: u32) {
    for (i, s) in TABLE.iter().enumerate() {
        let Some(g) = read(i) else {
            continue;
        };
        // Relaxed: published with the slot.
        let parent = s.parent.load(Ordering::Relaxed);
        if g.client == client && (object == client || g.object == object || parent == object) {
            // Relaxed: the slot's data is dead; the next claimer's Acquire CAS orders it.
            let _ = s
                .state
                .compare_exchange(LIVE, FREE, Ordering::Release, Ordering::Relaxed);
        }
    }
}

/// Every live group.
pub(crate) fn each(mut f: impl FnMut(Group)) {
    (0..SLOTS).filter_map(read).for_each(&mut f);
}

/// How many groups are live.
pub(crate) fn count() -> u32 {
    (0..SLOTS).filter_map(read).count() as u32
}

/// Forgets every group (a forked child; async-signal-safe: atomic stores only).
pub(super) fn forget_all() {
    for s in &TABLE {
        // Relaxed: the child has one thread.
        s.state.store(FREE, Ordering::Relaxed);
    }
}

#[cfg(test)]
pub(super) fn forget_all_for_tests() {
    forget_all();
}
