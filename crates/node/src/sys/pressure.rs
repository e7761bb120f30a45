//! Pressure stall information (PSI): reading the pressure files, arming
//! the kernel's triggers, and the pressure watcher thread that wakes the
//! eviction loop when memory stalls.
//!
//! Files (every root a parameter): the node's `<proc>/pressure/{memory,io,cpu}`
//! and, on cgroup v2, each cgroup's `memory.pressure` (`io.pressure`,
//! `cpu.pressure`), two lines each:
//!
//! ```text
//! some avg10=0.00 avg60=0.00 avg300=0.00 total=21470096
//! full avg10=0.00 avg60=0.00 avg300=0.00 total=7819955
//! ```
//!
//! `total` is the cumulative stalled time in µs; the averages are the
//! kernel's (10 s, 60 s, 300 s). Older kernels have no `full` line in the
//! node's `cpu` file.
//!
//! **Triggers.** Writing `some|full <stall µs> <window µs>` to a pressure
//! file opened `O_RDWR | O_NONBLOCK` arms a trigger: the descriptor polls
//! `POLLPRI` when the stalled time within any window reaches the stall,
//! at most once per window. The kernel's rules: one trigger per
//! descriptor (a second write is `EBUSY`), a window of 500 ms … 10 s, a
//! stall of 1 µs … the window; a task without `CAP_SYS_RESOURCE` may arm
//! only windows that are multiples of 2 s (kernels ≥ 6.5; older kernels
//! refuse it outright), and its triggers are checked by the kernel's
//! averaging work every 2 s instead of a real-time poller (window/10).
//! Measured on kernel 6.18 without `CAP_SYS_RESOURCE`: such a trigger
//! fires at the first stall after it is armed whatever its size (4 ms of
//! stall fired a 1.9 s/2 s trigger: its window starts from a counter the
//! averaging work never updates), and the breach it then believes in is
//! carried over and reported again later, whenever the averaging work next
//! runs (14 s later on a quiet node: 0.04 ms of stall in that window). So
//! an unprivileged trigger's events only wake the watcher, which then
//! reads the counter itself and decides; a privileged trigger's events
//! count as the kernel's report of a breach.
//!
//! **Availability.** No `<proc>/pressure` (a kernel without PSI, or booted
//! `psi=0`), a file answering `EOPNOTSUPP` (PSI disabled), or cgroup v1
//! (no per-cgroup pressure files): the signal is reported unavailable
//! with the reason, never silently absent. Where a trigger cannot be armed
//! (refused by the kernel, or a file that is not procfs or cgroupfs, such
//! as a test fixture) the watcher polls the `total` counter instead, every
//! tenth of the window, and says so.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::eventfd::EventFd;

use qosd_model::policy::evict::manager::Observation;
use qosd_model::policy::evict::pressure::{observed, stall_us, Breach, StallSamples};
use qosd_model::policy::evict::threshold::{EvictionConfig, Signal, ThresholdValue};

/// A pressure resource (a file under `<proc>/pressure/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    /// `memory`.
    Memory,
    /// `io`.
    Io,
    /// `cpu`.
    Cpu,
}

impl Resource {
    /// Every resource, in the kernel's file order.
    pub const ALL: [Resource; 3] = [Resource::Memory, Resource::Io, Resource::Cpu];

    /// The file name under `<proc>/pressure/`.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::Io => "io",
            Resource::Cpu => "cpu",
        }
    }
}

/// A line of a pressure file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Line {
    /// At least one task stalled.
    Some,
    /// Every non-idle task stalled at once.
    Full,
}

impl Line {
    /// The line's first word.
    pub fn as_str(self) -> &'static str {
        match self {
            Line::Some => "some",
            Line::Full => "full",
        }
    }

    /// The line a pressure signal reads (`None`: not a pressure signal).
    pub fn of(signal: Signal) -> Option<Line> {
        match signal {
            Signal::MemorySome => Some(Line::Some),
            Signal::MemoryFull => Some(Line::Full),
            _ => None,
        }
    }
}

/// One line's values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineValues {
    /// Percent stalled, 10 s average.
    pub avg10: f64,
    /// Percent stalled, 60 s average.
    pub avg60: f64,
    /// Percent stalled, 300 s average.
    pub avg300: f64,
    /// Cumulative stalled time, µs.
    pub total_us: u64,
}

/// A pressure file's content.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// The `some` line.
    pub some: LineValues,
    /// Absent in the node's `cpu` file of older kernels.
    pub full: Option<LineValues>,
}

impl Reading {
    /// The values of `line`.
    pub fn line(&self, line: Line) -> Option<&LineValues> {
        match line {
            Line::Some => Some(&self.some),
            Line::Full => self.full.as_ref(),
        }
    }
}

/// The largest pressure file accepted (the kernel's is ~110 bytes).
const MAX_FILE: usize = 1024;

