//! Rebuild a pod's requests, limits and QoS class from what the runtime
//! reports: the inverse of the kubelet's mapping of a pod spec to CRI
//! container resources (pkg/kubelet/kuberuntime, pkg/kubelet/cm/helpers_linux.go,
//! pkg/kubelet/qos/policy.go). Pure logic, no I/O. See docs/cri.md.

use serde::Serialize;

use qosd_model::core::model::{Container, QosClass, ResourceRequirements};
use qosd_model::core::quantity::Quantity;

/// The kubelet's `oom_score_adj` for Guaranteed (and node-critical) pods.
pub(crate) const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// The kubelet's `oom_score_adj` for BestEffort pods.
pub(crate) const BESTEFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// cpu.shares the kubelet gives a container without a cpu request (MinShares).
pub(crate) const MIN_SHARES: i64 = 2;

/// How a live pod's QoS class was derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum QosSource {
    /// The QoS segment of the sandbox's cgroup parent (what the kubelet chose).
    CgroupParent,
    /// Exact container settings (cpu shares/quota, memory limit).
    Resources,
    /// Needed the container's oom_score_adj (the kubelet derives it from the
    /// class and the memory request): inferred.
    OomScoreAdj,
    /// Needed memory.min (MemoryQoS: equals the memory request): exact.
    MemoryMin,
}

impl QosSource {
    /// The source as `qosd pods` prints it, e.g. `cgroup-parent`.
    pub fn as_str(self) -> &'static str {
        match self {
            QosSource::CgroupParent => "cgroup-parent",
            QosSource::Resources => "resources",
            QosSource::OomScoreAdj => "oom-score-adj",
            QosSource::MemoryMin => "memory-min",
        }
    }
}

impl std::fmt::Display for QosSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub(crate) use qosd_model::core::uid::validate_uid;

/// A cgroup parent of a kubelet-made sandbox, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedParent {
    pub(crate) class: QosClass,
    /// The pod UID as written in the path (systemd `_` turned back into `-`);
    /// not validated.
    pub uid: String,
    /// True for the systemd slice form.
    pub(crate) systemd: bool,
}

/// Parse a sandbox cgroup parent: cgroupfs `[<root>]/kubepods[/burstable|/besteffort]/pod<uid>`
/// or systemd `…/kubepods[-burstable|-besteffort]-pod<uid_>.slice`. `None`
/// when it is not in the kubelet's layout (the naming rules live in
/// [`qosd_model::policy::enforce::naming::parse_cgroup_parent`]).
pub fn parse_cgroup_parent(parent: &str) -> Option<ParsedParent> {
    let (class, uid) = qosd_model::policy::enforce::naming::parse_cgroup_parent(parent)?;
    Some(ParsedParent {
        class,
        uid,
        systemd: parent.trim_end_matches('/').ends_with(".slice"),
    })
}

/// The cgroup settings the runtime reports for one container (CRI
/// `LinuxContainerResources`; zero means "not set" except for oom_score_adj).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerSettings {
    pub(crate) name: String,
    pub(crate) cpu_shares: Option<i64>,
    /// `cpu_quota`, in microseconds per period (`None`: not positive, no
    /// limit).
    pub cpu_quota: Option<i64>,
    /// `cpu_period`, in microseconds (`None`: not positive, not set).
    pub cpu_period: Option<i64>,
    pub(crate) memory_limit_bytes: Option<i64>,
    pub(crate) oom_score_adj: Option<i64>,
    /// `unified["memory.min"]` (MemoryQoS on cgroup v2).
    pub(crate) memory_min_bytes: Option<i64>,
}

impl ContainerSettings {
    /// From CRI `LinuxContainerResources`.
    pub fn from_cri(name: &str, r: &super::proto::LinuxContainerResources) -> ContainerSettings {
        let pos = |v: i64| (v > 0).then_some(v);
        ContainerSettings {
            name: name.to_string(),
            cpu_shares: pos(r.cpu_shares),
            cpu_quota: pos(r.cpu_quota),
            cpu_period: pos(r.cpu_period),
            memory_limit_bytes: pos(r.memory_limit_in_bytes),
            oom_score_adj: Some(r.oom_score_adj),
            memory_min_bytes: r
                .unified
                .get("memory.min")
                .and_then(|v| v.trim().parse::<i64>().ok())
                .and_then(pos),
        }
    }

