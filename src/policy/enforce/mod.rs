//! QoS enforcement policy: cgroup naming ([`naming`]) and the plan of writes
//! ([`plan`]), parents before children; the systemd driver's unit
//! properties for a plan ([`units`]).

pub mod naming;
pub mod plan;
pub mod units;
