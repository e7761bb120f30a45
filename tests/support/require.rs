//! The one skip mechanism of qosd's tests.
//!
//! A test that needs root or a kernel feature (containerd, real cgroups, a
//! mount, the qemu VM, setpriv, a tool scripts/test installs as root such as
//! systemd-analyze, strace, curl, kubernetes-validate) carries
//! `#[ignore = "needs root: <why>"]`: plain `cargo test` lists it as
//! *ignored* (never as passed), and scripts/test runs it as root with
//! `--include-ignored`. Inside such a test a missing precondition is a
//! FAILURE naming what is missing: call [`require_root`], [`require_tools`]
//! or [`require_containerd`] first; they panic, they never return early.
//! Tests that can run unprivileged stay un-ignored.

use std::path::PathBuf;

/// Panics unless the test runs as root; `why` says what it does as root.
pub fn require_root(why: &str) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!(
            "needs root: {why} (run scripts/test as root, or \
             `cargo test -- --include-ignored` as root)"
        );
    }
}

/// Panics naming every tool of `tools` that is not on `PATH` (or in
/// /usr/sbin, /sbin), with the packages to install (`apt`).
pub fn require_tools(tools: &[&str], apt: &str) {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| which(t).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "missing tools {missing:?} (scripts/test installs them as root: {apt})"
    );
}

/// Root and the tools a private containerd with the test images needs
/// ([`crate::support::Containerd`], [`crate::support::images`]).
pub fn require_containerd() {
    require_root("starts containerd and creates cgroups");
    require_tools(
        &["containerd", "ctr", "runc", "gcc", "python3"],
        "apt-get install -y containerd runc gcc libc6-dev python3",
    );
}

/// `tool` on `PATH`, /usr/sbin or /sbin.
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}
