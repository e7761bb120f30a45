//! Reading eviction signals from the kernel (every path injectable).
//!
//! * `memory.available` = capacity − working set, working set = usage −
//!   inactive_file floored at 0; capacity = `MemTotal` of /proc/meminfo.
//!   cgroup v1: root `memory.usage_in_bytes` and `total_inactive_file` of
//!   `memory.stat`; cgroup v2 (no `memory.current` at the root): root
//!   `memory.stat` `anon + file` as usage, `inactive_file` (as runc and the
//!   kubelet's cadvisor do). With [`MemorySource::Meminfo`]:
//!   `MemAvailable` of /proc/meminfo instead.
//! * `allocatableMemory.available` = allocatable − working set of the
//!   kubepods cgroup (v1 usage − total_inactive_file, v2 memory.current −
//!   inactive_file), allocatable configured or the kubepods memory limit.
//! * `nodefs.*`, `imagefs.*`, `containerfs.*`: statvfs of a configured path
//!   (available = f_bavail × f_frsize, capacity = f_blocks × f_frsize;
//!   inodesFree = f_ffree of f_files).
//! * `pid.available` = pid_max − running tasks (the 4th field of
//!   /proc/loadavg, like the kubelet, which avoids sysinfo's truncation).
//! * The node-level files (meminfo, loadavg, pid_max, the root's and
//!   kubepods' memory counters) are read through descriptors kept open on
//!   the reading thread (`read_kept`): one `pread` per file and pass
//!   instead of open, stat, read, read, close.
//! * per pod: working set of the pod cgroup and its process count; local
//!   storage of its logs (`<podLogsDir>/<ns>_<name>_<uid>/`) and local
//!   volumes (`<rootDir>/pods/<uid>/volumes/…`), bytes and inodes
//!   ([`pod_local_storage`]); the writable layers come from the runtime.

use std::path::{Path, PathBuf};
use std::time::Instant;

use qosd_model::core::model::CgroupVersion;
use qosd_model::policy::evict::manager::{Observation, Observations};
use qosd_model::policy::evict::threshold::Signal;
use qosd_model::policy::evict::MemorySource;

