//! The fault guard installed after the application's own `SIGBUS` handler (as the preload
//! library is, inside someone else's process): a fault in a region is the guard's, a fault
//! anywhere else still reaches the application's handler. A test binary of its own, since
//! signal actions are the whole process's.

use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_region::{Region, RegionInit, MAX_DEVICES};

/// The address of the application's last fault, which its handler repaired.
static REPAIRED: AtomicUsize = AtomicUsize::new(0);

/// The application's handler: puts a private page where the fault was, as a program that
/// maps files it expects to shrink might.
extern "C" fn application_handler(
    _sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = addr & !4095;
    // SAFETY: replaces one page of the test's own file mapping (below) with a private zero
    // page; mmap is a plain system call.
    unsafe {
        libc::mmap(
            page as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        );
    }
    REPAIRED.store(addr, Ordering::SeqCst);
}

#[test]
fn faults_outside_every_region_still_reach_the_applications_handler() {
    // SAFETY: sigaction is plain data, zeroed then filled with a handler of the
    // SA_SIGINFO signature.
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = application_handler as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut())
    };
    assert_eq!(rc, 0);
    tessera_region::fault::install().unwrap();

    // The application's own file, mapped and then shrunk.
    let dir = std::env::temp_dir();
    let own = dir.join(format!("tessera-fault-chain-{}.data", std::process::id()));
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&own)
        .unwrap();
    file.set_len(8192).unwrap();
    // SAFETY: a fresh shared mapping of the file just made, unmapped below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    file.set_len(0).unwrap();
    // SAFETY: inside the mapping; past the file's end it faults, and the application's
    // handler puts a page there before the read is retried.
    let byte = unsafe { std::ptr::read_volatile((base as *const u8).add(4096 + 8)) };
    assert_eq!(byte, 0);
    assert_eq!(REPAIRED.load(Ordering::SeqCst), base as usize + 4096 + 8);

    // A region shrunk under its mapping is the guard's: zeros, and the region says so.
    let path = dir.join(format!("tessera-fault-chain-{}.region", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut memory_caps = [None; MAX_DEVICES];
    memory_caps[0] = Some(1 << 30);
    let init = RegionInit {
        name: "team-a".into(),
        memory_caps,
    };
    let region = Region::open_or_create(&path, &init).unwrap();
    REPAIRED.store(0, Ordering::SeqCst);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_eq!(region.memory_used(0), 0);
    assert!(region.faulted());
    assert_eq!(
        REPAIRED.load(Ordering::SeqCst),
        0,
        "the application's handler saw a fault of the region"
    );
    drop(region);
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(base, 8192) };
    let _ = std::fs::remove_file(own);
    let _ = std::fs::remove_file(path);
}
