//! The cgroup plan: every write qosd makes to keep the kubepods hierarchy at
//! the kubelet's values (pkg/kubelet/cm: node_container_manager_linux.go,
//! qos_container_manager_linux.go, helpers_linux.go `ResourceConfigForPod`).
//!
//! Pure: no I/O. Writes are ordered parents before children: node level
//! (`kubepods`), QoS level (`burstable`, `besteffort`), then pods in input
//! order. Within a cgroup: cpu files, then memory, then pids. See
//! docs/semantics.md for the tables of what is written in each case.

use serde::Serialize;

use crate::core::model::{CgroupLevel, CgroupVersion, CgroupWrite, Pod, QosClass};
use crate::core::node::NodeResources;
use crate::core::qos::classify;
use crate::core::resources::{pod_resources_with, PodResources};
use crate::policy::enforce::hugepages;
use crate::policy::enforce::memory_qos::{self, MemoryReservationPolicy};
use crate::policy::enforce::naming::CgroupLayout;
use crate::policy::enforce::oom;
use crate::policy::enforce::reserved::ReservedCgroup;
use crate::policy::enforce::versions::{KubeletVersion, Rule};

/// kubelet `MinShares`.
pub(crate) const MIN_SHARES: u64 = 2;
/// kernel `MAX_SHARES` (kubelet `MaxShares`).
pub(crate) const MAX_SHARES: u64 = 262_144;
/// kubelet `QuotaPeriod` (µs).
pub(crate) const DEFAULT_CFS_PERIOD_US: u64 = 100_000;
/// kubelet `MinQuotaPeriod` (µs): the smallest quota written.
pub(crate) const MIN_QUOTA_US: i64 = 1000;
/// The kernel's largest CFS quota (µs): `max_cfs_runtime` = 2^44 − 1 µs
/// (kernel/sched/core.c `tg_set_cfs_bandwidth`; the same bound for v1
/// `cpu.cfs_quota_us` and v2 `cpu.max`). Anything above is EINVAL.
pub(crate) const MAX_QUOTA_US: i64 = (1 << 44) - 1;
/// KEP-2570 default memory throttling factor.
pub(crate) const DEFAULT_MEMORY_THROTTLING_FACTOR: f64 = 0.9;
/// The page size [`PlanConfig::new`] assumes (bytes); the daemon sets
/// [`PlanConfig::page_size`] from the kernel.
pub const DEFAULT_PAGE_SIZE: u64 = 4096;

/// How cgroup v1 cpu.shares become v2 cpu.weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuWeightFormula {
    /// The kubelet's linear mapping `1 + ((shares - 2) * 9999) / 262142`.
    #[default]
    Kubelet,
    /// runc ≥ 1.3 / crun log-scale curve (1024 shares → 100).
    Runc,
}

/// Everything the planner needs besides the pods.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanConfig {
    /// Where and how cgroups are named.
    pub layout: CgroupLayout,
    /// Node capacity and allocatable.
    pub node: NodeResources,
    /// `--cpu-cfs-quota-period` in µs (100000).
    pub cpu_cfs_period_us: u64,
    /// `--cpu-cfs-quota` (true): when false pods get quota -1 / `max`.
    pub enforce_cpu_limits: bool,
    /// How cpu.shares become cpu.weight on cgroup v2.
    pub cpu_weight_formula: CpuWeightFormula,
    /// MemoryQoS (KEP-2570, cgroup v2 only): memory.min / memory.high.
    pub memory_qos: bool,
    /// `memoryThrottlingFactor` (kubelet default 0.9): where memory.high sits between the request
    /// and the limit (MemoryQoS).
    pub memory_throttling_factor: f64,
    /// `--qos-reserved memory=N%`.
    pub qos_reserved_memory_percent: Option<u32>,
    /// `--enforce-node-allocatable` contains `pods` (default): kubepods
    /// gets allocatable; otherwise capacity.
    pub enforce_node_allocatable: bool,
    /// `--pod-max-pids` (unset: no pids.max on pods).
    pub pod_pids_limit: Option<i64>,
    /// `kubeletVersion`: whose rules to follow where kubelets differ
    /// (docs/semantics.md §9).
    pub kubelet_version: KubeletVersion,
    /// `memoryReservationPolicy` (MemoryQoS from kubelet 1.36).
    pub memory_reservation_policy: MemoryReservationPolicy,
    /// Hugepage sizes (bytes) the node offers and the hugetlb controller
    /// can limit; every pod gets a limit for each.
    pub hugepage_sizes: Vec<u64>,
    /// Reserved cgroups to limit (`enforceNodeAllocatable` with
    /// system-reserved / kube-reserved). qosd never creates them.
    pub reserved_cgroups: Vec<ReservedCgroup>,
    /// The kernel's page size (bytes): memory.high is rounded down to a
    /// multiple of it.
    pub page_size: u64,
}

impl PlanConfig {
    /// Kubelet defaults for a layout and node.
    pub fn new(layout: CgroupLayout, node: NodeResources) -> PlanConfig {
        PlanConfig {
            layout,
            node,
            cpu_cfs_period_us: DEFAULT_CFS_PERIOD_US,
            enforce_cpu_limits: true,
            cpu_weight_formula: CpuWeightFormula::Kubelet,
            memory_qos: false,
            memory_throttling_factor: DEFAULT_MEMORY_THROTTLING_FACTOR,
            qos_reserved_memory_percent: None,
            enforce_node_allocatable: true,
            pod_pids_limit: None,
            kubelet_version: KubeletVersion::NEWEST,
            memory_reservation_policy: MemoryReservationPolicy::None,
            hugepage_sizes: Vec::new(),
            reserved_cgroups: Vec::new(),
            page_size: DEFAULT_PAGE_SIZE,
        }
    }

    /// A pod as this kubelet version sees it: before `pod-level-resources`
    /// (1.34) the API server drops `spec.resources`.
    pub(crate) fn effective_pod<'a>(&self, pod: &'a Pod) -> std::borrow::Cow<'a, Pod> {
        if pod.pod_resources.is_some() && !self.kubelet_version.has(Rule::PodLevelResources) {
            let mut p = pod.clone();
            p.pod_resources = None;
            std::borrow::Cow::Owned(p)
        } else {
            std::borrow::Cow::Borrowed(pod)
        }
    }

    /// The pod's sums under this version's rules.
    pub(crate) fn pod_resources(&self, pod: &Pod) -> PodResources {
        pod_resources_with(
            &self.effective_pod(pod),
            self.kubelet_version.has(Rule::OwnLimitDeclared),
        )
    }

    fn v2(&self) -> bool {
        self.layout.version == CgroupVersion::V2
    }

    /// cpu/memory the kubepods cgroup gets.
    pub(crate) fn node_cgroup_resources(&self) -> (i64, i64) {
        if self.enforce_node_allocatable {
            (
                self.node.enforced_cpu_millis,
                self.node.enforced_memory_bytes,
            )
        } else {
            (
                self.node.capacity_cpu_millis,
                self.node.capacity_memory_bytes,
            )
        }
    }
}

