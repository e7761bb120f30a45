//! The one walk to a cgroup directory, shared by every writer, creator,
//! remover and killer.
//!
//! A walk starts at a root opened by path (symlinks above it are allowed:
//! `/sys/fs/cgroup/cpu` → `cpu,cpuacct`); the root's filesystem (`statfs`
//! magic and device) is the expectation for everything below it. Each path
//! component below the root is opened with
//! `openat(O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC)` from its parent's descriptor
//! and must be a directory on that same filesystem: a symlink, a regular
//! file or another filesystem (a bind mount, a tmpfs) below the root is
//! refused with a [`WalkError`] naming the path and what was found. On a
//! real hierarchy the root is cgroupfs (`0x27e0eb`) or cgroup2
//! (`0x63677270`); a test's fixture tree on tmpfs is consistently tmpfs.
//!
//! Interface files are then opened relative to the walked descriptor with
//! `O_NOFOLLOW` and without `O_CREAT`; directories are created with
//! `mkdirat` and removed with `unlinkat(AT_REMOVEDIR)`, so nothing swapped
//! in after the walk is ever followed.

use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag, AT_FDCWD};
use nix::sys::stat::{fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// cgroup v1 filesystem magic.
pub(crate) const CGROUP_SUPER_MAGIC: u64 = 0x0027_e0eb;
/// cgroup v2 filesystem magic.
pub(crate) const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

/// Why a walk to a cgroup directory was refused or failed. Every variant
/// names the path.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// A component below the root is a symlink.
    #[error("refusing cgroup path {path}: it is a symlink, not a cgroup directory")]
    Symlink {
        /// The symlink.
        path: PathBuf,
    },
    /// A component below the root is not a directory.
    #[error("refusing cgroup path {path}: it is a {found}, not a cgroup directory")]
    NotADirectory {
        /// The component.
        path: PathBuf,
        /// What it is instead (`regular file`, `socket`, …).
        found: &'static str,
    },
    /// A component below the root is on another filesystem type.
    #[error(
        "refusing cgroup path {path}: filesystem magic {found:#x}, not the hierarchy's {expected:#x}"
    )]
    Filesystem {
        /// The component.
        path: PathBuf,
        /// Its filesystem magic (`statfs` `f_type`).
        found: u64,
        /// The hierarchy root's magic.
        expected: u64,
    },
    /// A component below the root is another mount of the same type.
    #[error(
        "refusing cgroup path {path}: device {found:#x} is another mount than the hierarchy's {expected:#x}"
    )]
    Mount {
        /// The component.
        path: PathBuf,
        /// Its device.
        found: u64,
        /// The hierarchy root's device.
        expected: u64,
    },
    /// The path is not below the walk's root, or has `..`.
    #[error("refusing cgroup path {path}: not below {root}")]
    NotBelow {
        /// The path asked for.
        path: PathBuf,
        /// The walk's root.
        root: PathBuf,
    },
    /// A component does not exist.
    #[error("cgroup path {path} does not exist")]
    Missing {
        /// The missing component.
        path: PathBuf,
    },
    /// Any other failure to open.
    #[error("cannot open cgroup path {path}: {source}")]
    Io {
        /// The component.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// An open cgroup directory reached by a walk (see the module docs).
#[derive(Debug)]
pub(crate) struct CgroupDir {
    fd: OwnedFd,
    path: PathBuf,
    magic: u64,
    dev: u64,
}

/// The name of a file type, for errors.
pub(crate) fn kind_name(mode: u32) -> &'static str {
    match SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFLNK => "symlink",
        SFlag::S_IFREG => "regular file",
        SFlag::S_IFDIR => "directory",
        SFlag::S_IFIFO => "FIFO",
        SFlag::S_IFSOCK => "socket",
        SFlag::S_IFCHR => "character device",
        SFlag::S_IFBLK => "block device",
        _ => "file of unknown type",
    }
}

/// The components of `path` below `root`; `None` when `path` is not at or
/// below `root` (component-wise; `.` ignored) or has `..` below it. Both
/// must be absolute. The root is opened by path as given, so `..` in it is
/// harmless; below it every component is walked.
pub(crate) fn components_below(root: &Path, path: &Path) -> Option<Vec<OsString>> {
    if !root.is_absolute() || !path.is_absolute() {
        return None;
    }
    let keep = |c: &Component<'_>| *c != Component::CurDir;
    let r: Vec<Component<'_>> = root.components().filter(keep).collect();
    let p: Vec<Component<'_>> = path.components().filter(keep).collect();
    if !p.starts_with(&r) {
        return None;
    }
    p[r.len()..]
        .iter()
        .map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            _ => None,
        })
        .collect()
}

