//! The Kubernetes side of `qosd run`: the pod watcher feeding the merge,
//! and the `api` evictor — an Eviction (policy/v1) with the kubelet's grace
//! periods, an `Evicted` Event in the kubelet's wording, throttling
//! (`Retry-After`) honoured, and after a local kill the kubelet's eviction
//! record on the pod's status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::telemetry::kube_metrics::KubeMetrics;
use qosd_model::core::model::CgroupVersion;
use qosd_model::policy::evict::manager::Victim;
use qosd_model::policy::evict::message::{
    amount_text, low_on_resource_message, resource_name, threshold_text, OverRequest,
};
use qosd_node::cri::LivePod;
use qosd_node::evict::{ApiEvictor, ApiRefusal};
use qosd_node::kube::client::{KubeClient, KubeError};
use qosd_node::kube::evict::{
    mark_evicted, post_eviction, Deadlines, EvictAnswer, MAX_RETRY_AFTER,
};
use qosd_node::kube::merge::{merge, MergeSummary};
use qosd_node::kube::source::{run_watcher, PodCache, WatchOptions};
use qosd_node::kube::types::{Event, EventSource, ObjectReference, RefMeta};

/// The kubelet's eviction reason (pkg/kubelet/eviction/helpers.go).
pub(crate) const REASON_EVICTED: &str = qosd_node::kube::evict::REASON_EVICTED;

/// One container's usage against its request, for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerUsage {
    pub(crate) name: String,
    pub(crate) usage: i64,
    /// The request as the spec writes it (`"0"` without one).
    pub(crate) request: String,
    pub(crate) request_value: i64,
}

/// The kubelet's eviction message: "The node was low on resource: R.
/// Threshold quantity: Q, available: A. Container C was using U, request
/// is Q, has larger consumption of R. " (containers over their request);
/// for a local-storage limit, the limit's own message.
pub(crate) fn eviction_message(v: &Victim, containers: &[ContainerUsage]) -> String {
    if matches!(
        v.cause,
        qosd_model::policy::evict::manager::Cause::LocalStorage(_)
    ) {
        return v.message.clone();
    }
    let over: Vec<OverRequest<'_>> = containers
        .iter()
        .filter(|c| c.usage > c.request_value)
        .map(|c| OverRequest {
            kind: "Container",
            name: &c.name,
            usage: amount_text(v.signal, c.usage),
            request: c.request.clone(),
        })
        .collect();
    low_on_resource_message(
        v.signal,
        &threshold_text(v.signal, &v.threshold.value, v.threshold_value),
        &amount_text(v.signal, v.observed),
        &over,
    )
}

/// RFC 3339 UTC, seconds (the Event timestamps' format).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // civil-from-days (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Settings of the Kubernetes side.
#[derive(Debug, Clone)]
pub(crate) struct KubeSettings {
    pub(crate) node_name: String,
    /// A disconnected view stays usable this long.
    pub(crate) max_stale: Duration,
    pub(crate) eviction_timeout: Duration,
    pub(crate) cgroup_version: CgroupVersion,
    /// The eviction side's runtime the API calls of an eviction run on.
    pub(crate) evict_rt: qosd_node::evict::runtime::EvictRuntime,
    /// Whose rules decide what the kubelet admitted (in-place resize).
    pub(crate) kubelet_version: qosd_model::policy::enforce::versions::KubeletVersion,
}

/// The API client, the pod cache and its watcher, and the `api` evictor.
pub(crate) struct KubeSide {
    pub(crate) client: KubeClient,
    pub(crate) cache: Arc<PodCache>,
    pub(crate) settings: KubeSettings,
    pub(crate) metrics: KubeMetrics,
    /// uid → (container name, container id) of the live pods.
    containers: Mutex<HashMap<String, Vec<(String, String)>>>,
    last: Mutex<(MergeSummary, Option<String>)>,
    /// uid → the eviction message, composed before anything is killed
    /// (the containers' usage is gone afterwards).
    messages: Mutex<HashMap<String, String>>,
    /// No eviction is asked before this (the server's `Retry-After`).
    throttled_until: Mutex<Option<std::time::Instant>>,
}

impl std::fmt::Debug for KubeSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSide")
            .field("server", &self.client.server())
            .field("node", &self.settings.node_name)
            .finish()
    }
}

