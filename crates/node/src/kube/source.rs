//! The pods bound to this node, from the API server: list, then watch from
//! the list's resourceVersion (bookmarks on), re-watch from the last seen
//! version when a stream ends or drops, relist on `410 Gone`, back off
//! while the server is away. The current view is kept in a [`PodCache`]
//! the reconcile loop reads on each listing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::client::{encode_query, KubeClient, KubeError};
use super::types::{ApiPod, PodList, Status, WatchEvent};

/// The shared view of this node's pods.
#[derive(Debug, Default)]
pub struct PodCache {
    inner: Mutex<CacheState>,
}

#[derive(Debug, Default)]
struct CacheState {
    pods: HashMap<String, ApiPod>,
    /// A list has completed since start.
    synced: bool,
    /// A watch stream (or a just-finished list) is current.
    connected: bool,
    /// When the view was last known current (list done, watch open).
    current_at: Option<Instant>,
    last_error: Option<String>,
    resource_version: String,
    relists: u64,
    watch_restarts: u64,
}

/// What the reconcile loop gets from the cache.
#[derive(Debug, Clone)]
pub struct ApiView {
    /// The pods by uid (also when stale: immutable fields stay usable).
    pub pods: HashMap<String, ApiPod>,
    /// `None`: the view is current; otherwise why it is not (never synced,
    /// or disconnected longer than the allowed staleness).
    pub unavailable: Option<String>,
}

impl ApiView {
    pub fn fresh(&self) -> bool {
        self.unavailable.is_none()
    }
}

/// Counters for metrics and status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub(crate) pods: usize,
    pub relists: u64,
    pub watch_restarts: u64,
    pub resource_version: String,
}

impl PodCache {
    /// The view, current if synced and connected (or disconnected for at
    /// most `max_stale`).
    pub fn view(&self, max_stale: Duration) -> ApiView {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let unavailable = if !g.synced {
            Some(format!(
                "the API server's pod list is not synced yet{}",
                g.last_error
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            ))
        } else if g.connected {
            None
        } else {
            let age = g.current_at.map(|t| t.elapsed()).unwrap_or(Duration::MAX);
            (age > max_stale).then(|| {
                format!(
                    "no contact with the API server for {}s (max {}s){}",
                    age.as_secs(),
                    max_stale.as_secs(),
                    g.last_error
                        .as_ref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                )
            })
        };
        ApiView {
            pods: g.pods.clone(),
            unavailable,
        }
    }

    /// A cheap key that changes whenever the view does (a pod event, a
    /// bookmark, freshness): part of the daemon's change detector.
    pub fn change_key(&self, max_stale: Duration) -> String {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let fresh =
            g.synced && (g.connected || g.current_at.is_some_and(|t| t.elapsed() <= max_stale));
        format!("k:{fresh}:{}:{}", g.resource_version, g.pods.len())
    }

