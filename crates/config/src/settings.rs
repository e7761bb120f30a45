//! Every setting, declared once: its name in the config file, its
//! command-line flag, the KubeletConfiguration field it comes from, its
//! default, a one-line description and the kind of value it takes.
//!
//! The other views of a setting are derived from [`SETTINGS`] or checked
//! against it: the kubelet field → config key mapping
//! (`kubelet_fields`), the keys named by the command-line overrides
//! (`key_of_field`, resolved at compile time), the known keys offered
//! after an unknown field (`known_keys`), and tests that the config file
//! parser, the flags, `qosd config default` and the configuration
//! reference in docs/operations.md list exactly these settings.

/// The kind of value a setting takes; also the syntax of its flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `true` or `false`.
    Bool,
    /// A whole number.
    Integer,
    /// A decimal number.
    Number,
    /// A Go duration (`100ms`, `5m0s`).
    Duration,
    /// A Kubernetes quantity (`500m`, `1Gi`).
    Quantity,
    /// A file system path.
    Path,
    /// A word from a fixed set, an address, a version or a filter.
    Text,
    /// A list; the flag takes it comma-separated.
    List,
    /// Signal → threshold; the flag takes `SIGNAL<VALUE,...`.
    ThresholdMap,
    /// Name → value; the flag takes `NAME=VALUE,...`.
    Map,
}

/// One setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The config file key (`cpuCFSQuotaPeriod`).
    pub key: &'static str,
    /// Other keys accepted for it in the config file.
    pub(crate) aliases: &'static [&'static str],
    /// The Rust field of the raw config and of the overrides (`cpu_cfs_quota_period`).
    pub field: &'static str,
    /// The long command-line flag without dashes (`cpu-cfs-quota-period`).
    pub flag: Option<&'static str>,
    /// The environment variable the flag also reads.
    pub env: Option<&'static str>,
    /// The KubeletConfiguration field it is read from with a kubelet config
    /// (`featureGates.MemoryQoS`: a key of a top-level map field).
    pub kubelet: Option<&'static str>,
    /// The default in the flag's syntax, as `qosd config default` prints
    /// it; empty: none (unset, an empty map, or detected from the node).
    pub default: &'static str,
    /// What it does, in one line.
    pub doc: &'static str,
    /// The kind of value.
    pub kind: Kind,
}

impl Setting {
    const BASE: Setting = Setting {
        key: "",
        aliases: &[],
        field: "",
        flag: None,
        env: None,
        kubelet: None,
        default: "",
        doc: "",
        kind: Kind::Text,
    };

    /// The top-level KubeletConfiguration field (`featureGates` for
    /// `featureGates.MemoryQoS`).
    pub(crate) fn kubelet_top_field(&self) -> Option<&'static str> {
        self.kubelet
            .map(|k| k.split_once('.').map_or(k, |(top, _)| top))
    }
}

/// Declare the settings: `field: "key" { attribute: value, ... }`, where
/// `flag`, `env` and `kubelet` are optional names and the others as in
/// [`Setting`].
macro_rules! settings {
    (@v flag $v:expr) => { Some($v) };
    (@v env $v:expr) => { Some($v) };
    (@v kubelet $v:expr) => { Some($v) };
    (@v $other:ident $v:expr) => { $v };
    ($($field:ident : $key:literal { $($attr:ident : $v:expr),* $(,)? })*) => {
        /// Every setting, in the order of the config file's fields.
        pub const SETTINGS: &[Setting] = &[
            $(Setting {
                key: $key,
                field: stringify!($field),
                $($attr: settings!(@v $attr $v),)*
                ..Setting::BASE
            },)*
        ];
    };
}

use Kind::*;

