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
//! relists anyway (and the watched pod cgroups are checked against the
//! directories then present).
//!
//! A pod cgroup's own watch is ended here when its `IN_DELETE` arrives on
//! the parent: cgroupfs (kernfs) never reports a removed directory's
//! watch ending (no `IN_DELETE_SELF`, no `IN_IGNORED`), so without that the
//! kernel watch and its entry here would outlive every pod that went away
//! (one each per pod: a leak under pod churn).

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use crate::sys::inotify::{AddWatchFlags, Event, InotifyError, WatchDescriptor, Watcher};

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
pub struct PodEvents {
    inotify: Watcher,
    parents: Vec<PathBuf>,
    watches: HashMap<WatchDescriptor, (PathBuf, Level)>,
    /// The pod cgroups watched, by path (their watch is ended when they
    /// go).
    pods: HashMap<PathBuf, WatchDescriptor>,
}

const MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_ONLYDIR);

impl PodEvents {
    /// Watch `parents` (kubepods first, then its QoS cgroups) and every pod
    /// cgroup already under them. Each parent must exist.
    pub fn new(parents: &[PathBuf]) -> Result<PodEvents, InotifyError> {
        let mut me = PodEvents {
            inotify: Watcher::new()?,
            parents: parents.to_vec(),
            watches: HashMap::new(),
            pods: HashMap::new(),
        };
        for p in parents {
            me.add(p, Level::Parent)?;
        }
        me.watch_present_pods();
        Ok(me)
    }

