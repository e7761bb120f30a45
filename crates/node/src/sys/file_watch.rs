//! Planned cgroup files watched for writes (inotify `IN_MODIFY`), so the
//! reconcile re-reads only the files someone wrote since it last read them.
//!
//! Every `write(2)` to a file raises `IN_MODIFY` on it (`vfs_write` →
//! `fsnotify_modify`), cgroupfs control files included: a value changed by
//! `echo`, runc, systemd or any other writer is seen. What is not seen: a
//! value the kernel changes by itself without a write (none of the files
//! qosd plans), and a cgroup removed and made again under the same path:
//! kernfs raises nothing on the files of a removed cgroup, and the watch
//! stays on the old file (until [`FileWatch::retain`] drops it, or the path
//! is watched again). The caller re-reads everything when pod cgroups come
//! and go, and every file at a slower safety cadence
//! (tests/cgroups/cgroup_v1.rs `cgroup_file_writes_raise_inotify_modify`).
//!
//! One inotify instance; one watch per file (`max_user_watches` bounds
//! them: a file that cannot be watched is reported and simply never counts
//! as unchanged).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use crate::sys::inotify::{AddWatchFlags, Event, InotifyError, WatchDescriptor, Watcher};

/// What changed since the last [`FileWatch::drain`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Files written (or gone: their watch ended).
    pub files: Vec<PathBuf>,
    /// The event queue overflowed: anything may have changed.
    pub overflow: bool,
}

impl Changes {
    /// Nothing changed: no file written, no overflow.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && !self.overflow
    }
}

const MASK: AddWatchFlags = AddWatchFlags::IN_MODIFY.union(AddWatchFlags::IN_DELETE_SELF);

/// An inotify instance watching files for writes (non-blocking fd, to be
/// polled).
#[derive(Debug)]
pub struct FileWatch {
    inotify: Watcher,
    /// A watch is per inode: several paths may share one.
    by_wd: HashMap<WatchDescriptor, Vec<PathBuf>>,
    by_path: HashMap<PathBuf, WatchDescriptor>,
}

impl FileWatch {
    /// A watch on no file yet.
    pub fn new() -> Result<FileWatch, InotifyError> {
        Ok(FileWatch {
            inotify: Watcher::new()?,
            by_wd: HashMap::new(),
            by_path: HashMap::new(),
        })
    }

    /// Watch `path` (again): call it before reading the file, so that a
    /// write after the read is seen. Watching the same file again is cheap
    /// (the kernel returns the same watch); a path now naming another file
    /// (its cgroup made again) moves to the new file's watch.
    pub fn watch(&mut self, path: &Path) -> Result<(), InotifyError> {
        let wd = self.inotify.add(path, MASK)?;
        match self.by_path.get(path) {
            Some(old) if *old == wd => return Ok(()),
            Some(old) => {
                let old = *old;
                self.forget(path, old);
            }
            None => {}
        }
        self.by_path.insert(path.to_path_buf(), wd);
        self.by_wd.entry(wd).or_default().push(path.to_path_buf());
        Ok(())
    }

    /// Drop `path`'s link to watch `wd`, and the watch when no path is left.
    fn forget(&mut self, path: &Path, wd: WatchDescriptor) {
        if let Some(paths) = self.by_wd.get_mut(&wd) {
            paths.retain(|p| p != path);
            if paths.is_empty() {
                self.by_wd.remove(&wd);
                // Gone already (its file was removed): nothing to undo.
                let _ = self.inotify.remove(wd);
            }
        }
    }

    /// Whether `path` is watched.
    pub fn is_watched(&self, path: &Path) -> bool {
        self.by_path.contains_key(path)
    }

    /// Files watched.
    pub fn watched(&self) -> usize {
        self.by_path.len()
    }

