//! Fast detection of memory pressure: milliseconds, not the kubelet's 10 s.
//!
//! A poller thread keeps the cheap kernel files open and `pread`s them
//! (under a microsecond for `memory.usage_in_bytes` / `memory.current` on a
//! kept-open fd, a few µs for `memory.stat` / `/proc/meminfo`):
//! * cgroup v1: `memory.usage_in_bytes` (root or kubepods) — an upper bound
//!   of the working set; only when it reaches the line (capacity − threshold)
//!   is `memory.stat` read for the exact `total_inactive_file`;
//! * cgroup v2: `memory.current` of kubepods the same way; the root has no
//!   `memory.current`, so its `memory.stat` (anon + file − inactive_file) is
//!   read each time; or `/proc/meminfo` `MemAvailable` when so configured.
//!
//! The interval adapts to the distance from the line: at the assumed worst
//! ramp (default 1 GiB/s) the next poll comes before half the remaining
//! distance could be consumed, clamped to [1 ms, 100 ms] ([1 ms, 1 s] while
//! a v1 eventfd is armed on every target). On v1 a
//! `cgroup.event_control` eventfd threshold on `memory.usage_in_bytes`
//! (at the line + the last inactive_file, re-armed as it moves, like the
//! kubelet's notifier) wakes the poller at once; it fires only every
//! ~512 KiB of allocation, hence the poll beside it. A second one at the
//! line itself (usage = capacity − threshold) marks where a crossing first
//! becomes possible: while usage is below it `memory.stat` is not read at
//! all and the poll is bounded by `max_interval_quiet` (5 s).
//!
//! When the available amount is below a watched hard threshold the
//! callback gets a [`WatchEvent`] with a fresh observation, on the poller
//! thread: it should wake the manager (or act) without blocking.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::sys::procfs::parse_meminfo;
use crate::sys::signals::{stat_field, SignalSources};
use qosd_model::core::model::CgroupVersion;
use qosd_model::policy::evict::threshold::{EvictionConfig, Signal};
use qosd_model::policy::evict::MemorySource;

/// How a target's working set is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeKind {
    /// A cgroup with a cheap usage file (`memory.usage_in_bytes` on v1,
    /// `memory.current` on v2) and its `memory.stat`; `inactive_key` is
    /// `total_inactive_file` (v1) or `inactive_file` (v2).
    Usage {
        /// The usage file.
        usage: PathBuf,
        /// The cgroup's `memory.stat`.
        stat: PathBuf,
        /// The `memory.stat` key of inactive file pages.
        inactive_key: &'static str,
        /// v1 `cgroup.event_control` of the same cgroup, for eventfd wake-ups.
        event_control: Option<PathBuf>,
    },
    /// v2 root: `memory.stat` anon + file − inactive_file.
    V2RootStat {
        /// The root's `memory.stat`.
        stat: PathBuf,
    },
    /// `/proc/meminfo` MemAvailable (capacity − MemAvailable as working set).
    MemAvailable {
        /// `/proc/meminfo`.
        meminfo: PathBuf,
    },
}

/// One watched signal with its line in absolute bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchTarget {
    /// The signal.
    pub signal: Signal,
    /// How its working set is read.
    pub probe: ProbeKind,
    /// Its capacity, in bytes.
    pub capacity: i64,
    /// Wake when available < this (the largest hard threshold, in bytes).
    pub threshold: i64,
}

impl WatchTarget {
    /// Working-set level at which the threshold is crossed.
    pub(crate) fn line(&self) -> i64 {
        self.capacity - self.threshold
    }
}

/// Why the watcher could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// A file to read or arm could not be opened.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A signal could not be read.
    #[error("{0}")]
    Signal(#[from] crate::sys::signals::SignalError),
    /// The thread could not be spawned.
    #[error("cannot start the watcher thread: {0}")]
    Spawn(std::io::Error),
    /// An eventfd could not be made.
    #[error("eventfd: {0}")]
    EventFd(nix::Error),
}

/// Build the targets for the memory hard thresholds of `config`, with
/// capacities read from `sources` (MemTotal, allocatable or kubepods limit).
pub fn targets_from_config(
    config: &EvictionConfig,
    sources: &SignalSources,
) -> Result<Vec<WatchTarget>, WatchError> {
    let mut out = Vec::new();
    let v = sources.version;
    if config.hard(Signal::MemoryAvailable).next().is_some() {
        let cap = sources.memory_capacity()?;
        let probe = match (sources.memory_source, v) {
            (MemorySource::Meminfo, _) => ProbeKind::MemAvailable {
                meminfo: sources.meminfo.clone(),
            },
            (MemorySource::WorkingSet, CgroupVersion::V1) => usage_probe(v, &sources.memory_root),
            (MemorySource::WorkingSet, CgroupVersion::V2) => ProbeKind::V2RootStat {
                stat: sources.memory_root.join("memory.stat"),
            },
        };
        if let Some(t) = config.hard_line(Signal::MemoryAvailable, cap) {
            out.push(WatchTarget {
                signal: Signal::MemoryAvailable,
                probe,
                capacity: cap,
                threshold: t,
            });
        }
    }
    if config
        .hard(Signal::AllocatableMemoryAvailable)
        .next()
        .is_some()
    {
        if let Some(dir) = &sources.kubepods {
            let (_, cap) = sources.allocatable_memory_available()?;
            if let Some(t) = config.hard_line(Signal::AllocatableMemoryAvailable, cap) {
                out.push(WatchTarget {
                    signal: Signal::AllocatableMemoryAvailable,
                    probe: usage_probe(v, dir),
                    capacity: cap,
                    threshold: t,
                });
            }
        }
    }
    Ok(out)
}

