//! Disk eviction for real: a private containerd whose root (images and the
//! containers' writable layers) and the kubelet root dir share a small
//! tmpfs the test mounts; pods are real containers; `qosd run` measures
//! per-pod storage through its production path (CRI ListContainerStats
//! writable layers, /var/log/pods-style logs, local volumes), removes the
//! unused image first, then evicts — each victim once.
//!
//! Needs root (mount, cgroups, containerd), containerd, runc, ctr, gcc and
//! python3; fails with the reason when one is missing.

use crate::support;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{
    free_port, status_json, sum_samples, wait_for_every, ContainerSpec, Containerd, PodSpec,
    RunningPod,
};

const MI: i64 = 1024 * 1024;

struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH);
    }
}

fn tmpfs(size: &str, inodes: u32) -> Tmpfs {
    let dir = tempfile::Builder::new()
        .prefix("qosd-test-disk-")
        .tempdir_in("/tmp")
        .unwrap();
    let path = dir.path().join("fs");
    std::fs::create_dir(&path).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &path,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NODEV,
        Some(format!("size={size},nr_inodes={inodes}").as_str()),
    )
    .unwrap_or_else(|e| {
        panic!(
            "needs root: cannot mount a tmpfs at {}: {e}",
            path.display()
        )
    });
    Tmpfs { path, _dir: dir }
}

/// `qosd run`, its stderr collected; stopped (SIGTERM by PID) on drop.
struct Daemon {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    port: u16,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(env: &Containerd, root_dir: &Path, config: &str, extra: &[&str]) -> Daemon {
        let port = free_port();
        let cfg = root_dir.parent().unwrap().join("qosd.yaml");
        std::fs::write(&cfg, config).unwrap();
        let mut args: Vec<String> = vec![
            "run".into(),
            "--config".into(),
            cfg.display().to_string(),
            "--runtime-endpoint".into(),
            env.endpoint.clone(),
            "--cgroup-version".into(),
            "v1".into(),
            "--cgroup-root".into(),
            env.cgroup_root.clone(),
            "--root-dir".into(),
            root_dir.display().to_string(),
            "--metrics-address".into(),
            format!("127.0.0.1:{port}"),
            "--reconcile-interval".into(),
            "1s".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut child = Command::new(support::qosd_bin())
            .args(&args)
            .env("QOSD_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start qosd run");
        let log = Arc::new(Mutex::new(Vec::new()));
        let l2 = log.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("qosd: {line}");
                l2.lock().unwrap().push(line);
            }
        });
        let d = Daemon { child, log, port };
        wait_for("qosd /status with pod usage", 30, || {
            std::panic::catch_unwind(|| status_json(port))
                .ok()
                .is_some_and(|d| d["pod_usage"].as_array().is_some_and(|a| !a.is_empty()))
        });
        d
    }

    fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn metric(&self, prefix: &str) -> f64 {
        let body = support::http::get(
            format!("127.0.0.1:{}", self.port).parse().unwrap(),
            "/metrics",
            Duration::from_secs(2),
        )
        .unwrap()
        .body;
        sum_samples(&body, prefix)
    }
}

