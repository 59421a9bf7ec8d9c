//! `deploy/`: the RBAC grants what the device plugin calls, and the DaemonSet mounts the host
//! paths the plugin and controld use by default. `deploy/dra/`: the same of the DRA driver,
//! its DeviceClass selects the driver, and the example claims are ones the driver prepares.

use serde_json::Value;
use std::path::Path;

fn documents(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            let value: serde_yaml::Value = serde::Deserialize::deserialize(d).unwrap();
            serde_json::to_value(value).unwrap()
        })
        .collect()
}

#[test]
fn rbac_grants_what_the_plugin_calls() {
    let docs = documents("rbac.yaml");
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole");
    let rules = role["rules"].as_array().unwrap();
    let allows = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|r| {
            let has = |key: &str, want: &str| {
                r[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v == want || v == "*")
            };
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };
    // Reading pods (PreStart, resize), events on them, and the GPU objects.
    for (group, resource, verb) in [
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "events", "create"),
        ("tessera.dev", "gpus", "list"),
        ("tessera.dev", "gpus", "patch"),
        ("tessera.dev", "gpus", "create"),
        ("tessera.dev", "gpus", "delete"),
        ("tessera.dev", "gpus/status", "patch"),
    ] {
        assert!(
            allows(group, resource, verb),
            "{verb} {group}/{resource} is not granted"
        );
    }
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .unwrap();
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let account = docs.iter().find(|d| d["kind"] == "ServiceAccount").unwrap();
    assert_eq!(binding["subjects"][0]["name"], account["metadata"]["name"]);
}