/// The usage probe of a (non-root on v2) cgroup directory.
pub fn usage_probe(version: CgroupVersion, dir: &Path) -> ProbeKind {
    match version {
        CgroupVersion::V1 => ProbeKind::Usage {
            usage: dir.join("memory.usage_in_bytes"),
            stat: dir.join("memory.stat"),
            inactive_key: "total_inactive_file",
            event_control: Some(dir.join("cgroup.event_control")),
        },
        CgroupVersion::V2 => ProbeKind::Usage {
            usage: dir.join("memory.current"),
            stat: dir.join("memory.stat"),
            inactive_key: "inactive_file",
            event_control: None,
        },
    }
}

/// Tunables of the poller.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchConfig {
    /// The shortest poll interval (near the line).
    pub min_interval: Duration,
    /// The longest poll interval (far from the line).
    pub max_interval: Duration,
    /// Worst ramp to plan for, bytes per second.
    pub max_ramp_bytes_per_sec: u64,
    /// Use v1 eventfd thresholds as an extra wake-up.
    pub use_eventfd: bool,
    /// The interval's upper bound instead of `max_interval` while every
    /// target has a v1 eventfd armed: the kernel wakes the poller at the
    /// line, so far from it (beyond `2 · max_ramp · max_interval`) the
    /// poll only has to keep ahead of the worst ramp; each such poll
    /// re-reads `memory.stat` to keep the eventfd level current.
    pub max_interval_notified: Duration,
    /// The interval's upper bound while every target is a v1 usage probe
    /// whose usage is below the line with an eventfd armed at the line
    /// itself: no crossing is possible before usage reaches it (working
    /// set ≤ usage) and the kernel reports that, so `memory.stat` is not
    /// read and the poll (kept for the kernel's ~512 KiB notification
    /// granularity, dense near the line) may be this long far from it.
    pub max_interval_quiet: Duration,
    /// Run the poller thread with SCHED_FIFO at this priority (1–99), so a
    /// busy node cannot delay it; it sleeps almost all the time. `None`:
    /// normal scheduling. Failure to set it is logged, not fatal.
    pub rt_priority: Option<i32>,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            // Near the line (within ~2 MiB at the 1 GiB/s worst ramp) a
            // poll every millisecond: a slow ramp that the v1 eventfd
            // reports only every ~512 KiB is still seen within ~1 ms.
            min_interval: Duration::from_millis(1),
            max_interval: Duration::from_millis(100),
            max_ramp_bytes_per_sec: 1 << 30,
            use_eventfd: true,
            max_interval_notified: Duration::from_secs(1),
            // The eviction pass's own period: far from the line the kernel's
            // eventfd at the line is what reports a crossing.
            max_interval_quiet: Duration::from_secs(10),
            rt_priority: None,
        }
    }
}

/// The next poll interval for a distance (bytes of working set left before
/// the line): the time the worst ramp needs to eat half of it, clamped.
pub(crate) fn next_interval(distance: i64, cfg: &WatchConfig) -> Duration {
    if distance <= 0 {
        return cfg.min_interval;
    }
    let rate = cfg.max_ramp_bytes_per_sec.max(1) as f64;
    let secs = distance as f64 / rate / 2.0;
    Duration::from_secs_f64(secs.min(3600.0)).clamp(cfg.min_interval, cfg.max_interval)
}

/// [`next_interval`] with `max_interval_notified` as the upper bound (a v1
/// eventfd is armed on every target).
pub(crate) fn next_interval_notified(distance: i64, cfg: &WatchConfig) -> Duration {
    next_interval_up_to(distance, cfg, cfg.max_interval_notified)
}

/// [`next_interval`] with `max_interval_quiet` as the upper bound (every
/// target below its line by usage, an eventfd armed at the line);
/// `distance` is then the usage's, not the working set estimate's.
pub(crate) fn next_interval_quiet(usage_distance: i64, cfg: &WatchConfig) -> Duration {
    next_interval_up_to(
        usage_distance,
        cfg,
        cfg.max_interval_quiet.max(cfg.max_interval_notified),
    )
}

fn next_interval_up_to(distance: i64, cfg: &WatchConfig, max: Duration) -> Duration {
    let c = WatchConfig {
        max_interval: max.max(cfg.max_interval),
        ..cfg.clone()
    };
    next_interval(distance, &c)
}

/// What woke the poller before the crossing was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeSource {
    /// The poll timer.
    Poll,
    /// A v1 memory threshold eventfd.
    EventFd,
}

/// A (possible) hard-threshold crossing, with a fresh observation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchEvent {
    /// The signal.
    pub signal: Signal,
    /// Its available bytes at the read.
    pub available: i64,
    pub(crate) capacity: i64,
    pub(crate) threshold: i64,
    /// When the read that showed the crossing started.
    pub at: Instant,
    /// Time since the previous read of the same target (the crossing
    /// happened at most this long before `at`); `None` on the first read.
    pub gap: Option<Duration>,
    /// What woke the poller.
    pub source: WakeSource,
}

/// One sample of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Working set (exact when `exact`, else an upper bound below the line).
    pub(crate) working_set: i64,
    pub(crate) available: i64,
    /// `memory.stat` / meminfo was read for this sample.
    pub(crate) exact: bool,
    /// A v1 usage probe whose usage is below the line while an eventfd is
    /// armed at the line ([`Probe::line_armed`]): no crossing is possible
    /// until the kernel reports usage at the line; `memory.stat` was not read.
    pub(crate) quiet: bool,
    /// A safe upper bound of the working set (usage for a cheap sample).
    pub(crate) bound: i64,
}

