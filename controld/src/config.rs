//! The config file: the containers the node runs and the daemon's settings.
//!
//! ```toml
//! [daemon]
//! state_dir = "/run/tessera"     # where regions and the control socket live
//! metrics = "127.0.0.1:9400"     # Prometheus endpoint; off when absent
//! enforce = "kill"               # over a cap by NVML: kill (default) | report
//! enforce_grace_ms = 2000        # how long over cap + slack before kill acts
//! enforce_slack = "64MiB"        # how far over the cap NVML may count unreported
//!
//! [[container]]
//! name = "inference"             # [a-z0-9][a-z0-9-]{0,62}
//! gpus = [0]
//! memory = "8GiB"                # cap per GPU; absent is unlimited
//! compute = "burst:50"           # fixed:Q | burst:Q | best-effort (default)
//! priority = "online"            # online (default) | offline
//! ```
//!
//! Every error names the file, the line and the key.

use crate::spec::ContainerSpec;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Where the config file is when `--config` does not say.
pub const DEFAULT_PATH: &str = "/etc/tessera/controld.toml";

/// The daemon's settings (`[daemon]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonSettings {
    /// The state dir; `--state-dir` and `TESSERA_STATE_DIR` win over it.
    pub state_dir: Option<PathBuf>,
    /// The control socket; `<state_dir>/control.sock` when absent.
    pub socket: Option<PathBuf>,
    /// Where to serve Prometheus metrics (`GET /metrics`); off when absent.
    pub metrics: Option<SocketAddr>,
    /// What the watchdog does about a container whose processes hold more than its cap.
    #[serde(default)]
    pub enforce: crate::watchdog::Enforce,
    /// How long, in milliseconds, a container may stay over its cap plus the slack before
    /// `enforce = "kill"` stops its processes; [`crate::watchdog::DEFAULT_GRACE`] when absent.
    pub enforce_grace_ms: Option<u64>,
    /// How far NVML's count may exceed a cap unreported;
    /// [`crate::watchdog::DEFAULT_SLACK`] when absent.
    pub enforce_slack: Option<crate::spec::MemorySize>,
}

/// A config file, read and checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// The file it came from; `None` for the empty config of a node without one.
    pub path: Option<PathBuf>,
    /// `[daemon]`.
    pub daemon: DaemonSettings,
    /// `[[container]]`, in file order.
    pub containers: Vec<ContainerSpec>,
}

/// A config file that cannot be used: one line naming the file, the line and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        reason: String,
    },
    /// Something in it is wrong.
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The key at fault, when one is.
        key: Option<String>,
        /// What is wrong and what to write instead.
        message: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, reason } => write!(
                f,
                "cannot read the config file {}: {reason}; pass --config with a readable file",
                path.display()
            ),
            ConfigError::Invalid {
                path,
                line,
                key,
                message,
            } => {
                write!(f, "{}:{line}: ", path.display())?;
                if let Some(key) = key {
                    write!(f, "key `{key}`: ")?;
                }
                f.write_str(message)
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// The file as serde sees it: container tables keep their place in the text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    daemon: DaemonSettings,
    #[serde(default)]
    container: Vec<toml::Spanned<ContainerSpec>>,
}

