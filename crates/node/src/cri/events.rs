//! containerd's native event stream (`containerd.services.events.v1.Events`,
//! served on the same socket as the CRI): a subscriber that tells the daemon
//! when what a CRI listing shows may have changed, so that a timer tick with
//! no event needs no `ListPodSandbox` / `ListContainers`.
//!
//! What containerd 1.6's CRI plugin publishes (namespace `k8s.io`; checked
//! on the real containerd by `tests/cri/cri_events.rs`):
//!
//! | CRI call | topics |
//! |---|---|
//! | RunPodSandbox | `/containers/create`, `/tasks/create`, `/tasks/start` (pause container) |
//! | CreateContainer | `/containers/create` |
//! | StartContainer | `/tasks/create`, `/tasks/start` |
//! | a container's process exits / StopContainer / StopPodSandbox | `/tasks/exit` (then `/tasks/delete`) |
//! | RemoveContainer / RemovePodSandbox | `/containers/delete` |
//! | UpdateContainerResources | `/containers/update` |
//!
//! The sandbox's own state lives in the CRI plugin's memory, not in
//! containerd's metadata; it changes right after these events (the daemon
//! relists 30 ms after an event and once more 700 ms after the last one).
//!
//! **Liveness.** containerd sends a Subscribe stream's response headers
//! only with its first event, so a returned Subscribe call does not prove
//! that the subscription is registered. The subscriber publishes a marker
//! event of its own ([`MARKER_TOPIC`], included in the filters) until any
//! event comes back on the stream: from then on every later change is on
//! the stream, and only a listing taken after that instant is guarded by it
//! ([`Feed::epoch`]).
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};
use tonic::Code;

/// Code generated from `proto/containerd/events/v1/events.proto`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("containerd.services.events.v1");
}

/// The CRI plugin's containerd namespace.
pub const NAMESPACE: &str = "k8s.io";

/// The marker qosd publishes to learn that its subscription is live.
pub const MARKER_TOPIC: &str = "/qosd/sync";

/// Topics that change what ListPodSandbox / ListContainers (or a container's
/// status) show. `/tasks/create` is left out: `/tasks/start` follows it.
pub(crate) const TOPICS: &[&str] = &[
    "/containers/create",
    "/containers/update",
    "/containers/delete",
    "/tasks/start",
    "/tasks/exit",
    "/tasks/delete",
];

/// The Subscribe filters: each watched topic, and the marker, in the CRI
/// namespace (containerd ORs the filters; the conditions of one are ANDed).
pub(crate) fn filters() -> Vec<String> {
    TOPICS
        .iter()
        .chain(std::iter::once(&MARKER_TOPIC))
        .map(|t| format!("namespace=={NAMESPACE},topic==\"{t}\""))
        .collect()
}

/// What one envelope means to the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Our marker (or any event before it: the stream is live).
    Marker,
    /// A container's resources were updated (`/containers/update`): its
    /// status must be asked again.
    Updated(String),
    /// Sandboxes or containers were created, started, exited or removed.
    Listing(String),
    /// Not one of ours (filtered out by containerd; ignored).
    Other,
}

/// Classify an envelope by topic and namespace (pure).
pub fn classify(namespace: &str, topic: &str, container_id: &str) -> Change {
    if namespace != NAMESPACE {
        return Change::Other;
    }
    if topic == MARKER_TOPIC {
        return Change::Marker;
    }
    if topic == "/containers/update" {
        return Change::Updated(container_id.to_string());
    }
    if TOPICS.contains(&topic) {
        return Change::Listing(container_id.to_string());
    }
    Change::Other
}

/// The container id in an event's payload (field 1 of every watched event).
fn container_id(event: Option<&proto::Any>) -> String {
    use prost::Message;
    event
        .and_then(|a| proto::ContainerRef::decode(a.value.as_slice()).ok())
        .map(|r| r.id)
        .unwrap_or_default()
}

