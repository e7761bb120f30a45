//! The project's own thin, typed cgroupfs layer.
//!
//! Every function takes absolute paths (so tests can point them at a temp
//! dir) and every error carries the path, and the value for writes.
//!
//! Rules this module enforces:
//! * interface files are opened for writing **without** `O_CREAT`: a missing
//!   file is an error, never a new regular file (on cgroup v2 a missing file in
//!   an existing cgroup means the controller is not enabled in the parent's
//!   `cgroup.subtree_control`; with `O_CREAT` the kernel would answer with a
//!   misleading `EACCES`);
//! * directories are created and removed only below an allowed base
//!   (the kubepods tree); removal is leaf first and never of a cgroup that
//!   still holds processes;
//! * every write, creation and removal reaches its directory by the one
//!   walk ([`crate::sys::cgroup_dir`]) below that guard: no symlink is
//!   followed and no directory on another filesystem is entered.

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::sys::cgroup_dir::{CgroupDir, WalkError};

/// Errors of cgroupfs operations. Every variant names the path.
#[derive(Debug, thiserror::Error)]
pub enum CgroupFsError {
    /// An interface file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A write failed for a reason not told apart below.
    #[error("cannot write {value:?} to {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The value written.
        value: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The write needs a controller the parent does not delegate (v2).
    #[error(
        "cannot write {value:?} to {path}: controller {controller} not enabled in parent's \
         cgroup.subtree_control"
    )]
    ControllerNotEnabled {
        /// The file.
        path: PathBuf,
        /// The value written.
        value: String,
        /// The controller the file belongs to.
        controller: String,
    },
    /// The cgroup exists but has no such interface file.
    #[error("cannot write {value:?} to {path}: no such interface file in this cgroup")]
    NoSuchFile {
        /// The file.
        path: PathBuf,
        /// The value written.
        value: String,
    },
    /// The cgroup directory does not exist (any more).
    #[error("cannot write {value:?} to {path}: the cgroup does not exist (vanished?)")]
    CgroupGone {
        /// The file.
        path: PathBuf,
        /// The value written.
        value: String,
    },
    /// `EBUSY`: typically a memory limit below the current usage.
    #[error(
        "cannot write {value:?} to {path}: device or resource busy (limit below current usage?)"
    )]
    Busy {
        /// The file.
        path: PathBuf,
        /// The value written.
        value: String,
    },
    /// The path is not under any allowed cgroup base.
    #[error("refusing to touch {path}: outside the allowed cgroup base {base}")]
    OutsideBase {
        /// The path refused.
        path: PathBuf,
        /// The allowed base(s), as text.
        base: String,
    },
    /// A component of the path inside the cgroup tree is a symlink.
    #[error("refusing to touch {path}: {link} is a symlink inside the cgroup tree")]
    Symlink {
        /// The path refused.
        path: PathBuf,
        /// The symlink found on the way.
        link: PathBuf,
    },
    /// A cgroup directory could not be created.
    #[error("cannot create cgroup {path}: {source}")]
    Mkdir {
        /// The cgroup directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A cgroup was not removed because processes are still in it.
    #[error("refusing to remove cgroup {path}: it still has processes {pids:?}")]
    NotEmpty {
        /// The cgroup directory.
        path: PathBuf,
        /// The pids found in it.
        pids: Vec<i32>,
    },
    /// A cgroup directory could not be removed.
    #[error("cannot remove cgroup {path}: {source}")]
    Rmdir {
        /// The cgroup directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A controller is not in the cgroup's `cgroup.controllers` (v2).
    #[error(
        "controller {controller} is not available in {path} (cgroup.controllers: {available:?})"
    )]
    ControllerUnavailable {
        /// The cgroup directory.
        path: PathBuf,
        /// The controller asked for.
        controller: String,
        /// The content of `cgroup.controllers`.
        available: String,
    },
    /// A process list held something that is not a valid pid.
    #[error("bad pid {value:?} in {path}")]
    BadPid {
        /// The process list file.
        path: PathBuf,
        /// The offending entry.
        value: String,
    },
    /// A process of the cgroup could not be signalled.
    #[error("cannot kill pid {pid} of {path}: {source}")]
    Kill {
        /// The cgroup directory.
        path: PathBuf,
        /// The process.
        pid: i32,
        /// The error of `kill(2)`.
        source: std::io::Error,
    },
    /// The walk to the cgroup refused a component (symlink, not a
    /// directory, another filesystem) or failed.
    #[error(transparent)]
    Walk(#[from] WalkError),
    /// Processes were still in the cgroup after the kill's wait.
    #[error("processes {pids:?} still in {path} after {waited:?}")]
    KillTimeout {
        /// The cgroup directory.
        path: PathBuf,
        /// The pids left.
        pids: Vec<i32>,
        /// How long it waited.
        waited: Duration,
    },
}

