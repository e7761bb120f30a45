//! The eviction manager's state machine (pure: time and data are inputs).
//!
//! Each pass ([`Manager::synchronize`]) takes the current time, the latest
//! signal observations and the pods with their stats, and returns a
//! [`Decision`]: the status of every threshold (met, with minimum-reclaim
//! hysteresis and soft grace periods), the node conditions (held for the
//! pressure transition period), and at most one victim for node pressure.
//! After a victim is chosen the manager waits until its resources are
//! released (the pod is gone, its cgroup holds no process, or its usage
//! dropped) or a timeout passes before it chooses another — like the
//! kubelet's one pod per pass and wait-for-cleanup, but driven as fast as
//! the caller calls it. Local-storage limits are checked first, without node
//! pressure, and every pod over one is evicted in the same pass (the
//! kubelet's `localStorageEviction`); then nothing else is done in that pass.
//!
//! Never evicts on stale or missing data: a threshold whose observation is
//! missing or older than [`ManagerOptions::max_observation_age`] keeps its
//! previous state but cannot trigger an eviction, and a pod list that could
//! not be fetched blocks evictions; the reason is in the decision and logged.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::core::duration::format_go_duration;
use crate::policy::evict::local_storage;
use crate::policy::evict::message::{
    amount_text, low_on_resource_message, stall_message, threshold_text, OverRequest,
};
use crate::policy::evict::rank::{self, Candidate, DiskLayout, Ranked};
use crate::policy::evict::threshold::{
    EvictionConfig, NodeCondition, Signal, SignalResource, Threshold, ThresholdKind,
};

/// One observation of a signal.
///
/// For a pressure signal ([`Signal::is_pressure`]) `available` holds the
/// stalled time in µs within the window and `capacity` the window in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// Available amount (may be negative for over-committed signals; the
    /// kubelet floors memory working set at 0, so memory is ≤ capacity).
    pub available: i64,
    /// Capacity (the signal's total; for a pressure signal the window, µs).
    pub capacity: i64,
    /// When it was measured.
    pub at: Instant,
    /// Where the value depends on a past period (a pressure signal: the
    /// stall of a window), when that period started; `None`: an
    /// instantaneous reading. A victim's successor is chosen only on an
    /// observation whose period started after the release.
    pub window_start: Option<Instant>,
}

impl Observation {
    /// Whether this observation reflects only what happened after `t`.
    pub(crate) fn after(&self, t: Instant) -> bool {
        self.window_start.unwrap_or(self.at) > t
    }
}

/// The latest observation of each signal.
pub type Observations = BTreeMap<Signal, Observation>;

/// Tunables of the state machine.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagerOptions {
    /// Observations older than this cannot trigger an eviction.
    pub max_observation_age: Duration,
    /// After an eviction, wait at most this long for the resources to be
    /// released before choosing the next victim (kubelet: 30 s).
    pub release_timeout: Duration,
    /// The victim counts as released once its usage of the evicted resource
    /// is at most this fraction of its usage when it was chosen.
    pub release_fraction: f64,
    /// A victim whose cgroup has no process left counts as released once
    /// this long has passed since it was chosen, even if its usage has not
    /// dropped (page cache stays charged; and cgroup.procs empties before
    /// the exiting processes' memory is freed, so "no process" alone is
    /// too early).
    pub empty_settle: Duration,
    /// A pod whose eviction failed is not chosen again for this long.
    pub failed_backoff: Duration,
    /// Soft evictions: pod grace when the pod has no terminationGracePeriodSeconds.
    pub default_pod_grace: Duration,
    /// Grace of hard and local-storage evictions (kubelet
    /// `immediateEvictionGracePeriodSeconds`: 1 s).
    pub hard_grace: Duration,
    /// The node's filesystem layout (what each disk signal ranks by).
    pub disk_layout: DiskLayout,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            max_observation_age: Duration::from_secs(5),
            release_timeout: Duration::from_secs(30),
            release_fraction: 0.25,
            empty_settle: Duration::from_millis(500),
            failed_backoff: Duration::from_secs(10),
            default_pod_grace: Duration::from_secs(30),
            hard_grace: Duration::from_secs(1),
            disk_layout: DiskLayout::Shared,
        }
    }
}

/// The status of one configured threshold in a pass.
#[derive(Debug, Clone, PartialEq)]
pub struct ThresholdStatus {
    /// The threshold.
    pub threshold: Threshold,
    /// Its signal's latest observation, if any.
    pub observed: Option<Observation>,
    /// Absolute threshold against the observed capacity (plus min-reclaim
    /// when the threshold was already met).
    pub line: Option<i64>,
    /// Whether the observation crosses the line.
    pub met: bool,
    /// Observation missing or too old: state carried over, no action.
    pub(crate) stale: bool,
    /// When it was first met in the current episode.
    pub(crate) met_since: Option<Instant>,
    /// Met for at least its grace period (always true for a met hard one).
    pub(crate) grace_satisfied: bool,
}

/// The pod chosen for eviction and everything the evictor should log.
#[derive(Debug, Clone, PartialEq)]
pub struct Victim {
    /// The pod.
    pub candidate: Candidate,
    /// The signal under pressure (`nodefs.available` for a local-storage limit).
    pub signal: Signal,
    /// The threshold that was met (a synthetic hard one for a local-storage limit).
    pub threshold: Threshold,
    /// Hard or soft.
    pub kind: ThresholdKind,
    /// The observed available amount (for a local-storage limit: the usage, bytes).
    pub observed: i64,
    /// The observed capacity (0 for a local-storage limit).
    pub capacity: i64,
    /// The threshold against that capacity (for a local-storage limit: the limit, bytes).
    pub threshold_value: i64,
    /// Grace to give the pod: 1 s for hard thresholds and local-storage
    /// limits (the kubelet's immediateEvictionGracePeriodSeconds), for soft
    /// min(eviction-max-pod-grace-period, pod's terminationGracePeriodSeconds).
    pub grace: Duration,
    /// 1-based position: in the ranking (a threshold's victim is always
    /// the first), or among the pass's local-storage victims.
    pub rank: usize,
    /// The pod's usage of the resource under pressure (`None`: not measured).
    pub usage: Option<u64>,
    /// The pod's request of that resource (0 where there is none).
    pub request: i64,
    /// Why the pod was ranked where it was.
    pub reason: String,
    /// Why: a threshold, or a local-storage limit.
    pub cause: Cause,
    /// The kubelet's eviction message (the `Evicted` event / pod status).
    pub message: String,
}

/// Why a pod is evicted.
#[derive(Debug, Clone, PartialEq)]
pub enum Cause {
    /// A node-pressure threshold (`threshold`, `signal`).
    Threshold,
    /// A local-storage limit (no node pressure).
    LocalStorage(local_storage::LimitKind),
}

impl Victim {
    /// The label the kubelet counts this eviction under: the signal, or
    /// `ephemeralcontainerfs.limit` / `ephemeralpodfs.limit` / `emptydirfs.limit`.
    pub fn metric_label(&self) -> &'static str {
        match self.cause {
            Cause::Threshold => self.signal.as_str(),
            Cause::LocalStorage(k) => k.metric_label(),
        }
    }
}

/// What the caller should do after a pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing to do.
    None,
    /// Evict this pod now; report a failure with
    /// [`Manager::eviction_failed`] (later passes notice the release).
    Evict(Box<Victim>),
    /// Evict every one of these pods now: each is over a local-storage
    /// limit (the kubelet's `localStorageEviction` evicts all of them in one
    /// pass, each with the hard grace). Never empty; in uid order. Report a
    /// failure with [`Manager::eviction_failed`].
    EvictAll(Vec<Victim>),
    /// A previous victim's resources are not released yet.
    WaitingForRelease {
        /// The victim's uid.
        uid: String,
        /// When it was chosen.
        since: Instant,
    },
    /// A threshold calls for an eviction but the data does not allow one
    /// (stale or missing data, no evictable pod). Logged at warn.
    Blocked(String),
}

/// The result of a pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// When the pass ran.
    pub at: Instant,
    /// Every configured threshold's status.
    pub thresholds: Vec<ThresholdStatus>,
    /// The node conditions in force after the pass.
    pub conditions: Vec<NodeCondition>,
    /// What to do.
    pub action: Action,
    /// Warnings and explanations for this pass (stale data, timeouts…).
    pub notes: Vec<String>,
    /// Things that happened in this pass and are logged once: a victim
    /// released, a victim not released in time (reported; the next one is
    /// taken), an escalation from soft to hard.
    pub events: Vec<String>,
}

impl Decision {
    /// The (first) pod to evict in this pass.
    pub fn victim(&self) -> Option<&Victim> {
        self.victims().first()
    }

    /// Every pod to evict in this pass: one for node pressure, all those
    /// over a local-storage limit.
    pub fn victims(&self) -> &[Victim] {
        match &self.action {
            Action::Evict(v) => std::slice::from_ref(v.as_ref()),
            Action::EvictAll(vs) => vs,
            _ => &[],
        }
    }

