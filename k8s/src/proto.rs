//! The kubelet protocols, generated from `proto/` at build time.

/// Device plugin v1beta1: `Registration` (the kubelet's) and `DevicePlugin` (ours).
#[allow(missing_docs, clippy::all)]
pub mod deviceplugin {
    tonic::include_proto!("v1beta1");
}

/// Pod-resources v1: `PodResourcesLister` (the kubelet's).
#[allow(missing_docs, clippy::all)]
pub mod podresources {
    tonic::include_proto!("v1");
}

/// DRA v1: `DRAPlugin` (ours, as a DRA driver).
#[allow(missing_docs, clippy::all)]
pub mod dra {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// Plugin registration v1: `Registration` (ours: the kubelet's plugin watcher calls it).
#[allow(missing_docs, clippy::all)]
pub mod pluginregistration {
    tonic::include_proto!("pluginregistration");
}
