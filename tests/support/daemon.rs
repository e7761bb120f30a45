//! A `qosd run` daemon as a child process, and the helpers to wait for it
//! and scrape it over loopback HTTP.
//!
//! * [`Daemon::start`]`(args)` / [`Daemon::start_with`]`(args, envs)`:
//!   `qosd <args> --metrics-address 127.0.0.1:<free port>`, stdout and
//!   stderr to a log file ([`Daemon::log`], printed when the test panics),
//!   `QOSD_LOG=info` unless `envs` says otherwise, no inherited
//!   `CONTAINER_RUNTIME_ENDPOINT`, `NOTIFY_SOCKET`, `QOSD_CONFIG`,
//!   `NODE_NAME` or `QOSD_INJECT_PANIC`.
//!   Stopped by its PID on drop (SIGTERM, SIGKILL after 3 s).
//!   [`Daemon::start_adjusted`]: another binary, the command adjusted
//!   before the spawn (an rlimit).
//! * [`Daemon::get`], [`Daemon::code`], [`Daemon::body`], [`Daemon::metrics`],
//!   [`Daemon::metric`], [`Daemon::status`]: scrape it;
//!   [`Daemon::assert_healthy`]: running and `/healthz` 200; [`sample`] reads one series of a
//!   Prometheus text; [`status_json`]`(port)` is the lenient `/status`.
//! * [`http_get`], [`get_port`], [`body_of`], [`metrics_text`]: loopback
//!   HTTP without a [`Daemon`] at hand.
//! * [`wait_until`]`(timeout, f)`: poll until true ([`wait_for`]: or panic);
//!   [`free_port`] /
//!   [`free_addr`]: a loopback port for a daemon to take.

use std::ffi::OsStr;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::http::HttpResponse;

/// The environment variable that makes `qosd run` panic at a named point
/// (the supervision tests' fault injection; docs/testing.md).
pub const INJECT_PANIC_ENV: &str = "QOSD_INJECT_PANIC";
/// `src/runtime/supervisor.rs`: a test-only stall point.
pub const INJECT_STALL_ENV: &str = "QOSD_INJECT_STALL";

/// The exit code of a daemon whose supervised loop panicked or stalled
/// (docs/operations.md, exit codes).
pub const EXIT_UNHEALTHY: i32 = 70;

/// A free loopback port (bound, then released for a daemon to take).
pub fn free_port() -> u16 {
    free_addr().port()
}

/// A free loopback address (bound, then released for a daemon to take).
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Poll `f` every 20 ms until it returns true or `timeout` passes; the time
/// it took, or None.
pub fn wait_until(timeout: Duration, f: impl FnMut() -> bool) -> Option<Duration> {
    wait_until_every(timeout, Duration::from_millis(20), f)
}

/// [`wait_until`], polling every `every` (for checks that cost the daemon
/// work, such as `/status` with per-pod usage).
pub fn wait_until_every(
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> bool,
) -> Option<Duration> {
    let t = Instant::now();
    loop {
        if f() {
            return Some(t.elapsed());
        }
        if t.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// [`wait_until`], panicking "timed out waiting for {what}" after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, f: impl FnMut() -> bool) {
    wait_for_every(what, timeout, Duration::from_millis(20), f)
}

/// [`wait_until_every`], panicking "timed out waiting for {what}" after
/// `timeout`.
pub fn wait_for_every(what: &str, timeout: Duration, every: Duration, f: impl FnMut() -> bool) {
    assert!(
        wait_until_every(timeout, every, f).is_some(),
        "timed out waiting for {what}"
    );
}

/// `GET path` on loopback `addr` (2 s timeout); None when nothing answers.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<HttpResponse> {
    super::http::get(addr, path, Duration::from_secs(2)).ok()
}

/// `GET path` on loopback `port`; None when nothing answers.
pub fn get_port(port: u16, path: &str) -> Option<HttpResponse> {
    http_get(SocketAddr::from(([127, 0, 0, 1], port)), path)
}

/// `GET path` on `addr`: the body, empty when nothing answers.
pub fn body_of(addr: SocketAddr, path: &str) -> String {
    http_get(addr, path).map(|r| r.body).unwrap_or_default()
}

