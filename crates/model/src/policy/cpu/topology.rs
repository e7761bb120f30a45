//! The CPU topology the kubelet's CPU manager works with
//! (pkg/kubelet/cm/cpumanager/topology: `CPUTopology`, `CPUDetails`,
//! `Discover`): every logical CPU with its NUMA node, socket (package) and
//! core. Pure: built from per-CPU records that `qosd_node::sys::cpu_topology`
//! reads from sysfs (or tests write by hand).
//!
//! Cores are identified the way cAdvisor and the kubelet do it: the logical
//! CPUs of one NUMA node that share `(physical_package_id, core_id)` form a
//! core (core ids repeat across packages), and the core's id is its lowest
//! CPU id, which is unique on the machine. Dies are recorded but, like in
//! cAdvisor, play no part in the grouping.

use std::collections::{BTreeMap, BTreeSet};

use super::cpuset::CpuSet;

/// One logical CPU as sysfs describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawCpu {
    /// The logical CPU id.
    pub cpu: u32,
    /// `topology/physical_package_id` (the socket).
    pub package: u32,
    /// `topology/die_id` (0 when absent).
    pub die: u32,
    /// `topology/core_id` (unique only within a package).
    pub core_id: u32,
    /// The NUMA node listing the CPU (0 when the machine has no node dirs).
    pub numa: u32,
}

/// Placement of one logical CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuInfo {
    pub(crate) numa: u32,
    pub(crate) socket: u32,
    pub(crate) die: u32,
    /// Machine-unique core id: the lowest CPU id of the core.
    pub(crate) core: u32,
}

/// Why a topology cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// No CPU at all.
    #[error("could not detect number of cpus")]
    NoCpus,
    /// The same CPU id twice.
    #[error("cpu {0} is listed twice")]
    Duplicate(u32),
}

/// A set of CPUs with their placement (the kubelet's `CPUDetails`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Details(pub BTreeMap<u32, CpuInfo>);

impl Details {
    /// Only the CPUs in `cpus`.
    pub(crate) fn keep_only(&self, cpus: &CpuSet) -> Details {
        Details(
            self.0
                .iter()
                .filter(|(c, _)| cpus.contains(**c))
                .map(|(c, i)| (*c, *i))
                .collect(),
        )
    }

    /// Every CPU in the set.
    pub fn cpus(&self) -> CpuSet {
        self.0.keys().copied().collect()
    }

    fn ids(&self, f: impl Fn(&CpuInfo) -> u32) -> BTreeSet<u32> {
        self.0.values().map(f).collect()
    }

    fn cpus_where(&self, pred: impl Fn(&CpuInfo) -> bool) -> CpuSet {
        self.0
            .iter()
            .filter(|(_, i)| pred(i))
            .map(|(c, _)| *c)
            .collect()
    }

    fn ids_where(
        &self,
        pred: impl Fn(&CpuInfo) -> bool,
        f: impl Fn(&CpuInfo) -> u32,
    ) -> BTreeSet<u32> {
        self.0.values().filter(|i| pred(i)).map(f).collect()
    }

    pub(crate) fn numa_nodes(&self) -> BTreeSet<u32> {
        self.ids(|i| i.numa)
    }

    pub(crate) fn sockets(&self) -> BTreeSet<u32> {
        self.ids(|i| i.socket)
    }

    /// The CPUs on the given NUMA nodes.
    pub fn cpus_in_numa_nodes(&self, ids: &[u32]) -> CpuSet {
        self.cpus_where(|i| ids.contains(&i.numa))
    }

    /// The CPUs on the given sockets.
    pub fn cpus_in_sockets(&self, ids: &[u32]) -> CpuSet {
        self.cpus_where(|i| ids.contains(&i.socket))
    }

    /// The CPUs of the given cores (machine-unique core ids).
    pub fn cpus_in_cores(&self, ids: &[u32]) -> CpuSet {
        self.cpus_where(|i| ids.contains(&i.core))
    }

    /// The sockets with CPUs on the given NUMA nodes.
    pub fn sockets_in_numa_nodes(&self, ids: &[u32]) -> BTreeSet<u32> {
        self.ids_where(|i| ids.contains(&i.numa), |i| i.socket)
    }

    pub(crate) fn numa_nodes_in_sockets(&self, ids: &[u32]) -> BTreeSet<u32> {
        self.ids_where(|i| ids.contains(&i.socket), |i| i.numa)
    }

    pub(crate) fn cores_in_numa_nodes(&self, ids: &[u32]) -> BTreeSet<u32> {
        self.ids_where(|i| ids.contains(&i.numa), |i| i.core)
    }

    pub(crate) fn cores_in_sockets(&self, ids: &[u32]) -> BTreeSet<u32> {
        self.ids_where(|i| ids.contains(&i.socket), |i| i.core)
    }
}

/// The machine's CPU topology (the kubelet's `CPUTopology`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuTopology {
    /// Logical CPUs.
    pub num_cpus: usize,
    /// Physical cores (CPUs sharing NUMA node, socket and `core_id`).
    pub num_cores: usize,
    /// Sockets (physical packages).
    pub num_sockets: usize,
    /// NUMA nodes.
    pub num_numa_nodes: usize,
    /// The placement of every CPU.
    pub details: Details,
}

