//! qosd's configuration file (YAML) and command-line overrides.
//!
//! Eviction and cgroup fields use KubeletConfiguration's names and value
//! formats (`evictionHard: {memory.available: "100Mi"}`,
//! `evictionPressureTransitionPeriod: 5m0s`, `systemReserved: {cpu: 500m}` …)
//! so an operator can paste them from a kubelet config; the other fields are
//! qosd's own. Loading happens in two steps:
//!
//! 1. the YAML is read into [`RawConfig`] (every field optional, scalars kept
//!    as text, unknown fields rejected so a typo never silently disables
//!    eviction);
//! 2. command-line [`Overrides`] replace raw fields, then [`validate`] turns
//!    the raw text into a typed [`Config`], collecting *every* bad value as an
//!    [`InvalidValue`] naming the field, the value and what is allowed.
//!
//! Eviction thresholds are validated here only syntactically (known signal,
//! quantity or percentage); their semantics (met / min-reclaim / grace) are
//! the eviction module's, which receives the raw maps from [`Config`].
//!
//! Nothing here touches the system besides reading the config file.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::model::{CgroupDriver, CgroupVersion, ResourceList};
use crate::quantity::Quantity;

/// Default config file location (used by the systemd unit and the image).
pub const DEFAULT_CONFIG_PATH: &str = "/etc/qosd/config.yaml";
/// Default HTTP address for /metrics, /healthz, /readyz, /status.
pub const DEFAULT_METRICS_ADDRESS: &str = "127.0.0.1:9847";
/// Default CRI endpoint (containerd).
pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// Eviction signals the kubelet knows (pkg/kubelet/eviction/api).
pub const SIGNALS: &[&str] = &[
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
];

/// The kubelet's default hard eviction thresholds (Linux).
pub const DEFAULT_EVICTION_HARD: &[(&str, &str)] = &[
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
];

/// Resource names accepted in `systemReserved` / `kubeReserved`
/// (plus `hugepages-<size>`).
pub const RESERVED_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

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
    pub problem: String,
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
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// YAML syntax, wrong type, unknown or duplicate field.
    #[error("{}{message}", display_file(.file))]
    Parse {
        file: Option<PathBuf>,
        message: String,
    },
    /// One or more values failed validation.
    #[error("{}{}", display_file(.file), join_invalid(.errors))]
    Invalid {
        file: Option<PathBuf>,
        errors: Vec<InvalidValue>,
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
    V1,
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

/// Value of `memoryAvailableSource`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryAvailableSource {
    /// capacity − working set (usage − inactive_file), like the kubelet.
    Workingset,
    /// `MemAvailable` from /proc/meminfo.
    Meminfo,
}

/// Value of `cpuWeightFormula` (cgroup v2 cpu.shares → cpu.weight).
pub use crate::plan::CpuWeightFormula;

/// Value of `logFormat`.
pub use crate::cli::LogFormat;

