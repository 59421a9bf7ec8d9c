//! CDI devices for shared containers, with `--cdi-dir`: the Allocate answer names the device
//! `tessera.dev/container=<name>` instead of listing mounts and variables, and PreStart writes
//! its spec, one file per container, before the runtime reads it. The spec holds the same
//! edits an answer without CDI carries, and the board as the container's priority wants it
//! (read-only for offline containers), which PreStart knows and Allocate does not.

use super::HostPaths;
use crate::proto::deviceplugin::ContainerAllocateResponse;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tessera_controld::cdi::{CDI_VERSION, KIND};

/// The qualified name of a container's device.
pub fn device_name(name: &str) -> String {
    format!("{KIND}={name}")
}

/// The spec file of a container.
pub fn spec_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("tessera-{name}.json"))
}

/// The spec of one container: `answer`'s edits, with the board mounted from the node's board
/// itself, writable only for online containers.
pub fn spec(
    host: &HostPaths,
    name: &str,
    answer: &ContainerAllocateResponse,
    online: bool,
) -> Value {
    let board_link = host.board_link(name);
    let board = host.state_dir.join(tessera_region::BOARD_FILE);
    let mut env: Vec<String> = answer
        .envs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.sort();
    let mounts: Vec<Value> = answer
        .mounts
        .iter()
        .map(|m| {
            let (host, read_only) = if Path::new(&m.host_path) == board_link {
                (board.display().to_string(), !online)
            } else {
                (m.host_path.clone(), m.read_only)
            };
            json!({
                "hostPath": host,
                "containerPath": m.container_path,
                "options": ["rbind", if read_only { "ro" } else { "rw" }],
            })
        })
        .collect();
    let devices: Vec<Value> = answer
        .devices
        .iter()
        .map(|d| json!({"path": d.container_path, "hostPath": d.host_path, "permissions": d.permissions}))
        .collect();
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": [{
            "name": name,
            "containerEdits": {"env": env, "mounts": mounts, "deviceNodes": devices},
        }],
    })
}

/// Writes a spec whole (a reader never sees half a file).
pub fn write(dir: &Path, name: &str, spec: &Value) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let path = spec_path(dir, name);
    let partial = dir.join(format!(".tessera-{name}.json.tmp"));
    std::fs::write(
        &partial,
        serde_json::to_vec_pretty(spec).expect("plain data serializes"),
    )?;
    std::fs::rename(partial, path)
}

/// Removes a container's spec, if there is one.
pub fn remove(host: &HostPaths, name: &str) {
    if let Some(dir) = &host.cdi_dir {
        let _ = std::fs::remove_file(spec_path(dir, name));
    }
}
