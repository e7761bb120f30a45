//! Eviction thresholds with the kubelet's syntax and semantics (pure, no I/O).
//!
//! Inputs, exactly as the kubelet takes them:
//! * flags: `--eviction-hard memory.available<100Mi,nodefs.available<10%`,
//!   `--eviction-soft …` (same form), `--eviction-soft-grace-period
//!   memory.available=1m30s`, `--eviction-minimum-reclaim
//!   memory.available=0Mi,nodefs.available=500Mi`,
//!   `--eviction-max-pod-grace-period 30`, `--eviction-pressure-transition-period 5m0s`;
//! * the config file with KubeletConfiguration's field names
//!   (`evictionHard: {memory.available: "100Mi"}`, …): [`RawEvictionConfig`]
//!   deserializes them.
//!
//! Semantics (pkg/kubelet/eviction): a threshold is met when the observed
//! value is below it; once met it stays met until the observed value is at
//! least threshold + minimum reclaim; a soft threshold acts only after it has
//! been met for its grace period. `0%` and `100%` thresholds are ignored.
//! When no hard threshold is given at all, the kubelet's defaults apply.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::core::duration::{format_go_duration, parse_go_duration};
use crate::core::quantity::Quantity;

/// An eviction signal (kubelet's `evictionapi.Signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    /// `memory.available`: memory capacity − working set, bytes.
    MemoryAvailable,
    /// `allocatableMemory.available`: allocatable memory − working set of the kubepods cgroup,
    /// bytes.
    AllocatableMemoryAvailable,
    /// `nodefs.available`: available bytes of the node filesystem.
    NodeFsAvailable,
    /// `nodefs.inodesFree`: free inodes of the node filesystem.
    NodeFsInodesFree,
    /// `imagefs.available`: available bytes of the image filesystem.
    ImageFsAvailable,
    /// `imagefs.inodesFree`: free inodes of the image filesystem.
    ImageFsInodesFree,
    /// `containerfs.available`: available bytes of the filesystem holding the writable layers.
    ContainerFsAvailable,
    /// `containerfs.inodesFree`: free inodes of the filesystem holding the writable layers.
    ContainerFsInodesFree,
    /// `pid.available`: `pid_max` − running tasks.
    PidAvailable,
    /// qosd's own: the share of time at least one task stalled on memory
    /// over a window (the `some` line of `/proc/pressure/memory`). Not a
    /// kubelet signal: configured with `evictionPressureHard` /
    /// `evictionPressureSoft` only ([`crate::policy::evict::pressure`]).
    MemorySome,
    /// qosd's own: the share of time every non-idle task stalled on memory
    /// at once over a window (the `full` line).
    MemoryFull,
}

/// The resource a signal measures, which decides the ranking used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SignalResource {
    /// Bytes of memory.
    Memory,
    /// Time stalled on memory (pressure stall information): ranked like
    /// memory, restricted to the pods that stall where that is measured.
    MemoryStall,
    /// Bytes of a filesystem.
    Disk,
    /// Inodes of a filesystem.
    Inodes,
    /// Process ids.
    Pids,
}

/// Node conditions the eviction manager reports (the Kubernetes names).
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum NodeCondition {
    /// A memory or memory pressure threshold is met (or was, within the
    /// pressure transition period).
    MemoryPressure,
    /// A disk or inode threshold is met (or was, within the transition period).
    DiskPressure,
    /// A `pid.available` threshold is met (or was, within the transition
    /// period).
    PIDPressure,
}

impl NodeCondition {
    /// The condition's name (`MemoryPressure`, `DiskPressure`, `PIDPressure`).
    pub fn as_str(self) -> &'static str {
        match self {
            NodeCondition::MemoryPressure => "MemoryPressure",
            NodeCondition::DiskPressure => "DiskPressure",
            NodeCondition::PIDPressure => "PIDPressure",
        }
    }
}

impl fmt::Display for NodeCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Signal {
    /// qosd's pressure signals (not the kubelet's: never parsed by
    /// [`Signal::parse`], so a kubelet config cannot name them).
    pub const PRESSURE: [Signal; 2] = [Signal::MemorySome, Signal::MemoryFull];

    /// Every signal, in the kubelet's documentation order.
    pub const ALL: [Signal; 9] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The signal's name as the kubelet spells it (`memory.available`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
            Signal::MemorySome => "memory.some",
            Signal::MemoryFull => "memory.full",
        }
    }

    /// Parse a pressure signal's name (`memory.some`, `memory.full`).
    pub fn parse_pressure(s: &str) -> Option<Signal> {
        Signal::PRESSURE.into_iter().find(|sig| sig.as_str() == s)
    }

    /// Whether this is one of qosd's pressure signals (a stall share over
    /// a window, met when it reaches the threshold: the larger the worse).
    pub fn is_pressure(self) -> bool {
        self.resource() == SignalResource::MemoryStall
    }

    /// Parse a signal name (exact, case-sensitive, like the kubelet).
    pub fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|sig| sig.as_str() == s)
    }

    /// What the signal measures.
    pub fn resource(self) -> SignalResource {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => SignalResource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
                SignalResource::Disk
            }
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => SignalResource::Inodes,
            Signal::PidAvailable => SignalResource::Pids,
            Signal::MemorySome | Signal::MemoryFull => SignalResource::MemoryStall,
        }
    }

    /// The node condition the signal drives.
    pub fn node_condition(self) -> NodeCondition {
        match self.resource() {
            SignalResource::Memory | SignalResource::MemoryStall => NodeCondition::MemoryPressure,
            SignalResource::Disk | SignalResource::Inodes => NodeCondition::DiskPressure,
            SignalResource::Pids => NodeCondition::PIDPressure,
        }
    }

    /// Whether values of this signal are bytes (for display).
    pub fn is_bytes(self) -> bool {
        matches!(
            self.resource(),
            SignalResource::Memory | SignalResource::Disk
        )
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Signal {
    type Err = ThresholdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Signal::parse(s).ok_or_else(|| ThresholdError::UnknownSignal {
            signal: s.to_string(),
        })
    }
}

/// A threshold's value: an absolute quantity or a fraction of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThresholdValue {
    /// Bytes (or inodes, or pids).
    Quantity(i64),
    /// Fraction of capacity, in (0, 1).
    Percentage(f64),
    /// A pressure signal's level ([`Signal::is_pressure`]): the share of
    /// `window` stalled, in (0, 1], met when reached. The observation's
    /// capacity is the window in microseconds, its value the stalled
    /// microseconds ([`crate::policy::evict::pressure`]).
    Stall {
        /// The share of the window, in (0, 1].
        share: f64,
        /// The window.
        window: Duration,
    },
}

