//! The eviction pieces wired together for the daemon: one call per pass.
//!
//! [`Engine::pass`] reads the signals now, fills missing pod stats from the
//! pods' cgroups, runs the manager, and acts on a victim with the evictor
//! (reporting a failure back to the manager). [`Engine::spawn_watcher`]
//! starts the fast detector whose callback should trigger a pass at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runtime::reaction::{DetectedBy, Detection, PendingDetections};
use qosd_model::policy::evict::manager::{
    watched_signals, Action, Cause, Decision, Manager, ManagerOptions, Observations,
};
use qosd_model::policy::evict::rank::{Candidate, PodStats};
use qosd_model::policy::evict::threshold::{EvictionConfig, Signal, SignalResource, ThresholdKind};
use qosd_node::evict::{ApiRefusal, EvictError, Evictor, Outcome};
use qosd_node::sys::pressure::{PressureStatus, PressureWatcher};
use qosd_node::sys::signals::{pod_local_storage, pod_stats, SignalError, SignalSources};
use qosd_node::sys::watch::{targets_from_config, WatchConfig, WatchError, WatchEvent, Watcher};

pub use qosd_node::evict::runtime::{ImageGcPolicy, NodeRuntime, ReclaimReport, WritableLayer};

/// What one pass saw and did.
#[derive(Debug)]
pub struct PassReport {
    pub decision: Decision,
    /// The evictions carried out in this pass, one per
    /// [`Decision::victims`] (in that order): at most one for node
    /// pressure, every pod over a local-storage limit.
    pub outcomes: Vec<Result<Outcome, EvictError>>,
    /// Signals that could not be read (they count as missing data).
    pub(crate) signal_errors: Vec<SignalError>,
    /// The pods with every stat measured in this pass (None: not measured,
    /// or only the memory or the storage side for a ranking).
    pub(crate) pods: Option<Vec<Candidate>>,
    /// Node-level reclaim run in this pass (before a disk eviction, or the
    /// periodic image GC).
    pub(crate) reclaim: Option<ReclaimReport>,
    /// The fast watcher's detections handed to this pass (the earliest per
    /// signal since the previous pass; set by the loop).
    pub(crate) detected: BTreeMap<Signal, Detection>,
    /// Where the pass's time went (logged at debug by the loop).
    pub(crate) phases: PassPhases,
    /// The next pass should come this soon (per-pod stall needs a second
    /// sample).
    pub(crate) again_in: Option<Duration>,
    /// The pressure signals watched: mode and last reading.
    pub(crate) pressure: Vec<PressureStatus>,
}

/// Wall time of each phase of one pass, and the pass thread's usage over
/// the whole pass (CPU, context switches, page faults: a pass that took
/// long without CPU time waited — for a lock, a core, the disk or memory
/// reclaim). The usage is read only when the debug line is enabled.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PassPhases {
    /// Reading the node signals.
    pub(crate) signals: Duration,
    /// Per-pod stats of `measured_pods` pods (when something needs them).
    pub(crate) measure: Duration,
    pub(crate) measured_pods: usize,
    /// The manager: thresholds, conditions, ranking, the victim.
    pub(crate) decide: Duration,
    /// Image GC and node-level reclaim (disk).
    pub(crate) reclaim: Duration,
    /// Acting on the victim (the kill, or the runtime call).
    pub(crate) evict: Duration,
    pub(crate) total: Duration,
    pub(crate) usage: Option<qosd_node::sys::thread_usage::ThreadUsage>,
    started: Option<Instant>,
    lap: Option<Instant>,
}

impl PassPhases {
    fn start(at: Instant) -> PassPhases {
        let usage = tracing::enabled!(target: PASS_TIMING_TARGET, tracing::Level::DEBUG)
            .then(qosd_node::sys::thread_usage::ThreadUsage::now)
            .flatten();
        PassPhases {
            usage,
            started: Some(at),
            lap: Some(at),
            ..PassPhases::default()
        }
    }

    /// Time since the previous lap.
    fn lap(&mut self) -> Duration {
        let now = Instant::now();
        let d = self
            .lap
            .map(|l| now.saturating_duration_since(l))
            .unwrap_or_default();
        self.lap = Some(now);
        d
    }

    fn finish(&mut self) {
        self.total = self.started.map(|s| s.elapsed()).unwrap_or_default();
        self.usage = self.usage.and_then(|before| {
            qosd_node::sys::thread_usage::ThreadUsage::now().map(|after| after.since(&before))
        });
    }
}

/// Target of the per-pass timing line (debug): `QOSD_LOG=info,qosd::eviction::timing=debug`.
pub(crate) const PASS_TIMING_TARGET: &str = "qosd::eviction::timing";

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

/// The per-pass timing line: from the earliest watcher detection to the
/// pass, the pod feed, each phase and the thread's usage.
pub(crate) fn log_pass_timing(r: &PassReport, woke: Instant, feed: Duration) {
    if !tracing::enabled!(target: PASS_TIMING_TARGET, tracing::Level::DEBUG) {
        return;
    }
    let p = &r.phases;
    let at = r.decision.at;
    let detected_us = r
        .detected
        .values()
        .map(|d| d.at)
        .min()
        .map(|d| us(at.saturating_duration_since(d)) as i64)
        .unwrap_or(-1);
    let u = p.usage.unwrap_or_default();
    // From the pass start to the kill (the evict phase before it is the
    // eviction's log line and the kill's set-up).
    let kill_issued_us = match r.outcome() {
        Some(Ok(Outcome { kill: Some(k), .. })) => {
            us(k.issued_at.saturating_duration_since(at)) as i64
        }
        _ => -1,
    };
    tracing::debug!(
        target: PASS_TIMING_TARGET,
        detection_to_pass_us = detected_us,
        wake_to_pass_us = us(at.saturating_duration_since(woke)),
        feed_us = us(feed),
        signals_us = us(p.signals),
        measure_us = us(p.measure),
        measured_pods = p.measured_pods,
        decide_us = us(p.decide),
        reclaim_us = us(p.reclaim),
        evict_us = us(p.evict),
        kill_issued_us,
        total_us = us(p.total),
        cpu_us = us(u.cpu),
        voluntary_switches = u.voluntary_switches,
        involuntary_switches = u.involuntary_switches,
        minor_faults = u.minor_faults,
        major_faults = u.major_faults,
        evicted = r.decision.victims().len(),
        "eviction pass timing"
    );
}

impl PassReport {
    /// The outcome of the pass's (first) eviction.
    pub fn outcome(&self) -> Option<&Result<Outcome, EvictError>> {
        self.outcomes.first()
    }
}

/// Manager + signal sources + evictor (+ the runtime for disk).
pub struct Engine {
    pub(crate) manager: Manager,
    pub(crate) sources: SignalSources,
    pub(crate) evictor: Evictor,
    /// Writable layers and node-level reclaim (None: no runtime).
    pub runtime: Option<Arc<dyn NodeRuntime>>,
    /// Storage stats of every pod at least this often while any pod has a
    /// local-storage limit, even far from every threshold (the limits are
    /// checked on them).
    pub(crate) stats_interval: Duration,
    /// Measure every pod's stats in the next pass (a reader asked:
    /// `/status`); reset by the pass.
    pub(crate) force_stats: bool,
    pub(crate) image_gc: ImageGcPolicy,
    /// How often the image GC checks the image filesystem (kubelet: 5 min).
    pub(crate) image_gc_period: Duration,
    signals: BTreeSet<Signal>,
    last_stats: Option<Instant>,
    last_image_gc: Option<Instant>,
    /// Since when storage stats wanted only for readers or local-storage
    /// limits have been put off because memory was near a threshold.
    storage_deferred_since: Option<Instant>,
    /// The pressure watcher (pressure thresholds configured; started by the
    /// loop, which owns its callback).
    pub(crate) pressure: Option<PressureWatcher>,
    /// Each pod's last `memory.pressure` reading (cgroup v2), for its stall
    /// between two passes.
    stall_history: std::collections::HashMap<String, (Instant, u64)>,
    /// The API server throttled a soft eviction: no soft eviction is asked
    /// before this (its `Retry-After`).
    api_retry_at: Option<Instant>,
}

