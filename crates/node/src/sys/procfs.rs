//! /proc: the machine's capacity (`meminfo`, `cpuinfo`, the affinity mask)
//! and the one `/proc/meminfo` parser every reader uses. The proc root is a
//! parameter, so tests use fixture files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A /proc file that cannot be read or understood.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file did not hold what was expected.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
}

/// Parse /proc/meminfo text into name → bytes (`kB` values × 1024).
pub fn parse_meminfo(text: &str) -> BTreeMap<String, i64> {
    meminfo_lines(text)
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// One `/proc/meminfo` field in bytes (`kB` values scaled), without
/// building the whole map: the eviction pass reads two fields a pass.
pub(crate) fn meminfo_value(text: &str, key: &str) -> Option<i64> {
    meminfo_lines(text).find_map(|(k, v)| (k == key).then_some(v))
}

/// `(name, bytes)` of each well-formed `/proc/meminfo` line.
fn meminfo_lines(text: &str) -> impl Iterator<Item = (&str, i64)> {
    text.lines().filter_map(|line| {
        let (k, rest) = line.split_once(':')?;
        let mut it = rest.split_whitespace();
        let v = it.next()?.parse::<i64>().ok()?;
        let mult = match it.next() {
            Some("kB") => 1024,
            _ => 1,
        };
        Some((k.trim(), v.saturating_mul(mult)))
    })
}

#[cfg(test)]
/// Capacity of the machine as seen under `proc_root` (normally `/proc`):
/// (millicores, bytes).
pub(crate) fn detect_capacity(proc_root: &Path) -> Result<(i64, i64), ProcError> {
    Ok((
        detect_cpu_millis(proc_root)?,
        detect_memory_bytes(proc_root)?,
    ))
}

/// `MemTotal` of `<proc>/meminfo`, in bytes.
pub fn detect_memory_bytes(proc_root: &Path) -> Result<i64, ProcError> {
    meminfo_total(&proc_root.join("meminfo"))
}

/// `MemTotal` of a meminfo file, in bytes.
pub fn meminfo_total(path: &Path) -> Result<i64, ProcError> {
    let m = parse_meminfo(&read(path)?);
    m.get("MemTotal")
        .copied()
        .filter(|&v| v > 0)
        .ok_or_else(|| ProcError::Parse {
            path: path.to_path_buf(),
            message: "no MemTotal line".to_string(),
        })
}

/// Number of CPUs × 1000: the sched affinity mask of this process when
/// `proc_root` is the real `/proc`, else the `processor` lines of
/// `<proc>/cpuinfo`.
pub fn detect_cpu_millis(proc_root: &Path) -> Result<i64, ProcError> {
    if proc_root == Path::new("/proc") {
        if let Some(n) = affinity_cpus() {
            return Ok(n * 1000);
        }
    }
    let path = proc_root.join("cpuinfo");
    let text = read(&path)?;
    let n = count_cpuinfo_processors(&text);
    if n == 0 {
        return Err(ProcError::Parse {
            path,
            message: "no \"processor\" lines".to_string(),
        });
    }
    Ok(n as i64 * 1000)
}

/// CPUs in this process's sched affinity mask.
fn affinity_cpus() -> Option<i64> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills at most its size.
    let n = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        libc::CPU_COUNT(&set)
    };
    (n > 0).then_some(i64::from(n))
}

fn read(path: &Path) -> Result<String, ProcError> {
    std::fs::read_to_string(path).map_err(|source| ProcError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Count `processor : N` lines.
pub fn count_cpuinfo_processors(text: &str) -> usize {
    text.lines()
        .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_from_fake_proc() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("meminfo"),
            "MemTotal:       16318724 kB\nMemFree:         1000 kB\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("cpuinfo"),
            "processor\t: 0\nmodel name\t: x\n\nprocessor\t: 1\n\nprocessor\t: 2\n",
        )
        .unwrap();
        assert_eq!(detect_capacity(d.path()).unwrap(), (3000, 16318724 * 1024));
        let e = detect_capacity(&d.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope"), "{e}");
        std::fs::write(d.path().join("meminfo"), "MemFree: 1 kB\n").unwrap();
        assert!(detect_memory_bytes(d.path()).is_err());
    }

    /// One field agrees with the whole map, for every line of a real
    /// `/proc/meminfo`; a missing or malformed line is `None`.
    #[test]
    fn one_field_matches_the_map() {
        let text = std::fs::read_to_string("/proc/meminfo").unwrap();
        let all = parse_meminfo(&text);
        assert!(all.len() > 10);
        for (k, v) in &all {
            assert_eq!(meminfo_value(&text, k), Some(*v), "{k}");
        }
        for (text, key, want) in [
            ("MemTotal:  10 kB\n", "MemTotal", Some(10240)),
            ("HugePages_Total:   3\n", "HugePages_Total", Some(3)),
            ("MemTotal:  x kB\nMemTotal: 2 kB\n", "MemTotal", Some(2048)),
            ("MemTotal 10 kB\n", "MemTotal", None),
            ("MemTotalX:  10 kB\n", "MemTotal", None),
            ("", "MemAvailable", None),
        ] {
            assert_eq!(meminfo_value(text, key), want, "{text:?}");
        }
    }

    #[test]
    fn detect_real_machine() {
        let (cpu, mem) = detect_capacity(Path::new("/proc")).unwrap();
        assert!(cpu >= 1000 && mem > 0);
    }
}
