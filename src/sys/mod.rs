//! Kernel I/O, every root injected: cgroupfs reads and writes ([`cgroupfs`]),
//! version detection ([`detect`]), the plan applier ([`apply`]), /proc
//! parsing ([`procfs`]), the one pid-tree killer ([`kill`]), eviction signal
//! readers ([`signals`]), the fast memory-pressure watcher ([`watch`]),
//! pod cgroups coming and going ([`pod_events`]), planned files written by
//! others ([`file_watch`]), the
//! node's hugepage sizes ([`hugepages`]) and CPU topology ([`cpu_topology`]),
//! and the systemd cgroup driver over D-Bus ([`systemd`]).

pub mod apply;
pub mod cgroupfs;
pub(crate) mod cpu_topology;
pub mod detect;
pub(crate) mod fdlimit;
pub mod file_watch;
pub(crate) mod hugepages;
pub(crate) mod input;
pub mod kill;
pub(crate) mod malloc;
pub(crate) mod pod_events;
pub(crate) mod process;
pub mod procfs;
pub mod signals;
pub(crate) mod systemd;
pub(crate) mod thread_usage;
pub mod watch;
