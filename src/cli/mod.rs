//! Command-line interface. Each subcommand lives in its own file with its
//! `Args` (clap) and a `run` that returns the process exit code.
//!
//! Exit codes: 0 success; 1 runtime failure (runtime unreachable, I/O error);
//! 2 bad input (flags, manifests, config) — in that case nothing was written.

use clap::{Parser, Subcommand};

use crate::telemetry::log::{init_logging, LogFormat};

pub(crate) mod classify;
pub(crate) mod completion;
pub(crate) mod config_check;
pub(crate) mod cpu;
pub(crate) mod eviction_order;
pub(crate) mod kube;
pub(crate) mod output;
pub(crate) mod plan;
pub(crate) mod pods;
pub(crate) mod run;
pub(crate) mod status;
pub(crate) mod status_table;

/// Exit code for bad input (usage, manifests, config).
pub(crate) const EXIT_BAD_INPUT: i32 = 2;
/// Exit code for a runtime failure.
pub(crate) const EXIT_FAILURE: i32 = 1;

pub(crate) use crate::app::{bad_input, BadInput};

#[derive(Debug, Parser)]
#[command(
    name = "qosd",
    version,
    about = "Kubelet-style QoS enforcer and fast eviction manager for Kubernetes nodes",
    long_about = "qosd classifies pods into Kubernetes QoS classes, keeps the kubepods cgroup \
hierarchy (cgroup v1 or v2, cgroupfs or systemd naming) at the kubelet's values, and evicts \
pods under memory, disk or PID pressure in the kubelet's order - in milliseconds instead of \
the kubelet's 10-second loop."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once; boxing buys nothing
pub(crate) enum Command {
    /// Print the cgroup writes qosd would make for some pods (changes nothing).
    Plan(plan::Args),
    /// Print each pod's QoS class and the reason for it.
    Classify(classify::Args),
    /// List the live pods of the container runtime (CRI) with their QoS classes.
    Pods(pods::Args),
    /// Run the enforcement daemon (or one pass with --once).
    Run(run::Args),
    /// Print the order in which qosd would evict pods now, with reasons.
    EvictionOrder(eviction_order::Args),
    /// Show node signals, thresholds, conditions and pods of a running qosd.
    Status(status::Args),
    /// Configuration file tools.
    #[command(subcommand)]
    Config(config_check::ConfigCommand),
    /// Print a shell completion script (bash, zsh, fish).
    Completion(completion::Args),
    /// Print the man page (roff), generated from these flags.
    Man(completion::ManArgs),
}

/// Parse arguments, run, and map errors to exit codes.
pub fn main() -> i32 {
    let cli = Cli::parse();
    // `qosd run` sets up logging itself once its config (logFormat) is read.
    if !matches!(cli.command, Command::Run(_)) {
        init_logging(LogFormat::Text);
    }
    let result = match cli.command {
        Command::Plan(a) => plan::run(a),
        Command::Classify(a) => classify::run(a),
        Command::Pods(a) => pods::run(a),
        Command::Run(a) => run::run(a),
        Command::EvictionOrder(a) => eviction_order::run(a),
        Command::Status(a) => status::run(a),
        Command::Config(c) => config_check::run(c),
        Command::Completion(a) => completion::run(a),
        Command::Man(a) => completion::run_man(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            crate::telemetry::log::stderr_line(&format!("qosd: error: {e:#}"));
            if e.chain().any(|c| c.is::<BadInput>()) {
                EXIT_BAD_INPUT
            } else {
                EXIT_FAILURE
            }
        }
    }
}
