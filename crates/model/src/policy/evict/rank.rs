//! Which pod to evict first, per signal, as the kubelet ranks them (pure).
//!
//! pkg/kubelet/eviction/helpers.go:
//! * memory (`memory.available`, `allocatableMemory.available`): pods
//!   without stats first, then pods whose working set exceeds their memory
//!   request, then lower priority, then larger usage above the request;
//! * disk (`nodefs.*`, `imagefs.*`, `containerfs.*`): pods without stats
//!   first, then usage exceeding the ephemeral-storage request, then
//!   priority, then larger usage above the request. Inodes: "exceeds" is
//!   against an inode request of 0, and the last key subtracts the
//!   ephemeral-storage request (in bytes) from the inode count, exactly as
//!   the kubelet's `disk()` comparator does. Which parts of a pod's storage
//!   count depends on the [`DiskLayout`] (buildSignalToRankFunc);
//! * pid: lower priority first, then more processes first.
//!
//! qosd adds a final tiebreak on the pod uid so the order is total and does
//! not depend on the input order. Static/mirror pods and pods with priority
//! ≥ 2000000000 are never evicted: they are listed apart with the reason.

#[cfg(test)]
use std::cmp::Ordering;
use std::path::PathBuf;

use serde::Serialize;

use crate::core::model::{Pod, QosClass};
use crate::policy::evict::threshold::{Signal, SignalResource};

/// Usage of one pod, as measured now. `None` fields: not measured.
///
/// `ephemeral_storage_bytes` / `inodes` are the pod's totals (writable
/// layers + logs + local volumes); the `rootfs_*`, `logs_*` and `volumes_*`
/// parts, when measured, let the ranking count only what lives on the
/// filesystem under pressure (see [`DiskLayout`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PodStats {
    /// Memory working set, bytes.
    #[serde(default)]
    pub memory_working_set_bytes: Option<u64>,
    /// Local ephemeral storage in use, bytes (the pod's total).
    #[serde(default)]
    pub ephemeral_storage_bytes: Option<u64>,
    /// Inodes in use (the pod's total).
    #[serde(default)]
    pub inodes: Option<u64>,
    /// Processes (pids) in the pod.
    #[serde(default)]
    pub processes: Option<u64>,
    /// The share of the last sample interval during which at least one of
    /// the pod's tasks stalled on memory (its cgroup's `memory.pressure`
    /// `some` total, grown over the interval), in parts per million;
    /// `None`: not measured (cgroup v1, or a first sample). Ranks pods for
    /// the pressure signals ([`crate::policy::evict::pressure`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_stall_ppm: Option<u32>,
    /// Containers' writable layers (CRI `writable_layer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs_bytes: Option<u64>,
    /// Inodes of the writable layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs_inodes: Option<u64>,
    /// Container logs (`<podLogsDir>/<ns>_<name>_<uid>/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs_bytes: Option<u64>,
    /// Inodes of the container logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs_inodes: Option<u64>,
    /// Local (disk-backed) volumes under `<rootDir>/pods/<uid>/volumes/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes_bytes: Option<u64>,
    /// Inodes of the local volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes_inodes: Option<u64>,
}

/// How the node's filesystems are laid out, which decides what part of a
/// pod's storage each disk signal ranks by (kubelet buildSignalToRankFunc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskLayout {
    /// nodefs, imagefs and containerfs are one filesystem: every disk
    /// signal counts writable layers + logs + local volumes.
    #[default]
    Shared,
    /// A dedicated imagefs that also holds the writable layers: nodefs
    /// counts logs + local volumes, imagefs/containerfs the writable layers.
    DedicatedImageFs,
    /// Images on their own filesystem, writable layers with nodefs
    /// (KubeletSeparateDiskGC): nodefs/containerfs count everything but
    /// images, imagefs counts no pod storage.
    Split,
}

/// What parts of a pod's storage a disk signal counts.
fn disk_parts(signal: Signal, layout: DiskLayout) -> (bool, bool, bool) {
    // (rootfs, logs, volumes)
    use Signal::*;
    match (layout, signal) {
        (DiskLayout::Shared, _) => (true, true, true),
        (DiskLayout::DedicatedImageFs, NodeFsAvailable | NodeFsInodesFree) => (false, true, true),
        (DiskLayout::DedicatedImageFs, _) => (true, false, false),
        (DiskLayout::Split, ImageFsAvailable | ImageFsInodesFree) => (false, false, false),
        (DiskLayout::Split, _) => (true, true, true),
    }
}

