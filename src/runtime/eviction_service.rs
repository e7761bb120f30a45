//! The eviction side of `qosd run`: the [`EvictionLoop`] (fast watcher +
//! one [`Engine::pass`] per wake-up or per second) fed with the pods of
//! every listing, and reporting each pass to metrics and `/status`.
//!
//! * The watcher polls the cheap memory counters adaptively (5–100 ms) and,
//!   on v1, is woken by memcg eventfd thresholds; when a hard memory
//!   threshold is crossed it wakes the loop at once.
//! * Otherwise a pass runs every `monitoring_interval` (1 s; the kubelet
//!   uses 10 s) for the other signals (disk, inodes, pids), soft thresholds
//!   and releases while any of them is near or under way, and at most every
//!   10 s when all are far ([`crate::runtime::eviction::next_pass_in`]).
//! * The reconcile loop publishes the pods with
//!   [`EvictionService::update_pods`]; when it cannot list them (runtime
//!   down) the engine gets an error and evicts nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::eviction::{
    Engine, EvictionLoop, ImageGcPolicy, LoopOptions, NodeRuntime, PassReport, PodFeed,
};
use crate::runtime::reaction::{CrossingClock, DetectedBy, Detection, Reaction};
use crate::telemetry::health::Health;
use crate::telemetry::metrics::{ErrorKind, Metrics};
use crate::telemetry::status::EvictionRecord;
use qosd_model::core::model::{CgroupVersion, Pod};
use qosd_model::policy::enforce::naming::CgroupLayout;
use qosd_model::policy::evict::manager::ManagerOptions;
use qosd_model::policy::evict::rank::Candidate;
use qosd_model::policy::evict::threshold::ThresholdValue;
use qosd_model::policy::evict::threshold::{EvictionConfig, NodeCondition};
use qosd_model::policy::evict::Backend;
use qosd_node::evict::{Evictor, PodStopper};
use qosd_node::sys::pressure::PressureStatus;
use qosd_node::sys::signals::SignalSources;
use qosd_node::sys::watch::{WatchConfig, WatchError};

/// Settings of the eviction loop.
#[derive(Debug, Clone)]
pub(crate) struct ServiceConfig {
    pub(crate) eviction: EvictionConfig,
    pub(crate) sources: SignalSources,
    pub(crate) backend: Backend,
    /// Pass period when nothing wakes the loop earlier.
    pub(crate) monitoring_interval: Duration,
    /// The fast watcher; `None` polls only every `monitoring_interval`
    /// (the kubelet's behaviour, used as a benchmark baseline).
    pub(crate) watch: Option<WatchConfig>,
    /// SCHED_FIFO priority of the pass thread where allowed, with or
    /// without the watcher (`None`: normal scheduling).
    pub(crate) rt_priority: Option<i32>,
    /// A pod listing older than this is stale: no eviction.
    pub(crate) max_listing_age: Duration,
    pub(crate) manager: ManagerOptions,
    /// `evictionHook`: run after each eviction (never blocks the loop).
    pub(crate) hook: Option<crate::runtime::hook::Hook>,
    pub(crate) image_gc: ImageGcPolicy,
    /// The pressure watcher's targets and tunables (pressure thresholds
    /// configured); `None`: none.
    pub(crate) pressure: Option<crate::runtime::eviction::PressureOptions>,
}

/// The eviction candidates of a set of pods: class, requests, priority, and
/// the pod cgroup in every hierarchy (memory first: usage and kill).
pub fn candidates(
    pods: &[Pod],
    sandbox_ids: &BTreeMap<String, String>,
    layout: &CgroupLayout,
) -> Vec<Candidate> {
    pods.iter()
        .map(|p| {
            let class = qosd_model::core::qos::classify(p).class;
            let r = qosd_model::core::resources::pod_resources(p);
            let mut c = Candidate::new(
                p,
                class,
                r.memory_request_bytes,
                r.ephemeral_storage_request_bytes,
                None,
            );
            if c.sandbox_id.is_none() {
                c.sandbox_id = sandbox_ids.get(&p.uid).cloned();
            }
            let cg = layout.pod_cgroup(class, &p.uid);
            c.cgroup_dirs = match layout.version {
                CgroupVersion::V2 => vec![layout.dir(&cg, "")],
                CgroupVersion::V1 => ["memory", "pids", "cpu"]
                    .iter()
                    .map(|ctl| layout.dir(&cg, ctl))
                    .collect(),
            };
            c
        })
        .collect()
}

