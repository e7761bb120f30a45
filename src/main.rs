//! qosd: a node-level, kubelet-style QoS enforcer and fast eviction manager.
//!
//! Data flows one way, and the module tree shows it (docs/design.md has the
//! rules each module follows):
//! * pod source ([`manifest`], [`cri`]) → classify ([`core::qos`]) → plan of
//!   cgroup writes ([`policy::enforce`]) → apply ([`sys::apply`], real or
//!   dry-run);
//! * signals ([`sys::signals`], [`sys::watch`]) → thresholds and ranking
//!   ([`policy::evict`]) → evictor ([`runtime::evictor`]).
//!
//! [`core`] and [`policy`] are pure: no I/O, no async. Every kernel path is a
//! parameter so tests can point it at a temp dir. [`app`] is the one place
//! that turns validated settings into running services; [`cli`] only parses
//! arguments and renders results.

mod app;
mod cli;
mod runtime;
mod telemetry;

#[cfg(test)]
#[path = "../tests/support/mod.rs"]
mod support;
#[cfg(test)]
mod system_tests;

fn main() {
    std::process::exit(cli::main());
}