/// What a pass measures per pod.
#[derive(Debug, Clone, Copy, Default)]
struct Wanted {
    /// Memory working set and processes.
    mem: bool,
    /// Local storage.
    disk: bool,
    /// Each pod's memory stall (a pressure threshold is near; cgroup v2).
    stall: bool,
    /// The periodic storage measurement for local-storage limits is due.
    due: bool,
}

/// When per-pod stall is measured but no pod has two samples yet, the next
/// pass comes this soon (the stalling pods are known then).
const STALL_RESAMPLE: Duration = Duration::from_millis(200);

/// A pod's previous `memory.pressure` reading older than this is not used
/// (its stall would average over a calm period).
const STALL_HISTORY_MAX_AGE: Duration = Duration::from_secs(10);

impl Engine {
    pub fn new(
        config: EvictionConfig,
        opts: ManagerOptions,
        sources: SignalSources,
        evictor: Evictor,
    ) -> Engine {
        let signals = watched_signals(&config);
        Engine {
            manager: Manager::new(config, opts),
            sources,
            evictor,
            runtime: None,
            stats_interval: Duration::from_secs(10),
            force_stats: false,
            image_gc: ImageGcPolicy::default(),
            image_gc_period: Duration::from_secs(300),
            signals,
            last_stats: None,
            last_image_gc: None,
            storage_deferred_since: None,
            pressure: None,
            stall_history: Default::default(),
            api_retry_at: None,
        }
    }

    /// One pass. `pods`: the current pods (stats `None` are measured: the
    /// pod cgroup, logs, local volumes, writable layers), or why the pod
    /// list is unavailable (then nothing is evicted).
    #[cfg(test)]
    pub fn pass(&mut self, pods: Result<Vec<Candidate>, String>) -> PassReport {
        self.pass_shared(pods.map(Arc::new))
    }

    /// [`Engine::pass`] on a shared pod list: copied only when a pass
    /// measures per-pod stats (far from every threshold it is only read).
    pub(crate) fn pass_shared(&mut self, pods: SharedPods) -> PassReport {
        let now = Instant::now();
        let mut phases = PassPhases::start(now);
        // Errors go back in the report; the caller logs them (once).
        let (obs, mut signal_errors) = self.observe(now);
        phases.signals = phases.lap();
        let want = self.wanted_stats(now, &obs, &pods);
        let mut measured = None;
        let mut again_in = None;
        let pods = pods.map(|ps| {
            if !(want.mem || want.disk) {
                return ps;
            }
            if want.due {
                self.last_stats = Some(now);
            }
            phases.measured_pods = ps.iter().filter(|c| c.stats.is_none()).count();
            let out = self.measure(Arc::unwrap_or_clone(ps), &want, &mut signal_errors);
            if want.stall {
                again_in = self.note_stall(&out);
            }
            // Readers get complete measurements only (a pass near one
            // resource measures only what it ranks by).
            if want.mem && want.disk {
                measured = Some(out.clone());
            }
            Arc::new(out)
        });
        phases.measure = phases.lap();
        let pod_list = || pods.as_deref().map(Vec::as_slice).map_err(Clone::clone);
        let mut decision = self.manager.synchronize(now, &obs, pod_list());
        phases.decide = phases.lap();
        let reclaim = self.reclaim_before_disk(now, &obs, &mut decision);
        phases.reclaim = phases.lap();
        self.wait_for_retry_after(&mut decision, now);
        let outcomes = self.evict(now, &obs, pod_list, &mut decision);
        phases.evict = phases.lap();
        phases.finish();
        PassReport {
            phases,
            decision,
            outcomes,
            signal_errors,
            pods: measured,
            reclaim,
            detected: BTreeMap::new(),
            again_in,
            pressure: self
                .pressure
                .as_ref()
                .map(|p| p.status())
                .unwrap_or_default(),
        }
    }

    /// Evict every victim of `decision` (see [`Engine::act`]); the
    /// outcomes in the victims' order.
    fn evict_all(&mut self, decision: &Decision, now: Instant) -> Vec<Result<Outcome, EvictError>> {
        decision
            .victims()
            .iter()
            .map(|v| self.act(v, now))
            .collect()
    }

    /// Evict the victim; a failure is logged and reported to the manager
    /// (back-off), except throttling, after which the same pod is chosen
    /// again.
    fn act(
        &mut self,
        v: &qosd_model::policy::evict::manager::Victim,
        now: Instant,
    ) -> Result<Outcome, EvictError> {
        let r = self.evictor.evict(v);
        match &r {
            Err(EvictError::ApiRefused {
                refusal: ApiRefusal::Throttled { retry_after, .. },
                ..
            }) => {
                tracing::warn!(pod = %v.candidate.uid, retry_after_s = retry_after.as_secs_f64(), "eviction throttled by the API server: the same pod again after Retry-After");
                self.manager.cancel(&v.candidate.uid);
                // From the answer, not the pass's start: never sooner than
                // the API side itself asks again.
                self.api_retry_at = Some(Instant::now() + *retry_after);
            }
            Err(e) => {
                tracing::error!(pod = %v.candidate.uid, error = %e, "eviction failed");
                self.manager.eviction_failed(&v.candidate.uid, now);
            }
            Ok(_) => {}
        }
        r
    }

    /// A soft eviction while the API server's `Retry-After` runs is not
    /// asked (it would be throttled again): the pass is blocked, the victim
    /// forgotten without a back-off so that the same pod is chosen after.
    /// Hard thresholds do not wait (the API side falls back to the local
    /// kill at once).
    fn wait_for_retry_after(&mut self, decision: &mut Decision, now: Instant) {
        if self.api_retry_at.is_none_or(|t| t <= now) {
            self.api_retry_at = None;
            return;
        }
        // One soft victim for node pressure (not the pods over their
        // local-storage limits, evicted together).
        let Action::Evict(v) = &decision.action else {
            return;
        };
        if v.kind != ThresholdKind::Soft || v.cause != Cause::Threshold {
            return;
        }
        let uid = v.candidate.uid.clone();
        self.manager.cancel(&uid);
        // One wording for the whole wait: the quiet log says it once.
        decision.action = Action::Blocked(format!(
            "the API server throttled evictions: soft eviction of {uid} asked again once its Retry-After has passed"
        ));
    }

    /// The node's signals now: the kubelet's from their files, the
    /// pressure signals from the pressure watcher (unavailable when it does
    /// not run: an error each, never silently absent).
    fn observe(&mut self, now: Instant) -> (Observations, Vec<SignalError>) {
        let (mut obs, mut errors) = self.sources.observe(
            self.signals.iter().copied().filter(|s| !s.is_pressure()),
            now,
        );
        let wanted: Vec<Signal> = self
            .signals
            .iter()
            .copied()
            .filter(|s| s.is_pressure())
            .collect();
        if wanted.is_empty() {
            return (obs, errors);
        }
        let Some(p) = &self.pressure else {
            errors.extend(wanted.into_iter().map(|signal| SignalError::NotConfigured {
                signal,
                message: "the pressure watcher is not running".into(),
            }));
            return (obs, errors);
        };
        for (signal, r) in p.observe(now) {
            match r {
                Ok(o) => {
                    obs.insert(signal, o);
                }
                Err(message) => errors.push(SignalError::NotConfigured { signal, message }),
            }
        }
        (obs, errors)
    }

