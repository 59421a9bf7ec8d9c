//! The daemon's side of the control socket: one thread per connection, each request
//! answered in turn. Nothing a peer sends can stop the daemon: garbage gets an error line, a
//! line too long or a peer too slow closes the connection. A request must arrive whole
//! within [`REQUEST_DEADLINE`] of its first byte, so a peer dripping bytes holds its
//! thread a few seconds at most; the accept loop never waits on a peer, and threads are
//! small, so hundreds of slow peers leave room for the CLI.

use super::protocol::{Answer, Request, Response, BUSY, MAX_LINE};
use crate::shared::Core;
use crate::state::{Origin, StateError};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a connection may stay silent between requests (one that owns a transient
/// container may stay silent while its command runs).
const IDLE: Duration = Duration::from_secs(30);
/// How long a request may take to arrive, from its first byte to its newline.
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Connections served at once; more get a busy line and are closed. Each holds a thread
/// with a [`STACK`]-byte stack, mostly never touched.
const MAX_CONNECTIONS: usize = 1024;
/// The stack of a connection's thread: parsing, the state's lock and the status.
const STACK: usize = 256 << 10;

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Another daemon answers on it.
    #[error("controld is already running: {0} answers; stop it first, or give this one another --state-dir")]
    Running(PathBuf),
    /// Binding or setting its mode failed.
    #[error(
        "cannot create the control socket {path}: {source}; check that the state dir is writable"
    )]
    Io {
        /// The socket.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
}