#[test]
fn the_daemonset_mounts_the_host_paths_the_plugin_uses() {
    let docs = documents("node.yaml");
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "tessera-node");
    let volumes = pod["volumes"].as_array().unwrap();
    let host_path = |name: &str| {
        volumes
            .iter()
            .find(|v| v["name"] == name)
            .and_then(|v| v["hostPath"]["path"].as_str())
            .unwrap_or_else(|| panic!("no hostPath volume {name}"))
            .to_string()
    };
    let containers = pod["containers"].as_array().unwrap();
    let mounted = |container: &str, path: &str| {
        let c = containers.iter().find(|c| c["name"] == container).unwrap();
        c["volumeMounts"].as_array().unwrap().iter().any(|m| {
            // The state dir must be the same path inside and on the host: the plugin's
            // answers name host paths.
            m["mountPath"] == path && host_path(m["name"].as_str().unwrap()) == path
        })
    };
    let state = tessera_controld::daemon::DEFAULT_STATE_DIR;
    assert!(mounted("controld", state));
    assert!(mounted("device-plugin", state));
    assert!(mounted("device-plugin", "/var/lib/kubelet/device-plugins"));
    let pod_resources = Path::new(tessera_k8s::podresources::DEFAULT_SOCKET)
        .parent()
        .unwrap();
    assert!(mounted("device-plugin", pod_resources.to_str().unwrap()));
    // The library lands where the plugin mounts it from by default.
    let library = Path::new(tessera_k8s::cli::DEFAULT_LIBRARY);
    assert_eq!(Path::new(&host_path("library")), library.parent().unwrap());
    let plugin = containers
        .iter()
        .find(|c| c["name"] == "device-plugin")
        .unwrap();
    let env_node = plugin["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "NODE_NAME")
        .unwrap();
    assert_eq!(
        env_node["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
}

#[test]
fn the_scheduler_profile_calls_the_extender_where_it_listens_with_what_it_serves() {
    let docs = documents("scheduler.yaml");
    let config_map = docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    let text = config_map["data"]["scheduler.yaml"].as_str().unwrap();
    let scheduler: serde_yaml::Value = serde_yaml::from_str(text).unwrap();
    let scheduler = serde_json::to_value(scheduler).unwrap();
    assert_eq!(scheduler["kind"], "KubeSchedulerConfiguration");
    assert_eq!(scheduler["profiles"][0]["schedulerName"], "tessera");
    let extender = &scheduler["extenders"][0];
    // The verbs are the extender's routes; node names and UIDs, not whole objects.
    for (key, verb) in [
        ("filterVerb", "filter"),
        ("prioritizeVerb", "prioritize"),
        ("bindVerb", "bind"),
        ("preemptVerb", "preempt"),
    ] {
        assert_eq!(extender[key], verb);
    }
    assert_eq!(extender["nodeCacheCapable"], true);
    let managed: Vec<&str> = extender["managedResources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        managed,
        [
            tessera_k8s::ids::CORE_RESOURCE,
            tessera_k8s::ids::MEMORY_RESOURCE
        ]
    );
    // The extender listens where the scheduler calls it, and reads the config beside it.
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    let command: Vec<&str> = containers.iter().find(|c| c["name"] == "extender").unwrap()
        ["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let listen = command[command.iter().position(|a| *a == "--listen").unwrap() + 1];
    assert_eq!(extender["urlPrefix"], format!("http://{listen}"));
    assert_eq!(&command[..2], ["tessera-k8s", "extender"]);
    let policies = config_map["data"]["extender.yaml"].as_str().unwrap();
    let policies = tessera_k8s::extender::policy::Config::parse(policies).unwrap();
    assert_eq!(
        policies,
        Default::default(),
        "the shipped defaults are the built-in ones"
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "tessera-scheduler"
    );
}

#[test]
fn rbac_grants_what_the_extender_calls() {
    let docs = documents("rbac.yaml");
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "tessera-extender")
        .expect("the extender's ClusterRole");
    let rules = role["rules"].as_array().unwrap();
    let allows = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|r| {
            let has = |key: &str, want: &str| r[key].as_array().unwrap().iter().any(|v| v == want);
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };
    // Watches of pods and GPUs, the card recorded on the pod, the binding.
    for (group, resource, verb) in [
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods", "get"),
        ("", "pods", "patch"),
        ("", "pods/binding", "create"),
        ("tessera.dev", "gpus", "list"),
        ("tessera.dev", "gpus", "watch"),
    ] {
        assert!(
            allows(group, resource, verb),
            "{verb} {group}/{resource} is not granted"
        );
    }
    let bound_to = |role: &str| {
        docs.iter().any(|d| {
            d["kind"] == "ClusterRoleBinding"
                && d["roleRef"]["name"] == role
                && d["subjects"][0]["name"] == "tessera-scheduler"
        })
    };
    assert!(bound_to("tessera-extender") && bound_to("system:kube-scheduler"));
}

/// Whether every field of `original` is in `typed` with the same value: what the typed
/// objects of the API drop on reading is a field that version does not have, which a
/// strict API server refuses.
fn assert_subset(original: &Value, typed: &Value, at: &str) {
    match (original, typed) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let Some(other) = b.get(key) else {
                    panic!("{at}.{key} is not a field of the API");
                };
                assert_subset(value, other, &format!("{at}.{key}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{at}");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_subset(x, y, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(original, typed, "{at}"),
    }
}

/// Reads a document into its typed object and back.
fn again<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> Value {
    let typed: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{e}"));
    serde_json::to_value(typed).unwrap()
}

/// The document `doc`, read into the typed object of its kind in the API types of
/// `$api` (a version of k8s-openapi) and written back; `None` for a kind the list lacks.
macro_rules! typed_in {
    ($api:ident, $doc:expr) => {{
        use $api::api::{apps, core, rbac};
        use $api::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
        let doc: &Value = $doc;
        match (
            doc["apiVersion"].as_str().unwrap(),
            doc["kind"].as_str().unwrap(),
        ) {
            ("v1", "ConfigMap") => Some(again::<core::v1::ConfigMap>(doc)),
            ("v1", "Namespace") => Some(again::<core::v1::Namespace>(doc)),
            ("v1", "ServiceAccount") => Some(again::<core::v1::ServiceAccount>(doc)),
            ("v1", "Pod") => Some(again::<core::v1::Pod>(doc)),
            ("apps/v1", "DaemonSet") => Some(again::<apps::v1::DaemonSet>(doc)),
            ("apps/v1", "Deployment") => Some(again::<apps::v1::Deployment>(doc)),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                Some(again::<rbac::v1::ClusterRole>(doc))
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                Some(again::<rbac::v1::ClusterRoleBinding>(doc))
            }
            ("rbac.authorization.k8s.io/v1", "Role") => Some(again::<rbac::v1::Role>(doc)),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                Some(again::<rbac::v1::RoleBinding>(doc))
            }
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
                Some(again::<apiextensions::CustomResourceDefinition>(doc))
            }
            _ => None,
        }
    }};
}

