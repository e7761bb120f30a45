//! The kubelet's CPU manager policies (pkg/kubelet/cm/cpumanager
//! policy_static.go, policy_options.go, cpu_manager.go), pure:
//!
//! * `none`: every container runs on all CPUs; qosd touches no cpuset.
//! * `static`: a container gets CPUs of its own when its pod is Guaranteed
//!   and its CPU request is a whole number (`2`, `2000m`); every other
//!   container runs on the shared pool = all CPUs minus the exclusive ones
//!   (reserved CPUs stay in the shared pool and are never exclusive).
//!
//! [`plan`] replays the kubelet's per-pod sequence for a set of live pods:
//! drop state of containers that are gone (`removeStaleState`), then, pods
//! in order of arrival, `Allocate` every init container and then every app
//! container, handing a regular init container's CPUs on to the app
//! containers of the same pod (`cpusToReuse`), never a restartable
//! sidecar's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use super::assign::{take_distributed, take_packed, TakeError};
use super::cpuset::CpuSet;
use super::state::CpuState;
use super::topology::CpuTopology;
use crate::core::model::{Pod, QosClass};
use crate::core::qos::classify;
use crate::core::quantity::Quantity;
use crate::core::resources::{container_request, pod_level_resources_set, CPU};

/// `cpuManagerPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyName {
    /// `none`: every container runs on all CPUs (the kubelet's default).
    #[default]
    None,
    /// `static`: Guaranteed containers with integral CPU requests get exclusive CPUs.
    Static,
}

impl PolicyName {
    /// Parse `cpuManagerPolicy` (`none`, `static`; empty means `none`).
    pub fn parse(s: &str) -> Result<PolicyName, PolicyError> {
        match s {
            "none" | "" => Ok(PolicyName::None),
            "static" => Ok(PolicyName::Static),
            other => Err(PolicyError::UnknownPolicy(other.to_string())),
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PolicyName::None => "none",
            PolicyName::Static => "static",
        }
    }
}

/// The kubelet refuses any `cpuManagerPolicyOptions` with the `none`
/// policy at start (cpumanager policy_none.go `NewNonePolicy`): its message,
/// the options printed as a Go map (`map[k:v]`, keys sorted).
pub fn none_policy_options_error(
    policy: PolicyName,
    options: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    if policy != PolicyName::None || options.is_empty() {
        return None;
    }
    let pairs: Vec<String> = options.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    Some(format!(
        "None policy: received unsupported options=map[{}]",
        pairs.join(" ")
    ))
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub(crate) const FULL_PCPUS_ONLY: &str = "full-pcpus-only";
pub(crate) const DISTRIBUTE_CPUS_ACROSS_NUMA: &str = "distribute-cpus-across-numa";
pub(crate) const ALIGN_BY_SOCKET: &str = "align-by-socket";

/// `cpuManagerPolicyOptions` qosd implements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PolicyOptions {
    pub(crate) full_pcpus_only: bool,
    pub(crate) distribute_cpus_across_numa: bool,
    /// Accepted and validated; it only widens a topology manager NUMA hint
    /// to the hint's sockets, and qosd has no topology manager (the
    /// kubelet's default `none` policy gives no hint), so it does not change
    /// the assignment.
    pub(crate) align_by_socket: bool,
}

/// Go `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

impl PolicyOptions {
    /// From the `cpuManagerPolicyOptions` map (`NewStaticPolicyOptions`).
    pub fn parse(map: &BTreeMap<String, String>) -> Result<PolicyOptions, PolicyError> {
        let mut o = PolicyOptions::default();
        for (name, value) in map {
            let slot = match name.as_str() {
                FULL_PCPUS_ONLY => &mut o.full_pcpus_only,
                DISTRIBUTE_CPUS_ACROSS_NUMA => &mut o.distribute_cpus_across_numa,
                ALIGN_BY_SOCKET => &mut o.align_by_socket,
                _ => return Err(PolicyError::UnknownOption(name.clone())),
            };
            *slot = parse_go_bool(value).ok_or_else(|| PolicyError::BadOptionValue {
                name: name.clone(),
                value: value.clone(),
            })?;
        }
        Ok(o)
    }

    /// `k=v,k=v` (the kubelet's `--cpu-manager-policy-options` flag).
    pub fn parse_flag(s: &str) -> Result<BTreeMap<String, String>, PolicyError> {
        let mut map = BTreeMap::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| PolicyError::BadOptionSyntax(part.to_string()))?;
            map.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(map)
    }
}

