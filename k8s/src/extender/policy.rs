//! How pods are placed: `binpack` (fill a card, then a node, before the next: whole cards
//! stay free for big jobs) or `spread` (lowest load first: fewer noisy neighbours), chosen
//! at two levels, among nodes and among a node's cards.
//!
//! The cluster default is in the extender's config, per priority: online pods spread (so one
//! card's online work does not hold back another online service), offline pods packed. A
//! pod overrides either level with `tessera.dev/node-policy` or `tessera.dev/card-policy`.

use crate::annotations::{CARD_POLICY, NODE_POLICY, PRIORITY};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;
use tessera_controld::policy::Priority;

/// One level's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// The fullest that fits first.
    Binpack,
    /// The emptiest first.
    Spread,
}

impl FromStr for Policy {
    type Err = ();

    fn from_str(text: &str) -> Result<Policy, ()> {
        match text.trim() {
            "binpack" => Ok(Policy::Binpack),
            "spread" => Ok(Policy::Spread),
            _ => Err(()),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Policy::Binpack => "binpack",
            Policy::Spread => "spread",
        })
    }
}

/// The rule at each level, for one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// Among nodes (prioritize).
    pub node: Policy,
    /// Among a node's cards (bind).
    pub card: Policy,
}

/// The extender's config file (YAML), every key optional:
///
/// ```yaml
/// online: {node: spread, card: spread}
/// offline: {node: binpack, card: binpack}
/// assumeSeconds: 60
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Config {
    /// The placement of online pods.
    pub online: Placement,
    /// The placement of offline pods.
    pub offline: Placement,
    /// How long a card chosen at bind counts before the pod is seen bound (the assume TTL).
    pub assume_seconds: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            online: Placement {
                node: Policy::Spread,
                card: Policy::Spread,
            },
            offline: Placement {
                node: Policy::Binpack,
                card: Policy::Binpack,
            },
            assume_seconds: 60,
        }
    }
}

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// It cannot be read.
    #[error("cannot read the extender config {0}: {1}")]
    Read(String, std::io::Error),
    /// It is not what [`Config`] describes.
    #[error("extender config {0}: {1} (keys: online, offline (each {{node, card}} of binpack|spread), assumeSeconds)")]
    Parse(String, serde_yaml::Error),
    /// A TTL of zero would count nothing between bind and the watch.
    #[error("extender config {0}: assumeSeconds must be at least 1")]
    Ttl(String),
}

impl Config {
    /// Reads a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError::Read(shown.clone(), e))?;
        Config::parse(&text).map_err(|e| match e {
            ConfigError::Parse(_, inner) => ConfigError::Parse(shown.clone(), inner),
            ConfigError::Ttl(_) => ConfigError::Ttl(shown.clone()),
            other => other,
        })
    }

    /// Reads a config from YAML text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let config: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            serde_yaml::from_str(text).map_err(|e| ConfigError::Parse("text".into(), e))?
        };
        if config.assume_seconds == 0 {
            return Err(ConfigError::Ttl("text".into()));
        }
        Ok(config)
    }

    /// The assume TTL.
    pub fn assume_ttl(&self) -> Duration {
        Duration::from_secs(self.assume_seconds)
    }

    /// The placement of a pod with these annotations: its priority's default, then its own
    /// overrides. A value that is not understood is an error naming the annotation.
    pub fn placement(&self, annotations: &BTreeMap<String, String>) -> Result<Placement, String> {
        let priority = match annotations.get(PRIORITY) {
            None => Priority::default(),
            Some(text) => text
                .parse()
                .map_err(|_| format!("annotation {PRIORITY}={text:?} is not online or offline"))?,
        };
        let mut placement = match priority {
            Priority::Online => self.online,
            Priority::Offline => self.offline,
        };
        for (key, level) in [
            (NODE_POLICY, &mut placement.node),
            (CARD_POLICY, &mut placement.card),
        ] {
            if let Some(text) = annotations.get(key) {
                *level = text
                    .parse()
                    .map_err(|()| format!("annotation {key}={text:?} is not binpack or spread"))?;
            }
        }
        Ok(placement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations::map;

    #[test]
    fn online_spreads_offline_packs_and_annotations_override() {
        let config = Config::default();
        let online = config.placement(&map(&[])).unwrap();
        assert_eq!((online.node, online.card), (Policy::Spread, Policy::Spread));
        let offline = config.placement(&map(&[(PRIORITY, "offline")])).unwrap();
        assert_eq!(
            (offline.node, offline.card),
            (Policy::Binpack, Policy::Binpack)
        );
        let mixed = config
            .placement(&map(&[(PRIORITY, "offline"), (CARD_POLICY, "spread")]))
            .unwrap();
        assert_eq!((mixed.node, mixed.card), (Policy::Binpack, Policy::Spread));
        let err = config
            .placement(&map(&[(NODE_POLICY, "pack")]))
            .unwrap_err();
        assert!(
            err.contains(NODE_POLICY) && err.contains("\"pack\""),
            "{err}"
        );
    }

    #[test]
    fn the_config_file_sets_the_defaults_and_refuses_what_it_does_not_know() {
        let config =
            Config::parse("online: {node: binpack, card: spread}\nassumeSeconds: 5\n").unwrap();
        assert_eq!(config.online.node, Policy::Binpack);
        assert_eq!(config.offline, Config::default().offline);
        assert_eq!(config.assume_ttl(), Duration::from_secs(5));
        assert_eq!(Config::parse("").unwrap(), Config::default());
        for bad in [
            "online: {node: pack, card: spread}",
            "spreadAll: true",
            "assumeSeconds: 0",
        ] {
            let err = Config::parse(bad).unwrap_err().to_string();
            assert!(err.contains("extender config"), "{bad}: {err}");
        }
    }
}
