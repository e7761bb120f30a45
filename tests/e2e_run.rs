//! End to end: `qosd run` as a daemon against a real containerd with the
//! documented example config (config/qosd.yaml; test-specific settings by
//! flags), scraped with a real HTTP client: /healthz, /readyz after the
//! first reconcile, /metrics with live values, /status; `qosd status` (from
//! the daemon, then live when it is gone); drift corrected; a pod added
//! while running enforced within ~2 s; SIGTERM → exit 0 within 1 s.
//! Plus: a bad config exits 2 before touching any cgroup, and an unknown
//! field is an error naming it.
//!
//! The daemon test needs root (skips otherwise, saying why). Cgroups are
//! created only under the support env's unique prefix `/qosd-test-<pid>-<n>`
//! (removed leaf-first by its Drop) and processes are stopped by PID.

mod support;

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

const EXAMPLE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/qosd.yaml");

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

/// A free loopback port (bound, then released for the daemon).
fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Poll `f` every 20 ms until it returns true or `timeout` passes; the time
/// it took, or None.
fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    loop {
        if f() {
            return Some(t.elapsed());
        }
        if t.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn get(addr: SocketAddr, path: &str) -> Option<qosd::telemetry::client::HttpResponse> {
    qosd::telemetry::client::get(addr, path, Duration::from_secs(2)).ok()
}

/// The value of one sample (`name{labels}` exactly as exposed).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

/// `qosd run` as a child process; killed by PID (SIGKILL) on drop if it
/// is still running.
struct Daemon {
    child: Option<Child>,
    log: PathBuf,
    addr: SocketAddr,
}

impl Daemon {
    fn start(env: &Containerd, dir: &Path, extra: &[&str]) -> Daemon {
        let addr = free_addr();
        let log = dir.join("qosd.log");
        let out = std::fs::File::create(&log).unwrap();
        let addr_s = addr.to_string();
        let root_dir = env.dir().display().to_string();
        let mut args = vec![
            "run",
            "--config",
            EXAMPLE_CONFIG,
            // The example starts in dry-run; this test enforces.
            "--mode",
            "enforce",
            "--runtime-endpoint",
            &env.endpoint,
            "--cgroup-version",
            "v1",
            "--cgroup-root",
            &env.cgroup_root,
            "--metrics-address",
            &addr_s,
            "--reconcile-interval",
            "1s",
            "--relist-interval",
            "1s",
            // nodefs signals on the env's own filesystem (no kubelet here).
            "--root-dir",
            &root_dir,
        ];
        args.extend_from_slice(extra);
        let child = Command::new(env!("CARGO_BIN_EXE_qosd"))
            .args(&args)
            .env_remove("CONTAINER_RUNTIME_ENDPOINT")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("QOSD_CONFIG")
            .env("QOSD_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn qosd run");
        Daemon {
            child: Some(child),
            log,
            addr,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.as_ref().unwrap().id() as i32)
    }

    /// Still running? Panics with the log when it exited early.
    fn assert_running(&mut self) {
        if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
            panic!("qosd run exited early ({st}):\n{}", self.log());
        }
    }

    /// SIGTERM by PID; the exit status and how long it took (None: still
    /// running after `timeout`).
    fn terminate(&mut self, timeout: Duration) -> Option<(std::process::ExitStatus, Duration)> {
        nix::sys::signal::kill(self.pid(), nix::sys::signal::Signal::SIGTERM).unwrap();
        let t = Instant::now();
        let child = self.child.as_mut().unwrap();
        while t.elapsed() < timeout {
            if let Some(st) = child.try_wait().unwrap() {
                self.child = None;
                return Some((st, t.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL to this PID only
            let _ = c.wait();
        }
    }
}

fn metrics(addr: SocketAddr) -> String {
    let r = get(addr, "/metrics").expect("GET /metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

fn status_json(addr: SocketAddr) -> Value {
    let r = get(addr, "/status").expect("GET /status");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.header("content-type")
            .unwrap_or("")
            .starts_with("application/json"),
        "{:?}",
        r.headers
    );
    serde_json::from_str(&r.body).unwrap()
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
async fn daemon_serves_live_state_and_enforces() {
    if !require_root("daemon_serves_live_state_and_enforces") {
        return;
    }
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

    let tmp = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut d = Daemon::start(&env, tmp.path(), &[]);
    let addr = d.addr;

    // Liveness answers as soon as the server is up.
    let up = wait_until(Duration::from_secs(10), || {
        get(addr, "/healthz").is_some_and(|r| r.status == 200)
    });
    d.assert_running();
    assert!(up.is_some(), "/healthz never 200:\n{}", d.log());
    // Readiness once the CRI answered and the first reconcile is done.
    let ready = wait_until(Duration::from_secs(10), || {
        get(addr, "/readyz").is_some_and(|r| r.status == 200)
    });
    assert!(ready.is_some(), "/readyz never 200:\n{}", d.log());
    eprintln!(
        "e2e: healthz after {:?}, readyz after {:?} (from spawn)",
        up.unwrap(),
        started.elapsed()
    );
    let r = get(addr, "/readyz").unwrap();
    assert_eq!(r.body.trim(), "ok");
    assert_eq!(get(addr, "/nope").map(|r| r.status), Some(404));

    // The kubelet's values are in place (first reconcile).
    let gcpu = env.cgroup_dir("cpu", &g);
    assert_eq!(read(&gcpu.join("cpu.shares")), "716");
    assert_eq!(read(&gcpu.join("cpu.cfs_quota_us")), "70000");
    assert_eq!(
        read(&env.cgroup_dir("memory", &g).join("memory.limit_in_bytes")),
        (200 * MI).to_string()
    );
    assert_eq!(read(&env.cgroup_dir("cpu", &b).join("cpu.shares")), "256");

    // /metrics: Prometheus text with live values.
    let r = get(addr, "/metrics").unwrap();
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
    let st = status_json(addr);
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
        read(&gcpu.join("cpu.shares")) == "716"
    });
    assert!(fixed.is_some(), "drift not corrected:\n{}", d.log());
    eprintln!("e2e: drift corrected after {:?}", fixed.unwrap());
    let writes1 = sample(&metrics(addr), "qosd_cgroup_writes_total").unwrap();
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
        pods_metric(&metrics(addr)).0 == Some(2.0)
    });
    assert!(counted.is_some(), "{}", metrics(addr));
    assert_eq!(pods_of(&status_json(addr)), (2, 1, 1));

    // SIGTERM: exit 0 within 1 s.
    d.assert_running();
    let (st, took) = d
        .terminate(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("qosd run still running 5 s after SIGTERM"));
    eprintln!("e2e: exited {st} {took:?} after SIGTERM");
    assert_eq!(st.code(), Some(0), "{}", d.log());
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(get(addr, "/healthz").is_none(), "listener closed");

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

/// Cgroup dirs made by this test under its own prefix, removed leaf-first
/// on drop.
struct Prefix {
    dirs: Vec<PathBuf>,
}

impl Drop for Prefix {
    fn drop(&mut self) {
        for top in &self.dirs {
            let mut all = Vec::new();
            collect(top, &mut all);
            all.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
            for d in all {
                let _ = std::fs::remove_dir(&d);
            }
        }
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect(&e.path(), out);
            }
        }
    }
}