/// Why the policy cannot start. Messages are the kubelet's where it has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// `cpuManagerPolicy` is neither `none` nor `static`.
    #[error("unknown policy: \"{0}\"")]
    UnknownPolicy(String),
    /// A `cpuManagerPolicyOptions` key the static policy does not know.
    #[error("unknown CPU Manager Policy option: {0:?}")]
    UnknownOption(String),
    /// An option whose value is not a Go boolean.
    #[error("bad value for option {name:?}: strconv.ParseBool: parsing {value:?}: invalid syntax")]
    BadOptionValue {
        /// The option.
        name: String,
        /// Its value.
        value: String,
    },
    /// An option flag entry that is not `key=value`.
    #[error("bad policy option {0:?}: expected key=value")]
    BadOptionSyntax(String),
    /// `align-by-socket` on a machine with more sockets than NUMA nodes.
    #[error("Align by socket is not compatible with hardware where number of sockets are more than number of NUMA")]
    AlignBySocketHardware,
    /// The static policy without any CPU reservation.
    #[error("[cpumanager] unable to determine reserved CPU resources for static policy")]
    ReservationMissing,
    /// A CPU reservation of zero with the static policy.
    #[error("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero")]
    ReservationZero,
    /// Fewer (or more) CPUs reserved than wanted.
    #[error("[cpumanager] unable to reserve the required amount of CPUs (size of {reserved} did not equal {wanted})")]
    ReserveSize {
        /// The CPUs reserved.
        reserved: String,
        /// How many were wanted.
        wanted: usize,
    },
    /// A reserved CPU id the topology does not have.
    #[error("[cpumanager] unable to build the reserved physical CPUs from the reserved set: unknown CPU ID: {0}")]
    ReservedUnknownCpu(u32),
    /// The checkpoint was written by another policy.
    #[error("configured policy {configured:?} differs from state checkpoint policy {found:?}")]
    PolicyMismatch {
        /// The policy configured.
        configured: String,
        /// The policy in the checkpoint.
        found: String,
    },
    /// The checkpoint's shared pool is empty.
    #[error("default cpuset cannot be empty")]
    EmptyDefault,
    /// Reserved CPUs missing from the checkpoint's shared pool.
    #[error("not all reserved cpus: \"{reserved}\" are present in defaultCpuSet: \"{default}\"")]
    ReservedNotInDefault {
        /// The reserved CPUs.
        reserved: String,
        /// The checkpoint's shared pool.
        default: String,
    },
    /// An exclusive assignment that overlaps the shared pool.
    #[error("pod: {pod}, container: {container} cpuset: \"{cpus}\" overlaps with default cpuset \"{default}\"")]
    Overlap {
        /// The pod's uid.
        pod: String,
        /// The container's name.
        container: String,
        /// Its CPUs.
        cpus: String,
        /// The shared pool.
        default: String,
    },
    /// The checkpoint covers other CPUs than the machine has.
    #[error("current set of available CPUs \"{available}\" doesn't match with CPUs in state \"{state}\"")]
    CpusChanged {
        /// The machine's CPUs.
        available: String,
        /// The CPUs in the checkpoint.
        state: String,
    },
}

/// The number of reserved CPUs (cpu_manager.go `NewManager` and the
/// kubelet's `--reserved-cpus` override): the size of `reservedSystemCPUs`
/// when given, else ceil(kubeReserved + systemReserved cpu).
pub fn reserved_cpu_count(
    reserved_millis: Option<i64>,
    reserved_system_cpus: Option<&CpuSet>,
) -> Result<usize, PolicyError> {
    if let Some(s) = reserved_system_cpus.filter(|s| !s.is_empty()) {
        return Ok(s.len());
    }
    match reserved_millis {
        None => Err(PolicyError::ReservationMissing),
        Some(m) if m <= 0 => Err(PolicyError::ReservationZero),
        Some(m) => Ok(((m + 999) / 1000) as usize),
    }
}

/// Why a container cannot get its CPUs; the pod is refused (the kubelet
/// fails it at admission).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AllocError {
    #[error(
        "SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {per_core}"
    )]
    SmtNotMultiple { requested: usize, per_core: usize },
    #[error("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {available}, requested CPUs = {requested}, CPUs per core = {per_core}")]
    SmtPhysical {
        requested: usize,
        per_core: usize,
        available: usize,
    },
    #[error(transparent)]
    Take(#[from] TakeError),
}

/// A container as the CPU manager sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CpuContainer {
    pub(crate) name: String,
    pub(crate) kind: ContainerKind,
    /// The CPU request (API-server defaulted from the limit).
    pub(crate) cpu_request: Option<Quantity>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ContainerKind {
    Init,
    Sidecar,
    App,
}

/// A pod as the CPU manager sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuPod {
    pub(crate) uid: String,
    /// `namespace/name`, for output.
    pub(crate) key: String,
    /// Guaranteed QoS (and no pod-level resources, which the kubelet's CPU
    /// manager leaves to the shared pool without PodLevelResourceManagers).
    pub(crate) guaranteed: bool,
    /// Order of arrival (earlier first; ties by uid): CRI sandbox creation
    /// time, or the manifest order.
    pub(crate) arrival: i64,
    /// Init containers (in order), then app containers.
    pub(crate) containers: Vec<CpuContainer>,
}

impl CpuPod {
    /// The CPU manager's view of `pod`; `arrival` orders pods (earlier first, ties by uid).
    pub fn from_pod(pod: &Pod, arrival: i64) -> CpuPod {
        let guaranteed =
            classify(pod).class == QosClass::Guaranteed && !pod_level_resources_set(pod);
        let conv = |c: &crate::core::model::Container, kind| CpuContainer {
            name: c.name.clone(),
            kind,
            cpu_request: container_request(&c.resources, CPU).cloned(),
        };
        let mut containers: Vec<CpuContainer> = pod
            .init_containers
            .iter()
            .map(|c| {
                conv(
                    c,
                    if c.restartable {
                        ContainerKind::Sidecar
                    } else {
                        ContainerKind::Init
                    },
                )
            })
            .collect();
        containers.extend(pod.containers.iter().map(|c| conv(c, ContainerKind::App)));
        CpuPod {
            uid: pod.uid.clone(),
            key: pod.key(),
            guaranteed,
            arrival,
            containers,
        }
    }

