//! `oom_score_adj` of each container, as the kubelet computes it
//! (pkg/kubelet/qos/policy.go `GetContainerOOMScoreAdjust`, kubelets
//! 1.33–1.36; called from kuberuntime_container_linux.go
//! `generateLinuxContainerResources` with the machine's memory capacity).
//!
//! 1. A node-critical pod (static, mirror or priority ≥ 2 000 000 000, *and*
//!    `priorityClassName: system-node-critical`) gets −997 whatever its class.
//! 2. Guaranteed −997, BestEffort 1000.
//! 3. Burstable: `1000 − 1000 × memoryRequest / memoryCapacity` (integer
//!    division). With pod-level requests (`PodLevelResources`, from 1.34)
//!    the request is the container's plus an equal share of what the pod
//!    requests beyond its containers: `(podRequest − aggregateContainer
//!    Requests) / (containers + initContainers)`.
//! 4. A restartable init container (sidecar) never gets more than the
//!    regular container with the smallest memory request (plus the same
//!    share) would get.
//! 5. Clamps: below 3 (1000 + −997) → 3; exactly 1000 → 999. A Burstable
//!    container is thus always in [3, 999].
//!
//! Pure: no I/O. The pod passed in is the one the plan uses (pod-level
//! resources already dropped before 1.34, see
//! [`crate::policy::enforce::plan::PlanConfig`]).

use serde::Serialize;

use crate::core::model::{Container, Pod, QosClass, SYSTEM_CRITICAL_PRIORITY};
use crate::core::resources::{aggregate_container_request, CPU, MEMORY};

/// kubelet `guaranteedOOMScoreAdj`.
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// kubelet `besteffortOOMScoreAdj`.
pub(crate) const BESTEFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// The priority class whose critical pods get the Guaranteed value.
pub(crate) const SYSTEM_NODE_CRITICAL: &str = "system-node-critical";

/// One container's value in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerOomScoreAdj {
    /// The container's name.
    pub name: String,
    /// `true` for `spec.initContainers` entries (sidecars included).
    pub init: bool,
    /// The `oom_score_adj` the kubelet gives its processes (-1000..=1000).
    pub oom_score_adj: i64,
}

/// kubelet `IsCriticalPod`: static, mirror, or priority ≥ system-critical.
pub(crate) fn is_critical_pod(pod: &Pod) -> bool {
    pod.is_static_or_mirror() || pod.priority >= SYSTEM_CRITICAL_PRIORITY
}

/// kubelet `IsNodeCriticalPod`: critical and in `system-node-critical`.
pub(crate) fn is_node_critical_pod(pod: &Pod) -> bool {
    is_critical_pod(pod) && pod.priority_class_name.as_deref() == Some(SYSTEM_NODE_CRITICAL)
}

/// `Requests.Memory().Value()`: the request as written (0 when absent).
fn memory_request_bytes(c: &Container) -> i128 {
    c.resources
        .requests
        .get(MEMORY)
        .map_or(0, |q| i128::from(q.value_ceil()))
}

/// `IsPodLevelRequestsSet`: pod-level requests name cpu or memory.
fn pod_level_requests_set(pod: &Pod) -> bool {
    pod.pod_resources
        .as_ref()
        .is_some_and(|r| r.requests.contains_key(CPU) || r.requests.contains_key(MEMORY))
}

/// kubelet `remainingPodMemReqPerContainer`: the pod-level memory request
/// beyond the containers' aggregate, split over every container (app and
/// init, sidecars or not); 0 without a pod-level memory request.
fn remaining_pod_memory_per_container(pod: &Pod) -> i128 {
    let Some(pod_req) = pod
        .pod_resources
        .as_ref()
        .and_then(|r| r.requests.get(MEMORY))
        .filter(|q| q.nanos() != 0)
    else {
        return 0;
    };
    let n = (pod.containers.len() + pod.init_containers.len()) as i128;
    if n == 0 {
        return 0;
    }
    let aggregate = aggregate_container_request(pod, MEMORY).map_or(0, |q| q.value_ceil());
    let remaining = i128::from(pod_req.value_ceil()) - i128::from(aggregate);
    // Go's integer division truncates toward zero, like Rust's.
    remaining / n
}

