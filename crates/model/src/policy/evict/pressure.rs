//! qosd's pressure thresholds (pure): evict on memory *stall*, not only on
//! bytes.
//!
//! Pressure stall information (PSI, `/proc/pressure/memory`) counts the
//! time tasks wait on memory: reclaim, refaults of evicted working set,
//! throttling at `memory.high`. A node can stall for seconds while
//! `memory.available` never crosses its line (page cache counts as
//! available until it is gone), so qosd adds two signals of its own,
//! beside the kubelet's (which keep their meaning):
//!
//! * `memory.some`: the share of a window during which at least one task
//!   stalled on memory;
//! * `memory.full`: the share during which every non-idle task stalled at
//!   once (no task made progress).
//!
//! A threshold is `<share>%/<window>` (`10%/2s`; `10%` alone means the
//! default window, 2 s): met when the stalled time within the window
//! reaches `share · window`, which is exactly the kernel's trigger
//! condition (`some|full <stall µs> <window µs>`). Settings:
//! `evictionPressureHard`, `evictionPressureSoft` and
//! `evictionPressureSoftGracePeriod`; hard, soft, grace periods and the
//! node condition (`MemoryPressure`, held for
//! `evictionPressureTransitionPeriod`) behave as for the kubelet's signals.
//!
//! Limits, checked here: the window is 500 ms … 10 s (what the kernel's
//! triggers accept), the share is in (0 %, 100 %], the stalled time is at
//! least 1 µs, and the thresholds of one signal share one window (they are
//! levels on one measurement; use the other signal for another window).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::duration::{format_go_duration, parse_go_duration};
use crate::policy::evict::threshold::{Signal, ThresholdError, ThresholdValue};

/// The window of a threshold written without one (`10%`): the kernel's
/// averaging period, the shortest window an unprivileged process may arm a
/// trigger on (kernels ≥ 6.5 accept multiples of 2 s from tasks without
/// `CAP_SYS_RESOURCE`, which `qosd.service` does not have).
pub(crate) const DEFAULT_WINDOW: Duration = Duration::from_secs(2);
/// The shortest window the kernel's triggers accept.
pub(crate) const MIN_WINDOW: Duration = Duration::from_millis(500);
/// The longest window the kernel's triggers accept.
pub(crate) const MAX_WINDOW: Duration = Duration::from_secs(10);

/// What a pressure threshold value may look like (for error messages).
pub const ALLOWED: &str = "<share>%[/<window>]: a share of the window in (0%, 100%] and a Go duration 500ms..10s (default 2s), e.g. 10%/2s";

/// Parse a pressure threshold (`10%/2s`, `25%`, `2.5%/500ms`) of
/// `setting` (`evictionPressureHard`, `evictionPressureSoft`) for
/// `signal`. The value is taken as written: no spaces.
pub fn parse_stall(
    setting: &str,
    signal: Signal,
    text: &str,
) -> Result<ThresholdValue, ThresholdError> {
    let bad = |reason: String| ThresholdError::BadPercentage {
        setting: setting.into(),
        signal: signal.to_string(),
        value: text.into(),
        reason,
    };
    if !signal.is_pressure() {
        return Err(ThresholdError::UnknownSignal {
            signal: signal.to_string(),
        });
    }
    let (share_text, window) = match text.split_once('/') {
        None => (text, DEFAULT_WINDOW),
        Some((s, w)) => {
            let d = parse_go_duration(w).map_err(|reason| ThresholdError::BadDuration {
                setting: setting.into(),
                signal: Some(signal.to_string()),
                value: text.into(),
                reason,
            })?;
            (s, d)
        }
    };
    let Some(num) = share_text.strip_suffix('%') else {
        return Err(bad(format!(
            "{share_text:?} is not a percentage (expected {ALLOWED})"
        )));
    };
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad(format!("{share_text:?} is not a number of percent")));
    }
    let pct: f64 = num
        .parse()
        .map_err(|_| bad(format!("{share_text:?} is not a number of percent")))?;
    if !(pct > 0.0 && pct <= 100.0) {
        return Err(bad(format!(
            "{share_text} is out of range: the share must be above 0% and at most 100%"
        )));
    }
    if !(MIN_WINDOW..=MAX_WINDOW).contains(&window) {
        return Err(ThresholdError::BadDuration {
            setting: setting.into(),
            signal: Some(signal.to_string()),
            value: text.into(),
            reason: format!(
                "window {} is out of range: the kernel's triggers take 500ms..10s",
                format_go_duration(window)
            ),
        });
    }
    if window.subsec_nanos() % 1_000 != 0 {
        return Err(ThresholdError::BadDuration {
            setting: setting.into(),
            signal: Some(signal.to_string()),
            value: text.into(),
            reason: "the window must be a whole number of microseconds".into(),
        });
    }
    Ok(ThresholdValue::Stall {
        share: pct / 100.0,
        window,
    })
}

