//! containerd's event stream against a real containerd: which topics each
//! CRI call publishes (the facts `src/cri/events.rs` builds on), that the
//! marker proves a subscription live, and that `qosd run` with a long
//! reconcile interval sees pods come and go through the events, falls back
//! to listing when the events are unavailable, and resubscribes after a
//! runtime restart.

use std::time::Duration;

use crate::support::*;
use qosd_node::cri::events::{self, proto as ev, Change};
use tokio_stream::StreamExt;

/// A raw subscription to every event of the CRI namespace, live (the first
/// marker came back) when returned.
async fn raw_subscription(env: &Containerd) -> tonic::Streaming<ev::Envelope> {
    let ch = tonic::transport::Endpoint::from_shared(env.endpoint.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = ev::events_client::EventsClient::new(ch);
    let mut sub = c.clone();
    let stream = tokio::spawn(async move {
        sub.subscribe(ev::SubscribeRequest {
            filters: vec![format!("namespace=={}", events::NAMESPACE)],
        })
        .await
        .unwrap()
        .into_inner()
    });
    // Publish markers until the stream's headers (sent with its first
    // event) arrive.
    for _ in 0..50 {
        let mut req = tonic::Request::new(ev::PublishRequest {
            topic: events::MARKER_TOPIC.into(),
            event: Some(ev::Any {
                type_url: "qosd.test".into(),
                value: vec![1],
            }),
        });
        req.metadata_mut()
            .insert("containerd-namespace", events::NAMESPACE.parse().unwrap());
        c.publish(req).await.expect("Publish of the marker");
        if stream.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut s = stream.await.unwrap();
    let first = s.message().await.unwrap().expect("an event");
    assert_eq!(first.topic, events::MARKER_TOPIC);
    assert_eq!(first.namespace, events::NAMESPACE);
    // Markers published before the subscription registered are lost; the
    // rest follow: drain them.
    drain(&mut s).await;
    s
}

/// The topics that arrive within a quiet half second (markers left out).
async fn drain(s: &mut tonic::Streaming<ev::Envelope>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), s.next()).await {
        let m = m.unwrap();
        if m.topic != events::MARKER_TOPIC {
            out.push(m.topic);
        }
    }
    out
}