impl ThresholdValue {
    /// The absolute value against a capacity (kubelet: `GetThresholdQuantity`,
    /// truncating `capacity × fraction`).
    pub(crate) fn resolve(&self, capacity: i64) -> i64 {
        match *self {
            ThresholdValue::Quantity(q) => q,
            ThresholdValue::Percentage(p) => (capacity.max(0) as f64 * p) as i64,
            // The kernel's comparison: stalled time ≥ share · window, in
            // whole microseconds rounded up (at least 1 µs).
            ThresholdValue::Stall { share, .. } => {
                ((capacity.max(0) as f64 * share).ceil() as i64).max(1)
            }
        }
    }
}

/// A count or byte amount in Kubernetes' binary-suffix form when exact
/// (`104857600` → `100Mi`), else as a plain number.
pub(crate) fn binary_quantity(v: i64) -> String {
    const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut n = v;
    let mut suffix = "";
    for s in SUFFIXES {
        if n != 0 && n % 1024 == 0 {
            n /= 1024;
            suffix = s;
        } else {
            break;
        }
    }
    format!("{n}{suffix}")
}

impl fmt::Display for ThresholdValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ThresholdValue::Quantity(q) => f.write_str(&binary_quantity(q)),
            ThresholdValue::Percentage(p) => write!(f, "{}%", round_pct(p * 100.0)),
            ThresholdValue::Stall { share, window } => write!(
                f,
                "{}%/{}",
                round_pct(share * 100.0),
                format_go_duration(window)
            ),
        }
    }
}

fn round_pct(p: f64) -> f64 {
    (p * 1000.0).round() / 1000.0
}

/// Hard thresholds act at once; soft ones after their grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThresholdKind {
    /// Acts as soon as met (`evictionHard`).
    Hard,
    /// Acts after being met for its grace period (`evictionSoft`).
    Soft,
}

impl ThresholdKind {
    /// `hard` or `soft`.
    pub fn as_str(self) -> &'static str {
        match self {
            ThresholdKind::Hard => "hard",
            ThresholdKind::Soft => "soft",
        }
    }
}

impl fmt::Display for ThresholdKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One eviction threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    /// The signal observed.
    pub signal: Signal,
    /// Hard or soft.
    pub kind: ThresholdKind,
    /// The line: met when the available amount falls below it (for a pressure signal: when the
    /// stall reaches it).
    pub value: ThresholdValue,
    /// Zero for hard thresholds.
    pub grace_period: Duration,
    /// Extra amount to reclaim once met (`--eviction-minimum-reclaim`).
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    /// Absolute threshold against `capacity`.
    pub fn threshold_for(&self, capacity: i64) -> i64 {
        self.value.resolve(capacity)
    }

    /// Absolute minimum reclaim against `capacity` (0 when unset).
    pub(crate) fn min_reclaim_for(&self, capacity: i64) -> i64 {
        self.min_reclaim.map(|m| m.resolve(capacity)).unwrap_or(0)
    }

    /// Is the threshold met for `available` of `capacity`? `was_met`: it was
    /// met on the previous pass, so it stays met until `available` reaches
    /// threshold + minimum reclaim (kubelet: thresholdsMet with
    /// enforceMinReclaim for the previously met set).
    ///
    /// A pressure threshold ([`ThresholdValue::Stall`]) is met when the
    /// observed stall (`available` holds it, in µs of a window of
    /// `capacity` µs) reaches the line, as the kernel's trigger compares;
    /// it has no minimum reclaim.
    pub fn is_met(&self, available: i64, capacity: i64, was_met: bool) -> bool {
        if self.is_stall() {
            return available >= self.threshold_for(capacity);
        }
        let mut line = self.threshold_for(capacity);
        if was_met {
            line = line.saturating_add(self.min_reclaim_for(capacity));
        }
        available < line
    }

    /// Whether this is a pressure threshold (a stall share over a window).
    pub(crate) fn is_stall(&self) -> bool {
        matches!(self.value, ThresholdValue::Stall { .. })
    }

    /// Whether an observation is close enough that per-pod stats should be
    /// measured: within the minimum reclaim of the line (bytes, inodes,
    /// pids), or at least half the line (pressure: the stall is growing).
    pub fn is_near(&self, available: i64, capacity: i64) -> bool {
        if self.is_stall() {
            return available.saturating_mul(2) >= self.threshold_for(capacity);
        }
        available < self.threshold_for(capacity) + self.min_reclaim_for(capacity)
    }

    /// `memory.available<100Mi` (the flag form); a pressure threshold
    /// `memory.full>=10%/2s`.
    pub fn statement(&self) -> String {
        if self.is_stall() {
            return format!("{}>={}", self.signal, self.value);
        }
        format!("{}<{}", self.signal, self.value)
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.statement())?;
        if self.kind == ThresholdKind::Soft {
            write!(f, " grace {}", format_go_duration(self.grace_period))?;
        }
        if let Some(m) = self.min_reclaim {
            write!(f, " min-reclaim {m}")?;
        }
        Ok(())
    }
}

/// Why a threshold setting was rejected. Every variant names the offending value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ThresholdError {
    /// A signal name the kubelet does not know.
    #[error("unknown eviction signal {signal:?} (known: {known})", known = known_signals())]
    UnknownSignal {
        /// The name given.
        signal: String,
    },
    /// An entry without the `<` operator.
    #[error("{setting}: bad operator in {statement:?}: eviction thresholds take the form <signal><<value>, e.g. memory.available<100Mi")]
    BadOperator {
        /// The setting (flag or field).
        setting: String,
        /// The entry.
        statement: String,
    },
    /// An entry that is not of the expected form.
    #[error("{setting}: malformed entry {statement:?} (expected {expected})")]
    Malformed {
        /// The setting (flag or field).
        setting: String,
        /// The entry.
        statement: String,
        /// The form expected.
        expected: &'static str,
    },
    /// A signal set twice in one setting.
    #[error("{setting}: {signal} given twice ({first:?} and {second:?})")]
    Duplicate {
        /// The setting (flag or field).
        setting: String,
        /// The signal.
        signal: String,
        /// Its first value.
        first: String,
        /// Its second value.
        second: String,
    },
    /// A value that is not a quantity.
    #[error("{setting}: bad quantity {value:?} for {signal}: {reason}")]
    BadQuantity {
        /// The setting (flag or field).
        setting: String,
        /// The signal.
        signal: String,
        /// The value given.
        value: String,
        /// Why it does not parse.
        reason: String,
    },
    /// A percentage that does not parse or is out of range.
    #[error("{setting}: bad percentage {value:?} for {signal}: {reason}")]
    BadPercentage {
        /// The setting (flag or field).
        setting: String,
        /// The signal.
        signal: String,
        /// The value given.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A value that must be above zero.
    #[error("{setting}: {signal} must be positive, got {value:?}")]
    NotPositive {
        /// The setting (flag or field).
        setting: String,
        /// The signal.
        signal: String,
        /// The value given.
        value: String,
    },
    /// A duration that does not parse.
    #[error("{setting}: bad duration {value:?}{for_signal}: {reason}", for_signal = signal.as_ref().map(|s| format!(" for {s}")).unwrap_or_default())]
    BadDuration {
        /// The setting (flag or field).
        setting: String,
        /// The signal, when the duration belongs to one.
        signal: Option<String>,
        /// The value given.
        value: String,
        /// Why it does not parse.
        reason: String,
    },
    /// A soft threshold without a grace period.
    #[error("soft eviction threshold {statement:?} has no grace period: add {signal}=<duration> to --eviction-soft-grace-period (evictionSoftGracePeriod)")]
    SoftWithoutGrace {
        /// The signal.
        signal: String,
        /// The soft threshold.
        statement: String,
    },
    /// A negative `evictionMaxPodGracePeriod`.
    #[error("eviction-max-pod-grace-period must be >= 0, got {value}")]
    NegativeMaxPodGrace {
        /// The value given, seconds.
        value: i64,
    },
}