/// Parse a pressure file. Every field is checked: a line is
/// `some|full avg10=F avg60=F avg300=F total=N` with finite, non-negative
/// averages; `some` is required, once; unknown lines are refused.
pub fn parse(text: &str) -> Result<Reading, String> {
    let mut some = None;
    let mut full = None;
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = l.split_whitespace();
        let slot = match words.next() {
            Some("some") => &mut some,
            Some("full") => &mut full,
            _ => return Err(format!("unexpected line {:?}", short(l))),
        };
        if slot.is_some() {
            return Err(format!("line given twice: {:?}", short(l)));
        }
        let mut vals = [None::<f64>; 3];
        let mut total = None;
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| format!("malformed field {:?}", short(w)))?;
            let avg = |v: &str| {
                v.parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .ok_or_else(|| format!("bad average {:?}", short(w)))
            };
            match k {
                "avg10" => vals[0] = Some(avg(v)?),
                "avg60" => vals[1] = Some(avg(v)?),
                "avg300" => vals[2] = Some(avg(v)?),
                "total" => {
                    total = Some(
                        v.parse::<u64>()
                            .map_err(|_| format!("bad total {:?}", short(w)))?,
                    )
                }
                _ => return Err(format!("unknown field {:?}", short(w))),
            }
        }
        let (Some(avg10), Some(avg60), Some(avg300), Some(total_us)) =
            (vals[0], vals[1], vals[2], total)
        else {
            return Err(format!("incomplete line {:?}", short(l)));
        };
        *slot = Some(LineValues {
            avg10,
            avg60,
            avg300,
            total_us,
        });
    }
    Ok(Reading {
        some: some.ok_or("no `some` line")?,
        full,
    })
}

fn short(s: &str) -> String {
    s.chars().take(60).collect()
}

/// Why a pressure file could not be read or armed; names the path.
#[derive(Debug, thiserror::Error)]
pub enum PressureError {
    /// PSI is not there: no file (no PSI in the kernel, `psi=0`, or cgroup
    /// v1) or the kernel answers `EOPNOTSUPP` (PSI disabled).
    #[error("{path}: pressure stall information unavailable: {reason}")]
    Unavailable {
        /// The pressure file.
        path: PathBuf,
        /// Why it is unavailable.
        reason: String,
    },
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The pressure file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file did not hold pressure lines.
    #[error("{path}: {message}")]
    Format {
        /// The pressure file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
}

impl PressureError {
    fn of_io(path: &Path, e: std::io::Error) -> PressureError {
        let reason = match e.raw_os_error() {
            Some(libc::ENOENT) => {
                "no such file: the kernel has no PSI (CONFIG_PSI), was booted with psi=0, or (per cgroup) the cgroup is v1 or gone"
            }
            Some(libc::EOPNOTSUPP) => {
                "the kernel answers EOPNOTSUPP: PSI is disabled (boot with psi=1)"
            }
            _ => {
                return PressureError::Io {
                    path: path.to_path_buf(),
                    source: e,
                }
            }
        };
        PressureError::Unavailable {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// Whether PSI is not there (as opposed to a read that failed).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, PressureError::Unavailable { .. })
    }
}

/// `<proc_root>/pressure/<resource>`.
pub(crate) fn node_file(proc_root: &Path, r: Resource) -> PathBuf {
    proc_root.join("pressure").join(r.as_str())
}

/// `<cgroup dir>/<resource>.pressure` (cgroup v2).
pub(crate) fn cgroup_file(dir: &Path, r: Resource) -> PathBuf {
    dir.join(format!("{}.pressure", r.as_str()))
}

/// Read a whole (small) pressure file through `f` from offset 0.
fn pread_reading(f: &File, path: &Path) -> Result<Reading, PressureError> {
    let mut buf = [0u8; MAX_FILE];
    let n = f
        .read_at(&mut buf, 0)
        .map_err(|e| PressureError::of_io(path, e))?;
    if n == buf.len() {
        return Err(PressureError::Format {
            path: path.to_path_buf(),
            message: format!("longer than {MAX_FILE} bytes"),
        });
    }
    let text = std::str::from_utf8(&buf[..n]).map_err(|_| PressureError::Format {
        path: path.to_path_buf(),
        message: "not UTF-8".into(),
    })?;
    parse(text).map_err(|message| PressureError::Format {
        path: path.to_path_buf(),
        message,
    })
}

fn open_read(path: &Path) -> Result<File, PressureError> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| PressureError::of_io(path, e))
}

/// Read a pressure file once (open, read, close): per-pod files, whose
/// descriptors would outlive the pods.
pub fn read(path: &Path) -> Result<Reading, PressureError> {
    let f = open_read(path)?;
    pread_reading(&f, path)
}

/// The cumulative `some` stall of a cgroup's `memory.pressure` (µs), or
/// why not.
pub fn cgroup_memory_stall_us(dir: &Path) -> Result<u64, PressureError> {
    read(&cgroup_file(dir, Resource::Memory)).map(|r| r.some.total_us)
}

/// Whether the node's pressure file of `r` can be read: `Ok` with its
/// reading, or why not ([`PressureError::Unavailable`] when PSI is not
/// there).
pub fn node_availability(proc_root: &Path, r: Resource) -> Result<Reading, PressureError> {
    read(&node_file(proc_root, r))
}

/// Whether a task with this `/proc/<pid>/status` text may arm any trigger
/// window (`CAP_SYS_RESOURCE` in `CapEff`): without it only multiples of
/// 2 s, checked every 2 s.
pub fn privileged(status: &str) -> bool {
    crate::sys::watch::cap_eff_has(status, 24 /* CAP_SYS_RESOURCE */)
}

/// An armed kernel trigger: the descriptor polls `POLLPRI` on a breach.
#[derive(Debug)]
pub struct Trigger {
    file: File,
    /// The stall line, µs.
    pub stall_us: u64,
    /// The window, µs.
    pub window_us: u64,
}

