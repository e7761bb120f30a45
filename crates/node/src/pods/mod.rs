//! Where the daemon learns the pods from: the container runtime over the
//! CRI, or pod manifests.

pub mod status_store;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use qosd_model::core::model::Pod;
use qosd_model::policy::enforce::versions::KubeletVersion;

/// Where the daemon learns the pods from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodSourceSpec {
    /// The container runtime over the CRI.
    Cri {
        /// The runtime's socket, e.g. `unix:///run/containerd/containerd.sock`.
        endpoint: String,
    },
    /// Pod manifests (files/directories), re-read every relist: for nodes
    /// without a CRI runtime, static pods, tests and the v2 VM; with the
    /// kubelet version whose rules decide what a pod's status says was
    /// admitted (in-place resize).
    Manifests(Vec<PathBuf>, KubeletVersion),
}

/// The pods of one listing.
#[derive(Debug, Default, Clone)]
pub struct Listing {
    /// Pods to plan (READY sandboxes, or every manifest pod).
    pub pods: Vec<Pod>,
    /// Every uid the source knows; `None` when the listing was incomplete
    /// (a sandbox skipped for a bad label), which disables orphan removal.
    pub all_uids: Option<BTreeSet<String>>,
    /// Live CRI pods (empty for manifests), for eviction and status.
    pub live: Vec<crate::cri::LivePod>,
}

/// Pod specs from another source (the Kubernetes API server, see
/// `crate::kube`), merged into the runtime's live pods by uid.
pub trait SpecSource: Send + Sync + std::fmt::Debug {
    /// Merge in place; each value records whether it is exact or inferred.
    fn merge(&self, live: &mut [crate::cri::LivePod]);
    /// Changes whenever the source's view does (a pod event, the source
    /// going away or coming back): part of the change detector.
    fn change_key(&self) -> String;
    /// For `/status`: the source's state after the last merge, and why its
    /// data is unusable (`None`: current).
    fn status(&self) -> (KubeStatus, Option<String>);
}

/// A connected pod source.
pub enum Source {
    /// The container runtime over the CRI.
    Cri {
        /// The connected client.
        client: Box<crate::cri::CriClient>,
        /// Options of each inventory (the node's memory capacity).
        inventory: crate::cri::InventoryOptions,
        /// The API server's pod specs, merged by uid (`None`: runtime alone).
        specs: Option<std::sync::Arc<dyn SpecSource>>,
        /// Per-id statuses: a listing asks only about new sandboxes and
        /// containers.
        cache: Arc<crate::cri::StatusCache>,
        /// The lists the last [`Source::fingerprint`] fetched, reused by a
        /// [`Source::list`] right after it (no second pair of List calls).
        lists: Mutex<Option<RawLists>>,
    },
    /// Pod manifests, re-read at every listing (see
    /// [`PodSourceSpec::Manifests`]).
    Manifests(Vec<PathBuf>, KubeletVersion),
}

/// ListPodSandbox and ListContainers as fetched at an instant.
type RawLists = (
    Instant,
    Vec<crate::cri::proto::PodSandbox>,
    Vec<crate::cri::proto::Container>,
);

/// A fingerprint's lists are reused by a listing at most this much later.
const LISTS_REUSE: Duration = Duration::from_millis(500);

/// Why a listing failed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The runtime could not be reached or a CRI call failed.
    #[error(transparent)]
    Cri(#[from] crate::cri::CriError),
    /// A manifest could not be read or parsed.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
}

impl Source {
    /// Connect (CRI: with retries per `opts`).
    pub async fn connect(
        spec: &PodSourceSpec,
        opts: crate::cri::ConnectOptions,
        memory_capacity_bytes: i64,
    ) -> Result<Source, SourceError> {
        Ok(match spec {
            PodSourceSpec::Cri { endpoint } => Source::Cri {
                client: Box::new(crate::cri::CriClient::connect(endpoint, opts).await?),
                inventory: crate::cri::InventoryOptions {
                    memory_capacity_bytes: Some(memory_capacity_bytes),
                },
                specs: None,
                cache: Arc::default(),
                lists: Mutex::new(None),
            },
            PodSourceSpec::Manifests(paths, v) => Source::Manifests(paths.clone(), *v),
        })
    }

    /// Cheap change detector: CRI sandbox and container ids and states
    /// (two list calls); manifests: the pods themselves (re-reading small
    /// files is cheap).
    pub async fn fingerprint(&self) -> Result<Vec<String>, SourceError> {
        match self {
            Source::Cri {
                client,
                specs,
                lists,
                ..
            } => {
                // The two lists at once (one round trip's wait, not two).
                let (sandboxes, containers) =
                    tokio::try_join!(client.list_pod_sandboxes(), client.list_containers(None))?;
                let mut v: Vec<String> = sandboxes
                    .iter()
                    .map(|s| format!("s:{}:{}", s.id, s.state))
                    .collect();
                v.extend(
                    containers
                        .iter()
                        .map(|c| format!("c:{}:{}:{}", c.pod_sandbox_id, c.id, c.state)),
                );
                // The API's view too: a pod event or the API going away
                // (or coming back) relists and re-merges at once.
                if let Some(k) = specs {
                    v.push(k.change_key());
                }
                v.sort();
                *lists.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((Instant::now(), sandboxes, containers));
                Ok(v)
            }
            Source::Manifests(paths, version) => {
                let pods = crate::manifest::load_paths_for(paths, *version)?;
                let mut v: Vec<String> = pods.iter().map(|p| format!("{p:?}")).collect();
                v.sort();
                Ok(v)
            }
        }
    }

