//! Prometheus metrics (`qosd_…`, `process_…`), exposed on `/metrics` by
//! [`crate::telemetry::server`].
//!
//! [`Metrics`] owns a `prometheus-client` registry and offers one typed
//! method per event the daemon reports; it is cheap to share (`Arc<Metrics>`)
//! and every method takes `&self`. [`Metrics::encode`] writes OpenMetrics
//! 1.0 text; [`Metrics::encode_prometheus`] the Prometheus text format 0.0.4
//! (the server picks by the scraper's `Accept`).
//!
//! Conventions: one unit per family (`_bytes`, `_inodes`, `_processes`,
//! `_seconds`); where qosd mirrors a kubelet metric it uses the kubelet's
//! label name `eviction_signal`; what dry-run *would* do is counted in
//! `qosd_dry_run_…` families, never in the real ones. The table of families
//! is [`FAMILIES`] (docs/operations.md lists the same; a test compares).

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use qosd_model::core::model::QosClass;
use qosd_model::policy::evict::threshold::{Signal, SignalResource};

/// Content type of [`Metrics::encode`]'s output (OpenMetrics).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of [`Metrics::encode_prometheus`]'s output.
pub(crate) const CONTENT_TYPE_PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric family qosd exposes (sample names of counters end in
/// `_total`, histograms have `_bucket`, `_sum`, `_count`).
#[cfg(test)]
pub const FAMILIES: &[&str] = &[
    "qosd_evictions_total",
    "qosd_dry_run_evictions_total",
    "qosd_reclaimed_images_total",
    "qosd_reclaimed_containers_total",
    "qosd_eviction_reaction_seconds",
    "qosd_eviction_release_seconds",
    "qosd_eviction_hook_runs_total",
    "qosd_signal_available_bytes",
    "qosd_signal_available_inodes",
    "qosd_signal_available_processes",
    "qosd_signal_capacity_bytes",
    "qosd_signal_capacity_inodes",
    "qosd_signal_capacity_processes",
    "qosd_eviction_threshold_bytes",
    "qosd_eviction_threshold_inodes",
    "qosd_eviction_threshold_processes",
    "qosd_eviction_threshold_met",
    "qosd_signal_pressure_available",
    "qosd_signal_pressure_stall_seconds_total",
    "qosd_signal_pressure_observed_ratio",
    "qosd_signal_pressure_threshold_ratio",
    "qosd_signal_pressure_detector",
    "qosd_node_condition",
    "qosd_reconcile_duration_seconds",
    "qosd_reconciles_total",
    "qosd_last_reconcile_timestamp_seconds",
    "qosd_cgroup_writes_total",
    "qosd_dry_run_cgroup_writes_total",
    "qosd_orphan_cgroups_removed_total",
    "qosd_dry_run_orphan_cgroups_removed_total",
    "qosd_errors_total",
    "qosd_cri_calls_total",
    "qosd_cri_call_failures_total",
    "qosd_cri_call_duration_seconds",
    "qosd_config_reload_total",
    "qosd_config_generation",
    "qosd_pods",
    "qosd_ready",
    "qosd_cgroup_audit_drift",
    "qosd_cgroup_audit_drift_changes_total",
    "qosd_oom_score_adj_differing",
    "qosd_oom_score_adj_writes_total",
    "qosd_oom_score_adj_refused_containers",
    "qosd_kube_api_up",
    "qosd_kube_pods",
    "qosd_api_evictions_total",
    "qosd_api_eviction_events_total",
    "qosd_build_info",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "process_max_fds",
];

/// The CRI methods qosd calls (the `method` label of the `qosd_cri_*`
/// families), initialised at 0.
const CRI_METHODS: [&str; 11] = [
    "Status",
    "ListPodSandbox",
    "PodSandboxStatus",
    "ListContainers",
    "ContainerStatus",
    "ListContainerStats",
    "UpdateContainerResources",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

/// The `kind` label of `qosd_errors_total`: every error qosd counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// A cgroup file could not be written.
    CgroupWrite,
    /// The pod source (CRI runtime or manifests) could not be listed.
    PodSource,
    /// An eviction signal could not be read.
    SignalRead,
    /// An eviction was attempted and failed.
    Eviction,
    /// The eviction hook failed or timed out.
    EvictionHook,
    /// A SIGHUP reload was refused (invalid, or needs a restart).
    ConfigReload,
    /// The runtime's pods live under another cgroup parent (no writes).
    ParentMismatch,
    /// A log line could not be written (stderr full, closed pipe, journal
    /// gone): counted and dropped.
    LogWrite,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::CgroupWrite,
        ErrorKind::PodSource,
        ErrorKind::SignalRead,
        ErrorKind::Eviction,
        ErrorKind::EvictionHook,
        ErrorKind::ConfigReload,
        ErrorKind::ParentMismatch,
        ErrorKind::LogWrite,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::CgroupWrite => "cgroup_write",
            ErrorKind::PodSource => "pod_source",
            ErrorKind::SignalRead => "signal_read",
            ErrorKind::Eviction => "eviction",
            ErrorKind::EvictionHook => "eviction_hook",
            ErrorKind::ConfigReload => "config_reload",
            ErrorKind::ParentMismatch => "parent_mismatch",
            ErrorKind::LogWrite => "log_write",
        }
    }
}

