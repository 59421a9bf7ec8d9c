//! Why a command failed, for one line on stderr.

use std::error::Error;
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
    /// `--seconds` of the demo that does not read.
    #[error("--seconds {0}: give a whole number of seconds, like 15")]
    Seconds(String),
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
    /// The demo could not run.
    #[error(transparent)]
    Demo(#[from] crate::demo::DemoError),
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
    /// The message and every cause it does not already tell, on one line: `cannot write the
    /// CDI spec to /etc/cdi/x.json: Permission denied (os error 13)`.
    pub fn chain(&self) -> String {
        let mut line = self.to_string();
        let mut cause = self.source();
        while let Some(e) = cause {
            let text = e.to_string();
            // Most library errors name their cause in their own message already.
            if !line.contains(&text) {
                line += ": ";
                line += &text;
            }
            cause = e.source();
        }
        line
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
