//! Node capacity and allocatable (kubelet `--system-reserved`,
//! `--kube-reserved`, hard eviction threshold).
//!
//! Two "allocatable" figures exist in the kubelet and both are kept here:
//! * `allocatable_*` = capacity − system-reserved − kube-reserved − hard
//!   eviction threshold (memory): what the node reports to the scheduler;
//! * `enforced_*` = capacity − system-reserved − kube-reserved
//!   (`GetNodeAllocatableAbsolute`): what the kubelet writes on the
//!   `kubepods` cgroup and uses for qos-reserved and MemoryQoS. The eviction
//!   threshold is left out on purpose so eviction fires before the cgroup
//!   limit is hit.
//!
//! Detection reads an injectable proc root (`<proc>/meminfo`,
//! `<proc>/cpuinfo`), so tests use fixture files.

use std::path::{Path, PathBuf};

use crate::core::quantity::Quantity;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid reserved resources {value:?}: {message}")]
    Reserved { value: String, message: String },
}

/// Capacity and allocatable of the node, in millicores and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct NodeResources {
    pub capacity_cpu_millis: i64,
    pub capacity_memory_bytes: i64,
    /// capacity − reserved (− hard eviction threshold for memory).
    pub allocatable_cpu_millis: i64,
    pub allocatable_memory_bytes: i64,
    /// capacity − reserved: the kubepods cgroup's values.
    pub enforced_cpu_millis: i64,
    pub enforced_memory_bytes: i64,
}

/// Reserved resources (`--system-reserved`/`--kube-reserved`), summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
}

impl Reserved {
    /// Parse `cpu=500m,memory=1Gi` (kubelet syntax; `ephemeral-storage`,
    /// `pid` and `hugepages-*` are accepted and ignored). Empty → zero.
    pub fn parse(s: &str) -> Result<Reserved, NodeError> {
        let err = |message: String| NodeError::Reserved {
            value: s.to_string(),
            message,
        };
        let mut r = Reserved::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| err(format!("{part:?} is not name=quantity")))?;
            let q = Quantity::parse(v.trim()).map_err(|e| err(format!("{k}: {e}")))?;
            if q.is_negative() {
                return Err(err(format!("{k}: must not be negative")));
            }
            match k.trim() {
                "cpu" => r.cpu_millis = q.milli_ceil(),
                "memory" => r.memory_bytes = q.value_ceil(),
                "ephemeral-storage" | "pid" => {}
                k if k.starts_with("hugepages-") => {}
                other => {
                    return Err(err(format!(
                        "unknown resource {other:?} (allowed: cpu, memory, ephemeral-storage, pid)"
                    )))
                }
            }
        }
        Ok(r)
    }

    /// Sum of two reservations (system + kube).
    pub fn plus(self, other: Reserved) -> Reserved {
        Reserved {
            cpu_millis: self.cpu_millis + other.cpu_millis,
            memory_bytes: self.memory_bytes + other.memory_bytes,
        }
    }
}

impl NodeResources {
    /// Capacity minus reservations, floored at 0 like the kubelet.
    pub fn new(
        capacity_cpu_millis: i64,
        capacity_memory_bytes: i64,
        reserved: Reserved,
        eviction_hard_memory_bytes: i64,
    ) -> NodeResources {
        let enforced_cpu = (capacity_cpu_millis - reserved.cpu_millis).max(0);
        let enforced_mem = (capacity_memory_bytes - reserved.memory_bytes).max(0);
        NodeResources {
            capacity_cpu_millis,
            capacity_memory_bytes,
            allocatable_cpu_millis: enforced_cpu,
            allocatable_memory_bytes: (enforced_mem - eviction_hard_memory_bytes).max(0),
            enforced_cpu_millis: enforced_cpu,
            enforced_memory_bytes: enforced_mem,
        }
    }

    /// No reservations: everything allocatable.
    pub fn from_capacity(cpu_millis: i64, memory_bytes: i64) -> NodeResources {
        NodeResources::new(cpu_millis, memory_bytes, Reserved::default(), 0)
    }
}

/// Capacity of the machine as seen under `proc_root` (normally `/proc`):
/// (millicores, bytes).
pub fn detect_capacity(proc_root: &Path) -> Result<(i64, i64), NodeError> {
    Ok((
        detect_cpu_millis(proc_root)?,
        detect_memory_bytes(proc_root)?,
    ))
}