/// Poll every 200 ms (`/status` measures pod usage on demand).
fn wait_for(what: &str, secs: u64, f: impl FnMut() -> bool) {
    wait_for_every(
        what,
        Duration::from_secs(secs),
        Duration::from_millis(200),
        f,
    )
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Is the sandbox still known to the runtime?
fn sandbox_exists(rt: &tokio::runtime::Runtime, env: &Containerd, pod: &RunningPod) -> bool {
    rt.block_on(async {
        env.client()
            .await
            .list_pod_sandboxes()
            .await
            .unwrap()
            .iter()
            .any(|s| s.id == pod.sandbox_id)
    })
}

/// Write `mib` MiB into the container's own root filesystem (its writable
/// layer), through /proc/<pid>/root as the container would.
fn fill_writable_layer(
    rt: &tokio::runtime::Runtime,
    env: &Containerd,
    pod: &RunningPod,
    name: &str,
    mib: usize,
) {
    let pid = rt.block_on(env.container_pid(&pod.containers[0].1));
    let buf = vec![0x5au8; MI as usize];
    let path = PathBuf::from(format!("/proc/{pid}/root/{name}"));
    let mut data = Vec::with_capacity(mib * MI as usize);
    for _ in 0..mib {
        data.extend_from_slice(&buf);
    }
    std::fs::write(&path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// How often containerd logged `StopPodSandbox for "<id>"` (one per call).
fn stop_calls(env: &Containerd, pod: &RunningPod) -> usize {
    let needle = format!("StopPodSandbox for \\\"{}\\\"", pod.sandbox_id);
    let plain = format!("StopPodSandbox for \"{}\"", pod.sandbox_id);
    env.log()
        .lines()
        .filter(|l| (l.contains(&needle) || l.contains(&plain)) && !l.contains("returns"))
        .count()
}

fn pods_of_usage(port: u16) -> serde_json::Value {
    status_json(port)["pod_usage"].clone()
}

fn usage_of(port: u16, uid: &str, field: &str) -> Option<u64> {
    pods_of_usage(port)
        .as_array()?
        .iter()
        .find(|p| p["uid"] == uid)?[field]
        .as_u64()
}

#[test]
#[ignore = "needs root: mounts a tmpfs, runs a private containerd and qosd run"]
fn disk_pressure_reclaims_images_then_evicts_the_writer() {
    support::require_containerd();
    let fs = tmpfs("160m", 200_000);
    let root_dir = fs.path.join("kubelet");
    let logs_dir = fs.path.join("pod-logs");
    std::fs::create_dir_all(&root_dir).unwrap();
    std::fs::create_dir_all(&logs_dir).unwrap();
    let env = Containerd::start_with_root(Some(&fs.path.join("containerd")));
    let unused = support::filler_image("qosd.test/unused:1", 24 << 20);
    env.import(&unused);
    let rt = rt();
    let quiet = rt.block_on(
        env.run_pod(
            &PodSpec::new("guaranteed-quiet").container(
                ContainerSpec::memhog("app", &["4"])
                    .cpu(Some(100), Some(100))
                    .memory(Some(64 * MI), Some(64 * MI)),
            ),
        ),
    );
    let writer = rt.block_on(env.run_pod(
        &PodSpec::new("besteffort-writer").container(ContainerSpec::memhog("app", &["4"])),
    ));
    // Its container log, where the kubelet would keep it.
    let wlog = logs_dir.join(format!(
        "{}_{}_{}/app",
        writer.spec.namespace, writer.spec.name, writer.spec.uid
    ));
    std::fs::create_dir_all(&wlog).unwrap();
    std::fs::write(wlog.join("0.log"), vec![b'x'; 2 << 20]).unwrap();

    let (avail0, cap) = qosd_node::sys::signals::fs_bytes(&fs.path).unwrap();
    // Threshold: 40 MiB below what is free now, so that ~24 MiB of image
    // is not enough to get back above it once the writer has written 56.
    let threshold = (avail0 - 40 * MI) / MI;
    eprintln!("tmpfs {cap} bytes, {avail0} free; threshold {threshold} MiB");
    let d = Daemon::start(
        &env,
        &root_dir,
        &format!(
            "podLogsDir: {}\nimageMinimumGCAge: 0s\n",
            logs_dir.display()
        ),
        &[
            "--eviction-hard",
            &format!("nodefs.available<{threshold}Mi"),
            "--eviction-backend",
            "kill",
        ],
    );
    assert!(rt
        .block_on(env.image_tags())
        .iter()
        .any(|t| t.contains("unused")));

    // The writer writes 56 MiB into its writable layer: nodefs below the
    // line by ~16 MiB; the image frees ~24 MiB but the line + nothing is
    // not enough once it writes on.
    fill_writable_layer(&rt, &env, &writer, "fill-1", 36);
    wait_for("per-pod writable layer in /status", 20, || {
        usage_of(d.port, &writer.spec.uid, "writable_layer_bytes").is_some_and(|b| b >= 30 << 20)
    });
    // storage = layer + logs (+ no volumes); the quiet pod writes nothing
    let st = usage_of(d.port, &writer.spec.uid, "ephemeral_storage_bytes").unwrap();
    assert!(st >= (36 << 20) + (2 << 20), "writer storage {st}");
    assert!(
        usage_of(d.port, &quiet.spec.uid, "ephemeral_storage_bytes").unwrap() < 1 << 20,
        "quiet pod storage"
    );
    assert!(usage_of(d.port, &writer.spec.uid, "inodes").unwrap() >= 3);
    assert!(usage_of(d.port, &quiet.spec.uid, "processes").unwrap() >= 1);
    // `qosd eviction-order --cri` measures the same way and ranks the writer first
    let (code, out, err) = support::qosd(&[
        "eviction-order",
        "--cri",
        "--runtime-endpoint",
        &env.endpoint,
        "--cgroup-root",
        &env.cgroup_root,
        "--signal",
        "nodefs.available",
        "--root-dir",
        root_dir.to_str().unwrap(),
        "--pod-logs-dir",
        logs_dir.to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let first = &doc["order"][0];
    assert_eq!(first["uid"], writer.spec.uid.as_str(), "{out}");
    assert!(
        first["ephemeral_storage_bytes"].as_u64().unwrap() >= 36 << 20,
        "{out}"
    );
    assert!(first["inodes"].as_u64().unwrap() >= 3, "{out}");
    assert!(first["processes"].as_u64().unwrap() >= 1, "{out}");
    fill_writable_layer(&rt, &env, &writer, "fill-2", 20);

    wait_for("the unused image removed", 30, || {
        !rt.block_on(env.image_tags())
            .iter()
            .any(|t| t.contains("unused"))
    });
    assert!(sandbox_exists(&rt, &env, &writer));
    // Still writing: the image alone is not enough; the writer goes.
    for i in 0..12 {
        if !sandbox_exists(&rt, &env, &writer) {
            break;
        }
        fill_writable_layer(&rt, &env, &writer, &format!("more-{i}"), 8);
        std::thread::sleep(Duration::from_secs(2));
    }
    wait_for("the writer evicted", 60, || {
        !sandbox_exists(&rt, &env, &writer)
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        sandbox_exists(&rt, &env, &quiet),
        "the quiet Guaranteed pod must stay"
    );
    let tags = rt.block_on(env.image_tags());
    assert!(
        tags.iter().any(|t| t.contains("memhog")),
        "an image in use was removed: {tags:?}"
    );
    assert!(d.metric("qosd_reclaimed_images_total") >= 1.0);
    assert_eq!(
        d.metric("qosd_evictions_total{eviction_signal=\"nodefs.available\""),
        1.0
    );
    assert_eq!(
        stop_calls(&env, &writer),
        1,
        "StopPodSandbox calls for the writer"
    );
    let lines = d.lines();
    let removed = lines
        .iter()
        .position(|l| l.contains("removed unused image"));
    let evicted = lines
        .iter()
        .position(|l| l.contains("evicting pod") && l.contains("besteffort-writer"));
    assert!(
        matches!((removed, evicted), (Some(r), Some(e)) if r < e),
        "image removal must come before the eviction: {removed:?} {evicted:?}"
    );
    assert!(lines.iter().filter(|l| l.contains("evicting pod")).count() == 1);
}

#[test]
#[ignore = "needs root: mounts a tmpfs, runs a private containerd and qosd run"]
fn inode_pressure_evicts_the_pod_with_many_files() {
    support::require_containerd();
    let fs = tmpfs("256m", 6000);
    let root_dir = fs.path.join("kubelet");
    std::fs::create_dir_all(&root_dir).unwrap();
    let env = Containerd::start_with_root(Some(&fs.path.join("containerd")));
    let rt = rt();
    let quiet = rt.block_on(
        env.run_pod(
            &PodSpec::new("guaranteed-quiet").container(
                ContainerSpec::memhog("app", &["4"])
                    .cpu(Some(100), Some(100))
                    .memory(Some(64 * MI), Some(64 * MI)),
            ),
        ),
    );
    let writer = rt.block_on(
        env.run_pod(
            &PodSpec::new("burstable-files")
                .container(ContainerSpec::memhog("app", &["4"]).memory(Some(32 * MI), None)),
        ),
    );
    let (free0, _) = qosd_node::sys::signals::fs_inodes(&fs.path).unwrap();
    let threshold = free0 - 1500;
    let d = Daemon::start(
        &env,
        &root_dir,
        "imageMinimumGCAge: 0s\n",
        &[
            "--eviction-hard",
            &format!("nodefs.inodesFree<{threshold}"),
            "--eviction-backend",
            "cri",
        ],
    );
    let pid = rt.block_on(env.container_pid(&writer.containers[0].1));
    let dir = PathBuf::from(format!("/proc/{pid}/root/many"));
    std::fs::create_dir(&dir).unwrap();
    for i in 0..2000 {
        std::fs::write(dir.join(format!("f{i}")), b"").unwrap();
    }
    wait_for("the file writer evicted", 60, || {
        !sandbox_exists(&rt, &env, &writer)
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        sandbox_exists(&rt, &env, &quiet),
        "the quiet Guaranteed pod must stay"
    );
    assert_eq!(
        d.metric("qosd_evictions_total{eviction_signal=\"nodefs.inodesFree\""),
        1.0
    );
    assert_eq!(stop_calls(&env, &writer), 1);
}

#[test]
#[ignore = "needs root: runs a private containerd and qosd run"]
fn exactly_once_each_in_the_kubelets_order_with_quiet_logs() {
    support::require_containerd();
    let fs = tmpfs("200m", 200_000);
    let root_dir = fs.path.join("kubelet");
    std::fs::create_dir_all(&root_dir).unwrap();
    let env = Containerd::start_with_root(Some(&fs.path.join("containerd")));
    let rt = rt();
    // Four BestEffort pods writing 8, 6, 4, 2 MiB: the kubelet's disk order.
    let mut pods = Vec::new();
    for (i, mib) in [8usize, 6, 4, 2].iter().enumerate() {
        let p = rt.block_on(env.run_pod(
            &PodSpec::new(&format!("w{i}")).container(ContainerSpec::memhog("app", &["2"])),
        ));
        fill_writable_layer(&rt, &env, &p, "fill", *mib);
        pods.push(p);
    }
    // A threshold at the filesystem's size: met whatever is freed.
    let (_, cap) = qosd_node::sys::signals::fs_bytes(&fs.path).unwrap();
    let threshold = cap / MI;
    let d = Daemon::start(
        &env,
        &root_dir,
        "imageMinimumGCAge: 10m\n",
        &[
            "--eviction-hard",
            &format!("nodefs.available<{threshold}Mi"),
            "--eviction-backend",
            "kill",
        ],
    );
    let t = Instant::now();
    wait_for("all four evicted", 60, || {
        pods.iter().all(|p| !sandbox_exists(&rt, &env, p))
    });
    // Hold the threshold met for 10 s more: nothing is evicted twice.
    std::thread::sleep(
        Duration::from_secs(10)
            .saturating_sub(t.elapsed())
            .max(Duration::from_secs(5)),
    );
    for p in &pods {
        assert_eq!(
            stop_calls(&env, p),
            1,
            "StopPodSandbox calls for {}",
            p.spec.name
        );
    }
    assert_eq!(d.metric("qosd_evictions_total"), 4.0);
    let lines = d.lines();
    let order: Vec<String> = lines
        .iter()
        .filter(|l| l.contains("evicting pod"))
        .filter_map(|l| {
            pods.iter()
                .find(|p| l.contains(&p.spec.name))
                .map(|p| p.spec.name.clone())
        })
        .collect();
    assert_eq!(order, ["w0", "w1", "w2", "w3"], "eviction order");
    let blocked = lines.iter().filter(|l| l.contains("blocked")).count();
    assert!(
        blocked <= 3,
        "blocked logged {blocked} times:\n{}",
        lines.join("\n")
    );
    assert!(lines.len() < 80, "{} log lines", lines.len());
}

#[test]
#[ignore = "needs root: runs a private containerd and qosd run"]
fn soft_eviction_escalates_to_hard_on_the_next_pass() {
    support::require_containerd();
    let fs = tmpfs("200m", 200_000);
    let root_dir = fs.path.join("kubelet");
    std::fs::create_dir_all(&root_dir).unwrap();
    let env = Containerd::start_with_root(Some(&fs.path.join("containerd")));
    let rt = rt();
    // The soft victim ignores SIGTERM: it uses its whole grace period.
    let stubborn = rt.block_on(env.run_pod(
        &PodSpec::new("stubborn").container(ContainerSpec::memhog("app", &["--ignore-term", "2"])),
    ));
    let other = rt.block_on(
        env.run_pod(
            &PodSpec::new("other")
                .container(ContainerSpec::memhog("app", &["2"]).memory(Some(16 * MI), None)),
        ),
    );
    fill_writable_layer(&rt, &env, &stubborn, "fill", 12);
    fill_writable_layer(&rt, &env, &other, "fill", 4);
    let (avail, _) = qosd_node::sys::signals::fs_bytes(&fs.path).unwrap();
    let soft = (avail + 8 * MI) / MI;
    let hard = (avail - 16 * MI) / MI;
    let d = Daemon::start(
        &env,
        &root_dir,
        "imageMinimumGCAge: 10m\nevictionMaxPodGracePeriod: 20\n",
        &[
            "--eviction-soft",
            &format!("nodefs.available<{soft}Mi"),
            "--eviction-soft-grace-period",
            "nodefs.available=1s",
            "--eviction-hard",
            &format!("nodefs.available<{hard}Mi"),
            "--eviction-backend",
            "kill",
        ],
    );
    // Soft: the stubborn pod is chosen and given 20 s.
    wait_for("the soft eviction", 30, || {
        d.lines()
            .iter()
            .any(|l| l.contains("evicting pod") && l.contains("stubborn"))
    });
    let soft_line = d
        .lines()
        .into_iter()
        .find(|l| l.contains("evicting pod"))
        .unwrap();
    assert!(
        soft_line.contains("soft") && soft_line.contains("grace_s=20"),
        "{soft_line}"
    );
    // Cross the hard threshold while it is still terminating: every pod is
    // ranked again, the terminating one included (the kubelet's
    // behaviour); still first, it is evicted again with the hard grace and
    // is gone long before its 20 s.
    std::fs::write(root_dir.join("ballast"), vec![1u8; 24 << 20]).unwrap();
    let t = Instant::now();
    wait_for(
        "the soft victim evicted again for the hard threshold",
        15,
        || !sandbox_exists(&rt, &env, &stubborn),
    );
    assert!(t.elapsed() < Duration::from_secs(15));
    assert!(
        d.lines().iter().any(|l| l.contains("still terminating")),
        "escalation logged"
    );
    let evicting = |pod: &str| -> Vec<String> {
        d.lines()
            .into_iter()
            .filter(|l| l.contains(&format!("evicting pod qosd-test/{pod}:")))
            .collect()
    };
    let stubborn_lines = evicting("stubborn");
    assert_eq!(stubborn_lines.len(), 2, "{stubborn_lines:?}");
    assert!(
        stubborn_lines[1].contains(": hard") && stubborn_lines[1].contains("grace_s=1"),
        "{stubborn_lines:?}"
    );
    assert!(
        !evicting("other").iter().any(|l| l.contains(": hard")),
        "the other pod is not the hard victim"
    );
    // Still under the soft threshold: the other pod is the next soft
    // victim (it ends on SIGTERM), each sandbox stopped once per eviction.
    wait_for("the other pod evicted for the soft threshold", 40, || {
        !sandbox_exists(&rt, &env, &other)
    });
    assert!(
        evicting("other")[0].contains(": soft"),
        "{:?}",
        evicting("other")
    );
    assert_eq!(stop_calls(&env, &stubborn), 2, "soft, then hard");
    assert_eq!(stop_calls(&env, &other), 1);
    assert_eq!(d.metric("qosd_evictions_total"), 3.0);
}

#[test]
#[ignore = "needs root: runs a private containerd, pod cgroups and qosd run"]
fn memory_ranking_uses_the_top_of_the_oom_score_adj_band() {
    support::require_containerd();
    // A Burstable container with request 16Mi and limit 400Mi gets
    // oom_score_adj 999 (its request is under 0.2 % of the node): qosd takes
    // its request as the top of that band, never the limit, so using more
    // it ranks as exceeding its request — before the Guaranteed pod.
    let tmp = tempfile::tempdir().unwrap();
    let root_dir = tmp.path().join("kubelet");
    std::fs::create_dir_all(&root_dir).unwrap();
    let env = Containerd::start();
    let rt = rt();
    let g = rt.block_on(
        env.run_pod(
            &PodSpec::new("guaranteed").container(
                ContainerSpec::memhog("hog", &["60"])
                    .cpu(Some(100), Some(100))
                    .memory(Some(128 * MI), Some(128 * MI)),
            ),
        ),
    );
    let b = rt.block_on(
        env.run_pod(
            &PodSpec::new("burstable").container(
                ContainerSpec::memhog("hog", &["60", "16", "3600000", "380"])
                    .memory(Some(16 * MI), Some(400 * MI)),
            ),
        ),
    );
    let d = Daemon::start(
        &env,
        &root_dir,
        "nodeMemory: 512Mi\n",
        &[
            "--eviction-hard",
            "allocatableMemory.available<200Mi",
            "--eviction-backend",
            "kill",
        ],
    );
    let b_pid = rt.block_on(env.container_pid(&b.containers[0].1));
    let g_pid = rt.block_on(env.container_pid(&g.containers[0].1));
    let alive = |pid: i32| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    let t = Instant::now();
    while alive(b_pid) && t.elapsed() < Duration::from_secs(30) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(b_pid),
            nix::sys::signal::Signal::SIGUSR1,
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        !alive(b_pid),
        "the Burstable pod over its request was not evicted"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        alive(g_pid),
        "the Guaranteed pod under its limit must survive"
    );
    let line = d
        .lines()
        .into_iter()
        .find(|l| l.contains("evicting pod"))
        .unwrap();
    assert!(
        line.contains("burstable") && line.contains("exceeds request"),
        "{line}"
    );
    assert_eq!(d.metric("qosd_evictions_total"), 1.0);
}

/// The pod of a manifest with one container `app` limited to `limit` of
/// ephemeral storage, and `volumes` (YAML under `spec`).
fn limited_pod(p: &RunningPod, limit: &str, volumes: &str) -> Vec<qosd_model::core::model::Pod> {
    let text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {}, namespace: {}, uid: {}}}\nspec:\n  containers:\n  - name: app\n    resources: {{limits: {{ephemeral-storage: {limit}}}}}\n{volumes}",
        p.spec.name, p.spec.namespace, p.spec.uid
    );
    qosd_node::manifest::parse_str(&text, &format!("{}.yaml", p.spec.name)).unwrap()
}

/// The production eviction pass with a hard nodefs threshold no test
/// reaches, the CRI backend and the runtime for writable layers.
fn storage_engine(
    env: &Containerd,
    root_dir: &Path,
    logs_dir: &Path,
) -> crate::runtime::eviction::Engine {
    use crate::runtime::eviction::{Engine, NodeRuntime};
    use qosd_model::policy::evict::manager::ManagerOptions;
    use qosd_model::policy::evict::threshold::{
        parse_threshold_flag, EvictionConfig, RawEvictionConfig,
    };
    use qosd_model::policy::evict::Backend;
    use qosd_node::evict::{Evictor, PodStopper};
    let mut sources =
        qosd_node::sys::signals::SignalSources::host(qosd_model::core::model::CgroupVersion::V1);
    sources.nodefs = Some(root_dir.to_path_buf());
    sources.pod_root_dir = Some(root_dir.to_path_buf());
    sources.pod_logs_dir = logs_dir.to_path_buf();
    let cfg = EvictionConfig::from_raw(&RawEvictionConfig {
        eviction_hard: Some(parse_threshold_flag("h", "nodefs.available<1Ki").unwrap()),
        ..Default::default()
    })
    .unwrap();
    let cri = Arc::new(qosd_node::evict::stopper::CriStopper::new(
        env.endpoint.clone(),
        qosd_node::evict::runtime::EvictRuntime::new().unwrap(),
    ));
    let stopper: Arc<dyn PodStopper> = cri.clone();
    let mut engine = Engine::new(
        cfg,
        ManagerOptions::default(),
        sources,
        Evictor::new(Backend::Cri, Some(stopper), Duration::from_secs(30)),
    );
    engine.runtime = Some(cri as Arc<dyn NodeRuntime>);
    engine
}

/// The writable layer the runtime reports for the pod's first container.
fn writable_layer(rt: &tokio::runtime::Runtime, env: &Containerd, p: &RunningPod) -> u64 {
    rt.block_on(async {
        env.client()
            .await
            .list_container_stats()
            .await
            .unwrap()
            .iter()
            .find(|s| {
                s.attributes
                    .as_ref()
                    .is_some_and(|a| a.id == p.containers[0].1)
            })
            .and_then(|s| s.writable_layer.as_ref())
            .and_then(|w| w.used_bytes.as_ref())
            .map_or(0, |u| u.value)
    })
}

/// Write `mib` MiB into the pod's emptyDir `name` where the kubelet keeps
/// it (`<rootDir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`).
fn fill_empty_dir(root_dir: &Path, p: &RunningPod, name: &str, mib: usize) {
    let dir = root_dir.join(format!(
        "pods/{}/volumes/kubernetes.io~empty-dir/{name}",
        p.spec.uid
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("data"), vec![0x5au8; mib * MI as usize]).unwrap();
}

/// (pod, metric label, message, grace) of one eviction.
type Evicted = (String, &'static str, String, Duration);

/// Eviction passes every 500 ms while `any_left` (20 s at most): the
/// evictions of every pass that had some, each asserted successful, with
/// no node pressure.
fn passes_until_gone(
    engine: &mut crate::runtime::eviction::Engine,
    candidates: &[qosd_model::policy::evict::rank::Candidate],
    mut any_left: impl FnMut() -> bool,
) -> Vec<Vec<Evicted>> {
    let mut passes = Vec::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(20) && any_left() {
        let r = engine.pass(Ok(candidates.to_vec()));
        assert!(r.decision.conditions.is_empty(), "no node pressure");
        let victims = r.decision.victims();
        if !victims.is_empty() {
            assert_eq!(r.outcomes.len(), victims.len());
            assert!(r.outcomes.iter().all(|o| o.is_ok()), "{:?}", r.outcomes);
            passes.push(
                victims
                    .iter()
                    .map(|v| {
                        (
                            v.candidate.name.clone(),
                            v.metric_label(),
                            v.message.clone(),
                            v.grace,
                        )
                    })
                    .collect(),
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    passes
}

#[test]
#[ignore = "needs root: mounts a tmpfs, runs a private containerd"]
fn local_storage_limit_evicts_without_node_pressure() {
    support::require_containerd();
    // The production eviction pass (Engine) with a real containerd for the
    // writable layers and the clean-up, the pod specs from manifests (the
    // CRI does not carry ephemeral-storage limits), no node pressure. Two
    // pods over their limits (a writable layer, an emptyDir) are both
    // evicted in the same pass, as the kubelet's localStorageEviction does.
    let fs = tmpfs("200m", 200_000);
    let root_dir = fs.path.join("kubelet");
    std::fs::create_dir_all(&root_dir).unwrap();
    let env = Containerd::start_with_root(Some(&fs.path.join("containerd")));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let over = rt.block_on(
        env.run_pod(&PodSpec::new("over").container(ContainerSpec::memhog("app", &["2"]))),
    );
    let under = rt.block_on(
        env.run_pod(&PodSpec::new("under").container(ContainerSpec::memhog("app", &["2"]))),
    );
    let dir = rt.block_on(
        env.run_pod(&PodSpec::new("dir").container(ContainerSpec::memhog("app", &["2"]))),
    );
    fill_writable_layer(&rt, &env, &over, "fill", 12);
    fill_writable_layer(&rt, &env, &under, "fill", 2);
    // The kubelet's emptyDir directory of "dir", 3 MiB in a 1Mi sizeLimit.
    fill_empty_dir(&root_dir, &dir, "scratch", 3);
    let scratch_volume = "  volumes:\n  - name: scratch\n    emptyDir: {sizeLimit: 1Mi}\n";
    let pods: Vec<_> = [
        (&over, "8Mi", ""),
        (&under, "8Mi", ""),
        (&dir, "64Mi", scratch_volume),
    ]
    .iter()
    .flat_map(|(p, limit, volumes)| limited_pod(p, limit, volumes))
    .collect();
    let sandboxes = [&over, &under, &dir]
        .iter()
        .map(|p| (p.spec.uid.clone(), p.sandbox_id.clone()))
        .collect();
    let layout = qosd_model::policy::enforce::naming::CgroupLayout::new(
        qosd_model::core::model::CgroupVersion::V1,
        qosd_model::core::model::CgroupDriver::Cgroupfs,
    )
    .with_cgroup_root(env.cgroup_root.clone());
    let candidates = crate::runtime::eviction_service::candidates(&pods, &sandboxes, &layout);

    let mut engine = storage_engine(&env, &root_dir, &fs.path.join("logs"));
    // containerd refreshes writable-layer usage every few seconds: start
    // once it reports the filled layer, so one pass sees both pods over.
    wait_for(
        "the runtime reporting the filled writable layer",
        30,
        || writable_layer(&rt, &env, &over) >= 12 * MI as u64,
    );
    let mut passes = passes_until_gone(&mut engine, &candidates, || {
        sandbox_exists(&rt, &env, &over) || sandbox_exists(&rt, &env, &dir)
    });
    assert!(
        !sandbox_exists(&rt, &env, &over) && !sandbox_exists(&rt, &env, &dir),
        "a pod over its limit was not evicted"
    );
    assert!(
        sandbox_exists(&rt, &env, &under),
        "the pod under its limit must stay"
    );
    assert_eq!(passes.len(), 1, "both in one pass: {passes:?}");
    let mut evicted = passes.remove(0);
    evicted.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(evicted.len(), 2, "{evicted:?}");
    let (name, label, message, grace) = &evicted[0];
    assert_eq!(name, "dir");
    assert_eq!(*label, "emptydirfs.limit");
    assert_eq!(
        message,
        "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "
    );
    assert_eq!(*grace, Duration::from_secs(1));
    let (name, label, message, grace) = &evicted[1];
    assert_eq!(name, "over");
    // one container: the pod total (layer) is checked before the container
    assert_eq!(*label, "ephemeralpodfs.limit");
    assert_eq!(
        message,
        "Pod ephemeral local storage usage exceeds the total limit of containers 8Mi. "
    );
    assert_eq!(*grace, Duration::from_secs(1));
    // more passes: the pod under its limit is never chosen
    for _ in 0..3 {
        let r = engine.pass(Ok(candidates.clone()));
        assert!(r.decision.victim().is_none());
    }
    assert_eq!(stop_calls(&env, &over), 1);
    assert_eq!(stop_calls(&env, &dir), 1);
}
