//! The API calls of an eviction, with the answers told apart the way a
//! real API server gives them:
//!
//! * [`post_eviction`]: the `pods/eviction` subresource (policy/v1) with a
//!   grace period and a uid precondition, on its own thread (driving the
//!   eviction side's shared [`EvictRuntime`]) so that an
//!   answer arriving after the caller's deadline is still learnt (and
//!   handed to a callback) instead of being lost. Connecting is bounded on
//!   its own: the answer deadline starts once the request is on its way,
//!   and a request that never left is said so ([`EvictAnswer::Failed`]),
//!   distinct from one sent but not answered in time
//!   ([`EvictAnswer::Unanswered`], whose effect is unknown).
//! * `classify`: 429 from a PodDisruptionBudget (a `Status` whose cause
//!   is `DisruptionBudget`) is a refusal; any other 429 — API Priority and
//!   Fairness or the max-in-flight filter, which answer in plain text with
//!   `Retry-After`, at most [`MAX_RETRY_AFTER`] honoured — is throttling;
//!   404, and 409 from the uid precondition
//!   (a newer pod has the name), say the victim is gone.
//! * [`mark_evicted`]: the record the kubelet leaves on a pod it evicted
//!   itself: status phase `Failed`, reason `Evicted`, the message, and the
//!   `DisruptionTarget` condition with reason `TerminationByKubelet` — a
//!   strategic-merge patch of `pods/status` carrying the uid, never a
//!   delete.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::Method;
use serde::Serialize;

use super::client::{api_error, KubeClient, KubeError};
use super::types::{DeleteOptions, Eviction, RefMeta};
use crate::evict::runtime::EvictRuntime;

/// The kubelet's reason for pods it evicts (pkg/kubelet/eviction).
pub const REASON_EVICTED: &str = "Evicted";
/// The condition type the kubelet sets on node-pressure evictions.
pub(crate) const CONDITION_DISRUPTION_TARGET: &str = "DisruptionTarget";
/// The reason of that condition.
pub(crate) const REASON_TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";
/// The cause reason of a PodDisruptionBudget refusal.
const CAUSE_DISRUPTION_BUDGET: &str = "DisruptionBudget";
/// The message of a PodDisruptionBudget refusal.
const PDB_MESSAGE: &str = "Cannot evict pod as it would violate the pod's disruption budget.";
/// `Retry-After` assumed for a throttling 429 without one (the
/// max-in-flight filter's value).
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Longest `Retry-After` honoured: API Priority and Fairness never asks
/// for more (its dropped-requests tracker caps the value at 32 s).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(32);

/// What became of one eviction request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictAnswer {
    /// 201: the API server evicts the pod (graceful deletion).
    Evicted,
    /// 429 from a PodDisruptionBudget.
    Refused(String),
    /// 429 from API Priority and Fairness or max-in-flight: ask again after
    /// `retry_after`.
    Throttled {
        /// The answer's `Retry-After` (1 s when it has none), at most
        /// [`MAX_RETRY_AFTER`].
        retry_after: Duration,
        /// The error answer, described.
        message: String,
    },
    /// 404, or 409 on the uid precondition: this pod is not in the API.
    Gone(String),
    /// Another error answer, or nothing was sent (no connection).
    Failed(String),
    /// Sent, not answered within the deadline: the effect is unknown.
    Unanswered(String),
}

/// Tell an error answer apart (see the module docs).
pub(crate) fn classify(e: &KubeError) -> EvictAnswer {
    match e {
        KubeError::Api {
            code: 429,
            message,
            details,
            ..
        } => {
            let pdb = details.causes.iter().any(|c| c == CAUSE_DISRUPTION_BUDGET)
                || (details.status_body && message == PDB_MESSAGE);
            if pdb {
                EvictAnswer::Refused(e.to_string())
            } else {
                EvictAnswer::Throttled {
                    retry_after: details
                        .retry_after
                        .unwrap_or(DEFAULT_RETRY_AFTER)
                        .min(MAX_RETRY_AFTER),
                    message: e.to_string(),
                }
            }
        }
        KubeError::Api { code: 404, .. } | KubeError::Api { code: 409, .. } => {
            EvictAnswer::Gone(e.to_string())
        }
        _ => EvictAnswer::Failed(e.to_string()),
    }
}