/// The window of a pressure value (`None` for other values).
pub fn window_of(v: &ThresholdValue) -> Option<Duration> {
    match *v {
        ThresholdValue::Stall { window, .. } => Some(window),
        _ => None,
    }
}

/// The stalled microseconds `share · window` rounded up (the kernel's
/// trigger threshold), at least 1.
pub fn stall_us(share: f64, window: Duration) -> u64 {
    ((window.as_micros() as f64 * share).ceil() as u64).max(1)
}

/// Check that every threshold of one signal names the same window: hard
/// and soft thresholds are levels on one measurement. Returns the window
/// of each signal.
pub(crate) fn windows(
    hard: &BTreeMap<Signal, ThresholdValue>,
    soft: &BTreeMap<Signal, ThresholdValue>,
) -> Result<BTreeMap<Signal, Duration>, ThresholdError> {
    let mut out: BTreeMap<Signal, Duration> = BTreeMap::new();
    for (setting, map) in [
        ("evictionPressureHard", hard),
        ("evictionPressureSoft", soft),
    ] {
        for (sig, v) in map {
            let Some(w) = window_of(v) else { continue };
            match out.get(sig) {
                Some(first) if *first != w => {
                    return Err(ThresholdError::BadDuration {
                        setting: setting.into(),
                        signal: Some(sig.to_string()),
                        value: v.to_string(),
                        reason: format!(
                            "window {} differs from the {} window of the other {sig} threshold: the thresholds of one signal are levels on one window (use memory.some and memory.full for two windows)",
                            format_go_duration(w),
                            format_go_duration(*first)
                        ),
                    })
                }
                _ => {
                    out.insert(*sig, w);
                }
            }
        }
    }
    Ok(out)
}

/// How per-pod stall weighs in the ranking for a pressure signal: pods
/// whose own stall (their `memory.pressure` `some` growth) is at least this
/// share of the largest pod's are "stalling" and are evicted first, in the
/// kubelet's memory order among themselves; pods below it (or unmeasured)
/// follow in the same order.
pub(crate) const STALLING_SHARE_OF_MAX: f64 = 0.25;

/// A pod's stall is ignored below this (parts per million of the sample
/// interval): 0.1 %, noise from a page fault or two.
pub(crate) const STALL_NOISE_PPM: u32 = 1_000;

/// Whether a pod with `ppm` of stall counts as stalling among pods whose
/// largest stall is `max_ppm`.
pub(crate) fn is_stalling(ppm: Option<u32>, max_ppm: u32) -> bool {
    match ppm {
        Some(p) => {
            p >= STALL_NOISE_PPM && f64::from(p) >= STALLING_SHARE_OF_MAX * f64::from(max_ppm)
        }
        None => false,
    }
}

/// A stall share in parts per million as a percentage text (`82.5%`).
pub(crate) fn ppm_text(ppm: u32) -> String {
    let pct = f64::from(ppm) / 10_000.0;
    format!("{}%", (pct * 10.0).round() / 10.0)
}

/// Samples of a cumulative stall counter (the `total=` of a pressure file,
/// µs) and the stall they prove within a window ending now. Time is a
/// parameter; nothing here reads a clock.
#[derive(Debug, Clone, Default)]
pub struct StallSamples {
    window: Duration,
    samples: std::collections::VecDeque<(std::time::Instant, u64)>,
}

