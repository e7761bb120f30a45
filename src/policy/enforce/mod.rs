//! QoS enforcement policy: cgroup naming ([`naming`]) and the plan of writes
//! ([`plan`]), parents before children; the versioned kubelet rules
//! ([`versions`]) and the parts of the plan added with issue 16 (MemoryQoS
//! models, hugepage limits, reserved-cgroup enforcement); the systemd
//! driver's unit properties for a plan ([`units`]).

pub(crate) mod hugepages;
pub(crate) mod memory_qos;
pub mod naming;
pub(crate) mod parents;
pub mod plan;
pub(crate) mod reserved;
pub(crate) mod units;
pub(crate) mod versions;
