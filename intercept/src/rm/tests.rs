//! The RM layer against a fake RM: a function put where the driver's `ioctl` goes, which
//! checks every request's number, size and parameter bytes as the kernel module would, keeps
//! clients per file, and answers as the driver does.

use super::*;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use tessera_nvrm::{class, control, params, status, Escape};
use tessera_region::layout::{TIMESLICE_NO_GROUPS, TIMESLICE_REFUSED, TIMESLICE_SET};
use tessera_region::Region;

/// What the fake RM holds and saw.
#[derive(Default)]
struct FakeRm {
    /// Objects by (client, handle): their class and the file their client lives on.
    objects: HashMap<(u32, u32), (u32, c_int)>,
    /// Time slices by group, µs.
    slices: HashMap<(u32, u32), u64>,
    /// Every control, as (fd, client, object, cmd, time slice in the parameters).
    controls: Vec<(c_int, u32, u32, u32, u64)>,
    /// The raw bytes of every request, as the application made it.
    requests: Vec<(c_ulong, Vec<u8>)>,
    /// What `SET_TIMESLICE` answers, when not OK.
    refuse_with: Option<u32>,
}

static FAKE: Mutex<Option<FakeRm>> = Mutex::new(None);
/// The tests share the library's process-wide state (the group table, the container).
static SERIAL: Mutex<()> = Mutex::new(());

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

/// The fake RM's `ioctl`: reads the parameters as raw bytes at the protocol's offsets.
unsafe extern "C" fn fake_ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let req = Request::decode(request);
    assert_eq!(req.kind, b'F', "not an RM request: {request:#x}");
    assert_eq!(request >> 30, 3, "not _IOWR: {request:#x}");
    // SAFETY: the test's requests carry `size` bytes of parameters.
    let bytes = unsafe { std::slice::from_raw_parts(arg as *const u8, req.size) }.to_vec();
    let mut guard = FAKE.lock().unwrap();
    let rm = guard.as_mut().expect("the fake RM is not set up");
    rm.requests.push((request, bytes.clone()));
    let (escape, bytes, params) = match req.escape().expect("an escape the fake knows") {
        Escape::Xfer => {
            assert_eq!(req.size, 16, "nv_ioctl_xfer_t is 16 bytes");
            let (cmd, size, ptr) = (u32_at(&bytes, 0), u32_at(&bytes, 4), u64_at(&bytes, 8));
            // SAFETY: the transfer's pointer and size are the test's.
            let inner = unsafe { std::slice::from_raw_parts(ptr as *const u8, size as usize) };
            (
                Escape::from_number(cmd as u8).unwrap(),
                inner.to_vec(),
                ptr as *mut u8,
            )
        }
        e => (e, bytes, arg as *mut u8),
    };
    let write_u32 = |at: usize, v: u32| {
        // SAFETY: `params` holds at least `at + 4` bytes (checked by the size).
        unsafe { params.add(at).cast::<u32>().write_unaligned(v) }
    };
    match escape {
        Escape::Alloc => {
            let status_at = match bytes.len() {
                48 => 40,
                32 => 28,
                n => panic!("NV_ESC_RM_ALLOC of {n} bytes"),
            };
            let (client, object, class) =
                (u32_at(&bytes, 0), u32_at(&bytes, 8), u32_at(&bytes, 12));
            rm.objects.insert((client, object), (class, fd));
            if class == class::CHANNEL_GROUP {
                rm.slices.insert((client, object), 2048);
            }
            write_u32(status_at, status::OK);
        }
        Escape::Free => {
            assert_eq!(bytes.len(), 16, "NVOS00 is 16 bytes");
            let (client, object) = (u32_at(&bytes, 0), u32_at(&bytes, 8));
            rm.objects.remove(&(client, object));
            write_u32(12, status::OK);
        }
        Escape::Control => {
            assert_eq!(bytes.len(), 32, "NVOS54 is 32 bytes");
            let (client, object, cmd) = (u32_at(&bytes, 0), u32_at(&bytes, 4), u32_at(&bytes, 8));
            let (ptr, size) = (u64_at(&bytes, 16), u32_at(&bytes, 24));
            let answer = match rm.objects.get(&(client, object)) {
                None => status::INVALID_OBJECT_HANDLE,
                // The driver checks that the client belongs to the caller's file.
                Some(&(_, owner)) if owner != fd => status::INVALID_CLIENT,
                Some(&(c, _)) if c != class::CHANNEL_GROUP => status::NOT_SUPPORTED,
                Some(_) if size != 8 => status::INVALID_PARAM_STRUCT,
                Some(_) => {
                    let t = ptr as *mut u64;
                    // SAFETY: the control's 8 bytes of parameters.
                    let us = unsafe { t.read_unaligned() };
                    rm.controls.push((fd, client, object, cmd, us));
                    match cmd {
                        control::SET_TIMESLICE => match rm.refuse_with {
                            Some(s) => s,
                            None => {
                                rm.slices.insert((client, object), us);
                                status::OK
                            }
                        },
                        control::GET_TIMESLICE => {
                            // SAFETY: as above.
                            unsafe { t.write_unaligned(rm.slices[&(client, object)]) };
                            status::OK
                        }
                        _ => status::NOT_SUPPORTED,
                    }
                }
            };
            write_u32(28, answer);
        }
        Escape::Xfer => unreachable!(),
    }
    0
}