/// A running eviction loop; stops on drop.
pub(crate) struct EvictionService {
    feed: Arc<PodFeed>,
    _loop: EvictionLoop,
}

impl EvictionService {
    /// Start the loop (and the fast watcher when configured), with the
    /// Kubernetes API side of the `api` backend when given.
    pub(crate) fn start_with_api(
        cfg: ServiceConfig,
        stopper: Option<Arc<dyn PodStopper>>,
        runtime: Option<Arc<dyn NodeRuntime>>,
        api: Option<Arc<dyn qosd_node::evict::ApiEvictor>>,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Result<EvictionService, WatchError> {
        let backend = cfg.backend;
        let mut evictor = Evictor::new(backend, stopper, cfg.eviction.max_pod_grace_period);
        evictor.api = api;
        let mut engine = Engine::new(cfg.eviction, cfg.manager, cfg.sources, evictor);
        // dry-run reclaims nothing either
        engine.runtime = runtime.filter(|_| backend != Backend::DryRun);
        engine.image_gc = cfg.image_gc;
        let feed = Arc::new(PodFeed::default());
        let mut conditions: BTreeMap<NodeCondition, bool> = BTreeMap::new();
        let mut timing = ReactionTiming::default();
        let hook = cfg.hook;
        let mut blocked_logged = QuietLog::default();
        let mut signal_errors_logged = std::collections::BTreeSet::<String>::new();
        let lp = EvictionLoop::spawn_supervised(
            engine,
            feed.clone(),
            LoopOptions {
                period: cfg.monitoring_interval,
                max_pod_list_age: cfg.max_listing_age,
                watch: cfg.watch,
                rt_priority: cfg.rt_priority,
                pressure: cfg.pressure,
                ..LoopOptions::default()
            },
            Some(health.clone()),
            move |r| {
                log_signal_errors(r, &mut signal_errors_logged, &health);
                let reaction = timing.observe(&metrics, backend, r);
                report(
                    &metrics,
                    &health,
                    backend,
                    r,
                    reaction,
                    &mut conditions,
                    &mut blocked_logged,
                );
                let evicted = r.decision.victims().iter().zip(&r.outcomes);
                for (v, _) in evicted.filter(|(_, o)| o.is_ok()) {
                    if let (Some(h), true) = (&hook, backend != Backend::DryRun) {
                        h.fire(crate::runtime::hook::HookEvent {
                            namespace: v.candidate.namespace.clone(),
                            name: v.candidate.name.clone(),
                            uid: v.candidate.uid.clone(),
                            qos_class: v.candidate.qos.to_string(),
                            signal: v.signal.to_string(),
                            observed: v.observed,
                            threshold: v.threshold_value,
                            threshold_kind: v.kind.as_str().to_string(),
                            backend: backend.as_str().to_string(),
                        });
                    }
                }
            },
        )?;
        Ok(EvictionService { feed, _loop: lp })
    }

    /// Publish the current pods (after each successful listing).
    pub(crate) fn update_pods(&self, candidates: Vec<Candidate>) {
        self.feed.set(candidates);
    }

    /// The pods published last are still the current ones (a listing
    /// found them unchanged): mark them fresh. False when the loop holds
    /// none (a failure was reported since): publish them with
    /// [`EvictionService::update_pods`].
    pub(crate) fn pods_current(&self) -> bool {
        self.feed.refresh()
    }

    /// The pods cannot be listed: evict nothing until they can.
    pub(crate) fn pods_unavailable(&self, reason: String) {
        self.feed.failed(reason);
    }
}

/// Eviction reaction times: from the earliest read that showed the
/// victim's threshold crossed (a watcher detection handed to the pass, or
/// the observation of the pass that first saw it met:
/// [`crate::runtime::reaction::CrossingClock`]) to the kill being issued,
/// and to the victim's resources being released (its process tree seen
/// empty, or the manager seeing its usage drop).
#[derive(Debug, Default)]
struct ReactionTiming {
    clock: CrossingClock,
    /// The last real victim waiting for release: uid and crossing time.
    pending: Option<(String, std::time::Instant)>,
}

impl ReactionTiming {
    /// Record one pass; the reaction of the eviction it made, if any (the
    /// value observed into `qosd_eviction_reaction_seconds`).
    fn observe(&mut self, metrics: &Metrics, backend: Backend, r: &PassReport) -> Option<Reaction> {
        let d = &r.decision;
        self.clock.track(
            d.at,
            d.thresholds
                .iter()
                .filter(|t| t.met)
                .map(|t| (t.threshold.signal, t.threshold.kind)),
            &r.detected,
        );
        if let Some((uid, crossed)) = &self.pending {
            if d.notes
                .iter()
                .any(|n| n.starts_with(&format!("previous victim {uid} released")))
            {
                metrics.eviction_release(d.at.saturating_duration_since(*crossed));
                self.pending = None;
            }
        }
        let (Some(v), Some(Ok(outcome))) = (d.victim(), r.outcome()) else {
            return None;
        };
        if backend == Backend::DryRun {
            return None;
        }
        let start = self.clock.start_of(v.signal, v.kind).unwrap_or(Detection {
            at: d.at,
            gap: None,
            by: DetectedBy::Pass,
        });
        let issued = outcome
            .kill
            .as_ref()
            .map(|k| k.issued_at)
            .unwrap_or_else(std::time::Instant::now);
        let reaction = Reaction::new(start, issued);
        metrics.eviction_reaction(reaction.duration);
        let crossed = start.at;
        match outcome.kill.as_ref().and_then(|k| k.empty_at) {
            Some(empty) => {
                metrics.eviction_release(empty.saturating_duration_since(crossed));
                self.pending = None;
            }
            None => self.pending = Some((v.candidate.uid.clone(), crossed)),
        }
        Some(reaction)
    }
}

/// Log each unreadable signal once (until it reads again), not every pass.
/// A signal a configured threshold needs that cannot be read also makes
/// `/readyz` fail: eviction on it is off.
fn log_signal_errors(
    r: &PassReport,
    logged: &mut std::collections::BTreeSet<String>,
    health: &Health,
) {
    let now: std::collections::BTreeSet<String> =
        r.signal_errors.iter().map(|e| e.to_string()).collect();
    health.set_problem(
        "signals",
        (!now.is_empty()).then(|| {
            format!(
                "eviction signals unreadable (thresholds on them are not evaluated): {}",
                now.iter().cloned().collect::<Vec<_>>().join("; ")
            )
        }),
    );
    for e in now.difference(logged) {
        tracing::warn!(target: "qosd::eviction", error = %e, "eviction signal unavailable (thresholds on it are not evaluated)");
    }
    for e in logged.difference(&now) {
        tracing::info!(target: "qosd::eviction", error = %e, "eviction signal readable again");
    }
    *logged = now;
}

/// A blocked or stuck state, logged when it starts, when it changes and
/// once a minute while it lasts — never per pass.
#[derive(Debug, Default)]
struct QuietLog {
    state: Option<String>,
    since: Option<std::time::Instant>,
    last: Option<std::time::Instant>,
}

/// How often a lasting blocked/stuck state is logged again.
const REPEAT: Duration = Duration::from_secs(60);

impl QuietLog {
    fn update(&mut self, state: Option<String>, now: std::time::Instant) {
        match (&self.state, state) {
            (None, None) => {}
            (Some(old), None) => {
                tracing::info!(target: "qosd::eviction", previous = %old, "eviction no longer blocked");
                *self = QuietLog::default();
            }
            (old, Some(new)) => {
                let changed = old.as_deref() != Some(new.as_str());
                if changed {
                    tracing::warn!(target: "qosd::eviction", "{new}");
                    self.since = Some(now);
                    self.last = Some(now);
                } else if self
                    .last
                    .is_some_and(|l| now.saturating_duration_since(l) >= REPEAT)
                {
                    let lasting = self
                        .since
                        .map(|s| {
                            qosd_model::core::duration::format_go_duration(
                                now.saturating_duration_since(s),
                            )
                        })
                        .unwrap_or_default();
                    tracing::warn!(target: "qosd::eviction", lasting = %lasting, "{new}");
                    self.last = Some(now);
                }
                self.state = Some(new);
            }
        }
    }
}

/// The state worth logging quietly: blocked, or waiting for a victim for
/// longer than a few seconds.
fn quiet_state(d: &qosd_model::policy::evict::manager::Decision) -> Option<String> {
    use qosd_model::policy::evict::manager::Action;
    match &d.action {
        Action::Blocked(why) => Some(format!("eviction needed but blocked: {why}")),
        Action::WaitingForRelease { uid, since }
            if d.at.saturating_duration_since(*since) >= Duration::from_secs(5) =>
        {
            Some(format!(
                "eviction waiting for victim {uid} to release its resources"
            ))
        }
        _ => None,
    }
}

/// Metrics, `/status` and logs of one pass.
fn report(
    metrics: &Metrics,
    health: &Health,
    backend: Backend,
    r: &PassReport,
    reaction: Option<Reaction>,
    conditions: &mut BTreeMap<NodeCondition, bool>,
    blocked_logged: &mut QuietLog,
) {
    for _ in &r.signal_errors {
        metrics.error(ErrorKind::SignalRead);
    }
    publish(metrics, health, &r.decision, &r.pressure, conditions);
    blocked_logged.update(quiet_state(&r.decision), r.decision.at);
    for e in &r.decision.events {
        tracing::info!(target: "qosd::eviction", "{e}");
    }
    if let Some(rep) = &r.reclaim {
        metrics.reclaimed(
            rep.images_removed.len() as u64,
            rep.containers_removed as u64,
        );
    }
    if let Some(pods) = &r.pods {
        let usage: Vec<crate::telemetry::status::PodUsage> = pods
            .iter()
            .map(|c| {
                let st = c.stats.unwrap_or_default();
                crate::telemetry::status::PodUsage {
                    uid: c.uid.clone(),
                    namespace: c.namespace.clone(),
                    name: c.name.clone(),
                    qos_class: c.qos.to_string(),
                    memory_working_set_bytes: st.memory_working_set_bytes,
                    ephemeral_storage_bytes: st.ephemeral_storage_bytes,
                    inodes: st.inodes,
                    processes: st.processes,
                    writable_layer_bytes: st.rootfs_bytes,
                    logs_bytes: st.logs_bytes,
                    volumes_bytes: st.volumes_bytes,
                }
            })
            .collect();
        let at = crate::telemetry::status::now_ms();
        health.update_status(|d| {
            d.pod_usage = usage;
            d.pod_usage_at_ms = Some(at);
        });
    }
    for (i, (v, outcome)) in r.decision.victims().iter().zip(&r.outcomes).enumerate() {
        // The reaction belongs to the pass's first eviction.
        let reaction = reaction.filter(|_| i == 0);
        record_eviction(metrics, health, backend, v, outcome, reaction);
    }
}

/// Metrics and `/status` of one eviction of a pass.
fn record_eviction(
    metrics: &Metrics,
    health: &Health,
    backend: Backend,
    v: &qosd_model::policy::evict::manager::Victim,
    outcome: &Result<qosd_node::evict::Outcome, qosd_node::evict::EvictError>,
    reaction: Option<Reaction>,
) {
    match outcome {
        Ok(_) => {
            metrics.eviction(
                v.metric_label(),
                v.candidate.qos,
                backend == Backend::DryRun,
            );
            health.update_status(|d| {
                d.push_eviction(EvictionRecord {
                    at_ms: crate::telemetry::status::now_ms(),
                    uid: v.candidate.uid.clone(),
                    namespace: v.candidate.namespace.clone(),
                    name: v.candidate.name.clone(),
                    qos_class: v.candidate.qos.to_string(),
                    priority: v.candidate.priority,
                    signal: v.metric_label().to_string(),
                    observed: v.observed,
                    threshold: v.threshold_value,
                    threshold_kind: v.kind.as_str().to_string(),
                    usage: v.usage.map(|u| u as i64),
                    usage_bytes: victim_usage_bytes(v).map(|u| u as i64),
                    request_bytes: Some(v.request),
                    rank: v.rank.saturating_sub(1),
                    backend: backend.as_str().to_string(),
                    reaction_ms: reaction.map(|r| r.duration.as_secs_f64() * 1e3),
                    detected_by: reaction.map(|r| r.start.by.as_str().to_string()),
                    detection_gap_ms: reaction
                        .and_then(|r| r.start.gap)
                        .map(|g| g.as_secs_f64() * 1e3),
                })
            });
        }
        Err(_) => metrics.error(ErrorKind::Eviction),
    }
}

fn publish(
    metrics: &Metrics,
    health: &Health,
    decision: &qosd_model::policy::evict::manager::Decision,
    pressure: &[PressureStatus],
    prev: &mut BTreeMap<NodeCondition, bool>,
) {
    for t in &decision.thresholds {
        if let ThresholdValue::Stall { share, .. } = t.threshold.value {
            let sig = t.threshold.signal;
            if let Some(o) = t.observed {
                metrics.pressure_observed(sig, o.available as f64 / o.capacity.max(1) as f64);
            }
            metrics.pressure_threshold(sig, t.threshold.kind, share, t.met);
            continue;
        }
        if let Some(o) = t.observed {
            metrics.signal(t.threshold.signal, o.available, o.capacity);
        }
        let value = t
            .observed
            .map(|o| t.threshold.threshold_for(o.capacity))
            .unwrap_or(0);
        metrics.threshold(t.threshold.signal, t.threshold.kind, value, t.met);
    }
    for c in [
        NodeCondition::MemoryPressure,
        NodeCondition::DiskPressure,
        NodeCondition::PIDPressure,
    ] {
        let active = decision.conditions.contains(&c);
        metrics.node_condition(c.as_str(), active);
        let before = prev.insert(c, active);
        if before.is_some_and(|b| b != active) || (before.is_none() && active) {
            tracing::warn!(target: "qosd::eviction", condition = c.as_str(), active, "node condition changed");
        }
    }
    for p in pressure {
        metrics.pressure_detector(p.signal, p.mode.as_str());
    }
    let (mut signals, conditions) = crate::telemetry::status::eviction_status(
        &decision.thresholds,
        None,
        Some(&decision.conditions),
    );
    crate::telemetry::status::add_pressure(&mut signals, pressure);
    health.update_status(|d| {
        d.signals = signals;
        d.conditions = conditions;
    });
}

/// A victim's usage in bytes (a local-storage victim's usage is bytes).
fn victim_usage_bytes(v: &qosd_model::policy::evict::manager::Victim) -> Option<u64> {
    use qosd_model::policy::evict::manager::Cause;
    match v.cause {
        Cause::LocalStorage(_) => v.usage,
        Cause::Threshold => {
            qosd_model::policy::evict::rank::usage_bytes(v.signal, v.usage, v.candidate.stats)
        }
    }
}

/// The eviction settings of a daemon config, with the thresholds the
/// kubelet derives: `allocatableMemory.available` from the hard
/// `memory.available` ones when `enforceNodeAllocatable` contains `pods`
/// (the default), and `containerfs.*` from `nodefs.*` (or `imagefs.*` with
/// a dedicated image filesystem).
pub(crate) fn eviction_config(cfg: &qosd_config::Config) -> EvictionConfig {
    let mut e = cfg.eviction();
    if cfg.enforce_node_allocatable.pods {
        e = e.with_allocatable_thresholds();
    }
    let layout = disk_layout(cfg);
    e.with_containerfs_thresholds(
        layout != qosd_model::policy::evict::rank::DiskLayout::Shared,
        layout == qosd_model::policy::evict::rank::DiskLayout::Split,
    )
}

/// The filesystem layout: a dedicated imagefs when `imagefsPath` is on
/// another device than `rootDir` (it holds the writable layers: containerd
/// keeps snapshots beside its images).
pub(crate) fn disk_layout(
    cfg: &qosd_config::Config,
) -> qosd_model::policy::evict::rank::DiskLayout {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| m.dev());
    match &cfg.imagefs_path {
        Some(img) if dev(img).is_some() && dev(img) != dev(&cfg.root_dir) => {
            qosd_model::policy::evict::rank::DiskLayout::DedicatedImageFs
        }
        _ => qosd_model::policy::evict::rank::DiskLayout::Shared,
    }
}

