//! `qosd plan`: print every cgroup write qosd would make (changes nothing).
//!
//! [`PlanOptions`] holds the layout and node flags; `qosd run` and
//! `qosd eviction-order` flatten it too.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use crate::cli::bad_input;
use crate::core::model::{CgroupDriver, CgroupVersion, Pod};
use crate::core::node::{NodeResources, Reserved};
use crate::core::quantity::Quantity;
use crate::policy::enforce::memory_qos::MemoryReservationPolicy;
use crate::policy::enforce::naming::CgroupLayout;
use crate::policy::enforce::plan::{CpuWeightFormula, PlanConfig};
use crate::policy::enforce::reserved::{self, EnforceNodeAllocatable, ReservedResources};
use crate::policy::enforce::versions::KubeletVersion;

/// `--cgroup-version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VersionArg {
    V1,
    V2,
    /// Detect from the cgroupfs mount.
    Auto,
}

/// `--cgroup-driver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverArg {
    Cgroupfs,
    Systemd,
}

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

/// Layout and node flags (kubelet names and meanings).
#[derive(Debug, Clone, clap::Args)]
pub struct PlanOptions {
    /// cgroup version; `auto` detects it from --cgroupfs.
    #[arg(long, value_enum, default_value = "auto")]
    pub cgroup_version: VersionArg,
    /// Naming scheme of the kubelet's cgroups.
    #[arg(long, value_enum, default_value = "cgroupfs")]
    pub cgroup_driver: DriverArg,
    /// Where the cgroup filesystem is mounted.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/cgroup")]
    pub cgroupfs: PathBuf,
    /// kubelet --cgroup-root: the cgroup under which `kubepods` lives.
    #[arg(long, value_name = "PATH", default_value = "/")]
    pub cgroup_root: String,
    /// Node cpu capacity (e.g. `8`, `7500m`); default: detected.
    #[arg(long, value_name = "N")]
    pub node_cpu: Option<String>,
    /// Node memory capacity (e.g. `32Gi`); default: detected (MemTotal).
    #[arg(long, value_name = "Q")]
    pub node_memory: Option<String>,
    /// kubelet --system-reserved, e.g. `cpu=500m,memory=1Gi`.
    #[arg(long, value_name = "LIST", default_value = "")]
    pub system_reserved: String,
    /// kubelet --kube-reserved, e.g. `cpu=100m,memory=512Mi`.
    #[arg(long, value_name = "LIST", default_value = "")]
    pub kube_reserved: String,
    /// kubelet --qos-reserved, e.g. `memory=50%`.
    #[arg(long, value_name = "memory=N%")]
    pub qos_reserved: Option<String>,
    /// v1 cpu.shares → v2 cpu.weight mapping.
    #[arg(long, value_enum, default_value = "kubelet")]
    pub cpu_weight_formula: CpuWeightFormula,
    /// MemoryQoS (KEP-2570, cgroup v2): write memory.min and memory.high.
    #[arg(long)]
    pub memory_qos: bool,
    /// kubelet --cpu-cfs-quota: enforce cpu limits with CFS quota.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub cpu_cfs_quota: bool,
    /// kubelet --cpu-cfs-quota-period.
    #[arg(long, value_name = "DURATION", default_value = "100ms")]
    pub cpu_cfs_quota_period: String,
    /// kubelet --pod-max-pids (unset: no pids.max on pods).
    #[arg(long, value_name = "N")]
    pub pod_max_pids: Option<i64>,
    /// kubelet --enforce-node-allocatable: `pods` (kubepods gets allocatable,
    /// not capacity), `system-reserved`, `kube-reserved` (limit those
    /// cgroups), comma-separated; `none`. `true`/`false` mean `pods`/`none`.
    #[arg(long, value_name = "LIST", default_value = "pods")]
    pub enforce_node_allocatable: String,
    /// kubelet --system-reserved-cgroup: the cgroup limited by
    /// `system-reserved` enforcement (e.g. `/system.slice`; never created).
    #[arg(long, value_name = "CGROUP")]
    pub system_reserved_cgroup: Option<String>,
    /// kubelet --kube-reserved-cgroup (e.g. `/kube.slice`; never created).
    #[arg(long, value_name = "CGROUP")]
    pub kube_reserved_cgroup: Option<String>,
    /// Plan by this kubelet version's rules (1.33 … 1.36; see
    /// docs/semantics.md §9). Default: the newest qosd knows.
    #[arg(long, value_name = "VERSION", default_value = "1.36", value_parser = KubeletVersion::parse)]
    pub kubelet_version: KubeletVersion,
    /// kubelet memoryReservationPolicy (MemoryQoS, 1.36): None | TieredReservation.
    #[arg(long, value_name = "POLICY", default_value = "None", value_parser = MemoryReservationPolicy::parse)]
    pub memory_reservation_policy: MemoryReservationPolicy,
    /// kubelet memoryThrottlingFactor (MemoryQoS memory.high), 0 < f ≤ 1.
    #[arg(long, value_name = "F", default_value_t = crate::policy::enforce::plan::DEFAULT_MEMORY_THROTTLING_FACTOR)]
    pub memory_throttling_factor: f64,
    /// Hugepage sizes to limit on every pod (e.g. `2Mi,1Gi`, or `none`).
    /// Default: the sizes of <sysfs>/kernel/mm/hugepages when the hugetlb
    /// controller is mounted.
    #[arg(long, value_name = "LIST")]
    pub hugepage_sizes: Option<String>,
    /// Where sysfs is (CPU topology for the CPU manager, hugepage sizes).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// Where /proc is (for node capacity detection).
    #[arg(long, value_name = "DIR", default_value = "/proc", hide = true)]
    pub proc_root: PathBuf,
}