    pub fn stats(&self) -> CacheStats {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        CacheStats {
            pods: g.pods.len(),
            relists: g.relists,
            watch_restarts: g.watch_restarts,
            resource_version: g.resource_version.clone(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut CacheState) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn replace(&self, list: PodList) {
        self.with(|g| {
            g.pods = list
                .items
                .into_iter()
                .map(|p| (p.metadata.uid.clone(), p))
                .collect();
            g.resource_version = list.metadata.resource_version;
            g.synced = true;
            g.connected = true;
            g.current_at = Some(Instant::now());
            g.last_error = None;
            g.relists += 1;
        })
    }

    fn connected(&self) {
        self.with(|g| {
            g.connected = true;
            g.current_at = Some(Instant::now());
            g.last_error = None;
        })
    }

    fn disconnected(&self, error: Option<String>) {
        self.with(|g| {
            if g.connected {
                g.current_at = Some(Instant::now());
            }
            g.connected = false;
            if error.is_some() {
                g.last_error = error;
            }
        })
    }

    /// Apply one watch event; `Err(())` asks for a relist (410 Gone).
    fn apply(&self, ev: WatchEvent) -> Result<(), String> {
        match ev.kind.as_str() {
            "ADDED" | "MODIFIED" | "DELETED" => {
                let pod: ApiPod = serde_json::from_value(ev.object)
                    .map_err(|e| format!("bad pod in a watch event: {e}"))?;
                self.with(|g| {
                    g.resource_version = pod.metadata.resource_version.clone();
                    g.current_at = Some(Instant::now());
                    if ev.kind == "DELETED" {
                        g.pods.remove(&pod.metadata.uid);
                    } else {
                        g.pods.insert(pod.metadata.uid.clone(), pod);
                    }
                });
                Ok(())
            }
            "BOOKMARK" => {
                let rv = ev
                    .object
                    .pointer("/metadata/resourceVersion")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string();
                self.with(|g| {
                    if !rv.is_empty() {
                        g.resource_version = rv;
                    }
                    g.current_at = Some(Instant::now());
                });
                Ok(())
            }
            "ERROR" => {
                let st: Status = serde_json::from_value(ev.object).unwrap_or_default();
                Err(format!(
                    "watch error {} {}: {}",
                    st.code, st.reason, st.message
                ))
            }
            other => Err(format!("unknown watch event type {other:?}")),
        }
    }

    fn resource_version(&self) -> String {
        self.with(|g| g.resource_version.clone())
    }

    fn count_restart(&self) {
        self.with(|g| g.watch_restarts += 1)
    }
}

/// Settings of the watcher.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub(crate) node_name: String,
    /// Deadline of a list call and of a watch's response headers.
    pub(crate) request_timeout: Duration,
    /// `timeoutSeconds` asked of the server for each watch.
    pub(crate) watch_timeout: Duration,
    /// Backoff between failed attempts (doubling up to `max_backoff`).
    pub(crate) min_backoff: Duration,
    pub max_backoff: Duration,
    /// Page size of lists.
    pub page_size: u32,
}

impl WatchOptions {
    pub fn new(node_name: impl Into<String>) -> WatchOptions {
        WatchOptions {
            node_name: node_name.into(),
            request_timeout: Duration::from_secs(10),
            watch_timeout: Duration::from_secs(290),
            min_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            page_size: 500,
        }
    }

