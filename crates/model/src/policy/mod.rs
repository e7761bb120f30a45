//! Pure policy: what the kubelet would do, computed from core types.
//!
//! * [`enforce`]: cgroup naming, the plan of cgroup writes, and the
//!   versioned kubelet rules it follows.
//! * [`evict`]: signals and thresholds, ranking, the eviction state machine.

pub mod cpu;
pub mod enforce;
pub mod evict;
