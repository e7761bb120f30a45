//! `cgroupEnforcement: audit` (the default with a kubelet config) on this
//! host's real cgroup v1 hierarchies, with pods in a real containerd: qosd
//! reads and compares every planned value, writes nothing (no value, no
//! directory), reports a changed value once in the log, in /metrics and in
//! /status, and keeps its eviction loop on.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use serde_json::Value;

const KUBELET: &str = "fixtures/kubelet/kubeadm.yaml";

/// Every directory below the test's cgroup root in the hierarchies qosd
/// plans for, and the content of every file qosd could write there.
fn snapshot(root: &str) -> BTreeMap<PathBuf, Option<String>> {
    const FILES: [&str; 6] = [
        "cpu.shares",
        "cpu.cfs_quota_us",
        "cpu.cfs_period_us",
        "memory.limit_in_bytes",
        "memory.memsw.limit_in_bytes",
        "pids.max",
    ];
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Option<String>>) {
        out.insert(dir.to_path_buf(), None);
        for f in FILES {
            if let Ok(v) = std::fs::read_to_string(dir.join(f)) {
                out.insert(dir.join(f), Some(v));
            }
        }
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = BTreeMap::new();
    for c in ["cpu", "memory", "pids"] {
        let top = Path::new("/sys/fs/cgroup")
            .join(c)
            .join(root.trim_start_matches('/'));
        assert!(
            top.is_dir(),
            "{} missing: is this cgroup v1?",
            top.display()
        );
        walk(&top, &mut out);
    }
    out
}

fn base_args(env: &Containerd) -> Vec<&str> {
    vec![
        "--kubelet-config",
        KUBELET,
        // The test's private tree and runtime (flags override the kubelet
        // config, as the kubelet's flags do); kubeadm's systemd driver is
        // for a real node.
        "--cgroup-driver",
        "cgroupfs",
        "--cgroup-version",
        "v1",
        "--cgroup-root",
        &env.cgroup_root,
        "--runtime-endpoint",
        &env.endpoint,
    ]
}

/// Poll every 50 ms (`/status` measures pod usage on demand).
fn wait_until(timeout: Duration, f: impl FnMut() -> bool) -> bool {
    wait_until_every(timeout, Duration::from_millis(50), f).is_some()
}

fn status(addr: SocketAddr) -> Value {
    serde_json::from_str(&body_of(addr, "/status")).unwrap_or_default()
}

