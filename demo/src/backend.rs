//! Where the demo runs: a real GPU or a simulated node of its own, the programs it runs, and
//! the temporary directory that holds its state (removed on drop).

use crate::error::DemoError;
use crate::plan::PLANS;
use std::ffi::{CStr, OsString};
use std::path::{Path, PathBuf};

/// The simulated GPU when `SIMGPU_DEVICES` does not name one.
const SIMULATED: &str = "H200";

/// The GPU the demo runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// A simgpu node made for the demo, of these devices (a `SIMGPU_DEVICES` value).
    Simulated(String),
    /// GPU 0 of this machine, through its driver.
    Real,
}

impl Backend {
    /// simgpu when asked (`--simgpu`, or `SIMGPU_DEVICES` set) or when no real driver with a
    /// device can be loaded; else the real GPU.
    pub fn detect(force_simgpu: bool) -> Backend {
        let named = std::env::var(simgpu::config::ENV_DEVICES)
            .ok()
            .filter(|v| !v.trim().is_empty());
        match named {
            Some(devices) => Backend::Simulated(devices),
            None if force_simgpu || !real_gpu_present() => Backend::Simulated(SIMULATED.into()),
            None => Backend::Real,
        }
    }

    /// Makes the simulated node (if any) and says what the workloads' environment needs.
    pub fn prepare(&self, workdir: &Workdir, programs: &Programs) -> Result<Gpu, DemoError> {
        let Backend::Simulated(devices) = self else {
            return Ok(Gpu {
                label: "GPU 0".into(),
                node: None,
                env: Vec::new(),
            });
        };
        let setup = |e: &dyn std::fmt::Display| DemoError::Setup(e.to_string());
        let specs = simgpu::device::parse_devices(devices).map_err(|e| setup(&e))?;
        let config = simgpu::config::NodeConfig::from_env(&specs).map_err(|e| setup(&e))?;
        let state = workdir.path().join("simgpu.state");
        let node =
            simgpu::node::Node::open_or_create(&state, &specs, &config).map_err(|e| setup(&e))?;
        let lib_dir = workdir.path().join("lib");
        std::fs::create_dir_all(&lib_dir).map_err(|e| setup(&e))?;
        let (cuda, nvml) = programs
            .simulated
            .as_ref()
            .expect("found for a simulated backend");
        for (target, names) in [
            (cuda, ["libcuda.so.1", "libcuda.so"]),
            (nvml, ["libnvidia-ml.so.1", "libnvidia-ml.so"]),
        ] {
            for name in names {
                std::os::unix::fs::symlink(target, lib_dir.join(name)).map_err(|e| setup(&e))?;
            }
        }
        let mut library_path = lib_dir.into_os_string();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
            library_path.push(":");
            library_path.push(old);
        }
        // The daemon's watchdog reads the node through NVML if it finds simgpu's: this one.
        // Set while this process has no other thread, so nothing reads the environment
        // meanwhile.
        std::env::set_var(simgpu::config::ENV_STATE, &state);
        let name = node.device(0).name;
        Ok(Gpu {
            label: format!("a simulated {name} (simgpu)"),
            node: Some(node),
            env: vec![
                ("LD_LIBRARY_PATH".into(), library_path),
                (simgpu::config::ENV_STATE.into(), state.into_os_string()),
                (simgpu::config::ENV_DEVICES.into(), devices.into()),
            ],
        })
    }
}

/// The GPU the workloads run on.
pub struct Gpu {
    /// For people: `a simulated H200 (simgpu)`.
    pub label: String,
    /// The simulated node, whose ground truth the demo reads; `None` on a real GPU.
    pub node: Option<simgpu::node::Node>,
    /// What the workloads' environment needs to use it.
    pub env: Vec<(String, OsString)>,
}

