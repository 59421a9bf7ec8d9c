//! Which container the kubelet is admitting, so that GetPreferredAllocation can honour the
//! card the scheduler extender recorded on its pod (`tessera.dev/gpu`).
//!
//! The kubelet's GetPreferredAllocation names no pod: only the free IDs and a size. But the
//! kubelet admits the pods bound to its node one at a time, oldest first (it sorts new pods
//! by creation time), and within a pod its init containers and then its containers, in
//! order, each resource of one container before the next container. So the container being
//! admitted is a container that holds the other resource's IDs already (half way through),
//! or else, of the pods bound here and not running yet, the oldest one's first container that
//! asks this resource and holds none of its IDs yet (pod-resources tells which do). Only
//! containers whose request is the size asked count, and only where the pod's recorded card
//! offers that many IDs; when none does, there is no guess, and the plugin falls back to its
//! own preference (PreStart then says what went wrong, if anything did).

use super::prefer::Ask;
use super::Node;
use crate::annotations::recorded_cards;
use crate::ids::{is_whole, DeviceId, Resource, CORES_PER_GPU, MEMORY_UNIT};
use crate::podresources::{self, Holding};
use crate::requests;
use k8s_openapi::api::core::v1::Pod;
use std::time::Duration;

/// How long the plugin looks for the pod before it answers the kubelet without it.
const PATIENCE: Duration = Duration::from_secs(2);

/// The container the kubelet is admitting, as far as the plugin can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitting {
    /// `namespace/pod/container`.
    pub who: String,
    /// The cards the extender recorded for its pod.
    pub cards: Vec<String>,
    /// Whether it holds IDs of the other resource already.
    pub half_way: bool,
}

/// The container the kubelet is admitting now for `ask` of `resource`, from the API server's
/// pods bound to this node and the kubelet's pod-resources; `None`, logged, when either
/// cannot be read in time.
pub async fn lookup(node: &Node, resource: Resource, ask: &Ask) -> Option<Admitting> {
    let pods = crate::pods::on_node(&node.kube, &node.config.node_name);
    let holdings = podresources::list(&node.config.pod_resources_socket);
    let read = tokio::time::timeout(PATIENCE, async { tokio::join!(pods, holdings) }).await;
    let (pods, holdings) = match read {
        Ok((Ok(pods), Ok(holdings))) => (pods, holdings),
        Ok((Err(e), _)) => {
            tracing::warn!("cannot list the pods bound to this node ({e}); choosing {} IDs without the scheduler's record", resource.name());
            return None;
        }
        Ok((_, Err(e))) => {
            tracing::warn!(
                "{e}; choosing {} IDs without the scheduler's record",
                resource.name()
            );
            return None;
        }
        Err(_) => {
            tracing::warn!(
                "no list of pods and pod-resources in {PATIENCE:?}; choosing {} IDs without the scheduler's record",
                resource.name()
            );
            return None;
        }
    };
    find(&pods, &holdings, resource, ask)
}

/// The container the kubelet is admitting now for `ask` of `resource`, of `pods` (those bound
/// to this node) and `holdings` (pod-resources: who holds IDs already); `None` when no pod
/// with a recorded card fits the request.
pub fn find(
    pods: &[Pod],
    holdings: &[Holding],
    resource: Resource,
    ask: &Ask,
) -> Option<Admitting> {
    let mut candidates: Vec<(&Pod, Admitting)> = pods
        .iter()
        .filter_map(|pod| next_container(pod, holdings, resource, ask.size).map(|a| (pod, a)))
        .filter(|(_, a)| offered(ask, resource, &a.cards))
        .collect();
    // A container that holds the other resource already is the one half way through; else
    // the kubelet's own order: by creation, then (for pods of one second) by name.
    candidates.sort_by_cached_key(|(p, a)| {
        (
            !a.half_way,
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.metadata.namespace.clone(),
            p.metadata.name.clone(),
        )
    });
    candidates.into_iter().next().map(|(_, a)| a)
}

