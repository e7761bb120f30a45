//! `qosd run` on this machine's real cgroup v1 hierarchies with pods in a
//! real containerd: every QoS class gets the kubelet's values, a steady
//! node costs zero writes, drift is corrected, orphaned pod cgroups are
//! removed, and `--dry-run` shows the writes `qosd plan --cri` plans.
//! Needs root (skips otherwise, saying why).

mod support;

use std::path::Path;

use serde_json::Value;
use support::*;

fn run_once(env: &Containerd, extra: &[&str]) -> Value {
    let mut args = vec!["run", "--once", "--output", "json"];
    args.extend(env.qosd_flags());
    args.extend_from_slice(extra);
    let (code, out, err) = qosd(&args);
    assert_eq!(code, 0, "qosd run --once failed: {err}\n{out}");
    check_contract("run-once", &out);
    serde_json::from_str(&out).unwrap()
}

fn writes(doc: &Value, key: &str) -> Vec<(String, String)> {
    doc[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["file"].as_str().unwrap().to_string(),
                w["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn run_enforces_kubelet_values_on_real_cgroup_v1() {
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
    let b = env
        .run_pod(
            &PodSpec::new("b")
                .container(
                    ContainerSpec::pause("app")
                        .cpu(Some(250), Some(500))
                        .memory(Some(64 * MI), Some(128 * MI)),
                )
                .container(
                    ContainerSpec::pause("side")
                        .cpu(Some(250), Some(500))
                        .memory(Some(64 * MI), Some(128 * MI)),
                ),
        )
        .await;
    let be = env
        .run_pod(&PodSpec::new("be").container(ContainerSpec::pause("app")))
        .await;

    // Dry run first: nothing written, and the writes it would make are a
    // subset of what `qosd plan --cri` prints (the rest already hold).
    let dry = run_once(&env, &["--dry-run"]);
    let mut plan_args = vec!["plan", "--cri", "--output", "json"];
    plan_args.extend(env.qosd_flags());
    let (code, plan_out, err) = qosd(&plan_args);
    assert_eq!(code, 0, "{err}");
    let plan: Value = serde_json::from_str(&plan_out).unwrap();
    assert_eq!(
        writes(&dry, "planned"),
        writes(&plan, "writes"),
        "run --dry-run plans exactly what plan --cri prints"
    );
    let dry_writes = writes(&dry, "writes");
    assert!(!dry_writes.is_empty());
    for w in &dry_writes {
        assert!(writes(&plan, "writes").contains(w), "{w:?} not planned");
    }
    let kubepods_cpu = Path::new("/sys/fs/cgroup/cpu")
        .join(env.cgroup_root.trim_start_matches('/'))
        .join("kubepods");
    assert_ne!(
        read_trimmed(&kubepods_cpu.join("cpu.shares")),
        plan["writes"][0]["value"].as_str().unwrap(),
        "dry run must not write"
    );

    // Enforce.
    let first = run_once(&env, &[]);
    assert!(first["errors"].as_array().unwrap().is_empty(), "{first}");
    assert!(!writes(&first, "writes").is_empty());

    let gcpu = env.cgroup_dir("cpu", &g);
    let gmem = env.cgroup_dir("memory", &g);
    assert_eq!(read_trimmed(&gcpu.join("cpu.shares")), "716");
    assert_eq!(read_trimmed(&gcpu.join("cpu.cfs_quota_us")), "70000");
    assert_eq!(read_trimmed(&gcpu.join("cpu.cfs_period_us")), "100000");
    assert_eq!(
        read_trimmed(&gmem.join("memory.limit_in_bytes")),
        (200 * MI).to_string()
    );
    let bcpu = env.cgroup_dir("cpu", &b);
    assert_eq!(read_trimmed(&bcpu.join("cpu.shares")), "512");
    assert_eq!(read_trimmed(&bcpu.join("cpu.cfs_quota_us")), "100000");
    assert_eq!(
        read_trimmed(&env.cgroup_dir("memory", &b).join("memory.limit_in_bytes")),
        (256 * MI).to_string()
    );
    assert_eq!(
        read_trimmed(&env.cgroup_dir("cpu", &be).join("cpu.shares")),
        "2"
    );
    assert_eq!(
        read_trimmed(&kubepods_cpu.join("besteffort/cpu.shares")),
        "2"
    );
    assert_eq!(
        read_trimmed(&kubepods_cpu.join("burstable/cpu.shares")),
        "512"
    );

    // Steady state: zero writes.
    let second = run_once(&env, &[]);
    assert_eq!(
        writes(&second, "writes"),
        vec![],
        "steady node must not be written"
    );

    // Drift by someone else is corrected, and only that.
    std::fs::write(gcpu.join("cpu.shares"), "4096").unwrap();
    let third = run_once(&env, &[]);
    let w = writes(&third, "writes");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].0.ends_with("cpu.shares") && w[0].1 == "716", "{w:?}");
    assert_eq!(read_trimmed(&gcpu.join("cpu.shares")), "716");

    // A removed pod leaves its pod cgroup (runc never removes it): qosd
    // removes it once the grace period is over, and not before.
    env.remove_pod(&be).await;
    let orphan = env.cgroup_dir("cpu", &be);
    assert!(orphan.exists(), "runc leaves pod cgroups behind");
    let keep = run_once(&env, &["--orphan-grace-period", "1h"]);
    assert!(keep["orphans_removed"].as_array().unwrap().is_empty());
    assert!(orphan.exists());
    // --once has no memory of earlier passes: a zero grace removes at once.
    let gone = run_once(&env, &["--orphan-grace-period", "0s"]);
    let removed: Vec<&str> = gone["orphans_removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!orphan.exists(), "orphan not removed: {removed:?}");
    assert!(
        env.cgroup_dir("cpu", &g).exists(),
        "live pods' cgroups stay"
    );
    assert!(env.cgroup_dir("memory", &b).exists());
}

#[test]
fn run_refuses_a_missing_cgroup_root() {
    let (code, _out, err) = qosd(&[
        "run",
        "--once",
        "--pods",
        "fixtures/pods",
        "--cgroup-version",
        "v1",
        "--cgroup-root",
        "/qosd-test-does-not-exist-42",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn run_rejects_bad_manifests_before_writing() {
    let (code, _out, err) = qosd(&[
        "run",
        "--once",
        "--pods",
        "fixtures/bad",
        "--cgroup-version",
        "v1",
    ]);
    assert_eq!(code, 2, "{err}");
}