    fn selector(&self) -> String {
        encode_query(&format!("spec.nodeName={}", self.node_name))
    }
}

/// List every page of this node's pods.
pub async fn list_pods(client: &KubeClient, opts: &WatchOptions) -> Result<PodList, KubeError> {
    let mut out = PodList::default();
    let mut cont = String::new();
    loop {
        let mut path = format!(
            "/api/v1/pods?fieldSelector={}&limit={}",
            opts.selector(),
            opts.page_size
        );
        if !cont.is_empty() {
            path.push_str(&format!("&continue={}", encode_query(&cont)));
        }
        let page: PodList = client.get_json(&path, opts.request_timeout).await?;
        out.items.extend(page.items);
        out.metadata.resource_version = page.metadata.resource_version;
        if page.metadata.continue_token.is_empty() {
            return Ok(out);
        }
        cont = page.metadata.continue_token;
    }
}

/// How a watch stream ended.
enum WatchEnd {
    /// The server closed it (timeoutSeconds): watch again from the last version.
    Closed,
    /// 410 Gone (or an equivalent ERROR event): relist.
    Expired,
    /// Broken (connection reset, bad data): watch again after a backoff.
    Broken(String),
}

async fn watch_once(client: &KubeClient, opts: &WatchOptions, cache: &PodCache) -> WatchEnd {
    let path = format!(
        "/api/v1/pods?watch=1&fieldSelector={}&resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds={}",
        opts.selector(),
        encode_query(&cache.resource_version()),
        opts.watch_timeout.as_secs().max(1)
    );
    let mut lines = match client.stream(&path, opts.request_timeout).await {
        Ok(l) => l,
        Err(e) if e.code() == Some(410) => return WatchEnd::Expired,
        Err(e) => return WatchEnd::Broken(e.to_string()),
    };
    cache.connected();
    loop {
        match lines.next_line().await {
            Ok(None) => return WatchEnd::Closed,
            Err(e) => return WatchEnd::Broken(e.to_string()),
            Ok(Some(line)) => {
                let ev: WatchEvent = match serde_json::from_slice(&line) {
                    Ok(ev) => ev,
                    Err(e) => return WatchEnd::Broken(format!("bad watch event: {e}")),
                };
                let gone = ev.kind == "ERROR"
                    && ev.object.get("code").and_then(|c| c.as_u64()) == Some(410);
                if gone {
                    return WatchEnd::Expired;
                }
                if let Err(e) = cache.apply(ev) {
                    return WatchEnd::Broken(e);
                }
            }
        }
    }
}

/// Keep `cache` in step with the API server until the task is dropped.
pub async fn run_watcher(client: KubeClient, opts: WatchOptions, cache: Arc<PodCache>) {
    let mut backoff = opts.min_backoff;
    let mut need_list = true;
    let mut down_logged = false;
    loop {
        if need_list {
            match list_pods(&client, &opts).await {
                Ok(list) => {
                    tracing::info!(
                        target: "qosd::kube",
                        pods = list.items.len(),
                        resource_version = %list.metadata.resource_version,
                        node = %opts.node_name,
                        "listed this node's pods from the API server"
                    );
                    cache.replace(list);
                    need_list = false;
                    backoff = opts.min_backoff;
                    if down_logged {
                        tracing::info!(target: "qosd::kube", server = client.server(), "API server reachable again");
                        down_logged = false;
                    }
                }
                Err(e) => {
                    if !down_logged {
                        tracing::warn!(target: "qosd::kube", error = %e, "cannot list pods from the API server; using the runtime's data alone until it answers");
                        down_logged = true;
                    }
                    cache.disconnected(Some(e.to_string()));
                    tokio::time::sleep(backoff).await;
                    backoff =
                        qosd_model::core::backoff::Backoff::new(opts.min_backoff, opts.max_backoff)
                            .next(backoff);
                    continue;
                }
            }
        }
        match watch_once(&client, &opts, &cache).await {
            WatchEnd::Closed => {
                tracing::debug!(target: "qosd::kube", "watch closed by the server; watching again");
                cache.count_restart();
                backoff = opts.min_backoff;
            }
            WatchEnd::Expired => {
                tracing::info!(target: "qosd::kube", "watch resourceVersion expired (410 Gone): relisting");
                cache.count_restart();
                need_list = true;
            }
            WatchEnd::Broken(e) => {
                tracing::debug!(target: "qosd::kube", error = %e, "watch broke; watching again from the last version");
                cache.disconnected(Some(e));
                cache.count_restart();
                tokio::time::sleep(backoff).await;
                backoff =
                    qosd_model::core::backoff::Backoff::new(opts.min_backoff, opts.max_backoff)
                        .next(backoff);
                // A server that keeps failing watches may have lost our
                // version: relist after a few failures in a row.
                if backoff >= opts.max_backoff {
                    need_list = true;
                }
            }
        }
    }
}

/// A one-off view for CLI commands: one list of this node's pods (no
/// watch). An error gives an unavailable, empty view.
pub async fn snapshot(client: &KubeClient, node_name: &str, timeout: Duration) -> ApiView {
    let mut opts = WatchOptions::new(node_name);
    opts.request_timeout = timeout;
    match list_pods(client, &opts).await {
        Ok(list) => ApiView {
            pods: list
                .items
                .into_iter()
                .map(|p| (p.metadata.uid.clone(), p))
                .collect(),
            unavailable: None,
        },
        Err(e) => ApiView {
            pods: HashMap::new(),
            unavailable: Some(e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, rv: &str) -> serde_json::Value {
        serde_json::json!({"metadata": {"uid": uid, "name": uid, "namespace": "ns", "resourceVersion": rv}})
    }

    #[test]
    fn events_update_the_cache_and_staleness_is_bounded() {
        let c = PodCache::default();
        assert!(!c.view(Duration::from_secs(10)).fresh(), "not synced");
        c.replace(PodList::default());
        assert!(c.view(Duration::ZERO).fresh());
        c.apply(WatchEvent {
            kind: "ADDED".into(),
            object: pod("a", "5"),
        })
        .unwrap();
        c.apply(WatchEvent {
            kind: "BOOKMARK".into(),
            object: serde_json::json!({"metadata": {"resourceVersion": "9"}}),
        })
        .unwrap();
        assert_eq!(c.resource_version(), "9");
        assert!(c.view(Duration::ZERO).pods.contains_key("a"));
        c.apply(WatchEvent {
            kind: "DELETED".into(),
            object: pod("a", "10"),
        })
        .unwrap();
        assert!(c.view(Duration::ZERO).pods.is_empty());
        assert!(c
            .apply(WatchEvent {
                kind: "ERROR".into(),
                object: serde_json::json!({"code": 500, "message": "x"})
            })
            .is_err());
        c.disconnected(Some("gone".into()));
        assert!(
            c.view(Duration::from_secs(60)).fresh(),
            "within the staleness bound"
        );
        let v = c.view(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        let v2 = c.view(Duration::from_millis(1));
        assert!(v.fresh() || !v2.fresh());
        assert!(v2.unavailable.unwrap().contains("gone"));
    }
}
