//! Reading untrusted input files (the config, pod manifests, kubelet
//! configs) safely: regular files only, at most a size cap, and directory
//! walks that survive symlink loops and count each file once.
//!
//! A FIFO given as `--config` would block the open forever, `/dev/zero`
//! would be read until memory runs out, and `dir/loop -> ..` would list the
//! same manifest dozens of times: all are refused or skipped here, before
//! any parser runs.

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub use qosd_model::core::limits::{MAX_INPUT_BYTES, MAX_MANIFEST_BYTES};

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Opening or reading failed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not a regular file (a FIFO, a device, a directory, …).
    #[error("{}: is a {kind}, not a regular file (only regular files are read)", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// Larger than the size bound.
    #[error("{}: larger than {max} bytes (refused)", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound in bytes.
        max: u64,
    },
    /// Read as text but not UTF-8.
    #[error("{}: not UTF-8 text", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// A symlink where none is accepted.
    #[error("{}: is a symbolic link (refused here: a symlink is not expected)", path.display())]
    Symlink {
        /// The symlink.
        path: PathBuf,
    },
}

/// Whether the last component of an input path may be a symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symlinks {
    /// Followed: files an operator points at and that are often links
    /// (qosd's config, the kubelet config and drop-ins: ConfigMap mounts
    /// are symlinks).
    Follow,
    /// Refused (`O_NOFOLLOW`): files qosd itself owns, such as its status
    /// cache, where a link can only have been planted.
    Refuse,
}

impl InputError {
    /// As an `io::Error` (for error types that carry one), message kept.
    pub fn into_io(self) -> std::io::Error {
        match self {
            InputError::Io { source, .. } => source,
            InputError::NotRegular { kind, .. } => std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("is a {kind}, not a regular file (only regular files are read)"),
            ),
            InputError::TooLarge { max, .. } => std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("larger than {max} bytes (refused)"),
            ),
            InputError::NotUtf8 { .. } => {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text")
            }
            InputError::Symlink { .. } => std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "is a symbolic link (refused here: a symlink is not expected)",
            ),
        }
    }

    /// Whether the file does not exist (an optional file that is absent).
    pub fn is_not_found(&self) -> bool {
        matches!(self, InputError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// Whether `meta` is the null device (character device 1:3, whatever its
/// path): it reads as empty, never blocks and never runs on.
fn is_null_device(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == libc::makedev(1, 3)
}

/// The one way qosd opens an input file: at most `max` bytes of a regular
/// file (or the null device, read as empty: `--config /dev/null` is the
/// usual way to say "no configuration file"). The open never blocks
/// (`O_NONBLOCK`: a FIFO is refused, not waited on), a final symlink is
/// refused when `symlinks` says so (`O_NOFOLLOW`), the type is checked on
/// the opened descriptor (`fstat`), and at most `max + 1` bytes are read
/// whatever the file claims its size is. Errors name the file and never
/// carry its content.
pub fn read_bytes(path: &Path, max: u64, symlinks: Symlinks) -> Result<Vec<u8>, InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    if symlinks == Symlinks::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if symlinks == Symlinks::Refuse && e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(InputError::Symlink {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io(e)),
    };
    read_opened(f, path, max)
}

/// The checks [`read_bytes`] makes once a file is open: the type on the
/// descriptor, then at most `max` bytes.
fn read_opened(f: std::fs::File, path: &Path, max: u64) -> Result<Vec<u8>, InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = f.metadata().map_err(io)?;
    if is_null_device(&meta) {
        return Ok(Vec::new());
    }
    if !meta.file_type().is_file() {
        return Err(InputError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        });
    }
    if meta.len() > max {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
            max,
        });
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    f.take(max + 1).read_to_end(&mut buf).map_err(io)?;
    if buf.len() as u64 > max {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
            max,
        });
    }
    Ok(buf)
}

/// [`read_bytes`] as UTF-8 text.
pub(crate) fn read_text_with(
    path: &Path,
    max: u64,
    symlinks: Symlinks,
) -> Result<String, InputError> {
    String::from_utf8(read_bytes(path, max, symlinks)?).map_err(|_| InputError::NotUtf8 {
        path: path.to_path_buf(),
    })
}

/// [`read_bytes`] for `name` inside an open directory `dir` (`openat`,
/// never following a final symlink): a file of a process read through
/// its `/proc/<pid>` directory stays that process's file even if the pid
/// is reused meanwhile (the read then fails with `ESRCH`/`ENOENT`).
/// `shown` is the path errors name.
pub(crate) fn read_text_at(
    dir: &std::fs::File,
    name: &str,
    max: u64,
    shown: &Path,
) -> Result<String, InputError> {
    use nix::fcntl::{openat, OFlag};
    let flags = OFlag::O_RDONLY
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_NOFOLLOW
        | OFlag::O_CLOEXEC;
    let f = match openat(dir, name, flags, nix::sys::stat::Mode::empty()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(nix::errno::Errno::ELOOP) => {
            return Err(InputError::Symlink {
                path: shown.to_path_buf(),
            })
        }
        Err(e) => {
            return Err(InputError::Io {
                path: shown.to_path_buf(),
                source: e.into(),
            })
        }
    };
    String::from_utf8(read_opened(f, shown, max)?).map_err(|_| InputError::NotUtf8 {
        path: shown.to_path_buf(),
    })
}

