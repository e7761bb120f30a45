//! Acting on a victim: kill, CRI stop/remove, or dry-run.
//!
//! * [`Backend::Kill`] (hard memory thresholds: speed matters): cgroup v2
//!   `cgroup.kill`; otherwise SIGKILL to every pid in the pod cgroup and its
//!   children, repeated until the tree is empty (new forks are caught by
//!   the next round). Then the runtime cleans up — StopPodSandbox, then
//!   RemovePodSandbox, once, in this order, NotFound counting as done — on
//!   a background thread through the [`PodStopper`] the daemon provides.
//!   Other evictions (soft thresholds, disk, pids, local-storage limits) go
//!   through the runtime with the victim's grace (1 s for hard ones, as the
//!   kubelet's immediateEvictionGracePeriodSeconds), or SIGTERM, grace,
//!   SIGKILL without a runtime.
//! * [`Backend::Cri`]: StopContainer with the grace, StopPodSandbox, then
//!   RemovePodSandbox, on the caller's thread.
//! * [`Backend::Api`]: the Kubernetes Eviction subresource through the
//!   [`ApiEvictor`] the daemon provides (grace: hard 1 s, soft
//!   min(eviction-max-pod-grace-period, terminationGracePeriodSeconds) —
//!   never below 1 s: a grace of 0 makes the API server remove the pod
//!   object at once, before its containers stop), with an `Evicted` Event.
//!   Hard threshold: a refusal, throttling, an error or no answer within
//!   the deadline falls back to the local kill (as [`Backend::Kill`])
//!   followed by the kubelet's eviction record on the pod's status (phase
//!   `Failed`, reason `Evicted`, condition `DisruptionTarget`) — the object
//!   is not deleted. Soft threshold: a refusal (a disruption budget) or an
//!   error with nothing done is an error ([`EvictError::ApiRefused`]) and
//!   the engine moves to the next candidate; throttling asks for the same
//!   pod again after `Retry-After`; a request sent but not answered in
//!   time counts as an eviction in progress (the engine waits for its
//!   effect and evicts no second pod meanwhile).
//! * [`Backend::DryRun`]: logs what would be done; touches nothing.
//!
//! Every eviction is logged (tracing, target `qosd::eviction`) with the
//! signal, observed value, threshold, pod, QoS class, usage and rank.

use std::sync::Arc;
use std::time::Duration;

use crate::sys::kill::{kill_cgroup_tree, term_then_kill, KillError, KillReport};
use qosd_model::policy::evict::manager::Victim;
use qosd_model::policy::evict::rank::fmt_bytes;
use qosd_model::policy::evict::threshold::ThresholdKind;
use qosd_model::policy::evict::Backend;

pub mod runtime;
pub mod stopper;

/// The runtime side of an eviction (the daemon wraps its CRI client).
pub trait PodStopper: Send + Sync {
    /// StopPodSandbox with a grace period (the runtime's stop timeout).
    fn stop_pod(&self, sandbox_id: &str, grace: Duration) -> Result<(), RuntimeCallError>;
    /// RemovePodSandbox.
    fn remove_pod(&self, sandbox_id: &str) -> Result<(), RuntimeCallError>;
}

/// Why a runtime call of the eviction side ([`PodStopper`],
/// [`runtime::NodeRuntime`]) failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeCallError {
    /// The daemon is stopping: no new runtime call is started.
    #[error("qosd is stopping: no runtime call made")]
    Stopping,
    /// The runtime could not be reached or refused the call.
    #[error(transparent)]
    Cri(#[from] crate::cri::CriError),
    /// Anything else, described.
    #[error("{0}")]
    Other(String),
}

/// Why the Kubernetes API did not evict a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiRefusal {
    /// 429 from a PodDisruptionBudget.
    Refused(String),
    /// 429 from API Priority and Fairness (or max-in-flight): ask again
    /// after `retry_after`.
    Throttled {
        /// How long to wait before asking again (the answer's
        /// `Retry-After`, or what is left of it).
        retry_after: Duration,
        /// The answer, described.
        message: String,
    },
    /// 404, or 409 on the uid precondition: the pod is not in the API.
    Gone(String),
    /// Any other error answer, or nothing sent (no connection).
    Failed(String),
    /// Sent, not answered within the deadline: the outcome is unknown.
    Unanswered(String),
}

impl ApiRefusal {
    /// Nothing was done to this pod: the engine may try the next one.
    pub fn moves_on(&self) -> bool {
        matches!(
            self,
            ApiRefusal::Refused(_) | ApiRefusal::Gone(_) | ApiRefusal::Failed(_)
        )
    }

    /// The same pod is to be asked again (throttling), without the failure
    /// back-off.
    pub fn retries_same_pod(&self) -> bool {
        matches!(self, ApiRefusal::Throttled { .. })
    }
}