/// Value of `evictionBackend`: `kill` (the victim's processes directly, then
/// the runtime cleans up through the CRI), `cri` (StopPodSandbox /
/// RemovePodSandbox), `dry-run` (log only).
pub use crate::eviction::evictor::Backend as EvictionBackend;

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
    /// Hard thresholds, signal → quantity or percentage (raw, validated
    /// syntactically), with the kubelet defaults already applied.
    pub eviction_hard: BTreeMap<String, String>,
    /// Soft thresholds, signal → quantity or percentage (raw).
    pub eviction_soft: BTreeMap<String, String>,
    /// Grace period of each soft threshold.
    #[serde(serialize_with = "ser_duration_map")]
    pub eviction_soft_grace_period: BTreeMap<String, Duration>,
    /// Minimum reclaim per signal, quantity or percentage (raw).
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    /// Cap (seconds) on a pod's grace period for soft evictions.
    pub eviction_max_pod_grace_period: i64,
    /// How long a node condition stays after its threshold stops being met.
    #[serde(serialize_with = "ser_duration")]
    pub eviction_pressure_transition_period: Duration,
    /// KubeletConfiguration `mergeDefaultEvictionSettings`: a partial
    /// `evictionHard` keeps the other default thresholds instead of
    /// disabling them.
    pub merge_default_eviction_settings: bool,
    pub cgroup_driver: CgroupDriver,
    /// Kubelet `cgroupRoot`: the parent of `kubepods` (default `/`).
    pub cgroup_root: String,
    #[serde(serialize_with = "ser_resource_list")]
    pub system_reserved: ResourceList,
    #[serde(serialize_with = "ser_resource_list")]
    pub kube_reserved: ResourceList,
    /// Only `memory` is meaningful (like the kubelet's QOSReserved gate).
    pub qos_reserved: BTreeMap<String, Percent>,
    /// Kubelet `cpuCFSQuota`: enforce CPU limits with CFS quota.
    #[serde(rename = "cpuCFSQuota")]
    pub cpu_cfs_quota: bool,
    #[serde(rename = "cpuCFSQuotaPeriod", serialize_with = "ser_duration")]
    pub cpu_cfs_quota_period: Duration,
    /// Kubelet `memoryThrottlingFactor` (memory.high with `memoryQoS`).
    pub memory_throttling_factor: f64,

    // --- qosd's own --------------------------------------------------------
    /// Where the cgroup filesystem is mounted.
    pub cgroupfs: PathBuf,
    pub cgroup_version: CgroupVersionSetting,
    /// CRI endpoint, always `unix:///absolute/path`.
    pub runtime_endpoint: String,
    pub mode: Mode,
    #[serde(serialize_with = "ser_duration")]
    pub reconcile_interval: Duration,
    #[serde(serialize_with = "ser_duration")]
    pub relist_interval: Duration,
    #[serde(serialize_with = "ser_socket_addr")]
    pub metrics_address: SocketAddr,
    /// Kubelet root dir (nodefs signals).
    pub root_dir: PathBuf,
    /// Filesystem for imagefs signals when the runtime does not report it.
    pub imagefs_path: Option<PathBuf>,
    pub memory_available_source: MemoryAvailableSource,
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
    pub log_format: LogFormat,
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
}

impl Default for Config {
    /// The kubelet's defaults plus qosd's.
    fn default() -> Config {
        validate(RawConfig::default(), &BTreeSet::new()).expect("the built-in defaults are valid")
    }
}

impl Config {
    /// Read and validate a YAML config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with(Some(path), &Overrides::default())
    }

    /// Read the file (if any; defaults otherwise), apply command-line
    /// overrides, validate. Errors name the file.
    pub fn load_with(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let raw = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.to_path_buf(),
                    source,
                })?;
                RawConfig::from_yaml(&text).map_err(|e| e.with_file(p))?
            }
            None => RawConfig::default(),
        };
        Config::from_raw(raw, overrides).map_err(|e| match path {
            Some(p) => e.with_file(p),
            None => e,
        })
    }

    /// Parse and validate YAML text (no overrides).
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigError> {
        Config::from_raw(RawConfig::from_yaml(text)?, &Overrides::default())
    }

    /// Apply overrides to raw values and validate.
    pub fn from_raw(mut raw: RawConfig, overrides: &Overrides) -> Result<Config, ConfigError> {
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

    /// `qosReserved.memory` as a percentage, if set.
    pub fn qos_reserved_memory(&self) -> Option<u32> {
        self.qos_reserved.get("memory").map(|p| p.0)
    }
}

// ---------------------------------------------------------------------------
// Raw configuration (what the YAML says, before validation)

/// A scalar read as text: YAML `1`, `1.5`, `true` and `"1"` all become text,
/// so `systemReserved: {cpu: 1}` works like `{cpu: "1"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scalar(pub String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scalar, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

type RawMap = BTreeMap<String, Scalar>;

