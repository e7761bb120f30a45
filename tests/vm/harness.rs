//! Rust side of the cgroup v2 VM harness (see docs/cgroup-v2-vm.md).
//!
//! The root file of a test binary includes it with
//! `#[path = "vm/harness.rs"] mod vm;`; a test module then does
//! `use crate::vm;` and:
//!
//! ```ignore
//! #[test]
//! #[ignore = "needs root: boots a qemu VM (cgroup v2 kernel)"]
//! fn my_vm_test() {
//!     let _vm = vm::alone();
//!     let bins = vm::static_bins(&["qosd", "qosd-vmtest"]);
//!     let out = vm::run_script("qosd-vmtest scenario-v2\n", &bins, &[], Duration::from_secs(180));
//!     assert_eq!(out.code, 0, "{}", out.output);
//! }
//! ```
//!
//! A VM that cannot run here (no qemu, no python3, the kernel download
//! unavailable) FAILS the test with the reason: VM tests are `#[ignore]`d
//! and run by scripts/test as root (tests/support/require.rs).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The result of a VM run whose script ran (or timed out).
#[derive(Debug)]
pub struct VmRun {
    /// The script's exit code (124: timeout, 125: harness failure).
    pub code: i32,
    /// Everything the VM printed on its console (the script's stdout and
    /// stderr included), plus the harness's stderr at the end.
    pub output: String,
    /// What the script wrote to `$VMTEST_RESULTS` (the VM's /dev/ttyS1, a
    /// second serial port: no kernel messages interleaved), ending with
    /// `VMTEST_EXIT=<rc>`.
    pub results: String,
    /// Wall time of the whole run (initramfs build, boot, script, poweroff).
    pub elapsed: Duration,
}

impl VmRun {
    /// What a failed assertion prints: the results and the console.
    pub fn context(&self) -> String {
        format!("results:\n{}\nconsole:\n{}", self.results, self.output)
    }

    /// The script exited 0 and wrote `DONE` (panics with [`VmRun::context`]
    /// otherwise); prints the results and how long the run took (`what`).
    pub fn assert_done(&self, what: &str) {
        eprintln!("{what}: {:.1}s", self.elapsed.as_secs_f64());
        assert_eq!(self.code, 0, "script failed\n{}", self.context());
        assert!(
            self.results.lines().any(|l| l.trim() == "DONE"),
            "script did not finish\n{}",
            self.context()
        );
        eprintln!("--- results\n{}", self.results);
    }
}

/// Repository root (the crate's manifest dir).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The harness script.
pub fn script_path() -> PathBuf {
    repo().join("tests/vm/qosd_vm.py")
}

static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// Held by each VM test for its whole run, so that the tests of one binary
/// boot one VM at a time (a VM keeps the cores of a small machine busy: two
/// at once would slow each other past their deadlines). A test that panics
/// while holding it leaves it usable by the others.
pub fn alone() -> MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Build the crate's binaries `names` statically (glibc, `+crt-static`)
/// into `target/vm-static` (its own target dir, so it never invalidates the
/// normal build) and return their paths; panics when that fails.
/// Set `QOSD_VM_BIN_DIR` to use prebuilt static binaries from that dir.
pub fn static_bins(names: &[&str]) -> Vec<PathBuf> {
    if let Ok(dir) = std::env::var("QOSD_VM_BIN_DIR") {
        return names
            .iter()
            .map(|n| {
                let p = Path::new(&dir).join(n);
                assert!(p.is_file(), "{} missing (QOSD_VM_BIN_DIR)", p.display());
                p
            })
            .collect();
    }
    let _g = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = repo().join("target/vm-static");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo())
        .args([
            "build",
            "--workspace",
            "--target",
            "x86_64-unknown-linux-gnu",
        ])
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for n in names {
        cmd.args(["--bin", n]);
    }
    let t = Instant::now();
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo: {e}"));
    if !out.status.success() {
        // A build failure fails the test like any other.
        panic!(
            "static build of {names:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "static build of {names:?}: {:.1}s",
        t.elapsed().as_secs_f64()
    );
    names
        .iter()
        .map(|n| target_dir.join("x86_64-unknown-linux-gnu/debug").join(n))
        .collect()
}

/// Run `script` (POSIX sh, run by busybox as `/test/run.sh` with
/// `PATH=/test/bin:/bin`) in a fresh VM with `bins` in `/test/bin` and
/// `files` (host path, path inside the VM such as `test/plan.json`).
/// Panics with the reason when the VM cannot run here.
pub fn run_script(
    script: &str,
    bins: &[PathBuf],
    files: &[(PathBuf, String)],
    timeout: Duration,
) -> VmRun {
    run_script_with(script, bins, files, timeout, &[])
}

