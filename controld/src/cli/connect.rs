//! What a client command needs from its flags: the control socket, and a container's
//! limits read into the library's types.

use super::declaration::{Limits, Place, Socket};
use super::error::CliError;
use std::path::{Path, PathBuf};
use tessera_controld::api::{Answer, Client, Request};
use tessera_controld::config::{Config, DEFAULT_PATH};
use tessera_controld::policy::{ComputePolicy, Priority, Timeslice};
use tessera_controld::spec::{ContainerName, ContainerSpec, Gpus, MemorySize};
use tessera_controld::state::{ContainerInfo, MemoryChange, SpecChange};

/// The daemon a client command talks to.
pub struct Target<'a> {
    /// `--config` and `--state-dir`.
    pub place: &'a Place,
    /// `--socket`.
    pub socket: Socket,
}

impl Target<'_> {
    /// The control socket: `--socket`, else the config's `[daemon]` settings, else
    /// `<state dir>/control.sock`.
    pub fn socket(&self) -> Result<PathBuf, CliError> {
        if let Some(path) = &self.socket.path {
            return Ok(path.clone());
        }
        let config = match &self.place.config {
            Some(path) => Some(Config::load(path)?),
            // The default config is read only if it is there and good; the daemon reports it.
            None => Config::load(Path::new(DEFAULT_PATH)).ok(),
        };
        let dir =
            tessera_controld::daemon::state_dir(self.place.state_dir.as_deref(), config.as_ref());
        Ok(tessera_controld::daemon::socket_path(&dir, config.as_ref()))
    }

    /// One request and its answer.
    pub fn call(&self, request: &Request) -> Result<Answer, CliError> {
        let mut client = Client::connect(&self.socket()?)?;
        Ok(client.call(request)?)
    }

    /// The containers the daemon has.
    pub fn containers(&self) -> Result<Vec<ContainerInfo>, CliError> {
        match self.call(&Request::List {})? {
            Answer::Containers(list) => Ok(list),
            _ => Err(CliError::Unexpected),
        }
    }
}

impl Limits {
    /// A new container's spec: the limits given, the defaults for the others.
    pub fn spec(&self, name: ContainerName) -> Result<ContainerSpec, CliError> {
        let change = self.change()?;
        Ok(ContainerSpec {
            name,
            gpus: match change.gpus {
                Some(gpus) => gpus,
                None => Gpus::new(vec![0])?,
            },
            memory: change.memory.and_then(|m| match m {
                MemoryChange::Cap(size) => Some(size),
                MemoryChange::Unlimited => None,
            }),
            compute: change.compute.unwrap_or_default(),
            priority: change.priority.unwrap_or_default(),
            timeslice: change.timeslice,
        })
    }

    /// The limits given, as a change to a container.
    pub fn change(&self) -> Result<SpecChange, CliError> {
        Ok(SpecChange {
            gpus: self.gpus.as_deref().map(Gpus::parse).transpose()?,
            memory: self.memory.as_deref().map(memory).transpose()?,
            compute: self
                .compute
                .as_deref()
                .map(str::parse::<ComputePolicy>)
                .transpose()?,
            priority: self
                .priority
                .as_deref()
                .map(str::parse::<Priority>)
                .transpose()?,
            timeslice: self
                .timeslice
                .as_deref()
                .map(str::parse::<Timeslice>)
                .transpose()?,
        })
    }
}

/// `--memory`: a size, or `unlimited`.
fn memory(text: &str) -> Result<MemoryChange, CliError> {
    if text.trim() == "unlimited" {
        return Ok(MemoryChange::Unlimited);
    }
    let bytes = tessera_region::units::parse_size(text)?;
    Ok(MemoryChange::Cap(MemorySize(bytes)))
}
