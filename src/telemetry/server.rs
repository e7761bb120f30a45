//! The HTTP endpoint: `/metrics`, `/healthz`, `/readyz`, `/status`.
//!
//! * `/metrics` — Prometheus/OpenMetrics text from [`Metrics`].
//! * `/healthz` — liveness: 200 while the main loop's heartbeat
//!   ([`Health::beat`]) is younger than the staleness limit, else 503.
//! * `/readyz` — readiness: 200 once the CRI answered and the first
//!   reconcile finished (and the daemon is not shutting down), else 503.
//! * `/status` — the [`StatusDoc`] the daemon last published, as JSON
//!   (`qosd status` reads it with [`fetch_status`]).
//!
//! The daemon shares an `Arc<Health>` and an `Arc<Metrics>` with the
//! server; every update is a cheap atomic store or a short mutex hold.
//! [`spawn`] binds (so "address in use" surfaces at start-up), serves on a
//! tokio task, and returns a [`Server`] handle for shutdown.
//!

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get as route_get;
use axum::Router;

use crate::telemetry::client::HttpError;
use crate::telemetry::health::Health;
use crate::telemetry::metrics::{self, Metrics};

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
}

/// The routes, for embedding or testing without a socket.
pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", route_get(metrics_handler))
        .route("/healthz", route_get(healthz))
        .route("/readyz", route_get(readyz))
        .route("/status", route_get(status))
        .with_state(state)
}

async fn metrics_handler(State(s): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    // `qosd_ready` is `/readyz` at the time of the scrape (some reasons,
    // e.g. a runtime call pending too long, arise between passes).
    s.metrics.set_ready(s.health.ready().is_ok());
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if wants_openmetrics(accept) {
        (
            [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
            s.metrics.encode(),
        )
            .into_response()
    } else {
        (
            [(header::CONTENT_TYPE, metrics::CONTENT_TYPE_PROMETHEUS)],
            s.metrics.encode_prometheus(),
        )
            .into_response()
    }
}

/// Whether an `Accept` header prefers OpenMetrics over the Prometheus text
/// format (Prometheus asks for both with q-values; anything else, or no
/// header, gets the text format 0.0.4).
pub(crate) fn wants_openmetrics(accept: &str) -> bool {
    let q = |media: &str| -> Option<f32> {
        accept
            .split(',')
            .map(str::trim)
            .filter(|part| {
                part.split(';')
                    .next()
                    .is_some_and(|m| m.trim().eq_ignore_ascii_case(media))
            })
            .map(|part| {
                part.split(';')
                    .filter_map(|p| p.trim().strip_prefix("q="))
                    .find_map(|v| v.parse::<f32>().ok())
                    .unwrap_or(1.0)
            })
            .fold(None, |a: Option<f32>, b| Some(a.map_or(b, |a| a.max(b))))
    };
    match (q("application/openmetrics-text"), q("text/plain")) {
        (Some(om), Some(text)) => om > 0.0 && om >= text,
        (Some(om), None) => om > 0.0,
        _ => false,
    }
}

fn probe(r: Result<(), String>) -> Response {
    let text = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    match r {
        Ok(()) => (StatusCode::OK, text, "ok\n".to_string()).into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, text, format!("{why}\n")).into_response(),
    }
}

async fn healthz(State(s): State<AppState>) -> Response {
    probe(s.health.alive())
}

async fn readyz(State(s): State<AppState>) -> Response {
    // Degraded modes do not fail readiness (qosd keeps working), but the
    // probe's body says so.
    let degraded = s.health.degraded();
    match s.health.ready() {
        Ok(()) if !degraded.is_empty() => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("ok; degraded: {}\n", degraded.join("; ")),
        )
            .into_response(),
        r => probe(r),
    }
}

/// How old `/status` may serve per-pod usage before asking for a fresh
/// measurement, and how long it waits for one.
pub(crate) const POD_USAGE_MAX_AGE: Duration = Duration::from_secs(1);
pub(crate) const POD_USAGE_WAIT: Duration = Duration::from_secs(2);