/// Reads a document into its typed object of the newest API and back, failing on a field
/// the API lacks.
fn assert_strict(file: &str, doc: &Value) {
    use k8s_openapi::api::resource;
    let kind = doc["kind"].as_str().unwrap();
    let typed = typed_in!(k8s_openapi, doc).unwrap_or_else(|| {
        match (doc["apiVersion"].as_str().unwrap(), kind) {
            ("resource.k8s.io/v1", "DeviceClass") => again::<resource::v1::DeviceClass>(doc),
            ("resource.k8s.io/v1", "ResourceClaim") => again::<resource::v1::ResourceClaim>(doc),
            ("resource.k8s.io/v1", "ResourceClaimTemplate") => {
                again::<resource::v1::ResourceClaimTemplate>(doc)
            }
            other => panic!("{file}: no strict check for {other:?}"),
        }
    });
    assert_subset(doc, &typed, &format!("{file}: {kind}"));
}

/// The same in the API of Kubernetes 1.26, the oldest version supported.
fn assert_strict_in_oldest(file: &str, doc: &Value) {
    let kind = doc["kind"].as_str().unwrap();
    let typed = typed_in!(k8s_openapi_oldest, doc)
        .unwrap_or_else(|| panic!("{file}: no strict check in 1.26 for {kind}"));
    assert_subset(doc, &typed, &format!("{file} (Kubernetes 1.26): {kind}"));
}

/// The API versions the manifests may use: all served by 1.26, the oldest supported
/// version, and still by the newest.
const OLDEST_GROUPS: [&str; 4] = [
    "v1",
    "apps/v1",
    "rbac.authorization.k8s.io/v1",
    "apiextensions.k8s.io/v1",
];

#[test]
fn every_manifest_is_strictly_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().to_string())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["crd.yaml", "node.yaml", "rbac.yaml", "scheduler.yaml"]
    );
    for file in &files {
        for doc in documents(file) {
            let group = doc["apiVersion"].as_str().unwrap();
            assert!(OLDEST_GROUPS.contains(&group), "{file}: {group}");
            assert_strict(file, &doc);
            assert_strict_in_oldest(file, &doc);
        }
    }
}

/// The pod template of the one workload in `file`.
fn pod_template(file: &str) -> Value {
    let docs = documents(file);
    let workload = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet" || d["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("{file} has no workload"));
    workload["spec"]["template"]["spec"].clone()
}

fn container<'p>(pod: &'p Value, name: &str) -> &'p Value {
    pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn words(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("{value} is not a list"))
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect()
}

/// The argument after `flag` in `command`.
fn flag<'c>(command: &[&'c str], flag: &str) -> &'c str {
    let at = command
        .iter()
        .position(|a| *a == flag)
        .unwrap_or_else(|| panic!("no {flag} in {command:?}"));
    command[at + 1]
}

#[test]
fn the_node_shares_the_host_pid_namespace_and_says_why() {
    let pod = pod_template("node.yaml");
    // NVML names GPU processes by their host pids, and controld's watchdog finds the region
    // of a pid through the host's /proc: in a pid namespace of its own it links none.
    assert_eq!(pod["hostPID"], true);
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/node.yaml"))
            .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim() == "hostPID: true")
        .unwrap();
    let comment: Vec<&str> = lines[..at]
        .iter()
        .rev()
        .take_while(|l| l.trim_start().starts_with('#'))
        .copied()
        .collect();
    let comment = comment.join(" ");
    assert!(
        comment.contains("watchdog") && comment.contains("pid"),
        "hostPID: true without the reason above it: {comment:?}"
    );
}

#[test]
fn every_container_has_a_probe_the_kubelet_can_reach() {
    for file in ["node.yaml", "scheduler.yaml", "dra/driver.yaml"] {
        let pod = pod_template(file);
        for c in pod["containers"].as_array().unwrap() {
            let name = c["name"].as_str().unwrap();
            let probe = &c["livenessProbe"];
            assert!(probe.is_object(), "{file}: {name} has no liveness probe");
            // An exec probe runs in the container; an HTTP probe goes to the pod's address
            // (never the container's loopback), so its port must be one the container
            // declares or a number.
            if let Some(port) = probe["httpGet"].get("port") {
                let named = port.as_str().map(|p| {
                    c["ports"]
                        .as_array()
                        .and_then(|ports| ports.iter().find(|x| x["name"] == p))
                        .unwrap_or_else(|| panic!("{file}: {name}: no port named {p}"))
                });
                assert!(named.is_some() || port.is_u64(), "{file}: {name}: {port}");
            } else {
                assert!(
                    probe["exec"]["command"].is_array(),
                    "{file}: {name}: {probe}"
                );
            }
        }
    }
}