fn known_signals() -> String {
    Signal::ALL
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Eviction settings as the user gave them, with KubeletConfiguration's
/// field names for the config file. Flags fill the same struct through
/// [`parse_threshold_flag`] and `parse_assignment_flag`.
///
/// No `deny_unknown_fields` here so it can be `#[serde(flatten)]`ed into the
/// daemon's config struct; the outer struct should reject unknown keys.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawEvictionConfig {
    /// `None`: nothing given, the kubelet's defaults apply. `Some(empty)`: no
    /// hard thresholds at all.
    #[serde(default)]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// `evictionSoft`: signal → threshold.
    #[serde(default)]
    pub eviction_soft: BTreeMap<String, String>,
    /// `evictionSoftGracePeriod`: signal → Go duration.
    #[serde(default)]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// `evictionMinimumReclaim`: signal → quantity or percentage.
    #[serde(default)]
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    /// Seconds (the kubelet's int32).
    #[serde(default)]
    pub eviction_max_pod_grace_period: Option<i64>,
    /// Go duration string, e.g. `5m0s`.
    #[serde(default)]
    pub eviction_pressure_transition_period: Option<String>,
    /// KubeletConfiguration `mergeDefaultEvictionSettings`: a partial
    /// `evictionHard` keeps the defaults of the signals it does not name.
    #[serde(default)]
    pub merge_default_eviction_settings: bool,
}

/// `hard` plus the kubelet's default hard thresholds of the signals it does
/// not name (`mergeDefaultEvictionSettings: true`).
pub(crate) fn merge_default_hard(hard: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut m = hard.clone();
    for (k, v) in DEFAULT_EVICTION_HARD {
        m.entry(k.to_string()).or_insert_with(|| v.to_string());
    }
    m
}

/// Parsed, validated eviction settings.
#[derive(Debug, Clone, PartialEq)]
pub struct EvictionConfig {
    /// Hard thresholds first, then soft; each list in signal order.
    pub thresholds: Vec<Threshold>,
    /// Cap on a soft eviction's pod grace period
    /// (`--eviction-max-pod-grace-period`; kubelet default 0 = no grace).
    pub max_pod_grace_period: Duration,
    pub(crate) pressure_transition_period: Duration,
}

/// The kubelet's default hard thresholds (Linux).
pub const DEFAULT_EVICTION_HARD: [(&str, &str); 5] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
];
/// The kubelet's default pressure transition period.
pub const DEFAULT_PRESSURE_TRANSITION_PERIOD: Duration = Duration::from_secs(300);

impl Default for EvictionConfig {
    fn default() -> Self {
        EvictionConfig::from_raw(&RawEvictionConfig::default()).expect("defaults are valid")
    }
}

impl EvictionConfig {
    /// Validate raw settings into thresholds.
    pub fn from_raw(raw: &RawEvictionConfig) -> Result<EvictionConfig, ThresholdError> {
        let mut grace: BTreeMap<String, Duration> = BTreeMap::new();
        for (k, v) in &raw.eviction_soft_grace_period {
            let d = parse_go_duration(v.trim()).map_err(|reason| ThresholdError::BadDuration {
                setting: "eviction-soft-grace-period".into(),
                signal: Some(k.clone()),
                value: v.clone(),
                reason,
            })?;
            grace.insert(k.clone(), d);
        }
        let pressure_transition_period = match &raw.eviction_pressure_transition_period {
            None => DEFAULT_PRESSURE_TRANSITION_PERIOD,
            Some(v) => {
                parse_go_duration(v.trim()).map_err(|reason| ThresholdError::BadDuration {
                    setting: "eviction-pressure-transition-period".into(),
                    signal: None,
                    value: v.clone(),
                    reason,
                })?
            }
        };
        let hard = raw.eviction_hard.as_ref().map(|h| {
            if raw.merge_default_eviction_settings {
                merge_default_hard(h)
            } else {
                h.clone()
            }
        });
        EvictionConfig::from_parts(
            hard.as_ref(),
            &raw.eviction_soft,
            &grace,
            &raw.eviction_minimum_reclaim,
            raw.eviction_max_pod_grace_period.unwrap_or(0),
            pressure_transition_period,
        )
    }

    /// Build from maps of threshold strings (signal → `100Mi` / `10%`) and
    /// grace periods as durations: each value is parsed, then
    /// [`EvictionConfig::from_typed`]. `hard`: `None` = the kubelet defaults.
    pub fn from_parts(
        hard: Option<&BTreeMap<String, String>>,
        soft: &BTreeMap<String, String>,
        soft_grace_period: &BTreeMap<String, Duration>,
        minimum_reclaim: &BTreeMap<String, String>,
        max_pod_grace_period_seconds: i64,
        pressure_transition_period: Duration,
    ) -> Result<EvictionConfig, ThresholdError> {
        let default_hard: BTreeMap<String, String> = DEFAULT_EVICTION_HARD
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let hard_map = hard.unwrap_or(&default_hard);

        let mut grace: BTreeMap<Signal, Duration> = BTreeMap::new();
        for (k, d) in soft_grace_period {
            grace.insert(parse_signal(k)?, *d);
        }
        let mut reclaim: BTreeMap<Signal, ThresholdValue> = BTreeMap::new();
        for (k, v) in minimum_reclaim {
            let sig = parse_signal(k)?;
            if let Some(val) = parse_min_reclaim(sig, v.trim())? {
                reclaim.insert(sig, val);
            }
        }

        let mut typed: [BTreeMap<Signal, ThresholdValue>; 2] = Default::default();
        for (i, kind, map) in [
            (0, ThresholdKind::Hard, hard_map),
            (1, ThresholdKind::Soft, soft),
        ] {
            for (k, v) in map {
                let sig = parse_signal(k)?;
                let setting = match kind {
                    ThresholdKind::Hard => "eviction-hard",
                    ThresholdKind::Soft => "eviction-soft",
                };
                let Some(value) = parse_threshold_value(setting, sig, v.trim())? else {
                    continue; // 0% / 100%: ignored like the kubelet
                };
                if kind == ThresholdKind::Soft && !grace.contains_key(&sig) {
                    return Err(ThresholdError::SoftWithoutGrace {
                        signal: sig.to_string(),
                        statement: format!("{k}<{v}"),
                    });
                }
                typed[i].insert(sig, value);
            }
        }
        if max_pod_grace_period_seconds < 0 {
            return Err(ThresholdError::NegativeMaxPodGrace {
                value: max_pod_grace_period_seconds,
            });
        }
        EvictionConfig::from_typed(
            &typed[0],
            &typed[1],
            &grace,
            &reclaim,
            Duration::from_secs(max_pod_grace_period_seconds as u64),
            pressure_transition_period,
        )
    }

