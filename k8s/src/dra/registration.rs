//! The driver's two sockets: the DRA service in its own folder, then the registration in the
//! kubelet's plugins_registry directory. The kubelet's plugin watcher finds the registration
//! socket, calls GetInfo (type, driver name, the DRA socket and the services served) and
//! reports the outcome through NotifyRegistrationStatus. A restarted kubelet scans the
//! directory again, so the sockets only need to stay; if either is removed or replaced,
//! both are served again (a few times a second, the socket's identity is compared).

use super::prepare::DraService;
use super::{registration_socket, Driver, DRIVER, PLUGIN_TYPE, SERVICES};
use crate::plugin::registration::{identity, Identity};
use crate::proto::dra::dra_plugin_server::DraPluginServer;
use crate::proto::pluginregistration::registration_server::{Registration, RegistrationServer};
use crate::proto::pluginregistration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status};

/// How often the sockets are looked at.
const POLL: Duration = Duration::from_millis(200);
/// How long to wait before serving again after a failure.
const RETRY: Duration = Duration::from_secs(1);

/// What the driver tells the plugin watcher.
struct RegistrationService {
    info: PluginInfo,
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            tracing::info!("the kubelet registered DRA driver {DRIVER}");
        } else {
            tracing::error!(
                "the kubelet refused DRA driver {DRIVER}: {}; check that the kubelet is 1.34 or later (DRA v1)",
                status.error
            );
        }
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}

/// The registration's answer for this driver.
pub fn plugin_info(dra_socket: &std::path::Path) -> PluginInfo {
    PluginInfo {
        r#type: PLUGIN_TYPE.into(),
        name: DRIVER.into(),
        endpoint: dra_socket.display().to_string(),
        supported_versions: SERVICES.iter().map(|s| s.to_string()).collect(),
    }
}

/// Serves both sockets until the process ends.
pub async fn run(driver: Arc<Driver>) {
    let dra = driver.config.dra_socket();
    let registration = driver.config.registry_dir.join(registration_socket());
    loop {
        let servers = match serve(&driver, &dra, &registration) {
            Ok(servers) => servers,
            Err(e) => {
                tracing::error!("cannot serve the DRA driver's sockets: {e}; trying again");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let served: [Option<Identity>; 2] = [identity(&dra), identity(&registration)];
        tracing::info!(
            "serving DRA driver {DRIVER} on {}, registration on {}",
            dra.display(),
            registration.display()
        );
        loop {
            tokio::time::sleep(POLL).await;
            if [identity(&dra), identity(&registration)] != served {
                tracing::info!("a socket of the driver was removed or replaced; serving again");
                break;
            }
        }
        for server in servers {
            server.abort();
        }
    }
}

/// Binds the DRA socket, then the registration socket (the kubelet connects to the DRA
/// socket as soon as it has the registration's answer), and serves them.
fn serve(
    driver: &Arc<Driver>,
    dra: &PathBuf,
    registration: &PathBuf,
) -> Result<Vec<JoinHandle<()>>, String> {
    let bind = |path: &PathBuf| {
        crate::uds::bind(path).map_err(|e| format!("cannot bind {}: {e}", path.display()))
    };
    let incoming = bind(dra)?;
    let service = DraPluginServer::new(DraService::new(driver.clone()));
    let dra_server = tokio::spawn(async move {
        if let Err(e) = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
        {
            tracing::error!("serving the DRA service stopped: {e}");
        }
    });
    let incoming = match bind(registration) {
        Ok(incoming) => incoming,
        Err(e) => {
            dra_server.abort();
            return Err(e);
        }
    };
    let service = RegistrationServer::new(RegistrationService {
        info: plugin_info(dra),
    });
    let registration_server = tokio::spawn(async move {
        if let Err(e) = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
        {
            tracing::error!("serving the registration stopped: {e}");
        }
    });
    Ok(vec![dra_server, registration_server])
}
