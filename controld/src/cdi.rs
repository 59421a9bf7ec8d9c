//! `controld cdi`: a Container Device Interface spec with one device per Tessera container,
//! `tessera.dev/container=NAME`, so that podman (and Docker with CDI) make a container a
//! Tessera container with `--device tessera.dev/container=NAME` instead of hand-written
//! mounts and variables.
//!
//! Each device mounts the region (read-write) and the library (read-only) at the paths they
//! have on the host, beside the node's board (read-write for online containers, read-only for
//! offline ones), and sets `TESSERA_REGION` and `LD_PRELOAD`.

use crate::policy::Priority;
use crate::state::ContainerInfo;
use serde_json::{json, Value};
use std::path::Path;

/// The CDI kind: `vendor/class` of every device in the spec.
pub const KIND: &str = "tessera.dev/container";
/// The spec version written: the oldest that runtimes still read (podman 4.3 on) with every
/// field used here.
pub const CDI_VERSION: &str = "0.5.0";
/// Where the library is mounted inside the container.
pub const CONTAINER_LIBRARY: &str = "/usr/lib/tessera/libtessera.so";

/// The spec for `containers`, with `library` the host's `libtessera.so`.
pub fn spec(containers: &[ContainerInfo], library: &Path) -> Value {
    let devices: Vec<Value> = containers
        .iter()
        .map(|c| {
            let region = c.region.display().to_string();
            let limits = tessera_region::limits_path(&c.region).display().to_string();
            let mut mounts = vec![
                mount(&region, &region, false),
                // Read-only: the caps the container's processes cannot raise.
                mount(&limits, &limits, true),
                mount(&library.display().to_string(), CONTAINER_LIBRARY, true),
            ];
            if let Some(board) = c
                .region
                .parent()
                .map(|d| d.join(tessera_region::BOARD_FILE))
            {
                if board.exists() {
                    let board = board.display().to_string();
                    mounts.push(mount(&board, &board, c.spec.priority == Priority::Offline));
                }
            }
            json!({
                "name": c.spec.name.as_str(),
                "containerEdits": {
                    "env": [
                        format!("{}={region}", tessera_region::env::REGION),
                        format!("LD_PRELOAD={CONTAINER_LIBRARY}"),
                    ],
                    "mounts": mounts,
                },
            })
        })
        .collect();
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": devices,
    })
}

fn mount(host: &str, container: &str, read_only: bool) -> Value {
    json!({
        "hostPath": host,
        "containerPath": container,
        "options": ["rbind", if read_only { "ro" } else { "rw" }],
    })
}
