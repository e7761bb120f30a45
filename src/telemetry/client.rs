//! A tiny blocking HTTP/1.1 client for `qosd status` and tests, so no HTTP
//! client crate is needed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

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

pub(crate) fn parse_response(raw: &[u8]) -> Result<HttpResponse, String> {
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
