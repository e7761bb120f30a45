//! Read the CPU topology from sysfs, the way cAdvisor does for the kubelet:
//! the online CPUs (`devices/system/cpu/online`), each CPU's package, die
//! and core id (`cpuN/topology/{physical_package_id,die_id,core_id}`) and the
//! NUMA node listing it (`devices/system/node/nodeN/cpulist`; every CPU in
//! node 0 when the kernel has no node directory). The sysfs root is a
//! parameter: tests point it at the trees in `fixtures/sysfs/`.

use std::path::{Path, PathBuf};

use qosd_model::policy::cpu::cpuset::{CpuSet, CpuSetError};
pub use qosd_model::policy::cpu::topology::{CpuTopology, RawCpu, TopologyError};

/// A sysfs read that failed, with the path and what was found.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The path read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file that holds a number held something else.
    #[error("{path}: {value:?} is not a number")]
    NotANumber {
        /// The file.
        path: PathBuf,
        /// What it held.
        value: String,
    },
    /// A CPU list could not be parsed.
    #[error("{path}: {source}")]
    List {
        /// The file.
        path: PathBuf,
        /// Why the list is invalid.
        source: CpuSetError,
    },
    /// Two NUMA nodes claim the same CPU.
    #[error("{path}: cpu {cpu} is listed by NUMA nodes {first} and {second}")]
    TwoNodes {
        /// The second node's `cpulist`.
        path: PathBuf,
        /// The CPU.
        cpu: u32,
        /// The node that listed it first.
        first: u32,
        /// The node that listed it again.
        second: u32,
    },
    /// What was read does not make a consistent topology.
    #[error("{root}: {source}")]
    Topology {
        /// The sysfs root read.
        root: PathBuf,
        /// What is inconsistent.
        source: TopologyError,
    },
}

fn read(path: &Path) -> Result<String, SysfsError> {
    std::fs::read_to_string(path).map_err(|source| SysfsError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn read_list(path: &Path) -> Result<CpuSet, SysfsError> {
    CpuSet::parse(&read(path)?).map_err(|source| SysfsError::List {
        path: path.to_path_buf(),
        source,
    })
}

fn read_u32(path: &Path) -> Result<u32, SysfsError> {
    let s = read(path)?;
    let t = s.trim();
    // die_id / package ids are -1 on some virtual machines: treat as 0.
    if t == "-1" {
        return Ok(0);
    }
    t.parse().map_err(|_| SysfsError::NotANumber {
        path: path.to_path_buf(),
        value: t.to_string(),
    })
}

/// The raw per-CPU records under `sysfs` (normally `/sys`).
pub(crate) fn read_raw(sysfs: &Path) -> Result<Vec<RawCpu>, SysfsError> {
    let cpu_dir = sysfs.join("devices/system/cpu");
    let online = read_list(&cpu_dir.join("online"))?;
    let node_dir = sysfs.join("devices/system/node");
    let mut numa_of = std::collections::BTreeMap::new();
    let node_online = node_dir.join("online");
    if node_online.exists() {
        for n in read_list(&node_online)?.iter() {
            let path = node_dir.join(format!("node{n}/cpulist"));
            for cpu in read_list(&path)?.iter() {
                if let Some(first) = numa_of.insert(cpu, n) {
                    return Err(SysfsError::TwoNodes {
                        path,
                        cpu,
                        first,
                        second: n,
                    });
                }
            }
        }
    }
    let mut out = Vec::new();
    for cpu in online.iter() {
        let t = cpu_dir.join(format!("cpu{cpu}/topology"));
        let die_path = t.join("die_id");
        out.push(RawCpu {
            cpu,
            package: read_u32(&t.join("physical_package_id"))?,
            die: if die_path.exists() {
                read_u32(&die_path)?
            } else {
                0
            },
            core_id: read_u32(&t.join("core_id"))?,
            numa: numa_of.get(&cpu).copied().unwrap_or(0),
        });
    }
    Ok(out)
}

/// The machine's [`CpuTopology`] under `sysfs`.
pub fn discover(sysfs: &Path) -> Result<CpuTopology, SysfsError> {
    CpuTopology::from_raw(&read_raw(sysfs)?).map_err(|source| SysfsError::Topology {
        root: sysfs.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("fixtures/sysfs")
            .join(name)
    }

    #[test]
    fn fixture_trees() {
        // (tree, cpus, cores, sockets, numa nodes, cpus per core, core of cpu 17 or 5)
        let cases = [
            ("1s-4c-2t", 8, 4, 1, 1, 2),
            ("2s-8c-2t", 32, 16, 2, 2, 2),
            ("2s-2n-4c-2t", 32, 16, 2, 4, 2),
            ("1s-2c-1t", 2, 2, 1, 1, 1),
            ("no-numa-2s-2c", 4, 4, 2, 1, 1),
        ];
        for (name, cpus, cores, sockets, numa, per_core) in cases {
            let t = discover(&fixture(name)).unwrap();
            assert_eq!(
                (
                    t.num_cpus,
                    t.num_cores,
                    t.num_sockets,
                    t.num_numa_nodes,
                    t.cpus_per_core()
                ),
                (cpus, cores, sockets, numa, per_core),
                "{name}"
            );
        }
        let t = discover(&fixture("2s-8c-2t")).unwrap();
        // core_id 0 exists in both packages; they are two cores.
        assert_eq!(t.details.cpus_in_cores(&[0]).to_string(), "0,16");
        assert_eq!(t.details.cpus_in_cores(&[8]).to_string(), "8,24");
        assert_eq!(t.details.cpus_in_sockets(&[1]).to_string(), "8-15,24-31");
        let t = discover(&fixture("2s-2n-4c-2t")).unwrap();
        assert_eq!(t.details.cpus_in_numa_nodes(&[1]).to_string(), "4-7,20-23");
        assert_eq!(
            t.details
                .sockets_in_numa_nodes(&[3])
                .into_iter()
                .collect::<Vec<_>>(),
            vec![1]
        );
    }

    #[test]
    fn the_real_machine_reads() {
        // Whatever this machine is, its sysfs must give a consistent topology.
        let t = discover(Path::new("/sys")).unwrap();
        assert_eq!(
            t.details.cpus(),
            CpuSet::parse(&std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap())
                .unwrap()
        );
        assert!(t.num_cores >= 1 && t.num_cores <= t.num_cpus);
    }

    #[test]
    fn errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let e = discover(dir.path()).unwrap_err();
        assert!(e.to_string().contains("devices/system/cpu/online"), "{e}");
        let cpu = dir.path().join("devices/system/cpu");
        std::fs::create_dir_all(cpu.join("cpu0/topology")).unwrap();
        std::fs::write(cpu.join("online"), "0\n").unwrap();
        std::fs::write(cpu.join("cpu0/topology/physical_package_id"), "x\n").unwrap();
        let e = discover(dir.path()).unwrap_err();
        assert!(
            e.to_string()
                .contains("physical_package_id: \"x\" is not a number"),
            "{e}"
        );
        std::fs::write(cpu.join("online"), "0-\n").unwrap();
        let e = discover(dir.path()).unwrap_err();
        assert!(e.to_string().contains("invalid CPU list"), "{e}");
    }
}
