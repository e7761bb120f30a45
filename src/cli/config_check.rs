//! `qosd config check|default`, and [`ConfigFlags`]: the command-line flags
//! that override the config file (flattened into `qosd run` and friends).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use qosd_config::{Config, ConfigError, Overrides};

#[derive(Debug, clap::Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once; boxing buys nothing
pub(crate) enum ConfigCommand {
    /// Validate a config file and print the effective configuration.
    ///
    /// Exit 0 when valid (effective config on stdout); exit 2 with every bad
    /// field, its value and what is allowed when not.
    Check {
        /// qosd's config file (YAML). Optional with --kubelet-config /
        /// --kubelet-config-dir.
        file: Option<PathBuf>,
        #[command(flatten)]
        kubelet: KubeletFlags,
        /// Output format of the effective configuration.
        /// Output format of the effective configuration (`text`/`wide`: YAML).
        #[arg(short = 'o', long, value_enum, default_value = "yaml")]
        output: Output,
        /// Print nothing when valid.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Print the effective settings as one document: qosd's file, the
    /// kubelet's config (defaulted like the kubelet, drop-ins merged) and
    /// the flags. Kubelet fields use their KubeletConfiguration names and
    /// formats (Go durations, quantities as strings).
    Show {
        #[command(flatten)]
        config: ConfigFlags,
        /// Output format.
        /// Output format (`text`/`wide`: YAML).
        #[arg(short = 'o', long, value_enum, default_value = "yaml")]
        output: Output,
        /// Where /proc is (the node's pressure files, `pressureSignals`).
        #[arg(long, value_name = "DIR", default_value = "/proc", hide = true)]
        proc_root: PathBuf,
    },
    /// Print the built-in defaults (the kubelet's plus qosd's) as YAML.
    Default {
        /// Output format (`text`/`wide`: YAML).
        #[arg(short = 'o', long, value_enum, default_value = "yaml")]
        output: Output,
    },
}

use crate::cli::output::Output;

fn render(c: &Config, f: Output) -> anyhow::Result<String> {
    Ok(match f {
        Output::Json => crate::cli::output::json(c)?,
        Output::Yaml | Output::Text | Output::Wide => c.to_effective_yaml(),
    })
}

pub(crate) fn run(cmd: ConfigCommand) -> anyhow::Result<i32> {
    match cmd {
        ConfigCommand::Check {
            file,
            kubelet,
            output,
            quiet,
        } => {
            if file.is_none() && !kubelet.is_set() {
                return Err(crate::cli::bad_input(
                    "give a config file, --kubelet-config FILE or --kubelet-config-dir DIR",
                ));
            }
            let mut o = Overrides::default();
            kubelet.apply(&mut o);
            let c = load_or_bad_input(file.as_deref(), &o)?;
            print_warnings(&c);
            if !quiet {
                crate::cli::output::write_stdout(render(&c, output)?)?;
            }
            Ok(0)
        }
        ConfigCommand::Show {
            config,
            output,
            proc_root,
        } => {
            let c = config.load()?;
            print_warnings(&c);
            crate::cli::output::write_stdout(render_show(&c, output, &proc_root)?)?;
            Ok(0)
        }
        ConfigCommand::Default { output } => {
            crate::cli::output::write_stdout(render(&Config::default(), output)?)?;
            Ok(0)
        }
    }
}

/// Settings qosd does not model, one `qosd: warning:` line each on stderr.
fn print_warnings(c: &Config) {
    for w in c.warnings() {
        eprintln!("qosd: warning: {w}");
    }
}

/// `qosd config show`: the effective configuration with the kubelet's
/// field names (`containerRuntimeEndpoint`, not qosd's `runtimeEndpoint`),
/// plus `notModelledByQosd` (field, file, kind, note) when a setting is
/// not modelled by qosd (kubelet config fields, `imageMaximumGCAge`), and
/// `pressureSignals`: whether this node's pressure stall information (the
/// pressure thresholds' input) can be read, per resource — `available`, or
/// `unavailable: <why>` (never left out).
pub(crate) fn show_document(c: &Config, proc_root: &Path) -> serde_json::Value {
    let mut v = serde_json::to_value(c).expect("Config serialises");
    if let Some(m) = v.as_object_mut() {
        let psi: serde_json::Map<String, serde_json::Value> =
            qosd_node::sys::pressure::Resource::ALL
                .into_iter()
                .map(|r| {
                    let state = match qosd_node::sys::pressure::node_availability(proc_root, r) {
                        Ok(_) => "available".to_string(),
                        Err(e) => format!("unavailable: {e}"),
                    };
                    (r.as_str().to_string(), serde_json::Value::String(state))
                })
                .collect();
        m.insert("pressureSignals".into(), serde_json::Value::Object(psi));
        if let Some(ep) = m.remove("runtimeEndpoint") {
            m.insert("containerRuntimeEndpoint".into(), ep);
        }
        if !c.not_modelled.is_empty() {
            m.insert(
                "notModelledByQosd".into(),
                serde_json::to_value(&c.not_modelled).expect("serialises"),
            );
        }
    }
    v
}

fn render_show(c: &Config, f: Output, proc_root: &Path) -> anyhow::Result<String> {
    let v = show_document(c, proc_root);
    Ok(match f {
        Output::Yaml | Output::Text | Output::Wide => yaml_serde::to_string(&v)?,
        Output::Json => serde_json::to_string_pretty(&v)? + "\n",
    })
}

/// `--kubelet-config` / `--kubelet-config-dir`: the kubelet's own config as
/// the source of qosd's kubelet fields.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct KubeletFlags {
    /// The kubelet's config file (KubeletConfiguration, YAML or JSON), e.g.
    /// /var/lib/kubelet/config.yaml: its fields replace qosd's kubelet fields.
    #[arg(long, value_name = "FILE")]
    pub(crate) kubelet_config: Option<PathBuf>,
    /// The kubelet's drop-in directory (--config-dir): `*.conf` files merged
    /// over --kubelet-config in lexical order.
    #[arg(long, value_name = "DIR")]
    pub(crate) kubelet_config_dir: Option<PathBuf>,
}

