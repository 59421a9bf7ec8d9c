//! PreStartContainer: the kubelet is about to start a container that got our IDs. The plugin
//! finds its pod and container through pod-resources (the kubelet's own record of who got
//! which IDs: never a guess), reads the pod's annotations, and has controld create the
//! container with those limits, at the region path the Allocate answer already mounted.

use super::allocate::{cards_of, no_board};
use super::holders::Holder;
use super::{HostPaths, Node};
use crate::annotations::{self, PodAsk};
use crate::cards::Card;
use crate::controld::Controld;
use crate::ids::is_whole;
use crate::ids::{container_name, Resource, MEMORY_UNIT};
use crate::podresources::{self, Holding};
use std::time::Instant;
use tessera_controld::policy::{ComputePolicy, Priority};
use tessera_controld::spec::{ContainerName, ContainerSpec, Gpus, MemorySize};
use tessera_controld::state::{MemoryChange, SpecChange};
use tessera_region::units::format_size;
use tonic::Status;

/// Prepares the container that holds `ids` of `resource`. The error's message says what is
/// wrong; the kubelet fails the container with it and shows it in the pod's events.
pub async fn pre_start(node: &Node, resource: Resource, ids: Vec<String>) -> Result<(), Status> {
    cards_of(&node.cards.list, resource, &ids).map_err(|e| refuse(e.to_string()))?;
    let holdings = podresources::list(&node.config.pod_resources_socket)
        .await
        .map_err(|e| {
            let message = format!("cannot start the container of {}: {e}", ids_summary(&ids));
            tracing::error!("{message}");
            Status::unavailable(message)
        })?;
    let holding = holdings
        .into_iter()
        .find(|h| same_ids(if resource == Resource::Core { &h.core } else { &h.memory }, &ids))
        .ok_or_else(|| {
            let message = format!(
                "no container holds {} in the kubelet's pod-resources answer; the kubelet may be restarting, try again",
                ids_summary(&ids)
            );
            tracing::error!("{message}");
            Status::failed_precondition(message)
        })?;
    if resource == Resource::Memory {
        if holding.core.is_empty() {
            return Err(refuse_pod(
                node,
                &holding,
                format!(
                    "container {} asks {} without {}: ask for both, the core request is the container's share of GPU time",
                    who(&holding),
                    Resource::Memory.name(),
                    Resource::Core.name()
                ),
            )
            .await);
        }
        // The gpu-core PreStart of the same container does the work, once.
        return Ok(());
    }
    let pod = crate::pods::get(&node.kube, &holding.namespace, &holding.pod)
        .await
        .map_err(|e| {
            let message = format!("cannot read pod {}/{}: {e}", holding.namespace, holding.pod);
            tracing::error!("{message}");
            Status::unavailable(message)
        })?;
    let empty = Default::default();
    let ask = match annotations::read(pod.metadata.annotations.as_ref().unwrap_or(&empty)) {
        Ok(ask) => ask,
        Err(e) => {
            let message = format!("container {} refused: {e}", who(&holding));
            return Err(refuse_event(node, &pod, message).await);
        }
    };
    match prepare(node, &holding, &ask).await {
        Ok(()) => Ok(()),
        Err(message) => Err(refuse_event(node, &pod, message).await),
    }
}

