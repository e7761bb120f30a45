//! `oom_score_adj` of the containers' processes: the kubelet's value
//! (`qosd_model::policy::enforce::oom`) set on each running container's
//! processes whose value differs (enforce mode: no kubelet, the runtime is
//! the source of truth), reported without writing beside a kubelet
//! (audit) or in a dry run. New processes inherit the value from their
//! parent, so each pass handles the processes present then.
//!
//! The kernel refuses to lower a process's value below its floor without
//! `CAP_SYS_RESOURCE` (a Guaranteed container's −997 on a host whose root
//! lacks it): such a refusal is logged once per container and counted,
//! never retried into a stream of errors (each pass finds it again and
//! counts it, quietly).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use qosd_model::core::model::CgroupVersion;
use qosd_model::policy::enforce::plan::{self, PlanConfig};
use qosd_node::cri::{LivePod, SandboxState};
use qosd_node::sys::apply::Mode;
use qosd_node::sys::oom_score::{self, Act, ContainerCgroup, Hierarchy, PidOutcome};

pub(crate) use crate::telemetry::status::{OomRefusal, OomValue};

/// What one pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct OomReport {
    /// Container processes checked.
    pub(crate) processes: usize,
    /// Values written (dry run: that would be written).
    pub(crate) writes: Vec<OomValue>,
    /// Processes left holding another value than the plan: audit (nothing
    /// written), dry run (the would-be writes), and enforce writes the
    /// kernel refused.
    pub(crate) differing: Vec<OomValue>,
    /// Containers with a refused write (one entry per container).
    pub(crate) refused: Vec<OomRefusal>,
    /// Processes that could not be checked, and why.
    pub(crate) errors: Vec<String>,
    /// Differences new or changed since the last pass (each logged once).
    #[serde(skip)]
    pub(crate) changes: usize,
}

/// The per-pass state: what was logged already.
#[derive(Debug)]
pub(crate) struct OomScores {
    proc_root: PathBuf,
    /// The machine's memory (the kubelet's capacity for the formula).
    capacity: i64,
    /// (container id, pid) → the differing value last logged.
    logged: HashMap<(String, i32), i64>,
    /// Containers whose refusal was logged.
    refused_logged: HashSet<String>,
    /// Errors logged (once each while they last).
    errors_logged: HashSet<String>,
}

impl OomScores {
    pub(crate) fn new(proc_root: PathBuf, capacity: i64) -> OomScores {
        OomScores {
            proc_root,
            capacity,
            logged: HashMap::new(),
            refused_logged: HashSet::new(),
            errors_logged: HashSet::new(),
        }
    }

    /// Check every running container of the READY pods in `live`.
    pub(crate) fn pass(&mut self, mode: Mode, cfg: &PlanConfig, live: &[LivePod]) -> OomReport {
        let (hierarchy, root) = match cfg.layout.version {
            CgroupVersion::V1 => (
                Hierarchy::V1("memory".to_string()),
                cfg.layout.dir("", "memory"),
            ),
            CgroupVersion::V2 => (Hierarchy::V2, cfg.layout.dir("", "")),
        };
        let mut p = Pass {
            mode,
            act: if mode == Mode::Real {
                Act::Write
            } else {
                Act::Report
            },
            out: OomReport::default(),
            seen: HashSet::new(),
            containers_seen: HashSet::new(),
            errors_now: HashSet::new(),
        };
        for lp in live.iter().filter(|p| p.state == SandboxState::Ready) {
            let (_, cgroup, targets) = plan::pod_oom_plan(cfg, &lp.pod, self.capacity);
            let pod_dir = cfg.layout.dir(&cgroup, "memory");
            for c in lp.containers.iter().filter(|c| c.state == "running") {
                let Some(t) = targets.iter().find(|t| t.name == c.name) else {
                    continue;
                };
                let Some(dir) = oom_score::find_container_dir(&pod_dir, &c.id) else {
                    continue;
                };
                p.containers_seen.insert(c.id.clone());
                let Some(cg) = container_cgroup(&hierarchy, &root, &dir) else {
                    continue;
                };
                let target = Target {
                    namespace: &lp.pod.namespace,
                    pod: &lp.pod.name,
                    container: &c.name,
                    id: &c.id,
                    planned: planned_value(t.oom_score_adj, c.oom_score_adj),
                };
                self.container(&mut p, &target, &dir, &cg);
            }
        }
        // Forget what went away (a container, a process or a difference).
        self.logged.retain(|k, _| p.seen.contains(k));
        self.refused_logged
            .retain(|id| p.containers_seen.contains(id));
        for e in &p.errors_now {
            if !self.errors_logged.contains(e) {
                tracing::warn!(error = %e, "oom_score_adj of a container process not checked");
            }
        }
        self.errors_logged = p.errors_now.clone();
        let mut errors: Vec<String> = p.errors_now.into_iter().collect();
        errors.sort();
        p.out.errors = errors;
        p.out
    }

