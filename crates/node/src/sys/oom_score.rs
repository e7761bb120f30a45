//! Reading and setting a container process's `oom_score_adj`
//! (`/proc/<pid>/oom_score_adj`), the other half of the kubelet's QoS
//! policy (docs/semantics.md, "oom_score_adj").
//!
//! Every process is hostile input: it may exit between the listing of its
//! cgroup and the write, its pid may be reused, and it may have moved to
//! another cgroup. So each process is handled through one open
//! `/proc/<pid>` directory: its files are opened relative to that
//! directory (`openat`, final symlinks refused, through the shared
//! [`crate::sys::input`] checks), so a reused pid fails with
//! `ESRCH`/`ENOENT` instead of reaching another process; before a write
//! its `cgroup` file is read again and the process must still be in the
//! container's cgroup (or below it). A process gone meanwhile is not an
//! error. New processes inherit the value from their parent, so only the
//! processes present at a pass need it.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use crate::sys::input::{read_text_at, InputError};

/// `oom_score_adj` text is a few bytes; `/proc/<pid>/cgroup` one line per
/// hierarchy.
const MAX_ADJ_BYTES: u64 = 64;
const MAX_CGROUP_BYTES: u64 = 64 * 1024;

/// Which line of `/proc/<pid>/cgroup` names the container's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// A v1 hierarchy holding this controller (e.g. `memory`; the line's
    /// controller list may name several, `cpu,cpuacct`).
    V1(String),
    /// The v2 line (`0::/path`).
    V2,
}

/// Where a container's processes must be: the cgroup path as
/// `/proc/<pid>/cgroup` shows it (relative to the hierarchy's root,
/// starting with `/`), in `hierarchy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerCgroup {
    /// The hierarchy the path is in.
    pub hierarchy: Hierarchy,
    /// The path relative to that hierarchy's root, from `/`.
    pub path: String,
}

impl ContainerCgroup {
    /// Whether the text of a `/proc/<pid>/cgroup` file puts the process in
    /// this cgroup or below it.
    pub fn contains(&self, proc_cgroup: &str) -> bool {
        proc_cgroup.lines().any(|l| {
            let mut parts = l.splitn(3, ':');
            let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next())
            else {
                return false;
            };
            let right_line = match &self.hierarchy {
                Hierarchy::V2 => id == "0" && ctrls.is_empty(),
                Hierarchy::V1(c) => ctrls.split(',').any(|x| x == c),
            };
            right_line && path_within(path, &self.path)
        })
    }
}

/// `path` is `base` or below it (component-wise).
fn path_within(path: &str, base: &str) -> bool {
    let base = base.trim_end_matches('/');
    path == base
        || path
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether a directory name in a pod cgroup is the cgroup of container
/// `id`: `<id>` (cgroupfs driver) or `<prefix>-<id>.scope` (systemd
/// driver: `cri-containerd-`, `crio-`, `docker-`).
pub(crate) fn is_container_dir(name: &str, id: &str) -> bool {
    !id.is_empty()
        && (name == id
            || name
                .strip_suffix(".scope")
                .and_then(|n| n.strip_suffix(id))
                .is_some_and(|p| p.ends_with('-')))
}

/// The directory of container `id` among the children of `pod_dir`
/// (`None`: not there).
pub fn find_container_dir(pod_dir: &Path, id: &str) -> Option<PathBuf> {
    let rd = std::fs::read_dir(pod_dir).ok()?;
    rd.flatten().find_map(|e| {
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        let name = e.file_name();
        (is_dir && is_container_dir(&name.to_string_lossy(), id)).then(|| e.path())
    })
}

/// What to do with a process whose value differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Write the planned value.
    Write,
    /// Only report (audit, dry run).
    Report,
}

/// What became of one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidOutcome {
    /// It already holds the planned value.
    InPlace,
    /// The planned value was written over `found`.
    Written {
        /// The value it held before.
        found: i64,
    },
    /// It holds `found` (not the planned value); nothing written
    /// ([`Act::Report`]).
    Differs {
        /// The value it holds.
        found: i64,
    },
    /// The kernel refused the write (`EACCES`/`EPERM`: lowering a value
    /// below the process's floor takes `CAP_SYS_RESOURCE`); it holds `found`.
    Refused {
        /// The value it holds.
        found: i64,
        /// The kernel's error.
        error: String,
    },
    /// The process exited (or its pid was reused) meanwhile.
    Gone,
    /// It is no longer in the container's cgroup: left alone.
    Moved,
}

