//! The daemon's side of the control socket: one thread per connection, each request
//! answered in turn. Nothing a peer sends can stop the daemon: garbage gets an error line, a
//! line too long or a peer too slow closes the connection.

use super::protocol::{Answer, Request, Response, MAX_LINE};
use crate::daemon::Core;
use crate::state::{Origin, StateError};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a connection may stay silent between requests (one that owns a transient
/// container may stay silent while its command runs).
const IDLE: Duration = Duration::from_secs(30);
/// Connections served at once; more get an error line and are closed.
const MAX_CONNECTIONS: usize = 256;

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
        let Ok(mut stream) = stream else { continue };
        // Relaxed: a count that only limits; nothing is published through it.
        if open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::Relaxed);
            let _ = reply(&mut stream, &busy());
            continue;
        }
        let core = core.clone();
        let open2 = open.clone();
        let spawned = std::thread::Builder::new()
            .name("control".into())
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
    Response::Error("controld is serving too many connections; try again".into())
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
                crate::log::warn(&format!("cannot identify a control client ({e}); closed"));
                return;
            }
        }
        let _ = stream.set_read_timeout(Some(IDLE));
        let _ = stream.set_write_timeout(Some(IDLE));
        let Ok(read_half) = stream.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(read_half.take(u64::MAX));
        let mut line = Vec::new();
        loop {
            line.clear();
            // At most one byte past the limit, so that an endless line cannot fill memory.
            reader.get_mut().set_limit(MAX_LINE as u64 + 1);
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => break,
            }
            if line.len() > MAX_LINE && !line.ends_with(b"\n") {
                let _ = reply(
                    &mut stream,
                    &Response::Error(format!(
                        "request longer than {MAX_LINE} bytes; send one JSON object per line"
                    )),
                );
                break;
            }
            let text = String::from_utf8_lossy(&line);
            if text.trim().is_empty() {
                continue;
            }
            let response = match serde_json::from_str::<Request>(text.trim()) {
                Ok(request) => self.handle(request, &stream),
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
                crate::log::info(&format!("removed transient container {name}"));
            }
        }
    }

    fn handle(&mut self, request: Request, stream: &UnixStream) -> Response {
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
                    crate::log::info(&format!("added container {name} ({origin:?})"));
                    if transient {
                        self.transient.push(name);
                        // It may stay silent while its command runs.
                        let _ = stream.set_read_timeout(None);
                    }
                }
                added.map(Answer::Container)
            }
            Request::Set { name, change } => {
                let set = self.core.with_state(|s| s.set(&name, &change));
                if set.is_ok() {
                    crate::log::info(&format!("changed container {name}"));
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
                    crate::log::info(&format!("removed container {name}"));
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