impl Config {
    /// Reads and checks the config file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Config::parse(path, &text)
    }

    /// Checks the text of a config file; `path` is for messages.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let invalid = |span: Range<usize>, key: Option<String>, message: String| {
            let line = line_of(text, span.start);
            ConfigError::Invalid {
                path: path.to_path_buf(),
                line,
                key: key.or_else(|| key_on_line(text, line)),
                message: message.replace('\n', " "),
            }
        };
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            invalid(span, None, e.message().trim().to_string())
        })?;
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut guaranteed: BTreeMap<u32, Vec<(String, u32)>> = BTreeMap::new();
        for table in &raw.container {
            let spec = table.get_ref();
            let span = table.span();
            let name = spec.name.to_string();
            if let Some(first) = seen.insert(name.clone(), line_of(text, span.start)) {
                let at = find_key(text, span.clone(), "name").unwrap_or(span.clone());
                return Err(invalid(
                    at,
                    Some("name".into()),
                    format!("container {name} is declared twice (first at line {first}); give each container its own name"),
                ));
            }
            for &gpu in spec.gpus.as_slice() {
                let holders = guaranteed.entry(gpu).or_default();
                holders.push((name.clone(), spec.compute.guarantee()));
                let total: u32 = holders.iter().map(|(_, g)| g).sum();
                if total > 100 {
                    let detail: Vec<String> = holders
                        .iter()
                        .filter(|(_, g)| *g > 0)
                        .map(|(n, g)| format!("{n} {g}%"))
                        .collect();
                    let at = find_key(text, span.clone(), "compute").unwrap_or(span.clone());
                    return Err(invalid(
                        at,
                        Some("compute".into()),
                        format!(
                            "GPU {gpu} is guaranteed {total}% of its time ({}), more than 100%; lower a fixed or burst share or use best-effort",
                            detail.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(Config {
            path: Some(path.to_path_buf()),
            daemon: raw.daemon,
            containers: raw
                .container
                .into_iter()
                .map(toml::Spanned::into_inner)
                .collect(),
        })
    }
}

/// The 1-based line of byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The key assigned on `line` (`key = value`), if that line assigns one.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let l = text.lines().nth(line.checked_sub(1)?)?;
    let (key, _) = l.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.starts_with('#') && !key.contains(char::is_whitespace))
        .then(|| key.to_string())
}

/// The span of the line that assigns `key` in the table that starts at `table` (up to the
/// next table header).
fn find_key(text: &str, table: Range<usize>, key: &str) -> Option<Range<usize>> {
    let part = text.get(table.start..)?;
    let mut offset = table.start;
    for (i, l) in part.split_inclusive('\n').enumerate() {
        if i > 0 && l.trim_start().starts_with('[') {
            break;
        }
        if l.split_once('=').is_some_and(|(k, _)| k.trim() == key) {
            return Some(offset..offset + l.len());
        }
        offset += l.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ComputePolicy;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(Path::new("node.toml"), text).map_err(|e| e.to_string())
    }

    const GOOD: &str = r#"
[daemon]
state_dir = "/tmp/x"
metrics = "127.0.0.1:9400"

[[container]]
name = "inference"
gpus = [0]
memory = "8GiB"
compute = "burst:50"
priority = "online"

[[container]]
name = "train"
gpus = [0, 1]
compute = "fixed:50"
priority = "offline"
"#;

    #[test]
    fn a_good_file_reads() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.containers.len(), 2);
        assert_eq!(c.containers[0].memory.unwrap().0, 8 << 30);
        assert_eq!(c.containers[1].compute, ComputePolicy::Fixed(50));
        assert_eq!(c.daemon.metrics.unwrap().port(), 9400);
        assert_eq!(parse("").unwrap().containers.len(), 0);
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let cases = [
            (
                GOOD.replace("priority = \"online\"", "prio = \"online\""),
                11,
                "prio",
            ),
            (GOOD.replace("\"8GiB\"", "\"8GB\""), 9, "memory"),
            (GOOD.replace("fixed:50", "fixed:51"), 16, "compute"),
            (GOOD.replace("\"inference\"", "\"a/b\""), 7, "name"),
            (GOOD.replace("\"train\"", "\"inference\""), 14, "name"),
            (GOOD.replace("burst:50", "burst"), 10, "compute"),
            (GOOD.replace("state_dir", "statedir"), 3, "statedir"),
            (GOOD.replace("[0, 1]", "[0, 99]"), 15, "gpus"),
        ];
        for (text, line, key) in cases {
            let err = parse(&text).expect_err(key);
            assert!(
                err.starts_with(&format!("node.toml:{line}: key `{key}`: ")),
                "{err}"
            );
            assert!(!err.contains('\n'), "{err}");
        }
        let err = parse("[[container]\nname=").unwrap_err();
        assert!(err.starts_with("node.toml:1: "), "{err}");
    }
}
