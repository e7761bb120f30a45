//! Benchmarks of the release `qosd` binary against pods in a real, private
//! containerd (tests/support). These are measurements, not tests: every
//! function is `#[ignore]`d, asserts nothing about speed, and prints one
//! line `BENCH_JSON {...}` that bench/run.sh stores in bench/results/.
//!
//! Run one with (as root; see BENCHMARKS.md):
//! ```text
//! cargo test --release --test bench_real -- --ignored --nocapture --exact reconcile
//! cargo test --release --test bench_real -- --ignored --nocapture --exact footprint
//! cargo test --release --test bench_real -- --ignored --nocapture --exact startup
//! ```
//! Parameters (environment):
//! * `QOSD_BENCH_PODS` (reconcile): pod counts, default `10,50,110`.
//! * `QOSD_BENCH_RUNS` (reconcile): A/B pairs per count, default 10.
//! * `QOSD_BENCH_FOOTPRINT_PODS` / `QOSD_BENCH_DURATION` (s) /
//!   `QOSD_BENCH_WINDOWS`: footprint, default 50 pods, 300 s, 5 windows.
//! * `QOSD_BENCH_STARTUP_PODS` / `QOSD_BENCH_STARTUP_RUNS`: default 110, 7.
//! * `QOSD_BENCH_BASELINE`: a second `qosd` binary (the previous commit,
//!   built by bench/run.sh) run interleaved with this one by `reconcile`
//!   and `startup`.
//! * `QOSD_BENCH_EARLYOOM`: earlyoom binary run beside `qosd run` in
//!   `footprint` (`--dryrun -r 3600`, Debian's service arguments), default
//!   `earlyoom` from PATH; measured in the same windows.
//! * `QOSD_BENCH_PERF_OUT`: `footprint` records `perf record -g` of the
//!   daemon over the whole measurement into this file.
//! * `QOSD_BENCH_CHURN_PODS` / `QOSD_BENCH_CHURN_RATE` /
//!   `QOSD_BENCH_CHURN_DURATION` (s): churn, default 110 pods held (a pod
//!   is created only to replace one being removed, and waits while
//!   removals lag), up to 5 created and 5 removed per second, 1800 s;
//!   `QOSD_BENCH_CHURN_ARGS`: more `qosd run` flags (none by default).
//! * `QOSD_BENCH_HOLD_PODS` / `QOSD_BENCH_HOLD_FILE`: `hold` (a helper,
//!   not a measurement) keeps a containerd with that many pods until the
//!   file, which holds the qosd flags for it, is removed.
//!
//! Every cgroup touched lives under the support env's `/qosd-test-<pid>-<n>`
//! root; every process started is stopped by its PID.

mod support;

use std::io::Read;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

// ------------------------------------------------------------------ helpers

/// The `qosd` under test: `QOSD_BENCH_QOSD` (a copy bench/run.sh makes,
/// so that a build meanwhile cannot replace it), else cargo's.
fn qosd_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("QOSD_BENCH_QOSD").unwrap_or_else(|_| env!("CARGO_BIN_EXE_qosd").to_string())
    })
}

/// The previous commit's `qosd`, when bench/run.sh built one.
fn baseline_bin() -> Option<String> {
    std::env::var("QOSD_BENCH_BASELINE")
        .ok()
        .filter(|p| std::path::Path::new(p).is_file())
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Deterministic pod mix by index: a third each Guaranteed, Burstable
/// (every fourth of those with a second container) and BestEffort.
fn pod_spec(i: usize) -> PodSpec {
    let name = format!("bench-{i}");
    match i % 3 {
        0 => PodSpec::new(&name).container(
            ContainerSpec::pause("app")
                .cpu(Some(100), Some(100))
                .memory(Some(32 * MI), Some(32 * MI)),
        ),
        1 => {
            let mut p = PodSpec::new(&name).container(
                ContainerSpec::pause("app")
                    .cpu(Some(50), Some(200))
                    .memory(Some(16 * MI), Some(64 * MI)),
            );
            if i % 4 == 1 {
                p = p.container(
                    ContainerSpec::pause("side")
                        .cpu(Some(10), None)
                        .memory(Some(8 * MI), None),
                );
            }
            p
        }
        _ => PodSpec::new(&name).container(ContainerSpec::pause("app")),
    }
}

/// Grow the env to `n` pods (indices continue from `pods.len()`).
async fn grow(env: &Containerd, pods: &mut Vec<RunningPod>, n: usize) {
    let t = Instant::now();
    while pods.len() < n {
        let i = pods.len();
        pods.push(env.run_pod(&pod_spec(i)).await);
    }
    eprintln!(
        "bench: {n} pods running ({:.1} s)",
        t.elapsed().as_secs_f64()
    );
}

fn common_args(env: &Containerd) -> Vec<String> {
    env.qosd_flags().iter().map(|s| s.to_string()).collect()
}

/// One measured child process run to completion.
struct Measured {
    wall_ms: f64,
    user_ms: f64,
    sys_ms: f64,
    max_rss_kib: i64,
    code: i32,
    stdout: String,
    stderr: String,
}

fn tv_ms(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 * 1e3 + tv.tv_usec as f64 / 1e3
}

/// Run `bin args` to completion; wall time from spawn to reap, CPU time and
/// peak RSS from the kernel's rusage of that child (wait4).
#[allow(clippy::zombie_processes)] // reaped with wait4(2) below, for its rusage
fn measure(bin: &str, args: &[String], envs: &[(&str, &str)]) -> Measured {
    let t = Instant::now();
    let mut child = Command::new(bin)
        .args(args)
        .envs(envs.iter().copied())
        .env_remove("CONTAINER_RUNTIME_ENDPOINT")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut err_pipe = child.stderr.take().unwrap();
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child by its PID.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert_eq!(r, child.id() as i32, "wait4");
    let wall_ms = t.elapsed().as_secs_f64() * 1e3;
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Measured {
        wall_ms,
        user_ms: tv_ms(ru.ru_utime),
        sys_ms: tv_ms(ru.ru_stime),
        max_rss_kib: ru.ru_maxrss,
        code,
        stdout,
        stderr: err_thread.join().unwrap(),
    }
}

/// min / median / max of a sample.
fn summary(v: &[f64]) -> Value {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if s.is_empty() {
        return Value::Null;
    }
    let median = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    json!({"n": s.len(), "min": r(s[0]), "median": r(median), "max": r(s[s.len() - 1])})
}

/// `N pods, W writes, U unchanged, E errors` (text output of --once).
fn once_counts(stdout: &str) -> (usize, usize, usize, usize) {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" pods, ") && l.contains(" writes, "))
        .unwrap_or_else(|| panic!("no summary line in {stdout}"));
    let n: Vec<usize> = line
        .split(", ")
        .map(|p| p.split(' ').next().unwrap().parse().unwrap())
        .collect();
    (n[0], n[1], n[2], n[3])
}

/// The original contents of every file qosd plans to write (so a "first
/// pass" can be repeated: restore, then run). Taken before qosd wrote
/// anything: the values runc left (cpu.shares 1024, no quota, no limit).
struct Snapshot(Vec<(PathBuf, String)>);

impl Snapshot {
    fn take(env: &Containerd) -> Snapshot {
        let mut args = vec!["run".to_string(), "--once".into(), "--dry-run".into()];
        args.extend(["--output".into(), "json".into()]);
        args.extend(common_args(env));
        let m = measure(qosd_bin(), &args, &[]);
        assert_eq!(m.code, 0, "dry run failed: {}", m.stderr);
        let doc: Value = serde_json::from_str(&m.stdout).unwrap();
        let files = doc["planned"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                let f = PathBuf::from(w["file"].as_str().unwrap());
                assert!(
                    f.to_string_lossy().contains(&env.cgroup_root),
                    "planned write outside the test root: {}",
                    f.display()
                );
                let v = std::fs::read_to_string(&f).unwrap_or_default();
                (f, v.trim().to_string())
            })
            .collect();
        Snapshot(files)
    }

    /// Put the original values back, children before parents (the reverse
    /// of qosd's order). Returns how many files differed.
    fn restore(&self) -> usize {
        let mut n = 0;
        for (f, v) in self.0.iter().rev() {
            if v.is_empty() {
                continue;
            }
            let cur = std::fs::read_to_string(f).unwrap_or_default();
            if cur.trim() != v {
                std::fs::write(f, v)
                    .unwrap_or_else(|e| panic!("restore {} = {v}: {e}", f.display()));
                n += 1;
            }
        }
        n
    }
}