#[test]
fn the_extenders_verbs_stay_local_and_its_probes_are_served_on_the_pods_address() {
    let pod = pod_template("scheduler.yaml");
    let extender = container(&pod, "extender");
    let command = words(&extender["command"]);
    // Bind acts with the scheduler's rights: the verbs only on loopback, where the
    // scheduler in the same pod calls them.
    assert!(
        flag(&command, "--listen").starts_with("127.0.0.1:"),
        "{command:?}"
    );
    // The probes alone on every address, at the port the kubelet is told.
    let health = flag(&command, "--health-listen");
    let port = extender["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "health")
        .unwrap()["containerPort"]
        .as_u64()
        .unwrap();
    assert_eq!(health, format!("0.0.0.0:{port}"));
    for (probe, path) in [("livenessProbe", "/livez"), ("readinessProbe", "/healthz")] {
        assert_eq!(extender[probe]["httpGet"]["port"], "health", "{probe}");
        assert_eq!(extender[probe]["httpGet"]["path"], path, "{probe}");
    }
}

#[test]
fn the_node_probes_ask_what_each_container_serves() {
    let pod = pod_template("node.yaml");
    // controld: its control socket answers, in the state dir it runs with.
    let controld = container(&pod, "controld");
    let run = words(&controld["command"]);
    let state = flag(&run, "--state-dir");
    for probe in ["livenessProbe", "readinessProbe"] {
        let asks = words(&controld[probe]["exec"]["command"]);
        assert_eq!(&asks[..3], ["controld", "container", "list"], "{probe}");
        assert_eq!(flag(&asks, "--state-dir"), state, "{probe}");
    }
    // The device plugin: both of its sockets are in the kubelet's directory, which it
    // mounts where it makes them.
    let plugin = container(&pod, "device-plugin");
    let script = words(&plugin["livenessProbe"]["exec"]["command"]).join(" ");
    let dir = "/var/lib/kubelet/device-plugins";
    assert!(plugin["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["mountPath"] == dir));
    for resource in tessera_k8s::ids::Resource::ALL {
        let socket = format!("test -S {dir}/{}", resource.socket());
        assert!(script.contains(&socket), "{script} does not check {socket}");
    }
}

#[test]
fn the_oldest_supported_kubernetes_is_stated() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let readme = read("README.md");
    let kubernetes = &readme[readme.find("## Kubernetes").unwrap()..];
    let kubernetes = &kubernetes[..kubernetes[3..]
        .find("\n## ")
        .map_or(kubernetes.len(), |e| e + 3)];
    assert!(
        kubernetes.contains("Kubernetes 1.26 or later"),
        "README's Kubernetes section does not state the oldest version"
    );
    for file in ["deploy/node.yaml", "deploy/scheduler.yaml"] {
        assert!(read(file).contains("1.26 or later"), "{file}");
    }
}

/// The DRA mode's manifests, each document.
fn dra_documents() -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/dra");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().to_string())
        .collect();
    files.sort();
    assert_eq!(files, ["claims.yaml", "deviceclass.yaml", "driver.yaml"]);
    files
        .into_iter()
        .flat_map(|file| {
            documents(&format!("dra/{file}"))
                .into_iter()
                .map(move |doc| (file.clone(), doc))
        })
        .collect()
}

#[test]
fn every_dra_manifest_is_strictly_valid() {
    for (file, doc) in dra_documents() {
        let group = doc["apiVersion"].as_str().unwrap();
        assert!(
            OLDEST_GROUPS.contains(&group) || group == "resource.k8s.io/v1",
            "{file}: {group}"
        );
        assert_strict(&file, &doc);
    }
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/dra/driver.yaml"),
    )
    .unwrap();
    assert!(
        text.contains("1.34 or later"),
        "driver.yaml states no version"
    );
}

