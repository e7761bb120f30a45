//! A real, private containerd for integration tests (reusable by every
//! test binary: its root file, tests/<group>.rs, has `mod support;`, and
//! the modules of tests/<group>/ use `crate::support`).
//!
//! # API
//! * The one skip mechanism ([`require`]): a test needing root or a kernel
//!   feature is `#[ignore = "needs root: <why>"]` and starts with
//!   [`require_containerd`]`()` (root + containerd, ctr, runc, gcc, python3),
//!   [`require_root`]`(why)` or [`require_tools`]`(tools, apt)`: a missing
//!   precondition panics with the reason, never returns early as a pass.
//! * [`images`]`()`: builds (once per test binary, cached by source hash in
//!   `$CARGO_TARGET_TMPDIR/qosd-images/`) static `pause` and `memhog` from
//!   tests/images/*.c and packs OCI image tarballs with tests/images/mkimage.py.
//!   Image names: [`PAUSE_IMAGE`], [`MEMHOG_IMAGE`]. [`static_binary`]`(name)`:
//!   the static binary alone; [`Memhog`]: memhog as a host process in a cgroup.
//! * [`Daemon`] (`qosd run` as a child: start, wait, scrape), [`wait_until`],
//!   [`free_port`], [`status_json`]: tests/support/daemon.rs.
//! * Cleanup guards [`Cgroups`], [`KillOnDrop`], [`Tmpfs`]: tests/support/guards.rs.
//! * One-shot runs of the binary with a hang guard ([`qosd_bounded`],
//!   [`output_within`], [`qosd_cmd`]), file reads, `/proc` of a pid
//!   ([`alive`], [`fd_count`], [`rss_kib`]), [`sum_samples`]: tests/support/process.rs.
//! * [`Containerd::start`]`()`: containerd with its own config, root, state,
//!   socket under a temp dir (config per docs/test-environments: CRI plugin,
//!   cgroupfs driver, `restrict_oom_score_adj = true`, overlayfs, no AppArmor,
//!   private CNI dirs), images imported with `ctr -n k8s.io images import`,
//!   and a test-unique cgroup root `/qosd-test-<pid>-<n>` for its pods.
//!   * `.endpoint` (`unix:///…/containerd.sock`), `.socket`, `.cgroup_root`, `.pid()`
//!   * `.client().await -> CriClient`
//!   * `.run_pod(&PodSpec).await -> RunningPod`: RunPodSandbox + CreateContainer +
//!     StartContainer the way the kubelet does for the pod's QoS class
//!     (cgroup parent `<cgroup_root>/kubepods[/burstable|/besteffort]/pod<uid>`,
//!     network NODE, empty hostname, `io.kubernetes.*` labels, linux resources
//!     cpu_shares / cpu_quota / cpu_period / memory_limit_in_bytes / oom_score_adj
//!     from the requests/limits with the kubelet's formulas).
//!   * `.remove_pod(&RunningPod).await`: StopPodSandbox + RemovePodSandbox.
//!   * `.stop()` (SIGTERM by PID, then SIGKILL after 10 s) / `.start_again()`:
//!     simulate a runtime restart (pods survive it).
//!   * `.cgroup_dir(controller, &RunningPod) -> PathBuf`: the pod's cgroup in
//!     a v1 hierarchy (or the v2 tree when `controller` is ""), and
//!     `.container_cgroup_dir(controller, &pod, id)`,
//!     `.container_memory_usage(&pod, id)` (v1 or v2).
//!   * `.container_pid(id)`, `.signal_container(id, Signal::SIGUSR1)`,
//!     `.container_status(id)`, `.wait_exited(id, timeout)`.
//!   * `.log() -> String`: containerd's log.
//!   * Drop: removes every sandbox it created (restarting containerd if it is
//!     down), stops containerd by PID, kills leftover processes in its own
//!     cgroups, removes every cgroup under its prefix leaf-first in all
//!     hierarchies, unmounts leftovers under its temp dir, removes the dir.
//! * [`PodSpec`] / [`ContainerSpec`]: builders (`PodSpec::new("web")
//!   .container(ContainerSpec::pause("app").cpu(100, Some(500)).memory(Some(32 * MI), Some(128 * MI)))`),
//!   [`ContainerSpec::memhog`] for a container that allocates memory
//!   (`memhog <initial MiB> [<step MiB> <interval ms> <max MiB>]`, SIGUSR1 grows
//!   one step, SIGUSR2 shrinks back and stops growing).
//! * [`kubelet`]: the kubelet's formulas used (shares, quota, oom_score_adj, class).
//!
//! * [`serial`]`()`: a guard that keeps the tests holding it from running at
//!   once (tests that put the host under memory pressure).
//!
//! Many Containerd instances may run at once (own dirs, sockets, cgroup roots).
#![allow(dead_code)]