impl KubeSide {
    /// The API side and the watch of this node's pods that feeds it: a
    /// future that runs for as long as qosd does, for the caller to spawn
    /// (under supervision).
    pub(crate) fn new(
        client: KubeClient,
        settings: KubeSettings,
        metrics: KubeMetrics,
    ) -> (
        Arc<KubeSide>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let cache = Arc::new(PodCache::default());
        let watcher = run_watcher(
            client.clone(),
            WatchOptions::new(settings.node_name.clone()),
            cache.clone(),
        );
        metrics.set_api_up(false);
        let side = Arc::new(KubeSide {
            client,
            cache,
            settings,
            metrics,
            containers: Mutex::new(HashMap::new()),
            last: Mutex::new((MergeSummary::default(), None)),
            messages: Mutex::new(HashMap::new()),
            throttled_until: Mutex::new(None),
        });
        (side, watcher)
    }

    /// Merge the runtime's pods with the current view; returns the summary
    /// and, when the view is unusable, why (runtime data alone then).
    pub(crate) fn merge_view(&self, live: &mut [LivePod]) -> (MergeSummary, Option<String>) {
        let view = self.cache.view(self.settings.max_stale);
        let summary = merge(live, &view, self.settings.kubelet_version);
        self.metrics.set_api_up(view.fresh());
        self.metrics.set_pods(summary.exact, summary.inferred);
        *self.containers.lock().unwrap_or_else(|e| e.into_inner()) = live
            .iter()
            .map(|p| {
                (
                    p.pod.uid.clone(),
                    p.containers
                        .iter()
                        .filter(|c| c.counted)
                        .map(|c| (c.name.clone(), c.id.clone()))
                        .collect(),
                )
            })
            .collect();
        let out = (summary, view.unavailable.clone());
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = out.clone();
        out
    }

    /// Changes whenever the API view does (see [`PodCache::change_key`]).
    pub(crate) fn change_key(&self) -> String {
        self.cache.change_key(self.settings.max_stale)
    }

    /// The last merge (for status).
    pub(crate) fn last_merge(&self) -> (MergeSummary, Option<String>) {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Per-container usage against the spec's requests, for the message
    /// (memory: each container cgroup's working set).
    fn container_usage(&self, v: &Victim) -> Vec<ContainerUsage> {
        if resource_name(v.signal) != "memory" {
            return Vec::new();
        }
        let Some(pod_dir) = v.candidate.cgroup_dirs.first() else {
            return Vec::new();
        };
        let view = self.cache.view(Duration::MAX);
        // The requests the kubelet admitted (a resize may be pending).
        let spec = view.pods.get(&v.candidate.uid).and_then(|p| {
            qosd_node::kube::merge::admitted_model(p, self.settings.kubelet_version).ok()
        });
        let ids = self
            .containers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&v.candidate.uid)
            .cloned()
            .unwrap_or_default();
        let mut out = Vec::new();
        for (name, id) in ids {
            let dir = [
                id.clone(),
                format!("cri-containerd-{id}.scope"),
                format!("crio-{id}.scope"),
            ]
            .iter()
            .map(|d| pod_dir.join(d))
            .find(|d| d.is_dir());
            let Some(dir) = dir else { continue };
            let Some(usage) =
                qosd_node::sys::signals::pod_stats(self.settings.cgroup_version, &dir)
                    .memory_working_set_bytes
            else {
                continue;
            };
            let request = spec
                .as_ref()
                .and_then(|p| p.containers.iter().find(|c| c.name == name))
                .and_then(|c| c.resources.requests.get("memory"));
            let request_value = request.map_or(0, |q| q.value_ceil());
            let request = request.map_or_else(|| "0".into(), |q| q.to_string());
            out.push(ContainerUsage {
                name,
                usage: usage as i64,
                request,
                request_value,
            });
        }
        out
    }

