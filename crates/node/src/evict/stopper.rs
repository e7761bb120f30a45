//! The eviction side's CRI calls: stopping and removing victims (the
//! evictor's [`PodStopper`](crate::evict::PodStopper)), per-pod
//! writable layers and node-level reclaim (dead containers, unused images:
//! [`NodeRuntime`](crate::evict::runtime::NodeRuntime)).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cri::proto;
use crate::evict::runtime::{EvictRuntime, ImageGcPolicy, ReclaimReport, WritableLayer};
use crate::evict::RuntimeCallError;
use qosd_model::policy::evict::image_gc::{ImageTracker, ListedImage};

/// Each pod's containers' writable layers (by pod uid) from the runtime's
/// `ListContainerStats`; stats without a pod uid label are left out.
pub fn writable_layers_by_pod(
    stats: &[proto::ContainerStats],
) -> BTreeMap<String, Vec<WritableLayer>> {
    let mut out: BTreeMap<String, Vec<WritableLayer>> = BTreeMap::new();
    for st in stats {
        let Some(attr) = &st.attributes else { continue };
        let Some(uid) = attr.labels.get("io.kubernetes.pod.uid") else {
            continue;
        };
        let container = attr
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .or_else(|| attr.labels.get("io.kubernetes.container.name").cloned())
            .unwrap_or_else(|| attr.id.clone());
        let wl = st.writable_layer.as_ref();
        out.entry(uid.clone()).or_default().push(WritableLayer {
            container,
            bytes: wl.and_then(|w| w.used_bytes.as_ref()).map(|v| v.value),
            inodes: wl.and_then(|w| w.inodes_used.as_ref()).map(|v| v.value),
        });
    }
    out
}

// ------------------------------------------------------- CRI pod stopper

/// Stops and removes pod sandboxes through the CRI for the evictor. It runs
/// on the eviction threads and connects lazily (evictions are rare; the
/// reconcile loop's client lives on the async side).
///
/// Its calls run on a runtime of its own (current-thread: no thread, driven
/// by the calling eviction thread), not on the daemon's: a clean-up call
/// still in flight when the daemon's runtime shuts down at SIGTERM would
/// otherwise panic in tokio's timer.
pub struct CriStopper {
    endpoint: String,
    /// `Err`: the runtime could not be built (every call reports it).
    rt: EvictRuntime,
    client: Mutex<Option<crate::cri::CriClient>>,
    /// A second client whose calls may last a whole grace period
    /// (StopContainer with the pod's grace).
    stop_client: Mutex<Option<crate::cri::CriClient>>,
    /// The longest grace a stop can take (evictionMaxPodGracePeriod, or the
    /// kubelet's default 30 s when that is 0).
    pub max_grace: Duration,
    images: Mutex<ImageTracker>,
    /// Image GC policy (minimum age).
    pub image_gc: ImageGcPolicy,
    /// Set by the daemon when it stops: from then on no runtime call is
    /// started (a clean-up thread still retrying after an eviction gives up).
    pub closing: Arc<AtomicBool>,
}

/// NotFound from a clean-up step means it is already done.
fn done_if_not_found(r: Result<(), crate::cri::CriError>) -> Result<(), crate::cri::CriError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        r => r,
    }
}

impl CriStopper {
    /// A stopper for the runtime at `endpoint`, its calls on `rt`.
    pub fn new(endpoint: String, rt: EvictRuntime) -> CriStopper {
        CriStopper {
            endpoint,
            rt,
            client: Mutex::new(None),
            stop_client: Mutex::new(None),
            max_grace: Duration::from_secs(30),
            images: Mutex::new(ImageTracker::default()),
            image_gc: ImageGcPolicy::default(),
            closing: Arc::new(AtomicBool::new(false)),
        }
    }

    fn runtime(&self) -> &EvictRuntime {
        &self.rt
    }