impl KubeletFlags {
    pub(crate) fn is_set(&self) -> bool {
        self.kubelet_config.is_some() || self.kubelet_config_dir.is_some()
    }

    /// Put the paths into `o`.
    pub(crate) fn apply(&self, o: &mut Overrides) {
        let s = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        if self.kubelet_config.is_some() {
            o.kubelet_config = s(&self.kubelet_config);
        }
        if self.kubelet_config_dir.is_some() {
            o.kubelet_config_dir = s(&self.kubelet_config_dir);
        }
    }
}

/// Load a config, mapping problems in the user's input (syntax, unknown or
/// bad fields, missing file) to exit code 2.
pub(crate) fn load_or_bad_input(path: Option<&Path>, o: &Overrides) -> anyhow::Result<Config> {
    Config::load_with(path, o).map_err(|e| match e {
        ConfigError::Read { .. }
        | ConfigError::Parse { .. }
        | ConfigError::Invalid { .. }
        | ConfigError::Kubelet { .. }
        | ConfigError::Conflict { .. } => crate::cli::bad_input(e),
    })
}

/// Flags that override the config file, with the kubelet's flag names where
/// the kubelet has one. Flatten into a subcommand's `Args`:
///
/// ```ignore
/// #[derive(clap::Args)]
/// pub struct Args {
///     #[command(flatten)]
///     pub config: crate::cli::config_check::ConfigFlags,
/// }
/// let cfg = args.config.load()?; // exit 2 on bad input
/// ```
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ConfigFlags {
    /// Config file (YAML). Default: /etc/qosd/config.yaml when it exists,
    /// else the built-in defaults; flags override either.
    #[arg(long, env = "QOSD_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Log and count what would be written or evicted; change nothing (mode: dry-run).
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Operating mode: enforce | dry-run.
    #[arg(long, value_name = "MODE")]
    pub(crate) mode: Option<String>,
    /// Hard eviction thresholds, e.g. memory.available<100Mi,nodefs.available<10%.
    #[arg(long, value_name = "SIGNAL<VALUE,...", value_parser = qosd_config::parse_langle_map)]
    pub(crate) eviction_hard: Option<BTreeMap<String, String>>,
    /// Soft eviction thresholds, e.g. memory.available<300Mi.
    #[arg(long, value_name = "SIGNAL<VALUE,...", value_parser = qosd_config::parse_langle_map)]
    pub(crate) eviction_soft: Option<BTreeMap<String, String>>,
    /// Soft threshold grace periods, e.g. memory.available=1m30s.
    #[arg(long, value_name = "SIGNAL=DURATION,...", value_parser = qosd_config::parse_eq_map)]
    pub(crate) eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    /// Minimum reclaim per signal, e.g. memory.available=0Mi,nodefs.available=500Mi.
    #[arg(long, value_name = "SIGNAL=VALUE,...", value_parser = qosd_config::parse_eq_map)]
    pub(crate) eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    /// Maximum pod grace period (seconds) for soft evictions.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) eviction_max_pod_grace_period: Option<String>,
    /// How long a node condition is held after its threshold clears (e.g. 5m0s).
    #[arg(long, value_name = "DURATION")]
    pub(crate) eviction_pressure_transition_period: Option<String>,
    /// Hard pressure thresholds (qosd's own, not the kubelet's), e.g.
    /// memory.full=10%/2s,memory.some=50%/2s: evict when the share of the
    /// window stalled on memory reaches the value.
    #[arg(long, value_name = "SIGNAL=PCT[/WINDOW],...", value_parser = qosd_config::parse_eq_map)]
    pub(crate) eviction_pressure_hard: Option<BTreeMap<String, String>>,
    /// Soft pressure thresholds, e.g. memory.some=25%/2s.
    #[arg(long, value_name = "SIGNAL=PCT[/WINDOW],...", value_parser = qosd_config::parse_eq_map)]
    pub(crate) eviction_pressure_soft: Option<BTreeMap<String, String>>,
    /// Grace periods of the soft pressure thresholds, e.g. memory.some=30s.
    #[arg(long, value_name = "SIGNAL=DURATION,...", value_parser = qosd_config::parse_eq_map)]
    pub(crate) eviction_pressure_soft_grace_period: Option<BTreeMap<String, String>>,
    /// cgroup driver: cgroupfs | systemd.
    #[arg(long, value_name = "DRIVER")]
    pub(crate) cgroup_driver: Option<String>,
    /// Parent cgroup of kubepods (kubelet --cgroup-root), e.g. / or /qosd-test-1.
    #[arg(long, value_name = "PATH")]
    pub(crate) cgroup_root: Option<String>,
    /// Resources reserved for the system, e.g. cpu=500m,memory=1Gi.
    #[arg(long, value_name = "RES=QTY,...", value_parser = qosd_config::parse_eq_map)]
    pub(crate) system_reserved: Option<BTreeMap<String, String>>,
    /// Resources reserved for Kubernetes daemons, e.g. cpu=100m,memory=500Mi.
    #[arg(long, value_name = "RES=QTY,...", value_parser = qosd_config::parse_eq_map)]
    pub(crate) kube_reserved: Option<BTreeMap<String, String>>,
    /// QoS memory reservation, e.g. memory=50%.
    #[arg(long, value_name = "memory=PCT", value_parser = qosd_config::parse_eq_map)]
    pub(crate) qos_reserved: Option<BTreeMap<String, String>>,
    /// CFS quota period (1ms..1s), e.g. 100ms.
    #[arg(long = "cpu-cfs-quota-period", value_name = "DURATION")]
    pub(crate) cpu_cfs_quota_period: Option<String>,
    /// Enforce CPU limits with CFS quota (true|false).
    #[arg(long = "cpu-cfs-quota", value_name = "BOOL")]
    pub(crate) cpu_cfs_quota: Option<bool>,
    /// Follow this kubelet version's rules (1.33 … 1.36; default 1.36).
    #[arg(long, value_name = "VERSION")]
    pub(crate) kubelet_version: Option<String>,
    /// MemoryQoS memoryReservationPolicy (1.36): None | TieredReservation.
    #[arg(long, value_name = "POLICY")]
    pub(crate) memory_reservation_policy: Option<String>,
    /// enforceNodeAllocatable, comma-separated: pods,system-reserved,kube-reserved.
    #[arg(long, value_name = "LIST")]
    pub(crate) enforce_node_allocatable: Option<String>,
    /// The cgroup limited by system-reserved enforcement (never created).
    #[arg(long, value_name = "CGROUP")]
    pub(crate) system_reserved_cgroup: Option<String>,
    /// The cgroup limited by kube-reserved enforcement (never created).
    #[arg(long, value_name = "CGROUP")]
    pub(crate) kube_reserved_cgroup: Option<String>,
    /// Set memory.min/memory.high like the kubelet's MemoryQoS (true|false).
    #[arg(long = "memory-qos", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub(crate) memory_qos: Option<bool>,
    /// cgroup filesystem mount point (default /sys/fs/cgroup).
    #[arg(long, value_name = "DIR")]
    pub(crate) cgroupfs: Option<String>,
    /// cgroup version: auto | v1 | v2.
    #[arg(long, value_name = "VERSION")]
    pub(crate) cgroup_version: Option<String>,
    /// CRI endpoint, e.g. unix:///run/containerd/containerd.sock.
    #[arg(
        long,
        alias = "container-runtime-endpoint",
        env = "CONTAINER_RUNTIME_ENDPOINT",
        value_name = "ENDPOINT"
    )]
    pub(crate) runtime_endpoint: Option<String>,
    /// Periodic reconcile interval (e.g. 10s).
    #[arg(long, value_name = "DURATION")]
    pub(crate) reconcile_interval: Option<String>,
    /// Pod relist interval when the runtime has no event stream (e.g. 1s).
    #[arg(long, value_name = "DURATION")]
    pub(crate) relist_interval: Option<String>,
    /// HTTP address for /metrics, /healthz, /readyz, /status (IP:port).
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_address: Option<String>,
    /// Kubelet root directory (nodefs signals).
    #[arg(long, value_name = "DIR")]
    pub(crate) root_dir: Option<String>,
    /// Kubelet podLogsDir: the pods' container logs, counted in their
    /// ephemeral-storage usage (default /var/log/pods).
    #[arg(long, value_name = "DIR")]
    pub(crate) pod_logs_dir: Option<String>,
    /// Filesystem path for imagefs signals.
    #[arg(long, value_name = "DIR")]
    pub(crate) imagefs_path: Option<String>,
    /// memory.available source: workingset | meminfo.
    #[arg(long, value_name = "SOURCE")]
    pub(crate) memory_available_source: Option<String>,
    /// cgroup v2 cpu.weight formula: kubelet | runc.
    #[arg(long, value_name = "FORMULA")]
    pub(crate) cpu_weight_formula: Option<String>,
    /// Node CPU capacity override (quantity).
    #[arg(long, value_name = "QTY")]
    pub(crate) node_cpu: Option<String>,
    /// Node memory capacity override (quantity).
    #[arg(long, value_name = "QTY")]
    pub(crate) node_memory: Option<String>,
    /// Log format: text | json.
    #[arg(long, value_name = "FORMAT")]
    pub(crate) log_format: Option<String>,
    /// Eviction backend: kill | cri | api | dry-run.
    #[arg(long, value_name = "BACKEND")]
    pub(crate) eviction_backend: Option<String>,
    /// kubelet --pod-max-pids: pids.max of every pod (-1: unlimited).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub(crate) pod_max_pids: Option<String>,
    /// Hugepage sizes limited on every pod (e.g. 2Mi,1Gi, or none). Default:
    /// the node's sizes (sysfs) when the hugetlb controller is mounted.
    #[arg(long, value_name = "LIST")]
    pub(crate) hugepage_sizes: Option<String>,
    /// kubelet memoryThrottlingFactor (MemoryQoS memory.high), 0 < f <= 1.
    #[arg(long, value_name = "F")]
    pub(crate) memory_throttling_factor: Option<String>,
    /// Log filter: error | warn | info | debug | trace (or qosd=debug,info).
    #[arg(long, value_name = "LEVEL")]
    pub(crate) log_level: Option<String>,
    /// kubeconfig for the Kubernetes API server (default: in-cluster config in a pod).
    #[arg(long, value_name = "FILE")]
    pub(crate) kubeconfig: Option<String>,
    /// This node's name: its pods are watched on the API server (env NODE_NAME).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub(crate) node_name: Option<String>,
    /// Deadline of an Eviction API call (e.g. 1s); a hard eviction falls back to the local kill after it.
    #[arg(long, value_name = "DURATION")]
    pub(crate) api_eviction_timeout: Option<String>,
    /// /healthz fails after the runtime was unreachable this long (e.g. 2m; 0s: never).
    #[arg(long, value_name = "DURATION")]
    pub(crate) runtime_unhealthy_after: Option<String>,
    /// Directory for state kept across restarts (the CRI status cache).
    #[arg(long, env = "QOSD_STATE_DIR", value_name = "DIR")]
    pub(crate) state_dir: Option<String>,
    #[command(flatten)]
    pub(crate) kubelet: KubeletFlags,
    /// cgroupEnforcement: enforce (write cgroups) | audit (compare, report
    /// drift, write nothing). Default: audit with a kubelet config, else enforce.
    #[arg(long, value_name = "MODE")]
    pub(crate) cgroup_enforcement: Option<String>,
}