    /// The `Evicted` Event for the victim: where to post it and the body
    /// (the message composed before the kill, if any).
    fn event_body(&self, v: &Victim) -> (String, Event) {
        let message = self
            .messages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&v.candidate.uid)
            .unwrap_or_else(|| eviction_message(v, &self.container_usage(v)));
        self.event_with(v, message)
    }

    fn event_with(&self, v: &Victim, message: String) -> (String, Event) {
        let c = &v.candidate;
        let now = SystemTime::now();
        let nanos = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let ev = Event {
            api_version: "v1",
            kind: "Event",
            metadata: RefMeta {
                name: format!("{}.{:x}", c.name, nanos),
                namespace: c.namespace.clone(),
            },
            involved_object: ObjectReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: c.name.clone(),
                namespace: c.namespace.clone(),
                uid: self.api_uid(&c.uid),
            },
            reason: REASON_EVICTED.into(),
            message,
            event_type: "Warning".into(),
            source: EventSource {
                component: "qosd".into(),
                host: self.settings.node_name.clone(),
            },
            first_timestamp: rfc3339(now),
            last_timestamp: rfc3339(now),
            count: 1,
            reporting_component: "qosd".into(),
            reporting_instance: self.settings.node_name.clone(),
        };
        (format!("/api/v1/namespaces/{}/events", c.namespace), ev)
    }

    fn post(&self, path: &str, ev: &Event) {
        let timeout = self.settings.eviction_timeout.max(Duration::from_secs(2));
        let r = self
            .settings
            .evict_rt
            .block_on(post_event(&self.client, path, ev, timeout));
        event_written(&self.metrics, ev, r);
    }

    /// The uid of the API object for a runtime uid (a static pod's mirror
    /// pod has its own).
    fn api_uid(&self, runtime_uid: &str) -> String {
        let view = self.cache.view(Duration::MAX);
        if view.pods.contains_key(runtime_uid) {
            return runtime_uid.to_string();
        }
        view.pods
            .values()
            .find(|p| {
                p.metadata
                    .annotations
                    .get(qosd_model::core::model::ANNOTATION_MIRROR)
                    .is_some_and(|h| h == runtime_uid)
            })
            .map(|p| p.metadata.uid.clone())
            .unwrap_or_else(|| runtime_uid.to_string())
    }
}

/// POST an Event.
async fn post_event(
    client: &KubeClient,
    path: &str,
    ev: &Event,
    timeout: Duration,
) -> Result<(), KubeError> {
    client.post_json(path, ev, timeout).await.map(|_| ())
}

/// Count and log an Event's result.
fn event_written(metrics: &KubeMetrics, ev: &Event, r: Result<(), KubeError>) {
    metrics.event(r.is_ok());
    let pod = format!(
        "{}/{}",
        ev.involved_object.namespace, ev.involved_object.name
    );
    match r {
        Ok(()) => {
            tracing::info!(target: "qosd::eviction", pod = %pod, eviction_message = %ev.message, "Evicted event written")
        }
        Err(e) => {
            tracing::warn!(target: "qosd::eviction", pod = %pod, error = %e, "cannot write the Evicted event")
        }
    }
}

impl qosd_node::pods::SpecSource for KubeSide {
    fn merge(&self, live: &mut [LivePod]) {
        self.merge_view(live);
    }

    fn change_key(&self) -> String {
        KubeSide::change_key(self)
    }

    fn status(&self) -> (crate::telemetry::status::KubeStatus, Option<String>) {
        let (summary, unavailable) = self.last_merge();
        let stats = self.cache.stats();
        (
            crate::telemetry::status::KubeStatus {
                server: format!("{} ({})", self.client.server(), self.client.origin()),
                node_name: self.settings.node_name.clone(),
                state: if unavailable.is_none() {
                    "synced"
                } else {
                    "unavailable"
                }
                .into(),
                reason: unavailable.clone(),
                pods_exact: summary.exact,
                pods_inferred: summary.inferred,
                relists: stats.relists,
                watch_restarts: stats.watch_restarts,
            },
            unavailable,
        )
    }
}

/// Whether an answer that came after the deadline is an eviction to count
/// (and to give an Event): an accepted soft eviction (qosd waited for its
/// effect); never a hard one, whose pod was killed locally at the deadline
/// and counted as `fallback_local_kill` then.
fn late_answer_counts(hard: bool, a: &EvictAnswer) -> bool {
    !hard && *a == EvictAnswer::Evicted
}

