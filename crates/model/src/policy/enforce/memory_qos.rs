//! MemoryQoS (KEP-2570, cgroup v2) in the kubelet's two models:
//!
//! * ≤ 1.35: every pod with a memory request gets `memory.min` = request;
//!   kubepods `memory.min` = Σ requests of Guaranteed and Burstable pods,
//!   burstable `memory.min` = Σ Burstable requests — each written only when
//!   > 0 (stale values stay);
//! * 1.36 (`memory-qos-tiered`, `memory-qos-zero-reset`): under
//!   `memoryReservationPolicy: TieredReservation` Guaranteed pods get
//!   `memory.min` = request and Burstable pods `memory.low` = request;
//!   kubepods `memory.min` = Σ Guaranteed + Burstable requests, burstable
//!   `memory.low` = Σ Burstable requests. With `None` (the default) no
//!   protection: the same files are written `0`, as they are when no
//!   protected pod remains.
//!
//! `memory.high` (throttling, `memoryThrottlingFactor`) is the same in both
//! models at pod level in qosd: Burstable and BestEffort pods whose memory
//! limit is declared and differs from the request.

use crate::core::model::QosClass;
use crate::policy::enforce::versions::{KubeletVersion, Rule};

/// kubelet `memoryReservationPolicy` (1.36).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum MemoryReservationPolicy {
    /// No `memory.min` / `memory.low` anywhere (the kubelet's default).
    #[default]
    None,
    /// Guaranteed → `memory.min`, Burstable → `memory.low`.
    TieredReservation,
}

impl MemoryReservationPolicy {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MemoryReservationPolicy::None => "None",
            MemoryReservationPolicy::TieredReservation => "TieredReservation",
        }
    }

    /// The kubelet's spelling (`None`, `TieredReservation`).
    pub fn parse(s: &str) -> Result<MemoryReservationPolicy, String> {
        match s.trim() {
            "None" => Ok(MemoryReservationPolicy::None),
            "TieredReservation" => Ok(MemoryReservationPolicy::TieredReservation),
            other => Err(format!(
                "memoryReservationPolicy {other:?}: expected None or TieredReservation"
            )),
        }
    }
}

impl std::fmt::Display for MemoryReservationPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for MemoryReservationPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        MemoryReservationPolicy::parse(s)
    }
}

/// `memory.min` / `memory.low` of one cgroup; `None` = not written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Protection {
    pub(crate) min: Option<i64>,
    pub(crate) low: Option<i64>,
}

/// A pod's protection (its memory request is `request`, overhead included).
pub(crate) fn pod_protection(
    version: KubeletVersion,
    policy: MemoryReservationPolicy,
    class: QosClass,
    request: i64,
) -> Protection {
    if !version.has(Rule::MemoryQosTiered) {
        return Protection {
            min: (request > 0).then_some(request),
            low: None,
        };
    }
    let tiered = policy == MemoryReservationPolicy::TieredReservation;
    let zero = version.has(Rule::MemoryQosZeroReset).then_some(0);
    match (tiered, class) {
        (true, QosClass::Guaranteed) => Protection {
            min: Some(request),
            low: zero,
        },
        (true, QosClass::Burstable) => Protection {
            min: zero,
            low: Some(request),
        },
        _ => Protection {
            min: zero,
            low: zero,
        },
    }
}

/// Protection of kubepods (the Guaranteed QoS cgroup) and of burstable,
/// from the Guaranteed and Burstable request sums.
pub(crate) fn qos_protection(
    version: KubeletVersion,
    policy: MemoryReservationPolicy,
    guaranteed_requests: i64,
    burstable_requests: i64,
) -> (Protection, Protection) {
    let node = guaranteed_requests + burstable_requests;
    if !version.has(Rule::MemoryQosTiered) {
        return (
            Protection {
                min: (node > 0).then_some(node),
                low: None,
            },
            Protection {
                min: (burstable_requests > 0).then_some(burstable_requests),
                low: None,
            },
        );
    }
    let tiered = policy == MemoryReservationPolicy::TieredReservation;
    let keep = |v: i64| -> Option<i64> {
        let v = if tiered { v } else { 0 };
        if v > 0 || version.has(Rule::MemoryQosZeroReset) {
            Some(v)
        } else {
            None
        }
    };
    (
        Protection {
            min: keep(node),
            low: None,
        },
        Protection {
            min: None,
            low: keep(burstable_requests),
        },
    )
}

/// Whether a reserved cgroup (system-reserved / kube-reserved) gets
/// `memory.min` = its reserved memory under MemoryQoS: always up to 1.35;
/// from 1.36 only under `TieredReservation` (the None policy protects
/// nothing).
pub(crate) fn reserved_cgroup_protected(
    version: KubeletVersion,
    policy: MemoryReservationPolicy,
) -> bool {
    !version.has(Rule::MemoryQosTiered) || policy == MemoryReservationPolicy::TieredReservation
}