/// The config file as written: every field optional, values as text.
/// Unknown fields are errors.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawConfig {
    pub eviction_hard: Option<RawMap>,
    pub eviction_soft: Option<RawMap>,
    pub eviction_soft_grace_period: Option<RawMap>,
    pub eviction_minimum_reclaim: Option<RawMap>,
    pub eviction_max_pod_grace_period: Option<Scalar>,
    pub eviction_pressure_transition_period: Option<Scalar>,
    pub merge_default_eviction_settings: Option<Scalar>,
    pub cgroup_driver: Option<Scalar>,
    pub cgroup_root: Option<Scalar>,
    pub system_reserved: Option<RawMap>,
    pub kube_reserved: Option<RawMap>,
    pub qos_reserved: Option<RawMap>,
    #[serde(rename = "cpuCFSQuota")]
    pub cpu_cfs_quota: Option<Scalar>,
    #[serde(rename = "cpuCFSQuotaPeriod")]
    pub cpu_cfs_quota_period: Option<Scalar>,
    pub memory_throttling_factor: Option<Scalar>,
    pub cgroupfs: Option<Scalar>,
    pub cgroup_version: Option<Scalar>,
    #[serde(alias = "containerRuntimeEndpoint")]
    pub runtime_endpoint: Option<Scalar>,
    pub mode: Option<Scalar>,
    pub reconcile_interval: Option<Scalar>,
    pub relist_interval: Option<Scalar>,
    pub metrics_address: Option<Scalar>,
    pub root_dir: Option<Scalar>,
    pub imagefs_path: Option<Scalar>,
    pub memory_available_source: Option<Scalar>,
    pub cpu_weight_formula: Option<Scalar>,
    #[serde(rename = "memoryQoS")]
    pub memory_qos: Option<Scalar>,
    #[serde(rename = "nodeCPU")]
    pub node_cpu: Option<Scalar>,
    pub node_memory: Option<Scalar>,
    pub log_format: Option<Scalar>,
    pub eviction_backend: Option<Scalar>,
    pub kubeconfig: Option<Scalar>,
    pub node_name: Option<Scalar>,
    pub api_eviction_timeout: Option<Scalar>,
    pub runtime_unhealthy_after: Option<Scalar>,
}

impl RawConfig {
    /// Parse YAML text. An empty document is an empty config.
    pub fn from_yaml(text: &str) -> Result<RawConfig, ConfigError> {
        if text.trim().is_empty()
            || text
                .lines()
                .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            return Ok(RawConfig::default());
        }
        yaml_serde::from_str::<Option<RawConfig>>(text)
            .map(Option::unwrap_or_default)
            .map_err(|e| ConfigError::Parse {
                file: None,
                message: with_suggestion(e.to_string()),
            })
    }
}