/// Hard or soft threshold (the `kind` label).
use qosd_model::policy::evict::threshold::ThresholdKind;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvictionLabels {
    eviction_signal: String,
    qos_class: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignalLabels {
    eviction_signal: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ThresholdLabels {
    eviction_signal: String,
    kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DetectorLabels {
    eviction_signal: String,
    mode: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLineLabels {
    resource: String,
    line: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    condition: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QosLabels {
    qos_class: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// `qosd_build_info`: the version, always 1.
fn register_build_info(r: &mut Registry) {
    let build = Family::<VersionLabels, Gauge>::default();
    build
        .get_or_create(&VersionLabels {
            version: env!("CARGO_PKG_VERSION").to_string(),
        })
        .set(1);
    r.register("qosd_build_info", "qosd version (always 1)", build);
}

fn cri_histogram() -> Histogram {
    // 100 µs … ~6.5 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

/// One family per unit of the signals' resources.
#[derive(Clone, Default)]
struct PerUnit {
    bytes: Family<SignalLabels, Gauge>,
    inodes: Family<SignalLabels, Gauge>,
    processes: Family<SignalLabels, Gauge>,
}

impl PerUnit {
    fn of(&self, s: Signal) -> &Family<SignalLabels, Gauge> {
        match s.resource() {
            // (pressure signals never get here: [`Metrics::signal`])
            SignalResource::Memory | SignalResource::MemoryStall | SignalResource::Disk => {
                &self.bytes
            }
            SignalResource::Inodes => &self.inodes,
            SignalResource::Pids => &self.processes,
        }
    }

    fn register(&self, r: &mut Registry, name: &str, help: &str) {
        r.register_with_unit(name, help, Unit::Bytes, self.bytes.clone());
        r.register_with_unit(
            name,
            help,
            Unit::Other("inodes".into()),
            self.inodes.clone(),
        );
        r.register_with_unit(
            name,
            help,
            Unit::Other("processes".into()),
            self.processes.clone(),
        );
    }
}

#[derive(Clone, Default)]
struct ThresholdPerUnit {
    bytes: Family<ThresholdLabels, Gauge>,
    inodes: Family<ThresholdLabels, Gauge>,
    processes: Family<ThresholdLabels, Gauge>,
}

/// All of qosd's metrics and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    evictions: Family<EvictionLabels, Counter>,
    dry_run_evictions: Family<EvictionLabels, Counter>,
    reclaimed_images: Counter,
    reclaimed_containers: Counter,
    eviction_reaction: Histogram,
    eviction_release: Histogram,
    hook_runs: Family<ResultLabels, Counter>,
    available: PerUnit,
    capacity: PerUnit,
    threshold_value: ThresholdPerUnit,
    threshold_met: Family<ThresholdLabels, Gauge>,
    pressure_observed: Family<SignalLabels, Gauge<f64, AtomicU64>>,
    pressure_threshold: Family<ThresholdLabels, Gauge<f64, AtomicU64>>,
    pressure_detector: Family<DetectorLabels, Gauge>,
    node_condition: Family<ConditionLabels, Gauge>,
    reconcile_duration: Histogram,
    reconciles: Counter,
    last_reconcile: Gauge<f64, AtomicU64>,
    cgroup_writes: Counter,
    dry_run_cgroup_writes: Counter,
    orphans_removed: Counter,
    dry_run_orphans_removed: Counter,
    errors: Family<KindLabels, Counter>,
    cri_calls: Family<MethodLabels, Counter>,
    cri_duration: HistogramFamily<MethodLabels>,
    cri_failures: Family<MethodLabels, Counter>,
    config_reloads: Family<ResultLabels, Counter>,
    config_generation: Gauge,
    pods: Family<QosLabels, Gauge>,
    ready: Gauge,
    /// The Kubernetes API side's series.
    pub(crate) kube: crate::telemetry::kube_metrics::KubeMetrics,
    audit_drift: Gauge,
    audit_drift_changes: Counter,
    oom_differing: Gauge,
    oom_writes: Counter,
    oom_refused: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics { .. }")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every family registered (pods by class, node
    /// conditions, error kinds and reload results start at 0 so dashboards
    /// and alerts see them before the first event), with the process
    /// metrics of this process (`/proc/self`).
    pub fn new() -> Metrics {
        Metrics::for_node(std::path::Path::new("/proc"))
    }

    /// Like [`Metrics::new`], with the node's pressure files read under
    /// `proc_root` (`<proc_root>/pressure/*`, as the eviction side reads
    /// them); the process metrics stay this process's own.
    pub(crate) fn for_node(proc_root: &std::path::Path) -> Metrics {
        Metrics::with_roots(PathBuf::from("/proc/self"), proc_root.to_path_buf())
    }

    /// Like [`Metrics::new`], with the process metrics read from `proc_self`
    /// (and the pressure files from its parent).
    #[cfg(test)]
    pub(crate) fn with_proc(proc_self: PathBuf) -> Metrics {
        let root = proc_self
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/proc"));
        Metrics::with_roots(proc_self, root)
    }

    fn with_roots(proc_self: PathBuf, proc_root: PathBuf) -> Metrics {
        let m = Metrics::unregistered();
        // The registration order is the order of the scrape.
        let mut r = Registry::default();
        m.kube.register(r.sub_registry_with_prefix("qosd"));
        m.register_eviction(&mut r, proc_root);
        m.register_reconcile(&mut r);
        m.register_runtime_and_state(&mut r);
        register_build_info(&mut r);
        r.register_collector(Box::new(ProcessCollector { proc_self }));
        m.start_known_series();
        m.config_generation.set(1);
        Metrics { registry: r, ..m }
    }

    /// Every family, with no label set yet, and an empty registry.
    fn unregistered() -> Metrics {
        Metrics {
            evictions: Family::default(),
            dry_run_evictions: Family::default(),
            reclaimed_images: Counter::default(),
            reclaimed_containers: Counter::default(),
            // 1 ms … ~4 s
            eviction_reaction: Histogram::new(exponential_buckets(0.001, 2.0, 13)),
            // 1 ms … ~33 s
            eviction_release: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            hook_runs: Family::default(),
            available: PerUnit::default(),
            capacity: PerUnit::default(),
            threshold_value: ThresholdPerUnit::default(),
            threshold_met: Family::default(),
            pressure_observed: Family::default(),
            pressure_threshold: Family::default(),
            pressure_detector: Family::default(),
            node_condition: Family::default(),
            // 1 ms … ~16 s
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            reconciles: Counter::default(),
            last_reconcile: Gauge::default(),
            cgroup_writes: Counter::default(),
            dry_run_cgroup_writes: Counter::default(),
            orphans_removed: Counter::default(),
            dry_run_orphans_removed: Counter::default(),
            errors: Family::default(),
            cri_calls: Family::default(),
            cri_duration: Family::new_with_constructor(cri_histogram),
            cri_failures: Family::default(),
            config_reloads: Family::default(),
            config_generation: Gauge::default(),
            pods: Family::default(),
            ready: Gauge::default(),
            kube: Default::default(),
            audit_drift: Gauge::default(),
            audit_drift_changes: Counter::default(),
            oom_differing: Gauge::default(),
            oom_writes: Counter::default(),
            oom_refused: Gauge::default(),
            registry: Registry::default(),
        }
    }

    /// Evictions, reclaim, hooks, signals, thresholds and node conditions.
    fn register_eviction(&self, r: &mut Registry, proc_root: PathBuf) {
        r.register(
            "qosd_evictions",
            "Pods evicted (enforce mode), by the signal that triggered the eviction and the pod's QoS class (kubelet: kubelet_evictions)",
            self.evictions.clone(),
        );
        r.register(
            "qosd_dry_run_evictions",
            "Pods qosd would have evicted in dry-run mode (each victim once), by signal and QoS class (none was made)",
            self.dry_run_evictions.clone(),
        );
        r.register(
            "qosd_reclaimed_images",
            "Unused images removed by node-level reclaim and image GC",
            self.reclaimed_images.clone(),
        );
        r.register(
            "qosd_reclaimed_containers",
            "Dead containers removed by node-level reclaim before disk evictions",
            self.reclaimed_containers.clone(),
        );
        r.register_with_unit(
            "qosd_eviction_reaction",
            "Time from a threshold crossing being observed to the kill being issued, per eviction",
            Unit::Seconds,
            self.eviction_reaction.clone(),
        );
        r.register_with_unit(
            "qosd_eviction_release",
            "Time from a threshold crossing being observed to the evicted pod's resources being released",
            Unit::Seconds,
            self.eviction_release.clone(),
        );
        r.register(
            "qosd_eviction_hook_runs",
            "Runs of the evictionHook program, by result (ok, failed, timeout)",
            self.hook_runs.clone(),
        );
        self.available.register(
            r,
            "qosd_signal_available",
            "Last observed available amount of each eviction signal",
        );
        self.capacity.register(
            r,
            "qosd_signal_capacity",
            "Capacity each eviction signal is measured against",
        );
        let t = &self.threshold_value;
        let help =
            "Eviction threshold resolved to the signal's unit (percentages applied to capacity)";
        r.register_with_unit(
            "qosd_eviction_threshold",
            help,
            Unit::Bytes,
            t.bytes.clone(),
        );
        r.register_with_unit(
            "qosd_eviction_threshold",
            help,
            Unit::Other("inodes".into()),
            t.inodes.clone(),
        );
        r.register_with_unit(
            "qosd_eviction_threshold",
            help,
            Unit::Other("processes".into()),
            t.processes.clone(),
        );
        r.register(
            "qosd_eviction_threshold_met",
            "1 while an eviction threshold is met (observed below threshold, min-reclaim not yet reached)",
            self.threshold_met.clone(),
        );
        r.register_collector(Box::new(PressureCollector { proc_root }));
        r.register_with_unit(
            "qosd_signal_pressure_observed",
            "Stall of each pressure signal (memory.some, memory.full) in its window at the last eviction pass, as a share of the window",
            Unit::Other("ratio".into()),
            self.pressure_observed.clone(),
        );
        r.register_with_unit(
            "qosd_signal_pressure_threshold",
            "Pressure threshold: the share of the window stalled at which it is met",
            Unit::Other("ratio".into()),
            self.pressure_threshold.clone(),
        );
        r.register(
            "qosd_signal_pressure_detector",
            "1 for how each pressure signal is watched: trigger (the kernel's), poll (the stall counter read every tenth of the window) or unavailable (no PSI: not evaluated)",
            self.pressure_detector.clone(),
        );
        r.register(
            "qosd_node_condition",
            "1 while a node condition (MemoryPressure, DiskPressure, PIDPressure) is set",
            self.node_condition.clone(),
        );
    }

    /// Reconcile passes and the cgroup writes and removals they make.
    fn register_reconcile(&self, r: &mut Registry) {
        r.register_with_unit(
            "qosd_reconcile_duration",
            "Duration of a reconcile pass (list pods, plan, read/compare/write cgroups)",
            Unit::Seconds,
            self.reconcile_duration.clone(),
        );
        r.register(
            "qosd_reconciles",
            "Reconcile passes completed",
            self.reconciles.clone(),
        );
        r.register_with_unit(
            "qosd_last_reconcile_timestamp",
            "Unix time of the end of the last completed reconcile pass",
            Unit::Seconds,
            self.last_reconcile.clone(),
        );
        r.register(
            "qosd_cgroup_writes",
            "cgroup interface file writes made (a steady node makes none)",
            self.cgroup_writes.clone(),
        );
        r.register(
            "qosd_dry_run_cgroup_writes",
            "cgroup writes dry-run mode planned and did not make (counted each pass they are still pending)",
            self.dry_run_cgroup_writes.clone(),
        );
        r.register(
            "qosd_orphan_cgroups_removed",
            "Empty pod cgroups removed after their sandbox went away",
            self.orphans_removed.clone(),
        );
        r.register(
            "qosd_dry_run_orphan_cgroups_removed",
            "Orphaned pod cgroups dry-run mode would have removed",
            self.dry_run_orphans_removed.clone(),
        );
    }

    /// Errors, runtime calls, configuration reloads, pods, the cgroup
    /// audit and readiness.
    fn register_runtime_and_state(&self, r: &mut Registry) {
        r.register(
            "qosd_errors",
            "Errors, by kind (see docs/operations.md for every kind)",
            self.errors.clone(),
        );
        r.register(
            "qosd_cri_calls",
            "CRI calls to the container runtime, by method (retries included in one call)",
            self.cri_calls.clone(),
        );
        r.register(
            "qosd_cri_call_failures",
            "Failed CRI calls, by method",
            self.cri_failures.clone(),
        );
        r.register_with_unit(
            "qosd_cri_call_duration",
            "Latency of CRI calls to the container runtime, by method",
            Unit::Seconds,
            self.cri_duration.clone(),
        );
        r.register(
            "qosd_config_reload",
            "SIGHUP configuration reloads, by result (applied, unchanged, invalid, restart_required)",
            self.config_reloads.clone(),
        );
        r.register(
            "qosd_config_generation",
            "Generation of the configuration in use (1 at start, +1 per applied reload)",
            self.config_generation.clone(),
        );
        r.register("qosd_pods", "Live pods, by QoS class", self.pods.clone());
        r.register(
            "qosd_cgroup_audit_drift",
            "cgroupEnforcement audit: planned cgroup values the cgroups do not hold at the last reconcile (nothing is written)",
            self.audit_drift.clone(),
        );
        r.register(
            "qosd_cgroup_audit_drift_changes",
            "cgroupEnforcement audit: differing cgroup values reported (each new or changed value once)",
            self.audit_drift_changes.clone(),
        );
        r.register(
            "qosd_oom_score_adj_differing",
            "Container processes whose oom_score_adj differs from the kubelet's value after the last reconcile (audit, dry run, refused writes)",
            self.oom_differing.clone(),
        );
        r.register(
            "qosd_oom_score_adj_writes",
            "oom_score_adj values written to container processes (enforce mode)",
            self.oom_writes.clone(),
        );
        r.register(
            "qosd_oom_score_adj_refused_containers",
            "Containers whose oom_score_adj write the kernel refused at the last reconcile (lowering it takes CAP_SYS_RESOURCE)",
            self.oom_refused.clone(),
        );
        r.register(
            "qosd_ready",
            "1 while qosd is ready (runtime reachable, reconciled, cgroup parents match)",
            self.ready.clone(),
        );
    }

    /// Label sets known in advance start at 0, so every family is in the
    /// first scrape (and rate() sees the first increment).
    fn start_known_series(&self) {
        for class in [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ] {
            let _ = self.pods.get_or_create(&QosLabels {
                qos_class: class.as_str().to_string(),
            });
        }
        for cond in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
            let _ = self.node_condition.get_or_create(&ConditionLabels {
                condition: cond.to_string(),
            });
        }
        for k in ErrorKind::ALL {
            let _ = self.errors.get_or_create(&KindLabels {
                kind: k.as_str().to_string(),
            });
        }
        for res in ["applied", "unchanged", "invalid", "restart_required"] {
            let _ = self.config_reloads.get_or_create(&ResultLabels {
                result: res.to_string(),
            });
        }
        // Counters whose label sets are known start at 0, so every family
        // is in the first scrape (and rate() sees the first increment).
        for signal in Signal::ALL.into_iter().chain(Signal::PRESSURE) {
            for class in [
                QosClass::Guaranteed,
                QosClass::Burstable,
                QosClass::BestEffort,
            ] {
                let l = EvictionLabels {
                    eviction_signal: signal.as_str().to_string(),
                    qos_class: class.as_str().to_string(),
                };
                let _ = self.evictions.get_or_create(&l);
                let _ = self.dry_run_evictions.get_or_create(&l);
            }
        }
        for res in ["ok", "failed", "timeout", "skipped"] {
            let _ = self.hook_runs.get_or_create(&ResultLabels {
                result: res.to_string(),
            });
        }
        for method in CRI_METHODS {
            let l = MethodLabels {
                method: method.to_string(),
            };
            let _ = self.cri_calls.get_or_create(&l);
            let _ = self.cri_failures.get_or_create(&l);
            let _ = self.cri_duration.get_or_create(&l);
        }
    }

    /// A pod was evicted (or, `dry_run`, would have been) because of `signal`.
    ///
    /// `signal` is the `eviction_signal` label: the threshold's signal, or
    /// for local-storage evictions the limit exceeded.
    pub fn eviction(&self, signal: &str, qos: QosClass, dry_run: bool) {
        let f = if dry_run {
            &self.dry_run_evictions
        } else {
            &self.evictions
        };
        f.get_or_create(&EvictionLabels {
            eviction_signal: signal.to_string(),
            qos_class: qos.as_str().to_string(),
        })
        .inc();
    }

    /// Node-level reclaim removed images and dead containers.
    pub(crate) fn reclaimed(&self, images: u64, containers: u64) {
        self.reclaimed_images.inc_by(images);
        self.reclaimed_containers.inc_by(containers);
    }

    /// Time from the threshold crossing being observed to the kill being issued.
    pub(crate) fn eviction_reaction(&self, d: Duration) {
        self.eviction_reaction.observe(d.as_secs_f64());
    }

    /// Time from the threshold crossing being observed to the evicted pod's
    /// resources being released.
    pub(crate) fn eviction_release(&self, d: Duration) {
        self.eviction_release.observe(d.as_secs_f64());
    }

    /// One run of the eviction hook (`ok`, `failed`, `timeout`).
    pub(crate) fn hook_run(&self, result: &str) {
        self.hook_runs
            .get_or_create(&ResultLabels {
                result: result.to_string(),
            })
            .inc();
    }

    /// Latest observation of a signal: available amount and capacity, in
    /// the signal's unit (bytes, inodes or processes).
    pub(crate) fn signal(&self, signal: Signal, available: i64, capacity: i64) {
        if signal.is_pressure() {
            // stalled µs of a window of `capacity` µs: a share
            self.pressure_observed(signal, available as f64 / capacity.max(1) as f64);
            return;
        }
        let l = SignalLabels {
            eviction_signal: signal.as_str().to_string(),
        };
        self.available.of(signal).get_or_create(&l).set(available);
        self.capacity.of(signal).get_or_create(&l).set(capacity);
    }

    /// State of one threshold: its resolved value and whether it is met.
    pub(crate) fn threshold(&self, signal: Signal, kind: ThresholdKind, value: i64, met: bool) {
        let l = ThresholdLabels {
            eviction_signal: signal.as_str().to_string(),
            kind: kind.as_str().to_string(),
        };
        let t = &self.threshold_value;
        let f = match signal.resource() {
            SignalResource::Memory | SignalResource::Disk => &t.bytes,
            SignalResource::Inodes => &t.inodes,
            SignalResource::Pids => &t.processes,
            // in its own family ([`Metrics::pressure_threshold`])
            SignalResource::MemoryStall => {
                self.threshold_met.get_or_create(&l).set(i64::from(met));
                return;
            }
        };
        f.get_or_create(&l).set(value);
        self.threshold_met.get_or_create(&l).set(i64::from(met));
    }

    /// A pressure signal's stall in its window, as a share of the window.
    pub(crate) fn pressure_observed(&self, signal: Signal, share: f64) {
        self.pressure_observed
            .get_or_create(&SignalLabels {
                eviction_signal: signal.as_str().to_string(),
            })
            .set(share);
    }

    /// A pressure threshold: its share of the window and whether it is met.
    pub(crate) fn pressure_threshold(
        &self,
        signal: Signal,
        kind: ThresholdKind,
        share: f64,
        met: bool,
    ) {
        let l = ThresholdLabels {
            eviction_signal: signal.as_str().to_string(),
            kind: kind.as_str().to_string(),
        };
        self.pressure_threshold.get_or_create(&l).set(share);
        self.threshold_met.get_or_create(&l).set(i64::from(met));
    }

    /// How a pressure signal is watched (`trigger`, `poll`, `unavailable`):
    /// 1 for its mode, 0 for the others.
    pub(crate) fn pressure_detector(&self, signal: Signal, mode: &str) {
        for m in ["trigger", "poll", "unavailable"] {
            self.pressure_detector
                .get_or_create(&DetectorLabels {
                    eviction_signal: signal.as_str().to_string(),
                    mode: m.to_string(),
                })
                .set(i64::from(m == mode));
        }
    }

    /// Forget every threshold series (a reload changed the thresholds).
    pub(crate) fn clear_thresholds(&self) {
        let t = &self.threshold_value;
        t.bytes.clear();
        t.inodes.clear();
        t.processes.clear();
        self.threshold_met.clear();
        self.pressure_observed.clear();
        self.pressure_threshold.clear();
        self.pressure_detector.clear();
    }

    /// A node condition (`MemoryPressure`, `DiskPressure`, `PIDPressure`).
    pub(crate) fn node_condition(&self, condition: &str, active: bool) {
        self.node_condition
            .get_or_create(&ConditionLabels {
                condition: condition.to_string(),
            })
            .set(i64::from(active));
    }

    /// A reconcile pass finished after `d` (also stamps the time).
    pub fn reconcile_done(&self, d: Duration) {
        self.reconcile_duration.observe(d.as_secs_f64());
        self.reconciles.inc();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        self.last_reconcile.set(now);
    }

    /// `n` cgroup files were written (`dry_run`: would have been).
    pub fn cgroup_writes(&self, n: u64, dry_run: bool) {
        if dry_run {
            self.dry_run_cgroup_writes.inc_by(n);
        } else {
            self.cgroup_writes.inc_by(n);
        }
    }

    /// `n` orphaned pod cgroups were removed (`dry_run`: would have been).
    pub(crate) fn orphans_removed(&self, n: u64, dry_run: bool) {
        if dry_run {
            self.dry_run_orphans_removed.inc_by(n);
        } else {
            self.orphans_removed.inc_by(n);
        }
    }

    /// An error of some kind.
    pub(crate) fn error(&self, kind: ErrorKind) {
        self.errors
            .get_or_create(&KindLabels {
                kind: kind.as_str().to_string(),
            })
            .inc();
    }

    /// A CRI call (`method` e.g. `ListPodSandbox`) took `d`; `ok` false counts a failure.
    pub(crate) fn cri_call(&self, method: &str, d: Duration, ok: bool) {
        let l = MethodLabels {
            method: method.to_string(),
        };
        self.cri_calls.get_or_create(&l).inc();
        self.cri_duration.get_or_create(&l).observe(d.as_secs_f64());
        if !ok {
            self.cri_failures.get_or_create(&l).inc();
        }
    }

    /// A SIGHUP reload ended with `result`; `generation` is the config in use.
    pub(crate) fn config_reload(&self, result: &str, generation: u64) {
        self.config_reloads
            .get_or_create(&ResultLabels {
                result: result.to_string(),
            })
            .inc();
        self.config_generation.set(generation as i64);
    }

    /// Audit: `drifting` planned values differ now, `changes` of them are
    /// new or changed since the last pass.
    /// A pass over the container processes' `oom_score_adj`.
    pub(crate) fn oom_score_adj(&self, differing: usize, written: usize, refused: usize) {
        self.oom_differing.set(differing as i64);
        self.oom_writes.inc_by(written as u64);
        self.oom_refused.set(refused as i64);
    }

    pub(crate) fn audit_drift(&self, drifting: usize, changes: usize) {
        self.audit_drift.set(drifting as i64);
        self.audit_drift_changes.inc_by(changes as u64);
    }

    /// Live pods of a QoS class.
    pub fn pods(&self, qos: QosClass, n: usize) {
        self.pods
            .get_or_create(&QosLabels {
                qos_class: qos.as_str().to_string(),
            })
            .set(n as i64);
    }

    /// Readiness (also on `/readyz`).
    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// The registry in OpenMetrics text format ([`CONTENT_TYPE`]).
    pub(crate) fn encode(&self) -> String {
        let mut s = String::with_capacity(8192);
        prometheus_client::encoding::text::encode(&mut s, &self.registry)
            .expect("encoding to a String cannot fail");
        s
    }

    /// The registry in the Prometheus text format 0.0.4
    /// ([`CONTENT_TYPE_PROMETHEUS`]).
    pub fn encode_prometheus(&self) -> String {
        openmetrics_to_prometheus(&self.encode())
    }
}

/// OpenMetrics text → Prometheus text 0.0.4: counters' HELP and TYPE name
/// the `_total` sample, `# UNIT` and `# EOF` go, `unknown` is `untyped`.
pub(crate) fn openmetrics_to_prometheus(om: &str) -> String {
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = if counters.contains(name) {
                    format!("{name}_total")
                } else {
                    name.to_string()
                };
                let tail = if p == "# TYPE " && tail == "unknown" {
                    "untyped"
                } else {
                    tail
                };
                out.push_str(&format!("{p}{name} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The node's pressure stall information, read at scrape time from
/// `<proc>/pressure/{memory,io,cpu}`: whether each file is there
/// (`qosd_signal_pressure_available`, 0 without PSI) and, where it is, the
/// kernel's cumulative stall (`qosd_signal_pressure_stall_seconds_total`;
/// no sample where it is not: unknown is not 0).
#[derive(Debug)]
struct PressureCollector {
    proc_root: PathBuf,
}

impl Collector for PressureCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use qosd_node::sys::pressure::{node_availability, Line, Resource};
        let readings: Vec<(Resource, Option<qosd_node::sys::pressure::Reading>)> = Resource::ALL
            .into_iter()
            .map(|r| (r, node_availability(&self.proc_root, r).ok()))
            .collect();
        {
            let mut m = encoder.encode_descriptor(
                "qosd_signal_pressure_available",
                "1 when the node's pressure stall information of the resource (memory, io, cpu) can be read, 0 when not (a kernel without PSI or booted psi=0): pressure thresholds on it are not evaluated",
                None,
                MetricType::Gauge,
            )?;
            for (r, reading) in &readings {
                let l = ResourceLabels {
                    resource: r.as_str().to_string(),
                };
                ConstGauge::new(i64::from(reading.is_some())).encode(m.encode_family(&l)?)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "qosd_signal_pressure_stall",
            "The node's cumulative time stalled on the resource (the pressure file's total), by line: some (at least one task) or full (every non-idle task)",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        for (r, reading) in &readings {
            let Some(reading) = reading else { continue };
            for line in [Line::Some, Line::Full] {
                let Some(v) = reading.line(line) else {
                    continue;
                };
                let l = ResourceLineLabels {
                    resource: r.as_str().to_string(),
                    line: line.as_str().to_string(),
                };
                ConstCounter::new(v.total_us as f64 / 1e6).encode(m.encode_family(&l)?)?;
            }
        }
        Ok(())
    }
}

/// The standard `process_*` metrics of this process, read at scrape time.
#[derive(Debug)]
struct ProcessCollector {
    proc_self: PathBuf,
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(p) = qosd_node::sys::process::stats(&self.proc_self) else {
            return Ok(());
        };
        let c = ConstCounter::new(p.cpu_seconds);
        c.encode(encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent in seconds",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?)?;
        for (name, help, unit, v) in [
            (
                "process_resident_memory",
                "Resident memory size in bytes",
                Some(Unit::Bytes),
                p.resident_bytes as f64,
            ),
            (
                "process_virtual_memory",
                "Virtual memory size in bytes",
                Some(Unit::Bytes),
                p.virtual_bytes as f64,
            ),
            (
                "process_start_time",
                "Start time of the process since unix epoch in seconds",
                Some(Unit::Seconds),
                p.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                None,
                p.open_fds as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                None,
                p.max_fds as f64,
            ),
        ] {
            ConstGauge::new(v).encode(encoder.encode_descriptor(
                name,
                help,
                unit.as_ref(),
                MetricType::Gauge,
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Value of the sample line starting with `prefix` (name + labels).
    fn sample(text: &str, prefix: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(prefix) && l[prefix.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    fn families_of(text: &str) -> std::collections::BTreeSet<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let (name, ty) = l.split_once(' ').unwrap();
                if ty == "counter" && !name.ends_with("_total") {
                    format!("{name}_total")
                } else {
                    name.to_string()
                }
            })
            .collect()
    }

    fn exercised() -> Metrics {
        let m = Metrics::new();
        m.eviction("memory.available", QosClass::BestEffort, false);
        m.eviction("memory.available", QosClass::BestEffort, true);
        m.eviction_reaction(Duration::from_millis(7));
        m.eviction_release(Duration::from_millis(70));
        m.hook_run("ok");
        m.signal(Signal::MemoryAvailable, 1, 2);
        m.signal(Signal::NodeFsInodesFree, 1, 2);
        m.signal(Signal::PidAvailable, 1, 2);
        m.threshold(Signal::MemoryAvailable, ThresholdKind::Hard, 1, false);
        m.threshold(Signal::NodeFsInodesFree, ThresholdKind::Hard, 1, false);
        m.threshold(Signal::PidAvailable, ThresholdKind::Hard, 1, true);
        m.pressure_observed(Signal::MemoryFull, 0.25);
        m.pressure_threshold(Signal::MemoryFull, ThresholdKind::Hard, 0.1, true);
        m.pressure_detector(Signal::MemoryFull, "trigger");
        m.cri_call("Version", Duration::from_millis(1), false);
        m.kube.set_pods(1, 1);
        m.kube.eviction_path("evicted");
        m.kube.event(true);
        m
    }

    #[test]
    fn every_family_is_listed_and_exposed() {
        let t = exercised().encode();
        let got = families_of(&t);
        let want: std::collections::BTreeSet<String> =
            FAMILIES.iter().map(|s| s.to_string()).collect();
        assert_eq!(got, want, "FAMILIES and the registry differ");
        assert!(t.ends_with("# EOF\n"));
        assert!(
            t.contains("# TYPE qosd_signal_available_inodes gauge\n"),
            "{t}"
        );
        assert!(
            t.contains("# UNIT qosd_signal_available_inodes inodes\n"),
            "{t}"
        );
        assert_eq!(
            sample(
                &t,
                "qosd_signal_available_processes{eviction_signal=\"pid.available\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(&t, "qosd_errors_total{kind=\"parent_mismatch\"}"),
            Some(0.0)
        );
        assert!(sample(&t, "process_resident_memory_bytes").unwrap() > 0.0);
        assert!(sample(&t, "process_open_fds").unwrap() > 0.0);
    }

    /// The node's pressure files at scrape time: there or not (0, never a
    /// silent absence), and the kernel's totals only where there.
    #[test]
    fn pressure_files_at_scrape_time() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("pressure")).unwrap();
        std::fs::write(
            d.path().join("pressure/memory"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=2500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n",
        )
        .unwrap();
        let t = Metrics::with_proc(d.path().join("self")).encode();
        let s = |p: &str| sample(&t, p);
        assert_eq!(
            s("qosd_signal_pressure_available{resource=\"memory\"}"),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            s("qosd_signal_pressure_available{resource=\"io\"}"),
            Some(0.0)
        );
        assert_eq!(
            s("qosd_signal_pressure_available{resource=\"cpu\"}"),
            Some(0.0)
        );
        assert_eq!(
            s("qosd_signal_pressure_stall_seconds_total{resource=\"memory\",line=\"some\"}"),
            Some(2.5)
        );
        assert_eq!(
            s("qosd_signal_pressure_stall_seconds_total{resource=\"memory\",line=\"full\"}"),
            Some(1.0)
        );
        assert!(
            !t.contains("qosd_signal_pressure_stall_seconds_total{resource=\"io\""),
            "{t}"
        );
        assert!(
            t.contains("# TYPE qosd_signal_pressure_stall_seconds counter\n"),
            "{t}"
        );
        let m = Metrics::new();
        m.pressure_detector(Signal::MemorySome, "poll");
        m.pressure_observed(Signal::MemorySome, 0.125);
        let t = m.encode();
        assert_eq!(
            sample(
                &t,
                "qosd_signal_pressure_detector{eviction_signal=\"memory.some\",mode=\"poll\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &t,
                "qosd_signal_pressure_detector{eviction_signal=\"memory.some\",mode=\"trigger\"}"
            ),
            Some(0.0)
        );
        assert_eq!(
            sample(
                &t,
                "qosd_signal_pressure_observed_ratio{eviction_signal=\"memory.some\"}"
            ),
            Some(0.125)
        );
    }

    #[test]
    fn prometheus_text_names_counters_by_their_samples() {
        let p = exercised().encode_prometheus();
        assert!(
            p.contains("# HELP qosd_evictions_total Pods evicted"),
            "{p}"
        );
        assert!(p.contains("# TYPE qosd_evictions_total counter\n"), "{p}");
        assert!(
            p.contains("# TYPE process_cpu_seconds_total counter\n"),
            "{p}"
        );
        assert!(!p.contains("# UNIT") && !p.contains("# EOF"), "{p}");
        assert!(p.contains("# TYPE qosd_eviction_reaction_seconds histogram\n"));
    }

    #[test]
    fn methods_update_samples() {
        let m = Metrics::new();
        m.eviction("memory.available", QosClass::BestEffort, false);
        m.eviction("memory.available", QosClass::BestEffort, false);
        m.eviction("nodefs.available", QosClass::Burstable, true);
        m.signal(Signal::MemoryAvailable, 123_456_789, 1 << 30);
        m.threshold(
            Signal::MemoryAvailable,
            ThresholdKind::Hard,
            104_857_600,
            true,
        );
        m.node_condition("MemoryPressure", true);
        m.reconcile_done(Duration::from_millis(3));
        m.cgroup_writes(5, false);
        m.cgroup_writes(2, false);
        m.cgroup_writes(9, true);
        m.error(ErrorKind::CgroupWrite);
        m.cri_call("ListPodSandbox", Duration::from_micros(900), true);
        m.cri_call("StopPodSandbox", Duration::from_millis(110), false);
        m.pods(QosClass::Guaranteed, 3);
        m.eviction_reaction(Duration::from_millis(7));
        m.config_reload("applied", 2);
        let t = m.encode();
        let s = |p: &str| sample(&t, p).unwrap_or_else(|| panic!("no {p} in\n{t}"));
        assert_eq!(
            s("qosd_evictions_total{eviction_signal=\"memory.available\",qos_class=\"BestEffort\"}"),
            2.0
        );
        assert_eq!(
            s("qosd_dry_run_evictions_total{eviction_signal=\"nodefs.available\",qos_class=\"Burstable\"}"),
            1.0
        );
        // Known label sets start at 0: dry-run counts only in its own family.
        assert_eq!(
            s("qosd_evictions_total{eviction_signal=\"nodefs.available\",qos_class=\"Burstable\"}"),
            0.0
        );
        assert_eq!(
            s("qosd_signal_available_bytes{eviction_signal=\"memory.available\"}"),
            123_456_789.0
        );
        assert_eq!(
            s("qosd_eviction_threshold_met{eviction_signal=\"memory.available\",kind=\"hard\"}"),
            1.0
        );
        assert_eq!(
            s("qosd_eviction_threshold_bytes{eviction_signal=\"memory.available\",kind=\"hard\"}"),
            104_857_600.0
        );
        assert_eq!(s("qosd_node_condition{condition=\"MemoryPressure\"}"), 1.0);
        assert_eq!(s("qosd_reconcile_duration_seconds_count"), 1.0);
        assert_eq!(s("qosd_reconciles_total"), 1.0);
        assert!(s("qosd_last_reconcile_timestamp_seconds") > 1.6e9);
        assert_eq!(s("qosd_cgroup_writes_total"), 7.0);
        assert_eq!(s("qosd_dry_run_cgroup_writes_total"), 9.0);
        assert_eq!(s("qosd_errors_total{kind=\"cgroup_write\"}"), 1.0);
        assert_eq!(s("qosd_cri_calls_total{method=\"ListPodSandbox\"}"), 1.0);
        assert_eq!(
            s("qosd_cri_call_duration_seconds_count{method=\"ListPodSandbox\"}"),
            1.0
        );
        assert_eq!(
            s("qosd_cri_call_failures_total{method=\"StopPodSandbox\"}"),
            1.0
        );
        assert_eq!(
            s("qosd_cri_call_failures_total{method=\"ListPodSandbox\"}"),
            0.0
        );
        assert_eq!(s("qosd_pods{qos_class=\"Guaranteed\"}"), 3.0);
        assert_eq!(s("qosd_eviction_reaction_seconds_count"), 1.0);
        assert_eq!(
            s("qosd_eviction_reaction_seconds_bucket{le=\"0.008\"}"),
            1.0
        );
        assert_eq!(s("qosd_config_reload_total{result=\"applied\"}"), 1.0);
        assert_eq!(s("qosd_config_generation"), 2.0);
        m.clear_thresholds();
        assert!(!m.encode().contains("qosd_eviction_threshold_bytes{"));
    }
}
