//! The pod model every part of qosd shares.
//!
//! Data flows one way: a *pod source* (manifests, CRI) produces [`Pod`]s; the
//! classifier ([`crate::core::qos`]) and the planner ([`crate::policy::enforce::plan`]) read them and
//! produce a list of [`CgroupWrite`]s; an applier (real or dry-run) performs
//! them. Nothing in this module does I/O.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::core::quantity::Quantity;

/// Resource name → quantity, as in a Kubernetes `ResourceList`.
pub type ResourceList = BTreeMap<String, Quantity>;

/// `resources.requests` / `resources.limits` of a container or a pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceRequirements {
    /// `requests`: resource name → requested quantity.
    pub requests: ResourceList,
    /// `limits`: resource name → limit.
    pub limits: ResourceList,
}

/// One container (app or init) of a pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Container {
    /// The container's name, unique within the pod.
    pub name: String,
    /// Its `resources` (requests and limits).
    pub resources: ResourceRequirements,
    /// Init containers only: `restartPolicy: Always` makes it a restartable
    /// sidecar, which keeps running beside the app containers.
    pub restartable: bool,
}

/// Where a pod came from, for messages and output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "detail")]
pub enum PodOrigin {
    /// A manifest file (path as given).
    Manifest(String),
    /// A live pod sandbox from the container runtime (sandbox id).
    Cri(String),
    /// Built in code (tests, benchmarks).
    Synthetic,
}

/// A pod, with just the fields qosd needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    /// `metadata.uid` (or one qosd derived, see `uid_derived`).
    pub uid: String,
    /// True when the manifest had no uid and qosd derived one from
    /// namespace/name (deterministically), so output can say so.
    pub uid_derived: bool,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The app containers (`spec.containers`).
    pub containers: Vec<Container>,
    /// The init containers (`spec.initContainers`), restartable sidecars included.
    pub init_containers: Vec<Container>,
    /// Pod-level `spec.resources` (KEP-2837); when set it decides QoS and sizing.
    pub pod_resources: Option<ResourceRequirements>,
    /// `spec.overhead` (RuntimeClass overhead), added to the pod's sums.
    pub overhead: ResourceList,
    /// `spec.priority` (0 when unset, like the API server's default).
    pub priority: i32,
    /// `spec.priorityClassName`, if set.
    pub priority_class_name: Option<String>,
    /// `spec.terminationGracePeriodSeconds`, if set.
    pub termination_grace_period_seconds: Option<i64>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// Where the pod came from.
    pub origin: PodOrigin,
    /// Set by sources that know the class better than the resources say
    /// (CRI: the cgroup parent's QoS segment). `None`: classify from resources.
    pub qos_override: Option<QosClass>,
    /// `spec.volumes` as far as eviction needs them (emptyDir medium and
    /// sizeLimit). Empty when the source does not carry them (the CRI).
    pub volumes: Vec<Volume>,
    /// An in-place resize the source reported (the pod's status), for
    /// output only: `containers`, `init_containers` and `pod_resources`
    /// above already hold what the kubelet admitted (what its cgroups
    /// hold), which is what everything plans and ranks with. `None`: no
    /// resize under way (or a source that cannot tell, the CRI).
    pub resize: Option<Resize>,
}

/// An in-place resize (InPlacePodVerticalScaling) not yet fully applied:
/// its state and the desired (spec) resources that differ from the
/// admitted ones. Decided by the pod's source; the model only carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Resize {
    /// Where the resize stands.
    pub state: ResizeState,
    /// The condition's message (why Deferred, Infeasible or Error), if any.
    pub message: Option<String>,
    /// Desired resources of each container (app or sidecar, by name) whose
    /// admitted resources differ from them.
    pub desired: BTreeMap<String, ResourceRequirements>,
    /// Desired pod-level `spec.resources`, when the admitted ones differ.
    pub desired_pod: Option<ResourceRequirements>,
}

/// Where an in-place resize stands, from the kubelet's pod status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ResizeState {
    /// The spec changed and the kubelet has not acted on it yet
    /// (`status.observedGeneration` behind `metadata.generation`, or the
    /// allocation differs from the spec without a condition).
    NotObserved,
    /// `PodResizePending`, reason `Deferred` (or a reason qosd does not
    /// know, which Kubernetes says to read as Deferred): retried later.
    Deferred,
    /// `PodResizePending`, reason `Infeasible`: never applied.
    Infeasible,
    /// `PodResizeInProgress`: admitted, being applied.
    InProgress,
    /// `PodResizeInProgress` with reason `Error`: admitted, but applying it
    /// failed (e.g. a memory limit below the current usage); the runtime's
    /// values stay until a retry succeeds.
    Error,
}

impl ResizeState {
    /// The state's name, as printed (`NotObserved`, `Deferred`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ResizeState::NotObserved => "NotObserved",
            ResizeState::Deferred => "Deferred",
            ResizeState::Infeasible => "Infeasible",
            ResizeState::InProgress => "InProgress",
            ResizeState::Error => "Error",
        }
    }
}

impl fmt::Display for ResizeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One pod volume (the fields local-storage eviction needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// The volume's name, unique within the pod.
    pub name: String,
    /// `emptyDir`, if the volume is one.
    pub empty_dir: Option<EmptyDir>,
}