/// What is known of the stall in the window ending at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowStall {
    /// Stalled µs proven within the window (a lower bound: the counter's
    /// growth since the first sample inside the window).
    pub stall_us: u64,
    /// When the proven part starts (the first sample inside the window).
    pub(crate) since: std::time::Instant,
}

/// The most samples a window keeps (a fast sampler stays bounded).
const MAX_SAMPLES: usize = 256;

impl StallSamples {
    /// Samples for a window of `window`.
    pub fn new(window: Duration) -> StallSamples {
        StallSamples {
            window,
            samples: Default::default(),
        }
    }

    /// Add a reading of the counter at `at` (readings may come from
    /// several threads: one older than the newest is inserted in order).
    /// A counter that went backwards (a cgroup made again) starts over.
    pub fn push(&mut self, at: std::time::Instant, total_us: u64) {
        let pos = self.samples.partition_point(|(t, _)| *t <= at);
        let before = pos.checked_sub(1).map(|i| self.samples[i].1);
        let after = self.samples.get(pos).map(|s| s.1);
        if before.is_some_and(|b| b > total_us) || after.is_some_and(|a| a < total_us) {
            self.samples.clear();
            self.samples.push_back((at, total_us));
            return;
        }
        self.samples.insert(pos, (at, total_us));
        // Keep what a window ending at the newest sample can use, and one
        // sample before it.
        let newest = self.samples.back().map(|s| s.0).unwrap_or(at);
        let horizon = newest.checked_sub(self.window).unwrap_or(newest);
        while self.samples.len() > 2 && self.samples[1].0 <= horizon {
            self.samples.pop_front();
        }
        while self.samples.len() > MAX_SAMPLES {
            self.samples.pop_front();
        }
    }

    /// The stall proven within the window ending at `now`: the counter's
    /// growth from the first sample at or after `now − window` to the
    /// newest; `None` with fewer than two samples in the window.
    pub fn in_window(&self, now: std::time::Instant) -> Option<WindowStall> {
        let start = now.checked_sub(self.window).unwrap_or(now);
        let first = self
            .samples
            .iter()
            .find(|(t, _)| *t >= start && *t <= now)?;
        let last = self.samples.iter().rev().find(|(t, _)| *t <= now)?;
        (last.0 > first.0).then(|| WindowStall {
            stall_us: last.1.saturating_sub(first.1),
            since: first.0,
        })
    }
}

/// A breach the kernel reported (a trigger event): the stall within the
/// window ending at `at` reached `line_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breach {
    /// When the event was read.
    pub at: std::time::Instant,
    /// The trigger's stall line (µs).
    pub line_us: u64,
}

