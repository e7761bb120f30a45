//! Metrics of the Kubernetes API side (src/kube), registered with the
//! others by [`super::metrics::Metrics`]. The `path` labels are
//! `qosd_node::evict::api_path`.
//! Cheap to clone: every clone shares the same series.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    path: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Default)]
pub(crate) struct KubeMetrics {
    api_up: Gauge,
    pods: Family<SourceLabels, Gauge>,
    evictions: Family<PathLabels, Counter>,
    events: Family<ResultLabels, Counter>,
}

impl std::fmt::Debug for KubeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeMetrics { .. }")
    }
}

impl KubeMetrics {
    pub(crate) fn register(&self, r: &mut Registry) {
        // Known label sets start at 0: every family is in the first scrape.
        for path in qosd_node::evict::API_EVICTION_PATHS {
            let _ = self.evictions.get_or_create(&PathLabels {
                path: path.to_string(),
            });
        }
        for res in ["created", "failed"] {
            let _ = self
                .events
                .get_or_create(&ResultLabels { result: res.into() });
        }
        r.register(
            "kube_api_up",
            "1 while the Kubernetes API server's pod view is current (exact pod specs in use); 0: runtime data alone",
            self.api_up.clone(),
        );
        r.register(
            "kube_pods",
            "Live pods by the source of their spec values: exact (API server) or inferred (container runtime)",
            self.pods.clone(),
        );
        r.register(
            "api_evictions",
            "Evictions through the Kubernetes API, by the path taken (evicted, refused_next_candidate, failed_next_candidate, throttled_retry, unanswered_wait, fallback_local_kill, fallback_status_set, fallback_status_failed, already_gone)",
            self.evictions.clone(),
        );
        r.register(
            "api_eviction_events",
            "Evicted Events written to the API server, by result (created, failed)",
            self.events.clone(),
        );
    }

    pub(crate) fn set_api_up(&self, up: bool) {
        self.api_up.set(up as i64);
    }

    pub(crate) fn set_pods(&self, exact: usize, inferred: usize) {
        for (s, n) in [("exact", exact), ("inferred", inferred)] {
            self.pods
                .get_or_create(&SourceLabels { source: s.into() })
                .set(n as i64);
        }
    }

    pub(crate) fn eviction_path(&self, p: &str) {
        self.evictions
            .get_or_create(&PathLabels { path: p.into() })
            .inc();
    }

    pub(crate) fn event(&self, ok: bool) {
        let result = if ok { "created" } else { "failed" };
        self.events
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }
}