/// Sets the fake RM up for one test: the group table empty, the lever unsynced, the
/// container's region asking `asked` µs.
fn setup(asked: Option<u32>) -> (MutexGuard<'static, ()>, &'static Region) {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    *FAKE.lock().unwrap() = Some(FakeRm::default());
    // Release: as in `rm_next`.
    RM_NEXT.store(fake_ioctl as *mut c_void, Ordering::Release);
    groups::forget_all_for_tests();
    lever::reset_for_tests();
    let region = crate::container::get().expect("a region").region();
    region.set_timeslice_us(asked);
    region.report_timeslice(Default::default());
    (serial, region)
}

fn fake<R>(f: impl FnOnce(&mut FakeRm) -> R) -> R {
    f(FAKE.lock().unwrap().as_mut().unwrap())
}

/// A file for the fake RM's clients: a pipe's read end (any file has an identity).
fn rm_file() -> c_int {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors to the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    fds[0]
}

/// The application's allocation of `class` as `handle` under `parent`, in the 48-byte
/// layout (or the 32-byte one), through our `ioctl`.
fn alloc(fd: c_int, client: u32, parent: u32, handle: u32, class: u32, os21: bool) -> c_int {
    if os21 {
        let mut p = params::Alloc21 {
            client,
            parent,
            object: handle,
            class,
            ..Default::default()
        };
        let req = Request::encode(Escape::Alloc, 32);
        // SAFETY: an RM request with its parameters in a local.
        unsafe { dispatch(fd, req, (&raw mut p).cast()) }
    } else {
        let mut p = params::Alloc64 {
            client,
            parent,
            object: handle,
            class,
            ..Default::default()
        };
        let req = Request::encode(Escape::Alloc, 48);
        // SAFETY: as above.
        unsafe { dispatch(fd, req, (&raw mut p).cast()) }
    }
}

fn free(fd: c_int, client: u32, parent: u32, object: u32) -> c_int {
    let mut p = params::Free {
        client,
        parent,
        object,
        status: 0,
    };
    let req = Request::encode(Escape::Free, 16);
    // SAFETY: as in `alloc`.
    unsafe { dispatch(fd, req, (&raw mut p).cast()) }
}

/// The driver's own `SET_TIMESLICE` on a group, through our `ioctl`.
fn driver_sets(fd: c_int, client: u32, object: u32, us: u64) -> u32 {
    let mut t = params::Timeslice { us };
    let mut c = params::Control {
        client,
        object,
        cmd: control::SET_TIMESLICE,
        flags: 0,
        params: (&raw mut t) as u64,
        params_size: 8,
        status: 0,
    };
    let req = Request::encode(Escape::Control, 32);
    // SAFETY: as in `alloc`.
    assert_eq!(unsafe { dispatch(fd, req, (&raw mut c).cast()) }, 0);
    c.status
}

