//! Merge the runtime's live pods with the API server's specs, by pod uid.
//! Pure logic, no I/O.
//!
//! The runtime says what runs and where its cgroup is (and so the QoS class
//! the kubelet chose); the API pod gives the exact requests and limits of
//! every container (init and sidecar ones too), overhead, pod-level
//! resources, priority, priorityClassName, the grace period, the
//! static/mirror markers and the volumes (emptyDir size limits). Requests
//! and limits are the ones the kubelet admitted: during an in-place resize
//! its status says so ([`crate::admitted`]), and the spec is only the
//! desired state. Each value records its source ([`ValueSource::Exact`]
//! from the API, [`ValueSource::Inferred`] from the runtime).
//!
//! A static pod runs under its own uid; its mirror pod in the API has
//! another uid and names the static one in `kubernetes.io/config.mirror`.
//!
//! When the API view is stale (disconnected longer than allowed), only the
//! values the API never lets change on a pod — `priority`,
//! `priorityClassName` and the static/mirror markers — are kept from it;
//! requests and limits (mutable by in-place resize) go back to the
//! runtime's, so no eviction is decided on a stale spec.

use std::collections::HashMap;

use super::source::ApiView;
use super::types::{ApiContainer, ApiPod, ApiResources, ApiVolume, ContainerStatus};
use crate::admitted::{self, Condition};
use crate::cri::LivePod;
use qosd_model::core::model::{
    Container, EmptyDir, Pod, ResourceList, ResourceRequirements, ValueSource, Volume,
    ANNOTATION_MIRROR, ANNOTATION_SOURCE,
};
use qosd_model::core::quantity::Quantity;
use qosd_model::policy::enforce::versions::KubeletVersion;

/// What a merge did, for status and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeSummary {
    /// Live pods whose spec came from a current API view.
    pub exact: usize,
    /// Live pods from the runtime alone (not in the view, or a stale view).
    pub inferred: usize,
    /// The view was current.
    pub(crate) fresh: bool,
}

fn list(
    m: &std::collections::BTreeMap<String, String>,
    what: &str,
) -> Result<ResourceList, String> {
    m.iter()
        .map(|(k, v)| {
            Quantity::parse(v)
                .map(|q| (k.clone(), q))
                .map_err(|e| format!("{what} {k}={v:?}: {e}"))
        })
        .collect()
}

fn requirements(r: &ApiResources, what: &str) -> Result<ResourceRequirements, String> {
    Ok(ResourceRequirements {
        requests: list(&r.requests, &format!("{what} requests"))?,
        limits: list(&r.limits, &format!("{what} limits"))?,
    })
}

fn container(c: &ApiContainer, init: bool) -> Result<Container, String> {
    Ok(Container {
        name: c.name.clone(),
        resources: requirements(&c.resources, &format!("container {}", c.name))?,
        restartable: init && c.restart_policy.as_deref() == Some("Always"),
    })
}

fn volume(v: &ApiVolume) -> Result<Volume, String> {
    let empty_dir = match &v.empty_dir {
        None => None,
        Some(ed) => Some(EmptyDir {
            memory: ed.medium == "Memory",
            size_limit: ed
                .size_limit
                .as_deref()
                .map(|q| {
                    // `Quantity.UnmarshalJSON` trims surrounding whitespace.
                    Quantity::parse(q.trim())
                        .map_err(|e| format!("volume {} emptyDir sizeLimit {q:?}: {e}", v.name))
                })
                .transpose()?,
        }),
    };
    Ok(Volume {
        name: v.name.clone(),
        empty_dir,
    })
}

