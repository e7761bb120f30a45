//! `qosd plan` and `qosd eviction-order` with `--kubelet-config`: the
//! kubelet's settings take the place of these commands' flag defaults;
//! flags given on the command line (or through their environment
//! variable) still win, as the kubelet's own flags do.

use std::collections::BTreeSet;

use crate::cli::config_check::{load_or_bad_input, KubeletFlags};
use crate::cli::plan::{DriverArg, PlanOptions};
use crate::config::{Config, Overrides};
use crate::core::model::{CgroupDriver, ResourceList};

/// The ids of the current subcommand's arguments given explicitly (command
/// line or environment), from the process's own arguments.
pub fn explicit_args() -> BTreeSet<String> {
    use clap::parser::ValueSource;
    use clap::CommandFactory;
    let Ok(m) = crate::cli::Cli::command().try_get_matches_from(std::env::args_os()) else {
        return BTreeSet::new();
    };
    let Some((_, sub)) = m.subcommand() else {
        return BTreeSet::new();
    };
    sub.ids()
        .filter(|id| {
            matches!(
                sub.value_source(id.as_str()),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        })
        .map(|id| id.as_str().to_string())
        .collect()
}

/// Load the kubelet config the flags name (no qosd file).
pub fn load(flags: &KubeletFlags) -> anyhow::Result<Config> {
    let mut o = Overrides::default();
    flags.apply(&mut o);
    load_or_bad_input(None, &o)
}

fn list(r: &ResourceList) -> String {
    r.iter()
        .map(|(k, q)| format!("{k}={}", q.as_str()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Replace the plan options not given explicitly with the kubelet's values.
pub fn adopt_plan_options(o: &mut PlanOptions, cfg: &Config, explicit: &BTreeSet<String>) {
    let keep = |id: &str| explicit.contains(id);
    if !keep("cgroup_driver") {
        o.cgroup_driver = match cfg.cgroup_driver {
            CgroupDriver::Cgroupfs => DriverArg::Cgroupfs,
            CgroupDriver::Systemd => DriverArg::Systemd,
        };
    }
    if !keep("cgroup_root") {
        o.cgroup_root = cfg.cgroup_root.clone();
    }
    if !keep("system_reserved") {
        o.system_reserved = list(&cfg.system_reserved);
    }
    if !keep("kube_reserved") {
        o.kube_reserved = list(&cfg.kube_reserved);
    }
    if !keep("qos_reserved") {
        o.qos_reserved = cfg.qos_reserved_memory().map(|p| format!("memory={p}%"));
    }
    if !keep("cpu_cfs_quota") {
        o.cpu_cfs_quota = cfg.cpu_cfs_quota;
    }
    if !keep("cpu_cfs_quota_period") {
        o.cpu_cfs_quota_period = crate::config::format_go_duration(cfg.cpu_cfs_quota_period);
    }
    if !keep("memory_qos") {
        o.memory_qos = cfg.memory_qos;
    }
    if !keep("memory_throttling_factor") {
        o.memory_throttling_factor = cfg.memory_throttling_factor;
    }
    if !keep("memory_reservation_policy") {
        o.memory_reservation_policy = cfg.memory_reservation_policy;
    }
    if !keep("pod_max_pids") {
        o.pod_max_pids = (cfg.pod_pids_limit > 0).then_some(cfg.pod_pids_limit);
    }
    if !keep("enforce_node_allocatable") {
        let keys = cfg.enforce_node_allocatable.keys();
        o.enforce_node_allocatable = if keys.is_empty() {
            "none".to_string()
        } else {
            keys.join(",")
        };
    }
    if !keep("system_reserved_cgroup") {
        o.system_reserved_cgroup = cfg.system_reserved_cgroup.clone();
    }
    if !keep("kube_reserved_cgroup") {
        o.kube_reserved_cgroup = cfg.kube_reserved_cgroup.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        o: PlanOptions,
    }

    #[test]
    fn kubelet_values_replace_defaults_but_not_explicit_flags() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("k.yaml");
        std::fs::write(
            &f,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\ncgroupRoot: /k\nsystemReserved:\n  cpu: 500m\n  memory: 1Gi\npodPidsLimit: 4096\nenforceNodeAllocatable: []\n",
        )
        .unwrap();
        let cfg = load(&KubeletFlags {
            kubelet_config: Some(f),
            kubelet_config_dir: None,
        })
        .unwrap();
        let mut o = T::parse_from(["t", "--cgroup-root", "/mine"]).o;
        let explicit: BTreeSet<String> = ["cgroup_root".to_string()].into();
        adopt_plan_options(&mut o, &cfg, &explicit);
        assert_eq!(o.cgroup_driver, DriverArg::Systemd);
        assert_eq!(o.cgroup_root, "/mine");
        assert_eq!(o.system_reserved, "cpu=500m,memory=1Gi");
        assert_eq!(o.pod_max_pids, Some(4096));
        assert_eq!(o.enforce_node_allocatable, "none");
        assert!(o.cpu_cfs_quota);
        assert_eq!(o.cpu_cfs_quota_period, "100ms");
    }
}
