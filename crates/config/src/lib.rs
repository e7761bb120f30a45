//! qosd's configuration file (YAML) and command-line overrides.
//!
//! Eviction and cgroup fields use KubeletConfiguration's names and value
//! formats (`evictionHard: {memory.available: "100Mi"}`,
//! `evictionPressureTransitionPeriod: 5m0s`, `systemReserved: {cpu: 500m}` …)
//! so an operator can paste them from a kubelet config; the other fields are
//! qosd's own. Loading happens in two steps:
//!
//! 1. the YAML is read into `RawConfig` (every field optional, scalars kept
//!    as text, unknown fields rejected so a typo never silently disables
//!    eviction);
//! 2. command-line [`Overrides`] replace raw fields, then `validate` turns
//!    the raw text into a typed [`Config`], collecting *every* bad value as an
//!    [`InvalidValue`] naming the field, the value and what is allowed.
//!
//! Eviction thresholds are parsed here, once, into typed values (signal →
//! quantity or percentage, grace periods as durations);
//! [`Config::eviction`] turns them into the eviction policy's
//! [`EvictionConfig`] without parsing again.
//!
//! Each setting is declared once, in [`settings::SETTINGS`] (key, flag,
//! kubelet field, default, description); the kubelet mapping, the keys
//! the command-line overrides set and the known-field suggestions derive
//! from it, and tests hold the parser, the flags, the defaults and the
//! configuration reference to it.
//!
//! Nothing here touches the system besides reading the config file.

#![deny(missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Serialize, Serializer};

pub use qosd_model::core::duration::{format_go_duration, parse_go_duration};
use qosd_model::core::model::{CgroupDriver, CgroupVersion, ResourceList};
use qosd_model::core::quantity::Quantity;
pub use qosd_model::policy::evict::threshold::{EvictionConfig, Signal, ThresholdValue};

pub mod kubelet;
pub use kubelet::{NotModelled, NotModelledKind};
mod raw;
pub mod settings;
mod validate;
pub use raw::parse_langle_map;
pub use raw::{KubeletSource, Overrides};
pub(crate) use raw::{RawConfig, Scalar};
pub(crate) use validate::validate;

/// Default config file location (used by the systemd unit and the image).
pub const DEFAULT_CONFIG_PATH: &str = "/etc/qosd/config.yaml";
/// Default HTTP address for /metrics, /healthz, /readyz, /status.
pub(crate) const DEFAULT_METRICS_ADDRESS: &str = "127.0.0.1:9847";
/// Default CRI endpoint (containerd).
pub(crate) const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// Resource names accepted in `systemReserved` / `kubeReserved`
/// (plus `hugepages-<size>`).
pub(crate) const RESERVED_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

// ---------------------------------------------------------------------------
// Errors

/// One bad value: which field, what it was, what is wrong, what is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidValue {
    /// Field name as written in the file, e.g. `evictionHard["memory.available"]`,
    /// suffixed with the flag when a command-line flag set it.
    pub field: String,
    /// The offending value, as given.
    pub value: String,
    /// What is wrong with it.
    pub(crate) problem: String,
    /// What would be accepted.
    pub allowed: String,
}

impl fmt::Display for InvalidValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: invalid value {:?}: {}; allowed: {}",
            self.field, self.value, self.problem, self.allowed
        )
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// YAML syntax, wrong type, unknown or duplicate field.
    #[error("{}{message}", display_file(.file))]
    Parse {
        /// The file (`None`: text not read from a file).
        file: Option<PathBuf>,
        /// What is wrong, and where.
        message: String,
    },
    /// One or more values failed validation.
    #[error("{}{}", display_file(.file), join_invalid(.errors))]
    Invalid {
        /// The file (`None`: no file, or text not read from a file).
        file: Option<PathBuf>,
        /// Every bad value.
        errors: Vec<InvalidValue>,
    },
    /// A kubelet config file (or drop-in) that cannot be used: syntax,
    /// `apiVersion`, `kind`, a wrong value type.
    #[error("kubelet config {}: {message}", .path.display())]
    Kubelet {
        /// The kubelet config file or drop-in.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Kubelet fields in qosd's own file while a kubelet config is given.
    #[error("{}", .problems.join("\n"))]
    Conflict {
        /// qosd's config file.
        qosd_file: PathBuf,
        /// The kubelet config (its file, else its first drop-in).
        kubelet_file: PathBuf,
        /// One line per kubelet field set in qosd's file.
        problems: Vec<String>,
    },
}

