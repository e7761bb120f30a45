//! `qosd run`: the enforcement loop.
//!
//! One reconcile = list pods (CRI or manifests) → classify → plan → apply
//! the writes that differ (or record them, dry run) → remove orphaned pod
//! cgroups that stayed empty for the grace period. The loop reconciles on a
//! timer and promptly when the set of sandboxes changes (cheap relist).
//! The eviction watcher runs beside it on its own thread
//! ([`crate::runtime::eviction`]); see docs/design.md.
//!
//! [`Daemon`] holds the loop's state, with one method per event (timer,
//! pod cgroup events, runtime events, drift, reload) saying what to do
//! next ([`Step`]) and [`Daemon::tick`] running a reconcile; the clock
//! ([`Clock`]) and the pod source ([`PodSource`]) are injected. `app`
//! installs the signal handlers and hands the loop [`Controls`].
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
    /// Where processes' `oom_score_adj` files are (`/proc`).
    pub(crate) proc_root: std::path::PathBuf,
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

/// The clock the loop reads (tests use a fake one).
pub(crate) trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
pub(crate) struct SystemClock;
impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// The pod source as the loop uses it: implemented for [`Source`].
pub(crate) trait PodSource: Send + Sync {
    /// What changes when sandboxes or containers come, go or change state.
    fn fingerprint(
        &self,
    ) -> impl std::future::Future<Output = Result<Vec<String>, SourceError>> + Send;
    /// A full listing.
    fn list(&self) -> impl std::future::Future<Output = Result<Listing, SourceError>> + Send;
    /// The API server's change key (`None`: no API server source).
    fn spec_key(&self) -> Option<String>;
    /// Ask every container's status again at the next listing.
    fn resync(&self);
    /// Forget these containers' statuses.
    fn forget_containers(&self, ids: &[String]);
    /// Ask every container about again (restored statuses).
    fn recheck_containers(&self);
    /// The runtime's client (`None`: manifests).
    fn cri(&self) -> Option<&qosd_node::cri::CriClient>;
}

impl PodSource for Source {
    fn fingerprint(
        &self,
    ) -> impl std::future::Future<Output = Result<Vec<String>, SourceError>> + Send {
        Source::fingerprint(self)
    }
    fn list(&self) -> impl std::future::Future<Output = Result<Listing, SourceError>> + Send {
        Source::list(self)
    }
    fn spec_key(&self) -> Option<String> {
        Source::spec_key(self)
    }
    fn resync(&self) {
        Source::resync(self)
    }
    fn forget_containers(&self, ids: &[String]) {
        Source::forget_containers(self, ids)
    }
    fn recheck_containers(&self) {
        Source::recheck_containers(self)
    }
    fn cri(&self) -> Option<&qosd_node::cri::CriClient> {
        match self {
            Source::Cri { client, .. } => Some(client),
            Source::Manifests(..) => None,
        }
    }
}