const CLIENT: u32 = 0xc1d0_0001;
const DEVICE: u32 = 0x5c00_0001;
const GROUP: u32 = 0x5c00_0010;

#[test]
fn a_channel_group_made_gets_the_time_slice_asked_in_exact_controls() {
    let (_serial, region) = setup(Some(100));
    let fd = rm_file();
    assert_eq!(alloc(fd, CLIENT, CLIENT, DEVICE, class::DEVICE, false), 0);
    assert_eq!(fake(|rm| rm.controls.len()), 0, "a device is no group");
    assert_eq!(
        alloc(fd, CLIENT, DEVICE, GROUP, class::CHANNEL_GROUP, false),
        0
    );
    // The driver's time slice read first (to put back), then ours.
    let controls = fake(|rm| rm.controls.clone());
    assert_eq!(
        controls,
        vec![
            (fd, CLIENT, GROUP, control::GET_TIMESLICE, 0),
            (fd, CLIENT, GROUP, control::SET_TIMESLICE, 100)
        ]
    );
    // The control on the wire: _IOWR('F', 0x2a, 32), NVOS54 byte for byte.
    let (request, bytes) = fake(|rm| rm.requests.last().cloned().unwrap());
    assert_eq!(request, 0xc020_462a);
    assert_eq!(u32_at(&bytes, 0), CLIENT);
    assert_eq!(u32_at(&bytes, 4), GROUP);
    assert_eq!(u32_at(&bytes, 8), 0xa06c_0103);
    assert_eq!(u32_at(&bytes, 12), 0);
    assert_ne!(u64_at(&bytes, 16), 0);
    assert_eq!(u32_at(&bytes, 24), 8);
    assert_eq!(fake(|rm| rm.slices[&(CLIENT, GROUP)]), 100);
    let report = region.timeslice_report();
    assert_eq!(
        (report.state, report.detail, report.set_us),
        (TIMESLICE_SET, 1, 100)
    );

    // The driver sets its own after making the group: ours again right after it.
    assert_eq!(driver_sets(fd, CLIENT, GROUP, 2048), status::OK);
    assert_eq!(fake(|rm| rm.slices[&(CLIENT, GROUP)]), 100);

    // The container turns online (nothing asked): the next idle launch puts the driver's
    // own back.
    region.set_timeslice_us(None);
    lever::sync(region);
    assert_eq!(fake(|rm| rm.slices[&(CLIENT, GROUP)]), 2048);
    assert_eq!(region.timeslice_report().state, 0);
}

#[test]
fn both_allocation_layouts_and_transfers_are_read() {
    let (_serial, _region) = setup(Some(250));
    let fd = rm_file();
    assert_eq!(
        alloc(fd, CLIENT, DEVICE, GROUP, class::CHANNEL_GROUP, true),
        0
    );
    assert_eq!(fake(|rm| rm.slices[&(CLIENT, GROUP)]), 250, "NVOS21");
    // An allocation wrapped in NV_ESC_IOCTL_XFER_CMD.
    let mut p = params::Alloc64 {
        client: CLIENT,
        parent: DEVICE,
        object: GROUP + 1,
        class: class::CHANNEL_GROUP,
        ..Default::default()
    };
    let mut x = params::Xfer {
        cmd: u32::from(Escape::Alloc.number()),
        size: 48,
        ptr: (&raw mut p) as u64,
    };
    let req = Request::encode(Escape::Xfer, 16);
    // SAFETY: an RM request with its parameters in locals.
    assert_eq!(unsafe { dispatch(fd, req, (&raw mut x).cast()) }, 0);
    assert_eq!(
        fake(|rm| rm.slices[&(CLIENT, GROUP + 1)]),
        250,
        "in a transfer"
    );
    assert_eq!(groups::count(), 2);
}

