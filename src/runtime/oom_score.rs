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

/// One process whose value differs from the plan (or was set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub(crate) struct OomValue {
    pub(crate) namespace: String,
    pub(crate) pod: String,
    pub(crate) container: String,
    pub(crate) pid: i32,
    /// The kubelet's value.
    pub(crate) planned: i64,
    /// What the process held.
    pub(crate) found: i64,
}

/// A container whose processes the kernel would not give the planned value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub(crate) struct OomRefusal {
    pub(crate) namespace: String,
    pub(crate) pod: String,
    pub(crate) container: String,
    pub(crate) planned: i64,
    pub(crate) found: i64,
    pub(crate) error: String,
}

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
        let act = if mode == Mode::Real {
            Act::Write
        } else {
            Act::Report
        };
        let mut out = OomReport::default();
        let mut seen: HashSet<(String, i32)> = HashSet::new();
        let mut containers_seen: HashSet<String> = HashSet::new();
        let mut errors_now: HashSet<String> = HashSet::new();
        let (hierarchy, root) = match cfg.layout.version {
            CgroupVersion::V1 => (
                Hierarchy::V1("memory".to_string()),
                cfg.layout.dir("", "memory"),
            ),
            CgroupVersion::V2 => (Hierarchy::V2, cfg.layout.dir("", "")),
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
                containers_seen.insert(c.id.clone());
                let Some(cg) = container_cgroup(&hierarchy, &root, &dir) else {
                    continue;
                };
                let pids = match qosd_node::sys::kill::cgroup_tree_pids(&dir) {
                    Ok(p) => p,
                    Err(e) => {
                        errors_now.insert(e.to_string());
                        continue;
                    }
                };
                let mut refused: Option<OomRefusal> = None;
                for pid in pids {
                    let value = |found| OomValue {
                        namespace: lp.pod.namespace.clone(),
                        pod: lp.pod.name.clone(),
                        container: c.name.clone(),
                        pid,
                        planned: t.oom_score_adj,
                        found,
                    };
                    let outcome =
                        oom_score::check_pid(&self.proc_root, pid, &cg, t.oom_score_adj, act);
                    match outcome {
                        Ok(PidOutcome::InPlace) => out.processes += 1,
                        Ok(PidOutcome::Gone) | Ok(PidOutcome::Moved) => {}
                        Ok(PidOutcome::Written { found }) => {
                            out.processes += 1;
                            tracing::info!(
                                pod = %format!("{}/{}", lp.pod.namespace, lp.pod.name),
                                container = %c.name, pid, value = t.oom_score_adj, found,
                                "set oom_score_adj to the kubelet's value"
                            );
                            out.writes.push(value(found));
                        }
                        Ok(PidOutcome::Differs { found }) => {
                            out.processes += 1;
                            seen.insert((c.id.clone(), pid));
                            if self.logged.insert((c.id.clone(), pid), found) != Some(found) {
                                out.changes += 1;
                                let pod = format!("{}/{}", lp.pod.namespace, lp.pod.name);
                                if mode == Mode::DryRun {
                                    tracing::info!(pod = %pod, container = %c.name, pid, value = t.oom_score_adj, found, "would set oom_score_adj to the kubelet's value (dry run)");
                                } else {
                                    tracing::warn!(pod = %pod, container = %c.name, pid, planned = t.oom_score_adj, found, "audit: oom_score_adj differs from the kubelet's value (cgroupEnforcement audit: not written)");
                                }
                            }
                            if mode == Mode::DryRun {
                                out.writes.push(value(found));
                            }
                            out.differing.push(value(found));
                        }
                        Ok(PidOutcome::Refused { found, error }) => {
                            out.processes += 1;
                            out.differing.push(value(found));
                            refused.get_or_insert(OomRefusal {
                                namespace: lp.pod.namespace.clone(),
                                pod: lp.pod.name.clone(),
                                container: c.name.clone(),
                                planned: t.oom_score_adj,
                                found,
                                error,
                            });
                        }
                        Err(e) => {
                            errors_now.insert(e.to_string());
                        }
                    }
                }
                if let Some(r) = refused {
                    if self.refused_logged.insert(c.id.clone()) {
                        out.changes += 1;
                        tracing::warn!(
                            pod = %format!("{}/{}", r.namespace, r.pod), container = %r.container,
                            planned = r.planned, found = r.found, error = %r.error,
                            "oom_score_adj refused by the kernel (lowering it takes CAP_SYS_RESOURCE); counted in /status, not retried in the log"
                        );
                    }
                    out.refused.push(r);
                } else {
                    self.refused_logged.remove(&c.id);
                }
            }
        }
        // Forget what went away (a container, a process or a difference).
        self.logged.retain(|k, _| seen.contains(k));
        self.refused_logged
            .retain(|id| containers_seen.contains(id));
        for e in &errors_now {
            if !self.errors_logged.contains(e) {
                tracing::warn!(error = %e, "oom_score_adj of a container process not checked");
            }
        }
        self.errors_logged = errors_now.clone();
        let mut errors: Vec<String> = errors_now.into_iter().collect();
        errors.sort();
        out.errors = errors;
        out
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