    /// Stop watching every file but those `keep` says to.
    pub fn retain(&mut self, keep: impl Fn(&Path) -> bool) {
        let gone: Vec<(PathBuf, WatchDescriptor)> = self
            .by_path
            .iter()
            .filter(|(p, _)| !keep(p))
            .map(|(p, wd)| (p.clone(), *wd))
            .collect();
        for (p, wd) in gone {
            self.by_path.remove(&p);
            self.forget(&p, wd);
        }
    }

    /// Read every queued event (never blocks): the files written since the
    /// last call. A file whose watch ended (removed from a filesystem that
    /// reports it; not cgroupfs) is reported too, and is no longer watched.
    pub fn drain(&mut self) -> Result<Changes, InotifyError> {
        let mut out = Changes::default();
        let mut seen = HashSet::new();
        loop {
            let events = self.inotify.read_events()?;
            if events.is_empty() {
                break;
            }
            for ev in events {
                let (wd, ended) = match ev {
                    Event::Overflow => {
                        out.overflow = true;
                        continue;
                    }
                    Event::Ended(wd) => (wd, true),
                    Event::On { wd, .. } => (wd, false),
                };
                let Some(paths) = self.by_wd.get(&wd) else {
                    continue;
                };
                for p in paths {
                    if seen.insert(p.clone()) {
                        out.files.push(p.clone());
                    }
                }
                if ended {
                    if let Some(paths) = self.by_wd.remove(&wd) {
                        for p in paths {
                            if self.by_path.get(&p) == Some(&wd) {
                                self.by_path.remove(&p);
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

impl AsFd for FileWatch {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.inotify.as_fd()
    }
}

impl AsRawFd for FileWatch {
    fn as_raw_fd(&self) -> RawFd {
        self.inotify.as_fd().as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a real filesystem: writes are seen once per drain, reads are
    /// not, unwatched files are not, removal ends the watch.
    #[test]
    fn sees_writes_not_reads() {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("cpu.shares");
        let b = t.path().join("memory.limit_in_bytes");
        std::fs::write(&a, "2\n").unwrap();
        std::fs::write(&b, "max\n").unwrap();
        let mut w = FileWatch::new().unwrap();
        w.watch(&a).unwrap();
        w.watch(&b).unwrap();
        w.watch(&a).unwrap(); // again: same watch
        assert_eq!(w.watched(), 2);
        assert!(w.drain().unwrap().is_empty());
        let _ = std::fs::read_to_string(&a).unwrap();
        assert!(w.drain().unwrap().is_empty(), "a read is no change");
        std::fs::write(&a, "1024").unwrap();
        std::fs::write(&a, "1025").unwrap();
        assert_eq!(w.drain().unwrap().files, vec![a.clone()]);
        assert!(w.drain().unwrap().is_empty());
        // Not watched any more: its writes are not reported.
        w.retain(|p| p != a);
        assert!(!w.is_watched(&a));
        std::fs::write(&a, "2").unwrap();
        std::fs::remove_file(&b).unwrap();
        let c = w.drain().unwrap();
        assert_eq!(c.files, vec![b.clone()]);
        assert_eq!(w.watched(), 0);
    }

    /// A path made again (a new file under the same name) follows the new
    /// file once watched again.
    #[test]
    fn rewatching_a_recreated_path_follows_the_new_file() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("pod1");
        std::fs::create_dir(&dir).unwrap();
        let f = dir.join("cpu.shares");
        std::fs::write(&f, "2").unwrap();
        let mut w = FileWatch::new().unwrap();
        w.watch(&f).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(&f, "3").unwrap();
        let _ = w.drain().unwrap();
        w.watch(&f).unwrap();
        assert!(w.drain().unwrap().is_empty());
        std::fs::write(&f, "4").unwrap();
        assert_eq!(w.drain().unwrap().files, vec![f.clone()]);
        assert_eq!(w.watched(), 1);
    }

    #[test]
    fn missing_file_is_an_error_naming_it() {
        let t = tempfile::tempdir().unwrap();
        let mut w = FileWatch::new().unwrap();
        let e = w.watch(&t.path().join("nope")).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
        assert!(!e.is_limit());
    }
}