/// The subscription's state as the daemon sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Feed {
    /// Live: every change from now on arrives on the stream.
    pub live: bool,
    /// Bumped each time the stream becomes live: a listing taken under an
    /// older epoch (or while not live) is not guarded by the stream.
    pub epoch: u64,
    /// Events that change a listing, counted since the start.
    pub changes: u64,
    /// Containers updated in place since the start (their ids, newest last,
    /// at most 64; `updates` counts them all).
    pub updated: Vec<String>,
    /// `/containers/update` events since the start (all of them, unlike
    /// `updated`).
    pub updates: u64,
    /// Why the stream is not live (`None` while live or before the first
    /// attempt ended).
    pub down: Option<String>,
    /// The runtime does not serve the events API (e.g. CRI-O).
    pub unsupported: bool,
    /// Markers seen on the stream (each [`Prober::probe`] waits for one).
    pub markers: u64,
}

/// Updated ids kept in [`Feed::updated`].
pub(crate) const MAX_UPDATED: usize = 64;

impl Feed {
    fn apply(&mut self, c: Change) {
        match c {
            Change::Marker => self.markers += 1,
            Change::Other => {}
            Change::Listing(_) => self.changes += 1,
            Change::Updated(id) => {
                self.changes += 1;
                self.updates += 1;
                if self.updated.len() == MAX_UPDATED {
                    self.updated.remove(0);
                }
                self.updated.push(id);
            }
        }
    }
}

/// Why a subscription attempt ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EventsError {
    /// The socket could not be opened.
    #[error("containerd events at {endpoint}: cannot connect: {detail}")]
    Connect { endpoint: String, detail: String },
    #[error("containerd events at {endpoint}: {method}: {code:?}: {message}")]
    Call {
        endpoint: String,
        method: &'static str,
        code: Code,
        message: String,
    },
    #[error("containerd events at {endpoint}: the stream ended")]
    Ended { endpoint: String },
    #[error("containerd events at {endpoint}: no event came back within {waited:?} of subscribing (marker {MARKER_TOPIC} published {published} time(s))")]
    NoMarker {
        endpoint: String,
        waited: Duration,
        published: u32,
    },
}

impl EventsError {
    /// The runtime answered that it does not serve this API.
    pub(crate) fn unsupported(&self) -> bool {
        matches!(
            self,
            EventsError::Call {
                code: Code::Unimplemented,
                ..
            }
        )
    }
}

/// How often the marker is published while waiting for the stream.
const MARKER_EVERY: Duration = Duration::from_millis(200);
/// Give up on an attempt whose stream shows nothing for this long.
const MARKER_WAIT: Duration = Duration::from_secs(10);
/// The first delay between attempts; it doubles after each failure.
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// The longest delay between attempts.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The delay before attempt `n + 1` after `n` consecutive failures (pure).
pub(crate) fn backoff(failures: u32) -> Duration {
    qosd_model::core::backoff::Backoff::new(BACKOFF_FIRST, BACKOFF_MAX).delay(failures)
}

/// The subscriber task: subscribes, proves the stream live, counts the
/// changes into the watch channel; on an error or the end of the stream
/// marks the feed down and subscribes again after a backoff. Ends when
/// every receiver is gone.
pub fn spawn(
    endpoint: &str,
    connect_timeout: Duration,
) -> Result<(tokio::sync::watch::Receiver<Feed>, Prober), crate::cri::CriError> {
    let path = crate::cri::client::parse_endpoint(endpoint)?;
    let (tx, rx) = tokio::sync::watch::channel(Feed::default());
    let prober = Prober {
        client: Arc::default(),
        feed: rx.clone(),
    };
    let shared = prober.client.clone();
    let endpoint = endpoint.to_string();
    tokio::spawn(async move {
        let mut failures = 0u32;
        loop {
            let r = subscribe_once(&endpoint, &path, connect_timeout, &tx, &shared).await;
            *shared.lock().unwrap_or_else(|e| e.into_inner()) = None;
            if tx.is_closed() {
                return;
            }
            let e = match r {
                Ok(()) => EventsError::Ended {
                    endpoint: endpoint.clone(),
                },
                Err(e) => e,
            };
            // A stream that was live resets the backoff.
            if tx.borrow().live {
                failures = 0;
            }
            failures += 1;
            let unsupported = e.unsupported();
            tx.send_modify(|f| {
                f.live = false;
                f.down = Some(e.to_string());
                f.unsupported = unsupported;
            });
            let delay = if unsupported {
                BACKOFF_MAX
            } else {
                backoff(failures)
            };
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = tx.closed() => return,
            }
        }
    });
    Ok((rx, prober))
}