    #[cfg(test)]
    pub(crate) fn met(&self) -> impl Iterator<Item = &ThresholdStatus> {
        self.thresholds.iter().filter(|t| t.met)
    }
}

/// A victim chosen and not gone yet. It is never chosen again while it is
/// listed; it blocks the next choice until it is released, it times out,
/// or a hard threshold needs a victim while it was a soft one.
#[derive(Debug, Clone)]
struct InFlight {
    signal: Signal,
    resource: SignalResource,
    kind: ThresholdKind,
    usage_at_choice: Option<u64>,
    /// The node's available amount of `signal` when the victim was chosen
    /// (threshold victims): a disk victim is released when it rises.
    available_at_choice: Option<i64>,
    since: Instant,
    /// Released (or timed out and reported): no longer blocks.
    done: bool,
}

/// The eviction state machine.
#[derive(Debug, Clone)]
pub struct Manager {
    config: EvictionConfig,
    opts: ManagerOptions,
    met: Vec<bool>,
    first_met: Vec<Option<Instant>>,
    condition_last_met: BTreeMap<NodeCondition, Instant>,
    in_flight: BTreeMap<String, InFlight>,
    /// When the last victim was seen released: the next victim needs an
    /// observation taken after this (the signal read before the pod stats
    /// may predate the release).
    released_at: Option<Instant>,
    failed: BTreeMap<String, Instant>,
    /// Per-pod stall (`memory.pressure`) is measured on this node (cgroup
    /// v2): a pressure victim waits for it ([`Manager::set_per_pod_pressure`]).
    per_pod_pressure: bool,
}

impl Manager {
    /// A manager with nothing observed and no victim.
    pub fn new(config: EvictionConfig, opts: ManagerOptions) -> Manager {
        let n = config.thresholds.len();
        Manager {
            config,
            opts,
            met: vec![false; n],
            first_met: vec![None; n],
            condition_last_met: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            released_at: None,
            failed: BTreeMap::new(),
            per_pod_pressure: false,
        }
    }

    /// Whether the pods' own stall is measured (cgroup v2 `memory.pressure`
    /// readable). When it is, a pressure threshold chooses its victim only
    /// once some pod's stall is known: the pods that stall go first
    /// (`rank::rank_in`). When it is not (cgroup v1, per-cgroup PSI off),
    /// the kubelet's memory order applies to every pod (node-wide).
    pub fn set_per_pod_pressure(&mut self, on: bool) {
        self.per_pod_pressure = on;
    }

    /// The eviction configuration.
    pub fn config(&self) -> &EvictionConfig {
        &self.config
    }

    /// The uid of a victim the manager is waiting for (chosen, not yet
    /// released), if any.
    pub fn pending_victim(&self) -> Option<&str> {
        self.in_flight
            .iter()
            .find(|(_, f)| !f.done)
            .map(|(u, _)| u.as_str())
    }

    /// Victims chosen and still listed (never chosen again).
    pub fn in_flight(&self) -> impl Iterator<Item = &str> {
        self.in_flight.keys().map(String::as_str)
    }

    #[cfg(test)]
    /// The evictor confirmed the victim's resources are released (e.g. its
    /// cgroup is empty): the next pass may choose another victim. The pod
    /// itself stays excluded while it is listed.
    pub(crate) fn mark_released(&mut self, uid: &str) {
        if let Some(f) = self.in_flight.get_mut(uid) {
            f.done = true;
        }
    }

    /// Evicting `uid` failed: forget it and skip it for
    /// [`ManagerOptions::failed_backoff`] (then it may be chosen again).
    pub fn eviction_failed(&mut self, uid: &str, now: Instant) {
        self.in_flight.remove(uid);
        self.failed.insert(uid.to_string(), now);
    }

    /// The victim was not evicted after all (node-level reclaim freed
    /// enough): forget it without a back-off.
    pub fn cancel(&mut self, uid: &str) {
        self.in_flight.remove(uid);
    }

    /// One pass. `pods`: the pods with their stats, or why they are unknown
    /// (runtime not answering): then nothing is evicted.
    pub fn synchronize(
        &mut self,
        now: Instant,
        observations: &Observations,
        pods: Result<&[Candidate], String>,
    ) -> Decision {
        let mut notes = Vec::new();
        let statuses = self.evaluate(now, observations, &mut notes);

        // Node conditions: held for the transition period after last met.
        for s in statuses.iter().filter(|s| s.met) {
            self.condition_last_met
                .insert(s.threshold.signal.node_condition(), now);
        }
        let period = self.config.pressure_transition_period;
        self.condition_last_met
            .retain(|_, last| *last == now || now.saturating_duration_since(*last) < period);
        let conditions: Vec<NodeCondition> = self.condition_last_met.keys().copied().collect();

        self.failed
            .retain(|_, at| now.saturating_duration_since(*at) < self.opts.failed_backoff);

        let mut events = Vec::new();
        if let Ok(p) = &pods {
            self.track_in_flight(now, p, observations, &mut events);
        }
        let over_limits = match &pods {
            Ok(p) => self.local_storage(now, p),
            Err(_) => Vec::new(),
        };
        let action = if over_limits.is_empty() {
            self.choose(now, &statuses, pods, &mut notes, &mut events)
        } else {
            Action::EvictAll(over_limits)
        };
        Decision {
            at: now,
            thresholds: statuses,
            conditions,
            action,
            notes,
            events,
        }
    }

    /// Each threshold's state at `now`: met (with min-reclaim while it
    /// lasts), stale or missing observations carried over, since when, and
    /// whether its grace period is over.
    fn evaluate(
        &mut self,
        now: Instant,
        observations: &Observations,
        notes: &mut Vec<String>,
    ) -> Vec<ThresholdStatus> {
        let mut statuses = Vec::with_capacity(self.config.thresholds.len());
        for (i, t) in self.config.thresholds.iter().enumerate() {
            let obs = observations.get(&t.signal).copied();
            let stale = match obs {
                None => {
                    notes.push(format!(
                        "no observation for {}: {} not evaluated",
                        t.signal,
                        t.statement()
                    ));
                    true
                }
                Some(o) if now.saturating_duration_since(o.at) > self.opts.max_observation_age => {
                    notes.push(format!(
                        "observation of {} is {} old (max {}): {} not evaluated",
                        t.signal,
                        format_go_duration(now.saturating_duration_since(o.at)),
                        format_go_duration(self.opts.max_observation_age),
                        t.statement()
                    ));
                    true
                }
                Some(_) => false,
            };
            let (met, line) = match obs {
                Some(o) if !stale => {
                    let met = t.is_met(o.available, o.capacity, self.met[i]);
                    let mut line = t.threshold_for(o.capacity);
                    if self.met[i] {
                        line = line.saturating_add(t.min_reclaim_for(o.capacity));
                    }
                    (met, Some(line))
                }
                // stale or missing: carry the previous state over
                _ => (self.met[i], None),
            };
            if met {
                if self.first_met[i].is_none() {
                    self.first_met[i] = Some(now);
                }
            } else {
                self.first_met[i] = None;
            }
            self.met[i] = met;
            let grace_satisfied = met
                && self.first_met[i]
                    .is_some_and(|s| now.saturating_duration_since(s) >= t.grace_period);
            statuses.push(ThresholdStatus {
                threshold: t.clone(),
                observed: obs,
                line,
                met,
                stale,
                met_since: self.first_met[i],
                grace_satisfied,
            });
        }
        statuses
    }

