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
//!
//! Every cgroup touched lives under the support env's `/qosd-test-<pid>-<n>`
//! root; every process started is stopped by its PID.

mod support;

use std::io::Read;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

// ------------------------------------------------------------------ helpers

fn qosd_bin() -> &'static str {
    env!("CARGO_BIN_EXE_qosd")
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

/// CPU time of this whole process (the CRI client runs on tokio workers).
fn process_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: plain out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// The phases of one reconcile measured inside this process with qosd's
/// library (the same calls `qosd run` makes): CRI listing (`Source::list`:
/// ListPodSandbox, ListContainers, statuses) and `Reconciler::reconcile`
/// (plan + read/compare + writes + orphan scan), first pass and steady,
/// interleaved. Wall and process CPU time in ms.
async fn in_process_phases(env: &Containerd, snap: &Snapshot, runs: usize) -> Value {
    use qosd::runtime::pod_source::{PodSourceSpec, Source};
    use qosd::runtime::reconcile::Reconciler;
    let yaml = format!(
        "cgroupRoot: {}\ncgroupVersion: v1\nruntimeEndpoint: {}\n",
        env.cgroup_root, env.endpoint
    );
    let cfg = qosd::config::Config::from_yaml_str(&yaml).expect("config");
    let plan = qosd::app::plan_config(
        &cfg,
        std::path::Path::new("/proc"),
        std::path::Path::new("/sys"),
    )
    .expect("plan config");
    let source = Source::connect(
        &PodSourceSpec::Cri {
            endpoint: env.endpoint.clone(),
        },
        qosd::cri::ConnectOptions::default(),
        plan.node.capacity_memory_bytes,
    )
    .await
    .expect("connect");
    let mut rec = Reconciler::new(plan, false, Duration::from_secs(60));
    let (mut list_w, mut list_c) = (Vec::new(), Vec::new());
    let (mut first_w, mut first_c, mut first_n) = (Vec::new(), Vec::new(), Vec::new());
    let (mut steady_w, mut steady_c, mut steady_n) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs + 1 {
        let (t, c) = (Instant::now(), process_cpu_ms());
        let listing = source.list().await.expect("list");
        list_w.push(t.elapsed().as_secs_f64() * 1e3);
        list_c.push(process_cpu_ms() - c);
        snap.restore();
        for (w, cpu, n) in [
            (&mut first_w, &mut first_c, &mut first_n),
            (&mut steady_w, &mut steady_c, &mut steady_n),
        ] {
            let (t, c) = (Instant::now(), process_cpu_ms());
            let r = rec.reconcile(&listing.pods, listing.all_uids.as_ref(), Instant::now());
            w.push(t.elapsed().as_secs_f64() * 1e3);
            cpu.push(process_cpu_ms() - c);
            n.push(r.writes.len());
            assert!(r.errors.is_empty(), "{:?}", r.errors);
        }
    }
    // The first round warmed caches: drop it.
    let d = |v: &mut Vec<f64>| summary(&v.split_off(1));
    json!({
        "list": {"wall_ms": d(&mut list_w), "cpu_ms": d(&mut list_c)},
        "reconcile_first_pass": {"wall_ms": d(&mut first_w), "cpu_ms": d(&mut first_c), "writes": first_n.split_off(1)},
        "reconcile_steady": {"wall_ms": d(&mut steady_w), "cpu_ms": d(&mut steady_c), "writes": steady_n.split_off(1)},
    })
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
        let phases = in_process_phases(&env, &snap, runs).await;
        let r = json!({
            "pods": n,
            "in_process": phases,
            "runs": runs,
            "planned_writes": snap.0.len(),
            "files_restored_before_first_pass": restored,
            "first_pass": side(&first),
            "steady": side(&steady),
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
    let mut args = vec!["run".to_string()];
    args.extend(common_args(env));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Daemon::start_with(
        &args,
        &[
            ("QOSD_LOG", "warn".as_ref()),
            ("NOTIFY_SOCKET", notify.as_os_str()),
        ],
    )
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

/// VmRSS and VmHWM (KiB) from /proc/<pid>/status.
fn rss_of(pid: i32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let get = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    (get("VmRSS:"), get("VmHWM:"))
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

/// Idle CPU and memory of `qosd run` (default intervals) with 50 real pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by bench/run.sh"]
async fn footprint() {
    require_containerd();
    let n: usize = env_or("QOSD_BENCH_FOOTPRINT_PODS", 50);
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
    // Let the first pass's allocations and the first relists settle.
    std::thread::sleep(Duration::from_secs(5));
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
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
            "reconciles_during": reconciles1.zip(reconciles0).map(|(a, b)| a - b),
            "cgroup_writes_during": writes1.zip(writes0).map(|(a, b)| a - b),
            "last_reconcile": status_json.get("last_reconcile").cloned().unwrap_or(Value::Null),
            "command": "qosd run --runtime-endpoint <private containerd> --cgroup-version v1 --cgroup-root /qosd-test-… --metrics-address 127.0.0.1:<port> (default intervals)",
        }),
    );
}

// ------------------------------------------------------------------ startup

/// Exec to READY=1 (sd_notify, sent after the first reconcile) with 110
/// real pods: cold (node not enforced yet: the first pass writes) and warm
/// (a restart on an enforced node: no writes), interleaved A B A B.
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
    let once = |cold: bool| -> (f64, f64, u64) {
        if cold {
            snap.restore();
        }
        // Drain stale messages.
        sock.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 4096];
        while sock.recv(&mut buf).is_ok() {}
        sock.set_nonblocking(false).unwrap();
        let t = Instant::now();
        let d = spawn_daemon(&env, &sock_path);
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
    once(false); // warm-up
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    let (mut cold_cpu, mut warm_cpu, mut hwm) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (ms, cpu, h) = once(true);
        cold.push(ms);
        cold_cpu.push(cpu);
        hwm.push(h as f64);
        let (ms, cpu, h) = once(false);
        warm.push(ms);
        warm_cpu.push(cpu);
        hwm.push(h as f64);
        eprintln!(
            "bench: startup cold {:.1} ms, warm {:.1} ms",
            cold.last().unwrap(),
            ms
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
            "vm_hwm_kib_at_ready": summary(&hwm),
            "command": "NOTIFY_SOCKET=<dgram socket> qosd run --runtime-endpoint <private containerd> --cgroup-version v1 --cgroup-root /qosd-test-… --metrics-address 127.0.0.1:<port>",
        }),
    );
}