impl std::fmt::Display for ApiRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiRefusal::Refused(m) => write!(f, "refused: {m}"),
            ApiRefusal::Throttled {
                retry_after,
                message,
            } => write!(f, "throttled (retry after {retry_after:?}): {message}"),
            ApiRefusal::Gone(m) => write!(f, "not found: {m}"),
            ApiRefusal::Failed(m) => write!(f, "failed: {m}"),
            ApiRefusal::Unanswered(m) => write!(f, "unanswered: {m}"),
        }
    }
}

/// The Kubernetes API side of an eviction (the daemon wraps its client).
pub trait ApiEvictor: Send + Sync {
    /// Create an Eviction for the victim with this grace period (and an
    /// `Evicted` Event when it is accepted). Bounded by the deadline.
    fn evict(&self, v: &Victim, grace: Duration) -> Result<(), ApiRefusal>;
    /// After a local kill: leave the kubelet's eviction record on the pod
    /// (status phase `Failed`, reason `Evicted`, the message, condition
    /// `DisruptionTarget`/`TerminationByKubelet`; uid-checked) and write
    /// the Event. The pod object is not deleted, as by the kubelet.
    fn mark_evicted_after_kill(&self, v: &Victim) -> Result<(), crate::kube::client::KubeError>;
    /// Count a path taken (metrics).
    fn count(&self, _path: &str) {}
}

/// The kubelet's floor on an eviction's grace period (its pod workers
/// never use less than 1 s); on the API, a grace of 0 would remove the pod
/// object at once, before its containers stop.
pub(crate) const MIN_API_GRACE: Duration = Duration::from_secs(1);

/// The paths an `api` eviction can take (the `path` label of
/// `qosd_api_evictions_total`).
pub(crate) mod api_path {
    /// The Eviction subresource answered 201 (also when the answer came
    /// after the deadline: effects are counted, not attempts).
    pub const EVICTED: &str = "evicted";
    /// Soft threshold: refused (429, a disruption budget) — the next
    /// candidate is tried.
    pub const REFUSED_NEXT: &str = "refused_next_candidate";
    /// Soft threshold: an error with nothing done — the next candidate is
    /// tried.
    pub const FAILED_NEXT: &str = "failed_next_candidate";
    /// Soft threshold: throttled (429 with Retry-After) — the same pod is
    /// asked again once Retry-After has passed.
    pub const THROTTLED_RETRY: &str = "throttled_retry";
    /// Soft threshold: sent, no answer within the deadline — waiting for
    /// the effect; no other pod is evicted meanwhile.
    pub const UNANSWERED_WAIT: &str = "unanswered_wait";
    /// Hard threshold: refused, throttled, failed or no answer in time —
    /// local kill.
    pub const FALLBACK_KILL: &str = "fallback_local_kill";
    /// After a local kill: the kubelet's eviction record set on the pod's
    /// status.
    pub const FALLBACK_STATUS_SET: &str = "fallback_status_set";
    /// After a local kill: the status update failed (logged).
    pub const FALLBACK_STATUS_FAILED: &str = "fallback_status_failed";
    /// 404 / 409: the pod is already gone from the API.
    pub const GONE: &str = "already_gone";
    /// Every path, for metrics that list them up front.
    pub const ALL: &[&str] = &[
        EVICTED,
        REFUSED_NEXT,
        FAILED_NEXT,
        THROTTLED_RETRY,
        UNANSWERED_WAIT,
        FALLBACK_KILL,
        FALLBACK_STATUS_SET,
        FALLBACK_STATUS_FAILED,
        GONE,
    ];
}

pub use api_path::ALL as API_EVICTION_PATHS;
/// The path label of an eviction the API server accepted (also counted
/// for an answer that came after the deadline).
pub use api_path::EVICTED as API_EVICTED;

/// An eviction that could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum EvictError {
    /// The `cri` backend needs the pod's sandbox id, and none is known.
    #[error("pod {uid}: no sandbox id: the CRI backend cannot stop it")]
    NoSandbox {
        /// The pod's uid.
        uid: String,
    },
    /// A local kill needs the pod's cgroup directory, and none is known.
    #[error("pod {uid}: no cgroup directory known: cannot kill its processes")]
    NoCgroup {
        /// The pod's uid.
        uid: String,
    },
    /// The `cri` backend was chosen without a runtime client.
    #[error("pod {uid}: no runtime client configured for the CRI backend")]
    NoStopper {
        /// The pod's uid.
        uid: String,
    },
    /// StopPodSandbox or RemovePodSandbox failed.
    #[error("pod {uid}: {step} sandbox {sandbox}: {message}")]
    Runtime {
        /// The pod's uid.
        uid: String,
        /// The runtime's sandbox id.
        sandbox: String,
        /// The call that failed: `StopPodSandbox` or `RemovePodSandbox`.
        step: &'static str,
        /// The runtime's error.
        message: String,
    },
    /// The `api` backend was chosen without a Kubernetes API client.
    #[error("pod {uid}: no Kubernetes API client configured for the api backend")]
    NoApi {
        /// The pod's uid.
        uid: String,
    },
    /// The Kubernetes API did not evict the pod.
    #[error("pod {uid}: eviction through the API {refusal}")]
    ApiRefused {
        /// The pod's uid.
        uid: String,
        /// What the API answered.
        refusal: ApiRefusal,
    },
    /// Killing the pod's processes failed.
    #[error(transparent)]
    Kill(#[from] KillError),
}

