//! `qosd plan`: print every cgroup write qosd would make (changes nothing).
//!
//! The flags are `qosd run`'s (config file overrides, see
//! [`ConfigFlags`]); the planner config comes from
//! [`crate::app::plan_config`], the daemon's one builder, so the plan
//! printed is the plan the daemon would apply.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::cli::bad_input;
use crate::cli::config_check::ConfigFlags;
use crate::cli::output::Output;
use qosd_model::core::model::{CgroupLevel, CgroupWrite, Pod};
use qosd_model::policy::enforce::plan::{Plan, PlannedPod};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Pod manifests (files or directories; YAML or JSON; Pods and workload
    /// templates). Default: the embedded example pods (fixtures/pods).
    #[arg(long, value_name = "PATH", num_args = 1.., conflicts_with = "cri")]
    pub(crate) pods: Vec<PathBuf>,
    /// Plan for the live pods of the container runtime instead (the
    /// daemon's listing; refuses a parallel tree like the daemon).
    #[arg(long)]
    pub(crate) cri: bool,
    #[command(flatten)]
    pub(crate) config: ConfigFlags,
    /// Where sysfs is (CPU topology for the CPU manager, hugepage sizes).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub(crate) sysfs: PathBuf,
    /// Where /proc is (for node capacity detection).
    #[arg(long, value_name = "DIR", default_value = "/proc", hide = true)]
    pub(crate) proc_root: PathBuf,
    #[command(flatten)]
    pub(crate) cpu: crate::cli::cpu::CpuManagerFlags,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub(crate) output: Output,
}

/// Pods from `--pods`, or the embedded examples when none are given.
/// Manifest errors are bad input (exit 2); `None`: the paths given hold no
/// pod (warned on stderr; the caller exits 2).
pub(crate) fn load_pods(paths: &[PathBuf]) -> anyhow::Result<Option<(Vec<Pod>, bool)>> {
    if paths.is_empty() {
        return Ok(Some((qosd_node::manifest::example_pods(), true)));
    }
    let pods = qosd_node::manifest::load_paths(paths).map_err(bad_input)?;
    if pods.is_empty() {
        eprintln!(
            "qosd: warning: no pod in {} (expected Pod manifests or workloads with a pod template)",
            joined(paths)
        );
        return Ok(None);
    }
    Ok(Some((pods, false)))
}