async fn status(State(s): State<AppState>, req: axum::extract::Request) -> Response {
    // `/status` names pods and evictions: local clients only (`qosd status`
    // on the node, `kubectl exec`). Without a socket (tests) it answers.
    if let Some(Peer(peer)) = req.extensions().get::<Peer>() {
        if !peer.ip().is_loopback() && !peer.ip().to_canonical().is_loopback() {
            return (
                StatusCode::FORBIDDEN,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                "/status is served to local clients only (run `qosd status` on the node)\n",
            )
                .into_response();
        }
    }
    // Per-pod usage is measured on demand: at most a second old when
    // served (the eviction loop measures; a busy loop is waited for 2 s at
    // most, then the older usage is served with its time).
    let h = s.health.clone();
    let _ =
        tokio::task::spawn_blocking(move || h.fresh_pod_usage(POD_USAGE_MAX_AGE, POD_USAGE_WAIT))
            .await;
    let body = serde_json::to_string_pretty(&s.health.status())
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    ([(header::CONTENT_TYPE, "application/json")], body + "\n").into_response()
}

/// Limits that keep the server alive under hostile or broken clients
/// (slowloris, thousands of idle connections, endless headers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerLimits {
    /// Connections served at once; at the cap a new client takes the slot
    /// of the longest-idle connection, and waits in the kernel's accept
    /// backlog only while every connection is answering a request.
    pub(crate) max_connections: usize,
    /// Connections served at once from one client address; past it a new
    /// connection from that address takes the slot of that address's
    /// longest-idle connection (a flood from one address never closes
    /// other clients' connections), or is closed when all are busy.
    pub(crate) max_connections_per_ip: usize,
    /// A client must send its complete request headers within this time.
    pub(crate) header_read_timeout: std::time::Duration,
    /// A connection is closed after this long, whatever it is doing
    /// (idle keep-alive, a client that does not read the answer).
    pub(crate) connection_lifetime: std::time::Duration,
    /// Read buffer per connection: the largest request head accepted.
    pub(crate) max_request_bytes: usize,
    /// A connection with no request in flight (an idle keep-alive, or a
    /// client still sending its headers) is closed after this long.
    pub(crate) idle_timeout: std::time::Duration,
}

impl Default for ServerLimits {
    fn default() -> ServerLimits {
        ServerLimits {
            max_connections: 256,
            max_connections_per_ip: 64,
            header_read_timeout: std::time::Duration::from_secs(5),
            connection_lifetime: std::time::Duration::from_secs(30),
            max_request_bytes: 16 * 1024,
            idle_timeout: std::time::Duration::from_secs(5),
        }
    }
}

impl ServerLimits {
    /// Default limits with the connection cap fitted to the descriptors
    /// qosd may open (`nofile`: its soft RLIMIT_NOFILE), keeping
    /// [`qosd_node::sys::fdlimit::FD_RESERVE`] for cgroup I/O, signals, the
    /// runtime and eviction.
    pub(crate) fn for_nofile(nofile: u64) -> ServerLimits {
        let spare = nofile.saturating_sub(qosd_node::sys::fdlimit::FD_RESERVE);
        ServerLimits {
            max_connections: (spare as usize).clamp(4, 256),
            ..ServerLimits::default()
        }
    }
}

/// The peer of a connection, for handlers (`/status` answers local
/// clients only).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) SocketAddr);

/// One served connection, as the accept loop sees it.
struct ConnState {
    /// The client's address.
    ip: std::net::IpAddr,
    /// Requests in flight (0 or 1: HTTP/1 answers one at a time).
    busy: std::sync::atomic::AtomicUsize,
    /// When the last request ended (or the connection was accepted).
    idle_since: std::sync::Mutex<tokio::time::Instant>,
    /// A request started or ended (the idle timer looks again).
    changed: tokio::sync::Notify,
    /// Close now: the slot is needed for a new connection.
    kick: tokio::sync::Notify,
    /// The server's "a connection became idle" signal (the accept loop
    /// waits on it when every connection is answering a request).
    any_idle: Arc<tokio::sync::Notify>,
    /// The connection's slot; taken over by a new connection when this one
    /// is kicked (so the new one never waits for this one to close).
    slot: std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
}

impl ConnState {
    fn new(
        ip: std::net::IpAddr,
        any_idle: Arc<tokio::sync::Notify>,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) -> ConnState {
        ConnState {
            ip,
            any_idle,
            slot: std::sync::Mutex::new(Some(slot)),
            busy: std::sync::atomic::AtomicUsize::new(0),
            idle_since: std::sync::Mutex::new(tokio::time::Instant::now()),
            changed: tokio::sync::Notify::new(),
            kick: tokio::sync::Notify::new(),
        }
    }