/// Why a process could not be checked (other than its exit).
#[derive(Debug, thiserror::Error)]
pub enum OomScoreError {
    /// A `/proc/<pid>` file could not be read.
    #[error(transparent)]
    Read(InputError),
    /// `oom_score_adj` did not hold a number.
    #[error("{path}: not an oom_score_adj value: {text:?}")]
    Invalid {
        /// The `oom_score_adj` file.
        path: PathBuf,
        /// What it held.
        text: String,
    },
    /// Writing `oom_score_adj` failed.
    #[error("cannot write {value} to {path}: {source}")]
    Write {
        /// The `oom_score_adj` file.
        path: PathBuf,
        /// The value written.
        value: i64,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn is_gone(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ESRCH) | Some(libc::ENOENT))
}

fn read_gone(e: &InputError) -> bool {
    matches!(e, InputError::Io { source, .. } if is_gone(source))
}

/// Check process `pid` (under `proc_root`, normally `/proc`) of the
/// container in `cgroup` against `planned`, and write it when it differs
/// and `act` says so. pid 0 and 1 are never touched ([`PidOutcome::Moved`]).
pub fn check_pid(
    proc_root: &Path,
    pid: i32,
    cgroup: &ContainerCgroup,
    planned: i64,
    act: Act,
) -> Result<PidOutcome, OomScoreError> {
    if pid <= 1 {
        return Ok(PidOutcome::Moved);
    }
    let dir_path = proc_root.join(pid.to_string());
    let dir = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&dir_path)
    {
        Ok(d) => d,
        Err(e) if is_gone(&e) => return Ok(PidOutcome::Gone),
        Err(source) => {
            return Err(OomScoreError::Read(InputError::Io {
                path: dir_path,
                source,
            }))
        }
    };
    let adj_path = dir_path.join("oom_score_adj");
    let found = match read_adj(&dir, &adj_path)? {
        Some(v) => v,
        None => return Ok(PidOutcome::Gone),
    };
    if found == planned {
        return Ok(PidOutcome::InPlace);
    }
    // Still the container's (read through the same directory: a reused
    // pid cannot pass).
    let cg_path = dir_path.join("cgroup");
    let text = match read_text_at(&dir, "cgroup", MAX_CGROUP_BYTES, &cg_path) {
        Ok(t) => t,
        Err(e) if read_gone(&e) => return Ok(PidOutcome::Gone),
        Err(e) => return Err(OomScoreError::Read(e)),
    };
    if !cgroup.contains(&text) {
        return Ok(PidOutcome::Moved);
    }
    if act == Act::Report {
        return Ok(PidOutcome::Differs { found });
    }
    write_adj(&dir, &adj_path, planned, found)
}

fn read_adj(dir: &File, path: &Path) -> Result<Option<i64>, OomScoreError> {
    let text = match read_text_at(dir, "oom_score_adj", MAX_ADJ_BYTES, path) {
        Ok(t) => t,
        Err(e) if read_gone(&e) => return Ok(None),
        Err(e) => return Err(OomScoreError::Read(e)),
    };
    match text.trim().parse::<i64>() {
        Ok(v) if (-1000..=1000).contains(&v) => Ok(Some(v)),
        _ => Err(OomScoreError::Invalid {
            path: path.to_path_buf(),
            text: text.chars().take(32).collect(),
        }),
    }
}

