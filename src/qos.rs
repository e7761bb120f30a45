//! QoS classification exactly as Kubernetes `GetPodQOS`.
//! (stub: the core branch writes it)

use crate::model::{Pod, QosClass};

/// A pod's class and the human reason for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    pub class: QosClass,
    /// e.g. "container app: memory request 100Mi != limit 200Mi".
    pub reason: String,
}

/// Classify a pod (honours `pod.qos_override`).
pub fn classify(_pod: &Pod) -> Classification {
    unimplemented!("core branch")
}
