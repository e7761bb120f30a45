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
    let got = tokio::task::spawn_blocking(move || crate::telemetry::client::fetch_status(addr, T))
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
