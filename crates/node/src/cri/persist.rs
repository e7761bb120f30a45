//! The CRI status cache kept across restarts (`<stateDir>/cri-status-cache.json`).
//!
//! A restarted daemon would otherwise ask the runtime for every sandbox's
//! verbose status and every container's status before its first reconcile
//! (the bulk of its start-up). The file holds what [`StatusCache`] holds:
//! per sandbox id its status and cgroup parent (which never change for an
//! id), per container id its status's state and resources with the listed
//! state they were read at. It is versioned and names the runtime endpoint
//! it was taken from; a file that cannot be read, is of another version or
//! another endpoint is ignored whole (the caller logs one line) and the
//! first listing asks the runtime about everything, as without a file.
//! Ids the first listing does not list are dropped then (the cache is
//! pruned to the listed ids at every listing), so the file never holds
//! more than the node's live sandboxes and containers.
//!
//! Container statuses can change without a listing showing it (an in-place
//! resize while qosd was down): the daemon uses the restored ones for its
//! first reconcile only and asks about every container again right after
//! (see `crate::runtime::daemon`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::inventory::{lock, ContainerFacts, ResourcesOrigin, SandboxFacts, StatusCache};
use super::proto;

/// The file's name in the state directory.
pub(crate) const FILE_NAME: &str = "cri-status-cache.json";
/// The format written and the only one read.
pub(crate) const VERSION: u64 = 1;
/// A larger file is not read (110 pods take ~100 KiB).
const MAX_BYTES: u64 = 64 << 20;

/// Why a persisted cache was not used or not written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PersistError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is {size} bytes, more than the {MAX_BYTES} read")]
    TooLarge { path: PathBuf, size: u64 },
    #[error("{path} is not a status cache file: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path} has format version {found}, this qosd reads version {VERSION}")]
    Version { path: PathBuf, found: String },
    #[error("{path} was written for runtime endpoint {found:?}, not {expected:?}")]
    Endpoint {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("{path}: entry {id:?}: {reason}")]
    Entry {
        path: PathBuf,
        id: String,
        reason: String,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The state directory is not one only qosd's user can write to: a
    /// file there could have been planted or could be replaced.
    #[error("state directory {dir} is unsafe: {reason}")]
    UnsafeDir { dir: PathBuf, reason: String },
}

