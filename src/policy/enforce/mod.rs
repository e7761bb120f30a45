//! The enforcement policy: versioned kubelet rules and the pure parts of the
//! cgroup plan that are new with issue 16 (MemoryQoS models, hugepage
//! limits, reserved-cgroup enforcement). `crate::plan` composes them.

pub mod hugepages;
pub mod memory_qos;
pub mod reserved;
pub mod versions;
