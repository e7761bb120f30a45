//! `qosd run` evicting real containerd pods under real memory pressure on
//! cgroup v1: the kubepods cgroup gets a 512 MiB limit (`--node-memory`),
//! a Guaranteed, a Burstable and a BestEffort memhog pod grow, and with
//! `allocatableMemory.available<100Mi` qosd must evict the BestEffort pod
//! first, then the Burstable pod once it is over its request and the line
//! is crossed again; the Guaranteed pod survives and the kernel OOM killer
//! never fires. Needs root (`#[ignore]`d; scripts/test runs it as root).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn oom_kills(dir: &Path) -> u64 {
    read_or_empty(&dir.join("memory.oom_control"))
        .lines()
        .find_map(|l| {
            l.strip_prefix("oom_kill ")
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn evicted_uids(port: u16) -> Vec<String> {
    let doc = status_json(port);
    let mut v: Vec<String> = doc["last_evictions"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["uid"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    v.reverse(); // most recent first → oldest first
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
// The guard is held across awaits on purpose: it keeps the tests that
// take it apart for the whole test, each on its own runtime.
#[allow(clippy::await_holding_lock)]
async fn evicts_besteffort_then_burstable_guaranteed_survives_no_oom() {
    let _serial = crate::support::serial();
    require_containerd();
    let env = Containerd::start();
    // memhog <initial> <step> <interval ms> <max>: an hour-long interval, so
    // the test drives growth with SIGUSR1 (one 16 MiB step each).
    let g = env
        .run_pod(
            &PodSpec::new("guaranteed").container(
                ContainerSpec::memhog("hog", &["60"])
                    .cpu(Some(100), Some(100))
                    .memory(Some(128 * MI), Some(128 * MI)),
            ),
        )
        .await;
    let b = env
        .run_pod(
            &PodSpec::new("burstable").container(
                ContainerSpec::memhog("hog", &["8", "16", "3600000", "480"])
                    .cpu(Some(100), None)
                    .memory(Some(64 * MI), Some(GI)),
            ),
        )
        .await;
    let be = env
        .run_pod(
            &PodSpec::new("besteffort")
                .container(ContainerSpec::memhog("hog", &["8", "16", "3600000", "480"])),
        )
        .await;
    let g_pid = env.container_pid(&g.containers[0].1).await;
    let b_pid = env.container_pid(&b.containers[0].1).await;
    let be_pid = env.container_pid(&be.containers[0].1).await;

    let mut args = vec!["run"];
    args.extend(env.qosd_flags());
    args.extend([
        "--node-memory",
        "512Mi",
        "--eviction-hard",
        "allocatableMemory.available<100Mi",
        "--eviction-backend",
        "kill",
        "--reconcile-interval",
        "2s",
    ]);
    let daemon = Daemon::start(&args);
    let port = daemon.port;

    // Wait for the first reconcile: kubepods limited to 512 MiB.
    let kubepods = Path::new("/sys/fs/cgroup/memory")
        .join(env.cgroup_root.trim_start_matches('/'))
        .join("kubepods");
    let sized = wait_until(Duration::from_secs(20), || {
        read_or_empty(&kubepods.join("memory.limit_in_bytes")) == (512 * MI).to_string()
    });
    assert!(sized.is_some(), "qosd never sized kubepods");
    // ... and for the eviction loop to have a pod listing.
    let listed = wait_until(Duration::from_secs(10), || {
        status_json(port)["signals"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    assert!(listed.is_some(), "no signals in /status");
    let oom_before = oom_kills(&kubepods);

    // Phase 1: BestEffort and Burstable grow together (~300 MiB/s in all)
    // until the line (412 MiB used) is crossed: BestEffort goes first.
    // (The Burstable pod grows at half the rate, so that once the
    // BestEffort pod is gone the node is back under the line: each victim
    // is evicted once, and memory still at the line would rightly take the
    // Burstable pod next.)
    let start = Instant::now();
    let mut i = 0u32;
    while alive(be_pid) && start.elapsed() < Duration::from_secs(15) {
        let _ = kill(Pid::from_raw(be_pid), Signal::SIGUSR1);
        if i % 2 == 0 {
            let _ = kill(Pid::from_raw(b_pid), Signal::SIGUSR1);
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!alive(be_pid), "BestEffort pod was not evicted");
    assert!(
        alive(b_pid),
        "Burstable pod evicted before the BestEffort one"
    );
    // Phase 2: the Burstable pod keeps growing past its request and the line.
    let start = Instant::now();
    while alive(b_pid) && start.elapsed() < Duration::from_secs(20) {
        let _ = kill(Pid::from_raw(b_pid), Signal::SIGUSR1);
        std::thread::sleep(Duration::from_millis(60));
    }
    assert!(!alive(b_pid), "Burstable pod was not evicted");
    std::thread::sleep(Duration::from_millis(500));
    assert!(alive(g_pid), "the Guaranteed pod must survive");
    assert_eq!(
        evicted_uids(port),
        vec![be.spec.uid.clone(), b.spec.uid.clone()],
        "eviction order (from /status)"
    );
    assert_eq!(
        oom_kills(&kubepods),
        oom_before,
        "the kernel OOM killer fired"
    );
    for p in [&g, &b, &be] {
        assert_eq!(
            oom_kills(&env.cgroup_dir("memory", p)),
            0,
            "OOM kill in {}",
            p.spec.name
        );
    }
    let doc = status_json(port);
    for e in doc["last_evictions"].as_array().unwrap() {
        eprintln!(
            "evicted {} ({}) reaction {:?} ms",
            e["name"], e["qos_class"], e["reaction_ms"]
        );
        // The reaction observed into qosd_eviction_reaction_seconds.
        assert!(
            e["reaction_ms"].as_f64().is_some_and(|r| r >= 0.0),
            "no reaction_ms in {e}"
        );
    }
}