    fn choose(
        &mut self,
        now: Instant,
        statuses: &[ThresholdStatus],
        pods: Result<&[Candidate], String>,
        notes: &mut Vec<String>,
        events: &mut Vec<String>,
    ) -> Action {
        let (eligible, stale_met) = eligible(now, statuses, notes);
        let Some(chosen) = eligible.first().copied() else {
            if !stale_met.is_empty() {
                return Action::Blocked(format!(
                    "threshold(s) {} were met but their data is stale or missing: not evicting",
                    stale_met.join(", ")
                ));
            }
            // pressure gone: nothing to wait for (victims in flight stay
            // excluded while they are listed)
            for f in self.in_flight.values_mut() {
                f.done = true;
            }
            return Action::None;
        };
        let pods = match pods {
            Ok(p) => p,
            Err(why) => {
                return Action::Blocked(format!(
                    "{} is met but the pod list is unavailable ({why}): not evicting",
                    chosen.threshold.statement()
                ))
            }
        };

        let reranked = match self.blocked_by_victims(chosen, events) {
            Ok(r) => r,
            Err(wait) => return wait,
        };
        let signal = chosen.threshold.signal;
        let obs = chosen
            .observed
            .expect("eligible thresholds have observations");
        if let Some(r) = self.released_at {
            if !obs.after(r) {
                notes.push(if obs.window_start.is_some() {
                    format!("{signal}'s window started before the previous victim was released: waiting for a window after it")
                } else {
                    format!("observation of {signal} predates the release of the previous victim: waiting for a fresh one")
                });
                return Action::None;
            }
        }
        let live: Vec<Candidate> = pods
            .iter()
            .filter(|c| {
                !self.failed.contains_key(&c.uid)
                    && (!self.in_flight.contains_key(&c.uid) || reranked.contains(&c.uid))
            })
            .cloned()
            .collect();
        if self.measuring_stall(chosen, &live, notes) {
            return Action::None;
        }
        let ranking = rank::rank_in(signal, &live, self.opts.disk_layout);
        let measured = ranking.order.iter().filter(|r| r.usage.is_some()).count();
        if !ranking.order.is_empty() && measured == 0 {
            return Action::Blocked(format!(
                "{} is met but no pod has {} stats: not evicting on missing data",
                chosen.threshold.statement(),
                signal
            ));
        }
        let Some(first) = ranking.order.first() else {
            return Action::Blocked(format!(
                "{} is met but no pod can be evicted ({} never evicted, {} already evicted or in back-off)",
                chosen.threshold.statement(),
                ranking.never_evicted.len(),
                pods.len() - live.len()
            ));
        };
        let victim = self.victim(chosen, obs, first, statuses);
        self.in_flight.insert(
            victim.candidate.uid.clone(),
            InFlight {
                signal,
                resource: signal.resource(),
                kind: chosen.threshold.kind,
                usage_at_choice: victim.usage,
                available_at_choice: Some(obs.available),
                since: now,
                done: false,
            },
        );
        Action::Evict(Box::new(victim))
    }

    /// A pressure threshold with per-pod pressure, while no live pod's
    /// stall has been measured yet: the ranking waits for the measurement
    /// (noted) instead of choosing blind.
    fn measuring_stall(
        &self,
        chosen: &ThresholdStatus,
        live: &[Candidate],
        notes: &mut Vec<String>,
    ) -> bool {
        let waiting = chosen.threshold.signal.is_pressure()
            && self.per_pod_pressure
            && !live
                .iter()
                .any(|c| c.stats.is_some_and(|s| s.memory_stall_ppm.is_some()));
        if waiting {
            notes.push(format!(
                "{} is met: measuring which pods stall (their memory.pressure) before choosing",
                chosen.threshold.statement()
            ));
        }
        waiting
    }

    /// Victims still releasing block the next choice, except that a hard
    /// threshold does not wait for soft victims (escalation: the kubelet
    /// acts on the next pass). Soft victims still terminating then are
    /// ranked again with every other pod, as by the kubelet (a terminating
    /// pod is still active there): the first one is evicted again, with the
    /// hard grace. `Ok`: the uids ranked again; `Err`: wait.
    fn blocked_by_victims(
        &mut self,
        chosen: &ThresholdStatus,
        events: &mut Vec<String>,
    ) -> Result<Vec<String>, Action> {
        let blocking: Vec<(&String, &InFlight)> =
            self.in_flight.iter().filter(|(_, f)| !f.done).collect();
        let Some((uid, f)) = blocking.first() else {
            return Ok(Vec::new());
        };
        let escalate = chosen.threshold.kind == ThresholdKind::Hard
            && blocking.iter().all(|(_, f)| f.kind == ThresholdKind::Soft);
        if !escalate {
            return Err(Action::WaitingForRelease {
                uid: (*uid).clone(),
                since: f.since,
            });
        }
        let soft: Vec<String> = blocking.iter().map(|(u, _)| (*u).clone()).collect();
        events.push(format!(
            "{} met while soft victim {} is still terminating: ranking every pod again for the hard threshold (a terminating victim included, evicted again with the hard grace if first)",
            chosen.threshold,
            soft.join(", ")
        ));
        // they no longer hold back, and may be chosen again
        for u in &soft {
            if let Some(f) = self.in_flight.get_mut(u) {
                f.done = true;
            }
        }
        Ok(soft)
    }

    /// Forget victims that are gone, mark released ones, and report (once)
    /// those not released in time.
    ///
    /// Disk and inodes are not back when the pod is gone or its processes
    /// have exited: the runtime deletes the writable layers and logs after
    /// the pod, and containerd's garbage collector removes snapshots
    /// asynchronously, later still under load. A disk victim is released
    /// when the node's own signal, observed after the choice, has risen by
    /// `release_fraction` of the victim's usage (or when its measured usage
    /// dropped while it is still listed); otherwise at the timeout. Without
    /// this, a pass a few milliseconds after the pod went away would still
    /// see the pressure and evict a second pod the first one's removal was
    /// about to relieve.
    fn track_in_flight(
        &mut self,
        now: Instant,
        pods: &[Candidate],
        observations: &Observations,
        events: &mut Vec<String>,
    ) {
        if self.in_flight.is_empty() {
            return;
        }
        let listed: BTreeMap<&str, &Candidate> = pods.iter().map(|c| (c.uid.as_str(), c)).collect();
        let mut gone = Vec::new();
        for (uid, f) in self.in_flight.iter_mut() {
            let listed_as = listed.get(uid.as_str());
            if f.done {
                if listed_as.is_none() {
                    gone.push(uid.clone());
                }
                continue;
            }
            let waited = now.saturating_duration_since(f.since);
            let disk = matches!(f.resource, SignalResource::Disk | SignalResource::Inodes);
            let reclaimed = if disk {
                node_reclaimed(f, observations.get(&f.signal), self.opts.release_fraction)
            } else {
                None
            };
            let released = match listed_as {
                None if disk => reclaimed.map(|r| format!("pod gone and {r}")),
                None => Some("pod gone".to_string()),
                Some(c) => {
                    let st = c.stats.unwrap_or_default();
                    let (usage, _) = c.usage_for(f.signal, self.opts.disk_layout);
                    match (usage, f.usage_at_choice) {
                        (Some(u), Some(at))
                            if (u as f64) <= at as f64 * self.opts.release_fraction =>
                        {
                            Some(format!("usage dropped from {at} to {u}"))
                        }
                        _ if disk => reclaimed,
                        _ if f.resource != SignalResource::Pids
                            && st.processes == Some(0)
                            && c.stats.is_some()
                            && waited >= self.opts.empty_settle =>
                        {
                            Some(format!(
                                "no process left for {}",
                                format_go_duration(waited)
                            ))
                        }
                        _ if f.resource == SignalResource::Pids
                            && st.processes == Some(0)
                            && c.stats.is_some() =>
                        {
                            Some("no process left".to_string())
                        }
                        _ => None,
                    }
                }
            };
            if let Some(why) = released {
                events.push(format!(
                    "victim {uid} released: {why}; re-evaluating with observations taken after this"
                ));
                f.done = true;
                self.released_at = Some(now);
            } else if waited >= self.opts.release_timeout {
                events.push(format!(
                    "victim {uid} not released after {}: reported; taking the next one (it is never chosen again)",
                    format_go_duration(waited)
                ));
                f.done = true;
            }
            if f.done && listed_as.is_none() {
                gone.push(uid.clone());
            }
        }
        for uid in gone {
            self.in_flight.remove(&uid);
        }
    }

    /// Every pod over a local-storage limit (kubelet
    /// localStorageEviction: all of them, in this pass), each evicted with
    /// the hard grace, with no node pressure; in uid order. Pods already
    /// chosen, in back-off or protected are skipped.
    fn local_storage(&mut self, now: Instant, pods: &[Candidate]) -> Vec<Victim> {
        let dedicated = self.opts.disk_layout == DiskLayout::DedicatedImageFs;
        let mut sorted: Vec<&Candidate> = pods
            .iter()
            .filter(|c| {
                !c.storage_limits.is_empty()
                    && c.protection().is_none()
                    && !self.failed.contains_key(&c.uid)
                    && !self.in_flight.contains_key(&c.uid)
            })
            .collect();
        sorted.sort_by(|a, b| a.uid.cmp(&b.uid));
        let mut out = Vec::new();
        for c in sorted {
            let Some(detail) = &c.storage_detail else {
                continue;
            };
            let Some(v) = local_storage::violation(&c.storage_limits, detail, dedicated) else {
                continue;
            };
            let t = Threshold {
                signal: Signal::NodeFsAvailable,
                kind: ThresholdKind::Hard,
                value: crate::policy::evict::threshold::ThresholdValue::Quantity(v.limit_bytes),
                grace_period: Duration::ZERO,
                min_reclaim: None,
            };
            self.in_flight.insert(
                c.uid.clone(),
                InFlight {
                    signal: Signal::NodeFsAvailable,
                    resource: SignalResource::Disk,
                    kind: ThresholdKind::Hard,
                    usage_at_choice: Some(v.usage_bytes),
                    available_at_choice: None,
                    since: now,
                    // does not hold back threshold evictions
                    done: true,
                },
            );
            out.push(Victim {
                candidate: c.clone(),
                signal: Signal::NodeFsAvailable,
                threshold: t,
                kind: ThresholdKind::Hard,
                observed: v.usage_bytes as i64,
                capacity: 0,
                threshold_value: v.limit_bytes,
                grace: self.opts.hard_grace,
                rank: out.len() + 1,
                usage: Some(v.usage_bytes),
                request: c.ephemeral_storage_request_bytes,
                reason: v.message.trim_end().to_string(),
                cause: Cause::LocalStorage(v.kind),
                message: v.message,
            });
        }
        out
    }