/// `node` object of the JSON plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanNode {
    /// cpu of the kubepods cgroup (allocatable when enforced).
    pub cpu_millis: i64,
    /// memory limit of the kubepods cgroup.
    pub memory_bytes: i64,
    /// The cgroup version planned for.
    pub cgroup_version: CgroupVersion,
    /// The cgroup driver (naming) planned for.
    pub cgroup_driver: crate::core::model::CgroupDriver,
    /// The node's cpu capacity.
    pub capacity_cpu_millis: i64,
    /// The node's memory capacity.
    pub capacity_memory_bytes: i64,
    /// Where the cgroup hierarchy is mounted.
    pub cgroupfs: String,
    /// The cgroup root the kubepods tree lives under.
    pub cgroup_root: String,
}

/// One pod of the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedPod {
    /// The pod's uid.
    pub uid: String,
    /// True when the manifest had no uid and qosd derived it from namespace/name.
    pub uid_derived: bool,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's QoS class.
    pub qos_class: QosClass,
    /// Why the pod has that class.
    pub reason: String,
    /// Cgroup path relative to the hierarchy root, e.g. `kubepods/burstable/pod<uid>`.
    pub cgroup: String,
    /// Each container's `oom_score_adj` as the kubelet sets it
    /// (docs/semantics.md, "oom_score_adj").
    pub containers: Vec<oom::ContainerOomScoreAdj>,
    #[serde(skip)]
    pub(crate) resources: PodResources,
}

/// A full plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Whose rules the plan follows (`--kubelet-version`).
    pub kubelet_version: KubeletVersion,
    /// The node and its kubepods cgroup.
    pub node: PlanNode,
    /// The pods planned, in the order given.
    pub pods: Vec<PlannedPod>,
    /// Every write, parents before children.
    pub writes: Vec<CgroupWrite>,
    /// systemd driver: the slice units and the properties that carry the
    /// writes' values (absent with the cgroupfs driver).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<crate::policy::enforce::units::PlannedUnit>,
}

// ---------------------------------------------------------------- formulas

/// kubelet `MilliCPUToShares`: `m * 1024 / 1000` clamped to [2, 262144].
pub(crate) fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    let shares = (milli as i128 * 1024 / 1000) as u128;
    shares.clamp(MIN_SHARES as u128, MAX_SHARES as u128) as u64
}

/// kubelet `MilliCPUToQuota`: `m * period / 1000`, at least 1000 µs; 0 → 0 (unset).
///
/// Computed without overflow and clamped to the kernel's maximum
/// ([`MAX_QUOTA_US`]): for a limit that large (≈ 1.76e8 CPUs at the
/// default period) the kubelet's int64 arithmetic wraps or writes a value
/// the kernel refuses; qosd writes the largest quota the kernel accepts
/// (docs/semantics.md §4).
pub(crate) fn milli_cpu_to_quota(milli: i64, period_us: u64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    let q = milli as i128 * period_us as i128 / 1000;
    q.clamp(MIN_QUOTA_US as i128, MAX_QUOTA_US as i128) as i64
}

/// kubelet `CpuSharesToCpuWeight`: `1 + ((shares - 2) * 9999) / 262142`
/// (shares clamped to [2, 262144] first, so the result is in [1, 10000]).
pub(crate) fn shares_to_weight_kubelet(shares: u64) -> u64 {
    let s = shares.clamp(MIN_SHARES, MAX_SHARES);
    1 + ((s - 2) * 9999) / 262_142
}

/// runc ≥ 1.3 `ConvertCPUSharesToCgroupV2Value`: with l = log2(shares),
/// weight = ceil(10^((l² + 125 l) / 612 − 7/34)); ≤2 → 1, ≥262144 → 10000.
pub(crate) fn shares_to_weight_runc(shares: u64) -> u64 {
    if shares <= MIN_SHARES {
        return 1;
    }
    if shares >= MAX_SHARES {
        return 10_000;
    }
    let l = (shares as f64).log2();
    let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
    (10f64.powf(exponent).ceil() as u64).clamp(1, 10_000)
}

pub(crate) fn shares_to_weight(shares: u64, formula: CpuWeightFormula) -> u64 {
    match formula {
        CpuWeightFormula::Kubelet => shares_to_weight_kubelet(shares),
        CpuWeightFormula::Runc => shares_to_weight_runc(shares),
    }
}

/// KEP-2570 memory.high: `floor((req + f * (limit - req)) / page) * page`,
/// `limit` being the pod's memory limit or node allocatable, `page` the
/// page size in bytes. `None` when not above the request (then not
/// written).
pub(crate) fn memory_high(request: i64, limit: i64, factor: f64, page: u64) -> Option<i64> {
    if limit <= 0 {
        return None;
    }
    let page = i64::try_from(page.max(1)).unwrap_or(i64::MAX);
    let v = (request as f64 + (limit as f64 - request as f64) * factor).floor();
    let high = (v / page as f64) as i64 * page;
    (high != 0 && high > request).then_some(high)
}

// ------------------------------------------------------------- the writes

/// The values of one cgroup, before rendering into files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Values {
    shares: Option<u64>,
    /// Some(q): quota written with the period; q = -1 means unlimited.
    quota: Option<i64>,
    memory_limit: Option<i64>,
    memory_min: Option<i64>,
    memory_low: Option<i64>,
    memory_high: Option<i64>,
    /// (kernel size name, bytes), e.g. ("2MB", 0).
    hugetlb: Vec<(String, i64)>,
    pids: Option<i64>,
}

fn render(
    cfg: &PlanConfig,
    cgroup: &str,
    level: CgroupLevel,
    v: &Values,
    out: &mut Vec<CgroupWrite>,
) {
    let l = &cfg.layout;
    // One directory per controller (v1) or one for all (v2), computed once.
    let mut dirs: [Option<std::path::PathBuf>; 4] = [None, None, None, None];
    let mut push = |file: &str, value: String| {
        let controller = file.split('.').next().unwrap_or(file);
        let slot = match (l.version, controller) {
            (CgroupVersion::V2, _) | (_, "cpu") => 0,
            (_, "memory") => 1,
            (_, "hugetlb") => 3,
            _ => 2,
        };
        let dir = dirs[slot].get_or_insert_with(|| l.dir(cgroup, controller));
        out.push(CgroupWrite {
            file: dir.join(file),
            value,
            dir: dir.clone(),
            cgroup: cgroup.to_string(),
            level,
        });
    };
    let period = cfg.cpu_cfs_period_us;
    if cfg.v2() {
        if let Some(s) = v.shares {
            push(
                "cpu.weight",
                shares_to_weight(s, cfg.cpu_weight_formula).to_string(),
            );
        }
        if let Some(q) = v.quota {
            let quota = if q < 0 {
                "max".to_string()
            } else {
                q.to_string()
            };
            push("cpu.max", format!("{quota} {period}"));
        }
        if let Some(m) = v.memory_limit {
            push("memory.max", m.to_string());
        }
        if let Some(m) = v.memory_min {
            push("memory.min", m.to_string());
        }
        if let Some(m) = v.memory_low {
            push("memory.low", m.to_string());
        }
        if let Some(m) = v.memory_high {
            push("memory.high", m.to_string());
        }
        for (size, bytes) in &v.hugetlb {
            push(&format!("hugetlb.{size}.max"), bytes.to_string());
        }
        if let Some(p) = v.pids {
            push("pids.max", p.to_string());
        }
    } else {
        if let Some(s) = v.shares {
            push("cpu.shares", s.to_string());
        }
        if let Some(q) = v.quota {
            push("cpu.cfs_period_us", period.to_string());
            push("cpu.cfs_quota_us", q.to_string());
        }
        if let Some(m) = v.memory_limit {
            push("memory.limit_in_bytes", m.to_string());
        }
        for (size, bytes) in &v.hugetlb {
            push(&format!("hugetlb.{size}.limit_in_bytes"), bytes.to_string());
        }
        if let Some(p) = v.pids {
            push("pids.max", p.to_string());
        }
    }
}

