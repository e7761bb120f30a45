//! Eviction manager: signals → thresholds → ranking → evictor.
//!
//! * [`threshold`]: kubelet eviction settings (flags and config file) → thresholds.
//! * [`signals`]: reads the signals from cgroups, /proc and statvfs.
//! * [`watch`]: the fast (millisecond) memory-pressure detector thread.
//! * [`rank`]: the kubelet's eviction order per signal.
//! * [`manager`]: the pure state machine deciding conditions and victims.
//! * [`engine`]: the pieces wired together, one call per pass (for the daemon).
//! * [`evictor`]: acting on a victim (kill, CRI stop/remove, dry-run).

pub mod engine;
pub mod evictor;
pub mod manager;
pub mod rank;
pub mod service;
pub mod signals;
pub mod threshold;
pub mod watch;