impl AsFd for Trigger {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// Why a trigger could not be armed (the watcher then polls).
#[derive(Debug, thiserror::Error)]
pub enum ArmError {
    /// Not a procfs or cgroupfs file (a fixture, a bind mount of a copy):
    /// writing there would only write text into a file.
    #[error("{path} is not a kernel pressure file (not procfs or cgroup2): no trigger")]
    NotKernelFile {
        /// The pressure file.
        path: PathBuf,
    },
    /// The kernel refused the trigger.
    #[error("{path}: the kernel refused trigger {spec:?}: {reason}")]
    Refused {
        /// The pressure file.
        path: PathBuf,
        /// The trigger written (`some 150000 1000000`).
        spec: String,
        /// The kernel's error.
        reason: String,
    },
    /// The file could not be opened or read.
    #[error("{0}")]
    Pressure(#[from] PressureError),
}

/// Check a trigger against the kernel's rules before writing it.
pub(crate) fn check_trigger(stall_us: u64, window_us: u64, privileged: bool) -> Result<(), String> {
    if !(500_000..=10_000_000).contains(&window_us) {
        return Err(format!("window {window_us} µs is outside 500ms..10s"));
    }
    if stall_us == 0 || stall_us > window_us {
        return Err(format!("stall {stall_us} µs is outside 1 µs..the window"));
    }
    if !privileged && window_us % 2_000_000 != 0 {
        return Err(format!(
            "window {window_us} µs is not a multiple of 2s, which a task without CAP_SYS_RESOURCE needs"
        ));
    }
    Ok(())
}

/// Arm a trigger `<line> <stall_us> <window_us>` on the pressure file at
/// `path` (procfs or cgroup2 only).
pub fn arm(path: &Path, line: Line, stall_us: u64, window_us: u64) -> Result<Trigger, ArmError> {
    let spec = format!("{} {stall_us} {window_us}", line.as_str());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => ArmError::Refused {
                path: path.to_path_buf(),
                spec: spec.clone(),
                reason: format!(
                    "{e} (kernels before 6.5 arm triggers on /proc/pressure only with CAP_SYS_RESOURCE)"
                ),
            },
            _ => ArmError::Pressure(PressureError::of_io(path, e)),
        })?;
    let fs = nix::sys::statfs::fstatfs(&file).map_err(|e| ArmError::Refused {
        path: path.to_path_buf(),
        spec: spec.clone(),
        reason: format!("fstatfs: {e}"),
    })?;
    let kind = fs.filesystem_type();
    if kind != nix::sys::statfs::PROC_SUPER_MAGIC && kind != nix::sys::statfs::CGROUP2_SUPER_MAGIC {
        return Err(ArmError::NotKernelFile {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = spec.clone().into_bytes();
    bytes.push(0);
    match nix::unistd::write(&file, &bytes) {
        Ok(_) => Ok(Trigger {
            file,
            stall_us,
            window_us,
        }),
        Err(e) => {
            let reason = match e {
                nix::errno::Errno::EINVAL => {
                    "EINVAL: window outside 500ms..10s, stall outside 1µs..window, or (without CAP_SYS_RESOURCE) a window that is not a multiple of 2s".to_string()
                }
                nix::errno::Errno::EOPNOTSUPP => {
                    "EOPNOTSUPP: PSI is disabled (boot with psi=1)".to_string()
                }
                nix::errno::Errno::EBUSY => "EBUSY: a trigger is already armed on this descriptor".to_string(),
                nix::errno::Errno::EPERM => {
                    "EPERM: this kernel arms triggers only with CAP_SYS_RESOURCE".to_string()
                }
                other => other.to_string(),
            };
            Err(ArmError::Refused {
                path: path.to_path_buf(),
                spec,
                reason,
            })
        }
    }
}

// --------------------------------------------------------------------------
// The pressure watcher

/// One watched pressure signal: its file, line, window and the stall lines
/// (µs) of its thresholds (one trigger each).
#[derive(Debug, Clone, PartialEq)]
pub struct PressureTarget {
    /// The eviction signal.
    pub signal: Signal,
    /// The line of the file it reads.
    pub line: Line,
    /// The node's pressure file (`<proc>/pressure/memory`).
    pub file: PathBuf,
    /// The signal's averaging window.
    pub window: Duration,
    /// Distinct, ascending.
    pub lines_us: Vec<u64>,
}

impl PressureTarget {
    fn window_us(&self) -> u64 {
        self.window.as_micros() as u64
    }

    fn lowest_us(&self) -> u64 {
        self.lines_us.first().copied().unwrap_or(1)
    }
}

/// The targets of the pressure thresholds of `config`, on the node's
/// files under `proc_root`.
pub fn targets_from_config(config: &EvictionConfig, proc_root: &Path) -> Vec<PressureTarget> {
    let mut by: BTreeMap<Signal, PressureTarget> = BTreeMap::new();
    for t in config.pressure() {
        let (ThresholdValue::Stall { share, window }, Some(line)) = (t.value, Line::of(t.signal))
        else {
            continue;
        };
        let e = by.entry(t.signal).or_insert_with(|| PressureTarget {
            signal: t.signal,
            line,
            file: node_file(proc_root, Resource::Memory),
            window,
            lines_us: Vec::new(),
        });
        e.lines_us.push(stall_us(share, window));
    }
    by.into_values()
        .map(|mut t| {
            t.lines_us.sort_unstable();
            t.lines_us.dedup();
            t
        })
        .collect()
}

/// How a pressure signal is watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Kernel triggers armed: nothing is read until one fires.
    Trigger {
        /// Armed with `CAP_SYS_RESOURCE` (checked by the kernel every
        /// tenth of the window; without it every 2 s).
        privileged: bool,
    },
    /// No trigger (why): the `total` counter is read every tenth of the window.
    Poll(String),
    /// No pressure file (why): the signal is not evaluated.
    Unavailable(String),
}

impl Mode {
    /// `trigger`, `poll` or `unavailable` (metrics label, `/status`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Trigger { .. } => "trigger",
            Mode::Poll(_) => "poll",
            Mode::Unavailable(_) => "unavailable",
        }
    }