/// The observation of a pressure signal at `now`: the larger of the stall
/// the samples prove and the line of a breach the kernel reported within
/// `hold` (the kernel reports a lasting breach at most once per window, so
/// a breach stands until the next report could have come). With the
/// window start of whichever it is (for the one-victim-per-window rule).
/// `None`: nothing known (no samples in the window and no breach).
pub fn observed(
    measured: Option<WindowStall>,
    breach: Option<Breach>,
    now: std::time::Instant,
    window: Duration,
    hold: Duration,
) -> Option<(u64, std::time::Instant)> {
    let certified = breach
        .filter(|b| now.saturating_duration_since(b.at) <= hold && b.at <= now)
        .map(|b| (b.line_us, b.at.checked_sub(window).unwrap_or(b.at)));
    match (measured.map(|m| (m.stall_us, m.since)), certified) {
        (Some(m), Some(c)) if c.0 > m.0 => Some(c),
        (Some(m), _) => Some(m),
        (None, c) => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIG: Signal = Signal::MemoryFull;

    #[test]
    fn grammar_table() {
        let ok: &[(&str, f64, u64)] = &[
            ("10%/2s", 0.10, 2_000),
            ("10%", 0.10, 2_000),
            ("2.5%/500ms", 0.025, 500),
            ("100%/10s", 1.0, 10_000),
            ("0.01%/4s", 0.0001, 4_000),
            ("50%/1.5s", 0.5, 1_500),
        ];
        for &(text, share, ms) in ok {
            match parse_stall("evictionPressureHard", SIG, text) {
                Ok(ThresholdValue::Stall { share: s, window }) => {
                    assert!((s - share).abs() < 1e-12, "{text}: {s}");
                    assert_eq!(window, Duration::from_millis(ms), "{text}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        let bad: &[(&str, &str)] = &[
            ("0%/2s", "out of range"),
            ("-5%/2s", "not a number"),
            ("101%/2s", "out of range"),
            ("10/2s", "not a percentage"),
            ("10%/2", "bad duration"),
            ("10%/100ms", "500ms..10s"),
            ("10%/11s", "500ms..10s"),
            ("10%/0s", "500ms..10s"),
            ("%/2s", "not a number"),
            (" 10%/2s", "not a number"),
            ("10%/2s ", "bad duration"),
            ("10Mi", "not a percentage"),
            ("nan%", "not a number"),
            ("1e1%", "not a number"),
            ("10%/1000000001ns", "microseconds"),
        ];
        for &(text, want) in bad {
            let e = parse_stall("evictionPressureHard", SIG, text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text}: {e}");
            // every error names the setting, the signal and the value
            assert!(e.contains("evictionPressureHard"), "{e}");
            assert!(e.contains("memory.full"), "{e}");
            assert!(e.contains(text), "{text}: {e}");
        }
        // only pressure signals take pressure values
        assert!(parse_stall("evictionPressureHard", Signal::MemoryAvailable, "10%").is_err());
    }

    #[test]
    fn display_round_trips() {
        for text in ["10%/2s", "2.5%/500ms", "100%/10s"] {
            let v = parse_stall("x", SIG, text).unwrap();
            assert_eq!(v.to_string(), text);
        }
        assert_eq!(parse_stall("x", SIG, "10%").unwrap().to_string(), "10%/2s");
    }

    #[test]
    fn stall_line_is_the_kernels() {
        // (share, window ms) -> µs, rounded up, at least 1
        let table: &[(f64, u64, u64)] = &[
            (0.10, 2_000, 200_000),
            (0.15, 1_000, 150_000),
            (1.0, 10_000, 10_000_000),
            (0.000_000_1, 500, 1),
            (1.0 / 3.0, 1_000, 333_334),
        ];
        for &(share, ms, us) in table {
            assert_eq!(stall_us(share, Duration::from_millis(ms)), us, "{share}");
            let v = ThresholdValue::Stall {
                share,
                window: Duration::from_millis(ms),
            };
            assert_eq!(v.resolve(ms as i64 * 1000), us as i64, "{share}");
        }
    }

    #[test]
    fn one_window_per_signal() {
        let v = |t: &str| parse_stall("x", SIG, t).unwrap();
        let hard = BTreeMap::from([(Signal::MemoryFull, v("20%/2s"))]);
        let soft = BTreeMap::from([
            (Signal::MemoryFull, v("5%/2s")),
            (Signal::MemorySome, v("40%/10s")),
        ]);
        let w = windows(&hard, &soft).unwrap();
        assert_eq!(w[&Signal::MemoryFull], Duration::from_secs(2));
        assert_eq!(w[&Signal::MemorySome], Duration::from_secs(10));
        let soft = BTreeMap::from([(Signal::MemoryFull, v("5%/10s"))]);
        let e = windows(&hard, &soft).unwrap_err().to_string();
        assert!(
            e.contains("evictionPressureSoft") && e.contains("differs"),
            "{e}"
        );
        assert!(e.contains("5%/10s"), "{e}");
    }

    #[test]
    fn stalling_set_table() {
        // (pod ppm, largest ppm, stalling?)
        let table: &[(Option<u32>, u32, bool)] = &[
            (None, 500_000, false),
            (Some(0), 0, false),
            (Some(999), 999, false), // noise
            (Some(1_000), 1_000, true),
            (Some(500_000), 500_000, true),
            (Some(125_000), 500_000, true), // exactly a quarter
            (Some(124_999), 500_000, false),
            (Some(20_000), 900_000, false),
        ];
        for &(p, max, want) in table {
            assert_eq!(is_stalling(p, max), want, "{p:?} of {max}");
        }
        assert_eq!(ppm_text(825_000), "82.5%");
        assert_eq!(ppm_text(1_000), "0.1%");
    }

    fn at(t0: std::time::Instant, ms: u64) -> std::time::Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn samples_prove_a_lower_bound_within_the_window() {
        let t0 = std::time::Instant::now();
        let mut s = StallSamples::new(Duration::from_secs(2));
        assert_eq!(s.in_window(t0), None);
        s.push(t0, 1_000);
        assert_eq!(s.in_window(t0), None, "one sample proves nothing");
        s.push(at(t0, 250), 51_000);
        s.push(at(t0, 500), 101_000);
        let got = s.in_window(at(t0, 500)).unwrap();
        assert_eq!((got.stall_us, got.since), (100_000, t0));
        s.push(at(t0, 2_250), 401_000);
        // (query ms, expected (stall µs, since ms))
        let table: &[(u64, Option<(u64, u64)>)] = &[
            // window [250, 2250]: from the 250 ms sample
            (2_250, Some((350_000, 250))),
            // window [2000, 4000]: only the 2250 sample inside
            (4_000, None),
        ];
        for &(q, want) in table {
            let got = s
                .in_window(at(t0, q))
                .map(|w| (w.stall_us, w.since.duration_since(t0).as_millis() as u64));
            assert_eq!(got, want, "at {q} ms");
        }
        // an older reading (another thread's) is inserted in order
        s.push(at(t0, 2_100), 380_000);
        assert_eq!(s.in_window(at(t0, 4_050)).map(|w| w.stall_us), Some(21_000));
        // a counter that went backwards starts over
        s.push(at(t0, 2_400), 5);
        assert_eq!(s.in_window(at(t0, 2_400)), None);
        // bounded
        let mut s = StallSamples::new(Duration::from_secs(10));
        for i in 0..1_000u64 {
            s.push(at(t0, i), i);
        }
        assert!(s.samples.len() <= MAX_SAMPLES);
    }

    #[test]
    fn observed_takes_the_larger_of_samples_and_a_recent_breach() {
        let t0 = std::time::Instant::now() + Duration::from_secs(10);
        let w = Duration::from_secs(2);
        let hold = Duration::from_secs(4);
        let m = |us: u64, since: u64| WindowStall {
            stall_us: us,
            since: at(t0, since),
        };
        let b = |ms: u64| Breach {
            at: at(t0, ms),
            line_us: 200_000,
        };
        // (measured, breach, now ms) -> (stall, window start ms relative, may be negative)
        type Row = (Option<WindowStall>, Option<Breach>, u64, Option<(u64, i64)>);
        let table: Vec<Row> = vec![
            (None, None, 0, None),
            (Some(m(50_000, 100)), None, 500, Some((50_000, 100))),
            (None, Some(b(1_000)), 1_500, Some((200_000, -1_000))),
            (
                Some(m(50_000, 100)),
                Some(b(1_000)),
                1_500,
                Some((200_000, -1_000)),
            ),
            (
                Some(m(300_000, 100)),
                Some(b(1_000)),
                1_500,
                Some((300_000, 100)),
            ),
            // the breach is older than the hold: the samples alone
            (
                Some(m(50_000, 3_000)),
                Some(b(1_000)),
                5_001,
                Some((50_000, 3_000)),
            ),
            (None, Some(b(1_000)), 5_001, None),
        ];
        for (i, (meas, br, now, want)) in table.into_iter().enumerate() {
            let got = observed(meas, br, at(t0, now), w, hold).map(|(us, start)| {
                let rel = if start >= t0 {
                    start.duration_since(t0).as_millis() as i64
                } else {
                    -(t0.duration_since(start).as_millis() as i64)
                };
                (us, rel)
            });
            assert_eq!(got, want, "row {i}");
        }
    }
}
