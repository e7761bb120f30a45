//! `qosd run`: the enforcement daemon.
//!
//! One reconcile = list pods (CRI or manifests) → classify → plan → apply
//! the writes that differ (or record them, dry run) → remove orphaned pod
//! cgroups that stayed empty for the grace period. The loop reconciles on a
//! timer and promptly when the set of sandboxes changes (cheap relist).
//! The eviction watcher runs beside it on its own thread
//! ([`crate::eviction`]); see docs/design.md.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cgroup::apply::{self, Applier, ApplyReport, Mode};
use crate::model::{CgroupVersion, CgroupWrite, Pod};
use crate::plan::{self, PlanConfig};

/// Where the daemon learns the pods from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodSourceSpec {
    /// The container runtime over the CRI.
    Cri { endpoint: String },
    /// Pod manifests (files/directories), re-read every relist: for nodes
    /// without a CRI runtime, static pods, tests and the v2 VM.
    Manifests(Vec<PathBuf>),
}

/// Cgroup directories qosd may touch: the kubepods cgroup in every
/// hierarchy it writes to (v1: cpu, memory, pids; v2: the unified tree).
pub fn kubepods_dirs(cfg: &PlanConfig) -> Vec<PathBuf> {
    let node = cfg.layout.node_cgroup();
    match cfg.layout.version {
        CgroupVersion::V2 => vec![cfg.layout.dir(&node, "")],
        CgroupVersion::V1 => ["cpu", "memory", "pids"]
            .iter()
            .map(|c| cfg.layout.dir(&node, c))
            .collect(),
    }
}

/// Every hierarchy's kubepods directory, for orphan cleanup: on v1 the
/// runtime creates `pod<uid>` in all hierarchies (cpu, memory, pids, but
/// also freezer, devices, blkio, …), and all of them must go.
pub fn orphan_bases(cfg: &PlanConfig) -> Vec<PathBuf> {
    let node = cfg.layout.node_cgroup();
    match cfg.layout.version {
        CgroupVersion::V2 => vec![cfg.layout.dir(&node, "")],
        CgroupVersion::V1 => {
            let mut seen = HashSet::new();
            let mut out = Vec::new();
            let Ok(entries) = std::fs::read_dir(&cfg.layout.cgroupfs) else {
                return kubepods_dirs(cfg);
            };
            let mut names: Vec<String> = entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            for name in names {
                let dir = cfg.layout.dir(&node, &name);
                if !dir.is_dir() {
                    continue;
                }
                // `cpu` and `cpuacct` may be links to one `cpu,cpuacct`.
                let key = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
                if seen.insert(key) {
                    out.push(dir);
                }
            }
            out
        }
    }
}

/// What one reconcile did.
#[derive(Debug, Default, Serialize)]
pub struct ReconcileReport {
    /// Writes made (dry run: that would be made), in order.
    pub writes: Vec<CgroupWrite>,
    /// Every planned write (what `qosd plan` prints for the same pods).
    pub planned: Vec<CgroupWrite>,
    /// Planned writes already in place.
    pub unchanged: usize,
    /// Failed writes, with path, value and error.
    pub errors: Vec<String>,
    /// Orphaned pod cgroups removed (dry run: that would be removed).
    pub orphans_removed: Vec<PathBuf>,
    /// Pods planned.
    pub pods: usize,
    /// Files among `writes` whose write corrected drift (someone changed a
    /// value qosd had in place), as opposed to new cgroups or plan changes.
    #[serde(skip)]
    pub drift: Vec<PathBuf>,
    #[serde(skip)]
    pub duration: Duration,
}

/// Applies plans for a changing set of pods and cleans up orphans.
pub struct Reconciler {
    cfg: PlanConfig,
    applier: Applier,
    /// Where orphaned pod cgroups are looked for (every hierarchy).
    orphan_bases: Vec<PathBuf>,
    orphan_grace: Duration,
    /// Orphan pod cgroups and when they were first seen orphaned.
    orphans_seen: HashMap<PathBuf, Instant>,
    /// Files whose drift was already logged (log once until they change).
    drift_logged: HashSet<PathBuf>,
    /// The value qosd last had in place in each file, written or found
    /// already right (drift = someone changed it since).
    last_written: HashMap<PathBuf, String>,
}

