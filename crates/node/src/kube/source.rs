//! The pods bound to this node, from the API server: list, then watch from
//! the list's resourceVersion (bookmarks on), re-watch from the last seen
//! version when a stream ends or drops, relist when the version expired
//! (`410` as an HTTP answer or, as a real server sends it, an `ERROR`
//! event in a 200 stream) or a list's `continue` token did, back off with
//! jitter while the server is away, and take a stream silent for longer
//! than its idle limit as dead. The current view is kept in a [`PodCache`]
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
    /// When the open watch last delivered something (an event, a bookmark).
    last_heard: Option<Instant>,
    /// A watch silent for longer than this is dead (see [`WatchOptions`]).
    idle_limit: Option<Duration>,
    /// The last watch was given up as silent this long: unavailable until
    /// a new watch or list succeeds.
    went_silent: Option<Duration>,
    last_error: Option<String>,
    resource_version: String,
    relists: u64,
    watch_restarts: u64,
}

impl CacheState {
    /// How long the open watch has been silent, once past its idle limit.
    fn silent_for(&self) -> Option<Duration> {
        if !self.connected {
            return None;
        }
        let (limit, heard) = (self.idle_limit?, self.last_heard?);
        let silent = heard.elapsed();
        (silent > limit).then_some(silent)
    }
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
    /// True when the view is current (`unavailable` is `None`).
    pub fn fresh(&self) -> bool {
        self.unavailable.is_none()
    }
}

/// Counters for metrics and status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub(crate) pods: usize,
    /// Full lists of the node's pods since the start.
    pub relists: u64,
    /// Watches opened again (closed by the server, expired or broken).
    pub watch_restarts: u64,
    /// The last `resourceVersion` seen (list, event or bookmark).
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
        } else if let Some(silent) = g.silent_for().or(g.went_silent) {
            Some(format!(
                "the API server's watch has been silent for {}s (no event, no bookmark; the limit is {}s): reconnecting",
                silent.as_secs(),
                g.idle_limit.unwrap_or_default().as_secs()
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
        let fresh = g.synced
            && g.silent_for().or(g.went_silent).is_none()
            && (g.connected || g.current_at.is_some_and(|t| t.elapsed() <= max_stale));
        format!("k:{fresh}:{}:{}", g.resource_version, g.pods.len())
    }

    /// The counters now.
    pub fn stats(&self) -> CacheStats {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        CacheStats {
            pods: g.pods.len(),
            relists: g.relists,
            watch_restarts: g.watch_restarts,
            resource_version: g.resource_version.clone(),
        }
    }

    /// Set the idle limit of the watch feeding this cache.
    fn set_idle_limit(&self, limit: Duration) {
        self.with(|g| g.idle_limit = Some(limit))
    }

    /// Something arrived on the open watch.
    fn heard(&self) {
        self.with(|g| {
            let now = Instant::now();
            g.last_heard = Some(now);
            g.current_at = Some(now);
        })
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
            g.went_silent = None;
            g.current_at = Some(Instant::now());
            g.last_error = None;
            g.relists += 1;
        })
    }

    fn connected(&self) {
        self.with(|g| {
            let now = Instant::now();
            g.connected = true;
            g.current_at = Some(now);
            g.last_heard = Some(now);
            g.last_error = None;
            g.went_silent = None;
        })
    }

    fn disconnected(&self, error: Option<String>) {
        self.with(|g| {
            // A watch that went silent was current when last heard, not now,
            // and the view stays unavailable until a new watch is open.
            match g.silent_for() {
                Some(silent) => g.went_silent = Some(silent),
                None if g.connected => g.current_at = Some(Instant::now()),
                None => {}
            }
            g.connected = false;
            if error.is_some() {
                g.last_error = error;
            }
        })
    }

    /// Apply one watch event (an `ERROR` one is an error).
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
    /// Each watch asks the server for `timeoutSeconds` drawn uniformly in
    /// [this, twice this) (client-go's reflector: 5 min), so that the
    /// watches of many nodes do not all end together.
    pub(crate) min_watch_timeout: Duration,
    /// A watch stream silent (no event, no bookmark) for this long is taken
    /// as dead and re-opened. A real API server sends a bookmark about once
    /// a minute on an idle watch (the watch cache's bookmark frequency),
    /// hence 75 s; a dead peer is found sooner by TCP keepalive.
    pub idle_timeout: Duration,
    /// Backoff between failed attempts: from this, doubling up to
    /// `max_backoff`, each wait stretched by a random 0–100 % (client-go's
    /// reflector: 800 ms, 30 s); reset after `backoff_reset` without a
    /// failure.
    pub min_backoff: Duration,
    /// The longest backoff between failed attempts.
    pub max_backoff: Duration,
    /// A run this long without a failure resets the backoff.
    pub(crate) backoff_reset: Duration,
    /// Page size of lists.
    pub page_size: u32,
}

