//! When an eviction's reaction starts, whichever source saw the crossing.
//!
//! The reaction (`qosd_eviction_reaction_seconds`, `/status`
//! `last_evictions[].reaction_ms`) runs from the earliest read that showed
//! the victim's threshold crossed to the kill being issued. That read is
//! made either by the fast watcher (its [`qosd_node::sys::watch::WatchEvent`],
//! handed to the next pass as a [`Detection`]) or by a pass's own signal
//! reads (the pass's observation time); the earlier of the two counts.
//!
//! What no source can show is the time between the real crossing and the
//! read that showed it. It is bounded by the gap since that source's
//! previous read ([`Detection::gap`]), reported beside the reaction.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use qosd_model::policy::evict::threshold::{Signal, ThresholdKind};

/// Which source made the read that first showed a crossing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DetectedBy {
    /// The fast memory watcher (kept-open fds, adaptive poll, v1 eventfd).
    Watcher,
    /// An eviction pass's own signal reads.
    Pass,
    /// The pressure watcher (a kernel trigger, or its own reading of the
    /// stall counter).
    Pressure,
}

impl DetectedBy {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DetectedBy::Watcher => "watcher",
            DetectedBy::Pass => "pass",
            DetectedBy::Pressure => "pressure",
        }
    }
}

/// A read that showed a threshold crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Detection {
    /// When the read was made.
    pub(crate) at: Instant,
    /// Time since the same source's previous read: the crossing happened at
    /// most this long before `at`, unseen (`None`: the source's first read).
    pub(crate) gap: Option<Duration>,
    pub(crate) by: DetectedBy,
}

/// Watcher detections not yet handed to a pass, the earliest per signal.
/// The watcher thread notes them; the pass loop takes them before a pass.
#[derive(Debug, Default)]
pub(crate) struct PendingDetections {
    inner: Mutex<BTreeMap<Signal, Detection>>,
}