/// `--hugepage-sizes`: `2Mi,1Gi` → bytes; `none` or empty → none.
pub fn parse_hugepage_sizes(s: &str) -> Result<Vec<u64>, String> {
    if matches!(s.trim(), "" | "none") {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let size = crate::policy::enforce::hugepages::page_size_of(&format!("hugepages-{part}"))
            .unwrap_or_else(|| Err(String::new()))
            .map_err(|e| format!("--hugepage-sizes {s:?}: {e}"))?;
        crate::policy::enforce::hugepages::unit_size_name(size)
            .map_err(|e| format!("--hugepage-sizes {s:?}: {e}"))?;
        out.push(size);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// `memory=50%` → 50.
pub fn parse_qos_reserved(s: &str) -> Result<u32, String> {
    let mut pct = None;
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("--qos-reserved {s:?}: {part:?} is not resource=N%"))?;
        if k != "memory" {
            return Err(format!(
                "--qos-reserved {s:?}: only memory is supported (like the kubelet), not {k:?}"
            ));
        }
        let n: u32 = v
            .strip_suffix('%')
            .and_then(|n| n.parse().ok())
            .filter(|n| *n <= 100)
            .ok_or_else(|| format!("--qos-reserved {s:?}: {v:?} is not a percentage 0-100%"))?;
        pct = Some(n);
    }
    pct.ok_or_else(|| format!("--qos-reserved {s:?}: expected memory=N%"))
}

impl PlanOptions {
    /// Build the planner config. `auto` detection failing is an error
    /// naming the mount (use [`PlanOptions::to_config_or_fallback`] for
    /// dry runs).
    pub fn to_config(&self) -> anyhow::Result<PlanConfig> {
        let version = match self.cgroup_version {
            VersionArg::V1 => CgroupVersion::V1,
            VersionArg::V2 => CgroupVersion::V2,
            VersionArg::Auto => crate::sys::detect::detect_version(&self.cgroupfs)
                .with_context(|| {
                    format!(
                        "cannot detect the cgroup version at {} (pass --cgroup-version v1|v2, or --cgroupfs DIR)",
                        self.cgroupfs.display()
                    )
                })?,
        };
        self.config_for(version)
    }

    /// Like [`PlanOptions::to_config`], but when `auto` detection fails,
    /// warn on stderr and plan for cgroup v2 (for `qosd plan`, which only prints).
    pub fn to_config_or_fallback(&self) -> anyhow::Result<PlanConfig> {
        if self.cgroup_version == VersionArg::Auto {
            if let Err(e) = crate::sys::detect::detect_version(&self.cgroupfs) {
                eprintln!(
                    "qosd: warning: {e}; planning for cgroup v2 (pass --cgroup-version v1|v2 to choose)"
                );
                return self.config_for(CgroupVersion::V2);
            }
        }
        self.to_config()
    }

