//! A small Kubernetes API client: HTTP/1.1 over rustls (ring), a bearer
//! token or client certificate, JSON bodies, and watch streams read line by
//! line. One connection per request: qosd makes few calls (a list, a
//! long-lived watch, and an eviction now and then), so pooling buys little.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, StatusCode};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;

use super::config::{Auth, KubeConfig};

/// A failed API call.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The TLS client could not be set up (CA bundle, client certificate
    /// or key).
    #[error("API server {server}: bad TLS setup: {message}")]
    Tls {
        /// The server URL.
        server: String,
        /// What is wrong.
        message: String,
    },
    /// The server URL cannot be used.
    #[error("API server {server}: bad URL: {message}")]
    Url {
        /// The server URL.
        server: String,
        /// What is wrong with it.
        message: String,
    },
    /// No connection (TCP, proxy, TLS handshake or HTTP handshake).
    #[error("API server {server}: cannot connect: {message}")]
    Connect {
        /// The server URL.
        server: String,
        /// The underlying error.
        message: String,
    },
    /// The answer did not come within the call's deadline.
    #[error("{method} {path}: no answer within {after:?}")]
    Timeout {
        /// The HTTP method.
        method: String,
        /// The request path.
        path: String,
        /// The deadline.
        after: Duration,
    },
    /// The request or its answer broke off (HTTP or body error).
    #[error("{method} {path}: {message}")]
    Transport {
        /// The HTTP method.
        method: String,
        /// The request path.
        path: String,
        /// The underlying error.
        message: String,
    },
    /// The server answered with an error status.
    #[error("{method} {path}: HTTP {code}{}: {message}", if reason.is_empty() { String::new() } else { format!(" {reason}") })]
    Api {
        /// The HTTP method.
        method: String,
        /// The request path.
        path: String,
        /// The HTTP status code.
        code: u16,
        /// The `Status` body's `reason` (e.g. `NotFound`; empty when none).
        reason: String,
        /// The `Status` body's `message`, or the body's first 200
        /// characters.
        message: String,
        /// What else the answer said (boxed: errors stay small).
        details: Box<ApiErrorDetails>,
    },
    /// A watch stream sent nothing (no event, no bookmark) for too long.
    #[error(
        "{method} {path}: no data on the stream for {after:?}: the connection is taken as dead"
    )]
    Idle {
        /// The HTTP method.
        method: String,
        /// The request path.
        path: String,
        /// How long the stream was silent.
        after: Duration,
    },
    /// A body could not be decoded (an answer) or encoded (a request).
    #[error("{what}: cannot decode the answer: {message}")]
    Decode {
        /// The call and what was decoded, e.g. `GET /api/v1/pods`.
        what: String,
        /// The JSON error.
        message: String,
    },
    /// The bearer token file could not be read.
    #[error("cannot read the token file {path}: {source}")]
    Token {
        /// The token file.
        path: std::path::PathBuf,
        /// The read error.
        source: std::io::Error,
    },
}

impl KubeError {
    /// The HTTP status of an API error.
    pub fn code(&self) -> Option<u16> {
        match self {
            KubeError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The server's `Retry-After`, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            KubeError::Api { details, .. } => details.retry_after,
            _ => None,
        }
    }
}

/// What an API error answer says beyond its code and message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiErrorDetails {
    /// The `Retry-After` header (seconds), or the `Status`'s
    /// `details.retryAfterSeconds`, when the server sent one.
    pub(crate) retry_after: Option<Duration>,
    /// `details.causes[].reason` of the `Status` body (e.g.
    /// `DisruptionBudget`); empty when the body is not a `Status`.
    pub(crate) causes: Vec<String>,
    /// The body was a `meta/v1 Status` (API Priority and Fairness and the
    /// max-in-flight filter answer 429 in plain text instead).
    pub(crate) status_body: bool,
}