/// Records the holder and has controld create (or update) its container.
async fn prepare(node: &Node, holding: &Holding, ask: &PodAsk) -> Result<(), String> {
    let name = container_name(&holding.core);
    let cards =
        cards_of(&node.cards.list, Resource::Core, &holding.core).map_err(|e| e.to_string())?;
    let uuids: Vec<String> = cards.iter().map(|c| c.uuid.clone()).collect();
    // Every card the container got must be one the scheduler chose for its pod (a pod's
    // containers share its one card, or divide its whole cards).
    if let Some(wanted) = &ask.gpu {
        if let Some(other) = uuids.iter().find(|u| !wanted.contains(u)) {
            return Err(format!(
                "container {}: the scheduler chose {} ({}) but the kubelet gave core IDs on {other}; delete the pod so that it is scheduled again",
                who(holding),
                wanted.join(","),
                annotations::GPU,
            ));
        }
    }
    if is_whole(holding.core.len()) {
        node.holders.lock().expect("holders lock").insert(Holder {
            name,
            namespace: holding.namespace.clone(),
            pod: holding.pod.clone(),
            container: holding.container.clone(),
            cards: uuids,
            core: holding.core.len() as u32,
            memory: cards.iter().map(|c| c.memory).sum(),
            requested: 0,
            compute: "whole".into(),
            priority: ask.priority.to_string(),
            whole: true,
            since: Instant::now(),
        });
        node.changed.notify_one();
        tracing::info!(
            "container {} has whole GPUs {}",
            who(holding),
            uuids_summary(&cards.iter().map(|c| c.uuid.as_str()).collect::<Vec<_>>())
        );
        return Ok(());
    }
    let [card] = cards.as_slice() else {
        return Err(format!(
            "container {} got {} core IDs on several cards; a share must lie on one card",
            who(holding),
            holding.core.len()
        ));
    };
    let requested = holding.memory.len() as u64 * MEMORY_UNIT;
    if requested == 0 {
        return Err(format!(
            "container {} asks {} without {}: ask for both, the memory request is the container's memory cap",
            who(holding),
            Resource::Core.name(),
            Resource::Memory.name()
        ));
    }
    let cap = limit(holding, ask, requested)?;
    if requested > card.memory {
        return Err(format!(
            "container {} asks {} of GPU memory but GPU {} ({}) has {}",
            who(holding),
            format_size(requested),
            card.index,
            card.uuid,
            format_size(card.memory)
        ));
    }
    let core = holding.core.len() as u32;
    let holder = Holder {
        name: name.clone(),
        namespace: holding.namespace.clone(),
        pod: holding.pod.clone(),
        container: holding.container.clone(),
        cards: uuids,
        core,
        memory: cap,
        requested,
        compute: ask.compute.policy(core).to_string(),
        priority: ask.priority.to_string(),
        whole: false,
        since: Instant::now(),
    };
    {
        // Recorded before controld hears of it, so that a reconcile that listed the pods
        // earlier leaves the new container alone.
        let mut holders = node.holders.lock().expect("holders lock");
        let held = holders.memory_on(&card.uuid, &name);
        if held + cap > card.memory {
            return Err(format!(
                "container {} asks {} of GPU memory but GPU {} ({}) has {} left of {}",
                who(holding),
                format_size(cap),
                card.index,
                card.uuid,
                format_size(card.memory.saturating_sub(held)),
                format_size(card.memory)
            ));
        }
        holders.insert(holder.clone());
    }
    let created = create(node, &holder, card, ask).await;
    if let Err(e) = created {
        node.holders.lock().expect("holders lock").remove(&name);
        return Err(format!("container {} refused: {e}", who(holding)));
    }
    node.changed.notify_one();
    tracing::info!(
        "container {} is {name} on GPU {}: memory {}, compute {}, {}",
        who(holding),
        card.index,
        format_size(cap),
        holder.compute,
        holder.priority
    );
    Ok(())
}

/// The memory cap: the annotation's, at most the request; else the request.
pub fn limit(holding: &Holding, ask: &PodAsk, requested: u64) -> Result<u64, String> {
    match ask.memory_limit {
        Some(cap) if cap > requested => Err(format!(
            "container {}: {} {} is above its {} request of {}; raise the request",
            who(holding),
            annotations::MEMORY_LIMIT,
            format_size(cap),
            Resource::Memory.name(),
            format_size(requested)
        )),
        Some(cap) => Ok(cap),
        None => Ok(requested),
    }
}

/// controld's container for `holder`, added or (a restarted container of the same pod)
/// updated, and its board link.
async fn create(node: &Node, holder: &Holder, card: &Card, ask: &PodAsk) -> Result<(), String> {
    let share = Share {
        name: holder.name.clone(),
        memory: holder.memory,
        compute: ask.compute.policy(holder.core),
        priority: ask.priority,
    };
    set_up(&node.config.host, &node.controld, card, &share).await
}

/// One shared container as controld keeps it: its name, memory cap, compute share and
/// priority on one card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// controld's container name, which also names its region and CDI device.
    pub name: String,
    /// Its memory cap, in bytes.
    pub memory: u64,
    /// Its claim on the card's time.
    pub compute: ComputePolicy,
    /// Online or offline.
    pub priority: Priority,
}