    fn victim(
        &self,
        s: &ThresholdStatus,
        obs: Observation,
        r: &Ranked,
        statuses: &[ThresholdStatus],
    ) -> Victim {
        let t = &s.threshold;
        let grace = match t.kind {
            ThresholdKind::Hard => self.opts.hard_grace,
            ThresholdKind::Soft => {
                let pod = r
                    .candidate
                    .termination_grace_period_seconds
                    .map(|g| Duration::from_secs(g.max(0) as u64))
                    .unwrap_or(self.opts.default_pod_grace);
                pod.min(self.config.max_pod_grace_period)
            }
        };
        Victim {
            candidate: r.candidate.clone(),
            signal: t.signal,
            threshold: t.clone(),
            kind: t.kind,
            observed: obs.available,
            capacity: obs.capacity,
            threshold_value: t.threshold_for(obs.capacity),
            grace,
            rank: r.rank,
            usage: r.usage,
            request: r.request,
            reason: r.reason.clone(),
            cause: Cause::Threshold,
            message: eviction_message(t, obs, r, statuses),
        }
    }
}

/// The thresholds that call for an eviction now (hard before soft, memory
/// first), and the met ones whose data is stale; notes for the met ones
/// still in their grace period.
fn eligible<'a>(
    now: Instant,
    statuses: &'a [ThresholdStatus],
    notes: &mut Vec<String>,
) -> (Vec<&'a ThresholdStatus>, Vec<String>) {
    let mut eligible: Vec<&ThresholdStatus> = statuses
        .iter()
        .filter(|s| s.met && s.grace_satisfied && !s.stale)
        .collect();
    for s in statuses
        .iter()
        .filter(|s| s.met && !s.grace_satisfied && !s.stale)
    {
        let since = s
            .met_since
            .map(|m| now.saturating_duration_since(m))
            .unwrap_or_default();
        notes.push(format!(
            "{} met for {} of its {} grace period",
            s.threshold.statement(),
            format_go_duration(since),
            format_go_duration(s.threshold.grace_period)
        ));
    }
    let stale_met: Vec<String> = statuses
        .iter()
        .filter(|s| s.met && s.stale)
        .map(|s| s.threshold.statement())
        .collect();
    eligible.sort_by_key(|s| (s.threshold.kind, s.threshold.signal.resource()));
    (eligible, stale_met)
}

/// The kubelet's eviction message (helpers.go evictionMessage): the starved
/// resource, the first met threshold of that resource with its observation,
/// and the pod's usage against its request when it exceeds it.
pub(crate) fn eviction_message(
    t: &Threshold,
    obs: Observation,
    r: &Ranked,
    statuses: &[ThresholdStatus],
) -> String {
    let first = statuses
        .iter()
        .filter(|s| s.met && s.threshold.signal.resource() == t.signal.resource())
        .find_map(|s| s.observed.map(|o| (s.threshold.clone(), o)))
        .unwrap_or((t.clone(), obs));
    let q = |v: i64| {
        if t.signal.is_pressure() {
            amount_text(Signal::MemoryAvailable, v)
        } else {
            amount_text(t.signal, v)
        }
    };
    let mut over = Vec::new();
    if let Some(u) = r.usage {
        if i128::from(u) > i128::from(r.request) && (t.signal.is_bytes() || t.signal.is_pressure())
        {
            over.push(OverRequest {
                kind: "Pod",
                name: &r.candidate.name,
                usage: q(u as i64),
                request: q(r.request),
            });
        }
    }
    if t.is_stall() {
        return stall_message(t.signal, obs.available, obs.capacity, &t.value, &over);
    }
    low_on_resource_message(
        t.signal,
        &threshold_text(
            first.0.signal,
            &first.0.value,
            first.0.threshold_for(first.1.capacity),
        ),
        &q(first.1.available),
        &over,
    )
}

/// Signals that have at least one threshold (what must be observed).
pub fn watched_signals(config: &EvictionConfig) -> BTreeSet<Signal> {
    config.thresholds.iter().map(|t| t.signal).collect()
}