impl Reconciler {
    pub fn new(cfg: PlanConfig, dry_run: bool, orphan_grace: Duration) -> Reconciler {
        let mode = if dry_run { Mode::DryRun } else { Mode::Real };
        let mut applier = Applier::with_bases(mode, kubepods_dirs(&cfg));
        if cfg.layout.version == CgroupVersion::V2 {
            // Enable cpu, memory, pids from the mount's root down to kubepods.
            applier = applier.enable_v2_controllers_from(cfg.layout.cgroupfs.clone());
        }
        Reconciler {
            orphan_bases: orphan_bases(&cfg),
            cfg,
            applier,
            orphan_grace,
            orphans_seen: HashMap::new(),
            drift_logged: HashSet::new(),
            last_written: HashMap::new(),
        }
    }

    pub fn config(&self) -> &PlanConfig {
        &self.cfg
    }

    /// Replace the planner config (SIGHUP reload). The layout must stay.
    pub fn set_config(&mut self, cfg: PlanConfig) {
        self.cfg = cfg;
    }

    pub fn dry_run(&self) -> bool {
        self.applier.mode() == Mode::DryRun
    }

    /// One pass. `all_live_uids` is every pod uid the source knows (ready or
    /// not); `None` when the listing was incomplete, which disables orphan
    /// removal for this pass.
    pub fn reconcile(
        &mut self,
        pods: &[Pod],
        all_live_uids: Option<&BTreeSet<String>>,
        now: Instant,
    ) -> ReconcileReport {
        let start = Instant::now();
        let plan = plan::build(&self.cfg, pods);
        let report: ApplyReport = self.applier.apply(&plan.writes);
        let mut out = ReconcileReport {
            unchanged: report.unchanged,
            pods: plan.pods.len(),
            ..Default::default()
        };
        let verb = if self.dry_run() {
            "would write"
        } else {
            "wrote"
        };
        for (w, prev) in report.written.iter().zip(report.previous.iter()) {
            match (prev, self.last_written.get(&w.file)) {
                // Someone changed a value qosd had set: drift, logged once.
                (Some(found), Some(mine)) if !apply::values_equal(&w.file, found, mine) => {
                    out.drift.push(w.file.clone());
                    if self.drift_logged.insert(w.file.clone()) {
                        tracing::warn!(file = %w.file.display(), value = %w.value, found = %found, "corrected drift: {verb} planned value over a value set by someone else");
                    }
                }
                _ => {
                    tracing::info!(file = %w.file.display(), value = %w.value, previous = prev.as_deref().unwrap_or("(new)"), "{verb} cgroup value");
                }
            }
            if !self.dry_run() {
                self.last_written.insert(w.file.clone(), w.value.clone());
            }
        }
        for e in &report.errors {
            tracing::warn!(file = %e.file.display(), value = %e.value, error = %e.error, "cgroup write failed");
            out.errors
                .push(format!("{}: {}: {}", e.file.display(), e.value, e.error));
        }
        if report.written.is_empty() {
            self.drift_logged.clear();
        }
        // Planned values found already in place are qosd's too: drift on
        // them (say on a tree that was right when qosd started) is drift.
        let touched: HashSet<&PathBuf> = report
            .written
            .iter()
            .map(|w| &w.file)
            .chain(report.errors.iter().map(|e| &e.file))
            .collect();
        for w in &plan.writes {
            if !touched.contains(&w.file) {
                self.last_written.insert(w.file.clone(), w.value.clone());
            }
        }
        let planned: HashSet<&PathBuf> = plan.writes.iter().map(|w| &w.file).collect();
        self.last_written.retain(|f, _| planned.contains(f));
        out.writes = report.written;
        out.planned = plan.writes;
        if let Some(live) = all_live_uids {
            out.orphans_removed = self.clean_orphans(live, now);
        }
        out.duration = start.elapsed();
        out
    }

