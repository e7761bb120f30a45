//! What qosd reports: metrics ([`metrics`]), liveness and readiness
//! ([`health`]), the status document ([`status`]), the HTTP server
//! ([`server`]) and its small client ([`client`]), logging ([`log`]) and
//! systemd notification ([`notify`]).

pub mod client;
pub mod health;
pub mod journald;
pub mod kube_metrics;
pub mod log;
pub mod metrics;
pub mod notify;
pub mod server;
pub mod status;
