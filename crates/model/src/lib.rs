//! qosd's pure model: what Kubernetes decides about a pod, computed without
//! touching the node.
//!
//! * [`core`]: quantities, durations, the pod model, QoS classification,
//!   node capacity;
//! * [`policy`]: what to write (cgroup plans, [`policy::enforce`]), whom to
//!   evict and when ([`policy::evict`]), which CPUs to give
//!   ([`policy::cpu`]).
//!
//! Nothing here performs I/O, reads a clock or spawns a task: every input
//! (file contents, readings, the time) is a parameter, so each rule is a
//! table test. Cargo enforces it: this crate depends on no async runtime,
//! system-call or network crate.

#![deny(missing_docs)]

pub mod core;
pub mod policy;
