//! Hugepage limits of a pod cgroup (kubelet `HugePageLimits` in
//! helpers_linux.go and the hugetlb part of cgroup_manager_linux.go):
//!
//! * the limit of page size S is the pod's request of `hugepages-<S>`,
//!   summed like every pod request (app containers + sidecars, the largest
//!   init container, + overhead);
//! * every page size the node offers and the pod did not request gets 0;
//! * files: v1 `hugetlb.<size>.limit_in_bytes`, v2 `hugetlb.<size>.max`,
//!   `<size>` as the kernel names it (2 MiB → `2MB`, 1 GiB → `1GB`).

use std::collections::BTreeMap;

use crate::core::model::{Container, Pod, ResourceList};
use crate::core::quantity::Quantity;

/// `hugepages-` (v1.ResourceHugePagesPrefix).
pub(crate) const PREFIX: &str = "hugepages-";

/// The page size (bytes) of a `hugepages-<size>` resource name; `None` for
/// other names, `Some(Err)` for a bad size.
pub(crate) fn page_size_of(resource: &str) -> Option<Result<u64, String>> {
    let size = resource.strip_prefix(PREFIX)?;
    Some(
        Quantity::parse(size)
            .map_err(|e| format!("{resource}: bad page size: {e}"))
            .and_then(|q| {
                let v = q.value_ceil();
                if v <= 0 || q.nanos() % 1_000_000_000 != 0 {
                    Err(format!(
                        "{resource}: page size must be a positive number of bytes"
                    ))
                } else {
                    Ok(v as u64)
                }
            }),
    )
}

