//! The CPU manager state: the shared pool (`defaultCpuSet`) and the
//! exclusive assignments, in the kubelet's `cpu_manager_state` checkpoint
//! format (pkg/kubelet/cm/cpumanager/state/checkpoint.go, v2):
//!
//! ```json
//! {"policyName":"static","defaultCpuSet":"0-1,4-7","entries":{"<pod uid>":{"<container>":"2-3"}},"checksum":1234567890}
//! ```
//!
//! The checksum is the kubelet's (pkg/kubelet/checkpointmanager/checksum):
//! FNV-1a 32 over the go-spew `%#v` rendering (sorted map keys, no pointer
//! addresses) of the checkpoint struct with `Checksum` zero, i.e.
//! `(*state.CPUManagerCheckpoint){PolicyName:(string)… DefaultCPUSet:(string)…
//! Entries:(map[string]map[string]string)map[pod:map[c:2-3]] Checksum:(checksum.Checksum)0}`.
//! Pure: bytes in, bytes out; files are read and written by the caller.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cpuset::{CpuSet, CpuSetError};

/// pod uid → container name → CPUs.
pub(crate) type Assignments = BTreeMap<String, BTreeMap<String, CpuSet>>;

/// The CPU manager's state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuState {
    /// `policyName` of the checkpoint.
    pub policy_name: String,
    /// The shared pool (reserved CPUs included).
    pub default: CpuSet,
    /// The exclusive assignments: pod uid → container name → CPUs.
    pub entries: Assignments,
}

/// Why a checkpoint cannot be used. Messages follow the kubelet's.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Not checkpoint JSON (invalid, or of the wrong shape).
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// The checksum does not match the content.
    #[error("checkpoint is corrupted (checksum {found}, computed {computed})")]
    Corrupt {
        /// The checksum in the file.
        found: u64,
        /// The checksum of the content.
        computed: u64,
    },
    /// `defaultCpuSet` is not a CPU list.
    #[error("could not parse default cpu set {value:?}: {source}")]
    DefaultSet {
        /// The value in the file.
        value: String,
        /// Why it does not parse.
        source: CpuSetError,
    },
    /// An entry's value is not a CPU list.
    #[error(
        "could not parse cpuset {value:?} for container {container:?} in pod {pod:?}: {source}"
    )]
    Entry {
        /// The pod's uid.
        pod: String,
        /// The container's name.
        container: String,
        /// The value in the file.
        value: String,
        /// Why it does not parse.
        source: CpuSetError,
    },
}

#[derive(Serialize, Deserialize)]
struct Checkpoint {
    #[serde(rename = "policyName", default)]
    policy_name: String,
    #[serde(rename = "defaultCpuSet", alias = "defaultCPUSet", default)]
    default_cpu_set: String,
    #[serde(
        rename = "entries",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    entries: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(rename = "checksum", default)]
    checksum: u64,
}

/// FNV-1a, 32 bit (Go `hash/fnv.New32a`).
pub(crate) fn fnv1a32(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The go-spew `%#v` text the kubelet hashes, for the v2 checkpoint struct
/// named `type_name` (`CPUManagerCheckpoint`; kubelets with the v3 format
/// hash v2 files as `CPUManagerCheckpointV2`).
pub(crate) fn spew_text(
    type_name: &str,
    policy: &str,
    default: &str,
    entries: &BTreeMap<String, BTreeMap<String, String>>,
) -> String {
    let mut s = format!(
        "(*state.{type_name}){{PolicyName:(string){policy} DefaultCPUSet:(string){default} Entries:(map[string]map[string]string)map["
    );
    for (i, (pod, containers)) in entries.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(pod);
        s.push_str(":map[");
        for (j, (c, v)) in containers.iter().enumerate() {
            if j > 0 {
                s.push(' ');
            }
            s.push_str(c);
            s.push(':');
            s.push_str(v);
        }
        s.push(']');
    }
    s.push_str("] Checksum:(checksum.Checksum)0}");
    s
}

/// The kubelet's checksum of a v2 checkpoint.
pub(crate) fn checksum(
    policy: &str,
    default: &str,
    entries: &BTreeMap<String, BTreeMap<String, String>>,
) -> u64 {
    u64::from(fnv1a32(
        spew_text("CPUManagerCheckpoint", policy, default, entries).as_bytes(),
    ))
}