/// A target with its files kept open.
pub(crate) struct Probe {
    pub(crate) target: WatchTarget,
    usage: Option<File>,
    stat: Option<File>,
    inactive_key: &'static str,
    /// Last inactive_file seen (v1/v2 usage probes), for the distance estimate.
    last_inactive: i64,
    /// Usage and time of the last `memory.stat` read (usage probes).
    exact_usage: i64,
    exact_at: Option<Instant>,
    /// Set by the poller for a long (eventfd-backed) wait: a cheap sample
    /// then also re-reads `memory.stat` when the last read is
    /// [`EXACT_REFRESH`] old or usage moved by more than [`REARM_DELTA`].
    pub(crate) refresh: bool,
    /// Set by the poller while a v1 eventfd is armed at the line itself
    /// (usage = capacity − threshold): below it no `memory.stat` read at all
    /// (not even the `refresh` one), since no crossing is possible there.
    pub(crate) line_armed: bool,
    buf: Vec<u8>,
}

/// How old the inactive_file estimate of a long wait may get.
pub(crate) const EXACT_REFRESH: Duration = Duration::from_secs(10);

fn open(path: &Path) -> Result<File, WatchError> {
    File::open(path).map_err(|source| WatchError::Open {
        path: path.to_path_buf(),
        source,
    })
}

fn pread<'a>(f: &File, buf: &'a mut [u8]) -> std::io::Result<&'a str> {
    let n = f.read_at(buf, 0)?;
    std::str::from_utf8(&buf[..n])
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn bad_data(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

impl Probe {
    pub(crate) fn open(target: WatchTarget) -> Result<Probe, WatchError> {
        let (usage, stat, inactive_key) = match &target.probe {
            ProbeKind::Usage {
                usage,
                stat,
                inactive_key,
                ..
            } => (Some(open(usage)?), Some(open(stat)?), *inactive_key),
            ProbeKind::V2RootStat { stat } => (None, Some(open(stat)?), "inactive_file"),
            ProbeKind::MemAvailable { meminfo } => (None, Some(open(meminfo)?), ""),
        };
        let mut p = Probe {
            target,
            usage,
            stat,
            inactive_key,
            last_inactive: 0,
            exact_usage: 0,
            exact_at: None,
            refresh: false,
            line_armed: false,
            buf: vec![0u8; 16 * 1024],
        };
        p.sample_exact()?;
        Ok(p)
    }

    fn read_usage(&mut self) -> std::io::Result<i64> {
        let f = self.usage.as_ref().expect("usage probe");
        let s = pread(f, &mut self.buf)?;
        s.trim()
            .parse::<i64>()
            .map_err(|_| bad_data("usage is not a number"))
    }

    fn read_stat(&mut self) -> std::io::Result<String> {
        let f = self.stat.as_ref().expect("stat file");
        // memory.stat can exceed the buffer only on odd kernels: grow once.
        loop {
            let n = f.read_at(&mut self.buf, 0)?;
            if n < self.buf.len() {
                return std::str::from_utf8(&self.buf[..n])
                    .map(str::to_owned)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e));
            }
            let len = self.buf.len() * 2;
            self.buf.resize(len, 0);
        }
    }

    /// Exact sample (reads memory.stat / meminfo).
    pub(crate) fn sample_exact(&mut self) -> Result<Sample, WatchError> {
        self.sample_inner(true).map_err(|source| WatchError::Open {
            path: self.path().to_path_buf(),
            source,
        })
    }

    fn path(&self) -> &Path {
        match &self.target.probe {
            ProbeKind::Usage { usage, .. } => usage,
            ProbeKind::V2RootStat { stat } => stat,
            ProbeKind::MemAvailable { meminfo } => meminfo,
        }
    }

    /// A cheap sample: for usage probes, `memory.stat` is read only when the
    /// usage reaches the line (usage ≥ working set, so nothing is missed).
    pub(crate) fn sample(&mut self) -> std::io::Result<Sample> {
        self.sample_inner(false)
    }

    fn sample_inner(&mut self, force_exact: bool) -> std::io::Result<Sample> {
        let cap = self.target.capacity;
        let line = self.target.line();
        match self.target.probe {
            ProbeKind::Usage { .. } => {
                let usage = self.read_usage()?;
                let quiet = self.line_armed && usage < line;
                let refresh = !quiet
                    && self.refresh
                    && (self.exact_at.is_none_or(|t| t.elapsed() >= EXACT_REFRESH)
                        || (usage - self.exact_usage).abs() > REARM_DELTA);
                if !force_exact && !refresh && usage < line {
                    // Estimate with the last inactive_file (for the interval
                    // only); the line test above used the safe upper bound.
                    let ws = (usage - self.last_inactive).max(0);
                    return Ok(Sample {
                        working_set: ws,
                        available: (cap - ws).max(0),
                        exact: false,
                        quiet,
                        bound: usage,
                    });
                }
                let key = self.inactive_key;
                let stat = self.read_stat()?;
                let inactive =
                    stat_field(&stat, key).ok_or_else(|| bad_data("no inactive_file"))? as i64;
                self.last_inactive = inactive;
                self.exact_usage = usage;
                self.exact_at = Some(Instant::now());
                let ws = (usage - inactive).max(0);
                Ok(Sample {
                    working_set: ws,
                    available: (cap - ws).max(0),
                    exact: true,
                    quiet: false,
                    bound: ws,
                })
            }
            ProbeKind::V2RootStat { .. } => {
                let stat = self.read_stat()?;
                let get = |k| stat_field(&stat, k).ok_or_else(|| bad_data(k));
                let ws = (get("anon")? + get("file")?).saturating_sub(get("inactive_file")?) as i64;
                Ok(Sample {
                    working_set: ws,
                    available: (cap - ws).max(0),
                    exact: true,
                    quiet: false,
                    bound: ws,
                })
            }
            ProbeKind::MemAvailable { .. } => {
                let text = self.read_stat()?;
                let mi = parse_meminfo(&text);
                let avail = *mi
                    .get("MemAvailable")
                    .ok_or_else(|| bad_data("no MemAvailable"))?;
                Ok(Sample {
                    working_set: cap - avail,
                    available: avail.clamp(0, cap),
                    exact: true,
                    quiet: false,
                    bound: cap - avail,
                })
            }
        }
    }

    /// Usage level for a v1 eventfd threshold: the line plus the last
    /// inactive_file (kubelet: capacity − threshold + inactive_file).
    pub(crate) fn eventfd_level(&self) -> i64 {
        self.target.line() + self.last_inactive
    }
}