    /// `Some(since)` when no request is in flight.
    fn idle_since(&self) -> Option<tokio::time::Instant> {
        (self.busy.load(std::sync::atomic::Ordering::SeqCst) == 0)
            .then(|| *self.idle_since.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Resolves once the connection has had no request in flight for
    /// `timeout`.
    async fn idle_for(&self, timeout: std::time::Duration) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.idle_since() {
                Some(since) => {
                    if since.elapsed() >= timeout {
                        return;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep_until(since + timeout) => {}
                        _ = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// Marks a request in flight on its connection until dropped.
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn start(c: &Arc<ConnState>) -> InFlight {
        c.busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        c.changed.notify_waiters();
        InFlight(c.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = tokio::time::Instant::now();
        self.0
            .busy
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.0.changed.notify_waiters();
        self.0.any_idle.notify_one();
    }
}

/// The connections being served, by id.
type Registry = Arc<std::sync::Mutex<std::collections::HashMap<u64, Arc<ConnState>>>>;

/// At the connection cap: close the connection that has been idle longest
/// (an idle keep-alive or a client still sending headers; never one with a
/// request in flight) and take its slot. `None` when every connection is
/// answering a request.
/// With `ip`, only among that client address's connections.
fn kick_longest_idle(
    conns: &Registry,
    ip: Option<std::net::IpAddr>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let conns = conns.lock().unwrap_or_else(|e| e.into_inner());
    let mut idle: Vec<_> = conns
        .values()
        .filter(|c| ip.is_none_or(|ip| c.ip == ip))
        .filter_map(|c| c.idle_since().map(|t| (t, c)))
        .collect();
    idle.sort_by_key(|(t, _)| *t);
    for (_, c) in idle {
        let slot = c.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(slot) = slot {
            c.kick.notify_one();
            return Some(slot);
        }
    }
    None
}

/// Serve on an already bound listener until `shutdown` resolves (graceful:
/// in-flight requests finish).
///
/// The accept loop never waits behind slow or idle clients: at the
/// connection cap a new client takes the slot of the connection idle the
/// longest (HTTP/1.1 lets a server close an idle keep-alive connection at
/// any time), so a probe (`/healthz`, `/readyz`) is answered at once
/// whatever holds the other connections. Connections idle for
/// [`ServerLimits::idle_timeout`] are closed; a client that half-closes
/// after its request is still answered.
pub(crate) async fn serve_with(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    let app = router(state);
    let slots = Slots {
        free: Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1))),
        registry: Arc::default(),
        any_idle: Arc::new(tokio::sync::Notify::new()),
        max_per_ip: limits.max_connections_per_ip.max(1),
    };
    let mut next_id: u64 = 0;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    let mut accepting = AcceptHealth::default();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = &mut shutdown => break,
        };
        let Some((stream, peer)) = accepting.note(accepted) else {
            // EMFILE/ENFILE/ENOBUFS: wait for descriptors to come back
            // instead of spinning.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        while conns.try_join_next().is_some() {}
        let ip = peer.ip().to_canonical();
        let permit = match slots.take(peer, ip, shutdown.as_mut()).await {
            Slot::Taken(p) => p,
            Slot::Refused => {
                tracing::debug!(%peer, "HTTP connections per client address at the cap, all busy: closed");
                drop(stream);
                continue;
            }
            Slot::ShuttingDown => break,
        };
        next_id += 1;
        let conn_state = Arc::new(ConnState::new(ip, slots.any_idle.clone(), permit));
        // A candidate for the next kick at once (before its task runs).
        slots
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(next_id, conn_state.clone());
        let conn = Connection {
            app: app.clone(),
            peer,
            unregister: Unregister(slots.registry.clone(), next_id, conn_state.clone()),
            state: conn_state,
            limits,
        };
        conns.spawn(conn.serve(stream, stop_rx.clone()));
    }
    let _ = stop_tx.send(true);
    while conns.join_next().await.is_some() {}
    Ok(())
}

/// Whether `accept` is failing (descriptors exhausted): logged once per
/// episode, and again when it recovers.
#[derive(Debug, Default)]
struct AcceptHealth {
    failing: bool,
}

impl AcceptHealth {
    /// The accepted connection, or `None` after a failure (logged once).
    fn note(
        &mut self,
        r: std::io::Result<(tokio::net::TcpStream, SocketAddr)>,
    ) -> Option<(tokio::net::TcpStream, SocketAddr)> {
        match r {
            Ok(c) => {
                if self.failing {
                    tracing::info!("HTTP server accepts connections again");
                    self.failing = false;
                }
                Some(c)
            }
            Err(e) => {
                if !self.failing {
                    tracing::warn!(error = %e, "HTTP server cannot accept connections; retrying");
                    self.failing = true;
                }
                None
            }
        }
    }
}

/// The connection slots: at most `max_connections` served at once, at most
/// `max_per_ip` from one client address.
struct Slots {
    free: Arc<tokio::sync::Semaphore>,
    registry: Registry,
    /// Notified when a request ends (its connection can be kicked now).
    any_idle: Arc<tokio::sync::Notify>,
    max_per_ip: usize,
}

/// What [`Slots::take`] got a new connection.
enum Slot {
    Taken(tokio::sync::OwnedSemaphorePermit),
    /// The client's address is at its cap with every connection busy.
    Refused,
    /// The server is shutting down.
    ShuttingDown,
}

impl Slots {
    /// A slot for a connection from `ip`: a free one; else the longest-idle
    /// connection's (closed now; the new connection takes its slot as soon
    /// as it is free, and the loop goes on accepting); else, every
    /// connection answering a request, the first to finish. From an address
    /// at its cap: only that address's longest-idle connection's slot.
    async fn take<F: Future<Output = ()>>(
        &self,
        peer: SocketAddr,
        ip: std::net::IpAddr,
        mut shutdown: std::pin::Pin<&mut F>,
    ) -> Slot {
        let from_ip = self
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|c| c.ip == ip)
            .count();
        if from_ip >= self.max_per_ip {
            return match kick_longest_idle(&self.registry, Some(ip)) {
                Some(p) => Slot::Taken(p),
                None => Slot::Refused,
            };
        }
        loop {
            if let Ok(p) = self.free.clone().try_acquire_owned() {
                return Slot::Taken(p);
            }
            if let Some(p) = kick_longest_idle(&self.registry, None) {
                return Slot::Taken(p);
            }
            tracing::debug!(%peer, "HTTP connection cap reached, every connection busy");
            tokio::select! {
                p = self.free.clone().acquire_owned() => {
                    return Slot::Taken(p.expect("semaphore never closed"))
                }
                // A request ended: that connection can be closed now.
                _ = self.any_idle.notified() => {}
                _ = &mut shutdown => return Slot::ShuttingDown,
            }
        }
    }
}

/// Leaves the registry and frees the slot (unless a new connection took it
/// over) when the connection ends.
struct Unregister(Registry, u64, Arc<ConnState>);

impl Drop for Unregister {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.1);
        drop(self.2.slot.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

/// One accepted connection and what serving it needs.
struct Connection {
    app: Router,
    peer: SocketAddr,
    state: Arc<ConnState>,
    unregister: Unregister,
    limits: ServerLimits,
}

impl Connection {
    /// Serve HTTP/1 requests until the client is done, the connection is
    /// idle or too old, its slot is needed, or the server stops.
    async fn serve(
        self,
        stream: tokio::net::TcpStream,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        use hyper_util::rt::{TokioIo, TokioTimer};
        use tower::ServiceExt;
        let Connection {
            app,
            peer,
            state: conn_state,
            unregister: _unregister,
            limits,
        } = self;
        let svc_state = conn_state.clone();
        let svc =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                let in_flight = InFlight::start(&svc_state);
                req.extensions_mut().insert(Peer(peer));
                let answer = app.clone().oneshot(req);
                async move {
                    let r = answer.await;
                    drop(in_flight);
                    r
                }
            });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .half_close(true)
            .max_buf_size(limits.max_request_bytes.max(8192))
            .max_headers(64);
        let conn = builder.serve_connection(TokioIo::new(stream), svc);
        tokio::pin!(conn);
        let deadline = tokio::time::sleep(limits.connection_lifetime);
        tokio::pin!(deadline);
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = &mut deadline => return,
            _ = conn_state.idle_for(limits.idle_timeout) => return,
            _ = conn_state.kick.notified() => {
                if conn_state.idle_since().is_some() {
                    return;
                }
                // A request arrived meanwhile: answer it, then close.
                conn.as_mut().graceful_shutdown();
            }
            _ = stop.wait_for(|s| *s) => conn.as_mut().graceful_shutdown(),
        }
        // Shutting down: let the request in flight finish, briefly.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), conn).await;
    }
}

