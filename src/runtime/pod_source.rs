//! Where the daemon learns the pods from: the container runtime over the
//! CRI, or pod manifests.
use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::core::model::Pod;

/// Where the daemon learns the pods from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodSourceSpec {
    /// The container runtime over the CRI.
    Cri { endpoint: String },
    /// Pod manifests (files/directories), re-read every relist: for nodes
    /// without a CRI runtime, static pods, tests and the v2 VM.
    Manifests(Vec<PathBuf>),
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
    fn status(&self) -> (crate::telemetry::status::KubeStatus, Option<String>);
}

/// A connected pod source.
pub enum Source {
    Cri {
        client: Box<crate::cri::CriClient>,
        inventory: crate::cri::InventoryOptions,
        /// The API server's pod specs, merged by uid (`None`: runtime alone).
        specs: Option<std::sync::Arc<dyn SpecSource>>,
    },
    Manifests(Vec<PathBuf>),
}

/// Why a listing failed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Cri(#[from] crate::cri::CriError),
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
            },
            PodSourceSpec::Manifests(paths) => Source::Manifests(paths.clone()),
        })
    }

    /// Cheap change detector: CRI sandbox and container ids and states
    /// (two list calls); manifests: the pods themselves (re-reading small
    /// files is cheap).
    pub async fn fingerprint(&self) -> Result<Vec<String>, SourceError> {
        match self {
            Source::Cri { client, specs, .. } => {
                let mut v: Vec<String> = client
                    .list_pod_sandboxes()
                    .await?
                    .into_iter()
                    .map(|s| format!("s:{}:{}", s.id, s.state))
                    .collect();
                v.extend(
                    client
                        .list_containers(None)
                        .await?
                        .into_iter()
                        .map(|c| format!("c:{}:{}:{}", c.pod_sandbox_id, c.id, c.state)),
                );
                // The API's view too: a pod event or the API going away
                // (or coming back) relists and re-merges at once.
                if let Some(k) = specs {
                    v.push(k.change_key());
                }
                v.sort();
                Ok(v)
            }
            Source::Manifests(paths) => {
                let pods = crate::manifest::load_paths(paths)?;
                let mut v: Vec<String> = pods.iter().map(|p| format!("{p:?}")).collect();
                v.sort();
                Ok(v)
            }
        }
    }

    /// Full listing.
    pub async fn list(&self) -> Result<Listing, SourceError> {
        match self {
            Source::Cri {
                client,
                inventory,
                specs,
            } => {
                let mut inv = crate::cri::inventory(client, inventory).await?;
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
            Source::Manifests(paths) => {
                let pods = crate::manifest::load_paths(paths)?;
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
