//! The metrics endpoint: `GET /metrics` over HTTP/1.1, served by hyper on a small tokio
//! runtime of its own, in one thread, so that the daemon's other threads never wait on a
//! client.
//!
//! Bounded under slow or hostile clients: the request head must arrive within
//! [`HEAD_DEADLINE`] and fit in [`MAX_HEAD`] (else 431), a whole exchange lasts at most
//! [`EXCHANGE_DEADLINE`], one request per connection. Past [`MAX_CONNECTIONS`] open at
//! once, the connection that has waited longest for its request head is closed to make
//! room for the new one: clients that open connections and send nothing (or a byte at a
//! time, reconnecting as they are cut) only ever push each other out, while a scraper,
//! whose head arrives at once, is never the one waiting longest. Rendering the status runs
//! beside the connections (on the runtime's blocking threads), so a slow status holds up
//! no client.

use super::exposition::{render, CONTENT_TYPE};
use crate::status::NodeStatus;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE as CONTENT_TYPE_HEADER};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::AbortHandle;

/// The largest request head (request line and headers) a connection buffers; hyper answers
/// 431 past it.
const MAX_HEAD: usize = 16 << 10;
/// How long a client has to send its whole request head.
const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// How long one connection may last, answer included: a client that stops reading is cut.
const EXCHANGE_DEADLINE: Duration = Duration::from_secs(15);
/// Connections served at once; past that a new one is closed unanswered.
const MAX_CONNECTIONS: usize = 512;
/// Threads that take and render the status at once (requests past that queue).
const RENDER_THREADS: usize = 2;
/// How long a new connection waits for the slot of one closed to make room for it.
const ROOM_WAIT: Duration = Duration::from_millis(100);
/// How long a stopping server waits for a status being rendered.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// Where the server gets the status to render, once per request.
pub type StatusSource = Arc<dyn Fn() -> NodeStatus + Send + Sync>;

/// Why the metrics server could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address could not be bound.
    #[error("cannot serve metrics on {0}: {1}; check that the address is this node's and that no other program listens on it")]
    Bind(SocketAddr, std::io::Error),
    /// The serving thread or its runtime could not start.
    #[error("cannot start the metrics thread: {0}")]
    Thread(std::io::Error),
}

/// The metrics endpoint: a thread that answers `GET /metrics`. Stops when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0 picks a free port; see [`MetricsServer::local_addr`]) and
    /// serves `source()` rendered by [`render`].
    pub fn spawn(addr: SocketAddr, source: StatusSource) -> Result<MetricsServer, MetricsError> {
        let listener =
            std::net::TcpListener::bind(addr).map_err(|e| MetricsError::Bind(addr, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| MetricsError::Bind(addr, e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| MetricsError::Bind(addr, e))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(RENDER_THREADS)
            .thread_name("metrics-render")
            .build()
            .map_err(MetricsError::Thread)?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("metrics".to_string())
            .spawn(move || {
                runtime.block_on(serve(listener, source, stopped));
                runtime.shutdown_timeout(STOP_GRACE);
            })
            .map_err(MetricsError::Thread)?;
        Ok(MetricsServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        // Dropping the sender wakes the accept loop, which returns; the runtime then drops
        // every connection.
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    source: StatusSource,
    mut stopped: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!("cannot serve metrics: {e}");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let headless = Headless::default();
    for seq in 0u64.. {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut stopped => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // Out of descriptors and the like: give the system a moment.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if !headless.close_oldest() {
                    continue;
                }
                // The closed connection's task gives its slot back when the runtime drops
                // it, which this loop must let happen.
                match tokio::time::timeout(ROOM_WAIT, Arc::clone(&slots).acquire_owned()).await {
                    Ok(Ok(slot)) => slot,
                    _ => continue,
                }
            }
        };
        let source = Arc::clone(&source);
        let waiting = headless.clone();
        let task = tokio::spawn(async move {
            // Out of the list when the exchange ends, however it ends.
            let _listed = Listed(waiting.clone(), seq);
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEAD_DEADLINE)
                .max_buf_size(MAX_HEAD)
                .keep_alive(false)
                // Scrapers do not care, but people reading a reply with `curl -i` and the
                // tests that look for `Content-Type` do.
                .title_case_headers(true);
            let service = hyper::service::service_fn(move |request| {
                // Its head is in: no longer one to make room with.
                waiting.remove(seq);
                answer(request, Arc::clone(&source))
            });
            let exchange = http.serve_connection(TokioIo::new(stream), service);
            // A client that misbehaves only loses its own answer.
            let _ = tokio::time::timeout(EXCHANGE_DEADLINE, exchange).await;
            drop(slot);
        });
        headless.insert(seq, task.abort_handle());
    }
}

