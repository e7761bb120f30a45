//! The CPU manager service: builds the static policy from the settings and
//! the sysfs topology, keeps its state in a `cpu_manager_state` file (the
//! kubelet's format), and each pass applies every running container's
//! cpuset through the CRI (`UpdateContainerResources` with
//! `linux.cpuset_cpus` only, as the kubelet's CPU manager does). In audit
//! mode it reads the kubelet's own state file instead and only reports
//! containers whose live cpuset differs from it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use qosd_model::core::model::Pod;
use qosd_model::policy::cpu::policy::{
    plan, reserved_cpu_count, CpuPlan, CpuPod, PolicyError, PolicyName, PolicyOptions, StaticPolicy,
};
use qosd_model::policy::cpu::state::{CpuState, StateError};
use qosd_model::policy::cpu::CpuSet;
use qosd_node::cri::{proto, CriClient, LiveContainer, LivePod, SandboxState};
use qosd_node::sys::cpu_topology::{discover, SysfsError};

/// The state file's name (the kubelet's, under its root dir).
pub(crate) const STATE_FILE_NAME: &str = "cpu_manager_state";

/// CPU manager settings (KubeletConfiguration names where there is one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CpuManagerSettings {
    /// `cpuManagerPolicy`.
    pub(crate) policy: PolicyName,
    /// `cpuManagerPolicyOptions`.
    pub(crate) options: BTreeMap<String, String>,
    /// `reservedSystemCPUs` (`--reserved-cpus`).
    pub(crate) reserved_system_cpus: Option<CpuSet>,
    /// kubeReserved + systemReserved cpu (millicores); `None` when neither
    /// sets cpu.
    pub(crate) reserved_millis: Option<i64>,
    /// sysfs root (normally `/sys`).
    pub(crate) sysfs: PathBuf,
    /// qosd's own state file; `None`: kept in memory only.
    pub(crate) state_file: Option<PathBuf>,
    /// The kubelet's `cpu_manager_state`: audit it instead of applying.
    pub(crate) audit_file: Option<PathBuf>,
}

/// Why the CPU manager cannot start or persist.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CpuManagerError {
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("{path}: {source}")]
    State {
        path: PathBuf,
        source: Box<StateError>,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}; drain the node and remove the state file to start afresh")]
    InvalidState { path: PathBuf, source: PolicyError },
}

impl CpuManagerSettings {
    /// The static policy, or `None` for `none`.
    pub(crate) fn build_policy(&self) -> Result<Option<StaticPolicy>, CpuManagerError> {
        if self.policy == PolicyName::None {
            return Ok(None);
        }
        let options = PolicyOptions::parse(&self.options)?;
        let n = reserved_cpu_count(self.reserved_millis, self.reserved_system_cpus.as_ref())?;
        let topo = discover(&self.sysfs)?;
        Ok(Some(StaticPolicy::new(
            topo,
            n,
            self.reserved_system_cpus.as_ref(),
            options,
        )?))
    }
}

/// `qosd plan`: the static policy over `pods` (arrival = list order) on a
/// fresh state. `None` for policy `none`.
pub(crate) fn plan_pods(
    settings: &CpuManagerSettings,
    pods: &[(&Pod, i64)],
) -> Result<Option<CpuPlan>, CpuManagerError> {
    let Some(mut policy) = settings.build_policy()? else {
        return Ok(None);
    };
    let mut state = CpuState::default();
    policy.start(&mut state)?;
    let cpods: Vec<CpuPod> = pods.iter().map(|(p, a)| CpuPod::from_pod(p, *a)).collect();
    Ok(Some(plan(&mut policy, &mut state, &cpods)))
}

/// Read a state file; `Ok(None)` when it does not exist. Regular files
/// only, size-capped (a FIFO or `/dev/zero` is refused, not waited on).
pub(crate) fn read_state(path: &Path) -> Result<Option<CpuState>, CpuManagerError> {
    use qosd_node::sys::input::{read_bytes, Symlinks, MAX_INPUT_BYTES};
    match read_bytes(path, MAX_INPUT_BYTES, Symlinks::Follow) {
        Ok(b) => CpuState::from_json(&b)
            .map(Some)
            .map_err(|source| CpuManagerError::State {
                path: path.to_path_buf(),
                source: Box::new(source),
            }),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(CpuManagerError::Io {
            path: path.to_path_buf(),
            source: e.into_io(),
        }),
    }
}