/// Append "did you mean `x`?" to an unknown-field message when a known
/// field is a few edits away.
fn with_suggestion(message: String) -> String {
    let Some(rest) = message.split("unknown field `").nth(1) else {
        return message;
    };
    let Some(unknown) = rest.split('`').next() else {
        return message;
    };
    let Some(list) = message.split("expected one of ").nth(1) else {
        return message;
    };
    let best = list
        .split(", ")
        .map(|f| f.trim().trim_matches('`'))
        .map(|f| {
            (
                edit_distance(&unknown.to_ascii_lowercase(), &f.to_ascii_lowercase()),
                f,
            )
        })
        .min();
    match best {
        Some((d, f)) if d <= 3 && d < unknown.len() => format!("{message}; did you mean `{f}`?"),
        _ => message,
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

// ---------------------------------------------------------------------------
// Overrides (command-line flags)

/// Values that replace the file's (from command-line flags). Text as the
/// user typed it; validated together with the file. A set map replaces the
/// file's map entirely, as kubelet flags do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub eviction_hard: Option<BTreeMap<String, String>>,
    pub eviction_soft: Option<BTreeMap<String, String>>,
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    pub eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    pub eviction_max_pod_grace_period: Option<String>,
    pub eviction_pressure_transition_period: Option<String>,
    pub merge_default_eviction_settings: Option<bool>,
    pub cgroup_driver: Option<String>,
    pub cgroup_root: Option<String>,
    pub system_reserved: Option<BTreeMap<String, String>>,
    pub kube_reserved: Option<BTreeMap<String, String>>,
    pub qos_reserved: Option<BTreeMap<String, String>>,
    pub cpu_cfs_quota: Option<bool>,
    pub cpu_cfs_quota_period: Option<String>,
    pub memory_throttling_factor: Option<String>,
    pub cgroupfs: Option<String>,
    pub cgroup_version: Option<String>,
    pub runtime_endpoint: Option<String>,
    pub mode: Option<String>,
    pub reconcile_interval: Option<String>,
    pub relist_interval: Option<String>,
    pub metrics_address: Option<String>,
    pub root_dir: Option<String>,
    pub imagefs_path: Option<String>,
    pub memory_available_source: Option<String>,
    pub cpu_weight_formula: Option<String>,
    pub memory_qos: Option<bool>,
    pub node_cpu: Option<String>,
    pub node_memory: Option<String>,
    pub log_format: Option<String>,
    pub eviction_backend: Option<String>,
    pub kubeconfig: Option<String>,
    pub node_name: Option<String>,
    pub api_eviction_timeout: Option<String>,
    pub runtime_unhealthy_after: Option<String>,
}

fn to_raw_map(m: &BTreeMap<String, String>) -> RawMap {
    m.iter()
        .map(|(k, v)| (k.clone(), Scalar(v.clone())))
        .collect()
}

impl Overrides {
    /// Write the set overrides into `raw`; return the names of the fields set.
    fn apply(&self, raw: &mut RawConfig) -> BTreeSet<&'static str> {
        let mut set = BTreeSet::new();
        macro_rules! map {
            ($f:ident, $name:literal) => {
                if let Some(m) = &self.$f {
                    raw.$f = Some(to_raw_map(m));
                    set.insert($name);
                }
            };
        }
        macro_rules! text {
            ($f:ident, $name:literal) => {
                if let Some(v) = &self.$f {
                    raw.$f = Some(Scalar(v.to_string()));
                    set.insert($name);
                }
            };
        }
        map!(eviction_hard, "evictionHard");
        map!(eviction_soft, "evictionSoft");
        map!(eviction_soft_grace_period, "evictionSoftGracePeriod");
        map!(eviction_minimum_reclaim, "evictionMinimumReclaim");
        text!(eviction_max_pod_grace_period, "evictionMaxPodGracePeriod");
        text!(
            eviction_pressure_transition_period,
            "evictionPressureTransitionPeriod"
        );
        text!(
            merge_default_eviction_settings,
            "mergeDefaultEvictionSettings"
        );
        text!(cgroup_driver, "cgroupDriver");
        text!(cgroup_root, "cgroupRoot");
        map!(system_reserved, "systemReserved");
        map!(kube_reserved, "kubeReserved");
        map!(qos_reserved, "qosReserved");
        text!(cpu_cfs_quota, "cpuCFSQuota");
        text!(cpu_cfs_quota_period, "cpuCFSQuotaPeriod");
        text!(memory_throttling_factor, "memoryThrottlingFactor");
        text!(cgroupfs, "cgroupfs");
        text!(cgroup_version, "cgroupVersion");
        text!(runtime_endpoint, "runtimeEndpoint");
        text!(mode, "mode");
        text!(reconcile_interval, "reconcileInterval");
        text!(relist_interval, "relistInterval");
        text!(metrics_address, "metricsAddress");
        text!(root_dir, "rootDir");
        text!(imagefs_path, "imagefsPath");
        text!(memory_available_source, "memoryAvailableSource");
        text!(cpu_weight_formula, "cpuWeightFormula");
        text!(memory_qos, "memoryQoS");
        text!(node_cpu, "nodeCPU");
        text!(node_memory, "nodeMemory");
        text!(log_format, "logFormat");
        text!(eviction_backend, "evictionBackend");
        text!(kubeconfig, "kubeconfig");
        text!(node_name, "nodeName");
        text!(api_eviction_timeout, "apiEvictionTimeout");
        text!(runtime_unhealthy_after, "runtimeUnhealthyAfter");
        set
    }
}

/// Parse a kubelet `--eviction-hard`-style flag value: `a<1Mi,b<10%`.
pub fn parse_langle_map(s: &str) -> Result<BTreeMap<String, String>, String> {
    parse_sep_map(s, '<')
}

/// Parse a kubelet `--system-reserved`-style flag value: `cpu=1,memory=1Gi`.
pub fn parse_eq_map(s: &str) -> Result<BTreeMap<String, String>, String> {
    parse_sep_map(s, '=')
}

fn parse_sep_map(s: &str, sep: char) -> Result<BTreeMap<String, String>, String> {
    let mut m = BTreeMap::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once(sep)
            .ok_or_else(|| format!("{item:?}: expected KEY{sep}VALUE (comma-separated)"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(format!("{item:?}: empty key"));
        }
        if m.insert(k.to_string(), v.to_string()).is_some() {
            return Err(format!("{k:?} given twice"));
        }
    }
    Ok(m)
}