    fn config_for(&self, version: CgroupVersion) -> anyhow::Result<PlanConfig> {
        let driver = match self.cgroup_driver {
            DriverArg::Cgroupfs => CgroupDriver::Cgroupfs,
            DriverArg::Systemd => CgroupDriver::Systemd,
        };
        let mut layout = CgroupLayout::new(version, driver)
            .with_cgroupfs(self.cgroupfs.clone())
            .with_cgroup_root(self.cgroup_root.clone());
        if version == CgroupVersion::V1 {
            // A co-mounted `cpu,cpuacct` without the usual `cpu` symlink.
            let fs = &self.cgroupfs;
            if !fs.join("cpu").exists() && fs.join("cpu,cpuacct").is_dir() {
                layout.v1_dirs.cpu = "cpu,cpuacct".to_string();
            }
        }
        let node = self.node_resources()?;
        let period = humantime::parse_duration(&self.cpu_cfs_quota_period).map_err(|e| {
            bad_input(format!(
                "--cpu-cfs-quota-period {:?}: {e}",
                self.cpu_cfs_quota_period
            ))
        })?;
        let period_us = period.as_micros();
        if !(1000..=1_000_000).contains(&period_us) {
            return Err(bad_input(format!(
                "--cpu-cfs-quota-period {:?}: must be between 1ms and 1s",
                self.cpu_cfs_quota_period
            )));
        }
        let mut cfg = PlanConfig::new(layout, node);
        cfg.cpu_cfs_period_us = period_us as u64;
        cfg.enforce_cpu_limits = self.cpu_cfs_quota;
        cfg.cpu_weight_formula = self.cpu_weight_formula;
        cfg.memory_qos = self.memory_qos;
        cfg.qos_reserved_memory_percent = match &self.qos_reserved {
            None => None,
            Some(s) => Some(parse_qos_reserved(s).map_err(bad_input)?),
        };
        let enforce = EnforceNodeAllocatable::parse(&self.enforce_node_allocatable)
            .map_err(|e| bad_input(format!("--enforce-node-allocatable: {e}")))?;
        cfg.enforce_node_allocatable = enforce.pods;
        cfg.pod_pids_limit = self.pod_max_pids.filter(|n| *n > 0);
        cfg.kubelet_version = self.kubelet_version;
        cfg.memory_reservation_policy = self.memory_reservation_policy;
        if !(self.memory_throttling_factor > 0.0 && self.memory_throttling_factor <= 1.0) {
            return Err(bad_input(format!(
                "--memory-throttling-factor {}: must be > 0 and <= 1",
                self.memory_throttling_factor
            )));
        }
        cfg.memory_throttling_factor = self.memory_throttling_factor;
        cfg.hugepage_sizes = match &self.hugepage_sizes {
            Some(list) => parse_hugepage_sizes(list).map_err(bad_input)?,
            None => crate::sys::hugepages::detect(&self.sysfs, &self.cgroupfs, version)
                .context("cannot read the node's hugepage sizes (pass --hugepage-sizes)")?,
        };
        let res = |flag: &str, v: &str| {
            ReservedResources::parse(v).map_err(|e| bad_input(format!("{flag}: {e}")))
        };
        let (sys, kube) = (
            res("--system-reserved", &self.system_reserved)?,
            res("--kube-reserved", &self.kube_reserved)?,
        );
        cfg.reserved_cgroups = reserved::reserved_cgroups(
            &enforce,
            (&self.system_reserved_cgroup, &sys),
            (&self.kube_reserved_cgroup, &kube),
        )
        .map_err(bad_input)?;
        Ok(cfg)
    }

