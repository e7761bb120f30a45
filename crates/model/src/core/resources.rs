//! Effective pod requests/limits, summed the way the kubelet does
//! (k8s.io/component-helpers/resource `PodRequests` / `PodLimits`, with the
//! sidecar rules of KEP-753, pod-level resources of KEP-2837 and RuntimeClass
//! overhead), and the per-container "defaulted request" rule of the API server.
//!
//! Sums are exact (nano-units) and rounded up once at the end, like
//! `Quantity.MilliValue()` / `Value()` on the summed quantity.

use crate::core::model::{Container, Pod, ResourceList, ResourceRequirements};
use crate::core::quantity::Quantity;

/// The `cpu` resource name.
pub const CPU: &str = "cpu";
/// The `memory` resource name.
pub const MEMORY: &str = "memory";
pub(crate) const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// A pod's effective resources, as the kubelet sums them: requests =
/// max(sum of app containers (+ restartable sidecars), largest init
/// container) + overhead; a limit is `None` unless every container has one
/// (or pod-level resources say so).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodResources {
    pub(crate) cpu_request_millis: i64,
    pub(crate) cpu_limit_millis: Option<i64>,
    /// Memory request, bytes (the summed requests, rounded up).
    pub memory_request_bytes: i64,
    pub(crate) memory_limit_bytes: Option<i64>,
    /// `ephemeral-storage` request, bytes.
    pub ephemeral_storage_request_bytes: i64,
    pub(crate) ephemeral_storage_limit_bytes: Option<i64>,
}

/// A container's request for `name`, defaulted to its limit when unset (the
/// API server's defaulting; manifests loaded by qosd are already defaulted,
/// this keeps hand-built pods consistent).
pub(crate) fn container_request<'a>(
    res: &'a ResourceRequirements,
    name: &str,
) -> Option<&'a Quantity> {
    res.requests.get(name).or_else(|| res.limits.get(name))
}

/// A container's limit for `name`.
pub(crate) fn container_limit<'a>(
    res: &'a ResourceRequirements,
    name: &str,
) -> Option<&'a Quantity> {
    res.limits.get(name)
}

/// True when pod-level `spec.resources` sets cpu or memory (requests or
/// limits): `IsPodLevelResourcesSet`.
pub(crate) fn pod_level_resources_set(pod: &Pod) -> bool {
    pod.pod_resources.as_ref().is_some_and(|r| {
        [CPU, MEMORY]
            .iter()
            .any(|n| r.requests.contains_key(*n) || r.limits.contains_key(*n))
    })
}

const NAMES: [&str; 3] = [CPU, MEMORY, EPHEMERAL_STORAGE];

/// Per-resource exact sums (nanos); `None` = absent from the list.
type Sums = [Option<i128>; 3];

fn add(into: &mut Sums, other: &Sums) {
    for i in 0..3 {
        if let Some(v) = other[i] {
            into[i] = Some(into[i].unwrap_or(0) + v);
        }
    }
}

fn max_into(into: &mut Sums, other: &Sums) {
    for i in 0..3 {
        if let Some(v) = other[i] {
            if into[i].is_none_or(|cur| v > cur) {
                into[i] = Some(v);
            }
        }
    }
}

fn requests_of(c: &Container) -> Sums {
    NAMES.map(|n| container_request(&c.resources, n).map(Quantity::nanos))
}

fn limits_of(c: &Container) -> Sums {
    NAMES.map(|n| container_limit(&c.resources, n).map(Quantity::nanos))
}

fn list_sums(list: &ResourceList) -> Sums {
    NAMES.map(|n| list.get(n).map(Quantity::nanos))
}