fn run_with_config(config: &Path, cgroup_root: &str) -> (i32, String, String) {
    let addr = free_addr().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let sock = format!("unix://{}", tmp.path().join("none.sock").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_qosd"))
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
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A bad config must exit at once; never leave a daemon behind.
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("qosd run with a bad config still running after 10 s");
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
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code().unwrap_or(-1), out, err)
}

/// The example config with one line replaced (so the rest stays valid).
fn example_with(tmp: &Path, name: &str, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(EXAMPLE_CONFIG).unwrap();
    assert!(text.contains(from), "example config lacks {from:?}");
    let p = tmp.join(name);
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    p
}

#[test]
fn bad_config_exits_2_before_touching_cgroups() {
    let tmp = tempfile::tempdir().unwrap();
    let bad_value = example_with(
        tmp.path(),
        "bad-value.yaml",
        "memory.available: \"100Mi\"",
        "memory.available: \"lots\"",
    );
    let unknown = example_with(
        tmp.path(),
        "unknown.yaml",
        "evictionMaxPodGracePeriod: 30",
        "evictionMaxPodGracePeriod: 30\nevictonHard:\n  memory.available: \"1Gi\"",
    );
    let bad_syntax = tmp.path().join("syntax.yaml");
    std::fs::write(&bad_syntax, "evictionHard: [unclosed\n").unwrap();

    // As root, give the daemon a real, existing cgroup root of our own so
    // the only thing stopping it from creating kubepods is the config.
    let root = unsafe { libc::geteuid() } == 0;
    let prefix = format!("/qosd-test-{}-badcfg", std::process::id());
    let _guard = if root {
        let dirs: Vec<PathBuf> = ["cpu", "memory", "pids"]
            .iter()
            .map(|c| Path::new("/sys/fs/cgroup").join(c).join(&prefix[1..]))
            .filter(|d| d.parent().is_some_and(Path::is_dir))
            .collect();
        for d in &dirs {
            std::fs::create_dir(d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        }
        Some(Prefix { dirs })
    } else {
        eprintln!("bad_config_exits_2_before_touching_cgroups: not root; checking exit codes and messages only");
        None
    };

    for (file, must_name) in [
        (&bad_value, vec!["evictionHard", "lots"]),
        (&unknown, vec!["evictonHard"]),
        (&bad_syntax, vec![]),
    ] {
        let (code, out, err) = run_with_config(file, &prefix);
        assert_eq!(code, 2, "{}: exit {code}\n{err}\n{out}", file.display());
        for word in must_name {
            assert!(
                err.contains(word),
                "{}: error must name {word:?}: {err}",
                file.display()
            );
        }
        if let Some(g) = &_guard {
            for d in &g.dirs {
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
        }
    }
    // `qosd status` rejects the same files the same way.
    let (code, _out, err) = qosd(&["status", "--config", unknown.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("evictonHard"), "{err}");
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
async fn daemon_survives_a_runtime_restart() {
    if !require_root("daemon_survives_a_runtime_restart") {
        return;
    }
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
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(&env, tmp.path(), &[]);
    let addr = d.addr;
    let ready = |want: u16| move || get(addr, "/readyz").is_some_and(|r| r.status == want);
    assert!(
        wait_until(Duration::from_secs(10), ready(200)).is_some(),
        "{}",
        d.log()
    );

    env.stop();
    let down = wait_until(Duration::from_secs(15), ready(503));
    assert!(
        down.is_some(),
        "/readyz still 200 with the runtime down:\n{}",
        d.log()
    );
    eprintln!(
        "e2e: /readyz 503 {:?} after the runtime stopped",
        down.unwrap()
    );
    let r = get(addr, "/readyz").unwrap();
    assert!(r.body.contains("CRI"), "{}", r.body);
    let h = get(addr, "/healthz").unwrap();
    assert_eq!(
        h.status, 200,
        "liveness must not fail because the runtime is down: {}",
        h.body
    );
    let m = metrics(addr);
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
