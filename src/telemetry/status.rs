//! The status document: what `/status` serves (as JSON) and `qosd status`
//! shows (the command renders it as text itself).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// What `/status` serves and `qosd status` shows: node signals against
/// thresholds, conditions, pods by QoS class, recent evictions. The daemon
/// fills it (all fields default, so older/newer readers cope).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatusDoc {
    /// qosd version.
    pub(crate) version: String,
    /// Unix time (ms) the daemon produced this document; absent before the
    /// first reconcile (nothing produced yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) generated_at_ms: Option<u64>,
    /// `enforce` or `dry-run`.
    pub mode: String,
    /// `v1` / `v2`.
    pub(crate) cgroup_version: String,
    /// `cgroupfs` / `systemd`.
    pub(crate) cgroup_driver: String,
    /// Filled by the server at request time.
    pub alive: bool,
    /// Filled by the server at request time.
    pub ready: bool,
    pub(crate) not_ready_reason: Option<String>,
    pub(crate) signals: Vec<SignalStatus>,
    pub(crate) conditions: Vec<ConditionStatus>,
    pub pods: PodCounts,
    /// The pod counts are not known (no listing yet, or the runtime did not
    /// answer): `pods` is zero then, not a count. Present only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) pods_unknown: bool,
    /// Most recent first, at most [`StatusDoc::MAX_EVICTIONS`].
    pub last_evictions: Vec<EvictionRecord>,
    pub(crate) last_reconcile: Option<ReconcileStatus>,
    /// The configuration in use: 1 at start, +1 per applied SIGHUP reload.
    pub(crate) config_generation: u64,
    /// Unix time (ms) the configuration in use was loaded.
    pub(crate) config_loaded_at_ms: u64,
    /// The last SIGHUP reload's result (`applied`, `unchanged`, `invalid`,
    /// `restart_required`) and why, when it was not applied.
    pub(crate) last_reload: Option<String>,
    /// Degraded modes in force (`kubernetes-api: …`): working, with less.
    pub(crate) degraded: Vec<String>,
    /// The Kubernetes API side (absent when not configured).
    pub(crate) kubernetes: Option<KubeStatus>,
    /// `enforce` or `audit` (cgroupEnforcement).
    pub(crate) cgroup_enforcement: String,
    /// `cgroupEnforcement: audit`: the planned values the cgroups do not hold.
    pub(crate) audit: Option<AuditStatus>,
    /// Container processes' `oom_score_adj` against the kubelet's value
    /// (absent with manifests, and before the first reconcile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) oom_score_adj: Option<OomScoreStatus>,
    /// Per-pod usage as the eviction manager last measured it (memory
    /// working set, local ephemeral storage, inodes, processes). Measured
    /// when a threshold is near and on demand: `/status` asks for a
    /// measurement when this is over a second old.
    pub(crate) pod_usage: Vec<PodUsage>,
    /// Unix time (ms) `pod_usage` was measured (None: not yet).
    pub(crate) pod_usage_at_ms: Option<u64>,
    /// The runtime's event stream (containerd): `live`, `down: <why>` or
    /// `unsupported: <why>` (None: manifests, or no attempt ended yet).
    pub(crate) runtime_events: Option<String>,
}

pub use qosd_node::pods::KubeStatus;

/// A planned cgroup value the cgroup does not hold (audit).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct DriftValue {
    /// The interface file.
    pub(crate) file: String,
    /// What qosd (the kubelet's rules) plans.
    pub(crate) planned: String,
    /// What the file holds; `None` when the cgroup or file does not exist.
    pub(crate) found: Option<String>,
}

/// Drift found by `cgroupEnforcement: audit` at the last reconcile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct AuditStatus {
    /// Planned values that differ now.
    pub(crate) drifting: usize,
    /// Differences reported since start (each new or changed value once).
    pub(crate) changes_total: u64,
    /// The differing values (at most [`AuditStatus::MAX_VALUES`]).
    pub(crate) values: Vec<DriftValue>,
}

/// One process whose value differs from the plan (or was set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub(crate) struct OomValue {
    pub(crate) namespace: String,
    pub(crate) pod: String,
    pub(crate) container: String,
    pub(crate) pid: i32,
    /// The kubelet's value.
    pub(crate) planned: i64,
    /// What the process held.
    pub(crate) found: i64,
}