#[test]
fn other_classes_and_the_applications_own_requests_pass_untouched() {
    let (_serial, region) = setup(Some(100));
    let fd = rm_file();
    // A class that is not a channel group: no control follows.
    assert_eq!(alloc(fd, CLIENT, DEVICE, GROUP, 0xc86f, false), 0);
    assert_eq!(fake(|rm| rm.controls.len()), 0);
    assert_eq!(groups::count(), 0);
    // The application's request reached the driver byte for byte, with only the
    // driver's status written back.
    let (request, bytes) = fake(|rm| rm.requests[0].clone());
    assert_eq!(request, 0xc030_462b);
    assert_eq!(
        (
            u32_at(&bytes, 0),
            u32_at(&bytes, 4),
            u32_at(&bytes, 8),
            u32_at(&bytes, 12)
        ),
        (CLIENT, DEVICE, GROUP, 0xc86f)
    );
    // Not an RM request at all: the C library's `ioctl`, answered by the kernel.
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors to the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: writes three bytes from a static buffer.
    assert_eq!(unsafe { libc::write(fds[1], b"abc".as_ptr().cast(), 3) }, 3);
    let mut queued: c_int = 0;
    // SAFETY: FIONREAD writes an int to the local.
    let rc = unsafe { dispatch(fds[0], libc::FIONREAD, (&raw mut queued).cast()) };
    assert_eq!((rc, queued), (0, 3));
    assert_eq!(fake(|rm| rm.requests.len()), 1, "the fake RM saw it");
    // A launch after idle with no group seen says the lever is not available.
    lever::sync(region);
    assert_eq!(region.timeslice_report().state, TIMESLICE_NO_GROUPS);
}

#[test]
fn a_refused_control_leaves_the_group_as_the_driver_made_it() {
    let (_serial, region) = setup(Some(100));
    fake(|rm| rm.refuse_with = Some(status::INSUFFICIENT_PERMISSIONS));
    let fd = rm_file();
    assert_eq!(
        alloc(fd, CLIENT, DEVICE, GROUP, class::CHANNEL_GROUP, false),
        0
    );
    assert_eq!(fake(|rm| rm.slices[&(CLIENT, GROUP)]), 2048);
    let report = region.timeslice_report();
    assert_eq!(
        (report.state, report.detail),
        (TIMESLICE_REFUSED, status::INSUFFICIENT_PERMISSIONS)
    );
    // The driver's own requests go on as before, answered as the driver answers them.
    assert_eq!(
        driver_sets(fd, CLIENT, GROUP, 1024),
        status::INSUFFICIENT_PERMISSIONS
    );
    assert_eq!(free(fd, CLIENT, DEVICE, GROUP), 0);
}

#[test]
fn freed_groups_are_forgotten_and_never_controlled_again() {
    let (_serial, region) = setup(Some(100));
    let fd = rm_file();
    assert_eq!(
        alloc(fd, CLIENT, DEVICE, GROUP, class::CHANNEL_GROUP, false),
        0
    );
    assert_eq!(
        alloc(fd, CLIENT, DEVICE, GROUP + 1, class::CHANNEL_GROUP, false),
        0
    );
    assert_eq!(groups::count(), 2);
    assert_eq!(free(fd, CLIENT, DEVICE, GROUP), 0);
    assert_eq!(groups::count(), 1);
    // Freeing the device frees the groups under it.
    assert_eq!(free(fd, CLIENT, CLIENT, DEVICE), 0);
    assert_eq!(groups::count(), 0);
    // A group whose client's file was closed is never controlled (its number may be
    // another file's by now).
    let other = rm_file();
    assert_eq!(
        alloc(
            other,
            CLIENT,
            DEVICE,
            GROUP + 2,
            class::CHANNEL_GROUP,
            false
        ),
        0
    );
    // SAFETY: closes a descriptor this test opened.
    unsafe { libc::close(other) };
    let before = fake(|rm| rm.controls.len());
    region.set_timeslice_us(Some(300));
    lever::sync(region);
    assert_eq!(fake(|rm| rm.controls.len()), before);
    // A forked child forgets its parent's groups.
    assert_eq!(
        alloc(fd, CLIENT, DEVICE, GROUP + 3, class::CHANNEL_GROUP, false),
        0
    );
    assert!(groups::count() >= 1);
    after_fork_in_child();
    assert_eq!(groups::count(), 0);
}
