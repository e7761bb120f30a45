//! One reconcile: pods → classify → plan → apply the writes that differ (or
//! record them, dry run) → remove orphaned pod cgroups that stayed empty for
//! the grace period.
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use qosd_model::core::model::{CgroupVersion, CgroupWrite, Pod};
use qosd_model::policy::enforce::plan::{self, PlanConfig};
use qosd_node::sys::apply::{self, Applier, ApplyReport, Mode};
use qosd_node::sys::systemd::{Driver, SystemdProbe};

/// Cgroup directories qosd may touch: the kubepods cgroup in every
/// hierarchy it writes to (v1: cpu, memory, pids; v2: the unified tree).
pub(crate) fn kubepods_dirs(cfg: &PlanConfig) -> Vec<PathBuf> {
    let node = cfg.layout.node_cgroup();
    match cfg.layout.version {
        CgroupVersion::V2 => vec![cfg.layout.dir(&node, "")],
        CgroupVersion::V1 => ["cpu", "memory", "pids"]
            .iter()
            .map(|c| cfg.layout.dir(&node, c))
            .collect(),
    }
}

/// Where the applier may write: [`kubepods_dirs`], the v1 hugetlb
/// hierarchy's kubepods when hugepages are limited, and the reserved
/// cgroups (written, never created: their level is not in the applier's
/// create levels).
pub(crate) fn allowed_bases(cfg: &PlanConfig) -> Vec<PathBuf> {
    let mut out = kubepods_dirs(cfg);
    if cfg.layout.version == CgroupVersion::V1 && !cfg.hugepage_sizes.is_empty() {
        out.push(cfg.layout.dir(&cfg.layout.node_cgroup(), "hugetlb"));
    }
    for w in qosd_model::policy::enforce::plan::reserved_level_writes(cfg) {
        if !out.contains(&w.dir) {
            out.push(w.dir);
        }
    }
    out
}

/// Every hierarchy's kubepods directory, for orphan cleanup: on v1 the
/// runtime creates `pod<uid>` in all hierarchies (cpu, memory, pids, but
/// also freezer, devices, blkio, …), and all of them must go.
pub(crate) fn orphan_bases(cfg: &PlanConfig) -> Vec<PathBuf> {
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
    /// Every planned write (what `qosd plan` prints for the same pods);
    /// shared with the reconciler's last plan (not copied per pass).
    #[serde(serialize_with = "serialize_writes")]
    pub(crate) planned: Arc<[CgroupWrite]>,
    /// Planned writes already in place (read, or `unread`).
    pub(crate) unchanged: usize,
    /// Of `unchanged`: planned files not read this pass, watched and not
    /// written since they were last read holding the planned value
    /// ([`Reconciler::watch_files`]).
    #[serde(skip)]
    pub(crate) unread: usize,
    /// Failed writes, with path, value and error.
    pub errors: Vec<String>,
    /// Failed writes other than into a cgroup that vanished mid-write (a
    /// pod going away): the node is not being enforced while non-zero.
    #[serde(skip)]
    pub(crate) failed_writes: usize,
    /// Orphaned pod cgroups removed (dry run: that would be removed).
    pub(crate) orphans_removed: Vec<PathBuf>,
    /// Pods planned.
    pub(crate) pods: usize,
    /// Files among `writes` whose write corrected drift (someone changed a
    /// value qosd had in place), as opposed to new cgroups or plan changes.
    #[serde(skip)]
    pub(crate) drift: Vec<PathBuf>,
    /// Dry run: the planned writes logged this pass (new or changed since
    /// they were last logged; the others stay quiet).
    #[serde(skip)]
    pub(crate) logged: Vec<PathBuf>,
    /// `cgroupEnforcement: audit`: every planned value the cgroup does not
    /// hold (nothing is written; `writes` stays empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) audit_drift: Vec<crate::telemetry::status::DriftValue>,
    /// Audit: how many of `audit_drift` are new or changed since the last
    /// pass (each is logged once).
    #[serde(skip)]
    pub(crate) audit_changes: usize,
    #[serde(skip)]
    pub(crate) duration: Duration,
    /// Container processes' `oom_score_adj` (CRI source; `None`: not
    /// handled, e.g. manifests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) oom_score_adj: Option<crate::runtime::oom_score::OomReport>,
    /// The pods were the same as at the last reconcile (its plan reused):
    /// what is derived from the pods alone need not be built again.
    #[serde(skip)]
    pub(crate) plan_reused: bool,
}

fn serialize_writes<S: serde::Serializer>(w: &Arc<[CgroupWrite]>, s: S) -> Result<S::Ok, S::Error> {
    w.as_ref().serialize(s)
}

/// The last plan and the pods it was built from: a reconcile plans again
/// only when the pods differ or the settings were reloaded (node resources
/// are part of the settings); otherwise it reuses this one.
#[derive(Debug)]
struct LastPlan {
    pods: Vec<Pod>,
    /// The daemon's id of the listing `pods` came from, when it gave one:
    /// a later pass over the same listing reuses the plan without
    /// comparing the pods (comparing 110 pods was ~12 % of the idle
    /// daemon's CPU, bench/results/HISTORY.md section 7).
    listing: Option<u64>,
    writes: Arc<[CgroupWrite]>,
    /// Pods planned (those of `pods` that are planned at all).
    planned_pods: usize,
}

/// New write failures logged one by one per pass; the rest are counted.
const MAX_FAILURES_LOGGED: usize = 5;