/// Write a state file atomically (temp file in the same dir, fsync, rename),
/// creating the directory.
pub(crate) fn write_state(path: &Path, state: &CpuState) -> Result<(), CpuManagerError> {
    use std::io::Write;
    let io = |source| CpuManagerError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&state.to_json()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// What one CPU manager pass did.
#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct CpuReport {
    /// Containers whose cpuset was set: (container id, cpus).
    pub(crate) applied: Vec<(String, String)>,
    /// Of those, ones that had been set before and were changed by someone.
    pub(crate) drift: Vec<String>,
    pub(crate) errors: Vec<String>,
    /// Audit mode: live cpusets that differ from the kubelet's state.
    pub(crate) audit_differences: Vec<String>,
    pub(crate) shared_pool: String,
    pub(crate) refused: Vec<String>,
}

/// The running CPU manager.
pub(crate) struct CpuManager {
    policy: StaticPolicy,
    state: CpuState,
    state_file: Option<PathBuf>,
    audit_file: Option<PathBuf>,
    dry_run: bool,
    /// container id → cpus qosd last set.
    last_applied: HashMap<String, String>,
    last_full: Option<Instant>,
    logged_refusals: std::collections::HashSet<String>,
}

/// Re-apply every running container's cpuset at least this often, even
/// when the runtime reports the right value (catches cgroup-level drift).
pub(crate) const FULL_APPLY_INTERVAL: Duration = Duration::from_secs(60);

impl CpuManager {
    /// Start the policy: `None` for policy `none`. Restores and validates
    /// the state file (the kubelet refuses to start on an invalid one, and
    /// so does qosd).
    pub(crate) fn start(
        settings: &CpuManagerSettings,
        dry_run: bool,
    ) -> Result<Option<CpuManager>, CpuManagerError> {
        let Some(policy) = settings.build_policy()? else {
            return Ok(None);
        };
        let mut state = CpuState::default();
        if settings.audit_file.is_none() {
            if let Some(path) = &settings.state_file {
                if let Some(s) = read_state(path)? {
                    state = s;
                }
                policy
                    .start(&mut state)
                    .map_err(|source| CpuManagerError::InvalidState {
                        path: path.clone(),
                        source,
                    })?;
            } else {
                policy.start(&mut state)?;
            }
        }
        tracing::info!(
            policy = "static",
            reserved = %policy.reserved(),
            shared_pool = %state.default,
            audit = settings.audit_file.is_some(),
            "CPU manager started"
        );
        Ok(Some(CpuManager {
            policy,
            state,
            state_file: settings.state_file.clone(),
            audit_file: settings.audit_file.clone(),
            dry_run,
            last_applied: HashMap::new(),
            last_full: None,
            logged_refusals: Default::default(),
        }))
    }

    #[cfg(test)]
    pub(crate) fn state(&self) -> &CpuState {
        &self.state
    }

    /// One pass over the live pods.
    pub(crate) async fn reconcile(&mut self, client: &CriClient, live: &[LivePod]) -> CpuReport {
        let mut report = CpuReport::default();
        let ready: Vec<&LivePod> = live
            .iter()
            .filter(|p| p.state == SandboxState::Ready)
            .collect();
        if let Some(audit) = self.audit_file.clone() {
            self.audit(client, &audit, &ready, &mut report).await;
            return report;
        }
        let out = self.run_policy(&ready, &mut report);
        let desired: HashMap<(&str, &str), &str> = out
            .cpusets
            .iter()
            .map(|c| ((c.pod_uid.as_str(), c.container.as_str()), c.cpus.as_str()))
            .collect();
        let full = self
            .last_full
            .is_none_or(|t| t.elapsed() >= FULL_APPLY_INTERVAL);
        if full {
            self.last_full = Some(Instant::now());
        }
        let mut seen = std::collections::HashSet::new();
        for p in &ready {
            for c in p.containers.iter().filter(|c| c.state == "running") {
                let Some(want) = desired.get(&(p.pod.uid.as_str(), c.name.as_str())) else {
                    continue;
                };
                seen.insert(c.id.clone());
                self.apply_cpuset(client, p, c, want, full, &mut report)
                    .await;
            }
        }
        self.last_applied.retain(|id, _| seen.contains(id));
        report
    }