    /// Remove pod cgroups whose pod is gone, once they stayed orphaned for
    /// the grace period and hold no process. Never touches a cgroup with
    /// live processes.
    fn clean_orphans(&mut self, live: &BTreeSet<String>, now: Instant) -> Vec<PathBuf> {
        let orphans = match apply::scan_orphans(&self.orphan_bases, live) {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %e, "orphan scan failed");
                return Vec::new();
            }
        };
        let current: HashSet<PathBuf> = orphans.iter().map(|o| o.dir.clone()).collect();
        self.orphans_seen.retain(|d, _| current.contains(d));
        let mut removed = Vec::new();
        for o in orphans {
            let first = *self.orphans_seen.entry(o.dir.clone()).or_insert(now);
            if now.duration_since(first) < self.orphan_grace {
                continue;
            }
            if self.dry_run() {
                tracing::info!(dir = %o.dir.display(), uid = %o.uid, "would remove orphaned pod cgroup");
                removed.push(o.dir);
                continue;
            }
            match apply::remove_cgroup_tree_if_empty(&o.dir, &self.orphan_bases) {
                Ok(dirs) if !dirs.is_empty() => {
                    tracing::info!(dir = %o.dir.display(), uid = %o.uid, "removed orphaned pod cgroup (its sandbox is gone)");
                    self.orphans_seen.remove(&o.dir);
                    removed.push(o.dir);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(dir = %o.dir.display(), error = %e, "orphaned pod cgroup not removed (not empty?)");
                }
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::paths::CgroupLayout;
    use crate::model::{CgroupDriver, Container, QosClass};
    use crate::node::NodeResources;
    use crate::quantity::Quantity;

    fn fake_v2_tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        std::fs::write(d.path().join("cgroup.subtree_control"), "cpu memory pids\n").unwrap();
        d
    }

    fn cfg(root: &std::path::Path) -> PlanConfig {
        let layout =
            CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Cgroupfs).with_cgroupfs(root);
        PlanConfig::new(layout, NodeResources::from_capacity(4000, 8 << 30))
    }

    fn pod(uid: &str, cpu: &str) -> Pod {
        let mut p = Pod::new(uid, "ns", uid);
        let mut c = Container {
            name: "c".into(),
            ..Default::default()
        };
        c.resources
            .requests
            .insert("cpu".into(), Quantity::parse(cpu).unwrap());
        p.containers.push(c);
        p
    }

    #[test]
    fn kubepods_dirs_per_version() {
        let l1 = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs)
            .with_cgroup_root("/qosd-test-1");
        let c1 = PlanConfig::new(l1, NodeResources::from_capacity(1000, 1 << 30));
        let dirs = kubepods_dirs(&c1);
        assert_eq!(
            dirs,
            vec![
                PathBuf::from("/sys/fs/cgroup/cpu/qosd-test-1/kubepods"),
                PathBuf::from("/sys/fs/cgroup/memory/qosd-test-1/kubepods"),
                PathBuf::from("/sys/fs/cgroup/pids/qosd-test-1/kubepods"),
            ]
        );
        let l2 = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Systemd);
        let c2 = PlanConfig::new(l2, NodeResources::from_capacity(1000, 1 << 30));
        assert_eq!(
            kubepods_dirs(&c2),
            vec![PathBuf::from("/sys/fs/cgroup/kubepods.slice")]
        );
    }

    /// On a fake tree the applier cannot create interface files (the kernel
    /// does), so seed a pod cgroup's files and check a steady state costs
    /// no writes and drift costs one.
    #[test]
    fn steady_state_and_drift_on_fake_v2_tree() {
        let d = fake_v2_tree();
        let c = cfg(d.path());
        let pods = vec![pod("0000-a", "250m")];
        // Seed every planned file with a wrong value so writes succeed.
        for w in plan::build(&c, &pods).writes {
            std::fs::create_dir_all(&w.dir).unwrap();
            std::fs::write(&w.file, "0").unwrap();
            for f in ["cgroup.controllers", "cgroup.subtree_control"] {
                let p = w.dir.join(f);
                if !p.exists() {
                    std::fs::write(p, "cpu memory pids\n").unwrap();
                }
            }
        }
        let mut r = Reconciler::new(c.clone(), false, Duration::from_secs(0));
        let first = r.reconcile(&pods, None, Instant::now());
        assert!(first.errors.is_empty(), "{:?}", first.errors);
        assert!(!first.writes.is_empty());
        assert_eq!(first.writes.len() + first.unchanged, first.planned.len());
        let second = r.reconcile(&pods, None, Instant::now());
        assert_eq!(second.writes.len(), 0, "steady state must not write");
        let weight = c.layout.file(
            &c.layout.pod_cgroup(QosClass::Burstable, "0000-a"),
            "cpu.weight",
        );
        std::fs::write(&weight, "4096").unwrap();
        let third = r.reconcile(&pods, None, Instant::now());
        assert_eq!(third.writes.len(), 1);
        assert_eq!(third.writes[0].file, weight);
        assert_eq!(third.drift, vec![weight.clone()]);

        // A plan change (another burstable pod) is qosd's own update, not
        // drift; the new pod's files neither.
        let pods2 = vec![pod("0000-a", "250m"), pod("0000-b", "500m")];
        for w in plan::build(&c, &pods2).writes {
            if !w.file.exists() {
                std::fs::create_dir_all(&w.dir).unwrap();
                std::fs::write(&w.file, "0").unwrap();
            }
        }
        let fourth = r.reconcile(&pods2, None, Instant::now());
        assert!(fourth.errors.is_empty(), "{:?}", fourth.errors);
        assert!(!fourth.writes.is_empty());
        assert!(fourth.drift.is_empty(), "{:?}", fourth.drift);

        // A reconciler that found everything in place (a restart on a
        // converged tree) still calls a later change drift.
        let mut fresh = Reconciler::new(c.clone(), false, Duration::from_secs(0));
        assert_eq!(
            fresh.reconcile(&pods2, None, Instant::now()).writes.len(),
            0
        );
        std::fs::write(&weight, "4096").unwrap();
        let after = fresh.reconcile(&pods2, None, Instant::now());
        assert_eq!(after.drift, vec![weight]);
    }

    #[test]
    fn orphans_removed_after_grace_only_when_empty() {
        let d = fake_v2_tree();
        let c = cfg(d.path());
        let kp = kubepods_dirs(&c)[0].clone();
        let orphan = kp.join("besteffort").join("pod1111");
        let busy = kp.join("burstable").join("pod2222");
        for dir in [&orphan, &busy] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("cgroup.procs"), "").unwrap();
        }
        std::fs::write(busy.join("cgroup.procs"), "1\n").unwrap();
        let mut r = Reconciler::new(c, false, Duration::from_secs(30));
        let live = BTreeSet::new();
        let t0 = Instant::now();
        assert!(
            r.clean_orphans(&live, t0).is_empty(),
            "inside the grace period"
        );
        let later = t0 + Duration::from_secs(31);
        let removed = r.clean_orphans(&live, later);
        // A fake tree's dirs hold regular files, so rmdir fails there; what
        // matters is that the busy cgroup is never a candidate for removal.
        assert!(!removed.contains(&busy));
        assert!(busy.exists());
        let mut live2 = BTreeSet::new();
        live2.insert("1111".to_string());
        live2.insert("2222".to_string());
        assert!(r.clean_orphans(&live2, later).is_empty());
        assert!(
            r.orphans_seen.is_empty(),
            "live pods are forgotten as orphans"
        );
    }
}