/// An `emptyDir` volume source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmptyDir {
    /// `medium: Memory` (a tmpfs; not local ephemeral storage).
    pub memory: bool,
    /// `sizeLimit`, if set.
    pub size_limit: Option<Quantity>,
}

impl Pod {
    /// A pod with the given identity and nothing else (builder start).
    pub fn new(
        uid: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Pod {
        Pod {
            uid: uid.into(),
            uid_derived: false,
            namespace: namespace.into(),
            name: name.into(),
            containers: Vec::new(),
            init_containers: Vec::new(),
            pod_resources: None,
            overhead: ResourceList::new(),
            priority: 0,
            priority_class_name: None,
            termination_grace_period_seconds: None,
            annotations: BTreeMap::new(),
            origin: PodOrigin::Synthetic,
            qos_override: None,
            volumes: Vec::new(),
            resize: None,
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Static pods (from a file or URL source) and their mirror pods: the
    /// kubelet never evicts them.
    pub fn is_static_or_mirror(&self) -> bool {
        if self.annotations.contains_key(ANNOTATION_MIRROR) {
            return true;
        }
        matches!(self.annotations.get(ANNOTATION_SOURCE).map(String::as_str), Some(s) if s != "api")
    }
}

/// `kubernetes.io/config.mirror`: present on mirror pods.
pub const ANNOTATION_MIRROR: &str = "kubernetes.io/config.mirror";
/// `kubernetes.io/config.source`: `api` for API pods, `file`/`http` for static pods.
pub const ANNOTATION_SOURCE: &str = "kubernetes.io/config.source";
/// scheduling.SystemCriticalPriority (2 × 10^9).
pub(crate) const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Kubernetes QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum QosClass {
    /// CPU and memory limits set, with requests equal to them (on every container, or on the
    /// pod-level resources).
    Guaranteed,
    /// Neither Guaranteed nor BestEffort.
    Burstable,
    /// No CPU or memory request or limit at all.
    BestEffort,
}

impl QosClass {
    /// The class name as Kubernetes spells it (`Guaranteed`, `Burstable`, `BestEffort`).
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }

    /// The QoS-level cgroup segment (`burstable`, `besteffort`), none for Guaranteed.
    pub fn cgroup_segment(self) -> Option<&'static str> {
        match self {
            QosClass::Guaranteed => None,
            QosClass::Burstable => Some("burstable"),
            QosClass::BestEffort => Some("besteffort"),
        }
    }
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// cgroup hierarchy version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    /// cgroup v1 (one hierarchy per controller).
    V1,
    /// cgroup v2 (the unified hierarchy).
    V2,
}

impl CgroupVersion {
    /// `v1` or `v2`.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        }
    }
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// cgroup driver (naming scheme), as the kubelet's `cgroupDriver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    /// `cgroupfs`: plain directory names (`kubepods/burstable/pod<uid>`).
    Cgroupfs,
    /// `systemd`: slice units (`kubepods-burstable-pod<uid>.slice`).
    Systemd,
}

impl CgroupDriver {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }
}

impl fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Level of a cgroup in the kubepods hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupLevel {
    /// A reserved cgroup (system-reserved / kube-reserved): written, never
    /// created.
    Reserved,
    /// The node-level cgroup (`kubepods`).
    Node,
    /// A QoS-level cgroup (`burstable`, `besteffort`).
    Qos,
    /// A pod cgroup (`pod<uid>`).
    Pod,
}

/// One write of a cgroup interface file. A plan is an ordered list of these
/// (parents before children); appliers perform them (or print them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupWrite {
    /// Absolute path of the interface file, e.g.
    /// `/sys/fs/cgroup/cpu/kubepods/burstable/pod<uid>/cpu.shares`.
    pub file: PathBuf,
    /// Exactly the string written (no trailing newline).
    pub value: String,
    /// Absolute directory of the cgroup the file belongs to (created by the
    /// applier when missing).
    #[serde(skip)]
    pub dir: PathBuf,
    /// Logical cgroup name relative to the cgroup root, e.g.
    /// `kubepods/burstable/pod<uid>` (or the systemd slice path).
    #[serde(skip)]
    pub cgroup: String,
    /// The level of that cgroup.
    #[serde(skip)]
    pub level: CgroupLevel,
}

/// Which source decided a pod value: `exact` (the pod spec from the API
/// server) or `inferred` (rebuilt from what the container runtime reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueSource {
    /// From the pod spec the API server holds.
    Exact,
    /// Rebuilt from what the container runtime reports.
    Inferred,
}

/// Per-value sources of a live pod (value name → source).
pub type Provenance = BTreeMap<&'static str, ValueSource>;

/// The pod values whose source is tracked, in the pod spec's field names.
pub const TRACKED_VALUES: [&str; 10] = [
    "requests",
    "limits",
    "initContainers",
    "overhead",
    "podResources",
    "ephemeralStorage",
    "priority",
    "priorityClassName",
    "terminationGracePeriodSeconds",
    "staticMirror",
];

/// Every tracked value from one source.
pub fn provenance_all(source: ValueSource) -> Provenance {
    TRACKED_VALUES.iter().map(|v| (*v, source)).collect()
}
