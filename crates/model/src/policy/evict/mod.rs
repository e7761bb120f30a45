//! Eviction policy: kubelet signals and thresholds ([`threshold`]), qosd's
//! memory pressure (stall) thresholds ([`pressure`]), the kubelet's ranking
//! ([`rank`]) and the pure, time-injected state machine
//! that decides conditions and victims ([`manager`]).

pub mod image_gc;
pub mod local_storage;
pub mod manager;
pub mod message;
pub mod pressure;
pub mod rank;
pub mod threshold;

/// How victims are evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// Kill locally: `cgroup.kill` or SIGKILL to every process of the pod cgroup, then clean up
    /// through the runtime.
    Kill,
    /// Stop and remove the pod through the container runtime (CRI).
    Cri,
    /// The Kubernetes Eviction API (src/kube), local kill as fall-back.
    Api,
    /// Decide and log only; evict nothing.
    DryRun,
}

impl Backend {
    /// The backend's name (`kill`, `cri`, `api`, `dry-run`).
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Kill => "kill",
            Backend::Cri => "cri",
            Backend::Api => "api",
            Backend::DryRun => "dry-run",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "kill" => Ok(Backend::Kill),
            "cri" => Ok(Backend::Cri),
            "api" => Ok(Backend::Api),
            "dry-run" | "dryrun" => Ok(Backend::DryRun),
            _ => Err(format!(
                "unknown evictor backend {s:?} (kill, cri, api, dry-run)"
            )),
        }
    }
}

/// Where `memory.available` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemorySource {
    /// The kubelet's: capacity − (usage − inactive_file) of the root cgroup.
    #[default]
    #[serde(alias = "working-set")]
    WorkingSet,
    /// `MemAvailable` from /proc/meminfo (does not count reclaimable page cache as used).
    #[serde(alias = "memavailable")]
    Meminfo,
}

impl std::str::FromStr for MemorySource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "working-set" | "workingset" | "cgroup" => Ok(MemorySource::WorkingSet),
            "meminfo" | "memavailable" => Ok(MemorySource::Meminfo),
            _ => Err(format!(
                "unknown memory-available source {s:?} (working-set, meminfo)"
            )),
        }
    }
}
