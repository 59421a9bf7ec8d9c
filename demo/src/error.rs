//! Why the demo could not run.

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Programs it needs are not built.
    #[error("{0}")]
    Missing(String),
    /// The temporary directory or the simulated node could not be made.
    #[error("cannot prepare the demo: {0}")]
    Setup(String),
    /// The daemon did not start.
    #[error("cannot start the demo's daemon: {0}")]
    Daemon(#[from] tessera_controld::daemon::DaemonError),
    /// A workload could not be started.
    #[error("cannot start {what}: {source}")]
    Spawn {
        /// Which workload.
        what: String,
        /// The system's reason.
        source: std::io::Error,
    },
}