/// The pod an API pod's spec describes (quantities parsed exactly): the
/// desired state.
pub(crate) fn to_model(p: &ApiPod) -> Result<Pod, String> {
    let mut pod = Pod::new(
        p.metadata.uid.clone(),
        p.metadata.namespace.clone(),
        p.metadata.name.clone(),
    );
    pod.containers = p
        .spec
        .containers
        .iter()
        .map(|c| container(c, false))
        .collect::<Result<_, _>>()?;
    pod.init_containers = p
        .spec
        .init_containers
        .iter()
        .map(|c| container(c, true))
        .collect::<Result<_, _>>()?;
    pod.pod_resources = p
        .spec
        .resources
        .as_ref()
        .map(|r| requirements(r, "pod"))
        .transpose()?;
    pod.overhead = list(&p.spec.overhead, "overhead")?;
    pod.priority = p.spec.priority.unwrap_or(0);
    pod.priority_class_name = p.spec.priority_class_name.clone();
    pod.termination_grace_period_seconds = p.spec.termination_grace_period_seconds;
    pod.annotations = p.metadata.annotations.clone();
    pod.volumes = p
        .spec
        .volumes
        .iter()
        .map(volume)
        .collect::<Result<_, _>>()?;
    Ok(pod)
}

fn container_status(c: &ContainerStatus) -> Result<admitted::ContainerStatus, String> {
    let what = format!("status of container {}", c.name);
    Ok(admitted::ContainerStatus {
        allocated: c
            .allocated_resources
            .as_ref()
            .map(|a| list(a, &format!("{what} allocatedResources")))
            .transpose()?,
        actual: c
            .resources
            .as_ref()
            .map(|r| requirements(r, &format!("{what} resources")))
            .transpose()?,
    })
}

