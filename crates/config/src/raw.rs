//! The raw configuration: what the YAML file and the command-line flags say,
//! before validation (every field optional, scalars kept as text).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use super::*;

/// A scalar read as text: YAML `1`, `1.5`, `true` and `"1"` all become text,
/// so `systemReserved: {cpu: 1}` works like `{cpu: "1"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub(crate) struct Scalar(pub(crate) String);

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

pub(crate) type RawMap = BTreeMap<String, Scalar>;

/// The config file as written: every field optional, values as text.
/// Unknown fields are errors. Every field is a setting declared in
/// [`crate::settings::SETTINGS`] (checked by a test); serialised (unset
/// fields as `null`) only to be merged key by key.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RawConfig {
    pub(crate) eviction_hard: Option<RawMap>,
    pub(crate) eviction_soft: Option<RawMap>,
    pub(crate) eviction_soft_grace_period: Option<RawMap>,
    pub(crate) eviction_minimum_reclaim: Option<RawMap>,
    pub(crate) eviction_max_pod_grace_period: Option<Scalar>,
    pub(crate) eviction_pressure_transition_period: Option<Scalar>,
    pub(crate) merge_default_eviction_settings: Option<Scalar>,
    /// qosd's own (not a kubelet field): hard pressure thresholds,
    /// `memory.some` / `memory.full` → `<share>%[/<window>]`.
    pub(crate) eviction_pressure_hard: Option<RawMap>,
    /// qosd's own: soft pressure thresholds.
    pub(crate) eviction_pressure_soft: Option<RawMap>,
    /// qosd's own: grace periods of the soft pressure thresholds.
    pub(crate) eviction_pressure_soft_grace_period: Option<RawMap>,
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub(crate) image_gc_high_threshold_percent: Option<Scalar>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub(crate) image_gc_low_threshold_percent: Option<Scalar>,
    #[serde(rename = "imageMinimumGCAge")]
    pub(crate) image_minimum_gc_age: Option<Scalar>,
    #[serde(rename = "imageMaximumGCAge")]
    pub(crate) image_maximum_gc_age: Option<Scalar>,
    pub(crate) pod_logs_dir: Option<Scalar>,
    pub(crate) cgroup_driver: Option<Scalar>,
    pub(crate) cgroup_root: Option<Scalar>,
    pub(crate) system_reserved: Option<RawMap>,
    pub(crate) kube_reserved: Option<RawMap>,
    pub(crate) qos_reserved: Option<RawMap>,
    #[serde(rename = "cpuCFSQuota")]
    pub(crate) cpu_cfs_quota: Option<Scalar>,
    #[serde(rename = "cpuCFSQuotaPeriod")]
    pub(crate) cpu_cfs_quota_period: Option<Scalar>,
    pub(crate) memory_throttling_factor: Option<Scalar>,
    pub(crate) cpu_manager_policy: Option<Scalar>,
    pub(crate) cpu_manager_policy_options: Option<RawMap>,
    #[serde(rename = "reservedSystemCPUs")]
    pub(crate) reserved_system_cpus: Option<Scalar>,
    pub(crate) cpu_manager_state_dir: Option<Scalar>,
    pub(crate) state_dir: Option<Scalar>,
    #[serde(rename = "kubeletCPUManagerState")]
    pub(crate) kubelet_cpu_manager_state: Option<Scalar>,
    pub(crate) memory_reservation_policy: Option<Scalar>,
    pub(crate) enforce_node_allocatable: Option<Vec<Scalar>>,
    pub(crate) system_reserved_cgroup: Option<Scalar>,
    pub(crate) kube_reserved_cgroup: Option<Scalar>,
    pub(crate) kubelet_version: Option<Scalar>,
    pub(crate) cgroupfs: Option<Scalar>,
    pub(crate) cgroup_version: Option<Scalar>,
    #[serde(alias = "containerRuntimeEndpoint")]
    pub(crate) runtime_endpoint: Option<Scalar>,
    pub(crate) mode: Option<Scalar>,
    pub(crate) reconcile_interval: Option<Scalar>,
    pub(crate) relist_interval: Option<Scalar>,
    pub(crate) metrics_address: Option<Scalar>,
    pub(crate) root_dir: Option<Scalar>,
    pub(crate) imagefs_path: Option<Scalar>,
    pub(crate) memory_available_source: Option<Scalar>,
    pub(crate) cpu_weight_formula: Option<Scalar>,
    #[serde(rename = "memoryQoS")]
    pub(crate) memory_qos: Option<Scalar>,
    #[serde(rename = "nodeCPU")]
    pub(crate) node_cpu: Option<Scalar>,
    pub(crate) node_memory: Option<Scalar>,
    pub(crate) log_format: Option<Scalar>,
    pub(crate) eviction_backend: Option<Scalar>,
    pub(crate) hugepage_sizes: Option<Scalar>,
    pub(crate) log_level: Option<Scalar>,
    pub(crate) eviction_hook: Option<Scalar>,
    pub(crate) eviction_hook_timeout: Option<Scalar>,
    pub(crate) kubeconfig: Option<Scalar>,
    pub(crate) node_name: Option<Scalar>,
    pub(crate) api_eviction_timeout: Option<Scalar>,
    pub(crate) runtime_unhealthy_after: Option<Scalar>,
    /// Kubelet `podPidsLimit` (pids.max of every pod; -1: none).
    pub(crate) pod_pids_limit: Option<Scalar>,
    /// `enforce` | `audit` (see `cgroupEnforcement` in docs/operations.md).
    pub(crate) cgroup_enforcement: Option<Scalar>,
    /// The kubelet's config file (KubeletConfiguration): its fields replace
    /// qosd's kubelet fields.
    pub(crate) kubelet_config: Option<Scalar>,
    /// The kubelet's drop-in directory (`--config-dir`).
    pub(crate) kubelet_config_dir: Option<Scalar>,
}