/// An I/O or format problem reading a signal source; names the path.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// A file or filesystem could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file did not hold what was expected.
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// The signal cannot be read with these sources.
    #[error("{signal}: {message}")]
    NotConfigured {
        /// The signal.
        signal: Signal,
        /// What is missing.
        message: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SignalError + '_ {
    move |source| SignalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn fmt_err(path: &Path, message: impl Into<String>) -> SignalError {
    SignalError::Format {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Where every signal is read from. Construct with [`SignalSources::host`]
/// and adjust, or fill every field for tests.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalSources {
    /// The cgroup version of the node.
    pub version: CgroupVersion,
    /// v1: the memory hierarchy's mount (`/sys/fs/cgroup/memory`); v2: the
    /// unified mount (`/sys/fs/cgroup`).
    pub memory_root: PathBuf,
    /// Absolute kubepods cgroup directory in the memory hierarchy.
    pub kubepods: Option<PathBuf>,
    /// Node allocatable memory; `None`: the kubepods memory limit.
    pub allocatable_memory_bytes: Option<i64>,
    /// `/proc/meminfo`.
    pub meminfo: PathBuf,
    /// `/proc/loadavg` (its running/total field counts processes).
    pub loadavg: PathBuf,
    /// `/proc/sys/kernel/pid_max`.
    pub pid_max: PathBuf,
    /// A path on the node filesystem (`None`: nodefs signals unavailable).
    pub nodefs: Option<PathBuf>,
    /// A path on the image filesystem (`None`: the node filesystem).
    pub imagefs: Option<PathBuf>,
    /// A path on the container filesystem (`None`: the node filesystem).
    pub containerfs: Option<PathBuf>,
    /// How memory.available is computed (working set or `MemAvailable`).
    pub memory_source: MemorySource,
    /// The kubelet root dir whose `pods/<uid>/volumes/` hold the pods'
    /// local volumes (None: per-pod storage not measured).
    pub pod_root_dir: Option<PathBuf>,
    /// Where the pods' container logs are (`podLogsDir`, /var/log/pods).
    pub pod_logs_dir: PathBuf,
}

impl SignalSources {
    /// The real host paths for a cgroup version (kubepods not set).
    pub fn host(version: CgroupVersion) -> SignalSources {
        let memory_root = match version {
            CgroupVersion::V1 => PathBuf::from("/sys/fs/cgroup/memory"),
            CgroupVersion::V2 => PathBuf::from("/sys/fs/cgroup"),
        };
        SignalSources {
            version,
            memory_root,
            kubepods: None,
            allocatable_memory_bytes: None,
            meminfo: "/proc/meminfo".into(),
            loadavg: "/proc/loadavg".into(),
            pid_max: "/proc/sys/kernel/pid_max".into(),
            nodefs: Some("/var/lib/kubelet".into()),
            imagefs: None,
            containerfs: None,
            memory_source: MemorySource::WorkingSet,
            pod_root_dir: Some("/var/lib/kubelet".into()),
            pod_logs_dir: "/var/log/pods".into(),
        }
    }

    /// Read one signal now: (available, capacity).
    pub fn read(&self, signal: Signal) -> Result<(i64, i64), SignalError> {
        match signal {
            Signal::MemoryAvailable => self.memory_available(),
            Signal::AllocatableMemoryAvailable => self.allocatable_memory_available(),
            Signal::NodeFsAvailable => fs_bytes(self.fs_path(signal, &self.nodefs)?),
            Signal::NodeFsInodesFree => fs_inodes(self.fs_path(signal, &self.nodefs)?),
            Signal::ImageFsAvailable => fs_bytes(self.fs_path(signal, &self.imagefs)?),
            Signal::ImageFsInodesFree => fs_inodes(self.fs_path(signal, &self.imagefs)?),
            Signal::ContainerFsAvailable => fs_bytes(self.fs_path(signal, &self.containerfs)?),
            Signal::ContainerFsInodesFree => fs_inodes(self.fs_path(signal, &self.containerfs)?),
            Signal::PidAvailable => self.pid_available(),
            // A stall over a window: the pressure watcher measures it
            // (sys::pressure), a single read cannot.
            Signal::MemorySome | Signal::MemoryFull => Err(SignalError::NotConfigured {
                signal,
                message:
                    "a pressure signal is measured over its window by the daemon's pressure watcher"
                        .into(),
            }),
        }
    }

    fn fs_path<'a>(
        &'a self,
        signal: Signal,
        p: &'a Option<PathBuf>,
    ) -> Result<&'a Path, SignalError> {
        // imagefs/containerfs default to nodefs (one filesystem), like the
        // kubelet when the runtime reports the same device.
        p.as_deref()
            .or(self.nodefs.as_deref())
            .ok_or_else(|| SignalError::NotConfigured {
                signal,
                message: "no filesystem path configured".into(),
            })
    }

    /// Observe a set of signals at `now`; failures are returned beside the
    /// observations (a missing observation means "no action" downstream).
    pub fn observe(
        &self,
        signals: impl IntoIterator<Item = Signal>,
        now: Instant,
    ) -> (Observations, Vec<SignalError>) {
        let mut obs = Observations::new();
        let mut errs = Vec::new();
        for s in signals {
            match self.read(s) {
                Ok((available, capacity)) => {
                    obs.insert(
                        s,
                        Observation {
                            available,
                            capacity,
                            at: now,
                            window_start: None,
                        },
                    );
                }
                Err(e) => errs.push(e),
            }
        }
        (obs, errs)
    }

    /// `MemTotal` in bytes.
    pub(crate) fn memory_capacity(&self) -> Result<i64, SignalError> {
        let mi = read_meminfo(&self.meminfo)?;
        meminfo_field(&mi, "MemTotal", &self.meminfo)
    }

    /// memory.available: (available, capacity).
    pub(crate) fn memory_available(&self) -> Result<(i64, i64), SignalError> {
        let mi = read_meminfo(&self.meminfo)?;
        let cap = meminfo_field(&mi, "MemTotal", &self.meminfo)?;
        match self.memory_source {
            MemorySource::Meminfo => {
                let avail = meminfo_field(&mi, "MemAvailable", &self.meminfo)?;
                Ok((avail.clamp(0, cap), cap))
            }
            MemorySource::WorkingSet => {
                let ws = root_working_set(self.version, &self.memory_root)?;
                Ok((available(cap, ws, &self.memory_root)?, cap))
            }
        }
    }

    /// allocatableMemory.available: (available, allocatable).
    pub(crate) fn allocatable_memory_available(&self) -> Result<(i64, i64), SignalError> {
        let dir = self.kubepods.as_deref().ok_or(SignalError::NotConfigured {
            signal: Signal::AllocatableMemoryAvailable,
            message: "no kubepods cgroup configured".into(),
        })?;
        let ws = working_set_of(self.version, dir, true)?;
        let ws_i = i64::try_from(ws)
            .map_err(|_| fmt_err(dir, format!("working set {ws} out of range")))?;
        let cap = match self.allocatable_memory_bytes {
            Some(a) => a,
            None => cgroup_memory_limit(self.version, dir)?.ok_or_else(|| {
                SignalError::NotConfigured {
                    signal: Signal::AllocatableMemoryAvailable,
                    message: format!(
                        "{} has no memory limit and no allocatable memory is configured",
                        dir.display()
                    ),
                }
            })?,
        };
        Ok((cap.saturating_sub(ws_i).max(0), cap))
    }

    /// pid.available: (pid_max − running tasks, pid_max).
    pub(crate) fn pid_available(&self) -> Result<(i64, i64), SignalError> {
        let max = read_u64_kept(&self.pid_max)?;
        let max = i64::try_from(max)
            .map_err(|_| fmt_err(&self.pid_max, format!("pid_max {max} out of range")))?;
        let la = read_kept(&self.loadavg)?;
        let total = la
            .split_whitespace()
            .nth(3)
            .and_then(|f| f.split_once('/'))
            .and_then(|(_, t)| t.parse::<i64>().ok())
            .ok_or_else(|| fmt_err(&self.loadavg, "no running/total field"))?;
        Ok((max.saturating_sub(total), max))
    }
}

