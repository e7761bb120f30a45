//! Prometheus metrics (`qosd_…`), exposed on `/metrics` by [`crate::telemetry::server`].
//!
//! [`Metrics`] owns a `prometheus-client` registry and offers one typed
//! method per event the daemon reports; it is cheap to share (`Arc<Metrics>`)
//! and every method takes `&self`. The encoding is OpenMetrics text
//! ([`CONTENT_TYPE`]), which Prometheus scrapes natively.
//!
//! | family | type | labels |
//! |---|---|---|
//! | `qosd_evictions_total` | counter | `signal`, `qos_class` |
//! | `qosd_dry_run_evictions_total` | counter | `signal`, `qos_class` |
//! | `qosd_reclaimed_images_total` | counter | — |
//! | `qosd_reclaimed_containers_total` | counter | — |
//! | `qosd_eviction_reaction_seconds` | histogram | — |
//! | `qosd_signal_observed` | gauge | `signal` |
//! | `qosd_signal_capacity` | gauge | `signal` |
//! | `qosd_threshold_value` | gauge | `signal`, `kind` (hard/soft) |
//! | `qosd_threshold_met` | gauge 0/1 | `signal`, `kind` |
//! | `qosd_node_condition` | gauge 0/1 | `condition` |
//! | `qosd_reconcile_duration_seconds` | histogram | — |
//! | `qosd_reconciles_total` | counter | — |
//! | `qosd_last_reconcile_timestamp_seconds` | gauge | — |
//! | `qosd_cgroup_writes_total` | counter | — |
//! | `qosd_orphan_cgroups_removed_total` | counter | — |
//! | `qosd_errors_total` | counter | `kind` |
//! | `qosd_cri_call_duration_seconds` | histogram | `method` |
//! | `qosd_cri_call_failures_total` | counter | `method` |
//! | `qosd_pods` | gauge | `qos_class` |
//! | `qosd_build_info` | gauge 1 | `version` |
//! | `qosd_cgroup_audit_drift` | gauge | — |
//! | `qosd_cgroup_audit_drift_changes_total` | counter | — |

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::core::model::QosClass;

/// Content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Suggested values for the `kind` label of `qosd_errors_total`.
pub mod error_kind {
    pub const CGROUP_READ: &str = "cgroup_read";
    pub const CGROUP_WRITE: &str = "cgroup_write";
    pub const CRI: &str = "cri";
    pub const SIGNAL: &str = "signal";
    pub const EVICTION: &str = "eviction";
    pub const CONFIG_RELOAD: &str = "config_reload";
    pub const ORPHAN_CLEANUP: &str = "orphan_cleanup";
}

