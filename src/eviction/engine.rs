//! The eviction pieces wired together for the daemon: one call per pass.
//!
//! [`Engine::pass`] reads the signals now, fills missing pod stats from the
//! pods' cgroups, runs the manager, and acts on a victim with the evictor
//! (reporting a failure back to the manager). [`Engine::spawn_watcher`]
//! starts the fast detector whose callback should trigger a pass at once.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::eviction::evictor::{EvictError, Evictor, Outcome};
use crate::eviction::manager::{watched_signals, Decision, Manager, ManagerOptions};
use crate::eviction::rank::Candidate;
use crate::eviction::signals::{pod_stats, SignalError, SignalSources};
use crate::eviction::threshold::{EvictionConfig, Signal};
use crate::eviction::watch::{targets_from_config, WatchConfig, WatchError, WatchEvent, Watcher};

/// What one pass saw and did.
#[derive(Debug)]
pub struct PassReport {
    pub decision: Decision,
    /// The eviction carried out in this pass, if any.
    pub outcome: Option<Result<Outcome, EvictError>>,
    /// Signals that could not be read (they count as missing data).
    pub signal_errors: Vec<SignalError>,
}

/// Manager + signal sources + evictor.
pub struct Engine {
    pub manager: Manager,
    pub sources: SignalSources,
    pub evictor: Evictor,
    signals: BTreeSet<Signal>,
}

impl Engine {
    pub fn new(
        config: EvictionConfig,
        opts: ManagerOptions,
        sources: SignalSources,
        evictor: Evictor,
    ) -> Engine {
        let signals = watched_signals(&config);
        Engine {
            manager: Manager::new(config, opts),
            sources,
            evictor,
            signals,
        }
    }

    /// One pass. `pods`: the current pods (stats `None` are read from their
    /// `cgroup_dirs`), or why the pod list is unavailable (then nothing is
    /// evicted).
    pub fn pass(&mut self, pods: Result<Vec<Candidate>, String>) -> PassReport {
        let now = Instant::now();
        let (obs, signal_errors) = self.sources.observe(self.signals.iter().copied(), now);
        for e in &signal_errors {
            tracing::warn!(error = %e, "eviction signal unavailable");
        }
        let version = self.sources.version;
        let pods = pods.map(|ps| {
            ps.into_iter()
                .map(|mut c| {
                    if c.stats.is_none() {
                        if let Some(dir) = c.cgroup_dirs.first() {
                            let st = pod_stats(version, dir);
                            if st.memory_working_set_bytes.is_some() || st.processes.is_some() {
                                c.stats = Some(st);
                            }
                        }
                    }
                    c
                })
                .collect::<Vec<_>>()
        });
        let decision = self
            .manager
            .synchronize(now, &obs, pods.as_deref().map_err(Clone::clone));
        let outcome = decision.victim().map(|v| {
            let r = self.evictor.evict(v);
            if let Err(e) = &r {
                tracing::error!(pod = %v.candidate.uid, error = %e, "eviction failed");
                self.manager.eviction_failed(&v.candidate.uid, now);
            }
            r
        });
        PassReport {
            decision,
            outcome,
            signal_errors,
        }
    }

