//! The CRI status cache kept across restarts
//! (`<stateDir>/cri-status-cache.json`, a versioned JSON file of the
//! runtime's status messages): restored before the first listing, so a
//! restart asks the runtime only about sandboxes and containers that
//! appeared while qosd was down; written off the loop after changes (at
//! most every 10 s) and once more when the loop ends.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cri::persist;
use crate::cri::StatusCache;

/// A changed cache is written at most this often (and at stop).
pub(crate) const SAVE_EVERY: Duration = Duration::from_secs(10);

struct Shared {
    path: PathBuf,
    endpoint: String,
    cache: Arc<StatusCache>,
    /// The cache generation the file holds (`None`: unknown).
    written: Mutex<Option<u64>>,
    /// The last write failed (logged once until one succeeds).
    failing: AtomicBool,
    /// The state directory is unsafe (writable by others, another owner):
    /// the cache is neither read nor written (logged once).
    disabled: AtomicBool,
}

impl Shared {
    /// Write the cache unless the file holds this generation already.
    /// Serialized by `written`: a later write always takes a later snapshot.
    fn write(&self) {
        if self.disabled.load(Ordering::Relaxed) {
            return;
        }
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let generation = self.cache.generation();
        if *written == Some(generation) {
            return;
        }
        let bytes = self.cache.to_file_bytes(&self.endpoint);
        match persist::save(&self.path, &bytes) {
            Ok(()) => {
                *written = Some(generation);
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(path = %self.path.display(), "CRI status cache written again");
                }
            }
            Err(e) if e.is_unsafe_dir() => self.disable(&e),
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "cannot write the CRI status cache; the next start asks the runtime about every pod");
                }
            }
        }
    }
}

impl Shared {
    /// Turn the cache off for good (one warning).
    fn disable(&self, e: &persist::PersistError) {
        if !self.disabled.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "CRI status cache disabled; every start asks the runtime about every pod");
        }
    }
}

/// The persisted status cache of one CRI pod source.
pub struct StatusStore {
    shared: Arc<Shared>,
    last_save: Option<Instant>,
    writing: Option<tokio::task::JoinHandle<()>>,
}

impl StatusStore {
    /// The store of `cache` (of the runtime at `endpoint`) in `state_dir`.
    pub(crate) fn new(state_dir: &Path, endpoint: &str, cache: Arc<StatusCache>) -> StatusStore {
        StatusStore {
            shared: Arc::new(Shared {
                path: state_dir.join(persist::FILE_NAME),
                endpoint: endpoint.to_string(),
                cache,
                written: Mutex::new(None),
                failing: AtomicBool::new(false),
                disabled: AtomicBool::new(false),
            }),
            last_save: None,
            writing: None,
        }
    }

    /// Restore the cache from the file; logs one line when there was one.
    /// Returns the number of container statuses restored (which the caller
    /// asks about again right after its first reconcile).
    pub fn load(&mut self) -> usize {
        let s = &self.shared;
        // A file in a directory others can write to may have been planted.
        if let Some(dir) = s.path.parent().filter(|d| d.exists()) {
            if let Err(e) = persist::open_state_dir(dir) {
                if e.is_unsafe_dir() {
                    s.disable(&e);
                    return 0;
                }
            }
        }
        match persist::load(&s.path, &s.endpoint, &s.cache) {
            Ok(Some((sandboxes, containers))) => {
                *s.written.lock().unwrap_or_else(|e| e.into_inner()) = Some(s.cache.generation());
                tracing::info!(
                    path = %s.path.display(),
                    sandboxes,
                    containers,
                    "CRI status cache restored"
                );
                containers
            }
            Ok(None) => {
                tracing::debug!(path = %s.path.display(), "no CRI status cache yet");
                0
            }
            Err(e) => {
                tracing::warn!(error = %e, "CRI status cache ignored; the first listing asks the runtime about every pod");
                0
            }
        }
    }

    /// Write the cache now (if it changed), on this thread.
    pub fn save_now(&self) {
        self.shared.write();
    }

    /// False once the state directory was found unsafe.
    #[cfg(test)]
    pub(crate) fn enabled(&self) -> bool {
        !self.shared.disabled.load(Ordering::Relaxed)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// After a listing: write the cache (on the blocking pool) if it changed
    /// and the last write is 10 s old.
    pub fn maybe_save(&mut self) {
        let s = &self.shared;
        let unchanged =
            *s.written.lock().unwrap_or_else(|e| e.into_inner()) == Some(s.cache.generation());
        if unchanged
            || self.last_save.is_some_and(|t| t.elapsed() < SAVE_EVERY)
            || self.writing.as_ref().is_some_and(|h| !h.is_finished())
        {
            return;
        }
        self.last_save = Some(Instant::now());
        let shared = self.shared.clone();
        self.writing = Some(tokio::task::spawn_blocking(move || shared.write()));
    }
}

impl Drop for StatusStore {
    /// The loop ended (stop, error): write what changed since the last write.
    fn drop(&mut self) {
        self.shared.write();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_only_changes_and_once_more_at_drop() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let cache = Arc::new(StatusCache::default());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let file = state.join(persist::FILE_NAME);
        rt.block_on(async {
            let mut store = StatusStore::new(&state, "unix:///a.sock", cache.clone());
            assert_eq!(store.load(), 0);
            store.maybe_save();
            store.writing.take().unwrap().await.unwrap();
            // The empty cache is written (a first start).
            assert!(file.exists());
            // Unchanged: nothing to write (and no task).
            store.last_save = None;
            store.maybe_save();
            assert!(store.writing.is_none());
            // Changed within SAVE_EVERY: left for later, then written at drop.
            cache.forget_containers();
            store.last_save = Some(Instant::now());
            store.maybe_save();
            assert!(store.writing.is_none());
            std::fs::remove_file(&file).unwrap();
            drop(store);
            assert!(file.exists(), "written at drop");
        });
        // Another endpoint's store ignores the file and keeps an empty cache.
        let other = Arc::new(StatusCache::default());
        let mut store = StatusStore::new(&state, "unix:///b.sock", other.clone());
        assert_eq!(store.load(), 0);
        assert_eq!(other.len(), (0, 0));
    }

    #[test]
    fn an_unsafe_state_dir_disables_the_cache_without_failing() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let file = state.join(persist::FILE_NAME);
        // A planted cache in a group-writable directory is not read.
        {
            let cache = Arc::new(StatusCache::default());
            let store = StatusStore::new(&state, "unix:///a.sock", cache.clone());
            store.save_now();
            assert!(file.exists());
        }
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o775)).unwrap();
        let before = std::fs::read(&file).unwrap();
        let cache = Arc::new(StatusCache::default());
        let mut store = StatusStore::new(&state, "unix:///a.sock", cache.clone());
        assert_eq!(store.load(), 0);
        assert!(!store.enabled());
        // Nothing is written, now or at drop.
        cache.forget_containers();
        store.save_now();
        drop(store);
        assert_eq!(std::fs::read(&file).unwrap(), before);
        let names: Vec<_> = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        // A directory that becomes unsafe after start: the write is refused
        // and the cache turned off.
        let ok = dir.path().join("ok");
        let cache = Arc::new(StatusCache::default());
        let mut store = StatusStore::new(&ok, "unix:///a.sock", cache.clone());
        assert_eq!(store.load(), 0);
        assert!(store.enabled());
        std::fs::create_dir(&ok).unwrap();
        std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o777)).unwrap();
        store.save_now();
        assert!(!store.enabled());
        assert!(!ok.join(persist::FILE_NAME).exists());
    }
}