/// `GET /metrics` on loopback `port`: the text, empty when nothing answers.
pub fn metrics_text(port: u16) -> String {
    body_of(SocketAddr::from(([127, 0, 0, 1], port)), "/metrics")
}

/// The value of one sample (`name{labels}` exactly as exposed).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

/// `GET /status` of a daemon on loopback `port` as JSON (`Null` when it does
/// not answer or the body is not JSON).
pub fn status_json(port: u16) -> serde_json::Value {
    get_port(port, "/status")
        .and_then(|r| serde_json::from_str(&r.body).ok())
        .unwrap_or_default()
}

/// The arguments of a `qosd run` on a fake node below `dir` (a cgroup v2
/// tree `dir/cgroup`, a kubelet root `dir/kubelet`, both created), the
/// example pods as manifests, 4 CPUs and 8Gi: `mode` comes right after
/// `run` (e.g. `["--dry-run"]` or `["--mode", "enforce"]`).
pub fn fake_node_run_args(dir: &std::path::Path, mode: &[&str]) -> Vec<String> {
    let cg = dir.join("cgroup");
    let root = dir.join("kubelet");
    std::fs::create_dir_all(&cg).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    let pods = super::repo_root().join("fixtures/pods");
    let mut a = vec!["run".to_string()];
    a.extend(mode.iter().map(|s| s.to_string()));
    for s in [
        "--pods",
        pods.to_str().unwrap(),
        "--cgroupfs",
        cg.to_str().unwrap(),
        "--cgroup-version",
        "v2",
        "--node-cpu",
        "4",
        "--node-memory",
        "8Gi",
        "--root-dir",
        root.to_str().unwrap(),
    ] {
        a.push(s.to_string());
    }
    a
}

/// `qosd run` as a child process; stopped by its PID on drop.
pub struct Daemon {
    /// Never taken: std caches the exit status once reaped, so a PID is
    /// signalled only while the process is ours and unreaped.
    child: Child,
    pub addr: SocketAddr,
    pub port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// `qosd <args> --metrics-address 127.0.0.1:<free port>`.
    pub fn start(args: &[&str]) -> Daemon {
        Daemon::start_with(args, &[])
    }

    /// [`Daemon::start`] with extra environment (set after the defaults, so
    /// `("QOSD_LOG", "warn")` or `("NOTIFY_SOCKET", path)` take effect).
    pub fn start_with(args: &[&str], envs: &[(&str, &OsStr)]) -> Daemon {
        Daemon::start_bin(super::qosd_bin(), args, envs)
    }

    /// [`Daemon::start_with`] of another `qosd` binary (a benchmark's
    /// baseline build).
    pub fn start_bin(bin: impl AsRef<OsStr>, args: &[&str], envs: &[(&str, &OsStr)]) -> Daemon {
        Daemon::start_adjusted(bin, args, envs, |_| {})
    }

