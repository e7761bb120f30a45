//! Running the `qosd` binary once, files, and `/proc` of a process: the
//! small helpers every test file used to carry a copy of.
//!
//! * [`repo_root`], [`qosd_cmd`] (an `assert_cmd` command in the repo root),
//!   [`qosd_bounded`] / [`output_within`]: a run with a hang guard;
//! * [`NODE_4CPU_8GI_V2`]: node flags for `qosd plan`;
//! * [`write_file`], [`read_trimmed`] (panics naming the path),
//!   [`read_or_empty`];
//! * [`alive`], [`fd_count`], [`rss_kib`] of a pid;
//! * [`sum_samples`]: the sum of every sample of a metric family.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The repository root (the tests' fixtures and examples are relative to it).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `qosd` as an `assert_cmd` command with the repo root as working directory.
pub fn qosd_cmd() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("qosd").unwrap();
    c.current_dir(repo_root());
    c
}

/// Run `cmd` (stdin null, stdout piped; stderr as the caller set it, piped
/// by default) and collect (exit code, stdout, stderr). Panics naming
/// `what` if it is still running after `timeout` (a hang guard, not a
/// timing assertion); the child is killed by its PID then.
pub fn output_within(cmd: &mut Command, timeout: Duration, what: &str) -> (i32, String, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still running after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err).unwrap();
    }
    (status.code().unwrap_or(-1), out, err)
}

/// `qosd <args>` in the repo root without `QOSD_CONFIG` and `NOTIFY_SOCKET`,
/// stderr to `stderr`; fails the test if it does not exit within 20 s (a
/// hang guard). (exit code, stdout, stderr)
pub fn qosd_bounded(args: &[&str], stderr: Stdio) -> (i32, String, String) {
    output_within(
        Command::new(super::qosd_bin())
            .args(args)
            .current_dir(repo_root())
            .env_remove("QOSD_CONFIG")
            .env_remove("NOTIFY_SOCKET")
            .stderr(stderr),
        Duration::from_secs(20),
        &format!("qosd {args:?} (hang)"),
    )
}

/// `qosd plan`'s node flags for a 4-CPU, 8 GiB cgroup v2 node (no detection).
pub const NODE_4CPU_8GI_V2: &[&str] = &[
    "--node-cpu",
    "4",
    "--node-memory",
    "8Gi",
    "--cgroup-version",
    "v2",
];

/// Write `text` to `dir/name` (`name` may have directories: they are
/// made); the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

/// A file's content, trimmed; panics naming the path when it cannot be read.
pub fn read_trimmed(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

/// A file's content, trimmed; empty when it cannot be read (gone, say).
pub fn read_or_empty(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Process `pid` exists (signal 0).
pub fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// Open file descriptors of `pid` (0 when it is gone).
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Resident memory of `pid` in KiB (`VmRSS`; 0 when it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The sum of every sample whose line starts with `prefix` (a family name,
/// all label sets) in a Prometheus text; 0 when there is none.
pub fn sum_samples(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}