/// Node level: kubepods cpu.shares/cpu.weight from allocatable cpu and the
/// memory limit from allocatable memory (capacity when node allocatable is
/// not enforced).
pub(crate) fn node_level_writes(cfg: &PlanConfig) -> Vec<CgroupWrite> {
    let (cpu, mem) = cfg.node_cgroup_resources();
    let v = Values {
        shares: Some(milli_cpu_to_shares(cpu)),
        memory_limit: Some(mem),
        ..Values::default()
    };
    let mut out = Vec::new();
    render(
        cfg,
        &cfg.layout.node_cgroup(),
        CgroupLevel::Node,
        &v,
        &mut out,
    );
    out
}

/// Per-class memory request sums (pods' `PodRequests`, overhead included).
fn memory_requests(pods: &[(QosClass, PodResources)]) -> [i64; 3] {
    let mut sums = [0i64; 3];
    for (class, r) in pods {
        // Saturating: a sum beyond i64 is "more than any node has".
        sums[*class as usize] = sums[*class as usize].saturating_add(r.memory_request_bytes);
    }
    sums
}

/// QoS level from (class, resources) pairs; see [`qos_level_writes`].
pub(crate) fn qos_level_writes_from(
    cfg: &PlanConfig,
    pods: &[(QosClass, PodResources)],
) -> Vec<CgroupWrite> {
    let mut out = Vec::new();
    let burstable_cpu: i64 = pods
        .iter()
        .filter(|(c, _)| *c == QosClass::Burstable)
        .map(|(_, r)| r.cpu_request_millis)
        .fold(0i64, i64::saturating_add);
    let mem = memory_requests(pods);
    let (g, b) = (
        mem[QosClass::Guaranteed as usize],
        mem[QosClass::Burstable as usize],
    );
    let memory_qos = cfg.memory_qos && cfg.v2();
    let (node_p, burst_p) = if memory_qos {
        memory_qos::qos_protection(cfg.kubelet_version, cfg.memory_reservation_policy, g, b)
    } else {
        Default::default()
    };

    // MemoryQoS on the "Guaranteed QoS cgroup" = kubepods itself.
    if node_p.min.is_some() || node_p.low.is_some() {
        let v = Values {
            memory_min: node_p.min,
            memory_low: node_p.low,
            ..Values::default()
        };
        render(
            cfg,
            &cfg.layout.node_cgroup(),
            CgroupLevel::Node,
            &v,
            &mut out,
        );
    }

    let (mut burst_limit, mut be_limit) = (None, None);
    if let Some(pct) = cfg.qos_reserved_memory_percent {
        let alloc = cfg.node.enforced_memory_bytes;
        if alloc > 0 {
            let pct = i64::from(pct);
            // i128: requests near i64::MAX times a percentage never wrap.
            let share = |v: i64| i128::from(v) * i128::from(pct) / 100;
            let clamp = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
            let bl = clamp(i128::from(alloc) - share(g));
            burst_limit = Some(bl);
            be_limit = Some(clamp(i128::from(bl) - share(b)));
        }
    }

    let burst = Values {
        shares: Some(milli_cpu_to_shares(burstable_cpu)),
        memory_limit: burst_limit,
        memory_min: burst_p.min,
        memory_low: burst_p.low,
        ..Values::default()
    };
    render(
        cfg,
        &cfg.layout.qos_cgroup(QosClass::Burstable),
        CgroupLevel::Qos,
        &burst,
        &mut out,
    );
    let be = Values {
        shares: Some(MIN_SHARES),
        memory_limit: be_limit,
        ..Values::default()
    };
    render(
        cfg,
        &cfg.layout.qos_cgroup(QosClass::BestEffort),
        CgroupLevel::Qos,
        &be,
        &mut out,
    );
    out
}

#[cfg(test)]
/// QoS level: burstable shares from the sum of Burstable pods' cpu
/// requests; besteffort shares 2; with qos-reserved the memory limits of
/// both; with MemoryQoS the memory.min of kubepods (Guaranteed + Burstable
/// requests) and burstable (Burstable requests).
pub(crate) fn qos_level_writes(cfg: &PlanConfig, pods: &[Pod]) -> Vec<CgroupWrite> {
    let classified: Vec<(QosClass, PodResources)> = pods
        .iter()
        .map(|p| (classify(&cfg.effective_pod(p)).class, cfg.pod_resources(p)))
        .collect();
    qos_level_writes_from(cfg, &classified)
}

/// The values `ResourceConfigForPod` gives a pod.
fn pod_values(
    cfg: &PlanConfig,
    class: QosClass,
    r: &PodResources,
    hp: &std::collections::BTreeMap<u64, i64>,
) -> Values {
    let mut v = Values::default();
    let quota = |m: i64| {
        if cfg.enforce_cpu_limits {
            milli_cpu_to_quota(m, cfg.cpu_cfs_period_us)
        } else {
            -1
        }
    };
    match class {
        QosClass::Guaranteed => {
            v.shares = Some(milli_cpu_to_shares(r.cpu_request_millis));
            v.quota = Some(quota(r.cpu_limit_millis.unwrap_or(0)));
            v.memory_limit = Some(r.memory_limit_bytes.unwrap_or(0));
        }
        QosClass::Burstable => {
            v.shares = Some(milli_cpu_to_shares(r.cpu_request_millis));
            v.quota = r.cpu_limit_millis.map(quota);
            v.memory_limit = r.memory_limit_bytes;
        }
        QosClass::BestEffort => v.shares = Some(MIN_SHARES),
    }
    // Quota 0 / memory 0 mean "unset" to the cgroup writer (libcontainer).
    if v.quota == Some(0) {
        v.quota = None;
    }
    if v.memory_limit == Some(0) {
        v.memory_limit = None;
    }
    if cfg.memory_qos && cfg.v2() {
        let req = r.memory_request_bytes;
        let p = memory_qos::pod_protection(
            cfg.kubelet_version,
            cfg.memory_reservation_policy,
            class,
            req,
        );
        v.memory_min = p.min;
        v.memory_low = p.low;
        // memory.high: never for Guaranteed (request == limit), and only
        // when the pod declares a memory limit (the kubelet writes none
        // without one).
        if let Some(limit) = r.memory_limit_bytes {
            if class != QosClass::Guaranteed && req != limit {
                v.memory_high =
                    memory_high(req, limit, cfg.memory_throttling_factor, cfg.page_size);
            }
        }
    }
    v.hugetlb = hugepages::limits(hp, &cfg.hugepage_sizes);
    v.pids = cfg.pod_pids_limit.filter(|p| *p > 0);
    v
}

