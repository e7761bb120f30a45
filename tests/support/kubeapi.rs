//! A faithful fake of the Kubernetes API server's pod, eviction, event and
//! delete endpoints, for tests (no API server can be installed on these
//! machines). Use from a test file with `mod support;` then
//! `support::kubeapi::FakeApi`.
//!
//! * TLS with a CA made here (rcgen), server certificate for 127.0.0.1 and
//!   localhost; every request needs `Authorization: Bearer <token>` (401
//!   with a `Status` otherwise).
//! * `GET /api/v1/pods`: list with `resourceVersion`, `limit`/`continue`
//!   paging and the `spec.nodeName` field selector (other selectors: 400).
//! * `GET /api/v1/pods?watch=1&resourceVersion=R`: a chunked stream of
//!   newline-delimited events after R (each event split over two chunks),
//!   then live ones; `BOOKMARK`s on request ([`FakeApi::bookmark`]) or
//!   periodically ([`FakeApi::bookmark_every`], as the watch cache does
//!   once a minute); `timeoutSeconds` honoured; a version older than the
//!   compaction point ([`FakeApi::expire`]) gets what a real server sends —
//!   HTTP 200, one `ERROR` event (`Status` 410 `Expired`, "too old
//!   resource version: R (C)"), end of stream — and so do live watches;
//!   [`FakeApi::drop_watches`] cuts every open stream mid-event;
//!   [`FakeApi::stall_watches`] makes them silent (no FIN, no reset);
//!   [`FakeApi::close_watches_at_once`] answers watches with an empty
//!   stream.
//! * List `continue` tokens expire ([`FakeApi::expire_continue_tokens`]):
//!   410 `Expired` with etcd's message and a fresh token.
//! * `POST …/pods/{name}/eviction` (policy/v1): answers as scripted
//!   ([`Answer`]): 201 (also late), 429 from a disruption budget (with or
//!   without `Retry-After`, the real message and cause), 429 from API
//!   Priority and Fairness (plain text, `Retry-After`), 404, 500, or no
//!   answer; the uid precondition (409 with the real message); an accepted
//!   eviction adds the `DisruptionTarget` condition and deletes the pod
//!   gracefully.
//! * Deletion as the API server does it: the grace from DeleteOptions or
//!   the pod; grace 0 without finalizers removes the object at once (a
//!   force delete), otherwise it stays, deleting, until the kubelet
//!   confirms ([`FakeApi::kubelet_finishes`]) and finalizers are gone.
//! * `PATCH …/pods/{name}/status` (strategic merge patch): uid
//!   precondition, conditions merged by type, no way back from a terminal
//!   phase; recorded ([`FakeApi::status_patches`]).
//! * `POST …/namespaces/{ns}/events`: recorded, 201.
//! * `DELETE …/pods/{name}`: graceful deletion as above, uid precondition
//!   (409 on mismatch), 404 when absent.
//! * Throttling ([`FakeApi::throttle_requests`]): 429 with `Retry-After`
//!   and a plain-text body, as API Priority and Fairness answers; slow
//!   TLS handshakes ([`FakeApi::slow_handshakes`]).
//! * Every request body is checked against the API's schema (required
//!   fields, types, no unknown fields as with `fieldValidation=Strict`):
//!   an invalid one is answered 400/422 and recorded in
//!   [`FakeApi::schema_errors`], which tests assert empty.
//! * [`FakeApi::go_away`] closes every stream and refuses new requests
//!   (connections are dropped) until [`FakeApi::come_back`].
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response};
use serde_json::{json, Value};

type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;
type FrameTx = tokio::sync::mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>;

/// How the eviction endpoint answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 201 Created: the pod is deleted with the eviction's grace.
    Created,
    /// 429 TooManyRequests with the PodDisruptionBudget message (no
    /// disruption allowed: no Retry-After).
    TooManyRequests,
    /// 429 from a budget the server is still processing: the same
    /// message, `retryAfterSeconds` 10 and `Retry-After: 10`.
    PdbProcessing,
    /// 429 from API Priority and Fairness: plain text, `Retry-After: N`.
    Throttled(u64),
    /// Created, answered after this long (the effect happens then too).
    Late(Duration),
    /// 404 NotFound.
    NotFound,
    /// 500 InternalError.
    ServerError,
    /// Never answers (the connection stays open).
    Hang,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Option<Value>,
    pub status: u16,
}

struct Watcher {
    node: Option<String>,
    tx: FrameTx,
    /// The version the watch started from.
    from: u64,
}

fn bookmark_all(s: &mut State) {
    let obj = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": s.rv.to_string()}});
    let line = event_line("BOOKMARK", &obj);
    s.watchers.retain(|w| send_event(&w.tx, &line));
}

/// The watch cache's answer to a version older than its window.
fn too_old(from: u64, below: u64) -> Value {
    status(
        410,
        "Expired",
        &format!(
            "too old resource version: {from} ({})",
            below.saturating_sub(1)
        ),
    )
}

/// etcd's answer to an expired continue token.
const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

#[derive(Default)]
struct State {
    pods: BTreeMap<String, Value>,
    rv: u64,
    /// (rv, type, object) of every change.
    history: Vec<(u64, String, Value)>,
    compacted_below: u64,
    watchers: Vec<Watcher>,
    script: VecDeque<Answer>,
    default_answer: Option<Answer>,
    requests: Vec<Recorded>,
    evictions: Vec<(String, String, Value, u16)>,
    /// When each eviction request arrived.
    eviction_times: Vec<std::time::Instant>,
    events: Vec<Value>,
    deletes: Vec<(String, String, Value)>,
    schema_errors: Vec<String>,
    down: bool,
    /// Streams that went silent ([`FakeApi::stall_watches`]): kept open,
    /// never written to again.
    stalled: Vec<FrameTx>,
    /// Continue tokens carry this; [`FakeApi::expire_continue_tokens`]
    /// bumps it.
    continue_epoch: u64,
    /// Bump `continue_epoch` after serving this many more list pages.
    expire_continue_after: Option<usize>,
    /// (requests left, Retry-After seconds): throttle every request but
    /// watches, as API Priority and Fairness does.
    throttle: Option<(usize, u64)>,
    /// (namespace, name, patch) of every accepted status patch.
    status_patches: Vec<(String, String, Value)>,
    /// Wait this long before the TLS handshake of each new connection.
    handshake_delay: Duration,
    /// Watches are answered 200 and closed at once, with nothing.
    close_watches_at_once: bool,
}