    /// `guaranteedCPUs`: the exclusive CPUs a container asks for (0: shared).
    pub(crate) fn guaranteed_cpus(&self, c: &CpuContainer) -> usize {
        if !self.guaranteed {
            return 0;
        }
        let Some(q) = &c.cpu_request else { return 0 };
        // Value()*1000 == MilliValue(): 2 and 2000m count, 1500m does not.
        let (v, m) = (q.value_ceil(), q.milli_ceil());
        if v.checked_mul(1000) != Some(m) || v <= 0 {
            return 0;
        }
        v as usize
    }
}

/// The static policy (`staticPolicy`).
#[derive(Debug, Clone)]
pub struct StaticPolicy {
    topo: CpuTopology,
    reserved: CpuSet,
    reserved_physical: CpuSet,
    options: PolicyOptions,
    cpus_to_reuse: BTreeMap<String, CpuSet>,
}

impl StaticPolicy {
    /// `NewStaticPolicy`: `num_reserved` CPUs, either `reserved_cpus` when
    /// non-empty or taken by topology (lowest cores first).
    pub fn new(
        topo: CpuTopology,
        num_reserved: usize,
        reserved_cpus: Option<&CpuSet>,
        options: PolicyOptions,
    ) -> Result<StaticPolicy, PolicyError> {
        if options.align_by_socket && topo.num_sockets > topo.num_numa_nodes {
            return Err(PolicyError::AlignBySocketHardware);
        }
        let mut p = StaticPolicy {
            topo,
            reserved: CpuSet::new(),
            reserved_physical: CpuSet::new(),
            options,
            cpus_to_reuse: BTreeMap::new(),
        };
        let reserved = match reserved_cpus.filter(|s| !s.is_empty()) {
            Some(s) => s.clone(),
            None => p
                .take_by_topology(&p.topo.all_cpus(), num_reserved)
                .unwrap_or_default(),
        };
        if reserved.len() != num_reserved {
            return Err(PolicyError::ReserveSize {
                reserved: reserved.to_string(),
                wanted: num_reserved,
            });
        }
        let mut physical = CpuSet::new();
        for cpu in reserved.iter() {
            let core = p
                .topo
                .core_of(cpu)
                .ok_or(PolicyError::ReservedUnknownCpu(cpu))?;
            physical = physical.union(&p.topo.details.cpus_in_cores(&[core]));
        }
        p.reserved = reserved;
        p.reserved_physical = physical;
        Ok(p)
    }

    /// The reserved CPUs (never given exclusively).
    pub fn reserved(&self) -> &CpuSet {
        &self.reserved
    }

    fn take_by_topology(&self, available: &CpuSet, n: usize) -> Result<CpuSet, TakeError> {
        if self.options.distribute_cpus_across_numa {
            let group = if self.options.full_pcpus_only {
                self.topo.cpus_per_core()
            } else {
                1
            };
            take_distributed(&self.topo, available, n, group)
        } else {
            take_packed(&self.topo, available, n)
        }
    }

    /// `Start` / `validateState`: initialize an empty state, or check that a
    /// restored one still fits this machine and reservation.
    pub fn start(&self, s: &mut CpuState) -> Result<(), PolicyError> {
        if !s.policy_name.is_empty() && s.policy_name != PolicyName::Static.as_str() {
            return Err(PolicyError::PolicyMismatch {
                configured: PolicyName::Static.as_str().to_string(),
                found: s.policy_name.clone(),
            });
        }
        s.policy_name = PolicyName::Static.as_str().to_string();
        let all = self.topo.all_cpus();
        if s.default.is_empty() {
            if !s.entries.is_empty() {
                return Err(PolicyError::EmptyDefault);
            }
            s.default = all;
            return Ok(());
        }
        if !self.reserved.is_subset(&s.default) {
            return Err(PolicyError::ReservedNotInDefault {
                reserved: self.reserved.to_string(),
                default: s.default.to_string(),
            });
        }
        for (pod, cs) in &s.entries {
            for (c, set) in cs {
                if !set.intersection(&s.default).is_empty() {
                    return Err(PolicyError::Overlap {
                        pod: pod.clone(),
                        container: c.clone(),
                        cpus: set.to_string(),
                        default: s.default.to_string(),
                    });
                }
            }
        }
        let known = s.default.union(&s.assigned());
        if known != all {
            return Err(PolicyError::CpusChanged {
                available: all.to_string(),
                state: known.to_string(),
            });
        }
        Ok(())
    }

    fn update_cpus_to_reuse(&mut self, pod: &CpuPod, c: &CpuContainer, cset: &CpuSet) {
        self.cpus_to_reuse.retain(|uid, _| *uid == pod.uid);
        let reuse = self.cpus_to_reuse.entry(pod.uid.clone()).or_default();
        if c.kind == ContainerKind::Init {
            *reuse = reuse.union(cset);
        } else {
            // app containers and restartable sidecars keep theirs
            *reuse = reuse.difference(cset);
        }
    }

