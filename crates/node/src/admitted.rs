//! What the kubelet admitted: a pod's resources as its cgroups hold them
//! during an in-place resize (InPlacePodVerticalScaling, on by default from
//! 1.33, GA in 1.35), from the pod's status. Pure logic, no I/O; the
//! sources (the API merge, manifests) call `admit` and hand the model a
//! pod with the admitted resources.
//!
//! The kubelet sizes pod cgroups, container resources and oom_score_adj
//! from the *allocated* pod (`allocation_manager.go`
//! `UpdatePodFromAllocation`, then `ResourceConfigForPod`), not from the
//! spec. The API shows the allocation only partly: requests in
//! `status.containerStatuses[].allocatedResources` (sidecars in
//! `initContainerStatuses`), what the runtime runs in `…[].resources`, and
//! the resize state in the `PodResizePending` (reasons `Deferred`,
//! `Infeasible`) and `PodResizeInProgress` (reason `Error` when applying
//! failed) conditions. The rules, in order:
//!
//! 1. `PodResizePending` present: the resize was not admitted. Requests
//!    are the allocated ones; limits the ones the runtime runs
//!    (`resources.limits`: the allocation's until a resize is actuated),
//!    the spec's for a container not running.
//! 2. `status.observedGeneration` behind `metadata.generation` (reported
//!    from 1.34), or an allocation that differs from the spec's requests:
//!    the kubelet has not acted on the spec yet — as in rule 1.
//! 3. `PodResizeInProgress` with reason `Error`: admitted but applying it
//!    failed (e.g. a memory limit below the usage) and is retried: the
//!    requests are the allocated ones (the spec's), the limits stay the
//!    ones the runtime runs.
//! 4. Otherwise the spec is admitted (`PodResizeInProgress` alone: being
//!    applied, the pod cgroup already follows it).
//!
//! cpu and memory only: nothing else can be resized. Non-restartable init
//! containers are never resized. Pod-level `spec.resources` follow the same
//! rules from kubelet 1.36 (`pod-level-resize`, pod-level
//! `status.allocatedResources` / `status.resources`); before, the kubelet
//! uses `spec.resources` as written.

use std::collections::BTreeMap;

use qosd_model::core::model::{
    Container, Pod, Resize, ResizeState, ResourceList, ResourceRequirements,
};
use qosd_model::policy::enforce::versions::{KubeletVersion, Rule};

/// The resources the kubelet may change in place.
const RESIZABLE: [&str; 2] = ["cpu", "memory"];

/// `PodReasonInfeasible`.
pub(crate) const REASON_INFEASIBLE: &str = "Infeasible";
/// `PodReasonError` (of `PodResizeInProgress`).
pub(crate) const REASON_ERROR: &str = "Error";

/// A pod condition's reason and message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Condition {
    pub reason: String,
    pub message: String,
}

/// One container's status: `allocatedResources` and `resources`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ContainerStatus {
    /// The kubelet's allocated requests (`None`: not reported).
    pub allocated: Option<ResourceList>,
    /// What the runtime runs (`None`: not reported, e.g. not running).
    pub actual: Option<ResourceRequirements>,
}

/// What a pod's status says about its resources. Empty (the default):
/// nothing known, the spec is what the kubelet admitted.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PodStatus {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `status.observedGeneration` (PodObservedGenerationTracking, on from 1.34).
    pub observed_generation: Option<i64>,
    /// The `PodResizePending` condition, when present (status True).
    pub pending: Option<Condition>,
    /// The `PodResizeInProgress` condition, when present (status True).
    pub in_progress: Option<Condition>,
    /// `containerStatuses` and `initContainerStatuses`, by container name.
    pub containers: BTreeMap<String, ContainerStatus>,
    /// Pod-level `status.allocatedResources`.
    pub pod_allocated: Option<ResourceList>,
    /// Pod-level `status.resources`.
    pub pod_actual: Option<ResourceRequirements>,
}

