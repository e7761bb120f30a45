//! The Kubernetes API side of qosd (see docs/operations.md, "beside the
//! kubelet"):
//!
//! * [`config`]: in-cluster config or a kubeconfig file;
//! * [`client`]: a small HTTP/1.1 + rustls client (bearer token or client
//!   certificate), JSON calls and watch streams;
//! * [`source`]: list + watch of the pods bound to this node into a
//!   [`source::PodCache`];
//! * [`merge`]: the runtime's live pods merged with the API specs by uid,
//!   each value marked exact or inferred;
//! * [`evict`]: the API calls of an eviction (the Eviction subresource,
//!   its answers told apart, the kubelet's eviction record on the status).

pub mod client;
pub mod config;
pub mod evict;
pub mod merge;
pub mod source;
pub mod types;

pub use client::KubeClient;