/// capacity − working set, floored at 0; a working set beyond i64 is
/// unreadable data, not "nothing used".
fn available(cap: i64, ws: u64, at: &Path) -> Result<i64, SignalError> {
    let ws =
        i64::try_from(ws).map_err(|_| fmt_err(at, format!("working set {ws} out of range")))?;
    Ok(cap.saturating_sub(ws).max(0))
}

fn read_string(path: &Path) -> Result<String, SignalError> {
    std::fs::read_to_string(path).map_err(io_err(path))
}

thread_local! {
    /// Node-level signal files kept open on this thread ([`read_kept`]).
    static KEPT: std::cell::RefCell<std::collections::HashMap<PathBuf, std::fs::File>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// At most this many files are kept open per thread (the node-level
/// signal files are a handful; more means many paths: start over).
const KEPT_MAX: usize = 16;

/// Read a node-level signal file (procfs, cgroupfs) through a descriptor
/// kept open on this thread: `pread` from offset 0 renders it afresh. A
/// failed read drops the descriptor and opens the path again once (a
/// cgroup removed and made again answers ENODEV on the old one). Only for
/// a fixed handful of node-level paths, never per pod (their descriptors
/// would outlive the pods).
fn read_kept(path: &Path) -> Result<String, SignalError> {
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        if let Some(f) = k.get(path) {
            if let Ok(s) = pread_all(f) {
                return Ok(s);
            }
            k.remove(path);
        }
        let f = std::fs::File::open(path).map_err(io_err(path))?;
        let s = pread_all(&f).map_err(io_err(path))?;
        if k.len() >= KEPT_MAX {
            k.clear();
        }
        k.insert(path.to_path_buf(), f);
        Ok(s)
    })
}

/// The whole file from offset 0. A short read ends it: procfs and
/// cgroupfs (seq_file) reads fill the buffer unless the end was reached.
fn pread_all(f: &std::fs::File) -> std::io::Result<String> {
    use std::os::unix::fs::FileExt;
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = f.read_at(&mut chunk, out.len() as u64)?;
        out.extend_from_slice(&chunk[..n]);
        if n < chunk.len() {
            break;
        }
    }
    String::from_utf8(out).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn read_u64_kept(path: &Path) -> Result<u64, SignalError> {
    let s = read_kept(path)?;
    parse_u64(s.trim()).ok_or_else(|| fmt_err(path, format!("not a number: {:?}", s.trim())))
}

fn read_u64(path: &Path) -> Result<u64, SignalError> {
    let s = read_string(path)?;
    parse_u64(s.trim()).ok_or_else(|| fmt_err(path, format!("not a number: {:?}", s.trim())))
}

fn parse_u64(s: &str) -> Option<u64> {
    s.parse().ok()
}

