//! The runtime misbehaving: down (clear error, exit 1), restarting while
//! qosd retries, a sandbox removed between list and status.
//! The "down" tests need no root; the others start containerd (root).

use std::time::{Duration, Instant};

use crate::support::*;
use qosd_node::cri::{inventory_of, ConnectOptions, CriClient, InventoryOptions, RetryPolicy};
use serde_json::Value;

#[test]
fn runtime_down_socket_missing() {
    let dir = tempfile::tempdir().unwrap();
    let ep = format!("unix://{}/containerd.sock", dir.path().display());
    let t = Instant::now();
    let (code, out, err) = qosd(&["pods", "--runtime-endpoint", &ep, "--retry-for", "0s"]);
    let took = t.elapsed();
    assert_eq!(code, 1, "stdout: {out}\nstderr: {err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("not reachable"), "{err}");
    assert!(err.contains("does not exist"), "{err}");
    assert!(err.contains(&ep), "{err}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    eprintln!("down (missing socket, no retry): {took:?}: {err}");
}

#[test]
fn a_missing_socket_fails_at_once_with_a_hint_despite_the_retry_budget() {
    let dir = tempfile::tempdir().unwrap();
    let ep = format!("unix://{}/containerd.sock", dir.path().display());
    let t = Instant::now();
    // The default --retry-for (5s) is for a runtime restarting, whose socket
    // exists; a missing socket file is a wrong endpoint or a stopped runtime.
    let (code, out, err) = qosd(&["pods", "--runtime-endpoint", &ep]);
    let took = t.elapsed();
    assert_eq!(code, 1, "stdout: {out}\nstderr: {err}");
    assert!(err.contains("does not exist"), "{err}");
    assert!(err.contains("is containerd running?"), "{err}");
    assert!(err.contains("--runtime-endpoint"), "{err}");
    assert!(err.contains("CONTAINER_RUNTIME_ENDPOINT"), "{err}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[test]
fn runtime_down_connection_refused_retries_then_fails() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("stale.sock");
    // A socket file nobody listens on: ECONNREFUSED, like a crashed runtime.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let ep = format!("unix://{}", sock.display());
    let t = Instant::now();
    let (code, _out, err) = qosd(&["pods", "--runtime-endpoint", &ep, "--retry-for", "1s"]);
    let took = t.elapsed();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not reachable"), "{err}");
    assert!(!err.contains("does not exist"), "{err}");
    // It retried for about the budget, not much longer.
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_secs(4),
        "took {took:?}"
    );
    let attempts: u32 = err
        .split(" attempt(s)")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    assert!(attempts >= 3, "expected several attempts: {err}");
    eprintln!("down (refused, 1s budget): {took:?}: {err}");
}

#[test]
fn bad_endpoint_is_bad_input() {
    let (code, _, err) = qosd(&["pods", "--runtime-endpoint", "tcp://127.0.0.1:1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("only unix://"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn runtime_restart_while_qosd_retries() {
    require_containerd();
    let mut env = Containerd::start();
    let pod = env
        .run_pod(
            &PodSpec::new("survivor").container(
                ContainerSpec::pause("app")
                    .cpu(Some(100), None)
                    .memory(Some(64 * MI), None),
            ),
        )
        .await;

    // 1. A connected client whose runtime restarts: the next call retries
    //    over the re-established connection.
    let client = env.client().await;
    assert_eq!(client.list_pod_sandboxes().await.unwrap().len(), 1);
    env.stop();
    let stopped = Instant::now();
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.list_pod_sandboxes().await }
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    env.start_again();
    let up = stopped.elapsed();
    let listed = call
        .await
        .unwrap()
        .expect("call retried across the restart");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, pod.sandbox_id);
    eprintln!(
        "client call across restart finished {:?} after the stop (runtime back after {up:?})",
        stopped.elapsed()
    );

    // 2. `qosd pods` started while the runtime is down waits for it.
    env.stop();
    let t = Instant::now();
    let ep = env.endpoint.clone();
    let cli = std::thread::spawn(move || {
        qosd(&[
            "pods",
            "--runtime-endpoint",
            &ep,
            "--output",
            "json",
            "--retry-for",
            "30s",
        ])
    });
    std::thread::sleep(Duration::from_millis(1500));
    env.start_again();
    let (code, out, err) = cli.join().unwrap();
    assert_eq!(code, 0, "{err}\n{}", env.log());
    let doc: Value = serde_json::from_str(&out).unwrap();
    let pods = doc["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 1, "{out}");
    assert_eq!(pods[0]["uid"], pod.spec.uid.as_str());
    assert_eq!(pods[0]["qos_class"], "Burstable");
    assert_eq!(pods[0]["state"], "ready");
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    eprintln!("qosd pods across a 1.5 s outage: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn sandbox_removed_between_list_and_status() {
    require_containerd();
    let env = Containerd::start();
    let gone = env
        .run_pod(&PodSpec::new("gone").container(ContainerSpec::pause("app")))
        .await;
    let stays = env
        .run_pod(
            &PodSpec::new("stays").container(
                ContainerSpec::pause("app")
                    .cpu(Some(300), Some(300))
                    .memory(Some(32 * MI), Some(32 * MI)),
            ),
        )
        .await;
    let client = CriClient::connect(
        &env.endpoint,
        ConnectOptions {
            retry: RetryPolicy::none(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let listed = client.list_pod_sandboxes().await.unwrap();
    assert_eq!(listed.len(), 2);
    env.remove_pod(&gone).await;

    let inv = inventory_of(&client, listed, &InventoryOptions::default())
        .await
        .expect("a vanished sandbox is no error");
    assert_eq!(inv.pods.len(), 1);
    assert_eq!(inv.pods[0].sandbox_id, stays.sandbox_id);
    assert_eq!(
        inv.pods[0].qos_class,
        qosd_model::core::model::QosClass::Guaranteed
    );
    assert_eq!(inv.skipped.len(), 1, "{:?}", inv.skipped);
    assert_eq!(inv.skipped[0].sandbox_id, gone.sandbox_id);
    assert!(
        inv.skipped[0].reason.contains("removed between"),
        "{}",
        inv.skipped[0].reason
    );
    eprintln!("skipped: {:?}", inv.skipped[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn notready_sandbox_is_reported_not_planned() {
    require_containerd();
    let env = Containerd::start();
    let stopped = env
        .run_pod(&PodSpec::new("stopped").container(ContainerSpec::pause("app")))
        .await;
    let client = env.client().await;
    client.stop_pod_sandbox(&stopped.sandbox_id).await.unwrap();
    let inv = qosd_node::cri::inventory(&client, &InventoryOptions::default())
        .await
        .unwrap();
    assert_eq!(inv.pods.len(), 1);
    assert_eq!(inv.pods[0].state, qosd_node::cri::SandboxState::NotReady);
    assert!(inv.ready_pods().is_empty());
    let (code, out, err) = qosd(&[
        "pods",
        "--runtime-endpoint",
        &env.endpoint,
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["pods"][0]["state"], "notready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn memhog_grows_on_signal_and_is_oom_killed() {
    require_containerd();
    let env = Containerd::start();
    // 8 MiB at start, +16 MiB per SIGUSR1; limit 40 MiB.
    let pod = env
        .run_pod(
            &PodSpec::new("hog").container(
                ContainerSpec::memhog("hog", &["8", "16", "0", "4096"])
                    .cpu(Some(100), Some(100))
                    .memory(Some(40 * MI), Some(40 * MI)),
            ),
        )
        .await;
    assert_eq!(pod.class, qosd_model::core::model::QosClass::Guaranteed);
    let id = pod.containers[0].1.clone();
    let usage = || env.container_memory_usage(&pod, &id).unwrap_or(0);
    let t = Instant::now();
    while usage() < 8 * MI && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = usage();
    assert!(first >= 8 * MI, "usage {first}");
    env.signal_container(&id, nix::sys::signal::Signal::SIGUSR1)
        .await;
    let t = Instant::now();
    while usage() < 24 * MI && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(usage() >= 24 * MI, "usage {} after one step", usage());
    // The next step crosses the 40 MiB limit: the kernel OOM-kills it.
    env.signal_container(&id, nix::sys::signal::Signal::SIGUSR1)
        .await;
    let st = env
        .wait_exited(&id, Duration::from_secs(10))
        .await
        .expect("memhog exits");
    assert_eq!(st.reason, "OOMKilled", "{st:?}");
    assert_eq!(st.exit_code, 137);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn inventory_of_twenty_pods_is_fast() {
    require_containerd();
    let env = Containerd::start();
    let t = Instant::now();
    for i in 0..20 {
        let c = match i % 3 {
            0 => ContainerSpec::pause("app")
                .cpu(Some(100), Some(100))
                .memory(Some(16 * MI), Some(16 * MI)),
            1 => ContainerSpec::pause("app").cpu(Some(50), None),
            _ => ContainerSpec::pause("app"),
        };
        env.run_pod(&PodSpec::new(&format!("p{i}")).container(c))
            .await;
    }
    eprintln!("20 pods started in {:?}", t.elapsed());
    let client = env.client().await;
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let inv = qosd_node::cri::inventory(&client, &InventoryOptions::default())
            .await
            .unwrap();
        best = best.min(t.elapsed());
        assert_eq!(inv.pods.len(), 20);
    }
    let t = Instant::now();
    let stats = client.list_container_stats().await.unwrap();
    let stats_took = t.elapsed();
    assert_eq!(stats.len(), 20);
    eprintln!("inventory of 20 pods: best {best:?}; ListContainerStats: {stats_took:?}");
    assert!(best < Duration::from_secs(2), "{best:?}");
}

/// The daemon's cached listing (statuses asked once per id) against real
/// containerd follows pods stopping, going away and arriving exactly like an
/// uncached inventory, and holds entries only for listed ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn cached_listing_matches_a_fresh_inventory() {
    require_containerd();
    use qosd_node::pods::{PodSourceSpec, Source};
    let env = Containerd::start();
    let a = env
        .run_pod(
            &PodSpec::new("a").container(
                ContainerSpec::pause("app")
                    .cpu(Some(100), Some(100))
                    .memory(Some(32 * MI), Some(32 * MI)),
            ),
        )
        .await;
    let b = env
        .run_pod(&PodSpec::new("b").container(ContainerSpec::pause("app").cpu(Some(50), None)))
        .await;
    let spec = PodSourceSpec::Cri {
        endpoint: env.endpoint.clone(),
    };
    let source = Source::connect(&spec, ConnectOptions::default(), 0)
        .await
        .unwrap();
    let client = env.client().await;
    let fresh = || async {
        let mut p = qosd_node::cri::inventory(
            &client,
            &InventoryOptions {
                memory_capacity_bytes: Some(0),
            },
        )
        .await
        .unwrap()
        .pods;
        p.sort_by(|x, y| x.sandbox_id.cmp(&y.sandbox_id));
        p
    };
    let cached = || async {
        let mut p = source.list().await.unwrap().live;
        p.sort_by(|x, y| x.sandbox_id.cmp(&y.sandbox_id));
        p
    };
    assert_eq!(cached().await, fresh().await);
    assert_eq!(source.cached_statuses(), (2, 2));
    assert_eq!(cached().await, fresh().await, "second, cached listing");

    client.stop_pod_sandbox(&b.sandbox_id).await.unwrap();
    let after_stop = cached().await;
    assert_eq!(after_stop, fresh().await);
    let sb = after_stop
        .iter()
        .find(|p| p.sandbox_id == b.sandbox_id)
        .unwrap();
    assert_eq!(sb.state, qosd_node::cri::SandboxState::NotReady);
    assert!(
        sb.containers.iter().all(|c| c.state == "exited"),
        "{:?}",
        sb.containers
    );

    env.remove_pod(&b).await;
    let c = env
        .run_pod(&PodSpec::new("c").container(ContainerSpec::pause("app")))
        .await;
    let now = cached().await;
    assert_eq!(now, fresh().await);
    let ids: Vec<&str> = now.iter().map(|p| p.sandbox_id.as_str()).collect();
    assert!(ids.contains(&a.sandbox_id.as_str()) && ids.contains(&c.sandbox_id.as_str()));
    assert!(!ids.contains(&b.sandbox_id.as_str()));
    assert_eq!(source.cached_statuses(), (2, 2), "b's entries dropped");
}
