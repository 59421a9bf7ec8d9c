//! Why a command failed, for one line on stderr.

use std::path::PathBuf;
use tessera_controld::api::ClientError;
use tessera_controld::config::ConfigError;
use tessera_controld::daemon::DaemonError;
use tessera_controld::exec::ExecError;
use tessera_controld::policy::PolicyError;
use tessera_controld::spec::{BadGpus, BadName};
use tessera_region::units::SizeError;

/// Why a command failed. The library's errors already say what to do, so they pass through
/// as they are; the CLI's own say it too.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A container name that cannot be used.
    #[error(transparent)]
    Name(#[from] BadName),
    /// A GPU list that cannot be used.
    #[error(transparent)]
    Gpus(#[from] BadGpus),
    /// A size that does not read.
    #[error(transparent)]
    Size(#[from] SizeError),
    /// A compute policy or priority that does not read.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// `container set` without a change.
    #[error("nothing to change; give --gpus, --memory, --compute, --priority or --timeslice")]
    NothingToChange,
    /// The config file named by `--config`.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The daemon cannot be reached or refused the request.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The daemon answered a request with an answer of another kind.
    #[error("controld answered something unexpected; use a CLI of the same release as the daemon")]
    Unexpected,
    /// The daemon could not start or stopped on an error.
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    /// `exec` could not run its command.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// A file could not be written.
    #[error("cannot write {what} to {}", path.display())]
    Write {
        /// What it was.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// Stdout could not be written (a closed pipe is not an error).
    #[error("cannot write the output")]
    Output(#[source] std::io::Error),
}

impl CliError {
    /// The message and every cause it does not already tell, on one line.
    pub fn chain(&self) -> String {
        tessera_controld::report::one_line(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_names_each_cause_once() {
        let e = CliError::Write {
            what: "the CDI spec",
            path: PathBuf::from("/etc/cdi/tessera.json"),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert_eq!(
            e.chain(),
            "cannot write the CDI spec to /etc/cdi/tessera.json: permission denied"
        );
        let e = CliError::Client(ClientError::Io {
            path: PathBuf::from("/run/tessera/control.sock"),
            source: std::io::Error::from(std::io::ErrorKind::BrokenPipe),
        });
        let line = e.chain();
        assert_eq!(line.matches("broken pipe").count(), 1, "{line}");
    }
}
