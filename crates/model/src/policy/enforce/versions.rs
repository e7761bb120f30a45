//! The kubelet versions qosd knows and the rules that differ between them
//! (`kubeletVersion` / `--kubelet-version`). docs/semantics.md §9 has the
//! same table in prose; `RULES` is the source of truth and the docs test
//! (`versions::tests::docs_table_lists_every_rule`) keeps them in step.

use std::fmt;

/// A kubelet minor version whose cgroup semantics qosd reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KubeletVersion {
    /// Kubernetes 1.33.
    V1_33,
    /// Kubernetes 1.34.
    V1_34,
    /// Kubernetes 1.35.
    V1_35,
    /// Kubernetes 1.36.
    V1_36,
}

/// One rule that changed at a kubelet version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Pod-level `spec.resources` (KEP-2837) decide the QoS class and the pod
    /// sums: the `PodLevelResources` gate is beta and on by default from
    /// 1.34. Before, the gate is off and the API server drops the field.
    PodLevelResources,
    /// `failCgroupV1` defaults to true: the kubelet refuses cgroup v1 unless
    /// told otherwise (qosd only warns).
    CgroupV1Refused,
    /// MemoryQoS tiers: Guaranteed → `memory.min`, Burstable → `memory.low`,
    /// under `memoryReservationPolicy` (None: no protection at all);
    /// before: `memory.min` = request for every pod.
    MemoryQosTiered,
    /// MemoryQoS writes `0` to kubepods `memory.min` / burstable
    /// `memory.low` (and the pods' unused key) when nothing is protected;
    /// before: nothing was written and stale values stayed.
    MemoryQosZeroReset,
    /// A cpu/memory limit counts as declared for the pod only when every
    /// container (app, init, sidecar) has its own; before, an init
    /// container was judged together with the sidecars started before it.
    OwnLimitDeclared,
    /// Pod-level `spec.resources` are resized in place like containers'
    /// (`InPlacePodLevelResourcesVerticalScaling` beta, on): the pod cgroup
    /// follows the kubelet's pod-level allocation (`status.allocatedResources`,
    /// `status.resources`); before, the kubelet sizes it from
    /// `spec.resources` as written.
    PodLevelResize,
}

/// A versioned rule, for the docs table and `qosd plan`'s header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuleInfo {
    pub(crate) rule: Rule,
    /// Short name, the key of its row in docs/semantics.md (a unit test
    /// checks the table against this list).
    #[cfg(test)]
    pub(crate) name: &'static str,
    /// First kubelet version with the rule.
    pub(crate) since: KubeletVersion,
}

/// Every versioned rule, oldest first.
pub(crate) const RULES: &[RuleInfo] = &[
    RuleInfo {
        // Where in the kubelet: PodLevelResources gate (KEP-2837) beta; helpers_linux.go ResourceConfigForPod
        rule: Rule::PodLevelResources,
        #[cfg(test)]
        name: "pod-level-resources",
        since: KubeletVersion::V1_34,
    },
    RuleInfo {
        // Where in the kubelet: failCgroupV1 default true; container_manager_linux.go
        rule: Rule::CgroupV1Refused,
        #[cfg(test)]
        name: "cgroup-v1-refused",
        since: KubeletVersion::V1_35,
    },
    RuleInfo {
        // Where in the kubelet: PR #137584, #137719; helpers_linux.go, qos_container_manager_linux.go
        rule: Rule::MemoryQosTiered,
        #[cfg(test)]
        name: "memory-qos-tiered",
        since: KubeletVersion::V1_36,
    },
    RuleInfo {
        // Where in the kubelet: PR #137719; qos_container_manager_linux.go setMemoryQoS
        rule: Rule::MemoryQosZeroReset,
        #[cfg(test)]
        name: "memory-qos-zero-reset",
        since: KubeletVersion::V1_36,
    },
    RuleInfo {
        // Where in the kubelet: helpers_linux.go ResourceConfigForPod (limits declared)
        rule: Rule::OwnLimitDeclared,
        #[cfg(test)]
        name: "own-limit-declared",
        since: KubeletVersion::V1_36,
    },
    RuleInfo {
        // Where in the kubelet: allocation/allocation_manager.go updatePodFromAllocation (InPlacePodLevelResourcesVerticalScaling)
        rule: Rule::PodLevelResize,
        #[cfg(test)]
        name: "pod-level-resize",
        since: KubeletVersion::V1_36,
    },
];

impl KubeletVersion {
    /// Every known version, oldest first.
    pub(crate) const ALL: [KubeletVersion; 4] = [
        KubeletVersion::V1_33,
        KubeletVersion::V1_34,
        KubeletVersion::V1_35,
        KubeletVersion::V1_36,
    ];
    /// The default: the newest version qosd knows.
    pub const NEWEST: KubeletVersion = KubeletVersion::V1_36;