/// What happened to the runtime side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RuntimeCleanup {
    NotApplicable,
    /// Stop/remove running on a background thread.
    Spawned,
    Done,
}

/// The outcome of one eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub(crate) uid: String,
    /// The backend that carried the eviction out.
    pub backend: Backend,
    /// The local kill's report (`None`: no process was killed here).
    pub kill: Option<KillReport>,
    pub(crate) runtime: RuntimeCleanup,
}

/// Carries out evictions.
#[derive(Clone)]
pub struct Evictor {
    pub(crate) backend: Backend,
    pub(crate) stopper: Option<Arc<dyn PodStopper>>,
    /// Cap on the grace given to the runtime (`--eviction-max-pod-grace-period`).
    pub(crate) max_pod_grace: Duration,
    /// Give up SIGKILL rounds after this long.
    pub(crate) kill_timeout: Duration,
    /// The Kubernetes API side ([`Backend::Api`]).
    pub api: Option<Arc<dyn ApiEvictor>>,
    /// How the runtime's clean-up after a kill is retried.
    pub(crate) cleanup_retry: CleanupRetry,
}

/// Retries of the runtime's clean-up after a local kill (StopPodSandbox,
/// RemovePodSandbox; the victim is already dead, both are idempotent and
/// NotFound counts as done): a runtime that is down or restarting during
/// the eviction gets the clean-up when it is back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CleanupRetry {
    /// Wait after the first failure (doubled after each further one).
    pub(crate) first: Duration,
    /// Longest wait between attempts.
    pub(crate) max: Duration,
    /// Give up (logged as an error) once this much time has passed.
    pub(crate) give_up_after: Duration,
}

impl Default for CleanupRetry {
    fn default() -> Self {
        CleanupRetry {
            first: Duration::from_secs(1),
            max: Duration::from_secs(30),
            give_up_after: Duration::from_secs(600),
        }
    }
}

/// Run `attempt` until it succeeds or `retry` gives up; the first failure
/// is logged (a warning), not every attempt. Returns the attempts made.
fn with_retries(
    retry: CleanupRetry,
    uid: &str,
    mut attempt: impl FnMut() -> Result<(), EvictError>,
) -> Result<u32, EvictError> {
    let start = std::time::Instant::now();
    let mut wait = retry.first;
    let mut n = 0u32;
    loop {
        n += 1;
        match attempt() {
            Ok(()) => {
                if n > 1 {
                    tracing::info!(target: "qosd::eviction", pod = %uid, attempts = n, "runtime cleanup after eviction done");
                }
                return Ok(n);
            }
            Err(e) => {
                if start.elapsed() + wait > retry.give_up_after {
                    return Err(e);
                }
                if n == 1 {
                    tracing::warn!(target: "qosd::eviction", pod = %uid, error = %e, "runtime cleanup after eviction failed; retrying until the runtime answers");
                }
                std::thread::sleep(wait);
                wait = qosd_model::core::backoff::Backoff::new(retry.first, retry.max).next(wait);
            }
        }
    }
}

impl std::fmt::Debug for Evictor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evictor")
            .field("backend", &self.backend)
            .field("stopper", &self.stopper.is_some())
            .field("max_pod_grace", &self.max_pod_grace)
            .field("kill_timeout", &self.kill_timeout)
            .field("api", &self.api.is_some())
            .field("cleanup_retry", &self.cleanup_retry)
            .finish()
    }
}

impl Evictor {
    /// An evictor with `backend`, the runtime side `stopper` (needed by
    /// the `cri` backend) and a cap on the grace given to the runtime;
    /// no Kubernetes API side until [`Evictor::api`] is set.
    pub fn new(
        backend: Backend,
        stopper: Option<Arc<dyn PodStopper>>,
        max_pod_grace: Duration,
    ) -> Evictor {
        Evictor {
            backend,
            stopper,
            max_pod_grace,
            kill_timeout: Duration::from_secs(2),
            api: None,
            cleanup_retry: CleanupRetry::default(),
        }
    }

