//! The one way qosd kills a cgroup's processes and walks its pids: v2
//! `cgroup.kill` where the kernel has it, otherwise SIGKILL to every pid of
//! the cgroup and its descendants, repeated until the tree is empty (forks
//! in flight are caught by the next round). Never pid 0 or 1, whatever a
//! corrupt `cgroup.procs` says: a listing with pid 0, 1 or a pid above the
//! kernel's maximum is refused ([`KillError::RefusedPid`]) before anything
//! is signalled. The cgroup and its descendants are reached by the one
//! walk ([`crate::sys::cgroup_dir`]): no symlink is followed and no
//! directory on another filesystem is entered.

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal as UnixSignal};
use nix::unistd::Pid;

use crate::sys::cgroup_dir::{CgroupDir, WalkError};

/// The largest pid the kernel can hand out (`PID_MAX_LIMIT` on 64-bit:
/// `/proc/sys/kernel/pid_max` is at most 2^22).
pub(crate) const PID_MAX_LIMIT: i64 = 1 << 22;

/// Why a kill failed.
#[derive(Debug, thiserror::Error)]
pub enum KillError {
    /// Reading the processes or signalling them failed.
    #[error("cannot kill processes of {path}: {source}")]
    Io {
        /// The cgroup directory or file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The walk to the cgroup or one of its descendants was refused (a
    /// symlink, not a directory, another filesystem) or failed.
    #[error("refusing to kill processes of {path}: {source}")]
    Walk {
        /// The cgroup directory.
        path: PathBuf,
        /// Why the walk refused or failed.
        source: WalkError,
    },
    /// `cgroup.procs` lists a pid that is never a pod's process: 0, 1, or
    /// above the kernel's maximum (a corrupt or planted file).
    #[error("refusing to signal pid {pid} listed in {path}: not a pod process (0, 1 or above {max})", max = PID_MAX_LIMIT)]
    RefusedPid {
        /// The `cgroup.procs` file.
        path: PathBuf,
        /// The pid listed.
        pid: i64,
    },
    /// Processes were left after every SIGKILL round.
    #[error("{path}: still {left} process(es) after {rounds} SIGKILL rounds in {elapsed:?}")]
    NotEmpty {
        /// The cgroup directory.
        path: PathBuf,
        /// Processes left.
        left: usize,
        /// SIGKILL rounds made.
        rounds: u32,
        /// Time spent.
        elapsed: Duration,
    },
}

/// How the processes were killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillMethod {
    /// v2 `cgroup.kill`.
    CgroupKill,
    /// SIGKILL per pid, repeated until empty.
    Sigkill,
    /// SIGTERM, then SIGKILL after the grace period (background).
    TermThenKill,
}

/// Result of killing a cgroup tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillReport {
    /// How they were killed.
    pub method: KillMethod,
    /// Distinct pids signalled.
    pub signalled: usize,
    /// Kill rounds made (1 for `cgroup.kill` and SIGTERM-then-SIGKILL).
    pub rounds: u32,
    /// When the first kill was issued.
    pub issued_at: Instant,
    /// When the tree was seen empty (not for `cgroup.kill`, which does not wait).
    pub empty_at: Option<Instant>,
}

/// Walk to a pod cgroup `dir`. The walk starts at the parent of its
/// topmost `kubepods*` component (or at `dir`'s parent when it is not below
/// one), so neither `dir` nor any ancestor up to the kubepods cgroup may be
/// a symlink or on another filesystem: a planted link would make qosd kill
/// processes of another cgroup.
fn open_tree(dir: &Path) -> Result<CgroupDir, KillError> {
    let mut root = dir.parent().unwrap_or(dir).to_path_buf();
    let mut acc = PathBuf::new();
    for c in dir.components() {
        if let Component::Normal(n) = c {
            if n.to_str().is_some_and(|n| n.starts_with("kubepods")) {
                root = acc.clone();
                break;
            }
        }
        acc.push(c);
    }
    CgroupDir::open(&root, dir).map_err(|e| match e {
        WalkError::Missing { .. } => KillError::Io {
            path: dir.join("cgroup.procs"),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        },
        source => KillError::Walk {
            path: dir.to_path_buf(),
            source,
        },
    })
}

/// A pid from `cgroup.procs` that may be signalled: not 0 or 1, not above
/// the kernel's maximum; else [`KillError::RefusedPid`] (pure).
pub(crate) fn checked_pid(path: &Path, raw: &str) -> Result<i32, KillError> {
    let refused = |pid| KillError::RefusedPid {
        path: path.to_path_buf(),
        pid,
    };
    let pid: i64 = raw.parse().map_err(|_| refused(-1))?;
    if pid <= 1 || pid > PID_MAX_LIMIT {
        return Err(refused(pid));
    }
    Ok(pid as i32)
}