impl ConfigFlags {
    /// The overrides these flags make (`--dry-run` sets `mode: dry-run`).
    pub(crate) fn overrides(&self) -> Overrides {
        Overrides {
            eviction_hard: self.eviction_hard.clone(),
            eviction_soft: self.eviction_soft.clone(),
            eviction_soft_grace_period: self.eviction_soft_grace_period.clone(),
            eviction_minimum_reclaim: self.eviction_minimum_reclaim.clone(),
            eviction_max_pod_grace_period: self.eviction_max_pod_grace_period.clone(),
            eviction_pressure_transition_period: self.eviction_pressure_transition_period.clone(),
            eviction_pressure_hard: self.eviction_pressure_hard.clone(),
            eviction_pressure_soft: self.eviction_pressure_soft.clone(),
            eviction_pressure_soft_grace_period: self.eviction_pressure_soft_grace_period.clone(),
            cgroup_driver: self.cgroup_driver.clone(),
            cgroup_root: self.cgroup_root.clone(),
            system_reserved: self.system_reserved.clone(),
            kube_reserved: self.kube_reserved.clone(),
            qos_reserved: self.qos_reserved.clone(),
            cpu_cfs_quota: self.cpu_cfs_quota,
            cpu_cfs_quota_period: self.cpu_cfs_quota_period.clone(),
            memory_qos: self.memory_qos,
            kubelet_version: self.kubelet_version.clone(),
            memory_reservation_policy: self.memory_reservation_policy.clone(),
            enforce_node_allocatable: self.enforce_node_allocatable.clone(),
            system_reserved_cgroup: self.system_reserved_cgroup.clone(),
            kube_reserved_cgroup: self.kube_reserved_cgroup.clone(),
            cgroupfs: self.cgroupfs.clone(),
            cgroup_version: self.cgroup_version.clone(),
            runtime_endpoint: self.runtime_endpoint.clone(),
            mode: if self.dry_run {
                Some("dry-run".into())
            } else {
                self.mode.clone()
            },
            reconcile_interval: self.reconcile_interval.clone(),
            relist_interval: self.relist_interval.clone(),
            metrics_address: self.metrics_address.clone(),
            root_dir: self.root_dir.clone(),
            pod_logs_dir: self.pod_logs_dir.clone(),
            imagefs_path: self.imagefs_path.clone(),
            memory_available_source: self.memory_available_source.clone(),
            cpu_weight_formula: self.cpu_weight_formula.clone(),
            node_cpu: self.node_cpu.clone(),
            node_memory: self.node_memory.clone(),
            log_format: self.log_format.clone(),
            eviction_backend: self.eviction_backend.clone(),
            pod_pids_limit: self.pod_max_pids.clone(),
            hugepage_sizes: self.hugepage_sizes.clone(),
            memory_throttling_factor: self.memory_throttling_factor.clone(),
            log_level: self.log_level.clone(),
            kubeconfig: self.kubeconfig.clone(),
            node_name: self.node_name.clone(),
            api_eviction_timeout: self.api_eviction_timeout.clone(),
            runtime_unhealthy_after: self.runtime_unhealthy_after.clone(),
            cgroup_enforcement: self.cgroup_enforcement.clone(),
            kubelet_config: self
                .kubelet
                .kubelet_config
                .as_ref()
                .map(|p| p.display().to_string()),
            kubelet_config_dir: self
                .kubelet
                .kubelet_config_dir
                .as_ref()
                .map(|p| p.display().to_string()),
            state_dir: self.state_dir.clone(),
            ..Overrides::default()
        }
    }

