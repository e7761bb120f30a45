//! qosd's node adapters: everything that reads or changes the node, behind
//! typed errors, with every kernel path a parameter.
//!
//! * [`sys`]: cgroupfs and systemd cgroups (detect, apply, kill), procfs,
//!   eviction signals and their watchers, input files;
//! * [`cri`]: the container runtime over the CRI (`runtime.v1`), its
//!   events, and the live pods rebuilt from it;
//! * [`kube`]: the Kubernetes API (config, client, the node's pod view and
//!   its merge with the runtime's pods);
//! * [`manifest`]: pod manifests from files;
//! * [`admitted`]: the resources the kubelet admitted during an in-place
//!   resize, from a pod's status (pure);
//! * [`pods`]: the pod source the daemon lists (CRI, API merge, manifests)
//!   and its status cache;
//! * [`evict`]: the evictor and its backends (local kill, CRI stop, the
//!   Eviction API), and what disk eviction asks of the runtime.
//!
//! Pure decisions come from `qosd_model`; this crate never imports the
//! binary's runtime, telemetry or CLI.

#![deny(missing_docs)]

pub mod admitted;
pub mod cri;
pub mod evict;
pub mod kube;
pub mod manifest;
pub mod pods;
pub mod sys;