// ------------------------------------------------------------ the live loop

/// The pods of one listing.
#[derive(Debug, Default, Clone)]
pub struct Listing {
    /// Pods to plan (READY sandboxes, or every manifest pod).
    pub pods: Vec<Pod>,
    /// Every uid the source knows; `None` when the listing was incomplete
    /// (a sandbox skipped for a bad label), which disables orphan removal.
    pub all_uids: Option<BTreeSet<String>>,
    /// Live CRI pods (empty for manifests), for eviction and status.
    pub live: Vec<crate::cri::LivePod>,
}

/// A connected pod source.
pub enum Source {
    Cri {
        client: Box<crate::cri::CriClient>,
        inventory: crate::cri::InventoryOptions,
        /// The API server's pod specs, merged by uid (`None`: runtime alone).
        kube: Option<Arc<crate::kube::KubeSide>>,
    },
    Manifests(Vec<PathBuf>),
}

/// Why a listing failed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Cri(#[from] crate::cri::CriError),
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
}

impl Source {
    /// Connect (CRI: with retries per `opts`).
    pub async fn connect(
        spec: &PodSourceSpec,
        opts: crate::cri::ConnectOptions,
        memory_capacity_bytes: i64,
    ) -> Result<Source, SourceError> {
        Ok(match spec {
            PodSourceSpec::Cri { endpoint } => Source::Cri {
                client: Box::new(crate::cri::CriClient::connect(endpoint, opts).await?),
                inventory: crate::cri::InventoryOptions {
                    memory_capacity_bytes: Some(memory_capacity_bytes),
                },
                kube: None,
            },
            PodSourceSpec::Manifests(paths) => Source::Manifests(paths.clone()),
        })
    }