/// A running server (see [`spawn`]).
#[derive(Debug)]
pub struct Server {
    local_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), HttpError>>,
    /// Becomes true (or its sender is dropped, on a panic) when serving ends.
    done: tokio::sync::watch::Receiver<bool>,
}

impl Server {
    /// The bound address (resolves port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Resolves once the serving task has ended (serving failed, panicked
    /// or was shut down): no polling.
    pub(crate) async fn stopped(&self) {
        let mut done = self.done.clone();
        let _ = done.wait_for(|d| *d).await;
    }

    /// Stop accepting, finish in-flight requests, wait for the task.
    pub async fn shutdown(mut self) -> Result<(), HttpError> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(HttpError::Serve {
                addr: self.local_addr,
                source: std::io::Error::other(e),
            }),
        }
    }
}

/// Bind `addr` (port 0: any free port) and serve on a tokio task.
/// Must be called inside a tokio runtime.
#[cfg(test)]
pub async fn spawn(addr: SocketAddr, state: AppState) -> Result<Server, HttpError> {
    spawn_with(addr, state, ServerLimits::default()).await
}

/// [`spawn`] with explicit limits.
pub(crate) async fn spawn_with(
    addr: SocketAddr,
    state: AppState,
    limits: ServerLimits,
) -> Result<Server, HttpError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| HttpError::Bind { addr, source })?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (done_tx, done) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        let r = serve_with(listener, state, limits, async {
            let _ = rx.await;
        })
        .await;
        let _ = done_tx.send(true);
        r
    });
    Ok(Server {
        local_addr,
        stop: Some(tx),
        task,
        done,
    })
}

