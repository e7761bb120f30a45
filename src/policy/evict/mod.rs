//! Eviction policy: kubelet signals and thresholds ([`threshold`]), the
//! kubelet's ranking ([`rank`]) and the pure, time-injected state machine
//! that decides conditions and victims ([`manager`]).

pub mod manager;
pub mod rank;
pub mod threshold;