/// system-reserved / kube-reserved cgroups: cpu shares, memory limit,
/// pids.max and hugetlb from the reservation (`enforceExistingCgroup`),
/// with MemoryQoS memory.min = the reserved memory.
pub fn reserved_level_writes(cfg: &PlanConfig) -> Vec<CgroupWrite> {
    let mut out = Vec::new();
    let protect = cfg.memory_qos
        && cfg.v2()
        && memory_qos::reserved_cgroup_protected(
            cfg.kubelet_version,
            cfg.memory_reservation_policy,
        );
    for rc in &cfg.reserved_cgroups {
        let r = &rc.resources;
        let v = Values {
            shares: r.cpu_millis.map(milli_cpu_to_shares),
            memory_limit: r.memory_bytes,
            memory_min: r.memory_bytes.filter(|_| protect),
            hugetlb: hugepages::limits(&r.hugepages, &cfg.hugepage_sizes),
            pids: r.pids,
            ..Values::default()
        };
        render(cfg, &rc.cgroup, CgroupLevel::Reserved, &v, &mut out);
    }
    out
}

#[cfg(test)]
/// The writes for one pod of class `class` (parents not included).
pub(crate) fn pod_writes(cfg: &PlanConfig, pod: &Pod, class: QosClass) -> Vec<CgroupWrite> {
    let r = cfg.pod_resources(pod);
    let mut out = Vec::new();
    let cgroup = cfg.layout.pod_cgroup(class, &pod.uid);
    let hp = hugepages::pod_hugepage_requests(pod);
    pod_writes_into(cfg, &cgroup, class, &r, &hp, &mut out);
    out
}

fn pod_writes_into(
    cfg: &PlanConfig,
    cgroup: &str,
    class: QosClass,
    r: &PodResources,
    hp: &std::collections::BTreeMap<u64, i64>,
    out: &mut Vec<CgroupWrite>,
) {
    render(
        cfg,
        cgroup,
        CgroupLevel::Pod,
        &pod_values(cfg, class, r, hp),
        out,
    );
}

/// One pod's `oom_score_adj` plan: its class, its cgroup (relative to
/// the hierarchy root, as in [`PlannedPod::cgroup`]) and each container's
/// kubelet value on a machine with `memory_capacity_bytes` of RAM; the same
/// values [`build`] puts in [`PlannedPod::containers`] for that capacity.
pub fn pod_oom_plan(
    cfg: &PlanConfig,
    pod: &Pod,
    memory_capacity_bytes: i64,
) -> (QosClass, String, Vec<oom::ContainerOomScoreAdj>) {
    let effective = cfg.effective_pod(pod);
    let class = classify(&effective).class;
    let containers = oom::pod_oom_score_adjs(&effective, class, memory_capacity_bytes);
    (class, cfg.layout.pod_cgroup(class, &pod.uid), containers)
}

/// Plan every write for `pods`: node level, QoS level, then each pod.
pub fn build(cfg: &PlanConfig, pods: &[Pod]) -> Plan {
    let namer = cfg.layout.pod_namer();
    let mut planned = Vec::with_capacity(pods.len());
    let mut classified = Vec::with_capacity(pods.len());
    let mut hugepage_requests = Vec::with_capacity(pods.len());
    for p in pods {
        let effective = cfg.effective_pod(p);
        hugepage_requests.push(if cfg.hugepage_sizes.is_empty() {
            Default::default()
        } else {
            hugepages::pod_hugepage_requests(&effective)
        });
        let c = classify(&effective);
        let r = cfg.pod_resources(p);
        let containers =
            oom::pod_oom_score_adjs(&effective, c.class, cfg.node.capacity_memory_bytes);
        classified.push((c.class, r.clone()));
        planned.push(PlannedPod {
            uid: p.uid.clone(),
            uid_derived: p.uid_derived,
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            qos_class: c.class,
            reason: c.reason,
            cgroup: namer.pod_cgroup(c.class, &p.uid),
            containers,
            resources: r,
        });
    }
    let mut writes = reserved_level_writes(cfg);
    writes.extend(node_level_writes(cfg));
    writes.extend(qos_level_writes_from(cfg, &classified));
    writes.reserve(pods.len() * 4);
    for ((pp, (class, r)), hp) in planned.iter().zip(&classified).zip(&hugepage_requests) {
        pod_writes_into(cfg, &pp.cgroup, *class, r, hp, &mut writes);
    }
    let (cpu, mem) = cfg.node_cgroup_resources();
    Plan {
        kubelet_version: cfg.kubelet_version,
        node: PlanNode {
            cpu_millis: cpu,
            memory_bytes: mem,
            cgroup_version: cfg.layout.version,
            cgroup_driver: cfg.layout.driver,
            capacity_cpu_millis: cfg.node.capacity_cpu_millis,
            capacity_memory_bytes: cfg.node.capacity_memory_bytes,
            cgroupfs: cfg.layout.cgroupfs.display().to_string(),
            cgroup_root: cfg.layout.cgroup_root.clone(),
        },
        units: if cfg.layout.driver == crate::core::model::CgroupDriver::Systemd {
            // The plan's own values are numbers: always expressible.
            crate::policy::enforce::units::plan_units(&writes).unwrap_or_default()
        } else {
            Vec::new()
        },
        pods: planned,
        writes,
    }
}

