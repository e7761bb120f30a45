//! The calling thread's resource usage (`getrusage(RUSAGE_THREAD)`): CPU
//! time, context switches and page faults, to tell a phase that computed
//! from one that waited (for a lock, the disk, a core or memory reclaim).

use std::time::Duration;

/// One reading of the calling thread's usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadUsage {
    /// User + system CPU time.
    pub cpu: Duration,
    /// Voluntary context switches (the thread blocked: a lock, I/O, a sleep).
    pub voluntary_switches: u64,
    /// Involuntary ones (preempted: another task took the core).
    pub involuntary_switches: u64,
    /// Page faults served without I/O.
    pub minor_faults: u64,
    /// Page faults that needed I/O.
    pub major_faults: u64,
}

impl ThreadUsage {
    /// The calling thread's usage now (`None` if the kernel refuses).
    pub fn now() -> Option<ThreadUsage> {
        // SAFETY: getrusage fills the struct we own; all-zero is a valid rusage.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to a rusage for the calling thread.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
            return None;
        }
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        Some(ThreadUsage {
            cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
            voluntary_switches: ru.ru_nvcsw.max(0) as u64,
            involuntary_switches: ru.ru_nivcsw.max(0) as u64,
            minor_faults: ru.ru_minflt.max(0) as u64,
            major_faults: ru.ru_majflt.max(0) as u64,
        })
    }

    /// What was used since `earlier` (a reading of the same thread).
    pub fn since(&self, earlier: &ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            cpu: self.cpu.saturating_sub(earlier.cpu),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
            major_faults: self.major_faults.saturating_sub(earlier.major_faults),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_thread_usage_grows_with_work() {
        let a = ThreadUsage::now().expect("getrusage(RUSAGE_THREAD)");
        // ~64 MiB touched: page faults and CPU time on this thread
        let v = vec![1u8; 64 << 20];
        let sum: u64 = v.iter().step_by(4096).map(|&b| u64::from(b)).sum();
        assert_eq!(sum, (64 << 20) / 4096);
        let b = ThreadUsage::now().unwrap();
        let d = b.since(&a);
        assert!(d.minor_faults > 0, "{d:?}");
        assert!(d.cpu > Duration::ZERO, "{d:?}");
        // a later reading never goes back
        assert_eq!(a.since(&b), ThreadUsage::default());
    }
}