    /// The mode with its reason, for `/status` and the log.
    pub fn describe(&self) -> String {
        match self {
            Mode::Trigger { privileged: true } => {
                "trigger (kernel checks every tenth of the window)".into()
            }
            Mode::Trigger { privileged: false } => {
                "trigger (no CAP_SYS_RESOURCE: the kernel checks every 2s)".into()
            }
            Mode::Poll(why) => format!("poll: {why}"),
            Mode::Unavailable(why) => format!("unavailable: {why}"),
        }
    }
}

/// What woke the watcher about a pressure signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PressureSource {
    /// A kernel trigger fired (counted as the kernel's report of a breach
    /// unless it is an unprivileged trigger's first events).
    Trigger,
    /// The watcher's own reading of the counter showed the lowest line
    /// reached within the window.
    Sample,
}

/// A pressure signal that may have reached a threshold: wake the pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PressureEvent {
    /// The signal.
    pub signal: Signal,
    /// When the event was read.
    pub at: Instant,
    /// How long before `at` the breach may have happened unseen: the
    /// kernel's check period for a trigger, the time since the previous
    /// reading for a sample.
    pub gap: Option<Duration>,
    /// A trigger fired or a sample was read.
    pub source: PressureSource,
}

/// Tunables of the pressure watcher.
#[derive(Debug, Clone, PartialEq)]
pub struct PressureConfig {
    /// SCHED_FIFO priority of the thread (where permitted), as the memory
    /// watcher's.
    pub rt_priority: Option<i32>,
    /// Arm triggers at all (`false`: poll; benchmarks and tests).
    pub use_triggers: bool,
    /// Whether triggers are armed with `CAP_SYS_RESOURCE`; `None`: this
    /// process's `CapEff`.
    pub privileged: Option<bool>,
}

impl Default for PressureConfig {
    fn default() -> Self {
        PressureConfig {
            rt_priority: None,
            use_triggers: true,
            privileged: None,
        }
    }
}

/// The kernel's check period for a trigger on `window`: a tenth of it
/// (privileged, real-time poller) or the averaging period (2 s).
fn check_period(window: Duration, privileged: bool) -> Duration {
    if privileged {
        window / 10
    } else {
        Duration::from_millis(2_001)
    }
}

/// The watcher's own sampling period: a tenth of the window, at least 50 ms.
fn sample_period(window: Duration) -> Duration {
    (window / 10).max(Duration::from_millis(50))
}

/// Shared between the watcher thread and the readers (the pass).
#[derive(Debug)]
struct TargetState {
    target: PressureTarget,
    mode: Mode,
    samples: StallSamples,
    /// The latest breach the kernel reported per trigger line.
    breaches: Vec<Breach>,
    /// How long a reported breach stands (window + the kernel's period).
    hold: Duration,
    /// The read descriptor (kept open; node files only).
    read_fd: Option<Arc<File>>,
    last: Option<Reading>,
    last_error: Option<String>,
}

impl TargetState {
    /// Read the counter now and add it to the samples.
    fn sample(&mut self, now: Instant) -> Result<u64, String> {
        let Some(f) = self.read_fd.clone() else {
            return Err(self.mode.describe());
        };
        match pread_reading(&f, &self.target.file) {
            Ok(r) => {
                let Some(v) = r.line(self.target.line) else {
                    let e = format!(
                        "{}: no `{}` line",
                        self.target.file.display(),
                        self.target.line.as_str()
                    );
                    self.last_error = Some(e.clone());
                    return Err(e);
                };
                let total = v.total_us;
                self.samples.push(now, total);
                self.last = Some(r);
                self.last_error = None;
                Ok(total)
            }
            Err(e) => {
                let e = e.to_string();
                self.last_error = Some(e.clone());
                Err(e)
            }
        }
    }

    /// The observation at `now` (after a fresh sample when `read`).
    fn observation(&mut self, now: Instant, read: bool) -> Result<Observation, String> {
        if let Mode::Unavailable(why) = &self.mode {
            return Err(format!(
                "{}: pressure stall information unavailable: {why}",
                self.target.signal
            ));
        }
        if read {
            self.sample(now)
                .map_err(|e| format!("{}: {e}", self.target.signal))?;
        }
        let window = self.target.window;
        let breach = self
            .breaches
            .iter()
            .filter(|b| now.saturating_duration_since(b.at) <= self.hold)
            .max_by_key(|b| b.line_us)
            .copied();
        let (stall, since) = observed(self.samples.in_window(now), breach, now, window, self.hold)
            // Nothing proven yet (a first reading): no stall is known; the
            // kernel reports a breach of the lowest line when armed.
            .unwrap_or((0, now));
        Ok(Observation {
            available: stall.min(i64::MAX as u64) as i64,
            capacity: window.as_micros() as i64,
            at: now,
            window_start: Some(since),
        })
    }
}

