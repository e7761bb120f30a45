//! qosd beside a Kubernetes API server (the fake one,
//! tests/support/kubeapi.rs): the API client, evictions through the API,
//! local-storage limits, the DaemonSet pod, and the kubelet's config file.
//!
//! One test binary for the files in tests/kube/ (each a module named
//! after its file): `cargo test --test kube <module>::` runs one of them.

mod support;

#[path = "kube/kube_api.rs"]
mod kube_api;
#[path = "kube/kube_api_evict.rs"]
mod kube_api_evict;
#[path = "kube/kube_daemonset.rs"]
mod kube_daemonset;
#[path = "kube/kube_evict.rs"]
mod kube_evict;
#[path = "kube/kube_storage.rs"]
mod kube_storage;
#[path = "kube/kubelet_config.rs"]
mod kubelet_config;