impl CgroupFsError {}

pub(crate) type Result<T> = std::result::Result<T, CgroupFsError>;

/// Read an interface file, trimmed of surrounding whitespace.
pub fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| CgroupFsError::Read {
            path: path.to_path_buf(),
            source,
        })
}

/// [`read`] for a single-value interface file (`cpu.shares`,
/// `memory.max`…): one `open`, one `read`, one `close` where
/// `read_to_string` adds an `fstat` and a second `read` for the end of
/// file. A read that fills the buffer goes on to the end.
pub(crate) fn read_value(path: &Path) -> Result<String> {
    use std::io::Read;
    let err = |source| CgroupFsError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(err)?;
    let mut buf = [0u8; 256];
    let n = f.read(&mut buf).map_err(err)?;
    let mut bytes = buf[..n].to_vec();
    if n == buf.len() {
        f.read_to_end(&mut bytes).map_err(err)?;
    }
    String::from_utf8(bytes)
        .map(|s| s.trim().to_string())
        .map_err(|e| err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

/// The controller an interface file belongs to (`memory.max` → `memory`),
/// `None` for core files (`cgroup.*`) and files without a dot.
pub(crate) fn controller_of(file: &Path) -> Option<&str> {
    let name = file.file_name()?.to_str()?;
    let (ctrl, _) = name.split_once('.')?;
    (ctrl != "cgroup" && !ctrl.is_empty()).then_some(ctrl)
}

/// Whether `dir` is a cgroup v2 directory (has `cgroup.controllers`).
pub fn is_v2_dir(dir: &Path) -> bool {
    dir.join("cgroup.controllers").is_file()
}

/// Write `value` to an existing interface file (never creates it).
///
/// Maps the kernel's answers to typed errors: a missing file in an existing
/// v2 cgroup → [`CgroupFsError::ControllerNotEnabled`]; in an existing v1
/// cgroup → [`CgroupFsError::NoSuchFile`]; a missing directory →
/// [`CgroupFsError::CgroupGone`]; `EBUSY` → [`CgroupFsError::Busy`].
pub fn write(path: &Path, value: &str) -> Result<()> {
    // O_TRUNC as runc does (harmless on cgroupfs; keeps fake trees exact);
    // O_NOFOLLOW: an interface file is never a symlink (one swapped in
    // after the base check is refused, ELOOP).
    use std::os::unix::fs::OpenOptionsExt as _;
    let res = OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()));
    match res {
        Ok(()) => Ok(()),
        Err(source) => Err(classify_write_error(path, value, source)),
    }
}

/// The typed error for an interface file that is absent (`ENOENT`): the
/// same classification [`write`] uses (controller not enabled on v2, no such
/// file on v1, cgroup gone when the directory is missing). `value` is the
/// value that was to be written.
pub(crate) fn missing_file_error(path: &Path, value: &str) -> CgroupFsError {
    classify_write_error(path, value, std::io::Error::from(ErrorKind::NotFound))
}

fn classify_write_error(path: &Path, value: &str, source: std::io::Error) -> CgroupFsError {
    let p = path.to_path_buf();
    let v = value.to_string();
    if source.kind() == ErrorKind::NotFound {
        // ENOENT from open(2) without O_CREAT: the file or its directory is missing.
        let dir = path.parent().unwrap_or(Path::new("/"));
        if !dir.is_dir() {
            return CgroupFsError::CgroupGone { path: p, value: v };
        }
        if is_v2_dir(dir) {
            if let Some(c) = controller_of(path) {
                return CgroupFsError::ControllerNotEnabled {
                    path: p,
                    value: v,
                    controller: c.to_string(),
                };
            }
        }
        return CgroupFsError::NoSuchFile { path: p, value: v };
    }
    if source.raw_os_error() == Some(libc::EBUSY) {
        return CgroupFsError::Busy { path: p, value: v };
    }
    if source.raw_os_error() == Some(libc::ENODEV) {
        // Writing into a cgroup being removed.
        return CgroupFsError::CgroupGone { path: p, value: v };
    }
    CgroupFsError::Write {
        path: p,
        value: v,
        source,
    }
}

