//! The composition root: validated settings in, running services out.
//!
//! The CLI parses arguments and renders results; everything that turns a
//! [`Config`] into a plan config, signal sources, the eviction service, the
//! HTTP server and the reconcile loop is wired here, once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::runtime::daemon::{self, EvictionSwap, Outcome, Reloaded, RunOptions, ServiceObserver};
use crate::runtime::eviction_service::{EvictionService, ServiceConfig};
use crate::runtime::reconcile::ReconcileReport;
use crate::telemetry::health::Health;
use crate::telemetry::metrics::{ErrorKind, Metrics};
use crate::telemetry::server::AppState;
use qosd_config::Config;
use qosd_model::core::model::CgroupVersion;
use qosd_model::core::node::NodeResources;
use qosd_model::policy::enforce::naming::CgroupLayout;
use qosd_model::policy::enforce::plan::PlanConfig;
use qosd_model::policy::enforce::reserved::ReservedResources;
use qosd_node::pods::{Listing, PodSourceSpec, Source};
use qosd_node::sys::watch::WatchConfig;

/// Marks an error as the user's input being wrong (the CLI exits 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadInput(pub(crate) String);

/// Wrap any error as bad input (exit code 2), keeping its message.
pub(crate) fn bad_input(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(BadInput(e.to_string()))
}

/// What `qosd run` needs beyond the config.
pub(crate) struct DaemonArgs {
    /// One reconcile, then return its report.
    pub(crate) once: bool,
    /// Pod manifests instead of the CRI.
    pub(crate) pods: Vec<PathBuf>,
    /// How long an orphaned, empty pod cgroup waits before removal.
    pub(crate) orphan_grace: Duration,
    /// Where /proc is.
    pub(crate) proc_root: PathBuf,
    /// Where sysfs is (hugepage sizes).
    pub(crate) sysfs: PathBuf,
    /// Re-reads the configuration (SIGHUP).
    pub(crate) reload: Box<dyn FnMut() -> anyhow::Result<Config> + Send>,
    /// The CPU manager (`cpuManagerPolicy: static`); `None`: policy none.
    pub(crate) cpu_manager: Option<crate::runtime::cpu_manager::CpuManagerSettings>,
}

/// How the daemon ended.
#[derive(Debug)]
pub(crate) enum DaemonExit {
    /// Stopped by a signal.
    Stopped,
    /// `--once`: the one reconcile.
    Once {
        report: Box<ReconcileReport>,
        dry_run: bool,
    },
}

/// The planner config a daemon config describes (detecting the cgroup
/// version and the node's capacity where the config leaves them open).
pub fn plan_config(cfg: &Config, proc_root: &Path, sysfs: &Path) -> anyhow::Result<PlanConfig> {
    let version = match cfg.cgroup_version.forced() {
        Some(v) => v,
        None => qosd_node::sys::detect::detect_version(&cfg.cgroupfs).with_context(|| {
            format!(
                "cannot detect the cgroup version at {} (set cgroupVersion / --cgroup-version)",
                cfg.cgroupfs.display()
            )
        })?,
    };
    let mut layout = CgroupLayout::new(version, cfg.cgroup_driver)
        .with_cgroupfs(cfg.cgroupfs.clone())
        .with_cgroup_root(cfg.cgroup_root.clone());
    if version == CgroupVersion::V1 {
        // A co-mounted `cpu,cpuacct` without the usual `cpu` symlink.
        let fs = &cfg.cgroupfs;
        if !fs.join("cpu").exists() && fs.join("cpu,cpuacct").is_dir() {
            layout.v1_dirs.cpu = "cpu,cpuacct".to_string();
        }
    }
    let cpu = match &cfg.node_cpu {
        Some(q) => q.milli_ceil(),
        None => qosd_node::sys::procfs::detect_cpu_millis(proc_root)
            .context("cannot detect the node's cpus (set nodeCPU)")?,
    };
    let mem = match &cfg.node_memory {
        Some(q) => q.value_ceil(),
        None => qosd_node::sys::procfs::detect_memory_bytes(proc_root)
            .context("cannot detect the node's memory (set nodeMemory)")?,
    };
    let node = NodeResources::new(
        cpu,
        mem,
        cfg.reserved().map_err(|e| {
            bad_input(format!(
                "systemReserved + kubeReserved (--system-reserved + --kube-reserved): {e}"
            ))
        })?,
    );
    let mut plan = PlanConfig::new(layout, node);
    plan.cpu_cfs_period_us = cfg.cpu_cfs_quota_period.as_micros() as u64;
    plan.enforce_cpu_limits = cfg.cpu_cfs_quota;
    plan.cpu_weight_formula = cfg.cpu_weight_formula;
    plan.memory_qos = cfg.memory_qos;
    plan.memory_throttling_factor = cfg.memory_throttling_factor;
    plan.qos_reserved_memory_percent = cfg.qos_reserved_memory();
    plan.kubelet_version = cfg.kubelet_version;
    plan.memory_reservation_policy = cfg.memory_reservation_policy;
    plan.enforce_node_allocatable = cfg.enforce_node_allocatable.pods;
    plan.pod_pids_limit = (cfg.pod_pids_limit > 0).then_some(cfg.pod_pids_limit);
    plan.page_size = qosd_node::sys::page_size();
    plan.hugepage_sizes = match &cfg.hugepage_sizes {
        Some(sizes) => sizes.clone(),
        None => qosd_node::sys::hugepages::detect(sysfs, &cfg.cgroupfs, version, cfg.cgroup_driver)
            .context(
                "cannot read the node's hugepage sizes (set hugepageSizes / --hugepage-sizes)",
            )?,
    };
    let res = |name: &str, list: &qosd_model::core::model::ResourceList| {
        ReservedResources::from_list(list).map_err(|e| bad_input(format!("{name}: {e}")))
    };
    plan.reserved_cgroups = qosd_model::policy::enforce::reserved::reserved_cgroups(
        &cfg.enforce_node_allocatable,
        (
            &cfg.system_reserved_cgroup,
            &res("systemReserved", &cfg.system_reserved)?,
        ),
        (
            &cfg.kube_reserved_cgroup,
            &res("kubeReserved", &cfg.kube_reserved)?,
        ),
    )
    .map_err(bad_input)?;
    Ok(plan)
}

