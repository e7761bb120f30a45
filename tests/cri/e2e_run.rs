//! End to end: `qosd run` as a daemon against a real containerd with the
//! documented example config (config/qosd.yaml; test-specific settings by
//! flags), scraped with a real HTTP client: /healthz, /readyz after the
//! first reconcile, /metrics with live values, /status; `qosd status` (from
//! the daemon, then live when it is gone); drift corrected; a pod added
//! while running enforced within ~2 s; SIGTERM → exit 0 within 1 s.
//! Plus: a bad config exits 2 before touching any cgroup, and an unknown
//! field is an error naming it.
//!
//! The daemon tests need root (`#[ignore]`d; scripts/test runs them as
//! root, where a missing tool fails them). Cgroups are
//! created only under the support env's unique prefix `/qosd-test-<pid>-<n>`
//! (removed leaf-first by its Drop) and processes are stopped by PID.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::Value;

const EXAMPLE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/qosd.yaml");

/// `qosd run` against `env` with the example config (test-specific
/// settings by flags), `extra` appended.
fn start_daemon(env: &Containerd, extra: &[&str]) -> Daemon {
    let mut args = env.run_args(None);
    // The example starts in dry-run; these tests enforce (flags win).
    args.extend(["--config", EXAMPLE_CONFIG, "--mode", "enforce"]);
    args.extend_from_slice(extra);
    Daemon::start(&args)
}

fn pods_of(doc: &Value) -> (u64, u64, u64) {
    (
        doc["pods"]["guaranteed"].as_u64().unwrap(),
        doc["pods"]["burstable"].as_u64().unwrap(),
        doc["pods"]["best_effort"].as_u64().unwrap(),
    )
}