fn refusal(a: EvictAnswer) -> Result<(), ApiRefusal> {
    match a {
        EvictAnswer::Evicted => Ok(()),
        EvictAnswer::Refused(m) => Err(ApiRefusal::Refused(m)),
        EvictAnswer::Throttled {
            retry_after,
            message,
        } => Err(ApiRefusal::Throttled {
            retry_after,
            message,
        }),
        EvictAnswer::Gone(m) => Err(ApiRefusal::Gone(m)),
        EvictAnswer::Failed(m) => Err(ApiRefusal::Failed(m)),
        EvictAnswer::Unanswered(m) => Err(ApiRefusal::Unanswered(m)),
    }
}

impl KubeSide {
    /// Still within the server's last `Retry-After`: how long is left.
    fn throttled_for(&self) -> Option<Duration> {
        let g = self
            .throttled_until
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        g.and_then(|t| t.checked_duration_since(std::time::Instant::now()))
    }

    fn throttle(&self, retry_after: Duration) {
        *self
            .throttled_until
            .lock()
            .unwrap_or_else(|e| e.into_inner()) =
            Some(std::time::Instant::now() + retry_after.min(MAX_RETRY_AFTER));
    }

    /// What to do with an answer that came after the deadline (on the
    /// request's own thread): an accepted eviction counts (effects, not
    /// attempts) and gets its Event — unless it was a hard eviction, which
    /// qosd already carried out by a local kill when the deadline passed
    /// (counted and recorded then: one pod, one eviction).
    fn late_handler(
        &self,
        path: String,
        ev: Event,
        hard: bool,
    ) -> impl FnOnce(EvictAnswer) + Send + 'static {
        let (client, metrics) = (self.client.clone(), self.metrics.clone());
        let rt = self.settings.evict_rt.clone();
        let timeout = self.settings.eviction_timeout.max(Duration::from_secs(2));
        move |a: EvictAnswer| {
            let pod = format!(
                "{}/{}",
                ev.involved_object.namespace, ev.involved_object.name
            );
            tracing::info!(target: "qosd::eviction", pod = %pod, answer = ?a, hard, "late answer to an eviction through the Kubernetes API");
            if !late_answer_counts(hard, &a) {
                return;
            }
            metrics.eviction_path(qosd_node::evict::API_EVICTED);
            let r = rt.block_on(post_event(&client, &path, &ev, timeout));
            event_written(&metrics, &ev, r);
        }
    }
}

