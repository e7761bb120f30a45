//! The HTTP endpoints over real TCP on loopback: our own client and curl
//! (`#[ignore]`d: scripts/test installs curl and runs it as root).

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::support::http::{self, HttpResponse};
use crate::telemetry::health::Health;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::server::{spawn, AppState};
use crate::telemetry::status::{EvictionRecord, StatusDoc};
use qosd_model::core::model::QosClass;

const T: Duration = Duration::from_secs(5);

fn state(stale_after: Duration) -> AppState {
    AppState {
        metrics: Arc::new(Metrics::new()),
        health: Arc::new(Health::new(stale_after)),
    }
}

/// Blocking GET off the runtime's worker threads.
async fn get(addr: SocketAddr, path: &'static str) -> HttpResponse {
    tokio::task::spawn_blocking(move || http::get(addr, path, T))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_follow_daemon_state() {
    let st = state(Duration::from_millis(300));
    let server = spawn("127.0.0.1:0".parse().unwrap(), st.clone())
        .await
        .unwrap();
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);

    // Fresh: alive, not ready (no CRI, no reconcile).
    let r = get(addr, "/healthz").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, "ok\n");
    let r = get(addr, "/readyz").await;
    assert_eq!(r.status, 503);
    assert!(
        r.body.contains("CRI") && r.body.contains("first reconcile"),
        "{}",
        r.body
    );

    // CRI reachable + reconcile done: ready.
    st.health.set_cri_reachable(true);
    st.health.set_reconciled();
    st.health.beat();
    assert_eq!(get(addr, "/readyz").await.status, 200);

    // Metrics reflect what the daemon reported.
    st.metrics
        .eviction("memory.available", QosClass::BestEffort, false);
    st.metrics.cgroup_writes(4, false);
    st.metrics.pods(QosClass::Burstable, 2);
    // No Accept header: the Prometheus text format 0.0.4.
    let r = get(addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
        "{:?}",
        r.headers
    );
    assert!(r.body.contains(
        "qosd_evictions_total{eviction_signal=\"memory.available\",qos_class=\"BestEffort\"} 1\n"
    ));
    assert!(!r.body.contains("# EOF"));
    assert!(
        r.body.contains("qosd_cgroup_writes_total 4\n"),
        "{}",
        r.body
    );
    assert!(r.body.contains("qosd_pods{qos_class=\"Burstable\"} 2\n"));

    // Status: what the daemon published, plus live alive/ready.
    let mut doc = StatusDoc::new();
    doc.mode = "enforce".into();
    doc.pods.burstable = 2;
    doc.push_eviction(EvictionRecord {
        name: "hog".into(),
        qos_class: "BestEffort".into(),
        signal: "memory.available".into(),
        ..Default::default()
    });
    st.health.publish_status(doc.clone());
    let got = tokio::task::spawn_blocking(move || {
        crate::telemetry::client::fetch_status(&crate::app::command_runtime().unwrap(), addr, T)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(got.mode, "enforce");
    assert_eq!(got.pods.total(), 2);
    assert_eq!(got.last_evictions[0].name, "hog");
    assert!(got.alive && got.ready);

    // Heartbeat goes stale: liveness fails with the reason.
    tokio::time::sleep(Duration::from_millis(450)).await;
    let r = get(addr, "/healthz").await;
    assert_eq!(r.status, 503);
    assert!(r.body.contains("heartbeat"), "{}", r.body);
    st.health.beat();
    assert_eq!(get(addr, "/healthz").await.status, 200);

    // Unknown path.
    assert_eq!(get(addr, "/nope").await.status, 404);

    // Shutdown releases the port.
    server.shutdown().await.unwrap();
    let e = tokio::task::spawn_blocking(move || http::get(addr, "/healthz", T))
        .await
        .unwrap();
    assert!(e.is_err(), "server still answering after shutdown");
}

#[tokio::test]
async fn bind_conflict_is_reported_with_the_address() {
    let st = state(Duration::from_secs(5));
    let first = spawn("127.0.0.1:0".parse().unwrap(), st.clone())
        .await
        .unwrap();
    let e = spawn(first.local_addr(), st).await.unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&first.local_addr().to_string()), "{msg}");
    first.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: curl (scripts/test installs it as root)"]
