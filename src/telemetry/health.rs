//! Liveness and readiness: the heartbeats `/healthz` checks and the
//! conditions `/readyz` reports, plus the published status document.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::telemetry::status::StatusDoc;

/// Liveness, readiness and the published status document.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    /// Milliseconds after `started` of the last heartbeat.
    last_beat_ms: AtomicU64,
    stale_after: Duration,
    cri_reachable: AtomicBool,
    reconciled: AtomicBool,
    shutting_down: AtomicBool,
    /// Why qosd refuses to write (e.g. the pods' cgroup parents do not
    /// match the configuration): not ready while set.
    refused: Mutex<Option<String>>,
    status: Mutex<StatusDoc>,
    /// Heartbeats of the other long-running loops (eviction, watcher, …).
    loops: Mutex<Vec<Arc<Heartbeat>>>,
    /// Set once a supervised loop died (a panic): liveness fails for good.
    failure: Mutex<Option<String>>,
    /// When the runtime stopped answering (None: it answers).
    cri_down_since: Mutex<Option<Instant>>,
    /// `/healthz` fails once the runtime was unreachable this long (a
    /// restarted pod remounts the runtime's socket directory afresh).
    runtime_unhealthy_after: Mutex<Option<Duration>>,
    /// Working, but with less: e.g. the Kubernetes API is unavailable
    /// (key → reason); shown with readiness.
    degraded: Mutex<std::collections::BTreeMap<&'static str, String>>,
    /// Why the runtime is not usable, when more is known than "not
    /// reachable" (e.g. its answer is too large).
    cri_reason: Mutex<Option<String>>,
    /// A runtime call in flight: what and since when.
    cri_pending: Mutex<Option<(String, Instant)>>,
    /// Other reasons not to be ready, by component (`cgroup_writes`,
    /// `signals`, ...).
    problems: Mutex<std::collections::BTreeMap<String, String>>,
    /// Per-pod usage measured on demand (`/status`): see
    /// [`Health::fresh_pod_usage`].
    usage: UsageRefresh,
    /// Bumped (and the supervisor woken) by anything that can make
    /// liveness fail sooner than the supervisor planned: a failure, a new
    /// loop, the runtime going away, a new runtime limit. Heartbeats only
    /// push deadlines later and wake nobody.
    changed: (Mutex<u64>, std::sync::Condvar),
}

/// Per-pod usage on demand: a reader asks (generation `asked`), the
/// eviction loop measures in its next pass and reports `done`.
#[derive(Debug, Default)]
struct UsageRefresh {
    /// (asked, done) generations.
    state: Mutex<(u64, u64)>,
    measured: std::sync::Condvar,
    /// Wakes the loop that measures; `None`: nothing measures (no
    /// eviction loop), the last published usage is all there is.
    waker: Mutex<Option<std::sync::mpsc::Sender<()>>>,
}

/// A runtime call pending this long makes `/readyz` fail (it normally
/// answers in milliseconds).
pub(crate) const SLOW_CALL: Duration = Duration::from_secs(3);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The heartbeat of one long-running loop: it must [`Heartbeat::beat`] at
/// least every `deadline`, or `/healthz` fails (see
/// [`crate::runtime::supervisor`]).
#[derive(Debug)]
pub(crate) struct Heartbeat {
    name: &'static str,
    deadline: Duration,
    started: Instant,
    last_ms: AtomicU64,
}