/// A v1 memcg usage threshold notification.
struct MemcgNotifier {
    efd: EventFd,
    /// Kept open: the registration refers to it.
    _usage: File,
    level: i64,
}

impl MemcgNotifier {
    fn arm(usage: &Path, event_control: &Path, level: i64) -> std::io::Result<MemcgNotifier> {
        use std::io::Write;
        let efd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(std::io::Error::from)?;
        let usage_f = File::open(usage)?;
        use std::os::unix::fs::OpenOptionsExt as _;
        // Never through a symlink planted at the interface file's name.
        let mut ctl = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(event_control)?;
        let line = format!(
            "{} {} {}",
            efd.as_fd().as_raw_fd(),
            usage_f.as_raw_fd(),
            level.max(0)
        );
        ctl.write_all(line.as_bytes())?;
        Ok(MemcgNotifier {
            efd,
            _usage: usage_f,
            level,
        })
    }

    fn drain(&self) {
        let _ = self.efd.read();
    }
}

/// Counters of a running watcher (for metrics and idle-cost checks).
#[derive(Debug, Default)]
pub struct WatchStats {
    /// Samples taken.
    pub polls: AtomicU64,
    /// Samples that read `memory.stat` / meminfo.
    pub exact_reads: AtomicU64,
    /// Samples below the line with its eventfd armed (nothing but usage read).
    pub quiet_polls: AtomicU64,
    pub(crate) events: AtomicU64,
    /// Wake-ups by a threshold eventfd.
    pub eventfd_wakeups: AtomicU64,
    pub(crate) read_errors: AtomicU64,
    /// Current poll interval, µs.
    pub(crate) interval_us: AtomicU64,
}

/// A running watcher thread; stops on [`Watcher::stop`] or drop.
pub struct Watcher {
    /// The signals watched (their hard thresholds wake the pass loop).
    pub signals: Vec<Signal>,
    thread: crate::sys::stoppable::StoppableThread,
    /// The thread's counters.
    pub stats: Arc<WatchStats>,
}

/// Re-arm a v1 eventfd when the level moved by more than this.
const REARM_DELTA: i64 = 16 << 20;

impl Watcher {
    /// Whether the poller thread is still running (it ends only when
    /// stopped, or when it panicked).
    pub fn is_running(&self) -> bool {
        self.thread.is_running()
    }

    /// Open every target and start the poller thread. `on_event` runs on
    /// that thread for each sample below a target's threshold.
    pub fn spawn(
        targets: Vec<WatchTarget>,
        cfg: WatchConfig,
        mut on_event: impl FnMut(WatchEvent) + Send + 'static,
    ) -> Result<Watcher, WatchError> {
        let signals: Vec<Signal> = targets.iter().map(|t| t.signal).collect();
        let probes = targets
            .into_iter()
            .map(Probe::open)
            .collect::<Result<Vec<_>, _>>()?;
        let sig = crate::sys::stoppable::StopSignal::new().map_err(WatchError::EventFd)?;
        let stats = Arc::new(WatchStats::default());
        let mut poller = Poller {
            notifiers: probes.iter().map(|_| None).collect(),
            line_notifiers: probes.iter().map(|_| None).collect(),
            last_read: probes.iter().map(|_| None).collect(),
            probes,
            cfg,
            stop: sig.stop.clone(),
            waker: sig.waker.clone(),
            stats: stats.clone(),
        };
        let thread =
            crate::sys::stoppable::StoppableThread::spawn("qosd-evict-watch", sig, move || {
                poller.run(&mut on_event)
            })
            .map_err(WatchError::Spawn)?;
        Ok(Watcher {
            signals,
            thread,
            stats,
        })
    }

    /// Stop the thread and wait for it.
    pub fn stop(mut self) {
        self.thread.shutdown();
    }
}

/// The poller thread's state: each target's probe, its v1 eventfds and
/// when it was last read.
struct Poller {
    probes: Vec<Probe>,
    /// Armed at the eventfd level (the line plus the last inactive_file),
    /// re-armed when that moves by more than [`REARM_DELTA`].
    notifiers: Vec<Option<MemcgNotifier>>,
    /// Armed at the line itself (usage = capacity − threshold), once: the
    /// line does not move.
    line_notifiers: Vec<Option<MemcgNotifier>>,
    last_read: Vec<Option<Instant>>,
    cfg: WatchConfig,
    stop: Arc<AtomicBool>,
    waker: Arc<EventFd>,
    stats: Arc<WatchStats>,
}

