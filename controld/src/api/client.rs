//! The client side of the control socket, for the CLI (and any other Rust client).

use super::protocol::{Answer, Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a call waits for its answer.
const PATIENCE: Duration = Duration::from_secs(30);

/// Why a call to the daemon failed. Each message is one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens on the socket.
    #[error("controld is not running (nothing answers at {0}); start it with `controld run`, or point --state-dir or TESSERA_STATE_DIR at the state dir of the running one")]
    NotRunning(PathBuf),
    /// The socket refuses this user.
    #[error("permission denied on {0}: controld serves only the user it runs as and root; run this as that user")]
    Permission(PathBuf),
    /// Talking to it failed.
    #[error(
        "lost the connection to controld at {path}: {source}; check that controld is still running"
    )]
    Io {
        /// The socket.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// The daemon refused the request; its message says why.
    #[error("{0}")]
    Refused(String),
    /// The daemon answered something this client cannot read.
    #[error("controld at {0} answered something unreadable; use a CLI of the same release as the daemon")]
    Protocol(PathBuf),
}

/// A connection to the daemon.
pub struct Client {
    path: PathBuf,
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Client {
    /// Connects to the daemon's socket.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                ClientError::NotRunning(path.to_path_buf())
            }
            std::io::ErrorKind::PermissionDenied => ClientError::Permission(path.to_path_buf()),
            _ => ClientError::Io {
                path: path.to_path_buf(),
                source: e,
            },
        })?;
        let io = |source| ClientError::Io {
            path: path.to_path_buf(),
            source,
        };
        stream.set_read_timeout(Some(PATIENCE)).map_err(io)?;
        let reader = BufReader::new(stream.try_clone().map_err(io)?);
        Ok(Client {
            path: path.to_path_buf(),
            stream,
            reader,
        })
    }

    /// Sends one request and waits for its answer.
    pub fn call(&mut self, request: &Request) -> Result<Answer, ClientError> {
        let io = |source| ClientError::Io {
            path: self.path.clone(),
            source,
        };
        let mut line = serde_json::to_vec(request).expect("plain data serializes");
        line.push(b'\n');
        self.stream.write_all(&line).map_err(io)?;
        let mut answer = String::new();
        let n = self.reader.read_line(&mut answer).map_err(io)?;
        if n == 0 {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection",
            )));
        }
        match serde_json::from_str::<Response>(&answer) {
            Ok(Response::Ok(answer)) => Ok(answer),
            Ok(Response::Error(message)) => Err(ClientError::Refused(message)),
            Err(_) => Err(ClientError::Protocol(self.path.clone())),
        }
    }

    /// Lets the connection wait without limit for answers (a transient container's owner).
    pub fn wait_forever(&self) {
        let _ = self.stream.set_read_timeout(None);
    }
}