    /// Run the policy over the ready pods: log refusals (once each) and
    /// releases, and persist the state when it changed.
    fn run_policy(&mut self, ready: &[&LivePod], report: &mut CpuReport) -> CpuPlan {
        let pods: Vec<CpuPod> = ready
            .iter()
            .map(|p| CpuPod::from_pod(&p.pod, p.created_at))
            .collect();
        let before = self.state.clone();
        let out = plan(&mut self.policy, &mut self.state, &pods);
        report.shared_pool = out.shared_pool.clone();
        for r in &out.refused {
            let key = format!("{}/{}", r.pod_uid, r.container);
            if self.logged_refusals.insert(key.clone()) {
                tracing::warn!(pod = %r.pod, uid = %r.pod_uid, container = %r.container, error = %r.error, "exclusive CPUs refused; the container stays on the shared pool");
            }
            report
                .refused
                .push(format!("{} {}: {}", r.pod, r.container, r.error));
        }
        for r in &out.released {
            tracing::info!(container = %r, "released exclusive CPUs of a container that is gone");
        }
        if self.state != before {
            if let Some(path) = &self.state_file {
                if self.dry_run {
                    tracing::info!(file = %path.display(), "would write CPU manager state");
                } else if let Err(e) = write_state(path, &self.state) {
                    tracing::warn!(error = %e, "cannot write the CPU manager state");
                    report.errors.push(e.to_string());
                }
            }
        }
        out
    }

    /// Give a running container the cpuset `want` unless it has it (and
    /// qosd set it) and no full re-apply is due; drift is corrected and
    /// reported.
    async fn apply_cpuset(
        &mut self,
        client: &CriClient,
        p: &LivePod,
        c: &LiveContainer,
        want: &str,
        full: bool,
        report: &mut CpuReport,
    ) {
        let current = live_cpuset(client, &c.id).await;
        let same = current
            .as_deref()
            .and_then(|s| CpuSet::parse(s).ok())
            .is_some_and(|s| s.to_string() == want);
        let mine = self.last_applied.get(&c.id).map(String::as_str);
        if same && mine == Some(want) && !full {
            return;
        }
        if same && mine == Some(want) && full {
            // periodic re-apply, quietly
        } else if mine == Some(want) {
            report.drift.push(c.id.clone());
            tracing::warn!(pod = %p.pod.key(), container = %c.name, found = current.as_deref().unwrap_or("-"), cpus = %want, "corrected cpuset drift");
        } else if same {
            self.last_applied.insert(c.id.clone(), want.to_string());
            return;
        }
        let was_mine = mine == Some(want);
        if self.dry_run {
            tracing::info!(pod = %p.pod.key(), container = %c.name, cpus = %want, "would set cpuset");
            report.applied.push((c.id.clone(), want.to_string()));
            return;
        }
        let res = proto::LinuxContainerResources {
            cpuset_cpus: want.to_string(),
            ..Default::default()
        };
        match client.update_container_resources(&c.id, res).await {
            Ok(()) => {
                if !was_mine {
                    tracing::info!(pod = %p.pod.key(), container = %c.name, id = %c.id, cpus = %want, previous = current.as_deref().unwrap_or("-"), "set cpuset");
                }
                self.last_applied.insert(c.id.clone(), want.to_string());
                report.applied.push((c.id.clone(), want.to_string()));
            }
            Err(e) => {
                tracing::warn!(pod = %p.pod.key(), container = %c.name, error = %e, "cannot set cpuset");
                report.errors.push(format!("{}: {e}", c.id));
            }
        }
    }