fn pods_metric(m: &str) -> (Option<f64>, Option<f64>, Option<f64>) {
    (
        sample(m, "qosd_pods{qos_class=\"Guaranteed\"}"),
        sample(m, "qosd_pods{qos_class=\"Burstable\"}"),
        sample(m, "qosd_pods{qos_class=\"BestEffort\"}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn daemon_serves_live_state_and_enforces() {
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
            &PodSpec::new("b").container(
                ContainerSpec::pause("app")
                    .cpu(Some(250), Some(500))
                    .memory(Some(64 * MI), Some(128 * MI)),
            ),
        )
        .await;
    let _be = env
        .run_pod(&PodSpec::new("be").container(ContainerSpec::pause("app")))
        .await;

    let started = Instant::now();
    let mut d = start_daemon(&env, &[]);
    let addr = d.addr;

    // Liveness answers as soon as the server is up.
    let up = wait_until(Duration::from_secs(10), || {
        http_get(addr, "/healthz").is_some_and(|r| r.status == 200)
    });
    d.assert_running();
    assert!(up.is_some(), "/healthz never 200:\n{}", d.log());
    // Readiness once the CRI answered and the first reconcile is done.
    let ready = wait_until(Duration::from_secs(10), || {
        http_get(addr, "/readyz").is_some_and(|r| r.status == 200)
    });
    assert!(ready.is_some(), "/readyz never 200:\n{}", d.log());
    eprintln!(
        "e2e: healthz after {:?}, readyz after {:?} (from spawn)",
        up.unwrap(),
        started.elapsed()
    );
    let r = http_get(addr, "/readyz").unwrap();
    assert_eq!(r.body.trim(), "ok");
    assert_eq!(http_get(addr, "/nope").map(|r| r.status), Some(404));

    // The kubelet's values are in place (first reconcile).
    let gcpu = env.cgroup_dir("cpu", &g);
    assert_eq!(read_trimmed(&gcpu.join("cpu.shares")), "716");
    assert_eq!(read_trimmed(&gcpu.join("cpu.cfs_quota_us")), "70000");
    assert_eq!(
        read_trimmed(&env.cgroup_dir("memory", &g).join("memory.limit_in_bytes")),
        (200 * MI).to_string()
    );
    assert_eq!(
        read_trimmed(&env.cgroup_dir("cpu", &b).join("cpu.shares")),
        "256"
    );

    // /metrics: Prometheus text with live values.
    let r = http_get(addr, "/metrics").unwrap();
    assert!(
        r.header("content-type")
            .unwrap_or("")
            .starts_with("text/plain")
            || r.header("content-type")
                .unwrap_or("")
                .starts_with("application/openmetrics-text"),
        "{:?}",
        r.headers
    );
    let m = r.body;
    let writes0 = sample(&m, "qosd_cgroup_writes_total").expect("qosd_cgroup_writes_total");
    assert!(writes0 >= 1.0, "first reconcile wrote values: {writes0}");
    assert_eq!(pods_metric(&m), (Some(1.0), Some(1.0), Some(1.0)), "\n{m}");
    assert!(sample(&m, "qosd_reconciles_total").unwrap() >= 1.0);
    assert!(sample(&m, "qosd_reconcile_duration_seconds_count").unwrap() >= 1.0);
    assert!(
        m.contains("# TYPE qosd_cgroup_writes counter")
            || m.contains("# TYPE qosd_cgroup_writes_total counter"),
        "\n{m}"
    );
    assert!(m.contains("qosd_build_info{"), "\n{m}");

    // /status: the document the daemon publishes.
    let st = d.status();
    assert_eq!(pods_of(&st), (1, 1, 1), "{st}");
    assert_eq!(st["mode"], "enforce");
    assert_eq!(st["cgroup_version"], "v1");
    assert_eq!(st["cgroup_driver"], "cgroupfs");
    assert_eq!(st["alive"], true);
    assert_eq!(st["ready"], true);
    assert_eq!(st["version"], env!("CARGO_PKG_VERSION"));
    assert!(st["last_reconcile"]["at_ms"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(st["last_reconcile"]["pods"], 3, "{st}");

    // `qosd status` against the daemon: text and JSON.
    let addr_s = addr.to_string();
    let (code, out, err) = qosd(&["status", "--address", &addr_s]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        out.starts_with(&format!("source: daemon at {addr}")),
        "{out}"
    );
    assert!(
        out.contains("mode enforce  cgroup v1/cgroupfs  alive yes  ready yes"),
        "{out}"
    );
    assert!(
        out.contains("pods: Guaranteed 1  Burstable 1  BestEffort 1  (total 3)"),
        "{out}"
    );
    assert!(out.contains("last reconcile: "), "{out}");
    assert!(!out.contains("none yet"), "{out}");
    let (code, out, err) = qosd(&["status", "--address", &addr_s, "--output", "json"]);
    assert_eq!(code, 0, "{err}");
    let sj: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(sj["source"], "daemon");
    assert_eq!(pods_of(&sj), (1, 1, 1));
    assert_eq!(sj["ready"], true);

    // Drift by someone else is corrected by the periodic reconcile (1 s).
    std::fs::write(gcpu.join("cpu.shares"), "4096").unwrap();
    let fixed = wait_until(Duration::from_secs(5), || {
        read_trimmed(&gcpu.join("cpu.shares")) == "716"
    });
    assert!(fixed.is_some(), "drift not corrected:\n{}", d.log());
    eprintln!("e2e: drift corrected after {:?}", fixed.unwrap());
    let writes1 = sample(&d.metrics(), "qosd_cgroup_writes_total").unwrap();
    assert!(writes1 > writes0, "{writes1} > {writes0}");
    assert!(
        d.log().contains("corrected drift"),
        "drift is logged:\n{}",
        d.log()
    );

    // A pod added while running gets its values within ~2 s (relist 1 s).
    let added_at = Instant::now();
    let g2 = env
        .run_pod(
            &PodSpec::new("g2").container(
                ContainerSpec::pause("app")
                    .cpu(Some(300), Some(300))
                    .memory(Some(100 * MI), Some(100 * MI)),
            ),
        )
        .await;
    let started_in = added_at.elapsed();
    let g2cpu = env.cgroup_dir("cpu", &g2);
    let g2mem = env.cgroup_dir("memory", &g2);
    let want_shares = kubelet::shares(300).to_string();
    let want_quota = kubelet::quota(300).to_string();
    let enforced = wait_until(Duration::from_secs(4), || {
        std::fs::read_to_string(g2cpu.join("cpu.shares")).is_ok_and(|s| s.trim() == want_shares)
            && std::fs::read_to_string(g2cpu.join("cpu.cfs_quota_us"))
                .is_ok_and(|s| s.trim() == want_quota)
            && std::fs::read_to_string(g2mem.join("memory.limit_in_bytes"))
                .is_ok_and(|s| s.trim() == (100 * MI).to_string())
    });
    let enforced = enforced.unwrap_or_else(|| {
        panic!(
            "new pod not enforced in 4 s (cpu.shares {:?}):\n{}",
            std::fs::read_to_string(g2cpu.join("cpu.shares")),
            d.log()
        )
    });
    let latency = started_in + enforced;
    eprintln!(
        "e2e: new pod enforced {latency:?} after RunPodSandbox began (start took {started_in:?})"
    );
    assert!(
        enforced < Duration::from_millis(2500),
        "new pod took {enforced:?} after it started"
    );
    let counted = wait_until(Duration::from_secs(3), || {
        pods_metric(&d.metrics()).0 == Some(2.0)
    });
    assert!(counted.is_some(), "{}", d.metrics());
    assert_eq!(pods_of(&d.status()), (2, 1, 1));

    // SIGTERM: exit 0 within 1 s.
    d.assert_running();
    let (st, took) = d
        .terminate(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("qosd run still running 5 s after SIGTERM"));
    eprintln!("e2e: exited {st} {took:?} after SIGTERM");
    assert_eq!(st.code(), Some(0), "{}", d.log());
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(http_get(addr, "/healthz").is_none(), "listener closed");

    // With the daemon gone, `qosd status` computes live and says so.
    let (code, out, err) = qosd(&[
        "status",
        "--address",
        &addr_s,
        "--config",
        EXAMPLE_CONFIG,
        "--runtime-endpoint",
        &env.endpoint,
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        out.starts_with("source: live (no qosd daemon answered"),
        "{out}"
    );
    assert!(
        out.contains("pods: Guaranteed 2  Burstable 1  BestEffort 1  (total 4)"),
        "{out}"
    );
    assert!(out.contains("memory.available"), "{out}");
    assert!(out.contains("hard <100Mi"), "{out}");
    let (code, out, err) = qosd(&[
        "status",
        "--address",
        &addr_s,
        "--config",
        EXAMPLE_CONFIG,
        "--runtime-endpoint",
        &env.endpoint,
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let lj: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(lj["source"], "live");
    assert_eq!(pods_of(&lj), (2, 1, 1));
    let mem = lj["signals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["signal"] == "memory.available")
        .expect("memory.available in live status");
    assert!(mem["observed"].as_i64().unwrap() > 0, "{mem}");
    assert!(mem["capacity"].as_i64().unwrap() >= mem["observed"].as_i64().unwrap());
    assert_eq!(mem["thresholds"][0]["threshold"], "100Mi");
    assert_eq!(mem["thresholds"][0]["value"], 100 * MI);
}

// ------------------------------------------------------------ bad configs

fn run_with_config(config: &Path, cgroup_root: &str) -> (i32, String, String) {
    let addr = free_addr().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let sock = format!("unix://{}", tmp.path().join("none.sock").display());
    // A bad config must exit at once; never leave a daemon behind.
    output_within(
        Command::new(env!("CARGO_BIN_EXE_qosd"))
            .args([
                "run",
                "--config",
                config.to_str().unwrap(),
                "--cgroup-version",
                "v1",
                "--cgroup-root",
                cgroup_root,
                "--runtime-endpoint",
                &sock,
                "--metrics-address",
                &addr,
            ])
            .env_remove("NOTIFY_SOCKET")
            .env_remove("QOSD_CONFIG")
            .stderr(Stdio::piped()),
        Duration::from_secs(10),
        "qosd run with a bad config",
    )
}

/// The example config with one line replaced (so the rest stays valid).
fn example_with(tmp: &Path, name: &str, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(EXAMPLE_CONFIG).unwrap();
    assert!(text.contains(from), "example config lacks {from:?}");
    let p = tmp.join(name);
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    p
}

/// The bad configs and the words each error must name.
fn bad_configs(tmp: &Path) -> Vec<(PathBuf, Vec<&'static str>)> {
    let bad_value = example_with(
        tmp,
        "bad-value.yaml",
        "memory.available: \"100Mi\"",
        "memory.available: \"lots\"",
    );
    let unknown = example_with(
        tmp,
        "unknown.yaml",
        "evictionMaxPodGracePeriod: 30",
        "evictionMaxPodGracePeriod: 30\nevictonHard:\n  memory.available: \"1Gi\"",
    );
    let bad_syntax = tmp.join("syntax.yaml");
    std::fs::write(&bad_syntax, "evictionHard: [unclosed\n").unwrap();
    vec![
        (bad_value, vec!["evictionHard", "lots"]),
        (unknown, vec!["evictonHard"]),
        (bad_syntax, vec![]),
    ]
}

/// `qosd run` with each bad config exits 2 naming the problem.
fn check_bad_configs(tmp: &Path, cgroup_root: &str, after_each: impl Fn(&Path)) {
    for (file, must_name) in bad_configs(tmp) {
        let (code, out, err) = run_with_config(&file, cgroup_root);
        assert_eq!(code, 2, "{}: exit {code}\n{err}\n{out}", file.display());
        for word in must_name {
            assert!(
                err.contains(word),
                "{}: error must name {word:?}: {err}",
                file.display()
            );
        }
        after_each(&file);
    }
}

#[test]
fn bad_config_exits_2_naming_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let prefix = format!("/qosd-test-{}-badcfg-absent", std::process::id());
    check_bad_configs(tmp.path(), &prefix, |_| {});
    // `qosd status` rejects the same files the same way.
    let unknown = tmp.path().join("unknown.yaml");
    let (code, _out, err) = qosd(&["status", "--config", unknown.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("evictonHard"), "{err}");
}

/// Given a real, existing cgroup root of its own, the daemon with a bad
/// config exits 2 before creating anything under it: the only thing
/// stopping it from creating kubepods is the config.
#[test]
#[ignore = "needs root: creates cgroups under /sys/fs/cgroup"]
fn bad_config_exits_2_before_touching_cgroups() {
    require_root("creates cgroups under /sys/fs/cgroup");
    let tmp = tempfile::tempdir().unwrap();
    let prefix = format!("/qosd-test-{}-badcfg", std::process::id());
    let dirs: Vec<PathBuf> = ["cpu", "memory", "pids"]
        .iter()
        .map(|c| Path::new("/sys/fs/cgroup").join(c).join(&prefix[1..]))
        .filter(|d| d.parent().is_some_and(Path::is_dir))
        .collect();
    assert!(
        !dirs.is_empty(),
        "no cgroup v1 cpu, memory or pids hierarchy"
    );
    let mut guard = Cgroups::new();
    for d in &dirs {
        guard.create(d);
    }
    check_bad_configs(tmp.path(), &prefix, |file| {
        for d in &dirs {
            let entries: Vec<_> = std::fs::read_dir(d)
                .unwrap()
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.file_name())
                .collect();
            assert!(
                entries.is_empty(),
                "{}: cgroups created under {} despite a bad config: {entries:?}",
                file.display(),
                d.display()
            );
        }
    });
}

#[test]
fn example_config_is_valid() {
    let (code, out, err) = qosd(&["config", "check", EXAMPLE_CONFIG]);
    assert_eq!(code, 0, "{err}\n{out}");
}

#[test]
fn status_without_daemon_or_runtime_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let addr = free_addr().to_string();
    let sock = format!("unix://{}", tmp.path().join("none.sock").display());
    let (code, out, err) = qosd(&[
        "status",
        "--address",
        &addr,
        "--runtime-endpoint",
        &sock,
        "--timeout",
        "300ms",
    ]);
    assert_eq!(code, 1, "{err}\n{out}");
    assert!(out.starts_with("source: live"), "{out}");
    assert!(out.contains("did not answer"), "{out}");
    assert!(err.contains("neither a qosd daemon"), "{err}");
    let (code, out, _) = qosd(&[
        "status",
        "--address",
        &addr,
        "--runtime-endpoint",
        &sock,
        "--timeout",
        "300ms",
        "--output",
        "json",
    ]);
    assert_eq!(code, 1);
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["source"], "live");
    assert!(j["notes"].as_array().unwrap().len() >= 2, "{j}");
}

/// The runtime goes away under a running daemon: readiness drops (naming
/// the runtime), liveness holds, SIGTERM is still honoured at once; when
/// the runtime is back, readiness returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn daemon_survives_a_runtime_restart() {
    require_containerd();
    let mut env = Containerd::start();
    let _g = env
        .run_pod(
            &PodSpec::new("g").container(
                ContainerSpec::pause("app")
                    .cpu(Some(100), Some(100))
                    .memory(Some(32 * MI), Some(32 * MI)),
            ),
        )
        .await;
    let mut d = start_daemon(&env, &[]);
    let addr = d.addr;
    let ready = |want: u16| move || http_get(addr, "/readyz").is_some_and(|r| r.status == want);
    assert!(
        wait_until(Duration::from_secs(10), ready(200)).is_some(),
        "{}",
        d.log()
    );

    env.stop();
    // The eviction loop may notice first (a signal read through the
    // runtime fails: `/readyz` names that); the main loop then names the
    // runtime itself.
    let down = wait_until(Duration::from_secs(15), || {
        http_get(addr, "/readyz").is_some_and(|r| r.status == 503 && r.body.contains("CRI"))
    });
    assert!(
        down.is_some(),
        "/readyz still 200 with the runtime down:\n{}",
        d.log()
    );
    eprintln!(
        "e2e: /readyz 503 {:?} after the runtime stopped",
        down.unwrap()
    );
    let r = http_get(addr, "/readyz").unwrap();
    assert!(r.body.contains("CRI"), "{}", r.body);
    let h = http_get(addr, "/healthz").unwrap();
    assert_eq!(
        h.status, 200,
        "liveness must not fail because the runtime is down: {}",
        h.body
    );
    let m = d.metrics();
    assert!(
        sample(&m, "qosd_errors_total{kind=\"pod_source\"}").unwrap_or(0.0) >= 1.0,
        "\n{m}"
    );

    env.start_again();
    let back = wait_until(Duration::from_secs(15), ready(200));
    assert!(
        back.is_some(),
        "/readyz not back after the runtime returned:\n{}",
        d.log()
    );
    eprintln!(
        "e2e: /readyz 200 again {:?} after the runtime returned",
        back.unwrap()
    );

    // Down again, then SIGTERM while the runtime is unreachable.
    env.stop();
    assert!(wait_until(Duration::from_secs(15), ready(503)).is_some());
    let (st, took) = d
        .terminate(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("still running 15 s after SIGTERM"));
    eprintln!("e2e: runtime down: exited {st} {took:?} after SIGTERM");
    assert_eq!(st.code(), Some(0), "{}", d.log());
    assert!(
        took < Duration::from_secs(1),
        "took {took:?} with the runtime down"
    );
    env.start_again(); // so Drop can remove the pod through the CRI
}