fn display_file(file: &Option<PathBuf>) -> String {
    match file {
        Some(p) => format!("config file {}: ", p.display()),
        None => String::new(),
    }
}

fn join_invalid(errors: &[InvalidValue]) -> String {
    if errors.len() == 1 {
        return errors[0].to_string();
    }
    let mut s = format!("{} invalid values:", errors.len());
    for e in errors {
        s.push_str("\n  - ");
        s.push_str(&e.to_string());
    }
    s
}

impl ConfigError {
    /// The invalid values, when this is a validation error.
    pub fn invalid_values(&self) -> &[InvalidValue] {
        match self {
            ConfigError::Invalid { errors, .. } => errors,
            _ => &[],
        }
    }

    fn with_file(self, path: &Path) -> ConfigError {
        match self {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                file: Some(path.to_path_buf()),
                message,
            },
            ConfigError::Invalid { errors, .. } => ConfigError::Invalid {
                file: Some(path.to_path_buf()),
                errors,
            },
            other => other,
        }
    }
}

// ---------------------------------------------------------------------------
// Typed configuration

/// One entry of `evictionHard`, `evictionSoft` or `evictionMinimumReclaim`:
/// the parsed value, and the text it was written as (what `qosd config
/// check` prints back, so the effective config reads like its input).
#[derive(Debug, Clone, PartialEq)]
pub struct ThresholdSetting {
    /// `None`: a threshold of `0%` or `100%` (disabled, like the kubelet),
    /// or a minimum reclaim of `0`.
    pub value: Option<ThresholdValue>,
    text: String,
}

impl ThresholdSetting {
    /// Parse one entry with the eviction policy's parser
    /// ([`qosd_model::policy::evict::threshold::parse_entry`]); `setting`:
    /// `eviction-hard`, `eviction-soft` or `eviction-minimum-reclaim`.
    pub fn parse(
        setting: &str,
        signal: Signal,
        text: &str,
    ) -> Result<ThresholdSetting, qosd_model::policy::evict::threshold::ThresholdError> {
        let value = qosd_model::policy::evict::threshold::parse_entry(setting, signal, text)?;
        Ok(ThresholdSetting {
            value,
            text: text.to_string(),
        })
    }

    /// Parse one entry of `evictionPressureHard` / `evictionPressureSoft`
    /// with the pressure grammar
    /// ([`qosd_model::policy::evict::pressure::parse_stall`]).
    pub fn parse_pressure(
        setting: &str,
        signal: Signal,
        text: &str,
    ) -> Result<ThresholdSetting, qosd_model::policy::evict::threshold::ThresholdError> {
        let value = qosd_model::policy::evict::pressure::parse_stall(setting, signal, text)?;
        Ok(ThresholdSetting {
            value: Some(value),
            text: text.to_string(),
        })
    }

    /// The value as written in the config (`100Mi`, `10%`).
    pub fn as_written(&self) -> &str {
        &self.text
    }
}

impl Serialize for ThresholdSetting {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// Signal → threshold (or minimum reclaim).
pub type ThresholdMap = BTreeMap<Signal, ThresholdSetting>;

/// Value of `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Write cgroups and evict.
    Enforce,
    /// Log every write and eviction qosd would make; make none.
    DryRun,
}

/// Value of `cgroupVersion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersionSetting {
    /// Detect from the cgroupfs mount.
    Auto,
    /// cgroup v1 (legacy or hybrid hierarchy).
    V1,
    /// cgroup v2 (unified hierarchy).
    V2,
}

impl CgroupVersionSetting {
    /// The forced version, or `None` for auto-detection.
    pub fn forced(self) -> Option<CgroupVersion> {
        match self {
            CgroupVersionSetting::Auto => None,
            CgroupVersionSetting::V1 => Some(CgroupVersion::V1),
            CgroupVersionSetting::V2 => Some(CgroupVersion::V2),
        }
    }
}

/// Value of `cpuWeightFormula` (cgroup v2 cpu.shares → cpu.weight).
pub use qosd_model::policy::enforce::plan::CpuWeightFormula;