    /// Cheap change detector: CRI sandbox and container ids and states
    /// (two list calls); manifests: the pods themselves (re-reading small
    /// files is cheap).
    pub async fn fingerprint(&self) -> Result<Vec<String>, SourceError> {
        match self {
            Source::Cri { client, kube, .. } => {
                let mut v: Vec<String> = client
                    .list_pod_sandboxes()
                    .await?
                    .into_iter()
                    .map(|s| format!("s:{}:{}", s.id, s.state))
                    .collect();
                v.extend(
                    client
                        .list_containers(None)
                        .await?
                        .into_iter()
                        .map(|c| format!("c:{}:{}:{}", c.pod_sandbox_id, c.id, c.state)),
                );
                // The API's view too: a pod event or the API going away
                // (or coming back) relists and re-merges at once.
                if let Some(k) = kube {
                    v.push(k.change_key());
                }
                v.sort();
                Ok(v)
            }
            Source::Manifests(paths) => {
                let pods = crate::manifest::load_paths(paths)?;
                let mut v: Vec<String> = pods.iter().map(|p| format!("{p:?}")).collect();
                v.sort();
                Ok(v)
            }
        }
    }

    /// Full listing.
    pub async fn list(&self) -> Result<Listing, SourceError> {
        match self {
            Source::Cri {
                client,
                inventory,
                kube,
            } => {
                let mut inv = crate::cri::inventory(client, inventory).await?;
                if let Some(k) = kube {
                    k.merge(&mut inv.pods);
                }
                for s in &inv.skipped {
                    tracing::warn!(sandbox = %s.sandbox_id, "sandbox skipped: {}", s.reason);
                }
                for p in &inv.pods {
                    for w in &p.warnings {
                        tracing::warn!(pod = %p.pod.key(), uid = %p.pod.uid, "{w}");
                    }
                }
                // A sandbox that vanished between list and status is gone;
                // one skipped for a bad label is unknown: no orphan removal.
                let complete = inv
                    .skipped
                    .iter()
                    .all(|s| s.reason.starts_with("removed between"));
                let all_uids =
                    complete.then(|| inv.pods.iter().map(|p| p.pod.uid.clone()).collect());
                Ok(Listing {
                    pods: inv.ready_pods(),
                    all_uids,
                    live: inv.pods,
                })
            }
            Source::Manifests(paths) => {
                let pods = crate::manifest::load_paths(paths)?;
                let all_uids = Some(pods.iter().map(|p| p.uid.clone()).collect());
                Ok(Listing {
                    pods,
                    all_uids,
                    live: Vec::new(),
                })
            }
        }
    }
}

/// Everything `qosd run` needs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub plan: PlanConfig,
    pub source: PodSourceSpec,
    pub dry_run: bool,
    pub once: bool,
    pub reconcile_interval: Duration,
    pub relist_interval: Duration,
    pub orphan_grace: Duration,
    pub connect: crate::cri::ConnectOptions,
    /// The machine's MemTotal: the kubelet derives Burstable containers'
    /// oom_score_adj from it, so qosd inverts that formula with it (not
    /// with an overridden node capacity).
    pub machine_memory_bytes: i64,
    /// The Kubernetes API side (CRI source only).
    pub kube: Option<Arc<crate::kube::KubeSide>>,
}

/// Hooks the daemon calls as it runs, so eviction, metrics and health can
/// observe it without the loop knowing about them.
pub trait Observer: Send {
    /// After each reconcile (also the first).
    fn reconciled(&mut self, _report: &ReconcileReport, _listing: &Listing) {}
    /// A listing failed (runtime down, bad manifest).
    fn source_failed(&mut self, _error: &SourceError) {}
    /// Each loop turn (watchdog / liveness).
    fn heartbeat(&mut self) {}
    /// SIGHUP: return a new planner config to use, or None to keep it.
    fn reload(&mut self) -> Option<PlanConfig> {
        None
    }
}

/// An observer that does nothing.
pub struct NoObserver;
impl Observer for NoObserver {}

/// How the loop ended.
#[derive(Debug)]
pub enum Outcome {
    /// `--once`: the report of the single pass.
    Once(Box<ReconcileReport>),
    /// SIGTERM / SIGINT.
    Stopped,
}

