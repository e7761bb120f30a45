//! qosd: a node-level, kubelet-style QoS enforcer and fast eviction manager.
//!
//! Data flows one way:
//! * pod source ([`manifest`], [`cri`]) → classifier ([`qos`]) → plan of
//!   cgroup writes ([`plan`]) → applier ([`cgroup::apply`], real or dry-run);
//! * signals ([`eviction::signals`]) → thresholds ([`eviction::threshold`]) →
//!   ranking ([`eviction::rank`]) → evictor ([`eviction::evictor`]).
//!
//! Pure logic (parse, classify, plan, rank) does no I/O. Every kernel path is
//! a parameter so tests can point it at a temp dir.

pub mod cgroup;
pub mod cli;
pub mod config;
pub mod cri;
pub mod daemon;
pub mod eviction;
pub mod http;
pub mod kube;
pub mod manifest;
pub mod metrics;
pub mod model;
pub mod node;
pub mod plan;
pub mod qos;
pub mod quantity;
pub mod resources;