/// Value of `logFormat`.
/// How log lines are written: plain text or one JSON object per line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// A log filter (`logLevel`, `QOSD_LOG`) qosd accepts: comma-separated
/// `level` or `target=level` items — letters, digits and `_ : = , . -`
/// (and spaces), at most [`MAX_LOG_FILTER`] bytes — then tracing's own
/// parser. Span and field filters (`[span{field=value}]`) are not
/// accepted: the parser panics on some non-ASCII input (it slices inside
/// a multi-byte character) and takes over 10 s on some field patterns
/// (both found by the `config` fuzz target, kept as seeds).
pub fn log_filter_ok(s: &str) -> Result<(), String> {
    if s.len() > MAX_LOG_FILTER {
        return Err(format!(
            "{} bytes: a log filter is at most {MAX_LOG_FILTER}",
            s.len()
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_:=,.- ".contains(c);
    if let Some(ch) = s.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "{ch:?} is not allowed: a log filter is `level` or `target=level` items \
             separated by commas (letters, digits and `_ : = , . -`)"
        ));
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The longest log filter accepted.
pub const MAX_LOG_FILTER: usize = 1024;

/// Value of `evictionBackend`: `kill` (the victim's processes directly, then
/// the runtime cleans up through the CRI), `cri` (StopPodSandbox /
/// RemovePodSandbox), `dry-run` (log only).
pub use qosd_model::policy::evict::Backend as EvictionBackend;

/// Value of `cgroupEnforcement`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupEnforcement {
    /// Write the planned cgroup values (qosd owns the kubepods cgroups).
    Enforce,
    /// Read and compare every planned value, report drift, write nothing
    /// (the kubelet owns the cgroups; the default with a kubelet config).
    Audit,
}

impl CgroupEnforcement {
    /// The value as written in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupEnforcement::Enforce => "enforce",
            CgroupEnforcement::Audit => "audit",
        }
    }
}

/// A percentage 0–100 as in `qosReserved: {memory: "50%"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Percent(pub u32);

impl Serialize for Percent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}%", self.0))
    }
}