    /// Build from typed settings (what the daemon's validated config holds):
    /// the hard and soft thresholds per signal (`0%` / `100%` already left
    /// out), the soft grace periods and the minimum reclaims. A soft
    /// threshold without a grace period is an error.
    pub fn from_typed(
        hard: &BTreeMap<Signal, ThresholdValue>,
        soft: &BTreeMap<Signal, ThresholdValue>,
        soft_grace_period: &BTreeMap<Signal, Duration>,
        minimum_reclaim: &BTreeMap<Signal, ThresholdValue>,
        max_pod_grace_period: Duration,
        pressure_transition_period: Duration,
    ) -> Result<EvictionConfig, ThresholdError> {
        let mut thresholds = Vec::new();
        for (kind, map) in [(ThresholdKind::Hard, hard), (ThresholdKind::Soft, soft)] {
            for (&sig, &value) in map {
                let grace_period = match kind {
                    ThresholdKind::Hard => Duration::ZERO,
                    ThresholdKind::Soft => *soft_grace_period.get(&sig).ok_or_else(|| {
                        ThresholdError::SoftWithoutGrace {
                            signal: sig.to_string(),
                            statement: format!("{sig}<{value}"),
                        }
                    })?,
                };
                // The kubelet treats every threshold with a zero grace
                // period as hard (isHardEvictionThreshold): a soft one with
                // `0s` acts at once, with the hard 1 s pod grace.
                let kind = if grace_period.is_zero() {
                    ThresholdKind::Hard
                } else {
                    kind
                };
                thresholds.push(Threshold {
                    signal: sig,
                    kind,
                    value,
                    grace_period,
                    min_reclaim: minimum_reclaim.get(&sig).copied(),
                });
            }
        }
        // hard first, then soft; each in signal order (stable)
        thresholds.sort_by_key(|t| (t.kind, t.signal));
        Ok(EvictionConfig {
            thresholds,
            max_pod_grace_period,
            pressure_transition_period,
        })
    }

    /// Add qosd's pressure thresholds ([`crate::policy::evict::pressure`]):
    /// `hard` and `soft` map a pressure signal to a
    /// [`ThresholdValue::Stall`], a soft one needs its grace period (`0s`
    /// makes it hard, as for the kubelet's signals), and the thresholds of
    /// one signal share one window.
    pub fn with_pressure(
        mut self,
        hard: &BTreeMap<Signal, ThresholdValue>,
        soft: &BTreeMap<Signal, ThresholdValue>,
        soft_grace_period: &BTreeMap<Signal, Duration>,
    ) -> Result<EvictionConfig, ThresholdError> {
        crate::policy::evict::pressure::windows(hard, soft)?;
        for (kind, map) in [(ThresholdKind::Hard, hard), (ThresholdKind::Soft, soft)] {
            for (&signal, &value) in map {
                if !signal.is_pressure() || !matches!(value, ThresholdValue::Stall { .. }) {
                    return Err(ThresholdError::UnknownSignal {
                        signal: signal.to_string(),
                    });
                }
                let grace_period = match kind {
                    ThresholdKind::Hard => Duration::ZERO,
                    ThresholdKind::Soft => *soft_grace_period.get(&signal).ok_or_else(|| {
                        ThresholdError::SoftWithoutGrace {
                            signal: signal.to_string(),
                            statement: format!("{signal}>={value}"),
                        }
                    })?,
                };
                self.thresholds.push(Threshold {
                    signal,
                    kind: if grace_period.is_zero() {
                        ThresholdKind::Hard
                    } else {
                        kind
                    },
                    value,
                    grace_period,
                    min_reclaim: None,
                });
            }
        }
        self.thresholds.sort_by_key(|t| (t.kind, t.signal));
        Ok(self)
    }

    /// The pressure thresholds (qosd's own signals), in order.
    pub fn pressure(&self) -> impl Iterator<Item = &Threshold> {
        self.thresholds.iter().filter(|t| t.is_stall())
    }

    /// The kubelet adds an `allocatableMemory.available` hard threshold
    /// equal to each `memory.available` one when node allocatable is
    /// enforced on pods (`--enforce-node-allocatable=pods`).
    pub fn with_allocatable_thresholds(mut self) -> EvictionConfig {
        let extra: Vec<Threshold> = self
            .thresholds
            .iter()
            .filter(|t| t.kind == ThresholdKind::Hard && t.signal == Signal::MemoryAvailable)
            .map(|t| Threshold {
                signal: Signal::AllocatableMemoryAvailable,
                ..t.clone()
            })
            .filter(|t| {
                !self
                    .thresholds
                    .iter()
                    .any(|o| o.kind == ThresholdKind::Hard && o.signal == t.signal)
            })
            .collect();
        let soft_at = self
            .thresholds
            .iter()
            .position(|t| t.kind == ThresholdKind::Soft)
            .unwrap_or(self.thresholds.len());
        for (i, t) in extra.into_iter().enumerate() {
            self.thresholds.insert(soft_at + i, t);
        }
        self
    }

    /// `containerfs.*` thresholds as the kubelet derives them
    /// (UpdateContainerFsThresholds): on one filesystem, or with images and
    /// containers split, they copy `nodefs.*`; with a dedicated imagefs
    /// holding the containers' writable layers they copy `imagefs.*`.
    /// Configured `containerfs.*` thresholds are replaced (the kubelet
    /// ignores them with a logged error).
    pub fn with_containerfs_thresholds(
        mut self,
        dedicated_imagefs: bool,
        split: bool,
    ) -> EvictionConfig {
        let from_imagefs = dedicated_imagefs && !split;
        let (bytes, inodes) = if from_imagefs {
            (Signal::ImageFsAvailable, Signal::ImageFsInodesFree)
        } else {
            (Signal::NodeFsAvailable, Signal::NodeFsInodesFree)
        };
        self.thresholds.retain(|t| {
            !matches!(
                t.signal,
                Signal::ContainerFsAvailable | Signal::ContainerFsInodesFree
            )
        });
        let extra: Vec<Threshold> = self
            .thresholds
            .iter()
            .filter_map(|t| {
                let signal = if t.signal == bytes {
                    Signal::ContainerFsAvailable
                } else if t.signal == inodes {
                    Signal::ContainerFsInodesFree
                } else {
                    return None;
                };
                Some(Threshold {
                    signal,
                    ..t.clone()
                })
            })
            .collect();
        self.thresholds.extend(extra);
        self.thresholds.sort_by_key(|t| (t.kind, t.signal));
        self
    }