    /// Evict a victim chosen by the manager. Logs the eviction first.
    pub fn evict(&self, v: &Victim) -> Result<Outcome, EvictError> {
        log_eviction(v, self.backend);
        let uid = v.candidate.uid.clone();
        // The manager gave the grace: 1 s for hard thresholds and local
        // storage limits, min(max pod grace, pod's own) for soft ones.
        let grace = v.grace;
        // Only a hard memory or memory-pressure eviction kills at once: the
        // kernel OOM killer must not get there first, and a stalling node
        // stalls on for every second of grace.
        let kill_now = v.kind == ThresholdKind::Hard
            && v.cause == qosd_model::policy::evict::manager::Cause::Threshold
            && matches!(
                v.signal.resource(),
                qosd_model::policy::evict::threshold::SignalResource::Memory
                    | qosd_model::policy::evict::threshold::SignalResource::MemoryStall
            );
        match self.backend {
            Backend::DryRun => Ok(Outcome {
                uid,
                backend: Backend::DryRun,
                kill: None,
                runtime: RuntimeCleanup::NotApplicable,
            }),
            Backend::Cri => {
                let stopper = self
                    .stopper
                    .as_ref()
                    .ok_or(EvictError::NoStopper { uid: uid.clone() })?;
                let sandbox = v
                    .candidate
                    .sandbox_id
                    .clone()
                    .ok_or(EvictError::NoSandbox { uid: uid.clone() })?;
                stop_and_remove(stopper.as_ref(), &uid, &sandbox, grace)?;
                Ok(Outcome {
                    uid,
                    backend: Backend::Cri,
                    kill: None,
                    runtime: RuntimeCleanup::Done,
                })
            }
            Backend::Api => self.evict_api(v, uid, grace),
            Backend::Kill => self.kill_locally(v, &uid, grace, kill_now),
        }
    }

    /// The `api` backend (see the module docs).
    fn evict_api(&self, v: &Victim, uid: String, grace: Duration) -> Result<Outcome, EvictError> {
        let api = self
            .api
            .as_ref()
            .ok_or(EvictError::NoApi { uid: uid.clone() })?;
        // The kubelet's grace: 1 s for hard thresholds
        // (immediateEvictionGracePeriodSeconds), the pod's capped
        // grace for soft ones — never 0 on the API.
        let api_grace = if v.kind == ThresholdKind::Hard {
            MIN_API_GRACE
        } else {
            grace.max(MIN_API_GRACE)
        };
        let pod = format!("{}/{}", v.candidate.namespace, v.candidate.name);
        let refusal = match api.evict(v, api_grace) {
            Ok(()) => {
                api.count(api_path::EVICTED);
                tracing::info!(target: "qosd::eviction", pod = %pod, uid = %uid, grace_s = api_grace.as_secs(), "evicted through the Kubernetes API");
                return Ok(api_outcome(uid));
            }
            Err(r) => r,
        };
        if v.kind == ThresholdKind::Soft {
            return self.soft_api_refusal(api.as_ref(), &pod, uid, refusal);
        }
        // Hard: node-pressure evictions do not wait for PDBs.
        api.count(api_path::FALLBACK_KILL);
        tracing::warn!(target: "qosd::eviction", pod = %pod, uid = %uid, %refusal, "hard eviction not done through the Kubernetes API: killing the pod locally, then leaving the kubelet's eviction record on its status");
        let mut out = self.kill_locally(v, &uid, Duration::ZERO, true)?;
        out.backend = Backend::Api;
        let (api, victim) = (api.clone(), v.clone());
        spawn_cleanup(move || {
            match api.mark_evicted_after_kill(&victim) {
                Ok(()) => {
                    api.count(api_path::FALLBACK_STATUS_SET);
                    tracing::info!(target: "qosd::eviction", uid = %victim.candidate.uid, "pod status set Failed/Evicted through the Kubernetes API after the local kill");
                }
                Err(e) => {
                    api.count(api_path::FALLBACK_STATUS_FAILED);
                    tracing::error!(target: "qosd::eviction", uid = %victim.candidate.uid, error = %e, "cannot set the pod's status Failed/Evicted through the Kubernetes API after the local kill (the kubelet may restart it)");
                }
            }
            Ok(())
        });
        Ok(out)
    }

    /// The kill backend: the pod's processes killed from its cgroup (soft
    /// with a grace: through the runtime), then the runtime cleans up.
    fn kill_locally(
        &self,
        v: &Victim,
        uid: &str,
        grace: Duration,
        kill_now: bool,
    ) -> Result<Outcome, EvictError> {
        let uid = uid.to_string();
        {
            {
                let dir = v
                    .candidate
                    .cgroup_dirs
                    .iter()
                    .find(|d| d.is_dir())
                    .cloned()
                    .ok_or(EvictError::NoCgroup { uid: uid.clone() })?;
                let report = if !kill_now && !grace.is_zero() {
                    if let (Some(stopper), Some(sandbox)) = (&self.stopper, &v.candidate.sandbox_id)
                    {
                        // the runtime does TERM → grace → KILL itself
                        let (s, sb, u) = (stopper.clone(), sandbox.clone(), uid.clone());
                        spawn_cleanup(move || stop_and_remove(s.as_ref(), &u, &sb, grace));
                        return Ok(Outcome {
                            uid,
                            backend: Backend::Kill,
                            kill: None,
                            runtime: RuntimeCleanup::Spawned,
                        });
                    }
                    term_then_kill(&dir, grace, self.kill_timeout)?
                } else {
                    kill_cgroup_tree(&dir, self.kill_timeout)?
                };
                tracing::debug!(
                    target: "qosd::eviction",
                    pod = %uid,
                    method = ?report.method,
                    pids = report.signalled,
                    rounds = report.rounds,
                    "pod processes killed"
                );
                let runtime = match (&self.stopper, &v.candidate.sandbox_id) {
                    (Some(stopper), Some(sandbox)) => {
                        let (s, sb, u) = (stopper.clone(), sandbox.clone(), uid.clone());
                        let retry = self.cleanup_retry;
                        spawn_cleanup(move || {
                            with_retries(retry, &u, || {
                                stop_and_remove(s.as_ref(), &u, &sb, Duration::ZERO)
                            })
                            .map(|_| ())
                        });
                        RuntimeCleanup::Spawned
                    }
                    _ => RuntimeCleanup::NotApplicable,
                };
                Ok(Outcome {
                    uid,
                    backend: Backend::Kill,
                    kill: Some(report),
                    runtime,
                })
            }
        }
    }
}

