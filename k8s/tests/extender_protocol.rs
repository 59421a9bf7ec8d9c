//! The extender's HTTP protocol against golden JSON written from the protocol's definition
//! (kube-scheduler's `extender/v1` types: Go field names as keys), for each verb, in both
//! forms (`nodeCacheCapable` with node names and UIDs, and without, with whole objects), and
//! what bad input gets: a clear error, per node where the protocol has room for it, and an
//! extender that keeps answering.

use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_k8s::extender::cluster::{Card, Holder};
use tessera_k8s::extender::policy::Config;
use tessera_k8s::extender::{http, Extender};
use tessera_k8s::requests::Ask;
use tessera_k8s::sim::api::FakeApi;
use tessera_k8s::sim::scheduler::Scheduler;

const GIB: u64 = 1 << 30;

fn golden(name: &str) -> Value {
    let path = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn card(uuid: &str, node: &str, index: u32, healthy: bool) -> Card {
    Card {
        uuid: uuid.into(),
        node: node.into(),
        index,
        memory: 40 * GIB,
        healthy,
    }
}

fn holder(pod: &str, uuid: &str, core: u32, gib: u64) -> Holder {
    Holder {
        pod: pod.into(),
        cards: vec![uuid.into()],
        ask: Ask {
            core,
            memory: gib * GIB,
        },
        priority: 0,
    }
}

/// node-a: a card with 60 core and 8 GiB taken and an empty one; node-b: one card failing
/// its health check; node-c: one card with 90 core and 4 GiB taken by two pods; node-d: no
/// Tessera GPU. The extender serves on a local port and binds through a fake API server.
async fn serve() -> (FakeApi, Scheduler, Arc<Extender>) {
    let api = FakeApi::start().await;
    let extender = Arc::new(Extender::new(Config::default(), Some(api.client())));
    {
        let mut state = extender.state.lock().unwrap();
        state.set_cards([
            card("GPU-aaaa0000", "node-a", 0, true),
            card("GPU-aaaa0001", "node-a", 1, true),
            card("GPU-bbbb0000", "node-b", 0, false),
            card("GPU-cccc0000", "node-c", 0, true),
        ]);
        state.put_bound("uid-a-0", holder("shop/old", "GPU-aaaa0000", 60, 8));
        state.put_bound("uid-c-0", holder("batch/c0", "GPU-cccc0000", 60, 2));
        // One counted through the assume cache: bound a moment ago, not seen bound yet.
        let until = Instant::now() + Duration::from_secs(600);
        state.assume("uid-c-1", holder("batch/c1", "GPU-cccc0000", 30, 2), until);
    }
    extender.set_ready();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(http::serve(listener, extender.clone()));
    (api, Scheduler::new(format!("http://{addr}")), extender)
}

async fn post(scheduler: &Scheduler, verb: &str, body: &Value) -> (u16, Value) {
    let (status, bytes) = scheduler
        .call(verb, serde_json::to_vec(body).unwrap())
        .await
        .unwrap();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_verb_reads_what_kube_scheduler_sends_and_answers_what_it_accepts() {
    let (api, scheduler, extender) = serve().await;

    // Filter, node-cache capable: names in, names out, a reason for every other node.
    let (status, answer) = post(&scheduler, "filter", &golden("filter-args-names.json")).await;
    assert_eq!(status, 200);
    assert_eq!(answer, golden("filter-result-names.json"));

    // Filter with whole Node objects: the passing ones come back as they were sent.
    let (status, answer) = post(&scheduler, "filter", &golden("filter-args-nodes.json")).await;
    assert_eq!(status, 200);
    assert_eq!(answer, golden("filter-result-nodes.json"));

    // Prioritize: an offline pod packs, onto node-c's fuller card.
    let (status, answer) = post(&scheduler, "prioritize", &golden("prioritize-args.json")).await;
    assert_eq!(status, 200);
    assert_eq!(answer, golden("prioritize-result.json"));

    // Preempt, by UID and by whole pods: of node-c's two proposed victims one frees enough
    // on its card; node-b's card is failing, so no victim there helps.
    for args in ["preempt-args-meta.json", "preempt-args-pods.json"] {
        let (status, answer) = post(&scheduler, "preempt", &golden(args)).await;
        assert_eq!(status, 200, "{args}");
        assert_eq!(answer, golden("preempt-result.json"), "{args}");
    }

    // Bind: the online pod spreads, to node-a's empty card, recorded on the pod, then bound.
    let pod = golden("filter-args-names.json")["Pod"].clone();
    api.create_pod(pod);
    let (status, answer) = post(&scheduler, "bind", &golden("bind-args.json")).await;
    assert_eq!(status, 200);
    assert_eq!(answer, golden("bind-result.json"));
    let bound = api.pod("shop", "web").unwrap();
    assert_eq!(bound["spec"]["nodeName"], "node-a");
    assert_eq!(
        bound["metadata"]["annotations"]["tessera.dev/gpu"],
        "GPU-aaaa0001"
    );
    // The card counts at once: a second pod like it is not given the same room twice.
    let taken = extender
        .state
        .lock()
        .unwrap()
        .usage(None)
        .get("GPU-aaaa0001");
    assert_eq!(taken.core, 30);

    // A bind the extender cannot honour is an Error in the answer, not a failed call.
    let mut ghost = golden("bind-args.json");
    ghost["PodName"] = "ghost".into();
    let (status, answer) = post(&scheduler, "bind", &ghost).await;
    assert_eq!(status, 200);
    let error = answer["Error"].as_str().unwrap();
    assert!(
        error.starts_with("cannot bind shop/ghost: cannot read the pod"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_never_a_crash() {
    let (_api, scheduler, _extender) = serve().await;
    let names = golden("filter-args-names.json");

    // Malformed JSON: filter and bind answer through their Error field, the other two with
    // 400 and the message.
    for (verb, body) in [
        ("filter", "{\"Pod\": "),
        ("bind", "[1, 2"),
        ("prioritize", "not json"),
        ("preempt", "{\"Pod\": 7}"),
    ] {
        let (status, bytes) = scheduler
            .call(verb, body.as_bytes().to_vec())
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&bytes).to_string();
        assert!(
            text.contains(&format!("cannot read the {verb} request")),
            "{verb}: {text}"
        );
        match verb {
            "filter" | "bind" => {
                assert_eq!(status, 200, "{verb}");
                let answer: Value = serde_json::from_slice(&bytes).unwrap();
                assert!(
                    answer["Error"].as_str().unwrap().contains("cannot read"),
                    "{verb}"
                );
            }
            _ => assert_eq!(status, 400, "{verb}"),
        }
    }

    // An unknown policy annotation: every node says so, and no preemption can help.
    let mut bad_policy = names.clone();
    bad_policy["Pod"]["metadata"]["annotations"]["tessera.dev/card-policy"] = "tightest".into();
    let (_, answer) = post(&scheduler, "filter", &bad_policy).await;
    assert_eq!(answer["NodeNames"], serde_json::json!([]));
    assert_eq!(answer["FailedNodes"], serde_json::json!({}));
    let failed = answer["FailedAndUnresolvableNodes"].as_object().unwrap();
    assert_eq!(failed.len(), 4);
    for why in failed.values() {
        let why = why.as_str().unwrap();
        assert!(
            why.contains("tessera.dev/card-policy=\"tightest\" is not binpack or spread"),
            "{why}"
        );
    }
    let (status, text) = post(&scheduler, "prioritize", &bad_policy).await;
    assert_eq!(status, 400);
    assert!(text.as_str().unwrap().contains("tightest"), "{text}");

    // More memory than any card has: every node with cards says how much its largest has,
    // as unresolvable (evicting pods would not make a card larger).
    let mut too_big = names.clone();
    too_big["Pod"]["spec"]["containers"][0]["resources"]["limits"]["tessera.dev/gpu-memory"] =
        "80".into();
    too_big["Pod"]["spec"]["containers"][0]["resources"]["requests"]["tessera.dev/gpu-memory"] =
        "80".into();
    let (_, answer) = post(&scheduler, "filter", &too_big).await;
    assert_eq!(answer["NodeNames"], serde_json::json!([]));
    for node in ["node-a", "node-c"] {
        let why = answer["FailedAndUnresolvableNodes"][node].as_str().unwrap();
        assert!(
            why.contains("80 GiB") && why.contains("more than any card here has (40 GiB)"),
            "{node}: {why}"
        );
    }

    // A core request between cards, and memory without core: the pod's own error, per node.
    for (core, memory, words) in [("150", "4", "not whole cards"), ("0", "4", "without")] {
        let mut odd = names.clone();
        for key in ["limits", "requests"] {
            odd["Pod"]["spec"]["containers"][0]["resources"][key]["tessera.dev/gpu-core"] =
                core.into();
            odd["Pod"]["spec"]["containers"][0]["resources"][key]["tessera.dev/gpu-memory"] =
                memory.into();
        }
        let (_, answer) = post(&scheduler, "filter", &odd).await;
        let failed = answer["FailedAndUnresolvableNodes"].as_object().unwrap();
        assert_eq!(failed.len(), 4, "{core}/{memory}");
        assert!(
            failed.values().all(|w| w.as_str().unwrap().contains(words)),
            "{answer}"
        );
    }

    // Neither form of nodes.
    let mut neither = names.clone();
    neither["NodeNames"] = Value::Null;
    let (_, answer) = post(&scheduler, "filter", &neither).await;
    assert_eq!(
        answer["Error"],
        "the request has neither Nodes nor NodeNames"
    );

    // After all that it still answers as before.
    assert!(scheduler.extender_ready().await);
    let (_, answer) = post(&scheduler, "filter", &names).await;
    assert_eq!(answer, golden("filter-result-names.json"));
}

#[test]
fn the_command_refuses_a_config_it_cannot_use_in_one_line() {
    let dir = std::env::temp_dir().join(format!("tk-extender-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("extender.yaml");
    std::fs::write(&config, "online: {node: tightest, card: spread}\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera-k8s"))
        .args(["extender", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("extender config") && stderr.contains("tightest"),
        "{stderr}"
    );
}