/// What a reader sees of one watched pressure signal.
#[derive(Debug, Clone, PartialEq)]
pub struct PressureStatus {
    /// The signal.
    pub signal: Signal,
    /// Triggers or polling.
    pub mode: Mode,
    /// The signal's averaging window.
    pub window: Duration,
    /// The file's last reading (`None`: not read yet, or unavailable).
    pub reading: Option<Reading>,
    /// The last read error, if the last read failed.
    pub error: Option<String>,
}

/// Counters of a running pressure watcher.
#[derive(Debug, Default)]
pub struct PressureStats {
    /// Wake-ups of the thread (trigger, sample period or stop).
    pub wakeups: AtomicU64,
    /// Trigger events read.
    pub trigger_events: AtomicU64,
    /// Counter readings made by the thread.
    pub samples: AtomicU64,
    /// Events handed to the callback.
    pub events: AtomicU64,
}

/// The pressure watcher: a thread that waits for the kernel's triggers
/// (no timer at all while nothing stalls) or, without triggers, reads the
/// counters every tenth of the window; after an event it reads the counter
/// every tenth of the window while the stall lasts. Stops on drop.
pub struct PressureWatcher {
    /// The signals watched.
    pub signals: Vec<Signal>,
    state: Arc<Mutex<Vec<TargetState>>>,
    thread: crate::sys::stoppable::StoppableThread,
    /// The thread's counters.
    pub stats: Arc<PressureStats>,
}

/// Why the pressure watcher could not start.
#[derive(Debug, thiserror::Error)]
pub enum PressureWatchError {
    /// The thread could not be spawned.
    #[error("cannot start the pressure watcher thread: {0}")]
    Spawn(std::io::Error),
    /// The eventfd that stops the thread could not be made.
    #[error("eventfd: {0}")]
    EventFd(nix::Error),
}

/// Per-target state of the thread alone (descriptors, timers).
struct Armed {
    triggers: Vec<Trigger>,
    /// Armed with `CAP_SYS_RESOURCE`: the kernel's events count as its
    /// report of a breach (without it they only wake the watcher).
    privileged: bool,
    /// Read the counter every sample period until then.
    hot_until: Option<Instant>,
    next_sample: Option<Instant>,
    last_sample: Option<Instant>,
    /// The last sample event (events are sent at most once a window
    /// while the stall stays above the line).
    last_sample_event: Option<Instant>,
}

impl PressureWatcher {
    /// Open every target's file, arm its triggers (or fall back to polling,
    /// or mark it unavailable: never an error), and start the thread.
    /// `on_event` runs on that thread and should wake the pass loop.
    pub fn spawn(
        targets: Vec<PressureTarget>,
        cfg: PressureConfig,
        mut on_event: impl FnMut(PressureEvent) + Send + 'static,
    ) -> Result<PressureWatcher, PressureWatchError> {
        let privileged = cfg.privileged.unwrap_or_else(|| {
            privileged(&std::fs::read_to_string("/proc/self/status").unwrap_or_default())
        });
        let signals = targets.iter().map(|t| t.signal).collect();
        let now = Instant::now();
        let mut states = Vec::new();
        let mut armed = Vec::new();
        for t in targets {
            let (state, a) = open_target(t, &cfg, privileged, now);
            states.push(state);
            armed.push(a);
        }
        let state = Arc::new(Mutex::new(states));
        let sig = crate::sys::stoppable::StopSignal::new().map_err(PressureWatchError::EventFd)?;
        let stats = Arc::new(PressureStats::default());
        let (state2, stop2, waker2, stats2) = (
            state.clone(),
            sig.stop.clone(),
            sig.waker.clone(),
            stats.clone(),
        );
        let thread =
            crate::sys::stoppable::StoppableThread::spawn("qosd-psi-watch", sig, move || {
                if let Some(p) = cfg.rt_priority {
                    crate::sys::watch::set_thread_realtime_logged(p, "pressure watcher");
                }
                run(&state2, &mut armed, &stop2, &waker2, &stats2, &mut on_event);
            })
            .map_err(PressureWatchError::Spawn)?;
        Ok(PressureWatcher {
            signals,
            state,
            thread,
            stats,
        })
    }

    /// The observation of every watched signal at `now`, each read afresh
    /// (the pass calls this), or why it is not known.
    pub fn observe(&self, now: Instant) -> Vec<(Signal, Result<Observation, String>)> {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.iter_mut()
            .map(|s| (s.target.signal, s.observation(now, true)))
            .collect()
    }

    /// What each watched signal looks like (mode, last reading).
    pub fn status(&self) -> Vec<PressureStatus> {
        let g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.iter()
            .map(|s| PressureStatus {
                signal: s.target.signal,
                mode: s.mode.clone(),
                window: s.target.window,
                reading: s.last,
                error: s.last_error.clone(),
            })
            .collect()
    }

    /// Whether the thread is still running.
    pub fn is_running(&self) -> bool {
        self.thread.is_running()
    }

    /// Stop the thread and wait for it.
    pub fn stop(mut self) {
        self.thread.shutdown();
    }
}