/// Every pid in a cgroup directory and its descendants, reached by the walk
/// (see `open_tree`); a pid that is never a pod's process refuses the
/// whole listing (`checked_pid`).
pub fn cgroup_tree_pids(dir: &Path) -> Result<Vec<i32>, KillError> {
    let top = open_tree(dir)?;
    let mut pids = Vec::new();
    let mut stack = vec![(top, true)];
    while let Some((d, is_top)) = stack.pop() {
        let procs = d.path().join("cgroup.procs");
        match d.read("cgroup.procs") {
            Ok(s) => {
                for l in s.split_whitespace() {
                    pids.push(checked_pid(&procs, l)?);
                }
            }
            // a child removed under us
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !is_top => continue,
            Err(source) => {
                return Err(KillError::Io {
                    path: procs,
                    source,
                })
            }
        }
        let children = d.children().map_err(|source| KillError::Walk {
            path: dir.to_path_buf(),
            source,
        })?;
        stack.extend(children.into_iter().map(|c| (c, false)));
    }
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// Kill every process of a cgroup tree: v2 `cgroup.kill` when present,
/// else SIGKILL rounds until the tree is empty or `timeout` passes.
pub fn kill_cgroup_tree(dir: &Path, timeout: Duration) -> Result<KillReport, KillError> {
    let top = open_tree(dir)?;
    let ck = dir.join("cgroup.kill");
    let has_kill = top
        .entries()
        .is_ok_and(|es| es.iter().any(|(n, _, file)| *file && n == "cgroup.kill"));
    if has_kill {
        let issued_at = Instant::now();
        match top.write("cgroup.kill", "1") {
            Ok(()) => {
                return Ok(KillReport {
                    method: KillMethod::CgroupKill,
                    signalled: 0,
                    rounds: 1,
                    issued_at,
                    empty_at: None,
                })
            }
            Err(e) => {
                tracing::debug!(path = %ck.display(), error = %e, "cgroup.kill failed; falling back to SIGKILL");
            }
        }
    }
    sigkill_tree(dir, timeout)
}

/// SIGKILL every pid of the tree, round after round, until it is empty or
/// `timeout` passes (v1, or v2 without `cgroup.kill`).
pub fn sigkill_tree(dir: &Path, timeout: Duration) -> Result<KillReport, KillError> {
    sigkill_rounds(dir, timeout, KillMethod::Sigkill, None)
}

fn sigkill_rounds(
    dir: &Path,
    timeout: Duration,
    method: KillMethod,
    issued: Option<Instant>,
) -> Result<KillReport, KillError> {
    let start = Instant::now();
    let mut issued_at = issued;
    let mut seen = std::collections::BTreeSet::new();
    let mut rounds = 0u32;
    loop {
        let pids = cgroup_tree_pids(dir)?;
        if pids.is_empty() {
            return Ok(KillReport {
                method,
                signalled: seen.len(),
                rounds,
                issued_at: issued_at.unwrap_or(start),
                empty_at: Some(Instant::now()),
            });
        }
        if start.elapsed() >= timeout {
            return Err(KillError::NotEmpty {
                path: dir.to_path_buf(),
                left: pids.len(),
                rounds,
                elapsed: start.elapsed(),
            });
        }
        rounds += 1;
        if issued_at.is_none() {
            issued_at = Some(Instant::now());
        }
        for p in pids {
            // pids were checked by cgroup_tree_pids: never 0/1/above max
            let _ = kill(Pid::from_raw(p), UnixSignal::SIGKILL);
            seen.insert(p);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// SIGTERM every process now, SIGKILL rounds after `grace` (on a
/// background thread). Returns once the SIGTERMs are sent.
pub(crate) fn term_then_kill(
    dir: &Path,
    grace: Duration,
    timeout: Duration,
) -> Result<KillReport, KillError> {
    let issued_at = Instant::now();
    let pids = cgroup_tree_pids(dir)?;
    for &p in &pids {
        let _ = kill(Pid::from_raw(p), UnixSignal::SIGTERM);
    }
    let d = dir.to_path_buf();
    std::thread::spawn(move || {
        std::thread::sleep(grace);
        if let Err(e) = sigkill_rounds(&d, timeout, KillMethod::Sigkill, None) {
            tracing::error!(target: "qosd::eviction", error = %e, "SIGKILL after grace failed");
        }
    });
    Ok(KillReport {
        method: KillMethod::TermThenKill,
        signalled: pids.len(),
        rounds: 1,
        issued_at,
        empty_at: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlinked_pod_cgroup_is_never_killed() {
        let t = tempfile::tempdir().unwrap();
        let kp = t.path().join("kubepods");
        std::fs::create_dir_all(kp.join("burstable")).unwrap();
        // Another cgroup, with a process of this test in it.
        let other = t.path().join("system.slice");
        std::fs::create_dir(&other).unwrap();
        let mut victim = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        std::fs::write(other.join("cgroup.procs"), victim.id().to_string()).unwrap();
        std::os::unix::fs::symlink(&other, kp.join("burstable/podx")).unwrap();
        std::os::unix::fs::symlink(&other, kp.join("besteffort")).unwrap();
        for dir in [kp.join("burstable/podx"), kp.join("besteffort/pody")] {
            let e = cgroup_tree_pids(&dir).unwrap_err();
            assert!(
                matches!(
                    e,
                    KillError::Walk {
                        source: WalkError::Symlink { .. },
                        ..
                    }
                ),
                "{e}"
            );
            let e = kill_cgroup_tree(&dir, Duration::from_millis(10)).unwrap_err();
            assert!(e.to_string().contains("symlink"), "{e}");
            let e = term_then_kill(&dir, Duration::ZERO, Duration::from_millis(10)).unwrap_err();
            assert!(
                matches!(
                    e,
                    KillError::Walk {
                        source: WalkError::Symlink { .. },
                        ..
                    }
                ),
                "{e}"
            );
        }
        // A real pod cgroup below is read as before.
        let real = kp.join("burstable/podr");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("cgroup.procs"), "").unwrap();
        assert_eq!(cgroup_tree_pids(&real).unwrap(), Vec::<i32>::new());
        assert!(
            victim.try_wait().unwrap().is_none(),
            "the other cgroup's process lives"
        );
        victim.kill().unwrap();
        victim.wait().unwrap();
    }

    #[test]
    fn tree_pids_from_fake_dirs() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        // 3, 5, 7 are only listed here, never signalled
        std::fs::write(d.path().join("cgroup.procs"), "5\n3\n").unwrap();
        std::fs::write(d.path().join("a/cgroup.procs"), "").unwrap();
        std::fs::write(d.path().join("a/b/cgroup.procs"), "7\n3\n").unwrap();
        assert_eq!(cgroup_tree_pids(d.path()).unwrap(), vec![3, 5, 7]);
        for bad in ["0", "1", "4194305", "-4", "x"] {
            std::fs::write(d.path().join("a/cgroup.procs"), bad).unwrap();
            let e = cgroup_tree_pids(d.path()).unwrap_err();
            assert!(matches!(e, KillError::RefusedPid { .. }), "{bad}: {e}");
            assert!(e.to_string().contains("a/cgroup.procs"), "{e}");
            let e = kill_cgroup_tree(d.path(), Duration::from_millis(10)).unwrap_err();
            assert!(matches!(e, KillError::RefusedPid { .. }), "{bad}: {e}");
        }
        assert_eq!(checked_pid(d.path(), "4194304").unwrap(), 4_194_304);
        let e = cgroup_tree_pids(&d.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing/cgroup.procs"), "{e}");
    }

    /// Kill rounds against a fake cgroup dir listing children we spawned:
    /// they die; the fake file never empties, so the rounds time out.
    #[test]
    fn sigkill_rounds_kill_own_children() {
        let mut kids: Vec<std::process::Child> = (0..2)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .unwrap()
            })
            .collect();
        let d = tempfile::tempdir().unwrap();
        let list: String = kids.iter().map(|k| format!("{}\n", k.id())).collect();
        std::fs::write(d.path().join("cgroup.procs"), list).unwrap();
        let err = kill_cgroup_tree(d.path(), Duration::from_millis(30)).unwrap_err();
        assert!(matches!(err, KillError::NotEmpty { left: 2, .. }), "{err}");
        for k in &mut kids {
            let st = k.wait().unwrap();
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(st.signal(), Some(9));
        }
        // an empty tree is done at once
        std::fs::write(d.path().join("cgroup.procs"), "").unwrap();
        let r = kill_cgroup_tree(d.path(), Duration::from_millis(30)).unwrap();
        assert_eq!((r.rounds, r.signalled), (0, 0));
        assert!(r.empty_at.is_some());
    }

    #[test]
    fn v2_uses_cgroup_kill() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.kill"), "").unwrap();
        std::fs::write(d.path().join("cgroup.procs"), "").unwrap();
        let r = kill_cgroup_tree(d.path(), Duration::from_millis(30)).unwrap();
        assert_eq!(r.method, KillMethod::CgroupKill);
        assert_eq!(
            std::fs::read_to_string(d.path().join("cgroup.kill")).unwrap(),
            "1"
        );
    }
}
