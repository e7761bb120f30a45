//! The eviction pieces wired together for the daemon: one call per pass.
//!
//! [`Engine::pass`] reads the signals now, fills missing pod stats from the
//! pods' cgroups, runs the manager, and acts on a victim with the evictor
//! (reporting a failure back to the manager). [`Engine::spawn_watcher`]
//! starts the fast detector whose callback should trigger a pass at once.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::policy::evict::manager::{watched_signals, Decision, Manager, ManagerOptions};
use crate::policy::evict::rank::Candidate;
use crate::policy::evict::threshold::{EvictionConfig, Signal};
use crate::runtime::evictor::{EvictError, Evictor, Outcome};
use crate::sys::signals::{pod_stats, SignalError, SignalSources};
use crate::sys::watch::{targets_from_config, WatchConfig, WatchError, WatchEvent, Watcher};

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
        // Errors go back in the report; the caller logs them (once).
        let (obs, signal_errors) = self.sources.observe(self.signals.iter().copied(), now);
        let version = self.sources.version;
        // Per-pod usage matters only to choose a victim or to see one's
        // resources released: skip reading every pod cgroup on quiet passes.
        let near = self.manager.config().thresholds.iter().any(|t| {
            obs.get(&t.signal).is_some_and(|o| {
                o.available < t.threshold_for(o.capacity) + t.min_reclaim_for(o.capacity)
            })
        });
        let needs_stats = near || self.manager.pending_victim().is_some();
        let pods = pods.map(|ps| {
            ps.into_iter()
                .map(|mut c| {
                    if needs_stats && c.stats.is_none() {
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
        let mut decision =
            self.manager
                .synchronize(now, &obs, pods.as_deref().map_err(Clone::clone));
        let mut outcome = decision.victim().map(|v| {
            let r = self.evictor.evict(v);
            if let Err(e) = &r {
                tracing::error!(pod = %v.candidate.uid, error = %e, "eviction failed");
                self.manager.eviction_failed(&v.candidate.uid, now);
            }
            r
        });
        // A soft eviction the API refused moves on to the next candidate
        // at once (the refused pod is in back-off), a few at most per pass.
        for _ in 0..MAX_REFUSED_PER_PASS {
            if !matches!(outcome, Some(Err(EvictError::ApiRefused { .. }))) {
                break;
            }
            decision = self
                .manager
                .synchronize(now, &obs, pods.as_deref().map_err(Clone::clone));
            outcome = decision.victim().map(|v| {
                let r = self.evictor.evict(v);
                if let Err(e) = &r {
                    tracing::error!(pod = %v.candidate.uid, error = %e, "eviction failed");
                    self.manager.eviction_failed(&v.candidate.uid, now);
                }
                r
            });
        }
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

/// Candidates tried in one pass after API refusals of soft evictions.
const MAX_REFUSED_PER_PASS: usize = 8;

/// The latest pod list, shared between the daemon's listing loop (writer)
/// and the eviction loop (reader).
#[derive(Debug)]
pub struct PodFeed {
    inner: std::sync::Mutex<(Result<Vec<Candidate>, String>, Instant)>,
}

impl Default for PodFeed {
    fn default() -> Self {
        PodFeed {
            inner: std::sync::Mutex::new((Err("no pod list yet".into()), Instant::now())),
        }
    }
}

impl PodFeed {
    /// Publish a fresh listing (stats may be `None`: read from cgroups).
    pub fn set(&self, pods: Vec<Candidate>) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = (Ok(pods), Instant::now());
    }

    /// The listing failed (runtime down…): evictions stop until the next `set`.
    pub fn failed(&self, why: impl Into<String>) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = (Err(why.into()), Instant::now());
    }

    /// The pods, or why they are unusable (failed, or older than `max_age`).
    pub fn get(&self, max_age: std::time::Duration) -> Result<Vec<Candidate>, String> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let age = g.1.elapsed();
        match &g.0 {
            Ok(p) if age <= max_age => Ok(p.clone()),
            Ok(_) => Err(format!(
                "the pod list is {} old (max {})",
                crate::policy::evict::threshold::format_duration(age),
                crate::policy::evict::threshold::format_duration(max_age)
            )),
            Err(e) => Err(e.clone()),
        }
    }
}

/// A running eviction loop (its thread and the watcher); stops on drop.
pub struct EvictionLoop {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    wake: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
    watcher: Option<Watcher>,
}

/// Timing of the eviction loop.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopOptions {
    /// A pass at least this often (disk/pid signals, releases, conditions).
    pub period: std::time::Duration,
    /// Pod lists older than this block evictions.
    pub max_pod_list_age: std::time::Duration,
    /// The fast detector; `None`: passes only every `period` (the kubelet's
    /// behaviour, a benchmark baseline).
    pub watch: Option<WatchConfig>,
}

impl Default for LoopOptions {
    fn default() -> Self {
        LoopOptions {
            period: std::time::Duration::from_secs(1),
            max_pod_list_age: std::time::Duration::from_secs(60),
            watch: Some(WatchConfig::default()),
        }
    }
}

impl EvictionLoop {
    /// Start the watcher and a thread that runs [`Engine::pass`] at once on
    /// every watcher event, and at least every `period`. `on_pass` gets each
    /// report (metrics, status, conditions) on that thread.
    pub fn spawn(
        engine: Engine,
        feed: std::sync::Arc<PodFeed>,
        opts: LoopOptions,
        on_pass: impl FnMut(&PassReport) + Send + 'static,
    ) -> Result<EvictionLoop, WatchError> {
        Self::spawn_supervised(engine, feed, opts, None, on_pass)
    }

    /// [`EvictionLoop::spawn`] under supervision: the loop beats a heartbeat
    /// registered with `health` (deadline: 10 periods, at least 30 s), a
    /// panic in it fails liveness with the reason, and so does a fast
    /// watcher thread that died.
    pub fn spawn_supervised(
        mut engine: Engine,
        feed: std::sync::Arc<PodFeed>,
        opts: LoopOptions,
        health: Option<std::sync::Arc<crate::telemetry::health::Health>>,
        mut on_pass: impl FnMut(&PassReport) + Send + 'static,
    ) -> Result<EvictionLoop, WatchError> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let tx_w = tx.clone();
        let watcher = match &opts.watch {
            None => None,
            Some(wc) => match engine.spawn_watcher(wc.clone(), move |_e| {
                let _ = tx_w.send(());
            }) {
                Ok(w) => Some(w),
                // Evictions still happen, at the pass period; the loop
                // retries the watcher at each pass (the kubepods cgroup may
                // not exist yet: `qosd run` creates it at its first reconcile).
                Err(e) => {
                    tracing::warn!(error = %e, period = ?opts.period, "fast memory watcher unavailable; evaluating every period until it starts");
                    None
                }
            },
        };
        let mut retry_watch = match (&watcher, &opts.watch) {
            (None, Some(wc)) => Some(wc.clone()),
            _ => None,
        };
        let tx_late = tx.clone();
        let rt_priority = opts.watch.as_ref().and_then(|w| w.rt_priority);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let heartbeat = health.as_ref().map(|h| {
            h.register_loop(
                "eviction loop",
                (opts.period * 10).max(std::time::Duration::from_secs(30)),
            )
        });
        let health2 = health.clone();
        let thread = crate::runtime::supervisor::spawn_supervised(
            "qosd-evict-loop",
            health.clone(),
            move || {
                let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
                if let Some(p) =
                    rt_priority.filter(|_| crate::sys::watch::realtime_allowed(&status))
                {
                    // the pass itself must not lag the detector
                    let param = libc::sched_param { sched_priority: p };
                    // SAFETY: plain syscall on the current thread.
                    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
                }
                // The watcher lives (and stops) with this thread, which
                // checks that it is still running.
                let mut _late_watcher: Option<Watcher> = watcher;
                while !stop2.load(Ordering::Relaxed) {
                    let _ = rx.recv_timeout(opts.period);
                    while rx.try_recv().is_ok() {} // coalesce wake-ups
                    if stop2.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Some(wc) = &retry_watch {
                        let tx_w = tx_late.clone();
                        match engine.spawn_watcher(wc.clone(), move |_e| {
                            let _ = tx_w.send(());
                        }) {
                            Ok(w) => {
                                tracing::info!("fast memory watcher started");
                                _late_watcher = Some(w);
                                retry_watch = None;
                            }
                            Err(e) => {
                                tracing::debug!(error = %e, "fast memory watcher still unavailable")
                            }
                        }
                    }
                    if let Some(hb) = &heartbeat {
                        hb.beat();
                    }
                    if let (Some(h), Some(w)) = (&health2, &_late_watcher) {
                        if !w.is_running() {
                            h.fail("fast memory watcher thread died".into());
                        }
                    }
                    crate::runtime::supervisor::inject_panic("eviction-pass");
                    let report = engine.pass(feed.get(opts.max_pod_list_age));
                    on_pass(&report);
                }
            },
        )
        .map_err(WatchError::Spawn)?;
        Ok(EvictionLoop {
            stop,
            wake: tx,
            thread: Some(thread),
            watcher: None,
        })
    }

    /// Ask for a pass now (e.g. after a new pod listing).
    pub fn wake(&self) {
        let _ = self.wake.send(());
    }

    /// Stop the watcher and the loop, and wait for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            w.stop();
        }
        let _ = self.wake.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EvictionLoop {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{CgroupVersion, QosClass};
    use crate::policy::evict::threshold::RawEvictionConfig;
    use crate::policy::evict::Backend;
    use crate::policy::evict::MemorySource;
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
    fn loop_passes_on_watcher_events() {
        let e = engine("500Mi"); // fixture: 424 MiB available → below at once
        let feed = std::sync::Arc::new(PodFeed::default());
        feed.set(vec![pod(
            "abc",
            QosClass::BestEffort,
            Some(fixtures().join("v1/kubepods/besteffort/podabc")),
        )]);
        let (tx, rx) = std::sync::mpsc::channel();
        let opts = LoopOptions {
            period: Duration::from_secs(60), // only watcher events can drive passes
            ..Default::default()
        };
        let l = EvictionLoop::spawn(e, feed.clone(), opts, move |r| {
            let _ = tx.send(r.decision.victim().map(|v| v.candidate.uid.clone()));
        })
        .unwrap();
        let first = rx.recv_timeout(Duration::from_secs(5)).expect("a pass");
        assert_eq!(first.as_deref(), Some("abc"));
        l.stop();
    }

    #[test]
    fn watcher_retried_until_kubepods_exists() {
        // `qosd run` starts the loop before its first reconcile creates
        // kubepods: the watcher must start once it exists.
        let tmp = tempfile::tempdir().unwrap();
        let mut e = engine("500Mi"); // fixture: 424 MiB available → below at once
        e.sources.kubepods = Some(tmp.path().join("kubepods"));
        let feed = std::sync::Arc::new(PodFeed::default());
        feed.set(vec![pod("abc", QosClass::BestEffort, None)]);
        let passes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let p2 = passes.clone();
        let opts = LoopOptions {
            period: Duration::from_millis(300),
            max_pod_list_age: Duration::from_secs(600),
            ..Default::default()
        };
        let l = EvictionLoop::spawn(e, feed, opts, move |_r| {
            p2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(700));
        let kp = tmp.path().join("kubepods");
        std::fs::create_dir(&kp).unwrap();
        for f in [
            "memory.stat",
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
        ] {
            std::fs::copy(fixtures().join("v1/kubepods").join(f), kp.join(f)).unwrap();
        }
        // Let the next period pass start the watcher, then count: below the
        // line, its events drive passes far more often than the period.
        std::thread::sleep(Duration::from_millis(700));
        let before = passes.load(std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(1200));
        let during = passes.load(std::sync::atomic::Ordering::Relaxed) - before;
        l.stop();
        assert!(during > 8, "{during} passes in 1.2 s: watcher not started");
    }

    #[test]
    fn pod_feed_staleness() {
        let f = PodFeed::default();
        assert_eq!(
            f.get(Duration::from_secs(1)).unwrap_err(),
            "no pod list yet"
        );
        f.set(vec![]);
        assert!(f.get(Duration::from_secs(1)).is_ok());
        std::thread::sleep(Duration::from_millis(20));
        assert!(f.get(Duration::from_millis(5)).unwrap_err().contains("old"));
        f.failed("runtime down");
        assert_eq!(f.get(Duration::from_secs(1)).unwrap_err(), "runtime down");
    }

    #[test]
    fn pass_without_pods_blocks() {
        let mut e = engine("500Mi");
        let r = e.pass(Err("runtime down".into()));
        assert!(r.outcome.is_none());
        assert!(matches!(
            r.decision.action,
            crate::policy::evict::manager::Action::Blocked(ref w) if w.contains("runtime down")
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