impl PodStats {
    /// Bytes (or inodes) of the pod's storage a disk signal counts: the
    /// measured parts, or the total when the parts are not known.
    pub(crate) fn disk_usage(&self, signal: Signal, layout: DiskLayout) -> Option<u64> {
        let inodes = signal.resource() == SignalResource::Inodes;
        let (total, parts) = if inodes {
            (
                self.inodes,
                [self.rootfs_inodes, self.logs_inodes, self.volumes_inodes],
            )
        } else {
            (
                self.ephemeral_storage_bytes,
                [self.rootfs_bytes, self.logs_bytes, self.volumes_bytes],
            )
        };
        if parts.iter().all(Option::is_none) {
            return total;
        }
        let (r, l, v) = disk_parts(signal, layout);
        let mut sum = 0u64;
        for (want, part) in [(r, parts[0]), (l, parts[1]), (v, parts[2])] {
            if want {
                sum = sum.saturating_add(part.unwrap_or(0));
            }
        }
        Some(sum)
    }

    /// These stats with the local-storage parts (writable layers, logs,
    /// volumes: bytes and inodes) of `parts`, and the totals from them.
    pub fn with_storage(mut self, parts: &PodStats) -> PodStats {
        self.rootfs_bytes = parts.rootfs_bytes;
        self.rootfs_inodes = parts.rootfs_inodes;
        self.logs_bytes = parts.logs_bytes;
        self.logs_inodes = parts.logs_inodes;
        self.volumes_bytes = parts.volumes_bytes;
        self.volumes_inodes = parts.volumes_inodes;
        self.with_totals()
    }

    /// Totals from the measured parts (writable layers + logs + volumes).
    pub(crate) fn with_totals(mut self) -> PodStats {
        let add = |a: [Option<u64>; 3]| {
            a.iter().any(Option::is_some).then(|| {
                a.iter()
                    .map(|x| x.unwrap_or(0))
                    .fold(0u64, u64::saturating_add)
            })
        };
        if let Some(b) = add([self.rootfs_bytes, self.logs_bytes, self.volumes_bytes]) {
            self.ephemeral_storage_bytes = Some(b);
        }
        if let Some(i) = add([self.rootfs_inodes, self.logs_inodes, self.volumes_inodes]) {
            self.inodes = Some(i);
        }
        self
    }
}

/// Everything the ranking (and the evictor) needs about one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The pod's uid.
    pub uid: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's QoS class.
    pub qos: QosClass,
    /// `spec.priority`.
    pub priority: i32,
    /// A static or mirror pod (never evicted).
    pub static_or_mirror: bool,
    /// The pod's effective memory request, bytes.
    pub memory_request_bytes: i64,
    /// The pod's effective `ephemeral-storage` request, bytes.
    pub ephemeral_storage_request_bytes: i64,
    /// `spec.terminationGracePeriodSeconds`, if set.
    pub termination_grace_period_seconds: Option<i64>,
    /// CRI sandbox id, when the pod came from the runtime.
    pub sandbox_id: Option<String>,
    /// Absolute directories of the pod's cgroup (v2: one; v1: the memory
    /// hierarchy's first, then others such as pids/freezer). Used by the
    /// kill backend and the per-pod signals.
    pub cgroup_dirs: Vec<PathBuf>,
    /// Measured usage (`None`: no stats).
    pub stats: Option<PodStats>,
    /// Local-storage limits from the pod's spec (empty when the source does
    /// not carry them: the CRI alone does not).
    pub storage_limits: crate::policy::evict::local_storage::StorageLimits,
    /// Per-container and per-volume storage, for the limit checks.
    pub storage_detail: Option<crate::policy::evict::local_storage::StorageDetail>,
}