#[cfg(test)]
mod tests {

    use crate::support::http::parse_response;
    use crate::telemetry::health::Health;
    use crate::telemetry::status::*;
    use std::time::Duration;

    #[test]
    fn accept_negotiation() {
        use super::wants_openmetrics as om;
        // What Prometheus 2.x sends.
        assert!(om("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"));
        assert!(om("application/openmetrics-text"));
        assert!(!om("text/plain;version=0.0.4"));
        assert!(!om(""));
        assert!(!om("*/*"));
        assert!(!om("application/openmetrics-text;q=0.2, text/plain"));
        assert!(!om("application/openmetrics-text;q=0"));
    }

    #[tokio::test]
    async fn stopped_resolves_when_serving_ends() {
        let state = super::AppState {
            metrics: std::sync::Arc::new(crate::telemetry::metrics::Metrics::new()),
            health: std::sync::Arc::new(Health::new(Duration::from_secs(5))),
        };
        let mut s = super::spawn("127.0.0.1:0".parse().unwrap(), state)
            .await
            .unwrap();
        let early = tokio::time::timeout(Duration::from_millis(50), s.stopped()).await;
        assert!(early.is_err(), "still serving");
        let _ = s.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(5), s.stopped())
            .await
            .expect("stopped() resolves once serving ends");
    }

    #[test]
    fn health_transitions() {
        let h = Health::new(Duration::from_millis(50));
        assert!(h.alive().is_ok());
        let why = h.ready().unwrap_err();
        assert!(
            why.contains("CRI") && why.contains("first reconcile"),
            "{why}"
        );
        h.set_cri_reachable(true);
        assert_eq!(h.ready().unwrap_err(), "first reconcile not done");
        h.set_reconciled();
        assert!(h.ready().is_ok());
        std::thread::sleep(Duration::from_millis(80));
        assert!(h.alive().unwrap_err().contains("heartbeat"));
        h.beat();
        assert!(h.alive().is_ok());
        h.set_shutting_down();
        assert_eq!(h.ready().unwrap_err(), "shutting down");
    }

    #[test]
    fn status_doc_roundtrips_and_bounds_evictions() {
        let mut d = StatusDoc::new();
        for i in 0..30 {
            d.push_eviction(EvictionRecord {
                name: format!("p{i}"),
                ..Default::default()
            });
        }
        assert_eq!(d.last_evictions.len(), StatusDoc::MAX_EVICTIONS);
        assert_eq!(d.last_evictions[0].name, "p29");
        let j = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<StatusDoc>(&j).unwrap(), d);
        // Unknown and missing fields are tolerated.
        let old: StatusDoc = serde_json::from_str(r#"{"mode":"enforce","future":1}"#).unwrap();
        assert_eq!(old.mode, "enforce");
    }

    #[test]
    fn parses_chunked_and_plain_responses() {
        let plain = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 3\r\n\r\nno\n";
        let r = parse_response(plain).unwrap();
        assert_eq!((r.status, r.body.as_str()), (503, "no\n"));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let r = parse_response(chunked).unwrap();
        assert_eq!(r.body, "abcde");
        assert_eq!(r.header("Transfer-Encoding"), Some("chunked"));
        assert!(parse_response(b"garbage").is_err());
    }
}