/// A container whose processes the kernel would not give the planned value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub(crate) struct OomRefusal {
    pub(crate) namespace: String,
    pub(crate) pod: String,
    pub(crate) container: String,
    pub(crate) planned: i64,
    pub(crate) found: i64,
    pub(crate) error: String,
}

/// Container processes' `oom_score_adj` at the last reconcile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct OomScoreStatus {
    /// `enforce` (differing values written), `audit` or `dry-run`
    /// (reported, not written).
    pub(crate) mode: String,
    /// Container processes checked.
    pub(crate) processes: usize,
    /// Processes holding another value than the kubelet's after the pass
    /// (audit and dry run: every difference; enforce: refused writes).
    pub(crate) differing: usize,
    /// Values written since start.
    pub(crate) written_total: u64,
    /// Containers whose write the kernel refused at the last pass.
    pub(crate) refused_containers: usize,
    /// Differences and refusals reported since start (each once).
    pub(crate) changes_total: u64,
    /// The differing processes (at most [`AuditStatus::MAX_VALUES`]).
    pub(crate) values: Vec<OomValue>,
    /// The refusing containers (at most [`AuditStatus::MAX_VALUES`]).
    pub(crate) refused: Vec<OomRefusal>,
}

impl AuditStatus {
    /// How many differing values `/status` lists.
    pub(crate) const MAX_VALUES: usize = 100;
}

/// One pod's measured usage (`None`: not measured).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PodUsage {
    pub(crate) uid: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) qos_class: String,
    pub(crate) memory_working_set_bytes: Option<u64>,
    /// Writable layers + logs + local volumes.
    pub(crate) ephemeral_storage_bytes: Option<u64>,
    pub(crate) inodes: Option<u64>,
    pub(crate) processes: Option<u64>,
    pub(crate) writable_layer_bytes: Option<u64>,
    pub(crate) logs_bytes: Option<u64>,
    pub(crate) volumes_bytes: Option<u64>,
}

/// One eviction signal and its thresholds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct SignalStatus {
    /// e.g. `memory.available`.
    pub(crate) signal: String,
    /// Observed value (bytes, inodes or PIDs); `None` when unavailable.
    pub(crate) observed: Option<i64>,
    /// Capacity the signal is measured against.
    pub(crate) capacity: Option<i64>,
    pub(crate) thresholds: Vec<ThresholdStatus>,
    /// Pressure signals (`memory.some`, `memory.full`): how they are
    /// watched and the kernel's averages. `observed` and `capacity` are
    /// then the stalled µs and the window in µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pressure: Option<PressureDetail>,
}

/// How a pressure signal is watched, and what the kernel reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PressureDetail {
    /// `trigger`, `poll` or `unavailable`.
    pub(crate) mode: String,
    /// The mode with its reason (`unavailable: <why>`).
    pub(crate) detail: String,
    /// The thresholds' window (Go duration).
    pub(crate) window: String,
    /// The observed stall as a percentage of the window (`None`: unknown).
    pub(crate) stall_percent: Option<f64>,
    /// The kernel's 10 s, 60 s and 300 s averages of the line, percent
    /// (`None`: not read).
    pub(crate) avg10: Option<f64>,
    pub(crate) avg60: Option<f64>,
    pub(crate) avg300: Option<f64>,
}

/// One threshold of a signal.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ThresholdStatus {
    /// `hard` or `soft`.
    pub(crate) kind: String,
    /// As configured (`100Mi`, `10%`).
    pub(crate) threshold: String,
    /// Resolved to the signal's unit; `None` (JSON null) for a percentage
    /// before the signal's capacity is known.
    pub(crate) value: Option<i64>,
    pub(crate) met: bool,
    /// Soft thresholds: the grace period (Go duration).
    pub(crate) grace_period: Option<String>,
    /// Minimum reclaim, as configured.
    pub(crate) min_reclaim: Option<String>,
}

/// A node condition.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ConditionStatus {
    /// `MemoryPressure`, `DiskPressure`, `PIDPressure`.
    pub(crate) condition: String,
    pub(crate) active: bool,
    /// Unix time (ms) of the last transition.
    pub(crate) since_ms: Option<u64>,
    pub(crate) reason: Option<String>,
}

/// Live pods by QoS class.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodCounts {
    pub(crate) guaranteed: usize,
    pub burstable: usize,
    pub(crate) best_effort: usize,
}