/// The validated, effective configuration.
///
/// Field order is the order of `qosd config check` output; every field
/// serialises back to the syntax it was read from, so the effective YAML
/// loads again to the same `Config`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    // --- KubeletConfiguration fields -------------------------------------
    /// Hard thresholds, signal → quantity or percentage, with the kubelet
    /// defaults already applied.
    #[serde(serialize_with = "ser_threshold_map")]
    pub eviction_hard: ThresholdMap,
    /// Soft thresholds, signal → quantity or percentage.
    #[serde(serialize_with = "ser_threshold_map")]
    pub eviction_soft: ThresholdMap,
    /// Grace period of each soft threshold.
    #[serde(serialize_with = "ser_duration_map")]
    pub eviction_soft_grace_period: BTreeMap<Signal, Duration>,
    /// Minimum reclaim per signal, quantity or percentage.
    #[serde(serialize_with = "ser_threshold_map")]
    pub eviction_minimum_reclaim: ThresholdMap,
    /// Cap (seconds) on a pod's grace period for soft evictions.
    pub eviction_max_pod_grace_period: i64,
    /// How long a node condition stays after its threshold stops being met.
    #[serde(serialize_with = "ser_duration")]
    pub eviction_pressure_transition_period: Duration,
    /// KubeletConfiguration `mergeDefaultEvictionSettings`: a partial
    /// `evictionHard` keeps the other default thresholds instead of
    /// disabling them.
    pub merge_default_eviction_settings: bool,
    /// Kubelet `imageGCHighThresholdPercent` (85): image GC starts above it.
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: u32,
    /// Kubelet `imageGCLowThresholdPercent` (80): image GC frees down to it.
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: u32,
    /// Kubelet `imageMinimumGCAge` (2m0s): younger unused images are kept.
    #[serde(rename = "imageMinimumGCAge", serialize_with = "ser_duration")]
    pub image_minimum_gc_age: Duration,
    /// Kubelet `imageMaximumGCAge` (0s: off). Validated like the kubelet
    /// (greater than `imageMinimumGCAge` when set); qosd does not delete
    /// images by age, so a non-zero value is reported as not modelled.
    #[serde(rename = "imageMaximumGCAge", serialize_with = "ser_duration")]
    pub(crate) image_maximum_gc_age: Duration,
    /// Kubelet `podLogsDir` (/var/log/pods): the pods' container logs,
    /// counted as their local ephemeral storage.
    pub pod_logs_dir: PathBuf,
    /// Kubelet `cgroupDriver`: cgroup naming, `cgroupfs` or `systemd`.
    pub cgroup_driver: CgroupDriver,
    /// Kubelet `cgroupRoot`: the parent of `kubepods` (default `/`).
    pub cgroup_root: String,
    /// Kubelet `systemReserved`: resources reserved for the system.
    #[serde(serialize_with = "ser_resource_list")]
    pub system_reserved: ResourceList,
    /// Kubelet `kubeReserved`: resources reserved for Kubernetes daemons.
    #[serde(serialize_with = "ser_resource_list")]
    pub kube_reserved: ResourceList,
    /// Only `memory` is meaningful (like the kubelet's QOSReserved gate).
    pub qos_reserved: BTreeMap<String, Percent>,
    /// Kubelet `cpuCFSQuota`: enforce CPU limits with CFS quota.
    #[serde(rename = "cpuCFSQuota")]
    pub cpu_cfs_quota: bool,
    /// Kubelet `cpuCFSQuotaPeriod`: the CFS period of every CPU limit.
    #[serde(rename = "cpuCFSQuotaPeriod", serialize_with = "ser_duration")]
    pub cpu_cfs_quota_period: Duration,
    /// Kubelet `memoryThrottlingFactor` (memory.high with `memoryQoS`).
    pub memory_throttling_factor: f64,
    /// Kubelet `cpuManagerPolicy`: `none` (default) or `static`.
    pub cpu_manager_policy: qosd_model::policy::cpu::policy::PolicyName,
    /// Kubelet `cpuManagerPolicyOptions` (validated names and values).
    pub cpu_manager_policy_options: BTreeMap<String, String>,
    /// Kubelet `reservedSystemCPUs` (a CPU list, e.g. `0-1`).
    #[serde(rename = "reservedSystemCPUs", skip_serializing_if = "Option::is_none")]
    pub reserved_system_cpus: Option<String>,
    /// Kubelet `memoryReservationPolicy` (MemoryQoS, 1.36): None | TieredReservation.
    pub memory_reservation_policy: qosd_model::policy::enforce::memory_qos::MemoryReservationPolicy,
    /// Kubelet `enforceNodeAllocatable` (`[pods]` by default).
    #[serde(serialize_with = "ser_enforce")]
    pub enforce_node_allocatable: qosd_model::policy::enforce::reserved::EnforceNodeAllocatable,
    /// Kubelet `systemReservedCgroup` (limited with `system-reserved`; never created).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_reserved_cgroup: Option<String>,
    /// Kubelet `kubeReservedCgroup` (limited with `kube-reserved`; never created).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_reserved_cgroup: Option<String>,
    /// Whose rules to follow where kubelets differ (1.33 … 1.36).
    pub kubelet_version: qosd_model::policy::enforce::versions::KubeletVersion,
    /// Kubelet `failCgroupV1` as its config file sets it (`None`: unset, the
    /// kubelet's default). Read from the kubelet config only; not printed.
    #[serde(skip)]
    pub fail_cgroup_v1: Option<bool>,
    /// Kubelet `podPidsLimit`: pids.max of every pod cgroup (-1: none).
    pub pod_pids_limit: i64,

    // --- qosd's own --------------------------------------------------------
    /// Hard pressure thresholds (qosd's own signals `memory.some`,
    /// `memory.full` → `<share>%/<window>`); empty: none (the default).
    #[serde(serialize_with = "ser_threshold_map")]
    pub(crate) eviction_pressure_hard: ThresholdMap,
    /// Soft pressure thresholds.
    #[serde(serialize_with = "ser_threshold_map")]
    pub(crate) eviction_pressure_soft: ThresholdMap,
    /// Grace period of each soft pressure threshold.
    #[serde(serialize_with = "ser_duration_map")]
    pub(crate) eviction_pressure_soft_grace_period: BTreeMap<Signal, Duration>,
    /// Where the cgroup filesystem is mounted.
    pub cgroupfs: PathBuf,
    /// The cgroup version: detected, or forced.
    pub cgroup_version: CgroupVersionSetting,
    /// CRI endpoint, always `unix:///absolute/path`.
    pub runtime_endpoint: String,
    /// Enforce, or only log what would be done.
    pub mode: Mode,
    /// Period of the periodic reconcile.
    #[serde(serialize_with = "ser_duration")]
    pub reconcile_interval: Duration,
    /// Period of the pod relist without pod cgroup events.
    #[serde(serialize_with = "ser_duration")]
    pub relist_interval: Duration,
    /// Address of the HTTP endpoint (`/metrics`, `/healthz`, `/readyz`, `/status`).
    #[serde(serialize_with = "ser_socket_addr")]
    pub metrics_address: SocketAddr,
    /// Kubelet root dir (nodefs signals).
    pub root_dir: PathBuf,
    /// Filesystem for imagefs signals when the runtime does not report it.
    pub imagefs_path: Option<PathBuf>,
    /// Where `memory.available` comes from: the kubelet's working set of
    /// the root cgroup, or `MemAvailable` of /proc/meminfo.
    pub memory_available_source: qosd_model::policy::evict::MemorySource,
    /// How cgroup v2 `cpu.weight` is computed from CPU shares.
    pub cpu_weight_formula: CpuWeightFormula,
    /// Set memory.min / memory.high like the kubelet's MemoryQoS (v2 only).
    #[serde(rename = "memoryQoS")]
    pub memory_qos: bool,
    /// Node CPU capacity override (default: detected).
    #[serde(rename = "nodeCPU", serialize_with = "ser_opt_quantity")]
    pub node_cpu: Option<Quantity>,
    /// Node memory capacity override (default: detected).
    #[serde(serialize_with = "ser_opt_quantity")]
    pub node_memory: Option<Quantity>,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// How a pod is evicted.
    pub eviction_backend: EvictionBackend,
    // --- Kubernetes API (src/kube) -----------------------------------------
    /// A kubeconfig file for the API server; unset: in-cluster config when
    /// running in a pod (KUBERNETES_SERVICE_HOST and a service account).
    pub kubeconfig: Option<PathBuf>,
    /// This node's name (pods are watched with `spec.nodeName=<it>`);
    /// the API side is off without it.
    pub node_name: Option<String>,
    /// Deadline of an Eviction call; a hard eviction with no answer by
    /// then falls back to the local kill.
    #[serde(serialize_with = "ser_duration")]
    pub api_eviction_timeout: Duration,
    /// `/healthz` fails once the runtime has been unreachable this long
    /// (0s: never), so a DaemonSet pod is restarted.
    #[serde(serialize_with = "ser_duration")]
    pub runtime_unhealthy_after: Duration,
    /// Where qosd keeps its `cpu_manager_state` (static policy).
    pub cpu_manager_state_dir: PathBuf,
    /// The kubelet's `cpu_manager_state`: audit it instead of assigning CPUs.
    #[serde(
        rename = "kubeletCPUManagerState",
        skip_serializing_if = "Option::is_none"
    )]
    pub kubelet_cpu_manager_state: Option<PathBuf>,
    /// Where qosd keeps state across restarts (the CRI status cache);
    /// `None`: systemd's `$STATE_DIRECTORY` when set, else nothing is kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    /// Hugepage sizes (bytes) limited on every pod; `None`: the node's
    /// (sysfs) when the hugetlb controller is mounted; empty: none.
    #[serde(
        serialize_with = "ser_hugepage_sizes",
        skip_serializing_if = "Option::is_none"
    )]
    pub hugepage_sizes: Option<Vec<u64>>,
    /// Log filter (`info`, `debug`, `qosd=trace,info`); `QOSD_LOG` wins at start.
    pub log_level: String,
    /// Program run after each eviction (pod, class, signal, values in its environment).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_hook: Option<PathBuf>,
    /// How long the eviction hook may run before it is killed.
    #[serde(serialize_with = "ser_duration")]
    pub eviction_hook_timeout: Duration,
    /// `enforce` (write cgroups) or `audit` (compare only); default `audit`
    /// with a kubelet config, else `enforce`.
    pub cgroup_enforcement: CgroupEnforcement,
    /// The kubelet's config file the kubelet fields came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_config: Option<PathBuf>,
    /// The kubelet's drop-in directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kubelet_config_dir: Option<PathBuf>,
    /// Settings qosd does not model: the kubelet config's fields it does
    /// not take, and a non-zero `imageMaximumGCAge` (see [`Config::warnings`]).
    #[serde(skip)]
    pub not_modelled: Vec<NotModelled>,
}

