//! `qosd config check|default`, and [`ConfigFlags`]: the command-line flags
//! that override the config file (flattened into `qosd run` and friends).

use std::path::{Path, PathBuf};

use qosd_config::{Config, ConfigError, KubeletSource, Overrides};

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
        kubelet: KubeletSource,
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
            let o = Overrides {
                kubelet,
                ..Overrides::default()
            };
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

/// The config file (`--config`), `--dry-run`, and the flags that override
/// the file's settings ([`Overrides`], declared with the settings).
/// Flatten into a subcommand's `Args`:
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
    /// The flags of the settings.
    #[command(flatten)]
    pub(crate) overrides: Overrides,
}

impl ConfigFlags {
    /// The overrides these flags make (`--dry-run` sets `mode: dry-run`).
    pub(crate) fn overrides(&self) -> Overrides {
        let mut o = self.overrides.clone();
        if self.dry_run {
            o.mode = Some("dry-run".into());
        }
        o
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