impl RawConfig {
    /// Parse YAML text. An empty document is an empty config.
    pub(crate) fn from_yaml(text: &str) -> Result<RawConfig, ConfigError> {
        if text.trim().is_empty()
            || text
                .lines()
                .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            return Ok(RawConfig::default());
        }
        qosd_model::core::limits::check_nesting(text, qosd_model::core::limits::MAX_NESTING)
            .map_err(|message| ConfigError::Parse {
                file: None,
                message,
            })?;
        yaml_serde::from_str::<Option<RawConfig>>(text)
            .map(Option::unwrap_or_default)
            .map_err(|e| ConfigError::Parse {
                file: None,
                message: with_suggestion(redact_unknown_field(e.to_string())),
            })
    }
}

/// Whether `key` may be shown in an error: a short name of the shape of a
/// config field. Anything else (a line of some other file passed as
/// `--config`, such as a password hash) is never echoed.
fn showable_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key.starts_with(|c: char| c.is_ascii_alphabetic())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// Replace the key of an "unknown field `KEY`" message by a placeholder
/// unless it looks like a field name: the message must not carry the
/// content of a file that is not a config file.
pub(crate) fn redact_unknown_field(message: String) -> String {
    const MARK: &str = "unknown field `";
    let Some(start) = message.find(MARK).map(|i| i + MARK.len()) else {
        return message;
    };
    let Some(len) = message[start..].find('`') else {
        return message;
    };
    if showable_key(&message[start..start + len]) {
        return message;
    }
    format!(
        "{}unknown field (a key that is not a field name; not shown){}",
        &message[..start - MARK.len()],
        &message[start + len + 1..]
    )
}