    /// Record the images and which ones containers (any state) refer to.
    async fn detect_images(
        &self,
        c: &crate::cri::CriClient,
        now: Instant,
    ) -> Result<Vec<proto::Image>, crate::cri::CriError> {
        let images = c.list_images().await?;
        let containers = c.list_containers(None).await?;
        let mut in_use: BTreeSet<String> = BTreeSet::new();
        // The sandbox (pause) image: sandboxes use it, containers do not
        // list it (containerd reports it in its verbose status config).
        if let Ok(st) = c.status(true).await {
            if let Some(cfg) = st.info.get("config") {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(cfg) {
                    if let Some(img) = v["sandboxImage"].as_str() {
                        in_use.insert(img.to_string());
                    }
                }
            }
        }
        for ctr in &containers {
            // image_ref is the image id for containerd; the spec may name a tag
            in_use.insert(ctr.image_ref.clone());
            if let Some(spec) = &ctr.image {
                in_use.insert(spec.image.clone());
            }
        }
        // an image is in use when its id, a tag or a digest is referred to
        let listed: Vec<ListedImage> = images
            .iter()
            .map(|i| ListedImage {
                id: i.id.clone(),
                size: i.size,
                pinned: i.pinned,
            })
            .collect();
        let used_ids: BTreeSet<String> = images
            .iter()
            .filter(|i| {
                in_use.contains(&i.id)
                    || i.repo_tags.iter().any(|t| in_use.contains(t))
                    || i.repo_digests.iter().any(|d| in_use.contains(d))
            })
            .map(|i| i.id.clone())
            .collect();
        self.images
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .detect(&listed, &used_ids, now);
        Ok(images)
    }

    async fn free_images_async(
        &self,
        c: &crate::cri::CriClient,
        bytes: u64,
        now: Instant,
        rep: &mut ReclaimReport,
    ) {
        if let Err(e) = self.detect_images(c, now).await {
            rep.errors.push(format!("listing images: {e}"));
            return;
        }
        let (ids, _) = self
            .images
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .to_free(bytes, now, self.image_gc.minimum_age);
        for id in ids {
            let size = self
                .images
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .records()
                .get(&id)
                .map(|r| r.size)
                .unwrap_or(0);
            match done_if_not_found(c.remove_image(&id).await) {
                Ok(()) => {
                    tracing::info!(target: "qosd::eviction", image = %id, bytes = size, "removed unused image");
                    self.images
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .removed(&id);
                    rep.images_removed.push(id);
                    rep.image_bytes_freed += size;
                }
                Err(e) => rep.errors.push(format!("RemoveImage {id}: {e}")),
            }
        }
    }

    /// Dead containers (the kubelet's DeleteAllUnusedContainers, simplified):
    /// every exited container of a sandbox that is not ready, the exited
    /// containers of ready sandboxes but the newest per container name, and
    /// the not-ready sandboxes left without containers.
    async fn remove_dead_containers(&self, c: &crate::cri::CriClient, rep: &mut ReclaimReport) {
        let (sandboxes, containers) =
            match (c.list_pod_sandboxes().await, c.list_containers(None).await) {
                (Ok(s), Ok(ctrs)) => (s, ctrs),
                (Err(e), _) | (_, Err(e)) => {
                    rep.errors.push(format!("listing containers: {e}"));
                    return;
                }
            };
        let ready: BTreeSet<&str> = sandboxes
            .iter()
            .filter(|s| s.state == proto::PodSandboxState::SandboxReady as i32)
            .map(|s| s.id.as_str())
            .collect();
        let exited = proto::ContainerState::ContainerExited as i32;
        let mut newest: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for ctr in containers.iter().filter(|c| c.state == exited) {
            let name = ctr.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("");
            let e = newest
                .entry((ctr.pod_sandbox_id.as_str(), name))
                .or_insert(i64::MIN);
            *e = (*e).max(ctr.created_at);
        }
        let mut remaining: BTreeMap<&str, usize> = BTreeMap::new();
        for ctr in &containers {
            *remaining.entry(ctr.pod_sandbox_id.as_str()).or_default() += 1;
        }
        for ctr in containers.iter().filter(|c| c.state == exited) {
            let name = ctr.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("");
            let keep = ready.contains(ctr.pod_sandbox_id.as_str())
                && newest.get(&(ctr.pod_sandbox_id.as_str(), name)) == Some(&ctr.created_at);
            if keep {
                continue;
            }
            match done_if_not_found(c.remove_container(&ctr.id).await) {
                Ok(()) => {
                    rep.containers_removed += 1;
                    if let Some(n) = remaining.get_mut(ctr.pod_sandbox_id.as_str()) {
                        *n -= 1;
                    }
                }
                Err(e) => rep.errors.push(format!("RemoveContainer {}: {e}", ctr.id)),
            }
        }
        for s in sandboxes.iter().filter(|s| !ready.contains(s.id.as_str())) {
            if remaining.get(s.id.as_str()).copied().unwrap_or(0) > 0 {
                continue;
            }
            match done_if_not_found(c.remove_pod_sandbox(&s.id).await) {
                Ok(()) => rep.sandboxes_removed += 1,
                Err(e) => rep.errors.push(format!("RemovePodSandbox {}: {e}", s.id)),
            }
        }
    }