/// Creates the control socket at `path`, mode 0600, replacing a stale one.
pub fn bind(path: &Path) -> Result<UnixListener, BindError> {
    let io = |source| BindError::Io {
        path: path.to_path_buf(),
        source,
    };
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(BindError::Running(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    let listener = UnixListener::bind(path).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    Ok(listener)
}

/// Accepts connections until `stop` is set (the stopper then connects once to wake it).
pub fn serve(listener: UnixListener, core: Arc<Core>, stop: Arc<AtomicBool>) {
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        // Relaxed: a flag with no data behind it.
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let Ok(mut stream) = stream else {
            // Out of descriptors and the like: give the system a moment.
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        // Relaxed: a count that only limits; nothing is published through it.
        if open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::Relaxed);
            // A fresh socket's buffer takes one line; never wait on this peer.
            let _ = stream.set_nonblocking(true);
            let _ = reply(&mut stream, &busy());
            continue;
        }
        let core = core.clone();
        let open2 = open.clone();
        let spawned = std::thread::Builder::new()
            .name("control".into())
            .stack_size(STACK)
            .spawn(move || {
                Connection::new(core).serve(stream);
                open2.fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn busy() -> Response {
    Response::Error(format!(
        "{BUSY}: it serves {MAX_CONNECTIONS} connections already; try again in a moment"
    ))
}

fn reply(stream: &mut UnixStream, response: &Response) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(response).expect("plain data serializes");
    line.push(b'\n');
    stream.write_all(&line)
}

/// The uid of the peer, by `SO_PEERCRED`.
fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, a ucred owned by this frame,
    // on a descriptor the stream keeps open.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// One client connection and the transient containers it owns.
struct Connection {
    core: Arc<Core>,
    transient: Vec<String>,
}

impl Connection {
    fn new(core: Arc<Core>) -> Connection {
        Connection {
            core,
            transient: Vec::new(),
        }
    }

    fn serve(mut self, mut stream: UnixStream) {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        match peer_uid(&stream) {
            Ok(uid) if uid == me || uid == 0 => {}
            Ok(uid) => {
                let _ = reply(
                    &mut stream,
                    &Response::Error(format!(
                        "permission denied: controld runs as uid {me} and serves only that user and root, not uid {uid}"
                    )),
                );
                return;
            }
            Err(e) => {
                tracing::warn!("cannot identify a control client ({e}); closed");
                return;
            }
        }
        let _ = stream.set_write_timeout(Some(IDLE));
        let mut lines = LineReader::default();
        loop {
            let idle = if self.transient.is_empty() {
                Some(IDLE)
            } else {
                // It may stay silent while its command runs.
                None
            };
            let line = match lines.next(&mut stream, idle) {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(LineError::TooLong) => {
                    let _ = reply(
                        &mut stream,
                        &Response::Error(format!(
                            "request longer than {MAX_LINE} bytes; send one JSON object per line"
                        )),
                    );
                    break;
                }
                Err(LineError::Closed) => break,
            };
            let text = String::from_utf8_lossy(&line);
            if text.trim().is_empty() {
                continue;
            }
            let response = match serde_json::from_str::<Request>(text.trim()) {
                Ok(request) => self.handle(request),
                Err(e) => Response::Error(format!(
                    "bad request ({e}); send one JSON object per line, like {{\"op\":\"list\"}}"
                )),
            };
            if reply(&mut stream, &response).is_err() {
                break;
            }
        }
        for name in std::mem::take(&mut self.transient) {
            let removed = self.core.with_state(|s| {
                s.origin(&name) == Some(Origin::Transient)
                    && s.retire(&name, "its exec command ended")
            });
            if removed {
                tracing::info!("removed transient container {name}");
            }
        }
    }

    fn handle(&mut self, request: Request) -> Response {
        let result: Result<Answer, StateError> = match request {
            Request::Add {
                container,
                transient,
            } => {
                let origin = if transient {
                    Origin::Transient
                } else {
                    Origin::Api
                };
                let name = container.name.to_string();
                let added = self.core.with_state(|s| s.add(container, origin));
                if added.is_ok() {
                    tracing::info!("added container {name} ({origin:?})");
                    if transient {
                        self.transient.push(name);
                    }
                }
                added.map(Answer::Container)
            }
            Request::Set { name, change } => {
                let set = self.core.with_state(|s| s.set(&name, &change));
                if set.is_ok() {
                    tracing::info!("changed container {name}");
                }
                set.map(Answer::Container)
            }
            Request::Rm { name, force } => {
                let removed = self.core.with_state(|s| match s.origin(&name) {
                    Some(Origin::Config) => Err(StateError::Declared(name.clone())),
                    _ => s.remove(&name, force),
                });
                if removed.is_ok() {
                    self.transient.retain(|n| *n != name);
                    tracing::info!("removed container {name}");
                }
                removed.map(|()| Answer::Done)
            }
            Request::List {} => Ok(Answer::Containers(self.core.with_state(|s| s.list()))),
            Request::Status {} => Ok(Answer::Status(Box::new(self.core.node_status()))),
        };
        match result {
            Ok(answer) => Response::Ok(answer),
            Err(e) => Response::Error(e.to_string()),
        }
    }
}

/// Why no request line came.
enum LineError {
    /// Longer than [`MAX_LINE`].
    TooLong,
    /// Too slow, or the connection failed.
    Closed,
}

/// Splits a connection's bytes into request lines, each within [`REQUEST_DEADLINE`] of its
/// first byte and at most [`MAX_LINE`] long.
#[derive(Default)]
struct LineReader {
    buffer: Vec<u8>,
}

impl LineReader {
    /// The next line (without its newline); `None` at the end of the stream. `idle` bounds
    /// the wait for a line's first byte (`None`: no bound).
    fn next(
        &mut self,
        stream: &mut UnixStream,
        idle: Option<Duration>,
    ) -> Result<Option<Vec<u8>>, LineError> {
        let mut started = (!self.buffer.is_empty()).then(Instant::now);
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
                line.pop();
                return Ok(Some(line));
            }
            if self.buffer.len() > MAX_LINE {
                return Err(LineError::TooLong);
            }
            let wait = match started {
                Some(at) => {
                    let left = REQUEST_DEADLINE.saturating_sub(at.elapsed());
                    if left.is_zero() {
                        return Err(LineError::Closed);
                    }
                    Some(left)
                }
                None => idle,
            };
            stream
                .set_read_timeout(wait)
                .map_err(|_| LineError::Closed)?;
            let n = stream.read(&mut chunk).map_err(|_| LineError::Closed)?;
            if n == 0 {
                // A last request without its newline is still a request.
                return Ok((!self.buffer.is_empty()).then(|| std::mem::take(&mut self.buffer)));
            }
            started.get_or_insert_with(Instant::now);
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }
}