/// Append "did you mean `x`?" to an unknown-field message when a known
/// field ([`crate::settings::known_keys`]) is a few edits away.
fn with_suggestion(message: String) -> String {
    let Some(rest) = message.split("unknown field `").nth(1) else {
        return message;
    };
    let Some(unknown) = rest.split('`').next() else {
        return message;
    };
    if !message.contains("expected one of ") {
        return message;
    }
    // Only a field within 3 edits is suggested, and the edit distance is
    // at least the difference in length: other fields are skipped, so a
    // long unknown name costs one pass, not one distance per field.
    let unknown_lower = unknown.to_ascii_lowercase();
    let unknown_chars = unknown_lower.chars().count();
    let best = crate::settings::known_keys()
        .filter(|f| f.chars().count().abs_diff(unknown_chars) <= 3)
        .map(|f| (edit_distance(&unknown_lower, &f.to_ascii_lowercase()), f))
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
///
/// It is also the flags themselves ([`clap::Args`], to flatten into a
/// command), with the kubelet's flag names where the kubelet has one, in
/// the order `--help` lists them. Every flag is the one declared for its
/// setting in [`SETTINGS`](crate::settings::SETTINGS); the settings without
/// a flag are skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct Overrides {
    /// Operating mode: enforce | dry-run.
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// Hard eviction thresholds, e.g. memory.available<100Mi,nodefs.available<10%.
    #[arg(long, value_name = "SIGNAL<VALUE,...", value_parser = parse_langle_map)]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// Soft eviction thresholds, e.g. memory.available<300Mi.
    #[arg(long, value_name = "SIGNAL<VALUE,...", value_parser = parse_langle_map)]
    pub eviction_soft: Option<BTreeMap<String, String>>,
    /// Soft threshold grace periods, e.g. memory.available=1m30s.
    #[arg(long, value_name = "SIGNAL=DURATION,...", value_parser = parse_eq_map)]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    /// Minimum reclaim per signal, e.g. memory.available=0Mi,nodefs.available=500Mi.
    #[arg(long, value_name = "SIGNAL=VALUE,...", value_parser = parse_eq_map)]
    pub eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    /// Maximum pod grace period (seconds) for soft evictions.
    #[arg(long, value_name = "SECONDS")]
    pub eviction_max_pod_grace_period: Option<String>,
    /// How long a node condition is held after its threshold clears (e.g. 5m0s).
    #[arg(long, value_name = "DURATION")]
    pub eviction_pressure_transition_period: Option<String>,
    /// Hard pressure thresholds (qosd's own, not the kubelet's), e.g.
    /// memory.full=10%/2s,memory.some=50%/2s: evict when the share of the
    /// window stalled on memory reaches the value.
    #[arg(long, value_name = "SIGNAL=PCT[/WINDOW],...", value_parser = parse_eq_map)]
    pub eviction_pressure_hard: Option<BTreeMap<String, String>>,
    /// Soft pressure thresholds, e.g. memory.some=25%/2s.
    #[arg(long, value_name = "SIGNAL=PCT[/WINDOW],...", value_parser = parse_eq_map)]
    pub eviction_pressure_soft: Option<BTreeMap<String, String>>,
    /// Grace periods of the soft pressure thresholds, e.g. memory.some=30s.
    #[arg(long, value_name = "SIGNAL=DURATION,...", value_parser = parse_eq_map)]
    pub eviction_pressure_soft_grace_period: Option<BTreeMap<String, String>>,
    /// cgroup driver: cgroupfs | systemd.
    #[arg(long, value_name = "DRIVER")]
    pub cgroup_driver: Option<String>,
    /// Parent cgroup of kubepods (kubelet --cgroup-root), e.g. / or /qosd-test-1.
    #[arg(long, value_name = "PATH")]
    pub cgroup_root: Option<String>,
    /// Resources reserved for the system, e.g. cpu=500m,memory=1Gi.
    #[arg(long, value_name = "RES=QTY,...", value_parser = parse_eq_map)]
    pub system_reserved: Option<BTreeMap<String, String>>,
    /// Resources reserved for Kubernetes daemons, e.g. cpu=100m,memory=500Mi.
    #[arg(long, value_name = "RES=QTY,...", value_parser = parse_eq_map)]
    pub kube_reserved: Option<BTreeMap<String, String>>,
    /// QoS memory reservation, e.g. memory=50%.
    #[arg(long, value_name = "memory=PCT", value_parser = parse_eq_map)]
    pub qos_reserved: Option<BTreeMap<String, String>>,
    /// CFS quota period (1ms..1s), e.g. 100ms.
    #[arg(long = "cpu-cfs-quota-period", value_name = "DURATION")]
    pub cpu_cfs_quota_period: Option<String>,
    /// Enforce CPU limits with CFS quota (true|false).
    #[arg(long = "cpu-cfs-quota", value_name = "BOOL")]
    pub cpu_cfs_quota: Option<bool>,
    /// Follow this kubelet version's rules (1.33 … 1.36; default 1.36).
    #[arg(long, value_name = "VERSION")]
    pub kubelet_version: Option<String>,
    /// MemoryQoS memoryReservationPolicy (1.36): None | TieredReservation.
    #[arg(long, value_name = "POLICY")]
    pub memory_reservation_policy: Option<String>,
    /// enforceNodeAllocatable, comma-separated: pods,system-reserved,kube-reserved.
    #[arg(long, value_name = "LIST")]
    pub enforce_node_allocatable: Option<String>,
    /// The cgroup limited by system-reserved enforcement (never created).
    #[arg(long, value_name = "CGROUP")]
    pub system_reserved_cgroup: Option<String>,
    /// The cgroup limited by kube-reserved enforcement (never created).
    #[arg(long, value_name = "CGROUP")]
    pub kube_reserved_cgroup: Option<String>,
    /// Set memory.min/memory.high like the kubelet's MemoryQoS (true|false).
    #[arg(long = "memory-qos", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub memory_qos: Option<bool>,
    /// cgroup filesystem mount point (default /sys/fs/cgroup).
    #[arg(long, value_name = "DIR")]
    pub cgroupfs: Option<String>,
    /// cgroup version: auto | v1 | v2.
    #[arg(long, value_name = "VERSION")]
    pub cgroup_version: Option<String>,
    /// CRI endpoint, e.g. unix:///run/containerd/containerd.sock.
    #[arg(
        long,
        alias = "container-runtime-endpoint",
        env = "CONTAINER_RUNTIME_ENDPOINT",
        value_name = "ENDPOINT"
    )]
    pub runtime_endpoint: Option<String>,
    /// Periodic reconcile interval (e.g. 10s).
    #[arg(long, value_name = "DURATION")]
    pub reconcile_interval: Option<String>,
    /// Pod relist interval when the runtime has no event stream (e.g. 1s).
    #[arg(long, value_name = "DURATION")]
    pub relist_interval: Option<String>,
    /// HTTP address for /metrics, /healthz, /readyz, /status (IP:port).
    #[arg(long, value_name = "ADDR")]
    pub metrics_address: Option<String>,
    /// Kubelet root directory (nodefs signals).
    #[arg(long, value_name = "DIR")]
    pub root_dir: Option<String>,
    /// Kubelet podLogsDir: the pods' container logs, counted in their
    /// ephemeral-storage usage (default /var/log/pods).
    #[arg(long, value_name = "DIR")]
    pub pod_logs_dir: Option<String>,
    /// Filesystem path for imagefs signals.
    #[arg(long, value_name = "DIR")]
    pub imagefs_path: Option<String>,
    /// memory.available source: workingset | meminfo.
    #[arg(long, value_name = "SOURCE")]
    pub memory_available_source: Option<String>,
    /// cgroup v2 cpu.weight formula: kubelet | runc.
    #[arg(long, value_name = "FORMULA")]
    pub cpu_weight_formula: Option<String>,
    /// Node CPU capacity override (quantity).
    #[arg(long, value_name = "QTY")]
    pub node_cpu: Option<String>,
    /// Node memory capacity override (quantity).
    #[arg(long, value_name = "QTY")]
    pub node_memory: Option<String>,
    /// Log format: text | json.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Eviction backend: kill | cri | api | dry-run.
    #[arg(long, value_name = "BACKEND")]
    pub eviction_backend: Option<String>,
    /// kubelet --pod-max-pids: pids.max of every pod (-1: unlimited).
    #[arg(long = "pod-max-pids", value_name = "N", allow_negative_numbers = true)]
    pub pod_pids_limit: Option<String>,
    /// Hugepage sizes limited on every pod (e.g. 2Mi,1Gi, or none). Default:
    /// the node's sizes (sysfs) when the hugetlb controller is mounted.
    #[arg(long, value_name = "LIST")]
    pub hugepage_sizes: Option<String>,
    /// kubelet memoryThrottlingFactor (MemoryQoS memory.high), 0 < f <= 1.
    #[arg(long, value_name = "F")]
    pub memory_throttling_factor: Option<String>,
    /// Log filter: error | warn | info | debug | trace (or qosd=debug,info).
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// kubeconfig for the Kubernetes API server (default: in-cluster config in a pod).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<String>,
    /// This node's name: its pods are watched on the API server (env NODE_NAME).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,
    /// Deadline of an Eviction API call (e.g. 1s); a hard eviction falls back to the local kill after it.
    #[arg(long, value_name = "DURATION")]
    pub api_eviction_timeout: Option<String>,
    /// /healthz fails after the runtime was unreachable this long (e.g. 2m; 0s: never).
    #[arg(long, value_name = "DURATION")]
    pub runtime_unhealthy_after: Option<String>,
    /// Directory for state kept across restarts (the CRI status cache).
    #[arg(long, env = "QOSD_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<String>,
    /// `--kubelet-config` and `--kubelet-config-dir`.
    #[command(flatten)]
    pub kubelet: KubeletSource,
    /// cgroupEnforcement: enforce (write cgroups) | audit (compare, report
    /// drift, write nothing). Default: audit with a kubelet config, else enforce.
    #[arg(long, value_name = "MODE")]
    pub cgroup_enforcement: Option<String>,
    /// mergeDefaultEvictionSettings (config file only).
    #[arg(skip)]
    pub merge_default_eviction_settings: Option<bool>,
    /// evictionHook (config file only).
    #[arg(skip)]
    pub eviction_hook: Option<String>,
    /// evictionHookTimeout (config file only).
    #[arg(skip)]
    pub eviction_hook_timeout: Option<String>,
}