    /// Which per-pod stats this pass measures. Per-pod usage matters to
    /// choose a victim, to see one's resources released, for local-storage
    /// limits and to readers (`/status`): it is measured when a threshold is
    /// near or a victim in flight, when a reader asks (`force_stats`), and
    /// storage every `stats_interval` while a pod has a local-storage
    /// limit. Far from every threshold nothing else needs it.
    fn wanted_stats(&mut self, now: Instant, obs: &Observations, pods: &SharedPods) -> Wanted {
        let near = |res: &[SignalResource]| {
            self.manager.config().thresholds.iter().any(|t| {
                res.contains(&t.signal.resource())
                    && obs
                        .get(&t.signal)
                        .is_some_and(|o| t.is_near(o.available, o.capacity))
            })
        };
        let near_any = near(&[
            SignalResource::Memory,
            SignalResource::MemoryStall,
            SignalResource::Disk,
            SignalResource::Inodes,
            SignalResource::Pids,
        ]);
        let near_disk = near(&[SignalResource::Disk, SignalResource::Inodes]);
        let stall = near(&[SignalResource::MemoryStall]);
        let limits = pods
            .as_ref()
            .is_ok_and(|ps| ps.iter().any(|c| !c.storage_limits.is_empty()));
        let due = limits
            && self
                .last_stats
                .is_none_or(|t| now.saturating_duration_since(t) >= self.stats_interval);
        let forced = std::mem::take(&mut self.force_stats);
        let in_flight = self.manager.in_flight().next().is_some();
        let mem = near_any || in_flight || forced;
        let mut disk = near_disk || due || forced;
        // Storage wanted only by a reader or for local-storage limits asks
        // the runtime (ListContainerStats: 25-150 ms at load 10) and walks
        // logs and volumes; while memory is near a threshold that would
        // hold up a memory eviction in this pass, so it waits for a pass
        // with memory calm — at most `stats_interval`.
        let near_mem = near(&[SignalResource::Memory, SignalResource::MemoryStall]);
        if disk && !near_disk && near_mem {
            let since = *self.storage_deferred_since.get_or_insert(now);
            if now.saturating_duration_since(since) < self.stats_interval {
                disk = false;
                self.force_stats |= forced;
            }
        }
        if disk {
            self.storage_deferred_since = None;
        }
        Wanted {
            mem,
            disk,
            stall: stall && self.sources.version == qosd_model::core::model::CgroupVersion::V2,
            due: due && disk,
        }
    }

    /// Node-level reclaim before evicting for disk (kubelet
    /// reclaimNodeLevelResources): dead containers, unused images; then
    /// evict only if a threshold is still met. With the periodic image GC.
    fn reclaim_before_disk(
        &mut self,
        now: Instant,
        obs: &Observations,
        decision: &mut Decision,
    ) -> Option<ReclaimReport> {
        let mut reclaim = self.periodic_image_gc(now, obs);
        let (Some(v), Some(rt)) = (decision.victim().cloned(), self.runtime.clone()) else {
            return reclaim;
        };
        if v.cause != Cause::Threshold
            || !matches!(
                v.signal.resource(),
                SignalResource::Disk | SignalResource::Inodes
            )
        {
            return reclaim;
        }
        let rep = rt.reclaim(now);
        let (after, _) = self.sources.observe(
            self.signals.iter().copied().filter(|s| !s.is_pressure()),
            Instant::now(),
        );
        let still: Vec<String> = self
            .manager
            .config()
            .thresholds
            .iter()
            .filter(|t| {
                after
                    .get(&t.signal)
                    .is_some_and(|o| t.is_met(o.available, o.capacity, true))
            })
            .map(|t| t.statement())
            .collect();
        if still.is_empty() {
            decision.events.push(format!(
                "node-level reclaim freed enough ({} dead containers, {} images removed): no pod evicted for {}",
                rep.containers_removed,
                rep.images_removed.len(),
                v.threshold.statement()
            ));
            self.manager.cancel(&v.candidate.uid);
            decision.action = Action::None;
        } else if rep.containers_removed + rep.images_removed.len() > 0 {
            decision.events.push(format!(
                "node-level reclaim removed {} dead containers and {} images; still met: {}: evicting",
                rep.containers_removed,
                rep.images_removed.len(),
                still.join(", ")
            ));
        }
        reclaim = Some(rep);
        reclaim
    }

    /// Act on the decision's victims. A soft eviction the API refused with
    /// nothing done moves on to the next candidate at once (the refused pod
    /// is in back-off), a few at most per pass; throttling and an
    /// unanswered request do not.
    fn evict<'p>(
        &mut self,
        now: Instant,
        obs: &Observations,
        pod_list: impl Fn() -> Result<&'p [Candidate], String>,
        decision: &mut Decision,
    ) -> Vec<Result<Outcome, EvictError>> {
        let mut outcomes = self.evict_all(decision, now);
        for _ in 0..MAX_REFUSED_PER_PASS {
            let moves_on = matches!(
                outcomes.as_slice(),
                [Err(EvictError::ApiRefused { refusal, .. })] if refusal.moves_on()
            ) && decision
                .victim()
                .is_some_and(|v| v.cause == Cause::Threshold);
            if !moves_on {
                break;
            }
            *decision = self.manager.synchronize(now, obs, pod_list());
            outcomes = self.evict_all(decision, now);
        }
        outcomes
    }

    /// Per-pod stall was sampled in this pass: tell the manager whether it
    /// is measured on this node, forget gone pods, and ask for another pass
    /// soon when it is measured but no pod has two samples yet (the
    /// ranking waits for the pods that stall).
    fn note_stall(&mut self, pods: &[Candidate]) -> Option<Duration> {
        let listed: std::collections::BTreeSet<&str> =
            pods.iter().map(|c| c.uid.as_str()).collect();
        self.stall_history
            .retain(|uid, _| listed.contains(uid.as_str()));
        let readable = !self.stall_history.is_empty();
        self.manager.set_per_pod_pressure(readable);
        let known = pods
            .iter()
            .any(|c| c.stats.is_some_and(|s| s.memory_stall_ppm.is_some()));
        (readable && !known).then_some(STALL_RESAMPLE)
    }

    /// A pod's stall since its previous sample (ppm of the interval), its
    /// counter read now; `None` on a first sample or one too old.
    fn pod_stall(&mut self, uid: &str, dir: &std::path::Path, now: Instant) -> Option<u32> {
        let total = qosd_node::sys::pressure::cgroup_memory_stall_us(dir).ok()?;
        let prev = self.stall_history.insert(uid.to_string(), (now, total));
        let (at, before) = prev?;
        let dt = now.saturating_duration_since(at);
        if dt.is_zero() || dt > STALL_HISTORY_MAX_AGE || total < before {
            return None;
        }
        let ppm = (total - before) as f64 / dt.as_micros() as f64 * 1e6;
        Some(ppm.clamp(0.0, 1e6) as u32)
    }

    /// Image GC between the kubelet's high and low thresholds, every
    /// `image_gc_period`, on the image filesystem.
    fn periodic_image_gc(
        &mut self,
        now: Instant,
        obs: &qosd_model::policy::evict::manager::Observations,
    ) -> Option<ReclaimReport> {
        let rt = self.runtime.clone()?;
        if self
            .last_image_gc
            .is_some_and(|t| now.saturating_duration_since(t) < self.image_gc_period)
        {
            return None;
        }
        self.last_image_gc = Some(now);
        let (avail, cap) = match obs.get(&Signal::ImageFsAvailable) {
            Some(o) => (o.available, o.capacity),
            None => self.sources.read(Signal::ImageFsAvailable).ok()?,
        };
        if cap <= 0 {
            return None;
        }
        let usage_percent = 100 - (avail.max(0) as i128 * 100 / cap as i128) as i64;
        if usage_percent < i64::from(self.image_gc.high_percent) {
            return None;
        }
        let to_free = (cap as i128 * i128::from(100 - self.image_gc.low_percent) / 100
            - avail as i128)
            .max(0);
        tracing::info!(
            target: "qosd::eviction",
            usage_percent,
            high = self.image_gc.high_percent,
            bytes_to_free = to_free as u64,
            "image filesystem over imageGCHighThresholdPercent: removing unused images"
        );
        Some(rt.free_images(to_free as u64, now))
    }

    /// Fill missing stats: memory and processes from the pod cgroup; local
    /// storage from the writable layers (runtime), logs and local volumes.
    fn measure(
        &mut self,
        pods: Vec<Candidate>,
        want: &Wanted,
        errors: &mut Vec<SignalError>,
    ) -> Vec<Candidate> {
        let version = self.sources.version;
        let (mem, disk) = (want.mem, want.disk);
        let layers = match (&self.runtime, disk) {
            (Some(rt), true) => match rt.writable_layers() {
                Ok(l) => Some(l),
                Err(message) => {
                    errors.push(SignalError::NotConfigured {
                        signal: Signal::NodeFsAvailable,
                        message: format!("per-pod writable layers unavailable: {message}"),
                    });
                    None
                }
            },
            _ => None,
        };
        let now = Instant::now();
        pods.into_iter()
            .map(|mut c| {
                if c.stats.is_some() {
                    return c;
                }
                let mut st = PodStats::default();
                let mut any = false;
                if mem {
                    if let Some(dir) = c.cgroup_dirs.first() {
                        let m = pod_stats(version, dir);
                        any |= m.memory_working_set_bytes.is_some() || m.processes.is_some();
                        st.memory_working_set_bytes = m.memory_working_set_bytes;
                        st.processes = m.processes;
                    }
                }
                if want.stall {
                    if let Some(dir) = c.cgroup_dirs.first().cloned() {
                        st.memory_stall_ppm = self.pod_stall(&c.uid, &dir, now);
                    }
                }
                if disk {
                    if let Some(root) = &self.sources.pod_root_dir {
                        match pod_local_storage(
                            root,
                            &self.sources.pod_logs_dir,
                            &c.namespace,
                            &c.name,
                            &c.uid,
                        ) {
                            Ok(local) => {
                                let pod_layers = layers.as_ref().and_then(|l| l.get(&c.uid));
                                let (detail, parts) = storage_of(&local, pod_layers);
                                st = st.with_storage(&parts);
                                c.storage_detail = Some(detail);
                                any = true;
                            }
                            Err(e) => errors.push(e),
                        }
                    }
                }
                if any {
                    c.stats = Some(st);
                }
                c
            })
            .collect()
    }

    /// Start the fast detector on the memory hard thresholds; `on_event`
    /// runs on the watcher thread and should wake the pass loop.
    pub(crate) fn spawn_watcher(
        &self,
        cfg: WatchConfig,
        on_event: impl FnMut(WatchEvent) + Send + 'static,
    ) -> Result<Watcher, WatchError> {
        let targets = targets_from_config(self.manager.config(), &self.sources)?;
        Watcher::spawn(targets, cfg, on_event)
    }
}