impl Candidate {
    /// A candidate from a pod and values computed elsewhere (class,
    /// effective requests). Pure: does not call the classifier.
    pub fn new(
        pod: &Pod,
        qos: QosClass,
        memory_request_bytes: i64,
        ephemeral_storage_request_bytes: i64,
        stats: Option<PodStats>,
    ) -> Candidate {
        let sandbox_id = match &pod.origin {
            crate::core::model::PodOrigin::Cri(id) => Some(id.clone()),
            _ => None,
        };
        Candidate {
            uid: pod.uid.clone(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            qos,
            priority: pod.priority,
            static_or_mirror: pod.is_static_or_mirror(),
            memory_request_bytes,
            ephemeral_storage_request_bytes,
            termination_grace_period_seconds: pod.termination_grace_period_seconds,
            sandbox_id,
            cgroup_dirs: Vec::new(),
            stats,
            storage_limits: crate::policy::evict::local_storage::StorageLimits::of(pod),
            storage_detail: None,
        }
    }

    /// A candidate using the core classifier and resource helpers.
    pub fn from_pod(pod: &Pod, stats: Option<PodStats>) -> Candidate {
        let class = crate::core::qos::classify(pod).class;
        let res = crate::core::resources::pod_resources(pod);
        Candidate::new(
            pod,
            class,
            res.memory_request_bytes,
            res.ephemeral_storage_request_bytes,
            stats,
        )
    }

    /// Why this pod is never evicted, if it is protected.
    pub(crate) fn protection(&self) -> Option<String> {
        if self.static_or_mirror {
            return Some("static or mirror pod: the kubelet never evicts these".into());
        }
        if self.priority >= crate::core::model::SYSTEM_CRITICAL_PRIORITY {
            return Some(format!(
                "priority {} >= 2000000000 (system-critical): never evicted",
                self.priority
            ));
        }
        None
    }

    /// The usage and request relevant to a signal's resource (usage `None`
    /// when not measured), on a shared filesystem.
    pub(crate) fn usage_and_request(&self, resource: SignalResource) -> (Option<u64>, i64) {
        let st = self.stats.unwrap_or_default();
        match resource {
            SignalResource::Memory | SignalResource::MemoryStall => (
                self.stats.and(st.memory_working_set_bytes),
                self.memory_request_bytes,
            ),
            SignalResource::Disk => (
                self.stats.and(st.ephemeral_storage_bytes),
                self.ephemeral_storage_request_bytes,
            ),
            SignalResource::Inodes => (self.stats.and(st.inodes), 0),
            SignalResource::Pids => (self.stats.and(st.processes), 0),
        }
    }

    /// The usage a signal ranks by, with the filesystem layout, and the
    /// request it is compared with.
    pub(crate) fn usage_for(&self, signal: Signal, layout: DiskLayout) -> (Option<u64>, i64) {
        match signal.resource() {
            r @ (SignalResource::Memory | SignalResource::MemoryStall | SignalResource::Pids) => {
                self.usage_and_request(r)
            }
            SignalResource::Disk => (
                self.stats.and_then(|s| s.disk_usage(signal, layout)),
                self.ephemeral_storage_request_bytes,
            ),
            SignalResource::Inodes => (self.stats.and_then(|s| s.disk_usage(signal, layout)), 0),
        }
    }
}

/// One position in the eviction order.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    /// 1-based position: 1 is evicted first.
    pub rank: usize,
    /// The pod.
    pub candidate: Candidate,
    /// Its usage of the signal's resource (`None`: not measured).
    pub usage: Option<u64>,
    /// Its request of that resource (0 where there is none).
    pub request: i64,
    /// Why it sits here, for output.
    pub reason: String,
}

/// The eviction order for a signal, plus the pods that are never evicted.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ranking {
    /// The evictable pods, first victim first.
    pub order: Vec<Ranked>,
    /// (candidate, reason), sorted by uid.
    pub never_evicted: Vec<(Candidate, String)>,
}

/// Sort key of a candidate for a resource; lexicographic order = eviction order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    /// (not stalling last — pressure signals only, else all false —,
    /// missing stats first, exceeds request first, priority asc, usage
    /// above request desc, uid)
    Request(bool, bool, bool, i32, std::cmp::Reverse<i128>, String),
    /// (priority asc, missing stats first, processes desc, uid)
    Pids(i32, bool, std::cmp::Reverse<u64>, String),
}

fn key(c: &Candidate, signal: Signal, layout: DiskLayout, max_stall_ppm: Option<u32>) -> Key {
    let resource = signal.resource();
    // Pressure signals: the pods that stall first (when some pod's stall
    // is measured), then the kubelet's memory order.
    let not_stalling = max_stall_ppm.is_some_and(|max| {
        !crate::policy::evict::pressure::is_stalling(c.stats.and_then(|s| s.memory_stall_ppm), max)
    });
    let (usage, request) = c.usage_for(signal, layout);
    match resource {
        SignalResource::Pids => Key::Pids(
            c.priority,
            usage.is_some(),
            std::cmp::Reverse(usage.unwrap_or(0)),
            c.uid.clone(),
        ),
        _ => {
            // The kubelet's disk() comparator subtracts the ephemeral-storage
            // request even from an inode count.
            let subtract = match resource {
                SignalResource::Inodes => c.ephemeral_storage_request_bytes,
                _ => request,
            };
            let (has, exceeds, above) = match usage {
                None => (false, false, 0),
                Some(u) => (
                    true,
                    i128::from(u) > i128::from(request),
                    i128::from(u) - i128::from(subtract),
                ),
            };
            // false sorts first: "missing" = !has first, "exceeds" first = !exceeds
            Key::Request(
                not_stalling,
                has,
                !exceeds,
                c.priority,
                std::cmp::Reverse(above),
                c.uid.clone(),
            )
        }
    }
}

