//! Client and inventory against a fake CRI runtime (the generated tonic
//! server on a UNIX socket): old API, version checks, a runtime that comes
//! up late, a sandbox that vanishes, a bad uid label, and resources that
//! are only in the verbose info. Deterministic, no root needed.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};

use super::proto::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use super::proto::*;
use super::*;

#[derive(Default, Clone)]
struct Fake {
    api_version: String,
    /// ListPodSandbox hangs this long (a stuck runtime).
    list_delay: Duration,
    version_unimplemented: bool,
    sandboxes: Vec<PodSandbox>,
    not_found: HashSet<String>,
    infos: HashMap<String, String>,
    containers: Vec<Container>,
    container_statuses: HashMap<String, ContainerStatus>,
    container_infos: HashMap<String, String>,
    /// Status calls received: ("sandbox" | "container", id).
    calls: std::sync::Arc<std::sync::Mutex<Vec<(&'static str, String)>>>,
}

#[tonic::async_trait]
impl RuntimeService for Fake {
    async fn version(
        &self,
        _r: Request<VersionRequest>,
    ) -> Result<Response<VersionResponse>, Status> {
        if self.version_unimplemented {
            return Err(Status::unimplemented(
                "unknown service runtime.v1.RuntimeService",
            ));
        }
        Ok(Response::new(VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "0.0.1".into(),
            runtime_api_version: self.api_version.clone(),
        }))
    }

    async fn list_pod_sandbox(
        &self,
        _r: Request<ListPodSandboxRequest>,
    ) -> Result<Response<ListPodSandboxResponse>, Status> {
        tokio::time::sleep(self.list_delay).await;
        Ok(Response::new(ListPodSandboxResponse {
            items: self.sandboxes.clone(),
        }))
    }

    async fn pod_sandbox_status(
        &self,
        r: Request<PodSandboxStatusRequest>,
    ) -> Result<Response<PodSandboxStatusResponse>, Status> {
        let id = r.into_inner().pod_sandbox_id;
        self.calls.lock().unwrap().push(("sandbox", id.clone()));
        if self.not_found.contains(&id) {
            return Err(Status::not_found(format!("sandbox {id} not found")));
        }
        let sb = self
            .sandboxes
            .iter()
            .find(|s| s.id == id)
            .ok_or_else(|| Status::not_found("no such sandbox"))?;
        let mut info = HashMap::new();
        if let Some(i) = self.infos.get(&id) {
            info.insert("info".to_string(), i.clone());
        }
        Ok(Response::new(PodSandboxStatusResponse {
            status: Some(PodSandboxStatus {
                id: sb.id.clone(),
                metadata: sb.metadata.clone(),
                state: sb.state,
                labels: sb.labels.clone(),
                ..Default::default()
            }),
            info,
            ..Default::default()
        }))
    }

    async fn list_containers(
        &self,
        _r: Request<ListContainersRequest>,
    ) -> Result<Response<ListContainersResponse>, Status> {
        Ok(Response::new(ListContainersResponse {
            containers: self.containers.clone(),
        }))
    }

    async fn container_status(
        &self,
        r: Request<ContainerStatusRequest>,
    ) -> Result<Response<ContainerStatusResponse>, Status> {
        let r = r.into_inner();
        self.calls
            .lock()
            .unwrap()
            .push(("container", r.container_id.clone()));
        let status = self
            .container_statuses
            .get(&r.container_id)
            .cloned()
            .ok_or_else(|| Status::not_found("no such container"))?;
        let mut info = HashMap::new();
        if r.verbose {
            if let Some(i) = self.container_infos.get(&r.container_id) {
                info.insert("info".to_string(), i.clone());
            }
        }
        Ok(Response::new(ContainerStatusResponse {
            status: Some(status),
            info,
        }))
    }
}

async fn serve(fake: Fake, sock: &Path) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(sock).unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(RuntimeServiceServer::new(fake))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
            .await
            .unwrap();
    })
}

fn quick() -> ConnectOptions {
    ConnectOptions {
        connect_timeout: Duration::from_secs(1),
        call_timeout: Duration::from_secs(2),
        retry: RetryPolicy {
            initial_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(100),
            max_elapsed: Duration::from_secs(3),
        },
    }
}

fn endpoint(sock: &Path) -> String {
    format!("unix://{}", sock.display())
}

#[tokio::test]
async fn old_api_is_reported() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("old.sock");
    let _srv = serve(
        Fake {
            version_unimplemented: true,
            ..Default::default()
        },
        &sock,
    )
    .await;
    let e = CriClient::connect(&endpoint(&sock), quick())
        .await
        .unwrap_err();
    assert!(matches!(e, CriError::OldApi { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("runtime.v1") && msg.contains("v1alpha2"),
        "{msg}"
    );
}

#[tokio::test]
async fn wrong_api_version_is_reported() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("alpha.sock");
    let _srv = serve(
        Fake {
            api_version: "v1alpha2".into(),
            ..Default::default()
        },
        &sock,
    )
    .await;
    let e = CriClient::connect(&endpoint(&sock), quick())
        .await
        .unwrap_err();
    assert!(matches!(e, CriError::UnsupportedVersion { .. }), "{e:?}");
    assert!(e.to_string().contains("fake 0.0.1"), "{e}");
}