/// Candidates tried in one pass after API refusals of soft evictions.
const MAX_REFUSED_PER_PASS: usize = 8;

/// A pod's storage from its measured logs/volumes and writable layers:
/// the per-container/per-volume detail (limits) and the parts (ranking).
pub(crate) fn storage_of(
    local: &qosd_node::sys::signals::PodLocalStorage,
    layers: Option<&Vec<WritableLayer>>,
) -> (
    qosd_model::policy::evict::local_storage::StorageDetail,
    PodStats,
) {
    use qosd_model::policy::evict::local_storage::{ContainerStorage, StorageDetail};
    let mut parts = PodStats::default();
    let mut containers: BTreeMap<String, ContainerStorage> = BTreeMap::new();
    if let Some(ls) = layers {
        let (mut b, mut i, mut any_b, mut any_i) = (0u64, 0u64, false, false);
        for l in ls {
            if let Some(x) = l.bytes {
                b += x;
                any_b = true;
            }
            if let Some(x) = l.inodes {
                i += x;
                any_i = true;
            }
            let e = containers.entry(l.container.clone()).or_default();
            e.name = l.container.clone();
            e.rootfs_bytes = Some(e.rootfs_bytes.unwrap_or(0) + l.bytes.unwrap_or(0));
        }
        parts.rootfs_bytes = any_b.then_some(b);
        parts.rootfs_inodes = any_i.then_some(i);
    }
    for (name, b) in &local.container_logs {
        let e = containers.entry(name.clone()).or_default();
        e.name = name.clone();
        e.logs_bytes = Some(*b);
    }
    let (lb, li) = local.logs.unwrap_or((0, 0));
    parts.logs_bytes = Some(lb);
    parts.logs_inodes = Some(li);
    let (vb, vi) = local.volumes_total();
    parts.volumes_bytes = Some(vb);
    parts.volumes_inodes = Some(vi);
    let detail = StorageDetail {
        containers: containers.into_values().collect(),
        volumes: local
            .volumes
            .iter()
            .filter(|v| v.plugin == "kubernetes.io~empty-dir")
            .map(|v| (v.name.clone(), v.bytes))
            .collect(),
        total_bytes: parts.rootfs_bytes.unwrap_or(0) + lb + vb,
    };
    (detail, parts)
}

/// The latest pod list, shared between the daemon's listing loop (writer)
/// and the eviction loop (reader).
#[derive(Debug)]
pub(crate) struct PodFeed {
    /// Shared with the passes that read it (no copy per pass).
    inner: std::sync::Mutex<(SharedPods, Instant)>,
}

/// The pods of the last listing, shared, or why there are none.
type SharedPods = Result<Arc<Vec<Candidate>>, String>;

impl Default for PodFeed {
    fn default() -> Self {
        PodFeed {
            inner: std::sync::Mutex::new((Err("no pod list yet".into()), Instant::now())),
        }
    }
}

impl PodFeed {
    /// Publish a fresh listing (stats may be `None`: read from cgroups).
    pub(crate) fn set(&self, pods: Vec<Candidate>) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) =
            (Ok(Arc::new(pods)), Instant::now());
    }

    /// The pods published last are current as of now (an unchanged
    /// listing); false when there are none (a failure since).
    pub(crate) fn refresh(&self) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.0.is_err() {
            return false;
        }
        g.1 = Instant::now();
        true
    }

    /// The listing failed (runtime down…): evictions stop until the next `set`.
    pub(crate) fn failed(&self, why: impl Into<String>) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = (Err(why.into()), Instant::now());
    }

    /// The pods, or why they are unusable (failed, or older than `max_age`).
    pub(crate) fn get(&self, max_age: std::time::Duration) -> Result<Arc<Vec<Candidate>>, String> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let age = g.1.elapsed();
        match &g.0 {
            Ok(p) if age <= max_age => Ok(p.clone()),
            Ok(_) => Err(format!(
                "the pod list is {} old (max {})",
                qosd_model::core::duration::format_go_duration(age),
                qosd_model::core::duration::format_go_duration(max_age)
            )),
            Err(e) => Err(e.clone()),
        }
    }
}

/// Worst ramps a pass period is planned for, per resource: bytes of
/// memory or disk, inodes and processes per second. Memory matches the fast
/// watcher's default (`WatchConfig::max_ramp_bytes_per_sec`).
pub(crate) const WORST_RAMP_BYTES_PER_SEC: i64 = 1 << 30;
pub(crate) const WORST_RAMP_INODES_PER_SEC: i64 = 100_000;
pub(crate) const WORST_RAMP_PIDS_PER_SEC: i64 = 10_000;

