//! A small blocking HTTP/1.1 client for tests: one GET per connection,
//! bytes on the wire exactly as written, so a test controls what the
//! daemon's server sees.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A request that failed before a complete response arrived.
#[derive(Debug)]
pub struct HttpError(pub String);

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
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

/// Largest response [`get`] reads (the status document is a few KiB).
pub const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// Blocking HTTP/1.1 GET of `path` on `addr` (Connection: close). The
/// whole exchange — connect, send, read — ends within `timeout` (a server
/// that trickles its answer cannot hold it longer), and at most
/// [`MAX_RESPONSE_BYTES`] are read.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<HttpResponse, HttpError> {
    get_limited(addr, path, timeout, MAX_RESPONSE_BYTES)
}

/// [`get`] with an explicit response size cap.
pub fn get_limited(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
    max_bytes: usize,
) -> Result<HttpResponse, HttpError> {
    let err = |source: std::io::Error| HttpError(format!("HTTP GET http://{addr}{path}: {source}"));
    // A huge --timeout is "very long", never an Instant overflow panic.
    let deadline = std::time::Instant::now()
        .checked_add(timeout)
        .unwrap_or_else(|| std::time::Instant::now() + Duration::from_secs(365 * 86_400));
    let remaining = || {
        deadline
            .checked_duration_since(std::time::Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no complete answer within {:.1}s", timeout.as_secs_f64()),
                )
            })
    };
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(err)?;
    s.set_write_timeout(Some(remaining().map_err(err)?))
        .map_err(err)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: qosd\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
    .map_err(err)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        s.set_read_timeout(Some(remaining().map_err(err)?))
            .map_err(err)?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.len() > max_bytes {
                    return Err(err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("answer larger than {max_bytes} bytes (refused)"),
                    )));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no complete answer within {:.1}s", timeout.as_secs_f64()),
                )))
            }
            Err(e) => return Err(err(e)),
        }
    }
    parse_response(&raw).map_err(|m| err(std::io::Error::new(std::io::ErrorKind::InvalidData, m)))
}

pub fn parse_response(raw: &[u8]) -> Result<HttpResponse, String> {
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
        if b.len() < size.saturating_add(2) {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}
