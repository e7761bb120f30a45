//! CPU manager flags (kubelet names) shared by `qosd plan` and `qosd run`,
//! and the rendering of a CPU plan.

use std::path::PathBuf;

use crate::cli::bad_input;
use crate::runtime::cpu_manager::{CpuManagerSettings, STATE_FILE_NAME};
use qosd_model::policy::cpu::policy::{CpuPlan, PolicyName, PolicyOptions};
use qosd_model::policy::cpu::CpuSet;

/// `--cpu-manager-policy`, `--reserved-cpus`, `--cpu-manager-policy-options` (the topology is read from the command's `--sysfs`).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct CpuManagerFlags {
    /// kubelet --cpu-manager-policy: `none` or `static` (exclusive CPUs for
    /// Guaranteed containers with integer CPU requests). Overrides cpuManagerPolicy.
    #[arg(long, value_name = "none|static")]
    pub(crate) cpu_manager_policy: Option<String>,
    /// kubelet --reserved-cpus: CPUs kept for the system (a CPU list such as `0-1`);
    /// default: ceil(kube + system reserved cpu), taken by topology.
    #[arg(long, value_name = "LIST")]
    pub(crate) reserved_cpus: Option<String>,
    /// kubelet --cpu-manager-policy-options, e.g. `full-pcpus-only=true`.
    #[arg(long, value_name = "K=V,...")]
    pub(crate) cpu_manager_policy_options: Option<String>,
}

/// `qosd run` only: where the state lives, or the kubelet's to audit.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct CpuStateFlags {
    /// Directory of qosd's cpu_manager_state. Overrides cpuManagerStateDir.
    #[arg(long, value_name = "DIR")]
    pub(crate) cpu_manager_state_dir: Option<PathBuf>,
    /// The kubelet's cpu_manager_state: audit the live cpusets against it
    /// and change nothing. Overrides kubeletCPUManagerState.
    #[arg(long, value_name = "FILE")]
    pub(crate) kubelet_cpu_manager_state: Option<PathBuf>,
}

impl CpuManagerFlags {
    /// Settings from the flags over `base` (the config file's values).
    /// `reserved_millis` is kube + system reserved cpu (`None` if neither
    /// sets cpu). Bad values are bad input.
    pub(crate) fn settings(
        &self,
        mut base: CpuManagerSettings,
        reserved_millis: Option<i64>,
        sysfs: &std::path::Path,
    ) -> anyhow::Result<CpuManagerSettings> {
        if let Some(p) = &self.cpu_manager_policy {
            base.policy = PolicyName::parse(p).map_err(bad_input)?;
        }
        if let Some(r) = &self.reserved_cpus {
            base.reserved_system_cpus =
                Some(CpuSet::parse(r).map_err(|e| bad_input(format!("--reserved-cpus: {e}")))?);
        }
        if let Some(o) = &self.cpu_manager_policy_options {
            base.options = PolicyOptions::parse_flag(o).map_err(bad_input)?;
        }
        if let Some(reason) =
            qosd_model::policy::cpu::policy::none_policy_options_error(base.policy, &base.options)
        {
            return Err(bad_input(format!("--cpu-manager-policy-options: {reason}")));
        }
        PolicyOptions::parse(&base.options).map_err(bad_input)?;
        base.reserved_millis = reserved_millis;
        base.sysfs = sysfs.to_path_buf();
        Ok(base)
    }
}

/// Settings from a daemon config (before flags).
pub(crate) fn settings_from_config(
    cfg: &qosd_config::Config,
    state: &CpuStateFlags,
) -> anyhow::Result<CpuManagerSettings> {
    let reserved_system_cpus = match &cfg.reserved_system_cpus {
        Some(s) => Some(CpuSet::parse(s).map_err(bad_input)?),
        None => None,
    };
    let dir = state
        .cpu_manager_state_dir
        .clone()
        .unwrap_or_else(|| cfg.cpu_manager_state_dir.clone());
    Ok(CpuManagerSettings {
        policy: cfg.cpu_manager_policy,
        options: cfg.cpu_manager_policy_options.clone(),
        reserved_system_cpus,
        reserved_millis: None,
        sysfs: PathBuf::from("/sys"),
        state_file: Some(dir.join(STATE_FILE_NAME)),
        audit_file: state
            .kubelet_cpu_manager_state
            .clone()
            .or_else(|| cfg.kubelet_cpu_manager_state.clone()),
    })
}

/// kube + system reserved cpu in millicores, `None` when neither sets cpu.
/// The sum is the node arithmetic's checked sum ([`qosd_config::Config::reserved`]).
pub(crate) fn reserved_millis(cfg: &qosd_config::Config) -> anyhow::Result<Option<i64>> {
    let set = cfg.system_reserved.contains_key("cpu") || cfg.kube_reserved.contains_key("cpu");
    let sum = cfg.reserved().map_err(|e| {
        crate::app::bad_input(format!(
            "systemReserved + kubeReserved (--system-reserved + --kube-reserved): {e}"
        ))
    })?;
    Ok(set.then_some(sum.cpu_millis))
}

/// The text section of `qosd plan` for a CPU plan.
pub(crate) fn to_text(p: &CpuPlan) -> String {
    let mut s = format!(
        "# CPU manager: policy {}, reserved {}, shared pool {}\n",
        p.policy,
        if p.reserved.is_empty() {
            "-"
        } else {
            &p.reserved
        },
        if p.shared_pool.is_empty() {
            "-"
        } else {
            &p.shared_pool
        }
    );
    for c in &p.cpusets {
        s.push_str(&format!(
            "{}  {}  cpus={}  {}\n",
            c.pod,
            c.container,
            c.cpus,
            if c.exclusive { "exclusive" } else { "shared" }
        ));
    }
    for r in &p.refused {
        s.push_str(&format!(
            "refused: {} {}: {}\n",
            r.pod, r.container, r.error
        ));
    }
    s
}

/// Add `cpusets`, `shared_pool` and `cpu_manager` to a plan's JSON object.
pub(crate) fn add_to_json(v: &mut serde_json::Value, p: &CpuPlan) {
    let cpusets: Vec<serde_json::Value> = p
        .cpusets
        .iter()
        .map(|c| {
            serde_json::json!({
                "pod_uid": c.pod_uid,
                "pod": c.pod,
                "container": c.container,
                "cpus": c.cpus,
                "exclusive": c.exclusive,
            })
        })
        .collect();
    v["cpusets"] = serde_json::Value::Array(cpusets);
    v["shared_pool"] = serde_json::Value::String(p.shared_pool.clone());
    v["cpu_manager"] = serde_json::json!({
        "policy": p.policy,
        "reserved": p.reserved,
        "refused": p.refused,
    });
}