/// Open one target: its read descriptor and, where possible, one trigger
/// per stall line.
fn open_target(
    t: PressureTarget,
    cfg: &PressureConfig,
    privileged: bool,
    now: Instant,
) -> (TargetState, Armed) {
    let window = t.window;
    let mut a = Armed {
        triggers: Vec::new(),
        privileged,
        hot_until: None,
        next_sample: None,
        last_sample: None,
        last_sample_event: None,
    };
    let mut st = TargetState {
        samples: StallSamples::new(window),
        breaches: Vec::new(),
        hold: window + check_period(window, privileged) + Duration::from_millis(100),
        read_fd: None,
        last: None,
        last_error: None,
        mode: Mode::Unavailable(String::new()),
        target: t,
    };
    let fd = match open_read(&st.target.file).and_then(|f| {
        let r = pread_reading(&f, &st.target.file)?;
        if r.line(st.target.line).is_none() {
            return Err(PressureError::Unavailable {
                path: st.target.file.clone(),
                reason: format!("no `{}` line", st.target.line.as_str()),
            });
        }
        Ok(f)
    }) {
        Ok(f) => f,
        Err(e) => {
            st.mode = Mode::Unavailable(e.to_string());
            tracing::warn!(signal = %st.target.signal, error = %e, "pressure signal unavailable: its thresholds are not evaluated");
            return (st, a);
        }
    };
    st.read_fd = Some(Arc::new(fd));
    st.mode = if !cfg.use_triggers {
        Mode::Poll("triggers turned off".into())
    } else {
        match arm_all(&st.target, privileged) {
            Ok(trigs) => {
                a.triggers = trigs;
                Mode::Trigger { privileged }
            }
            Err(why) => Mode::Poll(why),
        }
    };
    if let Mode::Poll(why) = &st.mode {
        tracing::info!(signal = %st.target.signal, reason = %why, "pressure signal polled (no kernel trigger)");
        a.next_sample = Some(now);
    }
    (st, a)
}

