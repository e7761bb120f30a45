//! Detect the cgroup version and layout of a cgroupfs mount.

use std::path::{Path, PathBuf};

use crate::model::CgroupVersion;

/// statfs f_type of a cgroup2 filesystem.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    #[error("cannot inspect cgroup filesystem at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is neither a cgroup v2 mount nor a directory of cgroup v1 controllers")]
    Unknown { path: PathBuf },
}

/// Detect the cgroup version mounted at `cgroupfs`.
///
/// A cgroup2 filesystem (statfs magic) or a tree whose root holds
/// `cgroup.controllers` is v2; a directory holding v1 controller
/// directories (`cpu`, `memory`, ...) is v1. Hybrid mode (v1 controllers
/// plus a v2 mount at `unified`) counts as v1: the controllers qosd
/// needs live in the v1 hierarchies.
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
}
