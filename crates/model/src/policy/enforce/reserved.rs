//! `enforceNodeAllocatable` and the reserved cgroups
//! (node_container_manager_linux.go `enforceNodeAllocatableCgroups`,
//! `enforceExistingCgroup`, `getCgroupConfig`):
//!
//! * `pods` (default): kubepods gets allocatable instead of capacity;
//! * `system-reserved` / `kube-reserved`: the cgroup named by
//!   `systemReservedCgroup` / `kubeReservedCgroup` gets the reservation as
//!   limits — cpu shares from `cpu`, the memory limit from `memory`,
//!   `pids.max` from `pid`, hugetlb from `hugepages-<size>` (0 for the other
//!   sizes the node offers), and with MemoryQoS `memory.min` = memory.
//!
//! The kubelet never creates those cgroups; neither does qosd.

use std::collections::BTreeMap;

use crate::core::model::ResourceList;
use crate::core::quantity::Quantity;
use crate::policy::enforce::hugepages;

/// The keys of `enforceNodeAllocatable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct EnforceNodeAllocatable {
    /// `pods`: kubepods gets node allocatable (otherwise capacity).
    pub pods: bool,
    /// `system-reserved`: enforce `--system-reserved` on `systemReservedCgroup`.
    pub system_reserved: bool,
    /// `kube-reserved`: enforce `--kube-reserved` on `kubeReservedCgroup`.
    pub kube_reserved: bool,
}

impl EnforceNodeAllocatable {
    /// The kubelet default: `[pods]`.
    pub fn kubelet_default() -> Self {
        EnforceNodeAllocatable {
            pods: true,
            ..Default::default()
        }
    }

    /// A comma list of `pods`, `system-reserved`, `kube-reserved` (or
    /// `none`, or empty); `true`/`false` are accepted as `pods` / `none`
    /// (qosd's older boolean flag).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut e = EnforceNodeAllocatable::default();
        match s.trim() {
            "true" => return Ok(Self::kubelet_default()),
            "false" | "none" | "" => return Ok(e),
            _ => {}
        }
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "pods" => e.pods = true,
                "system-reserved" => e.system_reserved = true,
                "kube-reserved" => e.kube_reserved = true,
                "none" => {}
                // Compressible-only variants exist in the kubelet (1.31+);
                // qosd does not implement them.
                other => {
                    return Err(format!(
                        "enforceNodeAllocatable {s:?}: unknown key {other:?} (allowed: pods, system-reserved, kube-reserved, none)"
                    ))
                }
            }
        }
        Ok(e)
    }

    /// The keys, in the kubelet's spelling.
    pub fn keys(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.pods {
            v.push("pods");
        }
        if self.system_reserved {
            v.push("system-reserved");
        }
        if self.kube_reserved {
            v.push("kube-reserved");
        }
        v
    }
}

/// What a reservation enforces on its cgroup (`getCgroupConfig` with
/// compressible resources only = false).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReservedResources {
    pub(crate) cpu_millis: Option<i64>,
    pub(crate) memory_bytes: Option<i64>,
    pub(crate) pids: Option<i64>,
    /// page size (bytes) → bytes
    pub(crate) hugepages: BTreeMap<u64, i64>,
}

impl ReservedResources {
    /// From a reservation's resource list (`systemReserved`, `kubeReserved`).
    pub fn from_list(list: &ResourceList) -> Result<Self, String> {
        let mut r = ReservedResources::default();
        for (k, q) in list {
            r.set(k, q)?;
        }
        Ok(r)
    }

    /// From the flag syntax `cpu=500m,memory=1Gi,pid=1000,hugepages-2Mi=4Mi`.
    #[cfg(test)]
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut r = ReservedResources::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not name=quantity"))?;
            let q = Quantity::parse(v.trim()).map_err(|e| format!("{k}: {e}"))?;
            r.set(k.trim(), &q)?;
        }
        Ok(r)
    }

    fn set(&mut self, k: &str, q: &Quantity) -> Result<(), String> {
        match k {
            "cpu" => self.cpu_millis = Some(q.milli_ceil()),
            "memory" => self.memory_bytes = Some(q.value_ceil()),
            "pid" => self.pids = Some(q.value_ceil()),
            k => {
                if let Some(size) = hugepages::page_size_of(k) {
                    self.hugepages.insert(size?, q.value_ceil());
                }
            }
        }
        Ok(())
    }
}