impl WatchOptions {
    /// The default settings for watching the pods bound to `node_name`.
    pub fn new(node_name: impl Into<String>) -> WatchOptions {
        WatchOptions {
            node_name: node_name.into(),
            request_timeout: Duration::from_secs(10),
            min_watch_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(75),
            min_backoff: Duration::from_millis(800),
            max_backoff: Duration::from_secs(30),
            backoff_reset: Duration::from_secs(120),
            page_size: 500,
        }
    }

    fn selector(&self) -> String {
        encode_query(&format!("spec.nodeName={}", self.node_name))
    }

    /// `timeoutSeconds` for the next watch: uniform in [min, 2·min).
    fn watch_timeout_seconds(&self) -> u64 {
        let min = self.min_watch_timeout.as_secs_f64().max(1.0);
        (min * (1.0 + random_fraction())) as u64
    }
}

/// A random number in [0, 1) (std's per-process random hash keys; no
/// cryptographic quality needed for jitter).
pub(crate) fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// `d` stretched by a random 0–100 % (wait.Jitter with factor 1.0).
pub(crate) fn jittered(d: Duration) -> Duration {
    d.mul_f64(1.0 + random_fraction())
}

/// The expired-`continue` answer: relist from the start.
fn expired(e: &KubeError) -> bool {
    e.code() == Some(410)
}

/// List every page of this node's pods. A `continue` token that expired
/// between two pages (410) restarts the list as one full list without
/// paging, as client-go's pager does.
pub async fn list_pods(client: &KubeClient, opts: &WatchOptions) -> Result<PodList, KubeError> {
    match list_pages(client, opts, opts.page_size).await {
        Err(e) if expired(&e) => {
            tracing::info!(target: "qosd::kube", error = %e, "list continue token expired: listing again in one page");
            list_pages(client, opts, 0).await
        }
        r => r,
    }
}

