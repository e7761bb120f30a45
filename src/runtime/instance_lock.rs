//! One qosd per cgroup root: `qosd run` (enforce or audit, daemon or
//! `--once`) takes an exclusive `flock` on a lock file named after the
//! cgroup filesystem and `cgroupRoot` before its first write, and writes its
//! PID into it. A second qosd for the same root finds the lock held and
//! exits with code 1 naming the holder's PID; the lock goes with the
//! process (the kernel drops it on exit, even on SIGKILL). `--dry-run`
//! writes nothing and takes no lock.
//!
//! The lock directory is `/run/qosd` (created 0700), or `QOSD_LOCK_DIR`
//! when set (tests, or hosts where `/run` is not writable).

use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The default lock directory.
pub(crate) const LOCK_DIR: &str = "/run/qosd";
/// Overrides [`LOCK_DIR`].
pub(crate) const LOCK_DIR_ENV: &str = "QOSD_LOCK_DIR";

/// A held lock: released when dropped (or when the process ends).
#[derive(Debug)]
pub(crate) struct InstanceLock {
    _file: std::fs::File,
    pub(crate) path: PathBuf,
}

/// The lock directory: `QOSD_LOCK_DIR` when set, else [`LOCK_DIR`].
pub(crate) fn lock_dir() -> PathBuf {
    std::env::var_os(LOCK_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(LOCK_DIR), PathBuf::from)
}

/// The lock file's name for a cgroup filesystem and cgroup root: both
/// paths, every character but ASCII letters, digits, `-` and `.` as `_`.
pub(crate) fn lock_name(cgroupfs: &Path, cgroup_root: &str) -> String {
    let joined = format!(
        "{}/{}",
        cgroupfs.display(),
        cgroup_root.trim_start_matches('/')
    );
    let mut s: String = joined
        .trim_end_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    s.push_str(".lock");
    s
}

/// Take the lock for `cgroupfs` + `cgroup_root` in `dir` without waiting.
pub(crate) fn acquire(
    dir: &Path,
    cgroupfs: &Path,
    cgroup_root: &str,
) -> anyhow::Result<InstanceLock> {
    use anyhow::Context as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create the lock directory {}", dir.display()))?;
    let path = dir.join(lock_name(cgroupfs, cgroup_root));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()));
        }
        let mut text = String::new();
        let _ = (&f).take(64).read_to_string(&mut text);
        let holder = match text.trim().parse::<u32>() {
            Ok(pid) => format!("PID {pid}"),
            Err(_) => "PID unknown".to_string(),
        };
        anyhow::bail!(
            "another qosd ({holder}) manages cgroup root {:?} under {} (lock {} held); stop it first: two would fight over the same cgroup files",
            cgroup_root,
            cgroupfs.display(),
            path.display()
        );
    }
    f.set_len(0)
        .and_then(|()| f.rewind())
        .and_then(|()| writeln!(f, "{}", std::process::id()))
        .and_then(|()| f.flush())
        .with_context(|| format!("cannot write the PID into {}", path.display()))?;
    Ok(InstanceLock { _file: f, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_and_distinct_per_root() {
        let a = lock_name(Path::new("/sys/fs/cgroup"), "/");
        let b = lock_name(Path::new("/sys/fs/cgroup"), "/qosd-test-1");
        assert_eq!(a, "_sys_fs_cgroup.lock");
        assert_eq!(b, "_sys_fs_cgroup_qosd-test-1.lock");
        assert!(!lock_name(Path::new("/x/../y"), "a/b c").contains('/'));
    }

    #[test]
    fn a_second_lock_on_the_same_root_is_refused_naming_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("run");
        let held = acquire(&dir, Path::new("/cg"), "/r").unwrap();
        let text = std::fs::read_to_string(&held.path).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
        // flock locks belong to the open file description: a second open in
        // the same process conflicts like a second process would.
        let e = acquire(&dir, Path::new("/cg"), "/r")
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("PID {}", std::process::id())), "{e}");
        // Another root is independent; the lock goes with its holder.
        let other = acquire(&dir, Path::new("/cg"), "/s").unwrap();
        drop(held);
        drop(other);
        acquire(&dir, Path::new("/cg"), "/r").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }
}
