//! The one inotify wrapper: an instance with a non-blocking, close-on-exec
//! fd to be polled ([`Watcher`]), its events sorted into what the callers
//! act on ([`Event`]), and one error type naming the path and the errno
//! ([`InotifyError`]). Used by the pod cgroup watch
//! ([`crate::sys::pod_events`]) and the planned-file watch
//! ([`crate::sys::file_watch`]).

use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{InitFlags, Inotify};

pub use nix::sys::inotify::{AddWatchFlags, WatchDescriptor};

/// Why an inotify call failed.
#[derive(Debug, thiserror::Error)]
pub enum InotifyError {
    /// `inotify_init1` failed.
    #[error("inotify: {0}")]
    Init(Errno),
    /// `inotify_add_watch` on `path` failed.
    #[error("cannot watch {path}: {errno}")]
    Watch {
        /// The path that could not be watched.
        path: PathBuf,
        /// What the kernel said.
        errno: Errno,
    },
    /// `inotify_rm_watch` failed (the watch had already ended).
    #[error("cannot end an inotify watch: {0}")]
    Remove(Errno),
    /// Reading the queued events failed.
    #[error("cannot read the inotify events: {0}")]
    Read(Errno),
}

impl InotifyError {
    /// A per-user inotify limit is reached: watches
    /// (`fs.inotify.max_user_watches`, `ENOSPC`) or instances
    /// (`fs.inotify.max_user_instances`, `EMFILE`).
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            InotifyError::Watch {
                errno: Errno::ENOSPC,
                ..
            } | InotifyError::Init(Errno::EMFILE)
        )
    }
}

/// One inotify event, as the callers use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The kernel's queue overflowed (`IN_Q_OVERFLOW`): events were lost.
    Overflow,
    /// The watch ended (`IN_IGNORED`): its file went away on a filesystem
    /// that reports it, or it was removed.
    Ended(WatchDescriptor),
    /// Something happened on a watched file or in a watched directory.
    On {
        /// The watch that saw it.
        wd: WatchDescriptor,
        /// What happened (`IN_CREATE`, `IN_MODIFY`, …, with `IN_ISDIR`
        /// for a directory).
        mask: AddWatchFlags,
        /// The entry's name, for an event in a watched directory.
        name: Option<OsString>,
    },
}

/// An inotify instance (non-blocking, close-on-exec fd, to be polled).
#[derive(Debug)]
pub struct Watcher {
    inotify: Inotify,
}

impl Watcher {
    /// A new instance with no watch.
    pub fn new() -> Result<Watcher, InotifyError> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(InotifyError::Init)?;
        Ok(Watcher { inotify })
    }

    /// Watch `path` for `mask`. The same inode watched again gets the same
    /// descriptor (its mask replaced).
    pub fn add(&self, path: &Path, mask: AddWatchFlags) -> Result<WatchDescriptor, InotifyError> {
        self.inotify
            .add_watch(path, mask)
            .map_err(|errno| InotifyError::Watch {
                path: path.to_path_buf(),
                errno,
            })
    }

    /// End watch `wd` (an [`Event::Ended`] for it follows).
    pub fn remove(&self, wd: WatchDescriptor) -> Result<(), InotifyError> {
        self.inotify.rm_watch(wd).map_err(InotifyError::Remove)
    }

    /// Every event queued now (never blocks; empty when there is none). A
    /// read failing after some events were read returns those.
    pub fn read_events(&self) -> Result<Vec<Event>, InotifyError> {
        let mut out = Vec::new();
        loop {
            let events = match self.inotify.read_events() {
                Ok(ev) => ev,
                Err(Errno::EAGAIN) => break,
                // Those read so far first; the error again at the next call.
                Err(_) if !out.is_empty() => break,
                Err(e) => return Err(InotifyError::Read(e)),
            };
            if events.is_empty() {
                break;
            }
            out.extend(events.into_iter().map(|ev| {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    Event::Overflow
                } else if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                    Event::Ended(ev.wd)
                } else {
                    Event::On {
                        wd: ev.wd,
                        mask: ev.mask,
                        name: ev.name,
                    }
                }
            }));
        }
        Ok(out)
    }
}