// ---------------------------------------------------------------------------
// Validation

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

    /// Percentage `N%` with 0 ≤ N ≤ 100 (decimals allowed, like the kubelet).
    fn percent_value(s: &str) -> Option<Result<f64, &'static str>> {
        let num = s.strip_suffix('%')?;
        Some(match num.trim().parse::<f64>() {
            Ok(p) if p.is_finite() && (0.0..=100.0).contains(&p) => Ok(p),
            Ok(_) => Err("percentage outside 0%..100%"),
            Err(_) => Err("malformed percentage"),
        })
    }

    fn signal(&mut self, field: &'static str, key: &str, value: &str) -> bool {
        if SIGNALS.contains(&key) {
            return true;
        }
        self.bad(
            field,
            Some(key),
            value,
            format!("unknown eviction signal {key:?}"),
            format!("signals {}", SIGNALS.join(", ")),
        );
        false
    }

    /// A threshold or minimum-reclaim map: signal → quantity or percentage.
    fn threshold_map(&mut self, field: &'static str, m: &RawMap) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (k, Scalar(v)) in m {
            if !self.signal(field, k, v) {
                continue;
            }
            let allowed = "a non-negative quantity (100Mi, 1Gi, 1000 for inodes/pids) or a percentage of capacity 0%..100%";
            let ok = match Checker::percent_value(v) {
                Some(Ok(_)) => true,
                Some(Err(problem)) => {
                    self.bad(field, Some(k), v, problem, allowed);
                    false
                }
                None => match Quantity::parse(v) {
                    Err(e) => {
                        self.bad(field, Some(k), v, e.reason, allowed);
                        false
                    }
                    Ok(q) if q.is_negative() => {
                        self.bad(field, Some(k), v, "must not be negative", allowed);
                        false
                    }
                    Ok(_) => true,
                },
            };
            if ok {
                out.insert(k.clone(), v.clone());
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

fn ser_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_go_duration(*d))
}

fn ser_duration_map<S: Serializer>(
    m: &BTreeMap<String, Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(m.iter().map(|(k, d)| (k, format_go_duration(*d))))
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

/// Turn raw values into a typed [`Config`], or every problem found.
pub fn validate(
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
            let given = c.threshold_map("evictionHard", m);
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
        .map(|m| c.threshold_map("evictionSoft", m))
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
    // A soft threshold without a grace period is a start-up error (kubelet).
    if let Some(soft) = &raw.eviction_soft {
        for (k, Scalar(v)) in soft {
            let has_grace = raw
                .eviction_soft_grace_period
                .as_ref()
                .is_some_and(|g| g.contains_key(k));
            if SIGNALS.contains(&k.as_str()) && !has_grace {
                c.bad(
                    "evictionSoft",
                    Some(k),
                    v,
                    "soft threshold without a grace period",
                    format!("a soft threshold together with evictionSoftGracePeriod[{k:?}]"),
                );
            }
        }
    }
    let eviction_minimum_reclaim = raw
        .eviction_minimum_reclaim
        .as_ref()
        .map(|m| c.threshold_map("evictionMinimumReclaim", m))
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
        Duration::from_secs(300),
        Duration::ZERO,
        None,
    );

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
        MemoryAvailableSource::Workingset,
        &[
            ("workingset", MemoryAvailableSource::Workingset),
            ("meminfo", MemoryAvailableSource::Meminfo),
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

    if !c.errors.is_empty() {
        return Err(c.errors);
    }
    Ok(Config {
        kubeconfig,
        node_name,
        api_eviction_timeout,
        runtime_unhealthy_after,
        eviction_hard,
        eviction_soft,
        eviction_soft_grace_period,
        eviction_minimum_reclaim,
        eviction_max_pod_grace_period,
        eviction_pressure_transition_period,
        merge_default_eviction_settings: merge_defaults,
        cgroup_driver,
        cgroup_root,
        system_reserved,
        kube_reserved,
        qos_reserved,
        cpu_cfs_quota,
        cpu_cfs_quota_period,
        memory_throttling_factor,
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
    })
}

// ---------------------------------------------------------------------------
// Go durations

/// Parse a Go `time.Duration` string (`300ms`, `1.5s`, `1m30s`, `5m0s`,
/// `1h`); `0` alone is zero. Negative durations are rejected.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s.starts_with('-') {
        return Err("negative duration".into());
    }
    let s_body = s.strip_prefix('+').unwrap_or(s);
    let b = s_body.as_bytes();
    let mut i = 0;
    let mut total: u128 = 0; // nanoseconds
    while i < b.len() {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let int_part = &s_body[start..i];
        let mut frac_part = "";
        if i < b.len() && b[i] == b'.' {
            i += 1;
            let fs = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            frac_part = &s_body[fs..i];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err("expected a number".into());
        }
        let us = i;
        while i < b.len() && !b[i].is_ascii_digit() && b[i] != b'.' {
            i += 1;
        }
        let unit: u128 = match &s_body[us..i] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err("missing unit (ns, us, ms, s, m, h)".into()),
            _ => {
                return Err(format!(
                    "unknown unit {:?} (ns, us, ms, s, m, h)",
                    &s_body[us..i]
                ))
            }
        };
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse()
                .map_err(|_| "number too large".to_string())?
        };
        let mut v = int.checked_mul(unit).ok_or("duration too large")?;
        if !frac_part.is_empty() {
            let digits = &frac_part[..frac_part.len().min(18)];
            let f: u128 = digits.parse().map_err(|_| "bad fraction".to_string())?;
            v += f * unit / 10u128.pow(digits.len() as u32);
        }
        total = total.checked_add(v).ok_or("duration too large")?;
        if total > i64::MAX as u128 {
            return Err("duration too large".into());
        }
    }
    Ok(Duration::from_nanos(total as u64))
}