/// One trigger per stall line, or why none.
fn arm_all(t: &PressureTarget, privileged: bool) -> Result<Vec<Trigger>, String> {
    let w = t.window_us();
    let mut out = Vec::new();
    for &l in &t.lines_us {
        check_trigger(l, w, privileged)?;
        out.push(arm(&t.file, t.line, l, w).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// The thread's loop.
fn run(
    state: &Mutex<Vec<TargetState>>,
    armed: &mut [Armed],
    stop: &AtomicBool,
    waker: &EventFd,
    stats: &PressureStats,
    on_event: &mut impl FnMut(PressureEvent),
) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let next = armed.iter().filter_map(|a| a.next_sample).min();
        let timeout = match next {
            None => PollTimeout::NONE,
            Some(t) => {
                let ms = t
                    .saturating_duration_since(now)
                    .as_millis()
                    .clamp(0, 60_000) as i32;
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fired: Vec<(usize, usize)> = Vec::new();
        let mut broken: Vec<(usize, usize)> = Vec::new();
        {
            let mut fds = vec![PollFd::new(waker.as_fd(), PollFlags::POLLIN)];
            let mut index = Vec::new();
            for (i, a) in armed.iter().enumerate() {
                for (k, t) in a.triggers.iter().enumerate() {
                    fds.push(PollFd::new(t.as_fd(), PollFlags::POLLPRI));
                    index.push((i, k));
                }
            }
            let _ = poll(&mut fds, timeout);
            for (n, fd) in fds.iter().enumerate().skip(1) {
                let r = fd.revents().unwrap_or(PollFlags::empty());
                if r.contains(PollFlags::POLLERR) || r.contains(PollFlags::POLLNVAL) {
                    broken.push(index[n - 1]);
                } else if r.contains(PollFlags::POLLPRI) {
                    fired.push(index[n - 1]);
                }
            }
        }
        stats.wakeups.fetch_add(1, Ordering::Relaxed);
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        let mut g = state.lock().unwrap_or_else(|e| e.into_inner());
        drop_broken(&mut g, armed, &broken, now);
        for (i, k) in &fired {
            stats.trigger_events.fetch_add(1, Ordering::Relaxed);
            if let Some(e) = on_trigger(&mut g[*i], &mut armed[*i], *k, now) {
                stats.events.fetch_add(1, Ordering::Relaxed);
                on_event(e);
            }
        }
        for (i, a) in armed.iter_mut().enumerate() {
            if a.next_sample.is_some_and(|t| t <= now) {
                stats.samples.fetch_add(1, Ordering::Relaxed);
                if let Some(e) = on_sample(&mut g[i], a, now) {
                    stats.events.fetch_add(1, Ordering::Relaxed);
                    on_event(e);
                }
            }
        }
    }
}

/// Triggers whose descriptor reports an error (their cgroup is gone) are
/// dropped; a target left without any is polled.
fn drop_broken(
    g: &mut [TargetState],
    armed: &mut [Armed],
    broken: &[(usize, usize)],
    now: Instant,
) {
    for (i, k) in broken.iter().rev() {
        let a = &mut armed[*i];
        if *k < a.triggers.len() {
            a.triggers.remove(*k);
        }
        if a.triggers.is_empty() && matches!(g[*i].mode, Mode::Trigger { .. }) {
            let why = "the kernel reported an error on the trigger".to_string();
            tracing::warn!(signal = %g[*i].target.signal, reason = %why, "pressure signal polled from now on");
            g[*i].mode = Mode::Poll(why);
            a.next_sample = Some(now);
        }
    }
}

/// A trigger fired: sample, note the breach when the kernel's report
/// counts, and read the counter every sample period while it lasts.
fn on_trigger(s: &mut TargetState, a: &mut Armed, k: usize, now: Instant) -> Option<PressureEvent> {
    let window = s.target.window;
    let line_us = a.triggers.get(k).map(|t| t.stall_us)?;
    let _ = s.sample(now);
    a.last_sample = Some(now);
    // An unprivileged trigger's events are not a measure (module docs):
    // they only wake the watcher, whose own readings decide.
    if a.privileged {
        s.breaches.retain(|b| b.line_us != line_us);
        s.breaches.push(Breach { at: now, line_us });
    }
    a.hot_until = Some(now + s.hold);
    a.next_sample = Some(now + sample_period(window));
    Some(PressureEvent {
        signal: s.target.signal,
        at: now,
        gap: Some(check_period(window, a.privileged)),
        source: PressureSource::Trigger,
    })
}

/// A sample period came: read the counter; an event when the lowest line
/// is reached within the window (at most once a window while it stays so).
fn on_sample(s: &mut TargetState, a: &mut Armed, now: Instant) -> Option<PressureEvent> {
    let window = s.target.window;
    let polling = matches!(s.mode, Mode::Poll(_));
    let gap = a.last_sample.map(|t| now.saturating_duration_since(t));
    let ok = s.sample(now).is_ok();
    a.last_sample = Some(now);
    let stall = s.samples.in_window(now).map(|w| w.stall_us).unwrap_or(0);
    let lowest = s.target.lowest_us();
    // Keep reading while the stall is at least half the lowest line.
    if ok && stall.saturating_mul(2) >= lowest {
        a.hot_until = Some(a.hot_until.map_or(now + window, |h| h.max(now + window)));
    }
    a.next_sample = if polling || a.hot_until.is_some_and(|h| now < h) {
        Some(now + sample_period(window))
    } else {
        a.hot_until = None;
        None
    };
    if stall < lowest {
        a.last_sample_event = None;
        return None;
    }
    if a.last_sample_event
        .is_some_and(|t| now.saturating_duration_since(t) < window)
    {
        return None;
    }
    a.last_sample_event = Some(now);
    Some(PressureEvent {
        signal: s.target.signal,
        at: now,
        gap,
        source: PressureSource::Sample,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = "some avg10=1.11 avg60=1.87 avg300=2.14 total=4651166896\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

    #[test]
    fn parse_table() {
        let r = parse(REAL).unwrap();
        assert_eq!(r.some.total_us, 4_651_166_896);
        assert_eq!(r.some.avg10, 1.11);
        assert_eq!(r.full.unwrap().total_us, 0);
        // the node's cpu file of older kernels has no full line
        let r = parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n").unwrap();
        assert!(r.full.is_none());
        assert!(r.line(Line::Full).is_none());
        let bad: &[(&str, &str)] = &[
            ("", "no `some` line"),
            ("full avg10=0 avg60=0 avg300=0 total=1\n", "no `some` line"),
            ("some avg10=0 avg60=0 avg300=0\n", "incomplete"),
            ("some avg10=x avg60=0 avg300=0 total=1\n", "bad average"),
            ("some avg10=-1 avg60=0 avg300=0 total=1\n", "bad average"),
            ("some avg10=inf avg60=0 avg300=0 total=1\n", "bad average"),
            ("some avg10=0 avg60=0 avg300=0 total=-1\n", "bad total"),
            (
                "some avg10=0 avg60=0 avg300=0 total=18446744073709551616\n",
                "bad total",
            ),
            (
                "some avg10=0 avg60=0 avg300=0 total=1 extra=2\n",
                "unknown field",
            ),
            (
                "some avg10=0 avg60=0 avg300=0 total=1\nsome avg10=0 avg60=0 avg300=0 total=1\n",
                "twice",
            ),
            ("partial avg10=0\n", "unexpected line"),
            ("some avg10\n", "malformed"),
        ];
        for (text, want) in bad {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn fixture_files_and_availability() {
        let d = tempfile::tempdir().unwrap();
        // no pressure directory: unavailable, with the reason
        let e = node_availability(d.path(), Resource::Memory).unwrap_err();
        assert!(e.is_unavailable(), "{e}");
        assert!(e.to_string().contains("psi=0"), "{e}");
        std::fs::create_dir(d.path().join("pressure")).unwrap();
        std::fs::write(node_file(d.path(), Resource::Memory), REAL).unwrap();
        assert_eq!(
            node_availability(d.path(), Resource::Memory)
                .unwrap()
                .some
                .total_us,
            4_651_166_896
        );
        std::fs::write(node_file(d.path(), Resource::Io), "garbage\n").unwrap();
        let e = node_availability(d.path(), Resource::Io).unwrap_err();
        assert!(!e.is_unavailable() && e.to_string().contains("io"), "{e}");
        std::fs::write(node_file(d.path(), Resource::Cpu), "x".repeat(5000)).unwrap();
        let e = node_availability(d.path(), Resource::Cpu).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
        // per cgroup
        std::fs::write(cgroup_file(d.path(), Resource::Memory), REAL).unwrap();
        assert_eq!(cgroup_memory_stall_us(d.path()).unwrap(), 4_651_166_896);
        // a fixture is not a kernel file: no trigger is written into it
        let e = arm(
            &node_file(d.path(), Resource::Memory),
            Line::Some,
            1,
            2_000_000,
        )
        .unwrap_err();
        assert!(matches!(e, ArmError::NotKernelFile { .. }), "{e}");
        assert_eq!(
            std::fs::read_to_string(node_file(d.path(), Resource::Memory)).unwrap(),
            REAL
        );
    }

    #[test]
    fn kernel_trigger_rules() {
        let table: &[(u64, u64, bool, bool)] = &[
            (200_000, 2_000_000, false, true),
            (200_000, 1_000_000, false, false), // unprivileged: multiples of 2 s
            (200_000, 1_000_000, true, true),
            (1, 500_000, true, true),
            (1, 400_000, true, false),
            (0, 2_000_000, true, false),
            (2_000_001, 2_000_000, true, false),
            (100, 12_000_000, true, false),
            (100, 10_000_000, false, true),
        ];
        for &(stall, window, privileged, ok) in table {
            assert_eq!(
                check_trigger(stall, window, privileged).is_ok(),
                ok,
                "{stall}/{window} privileged {privileged}"
            );
        }
        assert!(privileged("CapEff:\t000001ffffffffff\n"));
        assert!(!privileged("CapEff:\t000001fffeffffff\n"));
    }

    fn config(hard: &[(Signal, &str)], soft: &[(Signal, &str)]) -> EvictionConfig {
        use qosd_model::policy::evict::pressure::parse_stall;
        let m = |l: &[(Signal, &str)]| -> BTreeMap<Signal, ThresholdValue> {
            l.iter()
                .map(|(s, v)| (*s, parse_stall("x", *s, v).unwrap()))
                .collect()
        };
        let grace = soft
            .iter()
            .map(|(s, _)| (*s, Duration::from_secs(5)))
            .collect();
        EvictionConfig::from_parts(
            Some(&BTreeMap::new()),
            &BTreeMap::new(),
            &BTreeMap::new(),
            &BTreeMap::new(),
            0,
            Duration::ZERO,
        )
        .unwrap()
        .with_pressure(&m(hard), &m(soft), &grace)
        .unwrap()
    }

    #[test]
    fn targets_table() {
        let cfg = config(
            &[
                (Signal::MemoryFull, "20%/2s"),
                (Signal::MemorySome, "50%/4s"),
            ],
            &[
                (Signal::MemoryFull, "10%/2s"),
                (Signal::MemorySome, "50%/4s"),
            ],
        );
        let t = targets_from_config(&cfg, Path::new("/p"));
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].signal, Signal::MemorySome);
        assert_eq!(t[0].lines_us, [2_000_000], "one trigger per distinct line");
        assert_eq!(t[0].line, Line::Some);
        assert_eq!(t[1].lines_us, [200_000, 400_000]);
        assert_eq!(t[1].file, Path::new("/p/pressure/memory"));
        assert_eq!(t[1].window, Duration::from_secs(2));
        assert!(targets_from_config(&config(&[], &[]), Path::new("/p")).is_empty());
    }

    fn write_total(path: &Path, some: u64, full: u64) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .create(true)
            .open(path)
            .unwrap();
        write!(
            f,
            "some avg10=0.00 avg60=0.00 avg300=0.00 total={some}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={full}\n"
        )
        .unwrap();
    }

    /// On a fixture (no trigger possible) the watcher polls the counter
    /// every tenth of the window and wakes the pass when the lowest line is
    /// reached; observations prove the stall within the window.
    #[test]
    fn poll_mode_on_a_fixture_detects_and_observes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("pressure")).unwrap();
        let file = node_file(d.path(), Resource::Memory);
        write_total(&file, 0, 0);
        // line: 400 ms of a 4 s window; sampled every 400 ms
        let cfg = config(&[(Signal::MemoryFull, "10%/4s")], &[]);
        let targets = targets_from_config(&cfg, d.path());
        let (tx, rx) = std::sync::mpsc::channel();
        let w = PressureWatcher::spawn(targets, PressureConfig::default(), move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
        let st = w.status();
        assert!(
            matches!(st[0].mode, Mode::Poll(ref why) if why.contains("not a kernel pressure file")),
            "{:?}",
            st[0].mode
        );
        // quiet: no stall known, no event
        let o = &w.observe(Instant::now())[0];
        assert_eq!(o.1.as_ref().unwrap().available, 0);
        assert!(rx.try_recv().is_err());
        // 500 ms of full stall: an event at the next sample
        let t = Instant::now();
        write_total(&file, 500_000, 500_000);
        let e = rx.recv_timeout(Duration::from_secs(10)).expect("an event");
        assert_eq!(
            (e.signal, e.source),
            (Signal::MemoryFull, PressureSource::Sample)
        );
        assert!(e.at >= t);
        let (sig, o) = &w.observe(Instant::now())[0];
        let o = o.as_ref().unwrap();
        assert_eq!(*sig, Signal::MemoryFull);
        assert_eq!((o.available, o.capacity), (500_000, 4_000_000));
        assert!(o.window_start.unwrap() + Duration::from_secs(4) >= t);
        assert!(w.stats.samples.load(Ordering::Relaxed) >= 1);
        assert!(w.is_running());
        w.stop();
    }

    #[test]
    fn unavailable_without_pressure_files() {
        let d = tempfile::tempdir().unwrap();
        let cfg = config(&[(Signal::MemorySome, "10%/2s")], &[]);
        let w = PressureWatcher::spawn(
            targets_from_config(&cfg, d.path()),
            PressureConfig::default(),
            |_| {},
        )
        .unwrap();
        let st = w.status();
        assert_eq!(st[0].mode.as_str(), "unavailable");
        let (_, o) = &w.observe(Instant::now())[0];
        let e = o.as_ref().unwrap_err();
        assert!(
            e.contains("memory.some") && e.contains("unavailable"),
            "{e}"
        );
        assert_eq!(w.stats.samples.load(Ordering::Relaxed), 0);
        w.stop();
    }
}