#[rustfmt::skip]
settings! {
    // --- eviction (KubeletConfiguration) -----------------------------------
    eviction_hard: "evictionHard" { flag: "eviction-hard", kubelet: "evictionHard", kind: ThresholdMap,
        default: "imagefs.available<15%,imagefs.inodesFree<5%,memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%",
        doc: "hard eviction thresholds" }
    eviction_soft: "evictionSoft" { flag: "eviction-soft", kubelet: "evictionSoft", kind: ThresholdMap,
        doc: "soft eviction thresholds; each needs a grace period" }
    eviction_soft_grace_period: "evictionSoftGracePeriod" { flag: "eviction-soft-grace-period", kubelet: "evictionSoftGracePeriod", kind: Map,
        doc: "how long a soft threshold must hold" }
    eviction_minimum_reclaim: "evictionMinimumReclaim" { flag: "eviction-minimum-reclaim", kubelet: "evictionMinimumReclaim", kind: Map,
        doc: "how much to reclaim beyond a threshold" }
    eviction_max_pod_grace_period: "evictionMaxPodGracePeriod" { flag: "eviction-max-pod-grace-period", kubelet: "evictionMaxPodGracePeriod", kind: Integer,
        default: "0", doc: "cap (seconds) on a pod's grace period for soft evictions" }
    eviction_pressure_transition_period: "evictionPressureTransitionPeriod" { flag: "eviction-pressure-transition-period", kubelet: "evictionPressureTransitionPeriod", kind: Duration,
        default: "5m0s", doc: "how long a node condition stays after its threshold clears" }
    merge_default_eviction_settings: "mergeDefaultEvictionSettings" { kubelet: "mergeDefaultEvictionSettings", kind: Bool,
        default: "false", doc: "keep default hard thresholds not listed in evictionHard" }
    // --- pressure thresholds (qosd's own) ----------------------------------
    eviction_pressure_hard: "evictionPressureHard" { flag: "eviction-pressure-hard", kind: Map,
        doc: "hard pressure (stall) thresholds" }
    eviction_pressure_soft: "evictionPressureSoft" { flag: "eviction-pressure-soft", kind: Map,
        doc: "soft pressure (stall) thresholds" }
    eviction_pressure_soft_grace_period: "evictionPressureSoftGracePeriod" { flag: "eviction-pressure-soft-grace-period", kind: Map,
        doc: "how long a soft pressure threshold must hold" }
    // --- image GC and logs (KubeletConfiguration) ---------------------------
    image_gc_high_threshold_percent: "imageGCHighThresholdPercent" { kubelet: "imageGCHighThresholdPercent", kind: Integer,
        default: "85", doc: "disk usage (percent) above which images are deleted" }
    image_gc_low_threshold_percent: "imageGCLowThresholdPercent" { kubelet: "imageGCLowThresholdPercent", kind: Integer,
        default: "80", doc: "disk usage (percent) image GC frees down to" }
    image_minimum_gc_age: "imageMinimumGCAge" { kubelet: "imageMinimumGCAge", kind: Duration,
        default: "2m0s", doc: "unused images younger than this are kept" }
    image_maximum_gc_age: "imageMaximumGCAge" { kubelet: "imageMaximumGCAge", kind: Duration,
        default: "0s", doc: "the kubelet's age limit of unused images (validated, not applied)" }
    pod_logs_dir: "podLogsDir" { flag: "pod-logs-dir", kubelet: "podLogsDir", kind: Path,
        default: "/var/log/pods", doc: "the pods' container logs, counted as ephemeral storage" }
    // --- cgroups (KubeletConfiguration) --------------------------------------
    cgroup_driver: "cgroupDriver" { flag: "cgroup-driver", kubelet: "cgroupDriver",
        default: "cgroupfs", doc: "cgroup naming: cgroupfs or systemd" }
    cgroup_root: "cgroupRoot" { flag: "cgroup-root", kubelet: "cgroupRoot",
        default: "/", doc: "the parent of kubepods" }
    system_reserved: "systemReserved" { flag: "system-reserved", kubelet: "systemReserved", kind: Map,
        doc: "resources reserved for the system" }
    kube_reserved: "kubeReserved" { flag: "kube-reserved", kubelet: "kubeReserved", kind: Map,
        doc: "resources reserved for Kubernetes daemons" }
    qos_reserved: "qosReserved" { flag: "qos-reserved", kubelet: "qosReserved", kind: Map,
        doc: "memory reserved from lower QoS classes (percent)" }
    cpu_cfs_quota: "cpuCFSQuota" { flag: "cpu-cfs-quota", kubelet: "cpuCFSQuota", kind: Bool,
        default: "true", doc: "enforce CPU limits with CFS quota" }
    cpu_cfs_quota_period: "cpuCFSQuotaPeriod" { flag: "cpu-cfs-quota-period", kubelet: "cpuCFSQuotaPeriod", kind: Duration,
        default: "100ms", doc: "CFS period" }
    memory_throttling_factor: "memoryThrottlingFactor" { flag: "memory-throttling-factor", kubelet: "memoryThrottlingFactor", kind: Number,
        default: "0.9", doc: "memory.high factor with memoryQoS" }
    // --- CPU manager (flags in the CPU manager's own group) ------------------
    cpu_manager_policy: "cpuManagerPolicy" { flag: "cpu-manager-policy", kubelet: "cpuManagerPolicy",
        default: "none", doc: "none, or static: exclusive CPUs for integer Guaranteed containers" }
    cpu_manager_policy_options: "cpuManagerPolicyOptions" { flag: "cpu-manager-policy-options", kubelet: "cpuManagerPolicyOptions", kind: Map,
        doc: "options of the static CPU manager policy" }
    reserved_system_cpus: "reservedSystemCPUs" { flag: "reserved-cpus", kubelet: "reservedSystemCPUs",
        doc: "CPUs kept for the system (a CPU list)" }
    cpu_manager_state_dir: "cpuManagerStateDir" { flag: "cpu-manager-state-dir", kind: Path,
        default: "/var/lib/qosd", doc: "where qosd keeps its cpu_manager_state" }
    state_dir: "stateDir" { flag: "state-dir", env: "QOSD_STATE_DIR", kind: Path,
        doc: "where qosd keeps state across restarts" }
    kubelet_cpu_manager_state: "kubeletCPUManagerState" { flag: "kubelet-cpu-manager-state", kind: Path,
        doc: "the kubelet's cpu_manager_state, audited instead of assigning CPUs" }
    // --- node allocatable (KubeletConfiguration) -----------------------------
    memory_reservation_policy: "memoryReservationPolicy" { flag: "memory-reservation-policy", kubelet: "memoryReservationPolicy",
        default: "None", doc: "MemoryQoS protection: None or TieredReservation" }
    enforce_node_allocatable: "enforceNodeAllocatable" { flag: "enforce-node-allocatable", kubelet: "enforceNodeAllocatable", kind: List,
        default: "pods", doc: "what gets limited to allocatable or its reservation" }
    system_reserved_cgroup: "systemReservedCgroup" { flag: "system-reserved-cgroup", kubelet: "systemReservedCgroup",
        doc: "the cgroup limited with systemReserved" }
    kube_reserved_cgroup: "kubeReservedCgroup" { flag: "kube-reserved-cgroup", kubelet: "kubeReservedCgroup",
        doc: "the cgroup limited with kubeReserved" }
    // --- qosd's own -----------------------------------------------------------
    kubelet_version: "kubeletVersion" { flag: "kubelet-version",
        default: "1.36", doc: "whose rules to follow where kubelets differ" }
    cgroupfs: "cgroupfs" { flag: "cgroupfs", kind: Path,
        default: "/sys/fs/cgroup", doc: "where the cgroup filesystem is mounted" }
    cgroup_version: "cgroupVersion" { flag: "cgroup-version",
        default: "auto", doc: "auto, v1 or v2" }
    runtime_endpoint: "runtimeEndpoint" { aliases: &["containerRuntimeEndpoint"], flag: "runtime-endpoint",
        env: "CONTAINER_RUNTIME_ENDPOINT", kubelet: "containerRuntimeEndpoint",
        default: "unix:///run/containerd/containerd.sock", doc: "CRI socket" }
    mode: "mode" { flag: "mode",
        default: "enforce", doc: "enforce, or dry-run: log what would be done" }
    reconcile_interval: "reconcileInterval" { flag: "reconcile-interval", kind: Duration,
        default: "10s", doc: "reconcile period" }
    relist_interval: "relistInterval" { flag: "relist-interval", kind: Duration,
        default: "1s", doc: "pod relist period without pod cgroup events" }
    metrics_address: "metricsAddress" { flag: "metrics-address",
        default: "127.0.0.1:9847", doc: "HTTP listener for /metrics, /healthz, /readyz, /status" }
    root_dir: "rootDir" { flag: "root-dir", kind: Path,
        default: "/var/lib/kubelet", doc: "the kubelet's root directory, for nodefs signals" }
    imagefs_path: "imagefsPath" { flag: "imagefs-path", kind: Path,
        doc: "filesystem for imagefs signals when the runtime reports none" }
    memory_available_source: "memoryAvailableSource" { flag: "memory-available-source",
        default: "workingset", doc: "workingset or meminfo" }
    cpu_weight_formula: "cpuWeightFormula" { flag: "cpu-weight-formula",
        default: "kubelet", doc: "cgroup v2 shares to weight conversion: kubelet or runc" }
    memory_qos: "memoryQoS" { flag: "memory-qos", kubelet: "featureGates.MemoryQoS", kind: Bool,
        default: "false", doc: "memory.min and memory.high like the kubelet's MemoryQoS" }
    node_cpu: "nodeCPU" { flag: "node-cpu", kind: Quantity,
        doc: "node CPU capacity override" }
    node_memory: "nodeMemory" { flag: "node-memory", kind: Quantity,
        doc: "node memory capacity override" }
    log_format: "logFormat" { flag: "log-format",
        default: "text", doc: "text or json" }
    eviction_backend: "evictionBackend" { flag: "eviction-backend",
        default: "kill", doc: "kill, cri, api or dry-run" }
    hugepage_sizes: "hugepageSizes" { flag: "hugepage-sizes",
        doc: "hugepage sizes limited on every pod" }
    log_level: "logLevel" { flag: "log-level",
        default: "info", doc: "log filter" }
    eviction_hook: "evictionHook" { kind: Path,
        doc: "program run after each eviction" }
    eviction_hook_timeout: "evictionHookTimeout" { kind: Duration,
        default: "10s", doc: "the eviction hook is killed after this long" }
    kubeconfig: "kubeconfig" { flag: "kubeconfig", kind: Path,
        doc: "kubeconfig for the API server" }
    node_name: "nodeName" { flag: "node-name", env: "NODE_NAME",
        doc: "this node's name: its pods are watched on the API server" }
    api_eviction_timeout: "apiEvictionTimeout" { flag: "api-eviction-timeout", kind: Duration,
        default: "1s", doc: "deadline of an Eviction API call" }
    runtime_unhealthy_after: "runtimeUnhealthyAfter" { flag: "runtime-unhealthy-after", kind: Duration,
        default: "2m0s", doc: "/healthz fails after the runtime was unreachable this long" }
    pod_pids_limit: "podPidsLimit" { flag: "pod-max-pids", kubelet: "podPidsLimit", kind: Integer,
        default: "-1", doc: "pids.max of every pod (-1: none)" }
    cgroup_enforcement: "cgroupEnforcement" { flag: "cgroup-enforcement",
        default: "enforce", doc: "enforce, or audit: compare and write nothing (the default with a kubelet config)" }
    kubelet_config: "kubeletConfig" { flag: "kubelet-config", kind: Path,
        doc: "the kubelet's config file" }
    kubelet_config_dir: "kubeletConfigDir" { flag: "kubelet-config-dir", kind: Path,
        doc: "the kubelet's drop-in directory" }
}

