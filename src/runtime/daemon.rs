//! `qosd run`: the enforcement loop.
//!
//! One reconcile = list pods (CRI or manifests) → classify → plan → apply
//! the writes that differ (or record them, dry run) → remove orphaned pod
//! cgroups that stayed empty for the grace period. The loop reconciles on a
//! timer and promptly when the set of sandboxes changes (cheap relist).
//! The eviction watcher runs beside it on its own thread
//! ([`crate::runtime::eviction`]); see docs/design.md.
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runtime::reconcile::{ReconcileReport, Reconciler};
use qosd_model::policy::enforce::plan::PlanConfig;
use qosd_node::pods::{Listing, PodSourceSpec, Source, SourceError};

/// Everything `qosd run` needs.
#[derive(Debug, Clone)]
pub(crate) struct RunOptions {
    pub(crate) plan: PlanConfig,
    pub(crate) source: PodSourceSpec,
    pub(crate) dry_run: bool,
    pub(crate) once: bool,
    pub(crate) reconcile_interval: Duration,
    pub(crate) relist_interval: Duration,
    pub(crate) orphan_grace: Duration,
    pub(crate) connect: qosd_node::cri::ConnectOptions,
    /// The machine's MemTotal: the kubelet derives Burstable containers'
    /// oom_score_adj from it, so qosd inverts that formula with it (not
    /// with an overridden node capacity).
    pub(crate) machine_memory_bytes: i64,
    /// The CPU manager (`cpuManagerPolicy: static`); `None`: policy none.
    pub(crate) cpu_manager: Option<crate::runtime::cpu_manager::CpuManagerSettings>,
    /// Pod specs from the Kubernetes API (CRI source only).
    pub(crate) specs: Option<Arc<dyn qosd_node::pods::SpecSource>>,
    /// `cgroupEnforcement: audit`: compare and report, write nothing.
    pub(crate) audit: bool,
    /// Where the CRI status cache is kept across restarts (`None`: not kept;
    /// `--once` never uses it).
    pub(crate) state_dir: Option<std::path::PathBuf>,
}

/// Hooks the daemon calls as it runs, so eviction, metrics and health can
/// observe it without the loop knowing about them.
pub(crate) trait Observer: Send {
    /// After each reconcile (also the first).
    fn reconciled(&mut self, _report: &ReconcileReport, _listing: &Listing) {}
    /// After a reconcile with the same listing as the one before it (no
    /// listing was taken since): only what the pass itself changed.
    fn reconciled_again(&mut self, report: &ReconcileReport, listing: &Listing) {
        self.reconciled(report, listing);
    }
    /// A listing failed (runtime down, bad manifest).
    fn source_failed(&mut self, _error: &SourceError) {}
    /// Each loop turn (watchdog / liveness), and every second while a
    /// pod-source call is pending.
    fn heartbeat(&mut self) {}
    /// A pod-source call started (`Some(method)`) or ended (`None`).
    fn call_pending(&mut self, _what: Option<&str>) {}
    /// SIGHUP: the new settings to use, or None to keep the old ones.
    fn reload(&mut self) -> Option<Reloaded> {
        None
    }
    /// The runtime's pods live under a cgroup parent the configuration
    /// would not produce (`Some`: nothing is written), or no longer (`None`).
    fn refused(&mut self, _why: Option<&ParentMismatch>) {}
    /// The runtime's event stream changed state (`why`: the last error).
    fn runtime_events(&mut self, _state: EventsState, _why: Option<&str>) {}
}

use crate::runtime::runtime_events::EventsState;

/// What a SIGHUP reload changes in the reconcile loop.
#[derive(Debug, Clone)]
pub(crate) struct Reloaded {
    pub(crate) plan: PlanConfig,
    pub(crate) dry_run: bool,
    pub(crate) reconcile_interval: Duration,
    pub(crate) relist_interval: Duration,
}

use qosd_model::policy::enforce::parents::ParentMismatch;

/// The pods of a listing whose cgroup parent the plan's layout would not
/// produce (see [`qosd_model::policy::enforce::parents`]).
pub(crate) fn check_parents(plan: &PlanConfig, listing: &Listing) -> Result<(), ParentMismatch> {
    use qosd_model::policy::enforce::parents::{check, Reported};
    let reported: Vec<Reported<'_>> = listing
        .live
        .iter()
        .filter_map(|p| {
            Some(Reported {
                namespace: &p.pod.namespace,
                name: &p.pod.name,
                uid: &p.pod.uid,
                class: p.qos_class,
                parent: p.cgroup_parent.as_deref()?,
            })
        })
        .collect();
    check(&plan.layout, &reported)
}

/// An observer that does nothing.
pub(crate) struct NoObserver;
impl Observer for NoObserver {}

/// How the loop ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// `--once`: the report of the single pass.
    Once(Box<ReconcileReport>),
    /// SIGTERM / SIGINT.
    Stopped,
}

/// What the process asks of the loop: `app` turns OS signals into these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Control {
    /// Stop (SIGTERM, SIGINT: the name is logged).
    Stop(&'static str),
    /// Re-read the configuration (SIGHUP).
    Reload,
}