/// The fake API server (see the module docs).
pub struct FakeApi {
    pub addr: SocketAddr,
    pub ca_pem: String,
    pub token: String,
    state: Arc<Mutex<State>>,
    /// The server's runtime (timers the fake runs itself).
    rt: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": if code < 400 { "Success" } else { "Failure" },
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn full(code: u16, v: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(
            Full::new(Bytes::from(serde_json::to_vec(v).unwrap()))
                .map_err(|e: Infallible| match e {})
                .boxed(),
        )
        .unwrap()
}

fn node_of(pod: &Value) -> Option<&str> {
    pod.pointer("/spec/nodeName").and_then(|v| v.as_str())
}

fn rv_of(pod: &Value) -> u64 {
    pod.pointer("/metadata/resourceVersion")
        .and_then(|v| v.as_str())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn event_line(kind: &str, obj: &Value) -> Vec<u8> {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap();
    v.push(b'\n');
    v
}

/// Send one event split over two chunks (chunk boundaries never align with
/// lines on a real server either).
fn send_event(tx: &FrameTx, line: &[u8]) -> bool {
    let mid = line.len() / 2;
    tx.try_send(Ok(Frame::data(Bytes::copy_from_slice(&line[..mid]))))
        .is_ok()
        && tx
            .try_send(Ok(Frame::data(Bytes::copy_from_slice(&line[mid..]))))
            .is_ok()
}

// ---------------------------------------------------------------- schema

#[derive(Clone, Copy)]
enum Ty {
    Str,
    Int,
    Obj,
    Bool,
    Arr,
}

/// Check `v` has the `required` fields with their types, `optional` ones
/// typed when present, and nothing else (strict field validation).
fn check(
    what: &str,
    v: &Value,
    required: &[(&str, Ty)],
    optional: &[(&str, Ty)],
    errors: &mut Vec<String>,
) {
    let Some(obj) = v.as_object() else {
        errors.push(format!("{what}: not an object"));
        return;
    };
    let ok = |x: &Value, t: Ty| match t {
        Ty::Str => x.is_string(),
        Ty::Int => x.is_i64() || x.is_u64(),
        Ty::Obj => x.is_object(),
        Ty::Bool => x.is_boolean(),
        Ty::Arr => x.is_array(),
    };
    for (k, t) in required {
        match obj.get(*k) {
            None | Some(Value::Null) => errors.push(format!("{what}: required field {k} missing")),
            Some(x) if !ok(x, *t) => errors.push(format!("{what}: field {k} has the wrong type")),
            _ => {}
        }
    }
    for (k, t) in optional {
        if let Some(x) = obj.get(*k) {
            if !x.is_null() && !ok(x, *t) {
                errors.push(format!("{what}: field {k} has the wrong type"));
            }
        }
    }
    for k in obj.keys() {
        if !required.iter().chain(optional).any(|(n, _)| n == k) {
            errors.push(format!("{what}: unknown field {k:?}"));
        }
    }
}

const META: &[(&str, Ty)] = &[
    ("name", Ty::Str),
    ("generateName", Ty::Str),
    ("namespace", Ty::Str),
    ("uid", Ty::Str),
    ("labels", Ty::Obj),
    ("annotations", Ty::Obj),
];

fn check_delete_options(what: &str, v: &Value, errors: &mut Vec<String>) {
    check(
        what,
        v,
        &[],
        &[
            ("apiVersion", Ty::Str),
            ("kind", Ty::Str),
            ("gracePeriodSeconds", Ty::Int),
            ("preconditions", Ty::Obj),
            ("propagationPolicy", Ty::Str),
            ("orphanDependents", Ty::Bool),
            ("dryRun", Ty::Obj),
        ],
        errors,
    );
    if let Some(k) = v.get("kind").and_then(|k| k.as_str()) {
        if k != "DeleteOptions" {
            errors.push(format!("{what}: kind {k:?} is not DeleteOptions"));
        }
    }
    if let Some(g) = v.get("gracePeriodSeconds").and_then(|g| g.as_i64()) {
        if g < 0 {
            errors.push(format!("{what}: gracePeriodSeconds {g} < 0"));
        }
    }
    if let Some(p) = v.get("preconditions") {
        check(
            &format!("{what}.preconditions"),
            p,
            &[],
            &[("uid", Ty::Str), ("resourceVersion", Ty::Str)],
            errors,
        );
    }
}

fn check_eviction(v: &Value, name: &str, ns: &str, errors: &mut Vec<String>) {
    check(
        "Eviction",
        v,
        &[
            ("apiVersion", Ty::Str),
            ("kind", Ty::Str),
            ("metadata", Ty::Obj),
        ],
        &[("deleteOptions", Ty::Obj)],
        errors,
    );
    if v.get("apiVersion").and_then(|x| x.as_str()) != Some("policy/v1") {
        errors.push("Eviction: apiVersion is not policy/v1".into());
    }
    if v.get("kind").and_then(|x| x.as_str()) != Some("Eviction") {
        errors.push("Eviction: kind is not Eviction".into());
    }
    if let Some(m) = v.get("metadata") {
        check("Eviction.metadata", m, &[("name", Ty::Str)], META, errors);
        if m.get("name").and_then(|x| x.as_str()) != Some(name) {
            errors.push(format!(
                "Eviction: metadata.name does not match the pod {name:?}"
            ));
        }
        if let Some(n) = m.get("namespace").and_then(|x| x.as_str()) {
            if n != ns {
                errors.push(format!("Eviction: metadata.namespace {n:?} is not {ns:?}"));
            }
        }
    }
    if let Some(d) = v.get("deleteOptions") {
        check_delete_options("Eviction.deleteOptions", d, errors);
    }
}

fn check_event(v: &Value, ns: &str, errors: &mut Vec<String>) {
    check(
        "Event",
        v,
        &[
            ("metadata", Ty::Obj),
            ("involvedObject", Ty::Obj),
            ("reason", Ty::Str),
            ("message", Ty::Str),
            ("type", Ty::Str),
            ("source", Ty::Obj),
            ("firstTimestamp", Ty::Str),
            ("lastTimestamp", Ty::Str),
            ("count", Ty::Int),
        ],
        &[
            ("apiVersion", Ty::Str),
            ("kind", Ty::Str),
            ("reportingComponent", Ty::Str),
            ("reportingInstance", Ty::Str),
            ("action", Ty::Str),
            ("eventTime", Ty::Str),
        ],
        errors,
    );
    if let Some(m) = v.get("metadata") {
        check("Event.metadata", m, &[], META, errors);
        if m.get("name").is_none() && m.get("generateName").is_none() {
            errors.push("Event.metadata: name or generateName required".into());
        }
        if m.get("namespace")
            .and_then(|x| x.as_str())
            .is_some_and(|n| n != ns)
        {
            errors.push("Event.metadata.namespace does not match the URL".into());
        }
    }
    if let Some(o) = v.get("involvedObject") {
        check(
            "Event.involvedObject",
            o,
            &[
                ("kind", Ty::Str),
                ("name", Ty::Str),
                ("namespace", Ty::Str),
                ("uid", Ty::Str),
            ],
            &[
                ("apiVersion", Ty::Str),
                ("resourceVersion", Ty::Str),
                ("fieldPath", Ty::Str),
            ],
            errors,
        );
    }
    if let Some(s) = v.get("source") {
        check(
            "Event.source",
            s,
            &[("component", Ty::Str)],
            &[("host", Ty::Str)],
            errors,
        );
    }
    match v.get("type").and_then(|t| t.as_str()) {
        Some("Normal") | Some("Warning") | None => {}
        Some(t) => errors.push(format!("Event: type {t:?} is neither Normal nor Warning")),
    }
    for k in ["firstTimestamp", "lastTimestamp"] {
        if let Some(t) = v.get(k).and_then(|t| t.as_str()) {
            // RFC 3339, seconds precision, UTC: 2006-01-02T15:04:05Z
            let b = t.as_bytes();
            let shape = b.len() == 20 && b[4] == b'-' && b[10] == b'T' && b[19] == b'Z';
            if !shape {
                errors.push(format!("Event: {k} {t:?} is not RFC 3339 (UTC, seconds)"));
            }
        }
    }
}

// ---------------------------------------------------------------- server

impl FakeApi {
    /// Start on 127.0.0.1 (a free port) with a fresh CA and token.
    pub fn start() -> FakeApi {
        let (ca_pem, cert_pem, key_pem) = make_certs();
        let token = format!("qosd-test-token-{}", std::process::id());
        let state = Arc::new(Mutex::new(State {
            rv: 1000,
            ..Default::default()
        }));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let st = state.clone();
        let tok = token.clone();
        let thread = std::thread::Builder::new()
            .name("fake-kube-api".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap();
                let handle = rt.handle().clone();
                rt.block_on(serve(st, tok, cert_pem, key_pem, addr_tx, handle, stop_rx));
                rt.shutdown_timeout(Duration::from_millis(100));
            })
            .unwrap();
        let (addr, rt) = addr_rx.recv().expect("fake API server did not start");
        FakeApi {
            addr,
            ca_pem,
            token,
            state,
            rt,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn server(&self) -> String {
        format!("https://{}", self.addr)
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// Write a kubeconfig (CA data + bearer token) into `dir`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: fake\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\ncontexts:\n- name: test\n  context:\n    cluster: fake\n    user: qosd\nusers:\n- name: qosd\n  user:\n    token: {}\n",
            self.server(),
            self.token
        );
        let p = dir.join("kubeconfig");
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Add (or replace) a pod; assigns a resourceVersion and notifies watches.
    pub fn put_pod(&self, mut pod: Value) {
        self.with(|s| {
            s.rv += 1;
            pod["metadata"]["resourceVersion"] = json!(s.rv.to_string());
            let uid = pod["metadata"]["uid"]
                .as_str()
                .expect("pod uid")
                .to_string();
            let kind = if s.pods.contains_key(&uid) {
                "MODIFIED"
            } else {
                "ADDED"
            };
            s.pods.insert(uid, pod.clone());
            notify(s, kind, pod);
        })
    }

    /// Remove a pod (a `DELETED` event).
    pub fn remove_pod(&self, uid: &str) {
        self.with(|s| remove(s, uid));
    }

    pub fn pod(&self, uid: &str) -> Option<Value> {
        self.with(|s| s.pods.get(uid).cloned())
    }

    /// Answer the next evictions with these, then with the default.
    pub fn script_evictions(&self, answers: &[Answer]) {
        self.with(|s| s.script.extend(answers.iter().copied()));
    }

    /// The answer once the script is used up (initially [`Answer::Created`]).
    pub fn default_eviction_answer(&self, a: Answer) {
        self.with(|s| s.default_answer = Some(a));
    }

    /// Send a BOOKMARK with the current version on every open watch.
    pub fn bookmark(&self) {
        self.with(bookmark_all)
    }

    /// Compact history: a watch from an older version gets, as from a
    /// real server's watch cache, HTTP 200 and one `ERROR` event (a
    /// `Status` with code 410, reason `Expired`, "too old resource
    /// version: R (C)"), then the stream ends; open watches get the same
    /// event and end.
    pub fn expire(&self) {
        self.with(|s| {
            s.compacted_below = s.rv + 1;
            s.history.clear();
            let below = s.compacted_below;
            for w in s.watchers.drain(..) {
                let line = event_line("ERROR", &too_old(w.from, below));
                let _ = send_event(&w.tx, &line);
            }
        })
    }

    /// Every open watch goes silent: no more bytes (events, bookmarks), no
    /// FIN, no reset — a host lost or a proxy that stopped forwarding.
    pub fn stall_watches(&self) {
        self.with(|s| {
            let stalled: Vec<FrameTx> = s.watchers.drain(..).map(|w| w.tx).collect();
            s.stalled.extend(stalled);
        })
    }

    /// How many streams are silent and still open.
    pub fn stalled_watches(&self) -> usize {
        self.with(|s| {
            s.stalled.retain(|tx| !tx.is_closed());
            s.stalled.len()
        })
    }

    /// Send a BOOKMARK on every open watch every `every`, as a real
    /// server's watch cache does about once a minute.
    pub fn bookmark_every(&self, every: Duration) {
        let state = Arc::downgrade(&self.state);
        self.rt.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(state) = state.upgrade() else { return };
                bookmark_all(&mut state.lock().unwrap());
            }
        });
    }

