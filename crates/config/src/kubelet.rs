//! The kubelet's own configuration file as the source of qosd's kubelet
//! fields: `--kubelet-config FILE` (a `KubeletConfiguration`,
//! `kubelet.config.k8s.io/v1beta1`, YAML or JSON) and
//! `--kubelet-config-dir DIR` (drop-ins, like the kubelet's `--config-dir`).
//!
//! Loading follows the kubelet (cmd/kubelet/app/server.go):
//!
//! 1. the main file is decoded and defaulted (pkg/kubelet/apis/config/
//!    v1beta1/defaults.go, plus the default `evictionHard` when the file has
//!    none);
//! 2. every `*.conf` below the drop-in directory, in lexical order, is
//!    applied to it as a JSON merge patch (RFC 7386: maps merge key by key,
//!    lists and scalars replace, `null` removes) — so a drop-in's partial
//!    `evictionHard` keeps the other (defaulted) thresholds;
//! 3. of the result, the fields qosd has a field for are taken (see
//!    `settings::kubelet_fields`, from the settings declared
//!    with a kubelet field); every other field is reported as not modelled
//!    by qosd (`NOT_MODELLED`, `OUTSIDE_SCOPE`, or unknown): a warning
//!    in `qosd config check` / `config show` and the daemon's log. An empty string means "unset" as in the kubelet
//!    (`containerRuntimeEndpoint: ""` → the default socket).
//!
//! qosd's own file then holds only qosd's fields: a kubelet field there is an
//! error naming both files. Command-line flags still override (the kubelet's
//! flags override its file too).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::raw::RawConfig;
use super::{ConfigError, DEFAULT_RUNTIME_ENDPOINT};
use qosd_model::core::duration::format_go_duration;
use qosd_model::policy::evict::threshold::{
    DEFAULT_EVICTION_HARD, DEFAULT_PRESSURE_TRANSITION_PERIOD,
};

/// The only KubeletConfiguration version (the kubelet reads no other).
pub(crate) const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The `kind` of a kubelet config file.
pub(crate) const KIND: &str = "KubeletConfiguration";

/// KubeletConfiguration fields that change what the kubelet enforces but
/// qosd does not model, each with what the kubelet does with it. Set in a
/// kubelet config, each is a warning naming the file (`qosd config check`,
/// `config show`, the daemon's log) — never dropped silently.
pub(crate) const NOT_MODELLED: &[(&str, &str)] = &[
    ("memorySwap", "swap per container (LimitedSwap: memory.swap.max for Burstable containers; NoSwap: 0); qosd plans no swap limit"),
    ("failSwapOn", "whether the kubelet starts on a node with swap on; qosd neither checks swap nor plans swap limits"),
    ("memoryManagerPolicy", "Static pins Guaranteed pods' memory to NUMA nodes (cpuset.mems); qosd writes no cpuset.mems"),
    ("reservedMemory", "per-NUMA-node reservations of the Static memory manager"),
    ("topologyManagerPolicy", "NUMA alignment of CPU, memory and device assignments at admission; qosd's CPU manager uses no topology hints"),
    ("topologyManagerScope", "whether topology alignment is per container or per pod"),
    ("topologyManagerPolicyOptions", "options of the topology manager"),
    ("cpuManagerReconcilePeriod", "how often the kubelet re-applies CPU sets; qosd reconciles every reconcileInterval"),
    ("singleProcessOOMKill", "memory.oom.group of containers (cgroup v2); qosd writes no container cgroup"),
    ("localStorageCapacityIsolation", "false turns off local ephemeral-storage limits and their evictions; qosd always enforces them"),
    ("kernelMemcgNotification", "memcg threshold notifications for memory.available; qosd has its own memory watcher"),
    ("maxPods", "pod admission limit; qosd admits no pods"),
    ("podsPerCore", "pod admission limit per core; qosd admits no pods"),
    ("kubeletCgroups", "the cgroup the kubelet and the runtime run in"),
    ("systemCgroups", "the cgroup for non-kernel processes outside the pods"),
    ("oomScoreAdj", "the kubelet process's own oom_score_adj (pods' values: qosd plan -o json)"),
    ("failCgroupV1", "whether the kubelet refuses cgroup v1; qosd follows kubeletVersion's default and only warns"),
    ("shutdownGracePeriod", "graceful node shutdown"),
    ("shutdownGracePeriodCriticalPods", "graceful node shutdown of critical pods"),
    ("shutdownGracePeriodByPodPriority", "graceful node shutdown by pod priority"),
    ("containerLogMaxSize", "container log rotation (bounds the logs counted as ephemeral storage)"),
    ("containerLogMaxFiles", "container log rotation (bounds the logs counted as ephemeral storage)"),
    ("containerLogMaxWorkers", "container log rotation workers"),
    ("containerLogMonitorInterval", "container log rotation interval"),
    ("volumeStatsAggPeriod", "how often volume usage is measured for local-storage eviction; qosd measures each eviction pass"),
    ("protectKernelDefaults", "refuse to start when kernel tunables differ from the kubelet's defaults"),
    ("cgroupsPerQOS", "qosd always plans the QoS-level cgroups (burstable, besteffort)"),
];