/// The cgroup mount systemd manages: the systemd driver goes through
/// systemd only for a plan on it (never for a private tree).
pub(crate) const SYSTEMD_CGROUPFS: &str = "/sys/fs/cgroup";

/// Applies plans for a changing set of pods and cleans up orphans.
/// The orphan scan runs at least this often while the pod set is steady
/// (a pod cgroup someone else made; pods that go are scanned for at once).
pub(crate) const ORPHAN_RESCAN: Duration = Duration::from_secs(600);

/// With planned files watched for writes ([`Reconciler::watch_files`]),
/// every planned file is still read at least this often: the safety net
/// for what the events cannot see. Every `write(2)` raises an event and
/// cgroups coming or going make every file read, so this read finds
/// nothing on a sound kernel; at one minute (the kubelet's cadence) it was
/// most of the daemon's idle CPU (docs/design.md, "Threads and loops").
pub(crate) const DRIFT_FULL_READ: Duration = Duration::from_secs(600);

/// Planned files watched for writes, and those known to hold their
/// planned value since (not read again until written or the full read).
#[derive(Debug)]
struct Watched {
    files: qosd_node::sys::file_watch::FileWatch,
    /// Read (or found) holding the value in `last_written` while watched,
    /// and no write seen since.
    unchanged: HashSet<PathBuf>,
    /// When every planned file was last read.
    full_read: Option<Instant>,
    /// The plan whose every file was found in `unchanged` with its value
    /// in `last_written` at the last reconcile, with no write event, moved
    /// cgroup or full read since: the next reconcile of the same plan has
    /// nothing to read, write or note.
    settled: Option<Arc<[CgroupWrite]>>,
    /// The watch limit was hit (logged once).
    limit_logged: bool,
}

pub struct Reconciler {
    cfg: PlanConfig,
    /// cgroupfs writes, or systemd units over D-Bus (cgroupDriver systemd
    /// on a systemd host).
    applier: Driver,
    /// Where orphaned pod cgroups are looked for (every hierarchy).
    orphan_bases: Vec<PathBuf>,
    orphan_grace: Duration,
    /// Orphan pod cgroups and when they were first seen orphaned.
    orphans_seen: HashMap<PathBuf, Instant>,
    /// The live uids of the last orphan scan and when it ran: the next
    /// scan waits for another set, a pending orphan or [`ORPHAN_RESCAN`].
    orphan_scanned: Option<(BTreeSet<String>, Instant)>,
    /// Files whose drift was already logged (log once until they change).
    drift_logged: HashSet<PathBuf>,
    /// Failing writes already logged, (file, error): logged once per change,
    /// not every pass.
    failures_logged: HashSet<(PathBuf, String)>,
    /// The value qosd last had in place in each file, written or found
    /// already right (drift = someone changed it since).
    last_written: HashMap<PathBuf, String>,
    /// Dry run: the planned value last logged per file (a planned write is
    /// logged when it first appears or changes, not every pass).
    dry_run_logged: HashMap<PathBuf, String>,
    /// Audit: the value found in each differing file when it was last
    /// reported (report once per change).
    audit_seen: HashMap<PathBuf, Option<String>>,
    /// Planned files watched for writes (`qosd run`, cgroupfs writes):
    /// only files written since are read; `None`: every planned file is
    /// read at every reconcile.
    watched: Option<Watched>,
    /// The plan of the last reconcile, reused while its inputs are unchanged.
    last_plan: Option<LastPlan>,
    /// Plans built (a reused plan does not count).
    plans_built: u64,
    /// Reconciles that walked the plan's files (a settled plan is not).
    walks: u64,
}

impl Reconciler {
    #[cfg(test)]
    pub fn new(cfg: PlanConfig, dry_run: bool, orphan_grace: Duration) -> Reconciler {
        let mode = if dry_run { Mode::DryRun } else { Mode::Real };
        Reconciler::with_mode(cfg, mode, orphan_grace)
    }

    /// A reconciler in `mode`; [`Mode::Audit`] reads and compares every
    /// planned value and writes, creates and removes nothing.
    pub(crate) fn with_mode(cfg: PlanConfig, mode: Mode, orphan_grace: Duration) -> Reconciler {
        // Reserved cgroups are allowed but never created (not a create level).
        let mut applier = Applier::with_bases(mode, allowed_bases(&cfg));
        if cfg.layout.version == CgroupVersion::V2 {
            // Enable cpu, memory, pids from the mount's root down to kubepods.
            applier = applier.enable_v2_controllers_from(cfg.layout.cgroupfs.clone());
        }
        // systemd naming on the tree systemd manages: go through systemd.
        let systemd_wanted = cfg.layout.driver == qosd_model::core::model::CgroupDriver::Systemd
            && cfg.layout.cgroupfs == std::path::Path::new(SYSTEMD_CGROUPFS);
        let applier = Driver::choose(applier, systemd_wanted, &SystemdProbe::default());
        Reconciler {
            orphan_bases: orphan_bases(&cfg),
            cfg,
            applier,
            orphan_grace,
            orphans_seen: HashMap::new(),
            orphan_scanned: None,
            drift_logged: HashSet::new(),
            failures_logged: HashSet::new(),
            last_written: HashMap::new(),
            dry_run_logged: HashMap::new(),
            audit_seen: HashMap::new(),
            watched: None,
            last_plan: None,
            plans_built: 0,
            walks: 0,
        }
    }