/// [`read_text_with`], symlinks followed.
pub(crate) fn read_text_limited(path: &Path, max: u64) -> Result<String, InputError> {
    read_text_with(path, max, Symlinks::Follow)
}

/// `read_text_limited` with the default cap ([`MAX_INPUT_BYTES`]).
pub fn read_text(path: &Path) -> Result<String, InputError> {
    read_text_limited(path, MAX_INPUT_BYTES)
}

/// Files below `dir` (recursively, in name order, hidden entries skipped)
/// accepted by `want`. Each directory is entered once (a symlink back to an
/// ancestor is a loop and is not followed again) and each file is listed
/// once however many links lead to it (identity: device and inode).
/// `seen` carries the identities across several walks.
pub(crate) fn walk_files(
    dir: &Path,
    want: &dyn Fn(&Path) -> bool,
    seen: &mut HashSet<(u64, u64)>,
) -> Result<Vec<PathBuf>, InputError> {
    let mut out = Vec::new();
    walk(dir, want, seen, &mut out)?;
    Ok(out)
}

fn walk(
    dir: &Path,
    want: &dyn Fn(&Path) -> bool,
    seen: &mut HashSet<(u64, u64)>,
    out: &mut Vec<PathBuf>,
) -> Result<(), InputError> {
    let io = |source| InputError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(dir).map_err(io)?;
    if !seen.insert((meta.dev(), meta.ino())) {
        tracing::debug!(dir = %dir.display(), "directory already listed (symlink loop or second link); skipped");
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for e in entries {
        let name = e.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        // A dangling symlink or a loop of symlinks: not a manifest.
        let Ok(m) = std::fs::metadata(&e) else {
            tracing::debug!(path = %e.display(), "unreadable directory entry skipped");
            continue;
        };
        if m.is_dir() {
            walk(&e, want, seen, out)?;
        } else if want(&e) && seen.insert((m.dev(), m.ino())) {
            out.push(e);
        }
    }
    Ok(())
}

/// Whether `path` was already counted in `seen` (for files named directly);
/// records it otherwise. Unreadable paths count as new (the read reports).
pub(crate) fn first_visit(path: &Path, seen: &mut HashSet<(u64, u64)>) -> bool {
    match std::fs::metadata(path) {
        Ok(m) => seen.insert((m.dev(), m.ino())),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_only_and_capped() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a.yaml");
        std::fs::write(&f, "x: 1\n").unwrap();
        assert_eq!(read_text(&f).unwrap(), "x: 1\n");
        let e = read_text_limited(&f, 3).unwrap_err().to_string();
        assert!(e.contains("larger than 3 bytes"), "{e}");
        let e = read_text(d.path()).unwrap_err().to_string();
        assert!(e.contains("directory"), "{e}");
        let e = read_text(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("character device"), "{e}");
        // The null device is the one special file read (as empty).
        assert_eq!(read_text(Path::new("/dev/null")).unwrap(), "");
        let e = read_text(Path::new("/dev/tty")).map(|_| ()).unwrap_err();
        assert!(!e.to_string().is_empty());
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Would block forever without O_NONBLOCK.
        let e = read_text(&fifo).unwrap_err().to_string();
        assert!(e.contains("FIFO"), "{e}");
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(read_text(&f).unwrap_err().to_string().contains("UTF-8"));
    }

    #[test]
    fn symlinks_refused_only_when_asked() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a.json");
        std::fs::write(&f, "{}").unwrap();
        let l = d.path().join("link.json");
        std::os::unix::fs::symlink(&f, &l).unwrap();
        assert_eq!(read_bytes(&l, 10, Symlinks::Follow).unwrap(), b"{}");
        let e = read_bytes(&l, 10, Symlinks::Refuse).unwrap_err();
        assert!(matches!(e, InputError::Symlink { .. }), "{e}");
        assert!(e.to_string().contains("link.json"), "{e}");
        assert_eq!(read_bytes(&f, 10, Symlinks::Refuse).unwrap(), b"{}");
        assert!(read_bytes(&d.path().join("none"), 10, Symlinks::Refuse)
            .unwrap_err()
            .is_not_found());
    }

    #[test]
    fn walks_survive_loops_and_list_each_file_once() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("p.yaml"), "").unwrap();
        std::os::unix::fs::symlink(d.path(), sub.join("loop")).unwrap();
        std::os::unix::fs::symlink(sub.join("p.yaml"), d.path().join("q.yaml")).unwrap();
        std::os::unix::fs::symlink(d.path().join("nowhere"), d.path().join("dangling.yaml"))
            .unwrap();
        let mut seen = HashSet::new();
        let files = walk_files(d.path(), &|p| p.extension().is_some(), &mut seen).unwrap();
        assert_eq!(files.len(), 1, "{files:?}");
        assert!(!first_visit(&sub.join("p.yaml"), &mut seen));
    }
}