/// Read the kubelet config named by the flags (or qosd's file) into `raw`.
/// Relative paths in qosd's file are relative to that file's directory.
fn load_kubelet(
    raw: &mut RawConfig,
    path: Option<&Path>,
    overrides: &Overrides,
) -> Result<Option<kubelet::KubeletConfig>, ConfigError> {
    let resolve = |flag: &Option<String>, file: &Option<Scalar>| -> Option<PathBuf> {
        if let Some(f) = flag {
            return Some(PathBuf::from(f));
        }
        let Scalar(s) = file.as_ref()?;
        let p = PathBuf::from(s);
        Some(match path.and_then(Path::parent) {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p,
        })
    };
    let file = resolve(&overrides.kubelet.kubelet_config, &raw.kubelet_config);
    let dir = resolve(
        &overrides.kubelet.kubelet_config_dir,
        &raw.kubelet_config_dir,
    );
    if file.is_none() && dir.is_none() {
        return Ok(None);
    }
    let k = kubelet::KubeletConfig::load(file.as_deref(), dir.as_deref())?;
    if k.cgroups_per_qos_off {
        tracing::warn!(file = %k.display_path().display(), "kubelet config has cgroupsPerQOS: false; qosd plans the QoS cgroups (burstable, besteffort) anyway");
    }
    // Kubelet fields the qosd file sets are refused after validation (so
    // every problem is reported); keep the file's values out of the way.
    let kubelet_raw = k.to_raw()?;
    kubelet::fill(raw, kubelet_raw);
    raw.kubelet_config = file.map(|p| Scalar(p.display().to_string()));
    raw.kubelet_config_dir = dir.map(|p| Scalar(p.display().to_string()));
    Ok(Some(k))
}