/// KubeletConfiguration fields outside what qosd does (server, auth, node
/// registration and status, networking, image pulls, logging, static pod
/// sources, probes): listed in one warning line per file.
pub(crate) const OUTSIDE_SCOPE: &[&str] = &[
    "enableServer",
    "staticPodPath",
    "syncFrequency",
    "fileCheckFrequency",
    "httpCheckFrequency",
    "staticPodURL",
    "staticPodURLHeader",
    "address",
    "port",
    "readOnlyPort",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsMinVersion",
    "rotateCertificates",
    "serverTLSBootstrap",
    "authentication",
    "authorization",
    "registryPullQPS",
    "registryBurst",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "eventRecordQPS",
    "eventBurst",
    "enableDebuggingHandlers",
    "enableContentionProfiling",
    "healthzPort",
    "healthzBindAddress",
    "clusterDomain",
    "clusterDNS",
    "streamingConnectionIdleTimeout",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "runtimeRequestTimeout",
    "hairpinMode",
    "podCIDR",
    "resolvConf",
    "runOnce",
    "nodeStatusMaxImages",
    "maxOpenFiles",
    "contentType",
    "kubeAPIQPS",
    "kubeAPIBurst",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "enableControllerAttachDetach",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "configMapAndSecretChangeDetectionStrategy",
    "showHiddenMetricsForVersion",
    "allowedUnsafeSysctls",
    "volumePluginDir",
    "providerID",
    "logging",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "crashLoopBackOff",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    "seccompDefault",
    "registerWithTaints",
    "registerNode",
    "tracing",
    "imageServiceEndpoint",
    "userNamespaces",
];

/// How a field of a kubelet config that qosd does not take is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotModelledKind {
    /// Changes what the kubelet enforces; qosd does not model it.
    Effect,
    /// Outside qosd's scope (server, auth, registration, logging …).
    OutsideScope,
    /// A `NOT_MODELLED` field at the kubelet's default (or the zero
    /// value the kubelet defaults): nothing differs from what qosd does.
    AtDefault,
    /// Not a KubeletConfiguration field qosd knows (the kubelet itself
    /// warns about unknown fields and goes on).
    Unknown,
}

/// True when a [`NOT_MODELLED`] field's value is the kubelet's default, or
/// the zero value the kubelet's defaulting replaces by it
/// (pkg/kubelet/apis/config/v1beta1/defaults.go).
fn at_default(field: &str, v: &Value) -> bool {
    let zeroish = match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => {
            s.is_empty()
                || qosd_model::core::duration::parse_go_duration(s).is_ok_and(|d| d.is_zero())
        }
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    };
    let is = |want: &[Value]| v.is_null() || want.contains(v);
    let dur = |want: &str| {
        zeroish
            || v.as_str().is_some_and(|s| {
                qosd_model::core::duration::parse_go_duration(s).ok()
                    == qosd_model::core::duration::parse_go_duration(want).ok()
            })
    };
    match field {
        // *bool defaulting to true: false is a choice.
        "failSwapOn" | "localStorageCapacityIsolation" | "cgroupsPerQOS" => is(&[true.into()]),
        "topologyManagerPolicy" => is(&["".into(), "none".into()]),
        "topologyManagerScope" => is(&["".into(), "container".into()]),
        "memoryManagerPolicy" => is(&["".into(), "None".into()]),
        "oomScoreAdj" => is(&[(-999).into()]),
        "maxPods" => is(&[0.into(), 110.into()]),
        "containerLogMaxSize" => is(&["".into(), "10Mi".into()]),
        "containerLogMaxFiles" => is(&[0.into(), 5.into()]),
        "containerLogMaxWorkers" => is(&[0.into(), 1.into()]),
        "containerLogMonitorInterval" => dur("10s"),
        "cpuManagerReconcilePeriod" => dur("10s"),
        "volumeStatsAggPeriod" => dur("1m"),
        _ => zeroish,
    }
}