    /// Load `--config` (or the defaults), apply the flags, validate.
    /// Bad input (missing file, syntax, bad values) → exit code 2.
    pub(crate) fn load(&self) -> anyhow::Result<Config> {
        load_or_bad_input(self.config_path().as_deref(), &self.overrides())
    }

    /// `--config`, else the default path when that file exists.
    pub(crate) fn config_path(&self) -> Option<PathBuf> {
        self.config.clone().or_else(|| {
            let p = Path::new(qosd_config::DEFAULT_CONFIG_PATH);
            p.is_file().then(|| p.to_path_buf())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `config show` says whether the node's pressure files can be read,
    /// per resource, with the reason when not: never left out.
    #[test]
    fn show_reports_pressure_availability() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("pressure")).unwrap();
        std::fs::write(
            d.path().join("pressure/memory"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        )
        .unwrap();
        let c = Config::from_yaml_str("evictionPressureHard: {memory.full: \"10%\"}\n").unwrap();
        let v = show_document(&c, d.path());
        assert_eq!(v["pressureSignals"]["memory"], "available", "{v}");
        let io = v["pressureSignals"]["io"].as_str().unwrap();
        assert!(
            io.starts_with("unavailable: ") && io.contains("psi=0"),
            "{io}"
        );
        assert_eq!(v["evictionPressureHard"]["memory.full"], "10%");
        let none = tempfile::tempdir().unwrap();
        let v = show_document(&Config::default(), none.path());
        for r in ["memory", "io", "cpu"] {
            assert!(
                v["pressureSignals"][r]
                    .as_str()
                    .unwrap()
                    .starts_with("unavailable"),
                "{v}"
            );
        }
        assert_eq!(v["evictionPressureHard"], serde_json::json!({}));
    }

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        flags: ConfigFlags,
    }

    #[test]
    fn flags_are_well_formed() {
        use clap::CommandFactory;
        T::command().debug_assert();
        crate::cli::Cli::command().debug_assert();
    }

    #[test]
    fn flags_override_defaults() {
        let t = T::try_parse_from([
            "t",
            "--dry-run",
            "--eviction-hard",
            "memory.available<1Gi",
            "--system-reserved",
            "cpu=1,memory=2Gi",
            "--relist-interval",
            "250ms",
            "--container-runtime-endpoint",
            "/run/k3s/containerd/containerd.sock",
            "--cpu-cfs-quota",
            "false",
        ])
        .unwrap();
        let c = t.flags.load().unwrap();
        assert_eq!(c.mode, qosd_config::Mode::DryRun);
        assert_eq!(c.eviction_hard.len(), 1);
        let mem = &c.eviction_hard[&qosd_config::Signal::MemoryAvailable];
        assert_eq!(mem.as_written(), "1Gi");
        assert_eq!(c.system_reserved["memory"].value_ceil(), 2 << 30);
        assert_eq!(c.relist_interval, std::time::Duration::from_millis(250));
        assert!(!c.cpu_cfs_quota);
        assert_eq!(
            c.runtime_endpoint,
            "unix:///run/k3s/containerd/containerd.sock"
        );
    }

    #[test]
    fn bad_flag_names_the_flag_origin() {
        let t = T::try_parse_from(["t", "--mode", "yolo"]).unwrap();
        let e = t.flags.load().unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("mode (from command-line flag)"), "{msg}");
        assert!(msg.contains("\"yolo\""), "{msg}");
        assert!(msg.contains("enforce | dry-run"), "{msg}");
        assert!(e.chain().any(|c| c.is::<crate::cli::BadInput>()));
    }