impl PendingDetections {
    /// Keep `d` unless an earlier undelivered detection of `signal` exists.
    pub(crate) fn note(&self, signal: Signal, d: Detection) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.entry(signal)
            .and_modify(|old| {
                if d.at < old.at {
                    *old = d;
                }
            })
            .or_insert(d);
    }

    /// Everything noted since the last take.
    pub(crate) fn take(&self) -> BTreeMap<Signal, Detection> {
        std::mem::take(&mut *self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Since when each met threshold has been met, as the earliest read that
/// showed it (a pass's observation, or an earlier watcher detection of a
/// hard threshold's signal), while it stays met.
#[derive(Debug, Default)]
pub(crate) struct CrossingClock {
    met_since: BTreeMap<(Signal, ThresholdKind), Detection>,
    last_pass: Option<Instant>,
}

impl CrossingClock {
    /// One pass observed at `at` saw the thresholds `met` met; `detected`:
    /// the watcher detections handed to it. A threshold no longer met is
    /// forgotten (its next crossing starts anew).
    pub(crate) fn track(
        &mut self,
        at: Instant,
        met: impl IntoIterator<Item = (Signal, ThresholdKind)>,
        detected: &BTreeMap<Signal, Detection>,
    ) {
        let own = Detection {
            at,
            gap: self.last_pass.map(|p| at.saturating_duration_since(p)),
            by: DetectedBy::Pass,
        };
        let mut next = BTreeMap::new();
        for key in met {
            let mut since = self.met_since.get(&key).copied().unwrap_or(own);
            // The watcher watches the hard memory thresholds only.
            if key.1 == ThresholdKind::Hard {
                if let Some(d) = detected.get(&key.0) {
                    if d.at < since.at {
                        since = *d;
                    }
                }
            }
            next.insert(key, since);
        }
        self.met_since = next;
        self.last_pass = Some(at);
    }

    /// The read that first showed a met threshold (after [`Self::track`]).
    pub(crate) fn start_of(&self, signal: Signal, kind: ThresholdKind) -> Option<Detection> {
        self.met_since.get(&(signal, kind)).copied()
    }
}

/// One eviction's reaction: from `start` (the crossing's first read) to
/// the kill being issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reaction {
    pub(crate) duration: Duration,
    pub(crate) start: Detection,
}

impl Reaction {
    pub(crate) fn new(start: Detection, issued: Instant) -> Reaction {
        Reaction {
            duration: issued.saturating_duration_since(start.at),
            start,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEM: Signal = Signal::AllocatableMemoryAvailable;
    const HARD: ThresholdKind = ThresholdKind::Hard;
    const SOFT: ThresholdKind = ThresholdKind::Soft;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn watcher(at: Instant, gap_ms: u64) -> Detection {
        Detection {
            at,
            gap: Some(ms(gap_ms)),
            by: DetectedBy::Watcher,
        }
    }

    #[test]
    fn pending_keeps_the_earliest_until_taken() {
        let t0 = Instant::now();
        let p = PendingDetections::default();
        p.note(MEM, watcher(t0 + ms(5), 1));
        p.note(MEM, watcher(t0 + ms(3), 2)); // earlier: replaces
        p.note(MEM, watcher(t0 + ms(9), 1)); // later: ignored
        p.note(Signal::MemoryAvailable, watcher(t0 + ms(7), 4));
        let got = p.take();
        assert_eq!(got[&MEM], watcher(t0 + ms(3), 2));
        assert_eq!(got[&Signal::MemoryAvailable].at, t0 + ms(7));
        assert!(p.take().is_empty(), "taken once");
        p.note(MEM, watcher(t0 + ms(20), 1));
        assert_eq!(p.take()[&MEM].at, t0 + ms(20));
    }

    #[test]
    fn pass_alone_starts_at_its_observation_with_the_pass_gap() {
        let t0 = Instant::now();
        let mut c = CrossingClock::default();
        let none = BTreeMap::new();
        c.track(t0, [], &none);
        assert_eq!(c.start_of(MEM, HARD), None);
        // the next pass, 1 s later, sees it met: start there, gap 1 s
        c.track(t0 + ms(1000), [(MEM, HARD)], &none);
        let s = c.start_of(MEM, HARD).unwrap();
        assert_eq!(
            s,
            Detection {
                at: t0 + ms(1000),
                gap: Some(ms(1000)),
                by: DetectedBy::Pass
            }
        );
        // still met: the start stays
        c.track(t0 + ms(2000), [(MEM, HARD)], &none);
        assert_eq!(c.start_of(MEM, HARD), Some(s));
        // no longer met, then met again: a new start
        c.track(t0 + ms(3000), [], &none);
        assert_eq!(c.start_of(MEM, HARD), None);
        c.track(t0 + ms(3500), [(MEM, HARD)], &none);
        assert_eq!(c.start_of(MEM, HARD).unwrap().at, t0 + ms(3500));
        assert_eq!(c.start_of(MEM, HARD).unwrap().gap, Some(ms(500)));
    }

    #[test]
    fn watcher_detection_before_the_pass_wins() {
        let t0 = Instant::now();
        let mut c = CrossingClock::default();
        c.track(t0, [], &BTreeMap::new());
        // the watcher read at +400 ms, the woken pass observed at +403 ms
        let det = watcher(t0 + ms(400), 1);
        c.track(
            t0 + ms(403),
            [(MEM, HARD), (MEM, SOFT)],
            &[(MEM, det)].into(),
        );
        assert_eq!(c.start_of(MEM, HARD), Some(det));
        // a soft threshold of the same signal is not the watcher's line
        assert_eq!(c.start_of(MEM, SOFT).unwrap().by, DetectedBy::Pass);
        assert_eq!(c.start_of(MEM, SOFT).unwrap().at, t0 + ms(403));
        let r = Reaction::new(det, t0 + ms(405));
        assert_eq!(r.duration, ms(5));
        assert_eq!(r.start.by, DetectedBy::Watcher);
    }

    #[test]
    fn a_later_or_unmet_detection_does_not_move_the_start() {
        let t0 = Instant::now();
        let mut c = CrossingClock::default();
        // the pass saw it first (its period came before the watcher's read)
        c.track(
            t0 + ms(10),
            [(MEM, HARD)],
            &[(MEM, watcher(t0 + ms(12), 1))].into(),
        );
        assert_eq!(c.start_of(MEM, HARD).unwrap().by, DetectedBy::Pass);
        // a read made before the pass but handed over one pass late still wins
        c.track(
            t0 + ms(20),
            [(MEM, HARD)],
            &[(MEM, watcher(t0 + ms(9), 2))].into(),
        );
        assert_eq!(c.start_of(MEM, HARD), Some(watcher(t0 + ms(9), 2)));
        // a detection the pass did not confirm (not met) is dropped
        c.track(t0 + ms(30), [], &[(MEM, watcher(t0 + ms(29), 1))].into());
        c.track(t0 + ms(40), [(MEM, HARD)], &BTreeMap::new());
        assert_eq!(c.start_of(MEM, HARD).unwrap().at, t0 + ms(40));
    }

    #[test]
    fn reaction_never_negative() {
        let t0 = Instant::now();
        let r = Reaction::new(watcher(t0 + ms(5), 1), t0);
        assert_eq!(r.duration, Duration::ZERO);
    }
}
