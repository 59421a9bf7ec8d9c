//! The client side of the control socket, for the CLI (and any other Rust client).

use super::protocol::{Answer, Request, Response, BUSY};
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
    /// It runs but is too busy to take or answer this connection.
    #[error("controld is running but busy: {0}; try again in a moment, and see `controld status` or its log for what holds it")]
    Busy(String),
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
    patience: Duration,
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Client {
    /// Connects to the daemon's socket.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        Client::connect_with_patience(path, PATIENCE)
    }

    /// Connects, waiting at most `patience` for each answer.
    pub fn connect_with_patience(path: &Path, patience: Duration) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                ClientError::NotRunning(path.to_path_buf())
            }
            // Its queue of connections not yet accepted is full.
            std::io::ErrorKind::WouldBlock => ClientError::Busy(format!(
                "{} accepts no more connections now",
                path.display()
            )),
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
        stream.set_read_timeout(Some(patience)).map_err(io)?;
        let reader = BufReader::new(stream.try_clone().map_err(io)?);
        Ok(Client {
            path: path.to_path_buf(),
            patience,
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
        let n = match self.reader.read_line(&mut answer) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ClientError::Busy(format!(
                    "it took the connection at {} but gave no answer within {:?}",
                    self.path.display(),
                    self.patience
                )))
            }
            Err(e) => return Err(io(e)),
        };
        if n == 0 {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection",
            )));
        }
        match serde_json::from_str::<Response>(&answer) {
            Ok(Response::Ok(answer)) => Ok(answer),
            Ok(Response::Error(message)) if message.starts_with(BUSY) => {
                Err(ClientError::Busy(message))
            }
            Ok(Response::Error(message)) => Err(ClientError::Refused(message)),
            Err(_) => Err(ClientError::Protocol(self.path.clone())),
        }
    }

    /// Lets the connection wait without limit for answers (a transient container's owner).
    pub fn wait_forever(&self) {
        let _ = self.stream.set_read_timeout(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn socket(tag: &str) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("controld-client-{tag}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        path
    }

    #[test]
    fn busy_is_told_from_not_running() {
        let path = socket("gone");
        // A socket file nobody listens on: not running.
        drop(UnixListener::bind(&path).unwrap());
        let err = Client::connect(&path).err().unwrap();
        assert!(matches!(err, ClientError::NotRunning(_)), "{err}");
        assert!(err.to_string().contains("not running"));
        let _ = std::fs::remove_file(&path);

        // A daemon that takes the connection and never answers: busy.
        let listener = UnixListener::bind(&path).unwrap();
        let mut client = Client::connect_with_patience(&path, Duration::from_millis(200)).unwrap();
        let err = client.call(&Request::List {}).unwrap_err();
        assert!(matches!(err, ClientError::Busy(_)), "{err}");
        assert!(err.to_string().contains("running but busy"), "{err}");

        // A daemon that turns the connection away: busy, with its reason.
        let answer = std::thread::spawn(move || {
            use std::io::Write;
            // The silent connection above, then this one.
            let _silent = listener.accept().unwrap();
            let (mut second, _) = listener.accept().unwrap();
            // Its request first, so that the client's write never meets a closed socket.
            let mut request = String::new();
            BufReader::new(&second).read_line(&mut request).unwrap();
            second
                .write_all(
                    b"{\"error\":\"controld is busy: it serves 1024 connections already\"}\n",
                )
                .unwrap();
        });
        let mut client = Client::connect(&path).unwrap();
        let err = client.call(&Request::List {}).unwrap_err();
        assert!(matches!(err, ClientError::Busy(_)), "{err}");
        answer.join().unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
