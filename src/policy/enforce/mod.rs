//! QoS enforcement policy: cgroup naming ([`naming`]) and the plan of writes
//! ([`plan`]), parents before children.

pub mod naming;
pub mod plan;
