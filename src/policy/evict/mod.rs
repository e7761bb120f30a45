//! Eviction policy: kubelet signals and thresholds ([`threshold`]), the
//! kubelet's ranking ([`rank`]) and the pure, time-injected state machine
//! that decides conditions and victims ([`manager`]).

pub mod image_gc;
pub mod local_storage;
pub mod manager;
pub mod rank;
pub mod threshold;

/// How victims are evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    Kill,
    Cri,
    DryRun,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Kill => "kill",
            Backend::Cri => "cri",
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
            "dry-run" | "dryrun" => Ok(Backend::DryRun),
            _ => Err(format!(
                "unknown evictor backend {s:?} (kill, cri, dry-run)"
            )),
        }
    }
}