pub mod kubeapi;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use qosd_model::core::model::QosClass;
use qosd_node::cri::proto;
use qosd_node::cri::{ConnectOptions, CriClient};

pub mod daemon;
pub mod guards;
pub mod hog;
pub mod http;
pub mod process;
pub mod require;
#[allow(unused_imports)]
pub use daemon::*;
#[allow(unused_imports)]
pub use guards::*;
#[allow(unused_imports)]
pub use hog::*;
#[allow(unused_imports)]
pub use process::*;
#[allow(unused_imports)]
pub use require::*;

pub const PAUSE_IMAGE: &str = "qosd.test/pause:1";
pub const MEMHOG_IMAGE: &str = "qosd.test/memhog:1";
pub const MI: i64 = 1 << 20;
pub const GI: i64 = 1 << 30;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn unique() -> usize {
    COUNTER.fetch_add(1, Ordering::SeqCst)
}

/// Held for its whole run by each test that must not run beside another
/// test of the same binary that holds it too: the tests that create memory
/// pressure or a memory stall on this host (two at once would change what
/// each of them measures). A test that panics while holding it leaves it
/// usable by the others.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------------------ images

/// Paths of the built image tarballs.
#[derive(Debug, Clone)]
pub struct Images {
    pub pause_tar: PathBuf,
    pub memhog_tar: PathBuf,
}

