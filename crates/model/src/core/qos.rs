//! QoS classification exactly as Kubernetes `ComputePodQOS`
//! (pkg/apis/core/v1/helper/qos), with a human reason.
//!
//! Rules:
//! * only `cpu` and `memory` count; a missing request is the limit (API
//!   server defaulting); zero counts as unset;
//! * pod-level `spec.resources` (cpu/memory set), when present, decide alone;
//! * otherwise every container (app and init, sidecars included) is rated on
//!   its own: Guaranteed-like (cpu and memory requests = limits, non-zero),
//!   BestEffort-like (no cpu/memory at all) or Burstable (anything else);
//! * any Burstable container, or a mix of Guaranteed-like and
//!   BestEffort-like containers, makes the pod Burstable; otherwise the pod
//!   takes the common class.

use crate::core::model::{Container, Pod, QosClass, ResourceRequirements};
use crate::core::quantity::Quantity;
use crate::core::resources::{
    container_limit, container_request, pod_level_resources_set, CPU, MEMORY,
};

/// A pod's class and the human reason for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    /// The pod's QoS class.
    pub class: QosClass,
    /// e.g. "container app: memory request 100Mi != limit 200Mi".
    pub reason: String,
}

fn show(q: Option<&Quantity>) -> String {
    match q {
        Some(q) if !q.is_zero() => q.as_str().to_string(),
        _ => "unset".to_string(),
    }
}

/// Rate one set of resource requirements (`resourceQOS`). On Burstable,
/// the reason names the resource.
fn resource_qos(res: &ResourceRequirements) -> (QosClass, String) {
    let mut class: Option<QosClass> = None;
    let mut first = "";
    for name in [CPU, MEMORY] {
        let req = container_request(res, name).filter(|q| !q.is_zero());
        let lim = container_limit(res, name).filter(|q| !q.is_zero());
        let equal = match (req, lim) {
            (None, None) => true,
            (Some(a), Some(b)) => a == b,
            _ => false,
        };
        if !equal {
            let why = match (req, lim) {
                (Some(_), None) => format!("{name} request {} without a limit", show(req)),
                _ => format!("{name} request {} != limit {}", show(req), show(lim)),
            };
            return (QosClass::Burstable, why);
        }
        let this = if req.is_none() {
            QosClass::BestEffort
        } else {
            QosClass::Guaranteed
        };
        match class {
            None => {
                class = Some(this);
                first = name;
            }
            Some(c) if c != this => {
                let (set, unset) = if c == QosClass::Guaranteed {
                    (first, name)
                } else {
                    (name, first)
                };
                return (
                    QosClass::Burstable,
                    format!("{set} request = limit but no {unset} request or limit"),
                );
            }
            _ => {}
        }
    }
    let class = class.unwrap_or(QosClass::BestEffort);
    let why = match class {
        QosClass::Guaranteed => "cpu and memory requests = limits".to_string(),
        _ => "no cpu or memory requests or limits".to_string(),
    };
    (class, why)
}

