//! `qosd run`: the enforcement daemon (see [`crate::runtime::daemon`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::app::DaemonExit;
use crate::cli::config_check::ConfigFlags;
use crate::cli::output::Output;

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Run the enforcement daemon: keep the kubepods cgroups at the kubelet's \
values for the live pods, reconcile on a timer and when pods change, correct drift, remove \
orphaned pod cgroups, and evict pods under pressure.\n\n\
Settings come from --config (KubeletConfiguration field names) and the flags below, which \
override the file. --dry-run logs every write (and eviction) it would make and makes none; \
--once does one reconcile, prints the writes and exits (0 on success, 1 when a write failed)."
)]
pub(crate) struct Args {
    /// One reconcile, print the writes made, exit.
    #[arg(long)]
    pub(crate) once: bool,
    /// Output of --once.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub(crate) output: Output,
    /// Take pods from manifests instead of the CRI (nodes without a CRI runtime, tests).
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub(crate) pods: Vec<PathBuf>,
    /// How long a pod cgroup must stay orphaned (sandbox gone) and empty before it is removed;
    /// `0s` removes them on the first pass that finds them empty. Keep it above the runtime's
    /// slowest pod start: a sandbox being created is not listed until it runs, so its new,
    /// still empty pod cgroup looks orphaned meanwhile.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = qosd_config::parse_go_duration)]
    pub(crate) orphan_grace_period: Duration,
    /// Where /proc is (node capacity, signals).
    #[arg(long, value_name = "DIR", default_value = "/proc", hide = true)]
    pub(crate) proc_root: PathBuf,
    /// Where sysfs is (CPU topology for the CPU manager, hugepage sizes).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub(crate) sysfs: PathBuf,
    #[command(flatten)]
    pub(crate) config: ConfigFlags,
    #[command(flatten)]
    pub(crate) cpu: crate::cli::cpu::CpuManagerFlags,
    #[command(flatten)]
    pub(crate) cpu_state: crate::cli::cpu::CpuStateFlags,
}

pub(crate) fn run(args: Args) -> anyhow::Result<i32> {
    let cfg = args.config.load()?;
    crate::telemetry::log::init_logging_at(cfg.log_format, &cfg.log_level);
    // Settings the kubelet honours and qosd does not model (never silent).
    for w in cfg.warnings() {
        tracing::warn!("{w}");
    }
    let cpu_settings = args.cpu.settings(
        crate::cli::cpu::settings_from_config(&cfg, &args.cpu_state)?,
        crate::cli::cpu::reserved_millis(&cfg)?,
        &args.sysfs,
    )?;
    let cpu_manager = (cpu_settings.policy == qosd_model::policy::cpu::policy::PolicyName::Static)
        .then_some(cpu_settings);
    if let Some(s) = &cpu_manager {
        // Refuse to start on a bad reservation or topology, like the kubelet.
        s.build_policy().map_err(crate::cli::bad_input)?;
    }
    let flags = args.config.clone();
    let exit = crate::app::run_daemon(
        cfg,
        crate::app::DaemonArgs {
            once: args.once,
            pods: args.pods.clone(),
            orphan_grace: args.orphan_grace_period,
            proc_root: args.proc_root.clone(),
            sysfs: args.sysfs.clone(),
            reload: Box::new(move || flags.load()),
            cpu_manager,
        },
    )?;
    match exit {
        DaemonExit::Stopped => Ok(0),
        DaemonExit::Once { report, dry_run } => {
            print_once(&report, args.output, dry_run)?;
            Ok(if report.errors.is_empty() { 0 } else { 1 })
        }
    }
}

fn print_once(
    report: &crate::runtime::reconcile::ReconcileReport,
    output: Output,
    dry_run: bool,
) -> anyhow::Result<()> {
    match output.structured(report)? {
        Some(s) => crate::cli::output::write_stdout(s)?,
        None => {
            use std::fmt::Write as _;
            let mut t = String::new();
            let verb = if dry_run { "would write" } else { "wrote" };
            for w in &report.writes {
                writeln!(t, "{verb} {} = {}", w.file.display(), w.value)?;
            }
            for d in &report.orphans_removed {
                writeln!(
                    t,
                    "{} orphan {}",
                    if dry_run { "would remove" } else { "removed" },
                    d.display()
                )?;
            }
            for d in &report.audit_drift {
                writeln!(
                    t,
                    "audit: {} = {} (planned {}; not written)",
                    d.file,
                    d.found.as_deref().unwrap_or("(missing)"),
                    d.planned
                )?;
            }
            if let Some(o) = &report.oom_score_adj {
                for v in &o.writes {
                    writeln!(
                        t,
                        "{} oom_score_adj of {}/{} {} pid {} = {} (was {})",
                        if dry_run { "would set" } else { "set" },
                        v.namespace,
                        v.pod,
                        v.container,
                        v.pid,
                        v.planned,
                        v.found
                    )?;
                }
                if !dry_run {
                    for v in &o.differing {
                        writeln!(
                            t,
                            "oom_score_adj of {}/{} {} pid {} = {} (planned {}; not written)",
                            v.namespace, v.pod, v.container, v.pid, v.found, v.planned
                        )?;
                    }
                }
                for r in &o.refused {
                    writeln!(
                        t,
                        "refused: oom_score_adj {} for {}/{} {} ({})",
                        r.planned, r.namespace, r.pod, r.container, r.error
                    )?;
                }
                for e in &o.errors {
                    writeln!(t, "error: {e}")?;
                }
            }
            for e in &report.errors {
                writeln!(t, "error: {e}")?;
            }
            writeln!(
                t,
                "{} pods, {} writes, {} unchanged, {} errors",
                report.pods,
                report.writes.len(),
                report.unchanged,
                report.errors.len()
            )?;
            crate::cli::output::write_stdout(t)?;
        }
    }
    Ok(())
}