#[tokio::test]
async fn connect_waits_for_a_late_runtime() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("late.sock");
    let sock2 = sock.clone();
    let t = Instant::now();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        serve(
            Fake {
                api_version: "v1".into(),
                ..Default::default()
            },
            &sock2,
        )
        .await;
    });
    let c = CriClient::connect(&endpoint(&sock), quick()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert_eq!(c.runtime_version().runtime_name, "fake");
    // RuntimeConfig is not served by this runtime: None, not an error.
    assert_eq!(c.runtime_config().await.unwrap(), None);
    late.await.unwrap();

    // And one that never comes: Unreachable after the budget.
    let none = d.path().join("never.sock");
    let mut o = quick();
    o.retry.max_elapsed = Duration::from_millis(200);
    let t = Instant::now();
    let e = CriClient::connect(&endpoint(&none), o).await.unwrap_err();
    assert!(
        matches!(e, CriError::Unreachable { attempts, .. } if attempts > 1),
        "{e:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(1));
}

fn sandbox(id: &str, uid_label: &str, name: &str) -> PodSandbox {
    PodSandbox {
        id: id.into(),
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid_label.into(),
            namespace: "ns".into(),
            attempt: 0,
        }),
        state: PodSandboxState::SandboxReady as i32,
        labels: [
            (inventory::LABEL_POD_UID.to_string(), uid_label.to_string()),
            (inventory::LABEL_POD_NAME.to_string(), name.to_string()),
            (inventory::LABEL_POD_NAMESPACE.to_string(), "ns".to_string()),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    }
}

#[tokio::test]
async fn inventory_edge_cases() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("inv.sock");
    let uid = "11111111-2222-3333-4444-555555555555";
    let mut fake = Fake {
        api_version: "v1".into(),
        sandboxes: vec![
            sandbox("gone", "22222222-2222-3333-4444-555555555555", "gone"),
            sandbox("evil", "../../etc/passwd", "evil"),
            sandbox("long", &"a".repeat(200), "long"),
            sandbox("good", uid, "good"),
        ],
        not_found: ["gone".to_string()].into_iter().collect(),
        ..Default::default()
    };
    fake.infos.insert(
        "good".into(),
        format!(r#"{{"config":{{"linux":{{"cgroup_parent":"/kubepods/pod{uid}"}}}}}}"#),
    );
    fake.containers.push(Container {
        id: "c1".into(),
        pod_sandbox_id: "good".into(),
        metadata: Some(ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        state: ContainerState::ContainerRunning as i32,
        ..Default::default()
    });
    // An older runtime: no `resources` in the status, only in the verbose config.
    fake.container_statuses.insert(
        "c1".into(),
        ContainerStatus {
            id: "c1".into(),
            state: ContainerState::ContainerRunning as i32,
            ..Default::default()
        },
    );
    fake.container_infos.insert(
        "c1".into(),
        r#"{"config":{"linux":{"resources":{"cpu_period":100000,"cpu_quota":20000,
            "cpu_shares":204,"memory_limit_in_bytes":104857600,"oom_score_adj":-997}}}}"#
            .into(),
    );
    let _srv = serve(fake, &sock).await;
    let c = CriClient::connect(&endpoint(&sock), quick()).await.unwrap();
    let inv = inventory(&c, &InventoryOptions::default()).await.unwrap();

    assert_eq!(inv.pods.len(), 1, "{inv:?}");
    let p = &inv.pods[0];
    assert_eq!(p.pod.uid, uid);
    assert_eq!(p.qos_class, qosd_model::core::model::QosClass::Guaranteed);
    assert_eq!(p.qos_source, QosSource::CgroupParent);
    assert_eq!(
        p.pod.qos_override,
        Some(qosd_model::core::model::QosClass::Guaranteed)
    );
    assert_eq!(
        p.containers[0].resources_origin,
        inventory::ResourcesOrigin::VerboseConfig
    );
    assert_eq!(p.containers[0].cpu_quota, Some(20_000));
    assert_eq!(p.containers[0].oom_score_adj, Some(-997));
    let r = &p.pod.containers[0].resources;
    assert_eq!(r.requests["cpu"].milli_ceil(), 200);
    assert_eq!(r.limits["memory"].value_ceil(), 104_857_600);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);

    let reason = |id: &str| {
        inv.skipped
            .iter()
            .find(|s| s.sandbox_id == id)
            .map(|s| s.reason.clone())
            .unwrap_or_else(|| panic!("{id} not skipped: {:?}", inv.skipped))
    };
    assert!(reason("gone").contains("removed between"));
    assert!(reason("evil").contains("not a plain UID"));
    assert!(reason("long").contains("at most 64"));
    assert_eq!(inv.skipped.len(), 3);
}