    /// [`Daemon::start_bin`] with `adjust` applied to the command just
    /// before the spawn (a `pre_exec` rlimit, say).
    pub fn start_adjusted(
        bin: impl AsRef<OsStr>,
        args: &[&str],
        envs: &[(&str, &OsStr)],
        adjust: impl FnOnce(&mut Command),
    ) -> Daemon {
        let addr = free_addr();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("qosd.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(bin.as_ref());
        cmd.args(args)
            .arg("--metrics-address")
            .arg(addr.to_string())
            .env_remove("CONTAINER_RUNTIME_ENDPOINT")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("QOSD_CONFIG")
            .env_remove("NODE_NAME")
            .env_remove(INJECT_PANIC_ENV)
            .env_remove(INJECT_STALL_ENV)
            .env("QOSD_LOG", "info")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        adjust(&mut cmd);
        let child = cmd.spawn().expect("spawn qosd");
        Daemon {
            child,
            addr,
            port: addr.port(),
            log,
            _dir: dir,
        }
    }

    /// Everything the daemon printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Its exit status once it has exited (reaped; cached by std).
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Still running? Panics with the log when it exited early.
    pub fn assert_running(&mut self) {
        if let Some(st) = self.exit_status() {
            panic!("qosd run exited early ({st}):\n{}", self.log());
        }
    }

    /// Wait up to `timeout` for it to exit by itself: its exit status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let t = Instant::now();
        loop {
            if let Some(st) = self.exit_status() {
                return Some(st);
            }
            if t.elapsed() >= timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGTERM by PID; the exit status and how long it took (None: still
    /// running after `timeout`).
    pub fn terminate(&mut self, timeout: Duration) -> Option<(ExitStatus, Duration)> {
        if let Some(st) = self.exit_status() {
            return Some((st, Duration::ZERO));
        }
        let pid = nix::unistd::Pid::from_raw(self.pid());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let t = Instant::now();
        let st = self.wait_exit(timeout)?;
        Some((st, t.elapsed()))
    }

    /// SIGTERM by PID, wait up to 5 s, then SIGKILL.
    pub fn stop(mut self) {
        self.shut_down(Duration::from_secs(5));
    }

    /// SIGTERM by PID, wait up to `grace`, then SIGKILL; reaped.
    fn shut_down(&mut self, grace: Duration) {
        if self.terminate(grace).is_none() {
            let _ = self.child.kill(); // SIGKILL to this PID only
            let _ = self.child.wait();
        }
    }

    /// `GET path`; None when nothing answers.
    pub fn get(&self, path: &str) -> Option<HttpResponse> {
        http_get(self.addr, path)
    }

    /// `GET path`: its status code; None when nothing answers.
    pub fn code(&self, path: &str) -> Option<u16> {
        self.get(path).map(|r| r.status)
    }

    /// `GET path`: its body; empty when nothing answers.
    pub fn body(&self, path: &str) -> String {
        self.get(path).map(|r| r.body).unwrap_or_default()
    }

    /// Still running and `/healthz` answers 200; panics with the log
    /// otherwise.
    pub fn assert_healthy(&mut self) {
        if let Some(st) = self.exit_status() {
            panic!("qosd run exited ({st}):\n{}", self.log());
        }
        let h = self.get("/healthz");
        assert!(
            h.as_ref().is_some_and(|r| r.status == 200),
            "/healthz {:?}:\n{}",
            h.map(|r| (r.status, r.body)),
            self.log()
        );
    }

    /// `GET /metrics`: the Prometheus text (asserts 200).
    pub fn metrics(&self) -> String {
        let r = self.get("/metrics").expect("GET /metrics");
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }

    /// One series of `/metrics` (`name{labels}` exactly as exposed); None
    /// when the daemon does not answer or lacks it.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let r = self.get("/metrics")?;
        sample(&r.body, series)
    }

    /// `GET /status` as JSON (asserts 200 and a JSON content type).
    pub fn status(&self) -> serde_json::Value {
        let r = self.get("/status").expect("GET /status");
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
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- qosd log\n{}--- end of qosd log", self.log());
        }
        self.shut_down(Duration::from_secs(3));
    }
}

impl super::Containerd {
    /// The flags that point qosd at this env on this cgroup v1 host:
    /// `--runtime-endpoint <its socket> --cgroup-version v1 --cgroup-root
    /// <its root>`.
    pub fn qosd_flags(&self) -> [&str; 6] {
        [
            "--runtime-endpoint",
            &self.endpoint,
            "--cgroup-version",
            "v1",
            "--cgroup-root",
            &self.cgroup_root,
        ]
    }

    /// `run` with [`Containerd::qosd_flags`], 1 s reconcile and relist
    /// intervals and `--root-dir` (nodefs signals on a filesystem the test
    /// made: `root_dir`, or else this env's own tmpfs; no kubelet here).
    pub fn run_args<'a>(&'a self, root_dir: Option<&'a str>) -> Vec<&'a str> {
        let mut args = vec!["run"];
        args.extend(self.qosd_flags());
        args.extend([
            "--reconcile-interval",
            "1s",
            "--relist-interval",
            "1s",
            "--root-dir",
            root_dir.unwrap_or_else(|| self.dir().to_str().expect("utf-8 env dir")),
        ]);
        args
    }
}