/// How far the node's signal has come back since a disk victim was chosen,
/// if far enough to count as released: an observation taken after the
/// choice whose available amount rose by at least `fraction` of the
/// victim's usage (at least 1 when its usage was not measured).
fn node_reclaimed(f: &InFlight, obs: Option<&Observation>, fraction: f64) -> Option<String> {
    let (o, before) = (obs?, f.available_at_choice?);
    if o.at <= f.since {
        return None;
    }
    let need = f
        .usage_at_choice
        .map_or(1, |u| ((u as f64 * fraction).ceil() as i64).max(1));
    let rose = o.available.saturating_sub(before);
    (rose >= need).then(|| format!("{} rose by {rose} (at least {need} needed)", f.signal))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::QosClass;
    use crate::policy::evict::rank::PodStats;
    use crate::policy::evict::threshold::{
        parse_assignment_flag, parse_threshold_flag, RawEvictionConfig,
    };

    const MI: i64 = 1024 * 1024;
    const CAP: i64 = 4096 * MI;

    fn config(
        hard: &str,
        soft: &str,
        grace: &str,
        reclaim: &str,
        transition: &str,
    ) -> EvictionConfig {
        EvictionConfig::from_raw(&RawEvictionConfig {
            eviction_hard: Some(parse_threshold_flag("h", hard).unwrap()),
            eviction_soft: parse_threshold_flag("s", soft).unwrap(),
            eviction_soft_grace_period: parse_assignment_flag("g", grace).unwrap(),
            eviction_minimum_reclaim: parse_assignment_flag("r", reclaim).unwrap(),
            eviction_max_pod_grace_period: Some(20),
            eviction_pressure_transition_period: Some(transition.into()),
            merge_default_eviction_settings: false,
        })
        .unwrap()
    }

    fn pod(uid: &str, qos: QosClass, req_mi: i64, usage_mi: Option<i64>) -> Candidate {
        Candidate {
            uid: uid.into(),
            namespace: "ns".into(),
            name: uid.into(),
            qos,
            priority: 0,
            static_or_mirror: false,
            memory_request_bytes: req_mi * MI,
            ephemeral_storage_request_bytes: 0,
            termination_grace_period_seconds: Some(60),
            sandbox_id: Some(format!("sb-{uid}")),
            cgroup_dirs: vec![],
            storage_limits: Default::default(),
            storage_detail: None,
            stats: usage_mi.map(|u| PodStats {
                memory_working_set_bytes: Some((u * MI) as u64),
                processes: Some(1),
                ..Default::default()
            }),
        }
    }

    fn mem(avail_mi: i64, at: Instant) -> Observations {
        [(
            Signal::MemoryAvailable,
            Observation {
                available: avail_mi * MI,
                capacity: CAP,
                at,
                window_start: None,
            },
        )]
        .into()
    }

    fn pods() -> Vec<Candidate> {
        vec![
            pod("g", QosClass::Guaranteed, 512, Some(500)),
            pod("bu", QosClass::Burstable, 100, Some(300)),
            pod("be", QosClass::BestEffort, 0, Some(250)),
        ]
    }

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn hard_threshold_hysteresis_and_victims() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config(
                "memory.available<100Mi",
                "",
                "",
                "memory.available=50Mi",
                "0s",
            ),
            ManagerOptions::default(),
        );
        let p = pods();
        // (offset s, available MiB, pods, expected met, expected victim uid / action)
        let d = m.synchronize(t0, &mem(200, t0), Ok(&p));
        assert!(d.met().next().is_none());
        assert_eq!(d.action, Action::None);

        let d = m.synchronize(t0 + s(1), &mem(99, t0 + s(1)), Ok(&p));
        assert_eq!(d.met().count(), 1);
        let v = d.victim().expect("victim");
        assert_eq!(v.candidate.uid, "be"); // exceeds by 250Mi > bu's 200Mi
        assert_eq!(v.kind, ThresholdKind::Hard);
        // the kubelet's immediateEvictionGracePeriodSeconds
        assert_eq!(v.grace, s(1));
        assert!(
            v.message.starts_with("The node was low on resource: memory. Threshold quantity: 100Mi, available: 99Mi. "),
            "{}",
            v.message
        );
        assert_eq!(v.threshold_value, 100 * MI);
        assert_eq!(v.observed, 99 * MI);
        assert_eq!(d.conditions, vec![NodeCondition::MemoryPressure]);

        // still met, victim not gone: wait
        let d = m.synchronize(t0 + s(2), &mem(90, t0 + s(2)), Ok(&p));
        assert!(matches!(d.action, Action::WaitingForRelease { ref uid, .. } if uid == "be"));

        // victim gone → next victim
        let p2: Vec<Candidate> = p.iter().filter(|c| c.uid != "be").cloned().collect();
        let d = m.synchronize(t0 + s(3), &mem(120, t0 + s(3)), Ok(&p2));
        // 120 >= 100 but < 150 (threshold + min-reclaim): still met
        assert_eq!(d.met().count(), 1);
        // the release pass chooses nobody: the observation may predate it
        assert_eq!(d.action, Action::None);
        assert!(d.events.iter().any(|n| n.contains("released: pod gone")));
        // an observation as old as the release is not enough either
        let d = m.synchronize(t0 + s(3), &mem(120, t0 + s(3)), Ok(&p2));
        assert_eq!(d.action, Action::None);
        assert!(d.notes.iter().any(|n| n.contains("predates the release")));
        // a fresh one is
        let now = t0 + Duration::from_millis(3005);
        let d = m.synchronize(now, &mem(120, now), Ok(&p2));
        assert_eq!(d.victim().unwrap().candidate.uid, "bu");

        // reclaimed past threshold + min-reclaim: not met, pending cleared
        let d = m.synchronize(t0 + s(4), &mem(150, t0 + s(4)), Ok(&p2));
        assert_eq!(d.met().count(), 0);
        assert_eq!(d.action, Action::None);
        assert_eq!(m.pending_victim(), None);
        // transition period 0: no condition once unmet
        assert!(d.conditions.is_empty());
    }

    #[test]
    fn equal_overage_tiebreak_by_uid() {
        // bu exceeds by 200Mi, be by 200Mi: tie → uid "be" < "bu"
        let p = vec![
            pod("bu", QosClass::Burstable, 100, Some(300)),
            pod("be", QosClass::BestEffort, 0, Some(200)),
        ];
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("memory.available<100Mi", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let d = m.synchronize(t0, &mem(10, t0), Ok(&p));
        assert_eq!(d.victim().unwrap().candidate.uid, "be");
    }

    #[test]
    fn soft_threshold_waits_for_grace() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config(
                "memory.available<10Mi",
                "memory.available<1Gi",
                "memory.available=1m30s",
                "",
                "5m",
            ),
            ManagerOptions::default(),
        );
        let p = pods();
        // (offset secs, available MiB, expect victim?)
        let table: &[(u64, i64, bool)] = &[
            (0, 900, false),  // met, grace starts
            (60, 800, false), // 60s < 90s
            (89, 800, false),
            (90, 800, true), // grace satisfied
        ];
        for &(off, avail, want) in table {
            let now = t0 + s(off);
            let d = m.synchronize(now, &mem(avail, now), Ok(&p));
            assert_eq!(d.victim().is_some(), want, "t={off}");
            assert_eq!(d.conditions, vec![NodeCondition::MemoryPressure], "t={off}");
            if let Some(v) = d.victim() {
                assert_eq!(v.kind, ThresholdKind::Soft);
                // min(max-pod-grace 20s, pod's 60s)
                assert_eq!(v.grace, s(20));
            }
        }
    }

    #[test]
    fn soft_grace_resets_when_unmet() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config(
                "memory.available<10Mi",
                "memory.available<1Gi",
                "memory.available=30s",
                "",
                "0s",
            ),
            ManagerOptions::default(),
        );
        let p = pods();
        let seq: &[(u64, i64, bool)] = &[
            (0, 900, false),
            (20, 2000, false),
            (40, 900, false),
            (69, 900, false),
            (70, 900, true),
        ];
        for &(off, avail, want) in seq {
            let now = t0 + s(off);
            let d = m.synchronize(now, &mem(avail, now), Ok(&p));
            assert_eq!(d.victim().is_some(), want, "t={off}");
        }
    }

    #[test]
    fn soft_grace_uses_smaller_pod_grace() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config(
                "memory.available<10Mi",
                "memory.available<1Gi",
                "memory.available=1s",
                "",
                "0s",
            ),
            ManagerOptions::default(),
        );
        let mut p = pods();
        for c in &mut p {
            c.termination_grace_period_seconds = Some(5);
        }
        assert!(m.synchronize(t0, &mem(500, t0), Ok(&p)).victim().is_none());
        let d = m.synchronize(t0 + s(1), &mem(500, t0 + s(1)), Ok(&p));
        let v = d.victim().unwrap();
        assert_eq!((v.kind, v.grace), (ThresholdKind::Soft, s(5)));
    }

    #[test]
    fn soft_with_zero_grace_acts_as_hard() {
        // the kubelet's isHardEvictionThreshold: grace period 0 = hard
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("", "memory.available<1Gi", "memory.available=0s", "", "0s"),
            ManagerOptions::default(),
        );
        let d = m.synchronize(t0, &mem(500, t0), Ok(&pods()));
        let v = d.victim().unwrap();
        assert_eq!((v.kind, v.grace), (ThresholdKind::Hard, s(1)));
    }

    #[test]
    fn hard_threshold_does_not_wait_for_a_soft_victim() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config(
                "memory.available<100Mi",
                "memory.available<1Gi",
                "memory.available=1s",
                "",
                "0s",
            ),
            ManagerOptions::default(),
        );
        let p = pods();
        m.synchronize(t0, &mem(900, t0), Ok(&p));
        let d = m.synchronize(t0 + s(1), &mem(900, t0 + s(1)), Ok(&p));
        let soft = d.victim().unwrap().candidate.uid.clone();
        assert_eq!(d.victim().unwrap().kind, ThresholdKind::Soft);
        // still terminating (grace 20 s): soft keeps waiting
        let d = m.synchronize(t0 + s(2), &mem(900, t0 + s(2)), Ok(&p));
        assert!(matches!(d.action, Action::WaitingForRelease { .. }));
        // the hard threshold is crossed: the next pass ranks every pod
        // again, the terminating soft victim included; still first, it is
        // evicted again with the hard grace (the kubelet's behaviour)
        let d = m.synchronize(t0 + s(3), &mem(50, t0 + s(3)), Ok(&p));
        let v = d.victim().expect("escalation on the next pass");
        assert_eq!(v.kind, ThresholdKind::Hard);
        assert_eq!(v.candidate.uid, soft);
        assert_eq!(v.grace, s(1));
        assert!(d.events.iter().any(|e| e.contains("still terminating")));
        // in flight for the hard threshold now: it blocks further choices
        let d = m.synchronize(t0 + s(4), &mem(50, t0 + s(4)), Ok(&p));
        assert!(
            matches!(d.action, Action::WaitingForRelease { .. }),
            "{:?}",
            d.action
        );
    }

    #[test]
    fn a_victim_is_never_chosen_twice() {
        // released by "no process" while still listed (the kill backend
        // before the runtime removed it): never chosen again
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("memory.available<100Mi", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let mut p = pods();
        let mut chosen = Vec::new();
        for i in 0..40u64 {
            let now = t0 + Duration::from_millis(600 * i);
            let d = m.synchronize(now, &mem(1, now), Ok(&p));
            if let Some(v) = d.victim() {
                chosen.push(v.candidate.uid.clone());
                for c in &mut p {
                    if c.uid == v.candidate.uid {
                        c.stats.as_mut().unwrap().processes = Some(0);
                    }
                }
            }
        }
        assert_eq!(chosen, vec!["be", "bu", "g"], "each victim once, in order");
        let d = m.synchronize(t0 + s(60), &mem(1, t0 + s(60)), Ok(&p));
        assert!(
            matches!(d.action, Action::Blocked(ref w) if w.contains("3 already evicted")),
            "{:?}",
            d.action
        );
        // gone from the list: forgotten
        let d = m.synchronize(t0 + s(61), &mem(1, t0 + s(61)), Ok(&[]));
        assert!(m.in_flight().next().is_none(), "{:?}", d.action);
    }

    #[test]
    fn local_storage_limit_evicts_without_pressure() {
        use crate::policy::evict::local_storage::{ContainerStorage, StorageDetail};
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("memory.available<100Mi", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let mut p = pods();
        let mut pod = crate::core::model::Pod::new("bu", "ns", "bu");
        let mut c = crate::core::model::Container {
            name: "app".into(),
            ..Default::default()
        };
        c.resources.limits.insert(
            "ephemeral-storage".into(),
            crate::core::quantity::Quantity::parse("10Mi").unwrap(),
        );
        pod.containers.push(c);
        p[1].storage_limits = crate::policy::evict::local_storage::StorageLimits::of(&pod);
        let detail = |mib: u64| StorageDetail {
            containers: vec![ContainerStorage {
                name: "app".into(),
                rootfs_bytes: Some(mib << 20),
                logs_bytes: Some(0),
            }],
            volumes: vec![],
            total_bytes: mib << 20,
        };
        p[1].storage_detail = Some(detail(9));
        let d = m.synchronize(t0, &mem(4000, t0), Ok(&p));
        assert_eq!(d.action, Action::None);
        p[1].storage_detail = Some(detail(11));
        let d = m.synchronize(t0 + s(1), &mem(4000, t0 + s(1)), Ok(&p));
        let v = d.victim().expect("over its limit");
        assert_eq!(v.candidate.uid, "bu");
        assert_eq!(v.grace, s(1));
        assert_eq!(v.metric_label(), "ephemeralpodfs.limit");
        assert_eq!(
            v.message,
            "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. "
        );
        // once
        let d = m.synchronize(t0 + s(2), &mem(4000, t0 + s(2)), Ok(&p));
        assert_eq!(d.action, Action::None);
    }

    /// The kubelet's localStorageEviction collects every violating pod and
    /// evicts them all in the same pass (1 s grace each, no node pressure,
    /// critical pods skipped); nothing else happens in that pass.
    #[test]
    fn every_pod_over_a_local_storage_limit_in_the_same_pass() {
        use crate::core::model::{Container, EmptyDir, Pod, Volume};
        use crate::core::quantity::Quantity;
        use crate::policy::evict::local_storage::{ContainerStorage, StorageDetail, StorageLimits};
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("memory.available<100Mi", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let q = |v: &str| Quantity::parse(v).unwrap();
        let mut pod = Pod::new("x", "ns", "x");
        let mut c = Container {
            name: "app".into(),
            ..Default::default()
        };
        c.resources
            .limits
            .insert("ephemeral-storage".into(), q("10Mi"));
        pod.containers.push(c);
        pod.volumes.push(Volume {
            name: "scratch".into(),
            empty_dir: Some(EmptyDir {
                memory: false,
                size_limit: Some(q("1Mi")),
            }),
        });
        let limits = StorageLimits::of(&pod);
        let detail = |rootfs_mib: u64, dir_kib: u64| StorageDetail {
            containers: vec![ContainerStorage {
                name: "app".into(),
                rootfs_bytes: Some(rootfs_mib << 20),
                logs_bytes: Some(0),
            }],
            volumes: vec![("scratch".into(), dir_kib << 10)],
            total_bytes: (rootfs_mib << 20) + (dir_kib << 10),
        };
        let mut p = pods();
        // (uid, rootfs MiB, emptyDir KiB): be and g over, bu within,
        // crit over but critical.
        for (uid, rootfs, dir) in [("be", 12, 0), ("bu", 1, 10), ("g", 1, 2048)] {
            let c = p.iter_mut().find(|c| c.uid == uid).unwrap();
            c.storage_limits = limits.clone();
            c.storage_detail = Some(detail(rootfs, dir));
        }
        let mut crit = p[0].clone();
        crit.uid = "crit".into();
        crit.priority = 2_000_000_000;
        crit.storage_limits = limits.clone();
        crit.storage_detail = Some(detail(20, 0));
        p.push(crit);
        // Memory pressure too: local storage goes first and ends the pass.
        let d = m.synchronize(t0, &mem(1, t0), Ok(&p));
        let got: Vec<(&str, &str, Duration, usize)> = d
            .victims()
            .iter()
            .map(|v| (v.candidate.uid.as_str(), v.metric_label(), v.grace, v.rank))
            .collect();
        assert_eq!(
            got,
            [
                ("be", "ephemeralpodfs.limit", s(1), 1),
                ("g", "emptydirfs.limit", s(1), 2),
            ]
        );
        assert!(matches!(d.action, Action::EvictAll(_)));
        assert_eq!(
            d.victims()[1].message,
            "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "
        );
        // The next pass: the two are in flight (never chosen again), and
        // the memory threshold picks its own victim at once.
        let d = m.synchronize(t0 + s(1), &mem(1, t0 + s(1)), Ok(&p));
        let v = d.victim().expect("memory victim");
        assert_eq!(v.cause, Cause::Threshold);
        assert!(!["be", "g", "crit"].contains(&v.candidate.uid.as_str()));
        // A failed one may be chosen again after its back-off.
        m.eviction_failed("g", t0 + s(1));
        let later = t0 + s(1) + ManagerOptions::default().failed_backoff;
        let d = m.synchronize(later, &mem(4000, later), Ok(&p));
        let uids: Vec<&str> = d
            .victims()
            .iter()
            .map(|v| v.candidate.uid.as_str())
            .collect();
        assert_eq!(uids, ["g"]);
    }

    #[test]
    fn hard_preferred_over_soft_and_memory_over_disk() {
        let t0 = Instant::now();
        let cfg = config(
            "memory.available<100Mi,nodefs.available<10%",
            "memory.available<1Gi",
            "memory.available=0s",
            "",
            "0s",
        );
        let mut m = Manager::new(cfg, ManagerOptions::default());
        let mut obs = mem(50, t0);
        obs.insert(
            Signal::NodeFsAvailable,
            Observation {
                available: 1,
                capacity: 1000,
                at: t0,
                window_start: None,
            },
        );
        let d = m.synchronize(t0, &obs, Ok(&pods()));
        let v = d.victim().unwrap();
        assert_eq!(
            (v.signal, v.kind),
            (Signal::MemoryAvailable, ThresholdKind::Hard)
        );
        assert_eq!(
            d.conditions,
            vec![NodeCondition::MemoryPressure, NodeCondition::DiskPressure]
        );
    }

    #[test]
    fn transition_period_holds_condition() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("memory.available<100Mi", "", "", "", "5m"),
            ManagerOptions::default(),
        );
        let p = pods();
        let table: &[(u64, i64, bool)] = &[
            (0, 50, true),
            (10, 500, true), // unmet but within 5m
            (299, 500, true),
            (300, 500, false), // 5m after last met
            (301, 50, true),
        ];
        for &(off, avail, want) in table {
            let now = t0 + s(off);
            // keep the victim released so waits don't interfere
            if let Some(uid) = m.pending_victim().map(str::to_string) {
                m.mark_released(&uid);
            }
            let d = m.synchronize(now, &mem(avail, now), Ok(&p));
            assert_eq!(
                d.conditions.contains(&NodeCondition::MemoryPressure),
                want,
                "t={off}"
            );
        }
    }

    #[test]
    fn stale_or_missing_data_blocks() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("memory.available<100Mi", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let p = pods();
        // missing observation: nothing met, note says so
        let d = m.synchronize(t0, &Observations::new(), Ok(&p));
        assert_eq!(d.action, Action::None);
        assert!(d
            .notes
            .iter()
            .any(|n| n.contains("no observation for memory.available")));
        // stale observation showing pressure: never evaluated → no eviction
        let now = t0 + s(10);
        let d = m.synchronize(now, &mem(1, t0), Ok(&p));
        assert!(d.victim().is_none());
        assert!(d.thresholds[0].stale);
        // met by fresh data, then pods unavailable → blocked
        let now = t0 + s(11);
        let d = m.synchronize(now, &mem(1, now), Err("runtime timeout".into()));
        match &d.action {
            Action::Blocked(why) => assert!(why.contains("runtime timeout"), "{why}"),
            a => panic!("{a:?}"),
        }
        // met, then data goes stale: still met (condition) but blocked
        let now = t0 + s(20);
        let d = m.synchronize(now, &mem(1, t0 + s(11)), Ok(&p));
        assert!(d.thresholds[0].met && d.thresholds[0].stale);
        assert!(matches!(d.action, Action::Blocked(ref w) if w.contains("stale")));
        assert_eq!(d.conditions, vec![NodeCondition::MemoryPressure]);
    }

    #[test]
    fn no_stats_anywhere_blocks_but_partial_follows_kubelet() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("memory.available<100Mi", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let none = vec![
            pod("a", QosClass::BestEffort, 0, None),
            pod("b", QosClass::Guaranteed, 10, None),
        ];
        let d = m.synchronize(t0, &mem(1, t0), Ok(&none));
        assert!(
            matches!(d.action, Action::Blocked(ref w) if w.contains("no pod has memory.available stats"))
        );
        let partial = vec![
            pod("a", QosClass::BestEffort, 0, Some(10)),
            pod("b", QosClass::Guaranteed, 10, None),
        ];
        let d = m.synchronize(t0, &mem(1, t0), Ok(&partial));
        assert_eq!(d.victim().unwrap().candidate.uid, "b");
    }

    #[test]
    fn protected_pods_never_chosen() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("memory.available<100Mi", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let mut a = pod("crit", QosClass::BestEffort, 0, Some(3000));
        a.priority = 2_000_001_000;
        let mut b = pod("static", QosClass::BestEffort, 0, Some(3000));
        b.static_or_mirror = true;
        let d = m.synchronize(t0, &mem(1, t0), Ok(&[a, b]));
        match &d.action {
            Action::Blocked(w) => assert!(w.contains("2 never evicted"), "{w}"),
            x => panic!("{x:?}"),
        }
    }

    #[test]
    fn release_by_usage_drop_or_timeout() {
        let t0 = Instant::now();
        let opts = ManagerOptions {
            release_timeout: s(30),
            ..Default::default()
        };
        let mut m = Manager::new(config("memory.available<100Mi", "", "", "", "0s"), opts);
        let mut p = pods();
        let d = m.synchronize(t0, &mem(1, t0), Ok(&p));
        assert_eq!(d.victim().unwrap().candidate.uid, "be");
        // usage dropped to 25% → released
        let victim = m.pending_victim().unwrap().to_string();
        for c in &mut p {
            if c.uid == victim {
                c.stats.as_mut().unwrap().memory_working_set_bytes = Some((10 * MI) as u64);
            }
        }
        let d = m.synchronize(t0 + s(1), &mem(1, t0 + s(1)), Ok(&p));
        assert!(
            d.events.iter().any(|n| n.contains("usage dropped")),
            "{:?}",
            d.events
        );
        assert_eq!(d.action, Action::None);
        let d = m.synchronize(t0 + s(2), &mem(1, t0 + s(2)), Ok(&p));
        let second = d.victim().unwrap().candidate.uid.clone();
        assert_ne!(second, victim);
        // second victim never releases: wait, then time out after 30 s
        let d = m.synchronize(t0 + s(20), &mem(1, t0 + s(20)), Ok(&p));
        assert!(matches!(d.action, Action::WaitingForRelease { .. }));
        let d = m.synchronize(t0 + s(32), &mem(1, t0 + s(32)), Ok(&p));
        assert!(
            d.events
                .iter()
                .any(|n| n.contains("not released after 30s")),
            "{:?}",
            d.events
        );
        assert!(d.victim().is_some());
    }

    #[test]
    fn failed_eviction_backs_off() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("memory.available<100Mi", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let p = pods();
        let first = m
            .synchronize(t0, &mem(1, t0), Ok(&p))
            .victim()
            .unwrap()
            .candidate
            .uid
            .clone();
        m.eviction_failed(&first, t0);
        let d = m.synchronize(t0 + s(1), &mem(1, t0 + s(1)), Ok(&p));
        let second = d.victim().unwrap().candidate.uid.clone();
        assert_ne!(first, second);
        m.mark_released(&second);
        // after the back-off the first is eligible again
        let d = m.synchronize(t0 + s(12), &mem(1, t0 + s(12)), Ok(&p));
        assert_eq!(d.victim().unwrap().candidate.uid, first);
    }

    #[test]
    fn process_count_zero_releases() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("memory.available<100Mi", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let mut p = pods();
        let v = m
            .synchronize(t0, &mem(1, t0), Ok(&p))
            .victim()
            .unwrap()
            .candidate
            .uid
            .clone();
        for c in &mut p {
            if c.uid == v {
                c.stats.as_mut().unwrap().processes = Some(0);
            }
        }
        // cgroup empty but memory not yet freed: keep waiting a little
        let ms = Duration::from_millis;
        let d = m.synchronize(t0 + ms(100), &mem(1, t0 + ms(100)), Ok(&p));
        assert!(
            matches!(d.action, Action::WaitingForRelease { .. }),
            "{:?}",
            d.action
        );
        let d = m.synchronize(t0 + ms(500), &mem(1, t0 + ms(500)), Ok(&p));
        assert!(
            d.events
                .iter()
                .any(|n| n.contains("no process left for 500ms")),
            "{:?}",
            d.events
        );
    }

    #[test]
    fn pid_and_disk_thresholds() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("pid.available<1000,nodefs.inodesFree<5%", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let mut p = pods();
        p[0].priority = -1; // g has the lowest priority → first under PID pressure
        let obs: Observations = [
            (
                Signal::PidAvailable,
                Observation {
                    available: 500,
                    capacity: 32768,
                    at: t0,
                    window_start: None,
                },
            ),
            (
                Signal::NodeFsInodesFree,
                Observation {
                    available: 10_000,
                    capacity: 100_000,
                    at: t0,
                    window_start: None,
                },
            ),
        ]
        .into();
        let d = m.synchronize(t0, &obs, Ok(&p));
        assert_eq!(d.conditions, vec![NodeCondition::PIDPressure]);
        let v = d.victim().unwrap();
        assert_eq!(
            (v.signal, v.candidate.uid.as_str()),
            (Signal::PidAvailable, "g")
        );
        assert_eq!(watched_signals(m.config()).len(), 2);
    }

    fn inode_pod(uid: &str, inodes: u64, processes: u64) -> Candidate {
        let mut c = pod(uid, QosClass::BestEffort, 0, Some(10));
        c.stats = Some(PodStats {
            inodes: Some(inodes),
            processes: Some(processes),
            ..Default::default()
        });
        c
    }

    fn inodes_free(available: i64, at: Instant) -> Observations {
        [(
            Signal::NodeFsInodesFree,
            Observation {
                available,
                capacity: 100_000,
                at,
                window_start: None,
            },
        )]
        .into()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A disk victim's files go only after the pod (the runtime deletes
    /// layers and logs, containerd's GC the snapshots, asynchronously):
    /// gone from the listing, or without processes, it is not released
    /// until the node's signal shows the space back.
    #[test]
    fn disk_victim_released_only_when_the_node_signal_rises() {
        // (after the victim went away: ms, inodes free, want: a second victim)
        let table: &[(u64, i64, bool)] = &[
            (10, 4_000, false),  // pressure unchanged: the GC has not run
            (500, 4_400, false), // rose by 400 < 25 % of the victim's 2,000
            (900, 4_499, false),
            (1000, 4_500, true), // rose by 500: released, next pass evicts
        ];
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("nodefs.inodesFree<5000", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let p = vec![inode_pod("many", 2_000, 1), inode_pod("few", 100, 1)];
        let d = m.synchronize(t0, &inodes_free(4_000, t0), Ok(&p));
        assert_eq!(d.victim().unwrap().candidate.uid, "many");
        // its processes are gone, it is still listed: not released
        let left = vec![inode_pod("many", 2_000, 0), inode_pod("few", 100, 1)];
        let d = m.synchronize(t0 + s(2), &inodes_free(4_000, t0 + s(2)), Ok(&left));
        assert!(
            matches!(d.action, Action::WaitingForRelease { ref uid, .. } if uid == "many"),
            "{:?}",
            d.action
        );
        let gone = vec![inode_pod("few", 100, 1)];
        let base = t0 + s(3);
        let mut second = None;
        for &(off, free, want) in table {
            // the pass that sees the release chooses nobody (observation
            // not newer than the release); the next one with a fresh one does
            let now = base + ms(off);
            let d = m.synchronize(now, &inodes_free(free, now), Ok(&gone));
            let later = now + ms(1);
            let d2 = m.synchronize(later, &inodes_free(free, later), Ok(&gone));
            let chosen = d.victim().or(d2.victim()).map(|v| v.candidate.uid.clone());
            assert_eq!(
                chosen.is_some(),
                want,
                "at +{off} ms, {free} free: {:?}",
                d2.action
            );
            if want {
                assert!(
                    d.events
                        .iter()
                        .any(|e| e.contains("pod gone and nodefs.inodesFree rose by 500")),
                    "{:?}",
                    d.events
                );
                second = chosen;
                break;
            }
        }
        assert_eq!(second.as_deref(), Some("few"));
    }

    #[test]
    fn disk_victim_that_frees_nothing_times_out() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("nodefs.inodesFree<5000", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let p = vec![inode_pod("many", 2_000, 1), inode_pod("few", 100, 1)];
        assert!(m
            .synchronize(t0, &inodes_free(4_000, t0), Ok(&p))
            .victim()
            .is_some());
        let gone = vec![inode_pod("few", 100, 1)];
        let d = m.synchronize(t0 + s(29), &inodes_free(4_000, t0 + s(29)), Ok(&gone));
        assert!(
            matches!(d.action, Action::WaitingForRelease { .. }),
            "{:?}",
            d.action
        );
        let d = m.synchronize(t0 + s(30), &inodes_free(4_000, t0 + s(30)), Ok(&gone));
        assert!(
            d.events
                .iter()
                .any(|e| e.contains("not released after 30s")),
            "{:?}",
            d.events
        );
        assert_eq!(d.victim().unwrap().candidate.uid, "few");
        // forgotten once done and gone
        assert_eq!(m.pending_victim(), Some("few"));
    }

    /// Memory is back when the pod is gone: no wait on the node signal.
    #[test]
    fn memory_victim_released_when_gone() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            config("memory.available<100Mi", "", "", "", "0s"),
            ManagerOptions::default(),
        );
        let p = pods();
        assert_eq!(
            m.synchronize(t0, &mem(50, t0), Ok(&p))
                .victim()
                .unwrap()
                .candidate
                .uid,
            "be"
        );
        let p2: Vec<Candidate> = p.iter().filter(|c| c.uid != "be").cloned().collect();
        let d = m.synchronize(t0 + ms(10), &mem(50, t0 + ms(10)), Ok(&p2));
        assert!(
            d.events.iter().any(|e| e.contains("released: pod gone;")),
            "{:?}",
            d.events
        );
        let d = m.synchronize(t0 + ms(20), &mem(50, t0 + ms(20)), Ok(&p2));
        assert!(d.victim().is_some(), "{:?}", d.action);
    }

    fn pressure_config(hard: &[(Signal, &str)], soft: &[(Signal, &str, u64)]) -> EvictionConfig {
        use crate::policy::evict::pressure::parse_stall;
        let h = hard
            .iter()
            .map(|(s, v)| (*s, parse_stall("h", *s, v).unwrap()))
            .collect();
        let so = soft
            .iter()
            .map(|(s, v, _)| (*s, parse_stall("s", *s, v).unwrap()))
            .collect();
        let g = soft
            .iter()
            .map(|(s, _, g)| (*s, Duration::from_secs(*g)))
            .collect();
        config("", "", "", "", "30s")
            .with_pressure(&h, &so, &g)
            .unwrap()
    }

    /// `stall_ms` of memory.full stall in the 2 s window ending at `at`,
    /// measured over a window starting at `start`.
    fn full(stall_ms: i64, at: Instant, start: Instant) -> Observations {
        [(
            Signal::MemoryFull,
            Observation {
                available: stall_ms * 1000,
                capacity: 2_000_000,
                at,
                window_start: Some(start),
            },
        )]
        .into()
    }

    fn stall_pods(ppm: [Option<u32>; 3]) -> Vec<Candidate> {
        let mut p = pods();
        for (c, ppm) in p.iter_mut().zip(ppm) {
            if let Some(st) = c.stats.as_mut() {
                st.memory_stall_ppm = ppm;
            }
        }
        p
    }

    /// A hard pressure threshold: met when the stall reaches the line (the
    /// kernel's ≥), the stalling pod evicted once, MemoryPressure set; the
    /// next victim only on a window that started after the release.
    #[test]
    fn pressure_hard_threshold_evicts_the_stalling_pod_once() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            pressure_config(&[(Signal::MemoryFull, "10%/2s")], &[]),
            ManagerOptions::default(),
        );
        m.set_per_pod_pressure(true);
        // g stalls (it is the thrashing one), be and bu do not
        let p = stall_pods([Some(700_000), Some(0), Some(1_000)]);
        // (stall ms in the window, met?)
        for (stall, met) in [(0, false), (199, false), (200, true)] {
            let d = m.synchronize(t0, &full(stall, t0, t0 - s(2)), Ok(&p));
            assert_eq!(d.met().count() == 1, met, "{stall} ms");
            if !met {
                assert_eq!(d.action, Action::None);
                assert!(d.conditions.is_empty());
            }
        }
        // the last pass (200 ms) chose
        let now = t0 + ms(1);
        let mut m2 = m.clone();
        let d = m2.synchronize(now, &full(300, now, now - s(2)), Ok(&p));
        assert!(
            matches!(d.action, Action::WaitingForRelease { ref uid, .. } if uid == "g"),
            "{:?}",
            d.action
        );
        let mut m = Manager::new(
            pressure_config(&[(Signal::MemoryFull, "10%/2s")], &[]),
            ManagerOptions::default(),
        );
        m.set_per_pod_pressure(true);
        let d = m.synchronize(t0, &full(300, t0, t0 - s(2)), Ok(&p));
        let v = d.victim().expect("a victim");
        assert_eq!(
            v.candidate.uid, "g",
            "the stalling pod, not the kubelet's first"
        );
        assert_eq!(v.signal, Signal::MemoryFull);
        assert_eq!(
            (v.observed, v.threshold_value, v.capacity),
            (300_000, 200_000, 2_000_000)
        );
        assert_eq!(v.grace, s(1));
        assert!(
            v.message
                .starts_with("The node had memory pressure: full stall 15% of 2s, threshold 10%."),
            "{}",
            v.message
        );
        assert_eq!(d.conditions, vec![NodeCondition::MemoryPressure]);
        // gone; the stall of the window before the release does not pick another
        let p2: Vec<Candidate> = p.iter().filter(|c| c.uid != "g").cloned().collect();
        let t1 = t0 + ms(500);
        let d = m.synchronize(t1, &full(300, t1, t1 - s(2)), Ok(&p2));
        assert!(
            d.events.iter().any(|e| e.contains("released: pod gone")),
            "{:?}",
            d.events
        );
        for off in [600, 2_000, 2_500] {
            let t = t0 + ms(off);
            let d = m.synchronize(t, &full(300, t, t - s(2)), Ok(&p2));
            assert_eq!(d.action, Action::None, "{off} ms");
            assert!(
                d.notes.iter().any(|n| n.contains("window started before")),
                "{:?}",
                d.notes
            );
        }
        // a window wholly after the release that still stalls: the next one
        let t = t0 + ms(2_600);
        let d = m.synchronize(t, &full(300, t, t1 + ms(1)), Ok(&p2));
        assert!(d.victim().is_some(), "{:?}", d.action);
    }

    /// Per-pod stall measured (v2) but not known yet: wait for it rather
    /// than evict by the kubelet's order alone; not measured (v1): the
    /// kubelet's memory order, node-wide.
    #[test]
    fn pressure_waits_for_per_pod_stall_where_it_is_measured() {
        let t0 = Instant::now();
        let cfg = pressure_config(&[(Signal::MemorySome, "20%/2s")], &[]);
        let some = |at: Instant| -> Observations {
            [(
                Signal::MemorySome,
                Observation {
                    available: 1_000_000,
                    capacity: 2_000_000,
                    at,
                    window_start: Some(at - s(2)),
                },
            )]
            .into()
        };
        let mut m = Manager::new(cfg.clone(), ManagerOptions::default());
        m.set_per_pod_pressure(true);
        let d = m.synchronize(t0, &some(t0), Ok(&pods()));
        assert_eq!(d.action, Action::None);
        assert!(
            d.notes
                .iter()
                .any(|n| n.contains("measuring which pods stall")),
            "{:?}",
            d.notes
        );
        let p = stall_pods([None, Some(400_000), None]);
        let d = m.synchronize(t0 + ms(250), &some(t0 + ms(250)), Ok(&p));
        assert_eq!(d.victim().unwrap().candidate.uid, "bu");
        // v1: no per-pod stall; the kubelet's memory order
        let mut m = Manager::new(cfg, ManagerOptions::default());
        let d = m.synchronize(t0, &some(t0), Ok(&pods()));
        assert_eq!(d.victim().unwrap().candidate.uid, "be");
    }

    /// A soft pressure threshold waits its grace period; a hard one on the
    /// other signal escalates; stale pressure data blocks.
    #[test]
    fn pressure_soft_grace_and_stale_data() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            pressure_config(
                &[(Signal::MemoryFull, "50%/2s")],
                &[(Signal::MemorySome, "10%/2s", 10)],
            ),
            ManagerOptions::default(),
        );
        let obs = |some_ms: i64, full_ms: i64, at: Instant| -> Observations {
            [
                (
                    Signal::MemorySome,
                    Observation {
                        available: some_ms * 1000,
                        capacity: 2_000_000,
                        at,
                        window_start: Some(at - s(2)),
                    },
                ),
                (
                    Signal::MemoryFull,
                    Observation {
                        available: full_ms * 1000,
                        capacity: 2_000_000,
                        at,
                        window_start: Some(at - s(2)),
                    },
                ),
            ]
            .into()
        };
        let p = pods();
        for (off, want) in [(0, false), (9, false), (10, true)] {
            let t = t0 + s(off);
            let d = m.synchronize(t, &obs(400, 100, t), Ok(&p));
            assert_eq!(d.victim().is_some(), want, "t={off}");
            if let Some(v) = d.victim() {
                assert_eq!((v.kind, v.grace), (ThresholdKind::Soft, s(20)));
            }
        }
        // the hard one met while the soft victim terminates: escalation
        let t = t0 + s(11);
        let d = m.synchronize(t, &obs(900, 1_200, t), Ok(&p));
        assert_eq!(
            d.victim().map(|v| v.kind),
            Some(ThresholdKind::Hard),
            "{:?}",
            d.action
        );
        // stale: carried, not acted on
        let old = t0 + s(11);
        let d = m.synchronize(t0 + s(30), &obs(900, 1_200, old), Ok(&p));
        assert!(
            matches!(d.action, Action::Blocked(ref w) if w.contains("stale")),
            "{:?}",
            d.action
        );
    }
}