#[tokio::test]
async fn a_hung_call_hits_its_deadline_and_is_not_retried() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("hung.sock");
    let _srv = serve(
        Fake {
            api_version: "v1".into(),
            list_delay: Duration::from_secs(30),
            ..Default::default()
        },
        &sock,
    )
    .await;
    let mut o = quick();
    o.call_timeout = Duration::from_millis(300);
    let c = CriClient::connect(&endpoint(&sock), o).await.unwrap();
    let t = Instant::now();
    let e = c.list_pod_sandboxes().await.unwrap_err();
    let took = t.elapsed();
    assert!(e.is_unavailable(), "{e:?}");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "{took:?}: {e}"
    );
}

/// The status cache: a second listing asks the runtime nothing new, a
/// resync asks the containers again, a new sandbox is asked about alone,
/// and ids no longer listed are dropped; the inventory is the same as an
/// uncached one every time.
#[tokio::test]
async fn status_cache_asks_only_about_new_ids() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("cache.sock");
    let uid1 = "11111111-2222-3333-4444-555555555555";
    let uid2 = "22222222-2222-3333-4444-555555555555";
    let mut fake = Fake {
        api_version: "v1".into(),
        sandboxes: vec![sandbox("s1", uid1, "one"), sandbox("s2", uid2, "two")],
        ..Default::default()
    };
    for (sb, uid) in [("s1", uid1), ("s2", uid2)] {
        fake.infos.insert(
            sb.into(),
            format!(
                r#"{{"config":{{"linux":{{"cgroup_parent":"/kubepods/burstable/pod{uid}"}}}}}}"#
            ),
        );
        let cid = format!("c-{sb}");
        fake.containers.push(Container {
            id: cid.clone(),
            pod_sandbox_id: sb.into(),
            metadata: Some(ContainerMetadata {
                name: "app".into(),
                attempt: 0,
            }),
            state: ContainerState::ContainerRunning as i32,
            ..Default::default()
        });
        fake.container_statuses.insert(
            cid.clone(),
            ContainerStatus {
                id: cid,
                state: ContainerState::ContainerRunning as i32,
                resources: Some(ContainerResources {
                    linux: Some(LinuxContainerResources {
                        cpu_shares: 102,
                        cpu_period: 100_000,
                        oom_score_adj: 900,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
    }
    let calls = fake.calls.clone();
    let _srv = serve(fake.clone(), &sock).await;
    let c = CriClient::connect(&endpoint(&sock), quick()).await.unwrap();
    let opts = InventoryOptions::default();
    let cache = std::sync::Arc::new(StatusCache::default());
    let taken = |calls: &std::sync::Mutex<Vec<(&'static str, String)>>| {
        let mut v = std::mem::take(&mut *calls.lock().unwrap());
        v.sort();
        v
    };
    let list = |sandboxes: Vec<PodSandbox>| {
        let c = c.clone();
        let cache = cache.clone();
        let containers = fake.containers.clone();
        async move {
            let containers = containers
                .into_iter()
                .filter(|k| sandboxes.iter().any(|s| s.id == k.pod_sandbox_id))
                .collect();
            inventory_with(&c, sandboxes, containers, &opts, Some(&cache))
                .await
                .unwrap()
        }
    };
    let uncached = inventory(&c, &opts).await.unwrap();
    taken(&calls);

    let first = list(fake.sandboxes.clone()).await;
    assert_eq!(first, uncached);
    assert_eq!(taken(&calls).len(), 4, "two sandboxes, two containers");
    assert_eq!(cache.len(), (2, 2));

    let second = list(fake.sandboxes.clone()).await;
    assert_eq!(second, uncached);
    assert_eq!(taken(&calls), vec![], "nothing new: nothing asked");

    // A sandbox's listed state wins over the cached status's.
    let mut stopped = fake.sandboxes.clone();
    stopped[1].state = PodSandboxState::SandboxNotready as i32;
    let inv = list(stopped).await;
    assert_eq!(inv.pods[1].state, SandboxState::NotReady);
    assert_eq!(taken(&calls), vec![]);

    cache.forget_containers();
    assert_eq!(list(fake.sandboxes.clone()).await, uncached);
    assert_eq!(
        taken(&calls),
        vec![
            ("container", "c-s1".to_string()),
            ("container", "c-s2".to_string())
        ]
    );

    // s2 goes away: its entries are dropped.
    let inv = list(vec![fake.sandboxes[0].clone()]).await;
    assert_eq!(inv.pods.len(), 1);
    assert_eq!(cache.len(), (1, 1));
    assert_eq!(taken(&calls), vec![]);
    // and comes back (a new id for the runtime is asked about again).
    list(fake.sandboxes.clone()).await;
    assert_eq!(
        taken(&calls),
        vec![
            ("container", "c-s2".to_string()),
            ("sandbox", "s2".to_string())
        ]
    );
}
