//! The hook table's coverage test, against the simulated driver: every real function
//! resolves, and `cuGetProcAddress` substitution agrees with the driver's own choice of
//! revision for every base name, version and stream flavour.

use super::hook::{strictly_sorted, Hook};
use super::*;
use crate::driver::Lib;
use std::ffi::c_void;
use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::process::Command;
use std::ptr::NonNull;
use std::sync::OnceLock;

/// Builds the simulated libraries (in this test binary's profile) and makes them the real
/// ones for this process.
fn simgpu() {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        // target/<profile>/deps/<test binary>
        let dir: PathBuf = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
        let profile = match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev".to_string(),
            Some(name) => name.to_string(),
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .args([
                "build",
                "-p",
                "simgpu-cuda",
                "-p",
                "simgpu-nvml",
                "--profile",
            ])
            .arg(&profile)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "building the simulated driver failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        crate::driver::open_for_tests(Lib::Cuda, &dir.join("libsimgpu_cuda.so"));
        crate::driver::open_for_tests(Lib::Nvml, &dir.join("libsimgpu_nvml.so"));
    });
}

fn c(name: &str) -> CString {
    CString::new(name).unwrap()
}

#[test]
fn the_table_is_sorted_and_every_name_is_found() {
    let names: Vec<&str> = HOOKS.iter().map(|h| h.name).collect();
    assert!(strictly_sorted(&names));
    assert!(names.windows(2).all(|w| w[0] < w[1]));
    for hook in &HOOKS {
        let name = c(hook.name);
        // SAFETY: a NUL-terminated name.
        let found = unsafe { find(name.as_ptr()) }.map(|h| h.name);
        assert_eq!(found, Some(hook.name));
        let prefix = c(&hook.name[..hook.name.len() - 1]);
        // SAFETY: as above.
        assert!(unsafe { find(prefix.as_ptr()) }.is_none_or(|h| h.name != hook.name));
        let longer = c(&format!("{}x", hook.name));
        // SAFETY: as above.
        assert!(unsafe { find(longer.as_ptr()) }.is_none());
    }
    for other in [
        "",
        "c",
        "cuDeviceGet",
        "cuMemAlloc",
        "nvmlInit_v2",
        "dlsym",
        "zzz",
    ] {
        let name = c(other);
        // SAFETY: as above.
        assert!(unsafe { find(name.as_ptr()) }.is_none(), "{other}");
    }
}

#[test]
fn sortedness_check() {
    assert!(strictly_sorted(&[]));
    assert!(strictly_sorted(&["a", "ab", "b"]));
    assert!(!strictly_sorted(&["a", "a"]));
    assert!(!strictly_sorted(&["ab", "a"]));
    assert!(!strictly_sorted(&["b", "a"]));
}

#[test]
fn entries_are_consistent() {
    for hook in &HOOKS {
        let name = hook.name;
        match (hook.lib, hook.proc_key) {
            (Lib::Cuda, Some(key)) => {
                assert!(
                    name.starts_with(key.base),
                    "{name} is not a revision of {}",
                    key.base
                );
                let suffix = &name[key.base.len()..];
                let per_thread = suffix.ends_with("_ptsz") || suffix.ends_with("_ptds");
                assert_eq!(per_thread, key.per_thread, "{name}: flavour");
                assert!(
                    key.since >= 2000 && key.since % 10 == 0,
                    "{name}: version {}",
                    key.since
                );
            }
            (Lib::Nvml, None) => assert!(name.starts_with("nvml"), "{name}"),
            _ => panic!("{name}: a CUDA entry needs a base name and version, NVML none"),
        }
        assert_eq!(hook.real.name.to_str().unwrap(), name);
        assert_eq!(hook.real.lib, hook.lib);
    }
    // Two revisions never share a version.
    for a in HOOKS.iter().filter_map(|h| h.proc_key) {
        let twins = HOOKS.iter().filter_map(|h| h.proc_key).filter(|b| *b == a);
        assert_eq!(twins.count(), 1, "{a:?}");
    }
}

#[test]
fn every_real_function_resolves_on_simgpu_and_is_not_ours() {
    simgpu();
    for hook in &HOOKS {
        let real = hook
            .real
            .get()
            .unwrap_or_else(|| panic!("{} not found", hook.name));
        assert!(!crate::driver::is_ours(real.as_ptr()), "{}", hook.name);
        assert_ne!(real.as_ptr(), hook.wrapper.as_ptr());
    }
}

#[test]
fn every_call_only_function_resolves_on_simgpu() {
    simgpu();
    for slot in real::CALL_ONLY {
        let found = slot
            .get()
            .unwrap_or_else(|| panic!("{:?} not found", slot.name));
        assert!(!crate::driver::is_ours(found.as_ptr()), "{:?}", slot.name);
    }
    assert!(real::CALL_ONLY
        .iter()
        .all(|s| HOOKS.iter().all(|h| h.name.as_bytes() != s.name.to_bytes())));
}

