//! The host's real cgroup v1 hierarchies: the applier, the cgroup walk,
//! `qosd run` and audit, the static CPU manager, `oom_score_adj`, faults
//! of the parts qosd depends on, and hostile content in cgroup files.
//!
//! One test binary for the files in tests/cgroups/ (each a module named
//! after its file): `cargo test --test cgroups <module>::` runs one of them.

mod support;

#[path = "cgroups/audit_v1.rs"]
mod audit_v1;
#[path = "cgroups/cgroup_v1.rs"]
mod cgroup_v1;
#[path = "cgroups/cgroup_walk.rs"]
mod cgroup_walk;
#[path = "cgroups/cpu_manager_plan.rs"]
mod cpu_manager_plan;
#[path = "cgroups/cpu_manager_v1.rs"]
mod cpu_manager_v1;
#[path = "cgroups/fault_real.rs"]
mod fault_real;
#[path = "cgroups/hostile_input.rs"]
mod hostile_input;
#[path = "cgroups/oom_score_real.rs"]
mod oom_score_real;
#[path = "cgroups/run_v1.rs"]
mod run_v1;
