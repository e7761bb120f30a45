//! Which images the kubelet's image GC removes, and in what order (pure).
//!
//! pkg/kubelet/images/image_gc_manager.go: images are tracked with the time
//! they were first detected (images present at the first detection count as
//! detected "long ago") and the last time a container — running or not —
//! referred to them. GC never removes an image a container refers to, nor a
//! pinned one; it removes the least recently used first (ties: detected
//! earlier first), skips images detected less than `imageMinimumGCAge` ago,
//! and stops once enough bytes are freed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// What the GC knows about one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRecord {
    /// `None`: present at the first detection ("long ago").
    pub(crate) first_detected: Option<Instant>,
    /// `None`: never seen in use.
    pub(crate) last_used: Option<Instant>,
    /// Size, bytes.
    pub size: u64,
    /// Pinned by the runtime (never removed).
    pub(crate) pinned: bool,
}

/// The image records, updated at every detection.
#[derive(Debug, Clone, Default)]
pub struct ImageTracker {
    records: BTreeMap<String, ImageRecord>,
    initialized: bool,
}

/// One image as listed by the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedImage {
    /// The runtime's image id.
    pub id: String,
    /// Size, bytes.
    pub size: u64,
    /// Pinned by the runtime (never removed).
    pub pinned: bool,
}

impl ImageTracker {
    /// Record a listing: new images, the images in use (by id, by any
    /// container in any state) get `last_used = now`; vanished images are
    /// forgotten.
    pub fn detect(&mut self, images: &[ListedImage], in_use: &BTreeSet<String>, now: Instant) {
        let first = self.initialized.then_some(now);
        self.initialized = true;
        let current: BTreeSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.records.retain(|id, _| current.contains(id.as_str()));
        for i in images {
            let r = self.records.entry(i.id.clone()).or_insert(ImageRecord {
                first_detected: first,
                last_used: None,
                size: i.size,
                pinned: i.pinned,
            });
            r.size = i.size;
            r.pinned = i.pinned;
            if in_use.contains(&i.id) {
                r.last_used = Some(now);
            }
        }
    }

    /// The images to remove to free `bytes` at `now`, in order, and the
    /// bytes they free. In-use images (last used at `now`), pinned ones and
    /// those younger than `min_age` are never chosen.
    pub fn to_free(&self, bytes: u64, now: Instant, min_age: Duration) -> (Vec<String>, u64) {
        let mut order: Vec<(&String, &ImageRecord)> = self.records.iter().collect();
        // least recently used first (never used first), then detected earlier
        order.sort_by(|a, b| {
            (a.1.last_used, a.1.first_detected, a.0).cmp(&(b.1.last_used, b.1.first_detected, b.0))
        });
        let mut out = Vec::new();
        let mut freed = 0u64;
        for (id, r) in order {
            if freed >= bytes {
                break;
            }
            if r.pinned || r.last_used.is_some_and(|t| t >= now) {
                continue;
            }
            if r.first_detected
                .is_some_and(|t| now.saturating_duration_since(t) < min_age)
            {
                continue;
            }
            out.push(id.clone());
            freed = freed.saturating_add(r.size);
        }
        (out, freed)
    }

    /// An image was removed.
    pub fn removed(&mut self, id: &str) {
        self.records.remove(id);
    }

    /// Every tracked image, by id.
    pub fn records(&self) -> &BTreeMap<String, ImageRecord> {
        &self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(id: &str, size: u64) -> ListedImage {
        ListedImage {
            id: id.into(),
            size,
            pinned: false,
        }
    }

    #[test]
    fn never_in_use_pinned_or_young_lru_first() {
        let t0 = Instant::now();
        let mut t = ImageTracker::default();
        let used: BTreeSet<String> = ["a".to_string()].into();
        // first detection: a in use, b and c "long ago"
        t.detect(&[img("a", 10), img("b", 20), img("c", 30)], &used, t0);
        // later: b used, then not; d new
        let t1 = t0 + Duration::from_secs(60);
        t.detect(
            &[img("a", 10), img("b", 20), img("c", 30), img("d", 40)],
            &["a".to_string(), "b".to_string()].into(),
            t1,
        );
        let mut pinned = img("p", 50);
        pinned.pinned = true;
        let t2 = t0 + Duration::from_secs(100);
        t.detect(
            &[
                img("a", 10),
                img("b", 20),
                img("c", 30),
                img("d", 40),
                pinned,
            ],
            &used,
            t2,
        );
        // everything: c (never used) then b (used at t1); a in use, d too
        // young (40 s < 2 m), p pinned
        let (ids, freed) = t.to_free(u64::MAX, t2, Duration::from_secs(120));
        assert_eq!(ids, vec!["c", "b"]);
        assert_eq!(freed, 50);
        // stops once enough is freed
        let (ids, _) = t.to_free(25, t2, Duration::from_secs(120));
        assert_eq!(ids, vec!["c"]);
        // later, d is old enough
        let t3 = t1 + Duration::from_secs(121);
        t.detect(
            &[img("a", 10), img("b", 20), img("c", 30), img("d", 40)],
            &used,
            t3,
        );
        let (ids, _) = t.to_free(u64::MAX, t3, Duration::from_secs(120));
        assert_eq!(ids, vec!["c", "d", "b"]);
        t.removed("c");
        assert!(!t.records().contains_key("c"));
    }
}
