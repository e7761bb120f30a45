//! Validation: raw text → a typed [`Config`], collecting every bad value as
//! an [`InvalidValue`] naming the field, the value and what is allowed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use qosd_model::core::duration::{format_go_duration, parse_go_duration};
use qosd_model::core::model::{CgroupDriver, ResourceList};
use qosd_model::core::quantity::Quantity;
use qosd_model::policy::evict::threshold::{Signal, DEFAULT_EVICTION_HARD};

use super::raw::RawMap;
use super::*;

struct Checker<'a> {
    errors: Vec<InvalidValue>,
    overridden: &'a BTreeSet<&'static str>,
}

impl Checker<'_> {
    fn name(&self, field: &'static str, key: Option<&str>) -> String {
        let mut n = field.to_string();
        if let Some(k) = key {
            n.push_str(&format!("[{k:?}]"));
        }
        if self.overridden.contains(field) {
            n.push_str(" (from command-line flag)");
        }
        n
    }

    fn bad(
        &mut self,
        field: &'static str,
        key: Option<&str>,
        value: &str,
        problem: impl Into<String>,
        allowed: impl Into<String>,
    ) {
        let field = self.name(field, key);
        self.errors.push(InvalidValue {
            field,
            value: value.to_string(),
            problem: problem.into(),
            allowed: allowed.into(),
        });
    }

    fn choice<T: Copy>(
        &mut self,
        field: &'static str,
        v: &Option<Scalar>,
        default: T,
        options: &[(&str, T)],
    ) -> T {
        let Some(Scalar(s)) = v else { return default };
        if let Some((_, t)) = options.iter().find(|(name, _)| *name == s) {
            return *t;
        }
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        self.bad(field, None, s, "not one of the choices", names.join(" | "));
        default
    }

    fn boolean(&mut self, field: &'static str, v: &Option<Scalar>, default: bool) -> bool {
        self.choice(field, v, default, &[("true", true), ("false", false)])
    }

    fn duration(
        &mut self,
        field: &'static str,
        key: Option<&str>,
        s: &str,
        min: Duration,
        max: Option<Duration>,
    ) -> Option<Duration> {
        let allowed = || {
            let mut a = format!(
                "a Go duration such as 300ms, 10s, 1m30s, 5m0s (at least {}",
                format_go_duration(min)
            );
            if let Some(m) = max {
                a.push_str(&format!(", at most {}", format_go_duration(m)));
            }
            a.push(')');
            a
        };
        match parse_go_duration(s) {
            Err(problem) => {
                self.bad(field, key, s, problem, allowed());
                None
            }
            Ok(d) if d < min || max.is_some_and(|m| d > m) => {
                self.bad(field, key, s, "out of range", allowed());
                None
            }
            Ok(d) => Some(d),
        }
    }

    fn opt_duration(
        &mut self,
        field: &'static str,
        v: &Option<Scalar>,
        default: Duration,
        min: Duration,
        max: Option<Duration>,
    ) -> Duration {
        match v {
            None => default,
            Some(Scalar(s)) => self.duration(field, None, s, min, max).unwrap_or(default),
        }
    }

    fn quantity(
        &mut self,
        field: &'static str,
        key: Option<&str>,
        s: &str,
        positive: bool,
    ) -> Option<Quantity> {
        let allowed = if positive {
            "a positive Kubernetes quantity such as 2, 1500m, 4Gi"
        } else {
            "a non-negative Kubernetes quantity such as 500m, 1Gi, 100Mi"
        };
        match Quantity::parse(s) {
            Err(e) => {
                self.bad(field, key, s, e.reason, allowed);
                None
            }
            Ok(q) if q.is_negative() || (positive && q.is_zero()) => {
                self.bad(
                    field,
                    key,
                    s,
                    if positive {
                        "must be positive"
                    } else {
                        "must not be negative"
                    },
                    allowed,
                );
                None
            }
            Ok(q) => Some(q),
        }
    }

    fn signal(&mut self, field: &'static str, key: &str, value: &str) -> bool {
        if Signal::parse(key).is_some() {
            return true;
        }
        self.bad(
            field,
            Some(key),
            value,
            format!("unknown eviction signal {key:?}"),
            format!("signals {}", Signal::ALL.map(Signal::as_str).join(", ")),
        );
        false
    }

    /// A threshold or minimum-reclaim map: signal → quantity or percentage,
    /// each entry checked by the eviction threshold parser itself
    /// ([`qosd_model::policy::evict::threshold::check_entry`]): one validation
    /// path, so `config check` refuses exactly what `run` refuses.
    fn threshold_map(
        &mut self,
        field: &'static str,
        setting: &str,
        m: &RawMap,
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (k, Scalar(v)) in m {
            if !self.signal(field, k, v) {
                continue;
            }
            let allowed = if setting == "eviction-minimum-reclaim" {
                "a non-negative quantity (0, 500Mi, 1000 for inodes/pids) or a positive percentage of capacity"
            } else {
                "a positive quantity (100Mi, 1Gi, 1000 for inodes/pids) or a percentage of capacity 0%..100% (0% and 100% disable the signal)"
            };
            match qosd_model::policy::evict::threshold::check_entry(setting, k, v) {
                Ok(()) => {
                    out.insert(k.clone(), v.clone());
                }
                Err(e) => self.bad(field, Some(k), v, e.to_string(), allowed),
            }
        }
        out
    }

    fn resource_list(&mut self, field: &'static str, m: &Option<RawMap>) -> ResourceList {
        let mut out = ResourceList::new();
        for (k, Scalar(v)) in m.iter().flatten() {
            let known = RESERVED_RESOURCES.contains(&k.as_str())
                || k.strip_prefix("hugepages-")
                    .is_some_and(|size| Quantity::parse(size).is_ok());
            if !known {
                self.bad(
                    field,
                    Some(k),
                    v,
                    format!("unknown resource {k:?}"),
                    format!(
                        "resources {}, hugepages-<size>",
                        RESERVED_RESOURCES.join(", ")
                    ),
                );
                continue;
            }
            if let Some(q) = self.quantity(field, Some(k), v, false) {
                out.insert(k.clone(), q);
            }
        }
        out
    }

    fn path(&mut self, field: &'static str, v: &Option<Scalar>, default: &str) -> PathBuf {
        let s = v.as_ref().map(|s| s.0.as_str()).unwrap_or(default);
        if !s.starts_with('/') {
            self.bad(
                field,
                None,
                s,
                "not an absolute path",
                "an absolute path such as /sys/fs/cgroup",
            );
        }
        PathBuf::from(s)
    }
}