/// `--kubelet-config` / `--kubelet-config-dir`: the kubelet's own config as
/// the source of qosd's kubelet fields. Part of [`Overrides`], and the only
/// flags of the commands that read nothing else from the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct KubeletSource {
    /// The kubelet's config file (KubeletConfiguration, YAML or JSON), e.g.
    /// /var/lib/kubelet/config.yaml: its fields replace qosd's kubelet fields.
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::AnyPath, value_parser = path_text())]
    pub kubelet_config: Option<String>,
    /// The kubelet's drop-in directory (--config-dir): `*.conf` files merged
    /// over --kubelet-config in lexical order.
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::AnyPath, value_parser = path_text())]
    pub kubelet_config_dir: Option<String>,
}

impl KubeletSource {
    /// Whether either flag is given.
    pub fn is_set(&self) -> bool {
        self.kubelet_config.is_some() || self.kubelet_config_dir.is_some()
    }
}

/// A path flag's value as text: any path (not only UTF-8) is taken, shown
/// as [`Path::display`](std::path::Path::display) shows it.
fn path_text() -> impl clap::builder::TypedValueParser<Value = String> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PathBufValueParser::new().map(|p| p.display().to_string())
}

fn to_raw_map(m: &BTreeMap<String, String>) -> RawMap {
    m.iter()
        .map(|(k, v)| (k.clone(), Scalar(v.clone())))
        .collect()
}

