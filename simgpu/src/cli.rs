//! The commands of the `simgpu` CLI; `main.rs` only parses arguments.

use crate::config::{self, NodeConfig};
use crate::device::{parse_devices, DEFAULT_DEVICES};
use crate::node::{Node, Snapshot};
use crate::units::format_size_rounded as format_size;
use std::io::Write;
use std::path::{Path, PathBuf};

/// An error for the user: one line, saying what to do where possible.
pub type CliResult = Result<(), Box<dyn std::error::Error>>;

/// The file names the simulated libraries are built under, and the names they are found by.
const LIBRARIES: [(&str, &[&str]); 2] = [
    ("libsimgpu_cuda.so", &["libcuda.so.1", "libcuda.so"]),
    (
        "libsimgpu_nvml.so",
        &["libnvidia-ml.so.1", "libnvidia-ml.so"],
    ),
];

/// Prints a directory holding `libcuda.so.1` and `libnvidia-ml.so.1` (and the unversioned
/// names, for linking with `-lcuda`), links to the libraries built beside this executable.
pub fn lib_dir() -> CliResult {
    let exe = std::env::current_exe()?;
    let build = exe
        .parent()
        .ok_or("cannot tell where the simgpu executable lives")?;
    let dir = build.join("simgpu-lib");
    std::fs::create_dir_all(&dir)?;
    for (built, names) in LIBRARIES {
        let target = build.join(built);
        if !target.exists() {
            return Err(format!(
                "{} is not built; run `cargo build -p simgpu-cuda -p simgpu-nvml` (with the same profile as simgpu)",
                target.display()
            )
            .into());
        }
        for name in names {
            link(&target, &dir.join(name))?;
        }
    }
    println!("{}", dir.display());
    Ok(())
}

/// Points `link` at `target`, replacing it atomically so that concurrent callers never see
/// a missing library.
fn link(target: &Path, link: &Path) -> std::io::Result<()> {
    if std::fs::read_link(link).is_ok_and(|t| t == target) {
        return Ok(());
    }
    let tmp = link.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, link)
}

/// Shows the node: devices, then processes.
pub fn stat(json: bool) -> CliResult {
    let node = Node::open_existing(&config::state_path())?;
    let snap = node.snapshot();
    let mut out = std::io::stdout().lock();
    let written = if json {
        serde_json::to_writer_pretty(&mut out, &snap)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        write_table(&mut out, &node, &snap)
    };
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn write_table(out: &mut impl Write, node: &Node, snap: &Snapshot) -> std::io::Result<()> {
    let c = node.config();
    writeln!(
        out,
        "simgpu node {}  (profile {}: quantum {:.3} ms, switch {:.3} ms, context {})",
        snap.state.display(),
        c.profile().name,
        c.quantum_ns as f64 / 1e6,
        c.switch_ns as f64 / 1e6,
        format_size(c.context_memory)
    )?;
    for d in &snap.devices {
        writeln!(
            out,
            "GPU {}  {}  {}  {} SMs  cc {}.{}",
            d.info.index,
            d.info.name,
            d.info.uuid_string(),
            d.info.sms,
            d.info.compute_capability.0,
            d.info.compute_capability.1
        )?;
        let owner = d
            .engine_owner
            .map_or("idle".to_string(), |pid| format!("held by pid {pid}"));
        writeln!(
            out,
            "       memory {} / {}   engine busy {:.3} s, {owner}",
            format_size(d.memory_used),
            format_size(d.info.memory),
            d.busy_ns as f64 / 1e9
        )?;
    }
    if snap.processes.is_empty() {
        return writeln!(out, "no processes");
    }
    writeln!(
        out,
        "{:>8}  {:<16} {:>3}  {:>12}  {:>10}",
        "PID", "NAME", "GPU", "MEMORY", "BUSY"
    )?;
    for p in &snap.processes {
        for (gpu, u) in p.devices.iter().enumerate() {
            if u.memory == 0 && u.busy_ns == 0 {
                continue;
            }
            writeln!(
                out,
                "{:>8}  {:<16} {:>3}  {:>12}  {:>8.3} s",
                p.pid,
                p.name,
                gpu,
                format_size(u.memory),
                u.busy_ns as f64 / 1e9
            )?;
        }
    }
    Ok(())
}

/// Replaces the node state with a new one built from the environment.
pub fn reset() -> CliResult {
    let spec = std::env::var(config::ENV_DEVICES).unwrap_or_default();
    let spec = if spec.trim().is_empty() {
        DEFAULT_DEVICES
    } else {
        &spec
    };
    let devices = parse_devices(spec)?;
    let path: PathBuf = config::state_path();
    Node::reset(&path, &devices, &NodeConfig::from_env(&devices)?)?;
    println!("simgpu: new node at {} with {spec}", path.display());
    Ok(())
}