    async fn audit(
        &mut self,
        client: &CriClient,
        path: &Path,
        ready: &[&LivePod],
        report: &mut CpuReport,
    ) {
        let kubelet = match read_state(path) {
            Ok(Some(s)) => s,
            Ok(None) => {
                report.errors.push(format!("{}: not found", path.display()));
                return;
            }
            Err(e) => {
                report.errors.push(e.to_string());
                return;
            }
        };
        report.shared_pool = kubelet.default.to_string();
        for p in ready {
            for c in p.containers.iter().filter(|c| c.state == "running") {
                let want = kubelet
                    .get(&p.pod.uid, &c.name)
                    .unwrap_or(&kubelet.default)
                    .clone();
                let current = live_cpuset(client, &c.id).await;
                let cur_set = current.as_deref().and_then(|s| CpuSet::parse(s).ok());
                if cur_set.as_ref() != Some(&want) {
                    let msg = format!(
                        "{} {} ({}): live cpuset {} != kubelet state {}",
                        p.pod.key(),
                        c.name,
                        c.id,
                        current.as_deref().unwrap_or("(none)"),
                        want
                    );
                    tracing::warn!("{msg}");
                    report.audit_differences.push(msg);
                }
            }
        }
    }
}

/// A container's cpuset as the runtime reports it now: the status
/// resources, else the OCI spec from the verbose status.
pub(crate) async fn live_cpuset(client: &CriClient, id: &str) -> Option<String> {
    let st = client.container_status(id, true).await.ok()?;
    if let Some(c) = st
        .status
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.linux.as_ref())
        .map(|l| l.cpuset_cpus.clone())
        .filter(|c| !c.is_empty())
    {
        return Some(c);
    }
    qosd_node::cri::inventory::resources_from_info(&st.info)
        .map(|r| r.cpuset_cpus)
        .filter(|c| !c.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/sysfs")
            .join(name)
    }

    #[test]
    fn settings_build_the_policy() {
        let mut s = CpuManagerSettings {
            policy: PolicyName::Static,
            sysfs: fixture("2s-8c-2t"),
            ..Default::default()
        };
        assert_eq!(
            s.build_policy().unwrap_err().to_string(),
            "[cpumanager] unable to determine reserved CPU resources for static policy"
        );
        s.reserved_millis = Some(1500);
        // ceil(1.5) = 2 CPUs: the first whole core (0 and its sibling 16).
        assert_eq!(
            s.build_policy().unwrap().unwrap().reserved().to_string(),
            "0,16"
        );
        s.reserved_system_cpus = Some(CpuSet::parse("3,5").unwrap());
        assert_eq!(
            s.build_policy().unwrap().unwrap().reserved().to_string(),
            "3,5"
        );
        s.policy = PolicyName::None;
        assert!(s.build_policy().unwrap().is_none());
    }

    #[test]
    fn state_file_round_trip_and_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join(STATE_FILE_NAME);
        let settings = CpuManagerSettings {
            policy: PolicyName::Static,
            sysfs: fixture("1s-4c-2t"),
            reserved_millis: Some(1000),
            state_file: Some(path.clone()),
            ..Default::default()
        };
        let m = CpuManager::start(&settings, false).unwrap().unwrap();
        assert_eq!(m.state().default.to_string(), "0-7");
        let mut st = m.state().clone();
        st.default = CpuSet::parse("0-1,3-5,7").unwrap();
        st.set("pod", "c", CpuSet::parse("2,6").unwrap());
        write_state(&path, &st).unwrap();
        let m = CpuManager::start(&settings, false).unwrap().unwrap();
        assert_eq!(m.state(), &st);
        // a state that does not fit the machine is refused
        std::fs::write(
            &path,
            CpuState {
                policy_name: "static".into(),
                default: CpuSet::parse("0-3").unwrap(),
                ..Default::default()
            }
            .to_json(),
        )
        .unwrap();
        let e = CpuManager::start(&settings, false).err().unwrap();
        assert!(
            e.to_string().contains("doesn't match with CPUs in state"),
            "{e}"
        );
    }
}