    /// `Allocate` for one container. Containers already in the state keep
    /// their CPUs (checked first: qosd replays this every pass, the kubelet
    /// once at admission).
    pub(crate) fn allocate(
        &mut self,
        s: &mut CpuState,
        pod: &CpuPod,
        c: &CpuContainer,
    ) -> Result<(), AllocError> {
        let n = pod.guaranteed_cpus(c);
        if n == 0 {
            return Ok(());
        }
        if let Some(cset) = s.get(&pod.uid, &c.name).cloned() {
            self.update_cpus_to_reuse(pod, c, &cset);
            return Ok(());
        }
        if self.options.full_pcpus_only {
            let per_core = self.topo.cpus_per_core();
            if per_core == 0 || n % per_core != 0 {
                return Err(AllocError::SmtNotMultiple {
                    requested: n,
                    per_core,
                });
            }
            let available = s.default.difference(&self.reserved_physical).len();
            if n > available {
                return Err(AllocError::SmtPhysical {
                    requested: n,
                    per_core,
                    available,
                });
            }
        }
        let reusable = self
            .cpus_to_reuse
            .get(&pod.uid)
            .cloned()
            .unwrap_or_default();
        let allocatable = s.default.difference(&self.reserved).union(&reusable);
        let result = self.take_by_topology(&allocatable, n)?;
        s.default = s.default.difference(&result);
        s.set(&pod.uid, &c.name, result.clone());
        self.update_cpus_to_reuse(pod, c, &result);
        Ok(())
    }

    /// `RemoveContainer`: free a container's CPUs except those a sibling in
    /// the same pod still holds.
    pub(crate) fn remove_container(&self, s: &mut CpuState, pod_uid: &str, name: &str) -> CpuSet {
        let Some(to_release) = s.get(pod_uid, name).cloned() else {
            return CpuSet::new();
        };
        s.delete(pod_uid, name);
        let in_use = s
            .entries
            .get(pod_uid)
            .map(|m| m.values().fold(CpuSet::new(), |a, x| a.union(x)))
            .unwrap_or_default();
        let freed = to_release.difference(&in_use);
        s.default = s.default.union(&freed);
        freed
    }
}

/// One container's cpuset in a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerCpus {
    /// The pod's uid.
    pub pod_uid: String,
    /// The pod's `namespace/name`.
    pub pod: String,
    /// The container's name.
    pub container: String,
    pub(crate) kind: ContainerKind,
    /// The CPU list (`2-3`).
    pub cpus: String,
    /// Whether the CPUs are the container's own (a state entry), not the shared pool.
    pub exclusive: bool,
}

/// A pod whose exclusive CPUs could not be allocated (the kubelet would
/// refuse it at admission); its containers stay on the shared pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// The pod's uid.
    pub pod_uid: String,
    /// The pod's `namespace/name`.
    pub pod: String,
    /// The container whose allocation failed.
    pub container: String,
    /// Why (the kubelet's admission message).
    pub error: String,
}

/// The CPU manager's decision for a set of pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuPlan {
    /// The policy that decided.
    pub policy: PolicyName,
    /// The reserved CPUs (a CPU list).
    pub reserved: String,
    /// The shared pool (`defaultCpuSet`) after the assignment (a CPU list).
    pub shared_pool: String,
    /// Every container's cpuset, pods in arrival order.
    pub cpusets: Vec<ContainerCpus>,
    /// Pods whose exclusive CPUs could not be allocated.
    pub refused: Vec<Refused>,
    /// `pod_uid/container` of state entries dropped because the container is gone.
    pub released: Vec<String>,
}