/// Classify a pod (honours `pod.qos_override`).
pub fn classify(pod: &Pod) -> Classification {
    if let Some(class) = pod.qos_override {
        return Classification {
            class,
            reason: "set by the pod source (cgroup parent of the sandbox)".to_string(),
        };
    }
    if pod_level_resources_set(pod) {
        let res = pod.pod_resources.as_ref().expect("checked");
        let (class, why) = resource_qos(res);
        return Classification {
            class,
            reason: format!("pod-level resources: {why}"),
        };
    }
    let all =
        pod.containers
            .iter()
            .map(|c| ("container", c))
            .chain(pod.init_containers.iter().map(|c| {
                let kind = if c.restartable {
                    "sidecar container"
                } else {
                    "init container"
                };
                (kind, c)
            }));
    let mut seen: Option<(QosClass, &str, &Container)> = None;
    for (kind, c) in all {
        let (class, why) = resource_qos(&c.resources);
        if class == QosClass::Burstable {
            return Classification {
                class,
                reason: format!("{kind} {}: {why}", c.name),
            };
        }
        match seen {
            None => seen = Some((class, kind, c)),
            Some((prev, pkind, pc)) if prev != class => {
                let (g, gk, b, bk) = if prev == QosClass::Guaranteed {
                    (pc, pkind, c, kind)
                } else {
                    (c, kind, pc, pkind)
                };
                return Classification {
                    class: QosClass::Burstable,
                    reason: format!(
                        "{gk} {} has cpu and memory requests = limits but {bk} {} has no cpu or memory requests or limits",
                        g.name, b.name
                    ),
                };
            }
            _ => {}
        }
    }
    match seen {
        Some((QosClass::Guaranteed, _, _)) => Classification {
            class: QosClass::Guaranteed,
            reason: "every container has cpu and memory requests = limits".to_string(),
        },
        _ => Classification {
            class: QosClass::BestEffort,
            reason: "no container has cpu or memory requests or limits".to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::ResourceList;
    use crate::core::resources::tests::container;
    use proptest::prelude::*;

    fn pod(cs: Vec<Container>) -> Pod {
        let mut p = Pod::new("u", "ns", "p");
        p.containers = cs;
        p
    }

    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], QosClass, &'a str);

    #[test]
    fn table() {
        use QosClass::*;
        let cases: &[Case] = &[
            (
                "qos-demo",
                &[("cpu=700m,memory=200Mi", "cpu=700m,memory=200Mi")],
                Guaranteed,
                "every container",
            ),
            (
                "limits only",
                &[("", "cpu=1,memory=1Gi")],
                Guaranteed,
                "every container",
            ),
            (
                "equal by value",
                &[("cpu=1000m,memory=1024Mi", "cpu=1,memory=1Gi")],
                Guaranteed,
                "",
            ),
            (
                "qos-demo-2",
                &[("memory=100Mi", "memory=200Mi")],
                Burstable,
                "container c0: memory request 100Mi != limit 200Mi",
            ),
            ("qos-demo-3", &[("", "")], BestEffort, "no container"),
            (
                "request only",
                &[("cpu=100m", "")],
                Burstable,
                "container c0: cpu request 100m without a limit",
            ),
            (
                "cpu only guaranteed-like",
                &[("cpu=1", "cpu=1")],
                Burstable,
                "cpu request = limit but no memory",
            ),
            (
                "memory only guaranteed-like",
                &[("memory=1Gi", "memory=1Gi")],
                Burstable,
                "memory request = limit but no cpu",
            ),
            ("zero is unset", &[("cpu=0,memory=0", "")], BestEffort, ""),
            (
                "ephemeral only",
                &[("ephemeral-storage=1Gi", "ephemeral-storage=2Gi")],
                BestEffort,
                "",
            ),
            (
                "hugepages ignored",
                &[(
                    "cpu=1,memory=1Gi,hugepages-2Mi=4Mi",
                    "cpu=1,memory=1Gi,hugepages-2Mi=4Mi",
                )],
                Guaranteed,
                "",
            ),
            (
                "mix G and BE",
                &[("cpu=1,memory=1Gi", "cpu=1,memory=1Gi"), ("", "")],
                Burstable,
                "container c0 has cpu and memory requests = limits but container c1 has no",
            ),
            (
                "mix BE and G",
                &[("", ""), ("cpu=1,memory=1Gi", "cpu=1,memory=1Gi")],
                Burstable,
                "container c1 has cpu and memory requests = limits but container c0",
            ),
            (
                "frontend",
                &[
                    ("cpu=250m,memory=64Mi", "cpu=500m,memory=128Mi"),
                    ("cpu=250m,memory=64Mi", "cpu=500m,memory=128Mi"),
                ],
                Burstable,
                "container c0: cpu request 250m != limit 500m",
            ),
        ];
        for (what, cs, want, reason) in cases {
            let p = pod(cs
                .iter()
                .enumerate()
                .map(|(i, (r, l))| container(&format!("c{i}"), r, l))
                .collect());
            let got = classify(&p);
            assert_eq!(got.class, *want, "{what}: {}", got.reason);
            assert!(
                got.reason.contains(reason),
                "{what}: reason {:?} lacks {reason:?}",
                got.reason
            );
        }
    }

    #[test]
    fn init_containers_count() {
        let mut p = pod(vec![container(
            "app",
            "cpu=1,memory=1Gi",
            "cpu=1,memory=1Gi",
        )]);
        p.init_containers = vec![container("init", "cpu=1", "")];
        let c = classify(&p);
        assert_eq!(c.class, QosClass::Burstable);
        assert_eq!(
            c.reason,
            "init container init: cpu request 1 without a limit"
        );
        p.init_containers = vec![container("init", "cpu=2,memory=2Gi", "cpu=2,memory=2Gi")];
        assert_eq!(classify(&p).class, QosClass::Guaranteed);
    }

    #[test]
    fn pod_level_resources_decide() {
        let mut p = pod(vec![container("a", "", ""), container("b", "cpu=100m", "")]);
        let lim: ResourceList = [
            ("cpu".to_string(), Quantity::parse("1").unwrap()),
            ("memory".to_string(), Quantity::parse("1Gi").unwrap()),
        ]
        .into_iter()
        .collect();
        p.pod_resources = Some(ResourceRequirements {
            requests: ResourceList::new(),
            limits: lim.clone(),
        });
        let c = classify(&p);
        assert_eq!(c.class, QosClass::Guaranteed, "{}", c.reason);
        assert!(c.reason.starts_with("pod-level resources"));
        p.pod_resources = Some(ResourceRequirements {
            requests: [("memory".to_string(), Quantity::parse("512Mi").unwrap())]
                .into_iter()
                .collect(),
            limits: lim,
        });
        assert_eq!(classify(&p).class, QosClass::Burstable);
    }

    #[test]
    fn override_wins() {
        let mut p = pod(vec![container("a", "", "")]);
        p.qos_override = Some(QosClass::Guaranteed);
        assert_eq!(classify(&p).class, QosClass::Guaranteed);
    }

    fn arb_container() -> impl Strategy<Value = Container> {
        let q = prop_oneof![Just(""), Just("100m"), Just("1"), Just("0")];
        let m = prop_oneof![Just(""), Just("64Mi"), Just("1Gi")];
        (q.clone(), q, m.clone(), m).prop_map(|(rc, lc, rm, lm)| {
            let mut req = vec![];
            let mut lim = vec![];
            if !rc.is_empty() {
                req.push(format!("cpu={rc}"));
            }
            if !lc.is_empty() {
                lim.push(format!("cpu={lc}"));
            }
            if !rm.is_empty() {
                req.push(format!("memory={rm}"));
            }
            if !lm.is_empty() {
                lim.push(format!("memory={lm}"));
            }
            container("c", &req.join(","), &lim.join(","))
        })
    }

    proptest! {
        #[test]
        fn invariant_to_container_order(cs in proptest::collection::vec(arb_container(), 1..5), rot in 0usize..5) {
            let a = pod(cs.clone());
            let mut rotated = cs.clone();
            let n = rotated.len();
            rotated.rotate_left(rot % n);
            rotated.reverse();
            let b = pod(rotated);
            prop_assert_eq!(classify(&a).class, classify(&b).class);
            // moving containers between app and init lists does not matter either
            let mut c = pod(cs[..1].to_vec());
            c.init_containers = cs[1..].to_vec();
            prop_assert_eq!(classify(&a).class, classify(&c).class);
        }
    }
}