fn read_meminfo(path: &Path) -> Result<String, SignalError> {
    read_kept(path)
}

fn meminfo_field(text: &str, key: &str, path: &Path) -> Result<i64, SignalError> {
    crate::sys::procfs::meminfo_value(text, key)
        .ok_or_else(|| fmt_err(path, format!("no {key} line")))
}

/// Find `key` in memory.stat-style text (`name value` lines).
pub fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn stat_required(text: &str, key: &str, path: &Path) -> Result<u64, SignalError> {
    stat_field(text, key).ok_or_else(|| fmt_err(path, format!("no {key} field")))
}

/// Working set of the root cgroup, in bytes.
pub(crate) fn root_working_set(version: CgroupVersion, root: &Path) -> Result<u64, SignalError> {
    let stat_path = root.join("memory.stat");
    let stat = read_kept(&stat_path)?;
    match version {
        CgroupVersion::V1 => {
            let usage = read_u64_kept(&root.join("memory.usage_in_bytes"))?;
            let inactive = stat_required(&stat, "total_inactive_file", &stat_path)?;
            Ok(usage.saturating_sub(inactive))
        }
        CgroupVersion::V2 => {
            let anon = stat_required(&stat, "anon", &stat_path)?;
            let file = stat_required(&stat, "file", &stat_path)?;
            let inactive = stat_required(&stat, "inactive_file", &stat_path)?;
            // A wrapped sum would read as "all memory available" and
            // silently stop eviction: out of range is unreadable instead.
            let sum = anon.checked_add(file).ok_or_else(|| {
                fmt_err(
                    &stat_path,
                    format!("anon {anon} + file {file} out of range"),
                )
            })?;
            Ok(sum.saturating_sub(inactive))
        }
    }
}

/// Working set of a non-root cgroup (kubepods, a pod): usage − inactive_file.
pub(crate) fn cgroup_working_set(version: CgroupVersion, dir: &Path) -> Result<u64, SignalError> {
    working_set_of(version, dir, false)
}

/// [`cgroup_working_set`], through kept-open descriptors when `kept` (the
/// kubepods cgroup: one fixed directory, read every pass).
fn working_set_of(version: CgroupVersion, dir: &Path, kept: bool) -> Result<u64, SignalError> {
    let read = if kept { read_kept } else { read_string };
    let stat_path = dir.join("memory.stat");
    let stat = read(&stat_path)?;
    let (usage_file, inactive_key) = match version {
        CgroupVersion::V1 => ("memory.usage_in_bytes", "total_inactive_file"),
        CgroupVersion::V2 => ("memory.current", "inactive_file"),
    };
    let usage_path = dir.join(usage_file);
    let s = read(&usage_path)?;
    let usage = parse_u64(s.trim())
        .ok_or_else(|| fmt_err(&usage_path, format!("not a number: {:?}", s.trim())))?;
    let inactive = stat_required(&stat, inactive_key, &stat_path)?;
    Ok(usage.saturating_sub(inactive))
}

/// v1 "unlimited" is a huge page-aligned number; anything at or above this is treated as no limit.
const V1_UNLIMITED_FLOOR: u64 = 1 << 62;

/// Memory limit of a cgroup (`None` = unlimited).
pub(crate) fn cgroup_memory_limit(
    version: CgroupVersion,
    dir: &Path,
) -> Result<Option<i64>, SignalError> {
    match version {
        CgroupVersion::V1 => {
            let v = read_u64(&dir.join("memory.limit_in_bytes"))?;
            Ok((v < V1_UNLIMITED_FLOOR).then_some(v as i64))
        }
        CgroupVersion::V2 => {
            let p = dir.join("memory.max");
            let s = read_string(&p)?;
            let s = s.trim();
            if s == "max" {
                return Ok(None);
            }
            parse_u64(s)
                .map(|v| i64::try_from(v).ok())
                .ok_or_else(|| fmt_err(&p, format!("not a number: {s:?}")))
        }
    }
}

/// Number of processes in a cgroup and its descendants (`cgroup.procs`),
/// by the one pid walk ([`crate::sys::kill::cgroup_tree_pids`]).
pub(crate) fn cgroup_process_count(dir: &Path) -> Result<u64, SignalError> {
    match crate::sys::kill::cgroup_tree_pids(dir) {
        Ok(pids) => Ok(pids.len() as u64),
        Err(crate::sys::kill::KillError::Io { path, source }) => {
            Err(SignalError::Io { path, source })
        }
        Err(e) => Err(SignalError::Format {
            path: dir.to_path_buf(),
            message: e.to_string(),
        }),
    }
}