    pub(crate) fn minor(self) -> u32 {
        match self {
            KubeletVersion::V1_33 => 33,
            KubeletVersion::V1_34 => 34,
            KubeletVersion::V1_35 => 35,
            KubeletVersion::V1_36 => 36,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            KubeletVersion::V1_33 => "1.33",
            KubeletVersion::V1_34 => "1.34",
            KubeletVersion::V1_35 => "1.35",
            KubeletVersion::V1_36 => "1.36",
        }
    }

    /// `1.36`, `v1.36`, `1.36.2`, `v1.36.0-rc.1` → 1.36. Unknown minors
    /// are an error naming the known ones.
    pub fn parse(s: &str) -> Result<KubeletVersion, String> {
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.splitn(3, '.');
        let (major, minor) = (parts.next(), parts.next());
        let known = || {
            KubeletVersion::ALL
                .iter()
                .map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let minor: Option<u32> = match (major, minor) {
            (Some("1"), Some(m)) => m.parse().ok(),
            _ => None,
        };
        let Some(minor) = minor else {
            return Err(format!(
                "{s:?} is not a kubelet version (expected 1.MINOR, one of {})",
                known()
            ));
        };
        KubeletVersion::ALL
            .into_iter()
            .find(|v| v.minor() == minor)
            .ok_or_else(|| {
                format!(
                    "kubelet version {s:?} is not known to qosd (known: {})",
                    known()
                )
            })
    }

    /// Whether this version has `rule`.
    pub fn has(self, rule: Rule) -> bool {
        RULES
            .iter()
            .find(|r| r.rule == rule)
            .is_some_and(|r| self >= r.since)
    }

    #[cfg(test)]
    /// Names of the versioned rules this version applies.
    pub(crate) fn rule_names(self) -> Vec<&'static str> {
        RULES
            .iter()
            .filter(|r| self >= r.since)
            .map(|r| r.name)
            .collect()
    }
}

impl Default for KubeletVersion {
    fn default() -> Self {
        KubeletVersion::NEWEST
    }
}

impl fmt::Display for KubeletVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for KubeletVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        KubeletVersion::parse(s)
    }
}

impl serde::Serialize for KubeletVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        for (s, v) in [
            ("1.33", KubeletVersion::V1_33),
            ("v1.34", KubeletVersion::V1_34),
            ("1.35.2", KubeletVersion::V1_35),
            ("v1.36.0-rc.1", KubeletVersion::V1_36),
            (" 1.36 ", KubeletVersion::V1_36),
        ] {
            assert_eq!(KubeletVersion::parse(s), Ok(v), "{s}");
        }
        for bad in ["1.32", "1.37", "2.0", "136", "", "1.x", "v1"] {
            let e = KubeletVersion::parse(bad).unwrap_err();
            assert!(e.contains("1.33, 1.34, 1.35, 1.36"), "{bad}: {e}");
        }
        assert_eq!(KubeletVersion::default(), KubeletVersion::V1_36);
    }

    #[test]
    fn rules_per_version() {
        use KubeletVersion::*;
        // (version, pod-level, v1 refused, tiered, zero reset, own limit,
        // pod-level resize)
        for (v, want) in [
            (V1_33, [false, false, false, false, false, false]),
            (V1_34, [true, false, false, false, false, false]),
            (V1_35, [true, true, false, false, false, false]),
            (V1_36, [true, true, true, true, true, true]),
        ] {
            let got = [
                Rule::PodLevelResources,
                Rule::CgroupV1Refused,
                Rule::MemoryQosTiered,
                Rule::MemoryQosZeroReset,
                Rule::OwnLimitDeclared,
                Rule::PodLevelResize,
            ]
            .map(|r| v.has(r));
            assert_eq!(got, want, "{v}");
        }
        assert_eq!(V1_33.rule_names(), Vec::<&str>::new());
        assert_eq!(V1_36.rule_names().len(), RULES.len());
    }

    #[test]
    fn docs_table_lists_every_rule() {
        let doc = include_str!("../../../../../docs/semantics.md");
        for r in RULES {
            let row = doc
                .lines()
                .find(|l| l.starts_with(&format!("| `{}` ", r.name)))
                .unwrap_or_else(|| panic!("docs/semantics.md has no row for `{}`", r.name));
            assert!(
                row.contains(&format!("| {} |", r.since)),
                "docs row of {} does not say {}: {row}",
                r.name,
                r.since
            );
        }
    }
}