fn watched(topics: &[String]) -> Vec<&str> {
    topics
        .iter()
        .filter(|t| {
            !matches!(
                events::classify(events::NAMESPACE, t, "x"),
                Change::Other | Change::Marker
            )
        })
        .map(String::as_str)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn each_cri_call_that_changes_a_listing_publishes_a_watched_topic() {
    require_containerd();
    let env = Containerd::start();
    let mut s = raw_subscription(&env).await;
    let client = env.client().await;
    let mut rs = client.runtime_service();

    let pod = env
        .run_pod(&PodSpec::new("a").container(ContainerSpec::pause("app").cpu(Some(100), None)))
        .await;
    let run = drain(&mut s).await;
    let cid = pod.containers[0].1.clone();

    let mut res = pod.containers[0].2.clone();
    res.cpu_shares = 204;
    client.update_container_resources(&cid, res).await.unwrap();
    let update = drain(&mut s).await;

    rs.stop_container(qosd_node::cri::proto::StopContainerRequest {
        container_id: cid.clone(),
        timeout: 0,
    })
    .await
    .unwrap();
    let stop = drain(&mut s).await;
    rs.remove_container(qosd_node::cri::proto::RemoveContainerRequest {
        container_id: cid.clone(),
    })
    .await
    .unwrap();
    let remove = drain(&mut s).await;
    client.stop_pod_sandbox(&pod.sandbox_id).await.unwrap();
    let stop_sandbox = drain(&mut s).await;
    client.remove_pod_sandbox(&pod.sandbox_id).await.unwrap();
    let remove_sandbox = drain(&mut s).await;

    for (what, topics) in [
        ("RunPodSandbox+CreateContainer+StartContainer", &run),
        ("UpdateContainerResources", &update),
        ("StopContainer", &stop),
        ("RemoveContainer", &remove),
        ("StopPodSandbox", &stop_sandbox),
        ("RemovePodSandbox", &remove_sandbox),
    ] {
        eprintln!("{what}: {topics:?}");
        assert!(
            !watched(topics).is_empty(),
            "{what} published no watched topic: {topics:?}"
        );
    }
    // The specific facts the daemon relies on.
    assert!(
        run.iter().filter(|t| *t == "/containers/create").count() >= 2,
        "{run:?}"
    );
    assert!(
        run.iter().filter(|t| *t == "/tasks/start").count() >= 2,
        "{run:?}"
    );
    assert!(
        update.contains(&"/containers/update".to_string()),
        "{update:?}"
    );
    assert!(stop.contains(&"/tasks/exit".to_string()), "{stop:?}");
    assert!(
        remove.contains(&"/containers/delete".to_string()),
        "{remove:?}"
    );
    assert!(
        stop_sandbox.contains(&"/tasks/exit".to_string()),
        "{stop_sandbox:?}"
    );
    assert!(
        remove_sandbox.contains(&"/containers/delete".to_string()),
        "{remove_sandbox:?}"
    );
}

/// `qosd run` against `env`: enforcing, `reconcile` apart, orphans removed
/// at once.
fn start_daemon(env: &Containerd, reconcile: &str) -> Daemon {
    let mut args = vec!["run"];
    args.extend(env.qosd_flags());
    let root = env.dir().to_str().unwrap().to_string();
    let root: &'static str = Box::leak(root.into_boxed_str());
    args.extend([
        "--reconcile-interval",
        reconcile,
        "--relist-interval",
        "1s",
        "--orphan-grace-period",
        "0s",
        "--root-dir",
        root,
    ]);
    Daemon::start(&args)
}

fn events_state(d: &Daemon) -> String {
    d.status()["runtime_events"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn list_calls(d: &Daemon) -> f64 {
    d.metric("qosd_cri_calls_total{method=\"ListPodSandbox\"}")
        .expect("the ListPodSandbox call counter")
}

fn cpu_shares(env: &Containerd, p: &RunningPod) -> Option<i64> {
    std::fs::read_to_string(env.cgroup_dir("cpu", p).join("cpu.shares"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// With a 5 min reconcile interval, pods started, resized in place and
/// removed are seen through the runtime's events well before the 60 s
/// safety relist — also a sandbox removed after its cgroups changed for
/// the last time (no pod cgroup event announces that removal: the sequence
/// that an earlier event-only design missed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn pods_come_and_go_through_the_runtime_events() {
    require_containerd();
    let env = Containerd::start();
    let keep = env
        .run_pod(&PodSpec::new("keep").container(ContainerSpec::pause("app").cpu(Some(100), None)))
        .await;
    let mut d = start_daemon(&env, "5m");
    wait_for("the runtime events live", Duration::from_secs(30), || {
        d.get("/status").is_some() && events_state(&d) == "live"
    });
    wait_for("the first pod enforced", Duration::from_secs(30), || {
        cpu_shares(&env, &keep) == Some(kubelet::shares(100))
    });
    assert!(d.log().contains("runtime events on"), "{}", d.log());

    // A pod started: enforced.
    let new = env
        .run_pod(&PodSpec::new("new").container(ContainerSpec::pause("app").cpu(Some(300), None)))
        .await;
    wait_for("the new pod enforced", Duration::from_secs(30), || {
        cpu_shares(&env, &new) == Some(kubelet::shares(300))
    });

    // Resized in place (UpdateContainerResources changes no listing): the
    // pod cgroup follows.
    let client = env.client().await;
    let mut res = new.containers[0].2.clone();
    res.cpu_shares = kubelet::shares(500);
    client
        .update_container_resources(&new.containers[0].1, res)
        .await
        .unwrap();
    wait_for("the resized pod enforced", Duration::from_secs(30), || {
        cpu_shares(&env, &new) == Some(kubelet::shares(500))
    });

    // Stopped: its containers' cgroups go (runc), the pod cgroup stays (the
    // sandbox is still listed, NOTREADY).
    client.stop_pod_sandbox(&new.sandbox_id).await.unwrap();
    wait_for(
        "the stopped pod counted out",
        Duration::from_secs(30),
        || d.status()["pods"]["burstable"].as_u64() == Some(1),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        env.cgroup_dir("cpu", &new).exists(),
        "the stopped sandbox's pod cgroup is kept while it is listed"
    );
    // Removed: nothing changes in cgroupfs; only the runtime's event says
    // so. The pod cgroup, now an orphan, goes.
    client.remove_pod_sandbox(&new.sandbox_id).await.unwrap();
    wait_for(
        "the removed pod's cgroup removed (before the 60 s safety relist)",
        Duration::from_secs(30),
        || !env.cgroup_dir("cpu", &new).exists(),
    );
    assert_eq!(cpu_shares(&env, &keep), Some(kubelet::shares(100)));
    d.assert_healthy();
    d.stop();
}

/// With the event stream live, a quiet daemon lists nothing on its timer
/// ticks (1 s). The runtime restarts: the stream ends, the daemon lists at
/// every reconcile meanwhile, subscribes again, and keeps enforcing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn a_runtime_restart_falls_back_to_listing_and_resubscribes() {
    require_containerd();
    let mut env = Containerd::start();
    let before = env
        .run_pod(
            &PodSpec::new("before").container(ContainerSpec::pause("app").cpu(Some(100), None)),
        )
        .await;
    let mut d = start_daemon(&env, "1s");
    wait_for("the runtime events live", Duration::from_secs(30), || {
        d.get("/status").is_some() && events_state(&d) == "live"
    });
    let (code, out, err) = qosd(&["status", "--address", &d.addr.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("runtime events: live"), "{out}");
    // Quiet: reconciles go on, the runtime is not listed.
    let settled = wait_until(Duration::from_secs(20), || {
        let l0 = list_calls(&d);
        std::thread::sleep(Duration::from_millis(1500));
        list_calls(&d) == l0
    });
    assert!(settled.is_some(), "the daemon never stopped listing");
    let (l0, r0) = (list_calls(&d), d.metric("qosd_reconciles_total").unwrap());
    wait_for("three more reconciles", Duration::from_secs(30), || {
        d.metric("qosd_reconciles_total").unwrap_or(0.0) >= r0 + 3.0
    });
    assert_eq!(
        list_calls(&d),
        l0,
        "a reconcile with no runtime event listed the runtime"
    );

    env.stop();
    wait_for("the runtime events down", Duration::from_secs(30), || {
        events_state(&d).starts_with("down: ")
    });
    assert!(d.log().contains("runtime events off"), "{}", d.log());
    env.start_again();
    wait_for(
        "the runtime events live again",
        Duration::from_secs(60),
        || events_state(&d) == "live",
    );
    let p = env
        .run_pod(&PodSpec::new("after").container(ContainerSpec::pause("app").cpu(Some(200), None)))
        .await;
    wait_for(
        "the pod started after the restart enforced",
        Duration::from_secs(30),
        || cpu_shares(&env, &p) == Some(kubelet::shares(200)),
    );
    assert_eq!(cpu_shares(&env, &before), Some(kubelet::shares(100)));
    d.assert_healthy();
    d.stop();
}