async fn list_pages(
    client: &KubeClient,
    opts: &WatchOptions,
    page_size: u32,
) -> Result<PodList, KubeError> {
    let mut out = PodList::default();
    let mut cont = String::new();
    loop {
        let mut path = format!("/api/v1/pods?fieldSelector={}", opts.selector());
        if page_size > 0 {
            path.push_str(&format!("&limit={page_size}"));
        }
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
    /// 410 (an HTTP answer or an `ERROR` event): relist.
    Expired,
    /// Broken (connection reset, silent past the idle limit, bad data, a
    /// watch that ended at once with nothing): watch again after a backoff.
    Broken(String),
}

/// A watch shorter than this that delivered nothing is a failure (client-go:
/// "very short watch"), so a server closing watches at once is not hammered.
const SHORT_WATCH: Duration = Duration::from_secs(1);

async fn watch_once(client: &KubeClient, opts: &WatchOptions, cache: &PodCache) -> WatchEnd {
    let path = format!(
        "/api/v1/pods?watch=1&fieldSelector={}&resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds={}",
        opts.selector(),
        encode_query(&cache.resource_version()),
        opts.watch_timeout_seconds()
    );
    let started = Instant::now();
    let mut lines = match client
        .stream(&path, opts.request_timeout, opts.idle_timeout)
        .await
    {
        Ok(l) => l,
        Err(e) if expired(&e) => return WatchEnd::Expired,
        Err(e) => return WatchEnd::Broken(e.to_string()),
    };
    cache.connected();
    let mut events = 0u64;
    loop {
        match lines.next_line().await {
            Ok(None) if events == 0 && started.elapsed() < SHORT_WATCH => {
                return WatchEnd::Broken(format!(
                    "very short watch: closed after {:?} with nothing received",
                    started.elapsed()
                ))
            }
            Ok(None) => return WatchEnd::Closed,
            Err(e) => return WatchEnd::Broken(e.to_string()),
            Ok(Some(line)) => {
                events += 1;
                cache.heard();
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

/// The watcher's backoff: exponential with jitter, reset after a quiet time.
struct Retry {
    next: Duration,
    last_failure: Option<Instant>,
}

impl Retry {
    fn new(opts: &WatchOptions) -> Retry {
        Retry {
            next: opts.min_backoff,
            last_failure: None,
        }
    }

    /// The wait after a failure now.
    fn failure(&mut self, opts: &WatchOptions) -> Duration {
        if self
            .last_failure
            .is_some_and(|t| t.elapsed() >= opts.backoff_reset)
        {
            self.next = opts.min_backoff;
        }
        self.last_failure = Some(Instant::now());
        let wait = jittered(self.next);
        self.next = qosd_model::core::backoff::Backoff::new(opts.min_backoff, opts.max_backoff)
            .next(self.next);
        wait
    }

    /// Failures in a row reached the cap.
    fn at_cap(&self, opts: &WatchOptions) -> bool {
        self.next >= opts.max_backoff
    }

    fn success(&mut self, opts: &WatchOptions) {
        self.next = opts.min_backoff;
    }
}

/// Keep `cache` in step with the API server until the task is dropped.
pub async fn run_watcher(client: KubeClient, opts: WatchOptions, cache: Arc<PodCache>) {
    let mut retry = Retry::new(&opts);
    let mut need_list = true;
    let mut down_logged = false;
    cache.set_idle_limit(opts.idle_timeout);
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
                    retry.success(&opts);
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
                    tokio::time::sleep(retry.failure(&opts)).await;
                    continue;
                }
            }
        }
        match watch_once(&client, &opts, &cache).await {
            WatchEnd::Closed => {
                tracing::debug!(target: "qosd::kube", "watch closed by the server; watching again");
                cache.count_restart();
            }
            WatchEnd::Expired => {
                tracing::info!(target: "qosd::kube", "watch resourceVersion expired (410): relisting");
                cache.count_restart();
                need_list = true;
            }
            WatchEnd::Broken(e) => {
                tracing::debug!(target: "qosd::kube", error = %e, "watch broke; watching again from the last version");
                cache.disconnected(Some(e));
                cache.count_restart();
                tokio::time::sleep(retry.failure(&opts)).await;
                // A server that keeps failing watches may have lost our
                // version: relist after a few failures in a row.
                if retry.at_cap(&opts) {
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

    /// Backoff: from 0.8 s doubling to 30 s, each wait stretched by 0–100 %;
    /// back to 0.8 s after 2 min without a failure; relist once at the cap.
    /// Watch timeouts are drawn in [300 s, 600 s).
    #[test]
    fn watch_backoff_jitters_caps_and_resets() {
        let opts = WatchOptions::new("n");
        let mut r = Retry::new(&opts);
        let mut bases = Vec::new();
        for _ in 0..8 {
            let base = r.next;
            let wait = r.failure(&opts);
            assert!(wait >= base && wait < base * 2, "{wait:?} for {base:?}");
            bases.push(base.as_millis());
        }
        assert_eq!(bases, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        assert!(r.at_cap(&opts));
        // A failure after 2 min without one starts again from the minimum.
        r.last_failure = Instant::now().checked_sub(Duration::from_secs(121));
        let wait = r.failure(&opts);
        assert!(wait < Duration::from_millis(1600), "{wait:?}");
        assert!(!r.at_cap(&opts));
        let t: Vec<u64> = (0..50).map(|_| opts.watch_timeout_seconds()).collect();
        assert!(t.iter().all(|t| (300..600).contains(t)), "{t:?}");
        assert!(t.iter().any(|x| *x != t[0]), "jittered: {t:?}");
    }
}
