//! The GPU custom resource definition: `deploy/crd.yaml` is what the Rust type generates,
//! every printer column names a field of the schema, and an object as the plugin writes it
//! has no field the schema would prune.

use serde_json::Value;
use tessera_k8s::gpu::{crd_yaml, Amounts, GPUHolder, GPUSpec, GPUStatus, GPU};

fn committed() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crd.yaml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn schema() -> Value {
    let crd: Value = serde_yaml::from_str(&committed()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn the_committed_crd_is_the_generated_one() {
    assert!(
        committed() == crd_yaml(),
        "deploy/crd.yaml differs from the Rust type's CRD; regenerate it with `cargo run -p tessera-k8s -- crd > deploy/crd.yaml`"
    );
    let crd: Value = serde_yaml::from_str(&committed()).unwrap();
    assert_eq!(crd["metadata"]["name"], "gpus.tessera.dev");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["spec"]["versions"][0]["name"], "v1alpha1");
    assert!(crd["spec"]["versions"][0]["subresources"]["status"].is_object());
}

/// The schema of the field a `.a.b` path names, if any.
fn field<'s>(schema: &'s Value, path: &str) -> Option<&'s Value> {
    path.trim_start_matches('.')
        .split('.')
        .try_fold(schema, |s, key| s["properties"].get(key))
}

#[test]
fn printer_columns_name_fields_of_the_schema() {
    let crd: Value = serde_yaml::from_str(&committed()).unwrap();
    let schema = schema();
    let columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = columns
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Node", "Model", "Core", "Memory", "Pods", "Age"]);
    for column in columns {
        let path = column["jsonPath"].as_str().unwrap();
        if path.starts_with(".metadata") {
            continue;
        }
        let f = field(&schema, path).unwrap_or_else(|| panic!("{path} is not in the schema"));
        let want = column["type"].as_str().unwrap();
        assert_eq!(f["type"], want, "{path}");
    }
}

/// Every key of `value` is declared in `schema`, recursively.
fn assert_declared(value: &Value, schema: &Value, at: &str) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let child = schema["properties"].get(key).unwrap_or_else(|| {
                    panic!("{at}.{key} is not in the schema: it would be pruned")
                });
                assert_declared(v, child, &format!("{at}.{key}"));
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                assert_declared(v, &schema["items"], &format!("{at}[{i}]"));
            }
        }
        _ => {}
    }
}

#[test]
fn objects_the_plugin_writes_fit_the_schema() {
    let mut gpu = GPU::new(
        "gpu-1",
        GPUSpec {
            node: "n".into(),
            index: 0,
            uuid: "GPU-1".into(),
            model: "NVIDIA A100-SXM4-40GB".into(),
            memory: 40 << 30,
            sms: Some(108),
        },
    );
    gpu.status = Some(GPUStatus {
        healthy: true,
        allocatable: Amounts {
            core: 100,
            memory: 40 << 30,
        },
        allocated: Amounts {
            core: 30,
            memory: 4 << 30,
        },
        memory: "4GiB/40GiB".into(),
        pods: 1,
        holders: vec![GPUHolder {
            namespace: "a".into(),
            pod: "b".into(),
            container: "c".into(),
            core: 30,
            memory: 4 << 30,
            policy: "burst:30".into(),
            priority: "online".into(),
            memory_used: Some(1 << 30),
            share_measured: Some(0.3),
        }],
    });
    let mut value = serde_json::to_value(&gpu).unwrap();
    let object = value.as_object_mut().unwrap();
    object.remove("apiVersion");
    object.remove("kind");
    object.remove("metadata");
    assert_declared(&value, &schema(), "");
}

/// Every `format` in `schema` and where, recursively.
fn formats(schema: &Value, at: &str, out: &mut Vec<(String, String, Value)>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(format)) = map.get("format") {
                out.push((at.to_string(), format.clone(), map["type"].clone()));
            }
            for (key, v) in map {
                formats(v, &format!("{at}.{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                formats(v, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_schema_has_only_formats_api_servers_know_and_counts_stay_unsigned() {
    let schema = schema();
    let mut found = Vec::new();
    formats(&schema, "", &mut found);
    // API servers from 1.34 warn about a format they do not know, such as the `uint32` and
    // `uint64` that unsigned Rust types generate; the numeric ones they know are these.
    for (at, format, kind) in &found {
        let known = match kind.as_str() {
            Some("integer") => ["int32", "int64"].contains(&format.as_str()),
            Some("number") => ["float", "double"].contains(&format.as_str()),
            _ => true,
        };
        assert!(known, "{at}: format {format} on {kind}");
    }
    // What the unsigned types said stays said: no count or size below 0.
    for path in [
        ".spec.index",
        ".spec.memory",
        ".spec.sms",
        ".status.allocatable.core",
        ".status.allocatable.memory",
        ".status.allocated.core",
        ".status.allocated.memory",
        ".status.pods",
    ] {
        let f = field(&schema, path).unwrap_or_else(|| panic!("{path}"));
        assert_eq!(f["type"], "integer", "{path}");
        assert_eq!(f["minimum"].as_f64(), Some(0.0), "{path}");
    }
    let holder = &field(&schema, ".status.holders").unwrap()["items"];
    for key in ["core", "memory", "memoryUsed"] {
        assert_eq!(
            holder["properties"][key]["minimum"].as_f64(),
            Some(0.0),
            "{key}"
        );
    }
}
