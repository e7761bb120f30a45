//! What qosd reports: metrics, the status document, the HTTP server and
//! client, and systemd notification.

pub mod http;
pub mod journald;
pub mod metrics;