impl PodCounts {
    /// Pods by QoS class (the classes the daemon counts).
    pub(crate) fn of(pods: &[qosd_model::core::model::Pod]) -> PodCounts {
        let mut c = PodCounts::default();
        for p in pods {
            match qosd_model::core::qos::classify(p).class {
                qosd_model::core::model::QosClass::Guaranteed => c.guaranteed += 1,
                qosd_model::core::model::QosClass::Burstable => c.burstable += 1,
                qosd_model::core::model::QosClass::BestEffort => c.best_effort += 1,
            }
        }
        c
    }
}

impl PodCounts {
    pub fn total(&self) -> usize {
        self.guaranteed + self.burstable + self.best_effort
    }
}

/// One eviction qosd made (or would have made, in dry-run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EvictionRecord {
    /// Unix time (ms).
    pub at_ms: u64,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub qos_class: String,
    pub priority: i32,
    pub signal: String,
    pub observed: i64,
    pub threshold: i64,
    /// `hard` or `soft`.
    pub threshold_kind: String,
    /// What the ranking compared, in the signal's unit (bytes; inodes for
    /// `*.inodesFree`; processes for `pid.available`).
    pub usage: Option<i64>,
    /// Always bytes (for the count signals: local storage for inodes, the
    /// memory working set for processes).
    pub usage_bytes: Option<i64>,
    pub request_bytes: Option<i64>,
    /// Position in the ranking (0: first).
    pub rank: usize,
    /// `kill`, `cri` or `dry-run`.
    pub backend: String,
    /// The crossing's first read (watcher or pass) → kill issued.
    pub reaction_ms: Option<f64>,
    /// Which source made that read: `watcher` or `pass`.
    pub detected_by: Option<String>,
    /// Time between that read and the same source's previous one: the
    /// crossing happened at most this long before the reaction started,
    /// unseen (not in `reaction_ms`).
    pub detection_gap_ms: Option<f64>,
}

/// The last reconcile pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ReconcileStatus {
    /// Unix time (ms) it finished.
    pub(crate) at_ms: u64,
    pub(crate) duration_ms: f64,
    pub(crate) writes: u64,
    pub(crate) errors: u64,
    pub(crate) pods: usize,
}

impl StatusDoc {
    /// How many evictions `last_evictions` keeps.
    pub(crate) const MAX_EVICTIONS: usize = 20;

    /// A document stamped with this version and the current time.
    pub fn new() -> StatusDoc {
        StatusDoc {
            version: env!("CARGO_PKG_VERSION").to_string(),
            generated_at_ms: Some(now_ms()),
            ..StatusDoc::default()
        }
    }

    /// Record an eviction (most recent first, bounded).
    pub fn push_eviction(&mut self, rec: EvictionRecord) {
        self.last_evictions.insert(0, rec);
        self.last_evictions.truncate(Self::MAX_EVICTIONS);
    }
}

/// The name of a mode in the status document and the logs.
pub(crate) fn mode_name(dry_run: bool) -> &'static str {
    if dry_run {
        "dry-run"
    } else {
        "enforce"
    }
}

impl StatusDoc {
    /// The setup every document states: the mode, the cgroup version (when
    /// known) and the cgroup driver.
    pub(crate) fn set_setup(
        &mut self,
        dry_run: bool,
        version: Option<qosd_model::core::model::CgroupVersion>,
        driver: qosd_model::core::model::CgroupDriver,
    ) {
        self.mode = mode_name(dry_run).to_string();
        if let Some(v) = version {
            self.cgroup_version = v.to_string();
        }
        self.cgroup_driver = driver.to_string();
    }
}