/// A page-size list (`2Mi,1Gi`) → sorted bytes; `none` or empty → none.
pub fn parse_size_list(s: &str) -> Result<Vec<u64>, String> {
    if matches!(s.trim(), "" | "none") {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let size = page_size_of(&format!("hugepages-{part}"))
            .unwrap_or_else(|| Err(format!("{part:?} is not a page size")))?;
        unit_size_name(size)?;
        out.push(size);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// A page size as a binary quantity (`2Mi`, `1Gi`), the syntax
/// [`parse_size_list`] reads.
pub fn size_quantity(bytes: u64) -> String {
    for (unit, shift) in [("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// The kernel's name of a page size (`HugePageUnitSizeFromByteSize`):
/// divide by 1024 while it divides evenly; 2097152 → `2MB`, 1073741824 →
/// `1GB`, 65536 → `64KB`.
pub(crate) fn unit_size_name(bytes: u64) -> Result<String, String> {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let (mut size, mut idx) = (bytes, 0);
    while size > 0 && size % 1024 == 0 && idx < UNITS.len() - 1 {
        size /= 1024;
        idx += 1;
    }
    if size == 0 || (size > 1024 && idx < UNITS.len() - 1) {
        return Err(format!(
            "hugepage size {bytes} bytes is not a whole number of the largest unit"
        ));
    }
    Ok(format!("{size}{}", UNITS[idx]))
}

fn hugepages_of(list: &ResourceList) -> BTreeMap<u64, i128> {
    let mut out = BTreeMap::new();
    for (name, q) in list {
        if let Some(Ok(size)) = page_size_of(name) {
            *out.entry(size).or_insert(0) += q.nanos();
        }
    }
    out
}

fn add(into: &mut BTreeMap<u64, i128>, other: &BTreeMap<u64, i128>) {
    for (k, v) in other {
        *into.entry(*k).or_insert(0) += v;
    }
}

fn requests(c: &Container) -> BTreeMap<u64, i128> {
    let mut r = c.resources.limits.clone();
    // A request wins over the limit (the API server defaulted it from the limit).
    r.extend(c.resources.requests.clone());
    hugepages_of(&r)
}

/// Page size (bytes) → the pod's hugepage request (bytes), like
/// `PodRequests` for the `hugepages-*` resources.
pub(crate) fn pod_hugepage_requests(pod: &Pod) -> BTreeMap<u64, i64> {
    let mut total = BTreeMap::new();
    for c in &pod.containers {
        add(&mut total, &requests(c));
    }
    let mut sidecars = BTreeMap::new();
    let mut init_max: BTreeMap<u64, i128> = BTreeMap::new();
    for c in &pod.init_containers {
        let own = requests(c);
        let candidate = if c.restartable {
            add(&mut total, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut t = own;
            add(&mut t, &sidecars);
            t
        };
        for (k, v) in candidate {
            let e = init_max.entry(k).or_insert(v);
            *e = (*e).max(v);
        }
    }
    for (k, v) in init_max {
        let e = total.entry(k).or_insert(v);
        *e = (*e).max(v);
    }
    // Pod-level `spec.resources` (PodLevelResources; `pod` is the pod as
    // the kubelet sees it, so only from 1.34): a `hugepages-<size>` the pod
    // requests replaces the containers' sum for that size, as every
    // pod-level resource does in `PodRequests` (`applyPodLevelResources`;
    // `IsSupportedPodLevelResource` accepts the `hugepages-` prefix). A
    // pod-level limit without a request stands for the request (hugepage
    // requests equal their limits).
    if let Some(pl) = &pod.pod_resources {
        let mut own = pl.limits.clone();
        own.extend(pl.requests.clone());
        for (size, v) in hugepages_of(&own) {
            total.insert(size, v);
        }
    }
    add(&mut total, &hugepages_of(&pod.overhead));
    total
        .into_iter()
        .map(|(k, v)| (k, Quantity::from_nanos(v).value_ceil()))
        .collect()
}

/// The hugetlb limits to write on a cgroup: for every page size the node
/// offers (`node_sizes`, bytes), the requested bytes or 0. Sizes the node
/// does not offer are left out (the kernel has no file for them).
pub(crate) fn limits(requested: &BTreeMap<u64, i64>, node_sizes: &[u64]) -> Vec<(String, i64)> {
    let mut sizes: Vec<u64> = node_sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .filter_map(|s| {
            let name = unit_size_name(s).ok()?;
            Some((name, requested.get(&s).copied().unwrap_or(0)))
        })
        .collect()
}

/// The API server's checks of a container's hugepage resources: the size
/// must parse, and a request must equal the limit. `Err` names the field.
pub fn validate(
    requests: &ResourceList,
    limits: &ResourceList,
) -> Result<(), (&'static str, String, String)> {
    for (kind, list) in [("requests", requests), ("limits", limits)] {
        for name in list.keys() {
            if let Some(Err(e)) = page_size_of(name) {
                return Err((kind, name.clone(), e));
            }
        }
    }
    for (name, req) in requests {
        if page_size_of(name).is_none() {
            continue;
        }
        if let Some(lim) = limits.get(name) {
            if req != lim {
                return Err((
                    "requests",
                    name.clone(),
                    format!("hugepages request {req} must equal the limit {lim}"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::resources::tests::container;

    const MI: u64 = 1 << 20;
    const GI: u64 = 1 << 30;

    #[test]
    fn size_names() {
        // After the kubelet's TestHugePageUnitSizeFromByteSize table.
        for (bytes, name) in [
            (1024, "1KB"),
            (33554432, "32MB"),
            (1073741824, "1GB"),
            (2 * MI, "2MB"),
            (64 * 1024, "64KB"),
            (16 * GI, "16GB"),
        ] {
            assert_eq!(unit_size_name(bytes).as_deref(), Ok(name), "{bytes}");
        }
        assert!(unit_size_name(1023 * 1025).is_err());
        assert!(unit_size_name(0).is_err());
        for (res, size) in [
            ("hugepages-2Mi", 2 * MI),
            ("hugepages-1Gi", GI),
            ("hugepages-64Ki", 65536),
        ] {
            assert_eq!(page_size_of(res), Some(Ok(size)), "{res}");
        }
        assert_eq!(page_size_of("memory"), None);
        assert!(page_size_of("hugepages-x").unwrap().is_err());
        assert!(page_size_of("hugepages-0").unwrap().is_err());
    }

    fn pod(
        cs: Vec<crate::core::model::Container>,
        init: Vec<crate::core::model::Container>,
    ) -> Pod {
        let mut p = Pod::new("u", "ns", "p");
        p.containers = cs;
        p.init_containers = init;
        p
    }

    /// After the kubelet's TestResourceConfigForPod hugepage cases
    /// (HugePageLimit from requests, summed over containers, per size).
    #[test]
    fn pod_requests_table() {
        let p = pod(
            vec![
                container(
                    "a",
                    "cpu=1,memory=1Gi,hugepages-2Mi=4Mi",
                    "cpu=1,memory=1Gi,hugepages-2Mi=4Mi",
                ),
                container(
                    "b",
                    "memory=1Gi,hugepages-2Mi=2Mi,hugepages-1Gi=1Gi",
                    "hugepages-2Mi=2Mi,hugepages-1Gi=1Gi",
                ),
            ],
            vec![container(
                "init",
                "hugepages-2Mi=10Mi",
                "hugepages-2Mi=10Mi",
            )],
        );
        let r = pod_hugepage_requests(&p);
        assert_eq!(r.get(&(2 * MI)), Some(&((10 * MI) as i64)), "init max wins");
        assert_eq!(r.get(&GI), Some(&(GI as i64)));
        assert_eq!(
            limits(&r, &[GI, 2 * MI, 2 * MI]),
            vec![
                ("2MB".to_string(), (10 * MI) as i64),
                ("1GB".to_string(), GI as i64)
            ]
        );
        // Nothing requested: 0 for every size the node offers.
        let none = pod(vec![container("c", "cpu=1", "")], vec![]);
        assert_eq!(
            limits(&pod_hugepage_requests(&none), &[2 * MI, GI]),
            vec![("2MB".to_string(), 0), ("1GB".to_string(), 0)]
        );
        // A size the node does not offer is left out.
        assert_eq!(
            limits(&r, &[2 * MI]),
            vec![("2MB".to_string(), (10 * MI) as i64)]
        );
        assert_eq!(limits(&r, &[]), vec![]);
    }

    /// Pod-level hugepages (PodLevelResources): the pod's own request per
    /// size replaces the containers' sum (`PodRequests` →
    /// `applyPodLevelResources`, then `HugePageLimits`); sizes the pod does
    /// not name keep the containers' sum; overhead is added after.
    #[test]
    fn pod_level_hugepages_table() {
        use crate::core::model::ResourceRequirements;
        let level = |req: &str, lim: &str| {
            let c = container("x", req, lim);
            Some(ResourceRequirements {
                requests: c.resources.requests,
                limits: c.resources.limits,
            })
        };
        struct Row {
            name: &'static str,
            containers: Vec<crate::core::model::Container>,
            pod_level: Option<ResourceRequirements>,
            want: Vec<(u64, i64)>,
        }
        let rows = vec![
            Row {
                name: "pod-level only, containers request none",
                containers: vec![container("a", "cpu=1", "")],
                pod_level: level("hugepages-2Mi=6Mi", "hugepages-2Mi=6Mi"),
                want: vec![(2 * MI, (6 * MI) as i64)],
            },
            Row {
                name: "pod-level replaces the containers' sum",
                containers: vec![
                    container("a", "hugepages-2Mi=2Mi", "hugepages-2Mi=2Mi"),
                    container("b", "hugepages-2Mi=2Mi", "hugepages-2Mi=2Mi"),
                ],
                pod_level: level("hugepages-2Mi=10Mi", "hugepages-2Mi=10Mi"),
                want: vec![(2 * MI, (10 * MI) as i64)],
            },
            Row {
                name: "a size the pod does not name keeps the containers' sum",
                containers: vec![container("a", "hugepages-1Gi=1Gi", "hugepages-1Gi=1Gi")],
                pod_level: level("cpu=1,hugepages-2Mi=4Mi", "hugepages-2Mi=4Mi"),
                want: vec![(2 * MI, (4 * MI) as i64), (GI, GI as i64)],
            },
            Row {
                name: "a pod-level limit alone stands for the request",
                containers: vec![container("a", "", "")],
                pod_level: level("", "hugepages-1Gi=2Gi"),
                want: vec![(GI, (2 * GI) as i64)],
            },
            Row {
                name: "pod-level cpu/memory only: containers' hugepages summed",
                containers: vec![
                    container("a", "hugepages-2Mi=2Mi", "hugepages-2Mi=2Mi"),
                    container("b", "hugepages-2Mi=4Mi", "hugepages-2Mi=4Mi"),
                ],
                pod_level: level("cpu=1,memory=1Gi", "memory=2Gi"),
                want: vec![(2 * MI, (6 * MI) as i64)],
            },
        ];
        for row in rows {
            let mut p = pod(row.containers, vec![]);
            p.pod_resources = row.pod_level;
            let got: Vec<(u64, i64)> = pod_hugepage_requests(&p).into_iter().collect();
            assert_eq!(got, row.want, "{}", row.name);
        }
        // Overhead is added to the pod-level value.
        let mut p = pod(vec![container("a", "", "")], vec![]);
        p.pod_resources = level("hugepages-2Mi=4Mi", "hugepages-2Mi=4Mi");
        p.overhead = container("o", "hugepages-2Mi=2Mi", "").resources.requests;
        assert_eq!(
            pod_hugepage_requests(&p).get(&(2 * MI)),
            Some(&((6 * MI) as i64))
        );
    }

    #[test]
    fn validation() {
        let c = container("c", "hugepages-2Mi=4Mi", "hugepages-2Mi=6Mi");
        let e = validate(&c.resources.requests, &c.resources.limits).unwrap_err();
        assert!(
            e.2.contains("must equal") && e.1 == "hugepages-2Mi",
            "{e:?}"
        );
        let c = container("c", "hugepages-3x=4Mi", "");
        assert!(validate(&c.resources.requests, &c.resources.limits).is_err());
        let c = container("c", "hugepages-2Mi=4Mi,cpu=1", "hugepages-2Mi=4Mi,cpu=2");
        assert!(validate(&c.resources.requests, &c.resources.limits).is_ok());
    }
}
