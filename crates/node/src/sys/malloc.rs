//! The C allocator's settings the daemon chooses for itself.
//!
//! glibc gives each thread that meets a locked arena a new one (up to
//! 8 x cores), and every arena keeps its own free memory: with qosd's six
//! threads that was ~1 MiB of resident memory at idle for nothing (the
//! daemon allocates little, and rarely from two threads at once). `qosd
//! run` therefore asks for one arena at start (bench/results/HISTORY.md section 7,
//! "RSS below 16 MiB"), unless the operator chose a number: the
//! `MALLOC_ARENA_MAX` variable or a `glibc.malloc.arena_max` tunable in
//! `GLIBC_TUNABLES` wins.

/// The number of malloc arenas `qosd run` asks for.
pub(crate) const ARENAS: i32 = 1;

/// Whether the operator set the arena count (then qosd leaves it alone):
/// `malloc_arena_max` is `MALLOC_ARENA_MAX`, `tunables` `GLIBC_TUNABLES`.
pub(crate) fn operator_chose_arenas(
    malloc_arena_max: Option<&str>,
    tunables: Option<&str>,
) -> bool {
    malloc_arena_max.is_some_and(|v| !v.trim().is_empty())
        || tunables.is_some_and(|t| {
            t.split(':')
                .any(|kv| kv.split('=').next() == Some("glibc.malloc.arena_max"))
        })
}

/// Limit glibc's malloc to `ARENAS` arenas, unless the operator chose a
/// number (see `operator_chose_arenas`). Call before threads start.
/// Returns the count set, or `None` when nothing was changed (the
/// operator's choice, or a C library without `mallopt`).
pub fn limit_arenas() -> Option<i32> {
    let env = |k| std::env::var(k).ok();
    if operator_chose_arenas(
        env("MALLOC_ARENA_MAX").as_deref(),
        env("GLIBC_TUNABLES").as_deref(),
    ) {
        return None;
    }
    set_arena_max(ARENAS)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_arena_max(n: i32) -> Option<i32> {
    // SAFETY: mallopt only changes the allocator's parameters; glibc takes
    // its own lock for it.
    let ok = unsafe { libc::mallopt(libc::M_ARENA_MAX, n) } == 1;
    ok.then_some(n)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_arena_max(_n: i32) -> Option<i32> {
    None
}

/// Hand the heap's free pages back to the kernel (glibc `malloc_trim(0)`:
/// every arena's whole free pages, not only the top of the heap). glibc
/// keeps what a pass freed for the next one, so after a burst of listings
/// the daemon kept the burst's peak resident (under pod churn each trim
/// hands back ~0.7 MB, bench/results/HISTORY.md section 7, "churn").
/// Returns whether any memory was released;
/// `false` without glibc.
pub fn release_free_memory() -> bool {
    trim()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() -> bool {
    // SAFETY: malloc_trim takes each arena's lock itself; it only returns
    // free pages (MADV_DONTNEED) and shrinks the top of the heap.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}

/// When to release free memory: after a pass that allocated a lot (a new
/// listing: decoded, planned, compared), at most once per `min_gap`, and
/// on the first later turn of the loop when the gap had not passed yet
/// (the end of a burst is trimmed too, at the latest at the next timer
/// reconcile).
#[derive(Debug)]
pub struct TrimPacer {
    min_gap: std::time::Duration,
    last: Option<std::time::Instant>,
    pending: bool,
}

impl TrimPacer {
    /// A pacer trimming at most once per `min_gap`.
    pub fn new(min_gap: std::time::Duration) -> Self {
        Self {
            min_gap,
            last: None,
            pending: false,
        }
    }

    /// A pass that allocated a lot ran.
    pub fn busy(&mut self) {
        self.pending = true;
    }

    /// Whether to trim now; if so, counted as done.
    pub fn due(&mut self, now: std::time::Instant) -> bool {
        let gap_passed = self
            .last
            .is_none_or(|l| now.saturating_duration_since(l) >= self.min_gap);
        if self.pending && gap_passed {
            self.pending = false;
            self.last = Some(now);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Busy passes trim at most once per gap; a burst's end is trimmed at
    /// the first turn after the gap; quiet turns never trim.
    #[test]
    fn trims_after_busy_passes_at_most_once_per_gap() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut p = TrimPacer::new(Duration::from_secs(2));
        assert!(!p.due(ms(0)), "nothing allocated yet");
        // (time ms, busy pass?, trim expected)
        for (at, busy, want) in [
            (10, true, true),
            (200, true, false),
            (400, true, false),
            (1_000, false, false),
            (2_010, false, true),
            (2_500, false, false),
            (12_000, false, false),
            (12_100, true, true),
            (12_200, true, false),
            (22_000, false, true),
            (32_000, false, false),
        ] {
            if busy {
                p.busy();
            }
            assert_eq!(p.due(ms(at)), want, "at {at} ms");
        }
    }

    /// The released pages leave the resident set: free most of 40 MiB of
    /// 1 KiB blocks, with every 16th kept so that nothing sits at the top
    /// of the heap, and trim.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn release_returns_free_pages_to_the_kernel() {
        fn rss_anon_kib() -> u64 {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            s.lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap()
        }
        let mut blocks: Vec<Vec<u8>> = (0..40_960).map(|i| vec![i as u8; 1024]).collect();
        let kept: Vec<Vec<u8>> = blocks.iter().step_by(16).cloned().collect();
        blocks.clear();
        blocks.shrink_to_fit();
        let before = rss_anon_kib();
        assert!(release_free_memory(), "nothing released");
        let after = rss_anon_kib();
        assert!(
            before.saturating_sub(after) >= 16 * 1024,
            "RssAnon {before} KiB -> {after} KiB"
        );
        assert_eq!(kept.len(), 2_560);
    }

    #[test]
    fn the_operators_arena_count_wins() {
        for (max, tun, chose) in [
            (None, None, false),
            (Some(""), None, false),
            (Some("2"), None, true),
            (None, Some("glibc.malloc.arena_max=4"), true),
            (
                None,
                Some("glibc.malloc.trim_threshold=65536:glibc.malloc.arena_max=2"),
                true,
            ),
            (None, Some("glibc.malloc.arena_test=2"), false),
            (None, Some("glibc.malloc.trim_threshold=65536"), false),
        ] {
            assert_eq!(operator_chose_arenas(max, tun), chose, "{max:?} {tun:?}");
        }
    }
}
