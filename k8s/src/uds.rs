//! gRPC over Unix sockets, both ways: the kubelet's sockets as a client, ours as a server.

use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint, Uri};

/// How long connecting to a kubelet socket may take.
const CONNECT_PATIENCE: Duration = Duration::from_secs(5);

/// A channel to the gRPC server on `socket`. The URI is a placeholder that gRPC needs; the
/// connector ignores it.
pub async fn connect(socket: &Path) -> Result<Channel, tonic::transport::Error> {
    let socket: PathBuf = socket.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_timeout(CONNECT_PATIENCE)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}

/// Binds a Unix socket at `path`, replacing whatever file is there.
pub fn bind(path: &Path) -> std::io::Result<tokio_stream::wrappers::UnixListenerStream> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    Ok(tokio_stream::wrappers::UnixListenerStream::new(listener))
}