/// A connected-on-demand API client.
#[derive(Clone)]
pub struct KubeClient {
    cfg: Arc<KubeConfig>,
    tls: tokio_rustls::TlsConnector,
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    /// Path prefix of the server URL (usually empty).
    prefix: String,
    /// Deadline of a connection (TCP + TLS).
    pub(crate) connect_timeout: Duration,
}

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClient")
            .field("server", &self.cfg.server)
            .finish()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl KubeClient {
    /// A client for `cfg` (TLS set up now; connections are opened per call).
    pub fn new(cfg: KubeConfig) -> Result<KubeClient, KubeError> {
        let server = cfg.server.clone();
        let tls_err = |message: String| KubeError::Tls {
            server: server.clone(),
            message,
        };
        let url_err = |message: String| KubeError::Url {
            server: server.clone(),
            message,
        };
        let rest = server
            .strip_prefix("https://")
            .ok_or_else(|| url_err("not https://".into()))?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/').to_string()),
            None => (rest, String::new()),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| url_err("unclosed [".into()))?;
            let port = after.strip_prefix(':').unwrap_or("443");
            (h.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p),
                None => (authority.to_string(), "443"),
            }
        };
        let port: u16 = port
            .parse()
            .map_err(|_| url_err(format!("bad port {port:?}")))?;
        let verify_as = cfg.tls_server_name.clone().unwrap_or_else(|| host.clone());
        let server_name = ServerName::try_from(verify_as.clone())
            .map_err(|e| url_err(format!("bad host {verify_as:?}: {e}")))?;

        let mut roots = rustls::RootCertStore::empty();
        let mut n = 0;
        for c in CertificateDer::pem_slice_iter(&cfg.ca_pem) {
            let c = c.map_err(|e| tls_err(format!("CA bundle: {e}")))?;
            roots
                .add(c)
                .map_err(|e| tls_err(format!("CA certificate: {e}")))?;
            n += 1;
        }
        if n == 0 {
            return Err(tls_err("the CA bundle holds no certificate".into()));
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err(e.to_string()))?
            .with_root_certificates(roots);
        let mut tls_cfg = match &cfg.auth {
            Auth::ClientCert { cert_pem, key_pem } => {
                let certs = CertificateDer::pem_slice_iter(cert_pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| tls_err(format!("client certificate: {e}")))?;
                let key = PrivateKeyDer::from_pem_slice(key_pem)
                    .map_err(|e| tls_err(format!("client key: {e}")))?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| tls_err(format!("client certificate: {e}")))?
            }
            _ => builder.with_no_client_auth(),
        };
        tls_cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(KubeClient {
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls_cfg)),
            host,
            port,
            server_name,
            prefix,
            cfg: Arc::new(cfg),
            connect_timeout: Duration::from_secs(5),
        })
    }

    /// The API server URL.
    pub fn server(&self) -> &str {
        &self.cfg.server
    }

    /// Where the configuration came from (see [`KubeConfig::origin`]).
    pub fn origin(&self) -> &str {
        &self.cfg.origin
    }

    fn token(&self) -> Result<Option<String>, KubeError> {
        Ok(match &self.cfg.auth {
            Auth::Token(t) => Some(t.clone()),
            Auth::TokenFile(p) => Some(
                crate::sys::input::read_text(p)
                    .map_err(|e| KubeError::Token {
                        path: p.clone(),
                        source: e.into_io(),
                    })?
                    .trim()
                    .to_string(),
            ),
            _ => None,
        })
    }

    /// TCP (directly, or through the proxy's CONNECT tunnel), TLS and
    /// the HTTP/1.1 handshake, within the client's connect deadline.
    pub(crate) async fn connect(
        &self,
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, KubeError> {
        self.connect_within(self.connect_timeout).await
    }

    /// [`KubeClient::connect`] with this deadline.
    pub(crate) async fn connect_within(
        &self,
        deadline: Duration,
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, KubeError> {
        let server = self.cfg.server.clone();
        let err = |message: String| KubeError::Connect {
            server: server.clone(),
            message,
        };
        let connect = async {
            let tcp = match &self.cfg.proxy {
                None => TcpStream::connect((self.host.as_str(), self.port))
                    .await
                    .map_err(|e| err(e.to_string()))?,
                Some(p) => tunnel(p, &self.authority())
                    .await
                    .map_err(|e| err(format!("proxy {}:{}: {e}", p.host, p.port)))?,
            };
            let _ = tcp.set_nodelay(true);
            keepalive(&tcp);
            let tls = self
                .tls
                .connect(self.server_name.clone(), tcp)
                .await
                .map_err(|e| err(format!("TLS: {e}")))?;
            let (send, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                    .await
                    .map_err(|e| err(e.to_string()))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(send)
        };
        tokio::time::timeout(deadline, connect)
            .await
            .map_err(|_| err(format!("no connection within {deadline:?}")))?
    }

    /// A request for `path` on this server (auth, headers, body).
    pub(crate) fn request(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Result<Request<Full<Bytes>>, KubeError> {
        let mut req = Request::builder()
            .method(method.clone())
            .uri(format!("{}{}", self.prefix, path))
            .header(hyper::header::HOST, self.authority())
            .header(hyper::header::ACCEPT, "application/json")
            .header(
                hyper::header::USER_AGENT,
                concat!("qosd/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(t) = self.token()? {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header(
                hyper::header::CONTENT_TYPE,
                content_type.unwrap_or("application/json"),
            );
        }
        req.body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| KubeError::Transport {
                method: method.to_string(),
                path: path.to_string(),
                message: e.to_string(),
            })
    }

    /// Send a request; returns the response with its body still streaming.
    async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Result<hyper::Response<Incoming>, KubeError> {
        let mut send = self.connect().await?;
        let req = self.request(method.clone(), path, content_type, body)?;
        send.send_request(req)
            .await
            .map_err(|e| KubeError::Transport {
                method: method.to_string(),
                path: path.to_string(),
                message: e.to_string(),
            })
    }

    fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{host}:{}", self.port)
    }

    /// One request with a deadline on the whole exchange; non-2xx answers
    /// become [`KubeError::Api`] with the `Status` message.
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), KubeError> {
        self.call_with(method, path, None, body, timeout).await
    }

    /// [`KubeClient::call`] with a body of this content type (JSON when
    /// `None`).
    pub(crate) async fn call_with(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), KubeError> {
        let m = method.to_string();
        let exchange = async {
            let resp = self.send(method, path, content_type, body).await?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let bytes = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| KubeError::Transport {
                    method: m.clone(),
                    path: path.to_string(),
                    message: too_large_or(&*e),
                })?
                .to_bytes();
            Ok::<_, KubeError>((status, headers, bytes))
        };
        let (status, headers, bytes) =
            tokio::time::timeout(timeout, exchange)
                .await
                .map_err(|_| KubeError::Timeout {
                    method: m.clone(),
                    path: path.to_string(),
                    after: timeout,
                })??;
        if !status.is_success() {
            return Err(api_error(&m, path, status, Some(&headers), &bytes));
        }
        Ok((status, bytes))
    }

    /// GET and decode JSON.
    pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        timeout: Duration,
    ) -> Result<T, KubeError> {
        let (_, bytes) = self.call(Method::GET, path, None, timeout).await?;
        serde_json::from_slice(&bytes).map_err(|e| KubeError::Decode {
            what: format!("GET {path}"),
            message: e.to_string(),
        })
    }

    /// POST a JSON body.
    pub async fn post_json<B: serde::Serialize>(
        &self,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), KubeError> {
        let body = serde_json::to_vec(body).map_err(|e| KubeError::Decode {
            what: format!("POST {path} body"),
            message: e.to_string(),
        })?;
        self.call(Method::POST, path, Some(body), timeout).await
    }

    /// Open a watch (or any streaming GET): the response headers must
    /// arrive within `timeout`; the body is read with [`LineReader`], which
    /// gives up on a stream silent for `idle` (a connection that went
    /// quiet without a FIN or a reset: host lost, partition, a proxy that
    /// stopped forwarding).
    pub(crate) async fn stream(
        &self,
        path: &str,
        timeout: Duration,
        idle: Duration,
    ) -> Result<LineReader, KubeError> {
        let resp = tokio::time::timeout(timeout, self.send(Method::GET, path, None, None))
            .await
            .map_err(|_| KubeError::Timeout {
                method: "GET".into(),
                path: path.to_string(),
                after: timeout,
            })??;
        let status = resp.status();
        if !status.is_success() {
            let headers = resp.headers().clone();
            let bytes = tokio::time::timeout(timeout, resp.into_body().collect())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            return Err(api_error("GET", path, status, Some(&headers), &bytes));
        }
        Ok(LineReader {
            body: resp.into_body(),
            buf: Vec::new(),
            path: path.to_string(),
            idle,
        })
    }
}

