//! Liveness and readiness: the heartbeats `/healthz` checks and the
//! conditions `/readyz` reports, plus the published status document.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
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
        self.cri_reachable.store(ok, Ordering::Relaxed);
    }

    /// A reconcile pass completed (readiness needs at least one).
    pub fn set_reconciled(&self) {
        self.reconciled.store(true, Ordering::Relaxed);
    }

    /// qosd refuses to write for `why` (`None`: no longer).
    pub fn set_refused(&self, why: Option<String>) {
        *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = why;
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
        if let Some(r) = self
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            why.push(r.clone());
        }
        if !self.cri_reachable.load(Ordering::Relaxed) {
            why.push("container runtime (CRI) not reachable".into());
        }
        if !self.reconciled.load(Ordering::Relaxed) {
            why.push("first reconcile not done".into());
        }
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
