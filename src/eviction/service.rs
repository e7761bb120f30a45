//! The eviction loop of `qosd run`: a thread that ties the fast watcher,
//! the signal readers, the state machine and the evictor together.
//!
//! * The [`Watcher`] polls the cheap memory counters adaptively (5–100 ms)
//!   and, on v1, is woken by memcg eventfd thresholds; when a hard memory
//!   threshold is crossed it wakes this loop at once.
//! * Otherwise the loop runs every `monitoring_interval` (1 s; the kubelet
//!   uses 10 s) for the other signals (disk, inodes, pids) and soft
//!   thresholds.
//! * Each pass observes every configured signal, reads each pod's usage
//!   from its cgroup, asks the [`Manager`] for a decision and, when it names
//!   a victim, has the [`Evictor`] act. The reconcile loop publishes the
//!   pods with [`EvictionService::update_pods`]; when it cannot list them
//!   (runtime down) the manager gets an error and evicts nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cgroup::paths::CgroupLayout;
use crate::eviction::evictor::{Backend, Evictor, PodStopper};
use crate::eviction::manager::{watched_signals, Action, Manager, ManagerOptions};
use crate::eviction::rank::Candidate;
use crate::eviction::signals::{pod_stats, SignalSources};
use crate::eviction::threshold::{EvictionConfig, NodeCondition, Signal};
use crate::eviction::watch::{targets_from_config, WatchConfig, WatchEvent, Watcher};
use crate::http::{ConditionStatus, EvictionRecord, Health, SignalStatus, ThresholdStatus};
use crate::metrics::Metrics;
use crate::model::{CgroupVersion, Pod};

/// Settings of the eviction loop.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub eviction: EvictionConfig,
    pub sources: SignalSources,
    pub backend: Backend,
    /// Pass period when nothing wakes the loop earlier.
    pub monitoring_interval: Duration,
    /// The fast watcher; `None` polls only every `monitoring_interval`
    /// (the kubelet's behaviour, used as a benchmark baseline).
    pub watch: Option<WatchConfig>,
    /// A pod listing older than this is stale: no eviction.
    pub max_listing_age: Duration,
    pub manager: ManagerOptions,
}

#[derive(Debug, Default)]
struct Snapshot {
    candidates: Option<Vec<Candidate>>,
    at: Option<Instant>,
    unavailable: Option<String>,
}

