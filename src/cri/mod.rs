//! CRI (`runtime.v1`) client and the live pod inventory.
//! (stub: the cri branch writes it)

use crate::model::Pod;

/// Connect to the runtime at `endpoint` (e.g. `unix:///run/containerd/containerd.sock`)
/// and return its READY pods as [`Pod`]s (class from the cgroup parent in `qos_override`).
/// Blocking convenience for the CLI.
pub fn live_pods_blocking(_endpoint: &str) -> anyhow::Result<Vec<Pod>> {
    anyhow::bail!("CRI client not built yet")
}
