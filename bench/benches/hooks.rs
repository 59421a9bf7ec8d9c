//! What `libtessera.so` adds to a driver call: each benchmark calls the same entry point
//! once through the library's export and once in the driver directly, in the same process,
//! so the difference of the two medians is the library's cost.
//!
//! Two drivers, each in its own process (a process has one real driver under libtessera):
//! - simgpu's `libcuda.so.1`, the driver every test runs on. Its allocations are backed by
//!   `mmap`/`munmap` (microseconds), which drowns the library's share of an allocation;
//! - a stub driver (`stub_driver.c`, compiled here with the system C compiler) that answers
//!   each call in a few instructions, handed to libtessera as `TESSERA_REAL_LIBCUDA`: the
//!   difference against it is the library's own cost, resolvable to a few nanoseconds.
//!
//! Run with `cargo bench -p tessera-bench --bench hooks`. The benchmark builds what it needs
//! (simgpu's libraries and libtessera.so, in the bench's own profile, and the stub), then
//! runs itself once per driver with that driver's environment, because that is how
//! libtessera.so finds the real driver and the dynamic loader reads `LD_LIBRARY_PATH` only
//! at start-up. simgpu's node is private (`SIMGPU_STATE` in a temporary file); the container
//! is anonymous with a 64 GiB cap, so the accounting path runs in full.
//!
//! The launch benchmark launches a null function: both drivers refuse it at once, so the
//! figure is the wrapper's own cost rather than a kernel's.

use criterion::{criterion_group, BenchmarkId, Criterion};
use std::ffi::{c_char, c_int, c_ulong, c_void, CStr, CString};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr::null_mut;
use tessera_cuda_abi::{entry, CUDA_SUCCESS};

/// Set in the re-executed benchmark, to the driver it measures: [`SIMGPU`] or [`STUB`].
const CHILD: &str = "TESSERA_BENCH_WITH_DRIVER_ENV";
const SIMGPU: &str = "simgpu";
const STUB: &str = "stub";

type LaunchKernel = entry::cuLaunchKernel::Pfn;
type MemAlloc = entry::cuMemAlloc_v2::Pfn;
type MemFree = entry::cuMemFree_v2::Pfn;
type MemGetInfo = entry::cuMemGetInfo_v2::Pfn;
type Dlsym = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type Ioctl = unsafe extern "C" fn(c_int, c_ulong, *mut c_void) -> c_int;
type GetProcAddress = entry::cuGetProcAddress_v2::Pfn;
type Init = entry::cuInit::Pfn;
type DeviceGet = entry::cuDeviceGet::Pfn;
type PrimaryCtxRetain = entry::cuDevicePrimaryCtxRetain::Pfn;
type CtxSetCurrent = entry::cuCtxSetCurrent::Pfn;

/// One library, opened with `dlopen`.
struct Library {
    handle: *mut c_void,
    name: String,
}

// SAFETY: a dlopen handle is a process-wide token that dlsym accepts from any thread; the
// library stays loaded for the life of the process (never dlclosed).
unsafe impl Send for Library {}
// SAFETY: as above; the handle is only read.
unsafe impl Sync for Library {}

impl Library {
    fn open(path: &Path) -> Library {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).expect("a path without NUL");
        // SAFETY: dlopen of a library built by this workspace; its constructors are ours.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen({}) failed", path.display());
        Library {
            handle,
            name: path.display().to_string(),
        }
    }

    /// The symbol as a function of type `F` (a function pointer type the caller names).
    fn get<F: Copy>(&self, symbol: &str) -> F {
        assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
        let c = CString::new(symbol).expect("a symbol without NUL");
        // SAFETY: dlsym on a live handle.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        assert!(!p.is_null(), "{} has no {symbol}", self.name);
        // SAFETY: F is a function pointer type of the same size, naming the symbol's own
        // signature (the ABI crate's, above).
        unsafe { std::mem::transmute_copy(&p) }
    }
}

/// Where the built libraries are: target/<profile>, the bench executable's grandparent.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the bench has a path");
    exe.parent()
        .and_then(Path::parent)
        .expect("bench executables live in target/<profile>/deps")
        .to_path_buf()
}

/// The driver this process measures, when it is a re-executed child.
fn driver_kind() -> Option<String> {
    std::env::var(CHILD).ok()
}