/// The setting with config file key (or alias) `key`.
pub(crate) fn by_key(key: &str) -> Option<&'static Setting> {
    SETTINGS
        .iter()
        .find(|s| s.key == key || s.aliases.contains(&key))
}

/// The settings read from a kubelet config: (top-level KubeletConfiguration
/// field, config key).
pub(crate) fn kubelet_fields() -> impl Iterator<Item = (&'static str, &'static str)> {
    SETTINGS
        .iter()
        .filter_map(|s| Some((s.kubelet_top_field()?, s.key)))
}

/// Every key the config file accepts, in declaration order (a setting's
/// aliases before its key, as serde lists them).
pub(crate) fn known_keys() -> impl Iterator<Item = &'static str> {
    SETTINGS
        .iter()
        .flat_map(|s| s.aliases.iter().copied().chain(std::iter::once(s.key)))
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The config key of the setting whose Rust field is `field`. In a `const`
/// context an undeclared field fails the build.
pub(crate) const fn key_of_field(field: &str) -> &'static str {
    let mut i = 0;
    while i < SETTINGS.len() {
        if same(SETTINGS[i].field, field) {
            return SETTINGS[i].key;
        }
        i += 1;
    }
    panic!("a field that is not declared in SETTINGS")
}

/// A value of the setting's kind in its flag's syntax (for tests of the
/// derived views).
pub fn sample(kind: Kind) -> &'static str {
    match kind {
        Bool => "true",
        Integer => "1",
        Number => "0.5",
        Duration => "1s",
        Quantity => "1",
        Path => "/x",
        Text => "x",
        List => "x,y",
        ThresholdMap => "memory.available<1Mi",
        Map => "memory=1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn keys_flags_fields_and_kubelet_fields_are_unique() {
        let mut seen = BTreeSet::new();
        for k in known_keys() {
            assert!(seen.insert(k), "key {k} declared twice");
        }
        for (what, names) in [
            (
                "field",
                SETTINGS.iter().map(|s| Some(s.field)).collect::<Vec<_>>(),
            ),
            ("flag", SETTINGS.iter().map(|s| s.flag).collect()),
            (
                "kubelet field",
                SETTINGS.iter().map(|s| s.kubelet).collect(),
            ),
            ("env", SETTINGS.iter().map(|s| s.env).collect()),
        ] {
            let mut seen = BTreeSet::new();
            for n in names.into_iter().flatten() {
                assert!(seen.insert(n), "{what} {n} declared twice");
            }
        }
    }

    #[test]
    fn declarations_are_well_formed() {
        for s in SETTINGS {
            assert!(
                s.key.starts_with(|c: char| c.is_ascii_lowercase())
                    && s.key.chars().all(|c| c.is_ascii_alphanumeric()),
                "{s:?}"
            );
            assert!(
                s.field.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{s:?}"
            );
            // The field is the key in snake case, acronyms as one word.
            let squash = |x: &str| x.replace('_', "").to_ascii_lowercase();
            assert_eq!(squash(s.field), squash(s.key), "{s:?}");
            if let Some(f) = s.flag {
                assert!(
                    !f.starts_with('-') && f.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                    "{s:?}"
                );
            }
            assert!(!s.doc.is_empty() && !s.doc.contains('\n'), "{s:?}");
            assert!(s.env.is_none() || s.flag.is_some(), "{s:?}");
        }
    }

    #[test]
    fn derived_views() {
        assert_eq!(key_of_field("cpu_cfs_quota_period"), "cpuCFSQuotaPeriod");
        const K: &str = key_of_field("memory_qos");
        assert_eq!(K, "memoryQoS");
        let k: Vec<_> = kubelet_fields().collect();
        assert!(k.contains(&("featureGates", "memoryQoS")), "{k:?}");
        assert!(k.contains(&("containerRuntimeEndpoint", "runtimeEndpoint")));
        assert!(k.contains(&("cpuCFSQuotaPeriod", "cpuCFSQuotaPeriod")));
        assert!(!k.iter().any(|(_, q)| *q == "mode"), "{k:?}");
        assert_eq!(k.len(), 30);
        assert_eq!(
            by_key("containerRuntimeEndpoint").unwrap().key,
            "runtimeEndpoint"
        );
        assert_eq!(by_key("nodeCPU").unwrap().kind, Quantity);
        assert!(by_key("nodeCpu").is_none());
        assert!(known_keys().any(|k| k == "containerRuntimeEndpoint"));
        assert_eq!(known_keys().count(), SETTINGS.len() + 1);
    }

    #[test]
    #[should_panic(expected = "not declared")]
    fn an_undeclared_field_has_no_key() {
        key_of_field("cpu_cfs_quota_periods");
    }

    /// The field names serde's derive gives the raw config (keys and
    /// aliases), read through a deserializer that only records them.
    fn raw_config_fields() -> Vec<&'static str> {
        use serde::de::{self, Deserialize, Visitor};
        #[derive(Debug)]
        struct Found(Vec<&'static str>);
        impl std::fmt::Display for Found {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{:?}", self.0)
            }
        }
        impl std::error::Error for Found {}
        impl de::Error for Found {
            fn custom<T: std::fmt::Display>(_: T) -> Found {
                Found(Vec::new())
            }
        }
        struct Fields;
        impl<'de> de::Deserializer<'de> for Fields {
            type Error = Found;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
                Err(Found(Vec::new()))
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Found> {
                Err(Found(fields.to_vec()))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
                bytes byte_buf option unit unit_struct newtype_struct seq tuple
                tuple_struct map enum identifier ignored_any
            }
        }
        match crate::RawConfig::deserialize(Fields) {
            Err(Found(fields)) => fields,
            Ok(_) => unreachable!("the recorder never yields a value"),
        }
    }

    /// The config file accepts exactly the declared keys (and aliases), in
    /// the declared order: a field added to the raw config without a
    /// declaration (or the other way round) fails here.
    #[test]
    fn the_raw_config_has_one_field_per_declared_setting() {
        let fields = raw_config_fields();
        assert!(fields.len() > 50, "{fields:?}");
        assert_eq!(fields, known_keys().collect::<Vec<_>>());
    }

    /// A JSON value of the kind's sample, as a config file would give it.
    fn sample_json(kind: Kind) -> serde_json::Value {
        let text = sample(kind);
        match kind {
            Map | ThresholdMap => {
                let (k, v) = text.split_once(['=', '<']).unwrap();
                serde_json::json!({ k: v })
            }
            List => text.split(',').collect::<Vec<_>>().into(),
            _ => text.into(),
        }
    }

    /// The settings whose flags the CPU manager's commands declare with
    /// their own (they are not overrides of the config file).
    const CPU_MANAGER: [&str; 5] = [
        "cpuManagerPolicy",
        "cpuManagerPolicyOptions",
        "reservedSystemCPUs",
        "cpuManagerStateDir",
        "kubeletCPUManagerState",
    ];

    /// The flags of [`Overrides`](crate::Overrides) are exactly the declared
    /// ones (but the CPU manager's): every declared flag is there, reads the
    /// declared environment variable and sets the declared key, and there
    /// is no other flag.
    #[test]
    fn override_flags_are_the_declared_ones() {
        use clap::{Args, FromArgMatches};
        use std::collections::BTreeMap;
        let cmd = crate::Overrides::augment_args(clap::Command::new("t"));
        cmd.clone().debug_assert();
        let flags: BTreeMap<&str, Option<String>> = cmd
            .get_arguments()
            .map(|a| {
                let long = a
                    .get_long()
                    .unwrap_or_else(|| panic!("{} has no long flag", a.get_id()));
                (long, a.get_env().map(|e| e.to_string_lossy().into_owned()))
            })
            .collect();
        let declared: BTreeMap<&str, Option<String>> = SETTINGS
            .iter()
            .filter(|s| !CPU_MANAGER.contains(&s.key))
            .filter_map(|s| Some((s.flag?, s.env.map(str::to_string))))
            .collect();
        assert_eq!(flags, declared);
        for k in CPU_MANAGER {
            assert!(by_key(k).and_then(|s| s.flag).is_some(), "{k}");
        }
        // Each flag alone sets its key (the environment left out).
        let bare = cmd.clone().mut_args(|a| a.env(None::<&'static str>));
        let mut checked = 0;
        for s in SETTINGS.iter().filter(|s| !CPU_MANAGER.contains(&s.key)) {
            let Some(flag) = s.flag else { continue };
            let m = bare
                .clone()
                .try_get_matches_from(["t", &format!("--{flag}"), sample(s.kind)])
                .unwrap_or_else(|e| panic!("--{flag}: {e}"));
            let o = crate::Overrides::from_arg_matches(&m).unwrap();
            assert_eq!(o.keys(), BTreeSet::from([s.key]), "--{flag}");
            checked += 1;
        }
        assert_eq!(checked, flags.len());
        let none = bare.try_get_matches_from(["t"]).unwrap();
        assert_eq!(
            crate::Overrides::from_arg_matches(&none).unwrap(),
            crate::Overrides::default()
        );
    }

    /// The kubelet's values replace exactly the settings declared with a
    /// kubelet field.
    #[test]
    fn kubelet_values_fill_exactly_the_kubelet_settings() {
        let every: serde_json::Map<_, _> = SETTINGS
            .iter()
            .map(|s| (s.key.to_string(), sample_json(s.kind)))
            .collect();
        let kubelet: crate::RawConfig =
            serde_json::from_value(serde_json::Value::Object(every)).unwrap();
        let mut raw = crate::RawConfig::default();
        crate::kubelet::fill(&mut raw, kubelet);
        let filled = serde_json::to_value(&raw).unwrap();
        for s in SETTINGS {
            assert_eq!(
                !filled[s.key].is_null(),
                s.kubelet.is_some(),
                "{}: {}",
                s.key,
                filled[s.key]
            );
        }
    }

    /// A value of the effective config in the flag's syntax.
    fn flag_syntax(kind: Kind, v: &serde_json::Value) -> String {
        use serde_json::Value;
        match v {
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            Value::Array(a) => a
                .iter()
                .map(|x| flag_syntax(kind, x))
                .collect::<Vec<_>>()
                .join(","),
            Value::Object(m) => {
                let sep = if kind == ThresholdMap { "<" } else { "=" };
                m.iter()
                    .map(|(k, x)| format!("{k}{sep}{}", flag_syntax(kind, x)))
                    .collect::<Vec<_>>()
                    .join(",")
            }
            other => other.to_string(),
        }
    }

    /// Each declared default is what `qosd config default` prints.
    #[test]
    fn declared_defaults_are_the_effective_defaults() {
        let c = serde_json::to_value(crate::Config::default()).unwrap();
        for s in SETTINGS {
            let v = c.get(s.key).unwrap_or(&serde_json::Value::Null);
            assert_eq!(flag_syntax(s.kind, v), s.default, "{}", s.key);
        }
        // And the effective config prints no key that is not declared.
        for k in c.as_object().unwrap().keys() {
            assert!(by_key(k).is_some(), "{k} is printed but not declared");
        }
    }
}