    /// One container's processes.
    fn container(&mut self, p: &mut Pass, t: &Target, dir: &Path, cg: &ContainerCgroup) {
        let pids = match qosd_node::sys::kill::cgroup_tree_pids(dir) {
            Ok(pids) => pids,
            Err(e) => {
                p.errors_now.insert(e.to_string());
                return;
            }
        };
        let mut refused: Option<OomRefusal> = None;
        for pid in pids {
            match oom_score::check_pid(&self.proc_root, pid, cg, t.planned, p.act) {
                Ok(PidOutcome::Gone) | Ok(PidOutcome::Moved) => {}
                Ok(outcome) => {
                    p.out.processes += 1;
                    if let Some(r) = self.outcome(p, t, pid, outcome) {
                        refused.get_or_insert(r);
                    }
                }
                Err(e) => {
                    p.errors_now.insert(e.to_string());
                }
            }
        }
        match refused {
            Some(r) => {
                if self.refused_logged.insert(t.id.to_string()) {
                    p.out.changes += 1;
                    tracing::warn!(
                        pod = %format!("{}/{}", r.namespace, r.pod), container = %r.container,
                        planned = r.planned, found = r.found, error = %r.error,
                        "oom_score_adj refused by the kernel (lowering it takes CAP_SYS_RESOURCE); counted in /status, not retried in the log"
                    );
                }
                p.out.refused.push(r);
            }
            None => {
                self.refused_logged.remove(t.id);
            }
        }
    }

    /// Record what became of one process; a refusal is returned.
    fn outcome(
        &mut self,
        p: &mut Pass,
        t: &Target,
        pid: i32,
        outcome: PidOutcome,
    ) -> Option<OomRefusal> {
        let value = |found| OomValue {
            namespace: t.namespace.to_string(),
            pod: t.pod.to_string(),
            container: t.container.to_string(),
            pid,
            planned: t.planned,
            found,
        };
        let pod = format!("{}/{}", t.namespace, t.pod);
        match outcome {
            PidOutcome::Written { found } => {
                tracing::info!(pod = %pod, container = %t.container, pid, value = t.planned, found, "set oom_score_adj to the kubelet's value");
                p.out.writes.push(value(found));
            }
            PidOutcome::Differs { found } => {
                p.seen.insert((t.id.to_string(), pid));
                if self.logged.insert((t.id.to_string(), pid), found) != Some(found) {
                    p.out.changes += 1;
                    if p.mode == Mode::DryRun {
                        tracing::info!(pod = %pod, container = %t.container, pid, value = t.planned, found, "would set oom_score_adj to the kubelet's value (dry run)");
                    } else {
                        tracing::warn!(pod = %pod, container = %t.container, pid, planned = t.planned, found, "audit: oom_score_adj differs from the kubelet's value (cgroupEnforcement audit: not written)");
                    }
                }
                if p.mode == Mode::DryRun {
                    p.out.writes.push(value(found));
                }
                p.out.differing.push(value(found));
            }
            PidOutcome::Refused { found, error } => {
                p.out.differing.push(value(found));
                return Some(OomRefusal {
                    namespace: t.namespace.to_string(),
                    pod: t.pod.to_string(),
                    container: t.container.to_string(),
                    planned: t.planned,
                    found,
                    error,
                });
            }
            PidOutcome::InPlace | PidOutcome::Gone | PidOutcome::Moved => {}
        }
        None
    }
}

