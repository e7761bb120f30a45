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
//! A tiny blocking client ([`get`]) is included for `qosd status` and tests,
//! so no HTTP client crate is needed.

use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get as route_get;
use axum::Router;
use serde::{Deserialize, Serialize};

use crate::metrics::{self, Metrics};

/// Errors of the HTTP server and client.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP server on {addr} failed: {source}")]
    Serve {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP GET http://{addr}{path}: {source}")]
    Request {
        addr: SocketAddr,
        path: String,
        source: std::io::Error,
    },
    #[error("HTTP GET http://{addr}{path}: status {status}: {body}")]
    Status {
        addr: SocketAddr,
        path: String,
        status: u16,
        body: String,
    },
    #[error("HTTP GET http://{addr}{path}: bad JSON: {source}")]
    Json {
        addr: SocketAddr,
        path: String,
        source: serde_json::Error,
    },
}

// ---------------------------------------------------------------------------
// Health

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
    status: Mutex<StatusDoc>,
    /// When the runtime stopped answering (None: it answers).
    cri_down_since: Mutex<Option<Instant>>,
    /// `/healthz` fails once the runtime was unreachable this long (a
    /// restarted pod remounts the runtime's socket directory afresh).
    runtime_unhealthy_after: Mutex<Option<Duration>>,
    /// Working, but with less: e.g. the Kubernetes API is unavailable
    /// (key → reason); shown with readiness.
    degraded: Mutex<std::collections::BTreeMap<&'static str, String>>,
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
            status: Mutex::new(StatusDoc::default()),
            cri_down_since: Mutex::new(None),
            runtime_unhealthy_after: Mutex::new(None),
            degraded: Mutex::new(Default::default()),
        }
    }

    /// `/healthz` fails after the runtime was unreachable for `limit`.
    pub fn set_runtime_unhealthy_after(&self, limit: Option<Duration>) {
        *self
            .runtime_unhealthy_after
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = limit;
    }

    /// Mark a degraded mode (`Some(reason)`) or clear it (`None`).
    pub fn set_degraded(&self, key: &'static str, reason: Option<String>) {
        let mut g = self.degraded.lock().unwrap_or_else(|e| e.into_inner());
        match reason {
            Some(r) => g.insert(key, r),
            None => g.remove(key),
        };
    }

    /// The degraded modes in force, as `key: reason`.
    pub fn degraded(&self) -> Vec<String> {
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
        match (ok, *since) {
            (true, _) => *since = None,
            (false, None) => *since = Some(Instant::now()),
            (false, Some(_)) => {}
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
    pub fn ready(&self) -> Result<(), String> {
        let mut why = Vec::new();
        if self.shutting_down.load(Ordering::Relaxed) {
            why.push("shutting down");
        }
        if !self.cri_reachable.load(Ordering::Relaxed) {
            why.push("container runtime (CRI) not reachable");
        }
        if !self.reconciled.load(Ordering::Relaxed) {
            why.push("first reconcile not done");
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
        doc.degraded = self.degraded();
        doc
    }
}

// ---------------------------------------------------------------------------
// Status document

/// What `/status` serves and `qosd status` shows: node signals against
/// thresholds, conditions, pods by QoS class, recent evictions. The daemon
/// fills it (all fields default, so older/newer readers cope).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatusDoc {
    /// qosd version.
    pub version: String,
    /// Unix time (ms) the daemon produced this document.
    pub generated_at_ms: u64,
    /// `enforce` or `dry-run`.
    pub mode: String,
    /// `v1` / `v2`.
    pub cgroup_version: String,
    /// `cgroupfs` / `systemd`.
    pub cgroup_driver: String,
    /// Filled by the server at request time.
    pub alive: bool,
    /// Filled by the server at request time.
    pub ready: bool,
    pub not_ready_reason: Option<String>,
    pub signals: Vec<SignalStatus>,
    pub conditions: Vec<ConditionStatus>,
    pub pods: PodCounts,
    /// Most recent first, at most [`StatusDoc::MAX_EVICTIONS`].
    pub last_evictions: Vec<EvictionRecord>,
    pub last_reconcile: Option<ReconcileStatus>,
    /// Degraded modes in force (`kubernetes-api: …`): working, with less.
    pub degraded: Vec<String>,
    /// The Kubernetes API side (absent when not configured).
    pub kubernetes: Option<KubeStatus>,
}

/// The Kubernetes API pod source, in `/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KubeStatus {
    /// API server URL and where the config came from.
    pub server: String,
    pub node_name: String,
    /// `synced` (exact specs in use) or `unavailable` (runtime data alone).
    pub state: String,
    pub reason: Option<String>,
    /// Live pods whose values are exact (from the API) / inferred.
    pub pods_exact: usize,
    pub pods_inferred: usize,
    pub relists: u64,
    pub watch_restarts: u64,
}