fn repo_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run_ok(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The cache dir of the built test binaries and images (by source hash).
fn images_dir() -> PathBuf {
    use std::hash::{Hash, Hasher};
    let src = repo_dir().join("tests/images");
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in ["pause.c", "memhog.c", "thrash.c", "mkimage.py"] {
        std::fs::read(src.join(f)).unwrap().hash(&mut h);
    }
    let dir = target_tmpdir()
        .join("qosd-images")
        .join(format!("{:016x}", h.finish()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// tests/images/`name`.c built with `gcc -static` (once; cached on disk):
/// "pause", "memhog" (see [`Memhog`] for memhog on the host) or "thrash"
/// (a working set larger than its memory: a steady memory stall).
pub fn static_binary(name: &str) -> PathBuf {
    let dir = images_dir();
    let bin = dir.join(name);
    if !bin.is_file() {
        // Build in a private dir, then rename: parallel test binaries race safely.
        let work = tempfile::Builder::new()
            .prefix(&format!("build-{name}-"))
            .tempdir_in(&dir)
            .unwrap();
        let built = work.path().join(name);
        run_ok(
            Command::new("gcc")
                .args(["-static", "-O2", "-Wall", "-o"])
                .arg(&built)
                .arg(repo_dir().join(format!("tests/images/{name}.c"))),
        );
        std::fs::rename(&built, &bin).unwrap();
    }
    bin
}

/// Build an image of `bytes` random bytes named `name` (never run: it only
/// takes space), cached like the others.
pub fn filler_image(name: &str, bytes: usize) -> PathBuf {
    let dir = target_tmpdir().join("qosd-images");
    std::fs::create_dir_all(&dir).unwrap();
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let tar = dir.join(format!("filler-{safe}-{bytes}.tar"));
    if tar.is_file() {
        return tar;
    }
    let work = tempfile::Builder::new()
        .prefix("build-filler-")
        .tempdir_in(&dir)
        .unwrap();
    let blob = work.path().join("filler");
    let mut data = vec![0u8; bytes];
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for b in data.iter_mut() {
        // xorshift: incompressible, so the layer takes its size on disk
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(&blob, data).unwrap();
    let out = work.path().join("filler.tar");
    run_ok(
        Command::new("python3")
            .arg(repo_dir().join("tests/images/mkimage.py"))
            .arg(&blob)
            .arg(name)
            .arg(&out),
    );
    std::fs::rename(&out, &tar).unwrap();
    tar
}

/// Build the pause and memhog images (once per process; cached on disk).
pub fn images() -> &'static Images {
    static IMAGES: OnceLock<Images> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let dir = images_dir();
        let images = Images {
            pause_tar: dir.join("pause.tar"),
            memhog_tar: dir.join("memhog.tar"),
        };
        for (name, image, tar) in [
            ("pause", PAUSE_IMAGE, &images.pause_tar),
            ("memhog", MEMHOG_IMAGE, &images.memhog_tar),
        ] {
            if tar.is_file() {
                continue;
            }
            let bin = static_binary(name);
            // Pack in a private dir, then rename: parallel test binaries race safely.
            let work = tempfile::Builder::new()
                .prefix(&format!("build-{name}-"))
                .tempdir_in(&dir)
                .unwrap();
            let out = work.path().join(format!("{name}.tar"));
            run_ok(
                Command::new("python3")
                    .arg(repo_dir().join("tests/images/mkimage.py"))
                    .arg(&bin)
                    .arg(image)
                    .arg(&out),
            );
            std::fs::rename(&out, tar).unwrap();
        }
        images
    })
}

// ---------------------------------------------------------------- kubelet

/// The kubelet's formulas (pkg/kubelet/cm/helpers_linux.go, pkg/kubelet/qos).
pub mod kubelet {
    use super::*;

    pub const PERIOD: i64 = 100_000;

    pub fn shares(milli: i64) -> i64 {
        if milli == 0 {
            return 2;
        }
        (milli * 1024 / 1000).clamp(2, 262_144)
    }

    pub fn quota(milli: i64) -> i64 {
        (milli * PERIOD / 1000).max(1000)
    }

    /// GetPodQOS on the test spec.
    pub fn class(pod: &PodSpec) -> QosClass {
        let mut guaranteed = !pod.containers.is_empty();
        let mut any = false;
        for c in &pod.containers {
            let (cr, cl) = c.cpu_effective();
            let (mr, ml) = c.memory_effective();
            any |= cr.is_some() || cl.is_some() || mr.is_some() || ml.is_some();
            if !(cl.is_some() && ml.is_some() && cr == cl && mr == ml) {
                guaranteed = false;
            }
        }
        if guaranteed {
            QosClass::Guaranteed
        } else if any {
            QosClass::Burstable
        } else {
            QosClass::BestEffort
        }
    }

    /// GetContainerOOMScoreAdjust.
    pub fn oom_score_adj(class: QosClass, memory_request: Option<i64>, capacity: i64) -> i64 {
        match class {
            QosClass::Guaranteed => -997,
            QosClass::BestEffort => 1000,
            QosClass::Burstable => {
                let req = memory_request.unwrap_or(0) as i128;
                let a = 1000 - (1000 * req / capacity as i128) as i64;
                if a < 3 {
                    3
                } else if a == 1000 {
                    999
                } else {
                    a
                }
            }
        }
    }

    /// Node MemTotal in bytes.
    pub fn memory_capacity() -> i64 {
        qosd_node::sys::procfs::detect_memory_bytes(Path::new("/proc")).unwrap()
    }
}

// ------------------------------------------------------------------- specs

#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub args: Vec<String>,
    pub cpu_request_milli: Option<i64>,
    pub cpu_limit_milli: Option<i64>,
    pub memory_request: Option<i64>,
    pub memory_limit: Option<i64>,
}

impl ContainerSpec {
    /// A container running the pause binary (no resources yet).
    pub fn pause(name: &str) -> ContainerSpec {
        ContainerSpec {
            name: name.to_string(),
            image: PAUSE_IMAGE.to_string(),
            args: Vec::new(),
            cpu_request_milli: None,
            cpu_limit_milli: None,
            memory_request: None,
            memory_limit: None,
        }
    }

    /// A memhog container: `args` as for memhog (`["64"]`, or
    /// `["16", "8", "100", "256"]` to grow 8 MiB every 100 ms up to 256 MiB).
    pub fn memhog(name: &str, args: &[&str]) -> ContainerSpec {
        ContainerSpec {
            image: MEMHOG_IMAGE.to_string(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..ContainerSpec::pause(name)
        }
    }

    pub fn cpu(mut self, request_milli: Option<i64>, limit_milli: Option<i64>) -> Self {
        self.cpu_request_milli = request_milli;
        self.cpu_limit_milli = limit_milli;
        self
    }

    pub fn memory(mut self, request: Option<i64>, limit: Option<i64>) -> Self {
        self.memory_request = request;
        self.memory_limit = limit;
        self
    }

    /// Request and limit after the API server's defaulting (request = limit
    /// when only a limit is given).
    pub fn cpu_effective(&self) -> (Option<i64>, Option<i64>) {
        let l = self.cpu_limit_milli.filter(|v| *v > 0);
        (self.cpu_request_milli.filter(|v| *v > 0).or(l), l)
    }

    pub fn memory_effective(&self) -> (Option<i64>, Option<i64>) {
        let l = self.memory_limit.filter(|v| *v > 0);
        (self.memory_request.filter(|v| *v > 0).or(l), l)
    }

    /// The CRI resources the kubelet sets for this container.
    pub fn linux_resources(
        &self,
        class: QosClass,
        capacity: i64,
    ) -> proto::LinuxContainerResources {
        let (cr, cl) = self.cpu_effective();
        let (mr, ml) = self.memory_effective();
        proto::LinuxContainerResources {
            cpu_shares: kubelet::shares(cr.unwrap_or(0)),
            cpu_quota: cl.map(kubelet::quota).unwrap_or(0),
            cpu_period: if cl.is_some() { kubelet::PERIOD } else { 0 },
            memory_limit_in_bytes: ml.unwrap_or(0),
            oom_score_adj: kubelet::oom_score_adj(class, mr, capacity),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    /// Unique per test process and pod.
    pub uid: String,
    pub containers: Vec<ContainerSpec>,
    /// Overrides the kubelet-style cgroup parent (relative to the env's
    /// cgroup root), e.g. "custom/pod<uid>" for a parent without QoS segment.
    pub cgroup_parent_override: Option<String>,
    /// Overrides the `io.kubernetes.pod.uid` label (bad-label tests).
    pub uid_label_override: Option<String>,
    pub labels: HashMap<String, String>,
    pub annotations: HashMap<String, String>,
}

impl PodSpec {
    pub fn new(name: &str) -> PodSpec {
        let n = unique();
        let pid = std::process::id();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        PodSpec {
            name: name.to_string(),
            namespace: "qosd-test".to_string(),
            uid: format!(
                "{pid:08x}-{:04x}-4{:03x}-8000-{nanos:012x}",
                n & 0xffff,
                n & 0xfff
            ),
            containers: Vec::new(),
            cgroup_parent_override: None,
            uid_label_override: None,
            labels: HashMap::new(),
            annotations: HashMap::new(),
        }
    }

    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = ns.to_string();
        self
    }

    pub fn container(mut self, c: ContainerSpec) -> Self {
        self.containers.push(c);
        self
    }

    pub fn class(&self) -> QosClass {
        kubelet::class(self)
    }

    /// The kubelet's cgroup parent under `root`.
    pub fn cgroup_parent(&self, root: &str) -> String {
        if let Some(p) = &self.cgroup_parent_override {
            return format!("{root}/{p}");
        }
        match self.class().cgroup_segment() {
            Some(seg) => format!("{root}/kubepods/{seg}/pod{}", self.uid),
            None => format!("{root}/kubepods/pod{}", self.uid),
        }
    }
}

/// A pod started by [`Containerd::run_pod`].
#[derive(Debug, Clone)]
pub struct RunningPod {
    pub spec: PodSpec,
    pub sandbox_id: String,
    pub cgroup_parent: String,
    pub class: QosClass,
    /// (name, container id, resources set)
    pub containers: Vec<(String, String, proto::LinuxContainerResources)>,
}

// -------------------------------------------------------------- containerd

pub struct Containerd {
    dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub endpoint: String,
    /// Test-unique cgroup root, e.g. `/qosd-test-1234-0`.
    pub cgroup_root: String,
    child: Option<Child>,
    sandboxes: Mutex<Vec<String>>,
}

fn config_toml(d: &Path, root: &Path) -> String {
    let root = root.display();
    let d = d.display();
    format!(
        r#"version = 2
root = "{root}"
state = "{d}/state"
temp = "{d}/tmp"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  address = "{d}/debug.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  systemd_cgroup = false
  disable_apparmor = true
  disable_hugetlb_controller = true
  tolerate_missing_hugetlb_controller = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  stats_collect_period = 1
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/runc"
"#
    )
}

fn block_on<F: std::future::Future + Send>(f: F) -> F::Output
where
    F::Output: Send,
{
    // Works inside or outside a tokio runtime (Drop may run in either).
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(f)
        })
        .join()
        .unwrap()
    })
}

