//! The runtime side of disk eviction: what the eviction engine asks of the
//! container runtime (writable layers, reclaim, image GC).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The eviction side's own async runtime (one thread, driven by whoever
/// blocks on it): the CRI stopper's and the API evictor's calls run on it
/// from the plain eviction thread, so an eviction never depends on the
/// daemon's runtime, which may be shutting down at SIGTERM. Built once by
/// the daemon and shared (cloning shares it); the last holder shuts it
/// down without waiting, even from inside another runtime.
#[derive(Clone)]
pub struct EvictRuntime(Arc<RuntimeHolder>);

struct RuntimeHolder(Option<tokio::runtime::Runtime>);

impl Drop for RuntimeHolder {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for EvictRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EvictRuntime")
    }
}

impl EvictRuntime {
    /// A current-thread runtime with I/O and timers.
    pub fn new() -> std::io::Result<EvictRuntime> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(EvictRuntime(Arc::new(RuntimeHolder(Some(rt)))))
    }

    /// Run `f` to completion on this runtime (from a thread that is not
    /// itself inside a runtime).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        match &self.0 .0 {
            Some(rt) => rt.block_on(f),
            None => unreachable!("the runtime lives until its last holder drops"),
        }
    }
}

/// One container's writable layer as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritableLayer {
    /// The container's name (its id when the runtime gives no name).
    pub container: String,
    /// `writable_layer.used_bytes` (`None`: not reported).
    pub bytes: Option<u64>,
    /// `writable_layer.inodes_used` (`None`: not reported).
    pub inodes: Option<u64>,
}

/// What node-level reclaim (dead containers, unused images) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReclaimReport {
    /// Dead containers removed.
    pub containers_removed: usize,
    /// Dead pod sandboxes removed.
    pub sandboxes_removed: usize,
    /// Ids of the images removed.
    pub images_removed: Vec<String>,
    /// Sizes of the removed images, as the runtime listed them.
    pub image_bytes_freed: u64,
    /// The calls that failed, described (the rest went on).
    pub errors: Vec<String>,
}

/// The runtime side of disk eviction: per-container writable layers (CRI
/// ListContainerStats) and node-level reclaim through the ImageService and
/// RuntimeService. The daemon implements it with its CRI client.
pub trait NodeRuntime: Send + Sync {
    /// Writable layers of every container, by pod uid.
    fn writable_layers(
        &self,
    ) -> Result<BTreeMap<String, Vec<WritableLayer>>, crate::evict::RuntimeCallError>;
    /// Remove dead containers, then unused images (all of them, least
    /// recently used first, older than the minimum GC age): the kubelet's
    /// reclaim before a disk eviction.
    fn reclaim(&self, now: Instant) -> ReclaimReport;
    /// Image GC: free at least `bytes` by removing unused images, least
    /// recently used first.
    fn free_images(&self, bytes: u64, now: Instant) -> ReclaimReport;
}

/// The kubelet's image GC policy (KubeletConfiguration
/// `imageGCHighThresholdPercent`, `imageGCLowThresholdPercent`,
/// `imageMinimumGCAge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGcPolicy {
    /// Image GC starts when the image filesystem's usage reaches this
    /// percentage.
    pub high_percent: u32,
    /// Image GC frees space down to this percentage of usage.
    pub low_percent: u32,
    /// An unused image younger than this is not removed.
    pub minimum_age: Duration,
}

impl Default for ImageGcPolicy {
    fn default() -> Self {
        ImageGcPolicy {
            high_percent: 85,
            low_percent: 80,
            minimum_age: Duration::from_secs(120),
        }
    }
}