#[cfg(test)]
/// Compare two candidates for a signal: `Less` = `a` is evicted before `b`.
/// A total order (ties broken by uid).
pub(crate) fn compare(signal: Signal, a: &Candidate, b: &Candidate) -> Ordering {
    key(a, signal, DiskLayout::Shared, None).cmp(&key(b, signal, DiskLayout::Shared, None))
}

/// The largest measured stall among `candidates` for a pressure signal
/// (`None`: another signal, or no pod's stall is measured: the kubelet's
/// memory order applies to all, node-wide).
fn max_stall(signal: Signal, candidates: &[Candidate]) -> Option<u32> {
    if !signal.is_pressure() {
        return None;
    }
    candidates
        .iter()
        .filter(|c| c.protection().is_none())
        .filter_map(|c| c.stats.and_then(|s| s.memory_stall_ppm))
        .max()
}

/// Rank candidates for a signal (one shared filesystem).
pub fn rank(signal: Signal, candidates: &[Candidate]) -> Ranking {
    rank_in(signal, candidates, DiskLayout::Shared)
}

/// Rank candidates for a signal with the node's filesystem layout.
pub(crate) fn rank_in(signal: Signal, candidates: &[Candidate], layout: DiskLayout) -> Ranking {
    let mut never = Vec::new();
    let mut evictable: Vec<(Key, &Candidate)> = Vec::new();
    let max = max_stall(signal, candidates);
    for c in candidates {
        match c.protection() {
            Some(why) => never.push((c.clone(), why)),
            None => evictable.push((key(c, signal, layout, max), c)),
        }
    }
    evictable.sort_by(|a, b| a.0.cmp(&b.0));
    never.sort_by(|a: &(Candidate, String), b| a.0.uid.cmp(&b.0.uid));
    let order = evictable
        .into_iter()
        .enumerate()
        .map(|(i, (_, c))| {
            let (usage, request) = c.usage_for(signal, layout);
            Ranked {
                rank: i + 1,
                candidate: c.clone(),
                usage,
                request,
                reason: stall_reason(max, c) + &reason(signal, c, usage, request),
            }
        })
        .collect();
    Ranking {
        order,
        never_evicted: never,
    }
}

/// A pod's usage in bytes for `signal`, given the usage its ranking
/// compared (`ranked`, in the signal's unit): that usage for the byte
/// signals; for the count signals the bytes of the same resource (local
/// storage for inodes, the memory working set for processes). `None`: not
/// measured.
pub fn usage_bytes(signal: Signal, ranked: Option<u64>, stats: Option<PodStats>) -> Option<u64> {
    match signal.resource() {
        SignalResource::Memory | SignalResource::MemoryStall | SignalResource::Disk => ranked,
        SignalResource::Inodes => stats.and_then(|s| s.ephemeral_storage_bytes),
        SignalResource::Pids => stats.and_then(|s| s.memory_working_set_bytes),
    }
}

/// Human-readable bytes for tables and logs (`1.5MiB`): deliberately not a Kubernetes quantity (that is `message::amount_text`).
pub fn fmt_bytes(b: i128) -> String {
    let neg = b < 0;
    let v = b.unsigned_abs() as f64;
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = v;
    let mut u = 0;
    while x >= 1024.0 && u < units.len() - 1 {
        x /= 1024.0;
        u += 1;
    }
    let s = if u == 0 {
        format!("{}B", b.unsigned_abs())
    } else {
        format!("{:.1}{}", x, units[u])
    };
    if neg {
        format!("-{s}")
    } else {
        s
    }
}

/// The stall part of a pressure ranking's reason (empty for other signals
/// or when no pod's stall is measured).
fn stall_reason(max: Option<u32>, c: &Candidate) -> String {
    use crate::policy::evict::pressure::{is_stalling, ppm_text};
    let Some(max) = max else {
        return String::new();
    };
    match c.stats.and_then(|s| s.memory_stall_ppm) {
        Some(p) if is_stalling(Some(p), max) => {
            format!("stalling on memory {} of the last sample; ", ppm_text(p))
        }
        Some(p) => format!(
            "not stalling (memory stall {}, below a quarter of the worst pod's {}); ",
            ppm_text(p),
            ppm_text(max)
        ),
        None => "memory stall not measured yet; ".to_string(),
    }
}

