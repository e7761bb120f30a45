//! One qosd per cgroup root: a second `qosd run` for the same cgroup root
//! exits with code 1 naming the first one's PID, before writing anything;
//! a dry run takes no lock. The daemons enforce over a private cgroupfs
//! directory (no root needed; nothing is written outside the temporary
//! directory) with the lock directory there too (`QOSD_LOCK_DIR`).

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

fn run_args(dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut a = support::fake_node_run_args(dir, &["--mode", "enforce"]);
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

#[test]
fn a_second_daemon_on_the_same_cgroup_root_exits_1_naming_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let locks = tmp.path().join("run-qosd");
    let args = run_args(tmp.path(), &[]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut first = Daemon::start_with(&argv, &[("QOSD_LOCK_DIR", locks.as_os_str())]);
    let pid = first.pid();
    // The lock file holds the first daemon's PID once it holds the lock.
    wait_for("the first daemon's lock", Duration::from_secs(20), || {
        first.assert_running();
        std::fs::read_dir(&locks).is_ok_and(|rd| {
            rd.flatten().any(|e| {
                std::fs::read_to_string(e.path()).is_ok_and(|t| t.trim() == pid.to_string())
            })
        })
    });
    for extra in [&[][..], &["--once"]] {
        let args = run_args(tmp.path(), extra);
        let (code, _out, err) = output_within(
            Command::new(qosd_bin())
                .args(&args)
                .arg("--metrics-address")
                .arg(free_addr().to_string())
                .env("QOSD_LOCK_DIR", &locks)
                .env_remove("QOSD_CONFIG")
                .env_remove("NOTIFY_SOCKET")
                .stderr(Stdio::piped()),
            Duration::from_secs(20),
            "second qosd run (hang)",
        );
        assert_eq!(code, 1, "{extra:?}: {err}");
        assert!(err.contains(&format!("PID {pid}")), "{extra:?}: {err}");
        assert!(err.contains("another qosd"), "{extra:?}: {err}");
    }
    // A dry run writes nothing and takes no lock: it runs beside the first.
    let mut args = run_args(tmp.path(), &["--once"]);
    args[2] = "dry-run".into();
    let (_code, out, err) = output_within(
        Command::new(qosd_bin())
            .args(&args)
            .arg("--metrics-address")
            .arg(free_addr().to_string())
            .env("QOSD_LOCK_DIR", &locks)
            .env_remove("QOSD_CONFIG")
            .env_remove("NOTIFY_SOCKET")
            .stderr(Stdio::piped()),
        Duration::from_secs(20),
        "dry run (hang)",
    );
    assert!(!err.contains("another qosd"), "{err}");
    assert!(
        out.contains("pods,") && out.contains("writes"),
        "{out}\n{err}"
    );
    first.assert_running();
    let (st, _) = first.terminate(Duration::from_secs(10)).expect("stops");
    assert!(st.success(), "{st}: {}", first.log());
    // Once the first has stopped, the lock is free again.
    let args = run_args(tmp.path(), &["--once"]);
    let (_code, out, err) = output_within(
        Command::new(qosd_bin())
            .args(&args)
            .env("QOSD_LOCK_DIR", &locks)
            .env_remove("QOSD_CONFIG")
            .env_remove("NOTIFY_SOCKET")
            .stderr(Stdio::piped()),
        Duration::from_secs(20),
        "qosd run --once after the first stopped (hang)",
    );
    // It runs its pass (writes into a plain directory fail: not a lock
    // error) and prints the summary.
    assert!(!err.contains("another qosd"), "{err}");
    assert!(
        out.contains("pods,") && out.contains("writes"),
        "{out}\n{err}"
    );
}