/// Where the signals of a daemon config are read from, for a cgroup layout:
/// the memory hierarchy and its kubepods cgroup, `/proc` files under
/// `proc_root`, `--root-dir` (nodefs), `imagefsPath` and
/// `memoryAvailableSource`. `allocatable_memory_bytes` `None`: the kubepods
/// memory limit.
pub(crate) fn signal_sources(
    cfg: &qosd_config::Config,
    layout: &CgroupLayout,
    proc_root: &std::path::Path,
    allocatable_memory_bytes: Option<i64>,
) -> SignalSources {
    let mut s = SignalSources::host(layout.version);
    s.memory_root = match layout.version {
        CgroupVersion::V1 => layout.cgroupfs.join(layout.v1_controller_dir("memory")),
        CgroupVersion::V2 => layout.cgroupfs.clone(),
    };
    s.kubepods = Some(layout.dir(&layout.node_cgroup(), "memory"));
    s.allocatable_memory_bytes = allocatable_memory_bytes;
    s.meminfo = proc_root.join("meminfo");
    s.loadavg = proc_root.join("loadavg");
    s.pid_max = proc_root.join("sys/kernel/pid_max");
    s.nodefs = Some(cfg.root_dir.clone());
    s.imagefs = cfg.imagefs_path.clone();
    s.pod_root_dir = Some(cfg.root_dir.clone());
    s.pod_logs_dir = cfg.pod_logs_dir.clone();
    if disk_layout(cfg) == qosd_model::policy::evict::rank::DiskLayout::DedicatedImageFs {
        s.containerfs = cfg.imagefs_path.clone();
    }
    s.memory_source = cfg.memory_available_source;
    s
}