fn print_result(kind: &str, doc: Value) {
    let mut doc = doc;
    doc["benchmark"] = json!(kind);
    println!("BENCH_JSON {}", serde_json::to_string(&doc).unwrap());
}

// ---------------------------------------------------------------- reconcile

/// Reconcile cost of `qosd run --once` with 10, 50 and 110 real pods:
/// first pass (node not yet enforced: writes) and steady state (nothing to
/// write), interleaved A B A B; plus the exec baseline `qosd --version`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by bench/run.sh"]
async fn reconcile() {
    require_containerd();
    let counts: Vec<usize> = std::env::var("QOSD_BENCH_PODS")
        .unwrap_or_else(|_| "10,50,110".into())
        .split(',')
        .map(|s| s.trim().parse().expect("QOSD_BENCH_PODS"))
        .collect();
    let runs: usize = env_or("QOSD_BENCH_RUNS", 10);
    let env = Containerd::start();
    let mut pods = Vec::new();
    let mut results = Vec::new();
    let log: [(&str, &str); 0] = [];
    for &n in &counts {
        grow(&env, &mut pods, n).await;
        let snap = Snapshot::take(&env);
        let mut args = vec!["run".to_string(), "--once".into()];
        args.extend(common_args(&env));
        // Warm-up (page cache, containerd caches), not recorded.
        snap.restore();
        measure(qosd_bin(), &args, &log);
        let (mut first, mut steady, mut exec) = (Vec::new(), Vec::new(), Vec::new());
        let (mut base_first, mut base_steady) = (Vec::new(), Vec::new());
        let mut restored = 0;
        for _ in 0..runs {
            restored = snap.restore();
            let a = measure(qosd_bin(), &args, &log);
            assert_eq!(a.code, 0, "{}\n{}", a.stdout, a.stderr);
            let b = measure(qosd_bin(), &args, &log);
            assert_eq!(b.code, 0, "{}\n{}", b.stdout, b.stderr);
            let c = measure(qosd_bin(), &["--version".to_string()], &[]);
            first.push(a);
            steady.push(b);
            exec.push(c);
            if let Some(base) = baseline_bin() {
                snap.restore();
                let a = measure(&base, &args, &log);
                assert_eq!(a.code, 0, "{}\n{}", a.stdout, a.stderr);
                let b = measure(&base, &args, &log);
                assert_eq!(b.code, 0, "{}\n{}", b.stdout, b.stderr);
                base_first.push(a);
                base_steady.push(b);
            }
        }
        let side = |ms: &[Measured]| {
            let counts: Vec<_> = ms.iter().map(|m| once_counts(&m.stdout)).collect();
            let writes: Vec<usize> = counts.iter().map(|c| c.1).collect();
            json!({
                "pods_seen": counts[0].0,
                "writes": writes,
                "unchanged": counts[0].2,
                "errors": counts.iter().map(|c| c.3).sum::<usize>(),
                "wall_ms": summary(&ms.iter().map(|m| m.wall_ms).collect::<Vec<_>>()),
                "cpu_ms": summary(&ms.iter().map(|m| m.user_ms + m.sys_ms).collect::<Vec<_>>()),
                "user_ms": summary(&ms.iter().map(|m| m.user_ms).collect::<Vec<_>>()),
                "sys_ms": summary(&ms.iter().map(|m| m.sys_ms).collect::<Vec<_>>()),
                "max_rss_kib": summary(&ms.iter().map(|m| m.max_rss_kib as f64).collect::<Vec<_>>()),
            })
        };
        let r = json!({
            "pods": n,
            "runs": runs,
            "planned_writes": snap.0.len(),
            "files_restored_before_first_pass": restored,
            "first_pass": side(&first),
            "steady": side(&steady),
            "baseline": baseline_bin().map(|b| json!({
                "bin": b,
                "first_pass": side(&base_first),
                "steady": side(&base_steady),
            })),
            "exec_baseline_version": {
                "wall_ms": summary(&exec.iter().map(|m| m.wall_ms).collect::<Vec<_>>()),
                "cpu_ms": summary(&exec.iter().map(|m| m.user_ms + m.sys_ms).collect::<Vec<_>>()),
            },
        });
        eprintln!("bench: reconcile {n} pods: {r}");
        results.push(r);
    }
    print_result(
        "reconcile",
        json!({"command": "qosd run --once --runtime-endpoint <private containerd> --cgroup-version v1 --cgroup-root /qosd-test-…", "results": results}),
    );
}

// ------------------------------------------------------------ daemon helpers

/// `qosd run` against `env` (support's [`Daemon`], stopped by its PID),
/// sending sd_notify messages to `notify`.
fn spawn_daemon(env: &Containerd, notify: &Path) -> Daemon {
    spawn_daemon_bin(qosd_bin(), env, Some(notify), None)
}

/// [`spawn_daemon`] of a given binary (the baseline), `notify` optional.
/// `state`: its `QOSD_STATE_DIR` (the CRI status cache; a binary without
/// the setting ignores it).
fn spawn_daemon_bin(
    bin: &str,
    env: &Containerd,
    notify: Option<&Path>,
    state: Option<&Path>,
) -> Daemon {
    let mut args = vec!["run".to_string()];
    args.extend(common_args(env));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut envs: Vec<(&str, &std::ffi::OsStr)> = vec![("QOSD_LOG", "warn".as_ref())];
    if let Some(n) = notify {
        envs.push(("NOTIFY_SOCKET", n.as_os_str()));
    }
    if let Some(s) = state {
        envs.push(("QOSD_STATE_DIR", s.as_os_str()));
    }
    Daemon::start_bin(bin, &args, &envs)
}

/// (utime + stime in clock ticks, the threads' schedstat run time in ns)
/// of `pid` (schedstat misses threads that already exited).
fn cpu_of(pid: i32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // Fields 14 and 15 of proc(5); `rest` starts at field 3.
    let ticks = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // /proc/<pid>/schedstat is the main thread only: sum every thread's.
    let sched = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|t| {
                    std::fs::read_to_string(t.path().join("schedstat"))
                        .ok()?
                        .split(' ')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum()
        })
        .unwrap_or(0);
    (ticks, sched)
}

/// Two kB fields of /proc/<pid>/status (0 when absent or unreadable).
fn status_kib(pid: i32, a: &str, b: &str) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let get = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    (get(a), get(b))
}

/// VmRSS and VmHWM (KiB) from /proc/<pid>/status.
fn rss_of(pid: i32) -> (u64, u64) {
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} is gone"
    );
    status_kib(pid, "VmRSS:", "VmHWM:")
}

