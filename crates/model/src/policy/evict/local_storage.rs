//! Local ephemeral storage limits, checked the way the kubelet's
//! `localStorageEviction` does (pkg/kubelet/eviction/eviction_manager.go),
//! without node pressure (pure: usage and limits are inputs).
//!
//! In order, the first that applies evicts the pod (grace 1 s):
//! 1. an `emptyDir` whose usage exceeds its `sizeLimit` — "Usage of
//!    EmptyDir volume %q exceeds the limit %q.";
//! 2. the pod's total (writable layers + logs + local volumes) over the sum
//!    of its containers' `ephemeral-storage` limits — "Pod ephemeral local
//!    storage usage exceeds the total limit of containers %s.";
//! 3. a container whose logs (+ writable layer, unless a dedicated imagefs
//!    holds it) exceed its own limit — "Container %s exceeded its local
//!    ephemeral storage limit %q.".
//!
//! The limits come from the pod spec (`StorageLimits::of`); a source that
//! does not carry them (the CRI alone) yields none, and nothing is checked.

use crate::core::model::Pod;
use crate::core::quantity::Quantity;

/// The local-storage limits a pod declares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageLimits {
    /// (container name, `ephemeral-storage` limit) for app containers with one.
    pub(crate) containers: Vec<(String, Quantity)>,
    /// Sum of the containers' limits (kubelet PodLimits), when any has one.
    pub(crate) pod: Option<Quantity>,
    /// (volume name, sizeLimit) of emptyDir volumes with a positive limit.
    pub(crate) empty_dirs: Vec<(String, Quantity)>,
}

impl StorageLimits {
    /// The limits of a pod spec.
    pub(crate) fn of(pod: &Pod) -> StorageLimits {
        let key = "ephemeral-storage";
        let containers: Vec<(String, Quantity)> = pod
            .containers
            .iter()
            .filter_map(|c| {
                c.resources
                    .limits
                    .get(key)
                    .filter(|q| !q.is_zero())
                    .map(|q| (c.name.clone(), q.clone()))
            })
            .collect();
        // PodLimits: app containers and sidecars add up, an init container
        // counts with the sidecars started before it, plus the overhead.
        let pod_limit = crate::core::resources::pod_limit_nanos(pod, key)
            .map(|n| canonical_bytes(n.div_euclid(1_000_000_000)));
        let empty_dirs = pod
            .volumes
            .iter()
            .filter_map(|v| {
                let ed = v.empty_dir.as_ref()?;
                let q = ed.size_limit.as_ref()?;
                (q.nanos() > 0).then(|| (v.name.clone(), q.clone()))
            })
            .collect();
        StorageLimits {
            containers,
            pod: pod_limit,
            empty_dirs,
        }
    }

    /// Whether the pod sets no local-storage limit at all.
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.pod.is_none() && self.empty_dirs.is_empty()
    }
}

/// Measured storage of one container.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ContainerStorage {
    /// The container's name.
    pub name: String,
    /// Writable layer, bytes (None: not reported).
    pub rootfs_bytes: Option<u64>,
    /// Its log files, bytes.
    pub logs_bytes: Option<u64>,
}

/// Per-container and per-volume storage of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StorageDetail {
    /// Every container's storage.
    pub containers: Vec<ContainerStorage>,
    /// (volume name, bytes) of every emptyDir found on disk.
    pub volumes: Vec<(String, u64)>,
    /// Total: writable layers + logs + disk-backed local volumes.
    pub total_bytes: u64,
}

/// Which limit a pod broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// An emptyDir over its `sizeLimit`.
    EmptyDir,
    /// The pod over the sum of its containers' `ephemeral-storage` limits.
    Pod,
    /// A container over its `ephemeral-storage` limit.
    Container,
}

impl LimitKind {
    /// The kubelet's eviction metric label for this limit.
    pub(crate) fn metric_label(self) -> &'static str {
        match self {
            LimitKind::EmptyDir => "emptydirfs.limit",
            LimitKind::Pod => "ephemeralpodfs.limit",
            LimitKind::Container => "ephemeralcontainerfs.limit",
        }
    }
}

/// A broken local-storage limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) kind: LimitKind,
    /// The kubelet's eviction message.
    pub(crate) message: String,
    pub(crate) usage_bytes: u64,
    pub(crate) limit_bytes: i64,
}