impl CpuState {
    /// The checkpoint bytes, exactly as the kubelet's `json.Marshal` writes
    /// them (field order, sorted keys, `entries` omitted when empty).
    pub fn to_json(&self) -> Vec<u8> {
        let entries: BTreeMap<String, BTreeMap<String, String>> = self
            .entries
            .iter()
            .map(|(p, cs)| {
                (
                    p.clone(),
                    cs.iter().map(|(c, s)| (c.clone(), s.to_string())).collect(),
                )
            })
            .collect();
        let default = self.default.to_string();
        let cp = Checkpoint {
            checksum: checksum(&self.policy_name, &default, &entries),
            policy_name: self.policy_name.clone(),
            default_cpu_set: default,
            entries,
        };
        serde_json::to_vec(&cp).expect("checkpoint serializes")
    }

    /// Parse and verify a checkpoint. A zero checksum is accepted (old file
    /// backend), as the kubelet does; otherwise it must match the hash under
    /// either struct name the kubelet has used for the v2 format.
    pub fn from_json(bytes: &[u8]) -> Result<CpuState, StateError> {
        let cp: Checkpoint = serde_json::from_slice(bytes)?;
        if cp.checksum != 0 {
            let mut computed = 0;
            let ok = ["CPUManagerCheckpoint", "CPUManagerCheckpointV2"]
                .iter()
                .any(|t| {
                    computed = u64::from(fnv1a32(
                        spew_text(t, &cp.policy_name, &cp.default_cpu_set, &cp.entries).as_bytes(),
                    ));
                    computed == cp.checksum
                });
            if !ok {
                return Err(StateError::Corrupt {
                    found: cp.checksum,
                    computed: checksum(&cp.policy_name, &cp.default_cpu_set, &cp.entries),
                });
            }
        }
        let default =
            CpuSet::parse(&cp.default_cpu_set).map_err(|source| StateError::DefaultSet {
                value: cp.default_cpu_set.clone(),
                source,
            })?;
        let mut entries = Assignments::new();
        for (pod, cs) in &cp.entries {
            for (c, v) in cs {
                let set = CpuSet::parse(v).map_err(|source| StateError::Entry {
                    pod: pod.clone(),
                    container: c.clone(),
                    value: v.clone(),
                    source,
                })?;
                entries
                    .entry(pod.clone())
                    .or_default()
                    .insert(c.clone(), set);
            }
        }
        Ok(CpuState {
            policy_name: cp.policy_name,
            default,
            entries,
        })
    }

    /// The assignment of one container, if any.
    pub fn get(&self, pod: &str, container: &str) -> Option<&CpuSet> {
        self.entries.get(pod).and_then(|m| m.get(container))
    }

    /// Record the exclusive CPUs of one container.
    pub fn set(&mut self, pod: &str, container: &str, cpus: CpuSet) {
        self.entries
            .entry(pod.to_string())
            .or_default()
            .insert(container.to_string(), cpus);
    }

    pub(crate) fn delete(&mut self, pod: &str, container: &str) {
        if let Some(m) = self.entries.get_mut(pod) {
            m.remove(container);
            if m.is_empty() {
                self.entries.remove(pod);
            }
        }
    }