/// Run the daemon loop until SIGTERM/SIGINT (or one pass with `once`).
pub async fn run_loop(opts: RunOptions, observer: &mut dyn Observer) -> anyhow::Result<Outcome> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sighup = signal(SignalKind::hangup())?;

    // `--once` gives up when the runtime stays away; the daemon keeps
    // waiting for it (not ready meanwhile), as a node agent must.
    let mut source = loop {
        let attempt = tokio::select! {
            s = Source::connect(&opts.source, opts.connect, opts.machine_memory_bytes) => s,
            _ = sigterm.recv() => return Ok(Outcome::Stopped),
            _ = sigint.recv() => return Ok(Outcome::Stopped),
        };
        match attempt {
            Ok(s) => break s,
            Err(e) if opts.once => return Err(e.into()),
            Err(e) => {
                tracing::warn!(error = %e, "pod source not reachable at start; still trying");
                observer.source_failed(&e);
                observer.heartbeat();
            }
        }
    };
    if let Source::Cri { kube, .. } = &mut source {
        kube.clone_from(&opts.kube);
    }
    let mut reconciler = Reconciler::new(opts.plan.clone(), opts.dry_run, opts.orphan_grace);

    if opts.once {
        let listing = source.list().await?;
        let report = reconciler.reconcile(&listing.pods, listing.all_uids.as_ref(), Instant::now());
        observer.reconciled(&report, &listing);
        return Ok(Outcome::Once(Box::new(report)));
    }

    let mut reconcile_tick = tokio::time::interval(opts.reconcile_interval);
    reconcile_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut relist_tick = tokio::time::interval(opts.relist_interval);
    relist_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut source_down = false;
    // The last full listing and the fingerprint it was taken at: a full
    // inventory (a status call per sandbox and container) is only needed
    // when the fingerprint changes, or every `RESYNC` to catch in-place
    // resource updates; timer reconciles in between reuse it and only
    // re-read the cgroups (drift).
    let mut cached: Option<(Vec<String>, Listing, Instant)> = None;
    loop {
        observer.heartbeat();
        let tick = tokio::select! {
            _ = sigterm.recv() => { tracing::info!("SIGTERM: stopping"); return Ok(Outcome::Stopped); }
            _ = sigint.recv() => { tracing::info!("SIGINT: stopping"); return Ok(Outcome::Stopped); }
            _ = sighup.recv() => {
                if let Some(cfg) = observer.reload() {
                    tracing::info!("SIGHUP: configuration reloaded");
                    reconciler.set_config(cfg);
                }
                cached = None;
                Tick::Reconcile
            }
            _ = reconcile_tick.tick() => Tick::Reconcile,
            _ = relist_tick.tick() => Tick::Relist,
        };
        // Calls retry while the runtime is down: stay stoppable.
        let fp = tokio::select! {
            r = source.fingerprint() => r,
            _ = sigterm.recv() => { tracing::info!("SIGTERM: stopping"); return Ok(Outcome::Stopped); }
            _ = sigint.recv() => { tracing::info!("SIGINT: stopping"); return Ok(Outcome::Stopped); }
        };
        let fp = match fp {
            Ok(fp) => fp,
            Err(e) => {
                if !source_down {
                    tracing::warn!(error = %e, "pod source unavailable; keeping the last state, retrying");
                }
                source_down = true;
                // Relist in full once it answers again.
                cached = None;
                observer.source_failed(&e);
                continue;
            }
        };
        let fresh = cached
            .as_ref()
            .filter(|(cfp, _, at)| *cfp == fp && at.elapsed() < RESYNC);
        let listing = match (fresh, tick) {
            (Some(_), Tick::Relist) => continue,
            (Some((_, listing, _)), Tick::Reconcile) => listing.clone(),
            (None, _) => {
                let listed = tokio::select! {
                    r = source.list() => r,
                    _ = sigterm.recv() => { tracing::info!("SIGTERM: stopping"); return Ok(Outcome::Stopped); }
                    _ = sigint.recv() => { tracing::info!("SIGINT: stopping"); return Ok(Outcome::Stopped); }
                };
                match listed {
                    Ok(listing) => {
                        if source_down {
                            tracing::info!("pod source is back");
                            source_down = false;
                        }
                        cached = Some((fp, listing.clone(), Instant::now()));
                        listing
                    }
                    Err(e) => {
                        if !source_down {
                            tracing::warn!(error = %e, "pod listing failed; keeping the last state, retrying");
                        }
                        source_down = true;
                        cached = None;
                        observer.source_failed(&e);
                        continue;
                    }
                }
            }
        };
        let report = reconciler.reconcile(&listing.pods, listing.all_uids.as_ref(), Instant::now());
        tracing::debug!(
            pods = report.pods,
            writes = report.writes.len(),
            unchanged = report.unchanged,
            errors = report.errors.len(),
            ms = report.duration.as_secs_f64() * 1e3,
            "reconciled"
        );
        observer.reconciled(&report, &listing);
    }
}