impl PersistError {
    /// The state directory cannot be trusted (the cache is then off).
    pub(crate) fn is_unsafe_dir(&self) -> bool {
        matches!(self, PersistError::UnsafeDir { .. })
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    version: u64,
    endpoint: String,
    sandboxes: BTreeMap<String, SandboxRecord>,
    containers: BTreeMap<String, ContainerRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SandboxRecord {
    /// `PodSandboxStatus`, protobuf, base64.
    status: String,
    cgroup_parent: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ContainerRecord {
    listed_state: i32,
    state: i32,
    /// `LinuxContainerResources`, protobuf, base64 (`None`: none reported).
    resources: Option<String>,
    origin: ResourcesOrigin,
}

fn b64(m: &impl prost::Message) -> String {
    base64::engine::general_purpose::STANDARD.encode(m.encode_to_vec())
}

fn unb64<M: prost::Message + Default>(path: &Path, id: &str, s: &str) -> Result<M, PersistError> {
    let entry = |reason: String| PersistError::Entry {
        path: path.to_path_buf(),
        id: id.to_string(),
        reason,
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| entry(format!("bad base64: {e}")))?;
    M::decode(bytes.as_slice()).map_err(|e| entry(format!("bad protobuf: {e}")))
}

impl StatusCache {
    /// The file's bytes for the current entries, taken from `endpoint`.
    pub(crate) fn to_file_bytes(&self, endpoint: &str) -> Vec<u8> {
        let sandboxes = lock(&self.sandboxes)
            .iter()
            .map(|(id, f)| {
                (
                    id.clone(),
                    SandboxRecord {
                        status: b64(&f.status),
                        cgroup_parent: f.cgroup_parent.clone(),
                    },
                )
            })
            .collect();
        let containers = lock(&self.containers)
            .iter()
            .map(|(id, f)| {
                (
                    id.clone(),
                    ContainerRecord {
                        listed_state: f.listed_state,
                        state: f.state,
                        resources: f.res.as_ref().map(b64),
                        origin: f.origin,
                    },
                )
            })
            .collect();
        let file = File {
            version: VERSION,
            endpoint: endpoint.to_string(),
            sandboxes,
            containers,
        };
        serde_json::to_vec(&file).expect("the status cache serializes")
    }

    /// Replace the entries with those of a file's `bytes` (read from
    /// `path`, for the errors) if it is of this version and `endpoint`;
    /// nothing changes on an error. Returns (sandboxes, containers) restored.
    pub(crate) fn restore(
        &self,
        path: &Path,
        bytes: &[u8],
        endpoint: &str,
    ) -> Result<(usize, usize), PersistError> {
        let parse = |source| PersistError::Parse {
            path: path.to_path_buf(),
            source,
        };
        // The usual file, at this version, straight into records (no
        // second, generic tree of a cache of megabytes); anything else
        // through the generic tree, for its exact error.
        if let Ok(file) = serde_json::from_slice::<File>(bytes) {
            if file.version == VERSION {
                return self.restore_file(path, file, endpoint);
            }
        }
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(parse)?;
        match value.get("version") {
            Some(v) if v.as_u64() == Some(VERSION) => {}
            found => {
                return Err(PersistError::Version {
                    path: path.to_path_buf(),
                    found: found.map_or_else(|| "(none)".to_string(), |v| v.to_string()),
                })
            }
        }
        let file: File = serde_json::from_value(value).map_err(parse)?;
        self.restore_file(path, file, endpoint)
    }

    /// [`Self::restore`] once the file is decoded.
    fn restore_file(
        &self,
        path: &Path,
        file: File,
        endpoint: &str,
    ) -> Result<(usize, usize), PersistError> {
        if file.endpoint != endpoint {
            return Err(PersistError::Endpoint {
                path: path.to_path_buf(),
                found: file.endpoint,
                expected: endpoint.to_string(),
            });
        }
        let mut sandboxes = std::collections::HashMap::new();
        for (id, r) in file.sandboxes {
            let status: proto::PodSandboxStatus = unb64(path, &id, &r.status)?;
            sandboxes.insert(
                id,
                SandboxFacts {
                    status,
                    cgroup_parent: r.cgroup_parent,
                },
            );
        }
        let mut containers = std::collections::HashMap::new();
        for (id, r) in file.containers {
            let res = match &r.resources {
                Some(s) => Some(unb64::<proto::LinuxContainerResources>(path, &id, s)?),
                None => None,
            };
            containers.insert(
                id,
                ContainerFacts {
                    listed_state: r.listed_state,
                    state: r.state,
                    res,
                    origin: r.origin,
                    unverified: false,
                },
            );
        }
        let counts = (sandboxes.len(), containers.len());
        *lock(&self.sandboxes) = sandboxes;
        *lock(&self.containers) = containers;
        self.changed();
        Ok(counts)
    }
}

/// Restore `cache` from the file at `path`: `Ok(None)` when there is none
/// (a first start), `Err` when it exists but is not usable (the cache is
/// left empty then).
pub(crate) fn load(
    path: &Path,
    endpoint: &str,
    cache: &StatusCache,
) -> Result<Option<(usize, usize)>, PersistError> {
    let read = |source| PersistError::Read {
        path: path.to_path_buf(),
        source,
    };
    // Regular files only, never through a symlink (qosd owns this file: a
    // link can only have been planted), never more than MAX_BYTES.
    use crate::sys::input::{read_bytes, InputError, Symlinks};
    let bytes = match read_bytes(path, MAX_BYTES, Symlinks::Refuse) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(InputError::TooLarge { .. }) => {
            return Err(PersistError::TooLarge {
                path: path.to_path_buf(),
                size: std::fs::symlink_metadata(path).map_or(MAX_BYTES + 1, |m| m.len()),
            })
        }
        Err(e) => return Err(read(e.into_io())),
    };
    cache.restore(path, &bytes, endpoint).map(Some)
}

/// Open the state directory `dir` and check that only this process's user
/// can write to it: owned by the effective user, not writable by group or
/// others. Returns the directory's descriptor, used for every later step so
/// a directory swapped after the check is never written.
pub(crate) fn open_state_dir(dir: &Path) -> Result<std::os::fd::OwnedFd, PersistError> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{fstat, Mode};
    let unsafe_dir = |reason: String| PersistError::UnsafeDir {
        dir: dir.to_path_buf(),
        reason,
    };
    let fd = open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| PersistError::Write {
        path: dir.to_path_buf(),
        source: e.into(),
    })?;
    let st = fstat(&fd).map_err(|e| PersistError::Write {
        path: dir.to_path_buf(),
        source: e.into(),
    })?;
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let euid = unsafe { libc::geteuid() };
    if st.st_uid != euid {
        return Err(unsafe_dir(format!(
            "owned by uid {}, not by qosd's uid {euid}",
            st.st_uid
        )));
    }
    let mode = st.st_mode as u32 & 0o7777;
    if mode & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "mode {mode:04o} lets group or others write to it (chmod go-w, e.g. 0700)"
        )));
    }
    Ok(fd)
}