impl CpuTopology {
    /// Build from per-CPU records (any order).
    pub fn from_raw(raw: &[RawCpu]) -> Result<CpuTopology, TopologyError> {
        if raw.is_empty() {
            return Err(TopologyError::NoCpus);
        }
        let mut seen = BTreeSet::new();
        let mut groups: BTreeMap<(u32, u32, u32), Vec<&RawCpu>> = BTreeMap::new();
        for r in raw {
            if !seen.insert(r.cpu) {
                return Err(TopologyError::Duplicate(r.cpu));
            }
            groups
                .entry((r.numa, r.package, r.core_id))
                .or_default()
                .push(r);
        }
        let mut details = BTreeMap::new();
        for cpus in groups.values() {
            let core = cpus.iter().map(|r| r.cpu).min().expect("non-empty group");
            for r in cpus {
                details.insert(
                    r.cpu,
                    CpuInfo {
                        numa: r.numa,
                        socket: r.package,
                        die: r.die,
                        core,
                    },
                );
            }
        }
        let details = Details(details);
        Ok(CpuTopology {
            num_cpus: raw.len(),
            num_cores: groups.len(),
            num_sockets: details.sockets().len(),
            num_numa_nodes: details.numa_nodes().len(),
            details,
        })
    }

    #[cfg(test)]
    /// A regular machine: `sockets` × `numa_per_socket` NUMA nodes ×
    /// `cores_per_numa` cores × `threads` threads, numbered the Linux way
    /// (first thread of every core first, then the siblings: cpu `c` and
    /// `c + cores` are one core). For tests and examples.
    pub(crate) fn synthetic(
        sockets: u32,
        numa_per_socket: u32,
        cores_per_numa: u32,
        threads: u32,
    ) -> CpuTopology {
        let cores = sockets * numa_per_socket * cores_per_numa;
        let mut raw = Vec::new();
        for t in 0..threads {
            for c in 0..cores {
                let numa = c / cores_per_numa;
                let socket = numa / numa_per_socket;
                raw.push(RawCpu {
                    cpu: t * cores + c,
                    package: socket,
                    die: 0,
                    core_id: c % (numa_per_socket * cores_per_numa),
                    numa,
                });
            }
        }
        CpuTopology::from_raw(&raw).expect("valid synthetic topology")
    }

    /// `CPUsPerCore`: logical CPUs / cores (0 without cores).
    pub fn cpus_per_core(&self) -> usize {
        self.num_cpus.checked_div(self.num_cores).unwrap_or(0)
    }

    /// `CPUsPerSocket`.
    pub(crate) fn cpus_per_socket(&self) -> usize {
        self.num_cpus.checked_div(self.num_sockets).unwrap_or(0)
    }

    pub(crate) fn all_cpus(&self) -> CpuSet {
        self.details.cpus()
    }

    /// The core (lowest CPU id) of `cpu`, if the CPU exists.
    pub(crate) fn core_of(&self, cpu: u32) -> Option<u32> {
        self.details.0.get(&cpu).map(|i| i.core)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_dual_socket_ht() {
        // 2 sockets × 8 cores × 2 threads, one NUMA node per socket.
        let t = CpuTopology::synthetic(2, 1, 8, 2);
        assert_eq!(
            (t.num_cpus, t.num_cores, t.num_sockets, t.num_numa_nodes),
            (32, 16, 2, 2)
        );
        assert_eq!(t.cpus_per_core(), 2);
        assert_eq!(t.cpus_per_socket(), 16);
        assert_eq!(t.core_of(16), Some(0));
        assert_eq!(t.core_of(8), Some(8));
        assert_eq!(t.details.cpus_in_sockets(&[1]).to_string(), "8-15,24-31");
        assert_eq!(t.details.cpus_in_cores(&[3]).to_string(), "3,19");
    }

    #[test]
    fn core_ids_repeat_across_packages() {
        // core_id 0 in both packages: two distinct cores.
        let raw = [
            RawCpu {
                cpu: 0,
                package: 0,
                die: 0,
                core_id: 0,
                numa: 0,
            },
            RawCpu {
                cpu: 1,
                package: 1,
                die: 0,
                core_id: 0,
                numa: 0,
            },
            RawCpu {
                cpu: 2,
                package: 0,
                die: 0,
                core_id: 0,
                numa: 0,
            },
            RawCpu {
                cpu: 3,
                package: 1,
                die: 0,
                core_id: 0,
                numa: 0,
            },
        ];
        let t = CpuTopology::from_raw(&raw).unwrap();
        assert_eq!(t.num_cores, 2);
        assert_eq!(t.details.cpus_in_cores(&[0]).to_string(), "0,2");
        assert_eq!(t.details.cpus_in_cores(&[1]).to_string(), "1,3");
        assert_eq!(t.num_sockets, 2);
        assert_eq!(t.num_numa_nodes, 1);
    }

    #[test]
    fn errors() {
        assert_eq!(CpuTopology::from_raw(&[]), Err(TopologyError::NoCpus));
        let r = RawCpu {
            cpu: 0,
            package: 0,
            die: 0,
            core_id: 0,
            numa: 0,
        };
        assert_eq!(
            CpuTopology::from_raw(&[r, r]),
            Err(TopologyError::Duplicate(0))
        );
    }
}
