//! The DaemonSet pod for real: qosd's image built without a registry
//! (`scripts/build-static-qosd`, the Dockerfile's recipe, packed by
//! tests/images/mkimage.py at the Dockerfile's paths), run as a pod through
//! the private containerd with deploy/daemonset.yaml's settings — hostPID,
//! the host mounts (the runtime socket's *directory*, read-only; the kubelet
//! root, whose config.yaml qosd reads), the container
//! securityContext (root, not privileged, capabilities ALL dropped but
//! KILL, no privilege escalation, read-only root, RuntimeDefault seccomp),
//! the resources (Guaranteed), NODE_NAME and the service account token —
//! probed on its port, then containerd is restarted under it: the pod keeps
//! enforcing (drift corrected) and evicting (a hard eviction the API refuses
//! falls back to the local kill from inside the pod).
//!
//! Deviations, because this machine has no CNI and no kubelet: the pod uses
//! the node's network (its port is a free one), the kubelet's work
//! (mounting volumes, the token) is done by the test, and the API server is
//! the fake one (tests/support/kubeapi.rs). Needs root.

#[path = "../../devtools/src/daemonset_pod.rs"]
mod daemonset_pod;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::kubeapi::{fixture_pod, Answer, FakeApi};
use crate::support::*;
use daemonset_pod::DaemonSetPod;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use qosd_node::cri::proto;
use serde::Deserialize;
use yaml_serde::Value as Yaml;

const NODE: &str = "qosd-test-node";
const IMAGE: &str = "qosd.test/qosd:1";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The static binary, built by the image's recipe into target/vm-static
/// (shared with the cgroup v2 VM tests' identical static build).
fn static_qosd() -> PathBuf {
    let out = root().join("target/vm-static/qosd-image/qosd");
    let t = Instant::now();
    let st = Command::new(root().join("scripts/build-static-qosd"))
        .arg(&out)
        .env("CARGO_TARGET_DIR", root().join("target/vm-static"))
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .expect("run scripts/build-static-qosd");
    assert!(st.success(), "scripts/build-static-qosd failed");
    eprintln!("static qosd built in {:.1}s", t.elapsed().as_secs_f64());
    out
}

/// deploy/daemonset.yaml (the default overlay rendered; tests/ship/ship_deploy.rs
/// keeps them equal), every document as JSON.
fn manifests() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(root().join("deploy/daemonset.yaml")).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| serde_json::Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// A recursive bind of `src` at `dst`, made rshared: `HostToContainer`
/// propagation needs the host path on a shared (or slave) mount, as `/` is
/// on a systemd node but not on this machine. Unmounted on drop.
struct SharedBind(PathBuf);

impl SharedBind {
    fn new(src: &Path, dst: &Path) -> SharedBind {
        std::fs::create_dir_all(dst).unwrap();
        let run = |args: &[&str]| {
            let st = Command::new("mount").args(args).status().unwrap();
            assert!(st.success(), "mount {args:?}");
        };
        run(&["--rbind", src.to_str().unwrap(), dst.to_str().unwrap()]);
        let b = SharedBind(dst.to_path_buf());
        run(&["--make-rshared", dst.to_str().unwrap()]);
        b
    }
}