    /// Watch the planned files for writes (inotify `IN_MODIFY`): a
    /// reconcile then reads only the files written since it last read them
    /// (by anyone: qosd's own writes are read back once), files of cgroups
    /// that came and went ([`Reconciler::files_may_have_moved`]) and every
    /// planned file at least every [`DRIFT_FULL_READ`]. Only with cgroupfs
    /// writes (enforce mode; dry runs, audit and the systemd driver read
    /// every file every time). The inotify fd ([`Reconciler::drift_fd`])
    /// becomes readable when a planned file is written: reconcile then to
    /// correct drift at once. When inotify is unavailable this logs it and
    /// every file is read at every reconcile, as without the watch.
    pub fn watch_files(&mut self) {
        if self.watched.is_some() {
            return;
        }
        match qosd_node::sys::file_watch::FileWatch::new() {
            Ok(files) => {
                self.watched = Some(Watched {
                    files,
                    unchanged: HashSet::new(),
                    full_read: None,
                    settled: None,
                    limit_logged: false,
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "planned cgroup files cannot be watched; reading every planned file at every reconcile");
            }
        }
    }

    /// The inotify fd of the watched planned files (readable: one was
    /// written), when [`Reconciler::watch_files`] is on.
    pub(crate) fn drift_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.watched.as_ref().map(|w| w.files.as_raw_fd())
    }

    /// Pod or container cgroups were made or removed: a path may name a
    /// new file now (a cgroup made again), so the next reconcile reads
    /// every planned file (and watches the new ones).
    pub(crate) fn files_may_have_moved(&mut self) {
        if let Some(w) = self.watched.as_mut() {
            w.unchanged.clear();
            w.settled = None;
        }
    }

    /// Split the plan into the writes to check now and how many planned
    /// files are left unread (watched, unchanged since read, same value),
    /// after taking in the write events; watches the files to read. The
    /// flag: the plan is settled ([`Watched::settled`]): nothing to read,
    /// nothing to note, without a walk over the plan.
    fn writes_to_check(
        &mut self,
        writes: &Arc<[CgroupWrite]>,
        now: Instant,
    ) -> (Vec<CgroupWrite>, usize, bool) {
        let skips = self.mode() == Mode::Real && matches!(self.applier, Driver::Cgroupfs(_));
        let Some(w) = self.watched.as_mut() else {
            return (writes.to_vec(), 0, false);
        };
        if !skips {
            // Dry run, audit, systemd: every file, every time.
            w.unchanged.clear();
            w.settled = None;
            w.files.retain(|_| false);
            let _ = w.files.drain();
            return (writes.to_vec(), 0, false);
        }
        match w.files.drain() {
            Ok(c) if c.overflow => {
                w.unchanged.clear();
                w.settled = None;
            }
            Ok(c) => {
                for f in &c.files {
                    w.unchanged.remove(f);
                    w.settled = None;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "planned cgroup file events unreadable; reading every planned file");
                w.unchanged.clear();
                w.settled = None;
            }
        }
        if w.full_read
            .is_none_or(|t| now.saturating_duration_since(t) >= DRIFT_FULL_READ)
        {
            w.unchanged.clear();
            w.settled = None;
            w.full_read = Some(now);
        }
        if w.settled.as_ref().is_some_and(|p| Arc::ptr_eq(p, writes)) {
            return (Vec::new(), writes.len(), true);
        }
        self.walks += 1;
        let mut check = Vec::new();
        let mut unread = 0;
        for cw in writes.iter() {
            if w.unchanged.contains(&cw.file) && self.last_written.get(&cw.file) == Some(&cw.value)
            {
                unread += 1;
                continue;
            }
            w.unchanged.remove(&cw.file);
            // Watched before it is read: a write after the read is seen. A
            // file that does not exist yet (its cgroup is made now) is
            // watched at the next reconcile.
            match w.files.watch(&cw.file) {
                Ok(()) => {}
                Err(e) if e.is_limit() => {
                    if !w.limit_logged {
                        tracing::warn!(error = %e, watched = w.files.watched(), "inotify watch limit reached (fs.inotify.max_user_watches): planned files without a watch are read at every reconcile");
                        w.limit_logged = true;
                    }
                }
                Err(_) => {}
            }
            check.push(cw.clone());
        }
        // Nothing to read: every file held its value when last read and
        // was not written since. The next reconcile of this plan can skip
        // the walk until an event, a moved cgroup or the full read.
        w.settled = check.is_empty().then(|| writes.clone());
        (check, unread, false)
    }

    /// After a reconcile that read `checked`: the files found holding their
    /// planned value while watched count as unchanged until written; watches
    /// of files no longer planned end.
    fn note_checked(
        &mut self,
        checked: &[CgroupWrite],
        report: &ApplyReport,
        planned: &[CgroupWrite],
    ) {
        let skips = self.mode() == Mode::Real && matches!(self.applier, Driver::Cgroupfs(_));
        let Some(w) = self.watched.as_mut().filter(|_| skips) else {
            return;
        };
        let touched: HashSet<&PathBuf> = report
            .written
            .iter()
            .map(|x| &x.file)
            .chain(report.errors.iter().map(|e| &e.file))
            .collect();
        for cw in checked {
            // Written now: read back once (its own event marks it anyway).
            if !touched.contains(&cw.file) && w.files.is_watched(&cw.file) {
                w.unchanged.insert(cw.file.clone());
            }
        }
        let planned: HashSet<&std::path::Path> = planned.iter().map(|x| x.file.as_path()).collect();
        w.unchanged.retain(|f| planned.contains(f.as_path()));
        w.files.retain(|f| planned.contains(f));
    }

