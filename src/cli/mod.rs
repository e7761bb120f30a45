//! Command-line interface. Each subcommand lives in its own file with its
//! `Args` (clap) and a `run` that returns the process exit code.
//!
//! Exit codes: 0 success; 1 runtime failure (runtime unreachable, I/O error);
//! 2 bad input (flags, manifests, config) — in that case nothing was written.

use clap::{Parser, Subcommand};

pub mod classify;
pub mod config_check;
pub mod eviction_order;
pub mod kube;
pub mod plan;
pub mod pods;
pub mod run;
pub mod status;

/// Exit code for bad input (usage, manifests, config).
pub const EXIT_BAD_INPUT: i32 = 2;
/// Exit code for a runtime failure.
pub const EXIT_FAILURE: i32 = 1;

/// Marks an error as the user's input being wrong: `main` exits with 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Wrap any error as bad input (exit code 2), keeping its message chain.
pub fn bad_input(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(BadInput(e.to_string()))
}

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
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Logs go to stderr; the level comes from `QOSD_LOG` (e.g. `debug`,
/// `qosd=trace`), default `info`.
pub fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("QOSD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once; boxing buys nothing
pub enum Command {
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
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("qosd: error: {e:#}");
            if e.chain().any(|c| c.is::<BadInput>()) {
                EXIT_BAD_INPUT
            } else {
                EXIT_FAILURE
            }
        }
    }
}
