//! The simulator's scheduler: for each pending pod it does what kube-scheduler does with an
//! extender configured `nodeCacheCapable: true` and `bindVerb: bind`: POST `filter` with the
//! candidate node names, `prioritize` with those that pass, pick the best score (ties: the
//! first), then `bind`. A failed bind or an unreachable extender puts the pod back in the
//! queue; a pod no node passes is unschedulable, with the extender's reasons.

use crate::extender::protocol::{ExtenderBindingResult, ExtenderFilterResult, HostPriority};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::time::Duration;

/// How many times a pod is tried before it is given up (kube-scheduler retries for ever,
/// with back-off; the simulator must end).
pub const ATTEMPTS: u32 = 40;

/// Where a pod ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Bound to this node.
    Placed(String),
    /// Not placed, and why.
    Unschedulable(String),
}

/// The scheduler's HTTP side.
#[derive(Clone)]
pub struct Scheduler {
    http: Client<HttpConnector, Full<Bytes>>,
    base: String,
}

/// One try's end.
enum Try {
    Done(Outcome),
    /// Worth another try (a failed bind, an extender restarting), with why.
    Again(String),
}

impl Scheduler {
    /// A scheduler that calls the extender at `base` (`http://host:port`).
    pub fn new(base: String) -> Scheduler {
        Scheduler {
            http: Client::builder(TokioExecutor::new()).build_http(),
            base,
        }
    }

    /// POSTs `body` to a verb; the status and the body back.
    pub async fn call(&self, verb: &str, body: Vec<u8>) -> Result<(u16, Bytes), String> {
        let request = hyper::Request::post(format!("{}/{verb}", self.base))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(Duration::from_secs(30), self.http.request(request))
            .await
            .map_err(|_| format!("{verb}: no answer within 30 s"))?
            .map_err(|e| format!("{verb}: {e}"))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{verb}: {e}"))?
            .to_bytes();
        Ok((status, body))
    }

    /// Whether the extender answers `healthz` with 200.
    pub async fn extender_ready(&self) -> bool {
        let Ok(request) =
            hyper::Request::get(format!("{}/healthz", self.base)).body(Full::new(Bytes::new()))
        else {
            return false;
        };
        matches!(self.http.request(request).await, Ok(r) if r.status().is_success())
    }

    /// Schedules one pod (as the API server has it now, read by `fetch`) among `nodes`.
    pub async fn schedule<F>(&self, nodes: &[String], fetch: F) -> Outcome
    where
        F: Fn() -> Option<Value>,
    {
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            let Some(pod) = fetch() else {
                return Outcome::Unschedulable("the pod is gone".into());
            };
            if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                return Outcome::Placed(node.to_string());
            }
            match self.try_once(nodes, &pod).await {
                Try::Done(outcome) => return outcome,
                Try::Again(why) => last = why,
            }
            tokio::time::sleep(Duration::from_millis(10 << attempt.min(4))).await;
        }
        Outcome::Unschedulable(format!("gave up after {ATTEMPTS} tries: {last}"))
    }

    async fn try_once(&self, nodes: &[String], pod: &Value) -> Try {
        let args = json!({"Pod": pod, "Nodes": null, "NodeNames": nodes});
        let body = serde_json::to_vec(&args).unwrap_or_default();
        let filtered: ExtenderFilterResult = match self.call("filter", body).await {
            Ok((200, bytes)) => match serde_json::from_slice(&bytes) {
                Ok(result) => result,
                Err(e) => return Try::Again(format!("filter answered what it should not: {e}")),
            },
            Ok((code, bytes)) => {
                return Try::Again(format!(
                    "filter: HTTP {code}: {}",
                    String::from_utf8_lossy(&bytes)
                ))
            }
            Err(e) => return Try::Again(e),
        };
        if !filtered.error.is_empty() {
            return Try::Again(format!("filter: {}", filtered.error));
        }
        let passing = filtered.node_names.unwrap_or_default();
        if passing.is_empty() {
            let reasons: Vec<String> = filtered
                .failed_nodes
                .iter()
                .chain(&filtered.failed_and_unresolvable_nodes)
                .map(|(node, why)| format!("{node}: {why}"))
                .collect();
            return Try::Done(Outcome::Unschedulable(format!(
                "0/{} nodes are available: {}",
                nodes.len(),
                reasons.join("; ")
            )));
        }
        let args = json!({"Pod": pod, "Nodes": null, "NodeNames": passing});
        let body = serde_json::to_vec(&args).unwrap_or_default();
        let scores: Vec<HostPriority> = match self.call("prioritize", body).await {
            Ok((200, bytes)) => match serde_json::from_slice(&bytes) {
                Ok(scores) => scores,
                Err(e) => {
                    return Try::Again(format!("prioritize answered what it should not: {e}"))
                }
            },
            Ok((code, bytes)) => {
                return Try::Again(format!(
                    "prioritize: HTTP {code}: {}",
                    String::from_utf8_lossy(&bytes)
                ))
            }
            Err(e) => return Try::Again(e),
        };
        let best = scores.iter().map(|s| s.score).max().unwrap_or(0);
        let Some(node) = passing
            .iter()
            .find(|n| scores.iter().any(|s| &s.host == *n && s.score == best))
        else {
            return Try::Again("prioritize scored none of the nodes".into());
        };
        let args = json!({
            "PodName": pod["metadata"]["name"],
            "PodNamespace": pod["metadata"]["namespace"],
            "PodUID": pod["metadata"]["uid"],
            "Node": node,
        });
        let body = serde_json::to_vec(&args).unwrap_or_default();
        match self.call("bind", body).await {
            Ok((200, bytes)) => match serde_json::from_slice::<ExtenderBindingResult>(&bytes) {
                Ok(result) if result.error.is_empty() => Try::Done(Outcome::Placed(node.clone())),
                Ok(result) => Try::Again(format!("bind: {}", result.error)),
                Err(e) => Try::Again(format!("bind answered what it should not: {e}")),
            },
            Ok((code, bytes)) => Try::Again(format!(
                "bind: HTTP {code}: {}",
                String::from_utf8_lossy(&bytes)
            )),
            Err(e) => Try::Again(e),
        }
    }
}
