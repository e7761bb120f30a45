//! Pod cgroups appearing and disappearing, from the kernel (inotify on
//! cgroupfs) instead of a relist every second.
//!
//! Watched: the kubepods cgroup and its QoS cgroups (`burstable`,
//! `besteffort`, or their slices), whose sub-directories are pod cgroups,
//! and every pod cgroup, whose sub-directories are containers. A pod
//! starting makes its pod cgroup (the kubelet, or runc for the sandbox) and
//! then one cgroup per container as each starts; a pod going away removes
//! them. Each of those is one `IN_CREATE` / `IN_DELETE` here, and the daemon
//! relists (two cheap CRI calls) shortly after. cgroup v1 (one hierarchy is
//! enough: runc creates the pod's directory in every controller together)
//! and v2 alike. A queue overflow is reported as an event too: the caller
//! relists anyway.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

/// Why the watch could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PodEventsError {
    #[error("inotify: {0}")]
    Init(Errno),
    #[error("cannot watch {path}: {errno}")]
    Watch { path: PathBuf, errno: Errno },
    #[error("cannot read the inotify events: {0}")]
    Read(Errno),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// kubepods or a QoS cgroup: sub-directories are pods (or QoS cgroups).
    Parent,
    /// A pod cgroup: sub-directories are containers.
    Pod,
}

/// An inotify instance on the pod cgroup tree (non-blocking fd, to be
/// polled).
#[derive(Debug)]
pub(crate) struct PodEvents {
    inotify: Inotify,
    parents: Vec<PathBuf>,
    watches: HashMap<WatchDescriptor, (PathBuf, Level)>,
}

const MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_ONLYDIR);

impl PodEvents {
    /// Watch `parents` (kubepods first, then its QoS cgroups) and every pod
    /// cgroup already under them. Each parent must exist.
    pub(crate) fn new(parents: &[PathBuf]) -> Result<PodEvents, PodEventsError> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(PodEventsError::Init)?;
        let mut me = PodEvents {
            inotify,
            parents: parents.to_vec(),
            watches: HashMap::new(),
        };
        for p in parents {
            me.add(p, Level::Parent)?;
        }
        for p in parents {
            let Ok(rd) = std::fs::read_dir(p) else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let child = e.path();
                    if !me.parents.contains(&child) {
                        // A pod that goes away meanwhile is fine.
                        let _ = me.add(&child, Level::Pod);
                    }
                }
            }
        }
        Ok(me)
    }

    fn add(&mut self, dir: &Path, level: Level) -> Result<(), PodEventsError> {
        let wd = self
            .inotify
            .add_watch(dir, MASK)
            .map_err(|errno| PodEventsError::Watch {
                path: dir.to_path_buf(),
                errno,
            })?;
        self.watches.insert(wd, (dir.to_path_buf(), level));
        Ok(())
    }

    /// Directories watched (parents + pods).
    pub(crate) fn watched(&self) -> usize {
        self.watches.len()
    }

    /// Read every queued event (never blocks): how many directories
    /// appeared or went away (a queue overflow counts as one). New pod
    /// cgroups are watched from here on.
    pub(crate) fn drain(&mut self) -> Result<usize, PodEventsError> {
        let mut n = 0;
        loop {
            let events = match self.inotify.read_events() {
                Ok(ev) => ev,
                Err(Errno::EAGAIN) => return Ok(n),
                Err(e) => return Err(PodEventsError::Read(e)),
            };
            if events.is_empty() {
                return Ok(n);
            }
            for ev in events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    n += 1;
                    continue;
                }
                if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                    // The watched directory itself went away.
                    self.watches.remove(&ev.wd);
                    continue;
                }
                if !ev.mask.contains(AddWatchFlags::IN_ISDIR) {
                    continue;
                }
                n += 1;
                let created = ev
                    .mask
                    .intersects(AddWatchFlags::IN_CREATE.union(AddWatchFlags::IN_MOVED_TO));
                let Some((dir, Level::Parent)) = self.watches.get(&ev.wd).cloned() else {
                    continue;
                };
                let (Some(name), true) = (ev.name, created) else {
                    continue;
                };
                let child = dir.join(name);
                if !self.parents.contains(&child) {
                    let _ = self.add(&child, Level::Pod);
                }
            }
        }
    }
}

impl AsFd for PodEvents {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.inotify.as_fd()
    }
}

impl AsRawFd for PodEvents {
    fn as_raw_fd(&self) -> RawFd {
        self.inotify.as_fd().as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_drain(w: &mut PodEvents) -> usize {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(w.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::from(2000u16));
        w.drain().unwrap()
    }

    /// On a real filesystem: a pod directory (and a container inside it)
    /// appearing and going away under kubepods and a QoS directory.
    #[test]
    fn sees_pods_and_containers_come_and_go() {
        let t = tempfile::tempdir().unwrap();
        let kp = t.path().join("kubepods");
        let bu = kp.join("burstable");
        std::fs::create_dir_all(&bu).unwrap();
        std::fs::create_dir(kp.join("podold")).unwrap();
        let mut w = PodEvents::new(&[kp.clone(), bu.clone()]).unwrap();
        // kubepods, burstable, podold (burstable is a parent, not a pod).
        assert_eq!(w.watched(), 3);
        assert_eq!(w.drain().unwrap(), 0);

        std::fs::create_dir(bu.join("podnew")).unwrap();
        assert_eq!(wait_drain(&mut w), 1);
        assert_eq!(w.watched(), 4);
        // A container in the new pod and in the old one.
        std::fs::create_dir(bu.join("podnew").join("c1")).unwrap();
        std::fs::create_dir(kp.join("podold").join("c2")).unwrap();
        assert_eq!(wait_drain(&mut w), 2);
        // Files are not pods.
        std::fs::write(bu.join("cpu.shares"), "2").unwrap();
        assert_eq!(w.drain().unwrap(), 0);
        // Removal: the container, then the pod (its watch goes away).
        std::fs::remove_dir(bu.join("podnew").join("c1")).unwrap();
        std::fs::remove_dir(bu.join("podnew")).unwrap();
        let mut seen = wait_drain(&mut w);
        seen += w.drain().unwrap();
        assert_eq!(seen, 2);
        assert_eq!(w.watched(), 3);
    }

    #[test]
    fn missing_parent_is_an_error_naming_it() {
        let t = tempfile::tempdir().unwrap();
        let e = PodEvents::new(&[t.path().join("nope")]).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
