//! controld, as the plugin sees it: its control API, one short connection per call, run off
//! the async threads (the client blocks).

use std::path::{Path, PathBuf};
use tessera_controld::api::{Answer, Client, ClientError, Request};
use tessera_controld::spec::ContainerSpec;
use tessera_controld::state::{ContainerInfo, SpecChange};
use tessera_controld::status::NodeStatus;

/// The daemon's control socket.
#[derive(Debug, Clone)]
pub struct Controld {
    socket: PathBuf,
}

/// A call that failed: the daemon's own one-line reason.
#[derive(Debug, thiserror::Error)]
#[error("controld: {0}")]
pub struct ControldError(pub String);

impl From<ClientError> for ControldError {
    fn from(e: ClientError) -> Self {
        ControldError(e.to_string())
    }
}

impl Controld {
    /// The daemon whose state dir is `state_dir`.
    pub fn new(state_dir: &Path) -> Controld {
        Controld {
            socket: state_dir.join(tessera_controld::daemon::SOCKET_NAME),
        }
    }

    async fn call(&self, request: Request) -> Result<Answer, ControldError> {
        let socket = self.socket.clone();
        tokio::task::spawn_blocking(move || Client::connect(&socket)?.call(&request))
            .await
            .map_err(|e| ControldError(format!("the call did not finish: {e}")))?
            .map_err(ControldError::from)
    }

    /// Adds a container.
    pub async fn add(&self, container: ContainerSpec) -> Result<ContainerInfo, ControldError> {
        match self
            .call(Request::Add {
                container,
                transient: false,
            })
            .await?
        {
            Answer::Container(info) => Ok(info),
            other => Err(unexpected(&other)),
        }
    }

    /// Changes a container in place.
    pub async fn set(
        &self,
        name: &str,
        change: SpecChange,
    ) -> Result<ContainerInfo, ControldError> {
        match self
            .call(Request::Set {
                name: name.to_string(),
                change,
            })
            .await?
        {
            Answer::Container(info) => Ok(info),
            other => Err(unexpected(&other)),
        }
    }

    /// Removes a container, live processes or not (its pod is gone).
    pub async fn remove(&self, name: &str) -> Result<(), ControldError> {
        self.call(Request::Rm {
            name: name.to_string(),
            force: true,
        })
        .await
        .map(|_| ())
    }

    /// Every container.
    pub async fn list(&self) -> Result<Vec<ContainerInfo>, ControldError> {
        match self.call(Request::List {}).await? {
            Answer::Containers(list) => Ok(list),
            other => Err(unexpected(&other)),
        }
    }

    /// The node now: live memory and measured shares.
    pub async fn status(&self) -> Result<NodeStatus, ControldError> {
        match self.call(Request::Status {}).await? {
            Answer::Status(status) => Ok(*status),
            other => Err(unexpected(&other)),
        }
    }
}

fn unexpected(answer: &Answer) -> ControldError {
    ControldError(format!(
        "unexpected answer {answer:?}; run a controld of the same release"
    ))
}