/// The first limit the pod breaks, in the kubelet's order (emptyDir, pod,
/// container). `dedicated_imagefs`: the writable layers are on an imagefs
/// and do not count towards a container's limit.
pub(crate) fn violation(
    limits: &StorageLimits,
    detail: &StorageDetail,
    dedicated_imagefs: bool,
) -> Option<Violation> {
    for (name, limit) in &limits.empty_dirs {
        if let Some((_, used)) = detail.volumes.iter().find(|(v, _)| v == name) {
            if i128::from(*used) * 1_000_000_000 > limit.nanos() {
                return Some(Violation {
                    kind: LimitKind::EmptyDir,
                    message: format!(
                        "Usage of EmptyDir volume {name:?} exceeds the limit {limit:?}. ",
                        limit = limit.to_string()
                    ),
                    usage_bytes: *used,
                    limit_bytes: limit.value_ceil(),
                });
            }
        }
    }
    if let Some(limit) = &limits.pod {
        if i128::from(detail.total_bytes) * 1_000_000_000 > limit.nanos() {
            return Some(Violation {
                kind: LimitKind::Pod,
                message: format!(
                    "Pod ephemeral local storage usage exceeds the total limit of containers {limit}. "
                ),
                usage_bytes: detail.total_bytes,
                limit_bytes: limit.value_ceil(),
            });
        }
    }
    for c in &detail.containers {
        let Some((_, limit)) = limits.containers.iter().find(|(n, _)| *n == c.name) else {
            continue;
        };
        let mut used = c.logs_bytes.unwrap_or(0);
        if !dedicated_imagefs {
            used = used.saturating_add(c.rootfs_bytes.unwrap_or(0));
        }
        if i128::from(used) * 1_000_000_000 > limit.nanos() {
            return Some(Violation {
                kind: LimitKind::Container,
                message: format!(
                    "Container {} exceeded its local ephemeral storage limit {:?}. ",
                    c.name,
                    limit.to_string()
                ),
                usage_bytes: used,
                limit_bytes: limit.value_ceil(),
            });
        }
    }
    None
}

