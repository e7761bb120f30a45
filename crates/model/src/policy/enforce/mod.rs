//! QoS enforcement policy: cgroup naming ([`naming`]) and the plan of writes
//! ([`plan`]), parents before children; the versioned kubelet rules
//! ([`versions`]) and the parts of the plan added with issue 16 (MemoryQoS
//! models, hugepage limits, reserved-cgroup enforcement); the systemd
//! driver's unit properties for a plan ([`units`]).

pub mod hugepages;
pub mod memory_qos;
pub mod naming;
pub mod oom;
pub mod parents;
pub mod plan;
pub mod reserved;
pub mod units;
pub mod versions;