    /// Node capacity (flags or detection) minus reservations.
    pub fn node_resources(&self) -> anyhow::Result<NodeResources> {
        let quantity = |flag: &str, v: &str| -> anyhow::Result<Quantity> {
            let q = Quantity::parse(v).map_err(|e| bad_input(format!("{flag}: {e}")))?;
            if q.is_negative() || q.is_zero() {
                return Err(bad_input(format!("{flag}: {v:?} must be positive")));
            }
            Ok(q)
        };
        let cpu = match &self.node_cpu {
            Some(v) => quantity("--node-cpu", v)?.milli_ceil(),
            None => crate::sys::procfs::detect_cpu_millis(&self.proc_root)
                .context("cannot detect the node's cpus (pass --node-cpu)")?,
        };
        let mem = match &self.node_memory {
            Some(v) => quantity("--node-memory", v)?.value_ceil(),
            None => crate::sys::procfs::detect_memory_bytes(&self.proc_root)
                .context("cannot detect the node's memory (pass --node-memory)")?,
        };
        let sys = Reserved::parse(&self.system_reserved)
            .map_err(|e| bad_input(format!("--system-reserved: {e}")))?;
        let kube = Reserved::parse(&self.kube_reserved)
            .map_err(|e| bad_input(format!("--kube-reserved: {e}")))?;
        Ok(NodeResources::new(cpu, mem, sys.plus(kube), 0))
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pod manifests (files or directories; YAML or JSON). Default: the
    /// embedded example pods (fixtures/pods).
    #[arg(long, value_name = "PATH", num_args = 1.., conflicts_with = "cri")]
    pub pods: Vec<PathBuf>,
    /// Plan for the live pods of the container runtime instead.
    #[arg(long)]
    pub cri: bool,
    /// CRI endpoint (with --cri).
    #[arg(
        long,
        value_name = "URL",
        default_value = "unix:///run/containerd/containerd.sock"
    )]
    pub runtime_endpoint: String,
    #[command(flatten)]
    pub options: PlanOptions,
    #[command(flatten)]
    pub cpu: crate::cli::cpu::CpuManagerFlags,
    #[arg(long, value_enum, default_value = "text")]
    pub output: OutputFormat,
    /// The kubelet's config: replaces the defaults of the flags above.
    #[command(flatten)]
    pub kubelet: crate::cli::config_check::KubeletFlags,
}

/// Pods from `--pods`, or the embedded examples when none are given.
/// Manifest errors are bad input (exit 2).
pub fn load_pods(paths: &[PathBuf]) -> anyhow::Result<(Vec<Pod>, bool)> {
    if paths.is_empty() {
        return Ok((crate::manifest::example_pods(), true));
    }
    let pods = crate::manifest::load_paths(paths).map_err(bad_input)?;
    Ok((pods, false))
}