/// The pod's container that would ask `resource` next, when it asks `size` of it and the pod
/// has cards recorded; `None` otherwise.
fn next_container(
    pod: &Pod,
    holdings: &[Holding],
    resource: Resource,
    size: usize,
) -> Option<Admitting> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    // A pod past Pending was admitted already.
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase.is_some_and(|p| p != "Pending") {
        return None;
    }
    let cards = recorded_cards(pod.metadata.annotations.as_ref()?)?;
    let spec = pod.spec.as_ref()?;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref()?;
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    for container in containers {
        let asked = match requests::Ask::of_container(container) {
            Ok(a) => a,
            Err(_) => return None,
        };
        let asked = match resource {
            Resource::Core => asked.core as usize,
            Resource::Memory => asked.memory.div_ceil(MEMORY_UNIT) as usize,
        };
        if asked == 0 {
            continue;
        }
        let holding = holdings
            .iter()
            .find(|h| h.namespace == namespace && h.pod == name && h.container == container.name);
        let (this, other) = match (holding, resource) {
            (None, _) => (false, false),
            (Some(h), Resource::Core) => (!h.core.is_empty(), !h.memory.is_empty()),
            (Some(h), Resource::Memory) => (!h.memory.is_empty(), !h.core.is_empty()),
        };
        if this {
            continue;
        }
        return (asked == size).then(|| Admitting {
            who: format!("{namespace}/{name}/{}", container.name),
            cards,
            half_way: other,
        });
    }
    None
}

