//! Detect the cgroup version and layout of a cgroupfs mount.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use qosd_model::core::model::CgroupVersion;

/// statfs f_type of a cgroup2 filesystem.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Why the cgroup version or layout could not be told.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// A file or directory could not be inspected.
    #[error("cannot inspect cgroup filesystem at {path}: {source}")]
    Io {
        /// The path inspected.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Neither a cgroup v2 mount nor v1 controller directories.
    #[error("{path} is neither a cgroup v2 mount nor a directory of cgroup v1 controllers")]
    Unknown {
        /// The cgroup root given.
        path: PathBuf,
    },
}

/// Detect the cgroup version mounted at `cgroupfs`.
///
/// A cgroup2 filesystem (statfs magic) or a tree whose root holds
/// `cgroup.controllers` is v2; a directory holding v1 controller
/// directories (`cpu`, `memory`, ...) is v1. Hybrid mode (v1 controllers
/// plus a v2 mount at `unified`) counts as v1: the controllers qosd
/// needs live in the v1 hierarchies.
#[allow(clippy::unnecessary_cast)] // f_type's width differs between libcs
pub fn detect_version(cgroupfs: &Path) -> Result<CgroupVersion, DetectError> {
    let st = nix::sys::statfs::statfs(cgroupfs).map_err(|e| DetectError::Io {
        path: cgroupfs.to_path_buf(),
        source: std::io::Error::from(e),
    })?;
    if st.filesystem_type().0 as i64 == CGROUP2_SUPER_MAGIC
        || cgroupfs.join("cgroup.controllers").is_file()
    {
        return Ok(CgroupVersion::V2);
    }
    if ["cpu", "memory", "cpu,cpuacct"]
        .iter()
        .any(|c| cgroupfs.join(c).is_dir())
    {
        return Ok(CgroupVersion::V1);
    }
    Err(DetectError::Unknown {
        path: cgroupfs.to_path_buf(),
    })
}

/// One cgroup mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// Where it is mounted (octal escapes decoded).
    pub(crate) mount_point: PathBuf,
    /// The root of the mount within its hierarchy (`/` unless bind-mounted
    /// from below, as inside containers).
    pub(crate) root: String,
    /// `cgroup` (v1) or `cgroup2`.
    pub(crate) fstype: String,
    /// v1: the controllers of the hierarchy (`cpu`, `cpuacct`, ... and
    /// `name=systemd`); v2: empty.
    pub(crate) controllers: Vec<String>,
}

/// The cgroup layout of a node: where each v1 controller hierarchy and the
/// v2 hierarchy are mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLayout {
    /// The version qosd enforces with: v1 when a v1 `cpu` or `memory`
    /// hierarchy is mounted (also in hybrid mode), else v2.
    pub version: CgroupVersion,
    /// v1 controllers plus a cgroup2 mount (systemd's hybrid mode).
    pub hybrid: bool,
    /// v1 controller name → mount dir (co-mounted `cpu,cpuacct` maps both
    /// names to the same dir).
    pub(crate) v1: BTreeMap<String, PathBuf>,
    /// The cgroup2 mount, if any (the first one; in hybrid mode usually
    /// `/sys/fs/cgroup/unified`).
    pub v2: Option<PathBuf>,
}

impl CgroupLayout {
    /// Mount dir of a v1 controller.
    pub fn v1_dir(&self, controller: &str) -> Option<&Path> {
        self.v1.get(controller).map(PathBuf::as_path)
    }

    #[cfg(test)]
    /// Absolute dirs of the cgroup `rel` (e.g. `qosd-test-1/kubepods`) in the
    /// hierarchies qosd writes to: for v1 the given controllers' mounts
    /// (deduplicated: `cpu` and `cpuacct` co-mounted give one dir), for v2
    /// the unified mount. Useful as the applier's allowed bases.
    pub(crate) fn dirs_for(&self, rel: &str, v1_controllers: &[&str]) -> Vec<PathBuf> {
        let rel = rel.trim_start_matches('/');
        let mut out: Vec<PathBuf> = Vec::new();
        match self.version {
            CgroupVersion::V1 => {
                for c in v1_controllers {
                    if let Some(m) = self.v1.get(*c) {
                        let d = m.join(rel);
                        if !out.contains(&d) {
                            out.push(d);
                        }
                    }
                }
            }
            CgroupVersion::V2 => {
                if let Some(m) = &self.v2 {
                    out.push(m.join(rel));
                }
            }
        }
        out
    }
}

impl CgroupLayout {
    /// Dirs of the cgroup `rel` in **every** mounted hierarchy (each distinct
    /// v1 mount, named ones like `name=systemd` included, plus the cgroup2
    /// mount). runc creates a pod's cgroup in all of them, so orphan cleanup
    /// has to look in all of them.
    pub fn dirs_all(&self, rel: &str) -> Vec<PathBuf> {
        let rel = rel.trim_start_matches('/');
        let mut out: Vec<PathBuf> = Vec::new();
        for m in self.v1.values() {
            let d = m.join(rel);
            if !out.contains(&d) {
                out.push(d);
            }
        }
        if let Some(m) = &self.v2 {
            out.push(m.join(rel));
        }
        out.sort();
        out
    }
}

#[cfg(test)]
/// The v1 controllers qosd writes to.
pub(crate) const V1_CONTROLLERS: &[&str] = &["cpu", "memory", "pids", "hugetlb", "cpuset"];