    /// Every `continue` token handed out so far expires: using one gets
    /// 410 `Expired` with a fresh (inconsistent) token, as from etcd after
    /// a compaction.
    pub fn expire_continue_tokens(&self) {
        self.with(|s| s.continue_epoch += 1);
    }

    /// [`FakeApi::expire_continue_tokens`] once `pages` more list pages
    /// have been served (between two pages of one list).
    pub fn expire_continue_tokens_after(&self, pages: usize) {
        self.with(|s| s.expire_continue_after = Some(pages));
    }

    /// Make every new connection's TLS handshake wait this long (a slow or
    /// distant server: connecting takes time, answering does not).
    pub fn slow_handshakes(&self, delay: Duration) {
        self.with(|s| s.handshake_delay = delay);
    }

    /// Throttle the next `n` requests (watches excepted) with API Priority
    /// and Fairness' 429 and `Retry-After: retry_after`.
    pub fn throttle_requests(&self, n: usize, retry_after: u64) {
        self.with(|s| s.throttle = (n > 0).then_some((n, retry_after)));
    }

    /// The kubelet confirms the pod's containers stopped: it deletes the
    /// object with grace 0 (kept while finalizers remain).
    pub fn kubelet_finishes(&self, uid: &str) {
        self.with(|s| {
            if s.pods.contains_key(uid) {
                graceful_delete(s, uid, Some(0));
            }
        })
    }