/// One reserved cgroup to enforce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedCgroup {
    /// `system-reserved` or `kube-reserved`.
    pub key: &'static str,
    /// The setting naming the cgroup (`systemReservedCgroup`, `kubeReservedCgroup`).
    pub setting: &'static str,
    /// The cgroup, relative to the hierarchy root (e.g. `system.slice`).
    pub cgroup: String,
    pub(crate) resources: ReservedResources,
}

/// The reserved cgroups `enforce` asks for; an enforced key without its
/// cgroup setting is an error (the kubelet refuses to start the same way).
pub fn reserved_cgroups(
    enforce: &EnforceNodeAllocatable,
    system: (&Option<String>, &ReservedResources),
    kube: (&Option<String>, &ReservedResources),
) -> Result<Vec<ReservedCgroup>, String> {
    let mut out = Vec::new();
    for (on, key, setting, (name, res)) in [
        (
            enforce.system_reserved,
            "system-reserved",
            "systemReservedCgroup",
            system,
        ),
        (
            enforce.kube_reserved,
            "kube-reserved",
            "kubeReservedCgroup",
            kube,
        ),
    ] {
        if !on {
            continue;
        }
        let cgroup = name
            .as_deref()
            .map(|n| n.trim_matches('/').to_string())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                format!("enforceNodeAllocatable contains {key} but {setting} is not set (the cgroup to limit)")
            })?;
        if cgroup.split('/').any(|c| c == ".." || c == ".") {
            return Err(format!("{setting} {cgroup:?}: must not contain . or .."));
        }
        out.push(ReservedCgroup {
            key,
            setting,
            cgroup,
            resources: res.clone(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enforce_keys() {
        let e = EnforceNodeAllocatable::parse("pods,system-reserved,kube-reserved").unwrap();
        assert_eq!(e.keys(), vec!["pods", "system-reserved", "kube-reserved"]);
        assert_eq!(
            EnforceNodeAllocatable::parse("true").unwrap(),
            EnforceNodeAllocatable::kubelet_default()
        );
        assert_eq!(
            EnforceNodeAllocatable::parse("false").unwrap(),
            EnforceNodeAllocatable::default()
        );
        assert_eq!(
            EnforceNodeAllocatable::parse("none").unwrap().keys(),
            Vec::<&str>::new()
        );
        let err = EnforceNodeAllocatable::parse("pods,system-reserved-compressible").unwrap_err();
        assert!(err.contains("system-reserved-compressible"), "{err}");
    }

    #[test]
    fn reservation_parsing() {
        let r = ReservedResources::parse(
            "cpu=500m,memory=1Gi,pid=1000,hugepages-2Mi=4Mi,ephemeral-storage=1Gi",
        )
        .unwrap();
        assert_eq!(r.cpu_millis, Some(500));
        assert_eq!(r.memory_bytes, Some(1 << 30));
        assert_eq!(r.pids, Some(1000));
        assert_eq!(r.hugepages.get(&(2 << 20)), Some(&(4 << 20)));
        assert!(ReservedResources::parse("hugepages-x=1").is_err());
        assert_eq!(
            ReservedResources::parse("").unwrap(),
            ReservedResources::default()
        );
    }

    #[test]
    fn cgroups_needed() {
        let e = EnforceNodeAllocatable::parse("pods,system-reserved").unwrap();
        let r = ReservedResources::parse("cpu=1").unwrap();
        let got = reserved_cgroups(&e, (&Some("/system.slice".into()), &r), (&None, &r)).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].cgroup, "system.slice");
        assert_eq!(got[0].key, "system-reserved");
        let err = reserved_cgroups(&e, (&None, &r), (&None, &r)).unwrap_err();
        assert!(err.contains("systemReservedCgroup"), "{err}");
        let err = reserved_cgroups(&e, (&Some("/a/../b".into()), &r), (&None, &r)).unwrap_err();
        assert!(err.contains(".."), "{err}");
        let none = EnforceNodeAllocatable::kubelet_default();
        assert!(reserved_cgroups(&none, (&None, &r), (&None, &r))
            .unwrap()
            .is_empty());
    }
}