/// [`run_script`] with extra harness arguments (e.g. `["--mem", "2048"]`,
/// `["--append", "foo=1"]`).
pub fn run_script_with(
    script: &str,
    bins: &[PathBuf],
    files: &[(PathBuf, String)],
    timeout: Duration,
    extra: &[&str],
) -> VmRun {
    if Command::new("python3").arg("--version").output().is_err() {
        panic!("the VM cannot run here: python3 not found");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let script_file = dir.path().join("run.sh");
    let results_file = dir.path().join("results.txt");
    std::fs::write(&script_file, script).expect("write run.sh");
    let mut cmd = Command::new("python3");
    cmd.arg(script_path())
        .arg("run")
        .arg("--script")
        .arg(&script_file)
        .arg("--results")
        .arg(&results_file)
        .arg("--timeout")
        .arg(timeout.as_secs().to_string());
    for b in bins {
        cmd.arg("--bin").arg(b);
    }
    for (src, dest) in files {
        cmd.arg("--file").arg(format!("{}:{}", src.display(), dest));
    }
    cmd.args(extra);
    if std::env::var_os("QOSD_VM_CACHE").is_none() {
        cmd.env("QOSD_VM_CACHE", repo().join("target/vm-cache"));
    }
    let t = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("the VM cannot run here: cannot run the harness: {e}"));
    let elapsed = t.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code().unwrap_or(-1);
    if code == 77 {
        let why = stderr
            .lines()
            .find_map(|l| l.strip_prefix("VMHARNESS_SKIP: "))
            .unwrap_or("harness reported skip");
        panic!("the VM cannot run here: {why}");
    }
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str("\n--- harness stderr ---\n");
    output.push_str(&stderr);
    let results = std::fs::read_to_string(&results_file).unwrap_or_default();
    VmRun {
        code,
        output,
        results,
        elapsed,
    }
}

/// [`run_script_with`] on the systemd node: a Debian bookworm root
/// filesystem (debootstrap, cached under `target/vm-cache/systemd-*`) with
/// systemd as PID 1, dbus, journald and containerd (`SystemdCgroup = true`)
/// running; the script runs as `vmtest.service` (see docs/cgroup-v2-vm.md).
pub fn run_systemd_script(
    script: &str,
    bins: &[PathBuf],
    files: &[(PathBuf, String)],
    timeout: Duration,
    extra: &[&str],
) -> VmRun {
    let mut args = vec!["--systemd"];
    args.extend_from_slice(extra);
    run_script_with(script, bins, files, timeout, &args)
}

/// Lines of `output` starting with `prefix`, prefix removed.
pub fn lines_with<'a>(output: &'a str, prefix: &str) -> Vec<&'a str> {
    output
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix(prefix))
        .collect()
}

/// The tagged lines a VM script wrote to `$VMTEST_RESULTS` (`TAG rest`).
pub struct Results<'a> {
    pub text: &'a str,
}

impl<'a> Results<'a> {
    /// Every `TAG ` line's rest.
    pub fn all(&self, tag: &str) -> Vec<&'a str> {
        lines_with(self.text, &format!("{tag} "))
    }

    /// The one `TAG ` line's rest (panics unless there is exactly one).
    pub fn one(&self, tag: &str) -> &'a str {
        let v = self.all(tag);
        assert_eq!(v.len(), 1, "expected one {tag} line, got {v:?}");
        v[0]
    }

    /// [`Results::one`] without surrounding whitespace.
    pub fn value(&self, tag: &str) -> &'a str {
        self.one(tag).trim()
    }

    /// [`Results::value`] as a number.
    pub fn num(&self, tag: &str) -> i64 {
        let v = self.value(tag);
        v.parse()
            .unwrap_or_else(|_| panic!("{tag}: not a number: {v:?}"))
    }

    /// [`Results::one`] as JSON.
    pub fn json(&self, tag: &str) -> serde_json::Value {
        let line = self.one(tag);
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{tag}: bad JSON ({e}): {line}"))
    }

    /// `TAG <path> <rest>` lines as a map.
    pub fn map(&self, tag: &str) -> std::collections::BTreeMap<String, String> {
        self.all(tag)
            .into_iter()
            .map(|l| match l.split_once(' ') {
                Some((p, rest)) => (p.to_string(), rest.to_string()),
                None => (l.to_string(), String::new()),
            })
            .collect()
    }
}