/// What one round over the targets found.
struct Round {
    /// The smallest distance of a target to its line (`i64::MAX`: none read).
    min_distance: i64,
    /// Every target was read and is quiet ([`Sample::quiet`]).
    all_quiet: bool,
}

impl Poller {
    /// Sample every target, report crossings, then wait (poll interval by
    /// the distance to the lines, or an eventfd) until stopped.
    fn run(&mut self, on_event: &mut dyn FnMut(WatchEvent)) {
        if let Some(prio) = self.cfg.rt_priority {
            set_realtime(prio);
        }
        let mut interval = self.cfg.min_interval;
        let mut woke_by_eventfd = false;
        while !self.stop.load(Ordering::Relaxed) {
            let source = if woke_by_eventfd {
                WakeSource::EventFd
            } else {
                WakeSource::Poll
            };
            // A long (eventfd-backed) wait keeps memory.stat fresh.
            let long = interval > self.cfg.max_interval;
            let round = self.sample_all(long, source, on_event);
            interval = self.interval_after(&round);
            self.stats
                .interval_us
                .store(interval.as_micros() as u64, Ordering::Relaxed);
            woke_by_eventfd = wait(
                &self.waker,
                self.notifiers.iter().chain(&self.line_notifiers),
                interval,
                &self.stats,
            );
        }
    }

    /// One round: sample each target, report those below their threshold,
    /// keep their eventfds armed.
    fn sample_all(
        &mut self,
        long: bool,
        source: WakeSource,
        on_event: &mut dyn FnMut(WatchEvent),
    ) -> Round {
        let mut round = Round {
            min_distance: i64::MAX,
            all_quiet: !self.probes.is_empty(),
        };
        for i in 0..self.probes.len() {
            let stats = &self.stats;
            stats.polls.fetch_add(1, Ordering::Relaxed);
            let p = &mut self.probes[i];
            p.refresh = long;
            p.line_armed = self.line_notifiers[i].is_some();
            let read_at = Instant::now();
            let gap = self.last_read[i].map(|t| read_at.saturating_duration_since(t));
            self.last_read[i] = Some(read_at);
            let s = match p.sample() {
                Ok(s) => s,
                Err(e) => {
                    stats.read_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(signal = %p.target.signal, error = %e, "watch read failed");
                    round.all_quiet = false;
                    continue;
                }
            };
            if s.exact {
                stats.exact_reads.fetch_add(1, Ordering::Relaxed);
            }
            if s.quiet {
                stats.quiet_polls.fetch_add(1, Ordering::Relaxed);
            }
            round.all_quiet &= s.quiet;
            if s.available < p.target.threshold {
                stats.events.fetch_add(1, Ordering::Relaxed);
                on_event(WatchEvent {
                    signal: p.target.signal,
                    available: s.available,
                    capacity: p.target.capacity,
                    threshold: p.target.threshold,
                    at: read_at,
                    gap,
                    source,
                });
            }
            // Quiet: the usage's distance (safe whatever inactive_file did
            // since it was last read).
            let ws = if s.quiet { s.bound } else { s.working_set };
            round.min_distance = round.min_distance.min(p.target.line() - ws);
            if self.cfg.use_eventfd {
                self.arm_eventfds(i);
            }
        }
        round
    }

    /// A v1 usage target: (re-)arm its eventfd at the current level, and
    /// once one works, the one at the line.
    fn arm_eventfds(&mut self, i: usize) {
        let p = &self.probes[i];
        let ProbeKind::Usage {
            usage,
            event_control: Some(ctl),
            ..
        } = &p.target.probe
        else {
            return;
        };
        let level = p.eventfd_level();
        let stale = self.notifiers[i]
            .as_ref()
            .is_none_or(|n| (n.level - level).abs() > REARM_DELTA);
        if stale {
            match MemcgNotifier::arm(usage, ctl, level) {
                Ok(n) => self.notifiers[i] = Some(n),
                Err(e) => {
                    tracing::debug!(path = %ctl.display(), error = %e, "no memcg eventfd; polling only");
                    self.notifiers[i] = None;
                }
            }
        }
        if self.notifiers[i].is_some() && self.line_notifiers[i].is_none() {
            match MemcgNotifier::arm(usage, ctl, p.target.line()) {
                Ok(n) => self.line_notifiers[i] = Some(n),
                Err(e) => {
                    tracing::debug!(path = %ctl.display(), error = %e, "no memcg eventfd at the line; memory.stat refreshed every 10 s");
                }
            }
        }
    }

    /// The wait before the next round: by the distance to the nearest line,
    /// longer while the kernel watches the lines (eventfds armed).
    fn interval_after(&self, round: &Round) -> Duration {
        let cfg = &self.cfg;
        let notified = cfg.use_eventfd
            && !self.notifiers.is_empty()
            && self.notifiers.iter().all(Option::is_some);
        if round.min_distance == i64::MAX {
            cfg.max_interval
        } else if round.all_quiet {
            next_interval_quiet(round.min_distance, cfg)
        } else if notified {
            next_interval_notified(round.min_distance, cfg)
        } else {
            next_interval(round.min_distance, cfg)
        }
    }
}

