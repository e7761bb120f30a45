//! Kernel I/O, every root injected: cgroupfs reads and writes ([`cgroupfs`]),
//! version detection ([`detect`]), the plan applier ([`apply`]), /proc
//! parsing ([`procfs`]), the one pid-tree killer ([`kill`]), eviction signal
//! readers ([`signals`]) and the fast memory-pressure watcher ([`watch`]).

pub mod apply;
pub mod cgroupfs;
pub mod cpu_topology;
pub mod detect;
pub mod kill;
pub mod procfs;
pub mod signals;
pub mod watch;
