//! `qosd status`'s request to a running daemon: one `GET /status` over
//! hyper's HTTP/1 client (the same HTTP stack as the server and the
//! Kubernetes API client), bounded in time and size.

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::BodyExt;

use crate::telemetry::status::StatusDoc;

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

/// Largest answer read (the status document is a few KiB).
const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// `GET path` on `addr`: the status code and the body. The whole exchange
/// (connect, send, read) ends within `timeout`, so a server that trickles
/// its answer cannot hold the command longer.
fn get(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(u16, String), HttpError> {
    let err = |source| HttpError::Request {
        addr,
        path: path.to_string(),
        source,
    };
    let other = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| other(&e))?;
        tokio::spawn(conn);
        let req = hyper::Request::get(path)
            .header(hyper::header::HOST, addr.to_string())
            .header(hyper::header::USER_AGENT, "qosd")
            .header(hyper::header::ACCEPT, "*/*")
            .body(http_body_util::Empty::<hyper::body::Bytes>::new())
            .map_err(|e| other(&e))?;
        let resp = send.send_request(req).await.map_err(|e| other(&e))?;
        let status = resp.status().as_u16();
        let body = http_body_util::Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("answer larger than {MAX_RESPONSE_BYTES} bytes (refused): {e}"),
                )
            })?
            .to_bytes();
        let body = String::from_utf8(body.to_vec())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "body not UTF-8"))?;
        Ok::<_, std::io::Error>((status, body))
    };
    // A huge --timeout is "very long", never an Instant overflow panic.
    let timeout = timeout.min(Duration::from_secs(365 * 86_400));
    match rt.block_on(async { tokio::time::timeout(timeout, exchange).await }) {
        Ok(r) => r.map_err(err),
        Err(_) => Err(err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no complete answer within {:.1}s", timeout.as_secs_f64()),
        ))),
    }
}

/// Fetch a running daemon's `/status`.
pub fn fetch_status(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<StatusDoc, HttpError> {
    let path = "/status";
    let (status, body) = get(rt, addr, path, timeout)?;
    if status != 200 {
        return Err(HttpError::Status {
            addr,
            path: path.into(),
            status,
            body,
        });
    }
    serde_json::from_str(&body).map_err(|source| HttpError::Json {
        addr,
        path: path.into(),
        source,
    })
}
