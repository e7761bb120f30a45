//! What qosd reports: metrics ([`metrics`]), liveness and readiness
//! ([`health`]), the status document ([`status`]), the HTTP server
//! ([`server`]) and `qosd status`'s request to it ([`client`]), logging
//! ([`log`]), escaping for text output ([`text`]) and systemd notification
//! ([`notify`]).

pub mod client;
pub mod health;
pub(crate) mod journald;
pub(crate) mod kube_metrics;
pub(crate) mod log;
pub mod metrics;
pub mod notify;
pub mod server;
pub mod status;
pub(crate) mod text;