/// Whether `libcuda.so.1` loads, is not simgpu's, and has a device.
fn real_gpu_present() -> bool {
    type Init = unsafe extern "C" fn(u32) -> i32;
    type Count = unsafe extern "C" fn(*mut i32) -> i32;
    // SAFETY: a plain dlopen of a NUL-terminated name; a failure is a null handle.
    let handle =
        unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return false;
    }
    // SAFETY: `handle` is a live dlopen handle; the names are NUL-terminated.
    let (init, count) = unsafe {
        (
            libc::dlsym(handle, c"cuInit".as_ptr()),
            libc::dlsym(handle, c"cuDeviceGetCount".as_ptr()),
        )
    };
    if init.is_null() || count.is_null() {
        return false;
    }
    // SAFETY: Dl_info is plain data that dladdr fills; `init` is an address in a loaded
    // object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(init, &mut info) } != 0 && !info.dli_fname.is_null() {
        // SAFETY: dladdr set `dli_fname` to the NUL-terminated path of a loaded object,
        // which stays loaded (the handle is never closed).
        let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
        let real = std::fs::canonicalize(&*file).unwrap_or_else(|_| PathBuf::from(&*file));
        if file.contains("simgpu") || real.to_string_lossy().contains("simgpu") {
            return false;
        }
    }
    // SAFETY: the symbols are the driver's cuInit(unsigned) and cuDeviceGetCount(int*),
    // whose C signatures the types above spell; `devices` outlives the call. The library
    // is never unloaded, so the pointers stay valid.
    unsafe {
        let init: Init = std::mem::transmute::<*mut libc::c_void, Init>(init);
        let count: Count = std::mem::transmute::<*mut libc::c_void, Count>(count);
        let mut devices = 0;
        init(0) == 0 && count(&mut devices) == 0 && devices > 0
    }
}

/// The programs the demo runs, found beside the `tessera-demo` executable.
pub struct Programs {
    /// `gpuload`.
    pub gpuload: PathBuf,
    /// `libtessera.so` (or `TESSERA_PRELOAD`).
    pub preload: PathBuf,
    /// simgpu's `libcuda.so.1` and `libnvidia-ml.so.1` builds, for a simulated backend.
    pub simulated: Option<(PathBuf, PathBuf)>,
}

/// The packages that build what the demo runs beside `tessera-demo`.
const PACKAGES: [&str; 4] = [
    "tessera-bench",
    "tessera-intercept",
    "simgpu-cuda",
    "simgpu-nvml",
];

impl Programs {
    /// Finds them. Missing ones are built when `tessera-demo` runs under `cargo run` (which
    /// says where the workspace is); otherwise the error says what to build.
    pub fn find(backend: &Backend) -> Result<Programs, DemoError> {
        let exe = std::env::current_exe().map_err(|e| DemoError::Setup(e.to_string()))?;
        let dir = exe.parent().unwrap_or(Path::new("."));
        match Programs::beside(dir, backend) {
            Ok(programs) => Ok(programs),
            Err(missing) => {
                if build_under_cargo(dir, &missing) {
                    if let Ok(programs) = Programs::beside(dir, backend) {
                        return Ok(programs);
                    }
                }
                Err(DemoError::Missing(format!(
                    "the demo needs {} beside {}; build them with `{}` and run it again",
                    missing.join(", "),
                    exe.display(),
                    build_command(dir)
                )))
            }
        }
    }

    /// The programs in `dir`, or the names of those missing.
    fn beside(dir: &Path, backend: &Backend) -> Result<Programs, Vec<String>> {
        let mut missing = Vec::new();
        let mut beside = |name: &str| {
            let path = dir.join(name);
            if !path.is_file() {
                missing.push(name.to_string());
            }
            path
        };
        let gpuload = beside("gpuload");
        let simulated = matches!(backend, Backend::Simulated(_))
            .then(|| (beside("libsimgpu_cuda.so"), beside("libsimgpu_nvml.so")));
        let preload =
            if std::env::var_os(tessera_region::env::PRELOAD).is_some_and(|v| !v.is_empty()) {
                tessera_controld::exec::preload_library().unwrap_or_else(|e| {
                    missing.push(e.to_string());
                    PathBuf::new()
                })
            } else {
                beside("libtessera.so")
            };
        if missing.is_empty() {
            Ok(Programs {
                gpuload,
                preload,
                simulated,
            })
        } else {
            Err(missing)
        }
    }
}