/// A byte count in Kubernetes' canonical binary form (`64Mi`, `1536Ki`,
/// `1000`), as `resource.Quantity.String()` prints a BinarySI sum. The one
/// formatter of byte quantities in messages (`message::amount_text` uses
/// it); `message::threshold_text` differs on purpose (a threshold prints as
/// written), `rank::fmt_bytes` is for humans (`1.5MiB`).
pub(crate) fn canonical_bytes(v: i128) -> Quantity {
    let units = ["Ei", "Pi", "Ti", "Gi", "Mi", "Ki"];
    let text = if v == 0 {
        "0".to_string()
    } else {
        let mut t = v.to_string();
        for (i, u) in units.iter().enumerate() {
            let shift = 10 * (6 - i as u32);
            let div = 1i128 << shift;
            if v % div == 0 {
                t = format!("{}{u}", v / div);
                break;
            }
        }
        t
    };
    Quantity::parse(&text).unwrap_or_else(|_| Quantity::from_nanos(v * 1_000_000_000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{Container, EmptyDir, Volume};

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    fn pod(limits: &[(&str, Option<&str>)], dirs: &[(&str, Option<&str>, bool)]) -> Pod {
        let mut p = Pod::new("u", "ns", "p");
        for (name, lim) in limits {
            let mut c = Container {
                name: name.to_string(),
                ..Default::default()
            };
            if let Some(l) = lim {
                c.resources.limits.insert("ephemeral-storage".into(), q(l));
            }
            p.containers.push(c);
        }
        for (name, size, memory) in dirs {
            p.volumes.push(Volume {
                name: name.to_string(),
                empty_dir: Some(EmptyDir {
                    memory: *memory,
                    size_limit: size.map(q),
                }),
            });
        }
        p
    }

    fn detail(ctrs: &[(&str, u64, u64)], vols: &[(&str, u64)]) -> StorageDetail {
        let containers: Vec<ContainerStorage> = ctrs
            .iter()
            .map(|(n, r, l)| ContainerStorage {
                name: n.to_string(),
                rootfs_bytes: Some(*r),
                logs_bytes: Some(*l),
            })
            .collect();
        let total = ctrs.iter().map(|(_, r, l)| r + l).sum::<u64>()
            + vols.iter().map(|(_, b)| b).sum::<u64>();
        StorageDetail {
            containers,
            volumes: vols.iter().map(|(n, b)| (n.to_string(), *b)).collect(),
            total_bytes: total,
        }
    }

    const MI: u64 = 1 << 20;

    #[test]
    fn limits_of_a_pod() {
        let p = pod(
            &[("a", Some("64Mi")), ("b", Some("64Mi")), ("c", None)],
            &[("scratch", Some("10Mi"), false), ("nolimit", None, false)],
        );
        let l = StorageLimits::of(&p);
        assert_eq!(l.containers.len(), 2);
        assert_eq!(l.pod.as_ref().unwrap().to_string(), "128Mi");
        assert_eq!(l.empty_dirs.len(), 1);
        assert!(StorageLimits::of(&pod(&[("a", None)], &[])).is_empty());
    }

    /// The kubelet's `PodLimits`: an init container counts with the sidecars
    /// started before it; RuntimeClass overhead adds to a non-zero limit.
    #[test]
    fn pod_limit_like_the_kubelets_pod_limits() {
        let mut p = pod(&[("app", Some("10Mi"))], &[]);
        let init = |name: &str, lim: &str, restartable: bool| Container {
            name: name.into(),
            resources: crate::core::model::ResourceRequirements {
                requests: Default::default(),
                limits: [("ephemeral-storage".to_string(), q(lim))].into(),
            },
            restartable,
        };
        p.init_containers.push(init("proxy", "20Mi", true));
        p.init_containers.push(init("setup", "25Mi", false));
        // app + proxy = 30Mi; setup + proxy before it = 45Mi
        assert_eq!(StorageLimits::of(&p).pod.unwrap().to_string(), "45Mi");
        p.overhead.insert("ephemeral-storage".into(), q("5Mi"));
        assert_eq!(StorageLimits::of(&p).pod.unwrap().to_string(), "50Mi");
    }

    #[test]
    fn violations_table() {
        let p = pod(
            &[("a", Some("64Mi")), ("b", Some("32Mi"))],
            &[("scratch", Some("10Mi"), false)],
        );
        let l = StorageLimits::of(&p);
        // (detail, dedicated imagefs, expected kind, message)
        let table: Vec<(StorageDetail, bool, Option<LimitKind>, &str)> =
            vec![
            (detail(&[("a", MI, MI), ("b", MI, 0)], &[("scratch", MI)]), false, None, ""),
            (
                detail(&[("a", MI, 0)], &[("scratch", 11 * MI)]),
                false,
                Some(LimitKind::EmptyDir),
                "Usage of EmptyDir volume \"scratch\" exceeds the limit \"10Mi\". ",
            ),
            (
                detail(&[("a", 60 * MI, 0), ("b", 30 * MI, 0)], &[("scratch", 9 * MI)]),
                false,
                Some(LimitKind::Pod),
                "Pod ephemeral local storage usage exceeds the total limit of containers 96Mi. ",
            ),
            (
                detail(&[("a", 0, 0), ("b", 30 * MI, 3 * MI)], &[]),
                false,
                Some(LimitKind::Container),
                "Container b exceeded its local ephemeral storage limit \"32Mi\". ",
            ),
            // the writable layer does not count with a dedicated imagefs
            (detail(&[("a", 0, 0), ("b", 30 * MI, 3 * MI)], &[]), true, None, ""),
        ];
        for (i, (d, ded, kind, msg)) in table.into_iter().enumerate() {
            let v = violation(&l, &d, ded);
            assert_eq!(v.as_ref().map(|v| v.kind), kind, "case {i}");
            if let Some(v) = v {
                assert_eq!(v.message, msg, "case {i}");
            }
        }
    }

    #[test]
    fn canonical_bytes_table() {
        for (v, want) in [
            (0i128, "0"),
            (1024, "1Ki"),
            (96 << 20, "96Mi"),
            (1536 << 10, "1536Ki"),
            (1000, "1000"),
            (3 << 30, "3Gi"),
        ] {
            assert_eq!(canonical_bytes(v).to_string(), want);
        }
    }
}