/// The pod with the resources the kubelet admitted (see the module docs),
/// `resize` set when a resize is under way. `desired` is the pod as its
/// spec says.
pub(crate) fn admit(mut desired: Pod, status: &PodStatus, version: KubeletVersion) -> Pod {
    let pod_level = version.has(Rule::PodLevelResize);
    let state = resize_state(&desired, status, pod_level);
    let Some(state) = state else {
        desired.resize = None;
        return desired;
    };
    let spec = desired.clone();
    let admitted_of = |c: &Container| -> ResourceRequirements {
        let st = status.containers.get(&c.name);
        match state {
            ResizeState::InProgress => c.resources.clone(),
            _ => allocated(&c.resources, st),
        }
    };
    for c in desired
        .containers
        .iter_mut()
        .chain(desired.init_containers.iter_mut().filter(|c| c.restartable))
    {
        c.resources = admitted_of(&*c);
    }
    if pod_level && state != ResizeState::InProgress {
        let st = ContainerStatus {
            allocated: status.pod_allocated.clone(),
            actual: status.pod_actual.clone(),
        };
        desired.pod_resources = desired
            .pod_resources
            .take()
            .map(|r| allocated(&r, Some(&st)));
    }
    let mut resize = Resize {
        state,
        message: match state {
            ResizeState::Deferred | ResizeState::Infeasible => status.pending.as_ref(),
            ResizeState::InProgress | ResizeState::Error => status.in_progress.as_ref(),
            ResizeState::NotObserved => None,
        }
        .map(|c| c.message.clone())
        .filter(|m| !m.is_empty()),
        desired: BTreeMap::new(),
        desired_pod: None,
    };
    let admitted = desired;
    let pairs = spec.containers.iter().zip(&admitted.containers).chain(
        spec.init_containers
            .iter()
            .zip(&admitted.init_containers)
            .filter(|(c, _)| c.restartable),
    );
    for (want, got) in pairs {
        if want.resources != got.resources {
            resize
                .desired
                .insert(want.name.clone(), want.resources.clone());
        }
    }
    if spec.pod_resources != admitted.pod_resources {
        resize.desired_pod = spec.pod_resources.clone();
    }
    Pod {
        resize: Some(resize),
        ..admitted
    }
}

/// How a pod's resize stands, in words (for notes and warnings).
pub fn describe(r: &Resize) -> String {
    let what = match r.state {
        ResizeState::NotObserved => "not acted on by the kubelet yet",
        ResizeState::Deferred => "pending (Deferred)",
        ResizeState::Infeasible => "pending (Infeasible)",
        ResizeState::InProgress => "in progress",
        ResizeState::Error => "in progress with an error",
    };
    let values = if r.desired.is_empty() && r.desired_pod.is_none() {
        "requests and limits are the spec's"
    } else {
        "requests and limits are the ones the kubelet admitted, not the spec's"
    };
    match &r.message {
        Some(m) => format!("in-place resize {what}: {m}; {values}"),
        None => format!("in-place resize {what}; {values}"),
    }
}

/// The resize state, or `None` when the spec is admitted and applied.
fn resize_state(desired: &Pod, status: &PodStatus, pod_level: bool) -> Option<ResizeState> {
    if let Some(p) = &status.pending {
        // Kubernetes: a reason a client does not know means Deferred.
        return Some(if p.reason == REASON_INFEASIBLE {
            ResizeState::Infeasible
        } else {
            ResizeState::Deferred
        });
    }
    let behind = matches!(
        (status.generation, status.observed_generation),
        (Some(g), Some(o)) if o < g
    );
    let differs = desired
        .containers
        .iter()
        .chain(desired.init_containers.iter().filter(|c| c.restartable))
        .any(|c| {
            let a = status
                .containers
                .get(&c.name)
                .and_then(|s| s.allocated.as_ref());
            a.is_some_and(|a| requests_differ(&c.resources, a))
        });
    let pod_differs = pod_level
        && desired.pod_resources.as_ref().is_some_and(|r| {
            status
                .pod_allocated
                .as_ref()
                .is_some_and(|a| requests_differ(r, a))
        });
    if behind || differs || pod_differs {
        return Some(ResizeState::NotObserved);
    }
    match &status.in_progress {
        Some(c) if c.reason == REASON_ERROR => Some(ResizeState::Error),
        Some(_) => Some(ResizeState::InProgress),
        None => None,
    }
}

/// The spec's cpu/memory requests differ from an allocation.
fn requests_differ(spec: &ResourceRequirements, allocated: &ResourceList) -> bool {
    RESIZABLE.iter().any(|n| {
        let want = spec.requests.get(*n).or_else(|| spec.limits.get(*n));
        want != allocated.get(*n)
    })
}

