//! Effective pod requests/limits (kubelet's resource helpers).
//! (stub: the core branch writes it)

use crate::model::Pod;

/// A pod's effective resources, as the kubelet sums them: requests =
/// max(sum of app containers (+ restartable sidecars), largest init
/// container) + overhead; a limit is `None` unless every container has one
/// (or pod-level resources say so).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodResources {
    pub cpu_request_millis: i64,
    pub cpu_limit_millis: Option<i64>,
    pub memory_request_bytes: i64,
    pub memory_limit_bytes: Option<i64>,
    pub ephemeral_storage_request_bytes: i64,
    pub ephemeral_storage_limit_bytes: Option<i64>,
}

pub fn pod_resources(_pod: &Pod) -> PodResources {
    unimplemented!("core branch")
}