impl Drop for SharedBind {
    fn drop(&mut self) {
        // Lazy: a container still holding files below detaches too.
        let _ = Command::new("umount")
            .arg("-R")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd, runs qosd as a pod, creates cgroups"]
// The guard is held across awaits on purpose: it keeps the tests that
// take it apart for the whole test, each on its own runtime.
#[allow(clippy::await_holding_lock)]
async fn daemonset_pod_survives_a_runtime_restart_and_keeps_enforcing_and_evicting() {
    let _serial = crate::support::serial();
    require_containerd();
    let bin = static_qosd();
    let tmp = tempfile::tempdir().unwrap();
    let kubelet_dir = tmp.path().join("kubelet-dir");
    std::fs::create_dir_all(&kubelet_dir).unwrap();
    // Before the runtime: dropped after it has stopped the pods.
    let kubelet_root = SharedBind::new(&kubelet_dir, &tmp.path().join("kubelet"));
    let cgroupfs = SharedBind::new(Path::new("/sys/fs/cgroup"), &tmp.path().join("cgroup"));
    let mut env = Containerd::start();

    // The image, laid out like the Dockerfile's last stage.
    let tar = tmp.path().join("qosd.tar");
    let st = Command::new("python3")
        .arg(root().join("tests/images/mkimage.py"))
        .args(["--at", "/usr/local/bin/qosd", "--file"])
        .arg(format!(
            "{}:/etc/qosd/config.yaml",
            root().join("config/qosd.yaml").display()
        ))
        .arg(&bin)
        .args([
            IMAGE,
            tar.to_str().unwrap(),
            "run",
            "--config",
            "/etc/qosd/config.yaml",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let st = Command::new("ctr")
        .arg("--address")
        .arg(&env.socket)
        .args(["-n", "k8s.io", "images", "import"])
        .arg(&tar)
        .status()
        .unwrap();
    assert!(st.success(), "ctr images import");

    // The manifest's pod.
    let all = manifests();
    let dpod = DaemonSetPod::from_manifest(&all).expect("the DaemonSet's pod");
    assert!(dpod.host_pid);

    // The ConfigMap's config reads the kubelet's config from the mounted
    // kubelet root: this test's private node, in the kubelet's format.
    std::fs::write(
        kubelet_dir.join("config.yaml"),
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\n\
             kind: KubeletConfiguration\n\
             cgroupDriver: cgroupfs\n\
             cgroupRoot: {}\n\
             evictionHard:\n  allocatableMemory.available: 100Mi\n",
            env.cgroup_root
        ),
    )
    .unwrap();
    let port = free_port();
    let config_map = dpod.mount("config").unwrap().config_map.clone().unwrap();
    let file = &dpod.config_map(&config_map).unwrap()[0];
    assert_eq!(file.0, "config.yaml");
    let mut cfg: Yaml = yaml_serde::from_str(&file.1).unwrap();
    assert_eq!(
        cfg["kubeletConfig"].as_str(),
        Some("/var/lib/kubelet/config.yaml")
    );
    let m = cfg.as_mapping_mut().unwrap();
    // The operator's opt-in (the shipped default audits and runs dry; the
    // enforcing pod shows the mounts allow what enforcing needs).
    for (k, v) in [
        ("mode", "enforce".to_string()),
        ("cgroupEnforcement", "enforce".to_string()),
        ("cgroupVersion", "v1".into()),
        ("metricsAddress", format!("127.0.0.1:{port}")),
        ("nodeMemory", "512Mi".into()),
        ("reconcileInterval", "2s".into()),
    ] {
        m.insert(Yaml::from(k), Yaml::from(v));
    }
    let config_dir = tmp.path().join("config");
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(
        config_dir.join("config.yaml"),
        yaml_serde::to_string(&cfg).unwrap(),
    )
    .unwrap();
    // What the kubelet mounts for automountServiceAccountToken.
    let api = FakeApi::start();
    let sa_dir = tmp.path().join("serviceaccount");
    std::fs::create_dir_all(&sa_dir).unwrap();
    std::fs::write(sa_dir.join("token"), &api.token).unwrap();
    std::fs::write(sa_dir.join("ca.crt"), &api.ca_pem).unwrap();
    std::fs::write(sa_dir.join("namespace"), "qosd-system").unwrap();

    // The manifest's pod as the kubelet runs it (the shared translation);
    // this node's part: the ConfigMap's directory, the runtime's directory
    // is this containerd's, the kubelet root a temp dir.
    let socket_dir = env.socket.parent().unwrap().to_path_buf();
    let mut mounts = dpod.cri_mounts(&|m| {
        let host = match (m.config_map.as_deref(), m.host_path.as_deref()) {
            (Some(_), _) => config_dir.clone(),
            (_, Some("/run/containerd")) => socket_dir.clone(),
            (_, Some("/var/lib/kubelet")) => kubelet_root.0.clone(),
            (_, Some("/sys/fs/cgroup")) => cgroupfs.0.clone(),
            (_, Some(p)) => PathBuf::from(p),
            _ => panic!("unexpected volume {}", m.volume),
        };
        host.display().to_string()
    });
    mounts.push(proto::Mount {
        container_path: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
        host_path: sa_dir.display().to_string(),
        readonly: true,
        ..Default::default()
    });
    let mut envs = vec![
        (
            "KUBERNETES_SERVICE_HOST".to_string(),
            "127.0.0.1".to_string(),
        ),
        (
            "KUBERNETES_SERVICE_PORT".to_string(),
            api.addr.port().to_string(),
        ),
    ];
    envs.extend(
        dpod.env_values(&|f| (f == "spec.nodeName").then(|| NODE.to_string()))
            .unwrap(),
    );
    // Guaranteed → kubepods/pod<uid>; no CNI on this machine: the node's
    // network (see the module docs).
    assert!(dpod.guaranteed, "Guaranteed");
    assert_eq!(dpod.security.seccomp, "RuntimeDefault");
    let uid = PodSpec::new("qosd").uid;
    let cgroup_parent = format!("{}/kubepods/pod{uid}", env.cgroup_root);
    let sandbox = dpod.sandbox_config("qosd-abcde", &uid, &cgroup_parent, true, "");
    let config = dpod.container_config(&daemonset_pod::ContainerInputs {
        pod_name: "qosd-abcde",
        uid: &uid,
        image: IMAGE,
        env: envs,
        mounts,
        log_path: "",
        node_network: true,
    });
    let client = env.client().await;
    let mut rs = client.runtime_service();
    let sandbox_id = rs
        .run_pod_sandbox(proto::RunPodSandboxRequest {
            config: Some(sandbox.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    env.track_sandbox(&sandbox_id);
    let id = rs
        .create_container(proto::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.clone(),
            config: Some(config),
            sandbox_config: Some(sandbox.clone()),
        })
        .await
        .unwrap_or_else(|e| panic!("CreateContainer qosd: {e}\n{}", env.log()))
        .into_inner()
        .container_id;
    rs.start_container(proto::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap_or_else(|e| panic!("StartContainer qosd: {e}\n{}", env.log()));
    drop(rs);
    drop(client);

    // The workload: a BestEffort pod that will grow, known to the API.
    let hog = env
        .run_pod(
            &PodSpec::new("hog")
                .container(ContainerSpec::memhog("hog", &["8", "16", "3600000", "480"])),
        )
        .await;
    let mut hog_api = fixture_pod(
        "web-burstable.json",
        &hog.spec.uid,
        "hog",
        "qosd-test",
        NODE,
    );
    hog_api["spec"]["containers"][0]["resources"] = serde_json::json!({});
    hog_api["status"]["qosClass"] = serde_json::json!("BestEffort");
    api.put_pod(hog_api);

    // Probed on its port like the manifest's probes.
    let healthz = dpod.probe("liveness").unwrap().path.clone();
    let readyz = dpod.probe("readiness").unwrap().path.clone();
    wait_for("readiness", Duration::from_secs(60), || {
        get_port(port, &readyz).is_some_and(|r| r.status == 200)
    });
    assert_eq!(get_port(port, &healthz).unwrap().status, 200);
    wait_for("the API view", Duration::from_secs(30), || {
        status_json(port)["kubernetes"]["state"] == "synced"
    });
    let kubepods_mem = Path::new("/sys/fs/cgroup/memory")
        .join(env.cgroup_root.trim_start_matches('/'))
        .join("kubepods");
    assert_eq!(
        read_or_empty(&kubepods_mem.join("memory.limit_in_bytes")),
        (512 * MI).to_string()
    );

    // Restart containerd under it: the new socket is seen through the
    // mounted directory.
    let pid_before = env.pid().unwrap();
    env.stop();
    wait_for(
        "not ready while the runtime is down",
        Duration::from_secs(30),
        || get_port(port, &readyz).is_some_and(|r| r.status == 503),
    );
    assert_eq!(
        get_port(port, &healthz).unwrap().status,
        200,
        "alive meanwhile"
    );
    env.start_again();
    assert_ne!(env.pid().unwrap(), pid_before);
    wait_for(
        "ready again after the runtime restart",
        Duration::from_secs(60),
        || get_port(port, &readyz).is_some_and(|r| r.status == 200),
    );

    // Still enforcing: drift on a QoS cgroup is corrected.
    let be_shares = Path::new("/sys/fs/cgroup/cpu")
        .join(env.cgroup_root.trim_start_matches('/'))
        .join("kubepods/besteffort/cpu.shares");
    assert_eq!(read_or_empty(&be_shares), "2");
    std::fs::write(&be_shares, "1024").unwrap();
    wait_for("drift corrected", Duration::from_secs(30), || {
        read_or_empty(&be_shares) == "2"
    });

    // Still evicting: the API refuses, the pod kills locally (KILL
    // capability, host PIDs) and leaves the kubelet's record on the status.
    api.default_eviction_answer(Answer::TooManyRequests);
    let hog_pid = env.container_pid(&hog.containers[0].1).await;
    let start = Instant::now();
    while kill(Pid::from_raw(hog_pid), None).is_ok() && start.elapsed() < Duration::from_secs(30) {
        let _ = kill(Pid::from_raw(hog_pid), Signal::SIGUSR1);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        kill(Pid::from_raw(hog_pid), None).is_err(),
        "the BestEffort pod was not evicted by the qosd pod"
    );
    wait_for(
        "the status set Failed/Evicted through the API",
        Duration::from_secs(15),
        || api.status_patches().iter().any(|d| d.1 == "hog"),
    );
    // The Event follows the status record.
    wait_for("the Evicted event", Duration::from_secs(15), || {
        api.events().iter().any(|e| e["reason"] == "Evicted")
    });
    assert!(api.deletes().is_empty(), "the object is not deleted");
    assert!(api.schema_errors().is_empty(), "{:?}", api.schema_errors());
    let doc = status_json(port);
    assert_eq!(
        doc["last_evictions"][0]["uid"],
        serde_json::json!(hog.spec.uid)
    );
    assert_eq!(get_port(port, &healthz).unwrap().status, 200);
}