/// Run the static policy over the live pods (see the module docs) and
/// return every container's cpuset. `state` is updated in place.
pub fn plan(policy: &mut StaticPolicy, state: &mut CpuState, pods: &[CpuPod]) -> CpuPlan {
    let mut order: Vec<&CpuPod> = pods.iter().collect();
    order.sort_by(|a, b| (a.arrival, &a.uid).cmp(&(b.arrival, &b.uid)));

    // removeStaleState
    let live: BTreeSet<(&str, &str)> = order
        .iter()
        .flat_map(|p| {
            p.containers
                .iter()
                .map(move |c| (p.uid.as_str(), c.name.as_str()))
        })
        .collect();
    let stale: Vec<(String, String)> = state
        .entries
        .iter()
        .flat_map(|(p, cs)| cs.keys().map(move |c| (p.clone(), c.clone())))
        .filter(|(p, c)| !live.contains(&(p.as_str(), c.as_str())))
        .collect();
    let mut released = Vec::new();
    for (p, c) in stale {
        policy.remove_container(state, &p, &c);
        released.push(format!("{p}/{c}"));
    }

    let mut refused = Vec::new();
    for pod in &order {
        let before: BTreeSet<String> = state
            .entries
            .get(&pod.uid)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for c in &pod.containers {
            if let Err(e) = policy.allocate(state, pod, c) {
                refused.push(Refused {
                    pod_uid: pod.uid.clone(),
                    pod: pod.key.clone(),
                    container: c.name.clone(),
                    error: e.to_string(),
                });
                // The pod is not admitted: undo what this pass gave it.
                for c2 in &pod.containers {
                    if !before.contains(&c2.name) {
                        policy.remove_container(state, &pod.uid, &c2.name);
                    }
                }
                break;
            }
        }
    }

    let mut cpusets = Vec::new();
    for pod in &order {
        for c in &pod.containers {
            let (cpus, exclusive) = match state.get(&pod.uid, &c.name) {
                Some(s) => (s.clone(), true),
                None => (state.default.clone(), false),
            };
            cpusets.push(ContainerCpus {
                pod_uid: pod.uid.clone(),
                pod: pod.key.clone(),
                container: c.name.clone(),
                kind: c.kind,
                cpus: cpus.to_string(),
                exclusive,
            });
        }
    }
    CpuPlan {
        policy: PolicyName::Static,
        reserved: policy.reserved.to_string(),
        shared_pool: state.default.to_string(),
        cpusets,
        refused,
        released,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn none_policy_refuses_every_option_like_the_kubelet() {
        let opts = |kv: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        for (policy, o, want) in [
            (PolicyName::None, opts(&[]), None),
            (
                PolicyName::None,
                opts(&[("full-pcpus-only", "true")]),
                Some("None policy: received unsupported options=map[full-pcpus-only:true]"),
            ),
            (
                PolicyName::None,
                opts(&[("full-pcpus-only", "false"), ("align-by-socket", "true")]),
                Some("None policy: received unsupported options=map[align-by-socket:true full-pcpus-only:false]"),
            ),
            (PolicyName::Static, opts(&[("full-pcpus-only", "true")]), None),
        ] {
            assert_eq!(none_policy_options_error(policy, &o).as_deref(), want, "{o:?}");
        }
    }

    use super::*;
    use crate::policy::cpu::topology::RawCpu;
    use proptest::prelude::*;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    fn single_socket_ht() -> CpuTopology {
        CpuTopology::synthetic(1, 1, 4, 2)
    }

    fn dual_socket_ht() -> CpuTopology {
        let raw: Vec<RawCpu> = (0..12u32)
            .map(|cpu| RawCpu {
                cpu,
                package: cpu % 2,
                die: 0,
                core_id: (cpu % 6) / 2,
                numa: cpu % 2,
            })
            .collect();
        CpuTopology::from_raw(&raw).unwrap()
    }

    fn ctr(name: &str, kind: ContainerKind, cpu: &str) -> CpuContainer {
        CpuContainer {
            name: name.into(),
            kind,
            cpu_request: Some(Quantity::parse(cpu).unwrap()),
        }
    }

    fn gpod(uid: &str, arrival: i64, containers: Vec<CpuContainer>) -> CpuPod {
        CpuPod {
            uid: uid.into(),
            key: format!("default/{uid}"),
            guaranteed: true,
            arrival,
            containers,
        }
    }

    fn opts(full: bool) -> PolicyOptions {
        PolicyOptions {
            full_pcpus_only: full,
            ..Default::default()
        }
    }

    /// The kubelet's TestStaticPolicyAdd cases on the small topologies:
    /// (name, topology, options, reserved count, reserved set, state default,
    /// state assignments, request, result).
    #[test]
    fn kubelet_static_policy_add_table() {
        type Case = (
            &'static str,
            CpuTopology,
            PolicyOptions,
            usize,
            Option<&'static str>,
            &'static str,
            Vec<(&'static str, &'static str)>,
            &'static str,
            Result<&'static str, AllocError>,
        );
        let cases: Vec<Case> = vec![
            (
                "GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
                single_socket_ht(),
                opts(false),
                1,
                None,
                "0-7",
                vec![],
                "1000m",
                Ok("4"),
            ),
            (
                "GuPodSingleCore, SingleSocketHT, ExpectError",
                single_socket_ht(),
                opts(false),
                1,
                None,
                "0-7",
                vec![],
                "8000m",
                Err(AllocError::Take(TakeError::NotEnough {
                    requested: 8,
                    available: 7,
                })),
            ),
            (
                "GuPodMultipleCores, SingleSocketHT, ExpectSameAllocation",
                single_socket_ht(),
                opts(false),
                1,
                None,
                "0-1,4-5",
                vec![("c", "2-3,6-7")],
                "4000m",
                Ok("2-3,6-7"),
            ),
            (
                "GuPodMultipleCores, DualSocketHT, NoAllocExpectError",
                dual_socket_ht(),
                opts(false),
                1,
                None,
                "0,4-11",
                vec![("other", "1-3")],
                "10000m",
                Err(AllocError::Take(TakeError::NotEnough {
                    requested: 10,
                    available: 8,
                })),
            ),
            (
                "GuPodMultipleCores, SingleSocketHT, NoAllocExpectError",
                single_socket_ht(),
                opts(false),
                1,
                None,
                "0,7",
                vec![("other", "1-6")],
                "2000m",
                Err(AllocError::Take(TakeError::NotEnough {
                    requested: 2,
                    available: 1,
                })),
            ),
            (
                "full-pcpus-only GuPodSingleCore, SingleSocketHT",
                single_socket_ht(),
                opts(true),
                1,
                None,
                "0-7",
                vec![],
                "1000m",
                Err(AllocError::SmtNotMultiple {
                    requested: 1,
                    per_core: 2,
                }),
            ),
            (
                "GuPodManyCores, topoDualSocketHT, ExpectDoNotAllocPartialCPU",
                dual_socket_ht(),
                opts(true),
                2,
                Some("1,6"),
                "0,2-5,7-11",
                vec![],
                "10000m",
                Err(AllocError::SmtPhysical {
                    requested: 10,
                    per_core: 2,
                    available: 8,
                }),
            ),
            (
                "GuPodManyCores, topoDualSocketHT, AutoReserve, ExpectAllocAllCPUs",
                dual_socket_ht(),
                opts(true),
                2,
                None,
                "1-5,7-11",
                vec![],
                "10000m",
                Ok("1-5,7-11"),
            ),
            (
                "GuPodManyCores, topoDualSocketHT, ExpectAllocAllCPUs",
                dual_socket_ht(),
                opts(true),
                2,
                Some("0,6"),
                "1-5,7-11",
                vec![],
                "10000m",
                Ok("1-5,7-11"),
            ),
        ];
        for (name, topo, o, nres, res, default, assigned, req, want) in cases {
            let res = res.map(set);
            let mut p = StaticPolicy::new(topo, nres, res.as_ref(), o).unwrap();
            let mut st = CpuState {
                default: set(default),
                ..Default::default()
            };
            for (c, cpus) in &assigned {
                st.set("fakePod", c, set(cpus));
            }
            let pod = gpod("fakePod", 0, vec![ctr("c", ContainerKind::App, req)]);
            let got = p.allocate(&mut st, &pod, &pod.containers[0]);
            match want {
                Ok(w) => {
                    assert_eq!(got, Ok(()), "{name}");
                    assert_eq!(st.get("fakePod", "c"), Some(&set(w)), "{name}");
                    assert!(
                        st.get("fakePod", "c")
                            .unwrap()
                            .intersection(&st.default)
                            .is_empty(),
                        "{name}"
                    );
                }
                Err(e) => {
                    assert_eq!(got, Err(e), "{name}");
                    if assigned.iter().all(|(c, _)| *c != "c") {
                        assert_eq!(st.get("fakePod", "c"), None, "{name}");
                    }
                }
            }
        }
    }

    #[test]
    fn kubelet_error_strings() {
        assert_eq!(
            AllocError::SmtNotMultiple {
                requested: 1,
                per_core: 2
            }
            .to_string(),
            "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"
        );
        assert_eq!(
            AllocError::from(TakeError::NotEnough {
                requested: 8,
                available: 7
            })
            .to_string(),
            "not enough cpus available to satisfy request: requested=8, available=7"
        );
    }

    #[test]
    fn non_integer_and_non_guaranteed_stay_shared() {
        let mut p = StaticPolicy::new(single_socket_ht(), 1, None, opts(false)).unwrap();
        let mut st = CpuState::default();
        p.start(&mut st).unwrap();
        for req in ["977m", "1500m", "0.5"] {
            let pod = gpod("p", 0, vec![ctr("c", ContainerKind::App, req)]);
            p.allocate(&mut st, &pod, &pod.containers[0]).unwrap();
            assert_eq!(st.get("p", "c"), None, "{req}");
        }
        // 2000m counts as an integer
        let pod = gpod("p", 0, vec![ctr("c", ContainerKind::App, "2000m")]);
        p.allocate(&mut st, &pod, &pod.containers[0]).unwrap();
        assert_eq!(st.get("p", "c").unwrap().len(), 2);
        let mut bu = gpod("b", 0, vec![ctr("c", ContainerKind::App, "2")]);
        bu.guaranteed = false;
        p.allocate(&mut st, &bu, &bu.containers[0]).unwrap();
        assert_eq!(st.get("b", "c"), None);
    }

    #[test]
    fn kubelet_reuse_cpus_of_init_container() {
        // TestStaticPolicyReuseCPUs: SingleSocketHT, DeAllocOneInitContainer.
        let mut p = StaticPolicy::new(single_socket_ht(), 0, None, opts(false)).unwrap();
        let mut st = CpuState {
            default: set("0-7"),
            ..Default::default()
        };
        let pod = gpod(
            "p",
            0,
            vec![
                ctr("initContainer-0", ContainerKind::Init, "4000m"),
                ctr("appContainer-0", ContainerKind::App, "2000m"),
            ],
        );
        for c in &pod.containers {
            p.allocate(&mut st, &pod, c).unwrap();
        }
        assert_eq!(st.default, set("2-3,6-7"));
        assert_eq!(st.get("p", "appContainer-0"), Some(&set("0,4")));
        p.remove_container(&mut st, "p", "initContainer-0");
        assert_eq!(st.default, set("1-3,5-7"));
    }

    #[test]
    fn sidecar_cpus_are_never_reused() {
        let mut p = StaticPolicy::new(single_socket_ht(), 0, None, opts(false)).unwrap();
        let mut st = CpuState {
            default: set("0-7"),
            ..Default::default()
        };
        let pod = gpod(
            "p",
            0,
            vec![
                ctr("side", ContainerKind::Sidecar, "2"),
                ctr("app", ContainerKind::App, "2"),
            ],
        );
        for c in &pod.containers {
            p.allocate(&mut st, &pod, c).unwrap();
        }
        let (a, b) = (st.get("p", "side").unwrap(), st.get("p", "app").unwrap());
        assert!(a.intersection(b).is_empty(), "{a} {b}");
    }

    #[test]
    fn reuse_only_within_the_pod() {
        let mut p = StaticPolicy::new(single_socket_ht(), 1, None, opts(false)).unwrap();
        let mut st = CpuState::default();
        p.start(&mut st).unwrap();
        let a = gpod("a", 0, vec![ctr("init", ContainerKind::Init, "2")]);
        let b = gpod("b", 1, vec![ctr("app", ContainerKind::App, "2")]);
        p.allocate(&mut st, &a, &a.containers[0]).unwrap();
        p.allocate(&mut st, &b, &b.containers[0]).unwrap();
        assert!(st
            .get("a", "init")
            .unwrap()
            .intersection(st.get("b", "app").unwrap())
            .is_empty());
    }

    #[test]
    fn reservation_rules() {
        assert_eq!(
            reserved_cpu_count(None, None),
            Err(PolicyError::ReservationMissing)
        );
        assert_eq!(
            reserved_cpu_count(Some(0), None),
            Err(PolicyError::ReservationZero)
        );
        assert_eq!(reserved_cpu_count(Some(1500), None), Ok(2));
        assert_eq!(reserved_cpu_count(Some(1000), None), Ok(1));
        assert_eq!(reserved_cpu_count(Some(0), Some(&set("0,3"))), Ok(2));
        // 8 CPUs with HT: 2 reserved = one whole core {0,4}
        let p = StaticPolicy::new(single_socket_ht(), 2, None, opts(false)).unwrap();
        assert_eq!(p.reserved().to_string(), "0,4");
        let e = StaticPolicy::new(single_socket_ht(), 1, Some(&set("9")), opts(false)).unwrap_err();
        assert_eq!(e.to_string(), "[cpumanager] unable to build the reserved physical CPUs from the reserved set: unknown CPU ID: 9");
        let e = StaticPolicy::new(single_socket_ht(), 9, None, opts(false)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "[cpumanager] unable to reserve the required amount of CPUs (size of  did not equal 9)"
        );
        let two_sockets_one_numa = {
            let raw: Vec<RawCpu> = (0..4u32)
                .map(|cpu| RawCpu {
                    cpu,
                    package: cpu / 2,
                    die: 0,
                    core_id: cpu % 2,
                    numa: 0,
                })
                .collect();
            CpuTopology::from_raw(&raw).unwrap()
        };
        let o = PolicyOptions {
            align_by_socket: true,
            ..Default::default()
        };
        assert_eq!(
            StaticPolicy::new(two_sockets_one_numa, 1, None, o).unwrap_err(),
            PolicyError::AlignBySocketHardware
        );
    }

    #[test]
    fn options_parse() {
        let m = PolicyOptions::parse_flag("full-pcpus-only=true, distribute-cpus-across-numa=1")
            .unwrap();
        let o = PolicyOptions::parse(&m).unwrap();
        assert!(o.full_pcpus_only && o.distribute_cpus_across_numa && !o.align_by_socket);
        let e = PolicyOptions::parse(&PolicyOptions::parse_flag("full-pcpus-only=yes").unwrap())
            .unwrap_err();
        assert_eq!(e.to_string(), "bad value for option \"full-pcpus-only\": strconv.ParseBool: parsing \"yes\": invalid syntax");
        let e = PolicyOptions::parse(&PolicyOptions::parse_flag("nope=true").unwrap()).unwrap_err();
        assert_eq!(e.to_string(), "unknown CPU Manager Policy option: \"nope\"");
        assert!(PolicyOptions::parse_flag("novalue").is_err());
    }

    #[test]
    fn start_validates_restored_state() {
        let p = StaticPolicy::new(single_socket_ht(), 1, None, opts(false)).unwrap();
        let mut st = CpuState {
            default: set("1-7"),
            ..Default::default()
        };
        assert_eq!(
            p.start(&mut st).unwrap_err().to_string(),
            "not all reserved cpus: \"0\" are present in defaultCpuSet: \"1-7\""
        );
        let mut st = CpuState {
            default: set("0-5"),
            ..Default::default()
        };
        assert_eq!(
            p.start(&mut st).unwrap_err().to_string(),
            "current set of available CPUs \"0-7\" doesn't match with CPUs in state \"0-5\""
        );
        let mut st = CpuState {
            default: set("0-5"),
            ..Default::default()
        };
        st.set("p", "c", set("5-7"));
        assert!(matches!(p.start(&mut st), Err(PolicyError::Overlap { .. })));
        let mut st = CpuState {
            policy_name: "none".into(),
            ..Default::default()
        };
        assert_eq!(
            p.start(&mut st).unwrap_err().to_string(),
            "configured policy \"static\" differs from state checkpoint policy \"none\""
        );
        let mut st = CpuState::default();
        st.set("p", "c", set("5-7"));
        assert_eq!(p.start(&mut st), Err(PolicyError::EmptyDefault));
    }

    #[test]
    fn plan_frees_cpus_of_gone_pods_and_refuses_what_does_not_fit() {
        let mut p = StaticPolicy::new(single_socket_ht(), 1, None, opts(false)).unwrap();
        let mut st = CpuState::default();
        p.start(&mut st).unwrap();
        let big = gpod("big", 0, vec![ctr("c", ContainerKind::App, "6")]);
        let small = gpod("small", 1, vec![ctr("c", ContainerKind::App, "2")]);
        let mut shared = gpod("shared", 2, vec![ctr("c", ContainerKind::App, "500m")]);
        shared.guaranteed = false;
        let out = plan(
            &mut p,
            &mut st,
            &[small.clone(), big.clone(), shared.clone()],
        );
        // big arrived first and got 6 of the 7 assignable CPUs
        assert_eq!(out.refused.len(), 1);
        assert_eq!(out.refused[0].pod_uid, "small");
        assert_eq!(
            out.refused[0].error,
            "not enough cpus available to satisfy request: requested=2, available=1"
        );
        let shared_c = out.cpusets.iter().find(|c| c.pod_uid == "shared").unwrap();
        assert!(!shared_c.exclusive);
        assert_eq!(shared_c.cpus, out.shared_pool);
        // big goes away: small fits now, and big's CPUs are released
        let out = plan(&mut p, &mut st, &[small, shared]);
        assert_eq!(out.released, vec!["big/c".to_string()]);
        assert!(out.refused.is_empty());
        assert_eq!(st.get("small", "c").unwrap().len(), 2);
    }

    fn arb_pods() -> impl Strategy<Value = Vec<CpuPod>> {
        let ctr_s = (
            0u8..3,
            prop_oneof![Just("1"), Just("2"), Just("500m"), Just("1500m"), Just("3")],
        );
        let pod_s = (any::<bool>(), proptest::collection::vec(ctr_s, 1..4));
        proptest::collection::vec(pod_s, 0..8).prop_map(|pods| {
            pods.into_iter()
                .enumerate()
                .map(|(i, (g, cs))| {
                    let mut p = gpod(
                        &format!("pod{i}"),
                        i as i64,
                        cs.into_iter()
                            .enumerate()
                            .map(|(j, (k, req))| {
                                let kind = match k {
                                    0 => ContainerKind::Init,
                                    1 => ContainerKind::Sidecar,
                                    _ => ContainerKind::App,
                                };
                                ctr(&format!("c{j}"), kind, req)
                            })
                            .collect(),
                    );
                    p.guaranteed = g;
                    p
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn assignment_properties(pods in arb_pods(), reserved in 1usize..4, topo_pick in 0u8..3, shuffle in any::<u64>()) {
            let topo = match topo_pick {
                0 => single_socket_ht(),
                1 => CpuTopology::synthetic(2, 1, 8, 2),
                _ => CpuTopology::synthetic(2, 2, 4, 2),
            };
            let all = topo.all_cpus();
            let mut p = StaticPolicy::new(topo.clone(), reserved, None, opts(false)).unwrap();
            let mut st = CpuState::default();
            p.start(&mut st).unwrap();
            let out = plan(&mut p, &mut st, &pods);
            // No CPU is exclusive to two containers of different pods, and
            // none is both exclusive and shared.
            let mut owner: BTreeMap<u32, &str> = BTreeMap::new();
            for (uid, cs) in &st.entries {
                for set in cs.values() {
                    for cpu in set.iter() {
                        if let Some(o) = owner.insert(cpu, uid) {
                            prop_assert_eq!(o, uid.as_str(), "cpu {} in two pods", cpu);
                        }
                        prop_assert!(!st.default.contains(cpu));
                    }
                }
            }
            // Reserved CPUs are never exclusive and always shared.
            prop_assert!(st.assigned().intersection(p.reserved()).is_empty());
            prop_assert!(p.reserved().is_subset(&st.default));
            // The shared pool is never empty while a shared container exists.
            if out.cpusets.iter().any(|c| !c.exclusive) {
                prop_assert!(!st.default.is_empty());
            }
            // Nothing lost: shared ∪ exclusive = every CPU.
            prop_assert_eq!(st.default.union(&st.assigned()), all);
            // Within a pod, app containers and sidecars never share.
            for pod in &pods {
                let long: Vec<&CpuSet> = pod.containers.iter()
                    .filter(|c| c.kind != ContainerKind::Init)
                    .filter_map(|c| st.get(&pod.uid, &c.name)).collect();
                for i in 0..long.len() {
                    for j in i + 1..long.len() {
                        prop_assert!(long[i].intersection(long[j]).is_empty());
                    }
                }
            }
            // Independent of the listing order (arrival order is what counts).
            let mut shuffled = pods.clone();
            let n = shuffled.len();
            if n > 1 {
                let mut x = shuffle;
                for i in (1..n).rev() {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    shuffled.swap(i, (x >> 33) as usize % (i + 1));
                }
            }
            let mut p2 = StaticPolicy::new(topo, reserved, None, opts(false)).unwrap();
            let mut st2 = CpuState::default();
            p2.start(&mut st2).unwrap();
            let out2 = plan(&mut p2, &mut st2, &shuffled);
            prop_assert_eq!(out2, out.clone());
            // Stable: a second pass over the same pods changes nothing.
            let again = plan(&mut p, &mut st, &pods);
            prop_assert_eq!(again.cpusets, out.cpusets);
        }
    }
}