/// What an API pod's status says about its resources (see
/// [`crate::admitted`]).
pub(crate) fn status_of(p: &ApiPod) -> Result<admitted::PodStatus, String> {
    let st = &p.status;
    let condition = |kind: &str| {
        st.conditions
            .iter()
            .find(|c| c.kind == kind && c.status == "True")
            .map(|c| Condition {
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
    };
    let mut containers = std::collections::BTreeMap::new();
    for c in st
        .container_statuses
        .iter()
        .chain(&st.init_container_statuses)
    {
        containers.insert(c.name.clone(), container_status(c)?);
    }
    Ok(admitted::PodStatus {
        generation: p.metadata.generation,
        observed_generation: st.observed_generation,
        pending: condition("PodResizePending"),
        in_progress: condition("PodResizeInProgress"),
        containers,
        pod_allocated: st
            .allocated_resources
            .as_ref()
            .map(|a| list(a, "pod status allocatedResources"))
            .transpose()?,
        pod_actual: st
            .resources
            .as_ref()
            .map(|r| requirements(r, "pod status resources"))
            .transpose()?,
    })
}

/// The pod with the resources the kubelet admitted (its spec, unless its
/// status says a resize is not applied; see [`crate::admitted`]).
pub fn admitted_model(p: &ApiPod, version: KubeletVersion) -> Result<Pod, String> {
    Ok(admitted::admit(to_model(p)?, &status_of(p)?, version))
}

/// Merge every live pod with its API pod, in place; `version`: whose
/// rules decide what the kubelet admitted.
pub fn merge(live: &mut [LivePod], view: &ApiView, version: KubeletVersion) -> MergeSummary {
    let mut by_mirror: HashMap<&str, &ApiPod> = HashMap::new();
    for p in view.pods.values() {
        if let Some(h) = p.metadata.annotations.get(ANNOTATION_MIRROR) {
            by_mirror.insert(h.as_str(), p);
        }
    }
    let mut summary = MergeSummary {
        fresh: view.fresh(),
        ..Default::default()
    };
    for lp in live.iter_mut() {
        let found = view
            .pods
            .get(&lp.pod.uid)
            .or_else(|| by_mirror.get(lp.pod.uid.as_str()).copied());
        let exact = match found {
            Some(api) => merge_one(lp, api, view.fresh(), version),
            None => {
                if view.fresh() {
                    lp.notes.push(
                        "not in the API server's pods of this node (a static pod without its mirror yet, or just deleted): values inferred from the runtime".into(),
                    );
                }
                false
            }
        };
        if exact {
            summary.exact += 1;
        } else {
            summary.inferred += 1;
        }
    }
    summary
}

/// Merge one pod; true when its spec values are exact.
fn merge_one(lp: &mut LivePod, api: &ApiPod, fresh: bool, version: KubeletVersion) -> bool {
    let spec = match admitted_model(api, version) {
        Ok(p) => p,
        Err(e) => {
            lp.warnings.push(format!(
                "the API server's spec cannot be used ({e}): values inferred from the runtime"
            ));
            return false;
        }
    };
    // Immutable on a pod: always taken when known.
    lp.pod.priority = spec.priority;
    lp.pod.priority_class_name = spec.priority_class_name.clone();
    for k in [ANNOTATION_MIRROR, ANNOTATION_SOURCE] {
        if let Some(v) = spec.annotations.get(k) {
            lp.pod.annotations.insert(k.to_string(), v.clone());
        }
    }
    for v in ["priority", "priorityClassName", "staticMirror"] {
        lp.sources.insert(v, ValueSource::Exact);
    }
    if !fresh {
        lp.notes.push(
            "the API server's view is stale: priority and static/mirror markers kept (immutable), requests and limits inferred from the runtime".into(),
        );
        return false;
    }
    let runtime_class = lp.qos_class;
    lp.pod.containers = spec.containers;
    lp.pod.init_containers = spec.init_containers;
    lp.pod.pod_resources = spec.pod_resources;
    lp.pod.overhead = spec.overhead;
    lp.pod.termination_grace_period_seconds = spec.termination_grace_period_seconds;
    lp.pod.volumes = spec.volumes;
    if let Some(r) = &spec.resize {
        lp.notes.push(admitted::describe(r));
    }
    lp.pod.resize = spec.resize;
    for (k, v) in spec.annotations {
        lp.pod.annotations.entry(k).or_insert(v);
    }
    for v in qosd_model::core::model::TRACKED_VALUES {
        lp.sources.insert(v, ValueSource::Exact);
    }
    let api_class = &api.status.qos_class;
    if !api_class.is_empty() && api_class != runtime_class.as_str() {
        lp.warnings.push(format!(
            "the API server says QoS class {api_class}, the pod's cgroup is {runtime_class}: planning the cgroup where it is"
        ));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::{QosSource, SandboxState};
    use qosd_model::core::model::{provenance_all, QosClass};

    fn live(uid: &str) -> LivePod {
        let mut pod = Pod::new(uid, "ns", "p");
        pod.qos_override = Some(QosClass::Burstable);
        LivePod {
            pod,
            sandbox_id: "sb".into(),
            state: SandboxState::Ready,
            qos_class: QosClass::Burstable,
            qos_source: QosSource::CgroupParent,
            cgroup_parent: None,
            containers: vec![],
            notes: vec![],
            warnings: vec![],
            sources: provenance_all(ValueSource::Inferred),
            created_at: 0,
        }
    }

    fn api(file: &str) -> ApiPod {
        serde_json::from_str(
            &std::fs::read_to_string(format!(
                concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/kube/{}"),
                file
            ))
            .unwrap(),
        )
        .unwrap()
    }

    fn view(pods: Vec<ApiPod>, fresh: bool) -> ApiView {
        ApiView {
            pods: pods
                .into_iter()
                .map(|p| (p.metadata.uid.clone(), p))
                .collect(),
            unavailable: (!fresh).then(|| "gone".into()),
        }
    }

    #[test]
    fn fresh_view_gives_exact_values() {
        let a = api("web-burstable.json");
        let mut l = vec![live(&a.metadata.uid), live("other")];
        let s = merge(&mut l, &view(vec![a], true), KubeletVersion::NEWEST);
        assert_eq!((s.exact, s.inferred, s.fresh), (1, 1, true));
        let p = &l[0].pod;
        assert_eq!(
            p.containers[0].resources.requests["memory"],
            Quantity::parse("256Mi").unwrap()
        );
        assert_eq!(p.termination_grace_period_seconds, Some(30));
        assert_eq!(l[0].sources["requests"], ValueSource::Exact);
        assert_eq!(l[1].sources["requests"], ValueSource::Inferred);
        assert!(l[1].notes[0].contains("not in the API server"));
        assert_eq!(
            p.qos_override,
            Some(QosClass::Burstable),
            "the runtime's class stays"
        );
    }

    #[test]
    fn stale_view_keeps_only_immutable_values() {
        let mut a = api("web-burstable.json");
        a.spec.priority = Some(2_000_000_000);
        let mut l = vec![live(&a.metadata.uid)];
        let s = merge(&mut l, &view(vec![a], false), KubeletVersion::NEWEST);
        assert_eq!((s.exact, s.inferred), (0, 1));
        assert_eq!(l[0].pod.priority, 2_000_000_000);
        assert!(
            l[0].pod.containers.is_empty(),
            "requests not taken from a stale view"
        );
        assert_eq!(l[0].sources["priority"], ValueSource::Exact);
        assert_eq!(l[0].sources["requests"], ValueSource::Inferred);
    }

    #[test]
    fn mirror_pod_matches_by_annotation() {
        let mut a = api("web-burstable.json");
        a.metadata.uid = "api-uid".into();
        a.metadata
            .annotations
            .insert(ANNOTATION_MIRROR.into(), "static-hash".into());
        let mut l = vec![live("static-hash")];
        merge(&mut l, &view(vec![a], true), KubeletVersion::NEWEST);
        assert!(l[0].pod.is_static_or_mirror());
        assert_eq!(l[0].pod.uid, "static-hash", "the runtime's uid stays");
    }

    /// An API pod whose resize the kubelet refused: the admitted
    /// resources (status) are merged, the spec's are kept for output; the
    /// emptyDir volumes come along.
    #[test]
    fn admitted_resources_and_volumes_from_the_api() {
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("../../../../fixtures/kube/web-burstable.json"))
                .unwrap();
        v["spec"]["containers"][0]["resources"] = serde_json::json!({
            "requests": {"cpu": "100", "memory": "256Mi"},
            "limits": {"memory": "512Mi"}
        });
        v["spec"]["volumes"] = serde_json::json!([
            {"name": "scratch", "emptyDir": {"sizeLimit": " 64Mi "}},
            {"name": "ram", "emptyDir": {"medium": "Memory"}},
            {"name": "cfg", "configMap": {"name": "x"}}
        ]);
        v["metadata"]["generation"] = serde_json::json!(2);
        v["status"]["observedGeneration"] = serde_json::json!(2);
        v["status"]["conditions"] = serde_json::json!([
            {"type": "Ready", "status": "True"},
            {"type": "PodResizePending", "status": "True", "reason": "Infeasible",
             "message": "Node didn't have enough capacity: cpu, requested: 100000, capacity: 4000",
             "observedGeneration": 2, "lastProbeTime": null}
        ]);
        v["status"]["containerStatuses"][0]["allocatedResources"] =
            serde_json::json!({"cpu": "1600m", "memory": "256Mi"});
        v["status"]["containerStatuses"][0]["resources"] = serde_json::json!({
            "requests": {"cpu": "1600m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"}
        });
        let a: ApiPod = serde_json::from_value(v).unwrap();
        let mut l = vec![live(&a.metadata.uid)];
        let s = merge(&mut l, &view(vec![a], true), KubeletVersion::NEWEST);
        assert_eq!(s.exact, 1);
        let p = &l[0].pod;
        assert_eq!(
            p.containers[0].resources.requests["cpu"],
            Quantity::parse("1600m").unwrap()
        );
        let r = p.resize.as_ref().unwrap();
        assert_eq!(r.state, qosd_model::core::model::ResizeState::Infeasible);
        assert_eq!(
            r.desired["web"].requests["cpu"],
            Quantity::parse("100").unwrap()
        );
        assert!(l[0].notes.iter().any(|n| n.contains("pending (Infeasible)")
            && n.contains("Node didn't have enough capacity")));
        assert_eq!(p.volumes.len(), 3);
        let ed = p.volumes[0].empty_dir.as_ref().unwrap();
        assert_eq!(ed.size_limit.as_ref().unwrap().value_ceil(), 64 << 20);
        assert!(p.volumes[1].empty_dir.as_ref().unwrap().memory);
        assert!(p.volumes[2].empty_dir.is_none());
    }

    #[test]
    fn bad_quantity_falls_back() {
        let mut a = api("web-burstable.json");
        a.spec.containers[0]
            .resources
            .requests
            .insert("memory".into(), "lots".into());
        let mut l = vec![live(&a.metadata.uid)];
        let s = merge(&mut l, &view(vec![a], true), KubeletVersion::NEWEST);
        assert_eq!(s.inferred, 1);
        assert!(l[0].warnings[0].contains("lots"));
    }
}