    /// Watch every pod cgroup under the parents not watched yet.
    fn watch_present_pods(&mut self) {
        for p in self.parents.clone() {
            let Ok(rd) = std::fs::read_dir(&p) else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let child = e.path();
                    if !self.parents.contains(&child) && !self.pods.contains_key(&child) {
                        // A pod that goes away meanwhile is fine.
                        let _ = self.add(&child, Level::Pod);
                    }
                }
            }
        }
    }

    fn add(&mut self, dir: &Path, level: Level) -> Result<(), InotifyError> {
        let wd = self.inotify.add(dir, MASK)?;
        if level == Level::Pod {
            // The path named another directory before (a pod cgroup made
            // again): that one's watch ends.
            if let Some(old) = self.pods.insert(dir.to_path_buf(), wd) {
                if old != wd {
                    self.end_watch(old);
                }
            }
        }
        self.watches.insert(wd, (dir.to_path_buf(), level));
        Ok(())
    }

    /// Stop watching the pod cgroup `dir` (it went away).
    fn forget_pod(&mut self, dir: &Path) {
        if let Some(wd) = self.pods.remove(dir) {
            self.end_watch(wd);
        }
    }

    fn end_watch(&mut self, wd: WatchDescriptor) {
        self.watches.remove(&wd);
        // Already gone (a filesystem that ended it and queued IN_IGNORED):
        // nothing to undo. The IN_IGNORED this queues is skipped in drain.
        let _ = self.inotify.remove(wd);
    }

    /// After a queue overflow (events lost): end the watches of pod
    /// cgroups gone meanwhile, watch those that appeared.
    fn rescan(&mut self) {
        let gone: Vec<PathBuf> = self.pods.keys().filter(|d| !d.is_dir()).cloned().collect();
        for d in gone {
            self.forget_pod(&d);
        }
        self.watch_present_pods();
    }

    /// Directories watched (parents + pods).
    pub fn watched(&self) -> usize {
        self.watches.len()
    }

    /// Read every queued event (never blocks): how many directories
    /// appeared or went away (a queue overflow counts as one). New pod
    /// cgroups are watched from here on.
    pub fn drain(&mut self) -> Result<usize, InotifyError> {
        let mut n = 0;
        let mut overflow = false;
        loop {
            let events = self.inotify.read_events()?;
            if events.is_empty() {
                break;
            }
            for ev in events {
                let (wd, mask, name) = match ev {
                    Event::Overflow => {
                        n += 1;
                        overflow = true;
                        continue;
                    }
                    Event::Ended(wd) => {
                        // The watch ended: its directory went away (on a
                        // filesystem that says so) or it was removed here.
                        if let Some((dir, _)) = self.watches.remove(&wd) {
                            if self.pods.get(&dir) == Some(&wd) {
                                self.pods.remove(&dir);
                            }
                        }
                        continue;
                    }
                    Event::On { wd, mask, name } => (wd, mask, name),
                };
                if !mask.contains(AddWatchFlags::IN_ISDIR) {
                    continue;
                }
                n += 1;
                let created =
                    mask.intersects(AddWatchFlags::IN_CREATE.union(AddWatchFlags::IN_MOVED_TO));
                let Some((dir, Level::Parent)) = self.watches.get(&wd).cloned() else {
                    continue;
                };
                let Some(name) = name else {
                    continue;
                };
                let child = dir.join(name);
                if self.parents.contains(&child) {
                    continue;
                }
                if created {
                    let _ = self.add(&child, Level::Pod);
                } else {
                    // Removed or moved away: its own watch is never ended
                    // by cgroupfs.
                    self.forget_pod(&child);
                }
            }
        }
        if overflow {
            self.rescan();
        }
        Ok(n)
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

    /// The kernel's count of watches on an inotify fd (its fdinfo lists
    /// one `inotify wd:` line per watch).
    fn kernel_watches(w: &PodEvents) -> usize {
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", w.as_raw_fd()))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("inotify wd:"))
            .count()
    }

    /// Events lost to a queue overflow: the pod watches are checked
    /// against the directories present (gone ones end, new ones start).
    #[test]
    fn rescan_after_lost_events_follows_the_directories() {
        let t = tempfile::tempdir().unwrap();
        let kp = t.path().join("kubepods");
        std::fs::create_dir_all(kp.join("poda")).unwrap();
        std::fs::create_dir(kp.join("podb")).unwrap();
        let mut w = PodEvents::new(std::slice::from_ref(&kp)).unwrap();
        assert_eq!(w.watched(), 3);
        // As if the events of these two had been lost.
        std::fs::remove_dir(kp.join("poda")).unwrap();
        std::fs::create_dir(kp.join("podc")).unwrap();
        w.rescan();
        let mut pods: Vec<_> = w.pods.keys().cloned().collect();
        pods.sort();
        assert_eq!(pods, vec![kp.join("podb"), kp.join("podc")]);
        assert_eq!(w.watched(), 3);
        // The queued events change nothing more.
        let _ = w.drain().unwrap();
        assert_eq!(w.watched(), 3);
        assert_eq!(kernel_watches(&w), 3);
    }

    /// cgroupfs (kernfs) raises no `IN_DELETE_SELF` / `IN_IGNORED` on a
    /// removed directory's watch: a pod cgroup that goes away must still
    /// end its watch, here and in the kernel (issue 17: one watch per pod
    /// that ever existed stayed, and qosd's memory grew under pod churn).
    #[test]
    #[ignore = "needs root: creates cgroups on cgroupfs (kernfs)"]
    fn pod_cgroups_gone_end_their_watch_on_cgroupfs() {
        /// Removes the test's cgroups leaf first, also on a panic.
        struct Cleanup(PathBuf);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                let mut dirs = Vec::new();
                let mut stack = vec![self.0.clone()];
                while let Some(d) = stack.pop() {
                    if let Ok(rd) = std::fs::read_dir(&d) {
                        for e in rd.flatten() {
                            if e.file_type().is_ok_and(|t| t.is_dir()) {
                                stack.push(e.path());
                            }
                        }
                    }
                    dirs.push(d);
                }
                for d in dirs.iter().rev() {
                    let _ = std::fs::remove_dir(d);
                }
            }
        }
        let base = ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup"]
            .into_iter()
            .map(PathBuf::from)
            .find(|b| b.join("cgroup.procs").exists())
            .expect("needs root: no cgroupfs mounted at /sys/fs/cgroup/cpu or /sys/fs/cgroup");
        let top = base.join(format!("qosd-test-{}-pod-events", std::process::id()));
        std::fs::create_dir(&top)
            .unwrap_or_else(|e| panic!("needs root: mkdir {}: {e}", top.display()));
        let _cleanup = Cleanup(top.clone());
        let kp = top.join("kubepods");
        let bu = kp.join("burstable");
        std::fs::create_dir(&kp).unwrap();
        std::fs::create_dir(&bu).unwrap();
        std::fs::create_dir(kp.join("podkeep")).unwrap();
        let mut w = PodEvents::new(&[kp.clone(), bu.clone()]).unwrap();
        assert_eq!((w.watched(), kernel_watches(&w)), (3, 3));
        for i in 0..5 {
            let pod = bu.join(format!("pod{i}"));
            std::fs::create_dir(&pod).unwrap();
            std::fs::create_dir(pod.join("c")).unwrap();
            let mut n = wait_drain(&mut w);
            n += w.drain().unwrap();
            assert!(n >= 1, "pod{i} appeared");
            assert_eq!(w.watched(), 4, "pod{i} watched");
            std::fs::remove_dir(pod.join("c")).unwrap();
            std::fs::remove_dir(&pod).unwrap();
            let _ = wait_drain(&mut w);
            let _ = w.drain().unwrap();
        }
        assert_eq!(
            (w.watched(), kernel_watches(&w)),
            (3, 3),
            "watches of the 5 pod cgroups that came and went are left"
        );
        // A pod cgroup made again under the same name is watched again.
        std::fs::create_dir(bu.join("pod0")).unwrap();
        let _ = wait_drain(&mut w);
        assert_eq!((w.watched(), kernel_watches(&w)), (4, 4));
        std::fs::remove_dir(bu.join("pod0")).unwrap();
        let _ = wait_drain(&mut w);
        let _ = w.drain().unwrap();
        assert_eq!((w.watched(), kernel_watches(&w)), (3, 3));
    }

    #[test]
    fn missing_parent_is_an_error_naming_it() {
        let t = tempfile::tempdir().unwrap();
        let e = PodEvents::new(&[t.path().join("nope")]).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