/// One eviction signal and its thresholds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SignalStatus {
    /// e.g. `memory.available`.
    pub signal: String,
    /// Observed value (bytes, inodes or PIDs); `None` when unavailable.
    pub observed: Option<i64>,
    /// Capacity the signal is measured against.
    pub capacity: Option<i64>,
    pub thresholds: Vec<ThresholdStatus>,
}

/// One threshold of a signal.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThresholdStatus {
    /// `hard` or `soft`.
    pub kind: String,
    /// As configured (`100Mi`, `10%`).
    pub threshold: String,
    /// Resolved to the signal's unit.
    pub value: i64,
    pub met: bool,
    /// Soft thresholds: the grace period (Go duration).
    pub grace_period: Option<String>,
    /// Minimum reclaim, as configured.
    pub min_reclaim: Option<String>,
}

/// A node condition.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConditionStatus {
    /// `MemoryPressure`, `DiskPressure`, `PIDPressure`.
    pub condition: String,
    pub active: bool,
    /// Unix time (ms) of the last transition.
    pub since_ms: Option<u64>,
    pub reason: Option<String>,
}

/// Live pods by QoS class.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodCounts {
    pub guaranteed: usize,
    pub burstable: usize,
    pub best_effort: usize,
}

impl PodCounts {
    pub fn total(&self) -> usize {
        self.guaranteed + self.burstable + self.best_effort
    }
}

/// One eviction qosd made (or would have made, in dry-run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EvictionRecord {
    /// Unix time (ms).
    pub at_ms: u64,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub qos_class: String,
    pub priority: i32,
    pub signal: String,
    pub observed: i64,
    pub threshold: i64,
    /// `hard` or `soft`.
    pub threshold_kind: String,
    pub usage_bytes: Option<i64>,
    pub request_bytes: Option<i64>,
    /// Position in the ranking (0: first).
    pub rank: usize,
    /// `kill`, `cri` or `dry-run`.
    pub backend: String,
    /// Threshold crossing → kill issued.
    pub reaction_ms: Option<f64>,
}

/// The last reconcile pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReconcileStatus {
    /// Unix time (ms) it finished.
    pub at_ms: u64,
    pub duration_ms: f64,
    pub writes: u64,
    pub errors: u64,
    pub pods: usize,
}

impl StatusDoc {
    /// How many evictions `last_evictions` keeps.
    pub const MAX_EVICTIONS: usize = 20;

    /// A document stamped with this version and the current time.
    pub fn new() -> StatusDoc {
        StatusDoc {
            version: env!("CARGO_PKG_VERSION").to_string(),
            generated_at_ms: now_ms(),
            ..StatusDoc::default()
        }
    }

    /// Record an eviction (most recent first, bounded).
    pub fn push_eviction(&mut self, rec: EvictionRecord) {
        self.last_evictions.insert(0, rec);
        self.last_evictions.truncate(Self::MAX_EVICTIONS);
    }
}