async fn curl_scrapes_metrics() {
    assert!(
        Command::new("curl").arg("--version").output().is_ok(),
        "curl not installed; scripts/test installs it as root: apt-get install -y curl"
    );
    let st = state(Duration::from_secs(5));
    st.metrics.reconcile_done(Duration::from_millis(2));
    let server = spawn("127.0.0.1:0".parse().unwrap(), st).await.unwrap();
    let url = format!("http://{}/metrics", server.local_addr());
    let out = tokio::task::spawn_blocking(move || {
        Command::new("curl")
            .args([
                "-sS",
                "--fail",
                "--max-time",
                "5",
                "-H",
                "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
                &url,
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = String::from_utf8(out.stdout).unwrap();
    assert!(body.contains("qosd_reconciles_total 1\n"), "{body}");
    assert!(body.ends_with("# EOF\n"));
    server.shutdown().await.unwrap();
}

/// A healthy, ready daemon's state.
fn ready_state() -> AppState {
    let st = state(Duration::from_secs(600));
    st.health.set_cri_reachable(true);
    st.health.set_reconciled();
    st
}

/// 12 probes, alternating `/healthz` and `/readyz`, each on a new
/// connection; returns each one's latency (and checks the answer).
async fn probe_latencies(addr: SocketAddr, during: &str) -> Vec<Duration> {
    let mut took = Vec::new();
    for i in 0..12 {
        let path = if i % 2 == 0 { "/healthz" } else { "/readyz" };
        let t = std::time::Instant::now();
        let r = get(addr, path).await;
        let dt = t.elapsed();
        assert_eq!(r.status, 200, "{path} during {during}: {}", r.body);
        assert!(r.body.starts_with("ok"), "{path}: {}", r.body);
        took.push(dt);
    }
    let ms: Vec<String> = took
        .iter()
        .map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0))
        .collect();
    eprintln!("probe latencies during {during} (ms): {}", ms.join(" "));
    for (i, d) in took.iter().enumerate() {
        assert!(
            *d < Duration::from_secs(2),
            "probe {i} during {during} took {d:?}"
        );
    }
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_while_400_keep_alive_clients_are_connected() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = spawn("127.0.0.1:0".parse().unwrap(), ready_state())
        .await
        .unwrap();
    let addr = server.local_addr();
    let (answered_tx, mut answered_rx) = tokio::sync::mpsc::channel::<bool>(400);
    let (hold_tx, hold_rx) = tokio::sync::watch::channel(false);
    let mut clients = Vec::new();
    for i in 0..400 {
        let answered = answered_tx.clone();
        let mut hold = hold_rx.clone();
        clients.push(tokio::spawn(async move {
            // From 8 addresses (127.0.0.1-8), 50 each: within the
            // per-address limit, so the server-wide cap is what is tested.
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.bind(std::net::SocketAddr::from((
                [127, 0, 0, 1 + (i % 8) as u8],
                0,
            )))
            .unwrap();
            let mut s = sock.connect(addr).await.unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: qosd\r\n\r\n")
                .await
                .unwrap();
            // The first bytes of the answer (or the server closing an idle
            // connection to make room), then stay connected.
            let mut buf = [0u8; 4096];
            let got = s.read(&mut buf).await.map(|n| n > 0).unwrap_or(false);
            let _ = answered.send(got).await;
            let _ = hold.wait_for(|h| *h).await;
            drop(s);
        }));
    }
    drop(answered_tx);
    // Wait until the server holds as many connections as it serves at once
    // (256 answered); the other clients are connected too (the kernel's
    // backlog or being served), every one holding its connection open.
    let mut answered = 0;
    let mut ended = 0;
    while answered < 256 {
        match tokio::time::timeout(Duration::from_secs(60), answered_rx.recv())
            .await
            .expect("256 keep-alive clients are answered")
        {
            Some(true) => answered += 1,
            Some(false) => ended += 1,
            None => break,
        }
    }
    assert_eq!(answered, 256, "{ended} closed before an answer");
    // While the other 144 connect and are answered.
    let took = probe_latencies(addr, "400 keep-alive clients connecting").await;
    assert_eq!(took.len(), 12);
    // Past the cap a new client takes the slot of the longest-idle one,
    // which may not have sent its request yet: at most 400 - 256 clients
    // lose their connection before an answer.
    while answered + ended < 400 {
        // Well before the connection lifetime (30 s) would free a slot.
        match tokio::time::timeout(Duration::from_secs(20), answered_rx.recv())
            .await
            .expect("every keep-alive client is answered or closed within 20 s")
        {
            Some(true) => answered += 1,
            Some(false) => ended += 1,
            None => break,
        }
    }
    eprintln!("{answered} of 400 keep-alive clients answered, {ended} closed before an answer");
    assert_eq!(answered + ended, 400);
    assert!(answered >= 256, "{answered} of 400 answered");
    // Every client connected and holding its connection.
    let took = probe_latencies(addr, "400 keep-alive clients connected").await;
    assert_eq!(took.len(), 12);
    let _ = hold_tx.send(true);
    for c in clients {
        c.await.unwrap();
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_during_a_slowloris_attack() {
    use tokio::io::AsyncWriteExt;
    let server = spawn("127.0.0.1:0".parse().unwrap(), ready_state())
        .await
        .unwrap();
    let addr = server.local_addr();
    const SLOW: usize = 400;
    let (started_tx, mut started_rx) = tokio::sync::mpsc::channel::<()>(SLOW);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut attackers = Vec::new();
    for _ in 0..SLOW {
        let started = started_tx.clone();
        let mut stop = stop_rx.clone();
        attackers.push(tokio::spawn(async move {
            let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
                let _ = started.send(()).await;
                return;
            };
            let request =
                b"GET /metrics HTTP/1.1\r\nHost: qosd\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
            let _ = s.write_all(&request[..1]).await;
            let _ = started.send(()).await;
            // One byte a second, as a slowloris client sends its headers.
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            for b in &request[1..] {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                if s.write_all(std::slice::from_ref(b)).await.is_err() {
                    return;
                }
            }
        }));
    }
    drop(started_tx);
    for _ in 0..SLOW {
        tokio::time::timeout(Duration::from_secs(60), started_rx.recv())
            .await
            .expect("every slow client starts");
    }
    let took = probe_latencies(addr, "a slowloris attack (400 clients)").await;
    assert_eq!(took.len(), 12);
    let _ = stop_tx.send(true);
    for a in attackers {
        a.await.unwrap();
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_half_closes_after_its_request_is_answered() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let st = ready_state();
    // `/status` asks for fresh per-pod usage and waits for it (up to 2 s):
    // the client's end of stream arrives while the answer is being made.
    let (wake, _measurer) = std::sync::mpsc::channel();
    st.health.set_usage_measurer(wake);
    let server = spawn("127.0.0.1:0".parse().unwrap(), st).await.unwrap();
    let addr = server.local_addr();
    for path in ["/healthz", "/readyz", "/metrics", "/status"] {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: qosd\r\n\r\n").as_bytes())
            .await
            .unwrap();
        s.shutdown().await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(T, s.read_to_end(&mut raw))
            .await
            .expect("the answer and the close come within 5 s")
            .unwrap();
        let r = http::parse_response(&raw)
            .unwrap_or_else(|e| panic!("{path}: {e}: {:?}", String::from_utf8_lossy(&raw)));
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert!(!r.body.is_empty(), "{path}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limits = crate::telemetry::server::ServerLimits {
        idle_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let server =
        crate::telemetry::server::spawn_with("127.0.0.1:0".parse().unwrap(), ready_state(), limits)
            .await
            .unwrap();
    let addr = server.local_addr();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: qosd\r\n\r\n")
        .await
        .unwrap();
    let t = std::time::Instant::now();
    // The answer, then (the client sending nothing more) the close.
    let mut raw = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut raw))
        .await
        .expect("an idle keep-alive connection is closed well before 5 s")
        .unwrap();
    let idle = t.elapsed();
    assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"));
    assert!(idle >= Duration::from_millis(250), "closed after {idle:?}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_address_never_closes_another_clients_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = spawn("127.0.0.1:0".parse().unwrap(), ready_state())
        .await
        .unwrap();
    let addr = server.local_addr();
    // A request on a keep-alive connection: the answer's status line.
    async fn ask(s: &mut tokio::net::TcpStream) -> String {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: qosd\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(T, s.read(&mut buf))
            .await
            .expect("an answer within 5 s")
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
    // The other client (127.0.0.2, also loopback): connected first, idle.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = sock.connect(addr).await.unwrap();
    assert!(ask(&mut other).await.starts_with("HTTP/1.1 200"));
    // 300 connections from 127.0.0.1, each asking once and staying open.
    let mut flood = Vec::new();
    let mut answered = 0;
    for _ in 0..300 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: qosd\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        if let Ok(Ok(n)) = tokio::time::timeout(T, s.read(&mut buf)).await {
            answered += usize::from(n > 0);
        }
        flood.push(s);
    }
    eprintln!("{answered} of 300 flood connections answered");
    assert!(answered > 0);
    // The flood closed its own idle connections to stay within 64, never
    // the other client's (the oldest idle connection of all).
    assert!(
        ask(&mut other).await.starts_with("HTTP/1.1 200"),
        "the other client's connection was closed"
    );
    drop(flood);
    server.shutdown().await.unwrap();
}