/// A kubelet config field qosd does not honour, where it was set and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NotModelled {
    /// The KubeletConfiguration field (`featureGates.X` for a gate).
    pub field: String,
    /// The file that set it last.
    pub file: Option<PathBuf>,
    /// How it is reported.
    pub kind: NotModelledKind,
    /// What the kubelet does with it.
    pub note: String,
}

impl NotModelled {
    /// One warning line per [`NotModelledKind::Effect`] field, one per file
    /// listing the others.
    pub fn warnings(list: &[NotModelled]) -> Vec<String> {
        let file = |f: &Option<PathBuf>| {
            f.as_ref().map_or_else(
                || "kubelet config".to_string(),
                |p| format!("kubelet config {}", p.display()),
            )
        };
        let mut out = Vec::new();
        for n in list.iter().filter(|n| n.kind == NotModelledKind::Effect) {
            out.push(format!(
                "{}: {} is not modelled by qosd: {}",
                file(&n.file),
                n.field,
                n.note
            ));
        }
        for (kind, what) in [
            (
                NotModelledKind::AtDefault,
                "not modelled by qosd, at the kubelet's default (no difference)",
            ),
            (
                NotModelledKind::OutsideScope,
                "not modelled by qosd (outside its scope)",
            ),
            (
                NotModelledKind::Unknown,
                "unknown KubeletConfiguration fields, not used by qosd",
            ),
        ] {
            let mut by_file: BTreeMap<String, Vec<&str>> = BTreeMap::new();
            for n in list.iter().filter(|n| n.kind == kind) {
                by_file.entry(file(&n.file)).or_default().push(&n.field);
            }
            for (f, fields) in by_file {
                out.push(format!("{f}: {what}: {}", fields.join(", ")));
            }
        }
        out
    }
}

/// Names in qosd's own file that are kubelet fields (refused there when a
/// kubelet config is given), with the kubelet field each stands for
/// (`featureGates.MemoryQoS` for `memoryQoS`).
pub(crate) fn qosd_name_to_kubelet(name: &str) -> Option<&'static str> {
    crate::settings::by_key(name)?.kubelet
}

/// A loaded kubelet configuration: the raw values of qosd's kubelet fields
/// and where each came from.
#[derive(Debug, Clone, Default)]
pub(crate) struct KubeletConfig {
    /// The main file (`--kubelet-config`), if any.
    pub(crate) file: Option<PathBuf>,
    /// The drop-in files applied, in order.
    pub(crate) drop_ins: Vec<PathBuf>,
    /// qosd field name → the kubelet's value (JSON), defaulted and merged.
    pub(crate) fields: BTreeMap<&'static str, Value>,
    /// qosd field name → the file that set it last (`None`: the kubelet's
    /// default).
    pub(crate) origin: BTreeMap<&'static str, Option<PathBuf>>,
    /// Fields of the files that qosd does not use (sorted, deduplicated).
    pub(crate) ignored: Vec<String>,
    /// The same fields, each with where it was set and why it is not used
    /// (plus a non-zero `imageMaximumGCAge` and feature gates other than
    /// `MemoryQoS`).
    pub(crate) not_modelled: Vec<NotModelled>,
    /// `cgroupsPerQOS: false` (qosd plans the QoS cgroups anyway: warned).
    pub(crate) cgroups_per_qos_off: bool,
    /// `failCgroupV1` as the file sets it (`None`: the kubelet's default).
    pub(crate) fail_cgroup_v1: Option<bool>,
}