impl StatusDoc {
    /// A human-readable table (what `qosd status` prints without `--output json`).
    pub fn to_table(&self, now_ms: u64) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let yes = |b: bool| if b { "yes" } else { "no" };
        let _ = writeln!(
            o,
            "qosd {}  mode {}  cgroup {}/{}  alive {}  ready {}",
            or_dash(&self.version),
            or_dash(&self.mode),
            or_dash(&self.cgroup_version),
            or_dash(&self.cgroup_driver),
            yes(self.alive),
            yes(self.ready),
        );
        if let Some(why) = &self.not_ready_reason {
            let _ = writeln!(o, "not ready: {why}");
        }
        for d in &self.degraded {
            let _ = writeln!(o, "degraded: {d}");
        }
        if let Some(k) = &self.kubernetes {
            let _ = writeln!(
                o,
                "kubernetes API {} ({}): {}  pods exact {} inferred {}",
                or_dash(&k.server),
                or_dash(&k.node_name),
                or_dash(&k.state),
                k.pods_exact,
                k.pods_inferred
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "{:<30} {:>12} {:>12}  THRESHOLDS",
            "SIGNAL", "OBSERVED", "CAPACITY"
        );
        for sig in &self.signals {
            let fmt = |v: Option<i64>| v.map_or("-".to_string(), |v| signal_value(&sig.signal, v));
            let th: Vec<String> = sig
                .thresholds
                .iter()
                .map(|t| {
                    let mut x = format!(
                        "{} <{} ({})",
                        t.kind,
                        t.threshold,
                        signal_value(&sig.signal, t.value)
                    );
                    if let Some(g) = &t.grace_period {
                        x.push_str(&format!(" grace {g}"));
                    }
                    if t.met {
                        x.push_str(" MET");
                    }
                    x
                })
                .collect();
            let _ = writeln!(
                o,
                "{:<30} {:>12} {:>12}  {}",
                sig.signal,
                fmt(sig.observed),
                fmt(sig.capacity),
                if th.is_empty() {
                    "-".to_string()
                } else {
                    th.join(", ")
                }
            );
        }
        let _ = writeln!(o);
        let conds: Vec<String> = self
            .conditions
            .iter()
            .map(|c| {
                format!(
                    "{}={}",
                    c.condition,
                    if c.active { "True" } else { "False" }
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "conditions: {}",
            if conds.is_empty() {
                "-".to_string()
            } else {
                conds.join("  ")
            }
        );
        let _ = writeln!(
            o,
            "pods: Guaranteed {}  Burstable {}  BestEffort {}  (total {})",
            self.pods.guaranteed,
            self.pods.burstable,
            self.pods.best_effort,
            self.pods.total()
        );
        match &self.last_reconcile {
            Some(r) => {
                let _ = writeln!(
                    o,
                    "last reconcile: {} ago, {:.1} ms, {} writes, {} errors, {} pods",
                    ago(now_ms, r.at_ms),
                    r.duration_ms,
                    r.writes,
                    r.errors,
                    r.pods
                );
            }
            None => {
                let _ = writeln!(o, "last reconcile: none yet");
            }
        }
        if self.last_evictions.is_empty() {
            let _ = writeln!(o, "evictions: none");
        } else {
            let _ = writeln!(o, "\nrecent evictions (newest first):");
            let _ = writeln!(
                o,
                "  {:<10} {:<40} {:<11} {:<28} {:>12} {:>12}  BACKEND",
                "WHEN", "POD", "QOS", "SIGNAL", "OBSERVED", "THRESHOLD"
            );
            for e in &self.last_evictions {
                let _ = writeln!(
                    o,
                    "  {:<10} {:<40} {:<11} {:<28} {:>12} {:>12}  {}",
                    ago(now_ms, e.at_ms),
                    format!("{}/{}", e.namespace, e.name),
                    e.qos_class,
                    format!("{} ({})", e.signal, or_dash(&e.threshold_kind)),
                    signal_value(&e.signal, e.observed),
                    signal_value(&e.signal, e.threshold),
                    or_dash(&e.backend)
                );
            }
        }
        o
    }
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// Bytes in binary units for byte signals; plain counts for inodes/PIDs.
fn signal_value(signal: &str, v: i64) -> String {
    if signal.contains("inodes") || signal.starts_with("pid.") {
        return v.to_string();
    }
    const UNITS: [&str; 6] = ["", "Ki", "Mi", "Gi", "Ti", "Pi"];
    let mut x = v as f64;
    let mut u = 0;
    while x.abs() >= 1024.0 && u < UNITS.len() - 1 {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v}")
    } else {
        format!("{x:.1}{}", UNITS[u])
    }
}

fn ago(now_ms: u64, at_ms: u64) -> String {
    if at_ms == 0 {
        return "-".into();
    }
    let d = now_ms.saturating_sub(at_ms);
    match d {
        0..=999 => format!("{d}ms"),
        1000..=119_999 => format!("{}s", d / 1000),
        120_000..=7_199_999 => format!("{}m", d / 60_000),
        _ => format!("{}h", d / 3_600_000),
    }
}

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

// ---------------------------------------------------------------------------
// Server

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
}

/// The routes, for embedding or testing without a socket.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", route_get(metrics_handler))
        .route("/healthz", route_get(healthz))
        .route("/readyz", route_get(readyz))
        .route("/status", route_get(status))
        .with_state(state)
}

async fn metrics_handler(State(s): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        s.metrics.encode(),
    )
        .into_response()
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

async fn status(State(s): State<AppState>) -> Response {
    let body = serde_json::to_string_pretty(&s.health.status())
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    ([(header::CONTENT_TYPE, "application/json")], body + "\n").into_response()
}

/// Serve on an already bound listener until `shutdown` resolves (graceful:
/// in-flight requests finish).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|source| HttpError::Serve { addr, source })
}

/// A running server (see [`spawn`]).
#[derive(Debug)]
pub struct Server {
    local_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), HttpError>>,
}

impl Server {
    /// The bound address (resolves port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
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
pub async fn spawn(addr: SocketAddr, state: AppState) -> Result<Server, HttpError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| HttpError::Bind { addr, source })?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, state, async {
        let _ = rx.await;
    }));
    Ok(Server {
        local_addr,
        stop: Some(tx),
        task,
    })
}

// ---------------------------------------------------------------------------
// Minimal blocking client

