//! Eviction: the order and pressure commands, disk signals, eviction under
//! real memory pressure and memory stall, and the reaction-time bench.
//! Tests that create pressure on the host take [`support::serial`], so
//! that no two of them run at once.
//!
//! One test binary for the files in tests/eviction/ (each a module named
//! after its file): `cargo test --test eviction <module>::` runs one of them.

mod support;
#[path = "vm/harness.rs"]
mod vm;

#[path = "eviction/evict_disk.rs"]
mod evict_disk;
#[path = "eviction/evict_e2e.rs"]
mod evict_e2e;
#[path = "eviction/eviction_bench.rs"]
mod eviction_bench;
#[path = "eviction/eviction_order_cli.rs"]
mod eviction_order_cli;
#[path = "eviction/eviction_real.rs"]
mod eviction_real;
#[path = "eviction/pressure_cli.rs"]
mod pressure_cli;
#[path = "eviction/pressure_real.rs"]
mod pressure_real;