/// The live subscription's client, for [`Prober::probe`].
type SharedClient = Arc<std::sync::Mutex<Option<proto::events_client::EventsClient<Channel>>>>;

/// Checks, at a reconcile, that the live stream still delivers: a marker
/// published now comes back on it. containerd delivers a subscriber's
/// events in the order they were published, so every change made before
/// the marker has arrived by the time the marker does.
#[derive(Debug, Clone)]
pub struct Prober {
    client: SharedClient,
    feed: tokio::sync::watch::Receiver<Feed>,
}

/// How long a probe waits for the Publish answer, and then for the marker.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

impl Prober {
    /// Publish a marker and wait for it on the stream. `false`: not live,
    /// the runtime did not answer, or the marker did not come back within
    /// two seconds (the caller lists, as without events).
    pub async fn probe(&self) -> bool {
        let Some(client) = self
            .client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return false;
        };
        // A receiver of its own: waiting here consumes no change the
        // caller's receiver has yet to see.
        let mut feed = self.feed.clone();
        let (epoch, before) = {
            let f = feed.borrow_and_update();
            if !f.live {
                return false;
            }
            (f.epoch, f.markers)
        };
        let published = tokio::time::timeout(
            PROBE_TIMEOUT,
            publish_marker(client, u32::try_from(before).unwrap_or(0)),
        )
        .await;
        if !matches!(published, Ok(Ok(()))) {
            return false;
        }
        let back = tokio::time::timeout(
            PROBE_TIMEOUT,
            feed.wait_for(|f| !f.live || f.epoch != epoch || f.markers > before),
        )
        .await;
        matches!(back, Ok(Ok(f)) if f.live && f.epoch == epoch)
    }
}

/// One subscription, until it ends (`Ok`) or fails.
async fn subscribe_once(
    endpoint: &str,
    path: &std::path::Path,
    connect_timeout: Duration,
    tx: &tokio::sync::watch::Sender<Feed>,
    shared: &SharedClient,
) -> Result<(), EventsError> {
    use proto::events_client::EventsClient;
    // A channel of its own, without the CRI client's per-call timeout: a
    // stream lives for as long as containerd does.
    let channel: Channel = Endpoint::from_shared(format!("unix://{}", path.display()))
        .map_err(|e| EventsError::Connect {
            endpoint: endpoint.to_string(),
            detail: e.to_string(),
        })?
        .connect_timeout(connect_timeout)
        .connect()
        .await
        .map_err(|e| EventsError::Connect {
            endpoint: endpoint.to_string(),
            detail: crate::cri::client::error_chain(&e),
        })?;
    let client = EventsClient::new(channel).max_decoding_message_size(1024 * 1024);
    let call = |method: &'static str, s: tonic::Status| EventsError::Call {
        endpoint: endpoint.to_string(),
        method,
        code: s.code(),
        message: s.message().to_string(),
    };
    // Subscribe, and wait for its first envelope while publishing the
    // marker: whatever comes first back proves the subscription registered.
    let mut sub = client.clone();
    let first = async move {
        let mut stream = sub
            .subscribe(proto::SubscribeRequest { filters: filters() })
            .await
            .map_err(|s| call("Subscribe", s))?
            .into_inner();
        let first = stream.message().await.map_err(|s| call("Subscribe", s))?;
        Ok::<_, EventsError>((stream, first))
    };
    tokio::pin!(first);
    let start = tokio::time::Instant::now();
    let mut published = 0u32;
    let mut every = tokio::time::interval(MARKER_EVERY);
    let (mut stream, first) = loop {
        tokio::select! {
            r = &mut first => break r?,
            _ = every.tick() => {
                if start.elapsed() >= MARKER_WAIT {
                    return Err(EventsError::NoMarker {
                        endpoint: endpoint.to_string(),
                        waited: start.elapsed(),
                        published,
                    });
                }
                publish_marker(client.clone(), published)
                    .await
                    .map_err(|s| call("Publish", s))?;
                published += 1;
            }
        }
    };
    let Some(first) = first else {
        return Ok(());
    };
    *shared.lock().unwrap_or_else(|e| e.into_inner()) = Some(client.clone());
    tx.send_modify(|f| {
        f.live = true;
        f.epoch += 1;
        f.down = None;
        f.unsupported = false;
    });
    // The first envelope proved the stream live; it is no change (a marker),
    // or one made before the listing that follows.
    let mut next: Option<proto::Envelope> = None;
    drop(first);
    loop {
        if let Some(env) = next.take() {
            let c = classify(
                &env.namespace,
                &env.topic,
                &container_id(env.event.as_ref()),
            );
            tracing::trace!(topic = %env.topic, change = ?c, "containerd event");
            if !matches!(c, Change::Other) {
                tx.send_modify(|f| f.apply(c));
            }
        }
        tokio::select! {
            m = stream.message() => match m.map_err(|s| call("Subscribe", s))? {
                Some(env) => next = Some(env),
                None => return Ok(()),
            },
            _ = tx.closed() => return Ok(()),
        }
    }
}

