//! The extender as the simulator runs it: on its own runtime, so that a restart is a crash,
//! every task of the old one (its watches, its requests in flight) gone at once, and the new
//! one starts from what the API server holds.

use crate::extender::policy::Config;
use crate::extender::{http, watch, Extender};
use std::net::SocketAddr;
use std::sync::Arc;

/// One running extender.
pub struct SimExtender {
    runtime: Option<tokio::runtime::Runtime>,
    /// Where it listens (the same address across restarts, as a Service's would be).
    pub addr: SocketAddr,
    /// Its state, for tests that look inside.
    pub extender: Arc<Extender>,
}

impl SimExtender {
    /// Starts an extender on `addr` (port 0: any) that watches and binds through `kube`.
    pub fn start(
        addr: SocketAddr,
        config: Config,
        kube: kube::Client,
    ) -> std::io::Result<SimExtender> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sim-extender")
            .enable_all()
            .build()?;
        let extender = Arc::new(Extender::new(config, Some(kube.clone())));
        let served = extender.clone();
        runtime.spawn(async move {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => {
                    let _ = http::serve(listener, served).await;
                }
                Err(e) => tracing::error!("simulated extender cannot listen: {e}"),
            }
        });
        runtime.spawn(watch::follow(extender.clone(), kube));
        Ok(SimExtender {
            runtime: Some(runtime),
            addr,
            extender,
        })
    }

    /// Kills it: every task stops where it is.
    pub fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for SimExtender {
    fn drop(&mut self) {
        self.kill();
    }
}
