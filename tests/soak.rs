//! Soak (issue 13; not a CI test: `test = false` in Cargo.toml, bench/soak.sh
//! runs it): `qosd run` against a real containerd for `QOSD_SOAK_SECONDS`
//! (default 1800) of pod churn with faults injected at random — runtime
//! SIGSTOP (3–12 s), runtime SIGKILL + restart, cgroup drift, bursts of 50
//! slow HTTP clients — recording qosd's RSS and descriptors, its error
//! counters, the time `/readyz` failed, and missed pods (a pod not enforced
//! within 10 s while the runtime was healthy). Prints one `BENCH_JSON`
//! line. Asserts only that qosd never exited and missed no pod.
//!
//! cargo test --release --test soak -- --ignored --nocapture

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::*;

/// A tiny deterministic generator (no extra crate): xorshift64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn shares_of(millis: i64) -> String {
    (millis * 1024 / 1000).max(2).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: run by bench/soak.sh (needs root)"]
async fn soak() {
    require_root("soak");
    let seconds: u64 = std::env::var("QOSD_SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1800);
    let mut rng = Rng(std::env::var("QOSD_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15));
    let mut env = Containerd::start();
    // The cgroup root exists once a pod runs: qosd needs it at start.
    let first = env
        .run_pod(
            &PodSpec::new("soak-0").container(ContainerSpec::pause("app").cpu(Some(20), Some(500))),
        )
        .await;
    let mut args = env.run_args(None);
    args.extend([
        "--orphan-grace-period",
        "0s",
        // Memory only: the shared machine's disk may be under real pressure.
        "--eviction-hard",
        "memory.available<100Mi",
    ]);
    let mut qosd = Daemon::start(&args);
    let pid = qosd.pid() as u32;

    let mut pods: Vec<(RunningPod, i64, Instant, bool)> = vec![(first, 20, Instant::now(), false)];
    let (mut started, mut removed, mut missed) = (0u64, 0u64, 0u64);
    let mut faults = std::collections::BTreeMap::<&str, u64>::new();
    let (mut rss, mut fd) = (Vec::new(), Vec::new());
    let mut not_ready_s = 0.0f64;
    let mut runtime_healthy_since = Instant::now();
    let mut stopped_until: Option<Instant> = None;
    let t0 = Instant::now();
    let mut last_sample = Instant::now() - Duration::from_secs(10);
    let mut n = 0i64;
    while t0.elapsed() < Duration::from_secs(seconds) {
        qosd.assert_running();
        let cpid = Pid::from_raw(env.pid().unwrap() as i32);
        if let Some(until) = stopped_until {
            if Instant::now() >= until {
                kill(cpid, Signal::SIGCONT).unwrap();
                stopped_until = None;
                runtime_healthy_since = Instant::now();
            }
        }
        let healthy = stopped_until.is_none();
        if last_sample.elapsed() >= Duration::from_secs(5) {
            last_sample = Instant::now();
            rss.push(rss_kib(pid));
            fd.push(fd_count(pid) as u64);
        }
        if qosd.code("/readyz") != Some(200) {
            not_ready_s += 0.5;
        }
        // Enforcement check of the pods started while the runtime was healthy.
        for (p, millis, at, checked) in pods.iter_mut() {
            if *checked || !healthy {
                continue;
            }
            let file = env.cgroup_dir("cpu", p).join("cpu.shares");
            let ok = std::fs::read_to_string(&file).is_ok_and(|v| v.trim() == shares_of(*millis));
            let since = (*at).max(runtime_healthy_since);
            if ok {
                *checked = true;
            } else if since.elapsed() > Duration::from_secs(10) {
                missed += 1;
                *checked = true;
                eprintln!("soak: pod {} not enforced within 10 s", p.spec.name);
            }
        }
        let action = rng.below(100);
        if healthy && (action < 35 || pods.len() < 3) && pods.len() < 20 {
            n += 1;
            let millis = 20 + (n % 200);
            let p = env
                .run_pod(
                    &PodSpec::new(&format!("soak-{n}"))
                        .container(ContainerSpec::pause("app").cpu(Some(millis), Some(500))),
                )
                .await;
            started += 1;
            pods.push((p, millis, Instant::now(), false));
        } else if healthy && action < 60 && !pods.is_empty() {
            let i = rng.below(pods.len() as u64) as usize;
            let (p, ..) = pods.remove(i);
            env.remove_pod(&p).await;
            removed += 1;
        } else if healthy && action < 64 {
            kill(cpid, Signal::SIGSTOP).unwrap();
            stopped_until = Some(Instant::now() + Duration::from_secs(3 + rng.below(10)));
            *faults.entry("runtime_sigstop").or_default() += 1;
        } else if healthy && action < 67 {
            kill(cpid, Signal::SIGKILL).unwrap();
            env.stop();
            tokio::time::sleep(Duration::from_millis(500 + rng.below(3000))).await;
            env.start_again();
            // The socket answers before the CRI plugin is initialized.
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(30)
                && qosd_node::cri::CriClient::connect(&env.endpoint, Default::default())
                    .await
                    .is_err()
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            runtime_healthy_since = Instant::now();
            *faults.entry("runtime_sigkill_restart").or_default() += 1;
        } else if action < 75 && !pods.is_empty() {
            let i = rng.below(pods.len() as u64) as usize;
            let _ = std::fs::write(env.cgroup_dir("cpu", &pods[i].0).join("cpu.shares"), "777");
            *faults.entry("cgroup_drift").or_default() += 1;
        } else if action < 78 {
            let mut conns: Vec<TcpStream> = (0..50)
                .filter_map(|_| TcpStream::connect(qosd.addr).ok())
                .collect();
            for c in &mut conns {
                let _ = c.write_all(b"GET /metrics HTTP/1.1\r\n");
            }
            *faults.entry("slow_http_50").or_default() += 1;
            tokio::time::sleep(Duration::from_secs(3)).await;
            drop(conns);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if stopped_until.is_some() {
        kill(Pid::from_raw(env.pid().unwrap() as i32), Signal::SIGCONT).unwrap();
    }
    let metrics = qosd.body("/metrics");
    let errors: std::collections::BTreeMap<String, f64> = metrics
        .lines()
        .filter(|l| l.starts_with("qosd_errors_total{"))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect();
    let evictions = sum_samples(&metrics, "qosd_evictions_total");
    let alive = qosd.exit_status().is_none();
    let log = qosd.log();
    let log_lines = log.lines().count();
    // The causes of the counted errors are in qosd's log: keep it beside the
    // result (bench/soak.sh names the file).
    let log_kept = std::env::var("QOSD_SOAK_LOG")
        .ok()
        .filter(|p| !p.is_empty());
    if let Some(p) = &log_kept {
        std::fs::write(p, &log).unwrap();
    }
    // Warnings and errors by message (the text after the level), most first.
    let mut by_message: std::collections::BTreeMap<String, u64> = Default::default();
    for l in log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
    {
        let msg = l
            .split_once(" WARN ")
            .or_else(|| l.split_once(" ERROR "))
            .map(|(_, m)| m.chars().take(160).collect::<String>())
            .unwrap_or_default();
        *by_message.entry(msg).or_default() += 1;
    }
    let mut warnings: Vec<(String, u64)> = by_message.into_iter().collect();
    warnings.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    warnings.truncate(20);
    qosd.stop();
    let doc = serde_json::json!({
        "seconds": seconds,
        "pods_started": started,
        "pods_removed": removed,
        "missed_pods": missed,
        "faults": faults,
        "rss_kib": {"first": rss.first(), "max": rss.iter().max(), "last": rss.last()},
        "fds": {"first": fd.first(), "max": fd.iter().max(), "last": fd.last()},
        "errors_total": errors,
        "evictions": evictions,
        "not_ready_seconds_approx": not_ready_s,
        "qosd_alive_at_end": alive,
        "log_lines": log_lines,
        "log_file": log_kept,
        "warnings_by_message": warnings,
    });
    println!("BENCH_JSON {}", serde_json::to_string(&doc).unwrap());
    assert!(alive, "qosd exited");
    assert_eq!(missed, 0, "missed pods");
    assert_eq!(evictions, 0.0, "evicted on a node without pressure");
}