impl Default for Config {
    /// The kubelet's defaults plus qosd's.
    fn default() -> Config {
        validate(RawConfig::default(), &BTreeSet::new()).expect("the built-in defaults are valid")
    }
}

/// `systemReserved` + `kubeReserved` as the node arithmetic sums them
/// (cpu in millicores, memory in bytes, each rounded up), checked: a sum
/// beyond 2^63-1 is an error, never a wrap or a panic.
pub(crate) fn reserved_sum(
    system: &ResourceList,
    kube: &ResourceList,
) -> Result<qosd_model::core::node::Reserved, qosd_model::core::node::NodeError> {
    let one = |list: &ResourceList| qosd_model::core::node::Reserved {
        cpu_millis: list.get("cpu").map(|q| q.milli_ceil()).unwrap_or(0),
        memory_bytes: list.get("memory").map(|q| q.value_ceil()).unwrap_or(0),
    };
    one(system).plus(one(kube))
}

impl Config {
    /// `systemReserved` + `kubeReserved`, summed (see `reserved_sum`); a
    /// validated config's sum is in range.
    pub fn reserved(
        &self,
    ) -> Result<qosd_model::core::node::Reserved, qosd_model::core::node::NodeError> {
        reserved_sum(&self.system_reserved, &self.kube_reserved)
    }

