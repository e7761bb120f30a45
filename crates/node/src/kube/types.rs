//! The subset of the Kubernetes API objects qosd reads and writes, as serde
//! types in the API's JSON field names. Unknown fields are ignored (a real
//! pod carries managedFields, status, volumes, …), missing ones default.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `metadata` of an object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// `metadata.name`.
    pub name: String,
    pub(crate) namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) resource_version: String,
    /// `metadata.annotations` (a static pod's mirror pod names the
    /// runtime's uid in `kubernetes.io/config.mirror`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) deletion_timestamp: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) owner_references: Vec<OwnerReference>,
    /// Bumped by the API server at each spec change (a resize included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) generation: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct OwnerReference {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) uid: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) controller: Option<bool>,
}

/// `metadata` of a list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ListMeta {
    pub(crate) resource_version: String,
    #[serde(rename = "continue", skip_serializing_if = "String::is_empty")]
    pub(crate) continue_token: String,
}

/// `resources` of a container or a pod (quantities as strings).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub(crate) struct ApiResources {
    pub(crate) requests: BTreeMap<String, String>,
    pub(crate) limits: BTreeMap<String, String>,
}

/// A container of a pod spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ApiContainer {
    pub(crate) name: String,
    pub(crate) resources: ApiResources,
    /// Init containers: `Always` = a restartable sidecar.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) restart_policy: Option<String>,
}

/// `spec` of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct PodSpec {
    pub(crate) node_name: String,
    pub(crate) containers: Vec<ApiContainer>,
    pub(crate) init_containers: Vec<ApiContainer>,
    pub(crate) overhead: BTreeMap<String, String>,
    /// Pod-level resources (KEP-2837).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resources: Option<ApiResources>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) priority_class_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) termination_grace_period_seconds: Option<i64>,
    /// The volumes (local-storage eviction needs the emptyDirs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) volumes: Vec<ApiVolume>,
}

/// `spec.volumes[]`: its name and, for an emptyDir, medium and sizeLimit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ApiVolume {
    pub(crate) name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) empty_dir: Option<ApiEmptyDir>,
}

/// `emptyDir`: `medium` (`Memory`: a tmpfs) and `sizeLimit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ApiEmptyDir {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) medium: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) size_limit: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct PodStatus {
    pub(crate) phase: String,
    pub(crate) qos_class: String,
    /// `PodResizePending` / `PodResizeInProgress` among the others.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) conditions: Vec<PodCondition>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) container_statuses: Vec<ContainerStatus>,
    /// Sidecars' statuses are here.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) init_container_statuses: Vec<ContainerStatus>,
    /// The generation the kubelet last reported on (from 1.34).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) observed_generation: Option<i64>,
    /// Pod-level allocation (pod-level resize, from 1.36).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) allocated_resources: Option<BTreeMap<String, String>>,
    /// Pod-level resources as applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resources: Option<ApiResources>,
}

/// One pod condition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct PodCondition {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) reason: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) message: String,
}

/// The resource fields of a container's status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ContainerStatus {
    pub(crate) name: String,
    /// The kubelet's allocated requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) allocated_resources: Option<BTreeMap<String, String>>,
    /// What the runtime runs (requests and limits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resources: Option<ApiResources>,
}

/// A pod as the API serves it (the fields qosd uses).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct ApiPod {
    /// `metadata`.
    pub metadata: ObjectMeta,
    pub(crate) spec: PodSpec,
    pub(crate) status: PodStatus,
}

/// `core/v1 PodList`: a page of pods (or all pages joined).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct PodList {
    pub(crate) metadata: ListMeta,
    /// The pods.
    pub items: Vec<ApiPod>,
}

/// One event of a watch stream (`{"type": …, "object": …}`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct WatchEvent {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) object: serde_json::Value,
}

/// `meta/v1 Status`: the body of API errors (and of some successes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub(crate) struct Status {
    pub(crate) status: String,
    pub(crate) message: String,
    pub(crate) reason: String,
    pub(crate) code: u16,
}

/// `policy/v1 Eviction`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Eviction {
    pub(crate) api_version: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) metadata: RefMeta,
    pub(crate) delete_options: DeleteOptions,
}

/// Name and namespace only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefMeta {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
}

/// `meta/v1 DeleteOptions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeleteOptions {
    pub(crate) api_version: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) grace_period_seconds: i64,
    /// `uid` precondition: never delete a newer pod of the same name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) preconditions: Option<Preconditions>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Preconditions {
    pub(crate) uid: String,
}

impl DeleteOptions {
    /// Delete with this grace period (seconds), only the pod with `uid`.
    pub(crate) fn new(grace_period_seconds: i64, uid: &str) -> DeleteOptions {
        DeleteOptions {
            api_version: "v1",
            kind: "DeleteOptions",
            grace_period_seconds,
            preconditions: Some(Preconditions {
                uid: uid.to_string(),
            }),
        }
    }
}

/// `core/v1 Event` (what the kubelet's recorder writes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `apiVersion`: `v1`.
    pub api_version: &'static str,
    /// `kind`: `Event`.
    pub kind: &'static str,
    /// The Event's own name and namespace.
    pub metadata: RefMeta,
    /// `involvedObject`: the pod the Event is about.
    pub involved_object: ObjectReference,
    /// `reason`, e.g. `Evicted`.
    pub reason: String,
    /// `message`: what happened, in words.
    pub message: String,
    /// `type`: `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// `source`: the component and node that wrote the Event.
    pub source: EventSource,
    /// `firstTimestamp` (RFC 3339).
    pub first_timestamp: String,
    /// `lastTimestamp` (RFC 3339).
    pub last_timestamp: String,
    /// `count`: occurrences.
    pub count: i32,
    /// `reportingComponent`.
    pub reporting_component: String,
    /// `reportingInstance` (the node's name).
    pub reporting_instance: String,
}

/// `core/v1 ObjectReference`: the object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// `apiVersion` of the object, e.g. `v1`.
    pub api_version: String,
    /// `kind` of the object, e.g. `Pod`.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The object's namespace.
    pub namespace: String,
    /// The object's uid.
    pub uid: String,
}

/// `core/v1 EventSource`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventSource {
    /// The component that wrote the Event (`qosd`).
    pub component: String,
    /// The node it runs on.
    pub host: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_pod_json_parses() {
        let text = include_str!("../../../../fixtures/kube/web-burstable.json");
        let p: ApiPod = serde_json::from_str(text).unwrap();
        assert_eq!(p.metadata.name, "web-7d9c6b5f4d-x8k2p");
        assert_eq!(p.metadata.uid, "0b1c8e2a-6a3f-4d8e-9c1b-7f2e4a5d6c01");
        assert_eq!(p.spec.node_name, "worker-1");
        assert_eq!(p.spec.priority, Some(0));
        assert_eq!(p.spec.containers[0].resources.requests["memory"], "256Mi");
        assert_eq!(p.status.qos_class, "Burstable");
        assert_eq!(p.metadata.owner_references[0].kind, "ReplicaSet");
    }

    #[test]
    fn eviction_body_shape() {
        let e = Eviction {
            api_version: "policy/v1",
            kind: "Eviction",
            metadata: RefMeta {
                name: "p".into(),
                namespace: "ns".into(),
            },
            delete_options: DeleteOptions::new(1, "u-1"),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["deleteOptions"]["gracePeriodSeconds"], 1);
        assert_eq!(v["deleteOptions"]["preconditions"]["uid"], "u-1");
        assert_eq!(v["apiVersion"], "policy/v1");
    }
}