/// Lexically normalise an absolute path (drop `.`); `None` when it contains
/// `..` or is relative: such paths are never accepted.
fn normalise(path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::Normal(s) => out.push(s),
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Whether `path` is `base` or below it (lexically; `..` is never allowed).
pub(crate) fn is_within(path: &Path, base: &Path) -> bool {
    match (normalise(path), normalise(base)) {
        (Some(p), Some(b)) => p.starts_with(&b),
        _ => false,
    }
}

/// The first base of `bases` that contains `path` (lexically).
pub(crate) fn base_of<'a>(path: &Path, bases: &'a [PathBuf]) -> Option<&'a PathBuf> {
    bases.iter().find(|b| is_within(path, b))
}

/// Canonicalise the longest existing ancestor of `p` (resolving symlinks such
/// as `/sys/fs/cgroup/cpu` → `cpu,cpuacct`) and re-append the rest.
pub(crate) fn resolve_existing(p: &Path) -> Option<PathBuf> {
    let p = normalise(p)?;
    let mut rest = Vec::new();
    let mut cur = p.as_path();
    loop {
        if let Ok(c) = std::fs::canonicalize(cur) {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return Some(out);
        }
        rest.push(cur.file_name()?.to_os_string());
        cur = cur.parent()?;
    }
}

/// `path` and the base containing it, in one consistent form: lexically when
/// `path` is written below a base as given; else both with symlinks resolved
/// (a plan using `/sys/fs/cgroup/cpu/...` against a base under the real mount
/// `/sys/fs/cgroup/cpu,cpuacct/...`, or the other way round). The resolved
/// check is also the stricter one: a symlink out of the base is refused.
///
/// Below the base no component may be a symlink (cgroupfs has none; one in
/// the tree can only have been planted): such a path matches no base.
pub(crate) fn match_base(path: &Path, bases: &[PathBuf]) -> Option<(PathBuf, PathBuf)> {
    let (p, b) = match_base_lexical_or_resolved(path, bases)?;
    symlink_below(&p, &b).is_none().then_some((p, b))
}

fn match_base_lexical_or_resolved(path: &Path, bases: &[PathBuf]) -> Option<(PathBuf, PathBuf)> {
    if let Some(b) = base_of(path, bases) {
        return Some((normalise(path)?, normalise(b)?));
    }
    let rp = resolve_existing(path)?;
    bases.iter().find_map(|b| {
        let rb = resolve_existing(b)?;
        rp.starts_with(&rb).then(|| (rp.clone(), rb))
    })
}