/// Whether this process may ask for real-time scheduling at all: a
/// non-zero RLIMIT_RTPRIO or CAP_SYS_NICE in the effective set (`CapEff`
/// of `status`, /proc/self/status). Under qosd.service neither holds
/// (`RestrictRealtime=yes`, bounding set CAP_KILL): the request is then not
/// made.
pub fn realtime_allowed(status: &str) -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let rtprio = unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut lim) } == 0 && lim.rlim_cur > 0;
    rtprio || cap_eff_has(status, 23 /* CAP_SYS_NICE */)
}

/// Whether the `CapEff:` line of a /proc/<pid>/status text has bit `cap`.
pub(crate) fn cap_eff_has(status: &str, cap: u32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .is_some_and(|bits| bits & (1u64 << cap) != 0)
}

/// What [`set_thread_realtime`] did.
#[derive(Debug)]
pub enum Realtime {
    /// The calling thread now runs SCHED_FIFO.
    Set,
    /// Not asked: real-time scheduling is not permitted here (RLIMIT_RTPRIO
    /// 0 and no CAP_SYS_NICE).
    NotPermitted,
    /// Asked and refused.
    Failed(std::io::Error),
}

/// SCHED_FIFO at `prio` (1–99) for the calling thread, asked only where it
/// can be had (the one place qosd changes its scheduling).
pub fn set_thread_realtime(prio: i32) -> Realtime {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !realtime_allowed(&status) {
        return Realtime::NotPermitted;
    }
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: plain syscall on the current thread with a valid sched_param.
    match unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } {
        0 => Realtime::Set,
        _ => Realtime::Failed(std::io::Error::last_os_error()),
    }
}

/// SCHED_FIFO for the watcher thread (not asked where it cannot be had).
fn set_realtime(prio: i32) {
    set_thread_realtime_logged(prio, "eviction watcher");
}

/// SCHED_FIFO at `prio` for the calling thread (`what` names it in the
/// log line when it cannot be had).
pub(crate) fn set_thread_realtime_logged(prio: i32, what: &str) {
    match set_thread_realtime(prio) {
        Realtime::Set => {}
        Realtime::NotPermitted => tracing::info!(
            priority = prio,
            "{what} at normal priority: real-time scheduling not permitted here (RLIMIT_RTPRIO 0, no CAP_SYS_NICE; qosd.service has RestrictRealtime=yes)"
        ),
        Realtime::Failed(error) => tracing::warn!(
            priority = prio,
            error = %error,
            "cannot run the {what} with SCHED_FIFO; using normal scheduling"
        ),
    }
}

