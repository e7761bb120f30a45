//! The one retry backoff: doubling from a first delay, capped (the CRI
//! client's retries, the runtime event stream, the Kubernetes API watch,
//! the eviction clean-up, the hook poll).

use std::time::Duration;

/// A doubling backoff between `first` and `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub first: Duration,
    /// The cap.
    pub(crate) max: Duration,
}

impl Backoff {
    /// A backoff from `first` doubling up to `max`.
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { first, max }
    }

    /// The delay after `failures` consecutive failures (1-based: `delay(1)`
    /// is `first`; `delay(0)` too). Never overflows.
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.first
            .checked_mul(factor)
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// The delay after `previous`: twice it, capped (never below `first`).
    pub fn next(&self, previous: Duration) -> Duration {
        previous
            .checked_mul(2)
            .unwrap_or(self.max)
            .clamp(self.first.min(self.max), self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_the_first_and_caps() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let got: Vec<u128> = (0..7).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(got, [100, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));
        assert_eq!(
            b.next(Duration::from_millis(300)),
            Duration::from_millis(600)
        );
        assert_eq!(b.next(Duration::from_millis(900)), Duration::from_secs(1));
        assert_eq!(b.next(Duration::MAX), Duration::from_secs(1));
        assert_eq!(b.next(Duration::ZERO), Duration::from_millis(100));
    }
}