    /// Real, dry run or audit.
    pub(crate) fn mode(&self) -> Mode {
        self.applier.mode()
    }

    pub(crate) fn config(&self) -> &PlanConfig {
        &self.cfg
    }

    /// Apply a reloaded config and mode: the applier is rebuilt when the
    /// mode or the layout changes (what was written and the orphans seen
    /// are kept).
    pub(crate) fn reconfigure(&mut self, cfg: PlanConfig, dry_run: bool) {
        // Audit (cgroupEnforcement) is chosen at start and stays.
        let mode = match self.mode() {
            Mode::Audit => Mode::Audit,
            _ if dry_run => Mode::DryRun,
            _ => Mode::Real,
        };
        // New settings (and node resources): plan again.
        self.last_plan = None;
        if mode == self.mode() && cfg.layout == self.cfg.layout {
            self.cfg = cfg;
            return;
        }
        let mut fresh = Reconciler::with_mode(cfg, mode, self.orphan_grace);
        fresh.orphans_seen = std::mem::take(&mut self.orphans_seen);
        fresh.last_written = std::mem::take(&mut self.last_written);
        // The inotify fd stays (the daemon polls it); what it marked
        // unchanged is read again under the new settings.
        let watched = self.watched.take();
        *self = fresh;
        self.watched = watched;
        self.files_may_have_moved();
    }

    pub(crate) fn dry_run(&self) -> bool {
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
        self.pass(None, pods, all_live_uids, now)
    }

    /// [`Reconciler::reconcile`] for the pods of one immutable listing,
    /// identified by `listing` (the daemon numbers each listing it takes):
    /// a pass over the listing the last plan came from reuses that plan
    /// without comparing the pods. An id must never be given to two
    /// listings with different pods.
    pub(crate) fn reconcile_listing(
        &mut self,
        listing: u64,
        pods: &[Pod],
        all_live_uids: Option<&BTreeSet<String>>,
        now: Instant,
    ) -> ReconcileReport {
        self.pass(Some(listing), pods, all_live_uids, now)
    }

    fn pass(
        &mut self,
        listing: Option<u64>,
        pods: &[Pod],
        all_live_uids: Option<&BTreeSet<String>>,
        now: Instant,
    ) -> ReconcileReport {
        let start = Instant::now();
        let (writes, planned_pods, plan_reused) = self.plan_for(pods, listing);
        let (check, unread, settled) = self.writes_to_check(&writes, now);
        if settled && !all_live_uids.is_some_and(|l| self.orphan_scan_due(l, now)) {
            // The same plan, every file holding its value when last read
            // and not written since, no orphan scan due: nothing to read,
            // write, log or note (what the full pass would find again).
            self.drift_logged.clear();
            return ReconcileReport {
                planned: writes,
                unchanged: unread,
                unread,
                pods: planned_pods,
                plan_reused,
                duration: start.elapsed(),
                ..Default::default()
            };
        }
        let mut report: ApplyReport = self.applier.apply(&check);
        self.note_checked(&check, &report, &writes);
        report.unchanged += unread;
        if self.mode() == Mode::Audit {
            return self.audit(planned_pods, writes, report, start);
        }
        let mut out = ReconcileReport {
            unchanged: report.unchanged,
            unread,
            pods: planned_pods,
            plan_reused,
            ..Default::default()
        };
        self.note_written(&report, &mut out);
        self.note_failures(&report, &mut out);
        self.remember_in_place(&writes, &report);
        out.writes = report.written;
        out.planned = writes;
        if let Some(live) = all_live_uids.filter(|l| self.orphan_scan_due(l, now)) {
            out.orphans_removed = self.clean_orphans(live, now);
            self.orphan_scanned = Some((live.clone(), now));
        }
        out.duration = start.elapsed();
        out
    }

