//! One-shot runs of the command line: planning (`plan`, golden plans, the
//! manifests' memory), the kubelet version and config inputs as read by
//! the CLI, hostile input files, log lines, the instance lock and the
//! daemon's supervision.
//!
//! One test binary for the files in tests/cli/ (each a module named
//! after its file): `cargo test --test cli <module>::` runs one of them.

mod support;

#[path = "cli/input_and_output.rs"]
mod input_and_output;
#[path = "cli/instance_lock.rs"]
mod instance_lock;
#[path = "cli/kubelet_version_cli.rs"]
mod kubelet_version_cli;
#[path = "cli/log_lines.rs"]
mod log_lines;
#[path = "cli/manifest_memory.rs"]
mod manifest_memory;
#[path = "cli/plan_cli.rs"]
mod plan_cli;
#[path = "cli/plan_golden.rs"]
mod plan_golden;
#[path = "cli/supervision.rs"]
mod supervision;
