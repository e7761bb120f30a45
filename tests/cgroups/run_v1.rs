//! `qosd run` on this machine's real cgroup v1 hierarchies with pods in a
//! real containerd: every QoS class gets the kubelet's values, a steady
//! node costs zero writes, drift is corrected, orphaned pod cgroups are
//! removed, and `--dry-run` shows the writes `qosd plan --cri` plans.
//! Needs root (skips otherwise, saying why).

use std::path::Path;
use std::time::Duration;

use crate::support::*;
use serde_json::Value;

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

/// The inotify watches `pid` holds, counted by the kernel: one `inotify wd:`
/// line per watch in the fdinfo of each of its inotify descriptors (pod
/// cgroup events and planned files alike).
fn inotify_watches(pid: i32) -> usize {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("qosd's fds");
    fds.flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:inotify")
        })
        .map(|e| {
            let info = std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                e.file_name().to_string_lossy()
            ))
            .unwrap_or_default();
            info.lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count()
        })
        .sum()
}

/// Pods coming and going leave no inotify watch behind in `qosd run`
/// (issue 17: memory grew under pod churn). cgroupfs never ends the watch
/// of a removed directory by itself (no `IN_IGNORED`), so a watch left on
/// each pod cgroup that went away would stay, in the kernel and in qosd's
/// maps, for as long as the daemon runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn pod_churn_leaves_no_inotify_watch_behind() {
    require_containerd();
    let env = Containerd::start();
    let spec = |name: &str, cpu: i64| {
        PodSpec::new(name).container(ContainerSpec::pause("app").cpu(Some(cpu), Some(2 * cpu)))
    };
    let keep = env.run_pod(&spec("keep", 100)).await;
    let mut args = env.run_args(None);
    // Longer than a pod start takes here (a sandbox being created is not
    // listed yet: `0s` could remove its new, empty pod cgroup).
    args.extend(["--orphan-grace-period", "20s"]);
    let mut d = Daemon::start_with(&args, &[("QOSD_LOG", "warn".as_ref())]);
    let shares = |p: &RunningPod| {
        std::fs::read_to_string(env.cgroup_dir("cpu", p).join("cpu.shares"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let want = |p: &RunningPod| {
        kubelet::shares(p.spec.containers[0].cpu_effective().0.unwrap()).to_string()
    };
    wait_for("the first pod enforced", Duration::from_secs(60), || {
        shares(&keep) == want(&keep)
    });
    // A few reconciles (1 s apart) later, the watches are those of a steady
    // node: kubepods, its QoS cgroups, the pod, the planned files.
    let r0 = d
        .metric("qosd_reconciles_total")
        .expect("qosd_reconciles_total");
    wait_for("three more reconciles", Duration::from_secs(60), || {
        d.metric("qosd_reconciles_total").unwrap_or(0.0) >= r0 + 3.0
    });
    d.assert_running();
    let steady = inotify_watches(d.pid());
    assert!(steady > 0, "qosd run holds no inotify watch");

    let mut pods = Vec::new();
    for i in 0..6 {
        pods.push(env.run_pod(&spec(&format!("churn{i}"), 50 + 10 * i)).await);
    }
    wait_for("the new pods enforced", Duration::from_secs(60), || {
        pods.iter().all(|p| shares(p) == want(p))
    });
    let r1 = d.metric("qosd_reconciles_total").unwrap_or(0.0);
    wait_for("two more reconciles", Duration::from_secs(60), || {
        d.metric("qosd_reconciles_total").unwrap_or(0.0) >= r1 + 2.0
    });
    let busy = inotify_watches(d.pid());
    assert!(
        busy > steady,
        "the new pods' cgroups and files are watched: {busy} watches, {steady} before"
    );

    for p in &pods {
        env.remove_pod(p).await;
    }
    // runc leaves the pod cgroups behind; qosd removes them (after 20 s).
    wait_for(
        "the removed pods' cgroups gone",
        Duration::from_secs(120),
        || pods.iter().all(|p| !env.cgroup_dir("cpu", p).exists()),
    );
    let settled = wait_until(Duration::from_secs(30), || {
        inotify_watches(d.pid()) == steady
    });
    let now = inotify_watches(d.pid());
    assert!(
        settled.is_some(),
        "{now} inotify watches after 6 pods came and went, {steady} before (and {busy} with them)"
    );
    d.assert_running();
    assert_eq!(
        shares(&keep),
        want(&keep),
        "the pod that stayed is still enforced"
    );
    d.stop();
}