/// The planner config of a CLI command: like [`plan_config`], but when the
/// cgroup version is `auto` and cannot be detected, warn and plan for v2
/// (for commands that only print).
pub(crate) fn plan_config_or_v2(
    cfg: &Config,
    proc_root: &Path,
    sysfs: &Path,
) -> anyhow::Result<PlanConfig> {
    if cfg.cgroup_version.forced().is_none() {
        if let Err(e) = qosd_node::sys::detect::detect_version(&cfg.cgroupfs) {
            eprintln!(
                "qosd: warning: {e}; planning for cgroup v2 (pass --cgroup-version v1|v2 to choose)"
            );
            let mut v2 = cfg.clone();
            v2.cgroup_version = qosd_config::CgroupVersionSetting::V2;
            return plan_config(&v2, proc_root, sysfs);
        }
    }
    plan_config(cfg, proc_root, sysfs)
}

/// The daemon's pod listing, once: the same source, connect options and
/// inventory as `qosd run` (for `plan --cri`, `eviction-order --cri`).
pub(crate) fn live_listing(cfg: &Config, proc_root: &Path) -> anyhow::Result<Listing> {
    let machine = qosd_node::sys::procfs::detect_memory_bytes(proc_root)
        .context("cannot read the node's memory (MemTotal)")?;
    let spec = PodSourceSpec::Cri {
        endpoint: cfg.runtime_endpoint.clone(),
    };
    let connect = qosd_node::cri::ConnectOptions {
        retry: qosd_node::cri::RetryPolicy {
            max_elapsed: Duration::from_secs(5),
            ..Default::default()
        },
        ..Default::default()
    };
    let rt = command_runtime()?;
    rt.block_on(async {
        let source = Source::connect(&spec, connect, machine).await?;
        source.list().await
    })
    .with_context(|| format!("cannot list pods from {}", cfg.runtime_endpoint))
}

pub(crate) use crate::runtime::daemon::check_parents;

/// The eviction candidates of a listing with their usage read from their
/// cgroups, as the eviction loop reads it (`Engine::pass`).
pub(crate) fn live_candidates(
    plan: &PlanConfig,
    listing: &Listing,
) -> Vec<qosd_model::policy::evict::rank::Candidate> {
    let sandboxes = listing
        .live
        .iter()
        .map(|p| (p.pod.uid.clone(), p.sandbox_id.clone()))
        .collect();
    let mut c =
        crate::runtime::eviction_service::candidates(&listing.pods, &sandboxes, &plan.layout);
    for x in &mut c {
        if let Some(dir) = x.cgroup_dirs.first() {
            let st = qosd_node::sys::signals::pod_stats(plan.layout.version, dir);
            if st.memory_working_set_bytes.is_some() || st.processes.is_some() {
                x.stats = Some(st);
            }
        }
    }
    c
}

/// The runtime of a one-shot command (`qosd pods`, `qosd status`, `qosd
/// plan --cri`, ...): one thread, I/O and timers. The daemon's two
/// runtimes are built in `run_daemon` (the async one) and by its eviction
/// side ([`qosd_node::evict::runtime::EvictRuntime`]); nothing else builds
/// one.
pub(crate) fn command_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Warn about settings the chosen kubelet version would refuse: cgroup v1,
/// which the kubelet refuses unless its config sets `failCgroupV1: false`
/// (then it runs on v1 with a warning). Logged through the logger (so in
/// the configured format), once per process.
pub(crate) fn warn_version(cfg: &PlanConfig, fail_cgroup_v1: Option<bool>) {
    use qosd_model::policy::enforce::versions::Rule;
    static WARNED: std::sync::Once = std::sync::Once::new();
    if cfg.layout.version != CgroupVersion::V1 || !cfg.kubelet_version.has(Rule::CgroupV1Refused) {
        return;
    }
    WARNED.call_once(|| {
        let kubelet = cfg.kubelet_version.to_string();
        if fail_cgroup_v1 == Some(false) {
            tracing::warn!(
                kubelet = %kubelet,
                fail_cgroup_v1 = false,
                "cgroup v1 is in maintenance mode: kubelet {kubelet} runs on it only because failCgroupV1: false"
            );
        } else {
            tracing::warn!(
                kubelet = %kubelet,
                fail_cgroup_v1 = fail_cgroup_v1.unwrap_or(true),
                "kubelet {kubelet} refuses cgroup v1 unless failCgroupV1: false"
            );
        }
    });
}

