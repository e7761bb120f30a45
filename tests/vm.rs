//! Tests in qemu VMs (tests/vm: harness.rs and the scripts run inside):
//! cgroup v2, the CPU manager on a multi-socket topology, eviction and
//! memory stall on cgroup v2, `qosd run` on cgroup v2, the systemd node
//! and the DaemonSet node. Each test holds [`vm::alone`] for its whole
//! run: one VM at a time (the VMs take every core of a small machine).
//!
//! One test binary for the files in tests/vm/ (each a module named
//! after its file): `cargo test --test vm <module>::` runs one of them.

mod support;
#[path = "vm/harness.rs"]
mod vm;

#[path = "vm/cgroup_v2_vm.rs"]
mod cgroup_v2_vm;
#[path = "vm/cpu_manager_v2_vm.rs"]
mod cpu_manager_v2_vm;
#[path = "vm/daemonset_vm.rs"]
mod daemonset_vm;
#[path = "vm/evict_v2_vm.rs"]
mod evict_v2_vm;
#[path = "vm/pressure_v2_vm.rs"]
mod pressure_v2_vm;
#[path = "vm/run_v2_vm.rs"]
mod run_v2_vm;
#[path = "vm/systemd_vm.rs"]
mod systemd_vm;