/// Builds simgpu's libraries, libtessera.so and the stub driver in the bench's profile,
/// then runs this benchmark once per driver with its environment. Returns only in a child.
fn run_per_driver() {
    if driver_kind().is_some() {
        return;
    }
    let dir = profile_dir();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(name) => name.to_string(),
        None => "release".to_string(),
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ lives in the workspace");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace)
        .args(["build", "--profile", &profile])
        .args(["-p", "simgpu", "-p", "simgpu-cuda", "-p", "simgpu-nvml"])
        .args(["-p", "tessera-intercept"])
        .status()
        .expect("run cargo build");
    assert!(status.success(), "building the libraries failed");
    let out = Command::new(dir.join("simgpu"))
        .arg("lib-dir")
        .output()
        .expect("run simgpu lib-dir");
    assert!(out.status.success(), "simgpu lib-dir failed");
    let lib_dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let stub = build_stub(&dir);
    let state = std::env::temp_dir().join(format!("tessera-bench-{}.state", std::process::id()));
    let child = |kind: &str| {
        let mut cmd = Command::new(std::env::current_exe().expect("the bench has a path"));
        cmd.args(std::env::args_os().skip(1))
            .env(CHILD, kind)
            .env("TESSERA_MEMORY_LIMIT", "64GiB")
            .env_remove("TESSERA_REGION")
            .env_remove("TESSERA_DEBUG_COUNTERS")
            .env_remove("TESSERA_REAL_LIBCUDA")
            .env_remove("LD_PRELOAD");
        cmd
    };
    let runs = [
        child(SIMGPU)
            .env("LD_LIBRARY_PATH", &lib_dir)
            .env("SIMGPU_STATE", &state)
            .env("SIMGPU_DEVICES", "H100-80GB")
            .status(),
        child(STUB).env("TESSERA_REAL_LIBCUDA", &stub).status(),
    ];
    let _ = std::fs::remove_file(&state);
    for (kind, run) in [SIMGPU, STUB].iter().zip(runs) {
        let status = run.expect("run the benchmark");
        assert!(status.success(), "the benchmark on {kind} failed: {status}");
    }
    std::process::exit(0);
}

/// Compiles `stub_driver.c` into `<profile>/bench-stub/libcuda-stub.so`.
fn build_stub(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/stub_driver.c");
    let out_dir = dir.join("bench-stub");
    std::fs::create_dir_all(&out_dir).expect("create the stub's directory");
    let lib = out_dir.join("libcuda-stub.so");
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let status = Command::new(cc)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&lib)
        .arg(&source)
        .status()
        .expect("run the C compiler (cc, or $CC)");
    assert!(status.success(), "compiling {} failed", source.display());
    lib
}

struct Libraries {
    driver: Library,
    tessera: Library,
}

fn libraries() -> &'static Libraries {
    static LIBS: std::sync::OnceLock<Libraries> = std::sync::OnceLock::new();
    LIBS.get_or_init(|| {
        let dir = profile_dir();
        // The library libtessera.so loads as the real driver, so both sides share its state.
        let driver = match std::env::var_os("TESSERA_REAL_LIBCUDA") {
            Some(stub) => Library::open(Path::new(&stub)),
            None => Library::open(&dir.join("simgpu-lib/libcuda.so.1")),
        };
        let tessera = Library::open(&dir.join("libtessera.so"));
        // A current context on device 0, through the driver directly, so that both sides
        // measure the same state. (libtessera counts its own context on its first hooked
        // call; that happens once, in warm-up.)
        let init: Init = driver.get("cuInit");
        let device_get: DeviceGet = driver.get("cuDeviceGet");
        let retain: PrimaryCtxRetain = tessera.get("cuDevicePrimaryCtxRetain");
        let set_current: CtxSetCurrent = driver.get("cuCtxSetCurrent");
        let mut dev = 0;
        let mut ctx = null_mut();
        // SAFETY: driver calls with valid out-pointers.
        unsafe {
            assert_eq!(init(0), CUDA_SUCCESS, "cuInit");
            assert_eq!(device_get(&mut dev, 0), CUDA_SUCCESS, "cuDeviceGet");
            assert_eq!(
                retain(&mut ctx, dev),
                CUDA_SUCCESS,
                "cuDevicePrimaryCtxRetain"
            );
            assert_eq!(set_current(ctx), CUDA_SUCCESS, "cuCtxSetCurrent");
        }
        Libraries { driver, tessera }
    })
}

/// The two sides of every comparison, named after the driver: `simgpu` and `libtessera`,
/// or `stub` and `libtessera-on-stub`.
fn sides() -> [(&'static str, &'static Library); 2] {
    let l = libraries();
    if driver_kind().as_deref() == Some(STUB) {
        [("stub", &l.driver), ("libtessera-on-stub", &l.tessera)]
    } else {
        [("simgpu", &l.driver), ("libtessera", &l.tessera)]
    }
}

fn launch(c: &mut Criterion) {
    let mut g = c.benchmark_group("cuLaunchKernel");
    for (side, lib) in sides() {
        let f: LaunchKernel = lib.get("cuLaunchKernel");
        g.bench_function(BenchmarkId::from_parameter(side), |b| {
            b.iter(|| {
                // SAFETY: a null function is refused by the driver before anything runs.
                black_box(unsafe {
                    f(
                        black_box(null_mut()),
                        1,
                        1,
                        1,
                        1,
                        1,
                        1,
                        0,
                        null_mut(),
                        null_mut(),
                        null_mut(),
                    )
                })
            })
        });
    }
    g.finish();
}