    /// The hard thresholds of one signal.
    pub fn hard(&self, signal: Signal) -> impl Iterator<Item = &Threshold> {
        self.thresholds
            .iter()
            .filter(move |t| t.kind == ThresholdKind::Hard && t.signal == signal)
    }

    /// The largest hard threshold of a signal against `capacity` (what a fast
    /// detector must watch for), if any.
    pub fn hard_line(&self, signal: Signal, capacity: i64) -> Option<i64> {
        self.hard(signal).map(|t| t.threshold_for(capacity)).max()
    }
}

fn parse_signal(s: &str) -> Result<Signal, ThresholdError> {
    s.trim().parse()
}

/// Parse the value of an eviction threshold (`100Mi`, `10%`). `Ok(None)`
/// means "ignored" (`0%`, `100%`, like the kubelet).
pub(crate) fn parse_threshold_value(
    setting: &str,
    signal: Signal,
    v: &str,
) -> Result<Option<ThresholdValue>, ThresholdError> {
    if let Some(num) = v.strip_suffix('%') {
        if v == "0%" || v == "100%" {
            return Ok(None);
        }
        let p = parse_percent(setting, signal, v, num)?;
        if p <= 0.0 {
            // "-0%" or "0.0%": the kubelet ignores only the literal 0%; a
            // zero fraction can never be met, a negative one is an error.
            if p < 0.0 {
                return Err(ThresholdError::BadPercentage {
                    setting: setting.into(),
                    signal: signal.to_string(),
                    value: v.into(),
                    reason: "must be >= 0%".into(),
                });
            }
            return Ok(None);
        }
        if p >= 1.0 {
            if p > 1.0 {
                return Err(ThresholdError::BadPercentage {
                    setting: setting.into(),
                    signal: signal.to_string(),
                    value: v.into(),
                    reason: "must be <= 100%".into(),
                });
            }
            return Ok(None);
        }
        return Ok(Some(ThresholdValue::Percentage(p)));
    }
    let q = parse_quantity(setting, signal, v)?;
    if q <= 0 {
        return Err(ThresholdError::NotPositive {
            setting: setting.into(),
            signal: signal.to_string(),
            value: v.into(),
        });
    }
    Ok(Some(ThresholdValue::Quantity(q)))
}

fn parse_percent(setting: &str, signal: Signal, v: &str, num: &str) -> Result<f64, ThresholdError> {
    let bad = |reason: &str| ThresholdError::BadPercentage {
        setting: setting.into(),
        signal: signal.to_string(),
        value: v.into(),
        reason: reason.into(),
    };
    if num.is_empty()
        || !num
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '-' || c == '+')
    {
        return Err(bad("not a number"));
    }
    let f: f64 = num.parse().map_err(|_| bad("not a number"))?;
    if !f.is_finite() {
        return Err(bad("not a finite number"));
    }
    Ok(f / 100.0)
}

fn parse_quantity(setting: &str, signal: Signal, v: &str) -> Result<i64, ThresholdError> {
    let q = Quantity::parse(v).map_err(|e| ThresholdError::BadQuantity {
        setting: setting.into(),
        signal: signal.to_string(),
        value: v.into(),
        reason: e.reason.to_string(),
    })?;
    Ok(q.value_ceil())
}

/// Parse a minimum-reclaim value as the kubelet does: a percentage must be
/// positive (`0%` is an error), a quantity must not be negative (`0` means
/// none). `Ok(None)`: no extra reclaim.
pub(crate) fn parse_min_reclaim(
    signal: Signal,
    v: &str,
) -> Result<Option<ThresholdValue>, ThresholdError> {
    const SETTING: &str = "eviction-minimum-reclaim";
    if let Some(num) = v.strip_suffix('%') {
        let p = parse_percent(SETTING, signal, v, num)?;
        if p <= 0.0 {
            return Err(ThresholdError::BadPercentage {
                setting: SETTING.into(),
                signal: signal.to_string(),
                value: v.into(),
                reason: "a percentage minimum reclaim must be positive".into(),
            });
        }
        return Ok(Some(ThresholdValue::Percentage(p)));
    }
    let q = parse_quantity(SETTING, signal, v)?;
    if q < 0 {
        return Err(ThresholdError::NotPositive {
            setting: SETTING.into(),
            signal: signal.to_string(),
            value: v.into(),
        });
    }
    Ok((q > 0).then_some(ThresholdValue::Quantity(q)))
}

/// Parse one entry of an eviction map (its signal already known) as the
/// kubelet does: this is the parser the config file validation calls, and
/// [`EvictionConfig::from_parts`] applies the same rules. `setting`:
/// `eviction-hard`, `eviction-soft` or `eviction-minimum-reclaim`; the value
/// is taken as given, like the kubelet's config parsing. `Ok(None)`: a disabled threshold (`0%`, `100%`) or no extra
/// reclaim (`0`).
pub fn parse_entry(
    setting: &str,
    signal: Signal,
    value: &str,
) -> Result<Option<ThresholdValue>, ThresholdError> {
    match setting {
        // No trimming: the kubelet parses config values as given, so
        // `" 100Mi"` is refused (the flag parser trims, see
        // [`parse_threshold_flag`]).
        "eviction-minimum-reclaim" => parse_min_reclaim(signal, value),
        _ => parse_threshold_value(setting, signal, value),
    }
}