/// When the next pass is due after `decision`: `period` while a threshold
/// is met, a node condition is active, an action is under way (a victim,
/// blocked, waiting for a release) or a pod is in flight; otherwise the
/// time the worst ramp of each threshold's resource needs to eat the
/// distance to it (`available − line`), clamped to [`period`, `idle`].
/// Hard thresholds of `watched` signals are left out: the fast watcher
/// wakes the loop on their crossing. An unread signal does not shorten it
/// (its thresholds are not evaluated; it is read again at the next pass).
pub(crate) fn next_pass_in(
    decision: &Decision,
    in_flight: bool,
    watched: &[Signal],
    period: Duration,
    idle: Duration,
) -> Duration {
    use qosd_model::policy::evict::threshold::ThresholdKind;
    if in_flight
        || !decision.conditions.is_empty()
        || !matches!(decision.action, Action::None)
        || decision.thresholds.iter().any(|t| t.met)
    {
        return period;
    }
    let mut next = idle.max(period);
    for t in &decision.thresholds {
        if t.threshold.kind == ThresholdKind::Hard && watched.contains(&t.threshold.signal) {
            continue;
        }
        let (Some(o), Some(line)) = (t.observed, t.line) else {
            continue;
        };
        let rate = match t.threshold.signal.resource() {
            SignalResource::Memory | SignalResource::Disk => WORST_RAMP_BYTES_PER_SEC,
            SignalResource::Inodes => WORST_RAMP_INODES_PER_SEC,
            SignalResource::Pids => WORST_RAMP_PIDS_PER_SEC,
            // The pressure watcher wakes the loop (a kernel trigger, or its
            // own reading of the counter): nothing to plan for here.
            SignalResource::MemoryStall => continue,
        };
        let distance = o.available.saturating_sub(line).max(0);
        let secs = distance as f64 / rate as f64;
        next = next.min(Duration::from_secs_f64(secs.min(3600.0)));
    }
    next.max(period)
}

/// A running eviction loop (its thread and the watcher); stops on drop.
pub(crate) struct EvictionLoop {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    wake: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
    watcher: Option<Watcher>,
}

/// Timing of the eviction loop.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoopOptions {
    /// A pass at least this often (disk/pid signals, releases, conditions)
    /// while anything is near or under way; see [`next_pass_in`].
    pub(crate) period: std::time::Duration,
    /// A pass at least this often when every threshold is far (the time a
    /// worst-case ramp needs to reach it, [`next_pass_in`]) and nothing is
    /// met, active or in flight.
    pub(crate) idle_period: std::time::Duration,
    /// Pod lists older than this block evictions.
    pub(crate) max_pod_list_age: std::time::Duration,
    /// The fast detector; `None`: passes only every `period` (the kubelet's
    /// behaviour, a benchmark baseline).
    pub(crate) watch: Option<WatchConfig>,
    /// Run the pass thread with SCHED_FIFO at this priority (where the
    /// process may: [`qosd_node::sys::watch::realtime_allowed`]), with or
    /// without the watcher; `None`: normal scheduling.
    pub(crate) rt_priority: Option<i32>,
    /// The pressure watcher (pressure thresholds configured): its targets
    /// and tunables; `None`: not started.
    pub(crate) pressure: Option<PressureOptions>,
}

/// What the pressure watcher watches and how.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PressureOptions {
    pub(crate) targets: Vec<qosd_node::sys::pressure::PressureTarget>,
    pub(crate) config: qosd_node::sys::pressure::PressureConfig,
}

impl Default for LoopOptions {
    fn default() -> Self {
        LoopOptions {
            period: std::time::Duration::from_secs(1),
            idle_period: std::time::Duration::from_secs(10),
            max_pod_list_age: std::time::Duration::from_secs(60),
            watch: Some(WatchConfig::default()),
            rt_priority: None,
            pressure: None,
        }
    }
}

/// The memory watcher's callback: note the detection, wake the loop.
fn on_watch(
    tx: std::sync::mpsc::Sender<()>,
    pending: std::sync::Arc<PendingDetections>,
) -> impl FnMut(WatchEvent) + Send + 'static {
    move |e: WatchEvent| {
        pending.note(
            e.signal,
            Detection {
                at: e.at,
                gap: e.gap,
                by: DetectedBy::Watcher,
            },
        );
        let _ = tx.send(());
    }
}

/// Start the pressure watcher into the engine; its events are noted as
/// detections and wake the loop, like the memory watcher's. A signal the
/// kernel cannot watch (no PSI) is reported unavailable by the pass; only
/// a thread that cannot start is an error.
fn start_pressure(
    engine: &mut Engine,
    opts: &PressureOptions,
    tx: &std::sync::mpsc::Sender<()>,
    pending: &std::sync::Arc<PendingDetections>,
) -> Result<(), WatchError> {
    let (tx, pending) = (tx.clone(), pending.clone());
    let w = PressureWatcher::spawn(opts.targets.clone(), opts.config.clone(), move |e| {
        pending.note(
            e.signal,
            Detection {
                at: e.at,
                gap: e.gap,
                by: DetectedBy::Pressure,
            },
        );
        let _ = tx.send(());
    })
    .map_err(|e| WatchError::Spawn(std::io::Error::other(e.to_string())))?;
    for st in w.status() {
        tracing::info!(
            target: "qosd::eviction",
            signal = %st.signal,
            window = %qosd_model::core::duration::format_go_duration(st.window),
            mode = %st.mode.describe(),
            "pressure signal watched"
        );
    }
    engine.pressure = Some(w);
    Ok(())
}

/// The eviction loop's thread: everything it owns.
struct LoopRunner {
    engine: Engine,
    feed: std::sync::Arc<PodFeed>,
    rx: std::sync::mpsc::Receiver<()>,
    tx_late: std::sync::mpsc::Sender<()>,
    pending: std::sync::Arc<PendingDetections>,
    /// The watcher lives (and stops) with this thread, which checks that
    /// it is still running.
    watcher: Option<Watcher>,
    retry_watch: Option<WatchConfig>,
    heartbeat: Option<std::sync::Arc<crate::telemetry::health::Heartbeat>>,
    health: Option<std::sync::Arc<crate::telemetry::health::Health>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    opts: LoopOptions,
}

impl LoopRunner {
    /// Run passes until stopped: at once on every watcher event, at least
    /// every period ([`next_pass_in`]).
    fn run(mut self, mut on_pass: impl FnMut(&PassReport)) {
        use std::sync::atomic::Ordering;
        // The pass itself must not lag the detector, nor wait for a core
        // when it is the only detector.
        if let Some(p) = self.opts.rt_priority {
            use qosd_node::sys::watch::{set_thread_realtime, Realtime};
            match set_thread_realtime(p) {
                Realtime::Set => {}
                Realtime::Failed(error) => tracing::warn!(priority = p, error = %error, "cannot run the eviction pass thread with SCHED_FIFO; using normal scheduling"),
                // (with the watcher, its thread logs this once)
                Realtime::NotPermitted if self.opts.watch.is_none() => tracing::info!(priority = p, "eviction passes at normal priority: real-time scheduling not permitted here (RLIMIT_RTPRIO 0, no CAP_SYS_NICE)"),
                Realtime::NotPermitted => {}
            }
        }
        let mut wait = self.opts.period;
        while !self.stop.load(Ordering::Relaxed) {
            let _ = self.rx.recv_timeout(wait);
            let woke = Instant::now();
            while self.rx.try_recv().is_ok() {} // coalesce wake-ups
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            self.check_detectors();
            crate::runtime::supervisor::inject_panic("eviction-pass");
            // A reader (`/status`) waits for fresh per-pod usage.
            let asked = self.health.as_ref().and_then(|h| h.usage_wanted());
            self.engine.force_stats |= asked.is_some();
            let detected = self.pending.take();
            let fed = Instant::now();
            let pods = self.feed.get(self.opts.max_pod_list_age);
            let fed = fed.elapsed();
            let mut report = self.engine.pass_shared(pods);
            report.detected = detected;
            log_pass_timing(&report, woke, fed);
            on_pass(&report);
            if let (Some(h), Some(g)) = (&self.health, asked) {
                h.usage_measured(g);
            }
            wait = self.next_wait(&report);
        }
    }