type GetProcAddressV2 = real::cuGetProcAddress_v2::Real;

/// What the simulated driver answers for `base` at `version`, per-thread or not.
fn driver_answer(
    get: GetProcAddressV2,
    base: &CStr,
    version: u32,
    per_thread: bool,
) -> *mut c_void {
    let mut p = std::ptr::null_mut();
    let mut status = -1;
    let flags = if per_thread { 2 } else { 0 };
    // SAFETY: a NUL-terminated name and valid out-pointers.
    let rc = unsafe { get(base.as_ptr(), &mut p, version as i32, flags, &mut status) };
    if rc == 0 {
        p
    } else {
        std::ptr::null_mut()
    }
}

/// For every hooked base name, every CUDA version from 2.0 to 13.0 and both stream flavours:
/// our substitution is the entry whose real function the driver itself returns, and when we
/// do not substitute the driver returns none of our entries' real functions. This is what
/// proves the since-versions and flavours of the table, and that no revision between hooked
/// ones (nor a per-thread twin) is missing.
#[test]
fn proc_address_substitution_matches_the_driver() {
    simgpu();
    // SAFETY: a NUL-terminated name, looked up in the simulated driver.
    let get = crate::driver::resolve(Lib::Cuda, c"cuGetProcAddress_v2").unwrap();
    // SAFETY: the simulated driver's cuGetProcAddress_v2 has this signature.
    let get: GetProcAddressV2 = unsafe { std::mem::transmute(get.as_ptr()) };
    let mut bases: Vec<&str> = HOOKS
        .iter()
        .filter_map(|h| h.proc_key)
        .map(|k| k.base)
        .collect();
    bases.dedup();
    for base in bases {
        let cbase = c(base);
        let ours: Vec<&Hook> = HOOKS
            .iter()
            .filter(|h| h.proc_key.is_some_and(|k| k.base == base))
            .collect();
        for version in (2000..=13000).step_by(10) {
            for per_thread in [false, true] {
                let answer = driver_answer(get, &cbase, version, per_thread);
                let picked = for_proc_address(&HOOKS, base.as_bytes(), version, per_thread);
                match picked {
                    Some(hook) => assert_eq!(
                        hook.real.get().map(NonNull::as_ptr),
                        Some(answer),
                        "{base}@{version} per_thread={per_thread}: we substitute {}, the driver \
                         answers another function",
                        hook.name
                    ),
                    None => {
                        let escaped = ours
                            .iter()
                            .find(|h| h.real.get().map(NonNull::as_ptr) == Some(answer));
                        assert!(
                            escaped.is_none(),
                            "{base}@{version} per_thread={per_thread}: the driver answers {} \
                             and we do not substitute it",
                            escaped.unwrap().name
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn substitution_picks_revision_and_flavour() {
    let pick = |base: &str, version, pt| {
        for_proc_address(&HOOKS, base.as_bytes(), version, pt).map(|h| h.name)
    };
    assert_eq!(pick("cuMemAlloc", 12000, false), Some("cuMemAlloc_v2"));
    assert_eq!(pick("cuMemAlloc", 12000, true), Some("cuMemAlloc_v2"));
    assert_eq!(pick("cuMemAlloc", 3010, false), None);
    assert_eq!(pick("cuCtxCreate", 12080, false), Some("cuCtxCreate_v4"));
    assert_eq!(pick("cuCtxCreate", 12040, false), Some("cuCtxCreate_v3"));
    assert_eq!(pick("cuCtxCreate", 11030, false), Some("cuCtxCreate_v2"));
    assert_eq!(
        pick("cuLaunchKernel", 12000, true),
        Some("cuLaunchKernel_ptsz")
    );
    assert_eq!(pick("cuLaunchKernel", 12000, false), Some("cuLaunchKernel"));
    assert_eq!(pick("cuLaunchKernel", 6050, true), Some("cuLaunchKernel"));
    assert_eq!(pick("cuLaunchKernel", 3020, true), None);
    assert_eq!(
        pick("cuGetProcAddress", 12000, false),
        Some("cuGetProcAddress_v2")
    );
    assert_eq!(
        pick("cuGetProcAddress", 11080, true),
        Some("cuGetProcAddress")
    );
    assert_eq!(pick("cuGetProcAddress", 11020, false), None);
    assert_eq!(pick("cuMemAlloc_v2", 12000, false), None);
    assert_eq!(pick("cuDeviceGetName", 12000, false), None);
    assert_eq!(pick("nvmlDeviceGetMemoryInfo", 12000, false), None);
}
