//! The runtime side of disk eviction: what the eviction engine asks of the
//! container runtime (writable layers, reclaim, image GC).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One container's writable layer as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritableLayer {
    pub container: String,
    pub bytes: Option<u64>,
    pub inodes: Option<u64>,
}

/// What node-level reclaim (dead containers, unused images) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReclaimReport {
    pub containers_removed: usize,
    pub sandboxes_removed: usize,
    pub images_removed: Vec<String>,
    /// Sizes of the removed images, as the runtime listed them.
    pub image_bytes_freed: u64,
    pub errors: Vec<String>,
}

/// The runtime side of disk eviction: per-container writable layers (CRI
/// ListContainerStats) and node-level reclaim through the ImageService and
/// RuntimeService. The daemon implements it with its CRI client.
pub trait NodeRuntime: Send + Sync {
    /// Writable layers of every container, by pod uid.
    fn writable_layers(&self) -> Result<BTreeMap<String, Vec<WritableLayer>>, String>;
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
    pub high_percent: u32,
    pub low_percent: u32,
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