impl Overrides {
    /// The config keys these overrides set.
    pub fn keys(&self) -> BTreeSet<&'static str> {
        self.apply(&mut RawConfig::default())
    }

    /// Write the set overrides into `raw`; return the names of the fields set.
    pub(crate) fn apply(&self, raw: &mut RawConfig) -> BTreeSet<&'static str> {
        let mut set = BTreeSet::new();
        // The key each field stands for comes from its declaration in
        // `settings::SETTINGS` (resolved at compile time: an undeclared
        // field does not build).
        macro_rules! map {
            ($($f:ident),* $(,)?) => {$(
                if let Some(m) = &self.$f {
                    raw.$f = Some(to_raw_map(m));
                    set.insert(const { crate::settings::key_of_field(stringify!($f)) });
                }
            )*};
        }
        macro_rules! text {
            ($($f:ident),* $(,)?) => {$(
                if let Some(v) = &self.$f {
                    raw.$f = Some(Scalar(v.to_string()));
                    set.insert(const { crate::settings::key_of_field(stringify!($f)) });
                }
            )*};
        }
        map!(
            eviction_hard,
            eviction_soft,
            eviction_soft_grace_period,
            eviction_minimum_reclaim,
            eviction_pressure_hard,
            eviction_pressure_soft,
            eviction_pressure_soft_grace_period,
            system_reserved,
            kube_reserved,
            qos_reserved,
        );
        text!(
            eviction_max_pod_grace_period,
            eviction_pressure_transition_period,
            merge_default_eviction_settings,
            cgroup_driver,
            cgroup_root,
            cpu_cfs_quota,
            cpu_cfs_quota_period,
            memory_throttling_factor,
            memory_reservation_policy,
            system_reserved_cgroup,
            kube_reserved_cgroup,
            kubelet_version,
            cgroupfs,
            cgroup_version,
            runtime_endpoint,
            mode,
            reconcile_interval,
            relist_interval,
            metrics_address,
            root_dir,
            pod_logs_dir,
            imagefs_path,
            memory_available_source,
            cpu_weight_formula,
            memory_qos,
            node_cpu,
            node_memory,
            log_format,
            eviction_backend,
            pod_pids_limit,
            hugepage_sizes,
            log_level,
            eviction_hook,
            eviction_hook_timeout,
            kubeconfig,
            node_name,
            api_eviction_timeout,
            runtime_unhealthy_after,
            state_dir,
            cgroup_enforcement,
        );
        if let Some(v) = &self.kubelet.kubelet_config {
            raw.kubelet_config = Some(Scalar(v.to_string()));
            set.insert(const { crate::settings::key_of_field("kubelet_config") });
        }
        if let Some(v) = &self.kubelet.kubelet_config_dir {
            raw.kubelet_config_dir = Some(Scalar(v.to_string()));
            set.insert(const { crate::settings::key_of_field("kubelet_config_dir") });
        }
        if let Some(v) = &self.enforce_node_allocatable {
            raw.enforce_node_allocatable = Some(
                v.split(',')
                    .map(str::trim)
                    .filter(|k| !k.is_empty())
                    .map(|k| Scalar(k.to_string()))
                    .collect(),
            );
            set.insert(const { crate::settings::key_of_field("enforce_node_allocatable") });
        }
        set
    }
}