    /// cpu request in millicores from cpu.shares: the smallest m with
    /// MilliCPUToShares(m) = shares (exact: the mapping is injective above
    /// the 2-share floor). `None` for the floor (no request).
    pub fn cpu_request_millis(&self) -> Option<i64> {
        let s = self.cpu_shares?;
        if s <= MIN_SHARES {
            return None;
        }
        Some(ceil_div(s as i128 * 1000, 1024) as i64)
    }

    /// cpu limit in millicores from quota/period (inverse of MilliCPUToQuota).
    pub fn cpu_limit_millis(&self) -> Option<i64> {
        let (q, p) = (self.cpu_quota?, self.cpu_period?);
        // An absurd quota/period (millicores beyond i64) is no limit at all,
        // never a wrapped (negative) one.
        i64::try_from(ceil_div(q as i128 * 1000, p as i128)).ok()
    }

    /// oom_score_adj in the Burstable band [3, 999].
    fn burstable_adj(&self) -> Option<i64> {
        self.oom_score_adj
            .filter(|a| (1000 + GUARANTEED_OOM_SCORE_ADJ..BESTEFFORT_OOM_SCORE_ADJ).contains(a))
    }

    fn has_exact_resources(&self) -> bool {
        self.cpu_request_millis().is_some()
            || self.cpu_limit_millis().is_some()
            || self.memory_limit_bytes.is_some()
            || self.memory_min_bytes.is_some()
    }
}

#[cfg(test)]
/// The memory request the kubelet's Burstable oom_score_adj formula implies:
/// adj = 1000 − 1000·request/capacity (integer division), clamped to [3, 999].
/// Returns the smallest request giving `adj`; `None` at the clamps (3 means
/// "at least 99.7% of capacity", 999 "below 0.2%"), which carry no size.
pub(crate) fn memory_request_from_oom_score_adj(adj: i64, capacity_bytes: i64) -> Option<i64> {
    if capacity_bytes <= 0 || !(4..=998).contains(&adj) {
        return None;
    }
    Some(ceil_div((1000 - adj) as i128 * capacity_bytes as i128, 1000) as i64)
}

/// The memory requests a Burstable `oom_score_adj` allows, (lowest,
/// highest; `None`: unbounded), from the kubelet's formula adj = 1000 −
/// floor(1000·request/capacity) clamped to [3, 999]: 999 covers requests
/// below 0.2 % of capacity (the BestEffort value 1000 is moved to 999), 3
/// everything from 99.7 % up.
pub(crate) fn memory_request_band(adj: i64, capacity_bytes: i64) -> Option<(i64, Option<i64>)> {
    if capacity_bytes <= 0 || !(3..=999).contains(&adj) {
        return None;
    }
    let cap = capacity_bytes as i128;
    // floor(1000·req/cap) = k  ⇔  req ∈ [ceil(k·cap/1000), ceil((k+1)·cap/1000) − 1]
    let lo = |k: i128| ceil_div(k * cap, 1000) as i64;
    Some(match adj {
        999 => (0, Some(lo(2) - 1)),
        3 => (lo(997), None),
        a => {
            let k = (1000 - a) as i128;
            (lo(k), Some(lo(k + 1) - 1))
        }
    })
}

/// Result of [`reconstruct`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reconstructed {
    /// Containers with rebuilt requests/limits (cpu, memory).
    pub(crate) containers: Vec<Container>,
    pub(crate) class: QosClass,
    pub(crate) source: QosSource,
    /// The class the container settings alone imply, and how.
    pub(crate) resources_class: QosClass,
    pub(crate) resources_source: QosSource,
    /// Where values are inferred rather than exact.
    pub(crate) notes: Vec<String>,
    /// Inconsistencies (class mismatch, unexpected values).
    pub(crate) warnings: Vec<String>,
}