/// The filesystem verdict for a directory opened below a root of `magic`
/// and `dev` (pure, for the unit tests).
pub(crate) fn same_filesystem(
    path: &Path,
    (magic, dev): (u64, u64),
    (found_magic, found_dev): (u64, u64),
) -> Result<(), WalkError> {
    if found_magic != magic {
        return Err(WalkError::Filesystem {
            path: path.to_path_buf(),
            found: found_magic,
            expected: magic,
        });
    }
    if found_dev != dev {
        return Err(WalkError::Mount {
            path: path.to_path_buf(),
            found: found_dev,
            expected: dev,
        });
    }
    Ok(())
}

#[allow(clippy::unnecessary_cast)] // f_type's and st_dev's widths differ between libcs
fn identity(fd: &OwnedFd, path: &Path) -> Result<(u64, u64), WalkError> {
    let io = |e: Errno| WalkError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    };
    let magic = nix::sys::statfs::fstatfs(fd)
        .map_err(io)?
        .filesystem_type()
        .0 as u64;
    let dev = fstat(fd).map_err(io)?.st_dev as u64;
    Ok((magic, dev))
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

impl CgroupDir {
    /// Open the root of a walk by path (symlinks above and at it are
    /// followed); its filesystem is what every directory below must be on.
    pub(crate) fn open_root(root: &Path) -> Result<CgroupDir, WalkError> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let fd = openat(AT_FDCWD, root, flags, Mode::empty()).map_err(|e| match e {
            Errno::ENOENT => WalkError::Missing {
                path: root.to_path_buf(),
            },
            Errno::ENOTDIR => WalkError::NotADirectory {
                path: root.to_path_buf(),
                found: "file that is not a directory",
            },
            e => WalkError::Io {
                path: root.to_path_buf(),
                source: e.into(),
            },
        })?;
        let (magic, dev) = identity(&fd, root)?;
        Ok(CgroupDir {
            fd,
            path: root.to_path_buf(),
            magic,
            dev,
        })
    }

    /// Walk from `root` to `dir` (which must be at or below it).
    pub fn open(root: &Path, dir: &Path) -> Result<CgroupDir, WalkError> {
        let rest = components_below(root, dir).ok_or_else(|| WalkError::NotBelow {
            path: dir.to_path_buf(),
            root: root.to_path_buf(),
        })?;
        let mut cur = CgroupDir::open_root(root)?;
        for name in &rest {
            cur = cur.child(name)?;
        }
        Ok(cur)
    }

    /// The path this directory was reached by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the walk's filesystem is a real cgroup hierarchy.
    pub(crate) fn is_cgroupfs(&self) -> bool {
        self.magic == CGROUP_SUPER_MAGIC || self.magic == CGROUP2_SUPER_MAGIC
    }

    /// The child directory `name` (one component), refused unless it is a
    /// directory on this walk's filesystem.
    pub fn child(&self, name: &OsStr) -> Result<CgroupDir, WalkError> {
        let path = self.path.join(name);
        if name.is_empty() || name == ".." || name == "." || name.as_encoded_bytes().contains(&b'/')
        {
            return Err(WalkError::NotBelow {
                path,
                root: self.path.clone(),
            });
        }
        let fd = match openat(&self.fd, name, dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => return Err(self.classify_open_error(name, path, e)),
        };
        let found = identity(&fd, &path)?;
        same_filesystem(&path, (self.magic, self.dev), found)?;
        Ok(CgroupDir {
            fd,
            path,
            magic: self.magic,
            dev: self.dev,
        })
    }

    #[allow(clippy::unnecessary_cast)] // st_mode's width differs between libcs
    fn classify_open_error(&self, name: &OsStr, path: PathBuf, e: Errno) -> WalkError {
        if e == Errno::ENOENT {
            return WalkError::Missing { path };
        }
        match fstatat(&self.fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(FileStat { st_mode, .. }) if kind_name(st_mode as u32) == "symlink" => {
                WalkError::Symlink { path }
            }
            Ok(FileStat { st_mode, .. }) if kind_name(st_mode as u32) != "directory" => {
                WalkError::NotADirectory {
                    path,
                    found: kind_name(st_mode as u32),
                }
            }
            _ => WalkError::Io {
                path,
                source: e.into(),
            },
        }
    }

    /// Create the child directory `name` (`mkdirat`); `Ok(false)` when it
    /// already exists.
    pub fn mkdir(&self, name: &OsStr) -> std::io::Result<bool> {
        match mkdirat(&self.fd, name, Mode::from_bits_truncate(0o755)) {
            Ok(()) => Ok(true),
            Err(Errno::EEXIST) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Remove the (empty) child cgroup `name` (`unlinkat(AT_REMOVEDIR)`).
    pub fn rmdir(&self, name: &OsStr) -> std::io::Result<()> {
        unlinkat(&self.fd, name, UnlinkatFlags::RemoveDir).map_err(Into::into)
    }

    /// Remove the regular file `name` (fixture trees only).
    pub(crate) fn unlink(&self, name: &OsStr) -> std::io::Result<()> {
        unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir).map_err(Into::into)
    }

    #[allow(clippy::unnecessary_cast)] // st_mode's width differs between libcs
    fn open_file(&self, name: &str, flags: OFlag) -> std::io::Result<std::fs::File> {
        let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let fd = openat(&self.fd, name, flags, Mode::empty())?;
        let st = fstat(&fd)?;
        if kind_name(st.st_mode as u32) != "regular file" {
            return Err(std::io::Error::other(format!(
                "{} is a {}, not an interface file",
                self.path.join(name).display(),
                kind_name(st.st_mode as u32)
            )));
        }
        Ok(std::fs::File::from(fd))
    }

    /// Write `value` to the interface file `name` (never created, never a
    /// symlink; truncated as runc does).
    pub fn write(&self, name: &str, value: &str) -> std::io::Result<()> {
        let mut f = self.open_file(name, OFlag::O_WRONLY | OFlag::O_TRUNC)?;
        f.write_all(value.as_bytes())
    }

    /// Read the interface file `name` (at most 16 MiB).
    pub fn read(&self, name: &str) -> std::io::Result<String> {
        let f = self.open_file(name, OFlag::O_RDONLY)?;
        let mut s = String::new();
        f.take(16 << 20).read_to_string(&mut s)?;
        Ok(s)
    }

    /// The entries of this directory: (name, is a directory, is a regular
    /// file), sorted by name. Symlinks are neither.
    #[allow(clippy::unnecessary_cast)] // st_mode's width differs between libcs
    pub fn entries(&self) -> std::io::Result<Vec<(OsString, bool, bool)>> {
        let fd = openat(&self.fd, ".", dir_flags(), Mode::empty())?;
        let mut d = nix::dir::Dir::from_fd(fd)?;
        let mut out = Vec::new();
        for ent in d.iter() {
            let ent = ent?;
            let name = OsStr::from_bytes(ent.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            let kind = match ent.file_type() {
                Some(t) => t,
                None => {
                    let st = fstatat(&self.fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)?;
                    match kind_name(st.st_mode as u32) {
                        "directory" => nix::dir::Type::Directory,
                        "regular file" => nix::dir::Type::File,
                        _ => nix::dir::Type::Symlink,
                    }
                }
            };
            out.push((
                name.to_os_string(),
                kind == nix::dir::Type::Directory,
                kind == nix::dir::Type::File,
            ));
        }
        out.sort();
        Ok(out)
    }

    /// The child cgroups of this directory, each walked (a symlink or a
    /// directory on another filesystem is an error, not skipped).
    pub fn children(&self) -> Result<Vec<CgroupDir>, WalkError> {
        let ents = self.entries().map_err(|source| WalkError::Io {
            path: self.path.clone(),
            source,
        })?;
        let mut out = Vec::new();
        for (name, is_dir, _) in ents {
            if is_dir {
                match self.child(&name) {
                    Ok(c) => out.push(c),
                    // removed under us
                    Err(WalkError::Missing { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_below_root() {
        let r = Path::new("/sys/fs/cgroup/cpu");
        assert_eq!(
            components_below(r, Path::new("/sys/fs/cgroup/cpu/kubepods/./pod1")).unwrap(),
            vec![OsString::from("kubepods"), OsString::from("pod1")]
        );
        assert_eq!(components_below(r, r).unwrap(), Vec::<OsString>::new());
        assert!(components_below(r, Path::new("/sys/fs/cgroup/cpu/../x")).is_none());
        assert!(components_below(r, Path::new("/sys/fs/cgroup/cpuset/x")).is_none());
        assert!(components_below(r, Path::new("kubepods")).is_none());
        let up = Path::new("/a/../b");
        assert_eq!(
            components_below(up, Path::new("/a/../b/kubepods")).unwrap(),
            vec![OsString::from("kubepods")]
        );
    }

    #[test]
    fn filesystem_verdicts() {
        let p = Path::new("/x/kubepods/pod1");
        assert!(same_filesystem(p, (CGROUP_SUPER_MAGIC, 7), (CGROUP_SUPER_MAGIC, 7)).is_ok());
        let e = same_filesystem(p, (CGROUP_SUPER_MAGIC, 7), (0x0102_1994, 7)).unwrap_err();
        assert!(matches!(
            e,
            WalkError::Filesystem {
                found: 0x0102_1994,
                ..
            }
        ));
        let s = e.to_string();
        assert!(
            s.contains("/x/kubepods/pod1") && s.contains("0x1021994") && s.contains("0x27e0eb"),
            "{s}"
        );
        let e = same_filesystem(p, (CGROUP_SUPER_MAGIC, 7), (CGROUP_SUPER_MAGIC, 9)).unwrap_err();
        assert!(
            matches!(
                e,
                WalkError::Mount {
                    found: 9,
                    expected: 7,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn kinds() {
        assert_eq!(kind_name(libc::S_IFLNK | 0o777), "symlink");
        assert_eq!(kind_name(libc::S_IFREG | 0o644), "regular file");
        assert_eq!(kind_name(libc::S_IFDIR | 0o755), "directory");
        assert_eq!(kind_name(libc::S_IFIFO), "FIFO");
    }

    #[test]
    fn walk_refuses_symlinks_files_and_names() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("kubepods/pod1")).unwrap();
        std::fs::write(root.join("kubepods/pod1/cpu.shares"), "2").unwrap();
        std::fs::write(root.join("kubepods/file"), "").unwrap();
        std::fs::create_dir(root.join("outside")).unwrap();
        std::os::unix::fs::symlink(root.join("outside"), root.join("kubepods/podx")).unwrap();

        let d = CgroupDir::open(root, &root.join("kubepods/pod1")).unwrap();
        assert_eq!(d.read("cpu.shares").unwrap(), "2");
        d.write("cpu.shares", "5").unwrap();
        assert_eq!(d.read("cpu.shares").unwrap(), "5");
        assert!(d.write("cpu.weight", "5").is_err(), "never created");

        let e = CgroupDir::open(root, &root.join("kubepods/podx/c")).unwrap_err();
        assert!(matches!(e, WalkError::Symlink { .. }), "{e}");
        assert!(e.to_string().contains("kubepods/podx"), "{e}");
        let e = CgroupDir::open(root, &root.join("kubepods/file")).unwrap_err();
        assert!(
            matches!(
                e,
                WalkError::NotADirectory {
                    found: "regular file",
                    ..
                }
            ),
            "{e}"
        );
        let e = CgroupDir::open(root, &root.join("kubepods/none")).unwrap_err();
        assert!(matches!(e, WalkError::Missing { .. }), "{e}");
        let e = CgroupDir::open(root, Path::new("/elsewhere")).unwrap_err();
        assert!(matches!(e, WalkError::NotBelow { .. }), "{e}");

        // A symlinked interface file is never written through.
        std::fs::write(root.join("outside/cpu.shares"), "1024").unwrap();
        std::os::unix::fs::symlink(
            root.join("outside/cpu.shares"),
            root.join("kubepods/cpu.shares"),
        )
        .unwrap();
        let kp = CgroupDir::open(root, &root.join("kubepods")).unwrap();
        assert!(kp.write("cpu.shares", "2").is_err());
        assert_eq!(
            std::fs::read_to_string(root.join("outside/cpu.shares")).unwrap(),
            "1024"
        );
        // children() refuses nothing that is not a directory, lists real ones.
        let names: Vec<_> = kp
            .children()
            .unwrap()
            .iter()
            .map(|c| c.path().to_path_buf())
            .collect();
        assert_eq!(names, vec![root.join("kubepods/pod1")]);
    }
}