/// A running eviction loop; stops on [`EvictionService::stop`] or drop.
pub struct EvictionService {
    stop: Arc<AtomicBool>,
    wake: mpsc::Sender<Option<WatchEvent>>,
    handle: Option<JoinHandle<()>>,
    snapshot: Arc<Mutex<Snapshot>>,
    watcher: Option<Watcher>,
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
            let class = crate::qos::classify(p).class;
            let r = crate::resources::pod_resources(p);
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

impl EvictionService {
    /// Start the loop (and the fast watcher when configured).
    pub fn start(
        cfg: ServiceConfig,
        stopper: Option<Arc<dyn PodStopper>>,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> std::io::Result<EvictionService> {
        let (tx, rx) = mpsc::channel::<Option<WatchEvent>>();
        let watcher = match &cfg.watch {
            None => None,
            Some(wc) => match targets_from_config(&cfg.eviction, &cfg.sources) {
                Ok(targets) if targets.is_empty() => None,
                Ok(targets) => {
                    let tx2 = tx.clone();
                    match Watcher::spawn(targets, wc.clone(), move |e| {
                        let _ = tx2.send(Some(e));
                    }) {
                        Ok(w) => Some(w),
                        Err(e) => {
                            tracing::warn!(error = %e, "fast memory watcher unavailable; polling every {:?}", cfg.monitoring_interval);
                            None
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "fast memory watcher unavailable; polling every {:?}", cfg.monitoring_interval);
                    None
                }
            },
        };
        let stop = Arc::new(AtomicBool::new(false));
        let snapshot = Arc::new(Mutex::new(Snapshot::default()));
        let (stop2, snap2) = (stop.clone(), snapshot.clone());
        let handle = std::thread::Builder::new()
            .name("qosd-evict".into())
            .spawn(move || run(cfg, stopper, metrics, health, rx, stop2, snap2))?;
        Ok(EvictionService {
            stop,
            wake: tx,
            handle: Some(handle),
            snapshot,
            watcher,
        })
    }

    /// Publish the current pods (after each successful listing).
    pub fn update_pods(&self, candidates: Vec<Candidate>) {
        if let Ok(mut s) = self.snapshot.lock() {
            s.candidates = Some(candidates);
            s.at = Some(Instant::now());
            s.unavailable = None;
        }
    }

    /// The pods cannot be listed: evict nothing until they can.
    pub fn pods_unavailable(&self, reason: String) {
        if let Ok(mut s) = self.snapshot.lock() {
            s.unavailable = Some(reason);
        }
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            w.stop();
        }
        let _ = self.wake.send(None);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for EvictionService {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(
    cfg: ServiceConfig,
    stopper: Option<Arc<dyn PodStopper>>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    rx: mpsc::Receiver<Option<WatchEvent>>,
    stop: Arc<AtomicBool>,
    snapshot: Arc<Mutex<Snapshot>>,
) {
    let signals: Vec<Signal> = watched_signals(&cfg.eviction).into_iter().collect();
    let version = cfg.sources.version;
    let mut manager = Manager::new(cfg.eviction.clone(), cfg.manager.clone());
    let evictor = Evictor::new(cfg.backend, stopper, cfg.eviction.max_pod_grace_period);
    let mut last_notes: Vec<String> = Vec::new();
    let mut errors_logged = std::collections::BTreeSet::new();
    let mut conditions_prev: BTreeMap<NodeCondition, bool> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        // Wait for a watcher event or the monitoring period.
        let event = match rx.recv_timeout(cfg.monitoring_interval) {
            Ok(Some(e)) => Some(e),
            Ok(None) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        // Coalesce a burst of events: act on the freshest state.
        let mut first_event = event;
        while let Ok(more) = rx.try_recv() {
            match more {
                None => return,
                Some(e) => {
                    first_event = first_event.or(Some(e));
                }
            }
        }
        let now = Instant::now();
        let (obs, errs) = cfg.sources.observe(signals.iter().copied(), now);
        for e in errs {
            let key = e.to_string();
            if errors_logged.insert(key.clone()) {
                tracing::warn!(error = %key, "eviction signal unavailable");
            }
            metrics.error("signal_read");
        }
        let pods: Result<Vec<Candidate>, String> = {
            let s = snapshot.lock().expect("snapshot lock");
            match (&s.unavailable, &s.candidates, s.at) {
                (Some(why), _, _) => Err(format!("pod list unavailable: {why}")),
                (None, None, _) => Err("no pod listing yet".to_string()),
                (None, Some(_), Some(at))
                    if now.saturating_duration_since(at) > cfg.max_listing_age =>
                {
                    Err(format!(
                        "pod listing is {:.1}s old (max {:.1}s)",
                        now.saturating_duration_since(at).as_secs_f64(),
                        cfg.max_listing_age.as_secs_f64()
                    ))
                }
                (None, Some(c), _) => Ok(c.clone()),
            }
        };
        let pods = pods.map(|list| {
            list.into_iter()
                .map(|mut c| {
                    let dir = c.cgroup_dirs.first().cloned().unwrap_or_else(PathBuf::new);
                    c.stats = Some(pod_stats(version, &dir));
                    c
                })
                .collect::<Vec<_>>()
        });
        let decision = manager.synchronize(now, &obs, pods.as_deref().map_err(|e| e.clone()));
        if decision.notes != last_notes {
            for n in &decision.notes {
                tracing::info!(target: "qosd::eviction", "{n}");
            }
            last_notes = decision.notes.clone();
        }
        publish(&metrics, &health, &decision, &obs, &mut conditions_prev);
        match &decision.action {
            Action::Evict(v) => {
                let issued = Instant::now();
                match evictor.evict(v) {
                    Ok(out) => {
                        let reaction = first_event.map(|e| issued.saturating_duration_since(e.at));
                        metrics.eviction(v.signal.as_str(), v.candidate.qos);
                        if let Some(r) = reaction {
                            metrics.eviction_reaction(r);
                        }
                        tracing::info!(
                            target: "qosd::eviction",
                            uid = %out.uid,
                            pod = %format!("{}/{}", v.candidate.namespace, v.candidate.name),
                            backend = out.backend.as_str(),
                            reaction_ms = reaction.map(|r| r.as_secs_f64() * 1e3),
                            "eviction done"
                        );
                        health.update_status(|d| {
                            d.push_eviction(EvictionRecord {
                                at_ms: crate::http::now_ms(),
                                uid: v.candidate.uid.clone(),
                                namespace: v.candidate.namespace.clone(),
                                name: v.candidate.name.clone(),
                                qos_class: v.candidate.qos.to_string(),
                                priority: v.candidate.priority,
                                signal: v.signal.to_string(),
                                observed: v.observed,
                                threshold: v.threshold_value,
                                threshold_kind: v.kind.as_str().to_string(),
                                usage_bytes: v.usage.map(|u| u as i64),
                                request_bytes: Some(v.request),
                                rank: v.rank.saturating_sub(1),
                                backend: cfg.backend.as_str().to_string(),
                                reaction_ms: reaction.map(|r| r.as_secs_f64() * 1e3),
                            })
                        });
                        if cfg.backend == Backend::DryRun {
                            // Nothing was released: do not wait for it.
                            manager.mark_released(&v.candidate.uid);
                        }
                    }
                    Err(e) => {
                        tracing::error!(target: "qosd::eviction", uid = %v.candidate.uid, error = %e, "eviction failed");
                        metrics.error("eviction");
                        manager.eviction_failed(&v.candidate.uid, Instant::now());
                    }
                }
            }
            Action::Blocked(why) => {
                if errors_logged.insert(why.clone()) {
                    tracing::warn!(target: "qosd::eviction", "eviction needed but blocked: {why}");
                }
            }
            Action::None | Action::WaitingForRelease { .. } => {}
        }
    }
}

fn publish(
    metrics: &Metrics,
    health: &Health,
    decision: &crate::eviction::manager::Decision,
    obs: &crate::eviction::manager::Observations,
    prev: &mut BTreeMap<NodeCondition, bool>,
) {
    let mut by_signal: BTreeMap<Signal, SignalStatus> = BTreeMap::new();
    for (s, o) in obs {
        metrics.signal_observed(s.as_str(), o.available);
        metrics.signal_capacity(s.as_str(), o.capacity);
    }
    for t in &decision.thresholds {
        let sig = t.threshold.signal;
        let value = t
            .observed
            .map(|o| t.threshold.threshold_for(o.capacity))
            .unwrap_or(0);
        metrics.threshold(sig.as_str(), t.threshold.kind, value, t.met);
        let entry = by_signal.entry(sig).or_insert_with(|| SignalStatus {
            signal: sig.to_string(),
            observed: obs.get(&sig).map(|o| o.available),
            capacity: obs.get(&sig).map(|o| o.capacity),
            thresholds: Vec::new(),
        });
        entry.thresholds.push(ThresholdStatus {
            kind: t.threshold.kind.as_str().to_string(),
            threshold: t.threshold.statement(),
            value,
            met: t.met,
            grace_period: (!t.threshold.grace_period.is_zero())
                .then(|| crate::eviction::threshold::format_duration(t.threshold.grace_period)),
            min_reclaim: None,
        });
    }
    let mut conditions = Vec::new();
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
        conditions.push(ConditionStatus {
            condition: c.as_str().to_string(),
            active,
            since_ms: None,
            reason: None,
        });
    }
    health.update_status(|d| {
        d.signals = by_signal.into_values().collect();
        d.conditions = conditions;
    });
}

/// The eviction settings of a daemon config.
pub fn eviction_config(
    cfg: &crate::config::Config,
) -> Result<EvictionConfig, crate::eviction::threshold::ThresholdError> {
    EvictionConfig::from_parts(
        Some(&cfg.eviction_hard),
        &cfg.eviction_soft,
        &cfg.eviction_soft_grace_period,
        &cfg.eviction_minimum_reclaim,
        cfg.eviction_max_pod_grace_period,
        cfg.eviction_pressure_transition_period,
    )
}