fn threads_of(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Wait for READY=1 on the notify socket; the time it arrived.
fn wait_ready(sock: &UnixDatagram, timeout: Duration) -> Option<Instant> {
    let t = Instant::now();
    let mut buf = [0u8; 4096];
    while t.elapsed() < timeout {
        sock.set_read_timeout(Some(
            timeout
                .saturating_sub(t.elapsed())
                .max(Duration::from_millis(1)),
        ))
        .unwrap();
        match sock.recv(&mut buf) {
            Ok(n) => {
                let msg = String::from_utf8_lossy(&buf[..n]);
                if msg.lines().any(|l| l == "READY=1") {
                    return Some(Instant::now());
                }
            }
            Err(_) => return None,
        }
    }
    None
}

// ---------------------------------------------------------------- footprint

/// An earlyoom started beside the daemon (dry run: it never kills), or
/// `None` when there is no earlyoom binary.
fn spawn_earlyoom() -> Option<Child> {
    let bin = std::env::var("QOSD_BENCH_EARLYOOM").unwrap_or_else(|_| "earlyoom".into());
    Command::new(bin)
        .args(["--dryrun", "-r", "3600"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// Idle CPU and memory of `qosd run` (default intervals) with 110 real
/// pods, and of earlyoom (Debian's service arguments, dry run) in the same
/// windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by bench/run.sh"]
async fn footprint() {
    require_containerd();
    let n: usize = env_or("QOSD_BENCH_FOOTPRINT_PODS", 110);
    let duration: f64 = env_or("QOSD_BENCH_DURATION", 300.0);
    let windows: usize = env_or("QOSD_BENCH_WINDOWS", 5usize).max(1);
    let env = Containerd::start();
    let mut pods = Vec::new();
    grow(&env, &mut pods, n).await;
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let d = spawn_daemon(&env, &sock_path);
    let pid = d.pid();
    let ready = wait_ready(&sock, Duration::from_secs(60)).is_some();
    assert!(ready, "qosd did not report READY=1");
    let mut earlyoom = spawn_earlyoom();
    let eo_pid = earlyoom.as_ref().map(|c| c.id() as i32);
    // Let the first pass's allocations and the first relists settle.
    std::thread::sleep(Duration::from_secs(5));
    let perf = std::env::var("QOSD_BENCH_PERF_OUT").ok().and_then(|out| {
        Command::new("perf")
            .args([
                "record",
                "-F",
                "999",
                "-g",
                "-o",
                &out,
                "-p",
                &pid.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()
    });
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let eo0 = eo_pid.map(cpu_of);
    let writes0 = d.metric("qosd_cgroup_writes_total");
    let reconciles0 = d.metric("qosd_reconciles_total");
    let win = duration / windows as f64;
    let (mut pct_ticks, mut pct_sched, mut rss) = (Vec::new(), Vec::new(), Vec::new());
    let (t0_ticks, t0_sched) = cpu_of(pid);
    let start = Instant::now();
    for w in 0..windows {
        let (a_ticks, a_sched) = cpu_of(pid);
        let t = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(win));
        let (b_ticks, b_sched) = cpu_of(pid);
        let el = t.elapsed().as_secs_f64();
        let p1 = (b_ticks - a_ticks) as f64 / hz / el * 100.0;
        let p2 = (b_sched - a_sched) as f64 / 1e9 / el * 100.0;
        let (r, _) = rss_of(pid);
        eprintln!(
            "bench: footprint window {w}: {p1:.3} % (ticks), {p2:.3} % (schedstat), VmRSS {r} KiB"
        );
        pct_ticks.push(p1);
        pct_sched.push(p2);
        rss.push(r as f64);
    }
    let total = start.elapsed().as_secs_f64();
    let (t1_ticks, t1_sched) = cpu_of(pid);
    let eo1 = eo_pid.map(cpu_of);
    let eo_rss = eo_pid.map(rss_of);
    if let Some(mut p) = perf {
        // perf writes its file on SIGINT.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
        let _ = p.wait();
    }
    if let Some(c) = earlyoom.as_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
    let fds = fd_count(pid as u32);
    let (vm_rss, vm_hwm) = rss_of(pid);
    let threads = threads_of(pid);
    let writes1 = d.metric("qosd_cgroup_writes_total");
    let reconciles1 = d.metric("qosd_reconciles_total");
    let status_json: Value = d
        .get("/status")
        .and_then(|r| serde_json::from_str(&r.body).ok())
        .unwrap_or(Value::Null);
    d.stop();
    print_result(
        "footprint",
        json!({
            "pods": n,
            "duration_s": (total * 10.0).round() / 10.0,
            "windows": windows,
            "cpu_percent_of_one_core_total_ticks": (t1_ticks - t0_ticks) as f64 / hz / total * 100.0,
            "cpu_percent_of_one_core_total_schedstat": (t1_sched - t0_sched) as f64 / 1e9 / total * 100.0,
            "cpu_percent_per_window_ticks": summary(&pct_ticks),
            "cpu_percent_per_window_schedstat": summary(&pct_sched),
            "vm_rss_kib_per_window": summary(&rss),
            "vm_rss_kib_end": vm_rss,
            "vm_hwm_kib": vm_hwm,
            "threads": threads,
            "open_fds": fds,
            "earlyoom": eo0.zip(eo1).map(|(a, b)| json!({
                "args": "--dryrun -r 3600",
                "cpu_percent_of_one_core_total_ticks": (b.0 - a.0) as f64 / hz / total * 100.0,
                "cpu_percent_of_one_core_total_schedstat": (b.1 - a.1) as f64 / 1e9 / total * 100.0,
                "vm_rss_kib_end": eo_rss.map(|r| r.0),
            })),
            "reconciles_during": reconciles1.zip(reconciles0).map(|(a, b)| a - b),
            "cgroup_writes_during": writes1.zip(writes0).map(|(a, b)| a - b),
            "last_reconcile": status_json.get("last_reconcile").cloned().unwrap_or(Value::Null),
            "command": "qosd run --runtime-endpoint <private containerd> --cgroup-version v1 --cgroup-root /qosd-test-… --metrics-address 127.0.0.1:<port> (default intervals)",
        }),
    );
}

// --------------------------------------------------------------------- hold

/// Not a measurement: a private containerd with `QOSD_BENCH_HOLD_PODS`
/// (default 110) running pods, held until the file
/// `QOSD_BENCH_HOLD_FILE` (default `/tmp/qosd-bench-hold`) is removed. The
/// file holds the `qosd` flags for that containerd (one per line), for
/// profiling a daemon by hand (`perf`, `strace`) against real pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark helper: run by hand"]
async fn hold() {
    require_containerd();
    let n: usize = env_or("QOSD_BENCH_HOLD_PODS", 110);
    let file = PathBuf::from(
        std::env::var("QOSD_BENCH_HOLD_FILE").unwrap_or_else(|_| "/tmp/qosd-bench-hold".into()),
    );
    let env = Containerd::start();
    let mut pods = Vec::new();
    grow(&env, &mut pods, n).await;
    std::fs::write(&file, common_args(&env).join("\n") + "\n").unwrap();
    eprintln!(
        "bench: holding {n} pods until {} is removed",
        file.display()
    );
    while file.exists() {
        std::thread::sleep(Duration::from_secs(1));
    }
}

// ------------------------------------------------------------------ startup

/// Exec to READY=1 (sd_notify, sent after the first reconcile) with 110
/// real pods: cold (node not enforced yet: the first pass writes; no CRI
/// status cache file yet), warm (a restart on an enforced node: no writes,
/// the status cache file of the previous run) and warm without the file
/// (as every restart was before the file), interleaved with the previous
/// commit's binary (cold and warm without the file, and warm with its own
/// file: a binary older than the file ignores `QOSD_STATE_DIR`, so that
/// row is then one more restart without it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by bench/run.sh"]
async fn startup() {
    require_containerd();
    let n: usize = env_or("QOSD_BENCH_STARTUP_PODS", 110);
    let runs: usize = env_or("QOSD_BENCH_STARTUP_RUNS", 7);
    let env = Containerd::start();
    let mut pods = Vec::new();
    grow(&env, &mut pods, n).await;
    let snap = Snapshot::take(&env);
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    // The status cache file of our runs; a new empty one for runs without.
    let state = tempfile::tempdir().unwrap();
    let state_file = state.path().join("cri-status-cache.json");
    let b_state = tempfile::tempdir().unwrap();
    let once_in = |bin: &str, cold: bool, state: Option<&Path>| -> (f64, f64, u64) {
        if cold {
            snap.restore();
        }
        // Drain stale messages.
        sock.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 4096];
        while sock.recv(&mut buf).is_ok() {}
        sock.set_nonblocking(false).unwrap();
        let t = Instant::now();
        let d = spawn_daemon_bin(bin, &env, Some(&sock_path), state);
        let ready = wait_ready(&sock, Duration::from_secs(60)).expect("READY=1");
        let ms = (ready - t).as_secs_f64() * 1e3;
        // Cross-check with /readyz (must answer 200 now).
        let readyz = d.get("/readyz");
        assert_eq!(readyz.as_ref().map(|r| r.status), Some(200), "{readyz:?}");
        let (_, hwm) = rss_of(d.pid());
        let (_, sched_ns) = cpu_of(d.pid());
        d.stop();
        (ms, sched_ns as f64 / 1e6, hwm)
    };
    let no_file = || tempfile::tempdir().unwrap();
    let once = |bin: &str, cold: bool| once_in(bin, cold, Some(no_file().path()));
    once(qosd_bin(), false); // warm-up
    if let Some(base) = baseline_bin() {
        // The baseline's status cache file (written when it stops).
        once_in(&base, false, Some(b_state.path()));
    }
    let (mut cold, mut warm, mut warm_nofile) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cold_cpu, mut warm_cpu, mut warm_nofile_cpu, mut hwm) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut b_cold, mut b_warm) = (Vec::new(), Vec::new());
    let (mut b_cold_cpu, mut b_warm_cpu) = (Vec::new(), Vec::new());
    let (mut b_warm_file, mut b_warm_file_cpu) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        if let Some(base) = baseline_bin() {
            let (ms, cpu, _) = once(&base, true);
            b_cold.push(ms);
            b_cold_cpu.push(cpu);
            let (ms, cpu, _) = once(&base, false);
            b_warm.push(ms);
            b_warm_cpu.push(cpu);
            // A restart with its own file (from the warm-up, then each run).
            let (ms, cpu, _) = once_in(&base, false, Some(b_state.path()));
            b_warm_file.push(ms);
            b_warm_file_cpu.push(cpu);
        }
        // A first start: no file (it is written when the daemon stops).
        let _ = std::fs::remove_file(&state_file);
        let (ms, cpu, h) = once_in(qosd_bin(), true, Some(state.path()));
        cold.push(ms);
        cold_cpu.push(cpu);
        hwm.push(h as f64);
        assert!(state_file.is_file(), "no status cache file after a run");
        let (ms, cpu, h) = once_in(qosd_bin(), false, Some(state.path()));
        warm.push(ms);
        warm_cpu.push(cpu);
        hwm.push(h as f64);
        let (ms_nofile, cpu, _) = once(qosd_bin(), false);
        warm_nofile.push(ms_nofile);
        warm_nofile_cpu.push(cpu);
        eprintln!(
            "bench: startup cold {:.1} ms, warm {:.1} ms, warm without the file {:.1} ms",
            cold.last().unwrap(),
            ms,
            ms_nofile
        );
    }
    print_result(
        "startup",
        json!({
            "pods": n,
            "runs": runs,
            "planned_writes": snap.0.len(),
            "cold_exec_to_ready_ms": summary(&cold),
            "warm_exec_to_ready_ms": summary(&warm),
            "cold_cpu_ms_at_ready": summary(&cold_cpu),
            "warm_cpu_ms_at_ready": summary(&warm_cpu),
            "warm_nofile_exec_to_ready_ms": summary(&warm_nofile),
            "warm_nofile_cpu_ms_at_ready": summary(&warm_nofile_cpu),
            "vm_hwm_kib_at_ready": summary(&hwm),
            "baseline": baseline_bin().map(|b| json!({
                "bin": b,
                "cold_exec_to_ready_ms": summary(&b_cold),
                "warm_exec_to_ready_ms": summary(&b_warm),
                "cold_cpu_ms_at_ready": summary(&b_cold_cpu),
                "warm_cpu_ms_at_ready": summary(&b_warm_cpu),
                "warm_file_exec_to_ready_ms": summary(&b_warm_file),
                "warm_file_cpu_ms_at_ready": summary(&b_warm_file_cpu),
            })),
            "command": "NOTIFY_SOCKET=<dgram socket> QOSD_STATE_DIR=<dir> qosd run --runtime-endpoint <private containerd> --cgroup-version v1 --cgroup-root /qosd-test-… --metrics-address 127.0.0.1:<port>",
        }),
    );
}

// -------------------------------------------------------------------- churn

/// The kubelet's cpu.shares of a test pod's cgroup.
fn pod_shares(spec: &PodSpec) -> i64 {
    let milli: i64 = spec
        .containers
        .iter()
        .map(|c| c.cpu_effective().0.unwrap_or(0))
        .sum();
    kubelet::shares(milli)
}

/// Poll the pod cgroup's cpu.shares until it holds the kubelet's value:
/// the time that took, or `None` after `limit`.
async fn until_enforced(pod: &RunningPod, limit: Duration) -> Option<Duration> {
    let want = pod_shares(&pod.spec).to_string();
    let f = PathBuf::from(format!(
        "/sys/fs/cgroup/cpu{}/cpu.shares",
        pod.cgroup_parent
    ));
    let t = Instant::now();
    while t.elapsed() < limit {
        if std::fs::read_to_string(&f).is_ok_and(|v| v.trim() == want) {
            return Some(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// Every `qosd_errors_total{kind=...}` series, by kind.
fn errors_by_kind(d: &Daemon) -> std::collections::BTreeMap<String, f64> {
    let body = d.get("/metrics").map(|r| r.body).unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with("qosd_errors_total{"))
        .filter_map(|l| {
            let kind = l.split("kind=\"").nth(1)?.split('"').next()?.to_string();
            Some((kind, l.rsplit(' ').next()?.parse::<f64>().ok()?))
        })
        .collect()
}

/// Least-squares slope of (x, y), per unit of x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let num: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let den: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// The kernel's inotify watches of `pid`, per inotify fd: (fd, watches),
/// by fd number (`/proc/<pid>/fdinfo/<fd>` lists one `inotify wd:` line per
/// watch). qosd has two: the pod cgroup events and the planned files.
fn inotify_watches(pid: i32) -> Vec<(u32, usize)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for e in rd.flatten() {
        if !std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:inotify") {
            continue;
        }
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let n = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))
            .map(|s| s.lines().filter(|l| l.starts_with("inotify wd:")).count())
            .unwrap_or(0);
        out.push((fd, n));
    }
    out.sort();
    out
}