/// `1000 − 1000 × request / capacity` in Go's int64 arithmetic
/// (truncating division; the product cannot overflow in i128).
fn burstable_formula(request: i128, capacity: i128) -> i128 {
    1000 - (1000 * request) / capacity
}

/// The kubelet's `oom_score_adj` for `container` of `pod` (class `class`,
/// the pod's QoS class) on a machine with `memory_capacity_bytes` of RAM.
/// A capacity ≤ 0 (never on a real node; the kubelet would divide by zero)
/// is taken as 1 byte.
pub(crate) fn container_oom_score_adj(
    pod: &Pod,
    class: QosClass,
    container: &Container,
    memory_capacity_bytes: i64,
) -> i64 {
    if is_node_critical_pod(pod) {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    match class {
        QosClass::Guaranteed => return GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => return BESTEFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {}
    }
    let capacity = i128::from(memory_capacity_bytes.max(1));
    let share = if pod_level_requests_set(pod) {
        remaining_pod_memory_per_container(pod)
    } else {
        0
    };
    let mut adj = burstable_formula(memory_request_bytes(container) + share, capacity);
    let is_sidecar = container.restartable
        && pod
            .init_containers
            .iter()
            .any(|c| c.name == container.name && c.restartable);
    if is_sidecar {
        // `minRegularContainerMemory`: the smallest request among the app
        // containers (0 for one without a memory request).
        let min_regular = pod
            .containers
            .iter()
            .map(memory_request_bytes)
            .min()
            .unwrap_or(0);
        let min_adj = burstable_formula(min_regular + share, capacity);
        if adj > min_adj {
            adj = min_adj;
        }
    }
    let floor = i128::from(1000 + GUARANTEED_OOM_SCORE_ADJ);
    if adj < floor {
        return floor as i64;
    }
    if adj == i128::from(BESTEFFORT_OOM_SCORE_ADJ) {
        return BESTEFFORT_OOM_SCORE_ADJ - 1;
    }
    adj as i64
}

/// Every container's value, app containers first, then init containers
/// (the order of the pod spec).
pub(crate) fn pod_oom_score_adjs(
    pod: &Pod,
    class: QosClass,
    memory_capacity_bytes: i64,
) -> Vec<ContainerOomScoreAdj> {
    let one = |c: &Container, init: bool| ContainerOomScoreAdj {
        name: c.name.clone(),
        init,
        oom_score_adj: container_oom_score_adj(pod, class, c, memory_capacity_bytes),
    };
    pod.containers
        .iter()
        .map(|c| one(c, false))
        .chain(pod.init_containers.iter().map(|c| one(c, true)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{ResourceRequirements, ANNOTATION_MIRROR, ANNOTATION_SOURCE};
    use crate::core::qos::classify;
    use crate::core::quantity::Quantity;
    use crate::core::resources::tests::container;

    fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        let mut p = Pod::new("u", "ns", "p");
        p.containers = containers;
        p.init_containers = init;
        p
    }

    fn sidecar(name: &str, requests: &str, limits: &str) -> Container {
        Container {
            restartable: true,
            ..container(name, requests, limits)
        }
    }

    fn adj(p: &Pod, i: usize, capacity: i64) -> i64 {
        let class = classify(p).class;
        container_oom_score_adj(p, class, &p.containers[i], capacity)
    }

    /// Kubernetes' own table (pkg/kubelet/qos/policy_test.go
    /// `TestGetContainerOOMScoreAdjust`): pod, capacity, [low, high].
    #[test]
    fn kubernetes_policy_test_rows() {
        const STANDARD: i64 = 8_000_000_000;
        let mut critical = pod(vec![container("c", "", "")], vec![]);
        critical.priority = SYSTEM_CRITICAL_PRIORITY;
        critical.priority_class_name = Some(SYSTEM_NODE_CRITICAL.into());
        let mut cluster_critical = pod(vec![container("c", "", "")], vec![]);
        cluster_critical.priority = SYSTEM_CRITICAL_PRIORITY;
        cluster_critical.priority_class_name = Some("system-cluster-critical".into());
        let rows: Vec<(&str, Pod, i64, i64, i64)> = vec![
            (
                "cpuLimit",
                pod(vec![container("c", "", "cpu=10")], vec![]),
                4_000_000_000,
                999,
                999,
            ),
            (
                "memoryLimitCPURequest",
                pod(vec![container("c", "cpu=0", "memory=10G")], vec![]),
                STANDARD,
                999,
                999,
            ),
            (
                "zeroMemoryLimit",
                pod(vec![container("c", "", "memory=0")], vec![]),
                7_230_457_451,
                1000,
                1000,
            ),
            (
                "noRequestLimit",
                pod(vec![container("c", "", "")], vec![]),
                4_000_000_000,
                1000,
                1000,
            ),
            (
                "equalRequestLimitCPUMemory",
                pod(
                    vec![container("c", "memory=10G,cpu=5m", "cpu=5m,memory=10G")],
                    vec![],
                ),
                123_456_789,
                -997,
                -997,
            ),
            (
                "cpuUnlimitedMemoryLimitedWithRequests",
                pod(
                    vec![container("c", "memory=4000000000,cpu=5m", "memory=10G")],
                    vec![],
                ),
                STANDARD,
                495,
                505,
            ),
            (
                "requestNoLimit",
                pod(vec![container("c", "memory=7999999999,cpu=5m", "")], vec![]),
                STANDARD,
                3,
                3,
            ),
            ("node-critical", critical, 4_000_000_000, -997, -997),
            (
                "cluster-critical",
                cluster_critical,
                4_000_000_000,
                1000,
                1000,
            ),
        ];
        for (name, p, cap, lo, hi) in rows {
            let got = adj(&p, 0, cap);
            assert!(
                (lo..=hi).contains(&got),
                "{name}: {got} not in [{lo}, {hi}]"
            );
        }
    }

    /// Test name, pod, capacity, container → [low, high].
    type Row<'a> = (&'a str, Pod, i64, Vec<(&'a str, i64, i64)>);

    /// Kubernetes' 1.33–1.36 table (policy_test.go with the sidecar and
    /// `PodLevelResources` rows): pod, capacity, container → [low, high].
    #[test]
    fn kubernetes_policy_test_sidecar_and_pod_level_rows() {
        const STD: i64 = 8_000_000_000;
        let req = STD / 8; // sampleDefaultMemRequest
        let lim = 1000 + STD / 8; // sampleDefaultMemLimit
        let pod_req = STD / 4; // sampleDefaultPodMemRequest
        let pod_lim = 1000 + STD / 4; // sampleDefaultPodMemLimit
        let mem = |r: i64, l: i64| (format!("memory={r}"), format!("memory={l}"));
        let (r, l) = mem(req, lim);
        let main = container("main-1", &r, &l);
        let init = container("init-container", &r, &l);
        let side = sidecar("sidecar-container", &r, &l);
        let small = sidecar(
            "sidecar-small-container",
            &format!("memory={}", STD / 20),
            &l,
        );
        let big = sidecar("sidecar-big-container", &format!("memory={}", STD / 2), &l);
        let pod_level = |p: &mut Pod, limit: i64| {
            p.pod_resources = Some(ResourceRequirements {
                requests: [
                    ("cpu".to_string(), Quantity::parse("5m").unwrap()),
                    (
                        "memory".to_string(),
                        Quantity::parse(&pod_req.to_string()).unwrap(),
                    ),
                ]
                .into(),
                limits: [
                    ("cpu".to_string(), Quantity::parse("5m").unwrap()),
                    (
                        "memory".to_string(),
                        Quantity::parse(&limit.to_string()).unwrap(),
                    ),
                ]
                .into(),
            });
        };
        let with = |mut p: Pod, limit: i64| {
            pod_level(&mut p, limit);
            p
        };
        let g = |n: &str, m: i64| {
            container(
                n,
                &format!("cpu=5m,memory={m}"),
                &format!("cpu=5m,memory={m}"),
            )
        };
        let b = |n: &str, m: &str, l: i64| {
            container(
                n,
                &format!("cpu=3m,memory={m}"),
                &format!("cpu=5m,memory={l}"),
            )
        };
        let rows: Vec<Row> = vec![
            (
                "burstable-unique-container-pod",
                pod(
                    vec![container("burstable-unique-container", &r, &l)],
                    vec![],
                ),
                STD,
                vec![("burstable-unique-container", 875, 880)],
            ),
            (
                "burstable-mixed-unique-main-container-pod",
                pod(vec![main.clone()], vec![init.clone()]),
                STD,
                vec![("init-container", 875, 880), ("main-1", 875, 880)],
            ),
            (
                "burstable-mixed-multi-container-small-sidecar-pod",
                pod(vec![main.clone()], vec![init.clone(), small]),
                STD,
                vec![
                    ("init-container", 875, 880),
                    ("sidecar-small-container", 875, 875),
                    ("main-1", 875, 875),
                ],
            ),
            (
                "burstable-mixed-multi-container-sample-request-pod",
                pod(vec![main.clone()], vec![init.clone(), side]),
                STD,
                vec![
                    ("init-container", 875, 880),
                    ("sidecar-container", 875, 875),
                    ("main-1", 875, 875),
                ],
            ),
            (
                "burstable-mixed-multi-container-big-sidecar-container-pod",
                pod(vec![main.clone()], vec![init.clone(), big]),
                STD,
                vec![
                    ("init-container", 875, 880),
                    ("sidecar-big-container", 500, 500),
                    ("main-1", 875, 875),
                ],
            ),
            (
                "guaranteed-pod-resources-no-container-resources",
                with(
                    pod(
                        vec![container("n1", "", ""), container("n2", "", "")],
                        vec![],
                    ),
                    pod_req,
                ),
                4_000_000_000,
                vec![("n1", -997, -997), ("n2", -997, -997)],
            ),
            (
                "guaranteed-pod-resources-equal-container-resources",
                with(pod(vec![g("g1", req), g("g2", req)], vec![]), pod_req),
                4_000_000_000,
                vec![("g1", -997, -997), ("g2", -997, -997)],
            ),
            (
                "guaranteed-pod-resources-unequal-container-requests",
                with(
                    pod(
                        vec![b("b", &req.to_string(), lim), container("be", "", "")],
                        vec![],
                    ),
                    pod_req,
                ),
                4_000_000_000,
                vec![("b", -997, -997), ("be", -997, -997)],
            ),
            (
                "burstable-pod-resources-no-container-resources",
                with(
                    pod(
                        vec![container("n1", "", ""), container("n2", "", "")],
                        vec![],
                    ),
                    pod_lim,
                ),
                4_000_000_000,
                vec![("n1", 750, 750), ("n2", 750, 750)],
            ),
            (
                "burstable-pod-resources-equal-container-requests",
                with(pod(vec![g("g1", req), g("g2", req)], vec![]), pod_lim),
                4_000_000_000,
                vec![("g1", 750, 750), ("g2", 750, 750)],
            ),
            (
                "burstable-pod-resources-unequal-container-requests",
                with(
                    pod(vec![g("b", req), container("be", "", "")], vec![]),
                    pod_lim,
                ),
                4_000_000_000,
                vec![("b", 625, 625), ("be", 875, 875)],
            ),
            (
                "burstable-pod-resources-no-container-resources-with-sidecar",
                with(
                    pod(vec![container("n", "", "")], vec![sidecar("ns", "", "")]),
                    pod_lim,
                ),
                4_000_000_000,
                vec![("n", 750, 750), ("ns", 750, 750)],
            ),
            (
                "burstable-pod-resources-equal-container-requests-with-sidecar",
                with(
                    pod(
                        vec![container(
                            "bc",
                            &format!("cpu=5m,memory={req}"),
                            &format!("cpu=5m,memory={lim}"),
                        )],
                        vec![sidecar(
                            "bs",
                            &format!("cpu=5m,memory={req}"),
                            &format!("cpu=5m,memory={lim}"),
                        )],
                    ),
                    pod_lim,
                ),
                4_000_000_000,
                vec![("bc", 750, 750), ("bs", 750, 750)],
            ),
            (
                "burstable-pod-resources-unequal-container-requests-with-sidecar",
                with(
                    pod(
                        vec![
                            container(
                                "c1",
                                "cpu=5m,memory=1000000000",
                                &format!("cpu=5m,memory={pod_lim}"),
                            ),
                            container(
                                "c2",
                                "cpu=5m,memory=500000000",
                                &format!("cpu=5m,memory={pod_lim}"),
                            ),
                        ],
                        vec![sidecar(
                            "s",
                            "cpu=5m,memory=200000000",
                            &format!("cpu=5m,memory={pod_lim}"),
                        )],
                    ),
                    pod_lim,
                ),
                4_000_000_000,
                vec![("c1", 725, 725), ("c2", 850, 850), ("s", 850, 850)],
            ),
        ];
        for (name, p, cap, want) in rows {
            let class = classify(&p).class;
            let got = pod_oom_score_adjs(&p, class, cap);
            assert_eq!(got.len(), want.len(), "{name}");
            for (c, lo, hi) in want {
                let a = got.iter().find(|x| x.name == c).unwrap().oom_score_adj;
                assert!(
                    (lo..=hi).contains(&a),
                    "{name}/{c}: {a} not in [{lo}, {hi}]"
                );
            }
        }
    }

    /// The formula and clamps, exactly.
    #[test]
    fn burstable_formula_and_clamps() {
        let cap = 1000 * 1024 * 1024; // 1000 Mi
        for (req, want) in [
            ("memory=100Mi", 900), // 1000 - 100
            ("memory=1", 999),     // 1000 - 0 = 1000 → 999
            ("memory=999Mi", 3),   // 1000 - 999 = 1 → 3
            ("memory=997Mi", 3),   // exactly 3
            ("memory=996Mi", 4),
            ("memory=2000Mi", 3), // over capacity: negative → 3
            ("memory=1Mi", 999),  // 1000 - 1 = 999
            ("memory=150Mi", 850),
        ] {
            let p = pod(
                vec![container("c", &format!("cpu=1,{req}"), "cpu=2")],
                vec![],
            );
            assert_eq!(classify(&p).class, QosClass::Burstable);
            assert_eq!(adj(&p, 0, cap), want, "{req}");
        }
    }

    #[test]
    fn truncating_division_like_go() {
        // 1000 * 3 / 7 = 428.57 → 428; 1000 - 428 = 572.
        let p = pod(vec![container("c", "memory=3,cpu=1", "")], vec![]);
        assert_eq!(adj(&p, 0, 7), 572);
    }

    #[test]
    fn critical_pods() {
        let be = || pod(vec![container("c", "", "")], vec![]);
        // Node-critical BestEffort: -997.
        let mut p = be();
        p.priority = SYSTEM_CRITICAL_PRIORITY;
        p.priority_class_name = Some(SYSTEM_NODE_CRITICAL.into());
        assert_eq!(adj(&p, 0, 1 << 30), -997);
        // Critical by priority but cluster-critical class: its class decides.
        p.priority_class_name = Some("system-cluster-critical".into());
        assert_eq!(adj(&p, 0, 1 << 30), 1000);
        // Node-critical class name without critical priority: not critical.
        let mut p = be();
        p.priority_class_name = Some(SYSTEM_NODE_CRITICAL.into());
        assert_eq!(adj(&p, 0, 1 << 30), 1000);
        // A static pod in system-node-critical (priority unset): critical.
        p.annotations
            .insert(ANNOTATION_SOURCE.into(), "file".into());
        assert_eq!(adj(&p, 0, 1 << 30), -997);
        // A mirror pod too; a Burstable one as well.
        let mut p = pod(vec![container("c", "memory=100Mi", "")], vec![]);
        p.priority_class_name = Some(SYSTEM_NODE_CRITICAL.into());
        p.annotations.insert(ANNOTATION_MIRROR.into(), "x".into());
        assert_eq!(adj(&p, 0, 1 << 30), -997);
        // `config.source: api` is not static.
        let mut p = be();
        p.priority_class_name = Some(SYSTEM_NODE_CRITICAL.into());
        p.annotations.insert(ANNOTATION_SOURCE.into(), "api".into());
        assert_eq!(adj(&p, 0, 1 << 30), 1000);
    }

    #[test]
    fn sidecar_never_above_the_smallest_regular_container() {
        let cap = 1000 * 1024 * 1024;
        // Sidecar requests 10Mi (990), app containers 100Mi and 200Mi
        // (900, 800): the sidecar gets the smallest app request's 900.
        let p = pod(
            vec![
                container("a", "memory=200Mi", ""),
                container("b", "memory=100Mi", ""),
            ],
            vec![
                sidecar("s", "memory=10Mi", ""),
                container("init", "memory=10Mi", ""),
            ],
        );
        let class = classify(&p).class;
        let all = pod_oom_score_adjs(&p, class, cap);
        let got: Vec<(&str, bool, i64)> = all
            .iter()
            .map(|c| (c.name.as_str(), c.init, c.oom_score_adj))
            .collect();
        // A regular init container keeps its own value.
        assert_eq!(
            got,
            [
                ("a", false, 800),
                ("b", false, 900),
                ("s", true, 900),
                ("init", true, 990)
            ]
        );
        // A sidecar requesting more than the app containers keeps its own.
        let p = pod(
            vec![container("a", "memory=100Mi", "")],
            vec![sidecar("s", "memory=300Mi", "")],
        );
        assert_eq!(
            container_oom_score_adj(&p, QosClass::Burstable, &p.init_containers[0], cap),
            700
        );
        // An app container without a memory request: min is 0 → 1000, no cap.
        let p = pod(
            vec![container("a", "cpu=1", "")],
            vec![sidecar("s", "memory=300Mi", "")],
        );
        assert_eq!(
            container_oom_score_adj(&p, QosClass::Burstable, &p.init_containers[0], cap),
            700
        );
    }

    #[test]
    fn pod_level_requests_share() {
        let cap = 1000 * 1024 * 1024;
        // Pod requests 400Mi; containers 100Mi + 0 + init 50Mi (aggregate:
        // max(100, 50) = 100Mi); remaining 300Mi over 3 containers = 100Mi.
        let mut p = pod(
            vec![container("a", "memory=100Mi", ""), container("b", "", "")],
            vec![container("i", "memory=50Mi", "")],
        );
        p.pod_resources = Some(ResourceRequirements {
            requests: [("memory".to_string(), Quantity::parse("400Mi").unwrap())].into(),
            limits: Default::default(),
        });
        let class = classify(&p).class;
        assert_eq!(class, QosClass::Burstable);
        let got: Vec<i64> = pod_oom_score_adjs(&p, class, cap)
            .iter()
            .map(|c| c.oom_score_adj)
            .collect();
        assert_eq!(got, [800, 900, 850]);
        // Pod-level cpu request only: no memory share.
        p.pod_resources = Some(ResourceRequirements {
            requests: [("cpu".to_string(), Quantity::parse("1").unwrap())].into(),
            limits: Default::default(),
        });
        let got: Vec<i64> = pod_oom_score_adjs(&p, QosClass::Burstable, cap)
            .iter()
            .map(|c| c.oom_score_adj)
            .collect();
        assert_eq!(got, [900, 999, 950]);
    }

    #[test]
    fn guaranteed_and_besteffort() {
        let p = pod(
            vec![container("c", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")],
            vec![],
        );
        assert_eq!(adj(&p, 0, 1 << 34), -997);
        let p = pod(vec![container("c", "", "")], vec![]);
        assert_eq!(adj(&p, 0, 1 << 34), 1000);
    }
}