/// Parse a kubelet `--eviction-hard`-style flag value: `a<1Mi,b<10%`.
pub fn parse_langle_map(s: &str) -> Result<BTreeMap<String, String>, String> {
    parse_sep_map(s, '<')
}

/// Parse a kubelet `--system-reserved`-style flag value: `cpu=1,memory=1Gi`.
pub(crate) fn parse_eq_map(s: &str) -> Result<BTreeMap<String, String>, String> {
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

#[cfg(test)]
mod suggestion_tests {
    use super::*;

    #[test]
    fn keys_that_are_not_field_names_are_not_echoed() {
        // A line of a shadow-style file as the only key.
        let e = RawConfig::from_yaml("root:$6$abcdefgh$c2VjcmV0aGFzaA:19000:0:99999:7:::\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown field (a key that is not a field name"),
            "{e}"
        );
        assert!(!e.contains("$6$") && !e.contains("root:"), "{e}");
        // A misspelt field is still named.
        let e = RawConfig::from_yaml("cgroupDrivr: systemd\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`cgroupDrivr`"), "{e}");
    }

    fn hint(yaml: &str) -> Option<String> {
        let ConfigError::Parse { message, .. } = RawConfig::from_yaml(yaml).unwrap_err() else {
            panic!("not a parse error: {yaml:?}");
        };
        assert!(message.contains("unknown field"), "{message}");
        let hint = message.split("did you mean `").nth(1)?;
        Some(hint.split('`').next().unwrap().to_string())
    }

    #[test]
    fn suggestions_table() {
        let long = format!("{}: 1\n", "evictionHard".repeat(80)); // YAML keys: < 1024 chars
        let cases: &[(&str, Option<&str>)] = &[
            ("evictonHard: {}\n", Some("evictionHard")),
            ("EVICTIONHARD: {}\n", Some("evictionHard")),
            ("evictionHardd: {}\n", Some("evictionHard")),
            ("zzzzzzzzzzzz: 1\n", None),
            (&long, None),
        ];
        for (yaml, want) in cases {
            assert_eq!(hint(yaml).as_deref(), *want, "{:.40}", yaml);
        }
    }
}