    /// Every CPU held by some assignment.
    pub(crate) fn assigned(&self) -> CpuSet {
        self.entries
            .values()
            .flat_map(|m| m.values())
            .fold(CpuSet::new(), |a, s| a.union(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_reference_values() {
        // Go: fnv.New32a() over "" and "a".
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
    }

    #[test]
    fn kubelet_checkpoint_checksums() {
        // Known values from the kubelet's state_checkpoint_test.go, and one
        // from a real node's /var/lib/kubelet/cpu_manager_state.
        let e = BTreeMap::new();
        assert_eq!(checksum("none", "4-6", &e), 354655845);
        assert_eq!(checksum("other", "1-3", &e), 1394507217);
        assert_eq!(checksum("none", "1.3", &e), 3021697696);
        assert_eq!(checksum("none", "", &e), 1353318690);
        let mut pod = BTreeMap::new();
        pod.insert("container1".to_string(), "4-6".to_string());
        pod.insert("container2".to_string(), "1-3".to_string());
        let mut e = BTreeMap::new();
        e.insert("pod".to_string(), pod.clone());
        assert_eq!(checksum("none", "1-3", &e), 3610638499);
        pod.insert("container2".to_string(), "asd".to_string());
        e.insert("pod".to_string(), pod);
        assert_eq!(checksum("none", "1-3", &e), 962272150);
    }

    #[test]
    fn reads_kubelet_files() {
        let s = CpuState::from_json(
            br#"{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"pod": {"container1": "4-6", "container2": "1-3"}}, "checksum": 3610638499}"#,
        )
        .unwrap();
        assert_eq!(s.policy_name, "none");
        assert_eq!(s.default.to_string(), "1-3");
        assert_eq!(s.get("pod", "container1").unwrap().to_string(), "4-6");
        let s = CpuState::from_json(
            br#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#,
        )
        .unwrap();
        assert!(s.default.is_empty() && s.entries.is_empty());
        // zero checksum: accepted (old file backend)
        CpuState::from_json(br#"{"policyName": "none", "defaultCpuSet": "4-6"}"#).unwrap();
    }

    #[test]
    fn corrupt_and_bad_values() {
        let e = CpuState::from_json(
            br#"{"policyName":"none","defaultCpuSet":"4-6","entries":{},"checksum":1337}"#,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                StateError::Corrupt {
                    found: 1337,
                    computed: 354655845
                }
            ),
            "{e}"
        );
        let e = CpuState::from_json(
            br#"{"policyName":"none","defaultCPUSet":"1.3","entries":{},"checksum":3021697696}"#,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("could not parse default cpu set \"1.3\""),
            "{e}"
        );
        let e = CpuState::from_json(
            br#"{"policyName":"none","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"asd"}},"checksum":962272150}"#,
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "could not parse cpuset \"asd\" for container \"container2\" in pod \"pod\""
            ),
            "{e}"
        );
        assert!(CpuState::from_json(b"{").is_err());
    }

    #[test]
    fn writes_kubelet_bytes_and_round_trips() {
        let mut s = CpuState {
            policy_name: "static".into(),
            default: CpuSet::parse("0-1,4-7").unwrap(),
            entries: Assignments::new(),
        };
        s.set("pod-b", "app", CpuSet::from([2, 3]));
        s.set("pod-a", "z", CpuSet::from([8]));
        s.set("pod-a", "a", CpuSet::from([9]));
        let bytes = s.to_json();
        let text = String::from_utf8(bytes.clone()).unwrap();
        let mut e = BTreeMap::new();
        for (p, c, v) in [
            ("pod-a", "a", "9"),
            ("pod-a", "z", "8"),
            ("pod-b", "app", "2-3"),
        ] {
            e.entry(p.to_string())
                .or_insert_with(BTreeMap::new)
                .insert(c.to_string(), v.to_string());
        }
        let sum = checksum("static", "0-1,4-7", &e);
        assert_eq!(
            text,
            format!(
                r#"{{"policyName":"static","defaultCpuSet":"0-1,4-7","entries":{{"pod-a":{{"a":"9","z":"8"}},"pod-b":{{"app":"2-3"}}}},"checksum":{sum}}}"#
            )
        );
        assert_eq!(CpuState::from_json(&bytes).unwrap(), s);
        // empty entries are omitted, like the kubelet's omitempty
        let empty = CpuState {
            policy_name: "none".into(),
            ..Default::default()
        };
        assert_eq!(
            String::from_utf8(empty.to_json()).unwrap(),
            r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#
        );
    }

    #[test]
    fn accepts_v3_era_v2_checksum() {
        let e = BTreeMap::new();
        let sum = fnv1a32(spew_text("CPUManagerCheckpointV2", "static", "0-3", &e).as_bytes());
        let s = CpuState::from_json(
            format!(r#"{{"policyName":"static","defaultCpuSet":"0-3","checksum":{sum}}}"#)
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(s.default.to_string(), "0-3");
    }
}