/// Per-pod stats from its cgroup directory (memory hierarchy on v1): working
/// set and process count; missing pieces stay `None`.
pub fn pod_stats(
    version: CgroupVersion,
    pod_dir: &Path,
) -> qosd_model::policy::evict::rank::PodStats {
    qosd_model::policy::evict::rank::PodStats {
        memory_working_set_bytes: cgroup_working_set(version, pod_dir).ok(),
        ephemeral_storage_bytes: None,
        inodes: None,
        processes: cgroup_process_count(pod_dir).ok(),
        ..Default::default()
    }
}

/// Bytes (allocated blocks, like `du`) and inodes (every file, directory
/// and link, the directory itself included, like `du --inodes`) under a
/// directory. Hard links count once. Does not follow symlinks.
pub(crate) fn dir_usage(dir: &Path) -> Result<(u64, u64), SignalError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).map_err(io_err(dir))?;
    let mut seen = std::collections::HashSet::new();
    let mut bytes = 0u64;
    let mut inodes = 0u64;
    let mut stack = vec![(dir.to_path_buf(), meta)];
    while let Some((path, m)) = stack.pop() {
        if seen.insert((m.dev(), m.ino())) {
            bytes = bytes.saturating_add(m.blocks().saturating_mul(512));
            inodes += 1;
        }
        if !m.is_dir() {
            continue;
        }
        let rd = match std::fs::read_dir(&path) {
            Ok(rd) => rd,
            // vanished while walking (a log rotated, a volume torn down)
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && path != dir => continue,
            Err(e) => return Err(io_err(&path)(e)),
        };
        for e in rd.flatten() {
            if let Ok(em) = e.path().symlink_metadata() {
                stack.push((e.path(), em));
            }
        }
    }
    Ok((bytes, inodes))
}

/// The volume plugins whose data is local ephemeral storage on nodefs
/// (kubelet `IsLocalEphemeralVolume`: emptyDir not in memory, configMap,
/// downwardAPI, gitRepo).
pub(crate) const LOCAL_VOLUME_PLUGINS: [&str; 4] = [
    "kubernetes.io~empty-dir",
    "kubernetes.io~configmap",
    "kubernetes.io~downward-api",
    "kubernetes.io~git-repo",
];

/// One measured volume directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeUsage {
    /// The volume plugin directory (`kubernetes.io~empty-dir`).
    pub plugin: String,
    /// The volume's name.
    pub name: String,
    /// Bytes used.
    pub bytes: u64,
    pub(crate) inodes: u64,
    /// A mount of its own (emptyDir `medium: Memory` is a tmpfs): not on
    /// nodefs, measured by statvfs, not counted as local ephemeral storage.
    pub(crate) own_mount: bool,
}

/// The local storage of one pod outside its writable layers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodLocalStorage {
    /// Whole log directory (None: no directory).
    pub logs: Option<(u64, u64)>,
    /// Per container (sub-directory name = container name): bytes.
    pub container_logs: Vec<(String, u64)>,
    /// The local volumes measured.
    pub volumes: Vec<VolumeUsage>,
}

impl PodLocalStorage {
    /// Bytes and inodes of the disk-backed local volumes.
    pub fn volumes_total(&self) -> (u64, u64) {
        self.volumes
            .iter()
            .filter(|v| !v.own_mount)
            .fold((0, 0), |(b, i), v| (b + v.bytes, i + v.inodes))
    }
}