/// Rebuild the pod's containers and class. `parent_class` is the QoS
/// segment of the sandbox's cgroup parent when it has one (it wins: the
/// runtime may clamp oom_score_adj); `memory_capacity_bytes` (node
/// MemTotal) lets a Burstable memory request be inferred from oom_score_adj.
pub(crate) fn reconstruct(
    parent_class: Option<QosClass>,
    containers: &[ContainerSettings],
    memory_capacity_bytes: Option<i64>,
) -> Reconstructed {
    let mut notes = Vec::new();
    let mut warnings = Vec::new();
    let (resources_class, resources_source) = class_from_settings(containers);
    let (class, source) = match parent_class {
        Some(p) => {
            if containers.is_empty() {
                notes.push("no containers yet: class from the cgroup parent only".to_string());
            } else if p != resources_class {
                warnings.push(format!(
                    "cgroup parent places the pod in {p} but its container settings say \
                     {resources_class} (from {resources_source}); using {p}"
                ));
            }
            (p, QosSource::CgroupParent)
        }
        None => {
            if matches!(resources_source, QosSource::OomScoreAdj) {
                notes.push(format!(
                    "QoS class {resources_class} inferred from oom_score_adj (no QoS segment in the cgroup parent)"
                ));
            }
            (resources_class, resources_source)
        }
    };
    check_oom_score_adj(class, containers, &mut notes, &mut warnings);
    let out = containers
        .iter()
        .map(|c| rebuild_container(c, class, memory_capacity_bytes, &mut notes))
        .collect();
    Reconstructed {
        containers: out,
        class,
        source,
        resources_class,
        resources_source,
        notes,
        warnings,
    }
}

/// How one container's settings look: any request at all, requests equal
/// to limits (Guaranteed-like), and which inferred values that needed.
#[derive(Debug, Clone, Copy, Default)]
struct Shape {
    any_request: bool,
    guaranteed: bool,
    used_adj: bool,
    used_min: bool,
}

fn shape(c: &ContainerSettings) -> Shape {
    let mut s = Shape {
        any_request: c.has_exact_resources() || c.burstable_adj().is_some(),
        ..Shape::default()
    };
    let cpu_equal = match (c.cpu_request_millis(), c.cpu_limit_millis()) {
        (Some(r), Some(l)) => r == l,
        // Quota clamps at 1000 µs (10m) and shares at 2: tiny limits
        // can't be compared exactly; treat a limit alone as request = limit.
        (None, Some(_)) => true,
        _ => false,
    };
    let mem_equal = match (c.memory_limit_bytes, c.memory_min_bytes) {
        (Some(l), Some(m)) => {
            s.used_min = true;
            l == m
        }
        (Some(_), None) => match c.oom_score_adj {
            Some(a) => {
                s.used_adj = true;
                a < 1000 + GUARANTEED_OOM_SCORE_ADJ
            }
            None => true,
        },
        _ => false,
    };
    s.guaranteed = cpu_equal && mem_equal && c.memory_limit_bytes.is_some();
    s
}

/// The class the container settings alone imply (GetPodQOS on what is
/// visible), and what it needed.
fn class_from_settings(containers: &[ContainerSettings]) -> (QosClass, QosSource) {
    let shapes: Vec<Shape> = containers.iter().map(shape).collect();
    let any_exact = containers
        .iter()
        .any(ContainerSettings::has_exact_resources);
    if !shapes.is_empty() && shapes.iter().all(|s| s.guaranteed) {
        let src = if shapes.iter().any(|s| s.used_min) {
            QosSource::MemoryMin
        } else if shapes.iter().any(|s| s.used_adj) {
            QosSource::OomScoreAdj
        } else {
            QosSource::Resources
        };
        return (QosClass::Guaranteed, src);
    }
    if !shapes.iter().any(|s| s.any_request) {
        return (QosClass::BestEffort, QosSource::Resources);
    }
    let src = if !any_exact {
        QosSource::OomScoreAdj
    } else if containers.iter().all(|c| {
        c.cpu_request_millis().is_none()
            && c.cpu_limit_millis().is_none()
            && c.memory_limit_bytes.is_none()
    }) {
        QosSource::MemoryMin
    } else {
        QosSource::Resources
    };
    (QosClass::Burstable, src)
}