fn err(path: &Path, message: impl Into<String>) -> ConfigError {
    ConfigError::Kubelet {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Parse a kubelet config file: JSON when it starts with `{`, YAML
/// otherwise; `apiVersion` and `kind` must be the kubelet's.
fn read_document(path: &Path) -> Result<Map<String, Value>, ConfigError> {
    // Regular files only, size-capped; symlinks followed (ConfigMap mounts).
    let text = qosd_node::sys::input::read_text(path).map_err(|e| ConfigError::Read {
        path: path.to_path_buf(),
        source: e.into_io(),
    })?;
    if text.trim().is_empty() {
        return Err(err(path, "the file is empty (the kubelet refuses it too)"));
    }
    let doc: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(&text).map_err(|e| err(path, format!("not valid JSON: {e}")))?
    } else {
        yaml_serde::from_str(&text).map_err(|e| err(path, format!("not valid YAML: {e}")))?
    };
    let Value::Object(map) = doc else {
        return Err(err(path, "not a KubeletConfiguration object"));
    };
    match map.get("apiVersion").and_then(Value::as_str) {
        Some(API_VERSION) => {}
        Some(other) => {
            return Err(err(
                path,
                format!("apiVersion {other:?} is not supported; allowed: {API_VERSION}"),
            ))
        }
        None => {
            return Err(err(
                path,
                format!("apiVersion is missing; a kubelet config file starts with apiVersion: {API_VERSION} and kind: {KIND}"),
            ))
        }
    }
    match map.get("kind").and_then(Value::as_str) {
        Some(KIND) => {}
        other => {
            return Err(err(
                path,
                format!(
                    "kind {:?} is not {KIND}",
                    other.map(str::to_string).unwrap_or_default()
                ),
            ))
        }
    }
    Ok(map)
}

/// The kubelet's defaulting of the fields qosd reads (applied to the main
/// file before the drop-ins, as the kubelet does).
fn apply_defaults(doc: &mut Map<String, Value>) {
    let unset = |v: Option<&Value>| match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    };
    if unset(doc.get("evictionHard")) {
        doc.insert(
            "evictionHard".into(),
            Value::Object(
                DEFAULT_EVICTION_HARD
                    .iter()
                    .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
                    .collect(),
            ),
        );
    }
    let zero_duration = match doc.get("evictionPressureTransitionPeriod") {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => {
            s.is_empty()
                || qosd_model::core::duration::parse_go_duration(s).is_ok_and(|d| d.is_zero())
        }
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        _ => false,
    };
    if zero_duration {
        doc.insert(
            "evictionPressureTransitionPeriod".into(),
            format_go_duration(DEFAULT_PRESSURE_TRANSITION_PERIOD).into(),
        );
    }
    // A zero imageMinimumGCAge is unset (defaults.go: `== zeroDuration`),
    // as kubeadm writes it.
    if doc
        .get("imageMinimumGCAge")
        .and_then(Value::as_str)
        .is_some_and(|s| {
            qosd_model::core::duration::parse_go_duration(s).is_ok_and(|d| d.is_zero())
        })
    {
        doc.insert("imageMinimumGCAge".into(), "2m0s".into());
    }
    let defaults: [(&str, Value); 11] = [
        ("imageMinimumGCAge", "2m0s".into()),
        ("imageMaximumGCAge", "0s".into()),
        ("containerRuntimeEndpoint", DEFAULT_RUNTIME_ENDPOINT.into()),
        ("cgroupDriver", "cgroupfs".into()),
        ("cpuManagerPolicy", "none".into()),
        ("cpuCFSQuota", true.into()),
        ("cpuCFSQuotaPeriod", "100ms".into()),
        ("memoryThrottlingFactor", 0.9.into()),
        ("imageGCHighThresholdPercent", 85.into()),
        ("imageGCLowThresholdPercent", 80.into()),
        ("mergeDefaultEvictionSettings", false.into()),
    ];
    for (k, v) in defaults {
        if unset(doc.get(k)) {
            doc.insert(k.into(), v);
        }
    }
    // nil or negative → -1 (no pod pids limit beyond the node's).
    let pids_ok = doc
        .get("podPidsLimit")
        .and_then(Value::as_i64)
        .is_some_and(|n| n >= 0);
    if !pids_ok && !matches!(doc.get("podPidsLimit"), Some(Value::String(_))) {
        doc.insert("podPidsLimit".into(), (-1).into());
    }
    if matches!(doc.get("enforceNodeAllocatable"), None | Some(Value::Null)) {
        doc.insert("enforceNodeAllocatable".into(), vec!["pods"].into());
    }
}

/// RFC 7386 JSON merge patch (what the kubelet applies per drop-in).
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("an object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Drop-in files below `dir`: every `*.conf`, walked in lexical order
/// (subdirectories included, like Go's `filepath.WalkDir`).
fn drop_in_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(read_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_err)?;
    entries.sort_by_key(|e| e.file_name());
    let mut out = Vec::new();
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            out.extend(drop_in_files(&p)?);
        } else if p.extension().is_some_and(|x| x == "conf") {
            out.push(p);
        }
    }
    Ok(out)
}

/// Which file set each field last (top-level keys, and
/// `featureGates.MemoryQoS`), as the files are merged.
#[derive(Debug, Default)]
struct SetBy(BTreeMap<String, PathBuf>);

impl SetBy {
    /// `doc`, read from `path`, sets its keys.
    fn record(&mut self, doc: &Map<String, Value>, path: &Path) {
        for key in doc.keys() {
            self.0.insert(key.clone(), path.to_path_buf());
        }
        if let Some(Value::Object(fg)) = doc.get("featureGates") {
            if fg.contains_key("MemoryQoS") {
                self.0
                    .insert("featureGates.MemoryQoS".into(), path.to_path_buf());
            }
        }
    }