    /// Remove a pod's finalizers; a pod being deleted then goes.
    pub fn remove_finalizers(&self, uid: &str) {
        self.with(|s| {
            let Some(p) = s.pods.get_mut(uid) else { return };
            p["metadata"]["finalizers"] = json!([]);
            let deleting_now = p["metadata"]["deletionGracePeriodSeconds"] == json!(0);
            if deleting_now {
                remove(s, uid);
            }
        })
    }

    /// (namespace, name, patch) of every accepted `pods/status` patch.
    pub fn status_patches(&self) -> Vec<(String, String, Value)> {
        self.with(|s| s.status_patches.clone())
    }

    /// Answer every watch with 200 and an empty stream that ends at once
    /// (a server or proxy closing watches immediately).
    pub fn close_watches_at_once(&self, on: bool) {
        self.with(|s| s.close_watches_at_once = on);
    }

    /// Write a kubeconfig with this `user:` mapping (YAML flow) and extra
    /// `cluster:` keys, e.g. `("{tokenFile: /t}", ", tls-server-name: x")`.
    pub fn kubeconfig_with(&self, dir: &Path, user: &str, cluster_extra: &str) -> PathBuf {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: fake\n  cluster: {{server: '{}', certificate-authority-data: '{ca}'{cluster_extra}}}\ncontexts:\n- name: test\n  context: {{cluster: fake, user: qosd}}\nusers:\n- name: qosd\n  user: {user}\n",
            self.server(),
        );
        let p = dir.join("kubeconfig");
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Cut every open watch in the middle of an event.
    pub fn drop_watches(&self) {
        self.with(|s| {
            for w in s.watchers.drain(..) {
                let _ =
                    w.tx.try_send(Ok(Frame::data(Bytes::from_static(b"{\"type\":\"MODIF"))));
                let _ =
                    w.tx.try_send(Err(std::io::Error::other("fake API: watch dropped")));
            }
        })
    }

    /// Stop answering: streams cut, new connections dropped.
    pub fn go_away(&self) {
        self.with(|s| s.down = true);
        self.drop_watches();
    }

    pub fn come_back(&self) {
        self.with(|s| s.down = false);
    }

    pub fn open_watches(&self) -> usize {
        self.with(|s| {
            s.watchers.retain(|w| !w.tx.is_closed());
            s.watchers.len()
        })
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.with(|s| s.requests.clone())
    }

    /// (namespace, name, body, status answered)
    pub fn evictions(&self) -> Vec<(String, String, Value, u16)> {
        self.with(|s| s.evictions.clone())
    }

    /// When each of [`FakeApi::evictions`] arrived.
    pub fn eviction_times(&self) -> Vec<std::time::Instant> {
        self.with(|s| s.eviction_times.clone())
    }

    pub fn events(&self) -> Vec<Value> {
        self.with(|s| s.events.clone())
    }

    /// (namespace, name, DeleteOptions body)
    pub fn deletes(&self) -> Vec<(String, String, Value)> {
        self.with(|s| s.deletes.clone())
    }