/// The reserved cgroups must exist: like the kubelet, qosd limits them but
/// never creates them.
pub(crate) fn check_reserved_cgroups(plan: &PlanConfig) -> anyhow::Result<()> {
    let mut missing = Vec::new();
    for rc in &plan.reserved_cgroups {
        for dir in qosd_model::policy::enforce::plan::reserved_dirs(plan, rc) {
            if !dir.is_dir() {
                missing.push(format!(
                    "{} \"/{}\" does not exist at {} (qosd limits it for enforceNodeAllocatable {} but never creates it: create it, or drop {} from enforceNodeAllocatable)",
                    rc.setting,
                    rc.cgroup,
                    dir.display(),
                    rc.key,
                    rc.key
                ));
            }
        }
    }
    all_or_error(missing)
}

/// Every problem found, one per line (not only the first).
fn all_or_error(problems: Vec<String>) -> anyhow::Result<()> {
    match problems.is_empty() {
        true => Ok(()),
        false => Err(anyhow::anyhow!(problems.join("\n"))),
    }
}

pub(crate) fn run_daemon(cfg: Config, args: DaemonArgs) -> anyhow::Result<DaemonExit> {
    // One malloc arena, set before any thread starts (see sys::malloc).
    if let Some(n) = qosd_node::sys::malloc::limit_arenas() {
        tracing::debug!(arenas = n, "malloc arenas limited");
    }
    let eviction = crate::runtime::eviction_service::eviction_config(&cfg);
    let opts = run_options(&cfg, &args)?;
    // One qosd per cgroup root, taken before the first write (dry-run
    // writes nothing and takes none); held until this function returns.
    let _instance_lock = if opts.dry_run {
        None
    } else {
        let lock = crate::runtime::instance_lock::acquire(
            &crate::runtime::instance_lock::lock_dir(),
            &cfg.cgroupfs,
            &cfg.cgroup_root,
        )?;
        tracing::debug!(lock = %lock.path.display(), "instance lock held");
        Some(lock)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let controls = daemon::Controls::new(forward_signals(&rt)?);
    if args.once {
        return run_once(&rt, opts, controls);
    }
    serve(cfg, args, eviction, opts, rt, controls)
}

/// Check the node and the inputs (before anything is written) and gather
/// what the reconcile loop needs.
fn run_options(cfg: &Config, args: &DaemonArgs) -> anyhow::Result<RunOptions> {
    let plan = plan_config(cfg, &args.proc_root, &args.sysfs)?;
    warn_version(&plan, cfg.fail_cgroup_v1);
    check_reserved_cgroups(&plan)?;
    // Like the kubelet, the cgroup root must exist: qosd creates kubepods
    // under it but never the root itself.
    let mut missing = Vec::new();
    for base in crate::runtime::reconcile::kubepods_dirs(&plan) {
        let parent = base.parent().unwrap_or(&base);
        if !parent.is_dir() {
            missing.push(format!(
                "cgroup root {:?} does not exist at {} (create it, or set cgroupRoot / cgroupfs)",
                plan.layout.cgroup_root,
                parent.display()
            ));
        }
    }
    all_or_error(missing)?;
    let source = if args.pods.is_empty() {
        PodSourceSpec::Cri {
            endpoint: cfg.runtime_endpoint.clone(),
        }
    } else {
        // Validate the manifests now: bad input must fail before any write.
        qosd_node::manifest::load_paths_for(&args.pods, cfg.kubelet_version).map_err(bad_input)?;
        PodSourceSpec::Manifests(args.pods.clone(), cfg.kubelet_version)
    };
    let dry_run = cfg.mode == qosd_config::Mode::DryRun;
    let audit = cfg.cgroup_enforcement == qosd_config::CgroupEnforcement::Audit;
    if audit {
        tracing::info!(
            kubelet_config = ?cfg.kubelet_config,
            "cgroupEnforcement audit: cgroups are read and compared with the plan, never written; eviction stays on"
        );
    }
    let plan_capacity = plan.node.capacity_memory_bytes;
    Ok(RunOptions {
        plan,
        source,
        dry_run,
        once: args.once,
        reconcile_interval: cfg.reconcile_interval,
        relist_interval: cfg.relist_interval,
        orphan_grace: args.orphan_grace,
        // Calls retry for at most 3 s while the runtime restarts, so the
        // loop keeps its heartbeat and readiness follows the runtime.
        connect: qosd_node::cri::ConnectOptions {
            retry: qosd_node::cri::RetryPolicy {
                max_elapsed: Duration::from_secs(3),
                ..Default::default()
            },
            ..Default::default()
        },
        machine_memory_bytes: qosd_node::sys::procfs::detect_memory_bytes(&args.proc_root)
            .unwrap_or(plan_capacity),
        cpu_manager: args.cpu_manager.clone(),
        specs: None,
        audit,
        state_dir: cfg.state_dir.clone().or_else(systemd_state_directory),
        proc_root: args.proc_root.clone(),
    })
}

/// `--once`: one reconcile, no metrics, health or eviction.
fn run_once(
    rt: &tokio::runtime::Runtime,
    opts: RunOptions,
    mut controls: daemon::Controls,
) -> anyhow::Result<DaemonExit> {
    let dry_run = opts.dry_run;
    let outcome = rt
        .block_on(daemon::run_loop(
            opts,
            &mut controls,
            &mut daemon::NoObserver,
        ))
        .map_err(|e| {
            if e.is::<qosd_model::policy::enforce::parents::ParentMismatch>() {
                bad_input(e)
            } else {
                e
            }
        })?;
    Ok(match outcome {
        Outcome::Stopped => DaemonExit::Stopped,
        Outcome::Once(report) => DaemonExit::Once { report, dry_run },
    })
}

/// The daemon proper: metrics, health and the supervisor, the Kubernetes
/// API side, eviction, the HTTP server and the reconcile loop, until a stop.
fn serve(
    cfg: Config,
    args: DaemonArgs,
    eviction: qosd_model::policy::evict::threshold::EvictionConfig,
    mut opts: RunOptions,
    rt: tokio::runtime::Runtime,
    controls: daemon::Controls,
) -> anyhow::Result<DaemonExit> {
    let (metrics, health) = telemetry(&cfg, &args.proc_root)?;
    // The eviction side's own runtime, shared by the CRI stopper and the
    // API evictor (the one other runtime besides `rt`).
    let evict_rt = qosd_node::evict::runtime::EvictRuntime::new()
        .context("cannot start the eviction side's runtime")?;
    let kube = match opts.source {
        PodSourceSpec::Cri { .. } => {
            start_kube(&cfg, &opts.plan, &rt, &evict_rt, &metrics, &health)?
        }
        PodSourceSpec::Manifests(..) => None,
    };
    opts.specs = kube
        .clone()
        .map(|k| k as Arc<dyn qosd_node::pods::SpecSource>);
    let dry_run = opts.dry_run;
    let mut observer = ServiceObserver::new(metrics.clone(), health.clone(), dry_run, &opts.plan);
    health.update_status(|d| {
        d.config_generation = 1;
        d.config_loaded_at_ms = crate::telemetry::status::now_ms();
    });
    observer.specs = opts.specs.clone();
    observer.audit = opts.audit;
    health.update_status(|d| d.cgroup_enforcement = cfg.cgroup_enforcement.as_str().to_string());
    // Set when the daemon stops: the eviction side's CRI calls (a clean-up
    // still retrying) then stop instead of starting another.
    let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let starter = EvictionStarter {
        source: opts.source.clone(),
        kube,
        proc_root: args.proc_root.clone(),
        closing: closing.clone(),
        evict_rt,
        metrics: metrics.clone(),
        health: health.clone(),
    };
    if let Some(ev) = starter.start(&cfg, eviction, &opts.plan)? {
        observer.eviction = Some(Arc::new(ev));
    }
    let mut reloader = ConfigReloader {
        read: args.reload,
        current: cfg.clone(),
        generation: 1,
        proc_root: args.proc_root.clone(),
        sysfs: args.sysfs.clone(),
        eviction: starter,
        metrics: metrics.clone(),
        health: health.clone(),
    };
    observer.reloader = Some(Box::new(move || reloader.reload()));
    let state = AppState { metrics, health };
    let mode = crate::telemetry::status::mode_name(dry_run);
    let result = serve_until_stopped(
        &rt,
        cfg.metrics_address,
        state,
        mode,
        opts,
        controls,
        observer,
    );
    closing.store(true, std::sync::atomic::Ordering::Release);
    // Do not wait for blocking tasks (a hung CRI call) on the way out.
    rt.shutdown_timeout(Duration::from_millis(200));
    result?;
    Ok(DaemonExit::Stopped)
}

/// Serve HTTP on `addr` and run the reconcile loop until a stop. The loop
/// runs as a task on the runtime's workers, beside the calls it makes (no
/// hand-off to a thread blocked on the runtime); the HTTP server is
/// supervised too: if its task ends, liveness fails (and the supervisor
/// exits the process).
fn serve_until_stopped(
    rt: &tokio::runtime::Runtime,
    addr: std::net::SocketAddr,
    state: AppState,
    mode: &'static str,
    opts: RunOptions,
    mut controls: daemon::Controls,
    mut observer: ServiceObserver,
) -> anyhow::Result<Outcome> {
    let health = state.health.clone();
    let serving = rt.spawn(async move {
        let server = crate::telemetry::server::spawn_with(addr, state, server_limits())
            .await
            .with_context(|| format!("cannot serve metrics on {addr}"))?;
        tracing::info!(address = %server.local_addr(), mode, "qosd running");
        let outcome = tokio::select! {
            o = daemon::run_loop(opts, &mut controls, &mut observer) => o,
            _ = async {
                server.stopped().await;
                health.fail("HTTP server stopped serving".into());
                std::future::pending::<()>().await
            } => unreachable!("the server monitor never ends"),
        };
        health.set_shutting_down();
        let _ = crate::telemetry::notify::stopping();
        let _ = tokio::time::timeout(Duration::from_millis(300), server.shutdown()).await;
        drop(observer);
        outcome
    });
    match rt.block_on(serving) {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(anyhow::anyhow!("the daemon task ended: {e}")),
    }
}

/// Metrics (every CRI call counted), health and the supervisor that exits
/// the process when the loop stalls.
fn telemetry(cfg: &Config, proc_root: &Path) -> anyhow::Result<(Arc<Metrics>, Arc<Health>)> {
    let metrics = Arc::new(Metrics::for_node(proc_root));
    {
        // Every CRI call of this process, by method (the reconcile loop's
        // listings, the eviction stopper's StopPodSandbox, ...).
        let m = metrics.clone();
        qosd_node::cri::client::set_call_observer(Box::new(move |method, d, ok| {
            m.cri_call(method, d, ok)
        }));
    }
    // Liveness: the loop turns at least every relist interval.
    let stale_after = (cfg.relist_interval * 3).max(cfg.reconcile_interval * 3);
    let health = Arc::new(Health::new(stale_after));
    // A dead or stalled loop fails /healthz and, a few seconds later, exits
    // the process non-zero so systemd or the kubelet restarts it.
    crate::runtime::supervisor::watch(health.clone(), Duration::from_secs(3))
        .context("cannot start the supervisor")?;
    health.set_runtime_unhealthy_after(
        (!cfg.runtime_unhealthy_after.is_zero()).then_some(cfg.runtime_unhealthy_after),
    );
    Ok((metrics, health))
}

/// Descriptors: soft limit up to the hard one; the HTTP server gets what
/// is left above the reserve for cgroup I/O and eviction.
fn server_limits() -> crate::telemetry::server::ServerLimits {
    let nofile = match qosd_node::sys::fdlimit::raise_nofile() {
        Ok(l) => {
            tracing::debug!(soft = l.soft, was = l.was, "RLIMIT_NOFILE");
            l.soft
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read or raise RLIMIT_NOFILE");
            1024
        }
    };
    crate::telemetry::server::ServerLimits::for_nofile(nofile)
}

/// Re-reads the configuration on SIGHUP: applies it (restarting the
/// eviction loop when its settings changed) or keeps the old one, and
/// reports which in the log, metrics and `/status`.
struct ConfigReloader {
    read: Box<dyn FnMut() -> anyhow::Result<Config> + Send>,
    /// The configuration in force.
    current: Config,
    generation: u64,
    proc_root: PathBuf,
    sysfs: PathBuf,
    /// Restarts the eviction loop when its settings change.
    eviction: EvictionStarter,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

impl ConfigReloader {
    /// SIGHUP: what the loop and the eviction side change to (`None`: the
    /// old configuration is kept).
    fn reload(&mut self) -> Option<(Reloaded, EvictionSwap)> {
        crate::runtime::supervisor::inject_stall("reload");
        let outcome = reload_config(&mut self.read, &self.current, &self.proc_root, &self.sysfs);
        let (result, why) = match &outcome {
            Ok(None) => ("unchanged", None),
            Ok(Some(_)) => ("applied", None),
            Err(ReloadRefused::Invalid(e)) => ("invalid", Some(e.clone())),
            Err(ReloadRefused::RestartRequired(e)) => ("restart_required", Some(e.clone())),
        };
        let applied = match outcome {
            Ok(Some((new, plan, eviction, changed))) => {
                Some(self.apply(new, plan, eviction, changed)?)
            }
            Ok(None) => {
                tracing::info!("SIGHUP: configuration unchanged");
                None
            }
            Err(ReloadRefused::Invalid(e)) => {
                tracing::error!(error = %e, "SIGHUP: new configuration invalid; keeping the old one");
                self.metrics.error(ErrorKind::ConfigReload);
                None
            }
            Err(ReloadRefused::RestartRequired(e)) => {
                tracing::error!("SIGHUP: {e}; keeping the old configuration");
                self.metrics.error(ErrorKind::ConfigReload);
                None
            }
        };
        self.metrics.config_reload(result, self.generation);
        let gen = self.generation;
        self.health.update_status(|d| {
            d.config_generation = gen;
            if applied.is_some() {
                d.config_loaded_at_ms = crate::telemetry::status::now_ms();
            }
            d.last_reload = Some(match &why {
                Some(w) => format!("{result}: {w}"),
                None => result.to_string(),
            });
        });
        applied
    }

    /// Apply a changed configuration (`None`: the eviction loop could not
    /// be restarted, the old configuration is kept and that is reported).
    fn apply(
        &mut self,
        new: Config,
        plan: PlanConfig,
        eviction: qosd_model::policy::evict::threshold::EvictionConfig,
        changed: Vec<String>,
    ) -> Option<(Reloaded, EvictionSwap)> {
        let (m, h) = (&self.metrics, &self.health);
        let swap = if changed.iter().any(|f| f != "logLevel") {
            match self.eviction.start(&new, eviction, &plan) {
                Ok(ev) => {
                    m.clear_thresholds();
                    if ev.is_none() {
                        // No eviction loop any more: nothing needs
                        // signals (a running loop sets this each pass).
                        h.set_problem("signals", None);
                    }
                    EvictionSwap::Replace(ev.map(Arc::new))
                }
                Err(e) => {
                    let why = format!("{e:#}");
                    tracing::error!(error = %why, "SIGHUP: eviction loop not restarted; keeping the old configuration");
                    m.error(ErrorKind::ConfigReload);
                    m.config_reload("invalid", self.generation);
                    h.update_status(|d| d.last_reload = Some(format!("invalid: {why}")));
                    return None;
                }
            }
        } else {
            EvictionSwap::Keep
        };
        if changed.iter().any(|f| f == "logLevel") {
            crate::telemetry::log::set_level(&new.log_level);
        }
        self.generation += 1;
        tracing::info!(
            ?changed,
            generation = self.generation,
            "SIGHUP: configuration reloaded and applied"
        );
        let r = Reloaded {
            plan,
            dry_run: new.mode == qosd_config::Mode::DryRun,
            reconcile_interval: new.reconcile_interval,
            relist_interval: new.relist_interval,
        };
        self.current = new;
        Some((r, swap))
    }
}

/// SIGTERM and SIGINT (stop) and SIGHUP (reload), as the loop's controls.
fn forward_signals(
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<tokio::sync::mpsc::UnboundedReceiver<daemon::Control>> {
    use tokio::signal::unix::{signal, SignalKind};
    let _in_rt = rt.enter();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    crate::runtime::stop_guard::arm(crate::runtime::stop_guard::STOP_DEADLINE)
        .context("cannot arm the stop deadline")?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    rt.spawn(async move {
        loop {
            let c = tokio::select! {
                _ = term.recv() => daemon::Control::Stop("SIGTERM"),
                _ = int.recv() => daemon::Control::Stop("SIGINT"),
                _ = hup.recv() => daemon::Control::Reload,
            };
            if tx.send(c).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

/// Fields a running daemon cannot change: a reload changing one is refused
/// whole (the daemon keeps its old configuration and says which and why).
pub(crate) const RESTART_FIELDS: &[(&str, &str)] = &[
    ("metricsAddress", "the HTTP listener is bound at start"),
    ("runtimeEndpoint", "the runtime connection is made at start"),
    ("logFormat", "the log format is set at start"),
    ("nodeName", "the Kubernetes API watch is set up at start"),
    ("kubeconfig", "the Kubernetes API client is made at start"),
    (
        "apiEvictionTimeout",
        "the Kubernetes API client is made at start",
    ),
    ("runtimeUnhealthyAfter", "liveness is set up at start"),
    ("cgroupEnforcement", "the cgroup writer is chosen at start"),
    (
        "cpuManagerPolicy",
        "the CPU manager's state is set at start",
    ),
    (
        "cpuManagerPolicyOptions",
        "the CPU manager's state is set at start",
    ),
    (
        "reservedSystemCPUs",
        "the CPU manager's state is set at start",
    ),
    (
        "cpuManagerStateDir",
        "the CPU manager's state is set at start",
    ),
    (
        "kubeletCPUManagerState",
        "the CPU manager's state is set at start",
    ),
    ("stateDir", "the CRI status cache is restored at start"),
];

/// systemd's `StateDirectory=` (the first of `$STATE_DIRECTORY`'s
/// colon-separated paths), the default `stateDir`.
fn systemd_state_directory() -> Option<std::path::PathBuf> {
    let v = std::env::var_os("STATE_DIRECTORY")?;
    let first = std::path::PathBuf::from(v.to_str()?.split(':').next()?);
    first.is_absolute().then_some(first)
}

/// Why a reload was not applied.
#[derive(Debug, Clone)]
enum ReloadRefused {
    Invalid(String),
    RestartRequired(String),
}

type Applied = (
    Config,
    PlanConfig,
    qosd_model::policy::evict::threshold::EvictionConfig,
    Vec<String>,
);

/// Read and check a new configuration against the running one: `None`
/// when nothing changed.
fn reload_config(
    read: &mut Box<dyn FnMut() -> anyhow::Result<Config> + Send>,
    current: &Config,
    proc_root: &Path,
    sysfs: &Path,
) -> Result<Option<Applied>, ReloadRefused> {
    let new = read().map_err(|e| ReloadRefused::Invalid(format!("{e:#}")))?;
    if new.not_modelled != current.not_modelled {
        for w in new.warnings() {
            tracing::warn!("{w}");
        }
    }
    let changed = current.changed_fields(&new);
    if changed.is_empty() {
        return Ok(None);
    }
    let fixed: Vec<String> = RESTART_FIELDS
        .iter()
        .filter(|(f, _)| changed.iter().any(|c| c == f))
        .map(|(f, why)| format!("{f} ({why})"))
        .collect();
    if !fixed.is_empty() {
        return Err(ReloadRefused::RestartRequired(format!(
            "changing {} needs a restart",
            fixed.join(", ")
        )));
    }
    let plan = plan_config(&new, proc_root, sysfs)
        .and_then(|p| check_reserved_cgroups(&p).map(|()| p))
        .map_err(|e| ReloadRefused::Invalid(format!("{e:#}")))?;
    let eviction = crate::runtime::eviction_service::eviction_config(&new);
    Ok(Some((new, plan, eviction, changed)))
}

/// How long a disconnected API view stays in use (the watch reconnects in
/// milliseconds after a normal close); past it, the runtime's data alone.
pub(crate) const API_MAX_STALENESS: Duration = Duration::from_secs(10);

/// The Kubernetes API side, when `nodeName` is set: a kubeconfig or the
/// in-cluster config. Without usable credentials qosd runs from the
/// runtime alone and says so (status, readiness reasons, metrics).
fn start_kube(
    cfg: &Config,
    plan: &PlanConfig,
    rt: &tokio::runtime::Runtime,
    evict_rt: &qosd_node::evict::runtime::EvictRuntime,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
) -> anyhow::Result<Option<Arc<crate::runtime::kube_side::KubeSide>>> {
    let Some(node) = cfg.node_name.clone() else {
        if cfg.eviction_backend == qosd_model::policy::evict::Backend::Api {
            return Err(bad_input(
                "evictionBackend: api needs nodeName (--node-name or NODE_NAME)",
            ));
        }
        tracing::info!(
            "no nodeName: the Kubernetes API is not used (pod values inferred from the runtime)"
        );
        return Ok(None);
    };
    let kcfg = match &cfg.kubeconfig {
        Some(p) => qosd_node::kube::config::from_kubeconfig(p).map_err(bad_input)?,
        None => match qosd_node::kube::config::in_cluster_from_env() {
            Ok(c) => c,
            Err(e) => {
                let why = format!("no API server credentials ({e})");
                tracing::warn!(reason = %why, "Kubernetes API unavailable: working from the runtime's data alone");
                metrics.kube.set_api_up(false);
                health.set_degraded(
                    "kubernetes-api",
                    Some(format!(
                        "{why}; exact pod specs unavailable, working from the runtime's data alone"
                    )),
                );
                return Ok(None);
            }
        },
    };
    let client = qosd_node::kube::KubeClient::new(kcfg).map_err(bad_input)?;
    tracing::info!(server = client.server(), origin = client.origin(), node = %node, "watching this node's pods on the Kubernetes API server");
    let (side, watcher) = crate::runtime::kube_side::KubeSide::new(
        client,
        crate::runtime::kube_side::KubeSettings {
            node_name: node,
            max_stale: API_MAX_STALENESS,
            eviction_timeout: cfg.api_eviction_timeout,
            cgroup_version: plan.layout.version,
            evict_rt: evict_rt.clone(),
            kubelet_version: cfg.kubelet_version,
        },
        metrics.kube.clone(),
    );
    // The watch loop never ends: if it does (a panic), liveness fails.
    crate::runtime::supervisor::spawn_task_supervised(
        rt.handle(),
        "Kubernetes API pod watch",
        health.clone(),
        watcher,
    );
    Ok(Some(side))
}

/// What starting the eviction loop needs besides its settings (at start,
/// and again on a reload that changes them): the pod source, the
/// Kubernetes API side, the eviction side's runtime, and the daemon's
/// metrics and health.
struct EvictionStarter {
    source: PodSourceSpec,
    kube: Option<Arc<crate::runtime::kube_side::KubeSide>>,
    proc_root: PathBuf,
    /// Set when the daemon stops (the CRI stopper's calls then stop).
    closing: Arc<std::sync::atomic::AtomicBool>,
    evict_rt: qosd_node::evict::runtime::EvictRuntime,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

impl EvictionStarter {
    /// Start the eviction loop beside the reconcile loop (`None`: no
    /// threshold, eviction off).
    fn start(
        &self,
        cfg: &Config,
        eviction: qosd_model::policy::evict::threshold::EvictionConfig,
        plan: &PlanConfig,
    ) -> anyhow::Result<Option<EvictionService>> {
        if eviction.thresholds.is_empty() {
            tracing::info!("no eviction thresholds configured: eviction off");
            return Ok(None);
        }
        let sources = crate::runtime::eviction_service::signal_sources(
            cfg,
            &plan.layout,
            &self.proc_root,
            Some(plan.node.enforced_memory_bytes),
        );
        let mut backend = cfg.effective_eviction_backend();
        if backend == qosd_model::policy::evict::Backend::Api && self.kube.is_none() {
            tracing::warn!(
                "evictionBackend api without a Kubernetes API client: evicting with the kill backend"
            );
            backend = qosd_model::policy::evict::Backend::Kill;
        }
        let api: Option<Arc<dyn qosd_node::evict::ApiEvictor>> = self
            .kube
            .clone()
            .map(|k| k as Arc<dyn qosd_node::evict::ApiEvictor>);
        let hook = self.hook(cfg);
        let cri = self.cri_stopper(cfg);
        let stopper = cri
            .clone()
            .map(|c| c as Arc<dyn qosd_node::evict::PodStopper>);
        let node_runtime = cri.map(|c| c as Arc<dyn crate::runtime::eviction::NodeRuntime>);
        let service = EvictionService::start_with_api(
            service_config(cfg, eviction, sources, backend, hook, &self.proc_root),
            stopper,
            node_runtime,
            api,
            self.metrics.clone(),
            self.health.clone(),
        )
        .context("cannot start the eviction loop")?;
        tracing::info!(backend = backend.as_str(), "eviction loop running");
        Ok(Some(service))
    }

    /// The `evictionHook` program, its runs counted.
    fn hook(&self, cfg: &Config) -> Option<crate::runtime::hook::Hook> {
        cfg.eviction_hook.as_ref().map(|p| {
            let m = self.metrics.clone();
            crate::runtime::hook::Hook::new(
                p.clone(),
                cfg.eviction_hook_timeout,
                Arc::new(move |r: crate::runtime::hook::HookResult| {
                    m.hook_run(r.as_str());
                    if r != crate::runtime::hook::HookResult::Ok {
                        m.error(ErrorKind::EvictionHook);
                    }
                }),
            )
        })
    }

    /// One lazily connected CRI client for the eviction side: stopping
    /// victims, writable layers, dead containers and image GC (`None`:
    /// pods from manifests).
    fn cri_stopper(&self, cfg: &Config) -> Option<Arc<qosd_node::evict::stopper::CriStopper>> {
        match &self.source {
            PodSourceSpec::Cri { endpoint } => {
                let mut s = qosd_node::evict::stopper::CriStopper::new(
                    endpoint.clone(),
                    self.evict_rt.clone(),
                );
                s.closing = self.closing.clone();
                s.image_gc.minimum_age = cfg.image_minimum_gc_age;
                if cfg.eviction_max_pod_grace_period > 0 {
                    s.max_grace = Duration::from_secs(cfg.eviction_max_pod_grace_period as u64);
                }
                Some(Arc::new(s))
            }
            PodSourceSpec::Manifests(..) => None,
        }
    }
}

/// The eviction loop's settings from the daemon's.
fn service_config(
    cfg: &Config,
    eviction: qosd_model::policy::evict::threshold::EvictionConfig,
    sources: qosd_node::sys::signals::SignalSources,
    backend: qosd_model::policy::evict::Backend,
    hook: Option<crate::runtime::hook::Hook>,
    proc_root: &Path,
) -> ServiceConfig {
    let pressure = pressure_options(&eviction, proc_root);
    ServiceConfig {
        eviction,
        sources,
        backend,
        monitoring_interval: Duration::from_secs(1),
        // Real-time priority where allowed keeps the reaction in
        // milliseconds on a loaded node (measured: docs/eviction.md).
        // `QOSD_EVICTION_WATCHER=off` (benchmarks only): no fast
        // watcher, memory is seen by the passes alone.
        watch: fast_watcher_enabled().then(|| WatchConfig {
            rt_priority: Some(50),
            ..WatchConfig::default()
        }),
        // The passes too, watcher or not: the pass that acts must not
        // wait for a core (and is the only detector without the watcher).
        rt_priority: Some(50),
        max_listing_age: (cfg.reconcile_interval * 3).max(Duration::from_secs(30)),
        manager: qosd_model::policy::evict::manager::ManagerOptions {
            disk_layout: crate::runtime::eviction_service::disk_layout(cfg),
            ..Default::default()
        },
        image_gc: crate::runtime::eviction::ImageGcPolicy {
            high_percent: cfg.image_gc_high_threshold_percent,
            low_percent: cfg.image_gc_low_threshold_percent,
            minimum_age: cfg.image_minimum_gc_age,
        },
        hook,
        pressure,
    }
}

/// The pressure watcher of the pressure thresholds in `eviction` (on the
/// node's files under `proc_root`), at the watcher's real-time priority;
/// `None` without pressure thresholds (the default: off unless configured).
/// `QOSD_PRESSURE_TRIGGERS=off` (benchmarks and tests) polls instead of
/// arming the kernel's triggers.
fn pressure_options(
    eviction: &qosd_model::policy::evict::threshold::EvictionConfig,
    proc_root: &Path,
) -> Option<crate::runtime::eviction::PressureOptions> {
    let targets = qosd_node::sys::pressure::targets_from_config(eviction, proc_root);
    if targets.is_empty() {
        return None;
    }
    let triggers = !std::env::var(PRESSURE_TRIGGERS_ENV).is_ok_and(|v| v == "off");
    if !triggers {
        tracing::warn!(
            "{PRESSURE_TRIGGERS_ENV}=off: pressure signals polled, no kernel trigger armed"
        );
    }
    Some(crate::runtime::eviction::PressureOptions {
        targets,
        config: qosd_node::sys::pressure::PressureConfig {
            rt_priority: Some(50),
            use_triggers: triggers,
            privileged: None,
        },
    })
}

/// Environment variable that makes the pressure watcher poll instead of
/// arming the kernel's triggers (`QOSD_PRESSURE_TRIGGERS=off`).
pub const PRESSURE_TRIGGERS_ENV: &str = "QOSD_PRESSURE_TRIGGERS";

/// Environment variable that turns the fast memory watcher off
/// (`QOSD_EVICTION_WATCHER=off`): a benchmark baseline where only the
/// eviction passes (every second near a threshold) see memory pressure.
pub const EVICTION_WATCHER_ENV: &str = "QOSD_EVICTION_WATCHER";

/// Whether `qosd run` starts the fast memory watcher (yes unless
/// [`EVICTION_WATCHER_ENV`] is `off`; then warns once).
fn fast_watcher_enabled() -> bool {
    let off = std::env::var(EVICTION_WATCHER_ENV).is_ok_and(|v| v == "off");
    if off {
        tracing::warn!(
            "{EVICTION_WATCHER_ENV}=off: fast memory watcher disabled, memory pressure is seen by the eviction passes alone (benchmark baseline)"
        );
    }
    !off
}