/// The outcome of an eviction the API server carries out.
fn api_outcome(uid: String) -> Outcome {
    Outcome {
        uid,
        backend: Backend::Api,
        kill: None,
        runtime: RuntimeCleanup::NotApplicable,
    }
}

impl Evictor {
    /// A soft eviction the API did not accept: an error for the engine
    /// (next candidate, or the same pod after Retry-After), or — sent but
    /// unanswered — an eviction in progress.
    fn soft_api_refusal(
        &self,
        api: &dyn ApiEvictor,
        pod: &str,
        uid: String,
        refusal: ApiRefusal,
    ) -> Result<Outcome, EvictError> {
        let path = match &refusal {
            ApiRefusal::Refused(_) => api_path::REFUSED_NEXT,
            ApiRefusal::Gone(_) => api_path::GONE,
            ApiRefusal::Failed(_) => api_path::FAILED_NEXT,
            ApiRefusal::Throttled { .. } => api_path::THROTTLED_RETRY,
            ApiRefusal::Unanswered(_) => api_path::UNANSWERED_WAIT,
        };
        api.count(path);
        match &refusal {
            ApiRefusal::Unanswered(_) => {
                tracing::warn!(target: "qosd::eviction", pod = %pod, uid = %uid, %refusal, "soft eviction sent through the Kubernetes API, no answer in time: waiting for its effect (no other pod is evicted meanwhile)");
                Ok(api_outcome(uid))
            }
            ApiRefusal::Throttled { .. } => {
                tracing::warn!(target: "qosd::eviction", pod = %pod, uid = %uid, %refusal, "soft eviction throttled by the Kubernetes API: asking again for the same pod after Retry-After");
                Err(EvictError::ApiRefused { uid, refusal })
            }
            _ => {
                tracing::warn!(target: "qosd::eviction", pod = %pod, uid = %uid, %refusal, "soft eviction not done through the Kubernetes API: trying the next candidate");
                Err(EvictError::ApiRefused { uid, refusal })
            }
        }
    }
}

fn spawn_cleanup(f: impl FnOnce() -> Result<(), EvictError> + Send + 'static) {
    let r = std::thread::Builder::new()
        .name("qosd-evict-cleanup".into())
        .spawn(move || {
            if let Err(e) = f() {
                tracing::error!(target: "qosd::eviction", error = %e, "runtime cleanup after eviction failed");
            }
        });
    if let Err(e) = r {
        tracing::error!(target: "qosd::eviction", error = %e, "cannot start the runtime cleanup thread");
    }
}

fn stop_and_remove(
    s: &dyn PodStopper,
    uid: &str,
    sandbox: &str,
    grace: Duration,
) -> Result<(), EvictError> {
    s.stop_pod(sandbox, grace)
        .map_err(|e| EvictError::Runtime {
            uid: uid.into(),
            sandbox: sandbox.into(),
            step: "StopPodSandbox",
            message: e.to_string(),
        })?;
    s.remove_pod(sandbox).map_err(|e| EvictError::Runtime {
        uid: uid.into(),
        sandbox: sandbox.into(),
        step: "RemovePodSandbox",
        message: e.to_string(),
    })
}