impl ApiEvictor for KubeSide {
    fn evict(&self, v: &Victim, grace: Duration) -> Result<(), ApiRefusal> {
        use qosd_model::policy::evict::threshold::ThresholdKind;
        if let Some(left) = self.throttled_for() {
            return Err(ApiRefusal::Throttled {
                retry_after: left,
                message: "waiting for the API server's Retry-After".into(),
            });
        }
        let c = &v.candidate;
        let message = eviction_message(v, &self.container_usage(v));
        self.messages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(c.uid.clone(), message.clone());
        let (path, ev) = self.event_with(v, message);
        let t = self.settings.eviction_timeout;
        // Hard: the whole exchange within the deadline (then the local
        // fallback). Soft: connecting has its own bound and the answer's
        // starts once the request is sent.
        let deadlines = Deadlines {
            connect: t,
            answer: t,
            total: v.kind == ThresholdKind::Hard,
        };
        let late = self.late_handler(path.clone(), ev.clone(), v.kind == ThresholdKind::Hard);
        let answer = post_eviction(
            &self.settings.evict_rt,
            &self.client,
            &c.namespace,
            &c.name,
            &self.api_uid(&c.uid),
            grace.as_secs() as i64,
            deadlines,
            late,
        );
        if let EvictAnswer::Throttled { retry_after, .. } = &answer {
            self.throttle(*retry_after);
        }
        // Kept only for the local kill that follows a hard eviction the
        // API did not do (its record and Event carry the message).
        if answer == EvictAnswer::Evicted || v.kind == ThresholdKind::Soft {
            self.messages
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&c.uid);
        }
        refusal(answer)?;
        self.post(&path, &ev);
        Ok(())
    }

    fn mark_evicted_after_kill(&self, v: &Victim) -> Result<(), KubeError> {
        let c = &v.candidate;
        let (_, ev) = self.event_body(v);
        let timeout = self.settings.eviction_timeout.max(Duration::from_secs(5));
        let uid = self.api_uid(&c.uid);
        let now = rfc3339(SystemTime::now());
        let mut result = Ok(());
        for attempt in 0..5u32 {
            let r = self.settings.evict_rt.block_on(mark_evicted(
                &self.client,
                &c.namespace,
                &c.name,
                &uid,
                &ev.message,
                &now,
                timeout,
            ));
            let wait = match &r {
                Ok(()) => None,
                // Not this pod any more (gone, or a newer one has the name).
                Err(e) if matches!(e.code(), Some(404) | Some(409)) => None,
                Err(e) if e.code() == Some(429) => {
                    Some(e.retry_after().unwrap_or(Duration::from_secs(1)))
                }
                Err(e) if e.code().is_some_and(|c| c < 500) => None,
                Err(_) => Some(Duration::from_secs(1 << attempt)),
            };
            result = match &r {
                Err(e) if matches!(e.code(), Some(404) | Some(409)) => {
                    tracing::info!(target: "qosd::eviction", uid = %uid, error = %e, "the evicted pod is no longer in the API: no status to set");
                    Ok(())
                }
                _ => r,
            };
            match wait {
                Some(w) if attempt < 4 => std::thread::sleep(w.min(MAX_RETRY_AFTER)),
                _ => break,
            }
        }
        let path = format!("/api/v1/namespaces/{}/events", c.namespace);
        let r = self
            .settings
            .evict_rt
            .block_on(post_event(&self.client, &path, &ev, timeout));
        event_written(&self.metrics, &ev, r);
        result
    }

    fn count(&self, path: &str) {
        self.metrics.eviction_path(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_answer_counts_once_per_pod() {
        let rows = [
            (false, EvictAnswer::Evicted, true),
            (true, EvictAnswer::Evicted, false),
            (false, EvictAnswer::Refused("pdb".into()), false),
            (true, EvictAnswer::Gone("404".into()), false),
        ];
        for (hard, answer, counts) in rows {
            assert_eq!(
                late_answer_counts(hard, &answer),
                counts,
                "{hard} {answer:?}"
            );
        }
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_741_083_669);
        assert_eq!(rfc3339(t), "2025-03-04T10:21:09Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn message_in_the_kubelet_wording() {
        use qosd_model::policy::evict::rank::Candidate;
        use qosd_model::policy::evict::threshold::{
            Signal, Threshold, ThresholdKind, ThresholdValue,
        };
        let pod = qosd_model::core::model::Pod::new("u", "ns", "web");
        let t = Threshold {
            signal: Signal::MemoryAvailable,
            kind: ThresholdKind::Hard,
            value: ThresholdValue::Quantity(100 << 20),
            grace_period: Duration::ZERO,
            min_reclaim: None,
        };
        let v = Victim {
            candidate: Candidate::new(
                &pod,
                qosd_model::core::model::QosClass::Burstable,
                0,
                0,
                None,
            ),
            signal: Signal::MemoryAvailable,
            threshold: t,
            kind: ThresholdKind::Hard,
            observed: 80 << 20,
            capacity: 1 << 30,
            threshold_value: 100 << 20,
            grace: Duration::ZERO,
            rank: 1,
            usage: None,
            request: 0,
            reason: String::new(),
            cause: qosd_model::policy::evict::manager::Cause::Threshold,
            message: String::new(),
        };
        let c = vec![
            ContainerUsage {
                name: "web".into(),
                usage: 300 << 20,
                request: "256Mi".into(),
                request_value: 256 << 20,
            },
            ContainerUsage {
                name: "sidecar".into(),
                usage: 10 << 20,
                request: "64Mi".into(),
                request_value: 64 << 20,
            },
        ];
        assert_eq!(
            eviction_message(&v, &c),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. \
Container web was using 300Mi, request is 256Mi, has larger consumption of memory. "
        );
        // A local-storage limit's Event carries the limit's message.
        let msg = "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ";
        let v = Victim {
            cause: qosd_model::policy::evict::manager::Cause::LocalStorage(
                qosd_model::policy::evict::local_storage::LimitKind::EmptyDir,
            ),
            message: msg.into(),
            ..v
        };
        assert_eq!(eviction_message(&v, &c), msg);
    }
}
