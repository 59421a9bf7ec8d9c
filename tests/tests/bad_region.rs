//! A corrupt, truncated, emptied or foreign region file is a clear message on stderr,
//! never a crash or a hang, and the file is left as it was. The process fails closed: a cap
//! of 0 bytes, so that its allocations fail with out-of-memory; only with
//! `TESSERA_REGION_FALLBACK=env` does it take the caps of its environment. For every client
//! kind: the process that meets the bad file is a program of that kind filling its cap
//! (`capfill`).

use std::path::Path;
use std::time::Duration;
use tessera_tests::{
    assert_no_crash, assert_success, json_u64, run_with_timeout, tessera_lines, ClientKind,
    Container, SimNode,
};

const MIB: u64 = 1 << 20;
const CONTEXT: u64 = 64 * MIB;
/// The opt-in to the environment's caps.
const FALLBACK: &str = "TESSERA_REGION_FALLBACK";

/// Runs `capfill` without the opt-in: it must not crash, must say once (naming `path` and
/// the opt-in) why, and must get no device memory at all.
fn check_closed(kind: ClientKind, container: &Container<'_>, path: &Path, what: &str) {
    let mut cmd = kind.command(container, "capfill", &[]);
    cmd.stdin(std::process::Stdio::null())
        .env("TESSERA_REGION", path)
        .env_remove(FALLBACK);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert_no_crash(&out, what);
    let lines = tessera_lines(&out);
    let path = path.display().to_string();
    let about: Vec<&String> = lines.iter().filter(|l| l.contains(&path)).collect();
    assert_eq!(about.len(), 1, "{what}: one line naming {path}: {lines:?}");
    assert!(
        about[0].contains("out-of-memory") && about[0].contains(FALLBACK),
        "{what}: {}",
        about[0]
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Either the context itself was refused (it costs device memory too), or every
    // allocation was.
    let allocated = text
        .lines()
        .find_map(|l| l.strip_prefix("full "))
        .map(|j| json_u64(&serde_json::from_str(j).expect("full JSON"), "/allocated"));
    match allocated {
        Some(bytes) => assert_eq!(
            bytes, 0,
            "{what}: allocated under a region it could not use"
        ),
        None => assert!(
            !out.status.success() && stderr.contains("CUDA_ERROR_OUT_OF_MEMORY"),
            "{what}: neither refused nor reported:\n{text}\n{stderr}"
        ),
    }
}

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
    cmd.stdin(std::process::Stdio::null()).env(FALLBACK, "env");
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
fn bad_region_files_fail_closed_or_fall_back_to_environment_caps_when_asked() {
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
    // An empty file at the path was emptied by someone: regions appear whole.
    let empty = Vec::new();
    // A region of another layout version.
    let mut other_version = valid.clone();
    other_version[8..12].copy_from_slice(&99u32.to_ne_bytes());
    for kind in ClientKind::ALL {
        for (name, contents) in [
            ("truncated", &truncated),
            ("foreign", &foreign),
            ("corrupt", &corrupt),
            ("seven-byte", &tiny),
            ("empty", &empty),
            ("other-version", &other_version),
        ] {
            check_fallback(kind, &node, name, contents);
        }
    }
}

/// A region path the library cannot create (its directory does not exist) is reported the
/// same way: closed, or with the opt-in, the environment's caps.
#[test]
fn an_unusable_region_path_fails_closed_or_falls_back_when_asked() {
    let node = node();
    let container = Container::new(&node, Some("256MiB"));
    let missing_dir = container.region().with_extension("missing-dir");
    let path = missing_dir.join("region");
    let mut cmd = ClientKind::CLinked.command(&container, "capfill", &[]);
    cmd.env("TESSERA_REGION", &path)
        .env(FALLBACK, "env")
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
    check_closed(
        ClientKind::CLinked,
        &container,
        &path,
        "capfill with an unusable region path, closed",
    );
    assert!(!Path::new(&path).exists());
}

/// A region file that sparse-grows to 10 GB (or is a symbolic link) is refused like any
/// other spoiled one, and left as it was.
#[test]
fn a_huge_or_linked_region_fails_closed() {
    let node = node();
    let container = Container::new(&node, Some("256MiB"));
    let valid = valid_region_bytes(&node);
    std::fs::write(container.region(), &valid).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(container.region())
        .unwrap()
        .set_len(10 << 30)
        .unwrap();
    check_closed(
        ClientKind::CLinked,
        &container,
        container.region(),
        "a 10 GB sparse region",
    );
    assert_eq!(
        std::fs::metadata(container.region()).unwrap().len(),
        10 << 30
    );
    let link = container.region().with_extension("link");
    std::fs::write(container.region(), &valid).unwrap();
    std::os::unix::fs::symlink(container.region(), &link).unwrap();
    check_closed(ClientKind::CLinked, &container, &link, "a symbolic link");
    let _ = std::fs::remove_file(link);
}

/// A region shrunk under a running process by another process of its container: the
/// process is not killed with SIGBUS (its library guards its own mapping), says once what
/// happened, and allocates nothing more (it fails closed).
#[test]
fn a_region_shrunk_under_a_running_process_fails_closed_without_a_crash() {
    let node = node();
    let container = Container::new(&node, Some("1GiB"));
    // 64 MiB every 100 ms up to 896 MiB: about 1.4 s, shrunk after a few chunks.
    let mut cmd = container.command(&tessera_tests::artifacts().gpuload);
    cmd.args([
        "alloc",
        "--chunk",
        "64MiB",
        "--interval",
        "0.1",
        "--limit",
        "896MiB",
    ])
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("gpuload starts");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(container.region()).map_or(0, |m| m.len()) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the library made no region"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    std::fs::OpenOptions::new()
        .write(true)
        .open(container.region())
        .unwrap()
        .set_len(0)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_no_crash(&out, "gpuload alloc with its region shrunk");
    assert_success(&out, "gpuload alloc with its region shrunk");
    let report: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .expect("a report"),
    )
    .expect("JSON report");
    assert_eq!(report["error"], "CUDA_ERROR_OUT_OF_MEMORY", "{report}");
    assert!(
        json_u64(&report, "/bytes") < 896 * MIB,
        "allocated on after the region was gone: {report}"
    );
    let lines = tessera_lines(&out);
    let said: Vec<_> = lines.iter().filter(|l| l.contains("shrank")).collect();
    assert_eq!(said.len(), 1, "one line saying so: {lines:?}");
}