    fn with_client<T>(
        &self,
        f: impl FnOnce(crate::cri::CriClient) -> Result<T, crate::cri::CriError>,
    ) -> Result<T, RuntimeCallError> {
        self.with(&self.client, Duration::from_secs(10), f)
    }

    /// The client for stopping pods: its calls may last the grace period.
    fn with_stop_client<T>(
        &self,
        f: impl FnOnce(crate::cri::CriClient) -> Result<T, crate::cri::CriError>,
    ) -> Result<T, RuntimeCallError> {
        let deadline = self.max_grace.max(Duration::from_secs(1)) + Duration::from_secs(15);
        self.with(&self.stop_client, deadline, f)
    }

    fn with<T>(
        &self,
        slot: &Mutex<Option<crate::cri::CriClient>>,
        call_timeout: Duration,
        f: impl FnOnce(crate::cri::CriClient) -> Result<T, crate::cri::CriError>,
    ) -> Result<T, RuntimeCallError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(RuntimeCallError::Stopping);
        }
        let mut guard = slot
            .lock()
            .map_err(|e| RuntimeCallError::Other(e.to_string()))?;
        let client = match guard.as_ref() {
            Some(c) => c.clone(),
            None => {
                let opts = crate::cri::ConnectOptions {
                    retry: crate::cri::RetryPolicy {
                        max_elapsed: Duration::from_secs(2),
                        ..Default::default()
                    },
                    call_timeout,
                    ..Default::default()
                };
                let c = self
                    .runtime()
                    .block_on(crate::cri::CriClient::connect(&self.endpoint, opts))?;
                *guard = Some(c.clone());
                c
            }
        };
        drop(guard);
        Ok(f(client)?)
    }
}

impl crate::evict::PodStopper for CriStopper {
    fn stop_pod(&self, sandbox_id: &str, grace: Duration) -> Result<(), RuntimeCallError> {
        let rt = self.runtime();
        self.with_stop_client(|c| {
            rt.block_on(async {
                if !grace.is_zero() {
                    // StopPodSandbox has no grace period: stop the running
                    // containers first with it (TERM, grace, KILL).
                    let running = proto::ContainerState::ContainerRunning as i32;
                    let ctrs = match c.list_containers(Some(sandbox_id)).await {
                        Err(e) if e.is_not_found() => Vec::new(),
                        r => r?,
                    };
                    for ctr in ctrs.iter().filter(|c| c.state == running) {
                        done_if_not_found(
                            c.stop_container(&ctr.id, grace.as_secs().max(1) as i64)
                                .await,
                        )?;
                    }
                }
                done_if_not_found(c.stop_pod_sandbox(sandbox_id).await)
            })
        })
    }

    fn remove_pod(&self, sandbox_id: &str) -> Result<(), RuntimeCallError> {
        let rt = self.runtime();
        self.with_client(|c| {
            rt.block_on(async { done_if_not_found(c.remove_pod_sandbox(sandbox_id).await) })
        })
    }
}

impl crate::evict::runtime::NodeRuntime for CriStopper {
    fn writable_layers(&self) -> Result<BTreeMap<String, Vec<WritableLayer>>, RuntimeCallError> {
        let rt = self.runtime();
        let stats = self.with_client(|c| rt.block_on(c.list_container_stats()))?;
        Ok(writable_layers_by_pod(&stats))
    }