/// Log one eviction with everything needed to audit it.
pub(crate) fn log_eviction(v: &Victim, backend: Backend) {
    let c = &v.candidate;
    let bytes = v.signal.is_bytes();
    let show = |x: i64| {
        if bytes {
            fmt_bytes(x.into())
        } else {
            x.to_string()
        }
    };
    tracing::warn!(
        target: "qosd::eviction",
        signal = v.metric_label(),
        kind = %v.kind,
        observed = %show(v.observed),
        threshold = %show(v.threshold_value),
        pod = %format!("{}/{}", c.namespace, c.name),
        uid = %c.uid,
        qos = %c.qos,
        priority = c.priority,
        usage = %v.usage.map(|u| show(u as i64)).unwrap_or_else(|| "unknown".into()),
        request = %show(v.request),
        rank = v.rank,
        grace_s = v.grace.as_secs_f64(),
        backend = backend.as_str(),
        reason = %v.reason,
        eviction_message = %v.message.trim_end(),
        "{}evicting pod {}/{}: {}",
        if backend == Backend::DryRun { "dry-run: would be " } else { "" },
        c.namespace,
        c.name,
        match v.cause {
            qosd_model::policy::evict::manager::Cause::Threshold if v.signal.is_pressure() => {
                format!(
                    "{} {} stalled {:.1}% of its window, at or above {}",
                    v.kind,
                    v.signal,
                    v.observed as f64 * 100.0 / v.capacity.max(1) as f64,
                    v.threshold.value
                )
            }
            qosd_model::policy::evict::manager::Cause::Threshold => format!(
                "{} {} observed {} < {}",
                v.kind,
                v.signal,
                show(v.observed),
                show(v.threshold_value)
            ),
            qosd_model::policy::evict::manager::Cause::LocalStorage(_) => format!(
                "{} {} over its limit {}",
                v.metric_label(),
                show(v.observed),
                show(v.threshold_value)
            ),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use qosd_model::core::model::QosClass;
    use qosd_model::policy::evict::rank::{Candidate, PodStats};
    use qosd_model::policy::evict::threshold::{Signal, Threshold, ThresholdValue};
    use std::path::PathBuf;
    use std::sync::Mutex;
    use std::time::Instant;

    #[derive(Default)]
    struct FakeStopper {
        calls: Mutex<Vec<String>>,
        fail_stop: bool,
        /// Fail this many StopPodSandbox calls first.
        stop_failures: Mutex<u32>,
    }

    impl PodStopper for FakeStopper {
        fn stop_pod(&self, sandbox_id: &str, grace: Duration) -> Result<(), RuntimeCallError> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("stop {sandbox_id} {}s", grace.as_secs()));
            if self.fail_stop {
                return Err(RuntimeCallError::Other("deadline exceeded".into()));
            }
            let mut left = self.stop_failures.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                return Err(RuntimeCallError::Other("runtime not reachable".into()));
            }
            Ok(())
        }
        fn remove_pod(&self, sandbox_id: &str) -> Result<(), RuntimeCallError> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("remove {sandbox_id}"));
            Ok(())
        }
    }

    fn victim(
        kind: ThresholdKind,
        grace_s: u64,
        sandbox: Option<&str>,
        dirs: Vec<PathBuf>,
    ) -> Victim {
        Victim {
            candidate: Candidate {
                uid: "u1".into(),
                namespace: "ns".into(),
                name: "p".into(),
                qos: QosClass::BestEffort,
                priority: 0,
                static_or_mirror: false,
                memory_request_bytes: 0,
                ephemeral_storage_request_bytes: 0,
                termination_grace_period_seconds: Some(60),
                sandbox_id: sandbox.map(String::from),
                cgroup_dirs: dirs,
                storage_limits: Default::default(),
                storage_detail: None,
                stats: Some(PodStats::default()),
            },
            signal: Signal::MemoryAvailable,
            threshold: Threshold {
                signal: Signal::MemoryAvailable,
                kind,
                value: ThresholdValue::Quantity(100),
                grace_period: Duration::ZERO,
                min_reclaim: None,
            },
            kind,
            observed: 50,
            capacity: 1000,
            threshold_value: 100,
            grace: Duration::from_secs(grace_s),
            rank: 1,
            usage: Some(10),
            request: 0,
            reason: "test".into(),
            cause: qosd_model::policy::evict::manager::Cause::Threshold,
            message: String::new(),
        }
    }

    #[test]
    fn backend_parse() {
        for (s, b) in [
            ("kill", Backend::Kill),
            ("cri", Backend::Cri),
            ("dry-run", Backend::DryRun),
        ] {
            assert_eq!(s.parse::<Backend>().unwrap(), b);
            assert_eq!(b.as_str(), s);
        }
        assert!("nuke".parse::<Backend>().is_err());
    }

    #[test]
    fn dry_run_touches_nothing() {
        let st = Arc::new(FakeStopper::default());
        let e = Evictor::new(Backend::DryRun, Some(st.clone()), Duration::from_secs(30));
        let o = e
            .evict(&victim(ThresholdKind::Hard, 0, Some("sb"), vec![]))
            .unwrap();
        assert_eq!(o.runtime, RuntimeCleanup::NotApplicable);
        assert!(o.kill.is_none());
        assert!(st.calls.lock().unwrap().is_empty());
    }

    #[test]
    fn cri_grace_table() {
        // (kind, victim grace, max grace, expected grace given to StopPodSandbox):
        // the manager computed the grace (hard 1 s; soft already capped).
        let table = [
            (ThresholdKind::Hard, 1, 60, 1),
            (ThresholdKind::Soft, 30, 60, 30),
            (ThresholdKind::Soft, 0, 0, 0),
        ];
        for (kind, g, max, want) in table {
            let st = Arc::new(FakeStopper::default());
            let e = Evictor::new(Backend::Cri, Some(st.clone()), Duration::from_secs(max));
            let o = e.evict(&victim(kind, g, Some("sb1"), vec![])).unwrap();
            assert_eq!(o.runtime, RuntimeCleanup::Done);
            assert_eq!(
                *st.calls.lock().unwrap(),
                vec![format!("stop sb1 {want}s"), "remove sb1".to_string()],
                "{kind:?} {g} {max}"
            );
        }
    }

    #[test]
    fn cri_errors() {
        let st = Arc::new(FakeStopper {
            fail_stop: true,
            ..Default::default()
        });
        let e = Evictor::new(Backend::Cri, Some(st.clone()), Duration::from_secs(30));
        let err = e
            .evict(&victim(ThresholdKind::Hard, 0, Some("sb1"), vec![]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("StopPodSandbox sandbox sb1: deadline exceeded"),
            "{err}"
        );
        assert_eq!(
            st.calls.lock().unwrap().len(),
            1,
            "no remove after a failed stop"
        );
        let err = e
            .evict(&victim(ThresholdKind::Hard, 0, None, vec![]))
            .unwrap_err();
        assert!(matches!(err, EvictError::NoSandbox { .. }));
        let e = Evictor::new(Backend::Cri, None, Duration::from_secs(30));
        assert!(matches!(
            e.evict(&victim(ThresholdKind::Hard, 0, Some("x"), vec![]))
                .unwrap_err(),
            EvictError::NoStopper { .. }
        ));
        let e = Evictor::new(Backend::Kill, None, Duration::from_secs(30));
        assert!(matches!(
            e.evict(&victim(
                ThresholdKind::Hard,
                0,
                None,
                vec!["/nonexistent/qosd".into()]
            ))
            .unwrap_err(),
            EvictError::NoCgroup { .. }
        ));
    }

    #[test]
    fn kill_backend_spawns_runtime_cleanup() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.procs"), "").unwrap();
        let st = Arc::new(FakeStopper::default());
        let e = Evictor::new(Backend::Kill, Some(st.clone()), Duration::from_secs(30));
        let o = e
            .evict(&victim(
                ThresholdKind::Hard,
                0,
                Some("sb9"),
                vec![d.path().to_path_buf()],
            ))
            .unwrap();
        assert_eq!(o.runtime, RuntimeCleanup::Spawned);
        assert_eq!(
            o.kill.unwrap().method,
            crate::sys::kill::KillMethod::Sigkill
        );
        let t = Instant::now();
        while st.calls.lock().unwrap().len() < 2 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(*st.calls.lock().unwrap(), vec!["stop sb9 0s", "remove sb9"]);
        // soft with grace goes through the runtime with the grace
        let st = Arc::new(FakeStopper::default());
        let e = Evictor::new(Backend::Kill, Some(st.clone()), Duration::from_secs(30));
        let o = e
            .evict(&victim(
                ThresholdKind::Soft,
                20,
                Some("sb8"),
                vec![d.path().to_path_buf()],
            ))
            .unwrap();
        assert!(o.kill.is_none());
        let t = Instant::now();
        while st.calls.lock().unwrap().len() < 2 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            *st.calls.lock().unwrap(),
            vec!["stop sb8 20s", "remove sb8"]
        );
    }

    #[test]
    fn cleanup_after_a_kill_is_retried_until_the_runtime_answers() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.procs"), "").unwrap();
        let wait = |st: &FakeStopper, n: usize| {
            let t = Instant::now();
            while st.calls.lock().unwrap().len() < n && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let fast = CleanupRetry {
            first: Duration::from_millis(1),
            max: Duration::from_millis(4),
            give_up_after: Duration::from_secs(5),
        };
        // Down for three attempts, then back: stop retried, remove once.
        let st = Arc::new(FakeStopper {
            stop_failures: Mutex::new(3),
            ..Default::default()
        });
        let mut e = Evictor::new(Backend::Kill, Some(st.clone()), Duration::from_secs(30));
        e.cleanup_retry = fast;
        let v = victim(ThresholdKind::Hard, 0, Some("sb7"), vec![d.path().into()]);
        assert_eq!(e.evict(&v).unwrap().runtime, RuntimeCleanup::Spawned);
        wait(&st, 5);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            *st.calls.lock().unwrap(),
            vec![
                "stop sb7 0s",
                "stop sb7 0s",
                "stop sb7 0s",
                "stop sb7 0s",
                "remove sb7"
            ]
        );
        // Never back: bounded, then given up.
        let st = Arc::new(FakeStopper {
            fail_stop: true,
            ..Default::default()
        });
        let r = with_retries(
            CleanupRetry {
                give_up_after: Duration::from_millis(30),
                ..fast
            },
            "u1",
            || stop_and_remove(st.as_ref(), "u1", "sb6", Duration::ZERO),
        );
        assert!(r.unwrap_err().to_string().contains("deadline exceeded"));
        let n = st.calls.lock().unwrap().len();
        assert!((2..=40).contains(&n), "{n} attempts");
        assert!(!st
            .calls
            .lock()
            .unwrap()
            .iter()
            .any(|c| c.starts_with("remove")));
    }

    /// A scripted API side: records the grace of each call and what was
    /// counted; answers from the script.
    #[derive(Default)]
    struct FakeApi {
        answers: Mutex<Vec<Result<(), ApiRefusal>>>,
        graces: Mutex<Vec<Duration>>,
        marked: Mutex<Vec<String>>,
        counted: Mutex<Vec<String>>,
    }

    impl ApiEvictor for FakeApi {
        fn evict(&self, _v: &Victim, grace: Duration) -> Result<(), ApiRefusal> {
            self.graces.lock().unwrap().push(grace);
            self.answers.lock().unwrap().remove(0)
        }
        fn mark_evicted_after_kill(
            &self,
            v: &Victim,
        ) -> Result<(), crate::kube::client::KubeError> {
            self.marked.lock().unwrap().push(v.candidate.uid.clone());
            Ok(())
        }
        fn count(&self, path: &str) {
            self.counted.lock().unwrap().push(path.to_string());
        }
    }

    fn api_evictor(answers: Vec<Result<(), ApiRefusal>>) -> (Evictor, Arc<FakeApi>) {
        let api = Arc::new(FakeApi {
            answers: Mutex::new(answers),
            ..Default::default()
        });
        let mut e = Evictor::new(Backend::Api, None, Duration::ZERO);
        e.api = Some(api.clone());
        (e, api)
    }

    /// Never a grace of 0 on the API: hard 1 s; soft the pod's capped
    /// grace, at least 1 s (0 would remove the object before the
    /// containers stop).
    #[test]
    fn api_grace_is_never_zero() {
        for (kind, g, want) in [
            (ThresholdKind::Hard, 1, 1),
            (ThresholdKind::Soft, 0, 1),
            (ThresholdKind::Soft, 20, 20),
        ] {
            let (e, api) = api_evictor(vec![Ok(())]);
            let o = e.evict(&victim(kind, g, None, vec![])).unwrap();
            assert_eq!(o.backend, Backend::Api);
            assert_eq!(*api.graces.lock().unwrap(), [Duration::from_secs(want)]);
            assert_eq!(*api.counted.lock().unwrap(), [api_path::EVICTED]);
        }
    }

    /// Soft: a refusal moves on; throttling asks for the same pod again;
    /// an unanswered request is an eviction in progress (no second pod).
    #[test]
    fn soft_api_answers() {
        let throttled = ApiRefusal::Throttled {
            retry_after: Duration::from_secs(3),
            message: "429".into(),
        };
        let table = [
            (
                ApiRefusal::Refused("pdb".into()),
                Some((true, false)),
                api_path::REFUSED_NEXT,
            ),
            (
                ApiRefusal::Failed("500".into()),
                Some((true, false)),
                api_path::FAILED_NEXT,
            ),
            (throttled, Some((false, true)), api_path::THROTTLED_RETRY),
            (
                ApiRefusal::Unanswered("late".into()),
                None,
                api_path::UNANSWERED_WAIT,
            ),
        ];
        for (refusal, want, path) in table {
            let (e, api) = api_evictor(vec![Err(refusal.clone())]);
            let r = e.evict(&victim(ThresholdKind::Soft, 5, None, vec![]));
            match (r, want) {
                (Ok(o), None) => assert_eq!(o.backend, Backend::Api, "{refusal:?}"),
                (Err(EvictError::ApiRefused { refusal: got, .. }), Some((moves, same))) => {
                    assert_eq!((got.moves_on(), got.retries_same_pod()), (moves, same));
                }
                (r, _) => panic!("{refusal:?}: {r:?}"),
            }
            assert_eq!(*api.counted.lock().unwrap(), [path]);
            assert!(api.marked.lock().unwrap().is_empty());
        }
    }

    /// Hard: not done through the API → local kill, then the kubelet's
    /// eviction record on the pod's status (no delete).
    #[test]
    fn hard_api_fallback_kills_and_marks_the_status() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.procs"), "").unwrap();
        let (e, api) = api_evictor(vec![Err(ApiRefusal::Unanswered("late".into()))]);
        let o = e
            .evict(&victim(ThresholdKind::Hard, 1, None, vec![d.path().into()]))
            .unwrap();
        assert_eq!(o.backend, Backend::Api);
        assert!(o.kill.is_some(), "killed locally");
        let t = Instant::now();
        while api.counted.lock().unwrap().len() < 2 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(*api.marked.lock().unwrap(), ["u1"]);
        assert_eq!(
            *api.counted.lock().unwrap(),
            [api_path::FALLBACK_KILL, api_path::FALLBACK_STATUS_SET]
        );
    }
}
