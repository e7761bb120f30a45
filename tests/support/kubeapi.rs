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
//!   then live ones; `BOOKMARK`s on request ([`FakeApi::bookmark`]);
//!   `timeoutSeconds` honoured; a version older than the compaction point
//!   ([`FakeApi::expire`]) gets `410 Gone`, and live watches get an `ERROR`
//!   event with code 410; [`FakeApi::drop_watches`] cuts every open stream
//!   mid-event (the connection is aborted).
//! * `POST …/pods/{name}/eviction` (policy/v1): answers as scripted
//!   ([`Answer`]: 201, 429 with the PDB message, 404, 500, or no answer);
//!   201 marks the pod deleting (deletionTimestamp, `MODIFIED` event).
//! * `POST …/namespaces/{ns}/events`: recorded, 201.
//! * `DELETE …/pods/{name}`: removes the pod (`DELETED` event), honours a
//!   uid precondition (409 on mismatch), 404 when absent.
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
    /// 429 TooManyRequests with the PodDisruptionBudget message.
    TooManyRequests,
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
}

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
    events: Vec<Value>,
    deletes: Vec<(String, String, Value)>,
    schema_errors: Vec<String>,
    down: bool,
}

/// The fake API server (see the module docs).
pub struct FakeApi {
    pub addr: SocketAddr,
    pub ca_pem: String,
    pub token: String,
    state: Arc<Mutex<State>>,
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
                rt.block_on(serve(st, tok, cert_pem, key_pem, addr_tx, stop_rx));
                rt.shutdown_timeout(Duration::from_millis(100));
            })
            .unwrap();
        let addr = addr_rx.recv().expect("fake API server did not start");
        FakeApi {
            addr,
            ca_pem,
            token,
            state,
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
        self.with(|s| {
            let obj = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": s.rv.to_string()}});
            let line = event_line("BOOKMARK", &obj);
            s.watchers.retain(|w| send_event(&w.tx, &line));
        })
    }

    /// Compact history: older versions get 410 Gone; open watches get an
    /// ERROR event with code 410 and end.
    pub fn expire(&self) {
        self.with(|s| {
            s.compacted_below = s.rv + 1;
            s.history.clear();
            let line = event_line(
                "ERROR",
                &status(410, "Expired", "too old resource version: expired"),
            );
            for w in s.watchers.drain(..) {
                let _ = send_event(&w.tx, &line);
            }
        })
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
        self.with(|s| s.watchers.clear());
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
    addr_tx: std::sync::mpsc::Sender<SocketAddr>,
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
    addr_tx.send(listener.local_addr().unwrap()).unwrap();
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

async fn handle(state: Arc<Mutex<State>>, token: &str, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let authorized = req
        .headers()
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        == Some(&format!("Bearer {token}"));
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
    let record = |code: u16| Recorded {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        body: body.clone(),
        status: code,
    };
    if !authorized {
        state.lock().unwrap().requests.push(record(401));
        return full(401, &status(401, "Unauthorized", "Unauthorized"));
    }
    let q = query_map(&query);
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (code, resp) = match (method.as_str(), segs.as_slice()) {
        ("GET", ["api", "v1", "pods"]) => {
            if q.get("watch").is_some_and(|w| w == "1" || w == "true") {
                let r = watch(&state, &q);
                let code = r.status().as_u16();
                state.lock().unwrap().requests.push(record(code));
                return r;
            }
            list(&state, &q)
        }
        ("GET", ["api", "v1", "namespaces", ns, "pods", name]) => {
            let s = state.lock().unwrap();
            match s.pods.values().find(|p| {
                p["metadata"]["namespace"] == json!(ns) && p["metadata"]["name"] == json!(name)
            }) {
                Some(p) => (200, p.clone()),
                None => (
                    404,
                    status(404, "NotFound", &format!("pods \"{name}\" not found")),
                ),
            }
        }
        ("POST", ["api", "v1", "namespaces", ns, "pods", name, "eviction"]) => {
            let (ns, name) = (ns.to_string(), name.to_string());
            let mut errors = Vec::new();
            match &body {
                Some(b) => check_eviction(b, &name, &ns, &mut errors),
                None => errors.push("Eviction: no body".into()),
            }
            if !errors.is_empty() {
                let mut s = state.lock().unwrap();
                s.schema_errors.extend(errors.iter().cloned());
                s.requests.push(record(422));
                return full(422, &status(422, "Invalid", &errors.join("; ")));
            }
            let answer = {
                let mut s = state.lock().unwrap();
                let a = s
                    .script
                    .pop_front()
                    .or(s.default_answer)
                    .unwrap_or(Answer::Created);
                let exists = s.pods.values().any(|p| {
                    p["metadata"]["namespace"] == json!(ns) && p["metadata"]["name"] == json!(name)
                });
                if a == Answer::Created && !exists {
                    Answer::NotFound
                } else {
                    a
                }
            };
            let body_v = body.clone().unwrap_or(Value::Null);
            let (code, v) = match answer {
                Answer::Hang => {
                    {
                        let mut s = state.lock().unwrap();
                        s.evictions.push((ns.clone(), name.clone(), body_v, 0));
                        s.requests.push(record(0));
                    }
                    std::future::pending::<()>().await;
                    unreachable!()
                }
                Answer::Created => {
                    let mut s = state.lock().unwrap();
                    let uid = s
                        .pods
                        .iter()
                        .find(|(_, p)| {
                            p["metadata"]["namespace"] == json!(ns)
                                && p["metadata"]["name"] == json!(name)
                        })
                        .map(|(u, _)| u.clone())
                        .unwrap();
                    s.rv += 1;
                    let rv = s.rv;
                    let p = s.pods.get_mut(&uid).unwrap();
                    p["metadata"]["deletionTimestamp"] = json!("2030-01-01T00:00:00Z");
                    p["metadata"]["deletionGracePeriodSeconds"] = body_v
                        .pointer("/deleteOptions/gracePeriodSeconds")
                        .cloned()
                        .unwrap_or(json!(30));
                    p["metadata"]["resourceVersion"] = json!(rv.to_string());
                    let p = p.clone();
                    notify(&mut s, "MODIFIED", p);
                    (201, status(201, "", ""))
                }
                Answer::TooManyRequests => {
                    let mut v = status(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                    );
                    v["details"] = json!({"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget test-pdb needs 1 healthy pods and has 1 currently"}]});
                    (429, v)
                }
                Answer::NotFound => (
                    404,
                    status(404, "NotFound", &format!("pods \"{name}\" not found")),
                ),
                Answer::ServerError => (
                    500,
                    status(
                        500,
                        "InternalError",
                        "Internal error occurred: fake API: scripted failure",
                    ),
                ),
            };
            state.lock().unwrap().evictions.push((
                ns,
                name,
                body.clone().unwrap_or(Value::Null),
                code,
            ));
            (code, v)
        }
        ("POST", ["api", "v1", "namespaces", ns, "events"]) => {
            let mut errors = Vec::new();
            match &body {
                Some(b) => check_event(b, ns, &mut errors),
                None => errors.push("Event: no body".into()),
            }
            let mut s = state.lock().unwrap();
            if !errors.is_empty() {
                s.schema_errors.extend(errors.iter().cloned());
                (422, status(422, "Invalid", &errors.join("; ")))
            } else {
                let ev = body.clone().unwrap();
                s.events.push(ev.clone());
                (201, ev)
            }
        }
        ("DELETE", ["api", "v1", "namespaces", ns, "pods", name]) => {
            let mut errors = Vec::new();
            if let Some(b) = &body {
                check_delete_options("DeleteOptions", b, &mut errors);
            }
            let mut s = state.lock().unwrap();
            if !errors.is_empty() {
                s.schema_errors.extend(errors.iter().cloned());
                (422, status(422, "Invalid", &errors.join("; ")))
            } else {
                s.deletes.push((
                    ns.to_string(),
                    name.to_string(),
                    body.clone().unwrap_or(Value::Null),
                ));
                let found = s
                    .pods
                    .iter()
                    .find(|(_, p)| {
                        p["metadata"]["namespace"] == json!(ns)
                            && p["metadata"]["name"] == json!(name)
                    })
                    .map(|(u, _)| u.clone());
                let want = body
                    .as_ref()
                    .and_then(|b| b.pointer("/preconditions/uid"))
                    .and_then(|u| u.as_str())
                    .map(str::to_string);
                match found {
                    None => (404, status(404, "NotFound", &format!("pods \"{name}\" not found"))),
                    Some(uid) if want.as_ref().is_some_and(|w| *w != uid) => (
                        409,
                        status(409, "Conflict", &format!("Precondition failed: UID in precondition: {}, UID in object meta: {uid}", want.unwrap())),
                    ),
                    Some(uid) => {
                        let p = remove(&mut s, &uid).unwrap();
                        (200, p)
                    }
                }
            }
        }
        _ => (
            404,
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        ),
    };
    state.lock().unwrap().requests.push(record(code));
    full(code, &resp)
}

fn list(state: &Arc<Mutex<State>>, q: &BTreeMap<String, String>) -> (u16, Value) {
    let node = match node_selector(q) {
        Ok(n) => n,
        Err(e) => return (400, status(400, "BadRequest", &e)),
    };
    let s = state.lock().unwrap();
    let all: Vec<&Value> = s
        .pods
        .values()
        .filter(|p| node.is_none() || node_of(p) == node.as_deref())
        .collect();
    let start: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
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
        meta["continue"] = json!(next.to_string());
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
        if from != 0 && from < s.compacted_below {
            return full(
                410,
                &status(
                    410,
                    "Expired",
                    &format!("too old resource version: {from} ({})", s.compacted_below),
                ),
            );
        }
        for (rv, kind, obj) in &s.history {
            if *rv > from && (node.is_none() || node_of(obj) == node.as_deref()) {
                send_event(&tx, &event_line(kind, obj));
            }
        }
        s.watchers.push(Watcher {
            node: node.clone(),
            tx: tx.clone(),
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