    fn reclaim(&self, now: Instant) -> ReclaimReport {
        let mut rep = ReclaimReport::default();
        let rt = self.runtime();
        let r = self.with_client(|c| {
            rt.block_on(async {
                self.remove_dead_containers(&c, &mut rep).await;
                self.free_images_async(&c, u64::MAX, now, &mut rep).await;
                Ok(())
            })
        });
        if let Err(e) = r {
            rep.errors.push(e.to_string());
        }
        for e in &rep.errors {
            tracing::warn!(target: "qosd::eviction", error = %e, "node-level reclaim");
        }
        rep
    }

    fn free_images(&self, bytes: u64, now: Instant) -> ReclaimReport {
        let mut rep = ReclaimReport::default();
        let rt = self.runtime();
        let r = self.with_client(|c| {
            rt.block_on(async {
                self.free_images_async(&c, bytes, now, &mut rep).await;
                Ok(())
            })
        });
        if let Err(e) = r {
            rep.errors.push(e.to_string());
        }
        rep
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evict::PodStopper;

    #[test]
    fn no_runtime_call_once_the_daemon_is_closing() {
        // Once the daemon is stopping, a clean-up still retrying gives up
        // without a call (nor a connection).
        let s = CriStopper::new(
            "unix:///nonexistent/qosd-test.sock".into(),
            EvictRuntime::new().unwrap(),
        );
        s.closing.store(true, Ordering::Release);
        for r in [s.stop_pod("sb", Duration::ZERO), s.remove_pod("sb")] {
            let e = r.unwrap_err();
            assert!(matches!(e, RuntimeCallError::Stopping), "{e}");
            assert!(e.to_string().contains("qosd is stopping"), "{e}");
        }
        assert!(s.client.lock().unwrap().is_none(), "no client was made");
    }

    /// The stopper's calls run on its own runtime: they work from a plain
    /// thread with no daemon runtime at all (and so go on working while the
    /// daemon's runtime shuts down), failing with the runtime's error.
    #[test]
    fn calls_need_no_daemon_runtime() {
        let s = std::sync::Arc::new(CriStopper::new(
            "unix:///nonexistent/qosd-test.sock".into(),
            EvictRuntime::new().unwrap(),
        ));
        let s2 = s.clone();
        let r = std::thread::spawn(move || s2.remove_pod("sb")).join();
        let e = r.expect("no panic").unwrap_err();
        assert!(matches!(e, RuntimeCallError::Cri(_)), "{e}");
        // dropped from an async task: no panic either
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async move { drop(s) });
    }

    fn stats(uid: Option<&str>, name: Option<&str>, bytes: Option<u64>) -> proto::ContainerStats {
        let mut labels = std::collections::HashMap::new();
        if let Some(u) = uid {
            labels.insert("io.kubernetes.pod.uid".to_string(), u.to_string());
        }
        proto::ContainerStats {
            attributes: Some(proto::ContainerAttributes {
                id: "c0ffee".into(),
                metadata: name.map(|n| proto::ContainerMetadata {
                    name: n.into(),
                    attempt: 0,
                }),
                labels,
                ..Default::default()
            }),
            writable_layer: Some(proto::FilesystemUsage {
                used_bytes: bytes.map(|value| proto::UInt64Value { value }),
                inodes_used: Some(proto::UInt64Value { value: 7 }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn writable_layers_are_grouped_by_pod_uid() {
        let got = writable_layers_by_pod(&[
            stats(Some("a"), Some("app"), Some(100)),
            stats(Some("a"), None, None),
            stats(Some("b"), Some("db"), Some(5)),
            stats(None, Some("orphan"), Some(1)),
        ]);
        assert_eq!(got.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(
            got["a"],
            [
                WritableLayer {
                    container: "app".into(),
                    bytes: Some(100),
                    inodes: Some(7),
                },
                // No metadata: the container id names it.
                WritableLayer {
                    container: "c0ffee".into(),
                    bytes: None,
                    inodes: Some(7),
                },
            ]
        );
        assert_eq!(got["b"][0].bytes, Some(5));
    }
}