fn joined(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `plan`'s pods: like [`load_pods`], but paths holding no pod are an
/// empty node (the node- and QoS-level writes the kubelet makes with no
/// pod, resets included), noted on stderr.
fn load_plan_pods(
    paths: &[PathBuf],
    version: qosd_model::policy::enforce::versions::KubeletVersion,
) -> anyhow::Result<(Vec<Pod>, bool)> {
    if paths.is_empty() {
        return Ok((qosd_node::manifest::example_pods(), true));
    }
    let pods = qosd_node::manifest::load_paths_for(paths, version).map_err(bad_input)?;
    if pods.is_empty() {
        eprintln!(
            "qosd: no pod in {}: planning an empty node (node and QoS levels only)",
            joined(paths)
        );
    }
    Ok((pods, false))
}

pub(crate) fn run(args: Args) -> anyhow::Result<i32> {
    let cfg = args.config.load()?;
    let plan_cfg = crate::app::plan_config_or_v2(&cfg, &args.proc_root, &args.sysfs)?;
    let (pods, embedded) = if args.cri {
        let mut listing = crate::app::live_listing(&cfg, &args.proc_root)?;
        crate::cli::kube::merge_listing(&cfg, &mut listing)?;
        crate::app::check_parents(&plan_cfg, &listing).map_err(bad_input)?;
        (listing.pods, false)
    } else {
        load_plan_pods(&args.pods, cfg.kubelet_version)?
    };
    crate::app::warn_version(&plan_cfg, cfg.fail_cgroup_v1);
    if !args.cri {
        // A live listing says so in its notes (`qosd pods`); a manifest
        // with a status says so here.
        for p in &pods {
            if let Some(r) = &p.resize {
                eprintln!(
                    "qosd: pod {}: {}",
                    p.key(),
                    qosd_node::admitted::describe(r)
                );
            }
        }
    }
    for rc in &plan_cfg.reserved_cgroups {
        for dir in qosd_model::policy::enforce::plan::reserved_dirs(&plan_cfg, rc) {
            if !dir.is_dir() {
                eprintln!(
                    "qosd: warning: {} \"/{}\" does not exist at {} (qosd never creates it; `qosd run` refuses to start)",
                    rc.setting,
                    rc.cgroup,
                    dir.display()
                );
            }
        }
    }
    let plan = qosd_model::policy::enforce::plan::build(&plan_cfg, &pods);
    let cpu = cpu_plan(&args, &cfg, &pods)?;
    let out = match args.output {
        Output::Json | Output::Yaml => {
            // Through a Value (sorted keys) only with the CPU manager, so
            // the plan's own field order stays as it was.
            match &cpu {
                Some(c) => {
                    let mut v = serde_json::to_value(&plan)?;
                    crate::cli::cpu::add_to_json(&mut v, c);
                    args.output.structured(&v)?.unwrap_or_default()
                }
                None => args.output.structured(&plan)?.unwrap_or_default(),
            }
        }
        Output::Text | Output::Wide => {
            if embedded {
                eprintln!(
                    "qosd: no --pods given: planning the embedded example pods (fixtures/pods)"
                );
            }
            let mut t = plan_text(&plan, args.output == Output::Wide);
            if let Some(c) = &cpu {
                t.push_str(&crate::cli::cpu::to_text(c));
            }
            t
        }
    };
    crate::cli::output::write_stdout(out)?;
    Ok(0)
}

/// The plan for people (`--output text`): the rules and the node, the node-
/// and QoS-level writes, then each pod with the reason for its class and
/// its writes, then the systemd units. `wide` adds each container's
/// `oom_score_adj` under its pod.
pub(crate) fn plan_text(plan: &Plan, wide: bool) -> String {
    let mut s = String::new();
    let n = &plan.node;
    let _ = writeln!(s, "rules: kubelet {}", plan.kubelet_version);
    let _ = writeln!(
        s,
        "node: cgroup {} ({} driver) at {}, root {}; kubepods cpu {}m, memory {} bytes (capacity {}m, {} bytes)",
        n.cgroup_version,
        n.cgroup_driver,
        n.cgroupfs,
        n.cgroup_root,
        n.cpu_millis,
        n.memory_bytes,
        n.capacity_cpu_millis,
        n.capacity_memory_bytes
    );
    let (upper, by_pod) = writes_by_pod(plan);
    let _ = writeln!(s, "\nnode and QoS level:");
    for w in upper {
        let _ = writeln!(s, "  {} = {}", w.file.display(), w.value);
    }
    for (p, ws) in plan.pods.iter().zip(by_pod) {
        write_pod(&mut s, p, &ws, wide);
    }
    if !plan.units.is_empty() {
        let _ = writeln!(
            s,
            "\nsystemd units (set over D-Bus when systemd manages the tree, then the files are checked):"
        );
        for u in &plan.units {
            let props: Vec<String> = u.properties.iter().map(|p| p.render()).collect();
            let _ = writeln!(s, "  {}  {}", u.unit, props.join(" "));
        }
    }
    s
}

/// The plan's writes split into those above the pods (node, QoS and
/// reserved levels) and each pod's own, in plan order.
fn writes_by_pod(plan: &Plan) -> (Vec<&CgroupWrite>, Vec<Vec<&CgroupWrite>>) {
    let mut pod_cgroups = std::collections::HashMap::new();
    for (i, p) in plan.pods.iter().enumerate() {
        pod_cgroups.insert(p.cgroup.as_str(), i);
    }
    let mut by_pod: Vec<Vec<&CgroupWrite>> = vec![Vec::new(); plan.pods.len()];
    let mut upper: Vec<&CgroupWrite> = Vec::new();
    for w in &plan.writes {
        match (w.level, pod_cgroups.get(w.cgroup.as_str())) {
            (CgroupLevel::Pod, Some(&i)) => by_pod[i].push(w),
            _ => upper.push(w),
        }
    }
    (upper, by_pod)
}

/// One pod: its class and cgroup, why, (wide) its containers'
/// `oom_score_adj`, and its writes.
fn write_pod(s: &mut String, p: &PlannedPod, writes: &[&CgroupWrite], wide: bool) {
    let derived = if p.uid_derived {
        " (uid derived from namespace/name)"
    } else {
        ""
    };
    let _ = writeln!(
        s,
        "\n{}/{}  {}  {}{}\n  why: {}",
        p.namespace, p.name, p.qos_class, p.cgroup, derived, p.reason
    );
    if wide {
        let adjs: Vec<String> = p
            .containers
            .iter()
            .map(|c| {
                let kind = if c.init { "init:" } else { "" };
                format!("{kind}{}={}", c.name, c.oom_score_adj)
            })
            .collect();
        let _ = writeln!(s, "  oom_score_adj: {}", adjs.join(" "));
    }
    for w in writes {
        let _ = writeln!(s, "  {} = {}", w.file.display(), w.value);
    }
}

/// The CPU manager's part of the plan (`cpuManagerPolicy: static` in the
/// config or `--cpu-manager-policy static`): pods arrive in the order given.
fn cpu_plan(
    args: &Args,
    cfg: &qosd_config::Config,
    pods: &[Pod],
) -> anyhow::Result<Option<qosd_model::policy::cpu::policy::CpuPlan>> {
    let mut base =
        crate::cli::cpu::settings_from_config(cfg, &crate::cli::cpu::CpuStateFlags::default())?;
    base.state_file = None;
    base.audit_file = None;
    let settings = args
        .cpu
        .settings(base, crate::cli::cpu::reserved_millis(cfg)?, &args.sysfs)?;
    let with_arrival: Vec<(&Pod, i64)> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| (p, i as i64))
        .collect();
    crate::runtime::cpu_manager::plan_pods(&settings, &with_arrival).map_err(bad_input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use qosd_model::core::model::{CgroupDriver, CgroupVersion};
    use qosd_model::policy::enforce::plan::{CpuWeightFormula, PlanConfig};
    use std::path::Path;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: Args,
    }

    fn args(extra: &[&str]) -> Args {
        let mut v = vec!["t", "--config", "/dev/null"];
        v.extend_from_slice(extra);
        T::try_parse_from(v).unwrap().a
    }

    fn config(extra: &[&str]) -> anyhow::Result<PlanConfig> {
        let a = args(extra);
        let cfg = a.config.load()?;
        crate::app::plan_config(&cfg, Path::new("/proc"), &a.sysfs)
    }

    #[test]
    fn config_from_flags() {
        let c = config(&[
            "--cgroup-version",
            "v1",
            "--cgroup-driver",
            "systemd",
            "--cgroupfs",
            "/x",
            "--cgroup-root",
            "/qosd-test-1",
            "--node-cpu",
            "4",
            "--node-memory",
            "8Gi",
            "--system-reserved",
            "cpu=500m,memory=1Gi",
            "--kube-reserved",
            "cpu=500m",
            "--qos-reserved",
            "memory=20%",
            "--memory-qos",
            "--cpu-weight-formula",
            "runc",
            "--cpu-cfs-quota-period",
            "50ms",
            "--cpu-cfs-quota",
            "false",
            "--pod-max-pids",
            "1024",
            "--hugepage-sizes",
            "2Mi",
        ])
        .unwrap();
        assert_eq!(c.layout.version, CgroupVersion::V1);
        assert_eq!(c.layout.driver, CgroupDriver::Systemd);
        assert_eq!(c.layout.cgroupfs, PathBuf::from("/x"));
        assert_eq!(c.node.enforced_cpu_millis, 3000);
        assert_eq!(c.node.enforced_memory_bytes, 7 << 30);
        assert_eq!(c.qos_reserved_memory_percent, Some(20));
        assert!(c.memory_qos && !c.enforce_cpu_limits);
        assert_eq!(c.cpu_cfs_period_us, 50_000);
        assert_eq!(c.cpu_weight_formula, CpuWeightFormula::Runc);
        assert_eq!(c.pod_pids_limit, Some(1024));
        assert_eq!(c.hugepage_sizes, vec![2 << 20]);
    }

    #[test]
    fn plan_text_shows_each_pod_with_its_writes_and_wide_adds_oom_scores() {
        let cfg = config(&[
            "--cgroup-version",
            "v2",
            "--cgroup-driver",
            "systemd",
            "--node-cpu",
            "4",
            "--node-memory",
            "8Gi",
        ])
        .unwrap();
        let pods = qosd_node::manifest::example_pods();
        let plan = qosd_model::policy::enforce::plan::build(&cfg, &pods);
        let text = plan_text(&plan, false);
        assert!(text.starts_with("rules: kubelet "), "{text}");
        let p = &plan.pods[0];
        let head = format!(
            "\n{}/{}  {}  {}",
            p.namespace, p.name, p.qos_class, p.cgroup
        );
        assert!(text.contains(&head), "{head:?} missing from\n{text}");
        assert!(text.contains("\nsystemd units "), "{text}");
        assert!(!text.contains("oom_score_adj:"), "{text}");
        let wide = plan_text(&plan, true);
        assert!(wide.contains("\n  oom_score_adj: "), "{wide}");
    }

    #[test]
    fn humantime_only_durations_are_refused() {
        // One duration syntax everywhere: Go's (`1m30s`, not `1min 30s`).
        let e = config(&["--cpu-cfs-quota-period", "100 ms", "--node-cpu", "1"]).unwrap_err();
        assert!(e.chain().any(|c| c.is::<crate::cli::BadInput>()), "{e:#}");
    }

    #[test]
    fn auto_detection() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.controllers"), "cpu memory").unwrap();
        let dir = d.path().to_str().unwrap();
        let c = config(&["--cgroupfs", dir, "--node-cpu", "1", "--node-memory", "1Gi"]).unwrap();
        assert_eq!(c.layout.version, CgroupVersion::V2);
        let empty = tempfile::tempdir().unwrap();
        let a = args(&[
            "--cgroupfs",
            empty.path().to_str().unwrap(),
            "--node-cpu",
            "1",
            "--node-memory",
            "1Gi",
        ]);
        let cfg = a.config.load().unwrap();
        let e = format!(
            "{:#}",
            crate::app::plan_config(&cfg, Path::new("/proc"), &a.sysfs).unwrap_err()
        );
        assert!(e.contains("cgroupVersion"), "{e}");
        let c = crate::app::plan_config_or_v2(&cfg, Path::new("/proc"), &a.sysfs).unwrap();
        assert_eq!(c.layout.version, CgroupVersion::V2);
    }

    #[test]
    fn v1_comounted_cpu_without_symlink() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("cpu,cpuacct")).unwrap();
        std::fs::create_dir(d.path().join("memory")).unwrap();
        let c = config(&[
            "--cgroupfs",
            d.path().to_str().unwrap(),
            "--node-cpu",
            "1",
            "--node-memory",
            "1Gi",
        ])
        .unwrap();
        assert_eq!(c.layout.version, CgroupVersion::V1);
        assert_eq!(
            c.layout.file("kubepods", "cpu.shares"),
            d.path().join("cpu,cpuacct/kubepods/cpu.shares")
        );
    }

    #[test]
    fn bad_flags_are_bad_input() {
        for extra in [
            &["--cgroup-version", "v2", "--node-cpu", "x"][..],
            &["--cgroup-version", "v2", "--system-reserved", "gpu=1"][..],
            &["--cgroup-version", "v2", "--qos-reserved", "cpu=1%"][..],
            &["--cgroup-version", "v2", "--pod-max-pids", "many"][..],
            &["--cgroup-version", "v2", "--hugepage-sizes", "3x"][..],
        ] {
            let mut v = extra.to_vec();
            v.extend(["--node-memory", "1Gi"]);
            if !v.contains(&"--node-cpu") {
                v.extend(["--node-cpu", "1"]);
            }
            let e = config(&v).unwrap_err();
            assert!(e.chain().any(|c| c.is::<crate::cli::BadInput>()), "{e:#}");
        }
    }
}
