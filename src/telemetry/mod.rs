//! What qosd reports: metrics ([`metrics`]), liveness and readiness
//! ([`health`]), the status document ([`status`]), the HTTP server
//! ([`server`]) and its small client ([`client`]), logging ([`log`]) and
//! systemd notification ([`notify`]).

pub mod client;
pub mod health;
pub(crate) mod journald;
pub(crate) mod kube_metrics;
pub(crate) mod log;
pub mod metrics;
pub mod notify;
pub mod server;
pub mod status;
