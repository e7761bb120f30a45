//! The kubelet's CPU manager (pkg/kubelet/cm/cpumanager), pure logic:
//! CPU lists ([`cpuset`]), the machine topology ([`topology`]), the
//! topology-aware pick (`assign`), the `none` / `static` policies and the
//! per-pod assignment ([`policy`]) and the `cpu_manager_state` checkpoint
//! format ([`state`]). Reading sysfs and files lives in the node crate (`qosd_node::sys`).

pub(crate) mod assign;
pub mod cpuset;
pub mod policy;
pub mod state;
pub mod topology;

pub use cpuset::CpuSet;