/// One container to check.
struct Target<'a> {
    namespace: &'a str,
    pod: &'a str,
    container: &'a str,
    /// The runtime's container id.
    id: &'a str,
    /// The kubelet's value.
    planned: i64,
}

/// What one pass gathers.
struct Pass {
    mode: Mode,
    act: Act,
    out: OomReport,
    /// (container id, pid) found differing (audit, dry run).
    seen: HashSet<(String, i32)>,
    /// Containers checked (their refusal stays logged).
    containers_seen: HashSet<String>,
    errors_now: HashSet<String>,
}

/// The value to hold a container's processes to: the kubelet's
/// (`kubelet`), except that a container the runtime was asked to give
/// −997 (`runtime`: its configured `oom_score_adj`) keeps −997. Outside
/// Guaranteed pods the kubelet asks for −997 only for node-critical pods,
/// and a pod's priority is not in the CRI: qosd never raises such a
/// container's processes on the strength of a class that ignores it.
fn planned_value(kubelet: i64, runtime: Option<i64>) -> i64 {
    use qosd_model::policy::enforce::oom::GUARANTEED_OOM_SCORE_ADJ;
    if runtime == Some(GUARANTEED_OOM_SCORE_ADJ) {
        GUARANTEED_OOM_SCORE_ADJ
    } else {
        kubelet
    }
}

/// The container's cgroup as `/proc/<pid>/cgroup` names it: its directory
/// relative to the hierarchy's root.
fn container_cgroup(hierarchy: &Hierarchy, root: &Path, dir: &Path) -> Option<ContainerCgroup> {
    let rel = dir.strip_prefix(root).ok()?;
    Some(ContainerCgroup {
        hierarchy: hierarchy.clone(),
        path: format!("/{}", rel.to_str()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_cgroup_is_relative_to_the_hierarchy_root() {
        let cg = container_cgroup(
            &Hierarchy::V1("memory".into()),
            Path::new("/sys/fs/cgroup/memory"),
            Path::new("/sys/fs/cgroup/memory/r/kubepods/besteffort/podu/abc"),
        )
        .unwrap();
        assert_eq!(cg.path, "/r/kubepods/besteffort/podu/abc");
        assert!(container_cgroup(&Hierarchy::V2, Path::new("/a"), Path::new("/b/c")).is_none());
    }

    #[test]
    fn a_container_configured_node_critical_is_never_raised() {
        assert_eq!(planned_value(1000, Some(-997)), -997);
        assert_eq!(planned_value(969, Some(-997)), -997);
        assert_eq!(planned_value(1000, Some(1000)), 1000);
        assert_eq!(planned_value(969, Some(500)), 969);
        assert_eq!(planned_value(-997, None), -997);
        assert_eq!(planned_value(1000, None), 1000);
    }

    #[test]
    fn no_pods_no_processes() {
        let mut s = OomScores::new(PathBuf::from("/proc"), 1 << 30);
        let layout = qosd_model::policy::enforce::naming::CgroupLayout::new(
            CgroupVersion::V1,
            qosd_model::core::model::CgroupDriver::Cgroupfs,
        );
        let cfg = PlanConfig::new(
            layout,
            qosd_model::core::node::NodeResources::from_capacity(1000, 1 << 30),
        );
        let r = s.pass(Mode::Real, &cfg, &[]);
        assert_eq!(r.processes, 0);
        assert!(r.writes.is_empty() && r.errors.is_empty());
    }
}