/// Each container's oom_score_adj against the class: out of its band is a
/// warning, a Guaranteed value the runtime clamped a note.
fn check_oom_score_adj(
    class: QosClass,
    containers: &[ContainerSettings],
    notes: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    for c in containers {
        let Some(a) = c.oom_score_adj else { continue };
        let expected_ok = match class {
            QosClass::Guaranteed => a <= 0,
            QosClass::BestEffort => a == BESTEFFORT_OOM_SCORE_ADJ,
            QosClass::Burstable => {
                (1000 + GUARANTEED_OOM_SCORE_ADJ..BESTEFFORT_OOM_SCORE_ADJ).contains(&a)
            }
        };
        if !expected_ok {
            warnings.push(format!(
                "container {}: oom_score_adj {a} does not fit a {class} pod",
                c.name
            ));
        } else if class == QosClass::Guaranteed && a != GUARANTEED_OOM_SCORE_ADJ {
            notes.push(format!(
                "container {}: oom_score_adj {a} instead of {GUARANTEED_OOM_SCORE_ADJ} (clamped by the runtime)",
                c.name
            ));
        }
    }
}

/// One container's requests and limits from its settings, for `class`.
fn rebuild_container(
    c: &ContainerSettings,
    class: QosClass,
    memory_capacity_bytes: Option<i64>,
    notes: &mut Vec<String>,
) -> Container {
    let mut res = ResourceRequirements::default();
    let cpu_req = c.cpu_request_millis();
    let cpu_lim = c.cpu_limit_millis();
    if let Some(l) = cpu_lim {
        res.limits.insert("cpu".into(), Quantity::from_milli(l));
    }
    if let Some(l) = c.memory_limit_bytes {
        res.limits.insert("memory".into(), Quantity::from_value(l));
    }
    match class {
        QosClass::Guaranteed => {
            // requests = limits by definition of the class.
            if let Some(l) = cpu_lim.or(cpu_req) {
                res.requests.insert("cpu".into(), Quantity::from_milli(l));
            }
            if let Some(l) = c.memory_limit_bytes {
                res.requests
                    .insert("memory".into(), Quantity::from_value(l));
            }
        }
        QosClass::Burstable => {
            if let Some(r) = cpu_req {
                res.requests.insert("cpu".into(), Quantity::from_milli(r));
            }
            if let Some(m) = burstable_memory_request(c, memory_capacity_bytes, notes) {
                res.requests
                    .insert("memory".into(), Quantity::from_value(m));
            }
        }
        QosClass::BestEffort => {}
    }
    Container {
        name: c.name.clone(),
        resources: res,
        restartable: false,
    }
}

/// A Burstable container's memory request: memory.min when MemoryQoS set
/// it, else the largest value its oom_score_adj allows; notes say which.
fn burstable_memory_request(
    c: &ContainerSettings,
    memory_capacity_bytes: Option<i64>,
    notes: &mut Vec<String>,
) -> Option<i64> {
    if let Some(m) = c.memory_min_bytes {
        return Some(m);
    }
    let Some(a) = c.burstable_adj() else {
        if c.memory_limit_bytes.is_some() {
            notes.push(format!(
                "container {}: memory request unknown (no memory.min, no oom_score_adj)",
                c.name
            ));
        }
        return None;
    };
    let Some((low, high)) = memory_capacity_bytes.and_then(|cap| memory_request_band(a, cap))
    else {
        notes.push(format!(
            "container {}: memory request unknown (oom_score_adj {a}{})",
            c.name,
            if memory_capacity_bytes.is_none() {
                ", node memory capacity not given"
            } else {
                " carries no size"
            }
        ));
        return None;
    };
    // The largest request consistent with the oom_score_adj (the top of
    // its band, capped by the limit a request cannot exceed): a pod that
    // certainly exceeds its request ranks so.
    let top = match (high, c.memory_limit_bytes) {
        (Some(h), Some(l)) => h.min(l),
        (Some(h), None) => h,
        (None, Some(l)) => l,
        (None, None) => memory_capacity_bytes.unwrap_or(low),
    };
    notes.push(format!(
        "container {}: memory request taken as {top} bytes, the largest \
         value consistent with oom_score_adj {a} (band {low}..={}{})",
        c.name,
        high.map(|h| h.to_string()).unwrap_or_else(|| "∞".into()),
        match (high, c.memory_limit_bytes) {
            (Some(h), Some(l)) if l < h => ", capped by the limit",
            _ => "",
        }
    ));
    Some(top)
}

fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 {
        q
    } else {
        q + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The kubelet's forward mappings (helpers_linux.go, policy.go), for
    /// round-trip tests.
    fn shares(m: i64) -> i64 {
        if m == 0 {
            return 2;
        }
        (m * 1024 / 1000).clamp(2, 262_144)
    }
    fn quota(m: i64, period: i64) -> i64 {
        (m * period / 1000).max(1000)
    }
    fn burstable_adj(req: i64, cap: i64) -> i64 {
        let a = 1000 - (1000 * req as i128 / cap as i128) as i64;
        if a < 3 {
            3
        } else if a == 1000 {
            999
        } else {
            a
        }
    }

    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;

    fn settings(
        shares: i64,
        quota: i64,
        mem: i64,
        adj: Option<i64>,
        min: Option<i64>,
    ) -> ContainerSettings {
        let pos = |v: i64| (v > 0).then_some(v);
        ContainerSettings {
            name: "c".into(),
            cpu_shares: pos(shares),
            cpu_quota: pos(quota),
            cpu_period: (quota > 0).then_some(100_000),
            memory_limit_bytes: pos(mem),
            oom_score_adj: adj,
            memory_min_bytes: min,
        }
    }

    #[test]
    fn memory_request_band_table() {
        const GI: i64 = 1 << 30;
        let cap = 24 * GI;
        // every band holds exactly the requests giving that adj
        for adj in [3i64, 4, 500, 998, 999] {
            let (lo, hi) = memory_request_band(adj, cap).unwrap();
            let f = |req: i64| (1000 - (1000 * req as i128 / cap as i128) as i64).clamp(3, 999);
            assert_eq!(f(lo), adj, "low of {adj}");
            if lo > 0 {
                assert_ne!(f(lo - 1), adj, "below low of {adj}");
            }
            if let Some(h) = hi {
                assert_eq!(f(h), adj, "high of {adj}");
                assert_ne!(f(h + 1), adj, "above high of {adj}");
            }
        }
        assert_eq!(memory_request_band(1000, cap), None);
        assert_eq!(memory_request_band(-997, cap), None);
    }

    #[test]
    fn uids() {
        for ok in [
            "0b0a8c1e-1111-2222-3333-444455556666",
            "6f1b8a0e2b5c4d3f9a7e1c2b3a4d5e6f",
            "a",
        ] {
            assert!(validate_uid(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(65);
        for bad in [
            "",
            "../etc",
            "a/b",
            "a\0b",
            "..",
            "a b",
            "uid\n",
            long.as_str(),
            "é",
        ] {
            assert!(validate_uid(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn parents() {
        let t = [
            (
                "/kubepods/pod123",
                Some((QosClass::Guaranteed, "123", false)),
            ),
            (
                "/kubepods/burstable/pod12-3/",
                Some((QosClass::Burstable, "12-3", false)),
            ),
            (
                "/kubepods/besteffort/podabc",
                Some((QosClass::BestEffort, "abc", false)),
            ),
            (
                "/qosd-test-1-0/kubepods/burstable/podabc",
                Some((QosClass::Burstable, "abc", false)),
            ),
            (
                "kubepods-burstable-pod1a_2b.slice",
                Some((QosClass::Burstable, "1a-2b", true)),
            ),
            (
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podx_y.slice",
                Some((QosClass::BestEffort, "x-y", true)),
            ),
            (
                "kubepods-pod9.slice",
                Some((QosClass::Guaranteed, "9", true)),
            ),
            ("/burstable/podabc", None),
            ("/other/burstable/podabc", None),
            ("/kubepods/burstable", None),
            ("/kubepods/pod", None),
            ("/", None),
            ("", None),
            ("system.slice", None),
        ];
        for (p, want) in t {
            let got = parse_cgroup_parent(p).map(|x| (x.class, x.uid, x.systemd));
            let want = want.map(|(c, u, s)| (c, u.to_string(), s));
            assert_eq!(got, want, "{p}");
        }
    }

    #[test]
    fn classes_from_settings() {
        let cap = 16 * GI;
        struct Case {
            name: &'static str,
            containers: Vec<ContainerSettings>,
            class: QosClass,
            source: QosSource,
        }
        let cases = vec![
            Case {
                name: "guaranteed, adj clamped to 0",
                containers: vec![settings(
                    shares(500),
                    quota(500, 100_000),
                    256 * MI,
                    Some(0),
                    None,
                )],
                class: QosClass::Guaranteed,
                source: QosSource::OomScoreAdj,
            },
            Case {
                name: "guaranteed, -997",
                containers: vec![settings(1024, 100_000, GI, Some(-997), None)],
                class: QosClass::Guaranteed,
                source: QosSource::OomScoreAdj,
            },
            Case {
                name: "guaranteed via memory.min",
                containers: vec![settings(1024, 100_000, GI, None, Some(GI))],
                class: QosClass::Guaranteed,
                source: QosSource::MemoryMin,
            },
            Case {
                name: "burstable: limits above requests",
                containers: vec![settings(
                    shares(100),
                    quota(500, 100_000),
                    256 * MI,
                    Some(900),
                    None,
                )],
                class: QosClass::Burstable,
                source: QosSource::Resources,
            },
            Case {
                name: "burstable: memory request only, visible only in adj",
                containers: vec![settings(2, 0, 0, Some(burstable_adj(GI, cap)), None)],
                class: QosClass::Burstable,
                source: QosSource::OomScoreAdj,
            },
            Case {
                name: "burstable: memory limit only, memory request = limit but no cpu",
                containers: vec![settings(
                    2,
                    0,
                    128 * MI,
                    Some(burstable_adj(128 * MI, cap)),
                    None,
                )],
                class: QosClass::Burstable,
                source: QosSource::Resources,
            },
            Case {
                name: "burstable: guaranteed-like + besteffort-like containers",
                containers: vec![
                    settings(1024, 100_000, GI, Some(500), None),
                    settings(2, 0, 0, Some(999), None),
                ],
                class: QosClass::Burstable,
                source: QosSource::Resources,
            },
            Case {
                name: "besteffort",
                containers: vec![
                    settings(2, 0, 0, Some(1000), None),
                    settings(2, 0, 0, Some(1000), None),
                ],
                class: QosClass::BestEffort,
                source: QosSource::Resources,
            },
            Case {
                name: "no containers",
                containers: vec![],
                class: QosClass::BestEffort,
                source: QosSource::Resources,
            },
        ];
        for c in cases {
            let r = reconstruct(None, &c.containers, Some(cap));
            assert_eq!((r.class, r.source), (c.class, c.source), "{}", c.name);
            assert!(r.warnings.is_empty(), "{}: {:?}", c.name, r.warnings);
            // The parent agrees: no warning, source cgroup-parent.
            let r = reconstruct(Some(c.class), &c.containers, Some(cap));
            assert_eq!(r.source, QosSource::CgroupParent, "{}", c.name);
            assert!(r.warnings.is_empty(), "{}: {:?}", c.name, r.warnings);
        }
    }

    #[test]
    fn no_containers_yet_is_no_mismatch() {
        let r = reconstruct(Some(QosClass::Guaranteed), &[], None);
        assert_eq!(r.class, QosClass::Guaranteed);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        assert!(r.notes.iter().any(|n| n.contains("no containers yet")));
    }

    #[test]
    fn parent_wins_and_mismatch_is_reported() {
        let c = [settings(1024, 100_000, GI, Some(0), None)];
        let r = reconstruct(Some(QosClass::Burstable), &c, None);
        assert_eq!(r.class, QosClass::Burstable);
        assert_eq!(r.resources_class, QosClass::Guaranteed);
        assert!(
            r.warnings.iter().any(|w| w.contains("Burstable")),
            "{:?}",
            r.warnings
        );
    }

    #[test]
    fn rebuilt_requests_and_limits() {
        let cap = 8 * GI;
        let g = reconstruct(
            Some(QosClass::Guaranteed),
            &[settings(
                shares(250),
                quota(250, 100_000),
                64 * MI,
                Some(0),
                None,
            )],
            Some(cap),
        );
        let r = &g.containers[0].resources;
        assert_eq!(r.requests["cpu"].milli_ceil(), 250);
        assert_eq!(r.limits["cpu"].milli_ceil(), 250);
        assert_eq!(r.requests["memory"].value_ceil(), 64 * MI);
        assert_eq!(r.limits["memory"].value_ceil(), 64 * MI);

        let req = 2 * GI;
        let b = reconstruct(
            Some(QosClass::Burstable),
            &[settings(
                shares(100),
                0,
                0,
                Some(burstable_adj(req, cap)),
                None,
            )],
            Some(cap),
        );
        let r = &b.containers[0].resources;
        assert_eq!(r.requests["cpu"].milli_ceil(), 100);
        // the top of the oom_score_adj band: never below the real request
        let m = r.requests["memory"].value_ceil();
        assert!(m >= req && m - req <= cap / 1000 + 1, "{m} vs {req}");
        assert!(r.limits.is_empty());
        assert!(b
            .notes
            .iter()
            .any(|n| n.contains("largest value consistent with oom_score_adj")));

        // Without the node capacity the memory request stays unknown, said so.
        let b = reconstruct(
            Some(QosClass::Burstable),
            &[settings(shares(100), 0, 0, Some(500), None)],
            None,
        );
        assert!(!b.containers[0].resources.requests.contains_key("memory"));
        assert!(b.notes.iter().any(|n| n.contains("capacity not given")));

        // Memory limit only: request defaulted to the limit, within adj's band.
        let lim = 96 * MI;
        let b = reconstruct(
            Some(QosClass::Burstable),
            &[settings(2, 0, lim, Some(burstable_adj(lim, cap)), None)],
            Some(cap),
        );
        assert_eq!(
            b.containers[0].resources.requests["memory"].value_ceil(),
            lim
        );

        let e = reconstruct(
            Some(QosClass::BestEffort),
            &[settings(2, 0, 0, Some(1000), None)],
            None,
        );
        assert!(e.containers[0].resources.requests.is_empty());
        assert!(e.containers[0].resources.limits.is_empty());
    }

    proptest! {
        #[test]
        fn shares_round_trip(m in 3i64..=256_000) {
            let s = settings(shares(m), 0, 0, None, None);
            // shares(m) is injective above the floor, so the inverse is exact.
            prop_assert_eq!(s.cpu_request_millis(), Some(m));
        }

        #[test]
        fn quota_round_trip(m in 10i64..=1_000_000, period in prop::sample::select(vec![100_000i64, 50_000, 10_000, 1_000_000])) {
            prop_assume!(m * period / 1000 >= 1000);
            let s = ContainerSettings { cpu_quota: Some(quota(m, period)), cpu_period: Some(period), ..Default::default() };
            let back = s.cpu_limit_millis().unwrap();
            // Exact when m·period is a multiple of 1000 (always for period 100000).
            prop_assert_eq!(quota(back, period), quota(m, period));
            if (m * period) % 1000 == 0 { prop_assert_eq!(back, m); }
        }

        #[test]
        fn oom_adj_round_trip(req in 1i64..(64 * GI), cap in (GI)..(64 * GI)) {
            let adj = burstable_adj(req, cap);
            if let Some(m) = memory_request_from_oom_score_adj(adj, cap) {
                // The inferred request gives the same adj and is a lower bound.
                prop_assert_eq!(burstable_adj(m, cap), adj);
                prop_assert!(m <= req);
                prop_assert!(req - m <= cap / 1000 + 1);
            } else {
                prop_assert!(adj == 3 || adj == 999);
            }
        }
    }
}
