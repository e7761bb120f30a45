//! Cleanup guards: whatever a test creates on the real machine is removed
//! when the guard drops, also when the test panics.
//!
//! * [`Cgroups`]: cgroup trees the test created (each top directory named
//!   `qosd-test-…`), removed leaf first; processes still in them (the
//!   test's own) are SIGKILLed when a directory stays busy.
//! * [`KillOnDrop`]: a child process, SIGKILLed by its PID and reaped.
//! * [`Tmpfs`]: a tmpfs mounted on a fresh temp dir, unmounted.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

/// Cgroup trees this test created; removed leaf first on drop.
#[derive(Default)]
pub struct Cgroups {
    tops: Vec<PathBuf>,
}

impl Cgroups {
    pub fn new() -> Cgroups {
        Cgroups::default()
    }

    /// `mkdir dir` (its name must start with `qosd-test-`) and remove its
    /// whole tree on drop. Panics when it cannot be created.
    pub fn create(&mut self, dir: &Path) -> PathBuf {
        std::fs::create_dir(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        self.adopt(dir)
    }

    /// Remove the tree at `dir` (created by this test, or by what it
    /// started, under a `qosd-test-` name) on drop.
    pub fn adopt(&mut self, dir: &Path) -> PathBuf {
        assert_test_name(dir);
        self.tops.push(dir.to_path_buf());
        dir.to_path_buf()
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for top in self.tops.iter().rev() {
            remove_tree(top);
        }
    }
}

fn assert_test_name(dir: &Path) {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    assert!(
        name.starts_with("qosd-test-"),
        "refusing to own cgroup {} (not a qosd-test- name)",
        dir.display()
    );
}

/// Remove the cgroup tree at `top` (a `qosd-test-` directory), deepest
/// first, retrying for ~5 s; after the first few tries the processes left
/// in a busy directory are SIGKILLed (they are the test's own).
pub fn remove_tree(top: &Path) {
    assert_test_name(top);
    for attempt in 0..50 {
        if !top.exists() {
            return;
        }
        let mut dirs = Vec::new();
        collect_dirs(top, &mut dirs);
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        let mut left = Vec::new();
        for d in dirs {
            if std::fs::remove_dir(&d).is_err() && d.exists() {
                if attempt > 5 {
                    kill_procs(&d);
                }
                left.push(d);
            }
        }
        if left.is_empty() {
            return;
        }
        if attempt == 49 {
            eprintln!("support: could not remove cgroups: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

fn kill_procs(cgroup: &Path) {
    for f in ["cgroup.procs", "tasks"] {
        if let Ok(s) = std::fs::read_to_string(cgroup.join(f)) {
            for pid in s.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// A child process the test started; SIGKILLed by its PID and reaped on drop.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `qosd run` (or other daemon) the test started; on drop SIGTERMed by its
/// PID, given 3 s to exit, then SIGKILLed and reaped.
pub struct TermOnDrop(pub Child);

impl TermOnDrop {
    /// Send `s` to the process (by its PID).
    pub fn signal(&self, s: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0.id() as i32), s).unwrap();
    }
}

impl Drop for TermOnDrop {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_secs(3) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A tmpfs (`nosuid,nodev`, plus `opts` such as `size=16m,nr_inodes=400`)
/// mounted on a fresh temp dir; unmounted on drop, then the dir goes.
pub struct Tmpfs {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Panics (naming the error) when the mount fails: needs root.
    pub fn mount(opts: &str) -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("qosd-test-")
            .tempdir()
            .unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(opts),
        )
        .unwrap_or_else(|e| panic!("mount tmpfs ({opts}) on {}: {e}", dir.path().display()));
        Tmpfs {
            path: dir.path().to_path_buf(),
            _dir: dir,
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH);
    }
}
