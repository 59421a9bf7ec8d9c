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