/// The `Status` of an API error, with the fields qosd tells errors apart by.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ErrorStatus {
    kind: String,
    message: String,
    reason: String,
    details: Option<ErrorDetails>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ErrorDetails {
    causes: Vec<ErrorCause>,
    #[serde(rename = "retryAfterSeconds")]
    retry_after_seconds: Option<u64>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ErrorCause {
    reason: String,
}

/// `Retry-After` in seconds (the API server never sends the date form).
fn retry_after(headers: Option<&hyper::HeaderMap>) -> Option<Duration> {
    let v = headers?.get(hyper::header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

pub(crate) fn api_error(
    method: &str,
    path: &str,
    status: StatusCode,
    headers: Option<&hyper::HeaderMap>,
    bytes: &[u8],
) -> KubeError {
    let parsed: Option<ErrorStatus> = serde_json::from_slice(bytes).ok();
    let status_body = parsed.as_ref().is_some_and(|s| s.kind == "Status");
    let st = parsed.unwrap_or_default();
    let message = if st.message.is_empty() {
        String::from_utf8_lossy(bytes)
            .trim()
            .chars()
            .take(200)
            .collect()
    } else {
        st.message
    };
    let details = st.details.unwrap_or_default();
    KubeError::Api {
        method: method.to_string(),
        path: path.to_string(),
        code: status.as_u16(),
        reason: st.reason,
        message,
        details: Box::new(ApiErrorDetails {
            retry_after: retry_after(headers).or(details
                .retry_after_seconds
                .filter(|s| *s > 0)
                .map(Duration::from_secs)),
            causes: details.causes.into_iter().map(|c| c.reason).collect(),
            status_body,
        }),
    }
}

/// Open a CONNECT tunnel to `authority` through an HTTP proxy.
async fn tunnel(p: &super::config::Proxy, authority: &str) -> Result<TcpStream, String> {
    use base64::Engine as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = TcpStream::connect((p.host.as_str(), p.port))
        .await
        .map_err(|e| e.to_string())?;
    let mut req = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if let Some(cred) = &p.basic_auth {
        let b = base64::engine::general_purpose::STANDARD.encode(cred);
        req.push_str(&format!("Proxy-Authorization: Basic {b}\r\n"));
    }
    req.push_str("\r\n");
    tcp.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    // The answer's header, byte by byte: nothing of the tunnel is read.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 {
            return Err("CONNECT answer header too long".into());
        }
        let b = tcp.read_u8().await.map_err(|e| e.to_string())?;
        head.push(b);
    }
    let line = String::from_utf8_lossy(&head);
    let status = line.lines().next().unwrap_or("");
    let code = status.split_whitespace().nth(1).unwrap_or("");
    if code != "200" {
        return Err(format!("CONNECT refused: {status}"));
    }
    Ok(tcp)
}

/// TCP keepalive on API connections: a peer that vanished (host lost,
/// partition) is found within about 11 s (idle 5 s, then 3 probes 2 s
/// apart), and unacknowledged data fails the connection after 15 s.
fn keepalive(tcp: &TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let _ = setsockopt(tcp, sockopt::KeepAlive, &true);
    let _ = setsockopt(tcp, sockopt::TcpKeepIdle, &5);
    let _ = setsockopt(tcp, sockopt::TcpKeepInterval, &2);
    let _ = setsockopt(tcp, sockopt::TcpKeepCount, &3);
    let _ = setsockopt(tcp, sockopt::TcpUserTimeout, &15_000);
}

/// Reads a streaming body one newline-terminated JSON document at a time
/// (the watch protocol), whatever the chunking.
pub(crate) struct LineReader {
    body: Incoming,
    buf: Vec<u8>,
    path: String,
    /// Longest silence accepted between two chunks.
    idle: Duration,
}

impl LineReader {
    /// The next line (without the newline); `None` at the end of the stream.
    pub(crate) async fn next_line(&mut self) -> Result<Option<Vec<u8>>, KubeError> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=i).collect();
                line.pop();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            let frame = tokio::time::timeout(self.idle, self.body.frame())
                .await
                .map_err(|_| KubeError::Idle {
                    method: "GET".into(),
                    path: self.path.clone(),
                    after: self.idle,
                })?;
            match frame {
                None => {
                    if self.buf.iter().all(u8::is_ascii_whitespace) {
                        return Ok(None);
                    }
                    return Ok(Some(std::mem::take(&mut self.buf)));
                }
                Some(Err(e)) => {
                    return Err(KubeError::Transport {
                        method: "GET".into(),
                        path: self.path.clone(),
                        message: format!("watch stream broke: {e}"),
                    })
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if self.buf.len() + data.len() > MAX_ANSWER_BYTES {
                            return Err(KubeError::Transport {
                                method: "GET".into(),
                                path: self.path.clone(),
                                message: format!(
                                    "watch event larger than {MAX_ANSWER_BYTES} bytes (refused)"
                                ),
                            });
                        }
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

/// Largest answer (a list of pods, one watch event) read from the API
/// server, in bytes: a node's pods are a few megabytes at most; a larger
/// or endless answer is refused, not held in memory.
pub(crate) const MAX_ANSWER_BYTES: usize = 64 << 20;

/// A body error's message; the size cap's in words.
fn too_large_or(e: &(dyn std::error::Error + 'static)) -> String {
    if e.is::<http_body_util::LengthLimitError>() {
        format!("answer larger than {MAX_ANSWER_BYTES} bytes (refused)")
    } else {
        e.to_string()
    }
}

/// Percent-encode a query value (field selectors hold `=` and `,`).
pub(crate) fn encode_query(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_encoding() {
        assert_eq!(
            encode_query("spec.nodeName=node-1"),
            "spec.nodeName%3Dnode-1"
        );
        assert_eq!(encode_query("a,b c"), "a%2Cb%20c");
    }
}