/// Turn raw values into a typed [`Config`], or every problem found.
pub(crate) fn validate(
    raw: RawConfig,
    overridden: &BTreeSet<&'static str>,
) -> Result<Config, Vec<InvalidValue>> {
    let mut c = Checker {
        errors: Vec::new(),
        overridden,
    };

    // --- eviction --------------------------------------------------------
    let merge_defaults = c.boolean(
        "mergeDefaultEvictionSettings",
        &raw.merge_default_eviction_settings,
        false,
    );
    let defaults: BTreeMap<String, String> = DEFAULT_EVICTION_HARD
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let eviction_hard = match &raw.eviction_hard {
        None => defaults,
        Some(m) => {
            let given = c.threshold_map("evictionHard", "eviction-hard", m);
            if merge_defaults {
                let mut all = defaults;
                all.extend(given);
                all
            } else {
                given
            }
        }
    };
    let eviction_soft = raw
        .eviction_soft
        .as_ref()
        .map(|m| c.threshold_map("evictionSoft", "eviction-soft", m))
        .unwrap_or_default();
    let mut eviction_soft_grace_period = BTreeMap::new();
    for (k, Scalar(v)) in raw.eviction_soft_grace_period.iter().flatten() {
        if c.signal("evictionSoftGracePeriod", k, v) {
            if let Some(d) = c.duration("evictionSoftGracePeriod", Some(k), v, Duration::ZERO, None)
            {
                eviction_soft_grace_period.insert(k.clone(), d);
            }
        }
    }
    let eviction_minimum_reclaim = raw
        .eviction_minimum_reclaim
        .as_ref()
        .map(|m| c.threshold_map("evictionMinimumReclaim", "eviction-minimum-reclaim", m))
        .unwrap_or_default();
    let eviction_max_pod_grace_period = match &raw.eviction_max_pod_grace_period {
        None => 0,
        Some(Scalar(s)) => match s.parse::<i64>() {
            Ok(n) if (0..=i64::from(i32::MAX)).contains(&n) => n,
            _ => {
                c.bad(
                    "evictionMaxPodGracePeriod",
                    None,
                    s,
                    "not a whole number of seconds in range",
                    "an integer number of seconds 0..2147483647 (0: use the pod's own grace period)",
                );
                0
            }
        },
    };
    let eviction_pressure_transition_period = c.opt_duration(
        "evictionPressureTransitionPeriod",
        &raw.eviction_pressure_transition_period,
        qosd_model::policy::evict::threshold::DEFAULT_PRESSURE_TRANSITION_PERIOD,
        Duration::ZERO,
        None,
    );

    // Cross-field rules (a soft threshold needs a grace period unless it is
    // disabled by 0%/100%) come from the threshold parser too.
    if let Err(e) = qosd_model::policy::evict::threshold::EvictionConfig::from_parts(
        Some(&eviction_hard),
        &eviction_soft,
        &eviction_soft_grace_period,
        &eviction_minimum_reclaim,
        eviction_max_pod_grace_period,
        eviction_pressure_transition_period,
    ) {
        use qosd_model::policy::evict::threshold::ThresholdError;
        match &e {
            ThresholdError::SoftWithoutGrace { signal, .. } => {
                let v = eviction_soft.get(signal).cloned().unwrap_or_default();
                c.bad(
                    "evictionSoft",
                    Some(signal),
                    &v,
                    e.to_string(),
                    format!("a soft threshold together with evictionSoftGracePeriod[{signal:?}]"),
                );
            }
            _ => c.bad(
                "evictionHard",
                None,
                "",
                e.to_string(),
                "thresholds the kubelet accepts",
            ),
        }
    }

    // Image GC (kubelet validation: each percent in 0..=100, low < high).
    let mut percent = |field: &'static str, v: &Option<Scalar>, default: u32| -> u32 {
        match v {
            None => default,
            Some(Scalar(s)) => match s.parse::<u32>() {
                Ok(p) if p <= 100 => p,
                _ => {
                    c.bad(
                        field,
                        None,
                        s,
                        "not a whole percentage 0..100",
                        "an integer 0..100",
                    );
                    default
                }
            },
        }
    };
    let image_gc_high_threshold_percent = percent(
        "imageGCHighThresholdPercent",
        &raw.image_gc_high_threshold_percent,
        85,
    );
    let image_gc_low_threshold_percent = percent(
        "imageGCLowThresholdPercent",
        &raw.image_gc_low_threshold_percent,
        80,
    );
    if image_gc_low_threshold_percent >= image_gc_high_threshold_percent {
        c.bad(
            "imageGCLowThresholdPercent",
            None,
            &image_gc_low_threshold_percent.to_string(),
            format!(
                "must be less than imageGCHighThresholdPercent ({image_gc_high_threshold_percent})"
            ),
            "a percentage below imageGCHighThresholdPercent",
        );
    }
    let image_minimum_gc_age = c.opt_duration(
        "imageMinimumGCAge",
        &raw.image_minimum_gc_age,
        Duration::from_secs(120),
        Duration::ZERO,
        None,
    );
    let pod_logs_dir = c.path("podLogsDir", &raw.pod_logs_dir, "/var/log/pods");

    // --- cgroups -----------------------------------------------------------
    let cgroup_driver = c.choice(
        "cgroupDriver",
        &raw.cgroup_driver,
        CgroupDriver::Cgroupfs,
        &[
            ("cgroupfs", CgroupDriver::Cgroupfs),
            ("systemd", CgroupDriver::Systemd),
        ],
    );
    let cgroup_root = match &raw.cgroup_root {
        None => "/".to_string(),
        Some(Scalar(s)) if s.is_empty() => "/".to_string(),
        Some(Scalar(s)) => {
            let bad_segment = s.split('/').any(|seg| seg == "." || seg == "..") || s.contains('\0');
            if !s.starts_with('/') || bad_segment {
                c.bad(
                    "cgroupRoot",
                    None,
                    s,
                    "not an absolute cgroup path",
                    "an absolute cgroup path such as / or /qosd-test (no . or .. segments)",
                );
            }
            s.clone()
        }
    };
    let system_reserved = c.resource_list("systemReserved", &raw.system_reserved);
    let kube_reserved = c.resource_list("kubeReserved", &raw.kube_reserved);
    // The sum the node arithmetic uses (`Config::reserved`): checked here so
    // `config check` refuses what `run` would refuse.
    if let Err(e) = crate::reserved_sum(&system_reserved, &kube_reserved) {
        let show = |l: &qosd_model::core::model::ResourceList, k: &str| {
            l.get(k)
                .map(|q| q.to_string())
                .unwrap_or_else(|| "0".into())
        };
        c.bad(
            "systemReserved + kubeReserved",
            None,
            &format!(
                "cpu {} + {}, memory {} + {}",
                show(&system_reserved, "cpu"),
                show(&kube_reserved, "cpu"),
                show(&system_reserved, "memory"),
                show(&kube_reserved, "memory")
            ),
            e.to_string(),
            "reservations whose sum is at most 2^63-1 millicores (cpu) and bytes (memory)",
        );
    }
    let mut qos_reserved = BTreeMap::new();
    for (k, Scalar(v)) in raw.qos_reserved.iter().flatten() {
        if k != "memory" {
            c.bad(
                "qosReserved",
                Some(k),
                v,
                format!("unsupported resource {k:?}"),
                "only memory, e.g. qosReserved: {memory: \"50%\"}",
            );
            continue;
        }
        let parsed = v
            .strip_suffix('%')
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|p| *p <= 100);
        match parsed {
            Some(p) => {
                qos_reserved.insert(k.clone(), Percent(p));
            }
            None => c.bad(
                "qosReserved",
                Some(k),
                v,
                "not a whole percentage 0%..100%",
                "a percentage such as \"50%\"",
            ),
        }
    }
    let cpu_cfs_quota = c.boolean("cpuCFSQuota", &raw.cpu_cfs_quota, true);
    let cpu_cfs_quota_period = c.opt_duration(
        "cpuCFSQuotaPeriod",
        &raw.cpu_cfs_quota_period,
        Duration::from_millis(100),
        Duration::from_millis(1),
        Some(Duration::from_secs(1)),
    );
    let memory_throttling_factor = match &raw.memory_throttling_factor {
        None => 0.9,
        Some(Scalar(s)) => match s.parse::<f64>() {
            Ok(f) if f > 0.0 && f <= 1.0 => f,
            _ => {
                c.bad(
                    "memoryThrottlingFactor",
                    None,
                    s,
                    "not a number in (0, 1]",
                    "a number greater than 0 and at most 1, e.g. 0.9",
                );
                0.9
            }
        },
    };

    // --- qosd's own --------------------------------------------------------
    let cgroupfs = c.path("cgroupfs", &raw.cgroupfs, "/sys/fs/cgroup");
    let cgroup_version = c.choice(
        "cgroupVersion",
        &raw.cgroup_version,
        CgroupVersionSetting::Auto,
        &[
            ("auto", CgroupVersionSetting::Auto),
            ("v1", CgroupVersionSetting::V1),
            ("v2", CgroupVersionSetting::V2),
        ],
    );
    let runtime_endpoint = {
        let s = raw
            .runtime_endpoint
            .as_ref()
            .map(|s| s.0.as_str())
            .unwrap_or(DEFAULT_RUNTIME_ENDPOINT);
        let path = match s.strip_prefix("unix://") {
            Some(p) => p,
            None if s.contains("://") => "",
            None => s,
        };
        if path.starts_with('/') && path.len() > 1 {
            format!("unix://{path}")
        } else {
            c.bad(
                "runtimeEndpoint",
                None,
                s,
                "not a UNIX socket endpoint",
                "unix:///absolute/path.sock (e.g. unix:///run/containerd/containerd.sock) or an absolute socket path",
            );
            DEFAULT_RUNTIME_ENDPOINT.to_string()
        }
    };
    let mode = c.choice(
        "mode",
        &raw.mode,
        Mode::Enforce,
        &[("enforce", Mode::Enforce), ("dry-run", Mode::DryRun)],
    );
    let reconcile_interval = c.opt_duration(
        "reconcileInterval",
        &raw.reconcile_interval,
        Duration::from_secs(10),
        Duration::from_millis(100),
        Some(Duration::from_secs(3600)),
    );
    let relist_interval = c.opt_duration(
        "relistInterval",
        &raw.relist_interval,
        Duration::from_secs(1),
        Duration::from_millis(10),
        Some(Duration::from_secs(3600)),
    );
    let metrics_address = {
        let s = raw
            .metrics_address
            .as_ref()
            .map(|s| s.0.as_str())
            .unwrap_or(DEFAULT_METRICS_ADDRESS);
        match s.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(_) => {
                c.bad(
                    "metricsAddress",
                    None,
                    s,
                    "not an IP:port socket address",
                    "IP:port such as 127.0.0.1:9847, 0.0.0.0:9847 or [::1]:9847 (port 0: any free port)",
                );
                DEFAULT_METRICS_ADDRESS.parse().expect("valid default")
            }
        }
    };
    let root_dir = c.path("rootDir", &raw.root_dir, "/var/lib/kubelet");
    let imagefs_path = raw
        .imagefs_path
        .as_ref()
        .map(|_| c.path("imagefsPath", &raw.imagefs_path, ""));
    let memory_available_source = c.choice(
        "memoryAvailableSource",
        &raw.memory_available_source,
        qosd_model::policy::evict::MemorySource::WorkingSet,
        &[
            (
                "workingset",
                qosd_model::policy::evict::MemorySource::WorkingSet,
            ),
            ("meminfo", qosd_model::policy::evict::MemorySource::Meminfo),
        ],
    );
    let cpu_weight_formula = c.choice(
        "cpuWeightFormula",
        &raw.cpu_weight_formula,
        CpuWeightFormula::Kubelet,
        &[
            ("kubelet", CpuWeightFormula::Kubelet),
            ("runc", CpuWeightFormula::Runc),
        ],
    );
    let memory_qos = c.boolean("memoryQoS", &raw.memory_qos, false);
    let memory_reservation_policy = match &raw.memory_reservation_policy {
        None => Default::default(),
        Some(Scalar(s)) => {
            qosd_model::policy::enforce::memory_qos::MemoryReservationPolicy::parse(s)
                .unwrap_or_else(|_| {
                    c.bad(
                        "memoryReservationPolicy",
                        None,
                        s,
                        "not one of the choices",
                        "None | TieredReservation",
                    );
                    Default::default()
                })
        }
    };
    let kubelet_version = match &raw.kubelet_version {
        None => qosd_model::policy::enforce::versions::KubeletVersion::NEWEST,
        Some(Scalar(s)) => qosd_model::policy::enforce::versions::KubeletVersion::parse(s)
            .unwrap_or_else(|e| {
                c.bad("kubeletVersion", None, s, e, "1.33 | 1.34 | 1.35 | 1.36");
                qosd_model::policy::enforce::versions::KubeletVersion::NEWEST
            }),
    };
    let enforce_node_allocatable = match &raw.enforce_node_allocatable {
        None => qosd_model::policy::enforce::reserved::EnforceNodeAllocatable::kubelet_default(),
        Some(keys) => {
            let joined = keys
                .iter()
                .map(|Scalar(k)| k.as_str())
                .collect::<Vec<_>>()
                .join(",");
            let e = qosd_model::policy::enforce::reserved::EnforceNodeAllocatable::parse(&joined)
                .ok()
                .filter(|_| {
                    keys.iter()
                        .all(|Scalar(k)| !matches!(k.as_str(), "true" | "false"))
                });
            e.unwrap_or_else(|| {
                c.bad(
                    "enforceNodeAllocatable",
                    None,
                    &joined,
                    "unknown key",
                    "a list of pods, system-reserved, kube-reserved (or none)",
                );
                qosd_model::policy::enforce::reserved::EnforceNodeAllocatable::kubelet_default()
            })
        }
    };
    let mut cgroup_name = |field: &'static str, v: &Option<Scalar>| -> Option<String> {
        let Scalar(s) = v.as_ref()?;
        if !s.starts_with('/') || s.split('/').any(|seg| seg == "." || seg == "..") {
            c.bad(
                field,
                None,
                s,
                "not an absolute cgroup path",
                "an absolute cgroup path such as /system.slice (no . or .. segments)",
            );
        }
        Some(s.clone())
    };
    let system_reserved_cgroup = cgroup_name("systemReservedCgroup", &raw.system_reserved_cgroup);
    let kube_reserved_cgroup = cgroup_name("kubeReservedCgroup", &raw.kube_reserved_cgroup);
    for (on, key, field, name) in [
        (
            enforce_node_allocatable.system_reserved,
            "system-reserved",
            "systemReservedCgroup",
            &system_reserved_cgroup,
        ),
        (
            enforce_node_allocatable.kube_reserved,
            "kube-reserved",
            "kubeReservedCgroup",
            &kube_reserved_cgroup,
        ),
    ] {
        if on && name.is_none() {
            c.bad(
                field,
                None,
                "",
                format!("enforceNodeAllocatable contains {key} but {field} is not set"),
                "the absolute path of the cgroup to limit, e.g. /system.slice",
            );
        }
    }
    let node_cpu = raw
        .node_cpu
        .as_ref()
        .and_then(|Scalar(s)| c.quantity("nodeCPU", None, s, true));
    let node_memory = raw
        .node_memory
        .as_ref()
        .and_then(|Scalar(s)| c.quantity("nodeMemory", None, s, true));
    let log_format = c.choice(
        "logFormat",
        &raw.log_format,
        LogFormat::Text,
        &[("text", LogFormat::Text), ("json", LogFormat::Json)],
    );
    let eviction_backend = c.choice(
        "evictionBackend",
        &raw.eviction_backend,
        EvictionBackend::Kill,
        &[
            ("kill", EvictionBackend::Kill),
            ("cri", EvictionBackend::Cri),
            ("api", EvictionBackend::Api),
            ("dry-run", EvictionBackend::DryRun),
        ],
    );

    let cpu_manager_policy = c.choice(
        "cpuManagerPolicy",
        &raw.cpu_manager_policy,
        qosd_model::policy::cpu::policy::PolicyName::None,
        &[
            ("none", qosd_model::policy::cpu::policy::PolicyName::None),
            (
                "static",
                qosd_model::policy::cpu::policy::PolicyName::Static,
            ),
        ],
    );
    let cpu_manager_policy_options: BTreeMap<String, String> = raw
        .cpu_manager_policy_options
        .iter()
        .flatten()
        .map(|(k, Scalar(v))| (k.clone(), v.clone()))
        .collect();
    if let Err(e) =
        qosd_model::policy::cpu::policy::PolicyOptions::parse(&cpu_manager_policy_options)
    {
        c.bad(
            "cpuManagerPolicyOptions",
            None,
            &format!("{cpu_manager_policy_options:?}"),
            e.to_string(),
            "full-pcpus-only, distribute-cpus-across-numa, align-by-socket: true | false",
        );
    }
    let reserved_system_cpus = raw.reserved_system_cpus.as_ref().map(|Scalar(s)| s.clone());
    if let Some(s) = &reserved_system_cpus {
        if let Err(e) = qosd_model::policy::cpu::CpuSet::parse(s) {
            c.bad(
                "reservedSystemCPUs",
                None,
                s,
                e.reason,
                "a CPU list such as 0-1,4",
            );
        }
    }
    let cpu_manager_state_dir = c.path(
        "cpuManagerStateDir",
        &raw.cpu_manager_state_dir,
        "/var/lib/qosd",
    );
    let state_dir = raw
        .state_dir
        .as_ref()
        .map(|_| c.path("stateDir", &raw.state_dir, ""));
    let kubelet_cpu_manager_state = raw
        .kubelet_cpu_manager_state
        .as_ref()
        .map(|_| c.path("kubeletCPUManagerState", &raw.kubelet_cpu_manager_state, ""));
    let kubeconfig = raw
        .kubeconfig
        .as_ref()
        .filter(|s| !s.0.is_empty())
        .map(|_| c.path("kubeconfig", &raw.kubeconfig, ""));
    let node_name = raw
        .node_name
        .as_ref()
        .map(|s| s.0.trim().to_string())
        .filter(|s| !s.is_empty());
    if let Some(n) = &node_name {
        // Node names are DNS subdomains (RFC 1123).
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if n.len() > 253 || !n.split('.').all(label_ok) {
            c.bad(
                "nodeName",
                None,
                n,
                "not a node name",
                "a DNS subdomain (RFC 1123): lowercase letters, digits, '-' and '.', at most 253 characters",
            );
        }
    }
    let api_eviction_timeout = c.opt_duration(
        "apiEvictionTimeout",
        &raw.api_eviction_timeout,
        Duration::from_secs(1),
        Duration::from_millis(10),
        Some(Duration::from_secs(60)),
    );
    let runtime_unhealthy_after = c.opt_duration(
        "runtimeUnhealthyAfter",
        &raw.runtime_unhealthy_after,
        Duration::from_secs(120),
        Duration::ZERO,
        None,
    );

    // --- kubelet fields qosd shows or plans with, and the kubelet source --
    let pod_pids_limit = match &raw.pod_pids_limit {
        None => -1,
        Some(Scalar(s)) => match s.parse::<i64>() {
            // Negative means "no limit" (-1), as the kubelet defaults it.
            Ok(n) => n.max(-1),
            Err(_) => {
                c.bad(
                    "podPidsLimit",
                    None,
                    s,
                    "not a whole number",
                    "an integer number of processes per pod (-1: no limit)",
                );
                -1
            }
        },
    };
    let kubelet_config = raw
        .kubelet_config
        .as_ref()
        .map(|Scalar(s)| PathBuf::from(s));
    let kubelet_config_dir = raw
        .kubelet_config_dir
        .as_ref()
        .map(|Scalar(s)| PathBuf::from(s));
    let cgroup_enforcement = c.choice(
        "cgroupEnforcement",
        &raw.cgroup_enforcement,
        if kubelet_config.is_some() || kubelet_config_dir.is_some() {
            CgroupEnforcement::Audit
        } else {
            CgroupEnforcement::Enforce
        },
        &[
            ("enforce", CgroupEnforcement::Enforce),
            ("audit", CgroupEnforcement::Audit),
        ],
    );

    let hugepage_sizes = raw.hugepage_sizes.as_ref().and_then(|Scalar(s)| {
        match qosd_model::policy::enforce::hugepages::parse_size_list(s) {
            Ok(v) => Some(v),
            Err(e) => {
                c.bad(
                    "hugepageSizes",
                    None,
                    s,
                    e,
                    "comma-separated page sizes such as 2Mi,1Gi, or none",
                );
                None
            }
        }
    });
    let log_level = match &raw.log_level {
        None => "info".to_string(),
        Some(Scalar(s)) => {
            if let Err(e) = crate::log_filter_ok(s) {
                c.bad(
                    "logLevel",
                    None,
                    s,
                    e.to_string(),
                    "error | warn | info | debug | trace, or a filter such as qosd=debug,info",
                );
            }
            s.clone()
        }
    };
    let eviction_hook = raw
        .eviction_hook
        .as_ref()
        .map(|_| c.path("evictionHook", &raw.eviction_hook, ""));
    let eviction_hook_timeout = match &raw.eviction_hook_timeout {
        None => Duration::from_secs(10),
        Some(Scalar(s)) => c
            .duration(
                "evictionHookTimeout",
                None,
                s,
                Duration::from_millis(1),
                Some(Duration::from_secs(600)),
            )
            .unwrap_or(Duration::from_secs(10)),
    };

    if !c.errors.is_empty() {
        return Err(c.errors);
    }
    Ok(Config {
        hugepage_sizes,
        log_level,
        eviction_hook,
        eviction_hook_timeout,
        kubeconfig,
        node_name,
        api_eviction_timeout,
        runtime_unhealthy_after,
        pod_pids_limit,
        cgroup_enforcement,
        kubelet_config,
        kubelet_config_dir,
        eviction_hard,
        eviction_soft,
        eviction_soft_grace_period,
        eviction_minimum_reclaim,
        eviction_max_pod_grace_period,
        eviction_pressure_transition_period,
        merge_default_eviction_settings: merge_defaults,
        image_gc_high_threshold_percent,
        image_gc_low_threshold_percent,
        image_minimum_gc_age,
        pod_logs_dir,
        cgroup_driver,
        cgroup_root,
        system_reserved,
        kube_reserved,
        qos_reserved,
        cpu_cfs_quota,
        cpu_cfs_quota_period,
        memory_throttling_factor,
        memory_reservation_policy,
        enforce_node_allocatable,
        system_reserved_cgroup,
        kube_reserved_cgroup,
        kubelet_version,
        fail_cgroup_v1: None,
        cgroupfs,
        cgroup_version,
        runtime_endpoint,
        mode,
        reconcile_interval,
        relist_interval,
        metrics_address,
        root_dir,
        imagefs_path,
        memory_available_source,
        cpu_weight_formula,
        memory_qos,
        node_cpu,
        node_memory,
        log_format,
        eviction_backend,
        cpu_manager_policy,
        cpu_manager_policy_options,
        reserved_system_cpus,
        cpu_manager_state_dir,
        kubelet_cpu_manager_state,
        state_dir,
    })
}