/// Resources not yet admitted: the allocated requests, the limits the
/// runtime runs (the spec's when it reports none), the spec for the rest.
fn allocated(spec: &ResourceRequirements, st: Option<&ContainerStatus>) -> ResourceRequirements {
    let mut out = spec.clone();
    let Some(st) = st else { return out };
    if let Some(a) = &st.allocated {
        replace_resizable(&mut out.requests, a);
    }
    if let Some(actual) = &st.actual {
        replace_resizable(&mut out.limits, &actual.limits);
    }
    out
}

/// `to`'s cpu and memory entries become `from`'s (absent in `from`: removed).
fn replace_resizable(to: &mut ResourceList, from: &ResourceList) {
    for n in RESIZABLE {
        match from.get(n) {
            Some(q) => {
                to.insert(n.to_string(), q.clone());
            }
            None => {
                to.remove(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qosd_model::core::model::{CgroupDriver, CgroupLevel, CgroupVersion};
    use qosd_model::core::node::NodeResources;
    use qosd_model::core::quantity::Quantity;
    use qosd_model::policy::enforce::naming::CgroupLayout;
    use qosd_model::policy::enforce::plan::{build, PlanConfig};

    /// `cpu=1,memory=1Gi` → a resource list.
    fn rl(s: &str) -> ResourceList {
        s.split(',')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), Quantity::parse(v).unwrap())
            })
            .collect()
    }

    /// requests, limits (the API server's defaulting: a missing request
    /// is the limit).
    fn res(requests: &str, limits: &str) -> ResourceRequirements {
        let mut r = ResourceRequirements {
            requests: rl(requests),
            limits: rl(limits),
        };
        for (k, v) in r.limits.clone() {
            r.requests.entry(k).or_insert(v);
        }
        r
    }

    fn pod(containers: &[(&str, ResourceRequirements)]) -> Pod {
        let mut p = Pod::new("u-1", "ns", "p");
        for (name, r) in containers {
            p.containers.push(Container {
                name: name.to_string(),
                resources: r.clone(),
                restartable: false,
            });
        }
        p
    }

    /// A container status: allocated requests, and what the runtime runs
    /// (requests, limits) when running.
    fn cs(allocated: &str, actual: Option<(&str, &str)>) -> ContainerStatus {
        ContainerStatus {
            allocated: Some(rl(allocated)),
            actual: actual.map(|(r, l)| ResourceRequirements {
                requests: rl(r),
                limits: rl(l),
            }),
        }
    }

    enum Cond {
        None,
        Pending(&'static str),
        InProgress,
        Error,
    }

    fn status(cond: Cond, containers: &[(&str, ContainerStatus)]) -> PodStatus {
        let c = |reason: &str| {
            Some(Condition {
                reason: reason.into(),
                message: format!("{reason} message"),
            })
        };
        let mut st = PodStatus {
            containers: containers
                .iter()
                .map(|(n, s)| (n.to_string(), s.clone()))
                .collect(),
            ..PodStatus::default()
        };
        match cond {
            Cond::None => {}
            Cond::Pending(r) => st.pending = c(r),
            Cond::InProgress => st.in_progress = c(""),
            Cond::Error => st.in_progress = c(REASON_ERROR),
        }
        st
    }

    /// The pod cgroup's (cpu.shares, cpu.cfs_quota_us, memory.limit_in_bytes)
    /// the plan writes (cgroup v1, cgroupfs, a 4-CPU 8Gi node).
    fn cgroup(p: &Pod, version: KubeletVersion) -> (String, String, String) {
        let mut cfg = PlanConfig::new(
            CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs),
            NodeResources::from_capacity(4000, 8 << 30),
        );
        cfg.kubelet_version = version;
        let plan = build(&cfg, std::slice::from_ref(p));
        let get = |f: &str| {
            plan.writes
                .iter()
                .find(|w| w.level == CgroupLevel::Pod && w.file.ends_with(f))
                .map(|w| w.value.clone())
                .unwrap_or_else(|| "-".into())
        };
        (
            get("cpu.shares"),
            get("cpu.cfs_quota_us"),
            get("memory.limit_in_bytes"),
        )
    }

    fn vals(s: &str, q: &str, m: &str) -> (String, String, String) {
        (s.into(), q.into(), m.into())
    }

    const MI: i64 = 1 << 20;

    /// (step, spec cpu, condition, allocated cpu, actual cpu request,
    /// resize state, pod cpu.shares)
    type FlowRow = (
        &'static str,
        &'static str,
        Cond,
        &'static str,
        &'static str,
        Option<ResizeState>,
        &'static str,
    );

    /// KEP-1287's "Flow Control" walk-through, one container, cpu request
    /// only: 1 → 1.5 → 2 (deferred) → 1.6 → 100 (infeasible). At each step
    /// the pod's cpu.shares is the kubelet's (of the allocation).
    #[test]
    fn kep_flow_control_walkthrough() {
        let rows: Vec<FlowRow> = vec![
            // (step, spec cpu, condition, allocated, actual request, state, shares)
            ("running", "1", Cond::None, "1", "1", None, "1024"),
            (
                "resize #1 seen by nobody yet",
                "1500m",
                Cond::None,
                "1",
                "1",
                Some(ResizeState::NotObserved),
                "1024",
            ),
            (
                "resize #1 admitted",
                "1500m",
                Cond::InProgress,
                "1500m",
                "1",
                Some(ResizeState::InProgress),
                "1536",
            ),
            (
                "resize #2 while #1 in progress",
                "2",
                Cond::InProgress,
                "1500m",
                "1",
                Some(ResizeState::NotObserved),
                "1536",
            ),
            (
                "resize #2 deferred",
                "2",
                Cond::Pending("Deferred"),
                "1500m",
                "1500m",
                Some(ResizeState::Deferred),
                "1536",
            ),
            (
                "resize #3 before the kubelet syncs",
                "1600m",
                Cond::Pending("Deferred"),
                "1500m",
                "1500m",
                Some(ResizeState::Deferred),
                "1536",
            ),
            (
                "resize #3 admitted",
                "1600m",
                Cond::InProgress,
                "1600m",
                "1500m",
                Some(ResizeState::InProgress),
                "1638",
            ),
            (
                "resize #3 done",
                "1600m",
                Cond::None,
                "1600m",
                "1600m",
                None,
                "1638",
            ),
            (
                "resize #4 not seen yet",
                "100",
                Cond::None,
                "1600m",
                "1600m",
                Some(ResizeState::NotObserved),
                "1638",
            ),
            (
                "resize #4 infeasible",
                "100",
                Cond::Pending("Infeasible"),
                "1600m",
                "1600m",
                Some(ResizeState::Infeasible),
                "1638",
            ),
        ];
        for (step, spec, cond, alloc, actual, state, shares) in rows {
            let p = pod(&[("c", res(&format!("cpu={spec}"), ""))]);
            let actual = format!("cpu={actual}");
            let st = status(
                cond,
                &[(
                    "c",
                    cs(&format!("cpu={alloc}"), Some((actual.as_str(), ""))),
                )],
            );
            let a = admit(p, &st, KubeletVersion::NEWEST);
            assert_eq!(a.resize.as_ref().map(|r| r.state), state, "{step}");
            assert_eq!(cgroup(&a, KubeletVersion::NEWEST).0, shares, "{step}");
        }
    }

    /// Guaranteed pods (e2e `pod_resize.go` "guaranteed qos - 1 container":
    /// 20m/35Mi resized to cpu 25m, mem 40Mi, both, opposite directions),
    /// and the static-CPU-manager refusal: at each state the pod
    /// cgroup holds the allocation.
    #[test]
    fn guaranteed_rows() {
        let g = |cpu: &str, mem: &str| res("", &format!("cpu={cpu},memory={mem}"));
        let orig = ("20m", "35Mi");
        // (row, desired cpu, desired mem)
        let rows = [
            ("cpu", "25m", "35Mi"),
            ("mem", "20m", "40Mi"),
            ("cpu & mem in the same direction", "25m", "40Mi"),
            ("cpu & mem in opposite directions", "25m", "30Mi"),
            ("static CPU manager refuses 1 → 2 CPUs", "2", "2Gi"),
        ];
        let q = |cpu: &str| (Quantity::parse(cpu).unwrap().milli_ceil() * 100).max(1000);
        let shares = |cpu: &str| (Quantity::parse(cpu).unwrap().milli_ceil() * 1024 / 1000).max(2);
        let bytes = |m: &str| Quantity::parse(m).unwrap().value_ceil();
        for (row, cpu, mem) in rows {
            let from = if cpu == "2" { ("1", "1Gi") } else { orig };
            let alloc = format!("cpu={},memory={}", from.0, from.1);
            let want_from = vals(
                &shares(from.0).to_string(),
                &q(from.0).to_string(),
                &bytes(from.1).to_string(),
            );
            let want_to = vals(
                &shares(cpu).to_string(),
                &q(cpu).to_string(),
                &bytes(mem).to_string(),
            );
            for (cond, admitted_from) in [
                (Cond::Pending("Infeasible"), true),
                (Cond::Pending("Deferred"), true),
                (Cond::InProgress, false),
                (Cond::None, false),
            ] {
                let p = pod(&[("c1", g(cpu, mem))]);
                let actual = (alloc.as_str(), alloc.as_str());
                let now_alloc = if admitted_from {
                    alloc.clone()
                } else {
                    format!("cpu={cpu},memory={mem}")
                };
                let st = status(cond, &[("c1", cs(&now_alloc, Some(actual)))]);
                let a = admit(p, &st, KubeletVersion::NEWEST);
                let want = if admitted_from { &want_from } else { &want_to };
                assert_eq!(&cgroup(&a, KubeletVersion::NEWEST), want, "{row}");
            }
        }
        // The row in numbers: quota 100000 and 1Gi kept.
        let p = pod(&[("c1", g("2", "2Gi"))]);
        let st = status(
            Cond::Pending("Infeasible"),
            &[(
                "c1",
                cs(
                    "cpu=1,memory=1Gi",
                    Some(("cpu=1,memory=1Gi", "cpu=1,memory=1Gi")),
                ),
            )],
        );
        let a = admit(p, &st, KubeletVersion::NEWEST);
        assert_eq!(
            cgroup(&a, KubeletVersion::NEWEST),
            vals("1024", "100000", "1073741824")
        );
        let r = a.resize.unwrap();
        assert_eq!(r.message.as_deref(), Some("Infeasible message"));
        assert_eq!(r.desired["c1"].limits["cpu"], Quantity::parse("2").unwrap());
    }

    /// Burstable, one container with every request and limit (e2e
    /// "burstable pods - 1 container with all requests & limits set"):
    /// 20m/30m cpu, 35Mi/45Mi memory, each row resized; deferred and not
    /// yet seen (observedGeneration behind) keep the original, in progress
    /// and done give the new values.
    #[test]
    fn burstable_rows() {
        let orig = ["20m", "30m", "35Mi", "45Mi"];
        let rows: [(&str, [&str; 4]); 7] = [
            ("cpu requests", ["25m", "30m", "35Mi", "45Mi"]),
            ("cpu limits", ["20m", "35m", "35Mi", "45Mi"]),
            ("mem requests", ["20m", "30m", "40Mi", "45Mi"]),
            ("mem limits", ["20m", "30m", "35Mi", "50Mi"]),
            (
                "all resources in the same direction",
                ["25m", "35m", "40Mi", "50Mi"],
            ),
            (
                "cpu & mem in opposite directions",
                ["25m", "35m", "30Mi", "40Mi"],
            ),
            (
                "requests & limits in opposite directions",
                ["15m", "35m", "40Mi", "40Mi"],
            ),
        ];
        let mk = |v: [&str; 4]| {
            res(
                &format!("cpu={},memory={}", v[0], v[2]),
                &format!("cpu={},memory={}", v[1], v[3]),
            )
        };
        let want = |v: [&str; 4]| {
            let m = |s: &str| Quantity::parse(s).unwrap();
            vals(
                &((m(v[0]).milli_ceil() * 1024 / 1000).max(2)).to_string(),
                &((m(v[1]).milli_ceil() * 100).max(1000)).to_string(),
                &m(v[3]).value_ceil().to_string(),
            )
        };
        let alloc = |v: [&str; 4]| format!("cpu={},memory={}", v[0], v[2]);
        let run = |v: [&str; 4]| {
            (
                format!("cpu={}", v[0]),
                format!("cpu={},memory={}", v[1], v[3]),
            )
        };
        for (row, to) in rows {
            let (ra, la) = run(orig);
            for (cond, allocated_to, behind, expect) in [
                (Cond::Pending("Deferred"), false, false, orig),
                (Cond::None, false, true, orig),
                (Cond::InProgress, true, false, to),
                (Cond::None, true, false, to),
            ] {
                let mut st = status(
                    cond,
                    &[(
                        "c1",
                        cs(
                            &alloc(if allocated_to { to } else { orig }),
                            Some((ra.as_str(), la.as_str())),
                        ),
                    )],
                );
                st.generation = Some(2);
                st.observed_generation = Some(if behind { 1 } else { 2 });
                let a = admit(pod(&[("c1", mk(to))]), &st, KubeletVersion::NEWEST);
                assert_eq!(cgroup(&a, KubeletVersion::NEWEST), want(expect), "{row}");
            }
        }
    }

    /// e2e "6 containers - various operations performed (including adding
    /// limits and requests)" and "resize with equivalents": limits and
    /// requests added by a resize are absent until it is admitted.
    #[test]
    fn added_limits_and_equivalents() {
        // c1 adds a cpu limit to a cpu request, c2 a memory limit: pending,
        // the pod has no cpu quota and no memory limit (not every container
        // declares one — these two have none yet).
        let spec = [
            ("c1", res("cpu=25m", "cpu=35m")),
            ("c2", res("memory=30Mi", "memory=50Mi")),
        ];
        let st = |cond| {
            status(
                cond,
                &[
                    ("c1", cs("cpu=20m", Some(("cpu=20m", "")))),
                    ("c2", cs("memory=35Mi", Some(("", "")))),
                ],
            )
        };
        let a = admit(
            pod(&spec),
            &st(Cond::Pending("Deferred")),
            KubeletVersion::NEWEST,
        );
        assert_eq!(a.containers[0].resources, res("cpu=20m", ""));
        assert_eq!(a.containers[1].resources, res("memory=35Mi", ""));
        assert_eq!(cgroup(&a, KubeletVersion::NEWEST), vals("20", "-", "-"));
        assert_eq!(a.resize.as_ref().unwrap().desired.len(), 2);
        // equivalents: 2m/10m → 1m/5m, the kernel's floors either way
        for (cpu, lim) in [("2m", "10m"), ("1m", "5m")] {
            let p = pod(&[("c1", res(&format!("cpu={cpu}"), &format!("cpu={lim}")))]);
            let st = status(
                Cond::None,
                &[("c1", cs(&format!("cpu={cpu}"), Some(("cpu=2m", "cpu=10m"))))],
            );
            let a = admit(p, &st, KubeletVersion::NEWEST);
            assert!(a.resize.is_none());
            assert_eq!(cgroup(&a, KubeletVersion::NEWEST), vals("2", "1000", "-"));
        }
    }

    /// e2e "decrease memory limit below usage": admitted (InProgress,
    /// reason Error, "memory limit (10240) below current usage"), the
    /// runtime keeps the viable 30Mi limit; the request is the allocation.
    #[test]
    fn memory_limit_below_usage_keeps_the_runtime_limit() {
        let p = pod(&[("c1", res("", "memory=10Ki"))]);
        let st = status(
            Cond::Error,
            &[(
                "c1",
                cs("memory=10Ki", Some(("memory=10Ki", "memory=30Mi"))),
            )],
        );
        let a = admit(p, &st, KubeletVersion::NEWEST);
        assert_eq!(a.resize.as_ref().unwrap().state, ResizeState::Error);
        assert_eq!(cgroup(&a, KubeletVersion::NEWEST).2, (30 * MI).to_string());
        assert_eq!(
            a.containers[0].resources.requests["memory"],
            Quantity::parse("10Ki").unwrap()
        );
    }

    /// Sidecars (restartable init containers) are resized and reported in
    /// initContainerStatuses; ordinary init containers never.
    #[test]
    fn sidecars_follow_their_allocation() {
        let mut p = pod(&[("app", res("cpu=100m", ""))]);
        for (name, restartable) in [("proxy", true), ("setup", false)] {
            p.init_containers.push(Container {
                name: name.into(),
                resources: res("cpu=400m", ""),
                restartable,
            });
        }
        let st = status(
            Cond::Pending("Deferred"),
            &[
                ("app", cs("cpu=100m", Some(("cpu=100m", "")))),
                ("proxy", cs("cpu=200m", Some(("cpu=200m", "")))),
                ("setup", cs("cpu=50m", None)),
            ],
        );
        let a = admit(p, &st, KubeletVersion::NEWEST);
        assert_eq!(a.init_containers[0].resources, res("cpu=200m", ""));
        assert_eq!(
            a.init_containers[1].resources,
            res("cpu=400m", ""),
            "not resizable"
        );
        let r = a.resize.as_ref().unwrap();
        assert_eq!(r.desired.keys().collect::<Vec<_>>(), ["proxy"]);
    }

    /// A container that is not running reports no `resources`: the
    /// allocated requests, the spec's limits.
    #[test]
    fn not_running_container_keeps_spec_limits() {
        let p = pod(&[("c1", res("cpu=500m", "cpu=1"))]);
        let st = status(Cond::Pending("Deferred"), &[("c1", cs("cpu=250m", None))]);
        let a = admit(p, &st, KubeletVersion::NEWEST);
        assert_eq!(a.containers[0].resources, res("cpu=250m", "cpu=1"));
    }

    /// PodObservedGenerationTracking (1.34+): a limit-only resize the
    /// kubelet has not seen shows only in the generations.
    #[test]
    fn observed_generation_behind_means_not_seen() {
        let p = pod(&[("c1", res("cpu=100m", "cpu=400m"))]);
        let mut st = status(
            Cond::None,
            &[("c1", cs("cpu=100m", Some(("cpu=100m", "cpu=200m"))))],
        );
        st.generation = Some(3);
        st.observed_generation = Some(2);
        let a = admit(p.clone(), &st, KubeletVersion::NEWEST);
        assert_eq!(a.resize.as_ref().unwrap().state, ResizeState::NotObserved);
        assert_eq!(cgroup(&a, KubeletVersion::NEWEST).1, "20000");
        st.observed_generation = Some(3);
        let a = admit(p, &st, KubeletVersion::NEWEST);
        assert!(a.resize.is_none());
        assert_eq!(cgroup(&a, KubeletVersion::NEWEST).1, "40000");
    }

    /// `pod-level-resize` (1.36): pod-level spec.resources follow the
    /// pod-level allocation; a 1.35 kubelet sizes the pod from the spec.
    #[test]
    fn pod_level_resize_by_version() {
        let mut p = pod(&[("c1", res("cpu=100m", ""))]);
        p.pod_resources = Some(res("cpu=2", "cpu=2"));
        let mut st = status(
            Cond::Pending("Deferred"),
            &[("c1", cs("cpu=100m", Some(("cpu=100m", ""))))],
        );
        st.pod_allocated = Some(rl("cpu=1"));
        st.pod_actual = Some(ResourceRequirements {
            requests: rl("cpu=1"),
            limits: rl("cpu=1"),
        });
        for (v, quota, shares) in [
            (KubeletVersion::V1_36, "100000", "1024"),
            (KubeletVersion::V1_35, "200000", "2048"),
        ] {
            let a = admit(p.clone(), &st, v);
            let (s, q, _) = cgroup(&a, v);
            assert_eq!((s.as_str(), q.as_str()), (shares, quota), "{v}");
        }
        // no condition yet, but the pod-level allocation differs: not seen
        st.pending = None;
        let a = admit(p.clone(), &st, KubeletVersion::V1_36);
        assert_eq!(a.resize.unwrap().state, ResizeState::NotObserved);
        let a = admit(p, &st, KubeletVersion::V1_35);
        assert!(a.resize.is_none());
    }

    #[test]
    fn unknown_reason_reads_as_deferred_and_empty_status_changes_nothing() {
        let p = pod(&[("c1", res("cpu=1", ""))]);
        let st = status(
            Cond::Pending("SomethingNew"),
            &[("c1", cs("cpu=500m", None))],
        );
        let a = admit(p.clone(), &st, KubeletVersion::NEWEST);
        assert_eq!(a.resize.unwrap().state, ResizeState::Deferred);
        let a = admit(p.clone(), &PodStatus::default(), KubeletVersion::NEWEST);
        assert_eq!(a, p);
    }
}