/// The connections whose request head has not arrived yet, oldest first (by accept order).
#[derive(Clone, Default)]
struct Headless(Arc<Mutex<BTreeMap<u64, AbortHandle>>>);

impl Headless {
    fn list(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, AbortHandle>> {
        // A panic while the lock was held leaves a map that is still whole.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, seq: u64, task: AbortHandle) {
        // On this one-thread runtime a task has not run when it is listed; one that had
        // ended would stay listed for good, so a finished one is left out.
        if !task.is_finished() {
            self.list().insert(seq, task);
        }
    }

    fn remove(&self, seq: u64) {
        self.list().remove(&seq);
    }

    /// Closes the connection that has waited longest for its head; false if none waits.
    fn close_oldest(&self) -> bool {
        match self.list().pop_first() {
            Some((_, task)) => {
                task.abort();
                true
            }
            None => false,
        }
    }
}

/// Takes a connection off the [`Headless`] list when its task ends.
struct Listed(Headless, u64);

impl Drop for Listed {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

/// The answer to one request. Never an error: every outcome is a response.
async fn answer(
    request: Request<Incoming>,
    source: StatusSource,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    if request.uri().path() != "/metrics" {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "not found; metrics are at /metrics\n",
        ));
    }
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(response);
    }
    // The status comes from the daemon's state, which a panic in `source` leaves as it was
    // (it only reads): the panic is this request's 500, nothing broken is seen afterwards.
    match tokio::task::spawn_blocking(move || render(source())).await {
        Ok(text) => {
            let mut response = Response::new(Full::new(Bytes::from(text)));
            response
                .headers_mut()
                .insert(CONTENT_TYPE_HEADER, HeaderValue::from_static(CONTENT_TYPE));
            // hyper leaves the body out of an answer to HEAD and keeps its length.
            Ok(response)
        }
        Err(_) => Ok(plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the status could not be taken\n",
        )),
    }
}

/// A short plain-text answer.
fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE_HEADER,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn node() -> NodeStatus {
        NodeStatus {
            taken_unix_ms: 1_700_000_000_250,
            problems: vec!["one".to_string()],
            ..NodeStatus::default()
        }
    }

    fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request).unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        reply
    }

    #[test]
    fn serves_metrics_and_refuses_the_rest() {
        let server = MetricsServer::spawn("127.0.0.1:0".parse().unwrap(), Arc::new(node)).unwrap();
        let addr = server.local_addr();
        let reply = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains(&format!("Content-Type: {CONTENT_TYPE}")));
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert_eq!(body, render(node()));
        let reply = exchange(addr, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(reply.contains("\r\n\r\n# HELP "), "{reply}");
        let reply = exchange(addr, b"HEAD /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 200 OK") && reply.ends_with("\r\n\r\n"));
        assert!(reply.contains(&format!("Content-Length: {}", body.len())));
        let reply = exchange(addr, b"GET /other HTTP/1.1\r\nHost: t\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 404 "), "{reply}");
        let reply = exchange(addr, b"GET /metricsx HTTP/1.1\r\nHost: t\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 404 "), "{reply}");
        let reply = exchange(addr, b"DELETE /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 405 ") && reply.contains("Allow: GET, HEAD"));
        let reply = exchange(addr, b"nonsense\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 400 "), "{reply}");
        let huge = format!(
            "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD)
        );
        let reply = exchange(addr, huge.as_bytes());
        assert!(reply.starts_with("HTTP/1.1 431 "), "{reply}");
        // A client that goes away mid-request does not stop the server.
        drop(TcpStream::connect(addr).unwrap());
        let reply = exchange(addr, b"GET /metrics HTTP/1.0\n\n");
        assert!(reply.starts_with("HTTP/1.0 200 OK"), "{reply}");
    }

    #[test]
    fn a_panicking_source_is_a_500_and_the_server_goes_on() {
        let source: StatusSource = Arc::new(|| panic!("no status"));
        let server = MetricsServer::spawn("127.0.0.1:0".parse().unwrap(), source).unwrap();
        for _ in 0..2 {
            let reply = exchange(server.local_addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
            assert!(reply.starts_with("HTTP/1.1 500 "), "{reply}");
        }
    }

    #[test]
    fn a_taken_address_is_a_clear_error() {
        let first = MetricsServer::spawn("127.0.0.1:0".parse().unwrap(), Arc::new(node)).unwrap();
        let e = MetricsServer::spawn(first.local_addr(), Arc::new(node)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(&first.local_addr().to_string()), "{text}");
        assert!(text.contains("no other program listens"), "{text}");
    }

    #[test]
    fn a_stopped_server_refuses_connections() {
        let server = MetricsServer::spawn("127.0.0.1:0".parse().unwrap(), Arc::new(node)).unwrap();
        let addr = server.local_addr();
        drop(server);
        assert!(TcpStream::connect(addr).is_err());
    }
}
