//! File descriptors: qosd raises its soft `RLIMIT_NOFILE` to the hard
//! limit at start and keeps [`FD_RESERVE`] descriptors out of reach of the
//! HTTP server, so a flood of clients can never starve cgroup writes,
//! signal reads, the runtime connection or an eviction of descriptors.

/// Descriptors kept for everything but HTTP clients (cgroup files kept
/// open by the watcher, one-shot cgroup and /proc reads, the CRI socket,
/// the pid walk of an eviction, the journal).
pub const FD_RESERVE: u64 = 256;

/// The limit after [`raise_nofile`]: (soft, hard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    /// The soft limit now.
    pub soft: u64,
    pub(crate) hard: u64,
    /// The soft limit before it was raised.
    pub was: u64,
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (what the unit's
/// `LimitNOFILE=` or the container runtime grants). A failure leaves the
/// limit as it was and is reported.
pub fn raise_nofile() -> Result<NofileLimit, std::io::Error> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(std::io::Error::from)?;
    }
    let (now, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    Ok(NofileLimit {
        soft: now,
        hard,
        was: soft,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn raises_soft_to_hard() {
        let l = super::raise_nofile().unwrap();
        assert_eq!(l.soft, l.hard);
        assert!(l.soft >= l.was);
    }
}