/// Format a duration like Go's `time.Duration.String()` (`5m0s`, `100ms`, `1.5s`).
pub fn format_go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    fn frac(v: u128, unit: u128, suffix: &str) -> String {
        let int = v / unit;
        let rem = v % unit;
        if rem == 0 {
            return format!("{int}{suffix}");
        }
        let width = (unit.ilog10()) as usize;
        let f = format!("{rem:0width$}");
        format!("{int}.{}{suffix}", f.trim_end_matches('0'))
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return frac(ns, 1_000, "µs");
    }
    if ns < 1_000_000_000 {
        return frac(ns, 1_000_000, "ms");
    }
    let h = ns / 3_600_000_000_000;
    let rest = ns % 3_600_000_000_000;
    let m = rest / 60_000_000_000;
    let s_ns = rest % 60_000_000_000;
    let secs = frac(s_ns, 1_000_000_000, "s");
    if h > 0 {
        format!("{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{m}m{secs}")
    } else {
        secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("0s", 0),
            ("300ms", 300_000_000),
            ("1.5s", 1_500_000_000),
            ("1m30s", 90_000_000_000),
            ("5m0s", 300_000_000_000),
            ("1h", 3_600_000_000_000),
            ("1h0m0s", 3_600_000_000_000),
            ("2h45m", 9_900_000_000_000),
            ("10us", 10_000),
            ("10µs", 10_000),
            ("7ns", 7),
            (".5s", 500_000_000),
            ("+1s", 1_000_000_000),
        ];
        for &(s, ns) in cases {
            assert_eq!(parse_go_duration(s), Ok(Duration::from_nanos(ns)), "{s}");
        }
        for bad in ["", "5", "-1s", "1x", "s", "1.s.", "1 s", "1d", "abc", "."] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn go_durations_format() {
        let cases: &[(u64, &str)] = &[
            (0, "0s"),
            (7, "7ns"),
            (1_500, "1.5µs"),
            (100_000_000, "100ms"),
            (1_500_000_000, "1.5s"),
            (10_000_000_000, "10s"),
            (90_000_000_000, "1m30s"),
            (300_000_000_000, "5m0s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_661_500_000_000, "1h1m1.5s"),
        ];
        for &(ns, want) in cases {
            assert_eq!(format_go_duration(Duration::from_nanos(ns)), want);
            assert_eq!(
                parse_go_duration(want),
                Ok(Duration::from_nanos(ns)),
                "round trip {want}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn go_duration_roundtrip(ns in 0u64..(1u64 << 62)) {
            let d = Duration::from_nanos(ns);
            proptest::prop_assert_eq!(parse_go_duration(&format_go_duration(d)), Ok(d));
        }
    }

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
        assert_eq!(c.eviction_hard["memory.available"], "100Mi");
        assert_eq!(c.eviction_hard["imagefs.available"], "15%");
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
        b.eviction_hard.remove("memory.available");
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