    /// Start the fast detector on the memory hard thresholds; `on_event`
    /// runs on the watcher thread and should wake the pass loop.
    pub fn spawn_watcher(
        &self,
        cfg: WatchConfig,
        on_event: impl FnMut(WatchEvent) + Send + 'static,
    ) -> Result<Watcher, WatchError> {
        let targets = targets_from_config(self.manager.config(), &self.sources)?;
        Watcher::spawn(targets, cfg, on_event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::evictor::Backend;
    use crate::eviction::signals::MemorySource;
    use crate::eviction::threshold::RawEvictionConfig;
    use crate::model::{CgroupVersion, QosClass};
    use std::path::PathBuf;
    use std::time::Duration;

    fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/signals")
    }

    fn engine(threshold: &str) -> Engine {
        let f = fixtures();
        let sources = SignalSources {
            version: CgroupVersion::V1,
            memory_root: f.join("v1"),
            kubepods: Some(f.join("v1/kubepods")),
            allocatable_memory_bytes: None,
            meminfo: f.join("meminfo"),
            loadavg: f.join("loadavg"),
            pid_max: f.join("pid_max"),
            nodefs: None,
            imagefs: None,
            containerfs: None,
            memory_source: MemorySource::WorkingSet,
        };
        let cfg = EvictionConfig::from_raw(&RawEvictionConfig {
            eviction_hard: Some(
                [(
                    "allocatableMemory.available".to_string(),
                    threshold.to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        })
        .unwrap();
        Engine::new(
            cfg,
            ManagerOptions::default(),
            sources,
            Evictor::new(Backend::DryRun, None, Duration::ZERO),
        )
    }

    fn pod(uid: &str, qos: QosClass, dir: Option<PathBuf>) -> Candidate {
        Candidate {
            uid: uid.into(),
            namespace: "ns".into(),
            name: uid.into(),
            qos,
            priority: 0,
            static_or_mirror: false,
            memory_request_bytes: 0,
            ephemeral_storage_request_bytes: 0,
            termination_grace_period_seconds: None,
            sandbox_id: None,
            cgroup_dirs: dir.into_iter().collect(),
            stats: None,
        }
    }

    #[test]
    fn pass_fills_stats_and_dry_runs() {
        // fixture kubepods: limit 1 GiB, working set 600 MiB → 424 MiB available
        let mut e = engine("500Mi");
        let pods = vec![
            pod(
                "abc",
                QosClass::BestEffort,
                Some(fixtures().join("v1/kubepods/besteffort/podabc")),
            ),
            pod("nodir", QosClass::BestEffort, None),
        ];
        let r = e.pass(Ok(pods));
        assert!(r.signal_errors.is_empty(), "{:?}", r.signal_errors);
        let v = r.decision.victim().expect("victim");
        // the pod without stats ranks first, like the kubelet
        assert_eq!(v.candidate.uid, "nodir");
        assert_eq!(v.observed, 424 * 1024 * 1024);
        assert!(matches!(r.outcome, Some(Ok(ref o)) if o.backend == Backend::DryRun));

        let mut e = engine("100Mi");
        let r = e.pass(Ok(vec![pod(
            "abc",
            QosClass::BestEffort,
            Some(fixtures().join("v1/kubepods/besteffort/podabc")),
        )]));
        assert!(r.decision.victim().is_none());
        assert!(r.outcome.is_none());
    }

    #[test]
    fn pass_without_pods_blocks() {
        let mut e = engine("500Mi");
        let r = e.pass(Err("runtime down".into()));
        assert!(r.outcome.is_none());
        assert!(matches!(
            r.decision.action,
            crate::eviction::manager::Action::Blocked(ref w) if w.contains("runtime down")
        ));
    }

    #[test]
    fn failed_eviction_is_reported_back() {
        let mut e = engine("500Mi");
        e.evictor = Evictor::new(Backend::Cri, None, Duration::ZERO); // no stopper: fails
        let pods = vec![
            pod(
                "a",
                QosClass::BestEffort,
                Some(fixtures().join("v1/kubepods/besteffort/podabc")),
            ),
            pod(
                "b",
                QosClass::BestEffort,
                Some(fixtures().join("v1/kubepods/besteffort/podabc")),
            ),
        ];
        let r = e.pass(Ok(pods.clone()));
        assert!(matches!(r.outcome, Some(Err(_))));
        let first = r.decision.victim().unwrap().candidate.uid.clone();
        assert_eq!(e.manager.pending_victim(), None);
        let r = e.pass(Ok(pods));
        assert_ne!(r.decision.victim().unwrap().candidate.uid, first);
    }
}