/// `MemTotal` of `<proc>/meminfo`, in bytes.
pub fn detect_memory_bytes(proc_root: &Path) -> Result<i64, NodeError> {
    let path = proc_root.join("meminfo");
    let text = read(&path)?;
    parse_meminfo_total(&text).map_err(|message| NodeError::Parse { path, message })
}

/// Number of CPUs × 1000: the sched affinity mask of this process when
/// `proc_root` is the real `/proc`, else the `processor` lines of
/// `<proc>/cpuinfo`.
pub fn detect_cpu_millis(proc_root: &Path) -> Result<i64, NodeError> {
    if proc_root == Path::new("/proc") {
        if let Some(n) = affinity_cpus() {
            return Ok(n * 1000);
        }
    }
    let path = proc_root.join("cpuinfo");
    let text = read(&path)?;
    let n = count_cpuinfo_processors(&text);
    if n == 0 {
        return Err(NodeError::Parse {
            path,
            message: "no \"processor\" lines".to_string(),
        });
    }
    Ok(n as i64 * 1000)
}

/// CPUs in this process's sched affinity mask.
fn affinity_cpus() -> Option<i64> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills at most its size.
    let n = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        libc::CPU_COUNT(&set)
    };
    (n > 0).then_some(i64::from(n))
}

fn read(path: &Path) -> Result<String, NodeError> {
    std::fs::read_to_string(path).map_err(|source| NodeError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// `MemTotal:  16318724 kB` → bytes.
pub fn parse_meminfo_total(text: &str) -> Result<i64, String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .ok_or("no MemTotal line")?;
    let mut it = line["MemTotal:".len()..].split_whitespace();
    let n: i64 = it
        .next()
        .ok_or("MemTotal has no value")?
        .parse()
        .map_err(|e| format!("MemTotal: {e}"))?;
    match it.next() {
        Some("kB") => Ok(n * 1024),
        None => Ok(n),
        Some(u) => Err(format!("MemTotal: unknown unit {u:?}")),
    }
}

/// Count `processor : N` lines.
pub fn count_cpuinfo_processors(text: &str) -> usize {
    text.lines()
        .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_parsing() {
        let r = Reserved::parse("cpu=500m,memory=1Gi").unwrap();
        assert_eq!(
            r,
            Reserved {
                cpu_millis: 500,
                memory_bytes: 1 << 30
            }
        );
        let r = Reserved::parse(" cpu=1 , ephemeral-storage=1Gi,pid=100").unwrap();
        assert_eq!(r.cpu_millis, 1000);
        assert_eq!(Reserved::parse("").unwrap(), Reserved::default());
        for bad in ["cpu", "cpu=1.2.3", "gpu=1", "memory=-1Gi"] {
            let e = Reserved::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn allocatable() {
        let r = Reserved::parse("cpu=500m,memory=1Gi")
            .unwrap()
            .plus(Reserved::parse("cpu=100m,memory=512Mi").unwrap());
        let n = NodeResources::new(8000, 32 << 30, r, 100 << 20);
        assert_eq!(n.enforced_cpu_millis, 7400);
        assert_eq!(n.allocatable_cpu_millis, 7400);
        assert_eq!(n.enforced_memory_bytes, (32 << 30) - (1536 << 20));
        assert_eq!(
            n.allocatable_memory_bytes,
            (32 << 30) - (1536 << 20) - (100 << 20)
        );
        let tiny = NodeResources::new(
            100,
            100,
            Reserved {
                cpu_millis: 200,
                memory_bytes: 200,
            },
            0,
        );
        assert_eq!(
            (tiny.enforced_cpu_millis, tiny.enforced_memory_bytes),
            (0, 0)
        );
    }

    #[test]
    fn detect_from_fake_proc() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("meminfo"),
            "MemTotal:       16318724 kB\nMemFree:         1000 kB\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("cpuinfo"),
            "processor\t: 0\nmodel name\t: x\n\nprocessor\t: 1\n\nprocessor\t: 2\n",
        )
        .unwrap();
        assert_eq!(detect_capacity(d.path()).unwrap(), (3000, 16318724 * 1024));
        let e = detect_capacity(&d.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope"), "{e}");
        std::fs::write(d.path().join("meminfo"), "MemFree: 1 kB\n").unwrap();
        assert!(detect_memory_bytes(d.path()).is_err());
    }

    #[test]
    fn detect_real_machine() {
        let (cpu, mem) = detect_capacity(Path::new("/proc")).unwrap();
        assert!(cpu >= 1000 && mem > 0);
    }
}