/// Measure a pod's logs and local volumes: `<logs_dir>/<ns>_<name>_<uid>/`
/// and `<root_dir>/pods/<uid>/volumes/<plugin>/<volume>/` for the
/// `LOCAL_VOLUME_PLUGINS`. Missing directories measure as nothing.
pub fn pod_local_storage(
    root_dir: &Path,
    logs_dir: &Path,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<PodLocalStorage, SignalError> {
    use std::os::unix::fs::MetadataExt;
    let mut out = PodLocalStorage::default();
    let logs = logs_dir.join(format!("{namespace}_{name}_{uid}"));
    if logs.is_dir() {
        out.logs = Some(dir_usage(&logs)?);
        for e in std::fs::read_dir(&logs).map_err(io_err(&logs))?.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                let (b, _) = dir_usage(&e.path())?;
                out.container_logs
                    .push((e.file_name().to_string_lossy().into_owned(), b));
            }
        }
        out.container_logs.sort();
    }
    let vols = root_dir.join("pods").join(uid).join("volumes");
    for plugin in LOCAL_VOLUME_PLUGINS {
        let pdir = vols.join(plugin);
        let Ok(rd) = std::fs::read_dir(&pdir) else {
            continue;
        };
        let parent_dev = std::fs::metadata(&pdir).map_err(io_err(&pdir))?.dev();
        for e in rd.flatten() {
            let path = e.path();
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !m.is_dir() {
                continue;
            }
            let own_mount = m.dev() != parent_dev;
            let (bytes, inodes) = if own_mount {
                let st = statvfs(&path)?;
                let f = st.fragment_size();
                (
                    (st.blocks() - st.blocks_free()) * f,
                    st.files() - st.files_free(),
                )
            } else {
                dir_usage(&path)?
            };
            out.volumes.push(VolumeUsage {
                plugin: plugin.to_string(),
                name: e.file_name().to_string_lossy().into_owned(),
                bytes,
                inodes,
                own_mount,
            });
        }
    }
    out.volumes
        .sort_by(|a, b| (&a.plugin, &a.name).cmp(&(&b.plugin, &b.name)));
    Ok(out)
}

fn statvfs(path: &Path) -> Result<nix::sys::statvfs::Statvfs, SignalError> {
    nix::sys::statvfs::statvfs(path).map_err(|e| SignalError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::from(e),
    })
}

/// (available bytes, capacity bytes) of the filesystem holding `path`.
pub fn fs_bytes(path: &Path) -> Result<(i64, i64), SignalError> {
    let st = statvfs(path)?;
    let bytes = |blocks: u64| {
        u128::from(blocks)
            .checked_mul(u128::from(st.fragment_size()))
            .and_then(|b| i64::try_from(b).ok())
            .ok_or_else(|| {
                fmt_err(
                    path,
                    format!(
                        "{blocks} blocks of {} bytes out of range",
                        st.fragment_size()
                    ),
                )
            })
    };
    Ok((bytes(st.blocks_available())?, bytes(st.blocks())?))
}