/// The first component of `path` below `base` that is a symlink (walked
/// from the base with `lstat`, stopping at the first component that does
/// not exist). The base itself may be reached through symlinks above it
/// (`cpu` → `cpu,cpuacct`).
fn symlink_below(path: &Path, base: &Path) -> Option<PathBuf> {
    let rest = path.strip_prefix(base).ok()?;
    let mut cur = base.to_path_buf();
    for c in rest.components() {
        cur.push(c);
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => return Some(cur),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// The one guard of every cgroup writer, creator and remover: `path` must
/// be at or below one of `bases` (lexically, or with symlinks resolved —
/// see [`match_base`]) with no symlink below the base; else
/// [`CgroupFsError::Symlink`] or [`CgroupFsError::OutsideBase`].
pub(crate) fn check_within(path: &Path, bases: &[PathBuf]) -> Result<()> {
    match match_base(path, bases) {
        Some(_) => Ok(()),
        None => Err(outside(path, bases)),
    }
}

pub(crate) fn outside(path: &Path, bases: &[PathBuf]) -> CgroupFsError {
    if let Some((p, b)) = match_base_lexical_or_resolved(path, bases) {
        if let Some(link) = symlink_below(&p, &b) {
            return CgroupFsError::Symlink {
                path: path.to_path_buf(),
                link,
            };
        }
    }
    CgroupFsError::OutsideBase {
        path: path.to_path_buf(),
        base: bases
            .iter()
            .map(|b| b.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The root a walk to a cgroup below `base` starts at: the base's parent
/// (the base itself is walked, so a symlinked or foreign base is refused).
pub(crate) fn walk_root(base: &Path) -> &Path {
    base.parent().unwrap_or(base)
}

/// Walk to the cgroup directory `dir` below one of `bases` (after the
/// never-outside-the-base guard, [`match_base`]).
pub(crate) fn open_dir(dir: &Path, bases: &[PathBuf]) -> Result<CgroupDir> {
    let (dir_n, base) = match_base(dir, bases).ok_or_else(|| outside(dir, bases))?;
    Ok(CgroupDir::open(walk_root(&base), &dir_n)?)
}

/// [`write()`] through the walk: `file`'s directory is reached from its base
/// without following symlinks or leaving the hierarchy's filesystem, then
/// the file is opened relative to it. A missing directory is
/// [`CgroupFsError::CgroupGone`].
pub fn write_walked(file: &Path, value: &str, bases: &[PathBuf]) -> Result<()> {
    let (Some(dir), Some(name)) = (file.parent(), file.file_name().and_then(|n| n.to_str())) else {
        return Err(outside(file, bases));
    };
    let d = match open_dir(dir, bases) {
        Ok(d) => d,
        Err(CgroupFsError::Walk(WalkError::Missing { .. })) => {
            return Err(CgroupFsError::CgroupGone {
                path: file.to_path_buf(),
                value: value.to_string(),
            })
        }
        Err(e) => return Err(e),
    };
    d.write(name, value)
        .map_err(|source| classify_write_error(file, value, source))
}

/// `mkdir -p` of a cgroup directory, only when `dir` is at or below one of
/// `bases`. Only the part at or below that base is created (`mkdirat`
/// along the walk, see [`crate::sys::cgroup_dir`]): the base's parent must
/// exist. Returns the directories created, top first.
pub fn mkdir_cgroup(dir: &Path, bases: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let (dir, base) = match_base(dir, bases).ok_or_else(|| outside(dir, bases))?;
    let root = walk_root(&base);
    let rest =
        crate::sys::cgroup_dir::components_below(root, &dir).ok_or_else(|| outside(&dir, bases))?;
    let mut cur = CgroupDir::open_root(root).map_err(|e| match e {
        WalkError::Missing { path } => CgroupFsError::Mkdir {
            path: base.clone(),
            source: std::io::Error::new(
                ErrorKind::NotFound,
                format!(
                    "parent {} of the allowed base does not exist",
                    path.display()
                ),
            ),
        },
        e => e.into(),
    })?;
    let mut created = Vec::new();
    for name in &rest {
        let path = cur.path().join(name);
        if cur.mkdir(name).map_err(|source| CgroupFsError::Mkdir {
            path: path.clone(),
            source,
        })? {
            created.push(path);
        }
        cur = cur.child(name)?;
    }
    Ok(created)
}

/// Pids listed in `dir/cgroup.procs`. A missing cgroup has no pids.
pub fn list_pids(dir: &Path) -> Result<Vec<i32>> {
    let path = dir.join("cgroup.procs");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound && !dir.exists() => return Ok(Vec::new()),
        Err(source) => return Err(CgroupFsError::Read { path, source }),
    };
    text.split_whitespace()
        .map(|s| {
            s.parse::<i32>().map_err(|_| CgroupFsError::BadPid {
                path: path.clone(),
                value: s.to_string(),
            })
        })
        .collect()
}

/// Child cgroup directories of `dir` (sorted). A missing dir has none.
pub(crate) fn child_cgroups(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(CgroupFsError::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|source| CgroupFsError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let ft = ent.file_type().map_err(|source| CgroupFsError::Read {
            path: ent.path(),
            source,
        })?;
        if ft.is_dir() {
            out.push(ent.path());
        }
    }
    out.sort();
    Ok(out)
}

/// `dir` and all cgroups below it, leaves first (post-order).
pub fn walk_leaf_first(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    fn rec(d: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for c in child_cgroups(d)? {
            rec(&c, out)?;
        }
        out.push(d.to_path_buf());
        Ok(())
    }
    if dir.is_dir() {
        rec(dir, &mut out)?;
    }
    Ok(out)
}

/// Whether a file name looks like a cgroup interface file.
fn is_interface_file_name(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "cgroup",
        "cpu",
        "cpuacct",
        "cpuset",
        "memory",
        "pids",
        "io",
        "hugetlb",
        "blkio",
        "devices",
        "freezer",
        "net_cls",
        "net_prio",
        "perf_event",
        "rdma",
        "misc",
    ];
    matches!(name, "tasks" | "notify_on_release" | "release_agent")
        || name
            .split_once('.')
            .is_some_and(|(p, _)| PREFIXES.contains(&p))
}

/// Fake trees only: remove the regular files of `dir`, which must all look
/// like cgroup interface files (anything else: refuse, it is not a cgroup).
fn remove_fake_files(dir: &CgroupDir) -> Result<()> {
    let err = |path: PathBuf, source| CgroupFsError::Rmdir { path, source };
    let ents = dir
        .entries()
        .map_err(|e| err(dir.path().to_path_buf(), e))?;
    for (name, is_dir, is_file) in &ents {
        let interface = *is_file && is_interface_file_name(&name.to_string_lossy());
        if !(*is_dir || interface) {
            return Err(err(
                dir.path().join(name),
                std::io::Error::other("not a cgroup interface file; refusing to remove"),
            ));
        }
    }
    for (name, _, is_file) in ents {
        if is_file {
            dir.unlink(&name)
                .map_err(|e| err(dir.path().join(&name), e))?;
        }
    }
    Ok(())
}

/// Pids in the `cgroup.procs` of a walked cgroup.
fn walked_pids(dir: &CgroupDir) -> Result<Vec<i32>> {
    let path = dir.path().join("cgroup.procs");
    let text = dir
        .read("cgroup.procs")
        .map_err(|source| CgroupFsError::Read {
            path: path.clone(),
            source,
        })?;
    text.split_whitespace()
        .map(|s| {
            s.parse::<i32>().map_err(|_| CgroupFsError::BadPid {
                path: path.clone(),
                value: s.to_string(),
            })
        })
        .collect()
}

/// `dir`'s subtree as walked (parent index, directory), parents first.
fn walked_tree(top: CgroupDir) -> Result<Vec<(Option<usize>, CgroupDir)>> {
    let mut out = vec![(None, top)];
    let mut i = 0;
    while i < out.len() {
        for c in out[i].1.children()? {
            out.push((Some(i), c));
        }
        i += 1;
    }
    Ok(out)
}

/// Remove `dir` and every cgroup below it, leaf first, if none of them holds
/// a process. Nothing is removed when any does (the check covers the whole
/// tree before the first rmdir). Returns the removed dirs in removal order.
///
/// Every directory is reached by the walk (a symlink or a foreign
/// filesystem anywhere in the tree refuses the whole removal) and removed
/// with `unlinkat(AT_REMOVEDIR)` relative to its walked parent. On a real
/// cgroupfs `rmdir` removes the interface files with the dir; on a fixture
/// tree (regular files) those files are removed first, as the kernel would.
pub(crate) fn remove_cgroup_tree_if_empty(dir: &Path, bases: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let (dir_n, base) = match_base(dir, bases).ok_or_else(|| outside(dir, bases))?;
    let (Some(parent), Some(name)) = (dir_n.parent(), dir_n.file_name()) else {
        return Err(outside(dir, bases));
    };
    if !dir_n.starts_with(&base) || dir_n == base {
        // never the base itself
        return Err(outside(dir, bases));
    }
    let parent = CgroupDir::open(walk_root(&base), parent)?;
    let top = match parent.child(name) {
        Ok(d) => d,
        Err(WalkError::Missing { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let tree = walked_tree(top)?;
    for (_, d) in &tree {
        let pids = walked_pids(d)?;
        if !pids.is_empty() {
            return Err(CgroupFsError::NotEmpty {
                path: d.path().to_path_buf(),
                pids,
            });
        }
    }
    let mut removed = Vec::new();
    for (p, d) in tree.iter().rev() {
        let holder = match p {
            Some(pi) => &tree[*pi].1,
            None => &parent,
        };
        remove_walked(holder, d)?;
        removed.push(d.path().to_path_buf());
    }
    Ok(removed)
}

/// Remove the walked cgroup `d`, a child of `holder`. Gone already is fine.
fn remove_walked(holder: &CgroupDir, d: &CgroupDir) -> Result<()> {
    let name = d.path().file_name().unwrap_or_default();
    let rmdir_err = |source| CgroupFsError::Rmdir {
        path: d.path().to_path_buf(),
        source,
    };
    match holder.rmdir(name) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(_) if !d.is_cgroupfs() => {
            remove_fake_files(d)?;
            holder.rmdir(name).map_err(rmdir_err)
        }
        Err(source) => Err(rmdir_err(source)),
    }
}

/// cgroup v2: make `controllers` available in `to` by adding them to
/// `cgroup.subtree_control` of every directory from `from` down to the parent
/// of `to` (both must be on one path; `from` is typically the parent of the
/// kubepods base). With `include_to`, `to`'s own subtree_control too (for
/// cgroups that get children). Only missing controllers are written, never
/// removed. Returns the (file, value) pairs written.
pub(crate) fn enable_controllers_v2(
    from: &Path,
    to: &Path,
    controllers: &[&str],
    include_to: bool,
) -> Result<Vec<(PathBuf, String)>> {
    let (Some(from_n), Some(to_n)) = (normalise(from), normalise(to)) else {
        return Err(outside(to, &[from.to_path_buf()]));
    };
    if !to_n.starts_with(&from_n) {
        return Err(outside(to, &[from.to_path_buf()]));
    }
    let mut dirs = Vec::new();
    let mut cur = if include_to {
        Some(to_n.as_path())
    } else {
        to_n.parent()
    };
    while let Some(d) = cur {
        if !d.starts_with(&from_n) {
            break;
        }
        dirs.push(d.to_path_buf());
        if d == from_n {
            break;
        }
        cur = d.parent();
    }
    dirs.reverse();
    let mut written = Vec::new();
    for d in dirs {
        let sc_path = d.join("cgroup.subtree_control");
        let enabled = read(&sc_path)?;
        let enabled: Vec<&str> = enabled.split_whitespace().collect();
        let missing: Vec<&str> = controllers
            .iter()
            .copied()
            .filter(|c| !enabled.contains(c))
            .collect();
        if missing.is_empty() {
            continue;
        }
        let avail_s = read(&d.join("cgroup.controllers"))?;
        let avail: Vec<&str> = avail_s.split_whitespace().collect();
        if let Some(c) = missing.iter().find(|c| !avail.contains(c)) {
            return Err(CgroupFsError::ControllerUnavailable {
                path: d.clone(),
                controller: c.to_string(),
                available: avail_s.clone(),
            });
        }
        let value = missing
            .iter()
            .map(|c| format!("+{c}"))
            .collect::<Vec<_>>()
            .join(" ");
        CgroupDir::open(&from_n, &d)?
            .write("cgroup.subtree_control", &value)
            .map_err(|source| classify_write_error(&sc_path, &value, source))?;
        written.push((sc_path, value));
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn touch(p: &Path, content: &str) {
        fs::write(p, content).unwrap();
    }

    #[test]
    fn read_trims_and_reports_path() {
        let t = tempfile::tempdir().unwrap();
        touch(&t.path().join("cpu.shares"), " 1024\n");
        assert_eq!(read(&t.path().join("cpu.shares")).unwrap(), "1024");
        let e = read(&t.path().join("nope")).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }

    #[test]
    fn write_never_creates() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("cpu.shares");
        let e = write(&f, "2").unwrap_err();
        assert!(matches!(e, CgroupFsError::NoSuchFile { .. }), "{e:?}");
        assert!(!f.exists());
        touch(&f, "1024\n");
        write(&f, "2").unwrap();
        assert_eq!(fs::read_to_string(&f).unwrap(), "2");
    }

    #[test]
    fn write_v2_missing_controller() {
        let t = tempfile::tempdir().unwrap();
        touch(&t.path().join("cgroup.controllers"), "cpu pids\n");
        let e = write(&t.path().join("memory.max"), "100").unwrap_err();
        match &e {
            CgroupFsError::ControllerNotEnabled {
                controller, value, ..
            } => {
                assert_eq!(controller, "memory");
                assert_eq!(value, "100");
            }
            other => panic!("{other:?}"),
        }
        let msg = e.to_string();
        assert!(
            msg.contains("controller memory not enabled in parent's cgroup.subtree_control"),
            "{msg}"
        );
        assert!(msg.contains("memory.max"), "{msg}");
    }

    #[test]
    fn write_gone_cgroup() {
        let t = tempfile::tempdir().unwrap();
        let e = write(&t.path().join("gone/cpu.shares"), "2").unwrap_err();
        assert!(matches!(e, CgroupFsError::CgroupGone { .. }), "{e:?}");
    }

    #[test]
    fn controller_names() {
        let cases = [
            ("a/memory.max", Some("memory")),
            ("a/cpu.cfs_quota_us", Some("cpu")),
            ("a/cgroup.procs", None),
            ("a/tasks", None),
            ("a/hugetlb.2MB.limit_in_bytes", Some("hugetlb")),
        ];
        for (p, want) in cases {
            assert_eq!(controller_of(Path::new(p)), want, "{p}");
        }
    }

    #[test]
    fn within_base() {
        let b = Path::new("/sys/fs/cgroup/kubepods");
        assert!(is_within(Path::new("/sys/fs/cgroup/kubepods"), b));
        assert!(is_within(Path::new("/sys/fs/cgroup/kubepods/./pod1"), b));
        assert!(!is_within(Path::new("/sys/fs/cgroup/kubepods/../x"), b));
        assert!(!is_within(Path::new("/sys/fs/cgroup/kubepods2"), b));
        assert!(!is_within(Path::new("/sys/fs/cgroup"), b));
        assert!(!is_within(Path::new("kubepods"), b));
    }

    #[test]
    fn mkdir_only_below_base() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("kubepods");
        let bases = vec![base.clone()];
        let created = mkdir_cgroup(&base.join("burstable/pod1"), &bases).unwrap();
        assert_eq!(
            created,
            vec![
                base.clone(),
                base.join("burstable"),
                base.join("burstable/pod1")
            ]
        );
        assert!(mkdir_cgroup(&base.join("burstable/pod1"), &bases)
            .unwrap()
            .is_empty());
        let e = mkdir_cgroup(&t.path().join("other"), &bases).unwrap_err();
        assert!(matches!(e, CgroupFsError::OutsideBase { .. }));
        assert!(!t.path().join("other").exists());
        let e = mkdir_cgroup(&base.join("../escape"), &bases).unwrap_err();
        assert!(matches!(e, CgroupFsError::OutsideBase { .. }));
        // The base's parent must exist: never create above the base.
        let deep = vec![t.path().join("a/b/kubepods")];
        assert!(mkdir_cgroup(&deep[0].join("x"), &deep).is_err());
        assert!(!t.path().join("a").exists());
    }

    #[test]
    fn symlinked_hierarchy_matches_base() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("cpu,cpuacct");
        fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink("cpu,cpuacct", t.path().join("cpu")).unwrap();
        let bases = vec![real.join("kubepods")];
        let via_link = t.path().join("cpu/kubepods/burstable");
        let created = mkdir_cgroup(&via_link, &bases).unwrap();
        assert_eq!(
            created,
            vec![real.join("kubepods"), real.join("kubepods/burstable")]
        );
        let bases2 = vec![t.path().join("cpu/kubepods")];
        assert!(match_base(&real.join("kubepods/x"), &bases2).is_some());
        // A symlink inside the base pointing outside is refused.
        fs::create_dir(t.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(t.path().join("elsewhere"), real.join("kubepods/esc")).unwrap();
        assert!(
            match_base(&real.join("kubepods/esc/x"), &bases).is_none(),
            "a symlink below the base is refused even where the path matches lexically"
        );
        assert!(match_base(&t.path().join("cpu/kubepods/esc/x"), &bases).is_none());
    }

    #[test]
    fn a_symlink_planted_in_the_tree_is_never_followed() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("cpu/kubepods");
        fs::create_dir_all(base.join("burstable")).unwrap();
        let outside_dir = t.path().join("outside");
        fs::create_dir(&outside_dir).unwrap();
        touch(&outside_dir.join("cpu.shares"), "1024");
        let bases = vec![base.clone()];
        // kubepods/podX → a directory outside the tree.
        std::os::unix::fs::symlink(&outside_dir, base.join("podx")).unwrap();
        // kubepods/burstable/cpu.shares → a file outside.
        std::os::unix::fs::symlink(
            outside_dir.join("cpu.shares"),
            base.join("burstable/cpu.shares"),
        )
        .unwrap();
        for p in [
            base.join("podx/cpu.shares"),
            base.join("podx"),
            base.join("podx/child"),
            base.join("burstable/cpu.shares"),
        ] {
            let e = check_within(&p, &bases).unwrap_err();
            assert!(
                matches!(e, CgroupFsError::Symlink { .. }),
                "{}: {e}",
                p.display()
            );
            assert!(e.to_string().contains("symlink"), "{e}");
        }
        assert!(mkdir_cgroup(&base.join("podx/child"), &bases).is_err());
        assert!(remove_cgroup_tree_if_empty(&base.join("podx"), &bases).is_err());
        assert!(!outside_dir.join("child").exists());
        assert!(outside_dir.is_dir());
        assert_eq!(
            fs::read_to_string(outside_dir.join("cpu.shares")).unwrap(),
            "1024"
        );
        // The real directories are still fine.
        assert!(check_within(&base.join("burstable/cpu.weight"), &bases).is_ok());
        assert!(check_within(&base.join("podnew/cpu.shares"), &bases).is_ok());
    }

    #[test]
    fn fake_tree_removal_refuses_foreign_files() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("kubepods");
        let bases = vec![base.clone()];
        fs::create_dir_all(base.join("pod1")).unwrap();
        touch(&base.join("pod1/cgroup.procs"), "");
        touch(&base.join("pod1/important.txt"), "keep me");
        assert!(remove_cgroup_tree_if_empty(&base.join("pod1"), &bases).is_err());
        assert!(base.join("pod1/important.txt").exists());
    }

    #[test]
    fn remove_refuses_busy_and_outside() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("kubepods");
        let bases = vec![base.clone()];
        let pod = base.join("besteffort/podx");
        mkdir_cgroup(&pod.join("ctr"), &bases).unwrap();
        touch(&pod.join("cgroup.procs"), "");
        touch(&pod.join("ctr/cgroup.procs"), "123\n456\n");
        let e = remove_cgroup_tree_if_empty(&pod, &bases).unwrap_err();
        match e {
            CgroupFsError::NotEmpty { pids, path } => {
                assert_eq!(pids, vec![123, 456]);
                assert_eq!(path, pod.join("ctr"));
            }
            other => panic!("{other:?}"),
        }
        assert!(pod.join("ctr").is_dir());
        touch(&pod.join("ctr/cgroup.procs"), "");
        let removed = remove_cgroup_tree_if_empty(&pod, &bases).unwrap();
        assert_eq!(removed, vec![pod.join("ctr"), pod.clone()]);
        assert!(!pod.exists());
        assert!(base.join("besteffort").is_dir());
        let e = remove_cgroup_tree_if_empty(t.path(), &bases).unwrap_err();
        assert!(matches!(e, CgroupFsError::OutsideBase { .. }));
    }

    #[test]
    fn enable_controllers_fake_tree() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let kp = root.join("kubepods");
        let pod = kp.join("pod1");
        fs::create_dir_all(&pod).unwrap();
        for d in [root, kp.as_path()] {
            touch(&d.join("cgroup.controllers"), "cpu io memory pids\n");
            touch(&d.join("cgroup.subtree_control"), "");
        }
        touch(&root.join("cgroup.subtree_control"), "cpu\n");
        let w = enable_controllers_v2(root, &pod, &["cpu", "memory"], false).unwrap();
        assert_eq!(
            w,
            vec![
                (root.join("cgroup.subtree_control"), "+memory".to_string()),
                (
                    kp.join("cgroup.subtree_control"),
                    "+cpu +memory".to_string()
                ),
            ]
        );
        let e = enable_controllers_v2(root, &pod, &["hugetlb"], false).unwrap_err();
        assert!(
            matches!(e, CgroupFsError::ControllerUnavailable { .. }),
            "{e:?}"
        );
        assert!(enable_controllers_v2(&kp, root, &["cpu"], false).is_err());
    }

    #[test]
    fn pids_and_walk() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a");
        fs::create_dir_all(d.join("b/c")).unwrap();
        fs::create_dir_all(d.join("d")).unwrap();
        touch(&d.join("cgroup.procs"), "1\n2\n");
        assert_eq!(list_pids(&d).unwrap(), vec![1, 2]);
        assert_eq!(list_pids(&t.path().join("zz")).unwrap(), Vec::<i32>::new());
        touch(&d.join("cgroup.procs"), "x\n");
        assert!(matches!(
            list_pids(&d).unwrap_err(),
            CgroupFsError::BadPid { .. }
        ));
        assert_eq!(
            walk_leaf_first(&d).unwrap(),
            vec![d.join("b/c"), d.join("b"), d.join("d"), d.clone()]
        );
    }
}