/// Parse a `--eviction-hard` / `--eviction-soft` flag value:
/// `memory.available<100Mi,nodefs.available<10%` into a signal → value map.
/// An empty string yields an empty map.
pub fn parse_threshold_flag(
    setting: &str,
    s: &str,
) -> Result<BTreeMap<String, String>, ThresholdError> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for stmt in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let bad_op = || ThresholdError::BadOperator {
            setting: setting.into(),
            statement: stmt.into(),
        };
        let Some((k, v)) = stmt.split_once('<') else {
            return Err(bad_op());
        };
        let (k, v) = (k.trim(), v.trim());
        // `<=`, `<<`, or another operator mixed in.
        if v.starts_with(['=', '<', '>']) || k.contains(['>', '=', '!']) {
            return Err(bad_op());
        }
        if k.is_empty() || v.is_empty() {
            return Err(ThresholdError::Malformed {
                setting: setting.into(),
                statement: stmt.into(),
                expected: "<signal><<value>",
            });
        }
        parse_signal(k)?;
        if let Some(first) = out.insert(k.to_string(), v.to_string()) {
            return Err(ThresholdError::Duplicate {
                setting: setting.into(),
                signal: k.into(),
                first,
                second: v.into(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
/// Parse a `--eviction-soft-grace-period` / `--eviction-minimum-reclaim`
/// flag value: `memory.available=1m30s,nodefs.available=2m`.
pub(crate) fn parse_assignment_flag(
    setting: &str,
    s: &str,
) -> Result<BTreeMap<String, String>, ThresholdError> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for stmt in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let Some((k, v)) = stmt.split_once('=') else {
            return Err(ThresholdError::Malformed {
                setting: setting.into(),
                statement: stmt.into(),
                expected: "<signal>=<value>",
            });
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || v.is_empty() {
            return Err(ThresholdError::Malformed {
                setting: setting.into(),
                statement: stmt.into(),
                expected: "<signal>=<value>",
            });
        }
        parse_signal(k)?;
        if let Some(first) = out.insert(k.to_string(), v.to_string()) {
            return Err(ThresholdError::Duplicate {
                setting: setting.into(),
                signal: k.into(),
                first,
                second: v.into(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: i64 = 1024 * 1024;

    fn raw_flags(hard: Option<&str>, soft: &str, grace: &str, reclaim: &str) -> RawEvictionConfig {
        RawEvictionConfig {
            eviction_hard: hard.map(|h| parse_threshold_flag("eviction-hard", h).unwrap()),
            eviction_soft: parse_threshold_flag("eviction-soft", soft).unwrap(),
            eviction_soft_grace_period: parse_assignment_flag("eviction-soft-grace-period", grace)
                .unwrap(),
            eviction_minimum_reclaim: parse_assignment_flag("eviction-minimum-reclaim", reclaim)
                .unwrap(),
            ..Default::default()
        }
    }

    #[test]
    fn signal_names_round_trip() {
        for s in Signal::ALL {
            assert_eq!(Signal::parse(s.as_str()), Some(s));
        }
        for bad in [
            "memory.Available",
            "memory",
            "",
            "pid.Available",
            "cpu.available",
        ] {
            assert_eq!(Signal::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn signal_conditions_and_resources() {
        let table = [
            (
                Signal::MemoryAvailable,
                NodeCondition::MemoryPressure,
                SignalResource::Memory,
            ),
            (
                Signal::AllocatableMemoryAvailable,
                NodeCondition::MemoryPressure,
                SignalResource::Memory,
            ),
            (
                Signal::NodeFsAvailable,
                NodeCondition::DiskPressure,
                SignalResource::Disk,
            ),
            (
                Signal::NodeFsInodesFree,
                NodeCondition::DiskPressure,
                SignalResource::Inodes,
            ),
            (
                Signal::ImageFsAvailable,
                NodeCondition::DiskPressure,
                SignalResource::Disk,
            ),
            (
                Signal::ImageFsInodesFree,
                NodeCondition::DiskPressure,
                SignalResource::Inodes,
            ),
            (
                Signal::ContainerFsAvailable,
                NodeCondition::DiskPressure,
                SignalResource::Disk,
            ),
            (
                Signal::ContainerFsInodesFree,
                NodeCondition::DiskPressure,
                SignalResource::Inodes,
            ),
            (
                Signal::PidAvailable,
                NodeCondition::PIDPressure,
                SignalResource::Pids,
            ),
        ];
        for (s, c, r) in table {
            assert_eq!(s.node_condition(), c, "{s}");
            assert_eq!(s.resource(), r, "{s}");
        }
    }

    #[test]
    fn defaults_when_nothing_given() {
        let c = EvictionConfig::default();
        let got: Vec<String> = c.thresholds.iter().map(|t| t.statement()).collect();
        assert_eq!(
            got,
            [
                "memory.available<100Mi",
                "nodefs.available<10%",
                "nodefs.inodesFree<5%",
                "imagefs.available<15%",
                "imagefs.inodesFree<5%",
            ]
        );
        assert!(c.thresholds.iter().all(|t| t.kind == ThresholdKind::Hard));
        assert_eq!(c.pressure_transition_period, Duration::from_secs(300));
        assert_eq!(c.max_pod_grace_period, Duration::ZERO);
    }

    #[test]
    fn explicit_hard_replaces_defaults() {
        let c =
            EvictionConfig::from_raw(&raw_flags(Some("memory.available<1Gi"), "", "", "")).unwrap();
        assert_eq!(c.thresholds.len(), 1);
        assert_eq!(c.thresholds[0].value, ThresholdValue::Quantity(1024 * MI));
        // explicitly empty: no hard thresholds at all
        let c = EvictionConfig::from_raw(&raw_flags(Some(""), "", "", "")).unwrap();
        assert!(c.thresholds.is_empty());
    }

    #[test]
    fn threshold_values_table() {
        use ThresholdValue::*;
        let table: &[(&str, Option<ThresholdValue>)] = &[
            ("100Mi", Some(Quantity(100 * MI))),
            ("1Gi", Some(Quantity(1024 * MI))),
            ("500M", Some(Quantity(500_000_000))),
            ("1.5Gi", Some(Quantity(1536 * MI))),
            ("1000", Some(Quantity(1000))),
            ("1k", Some(Quantity(1000))),
            ("10%", Some(Percentage(0.10))),
            ("5.5%", Some(Percentage(0.055))),
            ("0%", None),
            ("100%", None),
            ("0.0%", None),
        ];
        for (v, want) in table {
            let got = parse_threshold_value("eviction-hard", Signal::MemoryAvailable, v).unwrap();
            match (got, want) {
                (Some(Percentage(a)), Some(Percentage(b))) => {
                    assert!((a - b).abs() < 1e-12, "{v}: {a} vs {b}")
                }
                (g, w) => assert_eq!(g, *w, "{v}"),
            }
        }
    }

    #[test]
    fn threshold_value_errors_table() {
        let table: &[(&str, &str)] = &[
            ("-100Mi", "must be positive"),
            ("0", "must be positive"),
            ("0Mi", "must be positive"),
            ("abc", "bad quantity"),
            ("100MB", "bad quantity"),
            ("", "bad quantity"),
            ("-5%", "must be >= 0%"),
            ("101%", "must be <= 100%"),
            ("x%", "not a number"),
            ("%", "not a number"),
            ("1e3%", "not a number"),
        ];
        for (v, want) in table {
            let e = parse_threshold_value("eviction-hard", Signal::NodeFsAvailable, v)
                .expect_err(v)
                .to_string();
            assert!(e.contains(want), "{v}: {e}");
            assert!(e.contains("nodefs.available"), "{v}: {e}");
            assert!(e.contains(&format!("{v:?}")), "error names value {v}: {e}");
        }
    }

    #[test]
    fn flag_syntax_errors_table() {
        let table: &[(&str, &str)] = &[
            ("memory.available>100Mi", "bad operator"),
            ("memory.available=100Mi", "bad operator"),
            ("memory.available<=100Mi", "bad operator"),
            ("memory.available<<100Mi", "bad operator"),
            ("memory.available", "bad operator"),
            (
                "memory.avail<100Mi",
                "unknown eviction signal \"memory.avail\"",
            ),
            ("<100Mi", "malformed"),
            ("memory.available<", "malformed"),
            ("memory.available<1Gi,memory.available<2Gi", "given twice"),
        ];
        for (s, want) in table {
            let e = parse_threshold_flag("eviction-hard", s)
                .expect_err(s)
                .to_string();
            assert!(e.contains(want), "{s}: {e}");
        }
        let ok = parse_threshold_flag(
            "eviction-hard",
            " memory.available < 100Mi , nodefs.available<10%,",
        )
        .unwrap();
        assert_eq!(ok.get("memory.available").unwrap(), "100Mi");
        assert_eq!(ok.get("nodefs.available").unwrap(), "10%");
    }

    #[test]
    fn assignment_flag_table() {
        let m = parse_assignment_flag(
            "eviction-minimum-reclaim",
            "memory.available=0Mi,nodefs.available=500Mi",
        )
        .unwrap();
        assert_eq!(m.len(), 2);
        for bad in ["memory.available", "=1m", "memory.available=", "foo=1m"] {
            assert!(
                parse_assignment_flag("eviction-soft-grace-period", bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn soft_needs_grace() {
        let e =
            EvictionConfig::from_raw(&raw_flags(None, "memory.available<1Gi", "", "")).unwrap_err();
        assert!(matches!(e, ThresholdError::SoftWithoutGrace { .. }), "{e}");
        assert!(e.to_string().contains("memory.available<1Gi"));
        // grace for another signal does not help
        let e = EvictionConfig::from_raw(&raw_flags(
            None,
            "memory.available<1Gi",
            "nodefs.available=1m",
            "",
        ))
        .unwrap_err();
        assert!(matches!(e, ThresholdError::SoftWithoutGrace { .. }), "{e}");
    }

    #[test]
    fn full_flag_set() {
        let mut raw = raw_flags(
            Some("memory.available<100Mi,nodefs.available<10%"),
            "memory.available<1Gi,nodefs.inodesFree<10%",
            "memory.available=1m30s,nodefs.inodesFree=2m",
            "memory.available=0Mi,nodefs.available=500Mi,nodefs.inodesFree=5%",
        );
        raw.eviction_max_pod_grace_period = Some(60);
        raw.eviction_pressure_transition_period = Some("30s".into());
        let c = EvictionConfig::from_raw(&raw).unwrap();
        let got: Vec<String> = c.thresholds.iter().map(|t| t.to_string()).collect();
        assert_eq!(
            got,
            [
                "hard memory.available<100Mi",
                "hard nodefs.available<10% min-reclaim 500Mi",
                "soft memory.available<1Gi grace 1m30s",
                "soft nodefs.inodesFree<10% grace 2m0s min-reclaim 5%",
            ]
        );
        assert_eq!(c.max_pod_grace_period, Duration::from_secs(60));
        assert_eq!(c.pressure_transition_period, Duration::from_secs(30));
    }

    #[test]
    fn setting_errors_table() {
        let cases: Vec<(RawEvictionConfig, &str)> = vec![
            (
                RawEvictionConfig {
                    eviction_soft_grace_period: [("memory.available".into(), "soon".into())].into(),
                    ..Default::default()
                },
                "bad duration \"soon\" for memory.available",
            ),
            (
                RawEvictionConfig {
                    eviction_soft_grace_period: [("memory.available".into(), "-1m".into())].into(),
                    ..Default::default()
                },
                "negative",
            ),
            (
                RawEvictionConfig {
                    eviction_minimum_reclaim: [("memory.available".into(), "-1Mi".into())].into(),
                    ..Default::default()
                },
                "must be positive, got \"-1Mi\"",
            ),
            (
                RawEvictionConfig {
                    eviction_minimum_reclaim: [("nodefs.available".into(), "0%".into())].into(),
                    ..Default::default()
                },
                "a percentage minimum reclaim must be positive",
            ),
            (
                RawEvictionConfig {
                    eviction_minimum_reclaim: [("disk.available".into(), "1Gi".into())].into(),
                    ..Default::default()
                },
                "unknown eviction signal \"disk.available\"",
            ),
            (
                RawEvictionConfig {
                    eviction_max_pod_grace_period: Some(-5),
                    ..Default::default()
                },
                "got -5",
            ),
            (
                RawEvictionConfig {
                    eviction_pressure_transition_period: Some("5 minutes".into()),
                    ..Default::default()
                },
                "\"5 minutes\"",
            ),
            (
                RawEvictionConfig {
                    eviction_hard: Some([("pid.available".into(), "lots".into())].into()),
                    ..Default::default()
                },
                "bad quantity \"lots\" for pid.available",
            ),
        ];
        for (raw, want) in cases {
            let e = EvictionConfig::from_raw(&raw).expect_err(want).to_string();
            assert!(e.contains(want), "want {want:?} in {e}");
        }
    }

    #[test]
    fn config_file_map_form() {
        let yaml = r#"
evictionHard:
  memory.available: "200Mi"
  nodefs.available: "0%"
  pid.available: "1000"
evictionSoft:
  memory.available: "1Gi"
evictionSoftGracePeriod:
  memory.available: "1m30s"
evictionMinimumReclaim:
  memory.available: "100Mi"
evictionMaxPodGracePeriod: 30
evictionPressureTransitionPeriod: "1m0s"
"#;
        let raw: RawEvictionConfig = yaml_serde::from_str(yaml).unwrap();
        let c = EvictionConfig::from_raw(&raw).unwrap();
        let got: Vec<String> = c.thresholds.iter().map(|t| t.to_string()).collect();
        assert_eq!(
            got,
            [
                "hard memory.available<200Mi min-reclaim 100Mi",
                "hard pid.available<1000",
                "soft memory.available<1Gi grace 1m30s min-reclaim 100Mi",
            ]
        );
        assert_eq!(c.pressure_transition_period, Duration::from_secs(60));
        assert_eq!(c.max_pod_grace_period, Duration::from_secs(30));
        // wrong value types are rejected
        let bad: Result<RawEvictionConfig, _> = yaml_serde::from_str("evictionHard: [1]\n");
        assert!(bad.is_err());
        let bad: Result<RawEvictionConfig, _> =
            yaml_serde::from_str("evictionMaxPodGracePeriod: soon\n");
        assert!(bad.is_err());
    }

    #[test]
    fn merge_defaults_and_from_parts() {
        let mut raw = raw_flags(Some("memory.available<1Gi,nodefs.available<0%"), "", "", "");
        raw.merge_default_eviction_settings = true;
        let c = EvictionConfig::from_raw(&raw).unwrap();
        let got: Vec<String> = c.thresholds.iter().map(|t| t.statement()).collect();
        // nodefs.available<0% stays disabled (explicit), the others come back
        assert_eq!(
            got,
            [
                "memory.available<1Gi",
                "nodefs.inodesFree<5%",
                "imagefs.available<15%",
                "imagefs.inodesFree<5%",
            ]
        );
        let soft: BTreeMap<String, String> = [("memory.available".into(), "2Gi".into())].into();
        let grace: BTreeMap<String, Duration> =
            [("memory.available".into(), Duration::from_secs(90))].into();
        let c = EvictionConfig::from_parts(
            None,
            &soft,
            &grace,
            &BTreeMap::new(),
            10,
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(c.thresholds.len(), 6);
        assert_eq!(c.thresholds[5].grace_period, Duration::from_secs(90));
        assert_eq!(c.max_pod_grace_period, Duration::from_secs(10));
        let e = EvictionConfig::from_parts(
            None,
            &soft,
            &BTreeMap::new(),
            &BTreeMap::new(),
            0,
            Duration::ZERO,
        )
        .unwrap_err();
        assert!(matches!(e, ThresholdError::SoftWithoutGrace { .. }));
    }

    #[test]
    fn percent_resolution() {
        let t = Threshold {
            signal: Signal::NodeFsAvailable,
            kind: ThresholdKind::Hard,
            value: ThresholdValue::Percentage(0.10),
            grace_period: Duration::ZERO,
            min_reclaim: Some(ThresholdValue::Percentage(0.05)),
        };
        assert_eq!(t.threshold_for(1000), 100);
        assert_eq!(t.min_reclaim_for(1000), 50);
        assert_eq!(t.threshold_for(0), 0);
    }

    #[test]
    fn met_with_hysteresis_table() {
        // threshold 100, min-reclaim 50, capacity 1000
        let t = Threshold {
            signal: Signal::MemoryAvailable,
            kind: ThresholdKind::Hard,
            value: ThresholdValue::Quantity(100),
            grace_period: Duration::ZERO,
            min_reclaim: Some(ThresholdValue::Quantity(50)),
        };
        let table = [
            // (available, was_met, met)
            (150, false, false),
            (100, false, false), // equal: not met (strictly below)
            (99, false, true),
            (0, false, true),
            (-5, false, true),
            (99, true, true),
            (100, true, true), // still within min-reclaim
            (149, true, true),
            (150, true, false), // reclaimed threshold + min-reclaim
            (500, true, false),
        ];
        for (avail, was, want) in table {
            assert_eq!(
                t.is_met(avail, 1000, was),
                want,
                "avail {avail} was_met {was}"
            );
        }
    }

    #[test]
    fn allocatable_thresholds_added() {
        let c = EvictionConfig::default().with_allocatable_thresholds();
        let alloc: Vec<_> = c
            .thresholds
            .iter()
            .filter(|t| t.signal == Signal::AllocatableMemoryAvailable)
            .collect();
        assert_eq!(alloc.len(), 1);
        assert_eq!(alloc[0].value, ThresholdValue::Quantity(100 * MI));
        assert_eq!(
            c.hard_line(Signal::AllocatableMemoryAvailable, 0),
            Some(100 * MI)
        );
        // idempotent
        let again = c.clone().with_allocatable_thresholds();
        assert_eq!(again, c);
    }

    /// The kubelet's `UpdateContainerFsThresholds` (eviction/helpers.go,
    /// called on every node once the filesystems are known): one
    /// filesystem, or containers split from images → `containerfs.*`
    /// copies `nodefs.*`; a dedicated imagefs holding the containers →
    /// copies `imagefs.*`. Hard and soft are copied with their grace
    /// period and minimum reclaim; configured `containerfs.*` thresholds
    /// are overwritten.
    #[test]
    fn containerfs_thresholds_follow_the_kubelet_table() {
        let t = |signal, kind, value, grace: u64, min: Option<ThresholdValue>| Threshold {
            signal,
            kind,
            value,
            grace_period: Duration::from_secs(grace),
            min_reclaim: min,
        };
        use Signal::*;
        use ThresholdKind::{Hard, Soft};
        let q = ThresholdValue::Quantity;
        let base = vec![
            t(NodeFsAvailable, Hard, q(100), 0, Some(q(5))),
            t(NodeFsAvailable, Soft, q(200), 30, None),
            t(NodeFsInodesFree, Hard, q(300), 0, None),
            t(ImageFsAvailable, Hard, q(400), 0, None),
            t(ImageFsInodesFree, Soft, q(500), 60, Some(q(7))),
            // Configured: overwritten, as the kubelet does (with an error log).
            t(ContainerFsAvailable, Hard, q(999), 0, None),
        ];
        let cfg = EvictionConfig {
            thresholds: base,
            ..EvictionConfig::default()
        };
        let derived = |dedicated: bool,
                       split: bool|
         -> Vec<(
            Signal,
            ThresholdKind,
            ThresholdValue,
            u64,
            Option<ThresholdValue>,
        )> {
            cfg.clone()
                .with_containerfs_thresholds(dedicated, split)
                .thresholds
                .into_iter()
                .filter(|x| matches!(x.signal, ContainerFsAvailable | ContainerFsInodesFree))
                .map(|x| {
                    (
                        x.signal,
                        x.kind,
                        x.value,
                        x.grace_period.as_secs(),
                        x.min_reclaim,
                    )
                })
                .collect()
        };
        let from_nodefs = vec![
            (ContainerFsAvailable, Hard, q(100), 0, Some(q(5))),
            (ContainerFsInodesFree, Hard, q(300), 0, None),
            (ContainerFsAvailable, Soft, q(200), 30, None),
        ];
        let from_imagefs = vec![
            (ContainerFsAvailable, Hard, q(400), 0, None),
            (ContainerFsInodesFree, Soft, q(500), 60, Some(q(7))),
        ];
        // (imageFs, separateContainerImageFs) as the kubelet names them.
        assert_eq!(derived(false, false), from_nodefs, "one filesystem");
        assert_eq!(
            derived(true, true),
            from_nodefs,
            "containers split from images"
        );
        assert_eq!(derived(true, false), from_imagefs, "dedicated imagefs");
    }

    #[test]
    fn go_durations_table() {
        let table: &[(&str, u64)] = &[
            ("0", 0),
            ("0s", 0),
            ("1s", 1_000_000_000),
            ("1m30s", 90_000_000_000),
            ("5m0s", 300_000_000_000),
            ("300ms", 300_000_000),
            ("1.5h", 5_400_000_000_000),
            ("1h2m3s4ms5us6ns", 3_723_004_005_006),
            ("2µs", 2_000),
            ("+10s", 10_000_000_000),
            (".5s", 500_000_000),
        ];
        for (s, nanos) in table {
            assert_eq!(
                parse_go_duration(s).unwrap(),
                Duration::from_nanos(*nanos),
                "{s}"
            );
        }
        for bad in [
            "",
            "1",
            "10",
            "s",
            "1x",
            "-1s",
            "1.2.3s",
            "1m-1s",
            "ms",
            "9999999999h",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn format_durations_table() {
        let table: &[(u64, &str)] = &[
            (0, "0s"),
            (250, "250ms"),
            (1_000, "1s"),
            (90_000, "1m30s"),
            (300_000, "5m0s"),
            (3_723_000, "1h2m3s"),
            (1_500, "1.5s"),
        ];
        for (ms, want) in table {
            assert_eq!(format_go_duration(Duration::from_millis(*ms)), *want);
        }
    }

    proptest::proptest! {
        #[test]
        fn go_duration_round_trip(ms in 0u64..10_000_000_000) {
            let d = Duration::from_millis(ms);
            proptest::prop_assert_eq!(parse_go_duration(&format_go_duration(d)).unwrap(), d);
        }
    }
}