/// (free inodes, total inodes) of the filesystem holding `path`.
pub fn fs_inodes(path: &Path) -> Result<(i64, i64), SignalError> {
    let st = statvfs(path)?;
    let n =
        |v: u64| i64::try_from(v).map_err(|_| fmt_err(path, format!("{v} inodes out of range")));
    Ok((n(st.files_free())?, n(st.files())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("fixtures/signals")
    }

    fn sources(version: CgroupVersion) -> SignalSources {
        let f = fixtures();
        let root = f.join(version.as_str());
        SignalSources {
            version,
            kubepods: Some(root.join("kubepods")),
            memory_root: root,
            allocatable_memory_bytes: None,
            meminfo: f.join("meminfo"),
            loadavg: f.join("loadavg"),
            pid_max: f.join("pid_max"),
            nodefs: Some(f.clone()),
            imagefs: None,
            containerfs: None,
            memory_source: MemorySource::WorkingSet,
            pod_root_dir: None,
            pod_logs_dir: f.join("logs"),
        }
    }

    const MI: i64 = 1024 * 1024;

    #[test]
    fn meminfo_parse() {
        let m = crate::sys::procfs::parse_meminfo("MemTotal:       16384 kB\nMemAvailable:    8192 kB\nHugePages_Total:       0\nbad line\n");
        assert_eq!(m["MemTotal"], 16384 * 1024);
        assert_eq!(m["MemAvailable"], 8192 * 1024);
        assert_eq!(m["HugePages_Total"], 0);
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn stat_field_table() {
        let t = "cache 10\ninactive_file 5\ntotal_inactive_file 7\nfile 3\n";
        for (k, want) in [
            ("inactive_file", Some(5)),
            ("total_inactive_file", Some(7)),
            ("file", Some(3)),
            ("anon", None),
            ("cach", None),
        ] {
            assert_eq!(stat_field(t, k), want, "{k}");
        }
    }

    // Fixture numbers (see fixtures/signals/README): MemTotal 4096 MiB,
    // MemAvailable 3000 MiB; v1 root usage 1500 MiB, total_inactive_file 300 MiB;
    // v2 root anon 900 MiB + file 600 MiB, inactive_file 300 MiB; kubepods
    // usage 700 MiB, inactive 100 MiB, limit 1024 MiB (v2 memory.max 1 GiB).
    #[test]
    fn memory_available_table() {
        let table = [
            (
                CgroupVersion::V1,
                MemorySource::WorkingSet,
                4096 - (1500 - 300),
            ),
            (
                CgroupVersion::V2,
                MemorySource::WorkingSet,
                4096 - (900 + 600 - 300),
            ),
            (CgroupVersion::V1, MemorySource::Meminfo, 3000),
            (CgroupVersion::V2, MemorySource::Meminfo, 3000),
        ];
        for (v, src, want_mi) in table {
            let mut s = sources(v);
            s.memory_source = src;
            let (avail, cap) = s.read(Signal::MemoryAvailable).unwrap();
            assert_eq!(cap, 4096 * MI, "{v} {src:?}");
            assert_eq!(avail, want_mi * MI, "{v} {src:?}");
        }
    }

    #[test]
    fn allocatable_table() {
        for v in [CgroupVersion::V1, CgroupVersion::V2] {
            let mut s = sources(v);
            let (avail, cap) = s.read(Signal::AllocatableMemoryAvailable).unwrap();
            assert_eq!((avail, cap), ((1024 - 600) * MI, 1024 * MI), "{v}");
            s.allocatable_memory_bytes = Some(512 * MI);
            let (avail, cap) = s.read(Signal::AllocatableMemoryAvailable).unwrap();
            assert_eq!((avail, cap), (0, 512 * MI), "{v}: floored at 0");
            s.kubepods = None;
            assert!(matches!(
                s.read(Signal::AllocatableMemoryAvailable),
                Err(SignalError::NotConfigured { .. })
            ));
        }
    }

    #[test]
    fn pid_available_fixture() {
        let s = sources(CgroupVersion::V1);
        assert_eq!(s.read(Signal::PidAvailable).unwrap(), (32768 - 1234, 32768));
    }

    #[test]
    fn fs_signals_on_real_fs() {
        let s = sources(CgroupVersion::V1);
        for sig in [
            Signal::NodeFsAvailable,
            Signal::ImageFsAvailable,
            Signal::ContainerFsAvailable,
        ] {
            let (a, c) = s.read(sig).unwrap();
            assert!(c > 0 && a >= 0 && a <= c, "{sig}: {a} {c}");
        }
        let (free, total) = s.read(Signal::NodeFsInodesFree).unwrap();
        assert!(free <= total, "{free} {total}");
    }

    #[test]
    fn pod_stats_from_fixture() {
        let f = fixtures();
        let st = pod_stats(CgroupVersion::V1, &f.join("v1/kubepods/besteffort/podabc"));
        assert_eq!(
            st.memory_working_set_bytes,
            Some((200 - 20) as u64 * MI as u64)
        );
        assert_eq!(st.processes, Some(3)); // 2 in the container child + 1 in the pod
        let st = pod_stats(CgroupVersion::V2, &f.join("v2/kubepods/besteffort/podabc"));
        assert_eq!(
            st.memory_working_set_bytes,
            Some((200 - 20) as u64 * MI as u64)
        );
        assert_eq!(st.processes, Some(1));
        let st = pod_stats(CgroupVersion::V2, &f.join("v2/missing"));
        assert_eq!(st.memory_working_set_bytes, None);
        assert_eq!(st.processes, None);
    }

    #[test]
    fn pod_local_storage_on_a_real_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("kubelet");
        let logs = tmp.path().join("pods-logs");
        let vol = root.join("pods/u1/volumes/kubernetes.io~empty-dir/scratch");
        std::fs::create_dir_all(vol.join("sub")).unwrap();
        std::fs::write(vol.join("a"), vec![1u8; 64 * 1024]).unwrap();
        std::fs::write(vol.join("sub/b"), vec![1u8; 8 * 1024]).unwrap();
        std::fs::hard_link(vol.join("a"), vol.join("a-link")).unwrap();
        let secret = root.join("pods/u1/volumes/kubernetes.io~secret/tok");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("t"), vec![1u8; 64 * 1024]).unwrap();
        let c = logs.join("ns_p_u1/app");
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(c.join("0.log"), vec![1u8; 16 * 1024]).unwrap();
        let st = pod_local_storage(&root, &logs, "ns", "p", "u1").unwrap();
        assert_eq!(
            st.volumes.len(),
            1,
            "secrets are not local ephemeral storage"
        );
        let v = &st.volumes[0];
        assert_eq!((v.name.as_str(), v.own_mount), ("scratch", false));
        // scratch, sub, a (linked twice: once), sub/b
        assert_eq!(v.inodes, 4);
        assert!(v.bytes >= 72 * 1024, "{}", v.bytes);
        assert_eq!(st.container_logs.len(), 1);
        assert!(st.container_logs[0].1 >= 16 * 1024);
        let (lb, li) = st.logs.unwrap();
        assert!(lb >= 16 * 1024);
        assert_eq!(li, 3);
        // another pod: nothing
        let none = pod_local_storage(&root, &logs, "ns", "q", "u2").unwrap();
        assert_eq!(none, PodLocalStorage::default());
    }

    #[test]
    fn errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sources(CgroupVersion::V1);
        s.memory_root = dir.path().to_path_buf();
        let e = s.read(Signal::MemoryAvailable).unwrap_err().to_string();
        assert!(
            e.contains(&dir.path().join("memory.stat").display().to_string()),
            "{e}"
        );
        std::fs::write(dir.path().join("memory.stat"), "total_inactive_file 1\n").unwrap();
        std::fs::write(dir.path().join("memory.usage_in_bytes"), "lots\n").unwrap();
        let e = s.read(Signal::MemoryAvailable).unwrap_err().to_string();
        assert!(
            e.contains("memory.usage_in_bytes") && e.contains("lots"),
            "{e}"
        );
        std::fs::write(dir.path().join("memory.usage_in_bytes"), "100\n").unwrap();
        std::fs::write(dir.path().join("memory.stat"), "cache 1\n").unwrap();
        let e = s.read(Signal::MemoryAvailable).unwrap_err().to_string();
        assert!(e.contains("no total_inactive_file field"), "{e}");
        // observe collects errors and keeps going
        let (obs, errs) = s.observe(
            [Signal::MemoryAvailable, Signal::PidAvailable],
            Instant::now(),
        );
        assert_eq!(obs.len(), 1);
        assert_eq!(errs.len(), 1);
    }

    /// Kept-open reads: the whole file (longer than one read), a rewrite
    /// in place seen at the next read, a missing path an error naming it
    /// (and not kept), readable once it exists.
    #[test]
    fn kept_reads_follow_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("memory.stat");
        let long: String = (0..2000).map(|i| format!("key{i} {i}\n")).collect();
        assert!(long.len() > 8192);
        std::fs::write(&p, &long).unwrap();
        assert_eq!(read_kept(&p).unwrap(), long);
        std::fs::write(&p, "total_inactive_file 7\n").unwrap();
        assert_eq!(read_kept(&p).unwrap(), "total_inactive_file 7\n");
        let gone = dir.path().join("loadavg");
        let e = read_kept(&gone).unwrap_err().to_string();
        assert!(e.contains(&gone.display().to_string()), "{e}");
        std::fs::write(&gone, "0.00 0.01 0.05 1/123 4567\n").unwrap();
        assert_eq!(read_kept(&gone).unwrap(), "0.00 0.01 0.05 1/123 4567\n");
        KEPT.with(|k| assert_eq!(k.borrow().len(), 2));
    }

    #[test]
    fn v1_unlimited_is_none() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        assert_eq!(
            cgroup_memory_limit(CgroupVersion::V1, dir.path()).unwrap(),
            None
        );
        std::fs::write(dir.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(
            cgroup_memory_limit(CgroupVersion::V2, dir.path()).unwrap(),
            None
        );
        std::fs::write(dir.path().join("memory.max"), "1048576\n").unwrap();
        assert_eq!(
            cgroup_memory_limit(CgroupVersion::V2, dir.path()).unwrap(),
            Some(1 << 20)
        );
    }

    #[test]
    fn memory_source_parse() {
        assert_eq!(
            "meminfo".parse::<MemorySource>().unwrap(),
            MemorySource::Meminfo
        );
        assert_eq!(
            "working-set".parse::<MemorySource>().unwrap(),
            MemorySource::WorkingSet
        );
        assert!("free".parse::<MemorySource>().is_err());
    }
}
