//! CRI (`runtime.v1`) client and the live pod inventory.
//!
//! * [`client`]: [`CriClient::connect`] over a UNIX socket, with a connect
//!   timeout, per-call deadline and retries with backoff while the runtime
//!   is down or restarting; checks `Version` (runtime.v1).
//! * [`inventory`]: sandboxes joined with their containers → [`LivePod`]s.
//! * [`reconstruct`]: pure logic turning CRI container settings back into
//!   requests, limits and a QoS class (docs/cri.md).

/// Code generated from `proto/runtime/v1/cri.proto` (package `runtime.v1`).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("runtime.v1");
}

pub mod client;
pub mod inventory;
pub mod reconstruct;

#[cfg(test)]
mod fake_tests;

use std::path::Path;

pub use client::{ConnectOptions, CriClient, CriError, RetryPolicy, DEFAULT_ENDPOINT};
pub use inventory::{
    inventory, inventory_of, inventory_with, Inventory, InventoryOptions, LiveContainer, LivePod,
    SandboxState, Skipped, StatusCache,
};
pub use reconstruct::QosSource;

use crate::core::model::Pod;

/// Connect (with the default options and `retry`), take the inventory and
/// close, on a private current-thread tokio runtime. For CLI commands.
pub fn inventory_blocking(
    endpoint: &str,
    opts: ConnectOptions,
    inv: InventoryOptions,
) -> Result<Inventory, CriError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio current-thread runtime");
    rt.block_on(async {
        let client = CriClient::connect(endpoint, opts).await?;
        inventory(&client, &inv).await
    })
}

/// Connect to the runtime at `endpoint` (e.g. `unix:///run/containerd/containerd.sock`)
/// and return its READY pods as [`Pod`]s (class from the cgroup parent in `qos_override`).
/// Blocking convenience for the CLI (retries up to 5 s while the runtime is
/// down). Sandboxes skipped (vanished, bad uid) and per-pod warnings go to
/// `tracing::warn!` and stderr.
pub fn live_pods_blocking(endpoint: &str) -> anyhow::Result<Vec<Pod>> {
    let opts = ConnectOptions {
        retry: RetryPolicy {
            max_elapsed: std::time::Duration::from_secs(5),
            ..RetryPolicy::default()
        },
        ..ConnectOptions::default()
    };
    let inv = inventory_blocking(
        endpoint,
        opts,
        InventoryOptions {
            memory_capacity_bytes: crate::sys::procfs::detect_memory_bytes(Path::new("/proc")).ok(),
        },
    )?;
    // Printed (stderr) as well as logged: CLI commands may run without a
    // tracing subscriber, and these must not go unseen.
    for s in &inv.skipped {
        tracing::warn!(sandbox = %s.sandbox_id, "skipped: {}", s.reason);
        eprintln!(
            "qosd: warning: skipped sandbox {}: {}",
            s.sandbox_id, s.reason
        );
    }
    for p in inv.pods.iter().filter(|p| p.state == SandboxState::Ready) {
        for w in &p.warnings {
            tracing::warn!(pod = %p.pod.key(), "{w}");
            eprintln!("qosd: warning: pod {}: {w}", p.pod.key());
        }
    }
    Ok(inv.ready_pods())
}

#[cfg(test)]
mod tests {}
