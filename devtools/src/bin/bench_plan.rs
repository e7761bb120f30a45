//! Plan throughput benchmark: `cargo run --release --bin bench_plan [PODS] [RUNS]`.
//!
//! Builds PODS synthetic pods (default 10,000; a mix of Guaranteed,
//! Burstable and BestEffort with init containers and sidecars), then times
//! `plan::build` (classification, resource sums, naming and every write)
//! for each of v1/v2 × cgroupfs/systemd, RUNS times each (default 20), and
//! prints wall-clock min/median/max and thread CPU time min/median in
//! milliseconds plus the JSON serialisation time.
//! Goal: under 100 ms for 10,000 pods.

use std::time::{Duration, Instant};

use qosd_model::core::model::{CgroupDriver, CgroupVersion, Container, Pod, ResourceRequirements};
use qosd_model::core::node::NodeResources;
use qosd_model::core::quantity::Quantity;
use qosd_model::policy::enforce::naming::CgroupLayout;
use qosd_model::policy::enforce::plan::{build, PlanConfig};

fn res(req: &[(&str, &str)], lim: &[(&str, &str)]) -> ResourceRequirements {
    let list = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(k, q)| (k.to_string(), Quantity::parse(q).unwrap()))
            .collect()
    };
    ResourceRequirements {
        requests: list(req),
        limits: list(lim),
    }
}

fn synthetic_pods(n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = Pod::new(
                format!("{:08x}-0000-4000-8000-{:012x}", i, i * 7919),
                format!("ns-{}", i % 50),
                format!("pod-{i}"),
            );
            let c = |name: &str, r| Container {
                name: name.to_string(),
                resources: r,
                restartable: false,
            };
            match i % 4 {
                0 => {
                    p.containers = vec![c(
                        "app",
                        res(
                            &[("cpu", "500m"), ("memory", "256Mi")],
                            &[("cpu", "500m"), ("memory", "256Mi")],
                        ),
                    )]
                }
                1 => {
                    p.containers = vec![
                        c(
                            "app",
                            res(
                                &[("cpu", "250m"), ("memory", "64Mi")],
                                &[("cpu", "500m"), ("memory", "128Mi")],
                            ),
                        ),
                        c(
                            "log",
                            res(
                                &[("cpu", "50m"), ("memory", "32Mi")],
                                &[("cpu", "100m"), ("memory", "64Mi")],
                            ),
                        ),
                    ];
                    p.init_containers = vec![
                        Container {
                            restartable: true,
                            ..c("proxy", res(&[("cpu", "100m"), ("memory", "64Mi")], &[]))
                        },
                        c("init", res(&[("cpu", "1"), ("memory", "16Mi")], &[])),
                    ];
                }
                2 => {
                    p.containers = vec![c(
                        "app",
                        res(&[("memory", "100Mi")], &[("memory", "200Mi")]),
                    )]
                }
                _ => p.containers = vec![c("app", ResourceRequirements::default())],
            }
            p
        })
        .collect()
}

/// CPU time of this thread (immune to other processes competing for the cores).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: plain out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(v[0]), ms(v[v.len() / 2]), ms(v[v.len() - 1]))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let runs: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(20)
        .max(1);
    let pods = synthetic_pods(n);
    let node = NodeResources::from_capacity(64_000, 256 << 30);
    println!("plan::build over {n} synthetic pods, {runs} runs each (min / median / max)");
    for version in [CgroupVersion::V1, CgroupVersion::V2] {
        for driver in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
            let mut cfg = PlanConfig::new(CgroupLayout::new(version, driver), node);
            cfg.memory_qos = version == CgroupVersion::V2;
            let mut times = Vec::with_capacity(runs);
            let mut cpu = Vec::with_capacity(runs);
            let mut writes = 0;
            for _ in 0..runs {
                let (t, c) = (Instant::now(), thread_cpu());
                let plan = build(&cfg, &pods);
                times.push(t.elapsed());
                cpu.push(thread_cpu() - c);
                writes = std::hint::black_box(&plan).writes.len();
            }
            let (min, med, max) = stats(times);
            let (cmin, cmed, _) = stats(cpu);
            let plan = build(&cfg, &pods);
            let t = Instant::now();
            let json = serde_json::to_string(&plan).unwrap();
            let ser = t.elapsed().as_secs_f64() * 1000.0;
            println!(
                "  {version} {driver:<8}: wall {min:6.2} / {med:6.2} / {max:6.2} ms, cpu {cmin:6.2} / {cmed:6.2} ms  ({writes} writes; JSON {ser:.2} ms, {} KiB)",
                json.len() / 1024
            );
        }
    }
}