#[test]
fn the_device_class_selects_the_driver_and_the_driver_may_do_what_it_calls() {
    use tessera_k8s::dra::{registration_socket, DRA_SOCKET, DRIVER};
    let docs = dra_documents();
    let find = |kind: &str| {
        docs.iter()
            .find(|(_, d)| d["kind"] == kind)
            .map(|(_, d)| d.clone())
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    let class = find("DeviceClass");
    assert_eq!(class["metadata"]["name"], DRIVER);
    assert_eq!(
        class["spec"]["selectors"][0]["cel"]["expression"],
        format!("device.driver == \"{DRIVER}\"")
    );

    let role = find("ClusterRole");
    let rules = role["rules"].as_array().unwrap();
    let allows = |resource: &str, verb: &str| {
        rules.iter().any(|r| {
            let has = |key: &str, want: &str| words(&r[key]).contains(&want);
            has("apiGroups", "resource.k8s.io") && has("resources", resource) && has("verbs", verb)
        })
    };
    for (resource, verb) in [
        ("resourceslices", "patch"),
        ("resourceslices", "create"),
        ("resourceslices", "get"),
        ("resourceclaims", "get"),
    ] {
        assert!(allows(resource, verb), "{verb} {resource} is not granted");
    }
    let binding = find("ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let account = find("ServiceAccount");
    assert_eq!(binding["subjects"][0]["name"], account["metadata"]["name"]);

    // The driver's directories are mounted where it is told they are, and its probe
    // checks the sockets it makes there.
    let pod = find("DaemonSet")["spec"]["template"]["spec"].clone();
    assert_eq!(pod["serviceAccountName"], account["metadata"]["name"]);
    assert_eq!(pod["hostPID"], true);
    let driver = container(&pod, "dra-driver");
    let command = words(&driver["command"]);
    assert_eq!(&command[..2], ["tessera-k8s", "dra"]);
    let mounted = |path: &str| {
        driver["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == path)
    };
    for arg in [
        "--registry-dir",
        "--plugins-dir",
        "--cdi-dir",
        "--state-dir",
    ] {
        let path = flag(&command, arg);
        assert!(mounted(path), "{arg} {path} is not mounted");
    }
    let controld = words(&container(&pod, "controld")["command"]);
    assert_eq!(
        flag(&controld, "--state-dir"),
        flag(&command, "--state-dir")
    );
    let probe = words(&driver["livenessProbe"]["exec"]["command"]).join(" ");
    for socket in [
        format!("{}/{DRIVER}/{DRA_SOCKET}", flag(&command, "--plugins-dir")),
        format!(
            "{}/{}",
            flag(&command, "--registry-dir"),
            registration_socket()
        ),
    ] {
        assert!(probe.contains(&format!("test -S {socket}")), "{probe}");
    }
}

#[test]
fn the_example_claims_are_ones_the_driver_prepares() {
    use tessera_k8s::dra::{DRIVER, MEMORY};
    let cards = [tessera_k8s::cards::Card {
        index: 0,
        uuid: "GPU-0".into(),
        model: "A100".into(),
        memory: 40 << 30,
        sms: None,
    }];
    let specs: Vec<(String, Value)> = dra_documents()
        .into_iter()
        .filter_map(|(_, d)| match d["kind"].as_str() {
            Some("ResourceClaimTemplate") => Some((
                d["metadata"]["name"].as_str().unwrap().to_string(),
                d["spec"]["spec"].clone(),
            )),
            Some("ResourceClaim") => Some((
                d["metadata"]["name"].as_str().unwrap().to_string(),
                d["spec"].clone(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(specs.len(), 2);
    for (name, spec) in specs {
        // Allocated as the scheduler would: what each request asks, consumed on one card,
        // with the claim's configuration.
        let results: Vec<Value> = spec["devices"]["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let asked = &r["exactly"]["capacity"]["requests"];
                assert_eq!(r["exactly"]["deviceClassName"], DRIVER, "{name}");
                serde_json::json!({"request": r["name"], "driver": DRIVER, "pool": "n",
                                   "device": "gpu-0", "consumedCapacity": asked})
            })
            .collect();
        let config: Vec<Value> = spec["devices"]["config"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c["source"] = "FromClaim".into();
                c
            })
            .collect();
        let claim: k8s_openapi::api::resource::v1::ResourceClaim =
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "default", "name": name, "uid": "u"},
                "spec": spec,
                "status": {"allocation": {"devices": {"results": results, "config": config}}},
            }))
            .unwrap();
        let devices = tessera_k8s::dra::claim::read(&claim, "u", "n", &cards)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(devices.len(), 1, "{name}");
        assert!(
            devices[0].cores < 100 && devices[0].memory < (40 << 30),
            "{name}: a share, not the card: {:?} ({MEMORY})",
            devices[0]
        );
    }
}
