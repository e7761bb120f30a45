//! containerd's event stream against a real containerd: which topics each
//! CRI call publishes (the facts `src/cri/events.rs` builds on), that the
//! marker proves a subscription live, and that `qosd run` with a long
//! reconcile interval sees pods come and go through the events, falls back
//! to listing when the events are unavailable, and resubscribes after a
//! runtime restart.

mod support;

use std::time::Duration;

use qosd::cri::events::{self, proto as ev, Change};
use support::*;
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

    rs.stop_container(qosd::cri::proto::StopContainerRequest {
        container_id: cid.clone(),
        timeout: 0,
    })
    .await
    .unwrap();
    let stop = drain(&mut s).await;
    rs.remove_container(qosd::cri::proto::RemoveContainerRequest {
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
