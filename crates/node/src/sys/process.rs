//! This process's resource usage from `/proc/self` (the `process_*`
//! metrics): CPU time, memory, start time, file descriptors.

use std::path::{Path, PathBuf};

/// What the `process_*` metrics report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// User + system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size, in bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: u64,
    /// Start time, in seconds since the epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors.
    pub max_fds: u64,
}

/// Why the process's stats could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// A /proc file or directory could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A /proc file did not hold what was expected.
    #[error("{path}: unexpected format")]
    Format {
        /// The file.
        path: PathBuf,
    },
}

fn read(path: PathBuf) -> Result<(String, PathBuf), ProcessError> {
    std::fs::read_to_string(&path)
        .map(|t| (t, path.clone()))
        .map_err(|source| ProcessError::Io { path, source })
}

/// Parse `/proc/<pid>/stat` after the command name: (utime, stime,
/// starttime in ticks, vsize bytes, rss pages).
pub(crate) fn parse_stat(text: &str) -> Option<(u64, u64, u64, u64, u64)> {
    // The command may contain spaces and parentheses: split after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14 → index 11.
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some((n(11)?, n(12)?, n(19)?, n(20)?, n(21)?))
}

/// `Max open files` soft limit from `/proc/<pid>/limits`.
pub(crate) fn parse_max_fds(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
}

/// `btime` (boot time, seconds since the epoch) from `/proc/stat`.
pub(crate) fn parse_btime(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Read the stats of the process whose proc directory is `proc_self`
/// (`/proc/self`); boot time from `<proc_self>/../stat`.
pub fn stats(proc_self: &Path) -> Result<ProcessStats, ProcessError> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let page = crate::sys::page_size();
    let (stat, path) = read(proc_self.join("stat"))?;
    let (utime, stime, start, vsize, rss) =
        parse_stat(&stat).ok_or(ProcessError::Format { path })?;
    let proc_root = proc_self.parent().unwrap_or(Path::new("/proc"));
    let (sys_stat, path) = read(proc_root.join("stat"))?;
    let btime = parse_btime(&sys_stat).ok_or(ProcessError::Format { path })?;
    let (limits, path) = read(proc_self.join("limits"))?;
    let max_fds = parse_max_fds(&limits).ok_or(ProcessError::Format { path })?;
    let fd_dir = proc_self.join("fd");
    let open_fds = std::fs::read_dir(&fd_dir)
        .map_err(|source| ProcessError::Io {
            path: fd_dir,
            source,
        })?
        .count() as u64;
    Ok(ProcessStats {
        cpu_seconds: (utime + stime) as f64 / ticks,
        resident_bytes: rss * page,
        virtual_bytes: vsize,
        start_time_seconds: btime as f64 + start as f64 / ticks,
        open_fds,
        max_fds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "1234 (qosd (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 5000 123456789 2048 18446744073709551615 0";
        assert_eq!(parse_stat(stat), Some((250, 50, 5000, 123456789, 2048)));
        assert_eq!(parse_stat("garbage"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        assert_eq!(
            parse_btime("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn reads_this_process() {
        let s = stats(Path::new("/proc/self")).unwrap();
        assert!(s.resident_bytes > 0 && s.open_fds > 0 && s.max_fds > 0);
        assert!(s.start_time_seconds > 1.6e9, "{s:?}");
    }
}