    /// Ask the runtime about every container again at the next listing
    /// (the periodic resync: in-place resource updates change no listing).
    /// Sandbox statuses stay: nothing in them changes for a sandbox id.
    pub fn resync(&self) {
        if let Source::Cri { cache, .. } = self {
            cache.forget_containers();
        }
    }

    /// Ask the runtime about these containers again at the next listing
    /// (updated in place: the runtime's events named them).
    pub fn forget_containers(&self, ids: &[String]) {
        if let Source::Cri { cache, .. } = self {
            cache.forget_container_ids(ids);
        }
    }

    /// Ask the runtime about every container again at the next listing,
    /// keeping the held statuses until then (after a restored cache).
    pub fn recheck_containers(&self) {
        if let Source::Cri { cache, .. } = self {
            cache.distrust_containers();
        }
    }

    /// The API server source's change key (`None` without one): cheap, no
    /// runtime call.
    pub fn spec_key(&self) -> Option<String> {
        match self {
            Source::Cri { specs: Some(k), .. } => Some(k.change_key()),
            _ => None,
        }
    }

    /// The status cache of a CRI source kept in `state_dir` across
    /// restarts (see [`crate::pods::status_store`]); `None` for manifests.
    pub fn status_store(
        &self,
        spec: &PodSourceSpec,
        state_dir: &std::path::Path,
    ) -> Option<crate::pods::status_store::StatusStore> {
        match (self, spec) {
            (Source::Cri { cache, .. }, PodSourceSpec::Cri { endpoint }) => Some(
                crate::pods::status_store::StatusStore::new(state_dir, endpoint, cache.clone()),
            ),
            _ => None,
        }
    }

    /// Sandboxes and containers whose statuses are held (CRI; 0 otherwise).
    pub fn cached_statuses(&self) -> (usize, usize) {
        match self {
            Source::Cri { cache, .. } => cache.len(),
            Source::Manifests(..) => (0, 0),
        }
    }

    /// Full listing.
    pub async fn list(&self) -> Result<Listing, SourceError> {
        match self {
            Source::Cri {
                client,
                inventory,
                specs,
                cache,
                lists,
            } => {
                let taken = lists.lock().unwrap_or_else(|e| e.into_inner()).take();
                let (sandboxes, containers) = match taken {
                    Some((at, s, c)) if at.elapsed() < LISTS_REUSE => (s, c),
                    _ => {
                        tokio::try_join!(client.list_pod_sandboxes(), client.list_containers(None))?
                    }
                };
                let mut inv = crate::cri::inventory_with(
                    client,
                    sandboxes,
                    containers,
                    inventory,
                    Some(cache),
                )
                .await?;
                if let Some(k) = specs {
                    k.merge(&mut inv.pods);
                }
                for s in &inv.skipped {
                    tracing::warn!(sandbox = %s.sandbox_id, "sandbox skipped: {}", s.reason);
                }
                for p in &inv.pods {
                    for w in &p.warnings {
                        tracing::warn!(pod = %p.pod.key(), uid = %p.pod.uid, "{w}");
                    }
                }
                // A sandbox that vanished between list and status is gone;
                // one skipped for a bad label is unknown: no orphan removal.
                let complete = inv
                    .skipped
                    .iter()
                    .all(|s| s.reason.starts_with("removed between"));
                let all_uids =
                    complete.then(|| inv.pods.iter().map(|p| p.pod.uid.clone()).collect());
                Ok(Listing {
                    pods: inv.ready_pods(),
                    all_uids,
                    live: inv.pods,
                })
            }
            Source::Manifests(paths, version) => {
                let pods = crate::manifest::load_paths_for(paths, *version)?;
                let all_uids = Some(pods.iter().map(|p| p.uid.clone()).collect());
                Ok(Listing {
                    pods,
                    all_uids,
                    live: Vec::new(),
                })
            }
        }
    }
}

/// The Kubernetes API pod source, in `/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct KubeStatus {
    /// API server URL and where the config came from.
    pub server: String,
    /// The node whose pods are watched (`spec.nodeName`).
    pub node_name: String,
    /// `synced` (exact specs in use) or `unavailable` (runtime data alone).
    pub state: String,
    /// Why the API data is unavailable (`None` while synced).
    pub reason: Option<String>,
    /// Live pods whose values are exact (from the API).
    pub pods_exact: usize,
    /// Live pods whose values are inferred (from the runtime alone).
    pub pods_inferred: usize,
    /// Full lists of the node's pods since the start.
    pub relists: u64,
    /// Watches started again after the first (the stream ended or failed).
    pub watch_restarts: u64,
}