    pub fn schema_errors(&self) -> Vec<String> {
        self.with(|s| s.schema_errors.clone())
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.with(|s| {
            s.watchers.clear();
            s.stalled.clear();
        });
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn notify(s: &mut State, kind: &str, obj: Value) {
    let rv = rv_of(&obj);
    s.history.push((rv, kind.to_string(), obj.clone()));
    let line = event_line(kind, &obj);
    let node = node_of(&obj).map(str::to_string);
    s.watchers.retain(|w| {
        if w.node.is_some() && w.node != node {
            return !w.tx.is_closed();
        }
        send_event(&w.tx, &line)
    });
}

fn remove(s: &mut State, uid: &str) -> Option<Value> {
    let mut pod = s.pods.remove(uid)?;
    s.rv += 1;
    pod["metadata"]["resourceVersion"] = json!(s.rv.to_string());
    notify(s, "DELETED", pod.clone());
    Some(pod)
}

fn make_certs() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "qosd-test-kubernetes-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

async fn serve(
    state: Arc<Mutex<State>>,
    token: String,
    cert_pem: String,
    key_pem: String,
    addr_tx: std::sync::mpsc::Sender<(SocketAddr, tokio::runtime::Handle)>,
    rt_handle: tokio::runtime::Handle,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    addr_tx
        .send((listener.local_addr().unwrap(), rt_handle))
        .unwrap();
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => match r { Ok(x) => x, Err(_) => continue },
            _ = &mut stop => return,
        };
        if state.lock().unwrap().down {
            drop(tcp);
            continue;
        }
        let acceptor = acceptor.clone();
        let state = state.clone();
        let token = token.clone();
        tokio::spawn(async move {
            let delay = state.lock().unwrap().handshake_delay;
            tokio::time::sleep(delay).await;
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let svc = hyper::service::service_fn(move |req| {
                let state = state.clone();
                let token = token.clone();
                async move {
                    // A server that went away answers nothing, on kept-alive
                    // connections too: the connection is closed unanswered.
                    if state.lock().unwrap().down {
                        return Err(std::io::Error::other("fake API: gone away"));
                    }
                    Ok(handle(state, &token, req).await)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                .await;
        });
    }
}

fn query_map(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k.to_string(), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(x) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(x);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The node a field selector asks for: `Ok(None)` no selector, `Err` unsupported.
fn node_selector(q: &BTreeMap<String, String>) -> Result<Option<String>, String> {
    let Some(sel) = q.get("fieldSelector").filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let (k, v) = sel
        .split_once("==")
        .or_else(|| sel.split_once('='))
        .ok_or_else(|| format!("invalid field selector {sel:?}"))?;
    if k != "spec.nodeName" || v.contains(',') {
        return Err(format!(
            "field label not supported by the fake: {sel:?} (only spec.nodeName=NODE)"
        ));
    }
    Ok(Some(v.to_string()))
}

/// One request as parsed: what the routes need.
struct Req {
    method: String,
    path: String,
    query: String,
    content_type: String,
    body: Option<Value>,
}

impl Req {
    fn record(&self, code: u16) -> Recorded {
        Recorded {
            method: self.method.clone(),
            path: self.path.clone(),
            query: self.query.clone(),
            body: self.body.clone(),
            status: code,
        }
    }
}

/// A route's answer: a JSON body, or a full response (streams, plain text).
enum Reply {
    Json(u16, Value),
    Raw(Response<Body>),
}

async fn handle(state: Arc<Mutex<State>>, token: &str, req: Request<Incoming>) -> Response<Body> {
    let header = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let authorized = header("authorization") == format!("Bearer {token}");
    let content_type = header("content-type");
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let bytes = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let body: Option<Value> = if bytes.is_empty() {
        None
    } else {
        match serde_json::from_slice(&bytes) {
            Ok(v) => Some(v),
            Err(e) => {
                let mut s = state.lock().unwrap();
                s.schema_errors
                    .push(format!("{method} {path}: body is not JSON: {e}"));
                return full(400, &status(400, "BadRequest", "body is not JSON"));
            }
        }
    };
    let r = Req {
        method,
        path,
        query,
        content_type,
        body,
    };
    if !authorized {
        state.lock().unwrap().requests.push(r.record(401));
        return full(401, &status(401, "Unauthorized", "Unauthorized"));
    }
    let is_watch = query_map(&r.query)
        .get("watch")
        .is_some_and(|w| w == "1" || w == "true");
    if !is_watch {
        if let Some(resp) = throttled(&state, &r) {
            return resp;
        }
    }
    match route(&state, &r).await {
        Reply::Json(code, v) => {
            state.lock().unwrap().requests.push(r.record(code));
            full(code, &v)
        }
        Reply::Raw(resp) => {
            let code = resp.status().as_u16();
            state.lock().unwrap().requests.push(r.record(code));
            resp
        }
    }
}

/// API Priority and Fairness rejecting a request: 429, `Retry-After`, a
/// plain-text body (not a `Status`), the flow-control headers.
fn throttled(state: &Arc<Mutex<State>>, r: &Req) -> Option<Response<Body>> {
    let mut s = state.lock().unwrap();
    let (left, retry_after) = s.throttle?;
    s.throttle = (left > 1).then_some((left - 1, retry_after));
    s.requests.push(r.record(429));
    Some(apf_429(retry_after))
}

fn apf_429(retry_after: u64) -> Response<Body> {
    Response::builder()
        .status(429)
        .header("content-type", "text/plain; charset=utf-8")
        .header("x-content-type-options", "nosniff")
        .header("retry-after", retry_after.to_string())
        .header("x-kubernetes-pf-flowschema-uid", "fake-flowschema")
        .header("x-kubernetes-pf-prioritylevel-uid", "fake-prioritylevel")
        .body(
            Full::new(Bytes::from_static(
                b"Too many requests, please try again later.\n",
            ))
            .map_err(|e: Infallible| match e {})
            .boxed(),
        )
        .unwrap()
}

async fn route(state: &Arc<Mutex<State>>, r: &Req) -> Reply {
    let q = query_map(&r.query);
    let segs: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    match (r.method.as_str(), segs.as_slice()) {
        ("GET", ["api", "v1", "pods"]) => {
            if q.get("watch").is_some_and(|w| w == "1" || w == "true") {
                return Reply::Raw(watch(state, &q));
            }
            let (c, v) = list(state, &q);
            Reply::Json(c, v)
        }
        ("GET", ["api", "v1", "namespaces", ns, "pods", name]) => {
            let s = state.lock().unwrap();
            match find(&s, ns, name) {
                Some(uid) => Reply::Json(200, s.pods[&uid].clone()),
                None => Reply::Json(404, not_found(name)),
            }
        }
        ("POST", ["api", "v1", "namespaces", ns, "pods", name, "eviction"]) => {
            evict_route(state, r, ns, name).await
        }
        ("POST", ["api", "v1", "namespaces", ns, "events"]) => {
            let mut errors = Vec::new();
            match &r.body {
                Some(b) => check_event(b, ns, &mut errors),
                None => errors.push("Event: no body".into()),
            }
            let mut s = state.lock().unwrap();
            if !errors.is_empty() {
                s.schema_errors.extend(errors.iter().cloned());
                Reply::Json(422, status(422, "Invalid", &errors.join("; ")))
            } else {
                let ev = r.body.clone().unwrap();
                s.events.push(ev.clone());
                Reply::Json(201, ev)
            }
        }
        ("DELETE", ["api", "v1", "namespaces", ns, "pods", name]) => {
            delete_route(state, r, ns, name)
        }
        ("PATCH", ["api", "v1", "namespaces", ns, "pods", name, "status"]) => {
            patch_status_route(state, r, ns, name)
        }
        _ => Reply::Json(
            404,
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        ),
    }
}

fn not_found(name: &str) -> Value {
    status(404, "NotFound", &format!("pods \"{name}\" not found"))
}

/// The uid of the pod `ns/name`.
fn find(s: &State, ns: &str, name: &str) -> Option<String> {
    s.pods
        .iter()
        .find(|(_, p)| {
            p["metadata"]["namespace"] == json!(ns) && p["metadata"]["name"] == json!(name)
        })
        .map(|(u, _)| u.clone())
}

/// The storage layer's uid precondition failure (delete, status patch).
fn uid_precondition_failed(want: &str, uid: &str) -> Value {
    status(
        409,
        "Conflict",
        &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
    )
}

async fn evict_route(state: &Arc<Mutex<State>>, r: &Req, ns: &str, name: &str) -> Reply {
    let mut errors = Vec::new();
    match &r.body {
        Some(b) => check_eviction(b, name, ns, &mut errors),
        None => errors.push("Eviction: no body".into()),
    }
    let body_v = r.body.clone().unwrap_or(Value::Null);
    if !errors.is_empty() {
        let mut s = state.lock().unwrap();
        s.schema_errors.extend(errors.iter().cloned());
        return Reply::Json(422, status(422, "Invalid", &errors.join("; ")));
    }
    let answer = {
        let mut s = state.lock().unwrap();
        s.script
            .pop_front()
            .or(s.default_answer)
            .unwrap_or(Answer::Created)
    };
    let push = |code: u16| {
        let mut s = state.lock().unwrap();
        s.eviction_times.push(std::time::Instant::now());
        s.evictions
            .push((ns.to_string(), name.to_string(), body_v.clone(), code))
    };
    let (code, v) = match answer {
        Answer::Hang => {
            push(0);
            std::future::pending::<()>().await;
            unreachable!()
        }
        Answer::Late(after) => {
            push(0);
            tokio::time::sleep(after).await;
            let (code, v) = evict_now(state, ns, name, &body_v);
            state.lock().unwrap().evictions.last_mut().unwrap().3 = code;
            return Reply::Json(code, v);
        }
        Answer::Created => evict_now(state, ns, name, &body_v),
        Answer::TooManyRequests => (429, pdb_refusal(0)),
        Answer::PdbProcessing => (429, pdb_refusal(10)),
        Answer::Throttled(secs) => {
            push(429);
            return Reply::Raw(apf_429(secs));
        }
        Answer::NotFound => (404, not_found(name)),
        Answer::ServerError => (
            500,
            status(
                500,
                "InternalError",
                "Internal error occurred: fake API: scripted failure",
            ),
        ),
    };
    push(code);
    if code == 429 {
        if let Some(secs) = v
            .pointer("/details/retryAfterSeconds")
            .and_then(|s| s.as_u64())
        {
            let mut resp = full(429, &v);
            resp.headers_mut()
                .insert("retry-after", secs.to_string().parse().unwrap());
            return Reply::Raw(resp);
        }
    }
    Reply::Json(code, v)
}

/// A PodDisruptionBudget refusal (`retry_after` 0: no disruption allowed;
/// 10: the budget is still being processed).
fn pdb_refusal(retry_after: u64) -> Value {
    let mut v = status(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    let cause = if retry_after == 0 {
        "The disruption budget test-pdb needs 1 healthy pods and has 1 currently".to_string()
    } else {
        "The disruption budget test-pdb is still being processed by the server.".to_string()
    };
    v["details"] = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
    if retry_after > 0 {
        v["details"]["retryAfterSeconds"] = json!(retry_after);
    }
    v
}

/// The Eviction subresource accepting: uid precondition, the
/// `DisruptionTarget` condition (EvictionByEvictionAPI), then the pod's
/// graceful delete with the eviction's DeleteOptions.
fn evict_now(state: &Arc<Mutex<State>>, ns: &str, name: &str, body: &Value) -> (u16, Value) {
    let mut s = state.lock().unwrap();
    let Some(uid) = find(&s, ns, name) else {
        return (404, not_found(name));
    };
    if let Some(want) = body
        .pointer("/deleteOptions/preconditions/uid")
        .and_then(|u| u.as_str())
    {
        if want != uid {
            return (
                409,
                status(409, "Conflict", &format!("Operation cannot be fulfilled on Pod \"{name}\": the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated")),
            );
        }
    }
    let p = s.pods.get_mut(&uid).unwrap();
    if p["metadata"].get("deletionTimestamp").is_none() {
        set_condition(
            p,
            json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting", "lastTransitionTime": "2030-01-01T00:00:00Z"}),
        );
    }
    let grace = body
        .pointer("/deleteOptions/gracePeriodSeconds")
        .and_then(|g| g.as_i64());
    graceful_delete(&mut s, &uid, grace);
    (
        201,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}

/// Merge a condition into a pod's status by type.
fn set_condition(pod: &mut Value, cond: Value) {
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    let list = pod["status"]
        .as_object_mut()
        .unwrap()
        .entry("conditions")
        .or_insert_with(|| json!([]));
    let arr = list.as_array_mut().unwrap();
    match arr.iter_mut().find(|c| c["type"] == cond["type"]) {
        Some(c) => *c = cond,
        None => arr.push(cond),
    }
}

/// A pod's graceful deletion as the API server does it: the grace is the
/// request's, else the pod's terminationGracePeriodSeconds (30 by
/// default); 0 for a pod not scheduled or already terminal; a negative one
/// becomes 1. Grace 0 without finalizers removes the object at once (a
/// force delete); otherwise the object stays, with deletionTimestamp and
/// deletionGracePeriodSeconds, until the kubelet confirms its containers
/// stopped ([`FakeApi::kubelet_finishes`]) and every finalizer is gone.
fn graceful_delete(s: &mut State, uid: &str, requested: Option<i64>) {
    let p = &s.pods[uid];
    let mut grace = requested
        .or_else(|| {
            p.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(|g| g.as_i64())
        })
        .unwrap_or(30);
    let phase = p
        .pointer("/status/phase")
        .and_then(|x| x.as_str())
        .unwrap_or("");
    if node_of(p).unwrap_or("").is_empty() || phase == "Failed" || phase == "Succeeded" {
        grace = 0;
    }
    if grace < 0 {
        grace = 1;
    }
    let finalizers = p
        .pointer("/metadata/finalizers")
        .and_then(|f| f.as_array())
        .is_some_and(|f| !f.is_empty());
    if let Some(prev) = p
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(|g| g.as_i64())
    {
        // A grace may only shorten.
        grace = grace.min(prev);
    }
    if grace == 0 && !finalizers {
        remove(s, uid);
        return;
    }
    s.rv += 1;
    let rv = s.rv;
    let p = s.pods.get_mut(uid).unwrap();
    p["metadata"]["deletionTimestamp"] = json!("2030-01-01T00:00:00Z");
    p["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
    p["metadata"]["resourceVersion"] = json!(rv.to_string());
    let p = p.clone();
    notify(s, "MODIFIED", p);
}

fn delete_route(state: &Arc<Mutex<State>>, r: &Req, ns: &str, name: &str) -> Reply {
    let mut errors = Vec::new();
    if let Some(b) = &r.body {
        check_delete_options("DeleteOptions", b, &mut errors);
    }
    let mut s = state.lock().unwrap();
    if !errors.is_empty() {
        s.schema_errors.extend(errors.iter().cloned());
        return Reply::Json(422, status(422, "Invalid", &errors.join("; ")));
    }
    let body = r.body.clone().unwrap_or(Value::Null);
    s.deletes
        .push((ns.to_string(), name.to_string(), body.clone()));
    let Some(uid) = find(&s, ns, name) else {
        return Reply::Json(404, not_found(name));
    };
    if let Some(want) = body.pointer("/preconditions/uid").and_then(|u| u.as_str()) {
        if want != uid {
            return Reply::Json(409, uid_precondition_failed(want, &uid));
        }
    }
    let grace = body.get("gracePeriodSeconds").and_then(|g| g.as_i64());
    graceful_delete(&mut s, &uid, grace);
    Reply::Json(
        200,
        s.pods
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| json!({"kind": "Status", "status": "Success"})),
    )
}

/// `pods/{name}/status`, strategic-merge patch only: the uid in the patch's
/// metadata is a precondition; `status` fields replace, `conditions` merge
/// by type; a terminal phase cannot go back.
fn patch_status_route(state: &Arc<Mutex<State>>, r: &Req, ns: &str, name: &str) -> Reply {
    if r.content_type != "application/strategic-merge-patch+json" {
        return Reply::Json(
            415,
            status(415, "UnsupportedMediaType", &format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json; got {:?}", r.content_type)),
        );
    }
    let mut errors = Vec::new();
    let patch = r.body.clone().unwrap_or(Value::Null);
    check_status_patch(&patch, &mut errors);
    let mut s = state.lock().unwrap();
    if !errors.is_empty() {
        s.schema_errors.extend(errors.iter().cloned());
        return Reply::Json(422, status(422, "Invalid", &errors.join("; ")));
    }
    let Some(uid) = find(&s, ns, name) else {
        return Reply::Json(404, not_found(name));
    };
    if let Some(want) = patch.pointer("/metadata/uid").and_then(|u| u.as_str()) {
        if want != uid {
            return Reply::Json(409, uid_precondition_failed(want, &uid));
        }
    }
    let terminal = |x: &Value| matches!(x.as_str(), Some("Failed") | Some("Succeeded"));
    if terminal(&s.pods[&uid]["status"]["phase"])
        && !terminal(&patch["status"]["phase"])
        && patch["status"].get("phase").is_some()
    {
        return Reply::Json(422, status(422, "Invalid", &format!("Pod \"{name}\" is invalid: status.phase: Forbidden: cannot transition from a terminal phase")));
    }
    s.status_patches
        .push((ns.to_string(), name.to_string(), patch.clone()));
    s.rv += 1;
    let rv = s.rv;
    let p = s.pods.get_mut(&uid).unwrap();
    for (k, v) in patch["status"].as_object().cloned().unwrap_or_default() {
        if k == "conditions" {
            for c in v.as_array().cloned().unwrap_or_default() {
                set_condition(p, c);
            }
        } else {
            p["status"][k.as_str()] = v;
        }
    }
    p["metadata"]["resourceVersion"] = json!(rv.to_string());
    let p = p.clone();
    notify(&mut s, "MODIFIED", p.clone());
    Reply::Json(200, p)
}

/// The fields of a pod status patch qosd may send, typed.
fn check_status_patch(v: &Value, errors: &mut Vec<String>) {
    check(
        "status patch",
        v,
        &[("status", Ty::Obj)],
        &[("metadata", Ty::Obj)],
        errors,
    );
    if let Some(m) = v.get("metadata") {
        check("status patch.metadata", m, &[], &[("uid", Ty::Str)], errors);
    }
    if let Some(st) = v.get("status") {
        check(
            "status patch.status",
            st,
            &[],
            &[
                ("phase", Ty::Str),
                ("reason", Ty::Str),
                ("message", Ty::Str),
                ("conditions", Ty::Arr),
            ],
            errors,
        );
        for c in st
            .get("conditions")
            .and_then(|c| c.as_array())
            .cloned()
            .unwrap_or_default()
        {
            check(
                "status patch.status.conditions[]",
                &c,
                &[("type", Ty::Str), ("status", Ty::Str)],
                &[
                    ("reason", Ty::Str),
                    ("message", Ty::Str),
                    ("lastTransitionTime", Ty::Str),
                    ("lastProbeTime", Ty::Str),
                    ("observedGeneration", Ty::Int),
                ],
                errors,
            );
        }
        if let Some(ph) = st.get("phase").and_then(|p| p.as_str()) {
            if !["Pending", "Running", "Succeeded", "Failed", "Unknown"].contains(&ph) {
                errors.push(format!("status patch: phase {ph:?} is not a pod phase"));
            }
        }
    }
}

fn list(state: &Arc<Mutex<State>>, q: &BTreeMap<String, String>) -> (u16, Value) {
    let node = match node_selector(q) {
        Ok(n) => n,
        Err(e) => return (400, status(400, "BadRequest", &e)),
    };
    let mut s = state.lock().unwrap();
    if let Some(n) = s.expire_continue_after {
        if n == 0 {
            s.continue_epoch += 1;
            s.expire_continue_after = None;
        } else {
            s.expire_continue_after = Some(n - 1);
        }
    }
    let all: Vec<&Value> = s
        .pods
        .values()
        .filter(|p| node.is_none() || node_of(p) == node.as_deref())
        .collect();
    let start: usize = match q.get("continue").filter(|c| !c.is_empty()) {
        None => 0,
        Some(c) => {
            let parsed = c
                .split_once(':')
                .and_then(|(e, o)| Some((e.parse::<u64>().ok()?, o.parse::<usize>().ok()?)));
            match parsed {
                Some((e, o)) if e == s.continue_epoch => o,
                Some((_, o)) => {
                    let mut v = status(410, "Expired", CONTINUE_EXPIRED);
                    v["metadata"] = json!({"continue": format!("{}:{o}", s.continue_epoch)});
                    return (410, v);
                }
                None => {
                    return (
                        400,
                        status(400, "BadRequest", &format!("invalid continue token {c:?}")),
                    )
                }
            }
        }
    };
    let limit: usize = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let page: Vec<Value> = all
        .iter()
        .skip(start)
        .take(limit)
        .map(|p| (*p).clone())
        .collect();
    let next = start.saturating_add(limit);
    let mut meta = json!({"resourceVersion": s.rv.to_string()});
    if next < all.len() {
        meta["continue"] = json!(format!("{}:{next}", s.continue_epoch));
    }
    (
        200,
        json!({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": page}),
    )
}

fn watch(state: &Arc<Mutex<State>>, q: &BTreeMap<String, String>) -> Response<Body> {
    let node = match node_selector(q) {
        Ok(n) => n,
        Err(e) => return full(400, &status(400, "BadRequest", &e)),
    };
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    {
        let mut s = state.lock().unwrap();
        if s.close_watches_at_once {
            drop(tx);
            return stream_response(rx);
        }
        if from != 0 && from < s.compacted_below {
            // HTTP 200, one ERROR event, end of stream (never HTTP 410).
            send_event(&tx, &event_line("ERROR", &too_old(from, s.compacted_below)));
            drop(tx);
            return stream_response(rx);
        }
        for (rv, kind, obj) in &s.history {
            if *rv > from && (node.is_none() || node_of(obj) == node.as_deref()) {
                send_event(&tx, &event_line(kind, obj));
            }
        }
        s.watchers.push(Watcher {
            node: node.clone(),
            tx: tx.clone(),
            from,
        });
    }
    if let Some(t) = q.get("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()) {
        let state = state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(t)).await;
            // Dropping the registered sender ends the stream cleanly.
            state
                .lock()
                .unwrap()
                .watchers
                .retain(|w| !w.tx.same_channel(&tx));
        });
    } else {
        drop(tx);
    }
    stream_response(rx)
}

fn stream_response(
    rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>,
) -> Response<Body> {
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .header("transfer-encoding", "chunked")
        .body(StreamBody::new(stream).boxed())
        .unwrap()
}

/// A fixture pod (fixtures/kube/FILE, real `kubectl get pod -o json`
/// shape) re-identified: uid, name, namespace, node.
pub fn fixture_pod(file: &str, uid: &str, name: &str, namespace: &str, node: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/kube")
        .join(file);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    v["metadata"]["uid"] = json!(uid);
    v["metadata"]["name"] = json!(name);
    v["metadata"]["namespace"] = json!(namespace);
    v["spec"]["nodeName"] = json!(node);
    v
}
