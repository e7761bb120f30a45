//! Validation: raw text → a typed [`Config`], collecting every bad value as
//! an [`InvalidValue`] naming the field, the value and what is allowed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use qosd_model::core::duration::{format_go_duration, parse_go_duration};
use qosd_model::core::model::{CgroupDriver, ResourceList};
use qosd_model::core::quantity::Quantity;
use qosd_model::policy::cpu::policy::PolicyName;
use qosd_model::policy::enforce::memory_qos::MemoryReservationPolicy;
use qosd_model::policy::enforce::reserved::EnforceNodeAllocatable;
use qosd_model::policy::enforce::versions::KubeletVersion;
use qosd_model::policy::evict::threshold::{Signal, DEFAULT_EVICTION_HARD};

use super::raw::RawMap;
use super::*;

struct Checker<'a> {
    errors: Vec<InvalidValue>,
    overridden: &'a BTreeSet<&'static str>,
}

impl Checker<'_> {
    fn name(&self, field: &'static str, key: Option<&str>) -> String {
        // A field is a declared setting (or a sum of them: `systemReserved + kubeReserved`).
        debug_assert!(
            field
                .split(" + ")
                .all(|f| crate::settings::by_key(f).is_some()),
            "{field} is not a declared setting"
        );
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

    fn signal(&mut self, field: &'static str, key: &str, value: &str) -> Option<Signal> {
        if let Some(sig) = Signal::parse(key) {
            return Some(sig);
        }
        self.bad(
            field,
            Some(key),
            value,
            format!("unknown eviction signal {key:?}"),
            format!("signals {}", Signal::ALL.map(Signal::as_str).join(", ")),
        );
        None
    }

    /// A pressure signal's name (`memory.some`, `memory.full`), or an error
    /// naming the field, the key and the signals allowed.
    fn pressure_signal(&mut self, field: &'static str, key: &str, value: &str) -> Option<Signal> {
        if let Some(sig) = Signal::parse_pressure(key) {
            return Some(sig);
        }
        let hint = if Signal::parse(key).is_some() {
            format!(
                " ({key} is a kubelet signal: its thresholds go in evictionHard / evictionSoft)"
            )
        } else {
            String::new()
        };
        self.bad(
            field,
            Some(key),
            value,
            format!("unknown pressure signal {key:?}{hint}"),
            format!(
                "signals {}",
                Signal::PRESSURE.map(Signal::as_str).join(", ")
            ),
        );
        None
    }

    /// A threshold or minimum-reclaim map: signal → quantity or percentage,
    /// each entry parsed by the eviction threshold parser itself
    /// ([`qosd_model::policy::evict::threshold::parse_entry`]), once.
    fn threshold_map(&mut self, field: &'static str, setting: &str, m: &RawMap) -> ThresholdMap {
        let mut out = ThresholdMap::new();
        for (k, Scalar(v)) in m {
            let Some(sig) = self.signal(field, k, v) else {
                continue;
            };
            let allowed = if setting == "eviction-minimum-reclaim" {
                "a non-negative quantity (0, 500Mi, 1000 for inodes/pids) or a positive percentage of capacity"
            } else {
                "a positive quantity (100Mi, 1Gi, 1000 for inodes/pids) or a percentage of capacity 0%..100% (0% and 100% disable the signal)"
            };
            match ThresholdSetting::parse(setting, sig, v) {
                Ok(t) => {
                    out.insert(sig, t);
                }
                Err(e) => self.bad(field, Some(k), v, e.to_string(), allowed),
            }
        }
        out
    }

    /// A whole percentage 0..=100 (image GC thresholds).
    fn percent(&mut self, field: &'static str, v: &Option<Scalar>, default: u32) -> u32 {
        let Some(Scalar(s)) = v else { return default };
        match s.parse::<u32>() {
            Ok(p) if p <= 100 => p,
            _ => {
                self.bad(
                    field,
                    None,
                    s,
                    "not a whole percentage 0..100",
                    "an integer 0..100",
                );
                default
            }
        }
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

/// Turn raw values into a typed [`Config`], or every problem found. The
/// sections run in the order of the fields in the file, so the errors are
/// listed in that order.
pub(crate) fn validate(
    raw: RawConfig,
    overridden: &BTreeSet<&'static str>,
) -> Result<Config, Vec<InvalidValue>> {
    let mut c = Checker {
        errors: Vec::new(),
        overridden,
    };
    let ev = eviction(&mut c, &raw);
    let gc = image_gc(&mut c, &raw);
    let cg = cgroups(&mut c, &raw);
    let d = daemon(&mut c, &raw);
    let na = node_allocatable(&mut c, &raw);
    let n = node(&mut c, &raw);
    let cpu = cpu_manager(&mut c, &raw);
    let k = kube(&mut c, &raw);
    let ks = kubelet_source(&mut c, &raw);
    let x = extras(&mut c, &raw);
    if !c.errors.is_empty() {
        return Err(c.errors);
    }
    Ok(Config {
        hugepage_sizes: x.hugepage_sizes,
        log_level: x.log_level,
        eviction_hook: x.eviction_hook,
        eviction_hook_timeout: x.eviction_hook_timeout,
        kubeconfig: k.kubeconfig,
        node_name: k.node_name,
        api_eviction_timeout: k.api_eviction_timeout,
        runtime_unhealthy_after: k.runtime_unhealthy_after,
        pod_pids_limit: ks.pod_pids_limit,
        cgroup_enforcement: ks.cgroup_enforcement,
        kubelet_config: ks.kubelet_config,
        kubelet_config_dir: ks.kubelet_config_dir,
        eviction_hard: ev.hard,
        eviction_soft: ev.soft,
        eviction_soft_grace_period: ev.soft_grace_period,
        eviction_minimum_reclaim: ev.minimum_reclaim,
        eviction_max_pod_grace_period: ev.max_pod_grace_period,
        eviction_pressure_transition_period: ev.pressure_transition_period,
        merge_default_eviction_settings: ev.merge_defaults,
        eviction_pressure_hard: ev.pressure_hard,
        eviction_pressure_soft: ev.pressure_soft,
        eviction_pressure_soft_grace_period: ev.pressure_soft_grace_period,
        image_gc_high_threshold_percent: gc.high,
        image_gc_low_threshold_percent: gc.low,
        image_minimum_gc_age: gc.minimum_age,
        image_maximum_gc_age: gc.maximum_age,
        not_modelled: Vec::new(),
        pod_logs_dir: gc.pod_logs_dir,
        cgroup_driver: cg.driver,
        cgroup_root: cg.root,
        system_reserved: cg.system_reserved,
        kube_reserved: cg.kube_reserved,
        qos_reserved: cg.qos_reserved,
        cpu_cfs_quota: cg.cpu_cfs_quota,
        cpu_cfs_quota_period: cg.cpu_cfs_quota_period,
        memory_throttling_factor: cg.memory_throttling_factor,
        memory_reservation_policy: d.memory_reservation_policy,
        enforce_node_allocatable: na.enforce,
        system_reserved_cgroup: na.system_reserved_cgroup,
        kube_reserved_cgroup: na.kube_reserved_cgroup,
        kubelet_version: d.kubelet_version,
        fail_cgroup_v1: None,
        cgroupfs: d.cgroupfs,
        cgroup_version: d.cgroup_version,
        runtime_endpoint: d.runtime_endpoint,
        mode: d.mode,
        reconcile_interval: d.reconcile_interval,
        relist_interval: d.relist_interval,
        metrics_address: d.metrics_address,
        root_dir: d.root_dir,
        imagefs_path: d.imagefs_path,
        memory_available_source: d.memory_available_source,
        cpu_weight_formula: d.cpu_weight_formula,
        memory_qos: d.memory_qos,
        node_cpu: n.node_cpu,
        node_memory: n.node_memory,
        log_format: n.log_format,
        eviction_backend: n.eviction_backend,
        cpu_manager_policy: cpu.policy,
        cpu_manager_policy_options: cpu.policy_options,
        reserved_system_cpus: cpu.reserved_system_cpus,
        cpu_manager_state_dir: cpu.state_dir,
        kubelet_cpu_manager_state: cpu.kubelet_state,
        state_dir: cpu.qosd_state_dir,
    })
}

// --- eviction ----------------------------------------------------------------

struct Eviction {
    hard: ThresholdMap,
    soft: ThresholdMap,
    soft_grace_period: BTreeMap<Signal, Duration>,
    minimum_reclaim: ThresholdMap,
    max_pod_grace_period: i64,
    pressure_transition_period: Duration,
    merge_defaults: bool,
    pressure_hard: ThresholdMap,
    pressure_soft: ThresholdMap,
    pressure_soft_grace_period: BTreeMap<Signal, Duration>,
}

/// The kubelet's default hard thresholds, typed.
fn default_hard() -> ThresholdMap {
    DEFAULT_EVICTION_HARD
        .iter()
        .map(|(k, v)| {
            let sig = Signal::parse(k).expect("a known signal");
            let t = ThresholdSetting::parse("eviction-hard", sig, v).expect("a valid default");
            (sig, t)
        })
        .collect()
}

fn eviction(c: &mut Checker, raw: &RawConfig) -> Eviction {
    let merge_defaults = c.boolean(
        "mergeDefaultEvictionSettings",
        &raw.merge_default_eviction_settings,
        false,
    );
    let hard = match &raw.eviction_hard {
        None => default_hard(),
        Some(m) => {
            let given = c.threshold_map("evictionHard", "eviction-hard", m);
            if merge_defaults {
                let mut all = default_hard();
                all.extend(given);
                all
            } else {
                given
            }
        }
    };
    let soft = raw
        .eviction_soft
        .as_ref()
        .map(|m| c.threshold_map("evictionSoft", "eviction-soft", m))
        .unwrap_or_default();
    let mut soft_grace_period = BTreeMap::new();
    for (k, Scalar(v)) in raw.eviction_soft_grace_period.iter().flatten() {
        if let Some(sig) = c.signal("evictionSoftGracePeriod", k, v) {
            if let Some(d) = c.duration("evictionSoftGracePeriod", Some(k), v, Duration::ZERO, None)
            {
                soft_grace_period.insert(sig, d);
            }
        }
    }
    let minimum_reclaim = raw
        .eviction_minimum_reclaim
        .as_ref()
        .map(|m| c.threshold_map("evictionMinimumReclaim", "eviction-minimum-reclaim", m))
        .unwrap_or_default();
    let max_pod_grace_period = max_pod_grace_period(c, &raw.eviction_max_pod_grace_period);
    let pressure_transition_period = c.opt_duration(
        "evictionPressureTransitionPeriod",
        &raw.eviction_pressure_transition_period,
        qosd_model::policy::evict::threshold::DEFAULT_PRESSURE_TRANSITION_PERIOD,
        Duration::ZERO,
        None,
    );
    soft_needs_grace(c, &soft, &soft_grace_period);
    let (pressure_hard, pressure_soft, pressure_soft_grace_period) = pressure(c, raw);
    Eviction {
        hard,
        soft,
        soft_grace_period,
        minimum_reclaim,
        max_pod_grace_period,
        pressure_transition_period,
        merge_defaults,
        pressure_hard,
        pressure_soft,
        pressure_soft_grace_period,
    }
}

/// qosd's pressure thresholds (`evictionPressureHard`, `evictionPressureSoft`,
/// `evictionPressureSoftGracePeriod`): pressure signals only, each value
/// parsed by the pressure grammar, one window per signal, a grace period
/// for each soft threshold.
fn pressure(
    c: &mut Checker,
    raw: &RawConfig,
) -> (ThresholdMap, ThresholdMap, BTreeMap<Signal, Duration>) {
    use qosd_model::policy::evict::pressure::ALLOWED;
    let mut maps: [ThresholdMap; 2] = Default::default();
    for (i, (field, m)) in [
        ("evictionPressureHard", &raw.eviction_pressure_hard),
        ("evictionPressureSoft", &raw.eviction_pressure_soft),
    ]
    .into_iter()
    .enumerate()
    {
        for (k, Scalar(v)) in m.iter().flatten() {
            let Some(sig) = c.pressure_signal(field, k, v) else {
                continue;
            };
            match ThresholdSetting::parse_pressure(field, sig, v) {
                Ok(t) => {
                    maps[i].insert(sig, t);
                }
                Err(e) => c.bad(field, Some(k), v, e.to_string(), ALLOWED),
            }
        }
    }
    let [hard, soft] = maps;
    let mut grace = BTreeMap::new();
    const GRACE: &str = "evictionPressureSoftGracePeriod";
    for (k, Scalar(v)) in raw.eviction_pressure_soft_grace_period.iter().flatten() {
        if let Some(sig) = c.pressure_signal(GRACE, k, v) {
            if let Some(d) = c.duration(GRACE, Some(k), v, Duration::ZERO, None) {
                grace.insert(sig, d);
            }
        }
    }
    // One window per signal: hard and soft are levels on one measurement.
    for (sig, t) in &soft {
        let window = |t: &ThresholdSetting| {
            t.value
                .as_ref()
                .and_then(qosd_model::policy::evict::pressure::window_of)
        };
        let (Some(h), Some(w)) = (hard.get(sig).and_then(window), window(t)) else {
            continue;
        };
        if h != w {
            c.bad(
                "evictionPressureSoft",
                Some(sig.as_str()),
                t.as_written(),
                format!(
                    "window {} differs from evictionPressureHard[{:?}]'s {}: the thresholds of one signal are levels on one window (use memory.some and memory.full for two windows)",
                    format_go_duration(w),
                    sig.as_str(),
                    format_go_duration(h)
                ),
                format!("the window {} of evictionPressureHard[{:?}]", format_go_duration(h), sig.as_str()),
            );
        }
    }
    for (sig, t) in &soft {
        if !grace.contains_key(sig) {
            let name = sig.as_str();
            c.bad(
                "evictionPressureSoft",
                Some(name),
                t.as_written(),
                format!(
                    "soft pressure threshold {name}>={} has no grace period",
                    t.as_written()
                ),
                format!("a soft threshold together with {GRACE}[{name:?}]"),
            );
        }
    }
    (hard, soft, grace)
}

fn max_pod_grace_period(c: &mut Checker, v: &Option<Scalar>) -> i64 {
    let Some(Scalar(s)) = v else { return 0 };
    match s.parse::<i64>() {
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
    }
}

/// A soft threshold needs a grace period unless it is disabled (0%/100%).
fn soft_needs_grace(c: &mut Checker, soft: &ThresholdMap, grace: &BTreeMap<Signal, Duration>) {
    for (name, t) in by_name(soft) {
        let sig = Signal::parse(name).expect("a signal's name");
        if t.value.is_none() || grace.contains_key(&sig) {
            continue;
        }
        let e = qosd_model::policy::evict::threshold::ThresholdError::SoftWithoutGrace {
            signal: name.to_string(),
            statement: format!("{name}<{}", t.as_written()),
        };
        c.bad(
            "evictionSoft",
            Some(name),
            t.as_written(),
            e.to_string(),
            format!("a soft threshold together with evictionSoftGracePeriod[{name:?}]"),
        );
    }
}

// --- image garbage collection ---------------------------------------------------

struct ImageGc {
    high: u32,
    low: u32,
    minimum_age: Duration,
    maximum_age: Duration,
    pod_logs_dir: PathBuf,
}

/// Image GC (kubelet validation: each percent in 0..=100, low < high).
fn image_gc(c: &mut Checker, raw: &RawConfig) -> ImageGc {
    let high = c.percent(
        "imageGCHighThresholdPercent",
        &raw.image_gc_high_threshold_percent,
        85,
    );
    let low = c.percent(
        "imageGCLowThresholdPercent",
        &raw.image_gc_low_threshold_percent,
        80,
    );
    if low >= high {
        c.bad(
            "imageGCLowThresholdPercent",
            None,
            &low.to_string(),
            format!("must be less than imageGCHighThresholdPercent ({high})"),
            "a percentage below imageGCHighThresholdPercent",
        );
    }
    let minimum_age = c.opt_duration(
        "imageMinimumGCAge",
        &raw.image_minimum_gc_age,
        Duration::from_secs(120),
        Duration::ZERO,
        None,
    );
    // Accepted and validated like the kubelet (validation.go); qosd does
    // not delete images by age (a non-zero value is reported as not
    // modelled).
    let maximum_age = c.opt_duration(
        "imageMaximumGCAge",
        &raw.image_maximum_gc_age,
        Duration::ZERO,
        Duration::ZERO,
        None,
    );
    if !maximum_age.is_zero() && maximum_age <= minimum_age {
        c.bad(
            "imageMaximumGCAge",
            None,
            &format_go_duration(maximum_age),
            format!(
                "invalid configuration: imageMaximumGCAge {} must be greater than imageMinimumGCAge {}",
                format_go_duration(maximum_age),
                format_go_duration(minimum_age)
            ),
            "0s (off) or a Go duration greater than imageMinimumGCAge",
        );
    }
    let pod_logs_dir = c.path("podLogsDir", &raw.pod_logs_dir, "/var/log/pods");
    ImageGc {
        high,
        low,
        minimum_age,
        maximum_age,
        pod_logs_dir,
    }
}

// --- cgroups -----------------------------------------------------------------

struct Cgroups {
    driver: CgroupDriver,
    root: String,
    system_reserved: ResourceList,
    kube_reserved: ResourceList,
    qos_reserved: BTreeMap<String, Percent>,
    cpu_cfs_quota: bool,
    cpu_cfs_quota_period: Duration,
    memory_throttling_factor: f64,
}

fn cgroups(c: &mut Checker, raw: &RawConfig) -> Cgroups {
    let driver = c.choice(
        "cgroupDriver",
        &raw.cgroup_driver,
        CgroupDriver::Cgroupfs,
        &[
            ("cgroupfs", CgroupDriver::Cgroupfs),
            ("systemd", CgroupDriver::Systemd),
        ],
    );
    let root = cgroup_root(c, &raw.cgroup_root);
    let system_reserved = c.resource_list("systemReserved", &raw.system_reserved);
    let kube_reserved = c.resource_list("kubeReserved", &raw.kube_reserved);
    reserved_sum(c, &system_reserved, &kube_reserved);
    let qos_reserved = qos_reserved(c, &raw.qos_reserved);
    let cpu_cfs_quota = c.boolean("cpuCFSQuota", &raw.cpu_cfs_quota, true);
    let cpu_cfs_quota_period = c.opt_duration(
        "cpuCFSQuotaPeriod",
        &raw.cpu_cfs_quota_period,
        Duration::from_millis(100),
        Duration::from_millis(1),
        Some(Duration::from_secs(1)),
    );
    let memory_throttling_factor = memory_throttling_factor(c, &raw.memory_throttling_factor);
    Cgroups {
        driver,
        root,
        system_reserved,
        kube_reserved,
        qos_reserved,
        cpu_cfs_quota,
        cpu_cfs_quota_period,
        memory_throttling_factor,
    }
}

fn cgroup_root(c: &mut Checker, v: &Option<Scalar>) -> String {
    match v {
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
    }
}

/// The sum the node arithmetic uses ([`crate::Config::reserved`]), checked
/// here so `config check` refuses what `run` would refuse.
fn reserved_sum(c: &mut Checker, system: &ResourceList, kube: &ResourceList) {
    if let Err(e) = crate::reserved_sum(system, kube) {
        let show = |l: &ResourceList, k: &str| {
            l.get(k)
                .map(|q| q.to_string())
                .unwrap_or_else(|| "0".into())
        };
        c.bad(
            "systemReserved + kubeReserved",
            None,
            &format!(
                "cpu {} + {}, memory {} + {}",
                show(system, "cpu"),
                show(kube, "cpu"),
                show(system, "memory"),
                show(kube, "memory")
            ),
            format!("{e} (--system-reserved + --kube-reserved)"),
            "reservations whose sum is at most 2^63-1 millicores (cpu) and bytes (memory)",
        );
    }
}

fn qos_reserved(c: &mut Checker, m: &Option<RawMap>) -> BTreeMap<String, Percent> {
    let mut out = BTreeMap::new();
    for (k, Scalar(v)) in m.iter().flatten() {
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
                out.insert(k.clone(), Percent(p));
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
    out
}

fn memory_throttling_factor(c: &mut Checker, v: &Option<Scalar>) -> f64 {
    let Some(Scalar(s)) = v else { return 0.9 };
    match s.parse::<f64>() {
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
    }
}

// --- the daemon: cgroupfs, runtime, loop, signals ------------------------------

struct Daemon {
    cgroupfs: PathBuf,
    cgroup_version: CgroupVersionSetting,
    runtime_endpoint: String,
    mode: Mode,
    reconcile_interval: Duration,
    relist_interval: Duration,
    metrics_address: SocketAddr,
    root_dir: PathBuf,
    imagefs_path: Option<PathBuf>,
    memory_available_source: qosd_model::policy::evict::MemorySource,
    cpu_weight_formula: CpuWeightFormula,
    memory_qos: bool,
    memory_reservation_policy: MemoryReservationPolicy,
    kubelet_version: KubeletVersion,
}

fn daemon(c: &mut Checker, raw: &RawConfig) -> Daemon {
    use qosd_model::policy::evict::MemorySource;
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
    let runtime_endpoint = runtime_endpoint(c, &raw.runtime_endpoint);
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
    let metrics_address = metrics_address(c, &raw.metrics_address);
    let root_dir = c.path("rootDir", &raw.root_dir, "/var/lib/kubelet");
    let imagefs_path = raw
        .imagefs_path
        .as_ref()
        .map(|_| c.path("imagefsPath", &raw.imagefs_path, ""));
    let memory_available_source = c.choice(
        "memoryAvailableSource",
        &raw.memory_available_source,
        MemorySource::WorkingSet,
        &[
            ("workingset", MemorySource::WorkingSet),
            ("meminfo", MemorySource::Meminfo),
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
    let memory_reservation_policy = memory_reservation_policy(c, &raw.memory_reservation_policy);
    let kubelet_version = kubelet_version(c, &raw.kubelet_version);
    Daemon {
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
        memory_reservation_policy,
        kubelet_version,
    }
}

fn runtime_endpoint(c: &mut Checker, v: &Option<Scalar>) -> String {
    let s = v
        .as_ref()
        .map(|s| s.0.as_str())
        .unwrap_or(DEFAULT_RUNTIME_ENDPOINT);
    let path = match s.strip_prefix("unix://") {
        Some(p) => p,
        None if s.contains("://") => "",
        None => s,
    };
    if path.starts_with('/') && path.len() > 1 {
        return format!("unix://{path}");
    }
    c.bad(
        "runtimeEndpoint",
        None,
        s,
        "not a UNIX socket endpoint",
        "unix:///absolute/path.sock (e.g. unix:///run/containerd/containerd.sock) or an absolute socket path",
    );
    DEFAULT_RUNTIME_ENDPOINT.to_string()
}

fn metrics_address(c: &mut Checker, v: &Option<Scalar>) -> SocketAddr {
    let s = v
        .as_ref()
        .map(|s| s.0.as_str())
        .unwrap_or(DEFAULT_METRICS_ADDRESS);
    s.parse::<SocketAddr>().unwrap_or_else(|_| {
        c.bad(
            "metricsAddress",
            None,
            s,
            "not an IP:port socket address",
            "IP:port such as 127.0.0.1:9847, 0.0.0.0:9847 or [::1]:9847 (port 0: any free port)",
        );
        DEFAULT_METRICS_ADDRESS.parse().expect("valid default")
    })
}

fn memory_reservation_policy(c: &mut Checker, v: &Option<Scalar>) -> MemoryReservationPolicy {
    let Some(Scalar(s)) = v else {
        return Default::default();
    };
    MemoryReservationPolicy::parse(s).unwrap_or_else(|_| {
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

fn kubelet_version(c: &mut Checker, v: &Option<Scalar>) -> KubeletVersion {
    let Some(Scalar(s)) = v else {
        return KubeletVersion::NEWEST;
    };
    KubeletVersion::parse(s).unwrap_or_else(|e| {
        c.bad("kubeletVersion", None, s, e, "1.33 | 1.34 | 1.35 | 1.36");
        KubeletVersion::NEWEST
    })
}

// --- node allocatable enforcement ----------------------------------------------

struct NodeAllocatable {
    enforce: EnforceNodeAllocatable,
    system_reserved_cgroup: Option<String>,
    kube_reserved_cgroup: Option<String>,
}

fn node_allocatable(c: &mut Checker, raw: &RawConfig) -> NodeAllocatable {
    let enforce = enforce_node_allocatable(c, &raw.enforce_node_allocatable);
    let system_reserved_cgroup =
        cgroup_name(c, "systemReservedCgroup", &raw.system_reserved_cgroup);
    let kube_reserved_cgroup = cgroup_name(c, "kubeReservedCgroup", &raw.kube_reserved_cgroup);
    for (on, key, field, name) in [
        (
            enforce.system_reserved,
            "system-reserved",
            "systemReservedCgroup",
            &system_reserved_cgroup,
        ),
        (
            enforce.kube_reserved,
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
    NodeAllocatable {
        enforce,
        system_reserved_cgroup,
        kube_reserved_cgroup,
    }
}

fn enforce_node_allocatable(c: &mut Checker, v: &Option<Vec<Scalar>>) -> EnforceNodeAllocatable {
    let Some(keys) = v else {
        return EnforceNodeAllocatable::kubelet_default();
    };
    let joined = keys
        .iter()
        .map(|Scalar(k)| k.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let e = EnforceNodeAllocatable::parse(&joined).ok().filter(|_| {
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
        EnforceNodeAllocatable::kubelet_default()
    })
}

fn cgroup_name(c: &mut Checker, field: &'static str, v: &Option<Scalar>) -> Option<String> {
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
}

// --- node capacity, logs, eviction backend --------------------------------------

struct Node {
    node_cpu: Option<Quantity>,
    node_memory: Option<Quantity>,
    log_format: LogFormat,
    eviction_backend: EvictionBackend,
}

fn node(c: &mut Checker, raw: &RawConfig) -> Node {
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
    Node {
        node_cpu,
        node_memory,
        log_format,
        eviction_backend,
    }
}

// --- CPU manager ----------------------------------------------------------------

struct CpuManager {
    policy: PolicyName,
    policy_options: BTreeMap<String, String>,
    reserved_system_cpus: Option<String>,
    state_dir: PathBuf,
    qosd_state_dir: Option<PathBuf>,
    kubelet_state: Option<PathBuf>,
}

fn cpu_manager(c: &mut Checker, raw: &RawConfig) -> CpuManager {
    let policy = c.choice(
        "cpuManagerPolicy",
        &raw.cpu_manager_policy,
        PolicyName::None,
        &[("none", PolicyName::None), ("static", PolicyName::Static)],
    );
    let policy_options: BTreeMap<String, String> = raw
        .cpu_manager_policy_options
        .iter()
        .flatten()
        .map(|(k, Scalar(v))| (k.clone(), v.clone()))
        .collect();
    if let Some(reason) =
        qosd_model::policy::cpu::policy::none_policy_options_error(policy, &policy_options)
    {
        c.bad(
            "cpuManagerPolicyOptions",
            None,
            &format!("{policy_options:?}"),
            reason,
            "no options with cpuManagerPolicy none (options need cpuManagerPolicy static)",
        );
    } else if let Err(e) = qosd_model::policy::cpu::policy::PolicyOptions::parse(&policy_options) {
        c.bad(
            "cpuManagerPolicyOptions",
            None,
            &format!("{policy_options:?}"),
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
    let state_dir = c.path(
        "cpuManagerStateDir",
        &raw.cpu_manager_state_dir,
        "/var/lib/qosd",
    );
    let qosd_state_dir = raw
        .state_dir
        .as_ref()
        .map(|_| c.path("stateDir", &raw.state_dir, ""));
    let kubelet_state = raw
        .kubelet_cpu_manager_state
        .as_ref()
        .map(|_| c.path("kubeletCPUManagerState", &raw.kubelet_cpu_manager_state, ""));
    CpuManager {
        policy,
        policy_options,
        reserved_system_cpus,
        state_dir,
        qosd_state_dir,
        kubelet_state,
    }
}

// --- Kubernetes API and the runtime's health -------------------------------------

struct Kube {
    kubeconfig: Option<PathBuf>,
    node_name: Option<String>,
    api_eviction_timeout: Duration,
    runtime_unhealthy_after: Duration,
}

fn kube(c: &mut Checker, raw: &RawConfig) -> Kube {
    let kubeconfig = raw
        .kubeconfig
        .as_ref()
        .filter(|s| !s.0.is_empty())
        .map(|_| c.path("kubeconfig", &raw.kubeconfig, ""));
    let node_name = node_name(c, &raw.node_name);
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
    Kube {
        kubeconfig,
        node_name,
        api_eviction_timeout,
        runtime_unhealthy_after,
    }
}

/// Node names are DNS subdomains (RFC 1123); blank means unset.
fn node_name(c: &mut Checker, v: &Option<Scalar>) -> Option<String> {
    let n = v
        .as_ref()
        .map(|s| s.0.trim().to_string())
        .filter(|s| !s.is_empty())?;
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
            &n,
            "not a node name",
            "a DNS subdomain (RFC 1123): lowercase letters, digits, '-' and '.', at most 253 characters",
        );
    }
    Some(n)
}

// --- kubelet fields qosd shows or plans with, and the kubelet source -------------

struct KubeletSource {
    pod_pids_limit: i64,
    kubelet_config: Option<PathBuf>,
    kubelet_config_dir: Option<PathBuf>,
    cgroup_enforcement: CgroupEnforcement,
}

fn kubelet_source(c: &mut Checker, raw: &RawConfig) -> KubeletSource {
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
    let path = |v: &Option<Scalar>| v.as_ref().map(|Scalar(s)| PathBuf::from(s));
    let kubelet_config = path(&raw.kubelet_config);
    let kubelet_config_dir = path(&raw.kubelet_config_dir);
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
    KubeletSource {
        pod_pids_limit,
        kubelet_config,
        kubelet_config_dir,
        cgroup_enforcement,
    }
}

// --- hugepages, logging, the eviction hook --------------------------------------

struct Extras {
    hugepage_sizes: Option<Vec<u64>>,
    log_level: String,
    eviction_hook: Option<PathBuf>,
    eviction_hook_timeout: Duration,
}

fn extras(c: &mut Checker, raw: &RawConfig) -> Extras {
    let hugepage_sizes = raw.hugepage_sizes.as_ref().and_then(|Scalar(s)| {
        qosd_model::policy::enforce::hugepages::parse_size_list(s)
            .map_err(|e| {
                c.bad(
                    "hugepageSizes",
                    None,
                    s,
                    e,
                    "comma-separated page sizes such as 2Mi,1Gi, or none",
                )
            })
            .ok()
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
    Extras {
        hugepage_sizes,
        log_level,
        eviction_hook,
        eviction_hook_timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run one section over a YAML fragment: its errors as
    /// (field, value, problem).
    fn errors<T>(section: fn(&mut Checker, &RawConfig) -> T, yaml: &str) -> Vec<[String; 3]> {
        let raw = RawConfig::from_yaml(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
        let overridden = BTreeSet::new();
        let mut c = Checker {
            errors: Vec::new(),
            overridden: &overridden,
        };
        section(&mut c, &raw);
        c.errors
            .into_iter()
            .map(|e| [e.field, e.value, e.problem])
            .collect()
    }

    /// Table test: each YAML fragment gives exactly one error, with this
    /// field and value, and a problem containing this text.
    fn table<T>(section: fn(&mut Checker, &RawConfig) -> T, rows: &[(&str, &str, &str, &str)]) {
        for (yaml, field, value, problem) in rows {
            let got = errors(section, yaml);
            assert_eq!(got.len(), 1, "{yaml}: {got:?}");
            let [f, v, p] = &got[0];
            assert_eq!((f.as_str(), v.as_str()), (*field, *value), "{yaml}");
            assert!(p.contains(problem), "{yaml}: {p:?} lacks {problem:?}");
        }
    }

    #[test]
    fn pressure_errors() {
        table(
            eviction,
            &[
                (
                    "evictionPressureHard: {memory.full: \"0%/2s\"}",
                    "evictionPressureHard[\"memory.full\"]",
                    "0%/2s",
                    "out of range",
                ),
                (
                    "evictionPressureHard: {memory.full: \"10%/100ms\"}",
                    "evictionPressureHard[\"memory.full\"]",
                    "10%/100ms",
                    "500ms..10s",
                ),
                (
                    "evictionPressureHard: {memory.full: 10Mi}",
                    "evictionPressureHard[\"memory.full\"]",
                    "10Mi",
                    "not a percentage",
                ),
                (
                    "evictionPressureHard: {memory.available: \"10%\"}",
                    "evictionPressureHard[\"memory.available\"]",
                    "10%",
                    "memory.available is a kubelet signal",
                ),
                (
                    "evictionPressureHard: {io.full: \"10%\"}",
                    "evictionPressureHard[\"io.full\"]",
                    "10%",
                    "unknown pressure signal",
                ),
                (
                    "evictionPressureSoft: {memory.some: \"40%/10s\"}",
                    "evictionPressureSoft[\"memory.some\"]",
                    "40%/10s",
                    "has no grace period",
                ),
                (
                    "evictionPressureHard: {memory.full: \"20%/2s\"}\nevictionPressureSoft: {memory.full: \"5%/10s\"}\nevictionPressureSoftGracePeriod: {memory.full: 30s}",
                    "evictionPressureSoft[\"memory.full\"]",
                    "5%/10s",
                    "differs from evictionPressureHard",
                ),
                (
                    "evictionPressureSoftGracePeriod: {memory.some: soon}",
                    "evictionPressureSoftGracePeriod[\"memory.some\"]",
                    "soon",
                    "",
                ),
                (
                    "evictionHard: {memory.full: \"10%\"}",
                    "evictionHard[\"memory.full\"]",
                    "10%",
                    "unknown eviction signal \"memory.full\"",
                ),
            ],
        );
        // valid: typed, shown as written, off unless configured
        let c = Config::from_yaml_str(
            "evictionPressureHard: {memory.full: \"10%/2s\"}\nevictionPressureSoft: {memory.some: \"25%\"}\nevictionPressureSoftGracePeriod: {memory.some: 1m}\n",
        )
        .unwrap();
        assert_eq!(
            c.eviction_pressure_hard[&Signal::MemoryFull].as_written(),
            "10%/2s"
        );
        let e = c.eviction();
        let p: Vec<String> = e.pressure().map(|t| t.to_string()).collect();
        assert_eq!(
            p,
            [
                "hard memory.full>=10%/2s",
                "soft memory.some>=25%/2s grace 1m0s"
            ]
        );
        let y = c.to_effective_yaml();
        assert!(
            y.contains("evictionPressureHard:") && y.contains("memory.full: 10%/2s"),
            "{y}"
        );
        assert_eq!(Config::from_yaml_str(&y).unwrap(), c);
        assert!(Config::default().eviction().pressure().next().is_none());
        assert!(!Config::default().has_pressure_thresholds());
    }

    #[test]
    fn eviction_errors() {
        table(
            eviction,
            &[
                (
                    "evictionHard: {memory.available: 10Zq}",
                    "evictionHard[\"memory.available\"]",
                    "10Zq",
                    "bad quantity \"10Zq\" for memory.available",
                ),
                (
                    "evictionHard: {memory.free: 1Gi}",
                    "evictionHard[\"memory.free\"]",
                    "1Gi",
                    "unknown eviction signal \"memory.free\"",
                ),
                (
                    "evictionHard: {nodefs.available: \"101%\"}",
                    "evictionHard[\"nodefs.available\"]",
                    "101%",
                    "must be <= 100%",
                ),
                (
                    "evictionHard: {memory.available: \"0\"}",
                    "evictionHard[\"memory.available\"]",
                    "0",
                    "must be positive",
                ),
                (
                    "evictionSoft: {memory.available: 1Gi}",
                    "evictionSoft[\"memory.available\"]",
                    "1Gi",
                    "\"memory.available<1Gi\" has no grace period",
                ),
                (
                    "evictionSoftGracePeriod: {memory.available: soon}",
                    "evictionSoftGracePeriod[\"memory.available\"]",
                    "soon",
                    "",
                ),
                (
                    "evictionMinimumReclaim: {memory.available: \"0%\"}",
                    "evictionMinimumReclaim[\"memory.available\"]",
                    "0%",
                    "a percentage minimum reclaim must be positive",
                ),
                (
                    "evictionMaxPodGracePeriod: -1",
                    "evictionMaxPodGracePeriod",
                    "-1",
                    "not a whole number of seconds in range",
                ),
                (
                    "evictionPressureTransitionPeriod: 5 minutes",
                    "evictionPressureTransitionPeriod",
                    "5 minutes",
                    "",
                ),
                (
                    "mergeDefaultEvictionSettings: maybe",
                    "mergeDefaultEvictionSettings",
                    "maybe",
                    "not one of the choices",
                ),
            ],
        );
    }

    #[test]
    fn eviction_values_are_typed() {
        let raw = RawConfig::from_yaml(
            "evictionHard: {memory.available: 1Gi, nodefs.available: \"10%\", pid.available: \"0%\"}\n\
             evictionSoft: {memory.available: 2Gi}\n\
             evictionSoftGracePeriod: {memory.available: 1m30s}\n\
             evictionMinimumReclaim: {memory.available: \"5%\", nodefs.available: \"0\"}\n",
        )
        .unwrap();
        let overridden = BTreeSet::new();
        let mut c = Checker {
            errors: Vec::new(),
            overridden: &overridden,
        };
        let e = eviction(&mut c, &raw);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        let v = |m: &ThresholdMap, s: Signal| m[&s].value;
        assert_eq!(
            v(&e.hard, Signal::MemoryAvailable),
            Some(ThresholdValue::Quantity(1 << 30))
        );
        // Percentages stay percentages; 0% disables.
        assert_eq!(
            v(&e.hard, Signal::NodeFsAvailable),
            Some(ThresholdValue::Percentage(0.1))
        );
        assert_eq!(v(&e.hard, Signal::PidAvailable), None);
        assert_eq!(e.hard[&Signal::PidAvailable].as_written(), "0%");
        // No merge: the defaults of other signals are gone.
        assert!(!e.hard.contains_key(&Signal::ImageFsAvailable));
        assert_eq!(
            e.soft_grace_period[&Signal::MemoryAvailable],
            Duration::from_secs(90)
        );
        assert_eq!(
            v(&e.minimum_reclaim, Signal::MemoryAvailable),
            Some(ThresholdValue::Percentage(0.05))
        );
        assert_eq!(v(&e.minimum_reclaim, Signal::NodeFsAvailable), None);
    }

    #[test]
    fn merged_defaults_keep_other_signals() {
        let raw = RawConfig::from_yaml(
            "mergeDefaultEvictionSettings: true\nevictionHard: {memory.available: 1Gi}\n",
        )
        .unwrap();
        let overridden = BTreeSet::new();
        let mut c = Checker {
            errors: Vec::new(),
            overridden: &overridden,
        };
        let e = eviction(&mut c, &raw);
        assert_eq!(e.hard.len(), 5);
        assert_eq!(e.hard[&Signal::MemoryAvailable].as_written(), "1Gi");
        assert_eq!(e.hard[&Signal::ImageFsAvailable].as_written(), "15%");
    }

    #[test]
    fn image_gc_errors() {
        table(
            image_gc,
            &[
                (
                    "imageGCHighThresholdPercent: 101",
                    "imageGCHighThresholdPercent",
                    "101",
                    "not a whole percentage 0..100",
                ),
                (
                    "imageGCLowThresholdPercent: 90",
                    "imageGCLowThresholdPercent",
                    "90",
                    "must be less than imageGCHighThresholdPercent (85)",
                ),
                ("imageMinimumGCAge: soon", "imageMinimumGCAge", "soon", ""),
                (
                    "podLogsDir: logs",
                    "podLogsDir",
                    "logs",
                    "not an absolute path",
                ),
            ],
        );
    }

    #[test]
    fn cgroup_errors() {
        table(
            cgroups,
            &[
                (
                    "cgroupDriver: upstart",
                    "cgroupDriver",
                    "upstart",
                    "not one of the choices",
                ),
                (
                    "cgroupRoot: kubepods",
                    "cgroupRoot",
                    "kubepods",
                    "not an absolute cgroup path",
                ),
                (
                    "cgroupRoot: /a/../b",
                    "cgroupRoot",
                    "/a/../b",
                    "not an absolute cgroup path",
                ),
                (
                    "systemReserved: {gpu: 1}",
                    "systemReserved[\"gpu\"]",
                    "1",
                    "unknown resource \"gpu\"",
                ),
                (
                    "kubeReserved: {memory: -1Gi}",
                    "kubeReserved[\"memory\"]",
                    "-1Gi",
                    "must not be negative",
                ),
                (
                    "qosReserved: {cpu: \"50%\"}",
                    "qosReserved[\"cpu\"]",
                    "50%",
                    "unsupported resource \"cpu\"",
                ),
                (
                    "qosReserved: {memory: \"150%\"}",
                    "qosReserved[\"memory\"]",
                    "150%",
                    "not a whole percentage 0%..100%",
                ),
                (
                    "cpuCFSQuota: yes-please",
                    "cpuCFSQuota",
                    "yes-please",
                    "not one of the choices",
                ),
                (
                    "cpuCFSQuotaPeriod: 2s",
                    "cpuCFSQuotaPeriod",
                    "2s",
                    "out of range",
                ),
                (
                    "memoryThrottlingFactor: 0",
                    "memoryThrottlingFactor",
                    "0",
                    "not a number in (0, 1]",
                ),
            ],
        );
    }

    #[test]
    fn daemon_errors() {
        table(
            daemon,
            &[
                (
                    "cgroupfs: sys/fs/cgroup",
                    "cgroupfs",
                    "sys/fs/cgroup",
                    "not an absolute path",
                ),
                (
                    "cgroupVersion: v3",
                    "cgroupVersion",
                    "v3",
                    "not one of the choices",
                ),
                (
                    "runtimeEndpoint: tcp://localhost:1",
                    "runtimeEndpoint",
                    "tcp://localhost:1",
                    "not a UNIX socket endpoint",
                ),
                (
                    "mode: sideways",
                    "mode",
                    "sideways",
                    "not one of the choices",
                ),
                (
                    "reconcileInterval: 1ms",
                    "reconcileInterval",
                    "1ms",
                    "out of range",
                ),
                ("relistInterval: forever", "relistInterval", "forever", ""),
                (
                    "metricsAddress: localhost",
                    "metricsAddress",
                    "localhost",
                    "not an IP:port socket address",
                ),
                (
                    "rootDir: var/lib/kubelet",
                    "rootDir",
                    "var/lib/kubelet",
                    "not an absolute path",
                ),
                (
                    "imagefsPath: images",
                    "imagefsPath",
                    "images",
                    "not an absolute path",
                ),
                (
                    "memoryAvailableSource: free",
                    "memoryAvailableSource",
                    "free",
                    "not one of the choices",
                ),
                (
                    "cpuWeightFormula: crun",
                    "cpuWeightFormula",
                    "crun",
                    "not one of the choices",
                ),
                (
                    "memoryQoS: sometimes",
                    "memoryQoS",
                    "sometimes",
                    "not one of the choices",
                ),
                (
                    "memoryReservationPolicy: All",
                    "memoryReservationPolicy",
                    "All",
                    "not one of the choices",
                ),
                ("kubeletVersion: \"1.20\"", "kubeletVersion", "1.20", ""),
            ],
        );
    }

    #[test]
    fn node_allocatable_errors() {
        table(
            node_allocatable,
            &[
                ("enforceNodeAllocatable: [pods, bogus]", "enforceNodeAllocatable", "pods,bogus", "unknown key"),
                ("enforceNodeAllocatable: [pods, system-reserved]", "systemReservedCgroup", "", "enforceNodeAllocatable contains system-reserved but systemReservedCgroup is not set"),
                ("enforceNodeAllocatable: [kube-reserved]", "kubeReservedCgroup", "", "enforceNodeAllocatable contains kube-reserved but kubeReservedCgroup is not set"),
                ("kubeReservedCgroup: kube.slice", "kubeReservedCgroup", "kube.slice", "not an absolute cgroup path"),
            ],
        );
    }

    #[test]
    fn node_errors() {
        table(
            node,
            &[
                ("nodeCPU: 0", "nodeCPU", "0", "must be positive"),
                ("nodeMemory: lots", "nodeMemory", "lots", ""),
                (
                    "logFormat: xml",
                    "logFormat",
                    "xml",
                    "not one of the choices",
                ),
                (
                    "evictionBackend: shoot",
                    "evictionBackend",
                    "shoot",
                    "not one of the choices",
                ),
            ],
        );
    }

    #[test]
    fn cpu_manager_errors() {
        table(
            cpu_manager,
            &[
                (
                    "cpuManagerPolicy: dynamic",
                    "cpuManagerPolicy",
                    "dynamic",
                    "not one of the choices",
                ),
                ("reservedSystemCPUs: a-b", "reservedSystemCPUs", "a-b", ""),
                (
                    "cpuManagerStateDir: state",
                    "cpuManagerStateDir",
                    "state",
                    "not an absolute path",
                ),
                (
                    "stateDir: state",
                    "stateDir",
                    "state",
                    "not an absolute path",
                ),
                (
                    "kubeletCPUManagerState: cpu_manager_state",
                    "kubeletCPUManagerState",
                    "cpu_manager_state",
                    "not an absolute path",
                ),
            ],
        );
        let got = errors(
            cpu_manager,
            "cpuManagerPolicyOptions: {no-such-option: \"true\"}",
        );
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0][0], "cpuManagerPolicyOptions");
    }

    #[test]
    fn kube_errors() {
        table(
            kube,
            &[
                (
                    "kubeconfig: kube/config",
                    "kubeconfig",
                    "kube/config",
                    "not an absolute path",
                ),
                ("nodeName: Node_1", "nodeName", "Node_1", "not a node name"),
                (
                    "apiEvictionTimeout: 2m",
                    "apiEvictionTimeout",
                    "2m",
                    "out of range",
                ),
                (
                    "runtimeUnhealthyAfter: later",
                    "runtimeUnhealthyAfter",
                    "later",
                    "",
                ),
            ],
        );
        // Blank: unset, not an error.
        assert!(errors(kube, "nodeName: \"  \"\nkubeconfig: \"\"").is_empty());
    }

    #[test]
    fn kubelet_source_errors() {
        table(
            kubelet_source,
            &[
                (
                    "podPidsLimit: many",
                    "podPidsLimit",
                    "many",
                    "not a whole number",
                ),
                (
                    "cgroupEnforcement: always",
                    "cgroupEnforcement",
                    "always",
                    "not one of the choices",
                ),
            ],
        );
    }

    #[test]
    fn extras_errors() {
        table(
            extras,
            &[
                ("hugepageSizes: 3Zq", "hugepageSizes", "3Zq", ""),
                ("logLevel: \"qosd=loud\"", "logLevel", "qosd=loud", ""),
                (
                    "evictionHook: hook.sh",
                    "evictionHook",
                    "hook.sh",
                    "not an absolute path",
                ),
                (
                    "evictionHookTimeout: 0s",
                    "evictionHookTimeout",
                    "0s",
                    "out of range",
                ),
            ],
        );
    }

    #[test]
    fn every_error_in_file_order_and_flags_named() {
        let raw = RawConfig::from_yaml(
            "logFormat: xml\nmode: sideways\nevictionHard: {memory.available: 10Zq}\n",
        )
        .unwrap();
        let overridden = BTreeSet::from(["mode"]);
        let errs = validate(raw, &overridden).unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "evictionHard[\"memory.available\"]",
                "mode (from command-line flag)",
                "logFormat"
            ]
        );
    }

    #[test]
    fn defaults_are_valid_in_every_section() {
        assert!(validate(RawConfig::default(), &BTreeSet::new()).is_ok());
    }
}
