//! `--kubeconfig` / `--node-name` for the one-shot commands (`pods`,
//! `eviction-order --cri`): the live pods merged with their specs from the
//! API server (one list, no watch).

use std::path::PathBuf;
use std::time::Duration;

use qosd_model::policy::enforce::versions::KubeletVersion;
use qosd_node::cri::Inventory;
use qosd_node::kube::merge::MergeSummary;

#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct KubeFlags {
    /// kubeconfig of the Kubernetes API server: merge the live pods with their specs
    /// (exact requests, limits, priority). Needs --node-name. In a pod, --node-name alone
    /// uses the in-cluster config.
    #[arg(long, value_name = "FILE")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// This node's name (its pods are listed from the API server).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub(crate) node_name: Option<String>,
}

/// The daemon's listing merged with the API server's pod specs when the
/// config names this node (`nodeName`, `kubeconfig`), as `qosd run` does.
pub(crate) fn merge_listing(
    cfg: &qosd_config::Config,
    listing: &mut qosd_node::pods::Listing,
) -> anyhow::Result<()> {
    let flags = KubeFlags {
        kubeconfig: cfg.kubeconfig.clone(),
        node_name: cfg.node_name.clone(),
    };
    if cfg.node_name.is_none() {
        return Ok(());
    }
    let mut inv = Inventory {
        pods: std::mem::take(&mut listing.live),
        skipped: Vec::new(),
    };
    let merged = flags.merge(&mut inv, cfg.kubelet_version);
    listing.pods = inv.ready_pods();
    listing.live = inv.pods;
    merged.map(|_| ())
}

impl KubeFlags {
    /// Refuse an unusable kubeconfig (exit 2 naming the file and the key)
    /// before anything else is asked of the node.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if let Some(path) = &self.kubeconfig {
            let cfg =
                qosd_node::kube::config::from_kubeconfig(path).map_err(crate::cli::bad_input)?;
            qosd_node::kube::KubeClient::new(cfg).map_err(crate::cli::bad_input)?;
        }
        Ok(())
    }

    /// Whether the API is to be asked at all: a kubeconfig, or a node name
    /// inside a pod (in-cluster config).
    pub(crate) fn enabled(&self) -> bool {
        self.kubeconfig.is_some()
            || (self.node_name.as_deref().is_some_and(|n| !n.is_empty())
                && std::env::var_os("KUBERNETES_SERVICE_HOST").is_some())
    }

    /// Merge `inv` with the API's view (`version`: whose rules decide what
    /// the kubelet admitted); `None` when not enabled. An unreachable API
    /// leaves the runtime's data (and says why).
    pub(crate) fn merge(
        &self,
        inv: &mut Inventory,
        version: KubeletVersion,
    ) -> anyhow::Result<Option<(MergeSummary, Option<String>)>> {
        if !self.enabled() {
            return Ok(None);
        }
        let node = self
            .node_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                crate::cli::bad_input("--kubeconfig needs --node-name (or NODE_NAME)")
            })?;
        let cfg = match &self.kubeconfig {
            Some(path) => qosd_node::kube::config::from_kubeconfig(path),
            None => qosd_node::kube::config::in_cluster_from_env(),
        }
        .map_err(crate::cli::bad_input)?;
        let client = qosd_node::kube::KubeClient::new(cfg).map_err(crate::cli::bad_input)?;
        let rt = crate::app::command_runtime()?;
        let view = rt.block_on(qosd_node::kube::source::snapshot(
            &client,
            node,
            Duration::from_secs(5),
        ));
        if let Some(why) = &view.unavailable {
            eprintln!("qosd: warning: Kubernetes API unavailable ({why}): values inferred from the runtime alone");
        }
        let summary = qosd_node::kube::merge::merge(&mut inv.pods, &view, version);
        Ok(Some((summary, view.unavailable)))
    }
}
