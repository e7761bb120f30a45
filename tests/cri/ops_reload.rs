//! Issue 12 with a real containerd on cgroup v1 (needs root):
//!
//! * SIGHUP reloads: a daemon started in dry-run with a threshold that is
//!   never met is switched to enforce with a threshold that is met by
//!   editing its config file and sending SIGHUP; `/status` shows the new
//!   mode and generation, kubepods gets its real memory limit (a write) and
//!   the BestEffort memory hog is evicted (a real kill); the reaction
//!   histogram has one observation, the CRI call metrics are non-zero, the
//!   eviction hook ran with the eviction in its environment. An invalid
//!   file and a field that needs a restart are refused and reported.
//! * A cgroup root that does not match the runtime's pod parents: `--once`
//!   exits 2 naming the pods, the parent and the matching setting, writing
//!   nothing; the daemon stays not ready.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn config(env: &Containerd, port: u16, mode: &str, threshold: &str, extra: &str) -> String {
    format!(
        "mode: {mode}\nruntimeEndpoint: {}\ncgroupVersion: v1\ncgroupRoot: {}\nnodeMemory: 512Mi\n\
         evictionHard: {{allocatableMemory.available: {threshold}}}\nevictionBackend: kill\n\
         metricsAddress: 127.0.0.1:{port}\nreconcileInterval: 1s\nrelistInterval: 1s\n\
         rootDir: {}\nhugepageSizes: none\n{extra}",
        env.endpoint,
        env.cgroup_root,
        env.dir().display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: a private containerd, real cgroup v1 writes and a real eviction"]
async fn sighup_switches_dry_run_to_enforce_and_changes_a_threshold() {
    require_containerd();
    let env = Containerd::start();
    let g = env
        .run_pod(
            &PodSpec::new("guaranteed").container(
                ContainerSpec::pause("app")
                    .cpu(Some(100), Some(100))
                    .memory(Some(64 * MI), Some(64 * MI)),
            ),
        )
        .await;
    // memhog <initial MiB> <step MiB> <interval ms> <max MiB>: grows one
    // step per SIGUSR1 (the interval is an hour).
    let be = env
        .run_pod(
            &PodSpec::new("besteffort")
                .container(ContainerSpec::memhog("hog", &["8", "16", "3600000", "300"])),
        )
        .await;
    let be_pid = env.container_pid(&be.containers[0].1).await;
    let tmp = tempfile::tempdir().unwrap();
    let hook_out = tmp.path().join("hook.out");
    let hook = tmp.path().join("hook.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\necho \"$QOSD_POD_NAME $QOSD_QOS_CLASS $QOSD_SIGNAL $QOSD_THRESHOLD_KIND $QOSD_OBSERVED $QOSD_THRESHOLD\" >> {}\n",
            hook_out.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hook_line = format!("evictionHook: {}\n", hook.display());

    let port = free_port();
    let cfg = tmp.path().join("config.yaml");
    // Dry run, and a threshold no pod here can reach.
    std::fs::write(&cfg, config(&env, port, "dry-run", "1Mi", &hook_line)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args(["run", "--config", cfg.to_str().unwrap()])
        .env_remove("CONTAINER_RUNTIME_ENDPOINT")
        .env_remove("QOSD_CONFIG")
        .env("QOSD_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let d = TermOnDrop(child);
    wait_for("the first reconcile", Duration::from_secs(30), || {
        status_json(port)["ready"] == true
    });
    let st = status_json(port);
    assert_eq!(st["mode"], "dry-run", "{st}");
    assert_eq!(st["config_generation"], 1, "{st}");

    // Grow the hog to ~200 MiB: allocatable available ~300 MiB of 512 MiB,
    // far above 1Mi: no eviction, and none would be made in dry-run anyway.
    let mem = env.cgroup_dir("memory", &be);
    let usage = || {
        read_or_empty(&mem.join("memory.usage_in_bytes"))
            .parse::<i64>()
            .unwrap_or(0)
    };
    wait_for("the hog's start", Duration::from_secs(10), || {
        usage() >= 8 * MI
    });
    wait_for("the hog's growth", Duration::from_secs(20), || {
        let _ = kill(Pid::from_raw(be_pid), Signal::SIGUSR1);
        std::thread::sleep(Duration::from_millis(100));
        usage() > 150 * MI
    });
    let kubepods = Path::new("/sys/fs/cgroup/memory")
        .join(env.cgroup_root.trim_start_matches('/'))
        .join("kubepods");
    wait_for("a dry-run reconcile", Duration::from_secs(10), || {
        sample(&metrics_text(port), "qosd_dry_run_cgroup_writes_total").unwrap_or(0.0) > 0.0
    });
    std::thread::sleep(Duration::from_millis(1500));
    let m = metrics_text(port);
    assert_eq!(sample(&m, "qosd_cgroup_writes_total"), Some(0.0), "{m}");
    assert_ne!(
        read_or_empty(&kubepods.join("memory.limit_in_bytes")),
        (512 * MI).to_string(),
        "dry-run wrote kubepods' memory limit"
    );
    assert!(alive(be_pid), "evicted in dry-run");

    // Edit the file: enforce, and a threshold the hog's usage now meets.
    std::fs::write(&cfg, config(&env, port, "enforce", "400Mi", &hook_line)).unwrap();
    d.signal(Signal::SIGHUP);
    wait_for("the reload", Duration::from_secs(10), || {
        status_json(port)["config_generation"] == 2
    });
    let st = status_json(port);
    assert_eq!(st["mode"], "enforce", "{st}");
    assert_eq!(st["last_reload"], "applied", "{st}");
    // A real write...
    wait_for("kubepods' memory limit", Duration::from_secs(10), || {
        read_or_empty(&kubepods.join("memory.limit_in_bytes")) == (512 * MI).to_string()
    });
    // ... and a real eviction with the new threshold.
    wait_for(
        "the BestEffort pod's eviction",
        Duration::from_secs(20),
        || !alive(be_pid),
    );
    let st = status_json(port);
    let ev = &st["last_evictions"][0];
    assert_eq!(ev["uid"], be.spec.uid.as_str(), "{st}");
    assert_eq!(ev["backend"], "kill", "{st}");
    assert_eq!(ev["threshold"], 400 * MI, "{st}");
    let th = st["signals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["signal"] == "allocatableMemory.available")
        .unwrap_or_else(|| panic!("{st}"));
    assert_eq!(th["thresholds"][0]["value"], 400 * MI, "{th}");
    assert!(alive(env.container_pid(&g.containers[0].1).await));

    // Metrics: one reaction observation, CRI calls counted, real counters.
    let m = metrics_text(port);
    assert_eq!(
        sample(&m, "qosd_eviction_reaction_seconds_count"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            "qosd_evictions_total{eviction_signal=\"allocatableMemory.available\",qos_class=\"BestEffort\"}"
        ),
        Some(1.0),
        "{m}"
    );
    // Dry-run counted nothing: its series are all still at 0.
    assert!(
        m.lines()
            .filter(|l| l.starts_with("qosd_dry_run_evictions_total{"))
            .all(|l| l.ends_with(" 0")),
        "{m}"
    );
    assert!(
        sample(&m, "qosd_cri_calls_total{method=\"ListPodSandbox\"}").unwrap_or(0.0) > 0.0,
        "{m}"
    );
    assert!(
        sample(
            &m,
            "qosd_cri_call_duration_seconds_count{method=\"ListPodSandbox\"}"
        )
        .unwrap_or(0.0)
            > 0.0,
        "{m}"
    );
    assert_eq!(
        sample(&m, "qosd_config_reload_total{result=\"applied\"}"),
        Some(1.0)
    );
    assert!(
        sample(&m, "qosd_cgroup_writes_total").unwrap() >= 1.0,
        "{m}"
    );
    // The hook ran once, with the eviction in its environment.
    wait_for("the eviction hook", Duration::from_secs(10), || {
        hook_out.exists()
    });
    wait_for("the hook's result", Duration::from_secs(10), || {
        sample(
            &metrics_text(port),
            "qosd_eviction_hook_runs_total{result=\"ok\"}",
        ) == Some(1.0)
    });
    let line = std::fs::read_to_string(&hook_out).unwrap();
    assert!(
        line.starts_with("besteffort BestEffort allocatableMemory.available hard ")
            && line.trim_end().ends_with(&(400 * MI).to_string()),
        "{line}"
    );

    // An invalid file changes nothing and is reported.
    std::fs::write(&cfg, "mode: yolo\n").unwrap();
    d.signal(Signal::SIGHUP);
    wait_for("the invalid reload", Duration::from_secs(10), || {
        status_json(port)["last_reload"]
            .as_str()
            .is_some_and(|r| r.starts_with("invalid"))
    });
    let st = status_json(port);
    assert_eq!(st["config_generation"], 2);
    assert_eq!(st["mode"], "enforce");
    // A field that needs a restart: refused whole, naming it.
    std::fs::write(
        &cfg,
        config(&env, port, "dry-run", "400Mi", &hook_line)
            .replace(&format!("127.0.0.1:{port}"), "127.0.0.1:1"),
    )
    .unwrap();
    d.signal(Signal::SIGHUP);
    wait_for("the refused reload", Duration::from_secs(10), || {
        status_json(port)["last_reload"]
            .as_str()
            .is_some_and(|r| r.starts_with("restart_required") && r.contains("metricsAddress"))
    });
    let st = status_json(port);
    assert_eq!(st["mode"], "enforce", "the refused reload changed the mode");
    let m = metrics_text(port);
    assert_eq!(
        sample(&m, "qosd_config_reload_total{result=\"invalid\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&m, "qosd_config_reload_total{result=\"restart_required\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&m, "qosd_errors_total{kind=\"config_reload\"}"),
        Some(2.0)
    );
}

/// A cgroup directory of the test (under the env's unique root) in the
/// v1 hierarchies qosd writes.
fn make_cgroup(rel: &str) -> Vec<PathBuf> {
    let mut made = Vec::new();
    for c in ["cpu", "memory", "pids"] {
        let d = Path::new("/sys/fs/cgroup")
            .join(c)
            .join(rel.trim_start_matches('/'));
        std::fs::create_dir_all(&d).unwrap();
        made.push(d);
    }
    made
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: a private containerd and real cgroup v1 hierarchies"]
async fn a_cgroup_root_the_runtime_does_not_use_is_refused() {
    require_containerd();
    let env = Containerd::start();
    let be = env
        .run_pod(&PodSpec::new("besteffort").container(ContainerSpec::pause("app")))
        .await;
    // Configured: a root that exists but is not where the runtime puts pods.
    let wrong = format!("{}/elsewhere", env.cgroup_root);
    let dirs = make_cgroup(&wrong);
    let args = |extra: &[&str]| {
        let mut a: Vec<String> = [
            "run",
            "--config",
            "/dev/null",
            "--runtime-endpoint",
            &env.endpoint,
            "--cgroup-version",
            "v1",
            "--cgroup-root",
            &wrong,
            "--hugepage-sizes",
            "none",
            "--root-dir",
            &env.dir().display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let out = Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args(args(&["--once"]))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("refusing to build a parallel cgroup tree"),
        "{err}"
    );
    assert!(
        err.contains(&format!("qosd-test/besteffort ({})", be.spec.uid)),
        "{err}"
    );
    assert!(err.contains(&be.cgroup_parent), "{err}");
    assert!(
        err.contains(&format!("cgroupRoot: {:?}", env.cgroup_root)),
        "names the matching setting: {err}"
    );
    for d in &dirs {
        assert!(
            std::fs::read_dir(d)
                .unwrap()
                .all(|e| !e.unwrap().file_type().unwrap().is_dir()),
            "something was created under {}",
            d.display()
        );
    }
    // `plan --cri` is the daemon's plan: the same refusal.
    let out = Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args([
            "plan",
            "--cri",
            "--config",
            "/dev/null",
            "--runtime-endpoint",
            &env.endpoint,
            "--cgroup-version",
            "v1",
            "--cgroup-root",
            &wrong,
            "--hugepage-sizes",
            "none",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // As a daemon: running, not ready, nothing written.
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args(args(&[
            "--metrics-address",
            &addr,
            "--reconcile-interval",
            "1s",
        ]))
        .env("QOSD_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let _d = TermOnDrop(child);
    wait_for("the refusal", Duration::from_secs(20), || {
        sample(
            &metrics_text(port),
            "qosd_errors_total{kind=\"parent_mismatch\"}",
        ) == Some(1.0)
    });
    let st = status_json(port);
    assert_eq!(st["ready"], false, "{st}");
    assert!(
        st["not_ready_reason"]
            .as_str()
            .is_some_and(|r| r.contains("do not match cgroupRoot")),
        "{st}"
    );
    assert_eq!(sample(&metrics_text(port), "qosd_ready"), Some(0.0));
    for d in &dirs {
        assert!(!d.join("kubepods").exists(), "{} written", d.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: a private containerd and its pods' cgroups"]
async fn eviction_order_cri_reads_usage_from_the_live_cgroups() {
    require_containerd();
    let env = Containerd::start();
    let be = env
        .run_pod(
            &PodSpec::new("besteffort")
                .container(ContainerSpec::memhog("hog", &["8", "16", "3600000", "100"])),
        )
        .await;
    let g = env
        .run_pod(
            &PodSpec::new("guaranteed").container(
                ContainerSpec::pause("app")
                    .cpu(Some(100), Some(100))
                    .memory(Some(64 * MI), Some(64 * MI)),
            ),
        )
        .await;
    let pid = env.container_pid(&be.containers[0].1).await;
    let mem = env.cgroup_dir("memory", &be);
    let usage = || {
        read_or_empty(&mem.join("memory.usage_in_bytes"))
            .parse::<i64>()
            .unwrap_or(0)
    };
    // Its initial 8 MiB first (signal handlers installed), then growth.
    wait_for("the hog's start", Duration::from_secs(10), || {
        usage() >= 8 * MI
    });
    wait_for("the hog's growth", Duration::from_secs(10), || {
        let _ = kill(Pid::from_raw(pid), Signal::SIGUSR1);
        std::thread::sleep(Duration::from_millis(100));
        usage() > 60 * MI
    });
    let out = Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args([
            "eviction-order",
            "--cri",
            "--config",
            "/dev/null",
            "--cgroup-version",
            "v1",
            "--cgroup-root",
            &env.cgroup_root,
            "--hugepage-sizes",
            "none",
            "-o",
            "json",
        ])
        // The endpoint from the environment, like crictl.
        .env("CONTAINER_RUNTIME_ENDPOINT", &env.endpoint)
        .env_remove("QOSD_CONFIG")
        .output()
        .unwrap();
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_contract("eviction-order", &json);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let order = doc["order"].as_array().unwrap();
    assert_eq!(order[0]["uid"], be.spec.uid.as_str(), "{doc}");
    assert_eq!(order[0]["usage_known"], true, "{doc}");
    assert!(order[0]["usage_bytes"].as_i64().unwrap() > 60 * MI, "{doc}");
    assert_eq!(order[1]["uid"], g.spec.uid.as_str(), "{doc}");
    assert_eq!(order[1]["usage_known"], true, "{doc}");
}