/// How long an eviction may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// TCP, TLS and HTTP handshake; nothing is sent after it passed.
    pub connect: Duration,
    /// From the request's sending to its answer.
    pub answer: Duration,
    /// `answer` counts from the start, connecting included (hard
    /// thresholds: the local fallback must not wait longer).
    pub total: bool,
}

/// Where the request stands, shared by the caller and the request's thread.
#[derive(Default)]
struct Slot {
    /// The thread has connected and will send (the caller can no longer
    /// call it off).
    sending: bool,
    /// The caller gave up waiting before the connection: do not send.
    abandoned: bool,
    /// The caller stopped waiting for the answer: hand it to `late`.
    gone: bool,
    answer: Option<EvictAnswer>,
}

type Shared = Arc<(Mutex<Slot>, Condvar)>;

/// POST an Eviction for `namespace/name` (uid precondition, grace in
/// seconds) within `deadlines`, on a thread of its own driving `rt`. An
/// answer that comes after the caller stopped waiting goes to `late` (on
/// the request's thread).
#[allow(clippy::too_many_arguments)]
pub fn post_eviction(
    rt: &EvictRuntime,
    client: &KubeClient,
    namespace: &str,
    name: &str,
    uid: &str,
    grace_seconds: i64,
    deadlines: Deadlines,
    late: impl FnOnce(EvictAnswer) + Send + 'static,
) -> EvictAnswer {
    let body = Eviction {
        api_version: "policy/v1",
        kind: "Eviction",
        metadata: RefMeta {
            name: name.to_string(),
            namespace: namespace.to_string(),
        },
        delete_options: DeleteOptions::new(grace_seconds, uid),
    };
    let path = format!("/api/v1/namespaces/{namespace}/pods/{name}/eviction");
    let body = match serde_json::to_vec(&body) {
        Ok(b) => b,
        Err(e) => return EvictAnswer::Failed(format!("POST {path}: body: {e}")),
    };
    let shared: Shared = Arc::default();
    let start = Instant::now();
    let spawned = {
        let (rt, client, shared, path) = (rt.clone(), client.clone(), shared.clone(), path.clone());
        std::thread::Builder::new()
            .name("qosd-api-evict".into())
            .spawn(move || run_request(&rt, client, path, body, deadlines, shared, late))
    };
    if let Err(e) = spawned {
        return EvictAnswer::Failed(format!("POST {path}: cannot start its thread: {e}"));
    }
    let (lock, cv) = &*shared;
    let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
    // Until connected: the connect deadline (a little slack for the thread).
    let connect_by = start + deadlines.connect + Duration::from_millis(50);
    while !g.sending && g.answer.is_none() {
        let now = Instant::now();
        if now >= connect_by {
            g.abandoned = true;
            return EvictAnswer::Failed(format!(
                "POST {path}: no connection within {:?}: nothing sent",
                deadlines.connect
            ));
        }
        g = cv
            .wait_timeout(g, connect_by - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    let answer_by = if deadlines.total {
        start + deadlines.answer
    } else {
        Instant::now() + deadlines.answer
    };
    loop {
        if let Some(a) = g.answer.take() {
            return a;
        }
        let now = Instant::now();
        if now >= answer_by {
            g.gone = true;
            return EvictAnswer::Unanswered(format!(
                "POST {path}: no answer within {:?} (sent; the outcome is not known yet)",
                deadlines.answer
            ));
        }
        g = cv
            .wait_timeout(g, answer_by - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// The request's thread: connect, send unless called off, hand over the
/// answer (or to `late`).
fn run_request(
    rt: &EvictRuntime,
    client: KubeClient,
    path: String,
    body: Vec<u8>,
    deadlines: Deadlines,
    shared: Shared,
    late: impl FnOnce(EvictAnswer),
) {
    let deliver = |a: EvictAnswer| {
        let (lock, cv) = &*shared;
        let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
        if g.abandoned {
            // Nothing was sent, as the caller was told: nothing to learn.
            return None;
        }
        if g.gone {
            return Some(a);
        }
        g.answer = Some(a);
        cv.notify_all();
        None
    };
    let answer = rt.block_on(async {
        let mut send = match client.connect_within(deadlines.connect).await {
            Ok(s) => s,
            Err(e) => return Some(EvictAnswer::Failed(format!("{e}: nothing sent"))),
        };
        {
            let (lock, cv) = &*shared;
            let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
            if g.abandoned {
                return None;
            }
            g.sending = true;
            cv.notify_all();
        }
        let req = match client.request(Method::POST, &path, None, Some(body)) {
            Ok(r) => r,
            Err(e) => return Some(EvictAnswer::Failed(e.to_string())),
        };
        // Bounded even for a caller that no longer waits.
        let exchange = async {
            let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((status, headers, bytes))
        };
        Some(match tokio::time::timeout(LATE_LIMIT, exchange).await {
            Err(_) => {
                EvictAnswer::Unanswered(format!("POST {path}: no answer within {LATE_LIMIT:?}"))
            }
            Ok(Err(e)) => EvictAnswer::Failed(format!("POST {path}: {e}")),
            Ok(Ok((status, _, _))) if status.is_success() => EvictAnswer::Evicted,
            Ok(Ok((status, headers, bytes))) => {
                classify(&api_error("POST", &path, status, Some(&headers), &bytes))
            }
        })
    });
    if let Some(a) = answer.and_then(deliver) {
        late(a);
    }
}

/// How long a request's thread waits for a late answer.
const LATE_LIMIT: Duration = Duration::from_secs(60);

/// The strategic-merge patch of `pods/status` the kubelet's status manager
/// sends for a pod it evicted (the uid makes it fail on a newer pod).
#[derive(Debug, Serialize)]
struct StatusPatch<'a> {
    metadata: UidOnly<'a>,
    status: EvictedStatus<'a>,
}

#[derive(Debug, Serialize)]
struct UidOnly<'a> {
    uid: &'a str,
}

#[derive(Debug, Serialize)]
struct EvictedStatus<'a> {
    phase: &'static str,
    reason: &'static str,
    message: &'a str,
    conditions: [Condition<'a>; 1],
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Condition<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    status: &'static str,
    reason: &'static str,
    message: &'a str,
    last_transition_time: &'a str,
}

/// The content type of a strategic-merge patch.
pub(crate) const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";

/// Leave the kubelet's eviction record on `namespace/name` (uid `uid`):
/// phase `Failed`, reason `Evicted`, `message`, condition
/// `DisruptionTarget`/`TerminationByKubelet` at `now` (RFC 3339).
pub async fn mark_evicted(
    client: &KubeClient,
    namespace: &str,
    name: &str,
    uid: &str,
    message: &str,
    now: &str,
    timeout: Duration,
) -> Result<(), KubeError> {
    let patch = StatusPatch {
        metadata: UidOnly { uid },
        status: EvictedStatus {
            phase: "Failed",
            reason: REASON_EVICTED,
            message,
            conditions: [Condition {
                kind: CONDITION_DISRUPTION_TARGET,
                status: "True",
                reason: REASON_TERMINATION_BY_KUBELET,
                message,
                last_transition_time: now,
            }],
        },
    };
    let path = format!("/api/v1/namespaces/{namespace}/pods/{name}/status");
    let body = serde_json::to_vec(&patch).map_err(|e| KubeError::Decode {
        what: format!("PATCH {path} body"),
        message: e.to_string(),
    })?;
    client
        .call_with(
            Method::PATCH,
            &path,
            Some(STRATEGIC_MERGE_PATCH),
            Some(body),
            timeout,
        )
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, body: &str, retry_after: Option<u64>) -> KubeError {
        let mut h = hyper::HeaderMap::new();
        if let Some(s) = retry_after {
            h.insert(hyper::header::RETRY_AFTER, s.to_string().parse().unwrap());
        }
        api_error(
            "POST",
            "/p",
            hyper::StatusCode::from_u16(code).unwrap(),
            Some(&h),
            body.as_bytes(),
        )
    }

    #[test]
    fn answers_told_apart() {
        let pdb = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Cannot evict pod as it would violate the pod's disruption budget.","reason":"TooManyRequests","details":{"causes":[{"reason":"DisruptionBudget","message":"The disruption budget web needs 2 healthy pods and has 2 currently"}]},"code":429}"#;
        assert!(matches!(
            classify(&api(429, pdb, None)),
            EvictAnswer::Refused(_)
        ));
        // A PDB still being processed: Retry-After 10, still a refusal.
        assert!(matches!(
            classify(&api(429, pdb, Some(10))),
            EvictAnswer::Refused(_)
        ));
        // API Priority and Fairness: plain text and Retry-After.
        let apf = "Too many requests, please try again later.\n";
        assert_eq!(
            classify(&api(429, apf, Some(7))),
            EvictAnswer::Throttled {
                retry_after: Duration::from_secs(7),
                message: "POST /p: HTTP 429: Too many requests, please try again later.".into()
            }
        );
        assert!(matches!(
            classify(&api(429, apf, None)),
            EvictAnswer::Throttled { retry_after, .. } if retry_after == DEFAULT_RETRY_AFTER
        ));
        // Never longer than API Priority and Fairness' own cap.
        assert!(matches!(
            classify(&api(429, apf, Some(600))),
            EvictAnswer::Throttled { retry_after, .. } if retry_after == MAX_RETRY_AFTER
        ));
        let conflict = r#"{"kind":"Status","status":"Failure","message":"Operation cannot be fulfilled on Pod \"p\": the UID in the precondition (a) does not match the UID in record (b). The object might have been deleted and then recreated","reason":"Conflict","code":409}"#;
        assert!(matches!(
            classify(&api(409, conflict, None)),
            EvictAnswer::Gone(_)
        ));
        assert!(matches!(
            classify(&api(404, "{}", None)),
            EvictAnswer::Gone(_)
        ));
        assert!(matches!(
            classify(&api(500, "{}", None)),
            EvictAnswer::Failed(_)
        ));
    }

    #[test]
    fn status_patch_shape() {
        let patch = StatusPatch {
            metadata: UidOnly { uid: "u-1" },
            status: EvictedStatus {
                phase: "Failed",
                reason: REASON_EVICTED,
                message: "m",
                conditions: [Condition {
                    kind: CONDITION_DISRUPTION_TARGET,
                    status: "True",
                    reason: REASON_TERMINATION_BY_KUBELET,
                    message: "m",
                    last_transition_time: "2030-01-01T00:00:00Z",
                }],
            },
        };
        let v = serde_json::to_value(&patch).unwrap();
        assert_eq!(v["metadata"]["uid"], "u-1");
        assert_eq!(v["status"]["phase"], "Failed");
        assert_eq!(v["status"]["reason"], "Evicted");
        assert_eq!(v["status"]["conditions"][0]["type"], "DisruptionTarget");
        assert_eq!(
            v["status"]["conditions"][0]["reason"],
            "TerminationByKubelet"
        );
        assert_eq!(
            v["status"]["conditions"][0]["lastTransitionTime"],
            "2030-01-01T00:00:00Z"
        );
    }
}
