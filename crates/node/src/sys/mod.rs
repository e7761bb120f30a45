//! Kernel I/O, every root injected: cgroupfs reads and writes ([`cgroupfs`]),
//! the one symlink-refusing walk to a cgroup directory ([`cgroup_dir`]),
//! version detection ([`detect`]), the plan applier ([`apply`]), /proc
//! parsing ([`procfs`]), the one pid-tree killer ([`kill`]), eviction signal
//! readers ([`signals`]), the fast memory-pressure watcher ([`watch`]),
//! pressure stall information and its triggers ([`pressure`]), pod
//! cgroups coming and going ([`pod_events`]), planned files written by
//! others ([`file_watch`]), both over one inotify wrapper ([`inotify`]), the
//! node's hugepage sizes ([`hugepages`]) and CPU topology ([`cpu_topology`]),
//! and the systemd cgroup driver over D-Bus ([`systemd`]).

pub mod apply;
pub mod cgroup_dir;
pub mod cgroupfs;
pub mod cpu_topology;
pub mod detect;
pub mod fdlimit;
pub mod file_watch;
pub mod hugepages;
pub mod inotify;
pub mod input;
pub mod kill;
pub mod malloc;
pub mod oom_score;
pub mod pod_events;
pub mod pressure;
pub mod process;
pub mod procfs;
pub mod signals;
pub(crate) mod stoppable;
pub mod systemd;
pub mod thread_usage;
pub mod watch;

use std::sync::OnceLock;

/// The kernel's page size in bytes (`sysconf(_SC_PAGESIZE)`), read once;
/// 4096 if sysconf fails. Memory limits are kept in pages by the kernel.
pub fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if v > 0 {
            v as u64
        } else {
            4096
        }
    })
}