impl Containerd {
    /// Start a private containerd and import the test images. Panics (with
    /// the log) if it does not come up.
    pub fn start() -> Containerd {
        Containerd::start_with_root(None)
    }

    /// Like [`Containerd::start`], with containerd's root (images, snapshots:
    /// the writable layers) at `root` — e.g. on a small filesystem the test
    /// made.
    pub fn start_with_root(root: Option<&Path>) -> Containerd {
        let images = images().clone();
        let dir = tempfile::Builder::new()
            .prefix("qosd-ctrd-")
            .tempdir_in("/tmp")
            .unwrap();
        // The env's own filesystem: containerd's state (and root, unless
        // given) and the kubelet-style root dir the tests pass as
        // `--root-dir` live on a private tmpfs, so the disk signals qosd
        // measures there are this test's, never the host disk's fill level
        // (a CI disk at 96 % would otherwise be real DiskPressure).
        // Unmounted by `unmount_leftovers` on drop.
        nix::mount::mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NODEV,
            Some("size=4g,mode=0755"),
        )
        .unwrap_or_else(|e| {
            panic!(
                "needs root: mount the env's tmpfs on {}: {e}",
                dir.path().display()
            )
        });
        for sub in ["cni/bin", "cni/conf", "opt"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let root = root
            .map(Path::to_path_buf)
            .unwrap_or_else(|| dir.path().join("root"));
        std::fs::write(
            dir.path().join("config.toml"),
            config_toml(dir.path(), &root),
        )
        .unwrap();
        let socket = dir.path().join("containerd.sock");
        let mut env = Containerd {
            endpoint: format!("unix://{}", socket.display()),
            socket,
            cgroup_root: format!("/qosd-test-{}-{}", std::process::id(), unique()),
            dir,
            child: None,
            sandboxes: Mutex::new(Vec::new()),
        };
        env.start_again();
        let t = Instant::now();
        for tar in [&images.pause_tar, &images.memhog_tar] {
            run_ok(
                Command::new("ctr")
                    .arg("--address")
                    .arg(&env.socket)
                    .args(["-n", "k8s.io", "images", "import"])
                    .arg(tar),
            );
        }
        eprintln!(
            "support: containerd pid {} at {} (images imported in {:?})",
            env.pid().unwrap(),
            env.endpoint,
            t.elapsed()
        );
        env
    }