    #[test]
    fn malformed_map_flag_is_a_usage_error() {
        assert!(T::try_parse_from(["t", "--eviction-hard", "memory.available=1Gi"]).is_err());
    }

    /// Every flag of a setting is one declared in `qosd_config::settings`
    /// (the CPU manager's in their own groups), reads the declared
    /// environment variable, and sets the declared key.
    #[test]
    fn flags_are_the_declared_ones() {
        use clap::CommandFactory;
        use qosd_config::settings::{sample, SETTINGS};
        #[derive(Debug, Parser)]
        struct All {
            #[command(flatten)]
            flags: ConfigFlags,
            #[command(flatten)]
            cpu: crate::cli::cpu::CpuManagerFlags,
            #[command(flatten)]
            state: crate::cli::cpu::CpuStateFlags,
        }
        let cmd = All::command();
        let flags: std::collections::BTreeMap<&str, Option<String>> = cmd
            .get_arguments()
            .filter_map(|a| {
                let env = a.get_env().map(|e| e.to_string_lossy().into_owned());
                Some((a.get_long()?, env))
            })
            .filter(|(long, _)| !matches!(*long, "config" | "dry-run"))
            .collect();
        let declared: std::collections::BTreeMap<&str, Option<String>> = SETTINGS
            .iter()
            .filter_map(|s| Some((s.flag?, s.env.map(str::to_string))))
            .collect();
        assert_eq!(flags, declared);
        let cpu_groups = T::command();
        let mut checked = 0;
        for s in SETTINGS {
            let Some(flag) = s.flag else { continue };
            if !cpu_groups
                .get_arguments()
                .any(|a| a.get_long() == Some(flag))
            {
                continue; // the CPU manager's flags apply over the config
            }
            let t = T::try_parse_from(["t", &format!("--{flag}"), sample(s.kind)])
                .unwrap_or_else(|e| panic!("--{flag}: {e}"));
            assert_eq!(
                t.flags.overrides().keys(),
                std::collections::BTreeSet::from([s.key]),
                "--{flag}"
            );
            checked += 1;
        }
        assert!(checked > 40, "{checked} flags checked");
    }
}
