//! Tests of the binary's own modules (HTTP server, notify, config, the
//! eviction engine) against real parts: loopback sockets, a private
//! containerd, real cgroups and filesystems. They share the integration
//! tests' scaffolding (tests/support); those needing root are marked
//! `#[ignore = "needs root: …"]` like every other test (docs/testing.md).

mod evict_storage;
mod ops_cli;
mod ship_http;
mod ship_notify;
