//! A corrupt, truncated or foreign region file is a clear message on stderr,
//! never a crash or a hang; the process falls back to the caps of its environment, and the
//! file is left as it was. For every client kind: the process that meets the bad file is a
//! program of that kind filling its cap (`capfill`).

use std::path::Path;
use std::time::Duration;
use tessera_tests::{
    assert_no_crash, assert_success, json_u64, run_with_timeout, tessera_lines, ClientKind,
    Container, SimNode,
};

const MIB: u64 = 1 << 20;
const CONTEXT: u64 = 64 * MIB;

fn node() -> SimNode {
    SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "64MiB")])
}

/// Fills the container's cap (non-interactively) with a program of `kind` and returns
/// (allocated, stderr lines from libtessera, the whole output).
fn capfill(
    kind: ClientKind,
    container: &Container<'_>,
    what: &str,
) -> (u64, Vec<String>, std::process::Output) {
    let mut cmd = kind.command(container, "capfill", &[]);
    cmd.stdin(std::process::Stdio::null());
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert_no_crash(&out, what);
    assert_success(&out, what);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let full: serde_json::Value = text
        .lines()
        .find_map(|l| l.strip_prefix("full "))
        .map(|j| serde_json::from_str(j).expect("full JSON"))
        .unwrap_or_else(|| panic!("{what}: no report:\n{text}"));
    (json_u64(&full, "/allocated"), tessera_lines(&out), out)
}

/// A valid region file, made by the library itself.
fn valid_region_bytes(node: &SimNode) -> Vec<u8> {
    let container = Container::new(node, Some("1GiB"));
    let (allocated, lines, _) =
        capfill(ClientKind::CLinked, &container, "capfill creating a region");
    assert_eq!(allocated + CONTEXT, 1 << 30);
    assert!(lines.is_empty(), "unexpected messages: {lines:?}");
    std::fs::read(container.region()).expect("the library created the region file")
}

fn check_fallback(kind: ClientKind, node: &SimNode, name: &str, contents: &[u8]) {
    let name = &format!("{name} region, {}", kind.name());
    let container = Container::new(node, Some("256MiB"));
    std::fs::write(container.region(), contents).expect("write the bad region");
    let (allocated, lines, out) = capfill(kind, &container, &format!("capfill with a {name}"));
    let path = container.region().display().to_string();
    let about: Vec<&String> = lines.iter().filter(|l| l.contains(&path)).collect();
    assert_eq!(
        about.len(),
        1,
        "{name}: expected one clear line naming {path} on stderr, got:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        allocated + CONTEXT,
        256 * MIB,
        "{name}: the process should fall back to TESSERA_MEMORY_LIMIT (256 MiB)"
    );
    assert_eq!(
        std::fs::read(container.region()).expect("the bad region file"),
        contents,
        "{name}: the library rewrote a file it could not read as a region"
    );
}

#[test]
fn bad_region_files_fall_back_to_environment_caps() {
    let node = node();
    let valid = valid_region_bytes(&node);
    assert!(valid.len() >= 64, "a region of {} bytes", valid.len());

    let truncated = valid[..valid.len() / 2].to_vec();
    let mut foreign: Vec<u8> = (0..valid.len()).map(|i| (i * 7 + 3) as u8).collect();
    foreign[..8].copy_from_slice(b"NOTTESSR");
    // The magic intact, the header and counters after it garbage.
    let mut corrupt = valid.clone();
    for b in corrupt.iter_mut().skip(8).take(4096) {
        *b = 0xFF;
    }
    let tiny = valid[..7].to_vec();
    for kind in ClientKind::ALL {
        for (name, contents) in [
            ("truncated", &truncated),
            ("foreign", &foreign),
            ("corrupt", &corrupt),
            ("seven-byte", &tiny),
        ] {
            check_fallback(kind, &node, name, contents);
        }
    }
}

/// A region path the library cannot create (its directory does not exist) is reported the
/// same way, with the same fallback.
#[test]
fn an_unusable_region_path_falls_back_too() {
    let node = node();
    let container = Container::new(&node, Some("256MiB"));
    let missing_dir = container.region().with_extension("missing-dir");
    let path = missing_dir.join("region");
    let mut cmd = ClientKind::CLinked.command(&container, "capfill", &[]);
    cmd.env("TESSERA_REGION", &path)
        .stdin(std::process::Stdio::null());
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert_no_crash(&out, "capfill with an unusable region path");
    assert_success(&out, "capfill with an unusable region path");
    let lines = tessera_lines(&out);
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&path.display().to_string())),
        "expected a line naming {} on stderr, got {lines:?}",
        path.display()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("\"allocated\":{}", 256 * MIB - CONTEXT)),
        "fallback to TESSERA_MEMORY_LIMIT (256 MiB):\n{text}"
    );
    assert!(!Path::new(&path).exists());
}

/// An empty file is not corrupt: it is where the container's region is to be created.
#[test]
fn an_empty_region_file_is_initialized() {
    let node = node();
    let container = Container::new(&node, Some("256MiB"));
    std::fs::write(container.region(), b"").expect("create an empty file");
    let (allocated, lines, _) = capfill(
        ClientKind::CLinked,
        &container,
        "capfill with an empty region file",
    );
    assert!(
        lines.is_empty(),
        "an empty region file is no error: {lines:?}"
    );
    assert_eq!(allocated + CONTEXT, 256 * MIB);
    assert!(
        std::fs::metadata(container.region()).expect("region").len() > 0,
        "the library did not initialize the empty region file"
    );
}