/// A random suffix for a temporary file's name (getrandom(2); the clock
/// and PID mixed in if it fails).
fn random_suffix() -> String {
    let mut buf = [0u8; 12];
    // SAFETY: getrandom(2) writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()) as u64;
        buf[..8]
            .copy_from_slice(&(t ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes());
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// Write `bytes` to `path` atomically: a randomly named temporary file in
/// the same directory, created with `O_CREAT|O_EXCL|O_NOFOLLOW` (mode
/// 0600, so never an existing file or a planted symlink), flushed to disk,
/// then renamed over `path`. The directory is created (0700) when missing,
/// and refused unless only qosd's user can write to it
/// ([`open_state_dir`]).
pub(crate) fn save(path: &Path, bytes: &[u8]) -> Result<(), PersistError> {
    use nix::fcntl::{openat, renameat, OFlag};
    use nix::sys::stat::Mode;
    use nix::unistd::{unlinkat, UnlinkatFlags};
    use std::os::unix::fs::DirBuilderExt as _;
    let write = |source| PersistError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(name) = path.file_name() else {
        return Err(write(std::io::Error::other("not a file name")));
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(write)?;
    let dir_fd = open_state_dir(dir)?;
    let (tmp, file) = {
        let mut tries = 0;
        loop {
            let mut tmp = name.to_owned();
            tmp.push(format!(".tmp.{}", random_suffix()));
            match openat(
                &dir_fd,
                tmp.as_os_str(),
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            ) {
                Ok(fd) => break (tmp, std::fs::File::from(fd)),
                Err(nix::errno::Errno::EEXIST) if tries < 8 => tries += 1,
                Err(e) => return Err(write(e.into())),
            }
        }
    };
    let result = (|| {
        let mut f = file;
        f.write_all(bytes)?;
        f.sync_all()?;
        renameat(&dir_fd, tmp.as_os_str(), &dir_fd, name).map_err(std::io::Error::from)
    })();
    if result.is_err() {
        let _ = unlinkat(&dir_fd, tmp.as_os_str(), UnlinkatFlags::NoRemoveDir);
    }
    result.map_err(write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const EP: &str = "unix:///run/containerd/containerd.sock";

    fn sandbox(uid: &str) -> SandboxFacts {
        SandboxFacts {
            status: proto::PodSandboxStatus {
                id: format!("sb-{uid}"),
                metadata: Some(proto::PodSandboxMetadata {
                    name: format!("pod-{uid}"),
                    uid: uid.to_string(),
                    namespace: "default".into(),
                    attempt: 1,
                }),
                state: proto::PodSandboxState::SandboxReady as i32,
                created_at: 1_700_000_000_000_000_000,
                labels: HashMap::from([("io.kubernetes.pod.uid".into(), uid.to_string())]),
                annotations: HashMap::from([("a".into(), "b".into())]),
                ..Default::default()
            },
            cgroup_parent: Some(format!("/kubepods/burstable/pod{uid}")),
        }
    }

    fn container(shares: i64) -> ContainerFacts {
        ContainerFacts {
            listed_state: proto::ContainerState::ContainerRunning as i32,
            state: proto::ContainerState::ContainerRunning as i32,
            res: Some(proto::LinuxContainerResources {
                cpu_shares: shares,
                cpu_quota: 50_000,
                cpu_period: 100_000,
                memory_limit_in_bytes: 64 << 20,
                oom_score_adj: 999,
                cpuset_cpus: "0-1".into(),
                unified: HashMap::from([("memory.min".into(), "0".into())]),
                ..Default::default()
            }),
            origin: ResourcesOrigin::Status,
            unverified: false,
        }
    }

    fn filled() -> StatusCache {
        let c = StatusCache::default();
        lock(&c.sandboxes).insert("sb-a".into(), sandbox("a"));
        lock(&c.sandboxes).insert("sb-b".into(), sandbox("b"));
        lock(&c.containers).insert("ct-1".into(), container(512));
        let mut none = container(2);
        none.res = None;
        none.origin = ResourcesOrigin::None;
        lock(&c.containers).insert("ct-2".into(), none);
        c
    }

    fn same(a: &StatusCache, b: &StatusCache) -> bool {
        *lock(&a.sandboxes) == *lock(&b.sandboxes) && *lock(&a.containers) == *lock(&b.containers)
    }

    #[test]
    fn round_trip_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join(FILE_NAME);
        let c = filled();
        save(&path, &c.to_file_bytes(EP)).unwrap();
        let back = StatusCache::default();
        assert_eq!(load(&path, EP, &back).unwrap(), Some((2, 2)));
        assert!(same(&c, &back));
        // No temporary file left beside it, and only the owner reads it.
        use std::os::unix::fs::PermissionsExt as _;
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Overwriting replaces the whole content.
        let smaller = StatusCache::default();
        lock(&smaller.sandboxes).insert("sb-c".into(), sandbox("c"));
        save(&path, &smaller.to_file_bytes(EP)).unwrap();
        let back = StatusCache::default();
        assert_eq!(load(&path, EP, &back).unwrap(), Some((1, 0)));
        assert!(same(&smaller, &back));
    }

    #[test]
    fn no_file_is_a_first_start() {
        let dir = tempfile::tempdir().unwrap();
        let c = StatusCache::default();
        assert_eq!(load(&dir.path().join(FILE_NAME), EP, &c).unwrap(), None);
        assert_eq!(c.len(), (0, 0));
    }

    #[test]
    fn unusable_files_are_refused_whole_and_change_nothing() {
        let p = Path::new("/x/cri-status-cache.json");
        let good = filled().to_file_bytes(EP);
        let text = String::from_utf8(good.clone()).unwrap();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("empty", Vec::new(), "not a status cache file"),
            (
                "truncated",
                good[..good.len() / 2].to_vec(),
                "not a status cache file",
            ),
            (
                "garbage",
                b"\x00\xffnot json".to_vec(),
                "not a status cache file",
            ),
            (
                "other version",
                text.replacen("\"version\":1", "\"version\":2", 1)
                    .into_bytes(),
                "format version 2",
            ),
            (
                "no version",
                text.replacen("\"version\":1,", "", 1).into_bytes(),
                "format version (none)",
            ),
            (
                "bad base64",
                {
                    let mut v: serde_json::Value = serde_json::from_slice(&good).unwrap();
                    v["sandboxes"]["sb-a"]["status"] = "%%%".into();
                    serde_json::to_vec(&v).unwrap()
                },
                "entry \"sb-a\": bad base64",
            ),
            (
                "bad protobuf",
                {
                    let mut v: serde_json::Value = serde_json::from_slice(&good).unwrap();
                    v["containers"]["ct-1"]["resources"] = "/////w==".into();
                    serde_json::to_vec(&v).unwrap()
                },
                "entry \"ct-1\": bad protobuf",
            ),
            (
                "unknown field",
                text.replacen("\"version\":1,", "\"version\":1,\"x\":0,", 1)
                    .into_bytes(),
                "not a status cache file",
            ),
        ];
        for (what, bytes, want) in cases {
            let c = StatusCache::default();
            lock(&c.sandboxes).insert("kept".into(), sandbox("k"));
            let e = c.restore(p, &bytes, EP).expect_err(what).to_string();
            assert!(e.contains(want), "{what}: {e}");
            assert!(e.contains("/x/cri-status-cache.json"), "{what}: {e}");
            assert_eq!(c.len(), (1, 0), "{what}: entries changed");
        }
    }

    #[test]
    fn another_endpoints_file_is_refused() {
        let bytes = filled().to_file_bytes("unix:///run/crio/crio.sock");
        let c = StatusCache::default();
        let e = c
            .restore(Path::new("/s/f"), &bytes, EP)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unix:///run/crio/crio.sock") && e.contains(EP),
            "{e}"
        );
        assert_eq!(c.len(), (0, 0));
    }

    #[test]
    fn stale_ids_are_dropped_at_the_first_listing() {
        let c = StatusCache::default();
        c.restore(Path::new("/s/f"), &filled().to_file_bytes(EP), EP)
            .unwrap();
        let g = c.generation();
        let listed_sb = vec![proto::PodSandbox {
            id: "sb-b".into(),
            ..Default::default()
        }];
        let listed_ct = vec![proto::Container {
            id: "ct-1".into(),
            pod_sandbox_id: "sb-b".into(),
            ..Default::default()
        }];
        c.retain(&listed_sb, &listed_ct);
        assert_eq!(c.len(), (1, 1));
        assert!(lock(&c.sandboxes).contains_key("sb-b"));
        assert!(lock(&c.containers).contains_key("ct-1"));
        assert!(c.generation() > g, "a pruned cache is written again");
        let g = c.generation();
        c.retain(&listed_sb, &listed_ct);
        assert_eq!(c.generation(), g, "nothing pruned, nothing to write");
    }

    #[test]
    fn an_oversized_file_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(MAX_BYTES + 1).unwrap();
        let e = load(&path, EP, &StatusCache::default()).unwrap_err();
        assert!(matches!(e, PersistError::TooLarge { .. }), "{e}");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        save(&path, b"old").unwrap();
        // The rename target is a non-empty directory: the rename fails.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir_all(blocked.join("x")).unwrap();
        let e = save(&blocked, b"new").unwrap_err();
        assert!(e.to_string().contains("blocked"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains(".tmp."))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_symlink_at_the_old_temporary_name_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let path = state.join(FILE_NAME);
        // The predictable names: `<file>.tmp.<pid>` and a few neighbours.
        let pid = std::process::id();
        for p in [pid, pid + 1, pid.saturating_sub(1)] {
            std::os::unix::fs::symlink(&victim, state.join(format!("{FILE_NAME}.tmp.{p}")))
                .unwrap();
        }
        save(&path, b"cache").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&path).unwrap(), b"cache");
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Two saves use two different temporary names (random, not the PID):
        // nothing is left behind but the planted links.
        save(&path, b"cache 2").unwrap();
        let left: Vec<_> = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains(".tmp.") && !n.ends_with(&format!(".tmp.{pid}")))
            .filter(|n| {
                !n.ends_with(&format!(".tmp.{}", pid + 1))
                    && !n.ends_with(&format!(".tmp.{}", pid.saturating_sub(1)))
            })
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // A symlink at the file itself is replaced, never written through.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        save(&path, b"cache 3").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&path).unwrap(), b"cache 3");
    }

    #[test]
    fn a_state_dir_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o770, 0o757, 0o777, 0o1777] {
            let state = dir.path().join(format!("state-{mode:o}"));
            std::fs::create_dir(&state).unwrap();
            std::fs::set_permissions(&state, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = save(&state.join(FILE_NAME), b"cache").unwrap_err();
            assert!(e.is_unsafe_dir(), "{mode:o}: {e}");
            assert!(e.to_string().contains("group or others"), "{e}");
            assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0, "{mode:o}");
        }
        // 0700 and 0755 are fine.
        for mode in [0o700, 0o755] {
            let state = dir.path().join(format!("ok-{mode:o}"));
            std::fs::create_dir(&state).unwrap();
            std::fs::set_permissions(&state, std::fs::Permissions::from_mode(mode)).unwrap();
            save(&state.join(FILE_NAME), b"cache").unwrap();
        }
    }

    #[test]
    fn a_state_dir_of_another_user_is_refused() {
        if unsafe { libc::geteuid() } != 0 {
            // Only root can hand a directory to another user; the ownership
            // check is the same code path as the mode check above.
            let dir = tempfile::tempdir().unwrap();
            assert!(open_state_dir(dir.path()).is_ok());
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::chown(&state, Some(65534), None).unwrap();
        let e = save(&state.join(FILE_NAME), b"cache").unwrap_err();
        assert!(e.is_unsafe_dir(), "{e}");
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
    }
}