/// Has controld add `share` on `card` (or update it in place when it exists: a restarted
/// container, a claim prepared again), links its board and, with a CDI dir, writes its CDI
/// spec. The device plugin's PreStart and the DRA driver's NodePrepareResources both end
/// here, so that a share is the same container whichever API asked for it.
pub async fn set_up(
    host: &HostPaths,
    controld: &Controld,
    card: &Card,
    share: &Share,
) -> Result<(), String> {
    let spec = ContainerSpec {
        name: ContainerName::new(&share.name).map_err(|e| e.to_string())?,
        gpus: Gpus::new(vec![card.index]).map_err(|e| e.to_string())?,
        memory: Some(MemorySize(share.memory)),
        compute: share.compute,
        priority: share.priority,
        // Its priority's: short slices for offline work.
        timeslice: None,
    };
    let existing = controld.list().await.map_err(|e| e.to_string())?;
    if existing.iter().any(|c| c.spec.name.as_str() == share.name) {
        let change = SpecChange {
            gpus: Some(spec.gpus.clone()),
            memory: Some(MemoryChange::Cap(MemorySize(share.memory))),
            compute: Some(spec.compute),
            priority: Some(spec.priority),
            timeslice: None,
        };
        controld
            .set(&share.name, change)
            .await
            .map_err(|e| e.to_string())?;
    } else {
        controld.add(spec).await.map_err(|e| e.to_string())?;
    }
    let online = share.priority == Priority::Online;
    link_board(host, &share.name, online)
        .map_err(|e| format!("cannot link the board for {}: {e}", share.name))?;
    if let Some(dir) = &host.cdi_dir {
        let edits = super::allocate::share_edits(host, card, &share.name);
        let spec = super::cdi::spec(host, &share.name, &edits, online);
        super::cdi::write(dir, &share.name, &spec).map_err(|e| {
            format!(
                "cannot write the CDI spec of {} in {}: {e}",
                share.name,
                dir.display()
            )
        })?;
    }
    Ok(())
}

/// Points the container's board mount at the node's board (online) or at an empty file.
fn link_board(host: &HostPaths, name: &str, online: bool) -> std::io::Result<()> {
    let link = host.board_link(name);
    let board = host.state_dir.join(tessera_region::BOARD_FILE);
    let target = if online && board.exists() {
        board
    } else {
        no_board(host)
    };
    match std::fs::remove_file(&link) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::os::unix::fs::symlink(target, link)
}

/// Removes what was made on the host for a container: its board link and CDI spec.
pub fn unlink_board(host: &HostPaths, name: &str) {
    let _ = std::fs::remove_file(host.board_link(name));
    super::cdi::remove(host, name);
}

fn same_ids(held: &[String], ids: &[String]) -> bool {
    let mut a: Vec<&String> = held.iter().collect();
    let mut b: Vec<&String> = ids.iter().collect();
    a.sort_unstable();
    b.sort_unstable();
    !a.is_empty() && a == b
}

/// `namespace/pod/container`.
pub fn who(holding: &Holding) -> String {
    format!(
        "{}/{}/{}",
        holding.namespace, holding.pod, holding.container
    )
}

fn ids_summary(ids: &[String]) -> String {
    match ids {
        [] => "no IDs".into(),
        [one] => one.clone(),
        [first, ..] => format!("{first} and {} more IDs", ids.len() - 1),
    }
}

fn uuids_summary(uuids: &[&str]) -> String {
    uuids.join(", ")
}

/// A refusal before the pod is known: the plugin's log.
fn refuse(message: String) -> Status {
    tracing::error!("{message}");
    Status::invalid_argument(message)
}

/// A refusal of a known container whose pod is read for the event.
async fn refuse_pod(node: &Node, holding: &Holding, message: String) -> Status {
    match crate::pods::get(&node.kube, &holding.namespace, &holding.pod).await {
        Ok(pod) => refuse_event(node, &pod, message).await,
        Err(_) => refuse(message),
    }
}

/// A refusal written to the plugin's log and the pod's events.
async fn refuse_event(
    node: &Node,
    pod: &k8s_openapi::api::core::v1::Pod,
    message: String,
) -> Status {
    tracing::error!("{message}");
    crate::pods::warn(
        &node.kube,
        &node.config.node_name,
        pod,
        "TesseraRefused",
        &message,
    )
    .await;
    Status::failed_precondition(message)
}