fn found_in_status(doc: &Value, file: &Path) -> Option<Option<String>> {
    doc["audit"]["values"].as_array()?.iter().find_map(|d| {
        (d["file"].as_str()? == file.to_str()?).then(|| d["found"].as_str().map(str::to_string))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: real cgroup v1 hierarchies and a private containerd"]
async fn audit_writes_nothing_and_reports_a_changed_value() {
    require_containerd();
    let env = Containerd::start();
    let g = env
        .run_pod(
            &PodSpec::new("g").container(
                ContainerSpec::pause("app")
                    .cpu(Some(700), Some(700))
                    .memory(Some(200 * MI), Some(200 * MI)),
            ),
        )
        .await;
    let _b = env
        .run_pod(
            &PodSpec::new("b").container(
                ContainerSpec::pause("app")
                    .cpu(Some(250), Some(500))
                    .memory(Some(64 * MI), Some(128 * MI)),
            ),
        )
        .await;
    // No BestEffort pod: kubepods/besteffort does not exist yet; qosd plans
    // it and must not create it.
    let besteffort = Path::new("/sys/fs/cgroup/cpu")
        .join(env.cgroup_root.trim_start_matches('/'))
        .join("kubepods/besteffort");
    assert!(!besteffort.exists());
    let before = snapshot(&env.cgroup_root);

    // One pass: every difference is reported, nothing written.
    let mut args = vec!["run", "--once", "--output", "json"];
    args.extend(base_args(&env));
    let (code, out, err) = qosd(&args);
    assert_eq!(code, 0, "{err}\n{out}");
    let once: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(once["writes"], Value::Array(vec![]), "audit writes nothing");
    let drift = once["audit_drift"].as_array().expect("audit_drift").clone();
    let g_shares = env.cgroup_dir("cpu", &g).join("cpu.shares");
    let g_entry = drift
        .iter()
        .find(|d| d["file"] == g_shares.to_str().unwrap())
        .unwrap_or_else(|| panic!("{g_shares:?} not reported: {drift:?}"));
    assert_eq!(g_entry["planned"], "716");
    assert_eq!(
        g_entry["found"].as_str().map(str::trim),
        Some(before[&g_shares].as_deref().unwrap().trim())
    );
    assert!(
        drift.iter().any(
            |d| d["file"] == besteffort.join("cpu.shares").to_str().unwrap()
                && d["found"].is_null()
        ),
        "a missing QoS cgroup is reported as missing: {drift:?}"
    );
    assert_eq!(snapshot(&env.cgroup_root), before, "audit --once wrote");
    assert!(!besteffort.exists(), "audit created a cgroup");

    // The daemon: a value changed by someone else is reported once.
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("qosd.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let addr_s = addr.to_string();
    let root_dir = env.dir().display().to_string();
    let mut args = vec!["run"];
    args.extend(base_args(&env));
    args.extend([
        "--metrics-address",
        &addr_s,
        "--reconcile-interval",
        "200ms",
        "--relist-interval",
        "200ms",
        "--root-dir",
        &root_dir,
        // Eviction stays on in audit; keep it from acting on this host.
        "--eviction-hard",
        "memory.available<1Mi",
        "--eviction-backend",
        "dry-run",
    ]);
    let child = Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args(&args)
        .env_remove("QOSD_CONFIG")
        .env_remove("NOTIFY_SOCKET")
        .env("QOSD_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("spawn qosd run");
    let _daemon = KillOnDrop(child);
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(60), || {
            status(addr)["audit"]["drifting"].as_u64().unwrap_or(0) > 0
        }),
        "no audit in /status:\n{}",
        read_log()
    );
    assert_eq!(status(addr)["cgroup_enforcement"], "audit");
    assert!(
        wait_until(Duration::from_secs(30), || {
            status(addr)["signals"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["signal"] == "memory.available"))
        }),
        "eviction stays on in audit: {}",
        status(addr)
    );
    let m = body_of(addr, "/metrics");
    let changes0 = sample(&m, "qosd_cgroup_audit_drift_changes_total").expect("counter");
    assert!(sample(&m, "qosd_cgroup_audit_drift").unwrap() >= 2.0, "{m}");

    std::fs::write(&g_shares, "2048").unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || {
            found_in_status(&status(addr), &g_shares) == Some(Some("2048".into()))
        }),
        "changed value not in /status:\n{}",
        read_log()
    );
    // A few more passes: still reported once, never corrected.
    let at = status(addr)["last_reconcile"]["at_ms"].as_u64().unwrap();
    assert!(wait_until(Duration::from_secs(30), || {
        status(addr)["last_reconcile"]["at_ms"]
            .as_u64()
            .unwrap_or(0)
            > at + 500
    }));
    assert_eq!(std::fs::read_to_string(&g_shares).unwrap().trim(), "2048");
    let m = body_of(addr, "/metrics");
    assert_eq!(
        sample(&m, "qosd_cgroup_audit_drift_changes_total"),
        Some(changes0 + 1.0),
        "{m}"
    );
    let logged = read_log()
        .lines()
        .filter(|l| {
            l.contains("audit: cgroup value differs")
                && l.contains(g_shares.to_str().unwrap())
                && l.contains("2048")
        })
        .count();
    assert_eq!(logged, 1, "{}", read_log());

    // Set to the planned value (as the kubelet would): no longer reported.
    std::fs::write(&g_shares, "716").unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || {
            let s = status(addr);
            s["audit"].is_object() && found_in_status(&s, &g_shares).is_none()
        }),
        "{}",
        read_log()
    );
    let mut expected = before.clone();
    let after = snapshot(&env.cgroup_root);
    expected.insert(g_shares.clone(), after[&g_shares].clone());
    assert_eq!(after, expected, "the daemon in audit wrote something");
    assert!(!besteffort.exists(), "audit created a cgroup");
}