/// Sleep up to `timeout`, waking early on the stop waker or a memcg
/// eventfd. Returns true when an eventfd fired.
fn wait<'a>(
    waker: &EventFd,
    notifiers: impl Iterator<Item = &'a Option<MemcgNotifier>>,
    timeout: Duration,
    stats: &WatchStats,
) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let armed: Vec<&MemcgNotifier> = notifiers.flatten().collect();
    let mut fds = vec![PollFd::new(waker.as_fd(), PollFlags::POLLIN)];
    for n in &armed {
        fds.push(PollFd::new(n.efd.as_fd(), PollFlags::POLLIN));
    }
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    let ms = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
    match poll(&mut fds, ms) {
        Ok(0) | Err(_) => false,
        Ok(_) => {
            let mut fired = false;
            for (k, fd) in fds.iter().enumerate().skip(1) {
                if fd.revents().is_some_and(|r| r.contains(PollFlags::POLLIN)) {
                    fired = true;
                    armed[k - 1].drain();
                }
            }
            if fired {
                stats.eventfd_wakeups.fetch_add(1, Ordering::Relaxed);
            }
            fired
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    const MI: i64 = 1024 * 1024;

    #[test]
    fn cap_eff_bits() {
        // root with everything / the unit's bounding set CAP_KILL (bit 5)
        assert!(cap_eff_has("Name:\tq\nCapEff:\t000001ffffffffff\n", 23));
        assert!(!cap_eff_has("CapEff:\t0000000000000020\n", 23));
        assert!(cap_eff_has("CapEff:\t0000000000000020\n", 5));
        assert!(!cap_eff_has("no such line", 23));
    }

    #[test]
    fn interval_table() {
        let cfg = WatchConfig::default(); // 1 GiB/s, 1..100 ms
        let table: &[(i64, u64)] = &[
            (-5, 1),
            (0, 1),
            (1, 1),
            (MI, 1),         // ≈ 0.49 ms → 1
            (10 * MI, 4),    // 10 MiB / 1 GiB/s / 2 ≈ 4.9 ms
            (20 * MI, 9),    // ≈ 9.77 ms
            (100 * MI, 48),  // ≈ 48.8 ms
            (205 * MI, 100), // ≈ 100.1 ms → 100
            (4096 * MI, 100),
            (i64::MAX, 100),
        ];
        for &(d, ms) in table {
            let got = next_interval(d, &cfg);
            assert_eq!(got.as_millis() as u64, ms, "distance {d}");
        }
        let slow = WatchConfig {
            max_ramp_bytes_per_sec: 100 << 20,
            ..Default::default()
        };
        assert_eq!(next_interval(5 * MI, &slow).as_millis(), 25);
    }

    struct FakeCgroup {
        dir: tempfile::TempDir,
    }

    impl FakeCgroup {
        fn v1(usage: i64, inactive: i64) -> FakeCgroup {
            let f = FakeCgroup {
                dir: tempfile::tempdir().unwrap(),
            };
            f.set(usage, inactive);
            f
        }
        fn set(&self, usage: i64, inactive: i64) {
            // overwrite in place (kept-open fds must see new contents)
            write_in_place(
                &self.dir.path().join("memory.usage_in_bytes"),
                &format!("{usage}\n"),
            );
            write_in_place(
                &self.dir.path().join("memory.stat"),
                &format!("cache 0\ntotal_inactive_file {inactive}\n"),
            );
        }
        fn target(&self, cap: i64, threshold: i64) -> WatchTarget {
            WatchTarget {
                signal: Signal::AllocatableMemoryAvailable,
                probe: usage_probe(CgroupVersion::V1, self.dir.path()),
                capacity: cap,
                threshold,
            }
        }
    }

    fn write_in_place(p: &Path, s: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(p)
            .unwrap();
        f.write_all(s.as_bytes()).unwrap();
    }

    #[test]
    fn probe_samples_table() {
        // capacity 1000 MiB, threshold 100 MiB → line at 900 MiB working set
        let cg = FakeCgroup::v1(100 * MI, 10 * MI);
        let mut p = Probe::open(cg.target(1000 * MI, 100 * MI)).unwrap();
        // (usage, inactive, exact?, available)
        let table: &[(i64, i64, bool, i64)] = &[
            (100, 10, false, 910), // far: cheap read, estimate with last inactive
            (899, 10, false, 111), // below line by usage: no stat read
            (900, 10, true, 110),  // usage at the line: exact read
            (950, 100, true, 150), // lots of inactive: exact, not crossed
            (1000, 50, true, 50),  // crossed
            (1200, 0, true, 0),    // floored at 0
        ];
        for &(u, i, exact, avail) in table {
            cg.set(u * MI, i * MI);
            let s = p.sample().unwrap();
            assert_eq!(
                (s.exact, s.available),
                (exact, avail * MI),
                "usage {u} inactive {i}"
            );
        }
    }

    #[test]
    fn v2_root_and_meminfo_probes() {
        let d = tempfile::tempdir().unwrap();
        let stat = d.path().join("memory.stat");
        write_in_place(
            &stat,
            &format!(
                "anon {}\nfile {}\ninactive_file {}\n",
                500 * MI,
                300 * MI,
                100 * MI
            ),
        );
        let mut p = Probe::open(WatchTarget {
            signal: Signal::MemoryAvailable,
            probe: ProbeKind::V2RootStat { stat },
            capacity: 1000 * MI,
            threshold: 100 * MI,
        })
        .unwrap();
        assert_eq!(p.sample().unwrap().available, 300 * MI);
        let mi = d.path().join("meminfo");
        write_in_place(&mi, "MemTotal: 1024000 kB\nMemAvailable: 51200 kB\n");
        let mut p = Probe::open(WatchTarget {
            signal: Signal::MemoryAvailable,
            probe: ProbeKind::MemAvailable { meminfo: mi },
            capacity: 1_024_000 * 1024,
            threshold: 100 * MI,
        })
        .unwrap();
        assert_eq!(p.sample().unwrap().available, 50 * MI);
    }

    #[test]
    fn open_errors_name_the_path() {
        let d = tempfile::tempdir().unwrap();
        let t = WatchTarget {
            signal: Signal::MemoryAvailable,
            probe: usage_probe(CgroupVersion::V2, d.path()),
            capacity: 1,
            threshold: 1,
        };
        let e = Probe::open(t).err().unwrap().to_string();
        assert!(e.contains("memory.current"), "{e}");
    }

    #[test]
    fn long_wait_refreshes_the_estimate_when_usage_moves() {
        let cg = FakeCgroup::v1(100 * MI, 40 * MI);
        let mut p = Probe::open(cg.target(1000 * MI, 100 * MI)).unwrap();
        assert_eq!(p.last_inactive, 40 * MI);
        cg.set(105 * MI, 10 * MI);
        // a short wait: cheap (usage far below the line), old estimate kept
        assert!(!p.sample().unwrap().exact);
        // a long wait: usage moved by ≤ 16 MiB since the last exact read
        p.refresh = true;
        assert!(!p.sample().unwrap().exact);
        assert_eq!(p.last_inactive, 40 * MI);
        // usage moved by more: memory.stat is read again
        cg.set(130 * MI, 10 * MI);
        let s = p.sample().unwrap();
        assert!(s.exact);
        assert_eq!(p.last_inactive, 10 * MI);
        assert_eq!(s.working_set, 120 * MI);
        p.refresh = false;
        cg.set(200 * MI, 0);
        assert!(!p.sample().unwrap().exact);
    }

    /// With an eventfd armed at the line: below it by usage nothing but the
    /// usage is read, however old the estimate or far usage moved (no
    /// crossing is possible there); at the line the exact read as before.
    #[test]
    fn below_the_armed_line_memory_stat_is_never_read() {
        let cg = FakeCgroup::v1(100 * MI, 40 * MI);
        let mut p = Probe::open(cg.target(1000 * MI, 100 * MI)).unwrap();
        p.line_armed = true;
        p.refresh = true; // a long wait
                          // (usage, inactive, exact?, quiet?) in MiB; line at 900 MiB usage
        let table: &[(i64, i64, bool, bool)] = &[
            (130, 10, false, true), // moved by > 16 MiB: no refresh read
            (600, 0, false, true),
            (899, 0, false, true),
            (900, 50, true, false), // at the line: exact, as before
            (950, 100, true, false),
            (500, 5, false, true), // back below: quiet again
        ];
        for &(u, i, exact, quiet) in table {
            cg.set(u * MI, i * MI);
            let s = p.sample().unwrap();
            assert_eq!((s.exact, s.quiet), (exact, quiet), "usage {u} inactive {i}");
            if quiet {
                assert_eq!(s.bound, u * MI, "the bound is the usage");
            } else {
                assert_eq!(s.bound, s.working_set);
            }
        }
        // the inactive_file of the last exact read (at 950 MiB), not since
        assert_eq!(p.last_inactive, 100 * MI);
        // Without the line armed the same long wait refreshes (unchanged).
        p.line_armed = false;
        cg.set(600 * MI, 7 * MI);
        let s = p.sample().unwrap();
        assert!(s.exact && !s.quiet);
        assert_eq!(p.last_inactive, 7 * MI);
    }

    #[test]
    fn interval_quiet_bound() {
        let cfg = WatchConfig::default();
        let gi = 1024 * MI;
        // far: up to 10 s (≥ 20 GiB of usage distance at 1 GiB/s)
        assert_eq!(next_interval_quiet(20 * gi, &cfg), Duration::from_secs(10));
        assert_eq!(next_interval_quiet(10 * gi, &cfg), Duration::from_secs(5));
        assert_eq!(next_interval_quiet(4 * gi, &cfg), Duration::from_secs(2));
        // within 2 GiB: what the notified bound gives, and near the line
        // what the plain poll gives (never sparser than before)
        for d in [2 * gi, gi, 100 * MI, MI, 0] {
            assert_eq!(
                next_interval_quiet(d, &cfg),
                next_interval_notified(d, &cfg)
            );
        }
        assert_eq!(
            next_interval_quiet(10 * MI, &cfg),
            next_interval(10 * MI, &cfg)
        );
    }

    #[test]
    fn interval_notified_bound() {
        let cfg = WatchConfig::default();
        assert_eq!(
            next_interval_notified(4096 * MI, &cfg),
            Duration::from_secs(1)
        );
        assert_eq!(next_interval_notified(1024 * MI, &cfg).as_millis(), 500);
        // near the line: the same as without an eventfd
        assert_eq!(
            next_interval_notified(100 * MI, &cfg),
            next_interval(100 * MI, &cfg)
        );
        assert_eq!(next_interval_notified(0, &cfg), cfg.min_interval);
    }

    #[test]
    fn watcher_wakes_on_crossing_fast() {
        let cg = FakeCgroup::v1(100 * MI, 0);
        let cfg = WatchConfig {
            use_eventfd: true, // no event_control in the fake dir: falls back to polling
            ..Default::default()
        };
        let (tx, rx) = mpsc::channel();
        let w = Watcher::spawn(vec![cg.target(1000 * MI, 100 * MI)], cfg, move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
        // far from the line: no events, slow interval
        std::thread::sleep(Duration::from_millis(150));
        assert!(rx.try_recv().is_err());
        assert_eq!(w.stats.interval_us.load(Ordering::Relaxed), 100_000);
        // approach: the interval shrinks
        cg.set(880 * MI, 0);
        std::thread::sleep(Duration::from_millis(250));
        let iv = w.stats.interval_us.load(Ordering::Relaxed);
        assert!(iv <= 10_000, "interval {iv}us near the line");
        assert!(rx.try_recv().is_err());
        // cross: an event within a few intervals
        let t = Instant::now();
        cg.set(950 * MI, 0);
        let e = rx.recv_timeout(Duration::from_secs(2)).expect("event");
        let lat = e.at.saturating_duration_since(t);
        // The poll is 5 ms here; the bound is loose because parallel tests on
        // a loaded machine delay threads (qosd-evict-bench measures latency).
        assert!(lat < Duration::from_secs(1), "latency {lat:?}");
        assert_eq!(e.available, 50 * MI);
        assert_eq!(e.threshold, 100 * MI);
        assert_eq!(e.signal, Signal::AllocatableMemoryAvailable);
        // the read that saw it had a previous read (the poll near the line)
        assert!(e.gap.is_some(), "{e:?}");
        w.stop();
    }

    #[test]
    fn targets_from_config_fixture() {
        let f =
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("fixtures/signals");
        let mut src = SignalSources::host(CgroupVersion::V1);
        src.memory_root = f.join("v1");
        src.kubepods = Some(f.join("v1/kubepods"));
        src.meminfo = f.join("meminfo");
        let cfg =
            EvictionConfig::from_raw(&qosd_model::policy::evict::threshold::RawEvictionConfig {
                eviction_hard: Some(
                    [
                        ("memory.available".to_string(), "10%".to_string()),
                        (
                            "allocatableMemory.available".to_string(),
                            "100Mi".to_string(),
                        ),
                        ("nodefs.available".to_string(), "10%".to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            })
            .unwrap();
        let t = targets_from_config(&cfg, &src).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].signal, Signal::MemoryAvailable);
        assert_eq!(t[0].capacity, 4096 * MI);
        assert_eq!(t[0].threshold, (4096 * MI) / 10);
        assert_eq!(t[1].capacity, 1024 * MI);
        assert_eq!(t[1].threshold, 100 * MI);
        assert_eq!(t[1].line(), 924 * MI);
        // v2 root uses memory.stat
        let mut src2 = src.clone();
        src2.version = CgroupVersion::V2;
        src2.memory_root = f.join("v2");
        src2.kubepods = Some(f.join("v2/kubepods"));
        let t = targets_from_config(&cfg, &src2).unwrap();
        assert!(matches!(t[0].probe, ProbeKind::V2RootStat { .. }));
        let mut p = Probe::open(t[0].clone()).unwrap();
        assert_eq!(p.sample().unwrap().available, (4096 - 1200) * MI);
    }
}