impl AsFd for Watcher {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inotify.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_a_created_file_and_nothing_more() {
        let t = tempfile::tempdir().unwrap();
        let w = Watcher::new().unwrap();
        let wd = w.add(t.path(), AddWatchFlags::IN_CREATE).unwrap();
        assert_eq!(w.read_events().unwrap(), vec![]);
        std::fs::write(t.path().join("a"), "1").unwrap();
        assert_eq!(
            w.read_events().unwrap(),
            vec![Event::On {
                wd,
                mask: AddWatchFlags::IN_CREATE,
                name: Some("a".into()),
            }]
        );
        assert_eq!(w.read_events().unwrap(), vec![], "drained");
        std::fs::create_dir(t.path().join("d")).unwrap();
        assert_eq!(
            w.read_events().unwrap(),
            vec![Event::On {
                wd,
                mask: AddWatchFlags::IN_CREATE | AddWatchFlags::IN_ISDIR,
                name: Some("d".into()),
            }]
        );
    }

    #[test]
    fn a_removed_watch_or_file_ends_its_watch() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        let g = t.path().join("g");
        std::fs::write(&f, "").unwrap();
        std::fs::write(&g, "").unwrap();
        let w = Watcher::new().unwrap();
        let mask = AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_DELETE_SELF;
        let wf = w.add(&f, mask).unwrap();
        let wg = w.add(&g, mask).unwrap();
        assert_ne!(wf, wg);
        assert_eq!(w.add(&f, mask).unwrap(), wf, "same inode, same watch");
        w.remove(wf).unwrap();
        assert_eq!(w.read_events().unwrap(), vec![Event::Ended(wf)]);
        assert!(matches!(w.remove(wf), Err(InotifyError::Remove(_))));
        std::fs::remove_file(&g).unwrap();
        assert_eq!(
            w.read_events().unwrap(),
            vec![
                Event::On {
                    wd: wg,
                    mask: AddWatchFlags::IN_DELETE_SELF,
                    name: None,
                },
                Event::Ended(wg),
            ]
        );
    }

    /// More events than the queue holds: an overflow is reported.
    #[test]
    fn a_full_queue_reports_an_overflow() {
        let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(16_384);
        if max > 1 << 20 {
            eprintln!("max_queued_events is {max}: overflow not tried");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let w = Watcher::new().unwrap();
        w.add(t.path(), AddWatchFlags::IN_MODIFY).unwrap();
        let mut a = std::fs::File::create(t.path().join("a")).unwrap();
        let mut b = std::fs::File::create(t.path().join("b")).unwrap();
        // Alternating files: consecutive events differ and are not merged.
        for _ in 0..=max / 2 + 1 {
            a.write_all(b"x").unwrap();
            b.write_all(b"x").unwrap();
        }
        let events = w.read_events().unwrap();
        assert_eq!(events.last(), Some(&Event::Overflow), "{}", events.len());
        assert_eq!(events.iter().filter(|e| **e == Event::Overflow).count(), 1);
    }

    #[test]
    fn errors_name_the_path_and_tell_limits_apart() {
        let t = tempfile::tempdir().unwrap();
        let w = Watcher::new().unwrap();
        let missing = t.path().join("nope");
        let e = w.add(&missing, AddWatchFlags::IN_MODIFY).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot watch {}: {}", missing.display(), Errno::ENOENT)
        );
        assert!(!e.is_limit());
        let full = InotifyError::Watch {
            path: missing,
            errno: Errno::ENOSPC,
        };
        assert!(full.is_limit());
        assert!(InotifyError::Init(Errno::EMFILE).is_limit());
        assert!(!InotifyError::Read(Errno::EIO).is_limit());
    }
}
