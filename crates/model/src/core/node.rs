//! Node capacity and allocatable (kubelet `--system-reserved`,
//! `--kube-reserved`).
//!
//! `enforced_*` = capacity − system-reserved − kube-reserved
//! (`GetNodeAllocatableAbsolute`): what the kubelet writes on the `kubepods`
//! cgroup and uses for qos-reserved and MemoryQoS. The hard eviction
//! threshold is left out on purpose so eviction fires before the cgroup
//! limit is hit. (The scheduler's allocatable, which subtracts it too, is
//! not qosd's to compute.)
//!
//! The capacity itself is detected by the node crate (from an injectable
//! proc root: `<proc>/meminfo`, `<proc>/cpuinfo`) and passed in here.

#[cfg(test)]
use crate::core::quantity::Quantity;

/// Why node resources could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A reserved-resources list was rejected.
    #[error("invalid reserved resources {value:?}: {message}")]
    Reserved {
        /// The list as given.
        value: String,
        /// What is wrong with it.
        message: String,
    },
}

/// Capacity and allocatable of the node, in millicores and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct NodeResources {
    pub(crate) capacity_cpu_millis: i64,
    /// Memory capacity of the node, bytes.
    pub capacity_memory_bytes: i64,
    /// capacity − reserved: the kubepods cgroup's values.
    pub enforced_cpu_millis: i64,
    /// Memory capacity − reserved, bytes (never negative): the kubepods cgroup's value.
    pub enforced_memory_bytes: i64,
}

/// Reserved resources (`--system-reserved`/`--kube-reserved`), summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    /// Reserved CPU, millicores.
    pub cpu_millis: i64,
    /// Reserved memory, bytes.
    pub memory_bytes: i64,
}

impl Reserved {
    #[cfg(test)]
    /// Parse `cpu=500m,memory=1Gi` (kubelet syntax; `ephemeral-storage`,
    /// `pid` and `hugepages-*` are accepted and ignored). Empty → zero.
    pub(crate) fn parse(s: &str) -> Result<Reserved, NodeError> {
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

    /// Sum of two reservations (system + kube); a sum beyond i64 (e.g.
    /// `memory=7Ei` twice) is an error, never a wrapped negative value.
    pub fn plus(self, other: Reserved) -> Result<Reserved, NodeError> {
        let sum = |what: &str, a: i64, b: i64| {
            a.checked_add(b).ok_or_else(|| NodeError::Reserved {
                value: format!("{what}: {a} + {b}"),
                message: "the sum of the reservations is out of range (more than 2^63-1)"
                    .to_string(),
            })
        };
        Ok(Reserved {
            cpu_millis: sum("cpu millicores", self.cpu_millis, other.cpu_millis)?,
            memory_bytes: sum("memory bytes", self.memory_bytes, other.memory_bytes)?,
        })
    }
}

impl NodeResources {
    /// Capacity minus reservations, floored at 0 like the kubelet.
    pub fn new(
        capacity_cpu_millis: i64,
        capacity_memory_bytes: i64,
        reserved: Reserved,
    ) -> NodeResources {
        let enforced_cpu = capacity_cpu_millis
            .saturating_sub(reserved.cpu_millis)
            .max(0);
        let enforced_mem = capacity_memory_bytes
            .saturating_sub(reserved.memory_bytes)
            .max(0);
        NodeResources {
            capacity_cpu_millis,
            capacity_memory_bytes,
            enforced_cpu_millis: enforced_cpu,
            enforced_memory_bytes: enforced_mem,
        }
    }

    /// No reservations: everything allocatable.
    pub fn from_capacity(cpu_millis: i64, memory_bytes: i64) -> NodeResources {
        NodeResources::new(cpu_millis, memory_bytes, Reserved::default())
    }
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
    fn sums_out_of_range_are_errors() {
        let big = Reserved::parse("cpu=9223372036854775807,memory=7Ei").unwrap();
        let e = big.plus(big).unwrap_err().to_string();
        assert!(e.contains("out of range"), "{e}");
        let r = Reserved {
            cpu_millis: 0,
            memory_bytes: i64::MAX,
        };
        assert!(r.plus(Reserved::default()).is_ok());
        // A single huge reservation leaves nothing allocatable, never a wrap.
        let n = NodeResources::new(2000, 8 << 30, r);
        assert_eq!(n.enforced_memory_bytes, 0);
    }

    #[test]
    fn allocatable() {
        let r = Reserved::parse("cpu=500m,memory=1Gi")
            .unwrap()
            .plus(Reserved::parse("cpu=100m,memory=512Mi").unwrap())
            .unwrap();
        let n = NodeResources::new(8000, 32 << 30, r);
        assert_eq!(n.enforced_cpu_millis, 7400);
        assert_eq!(n.enforced_memory_bytes, (32 << 30) - (1536 << 20));
        let tiny = NodeResources::new(
            100,
            100,
            Reserved {
                cpu_millis: 200,
                memory_bytes: 200,
            },
        );
        assert_eq!(
            (tiny.enforced_cpu_millis, tiny.enforced_memory_bytes),
            (0, 0)
        );
    }
}