fn reason(signal: Signal, c: &Candidate, usage: Option<u64>, request: i64) -> String {
    let resource = signal.resource();
    let prio = format!("priority {}", c.priority);
    match resource {
        SignalResource::Pids => match usage {
            Some(n) => format!("{prio}; {n} processes"),
            None => {
                format!("{prio}; no process count (ranked before measured pods of equal priority)")
            }
        },
        _ => {
            let what = match resource {
                SignalResource::Memory | SignalResource::MemoryStall => "memory",
                SignalResource::Disk => "ephemeral-storage",
                _ => "inode",
            };
            let fmt = |v: i128| {
                if resource == SignalResource::Inodes {
                    v.to_string()
                } else {
                    fmt_bytes(v)
                }
            };
            let Some(u) = usage else {
                return format!(
                    "no {what} stats: the kubelet evicts pods without stats first; {} {prio}",
                    c.qos
                );
            };
            let (u, r) = (i128::from(u), i128::from(request));
            if request == 0 {
                if u > 0 {
                    format!(
                        "{} without {what} request: usage {} exceeds request 0; {prio}",
                        c.qos,
                        fmt(u)
                    )
                } else {
                    format!("{}: no {what} usage, no request; {prio}", c.qos)
                }
            } else if u > r {
                format!(
                    "{}: {what} usage {} exceeds request {} by {}; {prio}",
                    c.qos,
                    fmt(u),
                    fmt(r),
                    fmt(u - r)
                )
            } else {
                format!(
                    "{}: {what} usage {} within request {} ({} below); {prio}",
                    c.qos,
                    fmt(u),
                    fmt(r),
                    fmt(r - u)
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `usage_bytes` is bytes for every signal: the ranked usage for the
    /// byte signals, never the count of a count signal.
    #[test]
    fn usage_bytes_is_bytes_for_every_signal() {
        let stats = Some(PodStats {
            memory_working_set_bytes: Some(64 << 20),
            ephemeral_storage_bytes: Some(5 << 20),
            inodes: Some(300),
            processes: Some(7),
            ..Default::default()
        });
        let rows = [
            (
                Signal::MemoryAvailable,
                Some(64u64 << 20),
                Some(64u64 << 20),
            ),
            (Signal::NodeFsAvailable, Some(5 << 20), Some(5 << 20)),
            (Signal::NodeFsInodesFree, Some(300), Some(5 << 20)),
            (Signal::PidAvailable, Some(7), Some(64 << 20)),
        ];
        for (signal, ranked, want) in rows {
            assert_eq!(usage_bytes(signal, ranked, stats), want, "{signal}");
        }
        assert_eq!(usage_bytes(Signal::PidAvailable, Some(7), None), None);
    }
    use proptest::prelude::*;

    const MI: u64 = 1024 * 1024;

    fn cand(uid: &str, qos: QosClass, prio: i32, req_mi: i64, usage_mi: Option<u64>) -> Candidate {
        Candidate {
            uid: uid.into(),
            namespace: "default".into(),
            name: uid.into(),
            qos,
            priority: prio,
            static_or_mirror: false,
            memory_request_bytes: req_mi * MI as i64,
            ephemeral_storage_request_bytes: 0,
            termination_grace_period_seconds: None,
            sandbox_id: None,
            cgroup_dirs: vec![],
            storage_limits: Default::default(),
            storage_detail: None,
            stats: usage_mi.map(|u| PodStats {
                memory_working_set_bytes: Some(u * MI),
                ..Default::default()
            }),
        }
    }

    fn uids(r: &Ranking) -> Vec<&str> {
        r.order.iter().map(|x| x.candidate.uid.as_str()).collect()
    }

    use QosClass::*;

    fn stalled(mut c: Candidate, ppm: Option<u32>) -> Candidate {
        let mut st = c.stats.unwrap_or_default();
        st.memory_stall_ppm = ppm;
        c.stats = Some(st);
        c
    }

    /// Pressure signals: the pods that stall (at least a quarter of the
    /// worst pod's stall) first, in the kubelet's memory order among
    /// themselves; the others after them in the same order; without any
    /// measured stall (cgroup v1), the kubelet's memory order for all.
    #[test]
    fn pressure_ranking_table() {
        let table: Vec<(&str, Vec<Candidate>, Vec<&str>)> = vec![
            (
                "the stalling Guaranteed pod before a BestEffort pod that does not stall",
                vec![
                    stalled(cand("be", BestEffort, 0, 0, Some(400)), Some(0)),
                    stalled(cand("g", Guaranteed, 0, 256, Some(250)), Some(800_000)),
                ],
                vec!["g", "be"],
            ),
            (
                "among stalling pods the kubelet's order",
                vec![
                    stalled(cand("g", Guaranteed, 0, 256, Some(250)), Some(900_000)),
                    stalled(cand("bu", Burstable, 0, 64, Some(200)), Some(300_000)),
                    stalled(cand("be", BestEffort, 0, 0, Some(50)), Some(20_000)),
                ],
                // be's 2% is below a quarter of 90%: not stalling
                vec!["bu", "g", "be"],
            ),
            (
                "unmeasured stall counts as not stalling",
                vec![
                    stalled(cand("new", BestEffort, 0, 0, Some(900)), None),
                    stalled(cand("g", Guaranteed, 0, 256, Some(250)), Some(500_000)),
                ],
                vec!["g", "new"],
            ),
            (
                "no stall measured anywhere: the kubelet's memory order",
                vec![
                    stalled(cand("g", Guaranteed, 0, 256, Some(250)), None),
                    stalled(cand("be", BestEffort, 0, 0, Some(50)), None),
                ],
                vec!["be", "g"],
            ),
            (
                "noise below 0.1% is not stalling, even as the worst",
                vec![
                    stalled(cand("g", Guaranteed, 0, 256, Some(250)), Some(500)),
                    stalled(cand("be", BestEffort, 0, 0, Some(50)), Some(0)),
                ],
                vec!["be", "g"],
            ),
            (
                "a protected pod's stall does not set the scale",
                vec![
                    {
                        let mut c = stalled(
                            cand("crit", Guaranteed, 2_000_000_000, 64, Some(60)),
                            Some(990_000),
                        );
                        c.priority = 2_000_000_000;
                        c
                    },
                    stalled(cand("g", Guaranteed, 0, 256, Some(250)), Some(100_000)),
                    stalled(cand("be", BestEffort, 0, 0, Some(50)), Some(0)),
                ],
                vec!["g", "be"],
            ),
        ];
        for signal in Signal::PRESSURE {
            for (name, cands, want) in &table {
                let r = rank(signal, cands);
                assert_eq!(uids(&r), *want, "{signal}: {name}");
                assert!(
                    r.never_evicted.iter().all(|(c, _)| c.uid == "crit"),
                    "{name}"
                );
            }
        }
        // the reason says why
        let r = rank(Signal::MemoryFull, &table[1].1);
        assert!(
            r.order[0].reason.starts_with("stalling on memory 30%"),
            "{}",
            r.order[0].reason
        );
        assert!(
            r.order[2].reason.starts_with("not stalling"),
            "{}",
            r.order[2].reason
        );
        // the kubelet's signals ignore stall
        assert_eq!(
            uids(&rank(Signal::MemoryAvailable, &table[0].1)),
            ["be", "g"]
        );
    }

    #[test]
    fn memory_ranking_table() {
        // (name, candidates, expected order)
        let table: Vec<(&str, Vec<Candidate>, Vec<&str>)> = vec![
            (
                "besteffort before burstable-over before guaranteed",
                vec![
                    cand("g", Guaranteed, 0, 512, Some(500)),
                    cand("b", Burstable, 0, 100, Some(300)),
                    cand("be", BestEffort, 0, 0, Some(50)),
                ],
                // be exceeds by 50, b exceeds by 200: both exceed, same prio → larger above-request first
                vec!["b", "be", "g"],
            ),
            (
                "pods without stats first",
                vec![
                    cand("g", Guaranteed, 0, 512, Some(500)),
                    cand("nostats", Guaranteed, 0, 512, None),
                    cand("be", BestEffort, 0, 0, Some(1)),
                ],
                vec!["nostats", "be", "g"],
            ),
            (
                "exceeding requests beats priority",
                vec![
                    cand("low-within", Burstable, -10, 200, Some(100)),
                    cand("high-over", Burstable, 1000, 100, Some(101)),
                ],
                vec!["high-over", "low-within"],
            ),
            (
                "lower priority first among exceeding",
                vec![
                    cand("p100", BestEffort, 100, 0, Some(900)),
                    cand("p0", BestEffort, 0, 0, Some(10)),
                    cand("pneg", Burstable, -5, 10, Some(11)),
                ],
                vec!["pneg", "p0", "p100"],
            ),
            (
                "usage above request descending",
                vec![
                    cand("a", Burstable, 0, 100, Some(150)),
                    cand("b", Burstable, 0, 10, Some(150)),
                    cand("c", BestEffort, 0, 0, Some(120)),
                ],
                vec!["b", "c", "a"], // above request: b 140, c 120, a 50
            ),
            (
                "within request: most headroom used first (usage-request desc)",
                vec![
                    cand("g1", Guaranteed, 0, 512, Some(100)),
                    cand("g2", Guaranteed, 0, 512, Some(500)),
                    cand("g3", Guaranteed, 0, 100, Some(90)),
                ],
                vec!["g3", "g2", "g1"], // usage-request: g3 -10Mi, g2 -12Mi, g1 -412Mi
            ),
            (
                "equal usage = request is not exceeding",
                vec![
                    cand("eq", Guaranteed, 0, 100, Some(100)),
                    cand("over", Burstable, 0, 100, Some(101)),
                ],
                vec!["over", "eq"],
            ),
            (
                "uid tiebreak",
                vec![
                    cand("z", BestEffort, 0, 0, Some(10)),
                    cand("a", BestEffort, 0, 0, Some(10)),
                ],
                vec!["a", "z"],
            ),
        ];
        for (name, cands, want) in table {
            let r = rank(Signal::MemoryAvailable, &cands);
            assert_eq!(uids(&r), want, "{name}");
            let r2 = rank(Signal::AllocatableMemoryAvailable, &cands);
            assert_eq!(uids(&r2), want, "{name} (allocatable)");
            for (i, x) in r.order.iter().enumerate() {
                assert_eq!(x.rank, i + 1);
                assert!(!x.reason.is_empty());
            }
        }
    }

    #[test]
    fn protected_pods_listed_apart() {
        let mut stat = cand("static", BestEffort, 0, 0, Some(4000));
        stat.static_or_mirror = true;
        let crit = cand("crit", BestEffort, 2_000_000_000, 0, Some(4000));
        let crit2 = cand("crit2", BestEffort, 2_000_001_000, 0, Some(4000));
        let almost = cand("almost", Guaranteed, 1_999_999_999, 100, Some(1));
        let be = cand("be", BestEffort, 0, 0, Some(1));
        let r = rank(Signal::MemoryAvailable, &[stat, crit, crit2, almost, be]);
        assert_eq!(uids(&r), ["be", "almost"]);
        let never: Vec<(&str, &str)> = r
            .never_evicted
            .iter()
            .map(|(c, why)| (c.uid.as_str(), why.as_str()))
            .collect();
        assert_eq!(never.len(), 3);
        assert_eq!(never[0].0, "crit");
        assert!(never[0].1.contains("2000000000"));
        assert_eq!(never[2].0, "static");
        assert!(never[2].1.contains("static or mirror"));
    }

    #[test]
    fn disk_ranking_table() {
        let disk = |uid: &str, prio: i32, req: i64, usage: Option<u64>| {
            let mut c = cand(uid, BestEffort, prio, 0, None);
            c.ephemeral_storage_request_bytes = req;
            c.stats = Some(PodStats {
                ephemeral_storage_bytes: usage,
                inodes: usage.map(|u| u / 10),
                memory_working_set_bytes: Some(1),
                ..Default::default()
            });
            c
        };
        let cands = vec![
            disk("within", -100, 1000, Some(10)),
            disk("over-high", 50, 100, Some(200)),
            disk("over-low-small", 0, 100, Some(150)),
            disk("over-low-big", 0, 0, Some(5000)),
            disk("nostat", 100, 0, None),
        ];
        for sig in [
            Signal::NodeFsAvailable,
            Signal::ImageFsAvailable,
            Signal::ContainerFsAvailable,
        ] {
            let r = rank(sig, &cands);
            assert_eq!(
                uids(&r),
                [
                    "nostat",
                    "over-low-big",
                    "over-low-small",
                    "over-high",
                    "within"
                ],
                "{sig}"
            );
            assert!(r.order[0].reason.contains("no ephemeral-storage stats"));
        }
        // inodes have no request: every pod using any inode exceeds
        let r = rank(Signal::NodeFsInodesFree, &cands);
        assert_eq!(
            uids(&r),
            [
                "nostat",
                "within",
                "over-low-big",
                "over-low-small",
                "over-high"
            ]
        );
    }

    #[test]
    fn pid_ranking_table() {
        let pid = |uid: &str, prio: i32, procs: Option<u64>| {
            let mut c = cand(uid, Guaranteed, prio, 100, None);
            c.stats = Some(PodStats {
                processes: procs,
                ..Default::default()
            });
            c
        };
        let cands = vec![
            pid("p0-few", 0, Some(2)),
            pid("p0-many", 0, Some(500)),
            pid("p0-none", 0, None),
            pid("pneg", -1, Some(1)),
            pid("p10", 10, Some(10_000)),
        ];
        let r = rank(Signal::PidAvailable, &cands);
        assert_eq!(uids(&r), ["pneg", "p0-none", "p0-many", "p0-few", "p10"]);
        assert!(r.order[2].reason.contains("500 processes"));
    }

    #[test]
    fn reasons_table() {
        let table = [
            (cand("a", BestEffort, 0, 0, Some(300)), "BestEffort without memory request: usage 300.0MiB exceeds request 0; priority 0"),
            (cand("b", Burstable, 5, 100, Some(300)), "Burstable: memory usage 300.0MiB exceeds request 100.0MiB by 200.0MiB; priority 5"),
            (cand("c", Guaranteed, 0, 512, Some(256)), "Guaranteed: memory usage 256.0MiB within request 512.0MiB (256.0MiB below); priority 0"),
            (cand("d", Guaranteed, 0, 512, None), "no memory stats: the kubelet evicts pods without stats first; Guaranteed priority 0"),
        ];
        for (c, want) in table {
            let r = rank(Signal::MemoryAvailable, std::slice::from_ref(&c));
            assert_eq!(r.order[0].reason, want);
        }
    }

    #[test]
    fn fmt_bytes_table() {
        for (b, s) in [
            (0i128, "0B"),
            (1023, "1023B"),
            (1024, "1.0KiB"),
            (1536 * 1024, "1.5MiB"),
            (-(1 << 30), "-1.0GiB"),
        ] {
            assert_eq!(fmt_bytes(b), s);
        }
    }

    fn arb_candidate() -> impl Strategy<Value = Candidate> {
        (
            0u32..40,
            0usize..3,
            prop_oneof![
                Just(0i32),
                Just(-10),
                Just(1000),
                Just(2_000_000_000),
                -5i32..5
            ],
            0i64..1000,
            proptest::option::of(0u64..2000),
            proptest::option::of(0u64..100),
            any::<bool>(),
        )
            .prop_map(|(id, q, prio, req, usage, procs, stat)| {
                let qos = [Guaranteed, Burstable, BestEffort][q];
                let req = if qos == BestEffort { 0 } else { req };
                let mut c = cand(&format!("uid-{id}"), qos, prio, req, usage);
                c.static_or_mirror = stat && id % 7 == 0;
                if let Some(s) = c.stats.as_mut() {
                    s.processes = procs;
                    s.ephemeral_storage_bytes = usage.map(|u| u * 3);
                }
                c
            })
    }

    fn arb_signal() -> impl Strategy<Value = Signal> {
        (0usize..Signal::ALL.len()).prop_map(|i| Signal::ALL[i])
    }

    proptest! {
        #[test]
        fn compare_is_a_total_order(
            sig in arb_signal(),
            a in arb_candidate(), b in arb_candidate(), c in arb_candidate()
        ) {
            // antisymmetric
            prop_assert_eq!(compare(sig, &a, &b), compare(sig, &b, &a).reverse());
            // reflexive equality only for the same key (uid included)
            if compare(sig, &a, &b) == Ordering::Equal {
                prop_assert_eq!(&a.uid, &b.uid);
            }
            // transitive
            if compare(sig, &a, &b) != Ordering::Greater && compare(sig, &b, &c) != Ordering::Greater {
                prop_assert_ne!(compare(sig, &a, &c), Ordering::Greater);
            }
        }

        #[test]
        fn critical_never_ranked(sig in arb_signal(), cands in proptest::collection::vec(arb_candidate(), 0..12)) {
            let r = rank(sig, &cands);
            for x in &r.order {
                prop_assert!(x.candidate.priority < 2_000_000_000);
                prop_assert!(!x.candidate.static_or_mirror);
            }
            prop_assert_eq!(r.order.len() + r.never_evicted.len(), cands.len());
        }

        #[test]
        fn invariant_to_input_order(sig in arb_signal(), mut cands in proptest::collection::vec(arb_candidate(), 0..12), seed in any::<u64>()) {
            // unique uids so the comparison is meaningful
            for (i, c) in cands.iter_mut().enumerate() { c.uid = format!("{}-{i}", c.uid); }
            let r1 = rank(sig, &cands);
            let mut shuffled = cands.clone();
            // deterministic shuffle
            let mut s = seed;
            for i in (1..shuffled.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (s >> 33) as usize % (i + 1));
            }
            let r2 = rank(sig, &shuffled);
            prop_assert_eq!(r1, r2);
        }

        #[test]
        fn besteffort_precedes_guaranteed_under_memory_pressure(
            be_prio in -1000i32..1000, g_prio in -1000i32..1000,
            be_usage in 1u64..4000, g_req in 1i64..4000, g_frac in 0u64..=100
        ) {
            // A BestEffort pod using any memory exceeds its (zero) request; a
            // Guaranteed pod is held at its limit = request by the kernel. The
            // exceeds-request key precedes priority, so BestEffort goes first
            // whatever the priorities.
            let be = cand("be", BestEffort, be_prio, 0, Some(be_usage));
            let g_usage = (g_req as u64) * g_frac / 100;
            let g = cand("g", Guaranteed, g_prio, g_req, Some(g_usage));
            for sig in [Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable] {
                let r = rank(sig, &[g.clone(), be.clone()]);
                prop_assert_eq!(uids(&r), vec!["be", "g"]);
            }
        }
    }
}