    /// Read and validate a YAML config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with(Some(path), &Overrides::default())
    }

    /// Read the file (if any; defaults otherwise), apply command-line
    /// overrides, validate. Errors name the file.
    pub fn load_with(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let mut qosd_keys = Vec::new();
        let mut raw = match path {
            Some(p) => {
                // Regular files only, size-capped (a FIFO or /dev/zero is refused).
                let text = qosd_node::sys::input::read_text(p).map_err(|e| ConfigError::Read {
                    path: p.to_path_buf(),
                    source: e.into_io(),
                })?;
                let raw = RawConfig::from_yaml(&text).map_err(|e| e.with_file(p))?;
                qosd_keys = kubelet::top_level_keys(&text);
                raw
            }
            None => RawConfig::default(),
        };
        let kubelet = load_kubelet(&mut raw, path, overrides)?;
        if let (Some(p), Some(k)) = (path, &kubelet) {
            kubelet::check_conflicts(p, &qosd_keys, k)?;
        }
        let mut not_modelled = kubelet
            .as_ref()
            .map(|k| k.not_modelled.clone())
            .unwrap_or_default();
        let mut cfg = Config::from_raw(raw, overrides)
            .map(|mut c| {
                // Set in qosd's own file (a kubelet config reports its own).
                if !c.image_maximum_gc_age.is_zero()
                    && !not_modelled.iter().any(|n| n.field == "imageMaximumGCAge")
                {
                    not_modelled.push(NotModelled {
                        field: "imageMaximumGCAge".into(),
                        file: path.map(Path::to_path_buf),
                        kind: NotModelledKind::Effect,
                        note: "the kubelet deletes images unused for longer than this; qosd deletes images only under disk pressure (validated, not applied)".into(),
                    });
                }
                c.not_modelled = not_modelled;
                c
            })
            .map_err(|mut e| {
            if let (Some(k), ConfigError::Invalid { errors, .. }) = (&kubelet, &mut e) {
                kubelet::annotate(errors, k);
            }
            match path {
                Some(p) => e.with_file(p),
                None => e,
            }
        })?;
        cfg.fail_cgroup_v1 = kubelet.as_ref().and_then(|k| k.fail_cgroup_v1);
        Ok(cfg)
    }

    /// One warning line per setting qosd does not model (empty when it
    /// models everything it was given): `qosd config check` / `config
    /// show` print them on stderr, the daemon logs them.
    pub fn warnings(&self) -> Vec<String> {
        NotModelled::warnings(&self.not_modelled)
    }

    /// Parse and validate YAML text (no overrides).
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigError> {
        Config::from_raw(RawConfig::from_yaml(text)?, &Overrides::default())
    }

    /// Apply overrides to raw values and validate.
    pub(crate) fn from_raw(
        mut raw: RawConfig,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let overridden = overrides.apply(&mut raw);
        validate(raw, &overridden).map_err(|errors| ConfigError::Invalid { file: None, errors })
    }

    /// The effective configuration as YAML (what `qosd config check` prints).
    pub fn to_effective_yaml(&self) -> String {
        yaml_serde::to_string(self).expect("Config serialises to YAML")
    }

    /// The eviction backend to use: `dry-run` whenever `mode` is dry-run.
    pub fn effective_eviction_backend(&self) -> EvictionBackend {
        match self.mode {
            Mode::DryRun => EvictionBackend::DryRun,
            Mode::Enforce => self.eviction_backend,
        }
    }

    /// Socket path of `runtimeEndpoint`.
    pub fn runtime_socket_path(&self) -> PathBuf {
        PathBuf::from(
            self.runtime_endpoint
                .strip_prefix("unix://")
                .unwrap_or(&self.runtime_endpoint),
        )
    }

    /// Names of the fields (as in the file) whose values differ between
    /// `self` and `new`: for logging a SIGHUP reload, and for refusing
    /// changes that need a restart (e.g. `metricsAddress`, `cgroupfs`).
    pub fn changed_fields(&self, new: &Config) -> Vec<String> {
        let a = serde_json::to_value(self).unwrap_or_default();
        let b = serde_json::to_value(new).unwrap_or_default();
        let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
            return Vec::new();
        };
        a.iter()
            .filter(|(k, v)| b.get(*k) != Some(v))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The eviction policy's settings: the typed thresholds, grace periods
    /// and minimum reclaims of this config, nothing parsed again (the
    /// kubelet-derived `allocatableMemory.*` / `containerfs.*` thresholds are
    /// the caller's, which knows the node).
    pub fn eviction(&self) -> EvictionConfig {
        let values = |m: &ThresholdMap| -> BTreeMap<Signal, ThresholdValue> {
            m.iter()
                .filter_map(|(sig, t)| Some((*sig, t.value?)))
                .collect()
        };
        EvictionConfig::from_typed(
            &values(&self.eviction_hard),
            &values(&self.eviction_soft),
            &self.eviction_soft_grace_period,
            &values(&self.eviction_minimum_reclaim),
            Duration::from_secs(self.eviction_max_pod_grace_period.max(0) as u64),
            self.eviction_pressure_transition_period,
        )
        // `validate` refuses a soft threshold without a grace period.
        .expect("a validated config has a grace period for every soft threshold")
        .with_pressure(
            &values(&self.eviction_pressure_hard),
            &values(&self.eviction_pressure_soft),
            &self.eviction_pressure_soft_grace_period,
        )
        .expect("a validated config has valid pressure thresholds")
    }

    /// Whether any pressure threshold is configured (the pressure watcher
    /// runs only then).
    pub fn has_pressure_thresholds(&self) -> bool {
        !self.eviction_pressure_hard.is_empty() || !self.eviction_pressure_soft.is_empty()
    }

    /// `qosReserved.memory` as a percentage, if set.
    pub fn qos_reserved_memory(&self) -> Option<u32> {
        self.qos_reserved.get("memory").map(|p| p.0)
    }
}

fn ser_enforce<S: Serializer>(
    e: &qosd_model::policy::enforce::reserved::EnforceNodeAllocatable,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(e.keys())
}