/// The directories of a reserved cgroup that its planned writes touch
/// (v1: one per controller written; v2: one).
pub fn reserved_dirs(
    cfg: &PlanConfig,
    rc: &crate::policy::enforce::reserved::ReservedCgroup,
) -> Vec<std::path::PathBuf> {
    let mut c = cfg.clone();
    c.reserved_cgroups = vec![rc.clone()];
    let mut dirs: Vec<std::path::PathBuf> = reserved_level_writes(&c)
        .into_iter()
        .map(|w| w.dir)
        .collect();
    dirs.dedup();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::CgroupDriver;
    use crate::core::resources::tests::container;
    use proptest::prelude::*;

    #[test]
    fn shares_table() {
        for (m, s) in [
            (0, 2),
            (1, 2),
            (2, 2),
            (3, 3),
            (10, 10),
            (100, 102),
            (250, 256),
            (500, 512),
            (700, 716),
            (1000, 1024),
            (8000, 8192),
            (256_000, 262_144),
            (300_000, 262_144),
            (i64::MAX, 262_144),
            (-5, 2),
        ] {
            assert_eq!(milli_cpu_to_shares(m), s, "shares of {m}m");
        }
    }

    #[test]
    fn quota_table() {
        for (m, p, q) in [
            (0, 100_000, 0),
            (1, 100_000, 1000),
            (9, 100_000, 1000),
            (10, 100_000, 1000),
            (11, 100_000, 1100),
            (500, 100_000, 50_000),
            (700, 100_000, 70_000),
            (1000, 100_000, 100_000),
            (2500, 100_000, 250_000),
            (500, 50_000, 25_000),
            (15, 50_000, 1000),
            // The kernel's maximum (2^44 - 1 µs) and past it.
            (175_921_860_444, 100_000, 17_592_186_044_400),
            (175_921_860_445, 100_000, MAX_QUOTA_US),
            (92_233_720_368_548, 100_000, MAX_QUOTA_US),
            (i64::MAX, 100_000, MAX_QUOTA_US),
            (i64::MAX, 1_000_000, MAX_QUOTA_US),
            (i64::MAX, 1000, MAX_QUOTA_US),
        ] {
            assert_eq!(milli_cpu_to_quota(m, p), q, "quota of {m}m/{p}");
        }
        assert_eq!(MAX_QUOTA_US, 17_592_186_044_415);
    }

    #[test]
    fn huge_cpu_limits_plan_values_the_kernel_accepts() {
        use crate::core::quantity::Quantity;
        // (limit text, quota, shares, kubelet weight)
        for text in ["9Ei", "1e21", "8Ei", "100E", "9223372036854775807", "176e6"] {
            let m = Quantity::parse(text).unwrap().milli_ceil();
            let q = milli_cpu_to_quota(m, DEFAULT_CFS_PERIOD_US);
            assert!(
                (MIN_QUOTA_US..=MAX_QUOTA_US).contains(&q),
                "{text}: quota {q} outside the kernel's range"
            );
            assert_eq!(q, MAX_QUOTA_US, "{text}");
            let s = milli_cpu_to_shares(m);
            assert_eq!(s, MAX_SHARES, "{text}");
            assert_eq!(shares_to_weight_kubelet(s), 10_000, "{text}");
            assert_eq!(shares_to_weight_runc(s), 10_000, "{text}");
        }
    }

    #[test]
    fn weight_table() {
        for (s, k, r) in [
            (0, 1, 1),
            (2, 1, 1),
            (3, 1, 2),
            (102, 4, 17),
            (1024, 39, 100),
            (2048, 79, 174),
            (262_143, 9999, 10_000),
            (262_144, 10_000, 10_000),
            (1_000_000, 10_000, 10_000),
        ] {
            assert_eq!(shares_to_weight_kubelet(s), k, "kubelet weight of {s}");
            assert_eq!(shares_to_weight_runc(s), r, "runc weight of {s}");
        }
    }

    #[test]
    fn memory_high_table() {
        const P4K: u64 = DEFAULT_PAGE_SIZE;
        const P64K: u64 = 64 << 10;
        const MI: i64 = 1 << 20;
        // (request, limit, page, memory.high, why)
        for (req, limit, page, want, why) in [
            (100 * MI, 200 * MI, P4K, Some(199_229_440), "100Mi + 90Mi"),
            (0, 10_000, P4K, Some(8192), "9000 → two pages"),
            (0, 4096, P4K, None, "3686 rounds to 0"),
            (4096, 8192, P4K, None, "7782 → 4096, not above the request"),
            (1000, 0, P4K, None, "no limit"),
            (0, 1024 * MI, P4K, Some(966_365_184), "0.9 GiB"),
            (
                100 * MI,
                200 * MI,
                P64K,
                Some(199_229_440),
                "a 64 KiB multiple",
            ),
            (
                0,
                1024 * MI,
                P64K,
                Some(966_328_320),
                "0.9 GiB → 64 KiB pages",
            ),
            (0, 100_000, P64K, Some(65_536), "90000 → one page"),
            (0, 65_536, P64K, None, "58982 rounds to 0"),
            (65_536, 131_072, P64K, None, "124518 → 65536, not above"),
            (0, 10_000, P64K, None, "9000 is under one page"),
            (1000, 0, P64K, None, "no limit"),
        ] {
            assert_eq!(memory_high(req, limit, 0.9, page), want, "{why}");
        }
    }

    fn node() -> NodeResources {
        NodeResources::from_capacity(8000, 32 << 30)
    }

    fn cfg(version: CgroupVersion, driver: CgroupDriver) -> PlanConfig {
        PlanConfig::new(CgroupLayout::new(version, driver), node())
    }

    fn pod(uid: &str, cs: Vec<crate::core::model::Container>) -> Pod {
        let mut p = Pod::new(uid, "default", uid);
        p.containers = cs;
        p
    }

    fn values(ws: &[CgroupWrite]) -> Vec<(String, String)> {
        ws.iter()
            .map(|w| (w.file.display().to_string(), w.value.clone()))
            .collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn guaranteed_pod_v1_and_v2() {
        let p = pod(
            "g",
            vec![container(
                "c",
                "cpu=700m,memory=200Mi",
                "cpu=700m,memory=200Mi",
            )],
        );
        let got = values(&pod_writes(
            &cfg(CgroupVersion::V1, CgroupDriver::Cgroupfs),
            &p,
            QosClass::Guaranteed,
        ));
        assert_eq!(
            got,
            pairs(&[
                ("/sys/fs/cgroup/cpu/kubepods/podg/cpu.shares", "716"),
                (
                    "/sys/fs/cgroup/cpu/kubepods/podg/cpu.cfs_period_us",
                    "100000"
                ),
                ("/sys/fs/cgroup/cpu/kubepods/podg/cpu.cfs_quota_us", "70000"),
                (
                    "/sys/fs/cgroup/memory/kubepods/podg/memory.limit_in_bytes",
                    "209715200"
                ),
            ])
        );
        let got = values(&pod_writes(
            &cfg(CgroupVersion::V2, CgroupDriver::Systemd),
            &p,
            QosClass::Guaranteed,
        ));
        assert_eq!(
            got,
            pairs(&[
                (
                    "/sys/fs/cgroup/kubepods.slice/kubepods-podg.slice/cpu.weight",
                    "28"
                ),
                (
                    "/sys/fs/cgroup/kubepods.slice/kubepods-podg.slice/cpu.max",
                    "70000 100000"
                ),
                (
                    "/sys/fs/cgroup/kubepods.slice/kubepods-podg.slice/memory.max",
                    "209715200"
                ),
            ])
        );
    }

    #[test]
    fn burstable_and_besteffort_pods() {
        let c1 = cfg(CgroupVersion::V1, CgroupDriver::Cgroupfs);
        let b = pod("b", vec![container("c", "memory=100Mi", "memory=200Mi")]);
        assert_eq!(
            values(&pod_writes(&c1, &b, QosClass::Burstable)),
            pairs(&[
                ("/sys/fs/cgroup/cpu/kubepods/burstable/podb/cpu.shares", "2"),
                (
                    "/sys/fs/cgroup/memory/kubepods/burstable/podb/memory.limit_in_bytes",
                    "209715200"
                ),
            ])
        );
        let cpu_only = pod(
            "c",
            vec![
                container("c", "cpu=250m", "cpu=500m"),
                container("d", "cpu=100m", "cpu=100m"),
            ],
        );
        assert_eq!(
            values(&pod_writes(
                &cfg(CgroupVersion::V2, CgroupDriver::Cgroupfs),
                &cpu_only,
                QosClass::Burstable
            )),
            pairs(&[
                ("/sys/fs/cgroup/kubepods/burstable/podc/cpu.weight", "14"),
                (
                    "/sys/fs/cgroup/kubepods/burstable/podc/cpu.max",
                    "60000 100000"
                ),
            ])
        );
        let be = pod("e", vec![container("c", "", "")]);
        assert_eq!(
            values(&pod_writes(&c1, &be, QosClass::BestEffort)),
            pairs(&[(
                "/sys/fs/cgroup/cpu/kubepods/besteffort/pode/cpu.shares",
                "2"
            )])
        );
    }

    #[test]
    fn cpu_limits_not_enforced() {
        let mut c = cfg(CgroupVersion::V2, CgroupDriver::Cgroupfs);
        c.enforce_cpu_limits = false;
        let p = pod(
            "g",
            vec![container("c", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")],
        );
        let ws = pod_writes(&c, &p, QosClass::Guaranteed);
        assert_eq!(ws[1].value, "max 100000");
        c.layout.version = CgroupVersion::V1;
        let ws = pod_writes(&c, &p, QosClass::Guaranteed);
        assert_eq!(ws[2].value, "-1");
    }

    #[test]
    fn memory_qos_pod_values() {
        let mut c = cfg(CgroupVersion::V2, CgroupDriver::Cgroupfs);
        c.memory_qos = true;
        c.kubelet_version = KubeletVersion::V1_35;
        let b = pod("b", vec![container("c", "memory=100Mi", "memory=200Mi")]);
        let got = values(&pod_writes(&c, &b, QosClass::Burstable));
        assert_eq!(got[1].1, "209715200");
        assert_eq!(
            got[2],
            (
                "/sys/fs/cgroup/kubepods/burstable/podb/memory.min".into(),
                "104857600".into()
            )
        );
        assert_eq!(
            got[3],
            (
                "/sys/fs/cgroup/kubepods/burstable/podb/memory.high".into(),
                "199229440".into()
            )
        );
        // no memory limit declared: no memory.high (the kubelet writes none)
        let n = pod("n", vec![container("c", "memory=1Gi", "")]);
        let got = values(&pod_writes(&c, &n, QosClass::Burstable));
        assert!(
            !got.iter().any(|(f, _)| f.ends_with("memory.high")),
            "{got:?}"
        );
        assert!(got
            .iter()
            .any(|(f, v)| f.ends_with("memory.min") && v == "1073741824"));
        // Guaranteed: memory.min only
        let g = pod(
            "g",
            vec![container("c", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")],
        );
        let got = values(&pod_writes(&c, &g, QosClass::Guaranteed));
        assert!(got.iter().any(|(f, _)| f.ends_with("memory.min")));
        assert!(!got.iter().any(|(f, _)| f.ends_with("memory.high")));
        // 1.36: None protects nothing (zeros), TieredReservation tiers.
        c.kubelet_version = KubeletVersion::V1_36;
        let file = |ws: &[(String, String)], f: &str| {
            ws.iter()
                .find(|(p, _)| p.ends_with(f))
                .map(|(_, v)| v.clone())
        };
        let got = values(&pod_writes(&c, &b, QosClass::Burstable));
        assert_eq!(file(&got, "memory.min").as_deref(), Some("0"));
        assert_eq!(file(&got, "memory.low").as_deref(), Some("0"));
        assert_eq!(file(&got, "memory.high").as_deref(), Some("199229440"));
        c.memory_reservation_policy = MemoryReservationPolicy::TieredReservation;
        let got = values(&pod_writes(&c, &b, QosClass::Burstable));
        assert_eq!(file(&got, "memory.min").as_deref(), Some("0"));
        assert_eq!(file(&got, "memory.low").as_deref(), Some("104857600"));
        let got = values(&pod_writes(&c, &g, QosClass::Guaranteed));
        assert_eq!(file(&got, "memory.min").as_deref(), Some("1073741824"));
        assert_eq!(file(&got, "memory.low").as_deref(), Some("0"));
        assert_eq!(file(&got, "memory.high"), None);
        // v1 ignores MemoryQoS
        c.layout.version = CgroupVersion::V1;
        assert!(!values(&pod_writes(&c, &b, QosClass::Burstable))
            .iter()
            .any(|(f, _)| f.contains("memory.m")));
    }

    #[test]
    fn memory_high_uses_the_configured_page_size() {
        let mut c = cfg(CgroupVersion::V2, CgroupDriver::Cgroupfs);
        c.memory_qos = true;
        assert_eq!(c.page_size, DEFAULT_PAGE_SIZE);
        // 1Mi + 0.9 × 1023Mi = 966472499: 966471680 in 4 KiB pages,
        // 966459392 in 64 KiB pages.
        let b = pod("b", vec![container("c", "memory=1Mi", "memory=1Gi")]);
        let high = |c: &PlanConfig| {
            values(&pod_writes(c, &b, QosClass::Burstable))
                .into_iter()
                .find(|(f, _)| f.ends_with("memory.high"))
                .map(|(_, v)| v)
        };
        assert_eq!(high(&c).as_deref(), Some("966471680"));
        c.page_size = 64 << 10;
        assert_eq!(high(&c).as_deref(), Some("966459392"));
    }

    #[test]
    fn node_and_qos_levels() {
        let mut c = cfg(CgroupVersion::V1, CgroupDriver::Cgroupfs);
        c.node = NodeResources::new(
            8000,
            32 << 30,
            crate::core::node::Reserved {
                cpu_millis: 1000,
                memory_bytes: 2 << 30,
            },
        );
        assert_eq!(
            values(&node_level_writes(&c)),
            pairs(&[
                ("/sys/fs/cgroup/cpu/kubepods/cpu.shares", "7168"),
                (
                    "/sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes",
                    &(30i64 << 30).to_string()
                ),
            ])
        );
        let pods = vec![
            pod(
                "g",
                vec![container("c", "cpu=1,memory=4Gi", "cpu=1,memory=4Gi")],
            ),
            pod("b1", vec![container("c", "cpu=250m,memory=1Gi", "")]),
            pod("b2", vec![container("c", "cpu=250m", "cpu=1")]),
            pod("e", vec![container("c", "", "")]),
        ];
        assert_eq!(
            values(&qos_level_writes(&c, &pods)),
            pairs(&[
                ("/sys/fs/cgroup/cpu/kubepods/burstable/cpu.shares", "512"),
                ("/sys/fs/cgroup/cpu/kubepods/besteffort/cpu.shares", "2"),
            ])
        );
        c.qos_reserved_memory_percent = Some(50);
        let alloc = 30i64 << 30;
        let bl = alloc - (4i64 << 30) / 2;
        let bel = bl - (1i64 << 30) / 2;
        assert_eq!(
            values(&qos_level_writes(&c, &pods)),
            pairs(&[
                ("/sys/fs/cgroup/cpu/kubepods/burstable/cpu.shares", "512"),
                (
                    "/sys/fs/cgroup/memory/kubepods/burstable/memory.limit_in_bytes",
                    &bl.to_string()
                ),
                ("/sys/fs/cgroup/cpu/kubepods/besteffort/cpu.shares", "2"),
                (
                    "/sys/fs/cgroup/memory/kubepods/besteffort/memory.limit_in_bytes",
                    &bel.to_string()
                ),
            ])
        );
        c.layout.version = CgroupVersion::V2;
        c.qos_reserved_memory_percent = None;
        c.memory_qos = true;
        c.kubelet_version = KubeletVersion::V1_35;
        assert_eq!(
            values(&qos_level_writes(&c, &pods)),
            pairs(&[
                (
                    "/sys/fs/cgroup/kubepods/memory.min",
                    &(5i64 << 30).to_string()
                ),
                ("/sys/fs/cgroup/kubepods/burstable/cpu.weight", "20"),
                (
                    "/sys/fs/cgroup/kubepods/burstable/memory.min",
                    &(1i64 << 30).to_string()
                ),
                ("/sys/fs/cgroup/kubepods/besteffort/cpu.weight", "1"),
            ])
        );
        // 1.36 TieredReservation: kubepods memory.min, burstable memory.low;
        // with no protected pod left, zeros.
        c.kubelet_version = KubeletVersion::V1_36;
        c.memory_reservation_policy = MemoryReservationPolicy::TieredReservation;
        assert_eq!(
            values(&qos_level_writes(&c, &pods)),
            pairs(&[
                (
                    "/sys/fs/cgroup/kubepods/memory.min",
                    &(5i64 << 30).to_string()
                ),
                ("/sys/fs/cgroup/kubepods/burstable/cpu.weight", "20"),
                (
                    "/sys/fs/cgroup/kubepods/burstable/memory.low",
                    &(1i64 << 30).to_string()
                ),
                ("/sys/fs/cgroup/kubepods/besteffort/cpu.weight", "1"),
            ])
        );
        let only_be = vec![pod("e", vec![container("c", "", "")])];
        assert_eq!(
            values(&qos_level_writes(&c, &only_be)),
            pairs(&[
                ("/sys/fs/cgroup/kubepods/memory.min", "0"),
                ("/sys/fs/cgroup/kubepods/burstable/cpu.weight", "1"),
                ("/sys/fs/cgroup/kubepods/burstable/memory.low", "0"),
                ("/sys/fs/cgroup/kubepods/besteffort/cpu.weight", "1"),
            ])
        );
        c.enforce_node_allocatable = false;
        assert_eq!(
            node_level_writes(&c)[0].value,
            shares_to_weight_kubelet(8192).to_string()
        );
    }

    #[test]
    fn hugetlb_files_v1_and_v2() {
        let p = pod(
            "h",
            vec![container(
                "c",
                "cpu=1,memory=1Gi,hugepages-2Mi=6Mi",
                "cpu=1,memory=1Gi,hugepages-2Mi=6Mi",
            )],
        );
        let mut c = cfg(CgroupVersion::V1, CgroupDriver::Cgroupfs);
        c.hugepage_sizes = vec![1 << 30, 2 << 20];
        let got = values(&pod_writes(&c, &p, QosClass::Guaranteed));
        assert_eq!(
            &got[4..],
            &pairs(&[
                (
                    "/sys/fs/cgroup/hugetlb/kubepods/podh/hugetlb.2MB.limit_in_bytes",
                    "6291456"
                ),
                (
                    "/sys/fs/cgroup/hugetlb/kubepods/podh/hugetlb.1GB.limit_in_bytes",
                    "0"
                ),
            ])[..]
        );
        c.layout.version = CgroupVersion::V2;
        c.pod_pids_limit = Some(64);
        let got = values(&pod_writes(&c, &p, QosClass::Guaranteed));
        assert_eq!(
            &got[3..],
            &pairs(&[
                ("/sys/fs/cgroup/kubepods/podh/hugetlb.2MB.max", "6291456"),
                ("/sys/fs/cgroup/kubepods/podh/hugetlb.1GB.max", "0"),
                ("/sys/fs/cgroup/kubepods/podh/pids.max", "64"),
            ])[..]
        );
        // no sizes offered: no hugetlb files
        c.hugepage_sizes.clear();
        assert!(!values(&pod_writes(&c, &p, QosClass::Guaranteed))
            .iter()
            .any(|(f, _)| f.contains("hugetlb")));
    }

    /// Pod-level hugepages reach the pod's hugetlb limit from 1.34 (the
    /// kubelet's pod-level resources); a 1.33 kubelet never sees them.
    #[test]
    fn pod_level_hugepages_in_the_plan() {
        let mut p = pod(
            "h",
            vec![container("c", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")],
        );
        let pl = container("x", "hugepages-2Mi=8Mi", "hugepages-2Mi=8Mi").resources;
        p.pod_resources = Some(pl);
        let mut c = cfg(CgroupVersion::V1, CgroupDriver::Cgroupfs);
        c.hugepage_sizes = vec![2 << 20];
        let limit = |c: &PlanConfig| {
            build(c, std::slice::from_ref(&p))
                .writes
                .iter()
                .find(|w| {
                    w.file
                        .to_string_lossy()
                        .ends_with("podh/hugetlb.2MB.limit_in_bytes")
                })
                .map(|w| w.value.clone())
        };
        assert_eq!(limit(&c).as_deref(), Some("8388608"));
        c.kubelet_version = KubeletVersion::V1_33;
        assert_eq!(limit(&c).as_deref(), Some("0"));
    }

    #[test]
    fn reserved_cgroups_first_and_never_pods() {
        use crate::policy::enforce::reserved::{
            reserved_cgroups, EnforceNodeAllocatable, ReservedResources,
        };
        let mut c = cfg(CgroupVersion::V1, CgroupDriver::Systemd);
        let sys = ReservedResources::parse("cpu=1,memory=2Gi,pid=500").unwrap();
        let kube = ReservedResources::parse("memory=1Gi").unwrap();
        c.reserved_cgroups = reserved_cgroups(
            &EnforceNodeAllocatable::parse("pods,system-reserved,kube-reserved").unwrap(),
            (&Some("/system.slice".into()), &sys),
            (&Some("/kube.slice".into()), &kube),
        )
        .unwrap();
        let plan = build(&c, &[]);
        assert_eq!(
            values(&plan.writes[..5]),
            pairs(&[
                ("/sys/fs/cgroup/cpu/system.slice/cpu.shares", "1024"),
                (
                    "/sys/fs/cgroup/memory/system.slice/memory.limit_in_bytes",
                    "2147483648"
                ),
                ("/sys/fs/cgroup/pids/system.slice/pids.max", "500"),
                (
                    "/sys/fs/cgroup/memory/kube.slice/memory.limit_in_bytes",
                    "1073741824"
                ),
                ("/sys/fs/cgroup/cpu/kubepods.slice/cpu.shares", "8192"),
            ])
        );
        assert!(plan.writes[..4]
            .iter()
            .all(|w| w.level == CgroupLevel::Reserved));
        // MemoryQoS on v2: memory.min = reserved memory up to 1.35, and in
        // 1.36 only under TieredReservation.
        c.layout.version = CgroupVersion::V2;
        c.memory_qos = true;
        for (v, policy, min) in [
            (KubeletVersion::V1_35, MemoryReservationPolicy::None, true),
            (KubeletVersion::V1_36, MemoryReservationPolicy::None, false),
            (
                KubeletVersion::V1_36,
                MemoryReservationPolicy::TieredReservation,
                true,
            ),
        ] {
            c.kubelet_version = v;
            c.memory_reservation_policy = policy;
            let ws = values(&reserved_level_writes(&c));
            assert_eq!(
                ws.contains(&(
                    "/sys/fs/cgroup/kube.slice/memory.min".to_string(),
                    "1073741824".to_string()
                )),
                min,
                "{v} {policy}: {ws:?}"
            );
        }
    }

    #[test]
    fn pod_level_resources_from_1_34() {
        let mut p = pod("l", vec![container("c", "", "")]);
        p.pod_resources = Some(crate::core::model::ResourceRequirements {
            requests: Default::default(),
            limits: [
                (
                    "cpu".to_string(),
                    crate::core::quantity::Quantity::parse("1").unwrap(),
                ),
                (
                    "memory".to_string(),
                    crate::core::quantity::Quantity::parse("512Mi").unwrap(),
                ),
            ]
            .into_iter()
            .collect(),
        });
        let mut c = cfg(CgroupVersion::V2, CgroupDriver::Cgroupfs);
        for (v, class, cgroup) in [
            (
                KubeletVersion::V1_33,
                QosClass::BestEffort,
                "kubepods/besteffort/podl",
            ),
            (KubeletVersion::V1_34, QosClass::Guaranteed, "kubepods/podl"),
            (KubeletVersion::V1_36, QosClass::Guaranteed, "kubepods/podl"),
        ] {
            c.kubelet_version = v;
            let plan = build(&c, std::slice::from_ref(&p));
            assert_eq!(plan.pods[0].qos_class, class, "{v}");
            assert_eq!(plan.pods[0].cgroup, cgroup, "{v}");
            assert_eq!(plan.kubelet_version, v);
        }
    }

    #[test]
    fn build_shape() {
        let pods = vec![pod(
            "g",
            vec![container("c", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")],
        )];
        let plan = build(&cfg(CgroupVersion::V2, CgroupDriver::Systemd), &pods);
        assert_eq!(plan.pods[0].cgroup, "kubepods.slice/kubepods-podg.slice");
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["node"]["cgroup_version"], "v2");
        assert_eq!(json["node"]["cgroup_driver"], "systemd");
        assert_eq!(json["pods"][0]["qos_class"], "Guaranteed");
        assert_eq!(
            json["writes"][0]["file"],
            "/sys/fs/cgroup/kubepods.slice/cpu.weight"
        );
        assert!(json["writes"][0].get("dir").is_none());
    }

    fn arb_pod(i: usize) -> impl Strategy<Value = Pod> {
        let q = prop_oneof![
            Just(""),
            Just("cpu=100m"),
            Just("cpu=1,memory=1Gi"),
            Just("memory=64Mi")
        ];
        (q.clone(), q).prop_map(move |(r, l)| {
            // limits must not be below requests: use the request set as a limit too sometimes
            pod(&format!("p{i}"), vec![container("c", r, l)])
        })
    }

    proptest! {
        #[test]
        fn weight_monotonic_and_in_range(a in 0u64..400_000, b in 0u64..400_000) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            for f in [CpuWeightFormula::Kubelet, CpuWeightFormula::Runc] {
                let (wl, wh) = (shares_to_weight(lo, f), shares_to_weight(hi, f));
                prop_assert!(wl <= wh, "{f:?}: {lo}->{wl} {hi}->{wh}");
                prop_assert!((1..=10_000).contains(&wl) && (1..=10_000).contains(&wh));
            }
        }

        #[test]
        fn shares_in_range_and_monotonic(a in -10i64..1_000_000, b in -10i64..1_000_000) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let (sl, sh) = (milli_cpu_to_shares(lo), milli_cpu_to_shares(hi));
            prop_assert!(sl <= sh);
            prop_assert!((MIN_SHARES..=MAX_SHARES).contains(&sl));
        }

        #[test]
        fn parents_before_children(
            pods in proptest::collection::vec(0usize..1, 0..6)
                .prop_flat_map(|v| v.into_iter().enumerate().map(|(i, _)| arb_pod(i)).collect::<Vec<_>>()),
            v2 in any::<bool>(), sd in any::<bool>(), mq in any::<bool>(), qr in any::<bool>(),
        ) {
            let mut c = cfg(
                if v2 { CgroupVersion::V2 } else { CgroupVersion::V1 },
                if sd { CgroupDriver::Systemd } else { CgroupDriver::Cgroupfs },
            );
            c.memory_qos = mq;
            c.qos_reserved_memory_percent = qr.then_some(30);
            c.kubelet_version = KubeletVersion::ALL[(v2 as usize) * 2 + (sd as usize)];
            c.hugepage_sizes = if qr { vec![2 << 20] } else { vec![] };
            let plan = build(&c, &pods);
            // a cgroup's writes never come after a write to one of its descendants
            for (i, w) in plan.writes.iter().enumerate() {
                for later in &plan.writes[i + 1..] {
                    let later_dir = later.dir.to_string_lossy();
                    let ancestor = w.dir.to_string_lossy();
                    prop_assert!(
                        !(ancestor.starts_with(&*later_dir) && ancestor.len() > later_dir.len()),
                        "{} written after its child {}", later.file.display(), w.file.display()
                    );
                }
            }
            let levels: Vec<CgroupLevel> = plan.writes.iter().map(|w| w.level).collect();
            let mut sorted = levels.clone();
            sorted.sort();
            prop_assert_eq!(levels, sorted);
            prop_assert_eq!(plan.pods.len(), pods.len());
        }
    }
}