fn write_adj(dir: &File, path: &Path, value: i64, found: i64) -> Result<PidOutcome, OomScoreError> {
    use nix::fcntl::{openat, OFlag};
    let err = |source: std::io::Error| OomScoreError::Write {
        path: path.to_path_buf(),
        value,
        source,
    };
    let refused = |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM));
    let flags = OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    let mut f = match openat(dir, "oom_score_adj", flags, nix::sys::stat::Mode::empty()) {
        Ok(fd) => File::from(fd),
        Err(e) => {
            let e = std::io::Error::from(e);
            return if is_gone(&e) {
                Ok(PidOutcome::Gone)
            } else if refused(&e) {
                Ok(PidOutcome::Refused {
                    found,
                    error: e.to_string(),
                })
            } else {
                Err(err(e))
            };
        }
    };
    match f.write_all(value.to_string().as_bytes()) {
        Ok(()) => Ok(PidOutcome::Written { found }),
        Err(e) if is_gone(&e) => Ok(PidOutcome::Gone),
        Err(e) if refused(&e) => Ok(PidOutcome::Refused {
            found,
            error: e.to_string(),
        }),
        Err(e) => Err(err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1(path: &str) -> ContainerCgroup {
        ContainerCgroup {
            hierarchy: Hierarchy::V1("memory".into()),
            path: path.into(),
        }
    }

    #[test]
    fn membership_reads_the_right_line_component_wise() {
        let text = "12:pids:/other\n4:memory:/kubepods/besteffort/podu/abc\n0::/\n";
        assert!(v1("/kubepods/besteffort/podu/abc").contains(text));
        assert!(
            v1("/kubepods/besteffort/podu").contains(text),
            "below is in"
        );
        assert!(
            !v1("/kubepods/besteffort/podu/ab").contains(text),
            "prefix of a name is not"
        );
        assert!(!v1("/other").contains(text), "another hierarchy's line");
        let both = "3:cpu,cpuacct:/a/b\n";
        let cpu = ContainerCgroup {
            hierarchy: Hierarchy::V1("cpu".into()),
            path: "/a".into(),
        };
        assert!(cpu.contains(both));
        let v2 = ContainerCgroup {
            hierarchy: Hierarchy::V2,
            path: "/kubepods.slice/x.scope".into(),
        };
        assert!(v2.contains("0::/kubepods.slice/x.scope\n"));
        assert!(!v2.contains("0::/kubepods.slice/y.scope\n"));
        assert!(!v2.contains("garbage"));
        assert!(!v2.contains(""));
    }

    #[test]
    fn container_dirs_by_driver() {
        assert!(is_container_dir("abc123", "abc123"));
        assert!(is_container_dir("cri-containerd-abc123.scope", "abc123"));
        assert!(is_container_dir("crio-abc123.scope", "abc123"));
        assert!(!is_container_dir("cri-containerd-xabc123.scope", "abc123"));
        assert!(!is_container_dir("abc1234", "abc123"));
        assert!(!is_container_dir("anything", ""));
    }

    #[test]
    fn own_process_reads_and_a_missing_pid_is_gone() {
        let me = std::process::id() as i32;
        let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let line = text.lines().next().unwrap();
        let mut parts = line.splitn(3, ':');
        let (id, ctrls, path) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let cg = ContainerCgroup {
            hierarchy: if id == "0" {
                Hierarchy::V2
            } else {
                Hierarchy::V1(ctrls.split(',').next().unwrap().to_string())
            },
            path: path.to_string(),
        };
        let current: i64 = std::fs::read_to_string("/proc/self/oom_score_adj")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let proc = Path::new("/proc");
        assert_eq!(
            check_pid(proc, me, &cg, current, Act::Write).unwrap(),
            PidOutcome::InPlace
        );
        let other = if current == 1000 { 999 } else { current + 1 };
        assert_eq!(
            check_pid(proc, me, &cg, other, Act::Report).unwrap(),
            PidOutcome::Differs { found: current }
        );
        let elsewhere = ContainerCgroup {
            path: "/qosd-nowhere-at-all".into(),
            ..cg.clone()
        };
        assert_eq!(
            check_pid(proc, me, &elsewhere, other, Act::Write).unwrap(),
            PidOutcome::Moved,
            "never written outside the container's cgroup"
        );
        assert_eq!(
            check_pid(proc, 1, &cg, other, Act::Write).unwrap(),
            PidOutcome::Moved
        );
        // A pid that does not exist (pid_max is at most 2^22).
        assert_eq!(
            check_pid(proc, 99_999_999, &cg, other, Act::Write).unwrap(),
            PidOutcome::Gone
        );
    }

    #[test]
    fn a_fake_proc_with_bad_values_is_an_error_not_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("4242");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("oom_score_adj"), "banana\n").unwrap();
        std::fs::write(p.join("cgroup"), "4:memory:/k/c\n").unwrap();
        let cg = v1("/k/c");
        assert!(matches!(
            check_pid(dir.path(), 4242, &cg, 5, Act::Write),
            Err(OomScoreError::Invalid { .. })
        ));
        std::fs::write(p.join("oom_score_adj"), "5000\n").unwrap();
        assert!(check_pid(dir.path(), 4242, &cg, 5, Act::Write).is_err());
        // A symlink planted for the value file is refused.
        std::fs::remove_file(p.join("oom_score_adj")).unwrap();
        std::os::unix::fs::symlink("/proc/self/oom_score_adj", p.join("oom_score_adj")).unwrap();
        assert!(matches!(
            check_pid(dir.path(), 4242, &cg, 5, Act::Write),
            Err(OomScoreError::Read(InputError::Symlink { .. }))
        ));
        // A fake process in its cgroup is written (fixture files).
        std::fs::remove_file(p.join("oom_score_adj")).unwrap();
        std::fs::write(p.join("oom_score_adj"), "0\n").unwrap();
        assert_eq!(
            check_pid(dir.path(), 4242, &cg, 1000, Act::Write).unwrap(),
            PidOutcome::Written { found: 0 }
        );
        assert_eq!(
            std::fs::read_to_string(p.join("oom_score_adj")).unwrap(),
            "1000"
        );
    }
}