/// What woke the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tick {
    /// The reconcile timer (or SIGHUP): reconcile even if nothing changed.
    Reconcile,
    /// The relist timer: reconcile only if the pods changed.
    Relist,
}

/// A full inventory at least this often, even when no sandbox or container
/// changed (in-place resource updates do not show in the fingerprint); the
/// kubelet re-syncs its QoS cgroups every minute.
const RESYNC: Duration = Duration::from_secs(60);

// ------------------------------------------------- metrics, health, systemd

/// Rebuilds the planner config on SIGHUP (None: keep the old one).
pub type Reloader = Box<dyn FnMut() -> Option<PlanConfig> + Send>;

/// The observer of a real `qosd run`: feeds metrics, health/readiness, the
/// status document and systemd (READY after the first reconcile, watchdog).
pub struct ServiceObserver {
    pub metrics: Arc<crate::metrics::Metrics>,
    pub health: Arc<crate::http::Health>,
    pub limiter: crate::metrics::LogLimiter,
    notified_ready: bool,
    watchdog: Option<(Duration, Instant)>,
    layout: crate::cgroup::paths::CgroupLayout,
    /// Called on SIGHUP to rebuild the planner config (reloads the file).
    pub reloader: Option<Reloader>,
    /// The eviction loop, fed the pods of every listing.
    pub eviction: Option<Arc<crate::eviction::service::EvictionService>>,
    /// The Kubernetes API side, for status and readiness reasons.
    pub kube: Option<Arc<crate::kube::KubeSide>>,
}

impl ServiceObserver {
    pub fn new(
        metrics: Arc<crate::metrics::Metrics>,
        health: Arc<crate::http::Health>,
        mode: &str,
        plan: &PlanConfig,
    ) -> ServiceObserver {
        health.update_status(|d| {
            d.version = env!("CARGO_PKG_VERSION").to_string();
            d.mode = mode.to_string();
            d.cgroup_version = plan.layout.version.to_string();
            d.cgroup_driver = plan.layout.driver.to_string();
        });
        ServiceObserver {
            metrics,
            health,
            limiter: crate::metrics::LogLimiter::new(Duration::from_secs(60)),
            notified_ready: false,
            watchdog: crate::http::systemd::watchdog_interval().map(|d| (d, Instant::now())),
            layout: plan.layout.clone(),
            reloader: None,
            eviction: None,
            kube: None,
        }
    }
}

impl Observer for ServiceObserver {
    fn reconciled(&mut self, report: &ReconcileReport, listing: &Listing) {
        use crate::model::QosClass;
        self.metrics.reconcile_done(report.duration);
        self.metrics.cgroup_writes(report.writes.len() as u64);
        self.metrics
            .orphans_removed(report.orphans_removed.len() as u64);
        for _ in &report.errors {
            self.metrics.error("cgroup_write");
        }
        let counts = crate::cli::status::count_pods(&listing.pods);
        self.metrics.pods(QosClass::Guaranteed, counts.guaranteed);
        self.metrics.pods(QosClass::Burstable, counts.burstable);
        self.metrics.pods(QosClass::BestEffort, counts.best_effort);
        self.health.set_cri_reachable(true);
        self.health.set_reconciled();
        if let Some(k) = &self.kube {
            let (summary, unavailable) = k.last_merge();
            let stats = k.cache.stats();
            self.health.set_degraded(
                "kubernetes-api",
                unavailable.as_ref().map(|why| {
                    format!(
                        "{why}; exact pod specs unavailable, working from the runtime's data alone"
                    )
                }),
            );
            let status = crate::http::KubeStatus {
                server: format!("{} ({})", k.client.server(), k.client.origin()),
                node_name: k.settings.node_name.clone(),
                state: if unavailable.is_none() {
                    "synced"
                } else {
                    "unavailable"
                }
                .into(),
                reason: unavailable,
                pods_exact: summary.exact,
                pods_inferred: summary.inferred,
                relists: stats.relists,
                watch_restarts: stats.watch_restarts,
            };
            self.health.update_status(|d| d.kubernetes = Some(status));
        }
        self.health.update_status(|d| {
            d.generated_at_ms = crate::http::now_ms();
            d.pods = counts.clone();
            d.last_reconcile = Some(crate::http::ReconcileStatus {
                at_ms: crate::http::now_ms(),
                duration_ms: report.duration.as_secs_f64() * 1e3,
                writes: report.writes.len() as u64,
                errors: report.errors.len() as u64,
                pods: report.pods,
            });
        });
        if let Some(ev) = &self.eviction {
            let sandboxes = listing
                .live
                .iter()
                .map(|p| (p.pod.uid.clone(), p.sandbox_id.clone()))
                .collect();
            ev.update_pods(crate::eviction::service::candidates(
                &listing.pods,
                &sandboxes,
                &self.layout,
            ));
        }
        if !self.notified_ready {
            self.notified_ready = true;
            let _ = crate::http::systemd::ready(&format!(
                "reconciled {} pods, {} writes",
                report.pods,
                report.writes.len()
            ));
        }
    }