/// Publish the marker event in the CRI namespace.
async fn publish_marker(
    mut client: proto::events_client::EventsClient<Channel>,
    n: u32,
) -> Result<(), tonic::Status> {
    let mut req = tonic::Request::new(proto::PublishRequest {
        topic: MARKER_TOPIC.to_string(),
        event: Some(proto::Any {
            type_url: "qosd.sync".to_string(),
            value: n.to_le_bytes().to_vec(),
        }),
    });
    req.metadata_mut().insert(
        "containerd-namespace",
        tonic::metadata::MetadataValue::from_static(NAMESPACE),
    );
    req.set_timeout(PROBE_TIMEOUT);
    client.publish(req).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_name_each_topic_and_the_marker_in_the_cri_namespace() {
        let f = filters();
        assert_eq!(f.len(), TOPICS.len() + 1);
        assert!(f.contains(&"namespace==k8s.io,topic==\"/containers/delete\"".to_string()));
        assert!(f.contains(&"namespace==k8s.io,topic==\"/qosd/sync\"".to_string()));
        assert!(f
            .iter()
            .all(|s| s.starts_with("namespace==k8s.io,topic==\"/")));
    }

    #[test]
    fn classify_table() {
        let cases: &[(&str, &str, Change)] = &[
            ("k8s.io", "/qosd/sync", Change::Marker),
            ("k8s.io", "/containers/create", Change::Listing("c1".into())),
            ("k8s.io", "/containers/delete", Change::Listing("c1".into())),
            ("k8s.io", "/tasks/start", Change::Listing("c1".into())),
            ("k8s.io", "/tasks/exit", Change::Listing("c1".into())),
            ("k8s.io", "/tasks/delete", Change::Listing("c1".into())),
            ("k8s.io", "/containers/update", Change::Updated("c1".into())),
            ("k8s.io", "/tasks/oom", Change::Other),
            ("k8s.io", "/images/update", Change::Other),
            ("moby", "/containers/delete", Change::Other),
            ("moby", "/qosd/sync", Change::Other),
        ];
        for (ns, topic, want) in cases {
            assert_eq!(&classify(ns, topic, "c1"), want, "{ns} {topic}");
        }
    }

    #[test]
    fn feed_counts_changes_and_keeps_the_newest_updated_ids() {
        let mut f = Feed::default();
        f.apply(Change::Marker);
        f.apply(Change::Other);
        assert_eq!(f.changes, 0);
        f.apply(Change::Listing("a".into()));
        assert_eq!(f.changes, 1);
        for i in 0..(MAX_UPDATED + 3) {
            f.apply(Change::Updated(format!("u{i}")));
        }
        assert_eq!(f.updates, MAX_UPDATED as u64 + 3);
        assert_eq!(f.changes, MAX_UPDATED as u64 + 4);
        assert_eq!(f.updated.len(), MAX_UPDATED);
        assert_eq!(f.updated.last().unwrap(), &format!("u{}", MAX_UPDATED + 2));
        assert_eq!(f.updated.first().unwrap(), "u3");
    }

    #[test]
    fn container_id_is_field_one_of_the_payload() {
        use prost::Message;
        let any = proto::Any {
            type_url: "containerd.events.TaskExit".into(),
            value: proto::ContainerRef { id: "abc".into() }.encode_to_vec(),
        };
        assert_eq!(container_id(Some(&any)), "abc");
        assert_eq!(container_id(None), "");
        let junk = proto::Any {
            type_url: "x".into(),
            value: vec![0xff, 0xff],
        };
        assert_eq!(container_id(Some(&junk)), "");
    }

    /// A fake containerd events service: Publish goes to every registered
    /// subscriber; a subscription registers `register_after` after the
    /// call arrives (markers published before are lost, as on containerd
    /// while the subscription is not registered yet).
    #[derive(Clone)]
    struct FakeEvents {
        tx: tokio::sync::broadcast::Sender<proto::Envelope>,
        register_after: Duration,
        published: std::sync::Arc<std::sync::atomic::AtomicU32>,
        /// Ends every open stream (a runtime restart, as the client sees it).
        end: std::sync::Arc<tokio::sync::Notify>,
        /// Publish answers but delivers nothing (a stream that stalled).
        swallow: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    #[tonic::async_trait]
    impl proto::events_server::Events for FakeEvents {
        async fn publish(
            &self,
            r: tonic::Request<proto::PublishRequest>,
        ) -> Result<tonic::Response<proto::Empty>, tonic::Status> {
            let ns = r
                .metadata()
                .get("containerd-namespace")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| tonic::Status::failed_precondition("namespace is required"))?
                .to_string();
            let r = r.into_inner();
            self.published
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if self.swallow.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(tonic::Response::new(proto::Empty {}));
            }
            let _ = self.tx.send(proto::Envelope {
                timestamp: None,
                namespace: ns,
                topic: r.topic,
                event: r.event,
            });
            Ok(tonic::Response::new(proto::Empty {}))
        }

        async fn subscribe(
            &self,
            _r: tonic::Request<proto::SubscribeRequest>,
        ) -> Result<
            tonic::Response<
                std::pin::Pin<
                    Box<
                        dyn tokio_stream::Stream<Item = Result<proto::Envelope, tonic::Status>>
                            + Send,
                    >,
                >,
            >,
            tonic::Status,
        > {
            tokio::time::sleep(self.register_after).await;
            let mut from = self.tx.subscribe();
            let (to, rx) = tokio::sync::mpsc::channel(64);
            let end = self.end.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        m = from.recv() => {
                            let Ok(m) = m else { return };
                            if to.send(Ok(m)).await.is_err() {
                                return;
                            }
                        }
                        _ = end.notified() => return,
                    }
                }
            });
            Ok(tonic::Response::new(Box::pin(
                tokio_stream::wrappers::ReceiverStream::new(rx),
            )))
        }
    }

    async fn serve_events(fake: FakeEvents, sock: &std::path::Path) -> tokio::task::JoinHandle<()> {
        let _ = std::fs::remove_file(sock);
        let listener = tokio::net::UnixListener::bind(sock).unwrap();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(proto::events_server::EventsServer::new(fake))
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
                .await
                .unwrap();
        })
    }

    async fn wait_for(
        rx: &mut tokio::sync::watch::Receiver<Feed>,
        what: &str,
        ok: impl Fn(&Feed) -> bool,
    ) -> Feed {
        let r = tokio::time::timeout(Duration::from_secs(20), rx.wait_for(|f| ok(f)))
            .await
            .map(|r| r.map(|f| f.clone()));
        match r {
            Ok(Ok(f)) => f,
            _ => panic!("feed never {what}: {:?}", *rx.borrow()),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_runtime_without_the_events_api_is_unsupported() {
        // A CRI server alone (every method Unimplemented): Subscribe is
        // answered Unimplemented, as by CRI-O.
        struct Nothing;
        impl crate::cri::proto::runtime_service_server::RuntimeService for Nothing {}
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("cri.sock");
        let listener = tokio::net::UnixListener::bind(&sock).unwrap();
        let _srv = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(
                    crate::cri::proto::runtime_service_server::RuntimeServiceServer::new(Nothing),
                )
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
                .await
                .unwrap();
        });
        let (mut rx, prober) = spawn(
            &format!("unix://{}", sock.display()),
            Duration::from_secs(1),
        )
        .unwrap();
        let f = wait_for(&mut rx, "unsupported", |f| f.unsupported).await;
        assert!(!prober.probe().await);
        assert!(!f.live);
        assert_eq!(f.epoch, 0);
        assert!(
            f.down.as_deref().unwrap().contains("Unimplemented"),
            "{f:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_marker_proves_the_stream_live_and_a_restart_resubscribes() {
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("events.sock");
        let fake = FakeEvents {
            tx: tokio::sync::broadcast::channel(64).0,
            register_after: Duration::from_millis(500),
            published: Default::default(),
            end: Default::default(),
            swallow: Default::default(),
        };
        let srv = serve_events(fake.clone(), &sock).await;
        let (mut rx, prober) = spawn(
            &format!("unix://{}", sock.display()),
            Duration::from_secs(1),
        )
        .unwrap();
        let f = wait_for(&mut rx, "live", |f| f.live).await;
        assert_eq!(f.epoch, 1);
        assert_eq!(f.changes, 0, "markers are no changes");
        // Markers published before the subscription registered were lost:
        // the subscriber kept publishing until one came back.
        assert!(fake.published.load(std::sync::atomic::Ordering::Relaxed) >= 2);
        // A probe's marker comes back; one that is swallowed does not.
        assert!(prober.probe().await);
        assert!(rx.borrow().markers >= 1);
        fake.swallow
            .store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(!prober.probe().await, "a marker that never came back");
        fake.swallow
            .store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(prober.probe().await);

        // Events of the watched topics count; others and other
        // namespaces do not (containerd would filter them; the fake does not).
        let send = |ns: &str, topic: &str, id: &str| {
            use prost::Message;
            fake.tx
                .send(proto::Envelope {
                    timestamp: None,
                    namespace: ns.into(),
                    topic: topic.into(),
                    event: Some(proto::Any {
                        type_url: "containerd.events.X".into(),
                        value: proto::ContainerRef { id: id.into() }.encode_to_vec(),
                    }),
                })
                .unwrap();
        };
        send("moby", "/containers/delete", "x");
        send(NAMESPACE, "/images/create", "x");
        send(NAMESPACE, "/containers/delete", "gone");
        send(NAMESPACE, "/containers/update", "resized");
        let f = wait_for(&mut rx, "counting two changes", |f| f.changes == 2).await;
        assert_eq!(f.updates, 1);
        assert_eq!(f.updated, vec!["resized".to_string()]);

        // The stream ends (the runtime restarts): the feed goes down, and
        // is live again under a new epoch once a new subscription is.
        fake.end.notify_waiters();
        let f = wait_for(&mut rx, "down", |f| !f.live).await;
        assert!(f.down.as_deref().unwrap().contains("ended"), "{f:?}");
        assert!(!prober.probe().await, "no probe while down");
        let f = wait_for(&mut rx, "live again", |f| f.live).await;
        assert_eq!(f.epoch, 2);
        assert!(prober.probe().await);
        srv.abort();
    }

    #[test]
    fn backoff_doubles_to_the_cap() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(6), BACKOFF_MAX);
        assert_eq!(backoff(100), BACKOFF_MAX);
    }
}
