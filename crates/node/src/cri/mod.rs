//! CRI (`runtime.v1`) client and the live pod inventory.
//!
//! * [`client`]: [`CriClient::connect`] over a UNIX socket, with a connect
//!   timeout, per-call deadline and retries with backoff while the runtime
//!   is down or restarting; checks `Version` (runtime.v1).
//! * [`inventory`](mod@inventory): sandboxes joined with their containers → [`LivePod`]s.
//! * [`events`]: containerd's native event stream (when the runtime is
//!   containerd): tells the daemon when a listing may have changed.
//! * [`reconstruct`]: pure logic turning CRI container settings back into
//!   requests, limits and a QoS class (docs/cri.md).

/// Code generated from `proto/runtime/v1/cri.proto` (package `runtime.v1`).
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    rustdoc::invalid_html_tags
)]
pub mod proto {
    tonic::include_proto!("runtime.v1");
}

pub mod client;
pub mod events;
pub mod inventory;
pub(crate) mod persist;
pub mod reconstruct;

#[cfg(test)]
mod fake_tests;

pub use client::DEFAULT_ENDPOINT;
pub use client::{ConnectOptions, CriClient, CriError, RetryPolicy};
pub(crate) use inventory::inventory_with;
pub use inventory::StatusCache;
pub use inventory::{inventory, inventory_of, InventoryOptions, SandboxState};
pub use inventory::{Inventory, LiveContainer, LivePod, Skipped};
pub use reconstruct::QosSource;

/// Connect (with the default options and `retry`), take the inventory and
/// close, blocking on `rt` (a one-shot command's runtime).
pub fn inventory_blocking(
    rt: &tokio::runtime::Runtime,
    endpoint: &str,
    opts: ConnectOptions,
    inv: InventoryOptions,
) -> Result<Inventory, CriError> {
    rt.block_on(async {
        let client = CriClient::connect(endpoint, opts).await?;
        inventory(&client, &inv).await
    })
}

#[cfg(test)]
mod tests {}