/// The loop's end of the control channel. A reload asked while a call is
/// pending is kept until the loop can take it; a closed channel asks for
/// nothing more.
pub(crate) struct Controls {
    rx: Option<tokio::sync::mpsc::UnboundedReceiver<Control>>,
    reload_pending: bool,
}

impl Controls {
    pub(crate) fn new(rx: tokio::sync::mpsc::UnboundedReceiver<Control>) -> Controls {
        Controls {
            rx: Some(rx),
            reload_pending: false,
        }
    }

    /// The next control (a reload kept for later first).
    async fn next(&mut self) -> Control {
        if std::mem::take(&mut self.reload_pending) {
            return Control::Reload;
        }
        self.recv().await
    }

    /// Wait for a stop (its signal's name); reloads are kept for later.
    async fn stopped(&mut self) -> &'static str {
        loop {
            match self.recv().await {
                Control::Stop(why) => return why,
                Control::Reload => self.reload_pending = true,
            }
        }
    }

    async fn recv(&mut self) -> Control {
        if let Some(rx) = self.rx.as_mut() {
            if let Some(c) = rx.recv().await {
                return c;
            }
            self.rx = None;
        }
        std::future::pending().await
    }
}

/// Log a stop.
fn stopping(why: &str) {
    tracing::info!("{why}: stopping");
}

