//! What ships beside the binary: the example config, the DaemonSet and
//! kustomize overlays, the docs, the monitoring rules and dashboards, the
//! least privileges, the systemd unit, and the first metrics scrape.
//!
//! One test binary for the files in tests/ship/ (each a module named
//! after its file): `cargo test --test ship <module>::` runs one of them.

mod support;

#[path = "ship/metrics_first_scrape.rs"]
mod metrics_first_scrape;
#[path = "ship/ship_config.rs"]
mod ship_config;
#[path = "ship/ship_deploy.rs"]
mod ship_deploy;
#[path = "ship/ship_docs.rs"]
mod ship_docs;
#[path = "ship/ship_monitoring.rs"]
mod ship_monitoring;
#[path = "ship/ship_privileges.rs"]
mod ship_privileges;
#[path = "ship/ship_systemd.rs"]
mod ship_systemd;