/// A response from [`get`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Blocking HTTP/1.1 GET of `path` on `addr` (Connection: close).
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<HttpResponse, HttpError> {
    let err = |source| HttpError::Request {
        addr,
        path: path.to_string(),
        source,
    };
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(err)?;
    s.set_read_timeout(Some(timeout)).map_err(err)?;
    s.set_write_timeout(Some(timeout)).map_err(err)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: qosd\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
    .map_err(err)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(err)?;
    parse_response(&raw).map_err(|m| err(std::io::Error::new(std::io::ErrorKind::InvalidData, m)))
}

fn parse_response(raw: &[u8]) -> Result<HttpResponse, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| "headers not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("empty response")?;
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if chunked {
        body = dechunk(&body)?;
    }
    Ok(HttpResponse {
        status,
        headers,
        body: String::from_utf8(body).map_err(|_| "body not UTF-8")?,
    })
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk size")?;
        let size_text = std::str::from_utf8(&b[..eol]).map_err(|_| "bad chunk size")?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// Fetch a running daemon's `/status`.
pub fn fetch_status(addr: SocketAddr, timeout: Duration) -> Result<StatusDoc, HttpError> {
    let path = "/status";
    let r = get(addr, path, timeout)?;
    if r.status != 200 {
        return Err(HttpError::Status {
            addr,
            path: path.into(),
            status: r.status,
            body: r.body,
        });
    }
    serde_json::from_str(&r.body).map_err(|source| HttpError::Json {
        addr,
        path: path.into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn status_table_shows_signals_pods_and_evictions() {
        let mut d = StatusDoc::new();
        d.mode = "enforce".into();
        d.signals.push(SignalStatus {
            signal: "memory.available".into(),
            observed: Some(50 << 20),
            capacity: Some(8 << 30),
            thresholds: vec![ThresholdStatus {
                kind: "hard".into(),
                threshold: "100Mi".into(),
                value: 100 << 20,
                met: true,
                ..Default::default()
            }],
        });
        d.signals.push(SignalStatus {
            signal: "nodefs.inodesFree".into(),
            observed: Some(12345),
            ..Default::default()
        });
        d.conditions.push(ConditionStatus {
            condition: "MemoryPressure".into(),
            active: true,
            ..Default::default()
        });
        d.pods = PodCounts {
            guaranteed: 1,
            burstable: 2,
            best_effort: 3,
        };
        d.push_eviction(EvictionRecord {
            at_ms: 1_000,
            namespace: "default".into(),
            name: "hog".into(),
            qos_class: "BestEffort".into(),
            signal: "memory.available".into(),
            threshold_kind: "hard".into(),
            observed: 50 << 20,
            threshold: 100 << 20,
            backend: "kill".into(),
            ..Default::default()
        });
        let t = d.to_table(6_000);
        for piece in [
            "mode enforce",
            "memory.available",
            "50.0Mi",
            "8.0Gi",
            "hard <100Mi (100.0Mi) MET",
            "12345",
            "MemoryPressure=True",
            "(total 6)",
            "default/hog",
            "5s",
            "last reconcile: none yet",
        ] {
            assert!(t.contains(piece), "{piece:?} missing from\n{t}");
        }
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

// ---------------------------------------------------------------------------
// systemd notification (Type=notify, WatchdogSec=)

/// sd_notify messages for `systemd/qosd.service`. Every function is a no-op
/// (returning `Ok`) when qosd does not run under systemd (`NOTIFY_SOCKET`
/// unset), so the daemon calls them unconditionally.
pub mod systemd {
    use std::time::Duration;

    use sd_notify::NotifyState;

    /// `READY=1` (after the first successful reconcile) with a status line.
    pub fn ready(status: &str) -> std::io::Result<()> {
        sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(status)])
    }

    /// `WATCHDOG=1`: call at least every [`watchdog_interval`].
    pub fn watchdog() -> std::io::Result<()> {
        sd_notify::notify(&[NotifyState::Watchdog])
    }

    /// `STATUS=…`: a one-line status shown by `systemctl status`.
    pub fn status(status: &str) -> std::io::Result<()> {
        sd_notify::notify(&[NotifyState::Status(status)])
    }

    /// `RELOADING=1` before re-reading the config on SIGHUP; send
    /// [`ready`] when done.
    pub fn reloading() -> std::io::Result<()> {
        sd_notify::notify(&[NotifyState::Reloading])
    }

    /// `STOPPING=1` on SIGTERM.
    pub fn stopping() -> std::io::Result<()> {
        sd_notify::notify(&[NotifyState::Stopping])
    }

    /// How often to send [`watchdog`]: half of `WATCHDOG_USEC`, or `None`
    /// when the watchdog is off (not under systemd, or no `WatchdogSec=`).
    pub fn watchdog_interval() -> Option<Duration> {
        sd_notify::watchdog_enabled().map(|d| d / 2)
    }
}