    /// Log each write made (dry run: each planned write new or changed since
    /// it was last logged), drift corrected once per file, and remember
    /// the values written.
    fn note_written(&mut self, report: &ApplyReport, out: &mut ReconcileReport) {
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
                _ if self.dry_run() && self.dry_run_logged.get(&w.file) == Some(&w.value) => {}
                _ => {
                    tracing::info!(file = %w.file.display(), value = %w.value, previous = prev.as_deref().unwrap_or("(new)"), "{verb} cgroup value");
                    if self.dry_run() {
                        self.dry_run_logged.insert(w.file.clone(), w.value.clone());
                        out.logged.push(w.file.clone());
                    }
                }
            }
            if !self.dry_run() {
                self.last_written.insert(w.file.clone(), w.value.clone());
            }
        }
    }

    /// Count and report the failed writes; each failure is logged once
    /// (the first [`MAX_FAILURES_LOGGED`] new ones a pass), until it changes.
    fn note_failures(&mut self, report: &ApplyReport, out: &mut ReconcileReport) {
        let mut failing = HashSet::new();
        let mut new_failures = 0usize;
        for e in &report.errors {
            let key = (e.file.clone(), e.error.to_string());
            if !self.failures_logged.contains(&key) {
                new_failures += 1;
                if new_failures <= MAX_FAILURES_LOGGED {
                    tracing::warn!(file = %e.file.display(), value = %e.value, error = %e.error, "cgroup write failed");
                }
            }
            failing.insert(key);
            if !matches!(
                e.error,
                qosd_node::sys::cgroupfs::CgroupFsError::CgroupGone { .. }
            ) {
                out.failed_writes += 1;
            }
            out.errors
                .push(format!("{}: {}: {}", e.file.display(), e.value, e.error));
        }
        if new_failures > MAX_FAILURES_LOGGED {
            tracing::warn!(
                more = new_failures - MAX_FAILURES_LOGGED,
                failing = failing.len(),
                "more cgroup writes failed (each failure is logged once, until it changes)"
            );
        }
        if failing.is_empty() && !self.failures_logged.is_empty() {
            tracing::info!("cgroup writes succeed again");
        }
        self.failures_logged = failing;
    }

    /// After a pass: the planned values found already in place are qosd's
    /// too (drift on them, say on a tree that was right when qosd started,
    /// is drift), and what is remembered per file is kept to the planned
    /// files.
    fn remember_in_place(&mut self, writes: &[CgroupWrite], report: &ApplyReport) {
        if report.written.is_empty() {
            self.drift_logged.clear();
        }
        let touched: HashSet<&PathBuf> = report
            .written
            .iter()
            .map(|w| &w.file)
            .chain(report.errors.iter().map(|e| &e.file))
            .collect();
        for w in writes.iter() {
            if !touched.contains(&w.file) {
                self.last_written.insert(w.file.clone(), w.value.clone());
            }
        }
        let planned: HashSet<&PathBuf> = writes.iter().map(|w| &w.file).collect();
        self.last_written.retain(|f, _| planned.contains(f));
        // A gone pod's files cannot drift again: under steady churn (a write
        // in every pass) the clear above never comes.
        self.drift_logged.retain(|f| planned.contains(f));
        let pending: HashSet<&PathBuf> = report.written.iter().map(|w| &w.file).collect();
        self.dry_run_logged.retain(|f, _| pending.contains(f));
    }

    /// Whether the orphan scan (a `readdir` of kubepods and its QoS cgroups
    /// in every hierarchy) can find anything new: the set of live pods
    /// changed, an orphan waits for its grace period, or the last scan is
    /// [`ORPHAN_RESCAN`] old (a pod cgroup made by someone else).
    fn orphan_scan_due(&self, live: &BTreeSet<String>, now: Instant) -> bool {
        match &self.orphan_scanned {
            None => true,
            Some((uids, at)) => {
                !self.orphans_seen.is_empty()
                    || uids != live
                    || now.saturating_duration_since(*at) >= ORPHAN_RESCAN
            }
        }
    }

    /// `cgroupEnforcement: audit`: report every planned value the cgroup
    /// does not hold (logged once per change), write and remove nothing.
    fn audit(
        &mut self,
        planned_pods: usize,
        writes: Arc<[CgroupWrite]>,
        report: ApplyReport,
        start: Instant,
    ) -> ReconcileReport {
        let mut out = ReconcileReport {
            unchanged: report.unchanged,
            pods: planned_pods,
            ..Default::default()
        };
        let mut current = HashSet::new();
        for (w, found) in report.written.iter().zip(report.previous.iter()) {
            current.insert(w.file.clone());
            if self.audit_seen.get(&w.file) != Some(found) {
                out.audit_changes += 1;
                tracing::warn!(
                    file = %w.file.display(),
                    planned = %w.value,
                    found = found.as_deref().unwrap_or("(missing)"),
                    "audit: cgroup value differs from the plan (cgroupEnforcement audit: not written)"
                );
                self.audit_seen.insert(w.file.clone(), found.clone());
            }
            out.audit_drift.push(crate::telemetry::status::DriftValue {
                file: w.file.display().to_string(),
                planned: w.value.clone(),
                found: found.clone(),
            });
        }
        self.audit_seen.retain(|f, _| {
            let keep = current.contains(f);
            if !keep {
                tracing::info!(file = %f.display(), "audit: cgroup value matches the plan again");
            }
            keep
        });
        for e in &report.errors {
            tracing::debug!(file = %e.file.display(), value = %e.value, error = %e.error, "audit: cgroup value not readable");
            out.errors
                .push(format!("{}: {}: {}", e.file.display(), e.value, e.error));
        }
        out.planned = writes;
        out.duration = start.elapsed();
        out
    }

    /// The planned writes for `pods` and how many pods were planned: the
    /// last plan when the pods are the same as then (the settings did not
    /// change since: [`Reconciler::reconfigure`] forgets it), else a new one.
    fn plan_for(
        &mut self,
        pods: &[Pod],
        listing: Option<u64>,
    ) -> (Arc<[CgroupWrite]>, usize, bool) {
        if let Some(last) = self.last_plan.as_mut() {
            // The same listing again, or a listing with the same pods
            // (remembered, so its next pass skips the comparison).
            let same = (listing.is_some() && last.listing == listing) || last.pods == pods;
            if same {
                last.listing = listing;
                return (last.writes.clone(), last.planned_pods, true);
            }
        }
        let plan = plan::build(&self.cfg, pods);
        self.plans_built += 1;
        let writes: Arc<[CgroupWrite]> = plan.writes.into();
        self.last_plan = Some(LastPlan {
            pods: pods.to_vec(),
            listing,
            writes: writes.clone(),
            planned_pods: plan.pods.len(),
        });
        (writes, plan.pods.len(), false)
    }

    /// Plans built so far (a reconcile that reused the last plan adds none).
    pub(crate) fn plans_built(&self) -> u64 {
        self.plans_built
    }

    /// Reconciles so far that walked the planned files (a settled plan is
    /// not walked).
    pub(crate) fn plan_walks(&self) -> u64 {
        self.walks
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
            if let Driver::Systemd(sd) = &self.applier {
                // A pod slice is a unit: systemd removes its cgroup on stop.
                if let Some(unit) = qosd_node::sys::systemd::empty_slice_unit(&o.dir) {
                    match sd.stop_slice(&unit) {
                        Ok(()) => {
                            tracing::info!(unit = %unit, uid = %o.uid, "stopped orphaned pod slice unit (its sandbox is gone)");
                            self.orphans_seen.remove(&o.dir);
                            removed.push(o.dir);
                        }
                        Err(e) => {
                            tracing::warn!(unit = %unit, error = %e, "orphaned pod slice unit not stopped")
                        }
                    }
                    continue;
                }
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
    use qosd_model::core::model::{CgroupDriver, Container, QosClass};
    use qosd_model::core::node::NodeResources;
    use qosd_model::core::quantity::Quantity;
    use qosd_model::policy::enforce::naming::CgroupLayout;

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

    /// The plan is built again only when its inputs change: the pods, or
    /// the settings (node resources among them) on a reload.
    #[test]
    fn unchanged_inputs_reuse_the_last_plan() {
        let d = fake_v2_tree();
        let c = cfg(d.path());
        let pods = vec![pod("0000-a", "250m"), pod("0000-b", "500m")];
        let mut r = Reconciler::new(c.clone(), true, Duration::from_secs(0));
        let first = r.reconcile(&pods, None, Instant::now());
        assert_eq!(r.plans_built(), 1);
        // The same pods again (a timer reconcile on the cached listing).
        let second = r.reconcile(&pods.clone(), None, Instant::now());
        assert_eq!(r.plans_built(), 1, "an identical tick must not plan");
        assert_eq!(second.planned, first.planned);
        assert_eq!(second.pods, first.pods);
        // A pod's resources changed (an in-place resize): planned again.
        let resized = vec![pod("0000-a", "250m"), pod("0000-b", "750m")];
        let third = r.reconcile(&resized, None, Instant::now());
        assert_eq!(r.plans_built(), 2);
        assert_ne!(third.planned, first.planned);
        // A pod went away: planned again.
        r.reconcile(&resized[..1], None, Instant::now());
        assert_eq!(r.plans_built(), 3);
        r.reconcile(&resized[..1], None, Instant::now());
        assert_eq!(r.plans_built(), 3);
        // A reload with other node resources: planned again, with them.
        let mut c2 = c.clone();
        c2.node = NodeResources::from_capacity(2000, 4 << 30);
        r.reconfigure(c2.clone(), true);
        let after = r.reconcile(&resized[..1], None, Instant::now());
        assert_eq!(r.plans_built(), 4);
        assert_eq!(
            &after.planned[..],
            &plan::build(&c2, &resized[..1]).writes[..]
        );
        // A reload with identical settings forgets the plan too (cheap, rare).
        r.reconfigure(c2, true);
        r.reconcile(&resized[..1], None, Instant::now());
        assert_eq!(r.plans_built(), 5);
    }

    /// Passes over numbered listings: a new listing with the same pods
    /// reuses the plan, one with other pods plans again, and a reload
    /// plans again even for the listing the last plan came from.
    #[test]
    fn numbered_listings_reuse_the_plan_by_id() {
        let d = fake_v2_tree();
        let c = cfg(d.path());
        let pods = vec![pod("0000-a", "250m"), pod("0000-b", "500m")];
        let resized = vec![pod("0000-a", "250m"), pod("0000-b", "750m")];
        let mut r = Reconciler::new(c.clone(), true, Duration::from_secs(0));
        r.reconcile_listing(1, &pods, None, Instant::now());
        r.reconcile_listing(1, &pods, None, Instant::now());
        assert_eq!(r.plans_built(), 1, "the same listing again");
        r.reconcile_listing(2, &pods.clone(), None, Instant::now());
        assert_eq!(r.plans_built(), 1, "a new listing, the same pods");
        let third = r.reconcile_listing(3, &resized, None, Instant::now());
        assert_eq!(r.plans_built(), 2, "a new listing, other pods");
        assert_eq!(&third.planned[..], &plan::build(&c, &resized).writes[..]);
        // An unnumbered pass compares: back to the first pods.
        r.reconcile(&pods, None, Instant::now());
        assert_eq!(r.plans_built(), 3);
        r.reconcile_listing(3, &resized, None, Instant::now());
        assert_eq!(r.plans_built(), 4, "the id of an older plan is forgotten");
        r.reconfigure(c.clone(), true);
        r.reconcile_listing(3, &resized, None, Instant::now());
        assert_eq!(r.plans_built(), 5, "a reload plans again");
        r.reconcile_listing(3, &resized, None, Instant::now());
        assert_eq!(r.plans_built(), 5);
    }

    /// With the planned files watched: a steady reconcile reads nothing, a
    /// write by someone else is read (and corrected) at the next one, qosd's
    /// own write is read back once, pod cgroups coming and going and the
    /// one-minute safety cadence read everything, a plan change reads the
    /// changed file. On a real filesystem (inotify on regular files).
    #[test]
    fn watched_files_are_read_only_when_written() {
        let d = fake_v2_tree();
        let c = cfg(d.path());
        let pods = vec![pod("0000-a", "250m")];
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
        r.watch_files();
        assert!(r.drift_fd().is_some());
        let t0 = Instant::now();
        let first = r.reconcile(&pods, None, t0);
        assert!(first.errors.is_empty(), "{:?}", first.errors);
        assert!(!first.writes.is_empty());
        let n = first.planned.len();
        assert_eq!(first.unread, 0);
        // Its own writes are read back once, then nothing is read.
        let second = r.reconcile(&pods, None, t0);
        assert_eq!(
            (second.writes.len(), second.unread),
            (0, n - first.writes.len())
        );
        let third = r.reconcile(&pods, None, t0);
        assert_eq!(
            (third.writes.len(), third.unread, third.unchanged),
            (0, n, n)
        );
        // Someone else writes one file: only it is read, and corrected.
        let weight = c.layout.file(
            &c.layout.pod_cgroup(QosClass::Burstable, "0000-a"),
            "cpu.weight",
        );
        let planned_weight = std::fs::read_to_string(&weight).unwrap();
        std::fs::write(&weight, "4096").unwrap();
        let fourth = r.reconcile(&pods, None, t0);
        assert_eq!(fourth.writes.len(), 1);
        assert_eq!(fourth.drift, vec![weight.clone()]);
        assert_eq!(fourth.unread, n - 1);
        assert_eq!(std::fs::read_to_string(&weight).unwrap(), planned_weight);
        // Read back once (its own write), then steady again.
        assert_eq!(r.reconcile(&pods, None, t0).unread, n - 1);
        assert_eq!(r.reconcile(&pods, None, t0).unread, n);
        // Pod cgroups came or went: everything is read.
        r.files_may_have_moved();
        assert_eq!(r.reconcile(&pods, None, t0).unread, 0);
        assert_eq!(r.reconcile(&pods, None, t0).unread, n);
        // The safety cadence: every file at least every DRIFT_FULL_READ,
        // even if nothing was seen written.
        let later = t0 + DRIFT_FULL_READ;
        assert_eq!(r.reconcile(&pods, None, later).unread, 0);
        assert_eq!(r.reconcile(&pods, None, later).unread, n);
        // A plan change: the changed file is read (and written).
        let pods2 = vec![pod("0000-a", "500m")];
        let fifth = r.reconcile(&pods2, None, later);
        assert!(
            fifth.writes.iter().any(|w| w.file == weight),
            "{:?}",
            fifth.writes
        );
        assert!(fifth.unread < n);
        assert!(fifth.drift.is_empty(), "{:?}", fifth.drift);
        // Dry run and audit read every file every time.
        let mut dry = Reconciler::new(c.clone(), true, Duration::from_secs(0));
        dry.watch_files();
        for _ in 0..2 {
            assert_eq!(dry.reconcile(&pods2, None, t0).unread, 0);
        }
    }

    /// Pods coming and going with a write in every pass (churn): the
    /// per-file state follows the planned files, it does not keep an entry
    /// per pod that ever drifted or ran.
    #[test]
    fn per_file_state_follows_the_planned_files_under_churn() {
        let d = fake_v2_tree();
        let c = cfg(d.path());
        let seed = |pods: &[Pod]| {
            for w in plan::build(&c, pods).writes {
                std::fs::create_dir_all(&w.dir).unwrap();
                if !w.file.exists() {
                    std::fs::write(&w.file, "0").unwrap();
                }
                for f in ["cgroup.controllers", "cgroup.subtree_control"] {
                    let p = w.dir.join(f);
                    if !p.exists() {
                        std::fs::write(p, "cpu memory pids\n").unwrap();
                    }
                }
            }
        };
        let uid = |i: usize| format!("{i:04}-churn");
        let weight = |i: usize| {
            c.layout.file(
                &c.layout.pod_cgroup(QosClass::Burstable, &uid(i)),
                "cpu.weight",
            )
        };
        let mut r = Reconciler::new(c.clone(), false, Duration::from_secs(0));
        r.watch_files();
        let t0 = Instant::now();
        let first = vec![pod(&uid(0), "250m"), pod(&uid(1), "250m")];
        seed(&first);
        r.reconcile(&first, None, t0);
        for i in 1..40 {
            // Pod i - 1 goes, pod i + 1 comes; someone rewrites pod i's
            // weight: the pass corrects it (drift) and writes the new pod.
            let pods = vec![pod(&uid(i), "250m"), pod(&uid(i + 1), "250m")];
            seed(&pods);
            std::fs::write(weight(i), "4096").unwrap();
            let out = r.reconcile(&pods, None, t0);
            assert_eq!(out.drift, vec![weight(i)], "round {i}");
            let planned: HashSet<&PathBuf> = out.planned.iter().map(|w| &w.file).collect();
            assert!(
                r.drift_logged.iter().all(|f| planned.contains(f)),
                "round {i}: {:?}",
                r.drift_logged
            );
            assert!(
                r.last_written.keys().all(|f| planned.contains(f)),
                "round {i}"
            );
            assert!(r.dry_run_logged.is_empty() && r.audit_seen.is_empty());
            let w = r.watched.as_ref().unwrap();
            assert!(w.unchanged.iter().all(|f| planned.contains(f)), "round {i}");
            assert!(
                w.files.watched() <= planned.len(),
                "round {i}: {} watched",
                w.files.watched()
            );
        }
        assert!(r.drift_logged.len() <= 1, "{:?}", r.drift_logged);
    }

    #[test]
    fn dry_run_logs_a_planned_write_once_until_it_changes() {
        let d = fake_v2_tree();
        let c = cfg(d.path());
        let mut r = Reconciler::new(c.clone(), true, Duration::from_secs(0));
        let pods = vec![pod("0000-a", "250m")];
        let first = r.reconcile(&pods, None, Instant::now());
        assert!(!first.writes.is_empty());
        assert_eq!(first.logged.len(), first.writes.len());
        // Still pending (nothing is written in dry-run) but already said.
        let second = r.reconcile(&pods, None, Instant::now());
        assert_eq!(second.writes.len(), first.writes.len());
        assert!(second.logged.is_empty(), "{:?}", second.logged);
        // A changed plan: only what changed is logged again.
        let third = r.reconcile(&[pod("0000-a", "500m")], None, Instant::now());
        let weight = c.layout.file(
            &c.layout.pod_cgroup(QosClass::Burstable, "0000-a"),
            "cpu.weight",
        );
        assert!(third.logged.contains(&weight), "{:?}", third.logged);
        assert!(
            third.logged.len() < third.writes.len(),
            "{:?}",
            third.logged
        );
        // Switched to enforce by a reload: no longer a dry run.
        r.reconfigure(c, false);
        assert!(!r.dry_run());
    }

    /// Once every planned file was found holding its value and nothing was
    /// written since, a reconcile of the same pods walks nothing (no read,
    /// no per-file bookkeeping) and reports every file unchanged; a write,
    /// moved cgroups, the full-read cadence, a new plan or a due orphan scan
    /// end that, and drift is still corrected after quiet passes.
    #[test]
    fn a_settled_plan_is_not_walked() {
        let d = fake_v2_tree();
        let c = cfg(d.path());
        let pods = vec![pod("0000-a", "250m"), pod("0000-b", "100m")];
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
        r.watch_files();
        let t0 = Instant::now();
        let first = r.reconcile(&pods, None, t0);
        assert!(first.errors.is_empty(), "{:?}", first.errors);
        assert!(!first.plan_reused);
        let n = first.planned.len();
        // Read back its own writes, then found settled by a walk.
        r.reconcile(&pods, None, t0);
        let settling = r.reconcile(&pods, None, t0);
        assert_eq!(settling.unread, n);
        let walks = r.plan_walks();
        assert_eq!(walks, 3);
        for _ in 0..5 {
            let q = r.reconcile(&pods, None, t0);
            assert_eq!((q.unread, q.unchanged, q.writes.len()), (n, n, 0));
            assert!(q.plan_reused);
            assert_eq!(q.planned.len(), n);
            assert!(q.errors.is_empty());
        }
        assert_eq!(r.plan_walks(), walks, "quiet passes walk nothing");
        // A write by someone else after quiet passes: read and corrected.
        let weight = c.layout.file(
            &c.layout.pod_cgroup(QosClass::Burstable, "0000-a"),
            "cpu.weight",
        );
        let planned_weight = std::fs::read_to_string(&weight).unwrap();
        std::fs::write(&weight, "4096").unwrap();
        let fixed = r.reconcile(&pods, None, t0);
        assert_eq!(fixed.drift, vec![weight.clone()]);
        assert_eq!(std::fs::read_to_string(&weight).unwrap(), planned_weight);
        assert_eq!(r.plan_walks(), walks + 1);
        // Its read-back, the walk that finds it settled, then quiet again.
        r.reconcile(&pods, None, t0);
        r.reconcile(&pods, None, t0);
        let w = r.plan_walks();
        r.reconcile(&pods, None, t0);
        assert_eq!(r.plan_walks(), w);
        // Moved cgroups and the full-read cadence walk (and read) again.
        r.files_may_have_moved();
        assert_eq!(r.reconcile(&pods, None, t0).unread, 0);
        assert_eq!(r.plan_walks(), w + 1);
        r.reconcile(&pods, None, t0);
        r.reconcile(&pods, None, t0);
        let w = r.plan_walks();
        assert_eq!(r.reconcile(&pods, None, t0 + DRIFT_FULL_READ).unread, 0);
        assert_eq!(r.plan_walks(), w + 1);
        // A due orphan scan runs on a settled plan (a live set never seen).
        r.reconcile(&pods, None, t0 + DRIFT_FULL_READ);
        let w = r.plan_walks();
        let live: BTreeSet<String> = ["0000-a".into(), "0000-b".into()].into();
        r.reconcile(&pods, Some(&live), t0 + DRIFT_FULL_READ);
        assert_eq!(r.plan_walks(), w, "settled: no walk");
        assert!(
            r.orphan_scanned.as_ref().is_some_and(|(l, _)| l == &live),
            "the orphan scan ran"
        );
        // A new plan walks.
        let pods2 = vec![pod("0000-a", "500m"), pod("0000-b", "100m")];
        let changed = r.reconcile(&pods2, Some(&live), t0 + DRIFT_FULL_READ);
        assert!(!changed.plan_reused);
        assert!(changed.writes.iter().any(|x| x.file == weight));
        assert_eq!(r.plan_walks(), w + 1);
    }

    #[test]
    fn orphan_scan_only_when_it_can_find_something() {
        let d = fake_v2_tree();
        let c = cfg(d.path());
        let mut r = Reconciler::new(c, false, Duration::from_secs(30));
        let t0 = Instant::now();
        let live: BTreeSet<String> = ["1111".to_string()].into();
        assert!(r.orphan_scan_due(&live, t0), "first reconcile");
        r.orphan_scanned = Some((live.clone(), t0));
        assert!(!r.orphan_scan_due(&live, t0 + Duration::from_secs(10)));
        let other: BTreeSet<String> = ["2222".to_string()].into();
        assert!(r.orphan_scan_due(&other, t0 + Duration::from_secs(10)));
        assert!(r.orphan_scan_due(&live, t0 + ORPHAN_RESCAN));
        r.orphans_seen.insert(d.path().join("x"), t0);
        assert!(r.orphan_scan_due(&live, t0 + Duration::from_secs(10)));
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