/// Decode mountinfo's octal escapes (`\040` for a space, ...).
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse the cgroup (v1 and v2) mounts out of mountinfo text. Lines that are
/// malformed or not cgroup mounts are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 {
            continue;
        }
        let fstype = r[0];
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        let controllers = if fstype == "cgroup" {
            r[2].split(',')
                .filter(|o| {
                    o.starts_with("name=") || (!matches!(*o, "rw" | "ro") && !o.contains('='))
                })
                .filter(|o| {
                    // super options that are not controllers
                    !matches!(
                        *o,
                        "noprefix" | "clone_children" | "xattr" | "cpuset_v2_mode" | "favordynmods"
                    )
                })
                .map(str::to_string)
                .collect()
        } else {
            Vec::new()
        };
        out.push(CgroupMount {
            mount_point: PathBuf::from(unescape_mountinfo(l[4])),
            root: unescape_mountinfo(l[3]),
            fstype: fstype.to_string(),
            controllers,
        });
    }
    out
}

/// Build the layout from mountinfo text.
pub fn layout_from_mountinfo(text: &str, source: &Path) -> Result<CgroupLayout, DetectError> {
    let mounts = parse_mountinfo(text);
    let mut v1 = BTreeMap::new();
    let mut v2 = None;
    for m in &mounts {
        if m.fstype == "cgroup2" {
            if v2.is_none() {
                v2 = Some(m.mount_point.clone());
            }
        } else {
            for c in &m.controllers {
                v1.entry(c.clone()).or_insert_with(|| m.mount_point.clone());
            }
        }
    }
    let has_v1 = v1.contains_key("cpu") || v1.contains_key("memory");
    let version = if has_v1 {
        CgroupVersion::V1
    } else if v2.is_some() {
        CgroupVersion::V2
    } else {
        return Err(DetectError::Unknown {
            path: source.to_path_buf(),
        });
    };
    Ok(CgroupLayout {
        version,
        hybrid: has_v1 && v2.is_some(),
        v1,
        v2,
    })
}

/// Detect the layout from a mountinfo file (normally `/proc/self/mountinfo`).
pub fn detect_layout(mountinfo: &Path) -> Result<CgroupLayout, DetectError> {
    let text = std::fs::read_to_string(mountinfo).map_err(|source| DetectError::Io {
        path: mountinfo.to_path_buf(),
        source,
    })?;
    layout_from_mountinfo(&text, mountinfo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_trees() {
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        assert_eq!(detect_version(v2.path()).unwrap(), CgroupVersion::V2);
        let v1 = tempfile::tempdir().unwrap();
        std::fs::create_dir(v1.path().join("memory")).unwrap();
        assert_eq!(detect_version(v1.path()).unwrap(), CgroupVersion::V1);
        let none = tempfile::tempdir().unwrap();
        assert!(detect_version(none.path()).is_err());
        assert!(detect_version(&none.path().join("missing")).is_err());
    }

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
50 23 0:40 / /mnt/with\\040space rw - ext4 /dev/sda1 rw
";

    #[test]
    fn mountinfo_hybrid_comounted() {
        let l = layout_from_mountinfo(HYBRID, Path::new("x")).unwrap();
        assert_eq!(l.version, CgroupVersion::V1);
        assert!(l.hybrid);
        let cc = PathBuf::from("/sys/fs/cgroup/cpu,cpuacct");
        assert_eq!(l.v1_dir("cpu"), Some(cc.as_path()));
        assert_eq!(l.v1_dir("cpuacct"), Some(cc.as_path()));
        assert_eq!(
            l.v1_dir("name=systemd"),
            Some(Path::new("/sys/fs/cgroup/systemd"))
        );
        assert!(l.v1_dir("xattr").is_none());
        assert_eq!(l.v2.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        assert_eq!(
            l.dirs_for("/kubepods", &["cpu", "cpuacct", "memory", "hugetlb"]),
            vec![
                cc.join("kubepods"),
                PathBuf::from("/sys/fs/cgroup/memory/kubepods")
            ]
        );
    }

    #[test]
    fn mountinfo_pure_v2_and_none() {
        let t =
            "25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
        let l = layout_from_mountinfo(t, Path::new("x")).unwrap();
        assert_eq!(l.version, CgroupVersion::V2);
        assert!(!l.hybrid);
        assert!(l.v1.is_empty());
        assert_eq!(
            l.dirs_for("kubepods", V1_CONTROLLERS),
            vec![PathBuf::from("/sys/fs/cgroup/kubepods")]
        );
        assert!(layout_from_mountinfo("garbage\n\n", Path::new("x")).is_err());
        let esc = "1 1 0:1 / /a\\040b rw - cgroup2 none rw\n";
        let l = layout_from_mountinfo(esc, Path::new("x")).unwrap();
        assert_eq!(l.v2.as_deref(), Some(Path::new("/a b")));
    }

    #[test]
    fn this_machine_mountinfo_parses() {
        // Whatever the host is, its own mountinfo must parse without panicking.
        if let Ok(l) = detect_layout(Path::new("/proc/self/mountinfo")) {
            assert!(l.v2.is_some() || !l.v1.is_empty());
        }
        assert!(detect_layout(Path::new("/nonexistent/mountinfo")).is_err());
    }
}
