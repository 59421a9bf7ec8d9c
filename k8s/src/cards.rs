//! The node's cards, read once from NVML at start, and their health, read again and again.

use crate::ids::{DeviceId, Resource, CORES_PER_GPU, MEMORY_UNIT};
use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;
use tessera_controld::watchdog::{Nvml, NvmlError, LIBRARY};
use tokio::sync::watch;

/// One physical card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    /// NVML index: controld's GPU number.
    pub index: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// Marketing name.
    pub model: String,
    /// Device memory in bytes.
    pub memory: u64,
    /// Streaming multiprocessors, where NVML tells.
    pub sms: Option<u32>,
}

impl Card {
    /// How many IDs of `resource` the card has.
    pub fn units(&self, resource: Resource) -> u32 {
        match resource {
            Resource::Core => CORES_PER_GPU,
            Resource::Memory => u32::try_from(self.memory / MEMORY_UNIT).unwrap_or(u32::MAX),
        }
    }

    /// Its IDs of `resource`.
    pub fn ids(&self, resource: Resource) -> impl Iterator<Item = DeviceId> + '_ {
        (0..self.units(resource)).map(move |number| DeviceId {
            uuid: self.uuid.clone(),
            resource,
            number,
        })
    }
}

/// The node's NVML and its cards.
pub struct Cards {
    nvml: Nvml,
    /// By NVML index.
    pub list: Vec<Card>,
}

impl Cards {
    /// Loads NVML and lists the cards.
    pub fn load() -> Result<Cards, NvmlError> {
        let nvml = Nvml::load(OsStr::new(LIBRARY))?;
        let list = nvml
            .sample()?
            .into_iter()
            .map(|gpu| Card {
                index: gpu.index,
                sms: nvml.sms(gpu.index),
                uuid: gpu.uuid,
                model: gpu.name,
                memory: gpu.memory_total,
            })
            .collect();
        Ok(Cards { nvml, list })
    }

    /// The card of a UUID.
    pub fn by_uuid(&self, uuid: &str) -> Option<&Card> {
        self.list.iter().find(|c| c.uuid == uuid)
    }

    /// Which cards answer NVML now, by index.
    pub fn health(&self) -> Vec<bool> {
        self.list
            .iter()
            .map(|card| self.nvml.check_device(card.index).is_ok())
            .collect()
    }

    /// Why a card fails its health check, if it does.
    pub fn problem(&self, card: &Card) -> Option<String> {
        self.nvml
            .check_device(card.index)
            .err()
            .map(|e| e.to_string())
    }
}

/// Checks every card each `interval` and publishes the health when it changes.
pub async fn watch_health(cards: Arc<Cards>, interval: Duration, health: watch::Sender<Vec<bool>>) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let cards2 = cards.clone();
        let Ok(now) = tokio::task::spawn_blocking(move || cards2.health()).await else {
            continue;
        };
        let changed = health.send_if_modified(|old| {
            if *old == now {
                return false;
            }
            for (card, (was, is)) in cards.list.iter().zip(old.iter().zip(&now)) {
                if was != is {
                    if *is {
                        tracing::info!("GPU {} ({}) is healthy again", card.index, card.uuid);
                    } else {
                        let why = cards.problem(card).unwrap_or_default();
                        tracing::warn!(
                            "GPU {} ({}) failed its health check ({why}); its IDs are unhealthy",
                            card.index,
                            card.uuid
                        );
                    }
                }
            }
            *old = now.clone();
            true
        });
        let _ = changed;
    }
}