    /// The file that set `key` last (`None`: the kubelet's default).
    fn file_of(&self, key: &str) -> Option<PathBuf> {
        self.0.get(key).cloned()
    }
}

/// Why a field of the files that qosd does not use is not used.
fn not_modelled(key: &str, value: &Value, file: Option<PathBuf>) -> NotModelled {
    let (kind, note) = match NOT_MODELLED.iter().find(|(f, _)| *f == key) {
        Some((_, note)) if at_default(key, value) => (NotModelledKind::AtDefault, note.to_string()),
        Some((_, note)) => (NotModelledKind::Effect, note.to_string()),
        None if OUTSIDE_SCOPE.contains(&key) => (NotModelledKind::OutsideScope, String::new()),
        None => (NotModelledKind::Unknown, String::new()),
    };
    NotModelled {
        field: key.to_string(),
        file,
        kind,
        note,
    }
}

impl KubeletConfig {
    /// Load the main file (if any) and the drop-ins (if any); see the
    /// module docs.
    pub(crate) fn load(
        file: Option<&Path>,
        dir: Option<&Path>,
    ) -> Result<KubeletConfig, ConfigError> {
        let mut k = KubeletConfig {
            file: file.map(Path::to_path_buf),
            ..Default::default()
        };
        let mut set_by = SetBy::default();
        let mut doc = match file {
            Some(p) => {
                let d = read_document(p)?;
                set_by.record(&d, p);
                d
            }
            None => Map::new(),
        };
        apply_defaults(&mut doc);
        let mut merged = Value::Object(doc);
        if let Some(dir) = dir {
            for p in drop_in_files(dir)? {
                let patch = read_document(&p)?;
                set_by.record(&patch, &p);
                merge_patch(&mut merged, &Value::Object(patch));
                k.drop_ins.push(p);
            }
        }
        let Value::Object(doc) = merged else {
            unreachable!("a merge patch of objects is an object")
        };
        for (key, value) in &doc {
            k.take_field(key, value, &set_by);
        }
        Ok(k)
    }

    /// One field of the merged document: kept as qosd's field (with the
    /// file that set it), or listed as not used and why.
    fn take_field(&mut self, key: &str, value: &Value, set_by: &SetBy) {
        if matches!(key, "apiVersion" | "kind") {
            return;
        }
        if key == "cgroupsPerQOS" && value == &Value::Bool(false) {
            self.cgroups_per_qos_off = true;
        }
        if key == "failCgroupV1" {
            self.fail_cgroup_v1 = value.as_bool();
        }
        let Some(setting) = crate::settings::SETTINGS
            .iter()
            .find(|s| s.kubelet_top_field() == Some(key))
        else {
            self.ignored.push(key.to_string());
            // cgroupsPerQOS: true is what qosd does; false is warned
            // on its own (in `load_kubelet`).
            if key != "cgroupsPerQOS" {
                self.not_modelled
                    .push(not_modelled(key, value, set_by.file_of(key)));
            }
            return;
        };
        if key == "featureGates" {
            self.note_feature_gates(value, set_by.file_of(key));
        }
        if key == "imageMaximumGCAge"
            && value.as_str().is_some_and(|s| {
                qosd_model::core::duration::parse_go_duration(s).is_ok_and(|d| !d.is_zero())
            })
        {
            self.not_modelled.push(NotModelled {
                field: key.to_string(),
                file: set_by.file_of(key),
                kind: NotModelledKind::Effect,
                note: "the kubelet deletes images unused for longer than this; qosd deletes images only under disk pressure (validated, not applied)".to_string(),
            });
        }
        let (qosd, origin_key) = (setting.key, setting.kubelet.unwrap_or(key));
        // A declared `field.sub` (`featureGates.MemoryQoS`) is one key of
        // the map field.
        let value = match origin_key.split_once('.') {
            Some((_, sub)) => match value.get(sub) {
                Some(v) => v.clone(),
                None => return,
            },
            None => value.clone(),
        };
        // An empty string is "unset" in the kubelet: qosd's default
        // (which is the kubelet's) applies.
        if value.is_null() || value.as_str() == Some("") {
            return;
        }
        self.origin.insert(qosd, set_by.file_of(origin_key));
        self.fields.insert(qosd, value);
    }

    /// Feature gates other than `MemoryQoS`: not modelled (qosd follows
    /// `kubeletVersion`'s defaults).
    fn note_feature_gates(&mut self, value: &Value, file: Option<PathBuf>) {
        let Value::Object(gates) = value else {
            return;
        };
        for (gate, v) in gates {
            if gate == "MemoryQoS" {
                continue;
            }
            self.not_modelled.push(NotModelled {
                field: format!("featureGates.{gate}"),
                file: file.clone(),
                kind: NotModelledKind::Effect,
                note: format!("feature gate set to {v}; qosd follows kubeletVersion's defaults for gates other than MemoryQoS"),
            });
        }
    }

