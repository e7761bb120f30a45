//! Liveness and readiness: the heartbeats `/healthz` checks and the
//! conditions `/readyz` reports, plus the published status document.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::telemetry::status::StatusDoc;

/// A runtime call pending this long makes `/readyz` fail (it normally
/// answers in milliseconds).
pub const SLOW_CALL: Duration = Duration::from_secs(3);

const NOT_REACHABLE: &str = "container runtime (CRI) not reachable";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Liveness, readiness and the published status document.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    /// Milliseconds after `started` of the last heartbeat.
    last_beat_ms: AtomicU64,
    stale_after: Duration,
    /// Why the container runtime is not usable (`None`: it answered).
    cri_problem: Mutex<Option<String>>,
    /// A runtime call in flight: what and since when.
    cri_pending: Mutex<Option<(String, Instant)>>,
    /// Other reasons not to be ready, by component (`cgroup_writes`,
    /// `signals`, ...).
    problems: Mutex<BTreeMap<String, String>>,
    reconciled: AtomicBool,
    shutting_down: AtomicBool,
    status: Mutex<StatusDoc>,
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
            cri_problem: Mutex::new(Some(NOT_REACHABLE.to_string())),
            cri_pending: Mutex::new(None),
            problems: Mutex::new(BTreeMap::new()),
            reconciled: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            status: Mutex::new(StatusDoc::default()),
        }
    }

    /// The main loop is alive (call once per loop iteration).
    pub fn beat(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_beat_ms.store(ms, Ordering::Relaxed);
    }

    /// Whether the container runtime answered the last call.
    pub fn set_cri_reachable(&self, ok: bool) {
        *lock(&self.cri_problem) = (!ok).then(|| NOT_REACHABLE.to_string());
    }

    /// The runtime answered, but not usably (e.g. an answer above the
    /// message size limit), or did not answer: `reason` says which.
    pub fn set_cri_problem(&self, reason: String) {
        *lock(&self.cri_problem) = Some(reason);
    }

    /// A runtime call started (`Some(what)`) or ended (`None`). A call
    /// pending longer than [`SLOW_CALL`] makes `/readyz` fail naming it,
    /// while `/healthz` stays ok (the loop is waiting, not dead).
    pub fn set_cri_pending(&self, what: Option<&str>) {
        *lock(&self.cri_pending) = what.map(|w| (w.to_string(), Instant::now()));
    }

    /// Set (`Some(reason)`) or clear (`None`) a reason not to be ready.
    /// Returns whether it changed (for logging once per change).
    pub fn set_problem(&self, component: &str, reason: Option<String>) -> bool {
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

    /// The daemon is stopping: `/readyz` fails from now on.
    pub fn set_shutting_down(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    /// Age of the last heartbeat.
    pub fn heartbeat_age(&self) -> Duration {
        let now = self.started.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_beat_ms.load(Ordering::Relaxed)))
    }

    /// Liveness: `Ok` or why not.
    pub fn alive(&self) -> Result<(), String> {
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
    pub fn ready(&self) -> Result<(), String> {
        let mut why: Vec<String> = Vec::new();
        if self.shutting_down.load(Ordering::Relaxed) {
            why.push("shutting down".into());
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
        if let Some(p) = lock(&self.cri_problem).as_ref() {
            why.push(p.clone());
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
    pub fn publish_status(&self, doc: StatusDoc) {
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = doc;
    }

    /// Change the published status in place (e.g. to append an eviction).
    pub fn update_status(&self, f: impl FnOnce(&mut StatusDoc)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The published status with `alive`/`ready` filled in now.
    pub fn status(&self) -> StatusDoc {
        let mut doc = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        doc.alive = self.alive().is_ok();
        doc.ready = self.ready().is_ok();
        doc.not_ready_reason = self.ready().err();
        doc
    }
}