/// Pod cgroups under the env's kubepods (cpu hierarchy): the live pods'
/// and those of removed pods qosd has not cleaned up yet (orphan grace).
fn pod_cgroup_dirs(root: &str) -> usize {
    let base = PathBuf::from(format!("/sys/fs/cgroup/cpu{root}/kubepods"));
    [
        base.clone(),
        base.join("burstable"),
        base.join("besteffort"),
    ]
    .iter()
    .map(|d| {
        std::fs::read_dir(d)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("pod"))
                    .count()
            })
            .unwrap_or(0)
    })
    .sum()
}

/// RssAnon and RssFile (KiB) from /proc/<pid>/status: the heap and stacks
/// vs. the binary's and libraries' pages.
fn rss_split_of(pid: i32) -> (u64, u64) {
    status_kib(pid, "RssAnon:", "RssFile:")
}

/// The 1-minute load average.
fn loadavg1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The sum of every `qosd_pods{qos_class=...}` series (the daemon's live
/// pods); `None` when the daemon does not answer or lacks the series.
fn qosd_pods(d: &Daemon) -> Option<f64> {
    let body = d.get("/metrics")?.body;
    let v: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with("qosd_pods{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

/// One churn sample (every 10 s).
#[derive(Debug, Clone)]
struct ChurnSample {
    t: f64,
    /// Pods the bench asked for and has not seen removed (running + being
    /// created + being removed): what the bench holds at `n`.
    in_runtime: usize,
    running: usize,
    creating: usize,
    removing: usize,
    /// `qosd_pods` summed over the QoS classes: the daemon's own count.
    qosd_pods: Option<f64>,
    pod_cgroups: usize,
    rss_kib: u64,
    hwm_kib: u64,
    rss_anon_kib: u64,
    rss_file_kib: u64,
    fds: usize,
    inotify: Vec<(u32, usize)>,
    created: usize,
    removed: usize,
    load1: f64,
}

impl ChurnSample {
    fn json(&self) -> Value {
        json!({
            "t_s": self.t.round(),
            "pods_in_runtime": self.in_runtime,
            "running": self.running,
            "creating": self.creating,
            "removing": self.removing,
            "qosd_pods": self.qosd_pods,
            "pod_cgroups": self.pod_cgroups,
            "vm_rss_kib": self.rss_kib,
            "vm_hwm_kib": self.hwm_kib,
            "rss_anon_kib": self.rss_anon_kib,
            "rss_file_kib": self.rss_file_kib,
            "fds": self.fds,
            "inotify_watches_by_fd": self.inotify.iter().map(|(fd, n)| json!([fd, n])).collect::<Vec<_>>(),
            "created": self.created,
            "removed": self.removed,
            "load1": self.load1,
        })
    }
}

/// min / median / max of a sample field.
fn spread(v: impl Iterator<Item = f64>) -> Value {
    summary(&v.filter(|x| x.is_finite()).collect::<Vec<_>>())
}

/// Pod churn under `qosd run` (default settings) with the live set held:
/// `QOSD_BENCH_CHURN_PODS` (110) pods, up to `QOSD_BENCH_CHURN_RATE` (5)
/// created and as many removed per second. A pod is created only to
/// replace one being removed (running + being created ≤ n) and only while
/// fewer than `rate` removals lag (every pod the bench has asked for and not
/// seen removed < n + rate); running pods are removed only while at least
/// n − 2·rate are not being removed; each direction keeps at most 2·rate
/// calls in flight. A slow runtime therefore lowers the achieved
/// rates (reported, with why each asked creation was not started) instead
/// of letting the live set drift. Per created pod: from RunPodSandbox to
/// its pod cgroup holding the kubelet's cpu.shares (and from the pod
/// running, i.e. its last StartContainer). Every 10 s a sample: the pod
/// counts (the bench's, qosd's `qosd_pods`, pod cgroups present), qosd's
/// VmRSS, VmHWM, open fds and kernel inotify watches, and the load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by bench/run.sh"]
async fn churn() {
    require_containerd();
    let n: usize = env_or("QOSD_BENCH_CHURN_PODS", 110);
    let rate: usize = env_or("QOSD_BENCH_CHURN_RATE", 5);
    let duration: f64 = env_or("QOSD_BENCH_CHURN_DURATION", 1800.0);
    let in_flight = 2 * rate;
    let env = std::sync::Arc::new(Containerd::start());
    let mut pods = Vec::new();
    grow(&env, &mut pods, n).await;
    let mut live: std::collections::VecDeque<RunningPod> = pods.into();
    // `QOSD_BENCH_CHURN_ARGS`: more `qosd run` flags (a diagnosis, e.g.
    // `--orphan-grace-period 5s`); none by default.
    let extra = std::env::var("QOSD_BENCH_CHURN_ARGS").unwrap_or_default();
    let mut args = vec!["run".to_string()];
    args.extend(common_args(&env));
    args.extend(extra.split_whitespace().map(str::to_string));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = Daemon::start_bin(qosd_bin(), &args, &[("QOSD_LOG", "warn".as_ref())]);
    let pid = d.pid();
    let t = Instant::now();
    while d.metric("qosd_reconciles_total").unwrap_or(0.0) < 1.0 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "qosd never reconciled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let the first relists settle before the baseline sample.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let errors0 = errors_by_kind(&d);
    let mut created: tokio::task::JoinSet<(RunningPod, Duration, Option<Duration>)> =
        tokio::task::JoinSet::new();
    let mut removed: tokio::task::JoinSet<()> = tokio::task::JoinSet::new();
    let (mut start_to_values, mut running_to_values) = (Vec::new(), Vec::new());
    let (mut n_created, mut n_removed, mut missed) = (0usize, 0usize, 0usize);
    // Why asked creations were not started this second.
    let (mut busy, mut full, mut removals_lag) = (0usize, 0usize, 0usize);
    let mut runtime_errors = 0usize;
    let mut samples: Vec<ChurnSample> = Vec::new();
    let mut next = n;
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut last_sample = f64::NEG_INFINITY;
    let (rss0, hwm0) = rss_of(pid);
    let fds0 = fd_count(pid as u32);
    let sample = |t: f64,
                  live: usize,
                  creating: usize,
                  removing: usize,
                  n_created: usize,
                  n_removed: usize| {
        let (rss_kib, hwm_kib) = rss_of(pid);
        let (rss_anon_kib, rss_file_kib) = rss_split_of(pid);
        ChurnSample {
            t,
            in_runtime: live + creating + removing,
            running: live,
            creating,
            removing,
            qosd_pods: qosd_pods(&d),
            pod_cgroups: pod_cgroup_dirs(&env.cgroup_root),
            rss_kib,
            hwm_kib,
            rss_anon_kib,
            rss_file_kib,
            fds: fd_count(pid as u32),
            inotify: inotify_watches(pid),
            created: n_created,
            removed: n_removed,
            load1: loadavg1(),
        }
    };
    while start.elapsed().as_secs_f64() < duration {
        tick.tick().await;
        while let Some(r) = created.try_join_next() {
            // A runtime call that failed under load (deadline): counted,
            // the run goes on (its sandbox is cleaned up with the env).
            let Ok((p, running, enforced)) = r else {
                runtime_errors += 1;
                continue;
            };
            n_created += 1;
            match enforced {
                Some(e) => {
                    running_to_values.push(e.as_secs_f64() * 1e3);
                    start_to_values.push((running + e).as_secs_f64() * 1e3);
                }
                None => missed += 1,
            }
            live.push_back(p);
        }
        while let Some(r) = removed.try_join_next() {
            match r {
                Ok(()) => n_removed += 1,
                Err(_) => runtime_errors += 1,
            }
        }
        let now = start.elapsed().as_secs_f64();
        if now - last_sample >= 10.0 {
            last_sample = now;
            let s = sample(
                now,
                live.len(),
                created.len(),
                removed.len(),
                n_created,
                n_removed,
            );
            eprintln!(
                "bench: churn {now:.0} s: {n_created} created, {n_removed} removed, {} pods in the runtime ({} running), qosd_pods {:?}, {} pod cgroups, VmRSS {} KiB (anon {}, file {}), {} fds, inotify {:?}, load {}",
                s.in_runtime, s.running, s.qosd_pods, s.pod_cgroups, s.rss_kib, s.rss_anon_kib, s.rss_file_kib, s.fds, s.inotify, s.load1
            );
            samples.push(s);
        }
        for _ in 0..rate {
            if removed.len() >= in_flight
                || live.len() + created.len() <= n.saturating_sub(in_flight)
            {
                break;
            }
            if let Some(p) = live.pop_front() {
                let env = env.clone();
                removed.spawn(async move { env.remove_pod(&p).await });
            }
        }
        for _ in 0..rate {
            let in_runtime = live.len() + created.len() + removed.len();
            if created.len() >= in_flight {
                busy += 1;
                continue;
            }
            if in_runtime >= n + rate {
                removals_lag += 1;
                continue;
            }
            if live.len() + created.len() >= n {
                full += 1;
                continue;
            }
            let (env, spec) = (env.clone(), pod_spec(next));
            next += 1;
            created.spawn(async move {
                let t0 = Instant::now();
                let p = env.run_pod(&spec).await;
                let running = t0.elapsed();
                let enforced = until_enforced(&p, Duration::from_secs(10)).await;
                (p, running, enforced)
            });
        }
    }
    while let Some(r) = created.join_next().await {
        let Ok((p, _, enforced)) = r else {
            runtime_errors += 1;
            continue;
        };
        n_created += 1;
        if enforced.is_none() {
            missed += 1;
        }
        live.push_back(p);
    }
    while let Some(r) = removed.join_next().await {
        match r {
            Ok(()) => n_removed += 1,
            Err(_) => runtime_errors += 1,
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    samples.push(sample(elapsed, live.len(), 0, 0, n_created, n_removed));
    let errors1 = errors_by_kind(&d);
    // By kind, during the run. `signal_read` counts eviction signals that
    // cannot be read on every pass (no /var/lib/kubelet on a test host),
    // not a churn error.
    let errors: std::collections::BTreeMap<String, f64> = errors1
        .iter()
        .map(|(k, v)| (k.clone(), v - errors0.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect();
    let reconciles = d.metric("qosd_reconciles_total");
    let (_, hwm) = rss_of(pid);
    d.stop();
    assert!(
        samples.iter().any(|s| s.qosd_pods.is_some()),
        "the daemon never exposed qosd_pods"
    );
    let half: Vec<&ChurnSample> = samples.iter().filter(|s| s.t >= elapsed / 2.0).collect();
    let per_hour = |v: &[&ChurnSample], f: &dyn Fn(&ChurnSample) -> f64| {
        slope(&v.iter().map(|s| (s.t, f(s))).collect::<Vec<_>>()) * 3600.0
    };
    let all: Vec<&ChurnSample> = samples.iter().collect();
    let rss = |s: &ChurnSample| s.rss_kib as f64;
    let fds = |s: &ChurnSample| s.fds as f64;
    let watches = |s: &ChurnSample| s.inotify.iter().map(|w| w.1).sum::<usize>() as f64;
    let mut doc = json!({
            "pods": n,
            "rate_asked_per_s": rate,
            "in_flight_cap": in_flight,
            "qosd_extra_args": extra,
            "hold": "a pod is created only to replace one being removed (running + creating <= n) and while pods in the runtime (running + creating + removing) < n + rate; running pods are removed while >= n - 2*rate are not being removed",
            "duration_s": (elapsed * 10.0).round() / 10.0,
            "created": n_created,
            "removed": n_removed,
            "created_per_s": n_created as f64 / elapsed,
            "removed_per_s": n_removed as f64 / elapsed,
            "creations_not_started": {
                "runtime_busy_in_flight_cap": busy,
                "live_set_full_nothing_to_replace": full,
                "waiting_for_removals_to_finish": removals_lag,
            },
            "runtime_call_failures_in_the_bench": runtime_errors,
            "missed_pods_not_enforced_within_10s": missed,
            "errors_during_by_kind": errors,
            "errors_during_excluding_signal_read": errors.iter().filter(|(k, _)| k.as_str() != "signal_read").fold(0.0, |a, (_, v)| a + v),
            "reconciles_total": reconciles,
            "pod_start_to_values_ms": summary(&start_to_values),
            "pod_start_to_values_p99_ms": pct(&start_to_values, 0.99),
            "pod_running_to_values_ms": summary(&running_to_values),
            "pod_running_to_values_p50_ms": pct(&running_to_values, 0.5),
            "pod_running_to_values_p99_ms": pct(&running_to_values, 0.99),
    });
    let memory = json!({
            "pods_in_runtime": spread(samples.iter().map(|s| s.in_runtime as f64)),
            "qosd_pods": spread(samples.iter().filter_map(|s| s.qosd_pods)),
            "pod_cgroups": spread(samples.iter().map(|s| s.pod_cgroups as f64)),
            "vm_rss_kib_start": rss0,
            "vm_hwm_kib_start": hwm0,
            "vm_rss_kib_first_sample": samples.first().map(|s| s.rss_kib),
            "vm_rss_kib_end": samples.last().map(|s| s.rss_kib),
            "vm_rss_kib_max": samples.iter().map(|s| s.rss_kib).max(),
            "vm_rss_kib_second_half": spread(half.iter().map(|s| rss(s))),
            "rss_anon_kib": spread(samples.iter().map(|s| s.rss_anon_kib as f64)),
            "rss_file_kib": spread(samples.iter().map(|s| s.rss_file_kib as f64)),
            "rss_anon_kib_per_hour_slope_second_half": per_hour(&half, &|s: &ChurnSample| s.rss_anon_kib as f64),
            "vm_hwm_kib": hwm,
            "vm_rss_kib_per_hour_slope_second_half": per_hour(&half, &rss),
            "vm_rss_kib_per_hour_slope_whole_run": per_hour(&all, &rss),
            "fds_start": fds0,
            "fds_end": samples.last().map(|s| s.fds),
            "fds_min": samples.iter().map(|s| s.fds).min(),
            "fds_max": samples.iter().map(|s| s.fds).max(),
            "fds_per_hour_slope_second_half": per_hour(&half, &fds),
            "inotify_watches_total": spread(samples.iter().map(watches)),
            "inotify_watches_per_hour_slope_second_half": per_hour(&half, &watches),
            "load1": spread(samples.iter().map(|s| s.load1)),
            "samples": samples.iter().map(ChurnSample::json).collect::<Vec<_>>(),
            "command": "qosd run --runtime-endpoint <private containerd> --cgroup-version v1 --cgroup-root /qosd-test-… --metrics-address 127.0.0.1:<port> (default settings)",
    });
    if let (Some(d), Value::Object(m)) = (doc.as_object_mut(), memory) {
        d.extend(m);
    }
    print_result("churn", doc);
}

// ---------------------------------------------------------------------- e2e

/// What a bench-side sampler saw of one eviction run: the kubepods usage
/// counter (kept-open fd, every ~200 µs) and the hog's `/proc/<pid>/stat`.
#[derive(Debug, Default)]
struct E2eTrace {
    /// Usage first at or above the line (the signal's crossing).
    cross: Option<Instant>,
    cross_unix_s: Option<f64>,
    /// The hog seen exiting (PF_EXITING, a zombie, or reaped).
    exiting: Option<Instant>,
    exiting_unix_s: Option<f64>,
    /// The ramp measured over the last 32 MiB before the crossing (MiB/s).
    rate_mib_s: Option<f64>,
    samples: usize,
    max_sample_gap_ms: f64,
}

fn unix_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Sample `usage` (bytes) and the hog's state until the hog exits or
/// `timeout` passes.
fn e2e_sample(usage: &Path, line: u64, pid: i32, timeout: Duration) -> E2eTrace {
    use std::os::unix::fs::FileExt;
    let u = std::fs::File::open(usage).unwrap();
    let stat = std::fs::File::open(format!("/proc/{pid}/stat")).ok();
    let mut tr = E2eTrace::default();
    let mut recent: std::collections::VecDeque<(Instant, u64)> = Default::default();
    let mut buf = [0u8; 1024];
    let start = Instant::now();
    let mut last = start;
    while start.elapsed() < timeout {
        let n = u.read_at(&mut buf, 0).unwrap_or(0);
        let now = Instant::now();
        tr.samples += 1;
        tr.max_sample_gap_ms = tr.max_sample_gap_ms.max((now - last).as_secs_f64() * 1e3);
        last = now;
        let v: u64 = std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        if tr.cross.is_none() {
            if v >= line {
                tr.cross = Some(now);
                tr.cross_unix_s = Some(unix_s());
                if let Some(&(t0, v0)) = recent
                    .iter()
                    .find(|(_, x)| *x + 32 * MI as u64 >= line)
                    .filter(|(t0, _)| *t0 < now)
                {
                    tr.rate_mib_s = Some((v - v0) as f64 / MI as f64 / (now - t0).as_secs_f64());
                }
            } else {
                recent.push_back((now, v));
                if recent.len() > 4000 {
                    recent.pop_front();
                }
            }
        }
        // The hog: PF_EXITING (0x4) in the flags, a zombie, or gone.
        let exiting = match &stat {
            None => true,
            Some(f) => match f.read_at(&mut buf, 0) {
                Ok(n) if n > 0 => {
                    let s = String::from_utf8_lossy(&buf[..n]);
                    let rest = &s[s.rfind(')').map(|i| i + 2).unwrap_or(0)..];
                    let f: Vec<&str> = rest.split(' ').collect();
                    let flags: u64 = f.get(6).and_then(|x| x.parse().ok()).unwrap_or(0);
                    matches!(f.first(), Some(&"Z") | Some(&"X")) || flags & 0x4 != 0
                }
                _ => true,
            },
        };
        if exiting {
            tr.exiting = Some(Instant::now());
            tr.exiting_unix_s = Some(unix_s());
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    tr
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` (the daemon's log timestamps) → Unix s.
fn rfc3339_unix_s(ts: &str) -> Option<f64> {
    let ts = ts.strip_suffix('Z')?;
    let (date, time) = ts.split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let (y, m, day) = (d[0] - i64::from(d[1] <= 2), d[1], d[2]);
    // days from civil (Howard Hinnant's algorithm)
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let frac: f64 = format!("0.{frac}").parse().ok()?;
    Some((days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]) as f64 + frac)
}

/// `qosd_eviction_reaction_seconds` buckets (le, cumulative count), sum, count.
fn reaction_histogram(metrics: &str) -> (Vec<(String, f64)>, f64, f64) {
    let mut buckets = Vec::new();
    for l in metrics.lines() {
        if let Some(rest) = l.strip_prefix("qosd_eviction_reaction_seconds_bucket{le=\"") {
            if let Some((le, v)) = rest.split_once("\"} ") {
                buckets.push((le.to_string(), v.trim().parse().unwrap_or(0.0)));
            }
        }
    }
    let s = |n: &str| sample(metrics, n);
    let sum = s("qosd_eviction_reaction_seconds_sum");
    let count = s("qosd_eviction_reaction_seconds_count");
    assert!(
        count.is_some() && !buckets.is_empty(),
        "no qosd_eviction_reaction_seconds histogram in /metrics"
    );
    (buckets, sum.unwrap_or(0.0), count.unwrap_or(0.0))
}

/// The upper bound of the bucket holding quantile `q` (histogram_quantile
/// without interpolation), in ms.
fn histogram_quantile_ms(buckets: &[(String, f64)], count: f64, q: f64) -> Option<f64> {
    let want = (q * count).ceil();
    buckets
        .iter()
        .find(|(_, c)| *c >= want && count > 0.0)
        .map(|(le, _)| le.parse::<f64>().map(|x| x * 1e3).unwrap_or(f64::INFINITY))
}

/// Sorted-sample percentile (nearest rank).
fn pct(v: &[f64], q: f64) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s.get(((s.len() as f64 * q).ceil() as usize).saturating_sub(1))
        .copied()
}

fn read_trim(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The numeric `key=value` fields of a log line.
fn timing_fields(line: &str) -> Value {
    let mut m = serde_json::Map::new();
    for w in line.split_whitespace() {
        if let Some((k, v)) = w.split_once('=') {
            if let Ok(n) = v.parse::<i64>() {
                m.insert(k.to_string(), json!(n));
            }
        }
    }
    Value::Object(m)
}

/// `key value` from a memory.stat / memory.oom_control file.
fn kv(p: &Path, key: &str) -> u64 {
    read_trim(p)
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// The daemon end to end: `qosd run` (kill backend, private cgroup root,
/// `--node-memory` 1536Mi so kubepods is sized to it, hard
/// `allocatableMemory.available<256Mi`) with `QOSD_BENCH_E2E_IDLE` (10)
/// idle real pods, and per run one BestEffort memhog pod ramping 1 MiB per
/// step at 50 / 200 / 1000 MiB/s (`QOSD_BENCH_E2E_RATES`) past the line,
/// `QOSD_BENCH_E2E_RUNS` (10) runs per ramp; once with the default
/// detection (fast watcher: v1 eventfd + adaptive poll) and once with
/// `QOSD_EVICTION_WATCHER=off` (the passes alone, every second near the
/// line). Per run: qosd's own reaction (`/status` `reaction_ms`, the value
/// observed into `qosd_eviction_reaction_seconds`), the histogram, and a
/// bench-side cross-check: a ~200 µs sampler of kubepods'
/// `memory.usage_in_bytes` (the crossing of the line + inactive_file) and
/// of the hog's `/proc/<pid>/stat` (PF_EXITING: the kill has landed), plus
/// the `evicting pod` log line's timestamp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by bench/run.sh"]
async fn e2e() {
    require_containerd();
    let idle: usize = env_or("QOSD_BENCH_E2E_IDLE", 10);
    let runs: usize = env_or("QOSD_BENCH_E2E_RUNS", 10);
    let rates: Vec<u64> = std::env::var("QOSD_BENCH_E2E_RATES")
        .unwrap_or_else(|_| "50,200,1000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("QOSD_BENCH_E2E_RATES"))
        .collect();
    let modes: Vec<String> = std::env::var("QOSD_BENCH_E2E_MODES")
        .unwrap_or_else(|_| "watcher,pass".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    const NODE_MIB: u64 = 1536;
    const THRESHOLD_MIB: u64 = 256;
    let line_ws = (NODE_MIB - THRESHOLD_MIB) * MI as u64;
    let env = Containerd::start();
    let mut pods = Vec::new();
    grow(&env, &mut pods, idle).await;
    let kubepods = Path::new("/sys/fs/cgroup/memory")
        .join(env.cgroup_root.trim_start_matches('/'))
        .join("kubepods");
    let mut mode_results = Vec::new();
    let mut serial = 0usize;
    for mode in &modes {
        let mut args: Vec<String> = vec!["run".into()];
        args.extend(common_args(&env));
        args.extend(
            [
                "--node-memory",
                &format!("{NODE_MIB}Mi"),
                "--eviction-hard",
                &format!("allocatableMemory.available<{THRESHOLD_MIB}Mi"),
                "--eviction-backend",
                "kill",
            ]
            .map(String::from),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // QOSD_BENCH_E2E_LOG: qosd's log filter, e.g.
        // `warn,qosd::eviction::timing=debug` for the per-pass phase timing
        // (recorded per run as `pass_timing`).
        let log_filter = std::env::var("QOSD_BENCH_E2E_LOG").unwrap_or_else(|_| "warn".into());
        let mut envs: Vec<(&str, &std::ffi::OsStr)> = vec![("QOSD_LOG", log_filter.as_ref())];
        match mode.as_str() {
            "watcher" => {}
            "pass" => envs.push(("QOSD_EVICTION_WATCHER", "off".as_ref())),
            other => panic!("QOSD_BENCH_E2E_MODES: unknown mode {other}"),
        }
        let d = Daemon::start_bin(qosd_bin(), &args, &envs);
        let sized = wait_until(Duration::from_secs(30), || {
            read_trim(&kubepods.join("memory.limit_in_bytes")) == (NODE_MIB * MI as u64).to_string()
        });
        assert!(sized.is_some(), "qosd never sized kubepods:\n{}", d.log());
        let listed = wait_until(Duration::from_secs(10), || {
            d.get("/status")
                .and_then(|r| serde_json::from_str::<Value>(&r.body).ok())
                .is_some_and(|s| s["signals"].as_array().is_some_and(|a| !a.is_empty()))
        });
        assert!(listed.is_some(), "no signals in /status:\n{}", d.log());
        std::thread::sleep(Duration::from_secs(2));
        let oom0 = kv(&kubepods.join("memory.oom_control"), "oom_kill");
        let mut per_rate = Vec::new();
        for &rate in &rates {
            let mut rows = Vec::new();
            for k in 0..runs {
                serial += 1;
                let inactive = kv(&kubepods.join("memory.stat"), "total_inactive_file");
                let usage0: u64 = read_trim(&kubepods.join("memory.usage_in_bytes"))
                    .parse()
                    .unwrap();
                let ws0 = usage0.saturating_sub(inactive);
                // Start far enough below the line that the pod is listed
                // (inotify on kubepods) well before the crossing: ≥ 1.2 s
                // of ramp, ≥ 64 MiB.
                let distance = (rate * 12 / 10).max(64) * MI as u64;
                let initial_mib = (line_ws.saturating_sub(ws0 + distance) / MI as u64).max(8);
                let max_mib = line_ws / MI as u64 + 128;
                let interval_ms = (1000 / rate).max(1);
                let hog_args = [
                    initial_mib.to_string(),
                    "1".to_string(),
                    interval_ms.to_string(),
                    max_mib.to_string(),
                ];
                let hog_args: Vec<&str> = hog_args.iter().map(String::as_str).collect();
                let spec = PodSpec::new(&format!("hog-{mode}-{rate}-{k}"))
                    .container(ContainerSpec::memhog("hog", &hog_args));
                let t_created = Instant::now();
                let pod = env.run_pod(&spec).await;
                let pid = env.container_pid(&pod.containers[0].1).await;
                let usage_line = line_ws + inactive;
                let usage_file = kubepods.join("memory.usage_in_bytes");
                let tr = tokio::task::spawn_blocking(move || {
                    e2e_sample(&usage_file, usage_line, pid, Duration::from_secs(30))
                })
                .await
                .unwrap();
                // qosd's record of this eviction (exact reaction).
                let mut record = Value::Null;
                wait_until(Duration::from_secs(10), || {
                    let st: Value = d
                        .get("/status")
                        .and_then(|r| serde_json::from_str(&r.body).ok())
                        .unwrap_or(Value::Null);
                    if let Some(e) = st["last_evictions"].as_array().and_then(|a| {
                        a.iter()
                            .find(|e| e["uid"].as_str() == Some(pod.spec.uid.as_str()))
                            .cloned()
                    }) {
                        record = e;
                        true
                    } else {
                        false
                    }
                });
                let log = d.log();
                let evict_line = format!("evicting pod qosd-test/{}:", spec.name);
                let log_ts = log
                    .lines()
                    .find(|l| l.contains(&evict_line))
                    .and_then(|l| l.split_whitespace().next())
                    .and_then(rfc3339_unix_s);
                // The timing line of the pass that evicted it (debug).
                let pass_timing = log
                    .lines()
                    .skip_while(|l| !l.contains(&evict_line))
                    .find(|l| l.contains("eviction pass timing") && l.contains("evicted=true"))
                    .map(timing_fields)
                    .unwrap_or(Value::Null);
                let ms = |a: Option<Instant>, b: Option<Instant>| {
                    a.zip(b).map(|(a, b)| {
                        let d = if b >= a {
                            (b - a).as_secs_f64()
                        } else {
                            -(a - b).as_secs_f64()
                        };
                        (d * 1e6).round() / 1e3
                    })
                };
                let row = json!({
                    "run": k,
                    "initial_mib": initial_mib,
                    "ws_before_mib": ws0 as f64 / MI as f64,
                    "evicted_hog": !record.is_null(),
                    "reaction_ms_qosd": record.get("reaction_ms").cloned().unwrap_or(Value::Null),
                    "detected_by": record.get("detected_by").cloned().unwrap_or(Value::Null),
                    "detection_gap_ms": record.get("detection_gap_ms").cloned().unwrap_or(Value::Null),
                    "pass_timing": pass_timing,
                    "signal": record.get("signal").cloned().unwrap_or(Value::Null),
                    "observed_bytes": record.get("observed").cloned().unwrap_or(Value::Null),
                    "created_to_cross_ms": ms(Some(t_created), tr.cross),
                    "sampled_cross_to_hog_exiting_ms": ms(tr.cross, tr.exiting),
                    "sampled_cross_to_log_line_ms": tr.cross_unix_s.zip(log_ts).map(|(c, l)| ((l - c) * 1e6).round() / 1e3),
                    "ramp_mib_s_measured": tr.rate_mib_s.map(|r| r.round()),
                    "sampler_samples": tr.samples,
                    "sampler_max_gap_ms": (tr.max_sample_gap_ms * 1e3).round() / 1e3,
                    "crossed": tr.cross.is_some(),
                    "hog_exited": tr.exiting.is_some(),
                });
                eprintln!("bench: e2e {mode} {rate} MiB/s run {k}: {row}");
                rows.push(row);
                if record.is_null() {
                    // Not evicted (or another pod was): clean up ourselves.
                    let c = env.client().await;
                    let _ = c.stop_pod_sandbox(&pod.sandbox_id).await;
                    let _ = c.remove_pod_sandbox(&pod.sandbox_id).await;
                }
                // Memory back well below the line, and the loop settled
                // (released victim, relisted) before the next hog.
                wait_until(Duration::from_secs(20), || {
                    let u: u64 = read_trim(&kubepods.join("memory.usage_in_bytes"))
                        .parse()
                        .unwrap_or(u64::MAX);
                    u < usage0 + 64 * MI as u64
                });
                std::thread::sleep(Duration::from_millis(2500));
            }
            let col =
                |key: &str| -> Vec<f64> { rows.iter().filter_map(|r| r[key].as_f64()).collect() };
            let exact = col("reaction_ms_qosd");
            let ext = col("sampled_cross_to_hog_exiting_ms");
            let logd = col("sampled_cross_to_log_line_ms");
            let ramp = col("ramp_mib_s_measured");
            per_rate.push(json!({
                "rate_mib_s": rate,
                "runs": runs,
                "evicted_the_hog": rows.iter().filter(|r| r["evicted_hog"] == true).count(),
                "qosd_reaction_ms": summary(&exact),
                "qosd_reaction_ms_p99": pct(&exact, 0.99),
                "sampled_cross_to_hog_exiting_ms": summary(&ext),
                "sampled_cross_to_hog_exiting_ms_p99": pct(&ext, 0.99),
                "sampled_cross_to_log_line_ms": summary(&logd),
                "ramp_mib_s_measured": summary(&ramp),
                "rows": rows,
            }));
        }
        let (buckets, sum, count) = reaction_histogram(&d.metrics());
        let oom1 = kv(&kubepods.join("memory.oom_control"), "oom_kill");
        let evictions = d.metric(
            "qosd_evictions_total{eviction_signal=\"allocatableMemory.available\",qos_class=\"BestEffort\"}",
        );
        let errs = errors_by_kind(&d);
        if let Ok(dir) = std::env::var("QOSD_BENCH_E2E_LOG_DIR") {
            let _ = std::fs::write(Path::new(&dir).join(format!("e2e-{mode}.log")), d.log());
        }
        d.stop();
        mode_results.push(json!({
            "mode": mode,
            "detection": if mode == "watcher" { "fast watcher (v1 usage eventfd + adaptive poll) wakes the pass" } else { "QOSD_EVICTION_WATCHER=off: eviction passes alone (1 s near the line)" },
            "histogram": {
                "count": count,
                "sum_ms": sum * 1e3,
                "buckets_cumulative": buckets.iter().map(|(le, c)| json!([le, c])).collect::<Vec<_>>(),
                "p50_bucket_ms": histogram_quantile_ms(&buckets, count, 0.5),
                "p99_bucket_ms": histogram_quantile_ms(&buckets, count, 0.99),
            },
            "evictions_total_besteffort": evictions,
            "kernel_oom_kills_in_kubepods": oom1 - oom0,
            "errors_by_kind": errs,
            "rates": per_rate,
        }));
    }
    print_result(
        "e2e",
        json!({
            "idle_pods": idle,
            "node_memory_mib": NODE_MIB,
            "threshold": format!("allocatableMemory.available<{THRESHOLD_MIB}Mi"),
            "serial_runs": serial,
            "modes": mode_results,
            "command": "qosd run --runtime-endpoint <private containerd> --cgroup-version v1 --cgroup-root /qosd-test-… --node-memory 1536Mi --eviction-hard allocatableMemory.available<256Mi --eviction-backend kill --metrics-address 127.0.0.1:<port> [QOSD_EVICTION_WATCHER=off]",
        }),
    );
}