    /// (Re)start the containerd process on the same dirs; waits for the socket.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "containerd already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("containerd.log"))
            .unwrap();
        let child = Command::new(which("containerd").expect("containerd"))
            .arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn containerd");
        self.child = Some(child);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!("containerd exited ({st}):\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("containerd socket did not appear in 20 s:\n{}", self.log());
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stop containerd (SIGTERM by PID, SIGKILL after 10 s). Pods keep
    /// running (their shims survive), as in a real runtime restart.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let t = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if t.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Import an image tarball (`ctr images import`).
    pub fn import(&self, tar: &Path) {
        run_ok(
            Command::new("ctr")
                .arg("--address")
                .arg(&self.socket)
                .args(["-n", "k8s.io", "images", "import"])
                .arg(tar),
        );
    }

    /// Image names (repo tags) the runtime lists.
    pub async fn image_tags(&self) -> Vec<String> {
        self.client()
            .await
            .list_images()
            .await
            .unwrap()
            .into_iter()
            .flat_map(|i| i.repo_tags)
            .collect()
    }

    /// A client with short retries (tests fail fast).
    pub async fn client(&self) -> CriClient {
        CriClient::connect(&self.endpoint, ConnectOptions::default())
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.endpoint))
    }

    /// Start a pod the way the kubelet does for its QoS class.
    pub async fn run_pod(&self, spec: &PodSpec) -> RunningPod {
        let client = self.client().await;
        let mut rs = client.runtime_service();
        let class = spec.class();
        let capacity = kubelet::memory_capacity();
        let cgroup_parent = spec.cgroup_parent(&self.cgroup_root);
        let mut labels = spec.labels.clone();
        labels.insert("io.kubernetes.pod.name".into(), spec.name.clone());
        labels.insert("io.kubernetes.pod.namespace".into(), spec.namespace.clone());
        labels.insert(
            "io.kubernetes.pod.uid".into(),
            spec.uid_label_override.clone().unwrap_or(spec.uid.clone()),
        );
        let mut annotations = spec.annotations.clone();
        annotations
            .entry("kubernetes.io/config.source".into())
            .or_insert("api".into());
        let ns = proto::NamespaceOption {
            network: proto::NamespaceMode::Node as i32,
            pid: proto::NamespaceMode::Container as i32,
            ipc: proto::NamespaceMode::Pod as i32,
            ..Default::default()
        };
        let config = proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: spec.name.clone(),
                uid: spec.uid.clone(),
                namespace: spec.namespace.clone(),
                attempt: 0,
            }),
            hostname: String::new(),
            labels: labels.clone(),
            annotations,
            linux: Some(proto::LinuxPodSandboxConfig {
                cgroup_parent: cgroup_parent.clone(),
                security_context: Some(proto::LinuxSandboxSecurityContext {
                    namespace_options: Some(ns.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let sandbox_id = rs
            .run_pod_sandbox(proto::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("RunPodSandbox {}: {e}\n{}", spec.name, self.log_tail()))
            .into_inner()
            .pod_sandbox_id;
        self.sandboxes.lock().unwrap().push(sandbox_id.clone());
        let mut containers = Vec::new();
        for c in &spec.containers {
            let res = c.linux_resources(class, capacity);
            let mut clabels = labels.clone();
            clabels.insert("io.kubernetes.container.name".into(), c.name.clone());
            let cfg = proto::ContainerConfig {
                metadata: Some(proto::ContainerMetadata {
                    name: c.name.clone(),
                    attempt: 0,
                }),
                image: Some(proto::ImageSpec {
                    image: c.image.clone(),
                    ..Default::default()
                }),
                args: c.args.clone(),
                labels: clabels,
                linux: Some(proto::LinuxContainerConfig {
                    resources: Some(res.clone()),
                    security_context: Some(proto::LinuxContainerSecurityContext {
                        namespace_options: Some(ns.clone()),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            };
            let id = rs
                .create_container(proto::CreateContainerRequest {
                    pod_sandbox_id: sandbox_id.clone(),
                    config: Some(cfg),
                    sandbox_config: Some(config.clone()),
                })
                .await
                .unwrap_or_else(|e| panic!("CreateContainer {}: {e}\n{}", c.name, self.log_tail()))
                .into_inner()
                .container_id;
            rs.start_container(proto::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("StartContainer {}: {e}\n{}", c.name, self.log_tail()));
            containers.push((c.name.clone(), id, res));
        }
        RunningPod {
            spec: spec.clone(),
            sandbox_id,
            cgroup_parent,
            class,
            containers,
        }
    }

    /// Remove this sandbox on drop too (for sandboxes a test made itself).
    pub fn track_sandbox(&self, id: &str) {
        self.sandboxes.lock().unwrap().push(id.to_string());
    }

    /// StopPodSandbox + RemovePodSandbox.
    pub async fn remove_pod(&self, pod: &RunningPod) {
        let client = self.client().await;
        client.stop_pod_sandbox(&pod.sandbox_id).await.unwrap();
        client.remove_pod_sandbox(&pod.sandbox_id).await.unwrap();
        self.sandboxes
            .lock()
            .unwrap()
            .retain(|s| s != &pod.sandbox_id);
    }

    /// The host PID of a container's main process (verbose ContainerStatus).
    pub async fn container_pid(&self, container_id: &str) -> i32 {
        let st = self
            .client()
            .await
            .container_status(container_id, true)
            .await
            .unwrap();
        let info = st.info.get("info").expect("verbose info");
        let v: serde_json::Value = serde_json::from_str(info).unwrap();
        v["pid"].as_i64().expect("pid in info") as i32
    }

    /// Send `sig` to a container's main process (memhog: SIGUSR1 grows one
    /// step, SIGUSR2 shrinks back). Only processes of this env's pods.
    pub async fn signal_container(&self, container_id: &str, sig: nix::sys::signal::Signal) {
        let pid = self.container_pid(container_id).await;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).unwrap();
    }

    /// ContainerStatus (not verbose).
    pub async fn container_status(&self, container_id: &str) -> proto::ContainerStatus {
        self.client()
            .await
            .container_status(container_id, false)
            .await
            .unwrap()
            .status
            .unwrap()
    }

    /// Poll until the container has exited (or `timeout`); its final status.
    pub async fn wait_exited(
        &self,
        container_id: &str,
        timeout: Duration,
    ) -> Option<proto::ContainerStatus> {
        let t = Instant::now();
        while t.elapsed() < timeout {
            let st = self.container_status(container_id).await;
            if st.state == proto::ContainerState::ContainerExited as i32 {
                return Some(st);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// A container's cgroup directory in a v1 hierarchy (runc cgroupfs:
    /// `<cgroup parent>/<container id>`).
    pub fn container_cgroup_dir(
        &self,
        controller: &str,
        pod: &RunningPod,
        container_id: &str,
    ) -> PathBuf {
        self.cgroup_dir(controller, pod).join(container_id)
    }

    /// A container's memory usage in bytes: v1 `memory.usage_in_bytes` in the
    /// memory hierarchy, or v2 `memory.current`. `None` when not readable.
    pub fn container_memory_usage(&self, pod: &RunningPod, container_id: &str) -> Option<i64> {
        let v1 = self
            .container_cgroup_dir("memory", pod, container_id)
            .join("memory.usage_in_bytes");
        let v2 = self
            .container_cgroup_dir("", pod, container_id)
            .join("memory.current");
        [v1, v2]
            .iter()
            .find_map(|f| std::fs::read_to_string(f).ok())
            .and_then(|s| s.trim().parse().ok())
    }

    /// The pod's cgroup directory in the hierarchy of `controller` (v1, e.g.
    /// "memory"); "" for the cgroup v2 tree at /sys/fs/cgroup.
    pub fn cgroup_dir(&self, controller: &str, pod: &RunningPod) -> PathBuf {
        let base = Path::new("/sys/fs/cgroup").join(controller);
        base.join(pod.cgroup_parent.trim_start_matches('/'))
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// Cgroup hierarchy roots: each v1 controller mount and the v2 tree.
    fn hierarchy_roots() -> Vec<PathBuf> {
        let base = Path::new("/sys/fs/cgroup");
        let mut roots = vec![base.to_path_buf()];
        if let Ok(rd) = std::fs::read_dir(base) {
            for e in rd.flatten() {
                let p = e.path();
                // Skip symlinks (cpu -> cpu,cpuacct) so each hierarchy is seen once.
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    roots.push(p);
                }
            }
        }
        roots
    }

    /// Remove every cgroup under this env's prefix, leaf first, killing
    /// leftover processes in them (all of which this env caused).
    fn remove_cgroups(&self) {
        let prefix = self.cgroup_root.trim_start_matches('/');
        assert!(
            prefix.starts_with("qosd-test-"),
            "refusing to touch {prefix}"
        );
        for root in Self::hierarchy_roots() {
            let top = root.join(prefix);
            if top.is_dir() {
                remove_tree(&top);
            }
        }
    }

    fn unmount_leftovers(&self) {
        let dir = self.dir.path().to_string_lossy().to_string();
        let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        let mut points: Vec<String> = mi
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            .filter(|p| p.starts_with(&dir))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let _ = nix::mount::umount2(p.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let sandboxes: Vec<String> = self.sandboxes.lock().unwrap().clone();
        if !sandboxes.is_empty() {
            if self.child.is_none() {
                // Bring it back to clean up the pods it still knows.
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.start_again()));
                if r.is_err() {
                    eprintln!("support: could not restart containerd for clean-up");
                }
            }
            if self.child.is_some() {
                let endpoint = self.endpoint.clone();
                block_on(async move {
                    let opts = ConnectOptions {
                        retry: qosd_node::cri::RetryPolicy {
                            max_elapsed: Duration::from_secs(5),
                            ..Default::default()
                        },
                        ..Default::default()
                    };
                    if let Ok(c) = CriClient::connect(&endpoint, opts).await {
                        for id in sandboxes {
                            let _ = c.stop_pod_sandbox(&id).await;
                            if let Err(e) = c.remove_pod_sandbox(&id).await {
                                eprintln!("support: RemovePodSandbox {id}: {e}");
                            }
                        }
                    }
                });
            }
        }
        self.stop();
        self.remove_cgroups();
        self.unmount_leftovers();
    }
}

// ----------------------------------------------------------------- helpers

/// Cargo's scratch directory for tests (`target/tmp`), also for the
/// binary's unit tests, which Cargo gives no `CARGO_TARGET_TMPDIR`.
pub fn target_tmpdir() -> PathBuf {
    match option_env!("CARGO_TARGET_TMPDIR") {
        Some(p) => PathBuf::from(p),
        None => {
            let exe = std::env::current_exe().expect("test executable path");
            let target = exe.ancestors().nth(3).expect("target dir");
            let dir = target.join("tmp");
            std::fs::create_dir_all(&dir).expect("target/tmp");
            dir
        }
    }
}

/// The `qosd` binary under test: Cargo's path for integration tests; for
/// the binary's own unit tests, the `qosd` beside the test executable's
/// `deps/` directory (built by the same `cargo test` run).
pub fn qosd_bin() -> PathBuf {
    if let Some(p) = option_env!("CARGO_BIN_EXE_qosd") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    dir.join("qosd")
}

/// Run the qosd binary with `args` in the repository root, with no
/// inherited config or endpoint; returns (exit code, stdout, stderr).
pub fn qosd(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(qosd_bin())
        .current_dir(process::repo_root())
        .args(args)
        .env_remove("CONTAINER_RUNTIME_ENDPOINT")
        .env_remove("QOSD_CONFIG")
        .output()
        .expect("run qosd");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Check a JSON document with the shared contract checker when it is
/// available (../shared/contracts/check-json.py or $QOSD_CHECK_JSON).
pub fn check_contract(kind: &str, json: &str) {
    // The contract in the repository (docs/contracts) always; the shared
    // checker too when it is around.
    check_schema(kind, json);
    let script = std::env::var_os("QOSD_CHECK_JSON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_dir().join("../../shared/contracts/check-json.py"));
    let script = if script.is_file() {
        script
    } else {
        let alt = PathBuf::from("/work/shared/contracts/check-json.py");
        if !alt.is_file() {
            eprintln!("support: contract checker not found; shape checked by the test only");
            return;
        }
        alt
    };
    use std::io::Write;
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(kind)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "contract {kind}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

// ------------------------------------------------------------ JSON contracts

/// Validate a JSON document against docs/contracts/`<kind>`.schema.json (the
/// JSON Schema subset those files use: type, required, properties, items,
/// enum, a `^/` pattern, `$ref` to `$defs` here or in another contract).
/// Panics listing every problem.
pub fn check_schema(kind: &str, json: &str) {
    let doc: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{kind}: not JSON: {e}\n{json}"));
    let schema = load_schema(&format!("{kind}.schema.json"));
    let mut problems = Vec::new();
    validate(&doc, &schema, &schema, "$", &mut problems);
    assert!(
        problems.is_empty(),
        "{kind} -o json breaks docs/contracts/{kind}.schema.json:\n  {}",
        problems.join("\n  ")
    );
}

fn load_schema(file: &str) -> serde_json::Value {
    let p = repo_dir().join("docs/contracts").join(file);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn resolve(root: &serde_json::Value, r: &str) -> (serde_json::Value, serde_json::Value) {
    let (file, pointer) = r.split_once('#').unwrap_or((r, ""));
    let root = if file.is_empty() {
        root.clone()
    } else {
        load_schema(file)
    };
    let target = root
        .pointer(pointer)
        .unwrap_or_else(|| panic!("bad $ref {r}"))
        .clone();
    (root, target)
}

fn validate(
    v: &serde_json::Value,
    s: &serde_json::Value,
    root: &serde_json::Value,
    at: &str,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let (root, target) = resolve(root, r);
        return validate(v, &target, &root, at, out);
    }
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(x) => vec![x.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let ok = types.iter().any(|t| match *t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            _ => false,
        });
        if !ok {
            out.push(format!("{at}: expected {types:?}, got {v}"));
            return;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            out.push(format!("{at}: {v} not in {e:?}"));
        }
    }
    if let (Some(p), Some(x)) = (s.get("pattern").and_then(Value::as_str), v.as_str()) {
        let prefix = p.strip_prefix('^').expect("only ^prefix patterns");
        if !x.starts_with(prefix) {
            out.push(format!("{at}: {x:?} does not match {p}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for k in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let k = k.as_str().unwrap();
            if !obj.contains_key(k) {
                out.push(format!("{at}: missing key {k:?}"));
            }
        }
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            for (k, ps) in props {
                if let Some(x) = obj.get(k) {
                    validate(x, ps, root, &format!("{at}.{k}"), out);
                }
            }
        }
    }
    if let (Some(items), Some(a)) = (s.get("items"), v.as_array()) {
        for (i, x) in a.iter().enumerate() {
            validate(x, items, root, &format!("{at}[{i}]"), out);
        }
    }
}