    fn source_failed(&mut self, error: &SourceError) {
        self.metrics.error("pod_source");
        if let Some(ev) = &self.eviction {
            ev.pods_unavailable(error.to_string());
        }
        if matches!(error, SourceError::Cri(_)) {
            self.health.set_cri_reachable(false);
        }
    }

    fn heartbeat(&mut self) {
        self.health.beat();
        if let Some((every, last)) = self.watchdog.as_mut() {
            if last.elapsed() >= *every {
                let _ = crate::http::systemd::watchdog();
                *last = Instant::now();
            }
        }
    }

    fn reload(&mut self) -> Option<PlanConfig> {
        let _ = crate::http::systemd::reloading();
        let out = self.reloader.as_mut().and_then(|f| f());
        let _ = crate::http::systemd::ready("configuration reloaded");
        out
    }
}

// ------------------------------------------------------- CRI pod stopper

/// Stops and removes pod sandboxes through the CRI for the evictor. It runs
/// on the eviction thread and connects lazily (evictions are rare; the
/// reconcile loop's client lives on the async side).
pub struct CriStopper {
    endpoint: String,
    handle: tokio::runtime::Handle,
    client: Mutex<Option<crate::cri::CriClient>>,
}

impl CriStopper {
    pub fn new(endpoint: String, handle: tokio::runtime::Handle) -> CriStopper {
        CriStopper {
            endpoint,
            handle,
            client: Mutex::new(None),
        }
    }

    fn with_client<T>(
        &self,
        f: impl FnOnce(crate::cri::CriClient) -> Result<T, crate::cri::CriError>,
    ) -> Result<T, String> {
        let mut guard = self.client.lock().map_err(|e| e.to_string())?;
        let client = match guard.as_ref() {
            Some(c) => c.clone(),
            None => {
                let opts = crate::cri::ConnectOptions {
                    retry: crate::cri::RetryPolicy {
                        max_elapsed: Duration::from_secs(2),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let c = self
                    .handle
                    .block_on(crate::cri::CriClient::connect(&self.endpoint, opts))
                    .map_err(|e| e.to_string())?;
                *guard = Some(c.clone());
                c
            }
        };
        drop(guard);
        f(client).map_err(|e| e.to_string())
    }
}

impl crate::eviction::evictor::PodStopper for CriStopper {
    fn stop_pod(&self, sandbox_id: &str, grace: Duration) -> Result<(), String> {
        let handle = self.handle.clone();
        self.with_client(|c| {
            handle.block_on(async {
                if !grace.is_zero() {
                    // StopPodSandbox has no grace period: stop the
                    // containers first with it (TERM, grace, KILL).
                    for ctr in c.list_containers(Some(sandbox_id)).await? {
                        c.stop_container(&ctr.id, grace.as_secs() as i64).await?;
                    }
                }
                c.stop_pod_sandbox(sandbox_id).await
            })
        })
    }

    fn remove_pod(&self, sandbox_id: &str) -> Result<(), String> {
        let handle = self.handle.clone();
        self.with_client(|c| handle.block_on(c.remove_pod_sandbox(sandbox_id)))
    }
}