#[cfg(test)]
mod tests {
    use super::*;
    use KubeletVersion::*;
    use MemoryReservationPolicy::*;
    use QosClass::*;

    const MI: i64 = 1 << 20;

    /// Pod level, after the kubelet's TestResourceConfigForPodWithEnforceMemoryQoS
    /// (≤1.35: memory.min = request) and its 1.36 form (memory.min for
    /// guaranteed, memory.low for burstable: "guaranteed", "burstable-with-limits",
    /// "burstable-partial-limits" → 100Mi/100Mi/200Mi).
    #[test]
    fn pod_table() {
        let p = |min, low| Protection { min, low };
        for (v, pol, class, req, want) in [
            (
                V1_35,
                None,
                Guaranteed,
                100 * MI,
                p(Some(100 * MI), Option::None),
            ),
            (
                V1_35,
                None,
                Burstable,
                100 * MI,
                p(Some(100 * MI), Option::None),
            ),
            (
                V1_35,
                TieredReservation,
                Burstable,
                200 * MI,
                p(Some(200 * MI), Option::None),
            ),
            (V1_35, None, BestEffort, 0, p(Option::None, Option::None)),
            (V1_33, None, Burstable, 0, p(Option::None, Option::None)),
            (
                V1_36,
                TieredReservation,
                Guaranteed,
                100 * MI,
                p(Some(100 * MI), Some(0)),
            ),
            (
                V1_36,
                TieredReservation,
                Burstable,
                100 * MI,
                p(Some(0), Some(100 * MI)),
            ),
            (
                V1_36,
                TieredReservation,
                Burstable,
                200 * MI,
                p(Some(0), Some(200 * MI)),
            ),
            (V1_36, TieredReservation, BestEffort, 0, p(Some(0), Some(0))),
            (V1_36, None, Guaranteed, 100 * MI, p(Some(0), Some(0))),
            (V1_36, None, Burstable, 100 * MI, p(Some(0), Some(0))),
        ] {
            assert_eq!(
                pod_protection(v, pol, class, req),
                want,
                "{v} {pol} {class} {req}"
            );
        }
    }

    /// QoS level, after the kubelet's TestQoSContainerCgroup (1.36:
    /// activeTestPods = guaranteed 128Mi + burstable 128Mi + 256Mi →
    /// kubepods min 512Mi, burstable low 384Mi; best effort only → 0/0;
    /// burstable without memory request → 0/0; no pods (stale) → 0/0) and
    /// TestQoSContainerCgroupWithMemoryReservationPolicyNone (→ 0/0).
    #[test]
    fn qos_table() {
        let min = |v| Protection {
            min: v,
            low: Option::None,
        };
        let low = |v| Protection {
            min: Option::None,
            low: v,
        };
        for (v, pol, g, b, want) in [
            (
                V1_36,
                TieredReservation,
                128 * MI,
                384 * MI,
                (min(Some(512 * MI)), low(Some(384 * MI))),
            ),
            (V1_36, TieredReservation, 0, 0, (min(Some(0)), low(Some(0)))),
            (
                V1_36,
                None,
                128 * MI,
                384 * MI,
                (min(Some(0)), low(Some(0))),
            ),
            (
                V1_36,
                TieredReservation,
                128 * MI,
                0,
                (min(Some(128 * MI)), low(Some(0))),
            ),
            // ≤1.35 setMemoryQoS: written only when > 0, and as memory.min.
            (
                V1_35,
                None,
                128 * MI,
                384 * MI,
                (min(Some(512 * MI)), min(Some(384 * MI))),
            ),
            (
                V1_35,
                TieredReservation,
                0,
                0,
                (min(Option::None), min(Option::None)),
            ),
            (
                V1_34,
                None,
                128 * MI,
                0,
                (min(Some(128 * MI)), min(Option::None)),
            ),
        ] {
            assert_eq!(qos_protection(v, pol, g, b), want, "{v} {pol} {g} {b}");
        }
    }

    #[test]
    fn policy_names() {
        assert_eq!(MemoryReservationPolicy::parse("None"), Ok(None));
        assert_eq!(
            MemoryReservationPolicy::parse("TieredReservation"),
            Ok(TieredReservation)
        );
        assert!(MemoryReservationPolicy::parse("HardReservation")
            .unwrap_err()
            .contains("TieredReservation"));
        assert!(reserved_cgroup_protected(V1_35, None));
        assert!(!reserved_cgroup_protected(V1_36, None));
        assert!(reserved_cgroup_protected(V1_36, TieredReservation));
    }
}