    /// Start the memory watcher if it could not start before, beat the
    /// heartbeat, and fail liveness when a watcher thread died.
    fn check_detectors(&mut self) {
        if let Some(wc) = &self.retry_watch {
            match self.engine.spawn_watcher(
                wc.clone(),
                on_watch(self.tx_late.clone(), self.pending.clone()),
            ) {
                Ok(w) => {
                    tracing::info!("fast memory watcher started");
                    self.watcher = Some(w);
                    self.retry_watch = None;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "fast memory watcher still unavailable")
                }
            }
        }
        if let Some(hb) = &self.heartbeat {
            hb.beat();
        }
        if let Some(h) = &self.health {
            if self.watcher.as_ref().is_some_and(|w| !w.is_running()) {
                h.fail("fast memory watcher thread died".into());
            }
            if self
                .engine
                .pressure
                .as_ref()
                .is_some_and(|w| !w.is_running())
            {
                h.fail("pressure watcher thread died".into());
            }
        }
    }

    /// When the next pass is due after `report`.
    fn next_wait(&self, report: &PassReport) -> Duration {
        let in_flight = self.engine.manager.in_flight().next().is_some();
        let wait = match &self.watcher {
            // Until the watcher runs, memory is only seen by passes.
            _ if self.retry_watch.is_some() => self.opts.period,
            Some(w) if w.is_running() => next_pass_in(
                &report.decision,
                in_flight,
                &w.signals,
                self.opts.period,
                self.opts.idle_period,
            ),
            _ => next_pass_in(
                &report.decision,
                in_flight,
                &[],
                self.opts.period,
                self.opts.idle_period,
            ),
        };
        report.again_in.map_or(wait, |a| a.min(wait))
    }
}

impl EvictionLoop {
    /// Start the watcher and a thread that runs [`Engine::pass`] at once on
    /// every watcher event, and at least every `period`. `on_pass` gets each
    /// report (metrics, status, conditions) on that thread. Unsupervised:
    /// for unit tests; the daemon uses [`EvictionLoop::spawn_supervised`].
    #[cfg(test)]
    pub(crate) fn spawn(
        engine: Engine,
        feed: std::sync::Arc<PodFeed>,
        opts: LoopOptions,
        on_pass: impl FnMut(&PassReport) + Send + 'static,
    ) -> Result<EvictionLoop, WatchError> {
        Self::spawn_supervised(engine, feed, opts, None, on_pass)
    }

    /// [`EvictionLoop::spawn`] under supervision: the loop beats a heartbeat
    /// registered with `health` (deadline: 10 periods, at least 30 s), a
    /// panic in it fails liveness with the reason, and so does a fast
    /// watcher thread that died.
    pub(crate) fn spawn_supervised(
        mut engine: Engine,
        feed: std::sync::Arc<PodFeed>,
        opts: LoopOptions,
        health: Option<std::sync::Arc<crate::telemetry::health::Health>>,
        on_pass: impl FnMut(&PassReport) + Send + 'static,
    ) -> Result<EvictionLoop, WatchError> {
        use std::sync::atomic::AtomicBool;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // The watchers' reads that saw a crossing, until a pass takes them.
        let pending = std::sync::Arc::new(PendingDetections::default());
        let watcher = match &opts.watch {
            None => None,
            Some(wc) => {
                match engine.spawn_watcher(wc.clone(), on_watch(tx.clone(), pending.clone())) {
                    Ok(w) => Some(w),
                    // Evictions still happen, at the pass period; the loop
                    // retries the watcher at each pass (the kubepods cgroup may
                    // not exist yet: `qosd run` creates it at its first reconcile).
                    Err(e) => {
                        tracing::warn!(error = %e, period = ?opts.period, "fast memory watcher unavailable; evaluating every period until it starts");
                        None
                    }
                }
            }
        };
        if let Some(pc) = &opts.pressure {
            start_pressure(&mut engine, pc, &tx, &pending)?;
        }
        let retry_watch = match (&watcher, &opts.watch) {
            (None, Some(wc)) => Some(wc.clone()),
            _ => None,
        };
        if let Some(h) = &health {
            h.set_usage_measurer(tx.clone());
        }
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let heartbeat = health.as_ref().map(|h| {
            h.register_loop(
                "eviction loop",
                (opts.period * 10).max(std::time::Duration::from_secs(30)),
            )
        });
        let runner = LoopRunner {
            engine,
            feed,
            rx,
            tx_late: tx.clone(),
            pending,
            watcher,
            retry_watch,
            heartbeat,
            health: health.clone(),
            stop: stop.clone(),
            opts,
        };
        let thread =
            crate::runtime::supervisor::spawn_supervised("qosd-evict-loop", health, move || {
                runner.run(on_pass)
            })
            .map_err(WatchError::Spawn)?;
        Ok(EvictionLoop {
            stop,
            wake: tx,
            thread: Some(thread),
            watcher: None,
        })
    }