/// Run the daemon loop until a stop (or one pass with `once`).
pub(crate) async fn run_loop(
    opts: RunOptions,
    controls: &mut Controls,
    observer: &mut dyn Observer,
) -> anyhow::Result<Outcome> {
    // `--once` gives up when the runtime stays away; the daemon keeps
    // waiting for it (not ready meanwhile), as a node agent must.
    let mut source = loop {
        let connecting = Source::connect(&opts.source, opts.connect, opts.machine_memory_bytes);
        let Some(attempt) = waiting(connecting, "connect", observer, controls).await else {
            return Ok(Outcome::Stopped);
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
    if let Source::Cri { specs, .. } = &mut source {
        specs.clone_from(&opts.specs);
    }
    // A restart asks the runtime only about what is new since the last
    // run; the restored container statuses serve the first reconcile only.
    let mut store = match &opts.state_dir {
        Some(dir) if !opts.once => source.status_store(&opts.source, dir),
        _ => None,
    };
    let restored_containers = store.as_mut().map_or(0, |s| s.load());
    let mode = if opts.audit {
        qosd_node::sys::apply::Mode::Audit
    } else if opts.dry_run {
        qosd_node::sys::apply::Mode::DryRun
    } else {
        qosd_node::sys::apply::Mode::Real
    };
    let mut reconciler = Reconciler::with_mode(opts.plan.clone(), mode, opts.orphan_grace);
    let mut cpu = match &opts.cpu_manager {
        Some(s) => crate::runtime::cpu_manager::CpuManager::start(s, opts.dry_run || opts.audit)?,
        None => None,
    };
    if cpu.is_some() && !matches!(source, Source::Cri { .. }) {
        tracing::warn!("CPU manager: cpusets are applied through the CRI only; with manifests nothing is applied");
    }

    if opts.once {
        let listing = source.list().await?;
        // Never build a parallel tree: refuse before any write.
        check_parents(reconciler.config(), &listing)?;
        let report = reconciler.reconcile(&listing.pods, listing.all_uids.as_ref(), Instant::now());
        if let (Some(cpu), Source::Cri { client, .. }) = (cpu.as_mut(), &source) {
            cpu.reconcile(client, &listing.live).await;
        }
        observer.reconciled(&report, &listing);
        return Ok(Outcome::Once(Box::new(report)));
    }

    let ticker = |every: Duration| {
        let mut t = tokio::time::interval(every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    };
    let mut reconcile_tick = ticker(opts.reconcile_interval);
    let mut relist_tick = ticker(opts.relist_interval);
    let mut intervals = (opts.reconcile_interval, opts.relist_interval);
    let mut refused = false;
    let mut source_down = false;
    // The last full listing and the fingerprint it was taken at: a full
    // inventory (a status call per sandbox and container) is only needed
    // when the fingerprint changes, or every `RESYNC` to catch in-place
    // resource updates; timer reconciles in between reuse it and only
    // re-read the cgroups (drift). A reconcile borrows it (no copy).
    let mut cached: Option<(Vec<String>, Listing, Instant)> = None;
    // Each listing taken gets the next number: a pass over the same
    // listing reuses the plan without comparing the pods, and its parents
    // were checked (the settings change only on a reload, which lists).
    let mut listing_id: u64 = 0;
    let mut parents_checked: Option<u64> = None;
    // Free memory back to the kernel after passes over new listings (at
    // most every `TRIM_GAP`): glibc would keep each burst's peak.
    let mut trim = qosd_node::sys::malloc::TrimPacer::new(TRIM_GAP);
    let mut last_resync = Instant::now();
    // Pod cgroups appearing / going away (CRI source): a relist shortly
    // after each, instead of one every `relist_interval`. Started after the
    // first reconcile (which creates kubepods and the QoS cgroups).
    let mut pod_events = PodEventState::default();
    // Planned files written by anyone: reconcile (with the last listing)
    // soon after, instead of at the next timer reconcile.
    reconciler.watch_files();
    let mut drift = DriftState::new(reconciler.drift_fd());
    let mut spec_key = source.spec_key();
    // The runtime's event stream (containerd): while it is live, a timer
    // tick with no event since the last listing lists nothing; an event
    // relists like a pod cgroup event. Not live (not yet, runtime without
    // the API, stream ended): every reconcile lists, as without it.
    let (mut feed, prober) = match &opts.source {
        PodSourceSpec::Cri { endpoint } => {
            match qosd_node::cri::events::spawn(endpoint, opts.connect.connect_timeout) {
                Ok((rx, p)) => (Some(rx), Some(p)),
                Err(_) => (None, None),
            }
        }
        PodSourceSpec::Manifests(_) => (None, None),
    };
    let mut gate = crate::runtime::runtime_events::EventGate::default();
    // An in-place update was announced: list even if the ids and states
    // did not change (the updated containers' statuses were forgotten).
    let mut force_list = false;
    // Restored container statuses: every container is asked about again
    // right after the first reconcile (an in-place resize while qosd was
    // down shows in no listing).
    let mut recheck_restored = restored_containers > 0;
    let mut recheck_at: Option<tokio::time::Instant> = None;
    // The loop may sleep a whole reconcile interval when the watchdog
    // (pinged from the heartbeat) allows it.
    let watchdog = crate::telemetry::notify::watchdog_interval();
    loop {
        let quiet_ok = watchdog.is_none_or(|w| w > intervals.0);
        observer.heartbeat();
        let relist_due = pod_events.due();
        // Something announces pod changes: the relist timer is not needed.
        let evented = pod_events.active() || gate.quiet();
        let tick = tokio::select! {
            c = controls.next() => {
                if let Control::Stop(why) = c {
                    stopping(why);
                    return Ok(Outcome::Stopped);
                }
                if let Some(r) = observer.reload() {
                    reconciler.reconfigure(r.plan, r.dry_run);
                    if intervals.0 != r.reconcile_interval {
                        reconcile_tick = ticker(r.reconcile_interval);
                    }
                    if intervals.1 != r.relist_interval {
                        relist_tick = ticker(r.relist_interval);
                    }
                    intervals = (r.reconcile_interval, r.relist_interval);
                }
                cached = None;
                parents_checked = None;
                Tick::Reconcile
            }
            _ = reconcile_tick.tick() => Tick::Reconcile,
            // With pod events the relist timer is not needed: the reconcile
            // timer (which relists too) is the safety net.
            // The API server's view (when configured) is checked on the
            // relist timer still: its change key costs no runtime call.
            // Without an API server source, nothing is left for it to check
            // (the loop still turns often enough for the systemd watchdog).
            _ = relist_tick.tick(), if !(evented && spec_key.is_none() && quiet_ok) => {
                if evented {
                    let k = source.spec_key();
                    if k == spec_key {
                        continue;
                    }
                    spec_key = k;
                }
                Tick::Relist
            }
            r = pod_events.readable() => {
                if pod_events.on_readable(r) {
                    reconciler.files_may_have_moved();
                }
                continue;
            }
            changed = feed_changed(&mut feed) => {
                match (changed, feed.as_mut()) {
                    (true, Some(rx)) => {
                        let f = rx.borrow_and_update().clone();
                        take_feed(&f, &mut gate, &mut pod_events, &source, &mut force_list, observer);
                    }
                    _ => feed = None,
                }
                continue;
            }
            r = drift.readable() => {
                drift.on_readable(r);
                continue;
            }
            _ = sleep_until(drift.due) => {
                drift.fired();
                Tick::Drift
            }
            _ = sleep_until(relist_due) => {
                pod_events.relisting();
                Tick::Relist
            }
            _ = sleep_until(recheck_at) => {
                recheck_at = None;
                cached = None;
                Tick::Reconcile
            }
        };
        // What this tick reconciles with: the last listing when a planned
        // file was written (re-read the written files, no runtime call), or
        // on a timer tick while the runtime's event stream says that
        // nothing changed since it was taken (and the safety relist is not
        // due); otherwise a change check and, when it moved, a listing.
        let mut reuse = !source_down
            && match (tick, &cached) {
                // (Not when a container was updated in place since: its
                // new values must be listed before anything is rewritten.)
                (Tick::Drift, Some(_)) => !force_list,
                (Tick::Reconcile, Some((_, _, at))) => {
                    gate.quiet() && !force_list && at.elapsed() < RESYNC
                }
                _ => false,
            };
        if reuse && tick == Tick::Reconcile {
            // The stream still delivers: a marker published now comes back
            // on it, after every change made before it. A runtime that
            // does not answer fails the probe: listed (and reported) as
            // without events.
            let probe = async {
                match &prober {
                    Some(p) => p.probe().await,
                    None => false,
                }
            };
            let Some(ok) = waiting(probe, "runtime events marker", observer, controls).await else {
                return Ok(Outcome::Stopped);
            };
            if let Some(rx) = feed.as_mut() {
                let f = rx.borrow_and_update().clone();
                take_feed(
                    &f,
                    &mut gate,
                    &mut pod_events,
                    &source,
                    &mut force_list,
                    observer,
                );
            }
            reuse = ok && gate.quiet() && !force_list;
        }
        let tick = if tick == Tick::Drift {
            Tick::Reconcile
        } else {
            tick
        };
        // Whether this turn took a new listing (else: the last one again).
        let mut new_listing = false;
        if !reuse {
            gate.listing_started();
            // Calls retry while the runtime is down: stay stoppable, and alive
            // (a hung runtime is reported as such, not as a dead loop).
            let Some(fp) =
                waiting(source.fingerprint(), "ListPodSandbox", observer, controls).await
            else {
                return Ok(Outcome::Stopped);
            };
            let fp = match fp {
                Ok(fp) => fp,
                Err(e) => {
                    source_failed(&e, "pod source unavailable", &mut source_down, observer);
                    // Relist in full once it answers again.
                    cached = None;
                    gate.listing_failed();
                    continue;
                }
            };
            let fresh = !force_list
                && cached
                    .as_ref()
                    .is_some_and(|(cfp, _, at)| *cfp == fp && at.elapsed() < RESYNC);
            if fresh {
                gate.listing_done();
                if tick == Tick::Relist {
                    continue;
                }
            } else {
                if last_resync.elapsed() >= RESYNC {
                    // Container statuses are asked again (in-place resource
                    // updates); sandbox statuses never change.
                    source.resync();
                    last_resync = Instant::now();
                }
                let Some(listed) = waiting(source.list(), "pod listing", observer, controls).await
                else {
                    return Ok(Outcome::Stopped);
                };
                match listed {
                    Ok(listing) => {
                        if source_down {
                            tracing::info!("pod source is back");
                            source_down = false;
                        }
                        cached = Some((fp, listing, Instant::now()));
                        listing_id += 1;
                        new_listing = true;
                        gate.listing_done();
                        force_list = false;
                    }
                    Err(e) => {
                        source_failed(&e, "pod listing failed", &mut source_down, observer);
                        cached = None;
                        gate.listing_failed();
                        continue;
                    }
                }
            }
        }
        let Some((_, listing, _)) = cached.as_ref() else {
            continue;
        };
        if parents_checked != Some(listing_id) {
            match check_parents(reconciler.config(), listing) {
                Err(e) => {
                    // Not ready, nothing written, until the config matches.
                    observer.refused(Some(&e));
                    refused = true;
                    continue;
                }
                Ok(()) if refused => {
                    observer.refused(None);
                    refused = false;
                    new_listing = true;
                }
                Ok(()) => {}
            }
            parents_checked = Some(listing_id);
        }
        let report = reconciler.reconcile_listing(
            listing_id,
            &listing.pods,
            listing.all_uids.as_ref(),
            Instant::now(),
        );
        if let (Some(cpu), Source::Cri { client, .. }) = (cpu.as_mut(), &source) {
            cpu.reconcile(client, &listing.live).await;
        }
        tracing::debug!(
            pods = report.pods,
            writes = report.writes.len(),
            unchanged = report.unchanged,
            unread = report.unread,
            errors = report.errors.len(),
            plans = reconciler.plans_built(),
            walks = reconciler.plan_walks(),
            ms = report.duration.as_secs_f64() * 1e3,
            "reconciled"
        );
        if new_listing {
            observer.reconciled(&report, listing);
            trim.busy();
        } else {
            observer.reconciled_again(&report, listing);
        }
        if trim.due(Instant::now()) {
            let released = qosd_node::sys::malloc::release_free_memory();
            tracing::trace!(released, "free heap memory returned to the kernel");
        }
        if matches!(source, Source::Cri { .. }) {
            pod_events.start(&opts.plan);
        }
        if recheck_restored {
            recheck_restored = false;
            source.recheck_containers();
            recheck_at = Some(tokio::time::Instant::now());
        } else if let Some(s) = store.as_mut() {
            if recheck_at.is_none() {
                s.maybe_save();
            }
        }
    }
}

/// A pod-source call failed: warn when the source goes down (once, not
/// per retry), mark it down and report it.
fn source_failed(e: &SourceError, what: &str, source_down: &mut bool, observer: &mut dyn Observer) {
    if !*source_down {
        tracing::warn!(error = %e, "{what}; keeping the last state, retrying");
    }
    *source_down = true;
    observer.source_failed(e);
}

/// Await a pod-source call, stoppable (`None`), with a heartbeat every
/// second meanwhile and the call reported as pending.
async fn waiting<T>(
    call: impl std::future::Future<Output = T>,
    what: &str,
    observer: &mut dyn Observer,
    controls: &mut Controls,
) -> Option<T> {
    tokio::pin!(call);
    observer.call_pending(Some(what));
    let mut beat = tokio::time::interval(Duration::from_secs(1));
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    beat.tick().await;
    let out = loop {
        tokio::select! {
            r = &mut call => break Some(r),
            why = controls.stopped() => { stopping(why); break None; }
            _ = beat.tick() => observer.heartbeat(),
        }
    };
    observer.call_pending(None);
    out
}

/// At most one release of free heap memory this often (a pass over a new
/// listing asks for one; see `qosd_node::sys::malloc::TrimPacer`).
const TRIM_GAP: Duration = Duration::from_secs(2);

/// Relist this long after a pod cgroup event (more usually follow: the
/// sandbox's and each container's cgroup).
const EVENT_DEBOUNCE: Duration = Duration::from_millis(30);
/// And once more this long after the last event: a sandbox or container
/// whose cgroup appeared may only be listed as ready a moment later.
const EVENT_FOLLOWUP: Duration = Duration::from_millis(700);

/// The inotify watch on the pod cgroups and the relists it schedules.
#[derive(Default)]
struct PodEventState {
    fd: Option<tokio::io::unix::AsyncFd<qosd_node::sys::pod_events::PodEvents>>,
    /// Tried and failed: logged once, retried after each reconcile.
    failed: bool,
    debounce: Option<tokio::time::Instant>,
    followup: Option<tokio::time::Instant>,
}

impl PodEventState {
    fn active(&self) -> bool {
        self.fd.is_some()
    }

    fn start(&mut self, plan: &PlanConfig) {
        if self.fd.is_some() {
            return;
        }
        let dirs = pod_event_dirs(plan);
        let r = qosd_node::sys::pod_events::PodEvents::new(&dirs)
            .map_err(|e| e.to_string())
            .and_then(|w| {
                // SAFETY: `PodEvents` owns its inotify fd and keeps it open
                // for as long as it lives inside the AsyncFd.
                unsafe { tokio::io::unix::AsyncFd::register(w) }.map_err(|e| e.to_string())
            });
        match r {
            Ok(fd) => {
                tracing::info!(
                    watched = fd.get_ref().watched(),
                    "pod cgroup events on: relisting on each pod cgroup change (and at every reconcile)"
                );
                self.fd = Some(fd);
                self.failed = false;
            }
            Err(e) => {
                if !self.failed {
                    tracing::warn!(error = %e, "pod cgroup events unavailable; relisting on the relist interval");
                }
                self.failed = true;
            }
        }
    }

    /// The next scheduled relist.
    fn due(&self) -> Option<tokio::time::Instant> {
        match (self.debounce, self.followup) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Wait until the inotify fd is readable (forever without one).
    async fn readable(&self) -> std::io::Result<()> {
        match &self.fd {
            Some(fd) => fd.readable().await.map(|mut g| g.clear_ready()),
            None => std::future::pending().await,
        }
    }

    /// Take in the events; whether pod cgroups came or went.
    fn on_readable(&mut self, r: std::io::Result<()>) -> bool {
        let Some(fd) = self.fd.as_mut() else {
            return false;
        };
        let n = match r
            .map_err(|e| e.to_string())
            .and_then(|()| fd.get_mut().drain().map_err(|e| e.to_string()))
        {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "pod cgroup events failed; relisting on the relist interval");
                self.fd = None;
                self.failed = true;
                return true;
            }
        };
        if n == 0 {
            return false;
        }
        self.schedule();
        true
    }

    /// A pod change was announced (a pod cgroup or runtime event): relist
    /// soon, and once more a moment after the last announcement.
    fn schedule(&mut self) {
        let now = tokio::time::Instant::now();
        self.debounce.get_or_insert(now + EVENT_DEBOUNCE);
        self.followup = Some(now + EVENT_FOLLOWUP);
    }

    /// A scheduled relist is being made now.
    fn relisting(&mut self) {
        let now = tokio::time::Instant::now();
        if self.debounce.is_some_and(|d| d <= now) {
            self.debounce = None;
        } else if self.followup.is_some_and(|f| f <= now) {
            self.followup = None;
        }
    }
}

/// Wait until the runtime's event feed changes (`false`: its task ended;
/// forever without one).
async fn feed_changed(
    rx: &mut Option<tokio::sync::watch::Receiver<qosd_node::cri::events::Feed>>,
) -> bool {
    match rx {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// Take in a new value of the runtime's event feed: schedule the relist it
/// asks for, forget the statuses of containers updated in place, report a
/// change of state.
fn take_feed(
    f: &qosd_node::cri::events::Feed,
    gate: &mut crate::runtime::runtime_events::EventGate,
    pod_events: &mut PodEventState,
    source: &Source,
    force_list: &mut bool,
    observer: &mut dyn Observer,
) {
    let u = gate.observe(f);
    if u.relist {
        pod_events.schedule();
    }
    if u.forget_all {
        source.resync();
        *force_list = true;
    } else if !u.updated.is_empty() {
        source.forget_containers(&u.updated);
        *force_list = true;
    }
    if let Some(state) = u.became {
        log_events_state(state, f.down.as_deref());
        observer.runtime_events(state, f.down.as_deref());
    }
}

/// Log a change of the runtime event stream's state (once per change).
fn log_events_state(state: EventsState, why: Option<&str>) {
    match state {
        EventsState::Live => tracing::info!(
            "runtime events on: listing the runtime after its events (and every {}s), not at every reconcile",
            RESYNC.as_secs()
        ),
        EventsState::Down => tracing::warn!(
            error = why.unwrap_or("?"),
            "runtime events off: listing the runtime at every reconcile; subscribing again"
        ),
        EventsState::Unsupported => tracing::info!(
            error = why.unwrap_or("?"),
            "the runtime does not serve containerd's events API: listing it at every reconcile"
        ),
    }
}

/// Sleep until `at` (forever when `None`).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The directories whose sub-directories are pod cgroups: kubepods and its
/// Burstable and BestEffort cgroups (v1: in the cpu hierarchy).
pub(crate) fn pod_event_dirs(plan: &PlanConfig) -> Vec<std::path::PathBuf> {
    use qosd_model::core::model::QosClass;
    let l = &plan.layout;
    [
        QosClass::Guaranteed,
        QosClass::Burstable,
        QosClass::BestEffort,
    ]
    .iter()
    .map(|c| l.dir(&l.qos_cgroup(*c), "cpu"))
    .collect()
}

/// What woke the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tick {
    /// The reconcile timer (or SIGHUP): reconcile even if nothing changed.
    Reconcile,
    /// The relist timer: reconcile only if the pods changed.
    Relist,
    /// A planned cgroup file was written: reconcile with the last listing.
    Drift,
}

/// Reconciles after planned files are written (drift), at most every
/// [`DRIFT_SPACING`]: a writer fighting qosd gets a correction a second,
/// not a busy loop.
const DRIFT_DEBOUNCE: Duration = Duration::from_millis(50);
const DRIFT_SPACING: Duration = Duration::from_secs(1);

/// The inotify fd of the reconciler's watched planned files
/// ([`Reconciler::watch_files`]) and the drift reconcile it schedules.
struct DriftState {
    /// Registered with the runtime; the reconciler owns the fd (and
    /// outlives this: declared after it in `run_loop`).
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::RawFd>>,
    due: Option<tokio::time::Instant>,
    last: Option<tokio::time::Instant>,
}

impl DriftState {
    fn new(fd: Option<std::os::fd::RawFd>) -> DriftState {
        // SAFETY: the reconciler owns the fd and keeps it open for as long
        // as it lives (a reload moves it to the new settings); `run_loop`
        // declares it before this state, which is therefore dropped first.
        let fd = fd.and_then(|fd| match unsafe { tokio::io::unix::AsyncFd::register(fd) } {
            Ok(a) => Some(a),
            Err(e) => {
                tracing::warn!(error = %e, "planned cgroup file events not polled; drift is corrected at the next reconcile");
                None
            }
        });
        DriftState {
            fd,
            due: None,
            last: None,
        }
    }

    /// Wait until a planned file was written (forever without the fd).
    async fn readable(&self) -> std::io::Result<()> {
        match &self.fd {
            Some(fd) => fd.readable().await.map(|mut g| g.clear_ready()),
            None => std::future::pending().await,
        }
    }

    fn on_readable(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r {
            tracing::warn!(error = %e, "planned cgroup file events failed; drift is corrected at the next reconcile");
            self.fd = None;
            return;
        }
        if self.due.is_none() {
            let now = tokio::time::Instant::now();
            let mut at = now + DRIFT_DEBOUNCE;
            if let Some(last) = self.last {
                at = at.max(last + DRIFT_SPACING);
            }
            self.due = Some(at);
        }
    }

    fn fired(&mut self) {
        self.due = None;
        self.last = Some(tokio::time::Instant::now());
    }
}

/// A full inventory at least this often, even when no sandbox or container
/// changed (in-place resource updates do not show in the fingerprint); the
/// kubelet re-syncs its QoS cgroups every minute.
const RESYNC: Duration = Duration::from_secs(60);

// ------------------------------------------------- metrics, health, systemd

/// What the eviction loop becomes after a reload.
pub(crate) enum EvictionSwap {
    /// Its settings did not change.
    Keep,
    /// Restarted with the new settings (`None`: eviction now off).
    Replace(Option<Arc<crate::runtime::eviction_service::EvictionService>>),
}

/// Re-reads the configuration on SIGHUP (None: keep the old one).
pub(crate) type Reloader = Box<dyn FnMut() -> Option<(Reloaded, EvictionSwap)> + Send>;

/// The observer of a real `qosd run`: feeds metrics, health/readiness, the
/// status document and systemd (READY after the first reconcile, watchdog).
pub(crate) struct ServiceObserver {
    pub(crate) metrics: Arc<crate::telemetry::metrics::Metrics>,
    pub(crate) health: Arc<crate::telemetry::health::Health>,
    notified_ready: bool,
    log_errors_reported: u64,
    watchdog: Option<(Duration, Instant)>,
    layout: qosd_model::policy::enforce::naming::CgroupLayout,
    /// Called on SIGHUP to rebuild the planner config (reloads the file).
    pub(crate) reloader: Option<Reloader>,
    /// The eviction loop, fed the pods of every listing.
    pub(crate) eviction: Option<Arc<crate::runtime::eviction_service::EvictionService>>,
    /// Dry run: writes and evictions are counted apart.
    dry_run: bool,
    /// The last refusal logged (logged again only when it changes).
    refused_logged: Option<String>,
    /// The Kubernetes API side, for status and readiness reasons.
    pub(crate) specs: Option<Arc<dyn qosd_node::pods::SpecSource>>,
    /// `cgroupEnforcement: audit`: report drift in metrics and `/status`.
    pub(crate) audit: bool,
    audit_changes_total: u64,
    /// What the last reconcile's pods gave (counts, the eviction feed's
    /// key): reused while the pods are unchanged.
    last_pods: Option<LastPods>,
}

/// The pods' derived data of the last reconcile: the counts by class and
/// the (uid, sandbox id) pairs the eviction candidates were built from.
struct LastPods {
    counts: crate::telemetry::status::PodCounts,
    sandboxes: Vec<(String, String)>,
}

impl LastPods {
    fn same_sandboxes(&self, live: &[qosd_node::cri::LivePod]) -> bool {
        self.sandboxes.len() == live.len()
            && self
                .sandboxes
                .iter()
                .zip(live)
                .all(|((u, s), p)| *u == p.pod.uid && *s == p.sandbox_id)
    }
}

impl ServiceObserver {
    pub(crate) fn new(
        metrics: Arc<crate::telemetry::metrics::Metrics>,
        health: Arc<crate::telemetry::health::Health>,
        dry_run: bool,
        plan: &PlanConfig,
    ) -> ServiceObserver {
        health.update_status(|d| {
            d.version = env!("CARGO_PKG_VERSION").to_string();
            d.set_setup(dry_run, Some(plan.layout.version), plan.layout.driver);
        });
        ServiceObserver {
            metrics,
            health,
            notified_ready: false,
            log_errors_reported: 0,
            watchdog: crate::telemetry::notify::watchdog_interval().map(|d| (d, Instant::now())),
            layout: plan.layout.clone(),
            reloader: None,
            eviction: None,
            dry_run,
            refused_logged: None,
            specs: None,
            audit: false,
            audit_changes_total: 0,
            last_pods: None,
        }
    }
}

impl Observer for ServiceObserver {
    fn reconciled(&mut self, report: &ReconcileReport, listing: &Listing) {
        use crate::telemetry::metrics::ErrorKind;
        use qosd_model::core::model::QosClass;
        self.metrics.reconcile_done(report.duration);
        self.metrics
            .cgroup_writes(report.writes.len() as u64, self.dry_run);
        self.metrics
            .orphans_removed(report.orphans_removed.len() as u64, self.dry_run);
        for _ in &report.errors {
            self.metrics.error(ErrorKind::CgroupWrite);
        }
        // Readiness tells the truth: writes that fail (EROFS, EACCES, ...)
        // mean the node is not being enforced. A cgroup that vanished
        // mid-write (its pod went away) is no such failure.
        let failing = (report.failed_writes > 0).then(|| {
            format!(
                "cgroup writes failing: {} of {} planned writes failed in the last pass (first: {})",
                report.failed_writes,
                report.planned.len().max(report.failed_writes),
                report.errors.first().map(String::as_str).unwrap_or("?")
            )
        });
        self.health.set_problem("cgroup_writes", failing);
        // The same pods as at the last reconcile (its plan reused) with the
        // same sandboxes: counts and eviction candidates are unchanged.
        let same_pods = report.plan_reused
            && self
                .last_pods
                .as_ref()
                .is_some_and(|l| l.same_sandboxes(&listing.live));
        let counts = match self.last_pods.as_ref().filter(|_| same_pods) {
            Some(l) => l.counts.clone(),
            None => crate::telemetry::status::PodCounts::of(&listing.pods),
        };
        self.metrics.pods(QosClass::Guaranteed, counts.guaranteed);
        self.metrics.pods(QosClass::Burstable, counts.burstable);
        self.metrics.pods(QosClass::BestEffort, counts.best_effort);
        if self.audit {
            self.metrics
                .audit_drift(report.audit_drift.len(), report.audit_changes);
            self.audit_changes_total += report.audit_changes as u64;
            let audit = crate::telemetry::status::AuditStatus {
                drifting: report.audit_drift.len(),
                changes_total: self.audit_changes_total,
                values: report
                    .audit_drift
                    .iter()
                    .take(crate::telemetry::status::AuditStatus::MAX_VALUES)
                    .cloned()
                    .collect(),
            };
            self.health.update_status(|d| d.audit = Some(audit));
        }
        self.health.set_cri_reachable(true);
        self.health.set_reconciled();
        self.metrics.set_ready(self.health.ready().is_ok());
        if let Some(k) = &self.specs {
            let (status, unavailable) = k.status();
            self.health.set_degraded(
                "kubernetes-api",
                unavailable.map(|why| {
                    format!(
                        "{why}; exact pod specs unavailable, working from the runtime's data alone"
                    )
                }),
            );
            self.health.update_status(|d| d.kubernetes = Some(status));
        }
        self.health.update_status(|d| {
            d.generated_at_ms = crate::telemetry::status::now_ms();
            d.pods = counts.clone();
            d.last_reconcile = Some(crate::telemetry::status::ReconcileStatus {
                at_ms: crate::telemetry::status::now_ms(),
                duration_ms: report.duration.as_secs_f64() * 1e3,
                writes: report.writes.len() as u64,
                errors: report.errors.len() as u64,
                pods: report.pods,
            });
        });
        // Unchanged pods: the eviction loop's candidates are marked fresh
        // (their listing is current) instead of being built again; built
        // anew after a change, or when the loop holds none (a failed
        // listing, a refusal, a new loop after a reload).
        if let Some(ev) = &self.eviction {
            if !(same_pods && ev.pods_current()) {
                let sandboxes = listing
                    .live
                    .iter()
                    .map(|p| (p.pod.uid.clone(), p.sandbox_id.clone()))
                    .collect();
                ev.update_pods(crate::runtime::eviction_service::candidates(
                    &listing.pods,
                    &sandboxes,
                    &self.layout,
                ));
            }
        }
        if !same_pods {
            self.last_pods = Some(LastPods {
                counts,
                sandboxes: listing
                    .live
                    .iter()
                    .map(|p| (p.pod.uid.clone(), p.sandbox_id.clone()))
                    .collect(),
            });
        }
        if !self.notified_ready {
            self.notified_ready = true;
            let _ = crate::telemetry::notify::ready(&format!(
                "reconciled {} pods, {} writes",
                report.pods,
                report.writes.len()
            ));
        }
    }

    fn reconciled_again(&mut self, report: &ReconcileReport, listing: &Listing) {
        // Anything to report (writes, failures, orphans; audit mode, whose
        // drift report must also clear): the full pass. Otherwise only the
        // pass's own figures: the pod counts,
        // the eviction candidates and the API status are those of the same
        // listing, already published.
        let quiet = report.writes.is_empty()
            && report.errors.is_empty()
            && report.failed_writes == 0
            && report.orphans_removed.is_empty()
            && report.audit_drift.is_empty()
            && report.audit_changes == 0;
        // (The eviction loop's pods are marked current; after a failure
        // there are none to mark: published in full.)
        let feed_current = self.eviction.as_ref().is_none_or(|ev| ev.pods_current());
        if !quiet || !feed_current || !self.notified_ready || self.specs.is_some() || self.audit {
            return self.reconciled(report, listing);
        }
        self.metrics.reconcile_done(report.duration);
        self.health.set_problem("cgroup_writes", None);
        self.health.set_cri_reachable(true);
        self.health.set_reconciled();
        self.metrics.set_ready(self.health.ready().is_ok());
        self.health.update_status(|d| {
            let now = crate::telemetry::status::now_ms();
            d.generated_at_ms = now;
            d.last_reconcile = Some(crate::telemetry::status::ReconcileStatus {
                at_ms: now,
                duration_ms: report.duration.as_secs_f64() * 1e3,
                writes: 0,
                errors: 0,
                pods: report.pods,
            });
        });
    }

    fn source_failed(&mut self, error: &SourceError) {
        self.metrics
            .error(crate::telemetry::metrics::ErrorKind::PodSource);
        if let Some(ev) = &self.eviction {
            ev.pods_unavailable(error.to_string());
        }
        if let SourceError::Cri(e) = error {
            self.health.set_cri_problem(if e.is_too_large() {
                format!("container runtime (CRI) answer too large to use (node unmanaged): {e}")
            } else {
                format!("container runtime (CRI) not reachable: {e}")
            });
            self.metrics.set_ready(false);
        }
    }

    fn call_pending(&mut self, what: Option<&str>) {
        self.health.set_cri_pending(what);
    }

    fn refused(&mut self, why: Option<&ParentMismatch>) {
        match why {
            Some(e) => {
                let msg = e.to_string();
                if self.refused_logged.as_deref() != Some(msg.as_str()) {
                    tracing::error!("{msg}; writing nothing and staying not ready until the configuration matches");
                    self.metrics
                        .error(crate::telemetry::metrics::ErrorKind::ParentMismatch);
                    self.refused_logged = Some(msg);
                }
                self.health.set_refused(Some(format!(
                    "cgroup parents of {} pod(s) do not match cgroupRoot/cgroupDriver",
                    e.pods.len()
                )));
                if let Some(ev) = &self.eviction {
                    ev.pods_unavailable("pod cgroups are not where the configuration says".into());
                }
            }
            None => {
                tracing::info!("the runtime's pod cgroup parents match the configuration again");
                self.refused_logged = None;
                self.health.set_refused(None);
            }
        }
        self.metrics.set_ready(self.health.ready().is_ok());
    }

    fn runtime_events(&mut self, state: EventsState, why: Option<&str>) {
        let why = why.unwrap_or("?");
        let text = match state {
            EventsState::Live => "live".to_string(),
            EventsState::Down => format!("down: {why}"),
            EventsState::Unsupported => format!("unsupported: {why}"),
        };
        self.health.update_status(|d| d.runtime_events = Some(text));
    }

    fn heartbeat(&mut self) {
        self.health.beat();
        let lost = crate::telemetry::log::log_write_errors();
        for _ in self.log_errors_reported..lost {
            self.metrics
                .error(crate::telemetry::metrics::ErrorKind::LogWrite);
        }
        self.log_errors_reported = lost;
        if let Some((every, last)) = self.watchdog.as_mut() {
            if last.elapsed() >= *every {
                let _ = crate::telemetry::notify::watchdog();
                *last = Instant::now();
            }
        }
    }

    fn reload(&mut self) -> Option<Reloaded> {
        let _ = crate::telemetry::notify::reloading();
        let out = self.reloader.as_mut().and_then(|f| f());
        let _ = crate::telemetry::notify::ready("configuration reloaded");
        let (r, swap) = out?;
        self.dry_run = r.dry_run;
        self.layout = r.plan.layout.clone();
        if let EvictionSwap::Replace(ev) = swap {
            self.eviction = ev;
        }
        self.health.update_status(|d| {
            d.set_setup(r.dry_run, Some(r.plan.layout.version), r.plan.layout.driver);
        });
        Some(r)
    }
}