pub fn run(mut args: Args) -> anyhow::Result<i32> {
    if args.kubelet.is_set() {
        let kc = crate::cli::kubelet_adopt::load(&args.kubelet)?;
        let explicit = crate::cli::kubelet_adopt::explicit_args();
        crate::cli::kubelet_adopt::adopt_plan_options(&mut args.options, &kc, &explicit);
        if !explicit.contains("runtime_endpoint") {
            args.runtime_endpoint = kc.runtime_endpoint.clone();
        }
    }
    let (pods, embedded) = if args.cri {
        let pods = crate::cri::live_pods_blocking(&args.runtime_endpoint)
            .with_context(|| format!("cannot list pods from {}", args.runtime_endpoint))?;
        (pods, false)
    } else {
        load_pods(&args.pods)?
    };
    let cfg = args.options.to_config_or_fallback()?;
    crate::app::warn_version(&cfg);
    for rc in &cfg.reserved_cgroups {
        for dir in crate::policy::enforce::plan::reserved_dirs(&cfg, rc) {
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
    let plan = crate::policy::enforce::plan::build(&cfg, &pods);
    let cpu = cpu_plan(&args, &pods)?;
    let out = match args.output {
        OutputFormat::Json => {
            // Through a Value (sorted keys) only with the CPU manager, so
            // the plan's own field order stays as it was.
            let mut s = match &cpu {
                Some(c) => {
                    let mut v = serde_json::to_value(&plan)?;
                    crate::cli::cpu::add_to_json(&mut v, c);
                    serde_json::to_string_pretty(&v)?
                }
                None => serde_json::to_string_pretty(&plan)?,
            };
            s.push('\n');
            s
        }
        OutputFormat::Text => {
            if embedded {
                eprintln!(
                    "qosd: no --pods given: planning the embedded example pods (fixtures/pods)"
                );
            }
            let mut t = plan.to_text();
            if let Some(c) = &cpu {
                t.push_str(&crate::cli::cpu::to_text(c));
            }
            t
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(0)
}

/// The CPU manager's part of the plan (`--cpu-manager-policy static`):
/// pods arrive in the order given.
fn cpu_plan(
    args: &Args,
    pods: &[Pod],
) -> anyhow::Result<Option<crate::policy::cpu::policy::CpuPlan>> {
    let mut reserved = None;
    for list in [&args.options.system_reserved, &args.options.kube_reserved] {
        let has_cpu = list
            .split(',')
            .any(|p| p.split_once('=').is_some_and(|(k, _)| k.trim() == "cpu"));
        if has_cpu {
            let r = Reserved::parse(list).map_err(bad_input)?;
            reserved = Some(reserved.unwrap_or(0) + r.cpu_millis);
        }
    }
    let settings = args
        .cpu
        .settings(Default::default(), reserved, &args.options.sysfs)?;
    let with_arrival: Vec<(Pod, i64)> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), i as i64))
        .collect();
    crate::runtime::cpu_manager::plan_pods(&settings, &with_arrival).map_err(bad_input)
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

    fn opts(args: &[&str]) -> PlanOptions {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        T::parse_from(v).o
    }

    #[test]
    fn qos_reserved() {
        assert_eq!(parse_qos_reserved("memory=50%"), Ok(50));
        for bad in ["cpu=10%", "memory=50", "memory=101%", "", "memory"] {
            assert!(parse_qos_reserved(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn config_from_flags() {
        let o = opts(&[
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
        ]);
        let c = o.to_config().unwrap();
        assert_eq!(c.layout.version, CgroupVersion::V1);
        assert_eq!(c.layout.driver, CgroupDriver::Systemd);
        assert_eq!(c.layout.cgroupfs, PathBuf::from("/x"));
        assert_eq!(c.node.enforced_cpu_millis, 3000);
        assert_eq!(c.node.enforced_memory_bytes, 7 << 30);
        assert_eq!(c.qos_reserved_memory_percent, Some(20));
        assert!(c.memory_qos && !c.enforce_cpu_limits);
        assert_eq!(c.cpu_cfs_period_us, 50_000);
        assert_eq!(c.cpu_weight_formula, CpuWeightFormula::Runc);
    }

    #[test]
    fn auto_detection() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.controllers"), "cpu memory").unwrap();
        let dir = d.path().to_str().unwrap();
        let o = opts(&["--cgroupfs", dir, "--node-cpu", "1", "--node-memory", "1Gi"]);
        assert_eq!(o.to_config().unwrap().layout.version, CgroupVersion::V2);
        let empty = tempfile::tempdir().unwrap();
        let o = opts(&[
            "--cgroupfs",
            empty.path().to_str().unwrap(),
            "--node-cpu",
            "1",
            "--node-memory",
            "1Gi",
        ]);
        let e = format!("{:#}", o.to_config().unwrap_err());
        assert!(e.contains("--cgroup-version"), "{e}");
        assert_eq!(
            o.to_config_or_fallback().unwrap().layout.version,
            CgroupVersion::V2
        );
    }

    #[test]
    fn v1_comounted_cpu_without_symlink() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("cpu,cpuacct")).unwrap();
        std::fs::create_dir(d.path().join("memory")).unwrap();
        let o = opts(&[
            "--cgroupfs",
            d.path().to_str().unwrap(),
            "--node-cpu",
            "1",
            "--node-memory",
            "1Gi",
        ]);
        let c = o.to_config().unwrap();
        assert_eq!(c.layout.version, CgroupVersion::V1);
        assert_eq!(
            c.layout.file("kubepods", "cpu.shares"),
            d.path().join("cpu,cpuacct/kubepods/cpu.shares")
        );
    }

    #[test]
    fn bad_flags_are_bad_input() {
        for args in [
            &[
                "--cgroup-version",
                "v2",
                "--node-cpu",
                "x",
                "--node-memory",
                "1Gi",
            ][..],
            &[
                "--cgroup-version",
                "v2",
                "--node-cpu",
                "1",
                "--node-memory",
                "1Gi",
                "--system-reserved",
                "gpu=1",
            ][..],
            &[
                "--cgroup-version",
                "v2",
                "--node-cpu",
                "1",
                "--node-memory",
                "1Gi",
                "--qos-reserved",
                "cpu=1%",
            ][..],
        ] {
            let e = opts(args).to_config().unwrap_err();
            assert!(e.chain().any(|c| c.is::<crate::cli::BadInput>()), "{e:#}");
        }
    }
}