/// Sum over app containers, then the init-container rule:
/// restartable sidecars add to the running sum; a regular init container
/// needs its own amount plus the sidecars started before it; the pod needs
/// the max of the two. `each` sees every app container's and every init
/// container's (cumulative) list, like the kubelet's `ContainerFn`.
fn aggregate(pod: &Pod, of: fn(&Container) -> Sums, mut each: impl FnMut(&Sums)) -> Sums {
    let mut total: Sums = [None; 3];
    for c in &pod.containers {
        let s = of(c);
        each(&s);
        add(&mut total, &s);
    }
    let mut sidecars: Sums = [None; 3];
    let mut init_max: Sums = [None; 3];
    for c in &pod.init_containers {
        let own = of(c);
        let candidate = if c.restartable {
            add(&mut total, &own);
            add(&mut sidecars, &own);
            sidecars
        } else {
            let mut tmp = own;
            add(&mut tmp, &sidecars);
            tmp
        };
        each(&candidate);
        max_into(&mut init_max, &candidate);
    }
    max_into(&mut total, &init_max);
    total
}

/// ceil(n / d), saturating to i64 (what `Quantity::milli_ceil`/`value_ceil` do).
fn ceil_to(n: i128, d: i128) -> i64 {
    let q = n.div_euclid(d) + i128::from(n.rem_euclid(d) != 0);
    q.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Container-level aggregate request of `name` (app + sidecar + init rule),
/// without pod-level resources and overhead; `None` when no container
/// requests it. Used for the API server's pod-level request defaulting.
pub fn aggregate_container_request(pod: &Pod, name: &str) -> Option<Quantity> {
    let i = NAMES.iter().position(|n| *n == name)?;
    aggregate(pod, requests_of, |_| {})[i].map(Quantity::from_nanos)
}

/// `PodLimits(pod, {})[name]` (nanos) as the kubelet's local-storage
/// eviction takes it: the containers' aggregate (sidecars add up, an init
/// container counts with the sidecars started before it, the larger of
/// the two), plus the overhead when non-zero; `None` when no container has
/// that limit. Pod-level `spec.resources` carry only cpu and memory.
pub(crate) fn pod_limit_nanos(pod: &Pod, name: &str) -> Option<i128> {
    let i = NAMES.iter().position(|n| *n == name)?;
    let l = aggregate(pod, limits_of, |_| {})[i]?;
    let overhead = list_sums(&pod.overhead)[i].unwrap_or(0);
    Some(if l != 0 { l + overhead } else { l })
}

fn milli(n: i128) -> i64 {
    ceil_to(n, 1_000_000)
}

fn value(n: i128) -> i64 {
    ceil_to(n, 1_000_000_000)
}

/// The pod's effective resources (`PodRequests`/`PodLimits` with overhead,
/// plus the "limits declared by every container" flags of
/// `ResourceConfigForPod`), by the newest kubelet's rules.
pub fn pod_resources(pod: &Pod) -> PodResources {
    pod_resources_with(pod, true)
}

/// [`pod_resources`] with the "limits declared" rule chosen: with
/// `own_limits` (kubelet 1.36, `own-limit-declared`) every container must
/// have its own non-zero limit; without (≤ 1.35) an init container counts
/// together with the sidecars started before it.
pub(crate) fn pod_resources_with(pod: &Pod, own_limits: bool) -> PodResources {
    let pod_level = pod
        .pod_resources
        .as_ref()
        .filter(|_| pod_level_resources_set(pod));
    let overhead = list_sums(&pod.overhead);

    // Requests.
    let mut reqs = aggregate(pod, requests_of, |_| {});
    if let Some(pl) = pod_level {
        for (i, n) in NAMES.iter().enumerate().take(2) {
            if let Some(q) = container_request(pl, n) {
                reqs[i] = Some(q.nanos());
            }
        }
    }
    add(&mut reqs, &overhead);

    // Limits.
    let mut declared = [true; 3];
    let mut lims = aggregate(pod, limits_of, |s| {
        for i in 0..3 {
            if s[i].unwrap_or(0) == 0 {
                declared[i] = false;
            }
        }
    });
    if own_limits {
        declared = [true; 3];
        for c in pod.containers.iter().chain(&pod.init_containers) {
            let own = limits_of(c);
            for i in 0..3 {
                if own[i].unwrap_or(0) == 0 {
                    declared[i] = false;
                }
            }
        }
    }
    if let Some(pl) = pod_level {
        for (i, n) in NAMES.iter().enumerate().take(2) {
            if let Some(q) = pl.limits.get(*n) {
                lims[i] = Some(q.nanos());
                if !q.is_zero() {
                    declared[i] = true;
                }
            }
        }
    }
    for i in 0..3 {
        if let (Some(l), Some(o)) = (lims[i], overhead[i]) {
            if l != 0 {
                lims[i] = Some(l + o);
            }
        }
    }
    let limit = |i: usize, conv: fn(i128) -> i64| -> Option<i64> {
        match lims[i] {
            Some(l) if declared[i] && l > 0 => Some(conv(l)),
            _ => None,
        }
    };
    PodResources {
        cpu_request_millis: milli(reqs[0].unwrap_or(0)),
        cpu_limit_millis: limit(0, milli),
        memory_request_bytes: value(reqs[1].unwrap_or(0)),
        memory_limit_bytes: limit(1, value),
        ephemeral_storage_request_bytes: value(reqs[2].unwrap_or(0)),
        ephemeral_storage_limit_bytes: limit(2, value),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    /// A container with `requests` and `limits` given as "cpu=..,memory=.." strings.
    pub(crate) fn container(name: &str, requests: &str, limits: &str) -> Container {
        let parse = |s: &str| -> ResourceList {
            s.split(',')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap();
                    (k.to_string(), q(v))
                })
                .collect()
        };
        Container {
            name: name.to_string(),
            resources: ResourceRequirements {
                requests: parse(requests),
                limits: parse(limits),
            },
            restartable: false,
        }
    }

    fn sidecar(name: &str, requests: &str, limits: &str) -> Container {
        Container {
            restartable: true,
            ..container(name, requests, limits)
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        let mut p = Pod::new("u", "ns", "p");
        p.containers = containers;
        p.init_containers = init;
        p
    }

    #[test]
    fn frontend_sums() {
        let c = |n| container(n, "cpu=250m,memory=64Mi", "cpu=500m,memory=128Mi");
        let r = pod_resources(&pod(vec![c("app"), c("log")], vec![]));
        assert_eq!(r.cpu_request_millis, 500);
        assert_eq!(r.cpu_limit_millis, Some(1000));
        assert_eq!(r.memory_request_bytes, 128 << 20);
        assert_eq!(r.memory_limit_bytes, Some(256 << 20));
    }

    #[test]
    fn limits_only_when_every_container_has_one() {
        let r = pod_resources(&pod(
            vec![
                container("a", "cpu=100m", "cpu=200m,memory=1Gi"),
                container("b", "memory=10Mi", ""),
            ],
            vec![],
        ));
        assert_eq!(r.cpu_request_millis, 100);
        assert_eq!(r.cpu_limit_millis, None);
        assert_eq!(r.memory_limit_bytes, None);
        assert_eq!(r.memory_request_bytes, (1 << 30) + (10 << 20));
    }

    #[test]
    fn init_containers_take_the_max() {
        let r = pod_resources(&pod(
            vec![container(
                "app",
                "cpu=500m,memory=100Mi",
                "cpu=500m,memory=100Mi",
            )],
            vec![container("init", "cpu=2,memory=50Mi", "cpu=2,memory=50Mi")],
        ));
        assert_eq!(r.cpu_request_millis, 2000);
        assert_eq!(r.memory_request_bytes, 100 << 20);
        assert_eq!(r.cpu_limit_millis, Some(2000));
        assert_eq!(r.memory_limit_bytes, Some(100 << 20));
    }

    #[test]
    fn sidecars_add_to_the_running_sum() {
        // sidecar 100m starts first, then init 1 (1 cpu) needs 1 + 0.1,
        // app 500m runs beside the sidecar: max(0.5 + 0.1, 1.1) = 1.1
        let r = pod_resources(&pod(
            vec![container("app", "cpu=500m", "")],
            vec![
                sidecar("proxy", "cpu=100m", ""),
                container("init", "cpu=1", ""),
            ],
        ));
        assert_eq!(r.cpu_request_millis, 1100);
        let r = pod_resources(&pod(
            vec![container("app", "cpu=2", "")],
            vec![
                sidecar("proxy", "cpu=100m", ""),
                container("init", "cpu=1", ""),
            ],
        ));
        assert_eq!(r.cpu_request_millis, 2100);
    }

    #[test]
    fn overhead_adds_to_requests_and_non_zero_limits() {
        let mut p = pod(vec![container("a", "cpu=1,memory=1Gi", "cpu=1")], vec![]);
        p.overhead = [
            ("cpu".to_string(), q("250m")),
            ("memory".to_string(), q("120Mi")),
        ]
        .into_iter()
        .collect();
        let r = pod_resources(&p);
        assert_eq!(r.cpu_request_millis, 1250);
        assert_eq!(r.cpu_limit_millis, Some(1250));
        assert_eq!(r.memory_request_bytes, (1 << 30) + (120 << 20));
        assert_eq!(r.memory_limit_bytes, None);
    }

    #[test]
    fn pod_level_resources_replace_container_sums() {
        let mut p = pod(
            vec![container("a", "cpu=100m", ""), container("b", "", "")],
            vec![],
        );
        p.pod_resources = Some(ResourceRequirements {
            requests: ResourceList::new(),
            limits: [
                ("cpu".to_string(), q("1")),
                ("memory".to_string(), q("512Mi")),
            ]
            .into_iter()
            .collect(),
        });
        let r = pod_resources(&p);
        assert_eq!(r.cpu_request_millis, 1000);
        assert_eq!(r.cpu_limit_millis, Some(1000));
        assert_eq!(r.memory_request_bytes, 512 << 20);
        assert_eq!(r.memory_limit_bytes, Some(512 << 20));
    }

    /// A sidecar's limit stands in for an init container without one up to
    /// kubelet 1.35 (`ContainerFn` sees the cumulative list); from 1.36 every
    /// container needs its own (`own-limit-declared`). After the kubelet's
    /// "burstable-partial-limits-with-init-containers" case (no limit on one
    /// container: nothing declared under either rule).
    #[test]
    fn declared_limits_by_rule() {
        let p = pod(
            vec![container(
                "app",
                "cpu=100m,memory=64Mi",
                "cpu=1,memory=128Mi",
            )],
            vec![
                sidecar("proxy", "cpu=100m,memory=64Mi", "cpu=200m,memory=128Mi"),
                container("init", "cpu=50m,memory=16Mi", ""),
            ],
        );
        let old = pod_resources_with(&p, false);
        assert_eq!(old.cpu_limit_millis, Some(1200));
        assert_eq!(old.memory_limit_bytes, Some(256 << 20));
        let new = pod_resources_with(&p, true);
        assert_eq!(new.cpu_limit_millis, None);
        assert_eq!(new.memory_limit_bytes, None);
        assert_eq!(new.cpu_request_millis, old.cpu_request_millis);
        let partial = pod(
            vec![
                container("a", "cpu=100m,memory=100Mi", "cpu=100m,memory=100Mi"),
                container("b", "cpu=100m,memory=100Mi", ""),
            ],
            vec![
                container("i1", "cpu=100m,memory=100Mi", "cpu=100m,memory=100Mi"),
                container("i2", "cpu=100m,memory=100Mi", ""),
            ],
        );
        for own in [false, true] {
            let r = pod_resources_with(&partial, own);
            assert_eq!(
                (r.cpu_limit_millis, r.memory_limit_bytes),
                (None, None),
                "{own}"
            );
            assert_eq!(r.cpu_request_millis, 200);
        }
        assert_eq!(pod_resources(&p), new, "the default is the newest rule");
    }

    #[test]
    fn sub_millicore_sums_round_once() {
        let r = pod_resources(&pod(
            vec![
                container("a", "cpu=0.0001", ""),
                container("b", "cpu=0.0001", ""),
            ],
            vec![],
        ));
        assert_eq!(r.cpu_request_millis, 1);
    }

    #[test]
    fn empty_pod_is_zero() {
        let r = pod_resources(&pod(vec![container("a", "", "")], vec![]));
        assert_eq!(r, PodResources::default());
    }
}