/// Run the daemon loop until a stop (or one pass with `once`).
pub(crate) async fn run_loop(
    opts: RunOptions,
    controls: &mut Controls,
    observer: &mut dyn Observer,
) -> anyhow::Result<Outcome> {
    // `--once` gives up when the runtime stays away; the daemon keeps
    // waiting for it (not ready meanwhile), as a node agent must.
    let mut unreachable = crate::telemetry::log::Repeats::default();
    let mut source = loop {
        let connecting = Source::connect(&opts.source, opts.connect, opts.machine_memory_bytes);
        let Some(attempt) = waiting(connecting, "connect", observer, controls).await else {
            return Ok(Outcome::Stopped);
        };
        match attempt {
            Ok(s) => {
                if let Some(n) = unreachable.recovered() {
                    tracing::info!(failures = n, "pod source reachable");
                }
                break s;
            }
            Err(e) if opts.once => return Err(e.into()),
            Err(e) => {
                // Logged on the first failure, then once a minute with a count.
                if let Some(n) = unreachable.failed(Instant::now()) {
                    tracing::warn!(error = %e, failures = n, "pod source not reachable at start; still trying");
                }
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
    let store = match &opts.state_dir {
        Some(dir) if !opts.once => source.status_store(&opts.source, dir),
        _ => None,
    };
    let mode = if opts.audit {
        qosd_node::sys::apply::Mode::Audit
    } else if opts.dry_run {
        qosd_node::sys::apply::Mode::DryRun
    } else {
        qosd_node::sys::apply::Mode::Real
    };
    let reconciler = Reconciler::with_mode(opts.plan.clone(), mode, opts.orphan_grace);
    let cpu = match &opts.cpu_manager {
        Some(s) => crate::runtime::cpu_manager::CpuManager::start(s, opts.dry_run || opts.audit)?,
        None => None,
    };
    if cpu.is_some() && !matches!(source, Source::Cri { .. }) {
        tracing::warn!("CPU manager: cpusets are applied through the CRI only; with manifests nothing is applied");
    }
    // Container processes' oom_score_adj: through the CRI only (the
    // runtime names each container's cgroup).
    let oom = matches!(source, Source::Cri { .. }).then(|| {
        crate::runtime::oom_score::OomScores::new(opts.proc_root.clone(), opts.machine_memory_bytes)
    });
    let parts = Parts {
        source,
        reconciler,
        cpu,
        store,
        clock: Arc::new(SystemClock),
        oom,
    };
    if opts.once {
        return Daemon::once(parts, observer).await;
    }
    // The runtime's event stream (containerd): while it is live, a timer
    // tick with no event since the last listing lists nothing; an event
    // relists like a pod cgroup event. Not live (not yet, runtime without
    // the API, stream ended): every reconcile lists, as without it.
    let (feed, prober) = match &opts.source {
        PodSourceSpec::Cri { endpoint } => {
            match qosd_node::cri::events::spawn(endpoint, opts.connect.connect_timeout) {
                Ok((rx, p)) => (Some(rx), Some(p)),
                Err(_) => (None, None),
            }
        }
        PodSourceSpec::Manifests(..) => (None, None),
    };
    let intervals = (opts.reconcile_interval, opts.relist_interval);
    let mut daemon = Daemon::new(parts, opts.plan, feed, prober);
    daemon.run(intervals, controls, observer).await
}

/// What a daemon is made of: the pod source, the cgroup writer, the CPU
/// manager, the status store and the clock.
pub(crate) struct Parts<S> {
    pub(crate) source: S,
    pub(crate) reconciler: Reconciler,
    pub(crate) cpu: Option<crate::runtime::cpu_manager::CpuManager>,
    pub(crate) store: Option<qosd_node::pods::status_store::StatusStore>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Container processes' `oom_score_adj` (`None`: not handled).
    pub(crate) oom: Option<crate::runtime::oom_score::OomScores>,
}

/// What an event asks the loop to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Wait for the next event.
    Wait,
    /// Reconcile (see [`Tick`]).
    Run(Tick),
    /// Stop: a stop was asked for while a call was pending.
    Stop,
}

/// What woke the loop.
enum Event {
    Stop(&'static str),
    Reload,
    ReconcileTimer,
    RelistTimer,
    PodEvents(std::io::Result<()>),
    Feed(bool),
    DriftReadable(std::io::Result<()>),
    DriftDue,
    RelistDue,
    RecheckDue,
}

/// The reconcile loop's state. Each event is one method returning what to
/// do next; [`Daemon::run`] waits for the events and calls them.
pub(crate) struct Daemon<S> {
    /// Registered with the runtime; the reconciler owns the fd (and
    /// outlives this: declared before it, so dropped first).
    drift: DriftState,
    reconciler: Reconciler,
    source: S,
    clock: Arc<dyn Clock>,
    cpu: Option<crate::runtime::cpu_manager::CpuManager>,
    store: Option<qosd_node::pods::status_store::StatusStore>,
    /// The settings' plan at start: where the pod cgroups are watched.
    events_plan: PlanConfig,
    refused: bool,
    source_down: bool,
    /// The last full listing and the fingerprint it was taken at: a full
    /// inventory (a status call per sandbox and container) is only needed
    /// when the fingerprint changes, or every `RESYNC` to catch in-place
    /// resource updates; timer reconciles in between reuse it and only
    /// re-read the cgroups (drift). A reconcile borrows it (no copy).
    cached: Option<(Vec<String>, Listing, Instant)>,
    /// Each listing taken gets the next number: a pass over the same
    /// listing reuses the plan without comparing the pods, and its parents
    /// were checked (the settings change only on a reload, which lists).
    listing_id: u64,
    parents_checked: Option<u64>,
    /// Free memory back to the kernel after passes over new listings (at
    /// most every `TRIM_GAP`): glibc would keep each burst's peak.
    trim: qosd_node::sys::malloc::TrimPacer,
    last_resync: Instant,
    /// The event stream's subscription (epoch) that was live at the last
    /// resync: while that same subscription stays live, every in-place
    /// update since reached the loop as an event (see [`resync_due`]).
    resync_epoch: Option<u64>,
    /// Pod cgroups appearing / going away (CRI source): a relist shortly
    /// after each, instead of one every `relist_interval`. Started after
    /// the first reconcile (which creates kubepods and the QoS cgroups).
    pod_events: PodEventState,
    spec_key: Option<String>,
    feed: Option<tokio::sync::watch::Receiver<qosd_node::cri::events::Feed>>,
    prober: Option<qosd_node::cri::events::Prober>,
    gate: crate::runtime::runtime_events::EventGate,
    /// An in-place update was announced: list even if the ids and states
    /// did not change (the updated containers' statuses were forgotten).
    force_list: bool,
    /// Restored container statuses: every container is asked about again
    /// right after the first reconcile (an in-place resize while qosd was
    /// down shows in no listing).
    recheck_restored: bool,
    recheck_at: Option<tokio::time::Instant>,
    /// Container processes' `oom_score_adj` (CRI source only).
    oom: Option<crate::runtime::oom_score::OomScores>,
    /// Reconciles since the last `oom_score_adj` pass ([`oom_rescan_due`]).
    oom_idle_turns: u32,
}

impl<S: PodSource> Daemon<S> {
    /// One pass (`--once`).
    async fn once(mut parts: Parts<S>, observer: &mut dyn Observer) -> anyhow::Result<Outcome> {
        let listing = parts.source.list().await?;
        // Never build a parallel tree: refuse before any write.
        check_parents(parts.reconciler.config(), &listing)?;
        let mut report =
            parts
                .reconciler
                .reconcile(&listing.pods, listing.all_uids.as_ref(), parts.clock.now());
        if let Some(oom) = parts.oom.as_mut() {
            report.oom_score_adj = Some(oom.pass(
                parts.reconciler.mode(),
                parts.reconciler.config(),
                &listing.live,
            ));
        }
        if let (Some(cpu), Some(client)) = (parts.cpu.as_mut(), parts.source.cri()) {
            cpu.reconcile(client, &listing.live).await;
        }
        observer.reconciled(&report, &listing);
        Ok(Outcome::Once(Box::new(report)))
    }

    pub(crate) fn new(
        parts: Parts<S>,
        events_plan: PlanConfig,
        feed: Option<tokio::sync::watch::Receiver<qosd_node::cri::events::Feed>>,
        prober: Option<qosd_node::cri::events::Prober>,
    ) -> Daemon<S> {
        let Parts {
            source,
            mut reconciler,
            cpu,
            mut store,
            clock,
            oom,
        } = parts;
        let restored_containers = store.as_mut().map_or(0, |s| s.load());
        // Planned files written by anyone: reconcile (with the last
        // listing) soon after, instead of at the next timer reconcile.
        reconciler.watch_files();
        let drift = DriftState::new(reconciler.drift_fd());
        let spec_key = source.spec_key();
        let now = clock.now();
        Daemon {
            drift,
            reconciler,
            source,
            clock,
            cpu,
            store,
            events_plan,
            refused: false,
            source_down: false,
            cached: None,
            listing_id: 0,
            parents_checked: None,
            trim: qosd_node::sys::malloc::TrimPacer::new(TRIM_GAP),
            last_resync: now,
            resync_epoch: None,
            pod_events: PodEventState::default(),
            spec_key,
            feed,
            prober,
            gate: crate::runtime::runtime_events::EventGate::default(),
            force_list: false,
            recheck_restored: restored_containers > 0,
            recheck_at: None,
            oom,
            oom_idle_turns: 0,
        }
    }

    /// Wait for events and handle them until a stop.
    async fn run(
        &mut self,
        intervals: (Duration, Duration),
        controls: &mut Controls,
        observer: &mut dyn Observer,
    ) -> anyhow::Result<Outcome> {
        let ticker = |every: Duration| {
            let mut t = tokio::time::interval(every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        };
        let mut intervals = intervals;
        let mut reconcile_tick = ticker(intervals.0);
        let mut relist_tick = ticker(intervals.1);
        // The loop may sleep a whole reconcile interval when the watchdog
        // (pinged from the heartbeat) allows it.
        let watchdog = crate::telemetry::notify::watchdog_interval();
        loop {
            let quiet_ok = watchdog.is_none_or(|w| w > intervals.0);
            observer.heartbeat();
            let relist_due = self.pod_events.due();
            // Something announces pod changes: the relist timer is not needed.
            let evented = self.pod_events.active() || self.gate.quiet();
            let event = tokio::select! {
                c = controls.next() => match c {
                    Control::Stop(why) => Event::Stop(why),
                    Control::Reload => Event::Reload,
                },
                _ = reconcile_tick.tick() => Event::ReconcileTimer,
                // With pod events the relist timer is not needed: the
                // reconcile timer (which relists too) is the safety net.
                // The API server's view (when configured) is checked on the
                // relist timer still: its change key costs no runtime call.
                // Without an API server source, nothing is left for it to
                // check (the loop still turns often enough for the systemd
                // watchdog).
                _ = relist_tick.tick(), if !(evented && self.spec_key.is_none() && quiet_ok) => Event::RelistTimer,
                r = self.pod_events.readable() => Event::PodEvents(r),
                changed = feed_changed(&mut self.feed) => Event::Feed(changed),
                r = self.drift.readable() => Event::DriftReadable(r),
                _ = sleep_until(self.drift.due) => Event::DriftDue,
                _ = sleep_until(relist_due) => Event::RelistDue,
                _ = sleep_until(self.recheck_at) => Event::RecheckDue,
            };
            let step = match event {
                Event::Stop(why) => {
                    stopping(why);
                    return Ok(Outcome::Stopped);
                }
                Event::Reload => {
                    if let Some(r) = self.reload(observer) {
                        let new = (r.reconcile_interval, r.relist_interval);
                        if intervals.0 != new.0 {
                            reconcile_tick = ticker(new.0);
                        }
                        if intervals.1 != new.1 {
                            relist_tick = ticker(new.1);
                        }
                        intervals = new;
                    }
                    Step::Run(Tick::Reconcile)
                }
                Event::ReconcileTimer => Step::Run(Tick::Reconcile),
                Event::RelistTimer => self.relist_timer(evented),
                Event::PodEvents(r) => self.pod_events_readable(r),
                Event::Feed(changed) => self.feed_changed(changed, observer),
                Event::DriftReadable(r) => self.drift_readable(r),
                Event::DriftDue => self.drift_due(),
                Event::RelistDue => self.relist_due(),
                Event::RecheckDue => self.recheck_due(),
            };
            if let Step::Run(tick) = step {
                if self.tick(tick, controls, observer).await == Step::Stop {
                    return Ok(Outcome::Stopped);
                }
            }
        }
    }

    /// SIGHUP: the new settings (`None`: kept); the next listing is full.
    /// The caller reconciles next.
    fn reload(&mut self, observer: &mut dyn Observer) -> Option<Reloaded> {
        let r = observer.reload();
        if let Some(r) = &r {
            self.reconciler.reconfigure(r.plan.clone(), r.dry_run);
        }
        self.cached = None;
        self.parents_checked = None;
        r
    }

    /// The relist timer: with events on, only a change of the API
    /// server's view relists.
    fn relist_timer(&mut self, evented: bool) -> Step {
        if evented {
            let k = self.source.spec_key();
            if k == self.spec_key {
                return Step::Wait;
            }
            self.spec_key = k;
        }
        Step::Run(Tick::Relist)
    }

    /// Pod cgroups came or went.
    fn pod_events_readable(&mut self, r: std::io::Result<()>) -> Step {
        if self.pod_events.on_readable(r) {
            self.reconciler.files_may_have_moved();
        }
        Step::Wait
    }

    /// The runtime's event feed changed (`false`: it ended).
    fn feed_changed(&mut self, changed: bool, observer: &mut dyn Observer) -> Step {
        match (changed, self.feed.as_mut()) {
            (true, Some(rx)) => {
                let f = rx.borrow_and_update().clone();
                self.take_feed(&f, observer);
            }
            _ => self.feed = None,
        }
        Step::Wait
    }

    /// A planned file was written.
    fn drift_readable(&mut self, r: std::io::Result<()>) -> Step {
        self.drift.on_readable(r);
        Step::Wait
    }

    /// The drift reconcile is due.
    fn drift_due(&mut self) -> Step {
        self.drift.fired();
        Step::Run(Tick::Drift)
    }

    /// A relist scheduled after pod events is due.
    fn relist_due(&mut self) -> Step {
        self.pod_events.relisting();
        Step::Run(Tick::Relist)
    }

    /// The restored statuses are to be asked about again.
    fn recheck_due(&mut self) -> Step {
        self.recheck_at = None;
        self.cached = None;
        Step::Run(Tick::Reconcile)
    }

    /// Take in a new value of the runtime's event feed: schedule the relist
    /// it asks for, forget the statuses of containers updated in place,
    /// report a change of state.
    fn take_feed(&mut self, f: &qosd_node::cri::events::Feed, observer: &mut dyn Observer) {
        let u = self.gate.observe(f);
        if u.relist {
            self.pod_events.schedule();
        }
        if u.forget_all {
            self.source.resync();
            self.force_list = true;
        } else if !u.updated.is_empty() {
            self.source.forget_containers(&u.updated);
            self.force_list = true;
        }
        if let Some(state) = u.became {
            log_events_state(state, f.down.as_deref());
            observer.runtime_events(state, f.down.as_deref());
        }
    }

    /// Whether the last listing is fresh: no older than `RESYNC_LIVE`
    /// while the runtime's event stream is live (each change arrives as an
    /// event), else `RESYNC`.
    fn cached_fresh(&self, at: Instant) -> bool {
        let every = if self.gate.live_epoch().is_some() {
            RESYNC_LIVE
        } else {
            RESYNC
        };
        self.clock.now().saturating_duration_since(at) < every
    }

    /// What this tick reconciles with: the last listing when a planned
    /// file was written (re-read the written files, no runtime call), or on
    /// a timer tick while the runtime's event stream says that nothing
    /// changed since it was taken (and the safety relist is not due);
    /// otherwise a change check and, when it moved, a listing. `None`: stop.
    async fn reuses(
        &mut self,
        tick: Tick,
        controls: &mut Controls,
        observer: &mut dyn Observer,
    ) -> Option<bool> {
        let reuse = !self.source_down
            && match (tick, &self.cached) {
                // (Not when a container was updated in place since: its
                // new values must be listed before anything is rewritten.)
                (Tick::Drift, Some(_)) => !self.force_list,
                (Tick::Reconcile, Some((_, _, at))) => {
                    self.gate.quiet() && !self.force_list && self.cached_fresh(*at)
                }
                _ => false,
            };
        if !(reuse && tick == Tick::Reconcile) {
            return Some(reuse);
        }
        // The stream still delivers: a marker published now comes back on
        // it, after every change made before it. A runtime that does not
        // answer fails the probe: listed (and reported) as without events.
        let prober = self.prober.as_ref();
        let probe = async {
            match prober {
                Some(p) => p.probe().await,
                None => false,
            }
        };
        let ok = waiting(probe, "runtime events marker", observer, controls).await?;
        if let Some(rx) = self.feed.as_mut() {
            let f = rx.borrow_and_update().clone();
            self.take_feed(&f, observer);
        }
        Some(ok && self.gate.quiet() && !self.force_list)
    }

    /// A change check and, when the pods changed (or the last listing is
    /// older than `RESYNC`), a listing.
    async fn relist(
        &mut self,
        tick: Tick,
        controls: &mut Controls,
        observer: &mut dyn Observer,
    ) -> Listed {
        self.gate.listing_started();
        // Calls retry while the runtime is down: stay stoppable, and alive
        // (a hung runtime is reported as such, not as a dead loop).
        let Some(fp) = waiting(
            self.source.fingerprint(),
            "ListPodSandbox",
            observer,
            controls,
        )
        .await
        else {
            return Listed::Stop;
        };
        let fp = match fp {
            Ok(fp) => fp,
            Err(e) => {
                self.source_failed(&e, "pod source unavailable", observer);
                return Listed::Failed;
            }
        };
        let fresh = !self.force_list
            && self
                .cached
                .as_ref()
                .is_some_and(|(cfp, _, at)| *cfp == fp && self.cached_fresh(*at));
        if fresh {
            self.gate.listing_done();
            return if tick == Tick::Relist {
                Listed::Unchanged
            } else {
                Listed::Same
            };
        }
        let now = self.clock.now();
        let live_epoch = self.gate.live_epoch();
        if resync_due(
            now.saturating_duration_since(self.last_resync),
            self.resync_epoch,
            live_epoch,
        ) {
            // Container statuses are asked again (in-place resource
            // updates); sandbox statuses never change.
            self.source.resync();
            self.last_resync = now;
            self.resync_epoch = live_epoch;
        }
        let Some(listed) = waiting(self.source.list(), "pod listing", observer, controls).await
        else {
            return Listed::Stop;
        };
        match listed {
            Ok(listing) => {
                if self.source_down {
                    tracing::info!("pod source is back");
                    self.source_down = false;
                }
                self.cached = Some((fp, listing, self.clock.now()));
                self.listing_id += 1;
                self.gate.listing_done();
                self.force_list = false;
                Listed::New
            }
            Err(e) => {
                self.source_failed(&e, "pod listing failed", observer);
                Listed::Failed
            }
        }
    }

    /// A pod-source call failed: warn when the source goes down (once, not
    /// per retry), mark it down and report it; relist in full once it
    /// answers again.
    fn source_failed(&mut self, e: &SourceError, what: &str, observer: &mut dyn Observer) {
        if !self.source_down {
            tracing::warn!(error = %e, "{what}; keeping the last state, retrying");
        }
        self.source_down = true;
        observer.source_failed(e);
        self.cached = None;
        self.gate.listing_failed();
    }

    /// A reconcile: list when needed, then plan and write.
    pub(crate) async fn tick(
        &mut self,
        tick: Tick,
        controls: &mut Controls,
        observer: &mut dyn Observer,
    ) -> Step {
        let Some(reuse) = self.reuses(tick, controls, observer).await else {
            return Step::Stop;
        };
        let tick = if tick == Tick::Drift {
            Tick::Reconcile
        } else {
            tick
        };
        // Whether this turn took a new listing (else: the last one again).
        let mut new_listing = false;
        if !reuse {
            match self.relist(tick, controls, observer).await {
                Listed::Stop => return Step::Stop,
                Listed::Failed | Listed::Unchanged => return Step::Wait,
                Listed::Same => {}
                Listed::New => new_listing = true,
            }
        }
        self.reconcile(new_listing, observer).await;
        Step::Wait
    }

    /// Reconcile with the last listing (`new_listing`: taken this turn).
    async fn reconcile(&mut self, mut new_listing: bool, observer: &mut dyn Observer) {
        let Some((_, listing, _)) = self.cached.as_ref() else {
            return;
        };
        if self.parents_checked != Some(self.listing_id) {
            match check_parents(self.reconciler.config(), listing) {
                Err(e) => {
                    // Not ready, nothing written, until the config matches.
                    observer.refused(Some(&e));
                    self.refused = true;
                    return;
                }
                Ok(()) if self.refused => {
                    observer.refused(None);
                    self.refused = false;
                    new_listing = true;
                }
                Ok(()) => {}
            }
            self.parents_checked = Some(self.listing_id);
        }
        let mut report = self.reconciler.reconcile_listing(
            self.listing_id,
            &listing.pods,
            listing.all_uids.as_ref(),
            self.clock.now(),
        );
        if let Some(oom) = self.oom.as_mut() {
            let live = self.gate.live_epoch().is_some();
            if new_listing || oom_rescan_due(self.oom_idle_turns, live) {
                self.oom_idle_turns = 0;
                report.oom_score_adj = Some(oom.pass(
                    self.reconciler.mode(),
                    self.reconciler.config(),
                    &listing.live,
                ));
            } else {
                self.oom_idle_turns += 1;
            }
        }
        if let (Some(cpu), Some(client)) = (self.cpu.as_mut(), self.source.cri()) {
            cpu.reconcile(client, &listing.live).await;
        }
        tracing::debug!(
            pods = report.pods,
            writes = report.writes.len(),
            unchanged = report.unchanged,
            unread = report.unread,
            errors = report.errors.len(),
            plans = self.reconciler.plans_built(),
            walks = self.reconciler.plan_walks(),
            ms = report.duration.as_secs_f64() * 1e3,
            "reconciled"
        );
        if new_listing {
            observer.reconciled(&report, listing);
            self.trim.busy();
        } else {
            observer.reconciled_again(&report, listing);
        }
        if self.trim.due(self.clock.now()) {
            let released = qosd_node::sys::malloc::release_free_memory();
            tracing::trace!(released, "free heap memory returned to the kernel");
        }
        if self.source.cri().is_some() {
            self.pod_events.start(&self.events_plan);
        }
        if self.recheck_restored {
            self.recheck_restored = false;
            self.source.recheck_containers();
            self.recheck_at = Some(tokio::time::Instant::now());
        } else if let Some(s) = self.store.as_mut() {
            if self.recheck_at.is_none() {
                s.maybe_save();
            }
        }
    }
}

/// What a change check and listing gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listed {
    /// A new listing: reconcile with it.
    New,
    /// The pods did not change: reconcile with the last listing.
    Same,
    /// The pods did not change and nothing asked for a reconcile.
    Unchanged,
    /// The source failed (reported): nothing is reconciled.
    Failed,
    /// A stop was asked for meanwhile.
    Stop,
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

/// What a reconcile was asked by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tick {
    /// The reconcile timer (or SIGHUP): reconcile even if nothing changed.
    Reconcile,
    /// The relist timer: reconcile only if the pods changed.
    Relist,
    /// A planned cgroup file was written: reconcile with the last listing.
    Drift,
}

/// Container processes' `oom_score_adj` are checked at every new listing
/// (a container started or changed: its processes are new) and otherwise
/// at every [`OOM_RESCAN_TURNS`]th reconcile (once a minute at the default
/// 10 s `reconcileInterval`), or every [`OOM_RESCAN_TURNS_LIVE`]th while
/// the runtime's event stream is live (once every 10 minutes: each
/// container start arrives as an event and a new listing). A value changed
/// later by hand or by the process itself is put back then. The kubelet
/// sets it once, when a container starts; a pass reads every container's
/// processes, more than the rest of an idle reconcile costs (BENCHMARKS.md,
/// "Idle CPU").
fn oom_rescan_due(idle_turns: u32, live: bool) -> bool {
    let every = if live {
        OOM_RESCAN_TURNS_LIVE
    } else {
        OOM_RESCAN_TURNS
    };
    idle_turns + 1 >= every
}

/// See [`oom_rescan_due`].
const OOM_RESCAN_TURNS: u32 = 6;
/// See [`oom_rescan_due`].
const OOM_RESCAN_TURNS_LIVE: u32 = 60;

/// Reconciles after planned files are written (drift), at most every
/// [`DRIFT_SPACING`]: a writer fighting qosd gets a correction a second,
/// not a busy loop.
const DRIFT_DEBOUNCE: Duration = Duration::from_millis(50);
const DRIFT_SPACING: Duration = Duration::from_secs(1);

/// The inotify fd of the reconciler's watched planned files
/// ([`Reconciler::watch_files`]) and the drift reconcile it schedules.
struct DriftState {
    /// Registered with the runtime; the reconciler owns the fd (and
    /// outlives this: declared after it in `Daemon`).
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::RawFd>>,
    due: Option<tokio::time::Instant>,
    last: Option<tokio::time::Instant>,
}

impl DriftState {
    fn new(fd: Option<std::os::fd::RawFd>) -> DriftState {
        // SAFETY: the reconciler owns the fd and keeps it open for as long
        // as it lives (a reload moves it to the new settings); `Daemon`
        // declares this state before it, so this is dropped first.
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

/// Without a live event stream from the runtime, a full listing at least
/// this often, even when no sandbox or container changed (in-place
/// resource updates do not show in the fingerprint), and every container's
/// status asked again as often: the kubelet's one-minute cadence.
const RESYNC: Duration = Duration::from_secs(60);

/// While the runtime's event stream is live, the listing is taken afresh
/// at least this often: every change reaches the loop as an event (and
/// the marker each timer tick publishes proves the stream still delivers),
/// so this listing is only the safety net, and at idle it is most of the
/// daemon's CPU (docs/design.md, "Threads and loops").
const RESYNC_LIVE: Duration = Duration::from_secs(600);

/// Every container's status is asked again this often while one
/// subscription of the runtime's event stream has stayed live since the
/// last time: each in-place update arrives as a `/containers/update` event
/// naming the container, whose status alone is asked again at once.
const STATUS_RESYNC_LIVE: Duration = Duration::from_secs(600);

/// Whether every container's status is to be asked again: `RESYNC` after
/// the last time, or `STATUS_RESYNC_LIVE` when the event stream's
/// subscription live then (`at_epoch`) is still the live one (`live_epoch`).
fn resync_due(since: Duration, at_epoch: Option<u64>, live_epoch: Option<u64>) -> bool {
    let covered = at_epoch.is_some() && at_epoch == live_epoch;
    since >= if covered { STATUS_RESYNC_LIVE } else { RESYNC }
}

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

impl ServiceObserver {
    /// The pass's container processes' `oom_score_adj` in metrics and
    /// `/status`.
    fn publish_oom(&mut self, report: &ReconcileReport) {
        let Some(o) = &report.oom_score_adj else {
            return;
        };
        let real_writes = if self.dry_run { 0 } else { o.writes.len() };
        self.metrics
            .oom_score_adj(o.differing.len(), real_writes, o.refused.len());
        let mode = if self.audit {
            "audit"
        } else if self.dry_run {
            "dry-run"
        } else {
            "enforce"
        };
        let max = crate::telemetry::status::AuditStatus::MAX_VALUES;
        let changes = (o.changes + real_writes) as u64;
        self.health.update_status(|d| {
            let prev = d.oom_score_adj.take().unwrap_or_default();
            d.oom_score_adj = Some(crate::telemetry::status::OomScoreStatus {
                mode: mode.to_string(),
                processes: o.processes,
                differing: o.differing.len(),
                written_total: prev.written_total + real_writes as u64,
                refused_containers: o.refused.len(),
                changes_total: prev.changes_total + changes,
                values: o.differing.iter().take(max).cloned().collect(),
                refused: o.refused.iter().take(max).cloned().collect(),
            });
        });
    }

    /// `cgroupEnforcement: audit`: the pass's drift in metrics and `/status`.
    fn publish_audit(&mut self, report: &ReconcileReport) {
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

    /// Hand the listing's pods to the eviction loop.
    fn feed_eviction(&self, same_pods: bool, listing: &Listing) {
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
            self.publish_audit(report);
        }
        self.publish_oom(report);
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
            d.generated_at_ms = Some(crate::telemetry::status::now_ms());
            d.pods = counts.clone();
            d.pods_unknown = false;
            d.last_reconcile = Some(crate::telemetry::status::ReconcileStatus {
                at_ms: crate::telemetry::status::now_ms(),
                duration_ms: report.duration.as_secs_f64() * 1e3,
                writes: report.writes.len() as u64,
                errors: report.errors.len() as u64,
                pods: report.pods,
            });
        });
        self.feed_eviction(same_pods, listing);
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
        self.publish_oom(report);
        self.health.set_problem("cgroup_writes", None);
        self.health.set_cri_reachable(true);
        self.health.set_reconciled();
        self.metrics.set_ready(self.health.ready().is_ok());
        self.health.update_status(|d| {
            let now = crate::telemetry::status::now_ms();
            d.generated_at_ms = Some(now);
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

#[cfg(test)]
mod tests {
    use super::*;
    use qosd_model::core::model::{CgroupDriver, CgroupVersion};
    use qosd_model::core::node::NodeResources;
    use qosd_model::policy::enforce::naming::CgroupLayout;
    use std::sync::Mutex;

    /// A clock that moves only when told to.
    struct FakeClock(Mutex<Instant>);
    impl FakeClock {
        fn advance(&self, by: Duration) {
            *self.0.lock().unwrap() += by;
        }
    }
    impl Clock for FakeClock {
        fn now(&self) -> Instant {
            *self.0.lock().unwrap()
        }
    }

    /// What the fake source answers and how often it was asked.
    #[derive(Default)]
    struct Fake {
        fingerprint: Vec<String>,
        failing: bool,
        hanging: bool,
        fingerprints: usize,
        lists: usize,
        resyncs: usize,
    }

    #[derive(Clone, Default)]
    struct FakeSource(Arc<Mutex<Fake>>);

    fn source_error() -> SourceError {
        let missing = std::path::PathBuf::from("/nonexistent/qosd-test-manifest.yaml");
        qosd_node::manifest::load_paths(&[missing])
            .expect_err("a missing manifest fails")
            .into()
    }

    impl FakeSource {
        fn set(&self, f: impl FnOnce(&mut Fake)) {
            f(&mut self.0.lock().unwrap())
        }
        fn get<T>(&self, f: impl FnOnce(&Fake) -> T) -> T {
            f(&self.0.lock().unwrap())
        }
    }

    impl PodSource for FakeSource {
        fn fingerprint(
            &self,
        ) -> impl std::future::Future<Output = Result<Vec<String>, SourceError>> + Send {
            let (r, hang) = {
                let mut f = self.0.lock().unwrap();
                f.fingerprints += 1;
                let r = if f.failing {
                    Err(source_error())
                } else {
                    Ok(f.fingerprint.clone())
                };
                (r, f.hanging)
            };
            async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                r
            }
        }
        fn list(&self) -> impl std::future::Future<Output = Result<Listing, SourceError>> + Send {
            let r = {
                let mut f = self.0.lock().unwrap();
                f.lists += 1;
                if f.failing {
                    Err(source_error())
                } else {
                    Ok(Listing {
                        all_uids: Some(Default::default()),
                        ..Default::default()
                    })
                }
            };
            async move { r }
        }
        fn spec_key(&self) -> Option<String> {
            None
        }
        fn resync(&self) {
            self.0.lock().unwrap().resyncs += 1;
        }
        fn forget_containers(&self, _ids: &[String]) {}
        fn recheck_containers(&self) {}
        fn cri(&self) -> Option<&qosd_node::cri::CriClient> {
            None
        }
    }

    /// Counts what the daemon reported.
    #[derive(Default)]
    struct Recorder {
        reconciled: usize,
        reconciled_again: usize,
        failures: usize,
        reloads: usize,
        /// Reconciles that checked processes' `oom_score_adj`.
        oom_passes: usize,
    }
    impl Observer for Recorder {
        fn reconciled(&mut self, report: &ReconcileReport, _listing: &Listing) {
            self.reconciled += 1;
            self.oom_passes += usize::from(report.oom_score_adj.is_some());
        }
        fn reconciled_again(&mut self, report: &ReconcileReport, _listing: &Listing) {
            self.reconciled_again += 1;
            self.oom_passes += usize::from(report.oom_score_adj.is_some());
        }
        fn source_failed(&mut self, _error: &SourceError) {
            self.failures += 1;
        }
        fn reload(&mut self) -> Option<Reloaded> {
            self.reloads += 1;
            None
        }
    }

    /// The log lines written while `f` runs (this thread).
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Logs {
        fn capture(&self) -> tracing::subscriber::DefaultGuard {
            let logs = self.clone();
            let sub = tracing_subscriber::fmt()
                .with_writer(move || logs.clone())
                .with_ansi(false)
                .finish();
            tracing::subscriber::set_default(sub)
        }
        fn count(&self, text: &str) -> usize {
            String::from_utf8_lossy(&self.0.lock().unwrap())
                .matches(text)
                .count()
        }
    }

    struct Harness {
        daemon: Daemon<FakeSource>,
        source: FakeSource,
        clock: Arc<FakeClock>,
        controls: Controls,
        control: tokio::sync::mpsc::UnboundedSender<Control>,
        observer: Recorder,
        _tree: tempfile::TempDir,
    }

    impl Harness {
        fn new() -> Harness {
            let tree = tempfile::tempdir().unwrap();
            for f in ["cgroup.controllers", "cgroup.subtree_control"] {
                std::fs::write(tree.path().join(f), "cpu memory pids\n").unwrap();
            }
            let layout = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Cgroupfs)
                .with_cgroupfs(tree.path());
            let plan = PlanConfig::new(layout, NodeResources::from_capacity(4000, 8 << 30));
            let reconciler = Reconciler::with_mode(
                plan.clone(),
                qosd_node::sys::apply::Mode::DryRun,
                Duration::from_secs(60),
            );
            let source = FakeSource::default();
            source.set(|f| f.fingerprint = vec!["a".into()]);
            let clock = Arc::new(FakeClock(Mutex::new(Instant::now())));
            let parts = Parts {
                source: source.clone(),
                reconciler,
                cpu: None,
                store: None,
                clock: clock.clone(),
                oom: None,
            };
            let (control, rx) = tokio::sync::mpsc::unbounded_channel();
            Harness {
                daemon: Daemon::new(parts, plan, None, None),
                source,
                clock,
                controls: Controls::new(rx),
                control,
                observer: Recorder::default(),
                _tree: tree,
            }
        }

        async fn tick(&mut self, tick: Tick) -> Step {
            self.daemon
                .tick(tick, &mut self.controls, &mut self.observer)
                .await
        }
    }

    #[test]
    fn oom_rescan_waits_longer_while_the_event_stream_is_live() {
        assert!(!oom_rescan_due(OOM_RESCAN_TURNS - 2, false));
        assert!(oom_rescan_due(OOM_RESCAN_TURNS - 1, false));
        assert!(!oom_rescan_due(OOM_RESCAN_TURNS - 1, true));
        assert!(!oom_rescan_due(OOM_RESCAN_TURNS_LIVE - 2, true));
        assert!(oom_rescan_due(OOM_RESCAN_TURNS_LIVE - 1, true));
    }

    #[tokio::test]
    async fn oom_score_adj_is_checked_at_a_new_listing_and_every_sixth_reconcile() {
        let mut h = Harness::new();
        let proc_root = tempfile::tempdir().unwrap();
        h.daemon.oom = Some(crate::runtime::oom_score::OomScores::new(
            proc_root.path().to_path_buf(),
            8 << 30,
        ));
        assert_eq!(h.tick(Tick::Reconcile).await, Step::Wait);
        assert_eq!(h.observer.oom_passes, 1, "a new listing is checked");
        for turn in 1..OOM_RESCAN_TURNS {
            h.clock.advance(Duration::from_secs(1));
            assert_eq!(h.tick(Tick::Reconcile).await, Step::Wait);
            assert_eq!(h.observer.oom_passes, 1, "turn {turn} reuses the check");
        }
        h.clock.advance(Duration::from_secs(1));
        assert_eq!(h.tick(Tick::Reconcile).await, Step::Wait);
        assert_eq!(h.observer.oom_passes, 2, "the rescan turn");
        assert_eq!(h.observer.reconciled, 1, "one listing only");
        // A changed listing is checked at once.
        h.source.set(|f| f.fingerprint = vec!["b".into()]);
        assert_eq!(h.tick(Tick::Reconcile).await, Step::Wait);
        assert_eq!(h.observer.reconciled, 2);
        assert_eq!(h.observer.oom_passes, 3);
    }

    #[tokio::test]
    async fn a_timer_tick_within_resync_with_the_same_fingerprint_reuses_the_listing() {
        let mut h = Harness::new();
        assert_eq!(h.tick(Tick::Reconcile).await, Step::Wait);
        assert_eq!(h.source.get(|f| (f.fingerprints, f.lists)), (1, 1));
        assert_eq!(h.observer.reconciled, 1);

        h.clock.advance(RESYNC - Duration::from_secs(1));
        assert_eq!(h.tick(Tick::Reconcile).await, Step::Wait);
        assert_eq!(h.source.get(|f| (f.fingerprints, f.lists)), (2, 1));
        assert_eq!(h.observer.reconciled_again, 1);

        // A relist tick with nothing changed reconciles nothing.
        assert_eq!(h.tick(Tick::Relist).await, Step::Wait);
        assert_eq!(h.source.get(|f| (f.fingerprints, f.lists)), (3, 1));
        assert_eq!((h.observer.reconciled, h.observer.reconciled_again), (1, 1));
    }

    #[tokio::test]
    async fn a_listing_older_than_resync_is_taken_again_with_statuses_asked_again() {
        let mut h = Harness::new();
        h.tick(Tick::Reconcile).await;
        h.clock.advance(RESYNC);
        h.tick(Tick::Reconcile).await;
        assert_eq!(h.source.get(|f| (f.lists, f.resyncs)), (2, 1));
        assert_eq!(h.observer.reconciled, 2);
    }

    #[test]
    fn statuses_are_asked_again_every_minute_unless_one_live_stream_covered_the_time() {
        let min = RESYNC;
        // No stream, or not live: every minute.
        assert!(!resync_due(min - Duration::from_secs(1), None, None));
        assert!(resync_due(min, None, None));
        assert!(resync_due(min, Some(3), None));
        // Live now, but not at the last resync: every minute.
        assert!(resync_due(min, None, Some(3)));
        // A new subscription since (updates in the gap were not seen).
        assert!(resync_due(min, Some(3), Some(4)));
        // The same subscription live throughout: the safety net only.
        assert!(!resync_due(min, Some(3), Some(3)));
        assert!(!resync_due(
            STATUS_RESYNC_LIVE - Duration::from_secs(1),
            Some(3),
            Some(3)
        ));
        assert!(resync_due(STATUS_RESYNC_LIVE, Some(3), Some(3)));
    }

    #[tokio::test]
    async fn with_a_live_stream_a_listing_older_than_resync_asks_no_status_again() {
        let mut h = Harness::new();
        let live = qosd_node::cri::events::Feed {
            live: true,
            epoch: 1,
            ..Default::default()
        };
        h.daemon.take_feed(&live, &mut h.observer);
        h.tick(Tick::Reconcile).await;
        assert_eq!(h.source.get(|f| (f.lists, f.resyncs)), (1, 0));
        // A live stream: the listing holds past the minute.
        h.clock.advance(RESYNC);
        h.tick(Tick::Reconcile).await;
        assert_eq!(h.source.get(|f| (f.lists, f.resyncs)), (1, 0));
        // The safety relist, with statuses asked again (the stream was
        // not known live at the start).
        h.clock.advance(RESYNC_LIVE - RESYNC);
        h.tick(Tick::Reconcile).await;
        assert_eq!(h.source.get(|f| (f.lists, f.resyncs)), (2, 1));
        // The same live stream since: statuses at their own safety period.
        h.clock.advance(RESYNC_LIVE);
        h.tick(Tick::Reconcile).await;
        let again = usize::from(RESYNC_LIVE >= STATUS_RESYNC_LIVE);
        assert_eq!(h.source.get(|f| (f.lists, f.resyncs)), (3, 1 + again));
        // The stream was re-subscribed: updates in the gap were not seen.
        let resubscribed = qosd_node::cri::events::Feed {
            live: true,
            epoch: 2,
            ..Default::default()
        };
        h.daemon.take_feed(&resubscribed, &mut h.observer);
        h.clock.advance(RESYNC_LIVE);
        h.tick(Tick::Reconcile).await;
        assert_eq!(h.source.get(|f| (f.lists, f.resyncs)), (4, 2 + again));
        // The stream went down: every minute again.
        let down = qosd_node::cri::events::Feed {
            live: false,
            epoch: 2,
            down: Some("ended".into()),
            ..Default::default()
        };
        h.daemon.take_feed(&down, &mut h.observer);
        h.clock.advance(RESYNC);
        h.tick(Tick::Reconcile).await;
        assert_eq!(h.source.get(|f| (f.lists, f.resyncs)), (5, 3 + again));
    }

    #[tokio::test]
    async fn a_changed_fingerprint_lists_again() {
        let mut h = Harness::new();
        h.tick(Tick::Relist).await;
        h.source.set(|f| f.fingerprint = vec!["b".into()]);
        h.tick(Tick::Relist).await;
        assert_eq!(h.source.get(|f| f.lists), 2);
        assert_eq!(h.observer.reconciled, 2);
    }

    #[tokio::test]
    async fn a_listing_failure_marks_the_source_down_and_warns_once() {
        let logs = Logs::default();
        let _guard = logs.capture();
        let mut h = Harness::new();
        h.tick(Tick::Reconcile).await;
        h.source.set(|f| f.failing = true);
        for _ in 0..3 {
            assert_eq!(h.tick(Tick::Reconcile).await, Step::Wait);
        }
        assert!(h.daemon.source_down);
        assert!(h.daemon.cached.is_none());
        assert_eq!(h.observer.failures, 3);
        assert_eq!(
            logs.count("pod source unavailable; keeping the last state"),
            1
        );
        assert_eq!(h.observer.reconciled, 1);

        h.source.set(|f| f.failing = false);
        h.tick(Tick::Reconcile).await;
        assert!(!h.daemon.source_down);
        assert_eq!(logs.count("pod source is back"), 1);
        assert_eq!(h.observer.reconciled, 2);
    }

    #[tokio::test]
    async fn a_reload_clears_the_cached_listing() {
        let mut h = Harness::new();
        h.tick(Tick::Reconcile).await;
        assert!(h.daemon.cached.is_some());
        assert!(h.daemon.reload(&mut h.observer).is_none());
        assert_eq!(h.observer.reloads, 1);
        assert!(h.daemon.cached.is_none());
        h.tick(Tick::Reconcile).await;
        assert_eq!(h.source.get(|f| f.lists), 2);
        assert_eq!(h.observer.reconciled, 2);
    }

    #[tokio::test]
    async fn a_stop_ends_a_pending_call_and_a_reload_meanwhile_is_kept() {
        let logs = Logs::default();
        let _guard = logs.capture();
        let mut h = Harness::new();
        h.source.set(|f| f.hanging = true);
        h.control.send(Control::Reload).unwrap();
        h.control.send(Control::Stop("SIGTERM")).unwrap();
        assert_eq!(h.tick(Tick::Reconcile).await, Step::Stop);
        assert_eq!(logs.count("SIGTERM: stopping"), 1);
        assert_eq!(h.controls.next().await, Control::Reload);
    }

    /// Stops the loop once it reconciled the same listing twice.
    struct StopAfterTwoAgain {
        first: usize,
        again: usize,
        stop: tokio::sync::mpsc::UnboundedSender<Control>,
    }
    impl Observer for StopAfterTwoAgain {
        fn reconciled(&mut self, _report: &ReconcileReport, _listing: &Listing) {
            self.first += 1;
        }
        fn reconciled_again(&mut self, _report: &ReconcileReport, _listing: &Listing) {
            self.again += 1;
            if self.again == 2 {
                self.stop.send(Control::Stop("SIGTERM")).unwrap();
            }
        }
    }

    #[tokio::test]
    async fn the_driver_reconciles_on_its_timer_and_lists_only_on_changes() {
        let mut h = Harness::new();
        let mut observer = StopAfterTwoAgain {
            first: 0,
            again: 0,
            stop: h.control.clone(),
        };
        let every = Duration::from_millis(10);
        let out = h
            .daemon
            .run((every, every), &mut h.controls, &mut observer)
            .await
            .unwrap();
        assert!(matches!(out, Outcome::Stopped));
        // One listing, then timer reconciles with the same fingerprint
        // (relist ticks with nothing changed reconcile nothing).
        assert_eq!(h.source.get(|f| f.lists), 1);
        assert_eq!(observer.first, 1);
        assert!(observer.again >= 2);
    }

    #[tokio::test]
    async fn the_driver_reloads_then_stops_on_its_controls() {
        let logs = Logs::default();
        let _guard = logs.capture();
        let mut h = Harness::new();
        h.control.send(Control::Reload).unwrap();
        h.control.send(Control::Stop("SIGINT")).unwrap();
        let every = Duration::from_secs(10);
        let out = h
            .daemon
            .run((every, every), &mut h.controls, &mut h.observer)
            .await
            .unwrap();
        assert!(matches!(out, Outcome::Stopped));
        // (The reconcile after the reload may be cut short by the stop.)
        assert_eq!(h.observer.reloads, 1);
        assert_eq!(logs.count("SIGINT: stopping"), 1);
    }

    #[tokio::test]
    async fn the_events_of_the_loop_say_what_to_do() {
        let mut h = Harness::new();
        assert_eq!(h.daemon.relist_timer(false), Step::Run(Tick::Relist));
        // With events on and the API server's view unchanged: nothing.
        assert_eq!(h.daemon.relist_timer(true), Step::Wait);
        assert_eq!(h.daemon.drift_due(), Step::Run(Tick::Drift));
        assert_eq!(h.daemon.relist_due(), Step::Run(Tick::Relist));
        h.tick(Tick::Reconcile).await;
        assert_eq!(h.daemon.recheck_due(), Step::Run(Tick::Reconcile));
        assert!(h.daemon.cached.is_none());
        // The feed ended: forgotten.
        assert_eq!(h.daemon.feed_changed(false, &mut h.observer), Step::Wait);
        assert!(h.daemon.feed.is_none());
    }
}