/// Under `cargo run` (`CARGO` and `CARGO_MANIFEST_DIR` set), builds the packages that make
/// the programs in the profile directory `dir`; whether it did.
fn build_under_cargo(dir: &Path, missing: &[String]) -> bool {
    let (Some(cargo), Some(manifest)) = (
        std::env::var_os("CARGO"),
        std::env::var_os("CARGO_MANIFEST_DIR"),
    ) else {
        return false;
    };
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(manifest)
        .arg("build")
        .args(profile_args(dir));
    for package in PACKAGES {
        cmd.args(["-p", package]);
    }
    eprintln!(
        "tessera-demo: the demo needs {}; building them with cargo",
        missing.join(", ")
    );
    cmd.status().is_ok_and(|s| s.success())
}

/// The `cargo build` options that build into the profile directory `dir`
/// (`target/<profile>`).
fn profile_args(dir: &Path) -> Vec<String> {
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => Vec::new(),
        Some("release") | None => vec!["--release".into()],
        Some(profile) => vec!["--profile".into(), profile.into()],
    }
}

/// The command that builds everything into the profile directory `dir`.
fn build_command(dir: &Path) -> String {
    let mut words = vec!["cargo".to_string(), "build".into()];
    words.extend(profile_args(dir));
    words.push("--workspace".into());
    words.join(" ")
}

/// The demo's temporary directory: the daemon's state dir, its config, the simulated node,
/// and the workloads' output. Removed on drop.
pub struct Workdir(PathBuf);

impl Workdir {
    /// A new directory under the temp dir, readable only by this user.
    pub fn create() -> Result<Workdir, DemoError> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let path = base.join(format!("tessera-demo-{}-{attempt}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Workdir(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(DemoError::Setup(format!(
                        "cannot create a directory in {}: {e}; set TMPDIR to a writable directory",
                        base.display()
                    )))
                }
            }
        }
        Err(DemoError::Setup(format!(
            "{} is full of old tessera-demo-* directories; remove them",
            base.display()
        )))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The daemon's state dir.
    pub fn state_dir(&self) -> PathBuf {
        self.0.join("state")
    }

    /// Writes the daemon's config, declaring the three containers; returns its path.
    pub fn write_config(&self) -> Result<PathBuf, DemoError> {
        let mut text = String::from("# The containers of `tessera-demo`.\n");
        for plan in PLANS {
            text += &format!(
                "\n[[container]]\nname = \"{}\"\ngpus = [0]\nmemory = \"{}\"\ncompute = \"{}\"\npriority = \"{}\"\n",
                plan.name, plan.memory, plan.compute, plan.priority
            );
        }
        let path = self.0.join("controld.toml");
        std::fs::write(&path, text).map_err(|e| DemoError::Setup(e.to_string()))?;
        Ok(path)
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_hint_follows_the_profile() {
        assert_eq!(
            build_command(Path::new("target/debug")),
            "cargo build --workspace"
        );
        assert_eq!(
            build_command(Path::new("target/release")),
            "cargo build --release --workspace"
        );
        assert_eq!(
            build_command(Path::new("target/bench")),
            "cargo build --profile bench --workspace"
        );
    }

    #[test]
    fn the_config_declares_the_three_containers() {
        let dir = Workdir::create().unwrap();
        let config = tessera_controld::config::Config::load(&dir.write_config().unwrap()).unwrap();
        let names: Vec<String> = config
            .containers
            .iter()
            .map(|c| c.name.to_string())
            .collect();
        assert_eq!(names, PLANS.iter().map(|p| p.name).collect::<Vec<_>>());
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
    }
}
