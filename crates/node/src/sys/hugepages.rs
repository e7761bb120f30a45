//! The hugepage sizes the node offers, as libcontainer's `HugePageSizes`
//! finds them: the `hugepages-<N>kB` directories of
//! `<sysfs>/kernel/mm/hugepages`; kept only when the hugetlb cgroup
//! controller is there to limit them (v1: a `hugetlb` hierarchy under the
//! cgroupfs mount; v2: `hugetlb` in the root's `cgroup.controllers`).

use std::path::{Path, PathBuf};

use qosd_model::core::model::CgroupVersion;

/// Why the node's hugepage sizes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HugepagesError {
    /// A sysfs or cgroupfs file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A directory under `kernel/mm/hugepages` is not `hugepages-<N>kB`.
    #[error("{path}: unexpected hugepages directory name {name:?} (want hugepages-<N>kB)")]
    BadName {
        /// The hugepages directory.
        path: PathBuf,
        /// The entry's name.
        name: String,
    },
}

/// Page sizes in bytes, ascending, from `<sysfs>/kernel/mm/hugepages`.
/// A missing directory means none (a kernel without hugetlbfs).
pub(crate) fn page_sizes(sysfs: &Path) -> Result<Vec<u64>, HugepagesError> {
    let dir = sysfs.join("kernel/mm/hugepages");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(HugepagesError::Io { path: dir, source }),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|source| HugepagesError::Io {
            path: dir.clone(),
            source,
        })?;
        let name = e.file_name().to_string_lossy().into_owned();
        let kb = name
            .strip_prefix("hugepages-")
            .and_then(|s| s.strip_suffix("kB"))
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| HugepagesError::BadName {
                path: dir.clone(),
                name: name.clone(),
            })?;
        out.push(kb * 1024);
    }
    out.sort_unstable();
    Ok(out)
}

/// Whether the hugetlb controller is available under `cgroupfs`.
pub(crate) fn hugetlb_controller(cgroupfs: &Path, version: CgroupVersion) -> bool {
    match version {
        CgroupVersion::V1 => cgroupfs.join("hugetlb").is_dir(),
        CgroupVersion::V2 => std::fs::read_to_string(cgroupfs.join("cgroup.controllers"))
            .map(|s| s.split_whitespace().any(|c| c == "hugetlb"))
            .unwrap_or(false),
    }
}

/// Whether systemd has the hugetlb controller enabled for the root's
/// children (cgroup v2 `cgroup.subtree_control`). systemd enables only
/// the controllers it manages and never hugetlb, so under the systemd
/// driver the pod slices have no `hugetlb.*` files unless something else
/// delegated it: then there is nothing qosd (or the kubelet) can limit.
fn hugetlb_delegated_v2(cgroupfs: &Path) -> bool {
    std::fs::read_to_string(cgroupfs.join("cgroup.subtree_control"))
        .map(|s| s.split_whitespace().any(|c| c == "hugetlb"))
        .unwrap_or(false)
}

/// The sizes qosd limits: `page_sizes` when the controller is there
/// (under the systemd driver on v2: also enabled for the root's children),
/// else none.
pub fn detect(
    sysfs: &Path,
    cgroupfs: &Path,
    version: CgroupVersion,
    driver: qosd_model::core::model::CgroupDriver,
) -> Result<Vec<u64>, HugepagesError> {
    if !hugetlb_controller(cgroupfs, version) {
        return Ok(Vec::new());
    }
    if version == CgroupVersion::V2
        && driver == qosd_model::core::model::CgroupDriver::Systemd
        && !hugetlb_delegated_v2(cgroupfs)
    {
        return Ok(Vec::new());
    }
    page_sizes(sysfs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use qosd_model::core::model::CgroupDriver;

    #[test]
    fn systemd_v2_needs_hugetlb_in_the_roots_subtree_control() {
        let cg = tempfile::tempdir().unwrap();
        assert!(!hugetlb_delegated_v2(cg.path()), "no file: not delegated");
        std::fs::write(
            cg.path().join("cgroup.subtree_control"),
            "cpu memory pids\n",
        )
        .unwrap();
        assert!(!hugetlb_delegated_v2(cg.path()));
        std::fs::write(cg.path().join("cgroup.subtree_control"), "cpu hugetlb\n").unwrap();
        assert!(hugetlb_delegated_v2(cg.path()));
    }

    #[test]
    fn fake_sysfs_and_cgroupfs() {
        let sys = tempfile::tempdir().unwrap();
        let cg = tempfile::tempdir().unwrap();
        assert_eq!(page_sizes(sys.path()).unwrap(), Vec::<u64>::new());
        let hp = sys.path().join("kernel/mm/hugepages");
        std::fs::create_dir_all(hp.join("hugepages-1048576kB")).unwrap();
        std::fs::create_dir_all(hp.join("hugepages-2048kB")).unwrap();
        assert_eq!(page_sizes(sys.path()).unwrap(), vec![2 << 20, 1 << 30]);
        // no controller: nothing to limit
        assert!(detect(
            sys.path(),
            cg.path(),
            CgroupVersion::V1,
            CgroupDriver::Cgroupfs
        )
        .unwrap()
        .is_empty());
        assert!(detect(
            sys.path(),
            cg.path(),
            CgroupVersion::V2,
            CgroupDriver::Cgroupfs
        )
        .unwrap()
        .is_empty());
        std::fs::create_dir(cg.path().join("hugetlb")).unwrap();
        assert_eq!(
            detect(
                sys.path(),
                cg.path(),
                CgroupVersion::V1,
                CgroupDriver::Cgroupfs
            )
            .unwrap()
            .len(),
            2
        );
        std::fs::write(
            cg.path().join("cgroup.controllers"),
            "cpu memory hugetlb pids\n",
        )
        .unwrap();
        assert_eq!(
            detect(
                sys.path(),
                cg.path(),
                CgroupVersion::V2,
                CgroupDriver::Cgroupfs
            )
            .unwrap()
            .len(),
            2
        );
        // systemd driver on v2: only when hugetlb is enabled for the root's children
        let sd = |cg: &Path| detect(sys.path(), cg, CgroupVersion::V2, CgroupDriver::Systemd);
        assert!(sd(cg.path()).unwrap().is_empty());
        std::fs::write(cg.path().join("cgroup.subtree_control"), "memory hugetlb\n").unwrap();
        assert_eq!(sd(cg.path()).unwrap().len(), 2);
        std::fs::create_dir_all(hp.join("weird")).unwrap();
        let e = page_sizes(sys.path()).unwrap_err().to_string();
        assert!(
            e.contains("weird") && e.contains("kernel/mm/hugepages"),
            "{e}"
        );
    }

    #[test]
    fn real_sysfs_reads() {
        // Whatever this machine offers, the reader parses it.
        let sizes = page_sizes(Path::new("/sys")).unwrap();
        assert!(
            sizes.iter().all(|s| *s >= 4096 && s % 4096 == 0),
            "{sizes:?}"
        );
    }
}
