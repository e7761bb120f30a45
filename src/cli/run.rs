//! `qosd run`: the enforcement daemon (see [`crate::daemon`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::cli::bad_input;
use crate::cli::plan::{OutputFormat, PlanOptions};
use crate::daemon::{self, Outcome, PodSourceSpec, RunOptions};

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Run the enforcement daemon: keep the kubepods cgroups at the kubelet's \
values for the live pods, reconcile on a timer and when pods change, correct drift, remove \
orphaned pod cgroups, and evict pods under pressure.\n\n\
--dry-run logs every write (and eviction) it would make and makes none; --once does one \
reconcile, prints the writes and exits (0 on success, 1 when a write failed)."
)]
pub struct Args {
    /// Log every write it would make; write nothing, evict nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// One reconcile, print the writes made, exit.
    #[arg(long)]
    pub once: bool,
    /// Output of --once.
    #[arg(long, value_enum, default_value = "text")]
    pub output: OutputFormat,
    /// CRI endpoint of the container runtime.
    #[arg(long, value_name = "URL", default_value = crate::cri::DEFAULT_ENDPOINT)]
    pub runtime_endpoint: String,
    /// Take pods from manifests instead of the CRI (nodes without a CRI runtime, tests).
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub pods: Vec<PathBuf>,
    /// Full reconcile period.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub reconcile_interval: Duration,
    /// How often to relist sandboxes to notice pod changes.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub relist_interval: Duration,
    /// How long a pod cgroup must stay orphaned (sandbox gone) and empty before it is removed.
    /// `0s` removes them on the first pass that finds them empty.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration_or_zero)]
    pub orphan_grace_period: Duration,
    #[command(flatten)]
    pub options: PlanOptions,
}

/// Go/humantime durations (`10s`, `1m30s`, `500ms`); zero is refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))?;
    if d.is_zero() {
        return Err(format!("{s:?}: must be greater than zero"));
    }
    Ok(d)
}

/// Like [`parse_duration`], zero allowed.
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let plan = args.options.to_config()?;
    // Like the kubelet, the cgroup root must exist: qosd creates kubepods
    // under it but never the root itself.
    for base in daemon::kubepods_dirs(&plan) {
        let parent = base.parent().unwrap_or(&base);
        if !parent.is_dir() {
            anyhow::bail!(
                "cgroup root {:?} does not exist at {} (create it, or pass --cgroup-root / --cgroupfs)",
                plan.layout.cgroup_root,
                parent.display()
            );
        }
    }
    let source = if args.pods.is_empty() {
        PodSourceSpec::Cri {
            endpoint: args.runtime_endpoint.clone(),
        }
    } else {
        // Validate the manifests now: bad input must fail before any write.
        crate::manifest::load_paths(&args.pods).map_err(bad_input)?;
        PodSourceSpec::Manifests(args.pods.clone())
    };
    let opts = RunOptions {
        plan,
        source,
        dry_run: args.dry_run,
        once: args.once,
        reconcile_interval: args.reconcile_interval,
        relist_interval: args.relist_interval,
        orphan_grace: args.orphan_grace_period,
        connect: crate::cri::ConnectOptions::default(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut observer = daemon::NoObserver;
    let outcome = rt.block_on(daemon::run_loop(opts, &mut observer))?;
    match outcome {
        Outcome::Stopped => Ok(0),
        Outcome::Once(report) => {
            print_once(&report, args.output, args.dry_run)?;
            Ok(if report.errors.is_empty() { 0 } else { 1 })
        }
    }
}

fn print_once(
    report: &daemon::ReconcileReport,
    output: OutputFormat,
    dry_run: bool,
) -> anyhow::Result<()> {
    match output {
        OutputFormat::Json => {
            println!("{}", serde_json::to_string_pretty(report)?);
        }
        OutputFormat::Text => {
            let verb = if dry_run { "would write" } else { "wrote" };
            for w in &report.writes {
                println!("{verb} {} = {}", w.file.display(), w.value);
            }
            for d in &report.orphans_removed {
                println!(
                    "{} orphan {}",
                    if dry_run { "would remove" } else { "removed" },
                    d.display()
                );
            }
            for e in &report.errors {
                println!("error: {e}");
            }
            println!(
                "{} pods, {} writes, {} unchanged, {} errors",
                report.pods,
                report.writes.len(),
                report.unchanged,
                report.errors.len()
            );
        }
    }
    Ok(())
}