/// Add what the pressure watcher reports (mode, window, the kernel's
/// averages) to the pressure signals' entries; a watched signal without a
/// threshold status gets an entry of its own, so an unavailable one is
/// never silently absent.
pub(crate) fn add_pressure(
    signals: &mut Vec<SignalStatus>,
    pressure: &[qosd_node::sys::pressure::PressureStatus],
) {
    for p in pressure {
        let name = p.signal.as_str();
        let i = match signals.iter().position(|s| s.signal == name) {
            Some(i) => i,
            None => {
                signals.push(SignalStatus {
                    signal: name.to_string(),
                    ..Default::default()
                });
                signals.len() - 1
            }
        };
        let s = &mut signals[i];
        let line = qosd_node::sys::pressure::Line::of(p.signal);
        let values = p
            .reading
            .as_ref()
            .zip(line)
            .and_then(|(r, l)| r.line(l).copied());
        s.pressure = Some(PressureDetail {
            mode: p.mode.as_str().to_string(),
            detail: match &p.error {
                Some(e) => format!("{}; last read failed: {e}", p.mode.describe()),
                None => p.mode.describe(),
            },
            window: qosd_model::core::duration::format_go_duration(p.window),
            stall_percent: match (s.observed, s.capacity) {
                (Some(o), Some(c)) if c > 0 => Some(o as f64 * 100.0 / c as f64),
                _ => None,
            },
            avg10: values.map(|v| v.avg10),
            avg60: values.map(|v| v.avg60),
            avg300: values.map(|v| v.avg300),
        });
    }
}

/// Unix time in milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// The one builder of the document's eviction part: each signal with its
/// thresholds (as configured, e.g. `memory.available<100Mi`, the absolute
/// line against the observed capacity, met or not), and the node
/// conditions (`active`: the manager's, which outlast the thresholds by the
/// pressure transition period; `None`: those the met thresholds imply),
/// with the met thresholds as reasons. Used by the daemon (its last
/// decision) and by `qosd status` when it reads the signals itself.
pub(crate) fn eviction_status(
    thresholds: &[qosd_model::policy::evict::manager::ThresholdStatus],
    memory_always: Option<qosd_model::policy::evict::manager::Observation>,
    active: Option<&[qosd_model::policy::evict::threshold::NodeCondition]>,
) -> (Vec<SignalStatus>, Vec<ConditionStatus>) {
    use qosd_model::core::duration::format_go_duration;
    use qosd_model::policy::evict::threshold::{
        NodeCondition, Signal, ThresholdKind, ThresholdValue,
    };
    use std::collections::BTreeMap;
    let mut by_signal: BTreeMap<Signal, SignalStatus> = BTreeMap::new();
    if let Some(o) = memory_always {
        by_signal.insert(
            Signal::MemoryAvailable,
            SignalStatus {
                signal: Signal::MemoryAvailable.to_string(),
                observed: Some(o.available),
                capacity: Some(o.capacity),
                thresholds: Vec::new(),
                pressure: None,
            },
        );
    }
    let mut met: BTreeMap<NodeCondition, Vec<String>> = BTreeMap::new();
    for t in thresholds {
        let sig = t.threshold.signal;
        let entry = by_signal.entry(sig).or_insert_with(|| SignalStatus {
            signal: sig.to_string(),
            observed: None,
            capacity: None,
            thresholds: Vec::new(),
            pressure: None,
        });
        if let Some(o) = t.observed {
            entry.observed = Some(o.available);
            entry.capacity = Some(o.capacity);
        }
        if t.met {
            met.entry(sig.node_condition()).or_default().push(format!(
                "{} {}",
                t.threshold.kind,
                t.threshold.statement()
            ));
        }
        entry.thresholds.push(ThresholdStatus {
            kind: t.threshold.kind.as_str().to_string(),
            threshold: t.threshold.value.to_string(),
            value: match (t.observed, t.threshold.value) {
                (Some(o), _) => Some(t.threshold.threshold_for(o.capacity)),
                (None, ThresholdValue::Quantity(q)) => Some(q),
                (None, ThresholdValue::Percentage(_)) => None,
                (None, ThresholdValue::Stall { share, window }) => {
                    Some(qosd_model::policy::evict::pressure::stall_us(share, window) as i64)
                }
            },
            met: t.met,
            grace_period: (t.threshold.kind == ThresholdKind::Soft)
                .then(|| format_go_duration(t.threshold.grace_period)),
            min_reclaim: t.threshold.min_reclaim.map(|v| v.to_string()),
        });
    }
    let conditions = [
        NodeCondition::MemoryPressure,
        NodeCondition::DiskPressure,
        NodeCondition::PIDPressure,
    ]
    .into_iter()
    .map(|c| ConditionStatus {
        condition: c.as_str().to_string(),
        active: match active {
            Some(a) => a.contains(&c),
            None => met.contains_key(&c),
        },
        since_ms: None,
        reason: met.get(&c).map(|v| format!("met: {}", v.join(", "))),
    })
    .collect();
    (by_signal.into_values().collect(), conditions)
}