    /// Stop the watcher and the loop, and wait for them (what drop does).
    #[cfg(test)]
    pub(crate) fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            w.stop();
        }
        let _ = self.wake.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EvictionLoop {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qosd_model::core::model::{CgroupVersion, QosClass};
    use qosd_model::policy::evict::threshold::RawEvictionConfig;
    use qosd_model::policy::evict::Backend;
    use qosd_model::policy::evict::MemorySource;
    use std::path::PathBuf;
    use std::time::Duration;

    fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/signals")
    }

    fn engine(threshold: &str) -> Engine {
        engine_with(RawEvictionConfig {
            eviction_hard: Some(
                [(
                    "allocatableMemory.available".to_string(),
                    threshold.to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        })
    }

    fn engine_with(raw: RawEvictionConfig) -> Engine {
        let f = fixtures();
        let sources = SignalSources {
            version: CgroupVersion::V1,
            memory_root: f.join("v1"),
            kubepods: Some(f.join("v1/kubepods")),
            allocatable_memory_bytes: None,
            meminfo: f.join("meminfo"),
            loadavg: f.join("loadavg"),
            pid_max: f.join("pid_max"),
            nodefs: None,
            imagefs: None,
            containerfs: None,
            memory_source: MemorySource::WorkingSet,
            pod_root_dir: None,
            pod_logs_dir: "/nonexistent".into(),
        };
        let cfg = EvictionConfig::from_raw(&raw).unwrap();
        Engine::new(
            cfg,
            ManagerOptions::default(),
            sources,
            Evictor::new(Backend::DryRun, None, Duration::ZERO),
        )
    }

    fn pod(uid: &str, qos: QosClass, dir: Option<PathBuf>) -> Candidate {
        Candidate {
            uid: uid.into(),
            namespace: "ns".into(),
            name: uid.into(),
            qos,
            priority: 0,
            static_or_mirror: false,
            memory_request_bytes: 0,
            ephemeral_storage_request_bytes: 0,
            termination_grace_period_seconds: None,
            sandbox_id: None,
            cgroup_dirs: dir.into_iter().collect(),
            storage_limits: Default::default(),
            storage_detail: None,
            stats: None,
        }
    }

    #[test]
    fn pass_fills_stats_and_dry_runs() {
        // fixture kubepods: limit 1 GiB, working set 600 MiB → 424 MiB available
        let mut e = engine("500Mi");
        let pods = vec![
            pod(
                "abc",
                QosClass::BestEffort,
                Some(fixtures().join("v1/kubepods/besteffort/podabc")),
            ),
            pod("nodir", QosClass::BestEffort, None),
        ];
        let r = e.pass(Ok(pods));
        assert!(r.signal_errors.is_empty(), "{:?}", r.signal_errors);
        let v = r.decision.victim().expect("victim");
        // the pod without stats ranks first, like the kubelet
        assert_eq!(v.candidate.uid, "nodir");
        assert_eq!(v.observed, 424 * 1024 * 1024);
        assert!(matches!(r.outcome(), Some(Ok(o)) if o.backend == Backend::DryRun));

        let mut e = engine("100Mi");
        let r = e.pass(Ok(vec![pod(
            "abc",
            QosClass::BestEffort,
            Some(fixtures().join("v1/kubepods/besteffort/podabc")),
        )]));
        assert!(r.decision.victim().is_none());
        assert!(r.outcomes.is_empty());
    }

    #[test]
    fn loop_passes_on_watcher_events() {
        let e = engine("500Mi"); // fixture: 424 MiB available → below at once
        let feed = std::sync::Arc::new(PodFeed::default());
        feed.set(vec![pod(
            "abc",
            QosClass::BestEffort,
            Some(fixtures().join("v1/kubepods/besteffort/podabc")),
        )]);
        let (tx, rx) = std::sync::mpsc::channel();
        let opts = LoopOptions {
            period: Duration::from_secs(60), // only watcher events can drive passes
            ..Default::default()
        };
        let l = EvictionLoop::spawn(e, feed.clone(), opts, move |r| {
            let _ = tx.send((
                r.decision.victim().map(|v| v.candidate.uid.clone()),
                r.detected.get(&Signal::AllocatableMemoryAvailable).copied(),
                r.decision.at,
            ));
        })
        .unwrap();
        let (first, detected, at) = rx.recv_timeout(Duration::from_secs(5)).expect("a pass");
        assert_eq!(first.as_deref(), Some("abc"));
        // the watcher's read that woke the pass is handed to it, and came first
        let d = detected.expect("the watcher's detection handed to the pass");
        assert_eq!(d.by, DetectedBy::Watcher);
        assert!(d.at <= at, "detection {:?} after the pass {:?}", d.at, at);
        l.stop();
    }

    #[test]
    fn watcher_retried_until_kubepods_exists() {
        // `qosd run` starts the loop before its first reconcile creates
        // kubepods: the watcher must start once it exists.
        let tmp = tempfile::tempdir().unwrap();
        let mut e = engine("500Mi"); // fixture: 424 MiB available → below at once
        e.sources.kubepods = Some(tmp.path().join("kubepods"));
        let feed = std::sync::Arc::new(PodFeed::default());
        feed.set(vec![pod("abc", QosClass::BestEffort, None)]);
        let passes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let p2 = passes.clone();
        let opts = LoopOptions {
            period: Duration::from_millis(300),
            max_pod_list_age: Duration::from_secs(600),
            ..Default::default()
        };
        let l = EvictionLoop::spawn(e, feed, opts, move |_r| {
            p2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(700));
        let kp = tmp.path().join("kubepods");
        std::fs::create_dir(&kp).unwrap();
        for f in [
            "memory.stat",
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
        ] {
            std::fs::copy(fixtures().join("v1/kubepods").join(f), kp.join(f)).unwrap();
        }
        // Let the next period pass start the watcher, then count: below the
        // line, its events drive passes far more often than the period.
        std::thread::sleep(Duration::from_millis(700));
        let before = passes.load(std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(1200));
        let during = passes.load(std::sync::atomic::Ordering::Relaxed) - before;
        l.stop();
        assert!(during > 8, "{during} passes in 1.2 s: watcher not started");
    }

    #[test]
    fn pass_period_follows_distance() {
        let ms = Duration::from_millis;
        let (period, idle) = (ms(1000), ms(10_000));
        // fixture: 424 MiB available; 100Mi line → 324 MiB away, 0.32 s at
        // the worst memory ramp (1 GiB/s)
        let mut e = engine("100Mi");
        let d = e.pass(Ok(vec![])).decision;
        assert!(d.thresholds.iter().all(|t| !t.met));
        let watched = [Signal::AllocatableMemoryAvailable];
        assert_eq!(next_pass_in(&d, false, &[], period, idle), period);
        let short = next_pass_in(&d, false, &[], ms(10), idle);
        assert!(short > ms(300) && short < ms(330), "{short:?}");
        // the watcher wakes the loop on that hard threshold: nothing near
        assert_eq!(next_pass_in(&d, false, &watched, period, idle), idle);
        // a pod in flight keeps the short period
        assert_eq!(next_pass_in(&d, true, &watched, period, idle), period);
        // met (and a victim): the short period, watched or not
        let mut e = engine("500Mi");
        let d = e.pass(Ok(vec![])).decision;
        assert!(d.thresholds.iter().any(|t| t.met));
        assert_eq!(next_pass_in(&d, false, &watched, period, idle), period);
    }

    #[test]
    fn storage_for_readers_waits_while_memory_is_near() {
        // fixture: memory met at 500Mi. A reader asked for every stat: the
        // pass that may evict for memory measures memory only (the runtime
        // call and the du walks wait), the reader's request stays pending.
        let root = tempfile::tempdir().unwrap();
        let mut e = engine("500Mi");
        e.sources.pod_root_dir = Some(root.path().to_path_buf());
        e.stats_interval = Duration::from_secs(3600);
        let dir = fixtures().join("v1/kubepods/besteffort/podabc");
        let pods = || vec![pod("abc", QosClass::BestEffort, Some(dir.clone()))];
        e.force_stats = true;
        let r = e.pass(Ok(pods()));
        assert!(r.decision.victim().is_some(), "memory met: a victim");
        assert!(r.pods.is_none(), "no complete measurement in that pass");
        assert!(e.force_stats, "the reader's request is kept");
        // put off at most `stats_interval`: then measured despite memory
        e.stats_interval = Duration::ZERO;
        let r = e.pass(Ok(pods()));
        let measured = r.pods.expect("complete measurement");
        let st = measured[0].stats.expect("stats");
        assert!(
            st.memory_working_set_bytes.is_some() && st.logs_bytes.is_some(),
            "{st:?}"
        );
        assert!(!e.force_stats);
        // far from memory: measured at once
        let mut e = engine("100Mi");
        e.sources.pod_root_dir = Some(root.path().to_path_buf());
        e.force_stats = true;
        assert!(e.pass(Ok(pods())).pods.is_some());
    }

    #[test]
    fn pod_feed_staleness() {
        let f = PodFeed::default();
        assert_eq!(
            f.get(Duration::from_secs(1)).unwrap_err(),
            "no pod list yet"
        );
        f.set(vec![]);
        assert!(f.get(Duration::from_secs(1)).is_ok());
        std::thread::sleep(Duration::from_millis(20));
        assert!(f.get(Duration::from_millis(5)).unwrap_err().contains("old"));
        // An unchanged listing marks the same pods current again (shared,
        // not copied); after a failure there is nothing to mark.
        let before = f.get(Duration::from_secs(60)).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        assert!(f.get(Duration::from_millis(400)).is_err());
        assert!(f.refresh());
        let after = f.get(Duration::from_millis(400)).unwrap();
        assert!(Arc::ptr_eq(&before, &after));
        f.failed("runtime down");
        assert_eq!(f.get(Duration::from_secs(1)).unwrap_err(), "runtime down");
        assert!(!f.refresh());
        assert_eq!(f.get(Duration::from_secs(1)).unwrap_err(), "runtime down");
    }

    /// A pressure threshold through the engine (cgroup v2 fixtures): the
    /// node's stall meets it, the pass waits for each pod's own stall
    /// (asking for the next pass soon), then evicts the pod that stalls,
    /// not the one the kubelet's memory order ranks first.
    #[test]
    fn pressure_pass_measures_who_stalls_then_evicts_it() {
        use qosd_node::sys::pressure::{targets_from_config, PressureConfig, PressureWatcher};
        let d = tempfile::tempdir().unwrap();
        let proc_root = d.path().join("proc");
        std::fs::create_dir_all(proc_root.join("pressure")).unwrap();
        let psi = |total: u64| {
            format!("some avg10=0.00 avg60=0.00 avg300=0.00 total={total}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={total}\n")
        };
        let node = proc_root.join("pressure/memory");
        // (name, working set MiB, request MiB): the kubelet's order takes "idle"
        let pods: Vec<Candidate> = [("idle", 300u64, 0i64), ("stalls", 50, 40)]
            .iter()
            .map(|(name, ws, req)| {
                let dir = d.path().join(name);
                std::fs::create_dir(&dir).unwrap();
                std::fs::write(dir.join("memory.current"), format!("{}\n", ws << 20)).unwrap();
                std::fs::write(dir.join("memory.stat"), "inactive_file 0\n").unwrap();
                std::fs::write(dir.join("cgroup.procs"), "4242\n").unwrap();
                std::fs::write(dir.join("memory.pressure"), psi(0)).unwrap();
                let mut c = pod(name, QosClass::Burstable, Some(dir));
                c.memory_request_bytes = req << 20;
                c
            })
            .collect();
        let cfg = EvictionConfig::from_raw(&RawEvictionConfig {
            eviction_hard: Some(Default::default()),
            ..Default::default()
        })
        .unwrap()
        .with_pressure(
            &[(
                Signal::MemorySome,
                qosd_model::policy::evict::pressure::parse_stall("x", Signal::MemorySome, "10%/2s")
                    .unwrap(),
            )]
            .into(),
            &Default::default(),
            &Default::default(),
        )
        .unwrap();
        let mut e = engine("100Mi");
        e.manager = Manager::new(cfg.clone(), ManagerOptions::default());
        e.signals = watched_signals(&cfg);
        e.sources.version = CgroupVersion::V2;
        std::fs::write(&node, psi(1_000)).unwrap();
        e.pressure = Some(
            PressureWatcher::spawn(
                targets_from_config(&cfg, &proc_root),
                PressureConfig::default(),
                |_| {},
            )
            .unwrap(),
        );
        // quiet: not met, nothing measured per pod
        let r = e.pass(Ok(pods.clone()));
        assert!(
            r.decision.thresholds.iter().all(|t| !t.met),
            "{:?}",
            r.decision
        );
        assert_eq!(r.again_in, None);
        assert_eq!(r.pressure.len(), 1);
        // 500 ms of node stall: met; each pod's stall read once: wait
        std::fs::write(&node, psi(501_000)).unwrap();
        let r = e.pass(Ok(pods.clone()));
        assert!(
            r.decision.thresholds.iter().any(|t| t.met),
            "{:?}",
            r.decision
        );
        assert!(r.decision.victim().is_none());
        assert!(
            r.decision
                .notes
                .iter()
                .any(|n| n.contains("measuring which pods stall")),
            "{:?}",
            r.decision.notes
        );
        assert_eq!(r.again_in, Some(STALL_RESAMPLE));
        // the second pod stalls, the first does not
        std::fs::write(d.path().join("stalls/memory.pressure"), psi(150_000)).unwrap();
        std::fs::write(&node, psi(700_000)).unwrap();
        let r = e.pass(Ok(pods));
        let v = r.decision.victim().expect("a victim");
        assert_eq!(v.candidate.uid, "stalls");
        assert_eq!(v.signal, Signal::MemorySome);
        assert!(v.reason.starts_with("stalling on memory"), "{}", v.reason);
        assert!(matches!(r.outcome(), Some(Ok(_))));
    }

    #[test]
    fn pass_without_pods_blocks() {
        let mut e = engine("500Mi");
        let r = e.pass(Err("runtime down".into()));
        assert!(r.outcomes.is_empty());
        assert!(matches!(
            r.decision.action,
            qosd_model::policy::evict::manager::Action::Blocked(ref w) if w.contains("runtime down")
        ));
    }

    #[test]
    fn failed_eviction_is_reported_back() {
        let mut e = engine("500Mi");
        e.evictor = Evictor::new(Backend::Cri, None, Duration::ZERO); // no stopper: fails
        let pods = vec![
            pod(
                "a",
                QosClass::BestEffort,
                Some(fixtures().join("v1/kubepods/besteffort/podabc")),
            ),
            pod(
                "b",
                QosClass::BestEffort,
                Some(fixtures().join("v1/kubepods/besteffort/podabc")),
            ),
        ];
        let r = e.pass(Ok(pods.clone()));
        assert!(matches!(r.outcome(), Some(Err(_))));
        let first = r.decision.victim().unwrap().candidate.uid.clone();
        assert_eq!(e.manager.pending_victim(), None);
        let r = e.pass(Ok(pods));
        assert_ne!(r.decision.victim().unwrap().candidate.uid, first);
    }

    /// An API side whose first answer is throttling (Retry-After 300 ms),
    /// then acceptance; records who was asked.
    #[derive(Default)]
    struct ThrottlingApi {
        asked: std::sync::Mutex<Vec<String>>,
    }

    impl qosd_node::evict::ApiEvictor for ThrottlingApi {
        fn evict(
            &self,
            v: &qosd_model::policy::evict::manager::Victim,
            _grace: Duration,
        ) -> Result<(), ApiRefusal> {
            let mut asked = self.asked.lock().unwrap();
            asked.push(v.candidate.uid.clone());
            if asked.len() == 1 {
                return Err(ApiRefusal::Throttled {
                    retry_after: Duration::from_millis(300),
                    message: "429".into(),
                });
            }
            Ok(())
        }
        fn mark_evicted_after_kill(
            &self,
            _v: &qosd_model::policy::evict::manager::Victim,
        ) -> Result<(), qosd_node::kube::client::KubeError> {
            Ok(())
        }
    }

    /// A soft eviction the API server throttled: nothing is asked while
    /// its Retry-After runs (the pass says why), no other pod is tried,
    /// and the same pod is asked again afterwards, without a back-off.
    #[test]
    fn throttled_soft_eviction_waits_for_retry_after_then_asks_the_same_pod() {
        let mut e = engine_with(RawEvictionConfig {
            eviction_hard: Some(Default::default()),
            eviction_soft: [("memory.available".into(), "99%".into())].into(),
            // Not 0: a soft threshold without a grace period is hard.
            eviction_soft_grace_period: [("memory.available".into(), "1ms".into())].into(),
            ..Default::default()
        });
        let api = Arc::new(ThrottlingApi::default());
        e.evictor = Evictor::new(Backend::Api, None, Duration::ZERO);
        e.evictor.api = Some(api.clone());
        // Measured already and without cgroup directories: nothing here is
        // read or could ever be killed.
        let pods: Vec<Candidate> = ["a", "b"]
            .into_iter()
            .map(|uid| Candidate {
                stats: Some(PodStats {
                    memory_working_set_bytes: Some(1 << 20),
                    ..Default::default()
                }),
                ..pod(uid, QosClass::BestEffort, None)
            })
            .collect();
        let t0 = Instant::now();
        let r = loop {
            let r = e.pass(Ok(pods.clone()));
            if r.decision.victim().is_some() {
                break r;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "no soft eviction");
        };
        assert_eq!(r.decision.victim().unwrap().kind, ThresholdKind::Soft);
        assert!(
            matches!(r.outcome(), Some(Err(EvictError::ApiRefused { refusal, .. })) if refusal.retries_same_pod()),
            "{:?}",
            r.outcomes
        );
        let first = r.decision.victim().unwrap().candidate.uid.clone();
        let t0 = Instant::now();
        let r = e.pass(Ok(pods.clone()));
        assert!(r.outcomes.is_empty());
        assert!(
            matches!(r.decision.action, Action::Blocked(ref w) if w.contains("Retry-After")),
            "{:?}",
            r.decision.action
        );
        assert!(
            t0.elapsed() < Duration::from_millis(300),
            "checked within the wait"
        );
        assert_eq!(
            api.asked.lock().unwrap().len(),
            1,
            "nothing asked meanwhile"
        );
        let r = loop {
            let r = e.pass(Ok(pods.clone()));
            if !r.outcomes.is_empty() {
                break r;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "never asked again");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(matches!(r.outcome(), Some(Ok(_))), "{:?}", r.outcomes);
        assert_eq!(*api.asked.lock().unwrap(), [first.clone(), first]);
    }
}
