//! What a pod asks of the cards: its `tessera.dev/gpu-core` and `tessera.dev/gpu-memory`
//! requests, per container and summed over its containers (an init container runs alone, so
//! the pod needs the largest of them or the sum of the rest, whichever is more). The
//! extender places the sum; the device plugin matches a container's own request to the
//! kubelet's.

use crate::ids::{CORES_PER_GPU, CORE_RESOURCE, MEMORY_RESOURCE, MEMORY_UNIT};
use k8s_openapi::api::core::v1::{Container, Pod};
use std::fmt;

/// Core and memory, on one card or as whole cards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ask {
    /// Percent of a card; 100·n is n whole cards.
    pub core: u32,
    /// Bytes.
    pub memory: u64,
}

impl Ask {
    /// Whether it asks whole cards (a multiple of 100 core).
    pub fn is_whole(&self) -> bool {
        crate::ids::is_whole(self.core as usize)
    }

    /// How many cards it takes.
    pub fn cards(&self) -> usize {
        if self.is_whole() {
            (self.core / CORES_PER_GPU) as usize
        } else {
            1
        }
    }

    /// Whether it asks nothing of Tessera (the extender lets such pods pass everywhere).
    pub fn is_none(&self) -> bool {
        self.core == 0 && self.memory == 0
    }

    /// Reads a pod's requests. A request that cannot be honoured is an error that says why.
    pub fn of(pod: &Pod) -> Result<Ask, String> {
        let Some(spec) = &pod.spec else {
            return Err("the pod has no spec".into());
        };
        let mut sum = Ask::default();
        for container in &spec.containers {
            let one = Ask::of_container(container)?;
            sum.core = sum.core.saturating_add(one.core);
            sum.memory = sum.memory.saturating_add(one.memory);
        }
        for container in spec.init_containers.iter().flatten() {
            let one = Ask::of_container(container)?;
            sum.core = sum.core.max(one.core);
            sum.memory = sum.memory.max(one.memory);
        }
        if sum.core == 0 && sum.memory > 0 {
            return Err(format!(
                "the pod asks {MEMORY_RESOURCE} without {CORE_RESOURCE}; ask for both, the core request is its share of GPU time"
            ));
        }
        if sum.core > CORES_PER_GPU && !sum.is_whole() {
            return Err(format!(
                "the pod asks {} {CORE_RESOURCE}: more than one card and not whole cards (a multiple of {CORES_PER_GPU})",
                sum.core
            ));
        }
        Ok(sum)
    }
}

impl fmt::Display for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_whole() {
            write!(f, "{} whole card(s)", self.cards())
        } else {
            write!(
                f,
                "{} core and {} GiB",
                self.core,
                self.memory / MEMORY_UNIT
            )
        }
    }
}

impl Ask {
    /// One container's two requests; limits stand for requests where only they are set, as
    /// the API server does for extended resources.
    pub fn of_container(container: &Container) -> Result<Ask, String> {
        let Some(resources) = &container.resources else {
            return Ok(Ask::default());
        };
        let amount = |name: &str| -> Result<u64, String> {
            let quantity = resources
                .requests
                .as_ref()
                .and_then(|r| r.get(name))
                .or_else(|| resources.limits.as_ref().and_then(|l| l.get(name)));
            match quantity {
                None => Ok(0),
                Some(q) => q.0.trim().parse::<u64>().map_err(|_| {
                    format!(
                        "container {} asks {name}: {:?}, which is not a whole number",
                        container.name, q.0
                    )
                }),
            }
        };
        let core = amount(CORE_RESOURCE)?;
        let core = u32::try_from(core)
            .map_err(|_| format!("container {} asks {core} {CORE_RESOURCE}", container.name))?;
        let memory = amount(MEMORY_RESOURCE)?.saturating_mul(MEMORY_UNIT);
        Ok(Ask { core, memory })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": containers},
        }))
        .unwrap()
    }

    fn limits(core: &str, memory: &str) -> serde_json::Value {
        serde_json::json!({"name": "c", "resources": {"limits": {CORE_RESOURCE: core, MEMORY_RESOURCE: memory}}})
    }

    #[test]
    fn requests_add_up_over_containers() {
        let ask = Ask::of(&pod(serde_json::json!([
            limits("30", "4"),
            limits("20", "2")
        ])))
        .unwrap();
        assert_eq!(
            ask,
            Ask {
                core: 50,
                memory: 6 * MEMORY_UNIT
            }
        );
        assert!(!ask.is_whole());
        let whole = Ask::of(&pod(serde_json::json!([limits("200", "0")]))).unwrap();
        assert!(whole.is_whole() && whole.cards() == 2);
        assert!(Ask::of(&pod(serde_json::json!([{"name": "c"}])))
            .unwrap()
            .is_none());
    }

    #[test]
    fn requests_that_cannot_be_placed_say_why() {
        for (core, memory, words) in [
            ("150", "4", "not whole cards"),
            ("0", "4", "without"),
            ("3.5", "4", "not a whole number"),
            ("30", "4Gi", "not a whole number"),
        ] {
            let err = Ask::of(&pod(serde_json::json!([limits(core, memory)]))).unwrap_err();
            assert!(err.contains(words), "{core}/{memory}: {err}");
        }
    }
}