    /// The file to name for a field: where it was set, else the main file
    /// (its defaults), else the drop-in directory.
    pub(crate) fn source_of(&self, qosd_field: &str) -> String {
        match self.origin.get(qosd_field) {
            Some(Some(p)) => format!("kubelet config {}", p.display()),
            _ => match &self.file {
                Some(f) => format!("kubelet config {} (the kubelet's default)", f.display()),
                None => "kubelet config (the kubelet's default)".to_string(),
            },
        }
    }

    /// A short name of where the kubelet config comes from (the main file,
    /// else the first drop-in).
    pub(crate) fn display_path(&self) -> PathBuf {
        self.file
            .clone()
            .or_else(|| self.drop_ins.first().cloned())
            .unwrap_or_default()
    }

    /// The kubelet fields as a raw qosd config (kubelet field names already
    /// translated to qosd's). Wrong value types are errors naming the file.
    pub(crate) fn to_raw(&self) -> Result<RawConfig, ConfigError> {
        let obj: Map<String, Value> = self
            .fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        serde_json::from_value::<RawConfig>(Value::Object(obj)).map_err(|e| {
            // Name the file of the offending field when serde names one.
            let msg = e.to_string();
            let path = crate::settings::kubelet_fields()
                .find(|(kf, q)| msg.contains(kf) || msg.contains(q))
                .and_then(|(_, q)| self.origin.get(q).cloned().flatten())
                .unwrap_or_else(|| self.display_path());
            err(&path, msg)
        })
    }
}

/// Copy the kubelet's fields (the settings declared with a kubelet field)
/// into `raw` (qosd's own file must not set any: checked by
/// [`check_conflicts`] first).
pub(crate) fn fill(raw: &mut RawConfig, kubelet: RawConfig) {
    let object = |r: &RawConfig| match serde_json::to_value(r) {
        Ok(Value::Object(m)) => m,
        _ => unreachable!("a raw config serialises to an object"),
    };
    let (mut base, mut from) = (object(raw), object(&kubelet));
    for (_, key) in crate::settings::kubelet_fields() {
        match from.remove(key) {
            Some(v) if !v.is_null() => {
                base.insert(key.to_string(), v);
            }
            _ => {}
        }
    }
    *raw = serde_json::from_value(Value::Object(base))
        .expect("a raw config reads back what it serialised");
}