fn ser_hugepage_sizes<S: Serializer>(v: &Option<Vec<u64>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        None => s.serialize_none(),
        Some(v) if v.is_empty() => s.serialize_str("none"),
        Some(v) => s.serialize_str(
            &v.iter()
                .map(|b| qosd_model::policy::enforce::hugepages::size_quantity(*b))
                .collect::<Vec<_>>()
                .join(","),
        ),
    }
}

fn ser_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_go_duration(*d))
}

/// Signal-keyed maps print in the order of the signals' names (as the
/// text-keyed maps they were read from).
fn by_name<V>(m: &BTreeMap<Signal, V>) -> Vec<(&'static str, &V)> {
    let mut v: Vec<_> = m.iter().map(|(k, v)| (k.as_str(), v)).collect();
    v.sort_by_key(|(k, _)| *k);
    v
}

fn ser_threshold_map<S: Serializer>(m: &ThresholdMap, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(by_name(m))
}

fn ser_duration_map<S: Serializer>(
    m: &BTreeMap<Signal, Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(
        by_name(m)
            .into_iter()
            .map(|(k, d)| (k, format_go_duration(*d))),
    )
}

fn ser_resource_list<S: Serializer>(m: &ResourceList, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(m.iter().map(|(k, q)| (k, q.as_str())))
}

fn ser_opt_quantity<S: Serializer>(q: &Option<Quantity>, s: S) -> Result<S::Ok, S::Error> {
    match q {
        Some(q) => s.serialize_some(q.as_str()),
        None => s.serialize_none(),
    }
}

fn ser_socket_addr<S: Serializer>(a: &SocketAddr, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&a.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::parse_eq_map;

    #[test]
    fn flag_maps() {
        let m = parse_langle_map("memory.available<100Mi, nodefs.available<10%").unwrap();
        assert_eq!(m["memory.available"], "100Mi");
        assert_eq!(m["nodefs.available"], "10%");
        assert_eq!(parse_eq_map("cpu=1,memory=2Gi").unwrap()["memory"], "2Gi");
        assert!(parse_langle_map("memory.available=1").is_err());
        assert!(parse_eq_map("a=1,a=2").is_err());
        assert!(parse_eq_map("=1").is_err());
        assert!(parse_eq_map("").unwrap().is_empty());
    }

    #[test]
    fn defaults_are_kubelets() {
        let c = Config::default();
        assert_eq!(c.eviction_hard.len(), 5);
        let mem = &c.eviction_hard[&Signal::MemoryAvailable];
        assert_eq!(mem.as_written(), "100Mi");
        assert_eq!(mem.value, Some(ThresholdValue::Quantity(100 << 20)));
        let img = &c.eviction_hard[&Signal::ImageFsAvailable];
        assert_eq!(img.as_written(), "15%");
        assert_eq!(img.value, Some(ThresholdValue::Percentage(0.15)));
        assert_eq!(
            c.eviction_pressure_transition_period,
            Duration::from_secs(300)
        );
        assert_eq!(c.cgroup_driver, CgroupDriver::Cgroupfs);
        assert_eq!(c.cgroup_root, "/");
        assert_eq!(c.cpu_cfs_quota_period, Duration::from_millis(100));
        assert!(c.cpu_cfs_quota);
        assert_eq!(c.metrics_address.to_string(), DEFAULT_METRICS_ADDRESS);
        assert_eq!(c.root_dir, PathBuf::from("/var/lib/kubelet"));
        assert_eq!(c.reconcile_interval, Duration::from_secs(10));
        assert_eq!(c.relist_interval, Duration::from_secs(1));
        assert_eq!(c.mode, Mode::Enforce);
        assert_eq!(c.eviction_backend, EvictionBackend::Kill);
        assert_eq!(
            c.runtime_socket_path(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
    }

    #[test]
    fn changed_fields_lists_differences() {
        let a = Config::default();
        let mut b = a.clone();
        assert!(a.changed_fields(&b).is_empty());
        b.mode = Mode::DryRun;
        b.eviction_hard.remove(&Signal::MemoryAvailable);
        assert_eq!(a.changed_fields(&b), ["evictionHard", "mode"]);
    }

    #[test]
    fn effective_yaml_roundtrips() {
        let c = Config::default();
        let y = c.to_effective_yaml();
        assert!(y.contains("evictionPressureTransitionPeriod: 5m0s"), "{y}");
        assert!(y.contains("cpuCFSQuotaPeriod: 100ms"), "{y}");
        assert_eq!(Config::from_yaml_str(&y).unwrap(), c);
    }
}