fn alloc_free(c: &mut Criterion) {
    let mut g = c.benchmark_group("cuMemAlloc_v2+cuMemFree_v2");
    for (side, lib) in sides() {
        let alloc: MemAlloc = lib.get("cuMemAlloc_v2");
        let free: MemFree = lib.get("cuMemFree_v2");
        g.bench_function(BenchmarkId::from_parameter(side), |b| {
            b.iter(|| {
                let mut p = 0u64;
                // SAFETY: a valid out-pointer; the allocation is freed at once.
                unsafe {
                    assert_eq!(alloc(&mut p, black_box(1 << 20)), CUDA_SUCCESS);
                    assert_eq!(free(p), CUDA_SUCCESS);
                }
            })
        });
    }
    g.finish();
}

fn mem_get_info(c: &mut Criterion) {
    let mut g = c.benchmark_group("cuMemGetInfo_v2");
    for (side, lib) in sides() {
        let info: MemGetInfo = lib.get("cuMemGetInfo_v2");
        g.bench_function(BenchmarkId::from_parameter(side), |b| {
            b.iter(|| {
                let (mut free, mut total) = (0usize, 0usize);
                // SAFETY: valid out-pointers.
                black_box(unsafe { info(&mut free, &mut total) })
            })
        });
    }
    g.finish();
}

fn dlsym_routing(c: &mut Criterion) {
    let libs = libraries();
    let routed: Dlsym = libs.tessera.get("dlsym");
    let real: Dlsym = libc::dlsym;
    let handle = libs.driver.handle;
    let mut g = c.benchmark_group("dlsym");
    for (name, symbol) in [
        ("hooked", c"cuMemAlloc_v2"),
        ("unhooked", c"cuDeviceGetName"),
    ] {
        for (side, f) in [("real", real), ("libtessera", routed)] {
            g.bench_function(BenchmarkId::new(name, side), |b| {
                // SAFETY: dlsym on a live handle with a NUL-terminated name.
                b.iter(|| black_box(unsafe { f(black_box(handle), black_box(symbol.as_ptr())) }))
            });
        }
    }
    g.finish();
}

/// A request that is not the driver's, through the C library's `ioctl` and through
/// libtessera's: what every other `ioctl` of a process pays for the library's look at RM
/// requests.
fn ioctl_passthrough(c: &mut Criterion) {
    let ours: Ioctl = libraries().tessera.get("ioctl");
    // SAFETY: the C library's own `ioctl`, whose C signature this is (its variadic argument
    // is the one pointer passed).
    let libc_ioctl: Ioctl = unsafe {
        std::mem::transmute::<*mut c_void, Ioctl>(libc::dlsym(libc::RTLD_NEXT, c"ioctl".as_ptr()))
    };
    let mut fds = [0; 2];
    // SAFETY: a valid array of two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let mut g = c.benchmark_group("ioctl");
    for (side, f) in [("libc", libc_ioctl), ("libtessera", ours)] {
        g.bench_function(BenchmarkId::new("other", side), |b| {
            let mut n: c_int = 0;
            b.iter(|| {
                // SAFETY: FIONREAD on our pipe writes one int to a valid pointer.
                let rc = unsafe { f(black_box(fds[0]), libc::FIONREAD, (&raw mut n).cast()) };
                black_box(rc)
            })
        });
    }
    g.finish();
}

fn get_proc_address(c: &mut Criterion) {
    let mut g = c.benchmark_group("cuGetProcAddress_v2");
    let symbol: &CStr = c"cuMemAlloc";
    for (side, lib) in sides() {
        let get: GetProcAddress = lib.get("cuGetProcAddress_v2");
        g.bench_function(BenchmarkId::from_parameter(side), |b| {
            b.iter(|| {
                let mut fp = null_mut();
                let mut status = 0;
                // SAFETY: valid out-pointers and a NUL-terminated name.
                black_box(unsafe {
                    get(black_box(symbol.as_ptr()), &mut fp, 12000, 0, &mut status)
                })
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    launch,
    alloc_free,
    mem_get_info,
    dlsym_routing,
    ioctl_passthrough,
    get_proc_address
);
// The stub answers only the driver calls; dlsym and cuGetProcAddress are measured on simgpu.
criterion_group!(stub_benches, launch, alloc_free, mem_get_info);

fn main() {
    run_per_driver();
    if driver_kind().as_deref() == Some(STUB) {
        stub_benches();
    } else {
        benches();
    }
    Criterion::default().configure_from_args().final_summary();
}