/// Top-level field names of qosd's own YAML file (for conflict checks).
pub(crate) fn top_level_keys(text: &str) -> Vec<String> {
    match yaml_serde::from_str::<Value>(text) {
        Ok(Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// With a kubelet config, qosd's own file holds only qosd's fields: every
/// kubelet field in it is an error naming both files.
pub(crate) fn check_conflicts(
    qosd_file: &Path,
    qosd_keys: &[String],
    kubelet: &KubeletConfig,
) -> Result<(), ConfigError> {
    let mut problems = Vec::new();
    for key in qosd_keys {
        let Some(setting) = crate::settings::by_key(key) else {
            continue;
        };
        let Some(kubelet_name) = setting.kubelet else {
            continue;
        };
        let qosd_name = setting.key;
        let set_in = match kubelet.origin.get(qosd_name) {
            Some(Some(p)) => format!("is set in the kubelet config {}", p.display()),
            _ => format!(
                "comes from the kubelet config {} (the kubelet's default)",
                kubelet.display_path().display()
            ),
        };
        problems.push(format!(
            "{key} is set in qosd's config file {} and {kubelet_name} {set_in}: with a kubelet config, qosd's file holds only qosd's fields (remove {key} from {}, or override it with a command-line flag)",
            qosd_file.display(),
            qosd_file.display()
        ));
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(ConfigError::Conflict {
        qosd_file: qosd_file.to_path_buf(),
        kubelet_file: kubelet.display_path(),
        problems,
    })
}

/// Append where each value came from to the invalid values' field names.
pub(crate) fn annotate(errors: &mut [super::InvalidValue], kubelet: &KubeletConfig) {
    for e in errors.iter_mut() {
        if e.field.contains("(from command-line flag)") {
            continue;
        }
        let name = e
            .field
            .split(['[', ' '])
            .next()
            .unwrap_or_default()
            .to_string();
        if kubelet.fields.contains_key(name.as_str()) {
            let shown = qosd_name_to_kubelet(&name).unwrap_or_default();
            e.field = format!(
                "{}{} (from {})",
                shown,
                &e.field[name.len()..],
                kubelet.source_of(&name)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = serde_json::json!({"a": {"b": 1, "c": 2}, "l": [1, 2], "x": 1});
        merge_patch(
            &mut t,
            &serde_json::json!({"a": {"b": 5, "d": 3}, "l": [9], "x": null}),
        );
        assert_eq!(
            t,
            serde_json::json!({"a": {"b": 5, "c": 2, "d": 3}, "l": [9]})
        );
    }

    #[test]
    fn defaulting_like_the_kubelet() {
        let d = tempfile::tempdir().unwrap();
        let f = write(
            d.path(),
            "k.yaml",
            &format!("{HEAD}containerRuntimeEndpoint: \"\"\nevictionPressureTransitionPeriod: 0s\ncgroupDriver: systemd\naddress: 0.0.0.0\npodPidsLimit: -5\n"),
        );
        let k = KubeletConfig::load(Some(&f), None).unwrap();
        assert_eq!(k.fields["runtimeEndpoint"], DEFAULT_RUNTIME_ENDPOINT);
        assert_eq!(k.fields["evictionPressureTransitionPeriod"], "5m0s");
        assert_eq!(k.fields["evictionHard"]["memory.available"], "100Mi");
        assert_eq!(
            k.fields["enforceNodeAllocatable"],
            serde_json::json!(["pods"])
        );
        assert_eq!(k.fields["podPidsLimit"], -1);
        assert_eq!(k.fields["imageGCHighThresholdPercent"], 85);
        assert_eq!(k.fields["cgroupDriver"], "systemd");
        assert_eq!(k.ignored, ["address"]);
        assert_eq!(k.not_modelled.len(), 1);
        assert_eq!(k.not_modelled[0].kind, NotModelledKind::OutsideScope);
        assert_eq!(k.origin["cgroupDriver"], Some(f.clone()));
        assert_eq!(k.origin["imageGCLowThresholdPercent"], None);
    }

    #[test]
    fn image_gc_ages_and_pod_logs_dir_are_taken() {
        let d = tempfile::tempdir().unwrap();
        let f = write(
            d.path(),
            "k.yaml",
            &format!(
                "{HEAD}imageMinimumGCAge: 10m\nimageMaximumGCAge: 1h\npodLogsDir: /data/pods\n"
            ),
        );
        let k = KubeletConfig::load(Some(&f), None).unwrap();
        assert_eq!(k.fields["imageMinimumGCAge"], "10m");
        assert_eq!(k.fields["imageMaximumGCAge"], "1h");
        assert_eq!(k.fields["podLogsDir"], "/data/pods");
        let raw = k.to_raw().unwrap();
        assert!(raw.image_minimum_gc_age.is_some() && raw.pod_logs_dir.is_some());
        // A non-zero imageMaximumGCAge is validated but not applied: reported.
        assert!(k
            .not_modelled
            .iter()
            .any(|n| n.field == "imageMaximumGCAge" && n.kind == NotModelledKind::Effect));
        // kubeadm's zero values are unset: the kubelet's 2m0s.
        let f = write(
            d.path(),
            "z.yaml",
            &format!("{HEAD}imageMinimumGCAge: 0s\nimageMaximumGCAge: 0s\n"),
        );
        let k = KubeletConfig::load(Some(&f), None).unwrap();
        assert_eq!(k.fields["imageMinimumGCAge"], "2m0s");
        assert!(k.not_modelled.is_empty(), "{:?}", k.not_modelled);
    }

    #[test]
    fn every_field_qosd_does_not_take_is_classified() {
        let d = tempfile::tempdir().unwrap();
        let f = write(
            d.path(),
            "k.yaml",
            &format!(
                "{HEAD}memorySwap: {{swapBehavior: LimitedSwap}}\nfailSwapOn: false\nmemoryManagerPolicy: Static\nreservedMemory: [{{numaNode: 0, limits: {{memory: 1Gi}}}}]\ntopologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\nmaxPods: 110\nlocalStorageCapacityIsolation: true\naddress: 0.0.0.0\nbogusField: 1\nfeatureGates: {{MemoryQoS: true, NodeSwap: true}}\ncgroupsPerQOS: true\n"
            ),
        );
        let k = KubeletConfig::load(Some(&f), None).unwrap();
        let kind = |field: &str| {
            k.not_modelled
                .iter()
                .find(|n| n.field == field)
                .map(|n| n.kind)
        };
        for (field, want) in [
            ("memorySwap", Some(NotModelledKind::Effect)),
            ("failSwapOn", Some(NotModelledKind::Effect)),
            ("memoryManagerPolicy", Some(NotModelledKind::Effect)),
            ("reservedMemory", Some(NotModelledKind::Effect)),
            ("topologyManagerPolicy", Some(NotModelledKind::Effect)),
            ("topologyManagerScope", Some(NotModelledKind::Effect)),
            ("featureGates.NodeSwap", Some(NotModelledKind::Effect)),
            ("maxPods", Some(NotModelledKind::AtDefault)),
            (
                "localStorageCapacityIsolation",
                Some(NotModelledKind::AtDefault),
            ),
            ("address", Some(NotModelledKind::OutsideScope)),
            ("bogusField", Some(NotModelledKind::Unknown)),
            ("featureGates.MemoryQoS", None),
            ("cgroupsPerQOS", None),
        ] {
            assert_eq!(kind(field), want, "{field}");
        }
        assert!(k
            .not_modelled
            .iter()
            .all(|n| n.file.as_deref() == Some(f.as_path())));
        let w = NotModelled::warnings(&k.not_modelled);
        assert!(
            w.iter()
                .any(|l| l.contains("memorySwap is not modelled by qosd: swap per container")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|l| l.ends_with("not modelled by qosd (outside its scope): address")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|l| l.ends_with("not used by qosd: bogusField")),
            "{w:?}"
        );
    }

    /// No KubeletConfiguration field is both taken and listed as not
    /// modelled, and none is listed twice.
    #[test]
    fn field_lists_are_disjoint() {
        let mut seen = std::collections::BTreeSet::new();
        let taken = crate::settings::kubelet_fields().map(|(k, _)| k);
        let listed = NOT_MODELLED.iter().map(|(k, _)| *k);
        for f in taken.chain(listed).chain(OUTSIDE_SCOPE.iter().copied()) {
            assert!(seen.insert(f), "{f} listed twice");
        }
    }

    #[test]
    fn drop_ins_merge_in_lexical_order() {
        let d = tempfile::tempdir().unwrap();
        let f = write(d.path(), "k.yaml", &format!("{HEAD}cgroupRoot: /a\n"));
        let dir = d.path().join("conf.d");
        write(
            &dir,
            "20-b.conf",
            &format!("{HEAD}cgroupRoot: /b\nevictionHard:\n  memory.available: 300Mi\n"),
        );
        let c = write(&dir, "30-c.conf", &format!("{HEAD}cgroupRoot: /c\n"));
        write(
            &dir,
            "10-a.conf",
            &format!("{HEAD}cgroupRoot: /z\nkubeReserved:\n  cpu: 100m\n"),
        );
        write(&dir, "99-ignored.yaml", &format!("{HEAD}cgroupRoot: /no\n"));
        let k = KubeletConfig::load(Some(&f), Some(&dir)).unwrap();
        assert_eq!(k.fields["cgroupRoot"], "/c");
        assert_eq!(k.origin["cgroupRoot"], Some(c));
        assert_eq!(k.drop_ins.len(), 3);
        // The main file's defaulted thresholds stay; the drop-in's wins.
        assert_eq!(k.fields["evictionHard"]["memory.available"], "300Mi");
        assert_eq!(k.fields["evictionHard"]["nodefs.available"], "10%");
        assert_eq!(k.fields["kubeReserved"]["cpu"], "100m");
    }

    #[test]
    fn api_version_and_kind_are_checked() {
        let d = tempfile::tempdir().unwrap();
        for (text, want) in [
            ("kind: KubeletConfiguration\n", "apiVersion is missing"),
            (
                "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
                "not supported",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n",
                "is not KubeletConfiguration",
            ),
            ("", "empty"),
        ] {
            let f = write(d.path(), "k.yaml", text);
            let e = KubeletConfig::load(Some(&f), None).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
            assert!(e.contains("k.yaml"), "{e}");
        }
    }

    #[test]
    fn json_files_are_read() {
        let d = tempfile::tempdir().unwrap();
        let f = write(
            d.path(),
            "k.json",
            "{\n\t\"kind\": \"KubeletConfiguration\",\n\t\"apiVersion\": \"kubelet.config.k8s.io/v1beta1\",\n\t\"featureGates\": {\"MemoryQoS\": true, \"RotateKubeletServerCertificate\": true},\n\t\"kubeReserved\": {\"cpu\": \"70m\", \"memory\": \"442Mi\"}\n}\n",
        );
        let k = KubeletConfig::load(Some(&f), None).unwrap();
        assert_eq!(k.fields["memoryQoS"], true);
        assert_eq!(k.fields["kubeReserved"]["memory"], "442Mi");
        let raw = k.to_raw().unwrap();
        assert!(raw.memory_qos.is_some());
    }
}
