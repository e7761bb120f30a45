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

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use qosd_node::cri::proto;
use serde::Deserialize;
use support::kubeapi::{fixture_pod, Answer, FakeApi};
use support::*;
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

fn manifests() -> Vec<Yaml> {
    let text = std::fs::read_to_string(root().join("deploy/daemonset.yaml")).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| Yaml::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn kind<'a>(all: &'a [Yaml], k: &str) -> &'a Yaml {
    all.iter().find(|d| d["kind"].as_str() == Some(k)).unwrap()
}

fn s(v: &Yaml) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v:?}"))
        .to_string()
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
async fn daemonset_pod_survives_a_runtime_restart_and_keeps_enforcing_and_evicting() {
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
    let ds = kind(&all, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(pod["hostPID"].as_bool(), Some(true));

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
    let cm = kind(&all, "ConfigMap");
    let mut cfg: Yaml = yaml_serde::from_str(&s(&cm["data"]["config.yaml"])).unwrap();
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

    // Volumes → host paths (hostPath ones as the manifest says, but the
    // runtime's directory is this containerd's and the kubelet root a temp dir).
    let socket_dir = env.socket.parent().unwrap().to_path_buf();
    let mut mounts = Vec::new();
    for vm in c["volumeMounts"].as_sequence().unwrap() {
        let name = s(&vm["name"]);
        let vol = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == vm["name"])
            .unwrap();
        let host = match (name.as_str(), vol["hostPath"]["path"].as_str()) {
            ("config", _) => config_dir.clone(),
            (_, Some("/run/containerd")) => socket_dir.clone(),
            (_, Some("/var/lib/kubelet")) => kubelet_root.0.clone(),
            (_, Some("/sys/fs/cgroup")) => cgroupfs.0.clone(),
            (_, Some(p)) => PathBuf::from(p),
            _ => panic!("unexpected volume {name}"),
        };
        let propagation = match vm["mountPropagation"].as_str() {
            Some("HostToContainer") => proto::MountPropagation::PropagationHostToContainer,
            _ => proto::MountPropagation::PropagationPrivate,
        };
        mounts.push(proto::Mount {
            container_path: s(&vm["mountPath"]),
            host_path: host.display().to_string(),
            readonly: vm["readOnly"].as_bool().unwrap_or(false),
            propagation: propagation as i32,
            ..Default::default()
        });
    }
    mounts.push(proto::Mount {
        container_path: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
        host_path: sa_dir.display().to_string(),
        readonly: true,
        ..Default::default()
    });
    let mut envs = vec![
        proto::KeyValue {
            key: "KUBERNETES_SERVICE_HOST".into(),
            value: "127.0.0.1".into(),
        },
        proto::KeyValue {
            key: "KUBERNETES_SERVICE_PORT".into(),
            value: api.addr.port().to_string(),
        },
    ];
    for e in c["env"].as_sequence().unwrap() {
        let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("spec.nodeName") => NODE.to_string(),
            Some(other) => panic!("unexpected fieldRef {other}"),
            None => s(&e["value"]),
        };
        envs.push(proto::KeyValue {
            key: s(&e["name"]),
            value,
        });
    }

    // Resources as the kubelet maps them; Guaranteed → kubepods/pod<uid>.
    let milli = |q: &Yaml| {
        qosd_model::core::quantity::Quantity::parse(&s(q))
            .unwrap()
            .milli_ceil()
    };
    let bytes = |q: &Yaml| {
        qosd_model::core::quantity::Quantity::parse(&s(q))
            .unwrap()
            .value_ceil()
    };
    let res = &c["resources"];
    assert_eq!(res["requests"], res["limits"], "Guaranteed");
    let cpu = milli(&res["limits"]["cpu"]);
    let resources = proto::LinuxContainerResources {
        cpu_shares: kubelet::shares(cpu),
        cpu_quota: kubelet::quota(cpu),
        cpu_period: kubelet::PERIOD,
        memory_limit_in_bytes: bytes(&res["limits"]["memory"]),
        oom_score_adj: -997,
        ..Default::default()
    };
    let uid = PodSpec::new("qosd").uid;
    let cgroup_parent = format!("{}/kubepods/pod{uid}", env.cgroup_root);
    let ns = proto::NamespaceOption {
        // No CNI on this machine: the node's network (see the module docs).
        network: proto::NamespaceMode::Node as i32,
        // hostPID: true
        pid: proto::NamespaceMode::Node as i32,
        ipc: proto::NamespaceMode::Pod as i32,
        ..Default::default()
    };
    let labels: std::collections::HashMap<String, String> = [
        ("io.kubernetes.pod.name", "qosd-abcde"),
        ("io.kubernetes.pod.namespace", "qosd-system"),
        ("io.kubernetes.pod.uid", uid.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let sandbox = proto::PodSandboxConfig {
        metadata: Some(proto::PodSandboxMetadata {
            name: "qosd-abcde".into(),
            uid: uid.clone(),
            namespace: "qosd-system".into(),
            attempt: 0,
        }),
        labels: labels.clone(),
        annotations: [("kubernetes.io/config.source".to_string(), "api".to_string())].into(),
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
    let sc = &c["securityContext"];
    let strings = |v: &Yaml| -> Vec<String> { v.as_sequence().unwrap().iter().map(s).collect() };
    assert_eq!(s(&sc["seccompProfile"]["type"]), "RuntimeDefault");
    let security = proto::LinuxContainerSecurityContext {
        capabilities: Some(proto::Capability {
            add_capabilities: strings(&sc["capabilities"]["add"]),
            drop_capabilities: strings(&sc["capabilities"]["drop"]),
            ..Default::default()
        }),
        privileged: sc["privileged"].as_bool().unwrap(),
        namespace_options: Some(ns.clone()),
        run_as_user: Some(proto::Int64Value {
            value: sc["runAsUser"].as_i64().unwrap(),
        }),
        run_as_group: Some(proto::Int64Value {
            value: sc["runAsGroup"].as_i64().unwrap(),
        }),
        readonly_rootfs: sc["readOnlyRootFilesystem"].as_bool().unwrap(),
        no_new_privs: !sc["allowPrivilegeEscalation"].as_bool().unwrap(),
        seccomp: Some(proto::SecurityProfile {
            profile_type: proto::security_profile::ProfileType::RuntimeDefault as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
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
    let mut clabels = labels.clone();
    clabels.insert("io.kubernetes.container.name".into(), s(&c["name"]));
    let id = rs
        .create_container(proto::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.clone(),
            config: Some(proto::ContainerConfig {
                metadata: Some(proto::ContainerMetadata {
                    name: s(&c["name"]),
                    attempt: 0,
                }),
                image: Some(proto::ImageSpec {
                    image: IMAGE.into(),
                    ..Default::default()
                }),
                args: strings(&c["args"]),
                envs,
                mounts,
                labels: clabels,
                log_path: String::new(),
                linux: Some(proto::LinuxContainerConfig {
                    resources: Some(resources),
                    security_context: Some(security),
                }),
                ..Default::default()
            }),
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
    let healthz = s(&c["livenessProbe"]["httpGet"]["path"]);
    let readyz = s(&c["readinessProbe"]["httpGet"]["path"]);
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
