//! Supervision of `qosd run`: a panic in the eviction loop (injected with
//! `QOSD_INJECT_PANIC=eviction-pass`) makes `/healthz` fail with the reason
//! and the process exit with code 70 (so systemd or the kubelet restarts
//! it); without the fault the same daemon is healthy and stops with 0.
//!
//! The daemon runs in dry-run on manifests over a private, empty cgroupfs
//! directory, so it needs neither root nor a runtime: the eviction loop
//! runs its passes (reading what it can) all the same.

use crate::support;

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::Daemon;

fn start(dir: &Path, inject: Option<&str>) -> Daemon {
    let args = support::fake_node_run_args(dir, &["--dry-run"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let envs: Vec<(&str, &OsStr)> = inject
        .map(|point| (support::INJECT_PANIC_ENV, point.as_ref()))
        .into_iter()
        .collect();
    Daemon::start_with(&args, &envs)
}

fn healthz(d: &Daemon) -> Option<(u16, String)> {
    d.get("/healthz").map(|r| (r.status, r.body))
}

#[test]
fn eviction_loop_panic_fails_healthz_and_exits_nonzero() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = start(dir.path(), Some("eviction-pass"));
    // /healthz turns 503 with the reason while the supervisor's grace runs.
    let t = Instant::now();
    let mut seen = None;
    while t.elapsed() < Duration::from_secs(30) {
        if let Some((503, body)) = healthz(&d) {
            seen = Some(body);
            break;
        }
        if d.exit_status().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = d.wait_exit(Duration::from_secs(30));
    let log = d.log();
    let body = seen.unwrap_or_else(|| panic!("/healthz never answered 503; log:\n{log}"));
    assert!(
        body.contains("eviction") && body.contains("panicked"),
        "/healthz body: {body}"
    );
    let st = st.unwrap_or_else(|| panic!("qosd did not exit; log:\n{log}"));
    assert_eq!(
        st.code(),
        Some(support::EXIT_UNHEALTHY),
        "exit status {st:?}; log:\n{log}"
    );
    assert!(log.contains("supervised loop panicked"), "{log}");
}

#[test]
fn without_the_fault_the_same_daemon_is_healthy_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = start(dir.path(), None);
    let t = Instant::now();
    let mut ok = false;
    while t.elapsed() < Duration::from_secs(30) && !ok {
        ok = matches!(healthz(&d), Some((200, _)));
        if d.exit_status().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Healthy for a while: several eviction passes (1 s period) went by.
    std::thread::sleep(Duration::from_secs(3));
    let still = healthz(&d);
    let st = d.terminate(Duration::from_secs(20)).map(|(st, _)| st);
    let log = d.log();
    assert!(ok, "/healthz never answered 200; log:\n{log}");
    assert!(matches!(still, Some((200, _))), "{still:?}; log:\n{log}");
    assert_eq!(st.and_then(|s| s.code()), Some(0), "log:\n{log}");
}

/// A loop blocked for good (here a reload stuck as on a file or peer that
/// never answers, injected with `QOSD_INJECT_STALL=reload`) cannot see the
/// stop it is asked for: SIGTERM still ends the process, within the stop
/// deadline (15 s), with code 70 and the reason logged.
#[test]
fn sigterm_ends_a_daemon_whose_loop_is_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let args = support::fake_node_run_args(dir.path(), &["--dry-run"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut d = Daemon::start_with(&args, &[(support::INJECT_STALL_ENV, OsStr::new("reload"))]);
    support::wait_for("healthy", Duration::from_secs(30), || {
        matches!(healthz(&d), Some((200, _)))
    });
    let pid = nix::unistd::Pid::from_raw(d.pid());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    // The reload has started (and blocks); the loop no longer turns.
    support::wait_for("the reload started", Duration::from_secs(10), || {
        d.log().contains("injected stall")
    });
    let t = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let st = d.wait_exit(Duration::from_secs(60));
    let log = d.log();
    let st = st.unwrap_or_else(|| panic!("qosd ignored SIGTERM; log:\n{log}"));
    assert_eq!(
        st.code(),
        Some(support::EXIT_UNHEALTHY),
        "{st:?}; log:\n{log}"
    );
    assert!(
        t.elapsed() >= Duration::from_secs(14),
        "the orderly stop was not given its deadline: {:?}",
        t.elapsed()
    );
    assert!(log.contains("did not stop within the deadline"), "{log}");
}
