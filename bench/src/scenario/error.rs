//! Why a scenario, or a step of one, could not run.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// Why a scenario, or a step of one, could not run: a line that names what was being done
/// (and, for a program that failed, what it printed). The report lists it beside the
/// scenario; the runner exits 2.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The programs or the environment the scenarios need are not there; the message says
    /// what to build or set.
    #[error("{0}")]
    Setup(String),
    /// A file or folder could not be made, read, written or removed.
    #[error("cannot {action} {}: {source}", path.display())]
    File {
        /// `create`, `read`, `write`, `remove`, `open`.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// A program or thread could not be started.
    #[error("cannot {what}: {source}")]
    Start {
        /// What was to be started, like `start gpuload train in fixed`.
        what: String,
        /// The system's reason.
        source: std::io::Error,
    },
    /// A program ran and failed, or ran past its time and was killed.
    #[error("{what} {outcome}; stderr:\n{stderr}")]
    Program {
        /// The program, like `gpuload train in fixed`.
        what: String,
        /// How it ended, like `failed (exit status: 1)`.
        outcome: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A program ended with a failing status (its output went to the console).
    #[error("{what} failed ({status})")]
    Failed {
        /// The command, like `cargo build`.
        what: String,
        /// How it ended.
        status: ExitStatus,
    },
    /// A program's report or answer is not the JSON it should be.
    #[error("{what} printed no JSON report ({source}); stdout:\n{stdout}\nstderr:\n{stderr}")]
    Report {
        /// The program.
        what: String,
        /// Why it does not read.
        source: serde_json::Error,
        /// What it printed.
        stdout: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The simulated node's devices do not read.
    #[error(transparent)]
    Devices(#[from] simgpu::device::DeviceSpecError),
    /// The simulated node could not be made or opened.
    #[error(transparent)]
    Node(#[from] simgpu::node::NodeError),
    /// A container's region could not be opened.
    #[error("cannot open {}: {source}", path.display())]
    Region {
        /// The region file.
        path: PathBuf,
        /// Why.
        source: tessera_region::RegionError,
    },
    /// A plot could not be drawn.
    #[error("cannot draw {file}: {reason}")]
    Plot {
        /// The plot's file name.
        file: String,
        /// The drawing library's reason.
        reason: String,
    },
    /// What the scenario waited for did not happen (a workload ended early or never ran), or
    /// a figure it needs is missing from a report.
    #[error("{0}")]
    Run(String),
}

impl ScenarioError {
    /// For `map_err`: `action` on `path` failed.
    pub fn file(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| ScenarioError::File {
            action,
            path,
            source,
        }
    }

    /// For `map_err`: starting `what` failed.
    pub fn start(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| ScenarioError::Start { what, source }
    }
}