/// Hard or soft threshold (the `kind` label).
pub use crate::policy::evict::threshold::ThresholdKind;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvictionLabels {
    signal: String,
    qos_class: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignalLabels {
    signal: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ThresholdLabels {
    signal: String,
    kind: String,
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

fn cri_histogram() -> Histogram {
    // 100 µs … ~6.5 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

/// All of qosd's metrics and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    evictions: Family<EvictionLabels, Counter>,
    dry_run_evictions: Family<EvictionLabels, Counter>,
    reclaimed_images: Counter,
    reclaimed_containers: Counter,
    eviction_reaction: Histogram,
    signal_observed: Family<SignalLabels, Gauge>,
    signal_capacity: Family<SignalLabels, Gauge>,
    threshold_value: Family<ThresholdLabels, Gauge>,
    threshold_met: Family<ThresholdLabels, Gauge>,
    node_condition: Family<ConditionLabels, Gauge>,
    reconcile_duration: Histogram,
    reconciles: Counter,
    last_reconcile: Gauge<f64, AtomicU64>,
    cgroup_writes: Counter,
    orphans_removed: Counter,
    errors: Family<KindLabels, Counter>,
    cri_duration: HistogramFamily<MethodLabels>,
    cri_failures: Family<MethodLabels, Counter>,
    pods: Family<QosLabels, Gauge>,
    /// The Kubernetes API side's series.
    pub kube: crate::telemetry::kube_metrics::KubeMetrics,
    audit_drift: Gauge,
    audit_drift_changes: Counter,
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
    /// A registry with every family registered (pods by class and the node
    /// conditions start at 0 so dashboards see them before the first event).
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("qosd");
        let m = Metrics {
            evictions: Family::default(),
            dry_run_evictions: Family::default(),
            reclaimed_images: Counter::default(),
            reclaimed_containers: Counter::default(),
            // 1 ms … ~4 s
            eviction_reaction: Histogram::new(exponential_buckets(0.001, 2.0, 13)),
            signal_observed: Family::default(),
            signal_capacity: Family::default(),
            threshold_value: Family::default(),
            threshold_met: Family::default(),
            node_condition: Family::default(),
            // 1 ms … ~16 s
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            reconciles: Counter::default(),
            last_reconcile: Gauge::default(),
            cgroup_writes: Counter::default(),
            orphans_removed: Counter::default(),
            errors: Family::default(),
            cri_duration: Family::new_with_constructor(cri_histogram),
            cri_failures: Family::default(),
            pods: Family::default(),
            kube: Default::default(),
            audit_drift: Gauge::default(),
            audit_drift_changes: Counter::default(),
            registry: Registry::default(),
        };
        m.kube.register(&mut r);
        r.register(
            "evictions",
            "Pods evicted, by the signal that triggered the eviction and the pod's QoS class",
            m.evictions.clone(),
        );
        r.register(
            "dry_run_evictions",
            "Pods qosd would have evicted in dry-run mode (each victim once), by signal and QoS class",
            m.dry_run_evictions.clone(),
        );
        r.register(
            "reclaimed_images",
            "Unused images removed by node-level reclaim and image GC",
            m.reclaimed_images.clone(),
        );
        r.register(
            "reclaimed_containers",
            "Dead containers removed by node-level reclaim before disk evictions",
            m.reclaimed_containers.clone(),
        );
        r.register_with_unit(
            "eviction_reaction",
            "Time from a hard threshold being crossed to the eviction being issued",
            Unit::Seconds,
            m.eviction_reaction.clone(),
        );
        r.register(
            "signal_observed",
            "Last observed value of each eviction signal (bytes, inodes or PIDs available)",
            m.signal_observed.clone(),
        );
        r.register(
            "signal_capacity",
            "Capacity each eviction signal is measured against (bytes, inodes or PIDs)",
            m.signal_capacity.clone(),
        );
        r.register(
            "threshold_value",
            "Eviction threshold resolved to the signal's unit (percentages applied to capacity)",
            m.threshold_value.clone(),
        );
        r.register(
            "threshold_met",
            "1 while an eviction threshold is met (observed below threshold, min-reclaim not yet reached)",
            m.threshold_met.clone(),
        );
        r.register(
            "node_condition",
            "1 while a node condition (MemoryPressure, DiskPressure, PIDPressure) is set",
            m.node_condition.clone(),
        );
        r.register_with_unit(
            "reconcile_duration",
            "Duration of a reconcile pass (list pods, plan, read/compare/write cgroups)",
            Unit::Seconds,
            m.reconcile_duration.clone(),
        );
        r.register(
            "reconciles",
            "Reconcile passes completed",
            m.reconciles.clone(),
        );
        r.register_with_unit(
            "last_reconcile_timestamp",
            "Unix time of the end of the last completed reconcile pass",
            Unit::Seconds,
            m.last_reconcile.clone(),
        );
        r.register(
            "cgroup_writes",
            "cgroup interface file writes made (a steady node makes none)",
            m.cgroup_writes.clone(),
        );
        r.register(
            "orphan_cgroups_removed",
            "Empty pod cgroups removed after their sandbox went away",
            m.orphans_removed.clone(),
        );
        r.register("errors", "Errors, by kind", m.errors.clone());
        r.register_with_unit(
            "cri_call_duration",
            "Latency of CRI calls to the container runtime, by method",
            Unit::Seconds,
            m.cri_duration.clone(),
        );
        r.register(
            "cri_call_failures",
            "Failed CRI calls, by method",
            m.cri_failures.clone(),
        );
        r.register("pods", "Live pods, by QoS class", m.pods.clone());
        r.register(
            "cgroup_audit_drift",
            "cgroupEnforcement audit: planned cgroup values the cgroups do not hold at the last reconcile (nothing is written)",
            m.audit_drift.clone(),
        );
        r.register(
            "cgroup_audit_drift_changes",
            "cgroupEnforcement audit: differing cgroup values reported (each new or changed value once)",
            m.audit_drift_changes.clone(),
        );
        let build = Family::<VersionLabels, Gauge>::default();
        build
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
        r.register("build_info", "qosd version (always 1)", build);

        for class in [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ] {
            let _ = m.pods.get_or_create(&QosLabels {
                qos_class: class.as_str().to_string(),
            });
        }
        for cond in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
            let _ = m.node_condition.get_or_create(&ConditionLabels {
                condition: cond.to_string(),
            });
        }
        Metrics { registry: r, ..m }
    }

    /// A pod was evicted because of `signal`.
    pub fn eviction(&self, signal: &str, qos: QosClass) {
        self.evictions
            .get_or_create(&EvictionLabels {
                signal: signal.to_string(),
                qos_class: qos.as_str().to_string(),
            })
            .inc();
    }

    /// A pod would have been evicted (dry run) because of `signal`.
    pub fn dry_run_eviction(&self, signal: &str, qos: QosClass) {
        self.dry_run_evictions
            .get_or_create(&EvictionLabels {
                signal: signal.to_string(),
                qos_class: qos.as_str().to_string(),
            })
            .inc();
    }

    /// Node-level reclaim removed images and dead containers.
    pub fn reclaimed(&self, images: u64, containers: u64) {
        self.reclaimed_images.inc_by(images);
        self.reclaimed_containers.inc_by(containers);
    }

    /// Time from threshold crossing to the eviction being issued.
    pub fn eviction_reaction(&self, d: Duration) {
        self.eviction_reaction.observe(d.as_secs_f64());
    }

    /// Latest observation of a signal (bytes / inodes / PIDs available).
    pub fn signal_observed(&self, signal: &str, value: i64) {
        self.signal_observed
            .get_or_create(&SignalLabels {
                signal: signal.to_string(),
            })
            .set(value);
    }

    /// Capacity of a signal (for percentage thresholds and dashboards).
    pub fn signal_capacity(&self, signal: &str, value: i64) {
        self.signal_capacity
            .get_or_create(&SignalLabels {
                signal: signal.to_string(),
            })
            .set(value);
    }

    /// State of one threshold: its resolved value and whether it is met.
    pub fn threshold(&self, signal: &str, kind: ThresholdKind, value: i64, met: bool) {
        let l = ThresholdLabels {
            signal: signal.to_string(),
            kind: kind.as_str().to_string(),
        };
        self.threshold_value.get_or_create(&l).set(value);
        self.threshold_met.get_or_create(&l).set(i64::from(met));
    }

    /// A node condition (`MemoryPressure`, `DiskPressure`, `PIDPressure`).
    pub fn node_condition(&self, condition: &str, active: bool) {
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

    /// `n` cgroup files were written.
    pub fn cgroup_writes(&self, n: u64) {
        self.cgroup_writes.inc_by(n);
    }

    /// `n` orphaned pod cgroups were removed.
    pub fn orphans_removed(&self, n: u64) {
        self.orphans_removed.inc_by(n);
    }

    /// An error of some kind (see [`error_kind`]).
    pub fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// A CRI call (`method` e.g. `ListPodSandbox`) took `d`; `ok` false counts a failure.
    pub fn cri_call(&self, method: &str, d: Duration, ok: bool) {
        let l = MethodLabels {
            method: method.to_string(),
        };
        self.cri_duration.get_or_create(&l).observe(d.as_secs_f64());
        if !ok {
            self.cri_failures.get_or_create(&l).inc();
        }
    }

    /// Audit: `drifting` planned values differ now, `changes` of them are
    /// new or changed since the last pass.
    pub fn audit_drift(&self, drifting: usize, changes: usize) {
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

    /// The registry in OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut s = String::with_capacity(8192);
        prometheus_client::encoding::text::encode(&mut s, &self.registry)
            .expect("encoding to a String cannot fail");
        s
    }
}

/// Rate limit for repeated log lines (e.g. the same cgroup write failing on
/// every pass): the first occurrence of a key is logged, then at most one
/// per `interval`, reporting how many were suppressed in between.
///
/// ```
/// # use qosd::telemetry::metrics::LogLimiter;
/// # use std::time::Duration;
/// let lim = LogLimiter::new(Duration::from_secs(60));
/// if let Some(suppressed) = lim.check("cgroup_write:/sys/fs/cgroup/x") {
///     // tracing::warn!(suppressed, "write failed ...");
///     assert_eq!(suppressed, 0);
/// }
/// assert_eq!(lim.check("cgroup_write:/sys/fs/cgroup/x"), None);
/// ```
#[derive(Debug)]
pub struct LogLimiter {
    interval: Duration,
    state: std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, u64)>>,
}

impl LogLimiter {
    /// Keys are forgotten when more than this many accumulate (oldest first).
    const MAX_KEYS: usize = 4096;

    pub fn new(interval: Duration) -> LogLimiter {
        LogLimiter {
            interval,
            state: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// `Some(suppressed)` when this occurrence should be logged.
    pub fn check(&self, key: &str) -> Option<u64> {
        self.check_at(key, std::time::Instant::now())
    }

    /// [`LogLimiter::check`] at a given time (tests).
    pub fn check_at(&self, key: &str, now: std::time::Instant) -> Option<u64> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((last, suppressed)) = st.get_mut(key) {
            if now.saturating_duration_since(*last) >= self.interval {
                let n = *suppressed;
                *last = now;
                *suppressed = 0;
                return Some(n);
            }
            *suppressed += 1;
            return None;
        }
        if st.len() >= Self::MAX_KEYS {
            if let Some(oldest) = st
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone())
            {
                st.remove(&oldest);
            }
        }
        st.insert(key.to_string(), (now, 0));
        Some(0)
    }

    /// Forget a key (e.g. the failure stopped): its next occurrence logs at once.
    pub fn clear(&self, key: &str) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
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

    #[test]
    fn families_are_named_and_typed() {
        let m = Metrics::new();
        // Families with labels appear once they have a sample.
        m.eviction("memory.available", QosClass::BestEffort);
        m.signal_observed("memory.available", 1);
        m.threshold("memory.available", ThresholdKind::Hard, 1, false);
        m.error(error_kind::CRI);
        m.cri_call("Version", Duration::from_millis(1), false);
        let t = m.encode();
        for (name, ty) in [
            ("qosd_evictions", "counter"),
            ("qosd_eviction_reaction_seconds", "histogram"),
            ("qosd_signal_observed", "gauge"),
            ("qosd_threshold_met", "gauge"),
            ("qosd_node_condition", "gauge"),
            ("qosd_reconcile_duration_seconds", "histogram"),
            ("qosd_last_reconcile_timestamp_seconds", "gauge"),
            ("qosd_cgroup_writes", "counter"),
            ("qosd_errors", "counter"),
            ("qosd_cri_call_duration_seconds", "histogram"),
            ("qosd_cri_call_failures", "counter"),
            ("qosd_pods", "gauge"),
        ] {
            assert!(
                t.contains(&format!("# TYPE {name} {ty}\n")),
                "{name} {ty} in\n{t}"
            );
        }
        assert!(t.ends_with("# EOF\n"));
        assert_eq!(sample(&t, "qosd_pods{qos_class=\"BestEffort\"}"), Some(0.0));
        assert_eq!(
            sample(&t, "qosd_node_condition{condition=\"MemoryPressure\"}"),
            Some(0.0)
        );
        assert_eq!(sample(&t, "qosd_cgroup_writes_total"), Some(0.0));
        let fresh = Metrics::new().encode();
        assert_eq!(
            sample(&fresh, "qosd_pods{qos_class=\"Burstable\"}"),
            Some(0.0)
        );
        assert_eq!(sample(&fresh, "qosd_reconciles_total"), Some(0.0));
        assert!(fresh.contains("qosd_build_info{version="));
    }

    #[test]
    fn log_limiter_suppresses_and_reports() {
        let lim = LogLimiter::new(Duration::from_secs(10));
        let t0 = std::time::Instant::now();
        assert_eq!(lim.check_at("a", t0), Some(0));
        assert_eq!(lim.check_at("a", t0 + Duration::from_secs(1)), None);
        assert_eq!(lim.check_at("a", t0 + Duration::from_secs(2)), None);
        assert_eq!(lim.check_at("b", t0 + Duration::from_secs(2)), Some(0));
        assert_eq!(lim.check_at("a", t0 + Duration::from_secs(10)), Some(2));
        assert_eq!(lim.check_at("a", t0 + Duration::from_secs(11)), None);
        lim.clear("a");
        assert_eq!(lim.check_at("a", t0 + Duration::from_secs(12)), Some(0));
    }

    #[test]
    fn methods_update_samples() {
        let m = Metrics::new();
        m.eviction("memory.available", QosClass::BestEffort);
        m.eviction("memory.available", QosClass::BestEffort);
        m.eviction("nodefs.available", QosClass::Burstable);
        m.signal_observed("memory.available", 123_456_789);
        m.threshold("memory.available", ThresholdKind::Hard, 104_857_600, true);
        m.node_condition("MemoryPressure", true);
        m.reconcile_done(Duration::from_millis(3));
        m.cgroup_writes(5);
        m.cgroup_writes(2);
        m.error(error_kind::CGROUP_WRITE);
        m.cri_call("ListPodSandbox", Duration::from_micros(900), true);
        m.cri_call("StopPodSandbox", Duration::from_millis(110), false);
        m.pods(QosClass::Guaranteed, 3);
        m.eviction_reaction(Duration::from_millis(7));
        let t = m.encode();
        let s = |p: &str| sample(&t, p).unwrap_or_else(|| panic!("no {p} in\n{t}"));
        assert_eq!(
            s("qosd_evictions_total{signal=\"memory.available\",qos_class=\"BestEffort\"}"),
            2.0
        );
        assert_eq!(
            s("qosd_evictions_total{signal=\"nodefs.available\",qos_class=\"Burstable\"}"),
            1.0
        );
        assert_eq!(
            s("qosd_signal_observed{signal=\"memory.available\"}"),
            123_456_789.0
        );
        assert_eq!(
            s("qosd_threshold_met{signal=\"memory.available\",kind=\"hard\"}"),
            1.0
        );
        assert_eq!(
            s("qosd_threshold_value{signal=\"memory.available\",kind=\"hard\"}"),
            104_857_600.0
        );
        assert_eq!(s("qosd_node_condition{condition=\"MemoryPressure\"}"), 1.0);
        assert_eq!(s("qosd_reconcile_duration_seconds_count"), 1.0);
        assert_eq!(s("qosd_reconciles_total"), 1.0);
        assert!(s("qosd_last_reconcile_timestamp_seconds") > 1.6e9);
        assert_eq!(s("qosd_cgroup_writes_total"), 7.0);
        assert_eq!(s("qosd_errors_total{kind=\"cgroup_write\"}"), 1.0);
        assert_eq!(
            s("qosd_cri_call_duration_seconds_count{method=\"ListPodSandbox\"}"),
            1.0
        );
        assert_eq!(
            s("qosd_cri_call_failures_total{method=\"StopPodSandbox\"}"),
            1.0
        );
        assert!(!t.contains("qosd_cri_call_failures_total{method=\"ListPodSandbox\"}"));
        assert_eq!(s("qosd_pods{qos_class=\"Guaranteed\"}"), 3.0);
        assert_eq!(s("qosd_eviction_reaction_seconds_count"), 1.0);
        assert_eq!(
            s("qosd_eviction_reaction_seconds_bucket{le=\"0.008\"}"),
            1.0
        );
    }
}
