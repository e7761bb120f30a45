//! Supervision of `qosd run`: a panic in the eviction loop (injected with
//! `QOSD_INJECT_PANIC=eviction-pass`) makes `/healthz` fail with the reason
//! and the process exit with code 70 (so systemd or the kubelet restarts
//! it); without the fault the same daemon is healthy and stops with 0.
//!
//! The daemon runs in dry-run on manifests over a private, empty cgroupfs
//! directory, so it needs neither root nor a runtime: the eviction loop
//! runs its passes (reading what it can) all the same.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn start(dir: &Path, port: u16, inject: Option<&str>) -> Child {
    let cg = dir.join("cgroup");
    let root = dir.join("kubelet");
    std::fs::create_dir_all(&cg).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qosd"));
    cmd.args(["run", "--dry-run", "--pods"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pods"))
        .arg("--cgroupfs")
        .arg(&cg)
        .args([
            "--cgroup-version",
            "v2",
            "--node-cpu",
            "4",
            "--node-memory",
            "8Gi",
        ])
        .arg("--root-dir")
        .arg(&root)
        .args(["--metrics-address", &format!("127.0.0.1:{port}")])
        .env_remove(qosd::runtime::supervisor::INJECT_PANIC_ENV)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(point) = inject {
        cmd.env(qosd::runtime::supervisor::INJECT_PANIC_ENV, point);
    }
    cmd.spawn().expect("start qosd run")
}

fn healthz(port: u16) -> Option<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    qosd::telemetry::client::get(addr, "/healthz", Duration::from_secs(2))
        .ok()
        .map(|r| (r.status, r.body))
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn stderr_of(child: &mut Child) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

#[test]
fn eviction_loop_panic_fails_healthz_and_exits_nonzero() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let mut child = start(dir.path(), port, Some("eviction-pass"));
    // /healthz turns 503 with the reason while the supervisor's grace runs.
    let t = Instant::now();
    let mut seen = None;
    while t.elapsed() < Duration::from_secs(30) {
        if let Some((503, body)) = healthz(port) {
            seen = Some(body);
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = wait_exit(&mut child, Duration::from_secs(30));
    if st.is_none() {
        let _ = child.kill();
    }
    let log = stderr_of(&mut child);
    let body = seen.unwrap_or_else(|| panic!("/healthz never answered 503; log:\n{log}"));
    assert!(
        body.contains("eviction") && body.contains("panicked"),
        "/healthz body: {body}"
    );
    let st = st.unwrap_or_else(|| panic!("qosd did not exit; log:\n{log}"));
    assert_eq!(
        st.code(),
        Some(qosd::runtime::supervisor::EXIT_UNHEALTHY),
        "exit status {st:?}; log:\n{log}"
    );
    assert!(log.contains("supervised loop panicked"), "{log}");
}

#[test]
fn without_the_fault_the_same_daemon_is_healthy_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let mut child = start(dir.path(), port, None);
    let t = Instant::now();
    let mut ok = false;
    while t.elapsed() < Duration::from_secs(30) && !ok {
        ok = matches!(healthz(port), Some((200, _)));
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Healthy for a while: several eviction passes (1 s period) went by.
    std::thread::sleep(Duration::from_secs(3));
    let still = healthz(port);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = wait_exit(&mut child, Duration::from_secs(20));
    if st.is_none() {
        let _ = child.kill();
    }
    let log = stderr_of(&mut child);
    assert!(ok, "/healthz never answered 200; log:\n{log}");
    assert!(matches!(still, Some((200, _))), "{still:?}; log:\n{log}");
    assert_eq!(st.and_then(|s| s.code()), Some(0), "log:\n{log}");
}