/// Whether the kubelet offers enough IDs of `resource` on `cards` for the request: on one
/// card for a share, and on enough whole cards (every core ID free) for whole cards.
fn offered(ask: &Ask, resource: Resource, cards: &[String]) -> bool {
    let on = |uuid: &str| {
        ask.available
            .iter()
            .filter_map(|t| DeviceId::parse(t).ok())
            .filter(|id| id.resource == resource && id.uuid == uuid)
            .count()
    };
    let card = CORES_PER_GPU as usize;
    if resource == Resource::Core && is_whole(ask.size) {
        cards.iter().filter(|c| on(c) >= card).count() * card >= ask.size
    } else {
        cards.iter().any(|c| on(c) >= ask.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations::GPU;
    use crate::ids::{CORE_RESOURCE, MEMORY_RESOURCE};

    const A: &str = "GPU-0000000a-0000-0000-0000-000000000000";
    const B: &str = "GPU-0000000b-0000-0000-0000-000000000000";

    fn pod(name: &str, created: &str, gpu: &str, containers: &[(&str, u32, u32)]) -> Pod {
        let containers: Vec<_> = containers
            .iter()
            .map(|(name, core, memory)| {
                serde_json::json!({"name": name, "resources": {"limits": {
                    CORE_RESOURCE: core.to_string(), MEMORY_RESOURCE: memory.to_string()}}})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created,
                         "annotations": {GPU: gpu}},
            "spec": {"nodeName": "n", "containers": containers},
            "status": {"phase": "Pending"},
        }))
        .unwrap()
    }

    fn ids(uuid: &str, resource: Resource, count: u32) -> Vec<String> {
        DeviceId::texts(uuid, resource, 0..count)
    }

    fn ask(size: usize) -> Ask {
        let mut available = ids(A, Resource::Core, 100);
        available.extend(ids(B, Resource::Core, 100));
        Ask {
            available,
            must_include: vec![],
            size,
        }
    }

    #[test]
    fn the_oldest_pending_pod_of_that_size_is_the_one_admitted() {
        let pods = [
            pod("late", "2026-01-01T00:00:09Z", B, &[("main", 30, 4)]),
            pod("early", "2026-01-01T00:00:01Z", A, &[("main", 30, 4)]),
            pod("other-size", "2026-01-01T00:00:00Z", B, &[("main", 20, 4)]),
        ];
        let found = find(&pods, &[], Resource::Core, &ask(30)).unwrap();
        assert_eq!(found.who, "ns/early/main");
        assert_eq!(found.cards, [A]);
        // Once "early" holds its core IDs, the next is "late".
        let held = Holding {
            namespace: "ns".into(),
            pod: "early".into(),
            container: "main".into(),
            core: ids(A, Resource::Core, 30),
            memory: vec![],
        };
        let found = find(&pods, std::slice::from_ref(&held), Resource::Core, &ask(30)).unwrap();
        assert_eq!(found.cards, [B]);
        // "early" holds its core and waits for its memory: it is the one asking memory, though
        // "other-size" is older and asks as much.
        let mut memory = ask(4);
        memory.available = ids(A, Resource::Memory, 40);
        memory.available.extend(ids(B, Resource::Memory, 40));
        let found = find(&pods, &[held], Resource::Memory, &memory).unwrap();
        assert_eq!(found.who, "ns/early/main");
    }

    #[test]
    fn containers_are_taken_in_order_and_running_pods_are_done() {
        let two = pod(
            "two",
            "2026-01-01T00:00:01Z",
            A,
            &[("first", 20, 2), ("second", 10, 2)],
        );
        // The first container asks 20: a request of 10 is not this pod's yet.
        assert_eq!(
            find(std::slice::from_ref(&two), &[], Resource::Core, &ask(10)),
            None
        );
        let held = Holding {
            namespace: "ns".into(),
            pod: "two".into(),
            container: "first".into(),
            core: ids(A, Resource::Core, 20),
            memory: ids(A, Resource::Memory, 2),
        };
        let found = find(
            std::slice::from_ref(&two),
            &[held],
            Resource::Core,
            &ask(10),
        );
        assert_eq!(found.unwrap().who, "ns/two/second");
        let mut running = two;
        running.status.as_mut().unwrap().phase = Some("Running".into());
        assert_eq!(find(&[running], &[], Resource::Core, &ask(20)), None);
    }

    #[test]
    fn a_record_the_offer_cannot_meet_or_cannot_read_is_no_guess() {
        // The recorded card offers only 10 free core IDs.
        let mut short = ask(30);
        short.available = ids(A, Resource::Core, 10);
        short.available.extend(ids(B, Resource::Core, 100));
        let pods = [pod("p", "2026-01-01T00:00:01Z", A, &[("main", 30, 4)])];
        assert_eq!(find(&pods, &[], Resource::Core, &short), None);
        let garbled = [pod(
            "p",
            "2026-01-01T00:00:01Z",
            "card zero",
            &[("main", 30, 4)],
        )];
        assert_eq!(find(&garbled, &[], Resource::Core, &ask(30)), None);
        // Whole cards: each recorded card must offer all its IDs.
        let whole = [pod(
            "w",
            "2026-01-01T00:00:01Z",
            &format!("{A},{B}"),
            &[("main", 200, 0)],
        )];
        let found = find(&whole, &[], Resource::Core, &ask(200)).unwrap();
        assert_eq!(found.cards, [A, B]);
        let mut partly = ask(200);
        partly.available.retain(|t| !t.ends_with("-core-0"));
        assert_eq!(find(&whole, &[], Resource::Core, &partly), None);
        // Two containers of one card each: the second is offered the card the first left.
        let two = [pod(
            "w2",
            "2026-01-01T00:00:01Z",
            &format!("{A},{B}"),
            &[("first", 100, 0), ("second", 100, 0)],
        )];
        let held = Holding {
            namespace: "ns".into(),
            pod: "w2".into(),
            container: "first".into(),
            core: ids(A, Resource::Core, 100),
            memory: vec![],
        };
        let mut rest = ask(100);
        rest.available = ids(B, Resource::Core, 100);
        let found = find(&two, &[held], Resource::Core, &rest).unwrap();
        assert_eq!(found.who, "ns/w2/second");
    }
}