impl Heartbeat {
    /// The loop is alive.
    pub(crate) fn beat(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn age(&self) -> Duration {
        let now = self.started.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

impl Health {
    /// `stale_after`: how old the heartbeat may get before `/healthz` fails
    /// (e.g. 3 × the reconcile interval, or the systemd watchdog period).
    /// Construction counts as a heartbeat.
    pub fn new(stale_after: Duration) -> Health {
        Health {
            started: Instant::now(),
            last_beat_ms: AtomicU64::new(0),
            stale_after,
            cri_reachable: AtomicBool::new(false),
            reconciled: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            refused: Mutex::new(None),
            status: Mutex::new(StatusDoc {
                pods_unknown: true,
                ..StatusDoc::default()
            }),
            loops: Mutex::new(Vec::new()),
            failure: Mutex::new(None),
            cri_down_since: Mutex::new(None),
            runtime_unhealthy_after: Mutex::new(None),
            degraded: Mutex::new(Default::default()),
            cri_reason: Mutex::new(None),
            cri_pending: Mutex::new(None),
            problems: Mutex::new(Default::default()),
            usage: UsageRefresh::default(),
            changed: (Mutex::new(0), std::sync::Condvar::new()),
        }
    }

    /// Wake the supervisor: liveness may fail sooner than it planned.
    fn poke(&self) {
        *lock(&self.changed.0) += 1;
        self.changed.1.notify_all();
    }

    /// The change generation (see [`Health::wait_change`]).
    pub(crate) fn generation(&self) -> u64 {
        *lock(&self.changed.0)
    }

    /// Sleep until `timeout` passes or something bumps the generation past
    /// `seen` (a failure, a new loop or limit, the runtime going away).
    pub(crate) fn wait_change(&self, seen: u64, timeout: Duration) {
        let g = lock(&self.changed.0);
        let _ = self
            .changed
            .1
            .wait_timeout_while(g, timeout, |g| *g == seen);
    }

    /// How long, without another heartbeat, until [`Health::alive`] can
    /// fail: the earliest of every heartbeat's deadline (the loops' and
    /// the main loop's) and of the runtime-unreachable limit when the
    /// runtime is down. Zero when it already fails.
    pub(crate) fn until_unhealthy(&self) -> Duration {
        if lock(&self.failure).is_some() {
            return Duration::ZERO;
        }
        // `alive` fails once an age is strictly over its limit; ages are
        // whole milliseconds: 1 ms past the limit.
        let left =
            |limit: Duration, age: Duration| (limit + Duration::from_millis(1)).saturating_sub(age);
        let mut next = left(self.stale_after, self.heartbeat_age());
        for l in lock(&self.loops).iter() {
            next = next.min(left(l.deadline, l.age()));
        }
        let limit = *lock(&self.runtime_unhealthy_after);
        if let (Some(limit), Some(since)) = (limit, *lock(&self.cri_down_since)) {
            next = next.min(left(limit, since.elapsed()));
        }
        next
    }

    /// The loop that measures per-pod usage: `wake` starts a pass, which
    /// measures when [`Health::usage_wanted`] says so.
    pub(crate) fn set_usage_measurer(&self, wake: std::sync::mpsc::Sender<()>) {
        *lock(&self.usage.waker) = Some(wake);
    }

    /// A reader waits for per-pod usage: the generation to report to
    /// [`Health::usage_measured`] after measuring (None: nobody waits).
    pub(crate) fn usage_wanted(&self) -> Option<u64> {
        let st = lock(&self.usage.state);
        (st.0 > st.1).then_some(st.0)
    }

    /// Per-pod usage up to generation `generation` was measured and
    /// published (or could not be: the reader then sees the older one,
    /// with its time).
    pub(crate) fn usage_measured(&self, generation: u64) {
        let mut st = lock(&self.usage.state);
        st.1 = st.1.max(generation);
        self.usage.measured.notify_all();
    }

    /// Make the published per-pod usage at most `max_age` old: when it is
    /// older (or missing), ask the measuring loop for a measurement and
    /// wait for it, at most `timeout` (blocking). Without a measuring loop,
    /// or when it does not answer in time, the older usage stays, with the
    /// time it was measured (`pod_usage_at_ms`).
    pub(crate) fn fresh_pod_usage(&self, max_age: Duration, timeout: Duration) {
        let Some(wake) = lock(&self.usage.waker).clone() else {
            return;
        };
        let at = lock(&self.status).pod_usage_at_ms;
        let now = crate::telemetry::status::now_ms();
        if at.is_some_and(|t| now.saturating_sub(t) <= max_age.as_millis() as u64) {
            return;
        }
        let generation = {
            let mut st = lock(&self.usage.state);
            st.0 += 1;
            st.0
        };
        if wake.send(()).is_err() {
            return;
        }
        let st = lock(&self.usage.state);
        let _ = self
            .usage
            .measured
            .wait_timeout_while(st, timeout, |st| st.1 < generation);
    }

    /// `/healthz` fails after the runtime was unreachable for `limit`.
    pub(crate) fn set_runtime_unhealthy_after(&self, limit: Option<Duration>) {
        *self
            .runtime_unhealthy_after
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = limit;
        self.poke();
    }

    /// Mark a degraded mode (`Some(reason)`) or clear it (`None`).
    pub(crate) fn set_degraded(&self, key: &'static str, reason: Option<String>) {
        let mut g = self.degraded.lock().unwrap_or_else(|e| e.into_inner());
        match reason {
            Some(r) => g.insert(key, r),
            None => g.remove(key),
        };
    }

    /// The degraded modes in force, as `key: reason`.
    pub(crate) fn degraded(&self) -> Vec<String> {
        self.degraded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect()
    }

    /// The main loop is alive (call once per loop iteration).
    pub fn beat(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_beat_ms.store(ms, Ordering::Relaxed);
    }

    /// Whether the container runtime answered the last call.
    pub fn set_cri_reachable(&self, ok: bool) {
        self.cri_reachable.store(ok, Ordering::Relaxed);
        let mut since = self
            .cri_down_since
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let went_down = match (ok, *since) {
            (true, _) => {
                *since = None;
                false
            }
            (false, None) => {
                *since = Some(Instant::now());
                true
            }
            (false, Some(_)) => false,
        };
        drop(since);
        if went_down {
            self.poke();
        }
        if ok {
            *lock(&self.cri_reason) = None;
        }
    }

    /// The runtime failed, and `reason` says how (not reachable, an
    /// answer above the message size limit, ...): `/readyz` shows it.
    pub(crate) fn set_cri_problem(&self, reason: String) {
        self.set_cri_reachable(false);
        *lock(&self.cri_reason) = Some(reason);
    }

    /// A runtime call started (`Some(what)`) or ended (`None`). A call
    /// pending longer than [`SLOW_CALL`] makes `/readyz` fail naming it,
    /// while `/healthz` stays ok (the loop is waiting, not dead).
    pub(crate) fn set_cri_pending(&self, what: Option<&str>) {
        *lock(&self.cri_pending) = what.map(|w| (w.to_string(), Instant::now()));
    }

    /// Set (`Some(reason)`) or clear (`None`) a reason not to be ready.
    /// Returns whether it changed (for logging once per change).
    pub(crate) fn set_problem(&self, component: &str, reason: Option<String>) -> bool {
        let mut p = lock(&self.problems);
        match reason {
            Some(r) => p.insert(component.to_string(), r.clone()).as_ref() != Some(&r),
            None => p.remove(component).is_some(),
        }
    }

    /// A reconcile pass completed (readiness needs at least one).
    pub fn set_reconciled(&self) {
        self.reconciled.store(true, Ordering::Relaxed);
    }

    /// qosd refuses to write for `why` (`None`: no longer).
    pub(crate) fn set_refused(&self, why: Option<String>) {
        *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = why;
    }

    /// The daemon is stopping: `/readyz` fails from now on.
    pub(crate) fn set_shutting_down(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    /// Age of the last heartbeat.
    pub(crate) fn heartbeat_age(&self) -> Duration {
        let now = self.started.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_beat_ms.load(Ordering::Relaxed)))
    }

    /// Register a loop that must beat at least every `deadline`
    /// (registration counts as a beat).
    pub(crate) fn register_loop(&self, name: &'static str, deadline: Duration) -> Arc<Heartbeat> {
        let hb = Arc::new(Heartbeat {
            name,
            deadline,
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
        });
        self.loops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(hb.clone());
        self.poke();
        hb
    }

    /// A supervised loop died: liveness fails from now on, with `reason`.
    /// The first failure is kept.
    pub(crate) fn fail(&self, reason: String) {
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(reason);
        }
        drop(f);
        self.poke();
    }

    /// Liveness: `Ok` or why not.
    pub(crate) fn alive(&self) -> Result<(), String> {
        if let Some(f) = self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(f);
        }
        for l in self.loops.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let age = l.age();
            if age > l.deadline {
                return Err(format!(
                    "{} heartbeat is {:.1}s old (limit {:.1}s)",
                    l.name,
                    age.as_secs_f64(),
                    l.deadline.as_secs_f64()
                ));
            }
        }
        let limit = *self
            .runtime_unhealthy_after
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let since = *self
            .cri_down_since
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let (Some(limit), Some(since)) = (limit, since) {
            if since.elapsed() > limit {
                return Err(format!(
                    "container runtime unreachable for {:.0}s (limit {:.0}s)",
                    since.elapsed().as_secs_f64(),
                    limit.as_secs_f64()
                ));
            }
        }
        let age = self.heartbeat_age();
        if age > self.stale_after {
            Err(format!(
                "main loop heartbeat is {:.1}s old (limit {:.1}s)",
                age.as_secs_f64(),
                self.stale_after.as_secs_f64()
            ))
        } else {
            Ok(())
        }
    }

    /// Readiness: `Ok` or every reason it is not ready.
    pub(crate) fn ready(&self) -> Result<(), String> {
        let mut why: Vec<String> = Vec::new();
        if self.shutting_down.load(Ordering::Relaxed) {
            why.push("shutting down".into());
        }
        if let Some(r) = lock(&self.refused).as_ref() {
            why.push(r.clone());
        }
        if let Some((what, since)) = lock(&self.cri_pending).as_ref() {
            let age = since.elapsed();
            if age >= SLOW_CALL {
                why.push(format!(
                    "container runtime (CRI) not answering: {what} pending for {:.1}s",
                    age.as_secs_f64()
                ));
            }
        }
        if !self.cri_reachable.load(Ordering::Relaxed) {
            why.push(
                lock(&self.cri_reason)
                    .clone()
                    .unwrap_or_else(|| "container runtime (CRI) not reachable".into()),
            );
        }
        if !self.reconciled.load(Ordering::Relaxed) {
            why.push("first reconcile not done".into());
        }
        why.extend(lock(&self.problems).values().cloned());
        if why.is_empty() {
            Ok(())
        } else {
            Err(why.join("; "))
        }
    }

    /// Replace the published status document.
    #[cfg(test)]
    pub fn publish_status(&self, doc: StatusDoc) {
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = doc;
    }

    /// Change the published status in place (e.g. to append an eviction).
    pub(crate) fn update_status(&self, f: impl FnOnce(&mut StatusDoc)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The published status with `alive`/`ready` filled in now.
    pub(crate) fn status(&self) -> StatusDoc {
        let mut doc = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        doc.alive = self.alive().is_ok();
        doc.ready = self.ready().is_ok();
        doc.not_ready_reason = self.ready().err();
        doc.degraded = self.degraded();
        doc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader of stale (or missing) per-pod usage asks the measuring
    /// loop and gets what it published; fresh usage asks nothing; without
    /// a measuring loop nothing is asked.
    #[test]
    fn stale_pod_usage_is_measured_on_demand() {
        let h = Arc::new(Health::new(Duration::from_secs(60)));
        // No measuring loop: returns at once with what there is.
        h.fresh_pod_usage(Duration::from_secs(1), Duration::from_secs(5));
        assert_eq!(h.status().pod_usage_at_ms, None);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        h.set_usage_measurer(tx);
        let h2 = h.clone();
        let measurer = std::thread::spawn(move || {
            let mut passes = 0;
            while rx.recv().is_ok() {
                let Some(g) = h2.usage_wanted() else { continue };
                passes += 1;
                h2.update_status(|d| {
                    d.pod_usage = vec![crate::telemetry::status::PodUsage {
                        uid: format!("pass{passes}"),
                        ..Default::default()
                    }];
                    d.pod_usage_at_ms = Some(crate::telemetry::status::now_ms());
                });
                h2.usage_measured(g);
            }
            passes
        });
        h.fresh_pod_usage(Duration::from_secs(1), Duration::from_secs(30));
        let doc = h.status();
        assert_eq!(doc.pod_usage[0].uid, "pass1");
        assert!(h.usage_wanted().is_none());
        // Fresh enough: nothing asked.
        h.fresh_pod_usage(Duration::from_secs(60), Duration::from_secs(30));
        assert_eq!(h.status().pod_usage[0].uid, "pass1");
        // Older than allowed: measured again, each time.
        for _ in 0..2 {
            std::thread::sleep(Duration::from_millis(2));
            h.fresh_pod_usage(Duration::ZERO, Duration::from_secs(30));
        }
        assert_eq!(h.status().pod_usage[0].uid, "pass3");
        *lock(&h.usage.waker) = None; // ends the measurer
        assert_eq!(measurer.join().unwrap(), 3);
    }

    #[test]
    fn runtime_unreachable_too_long_fails_liveness_and_degraded_is_reported() {
        let h = Health::new(Duration::from_secs(60));
        h.set_runtime_unhealthy_after(Some(Duration::from_millis(30)));
        h.set_cri_reachable(false);
        assert!(h.alive().is_ok(), "not yet past the limit");
        std::thread::sleep(Duration::from_millis(60));
        h.beat();
        let why = h.alive().unwrap_err();
        assert!(why.contains("container runtime unreachable"), "{why}");
        h.set_cri_reachable(true);
        assert!(h.alive().is_ok(), "the runtime answers again");
        h.set_cri_reachable(false);
        assert!(h.alive().is_ok(), "the clock restarts");
        h.set_runtime_unhealthy_after(None);
        std::thread::sleep(Duration::from_millis(60));
        assert!(h.alive().is_ok(), "no limit: never");

        h.set_degraded("kubernetes-api", Some("gone".into()));
        assert_eq!(h.degraded(), ["kubernetes-api: gone"]);
        assert_eq!(h.status().degraded, ["kubernetes-api: gone"]);
        h.set_degraded("kubernetes-api", None);
        assert!(h.degraded().is_empty());
    }
}
