//! `qosd-cri-pod`: start pods the way the kubelet does, over the CRI, where
//! no kubelet or crictl is available (the systemd VM of tests/vm/).
//!
//! ```text
//! qosd-cri-pod run ENDPOINT SPEC.json     # prints `POD <name> <sandbox id> <container id>...`
//! qosd-cri-pod remove ENDPOINT SANDBOX_ID # StopPodSandbox + RemovePodSandbox
//! qosd-cri-pod daemonset ENDPOINT POD.json NODE.json  # prints `POD <name> <sandbox id> <container id>`
//! ```
//! SPEC.json: `[{"name","namespace","uid","cgroup_parent","containers":
//! [{"name","image","args":[...],"cpu_shares","cpu_quota","cpu_period",
//! "memory_limit_in_bytes","oom_score_adj"}]}]`: the caller computes the
//! kubelet's values (the test does, from the kubelet's formulas).
//!
//! `daemonset`: the rendered DaemonSet's pod (POD.json: a
//! [`daemonset_pod::DaemonSetPod`], devtools/src/daemonset_pod.rs), run as
//! the kubelet would on this node: its ConfigMaps written below
//! `config_root/<name>/` and mounted, its host paths as they are (a
//! `DirectoryOrCreate` one created), `fieldRef: spec.nodeName` the node's
//! hostname. NODE.json: `{"pod_name","uid","image","cgroup_parent",
//! "config_root","log_directory"}`; the network is the node's (no CNI).

#[path = "../daemonset_pod.rs"]
mod daemonset_pod;

use std::collections::HashMap;
use std::process::ExitCode;

use qosd_node::cri::client::{ConnectOptions, CriClient};
use qosd_node::cri::proto;
use serde::Deserialize;

#[derive(Deserialize)]
struct Container {
    name: String,
    image: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    cpu_shares: i64,
    #[serde(default)]
    cpu_quota: i64,
    #[serde(default)]
    cpu_period: i64,
    #[serde(default)]
    memory_limit_in_bytes: i64,
    #[serde(default)]
    oom_score_adj: i64,
}

#[derive(Deserialize)]
struct Pod {
    name: String,
    namespace: String,
    uid: String,
    cgroup_parent: String,
    containers: Vec<Container>,
}

/// The kubelet's `--runtime-request-timeout` (2 min): pod creation in an
/// emulated VM on a loaded host can take far longer than the daemon's
/// 10 s call deadline.
fn slow_runtime() -> ConnectOptions {
    ConnectOptions {
        call_timeout: std::time::Duration::from_secs(120),
        ..ConnectOptions::default()
    }
}

async fn run(endpoint: &str, spec: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(spec).map_err(|e| format!("{spec}: {e}"))?;
    let pods: Vec<Pod> = serde_json::from_str(&text).map_err(|e| format!("{spec}: {e}"))?;
    let client = CriClient::connect(endpoint, slow_runtime())
        .await
        .map_err(|e| format!("connect {endpoint}: {e}"))?;
    let mut rs = client.runtime_service();
    for p in pods {
        let mut labels = HashMap::new();
        labels.insert("io.kubernetes.pod.name".to_string(), p.name.clone());
        labels.insert(
            "io.kubernetes.pod.namespace".to_string(),
            p.namespace.clone(),
        );
        labels.insert("io.kubernetes.pod.uid".to_string(), p.uid.clone());
        let mut annotations = HashMap::new();
        annotations.insert("kubernetes.io/config.source".to_string(), "api".to_string());
        let ns = proto::NamespaceOption {
            network: proto::NamespaceMode::Node as i32,
            pid: proto::NamespaceMode::Container as i32,
            ipc: proto::NamespaceMode::Pod as i32,
            ..Default::default()
        };
        let config = proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: p.name.clone(),
                uid: p.uid.clone(),
                namespace: p.namespace.clone(),
                attempt: 0,
            }),
            labels: labels.clone(),
            annotations,
            linux: Some(proto::LinuxPodSandboxConfig {
                cgroup_parent: p.cgroup_parent.clone(),
                security_context: Some(proto::LinuxSandboxSecurityContext {
                    namespace_options: Some(ns.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let sandbox = rs
            .run_pod_sandbox(proto::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .map_err(|e| format!("RunPodSandbox {}: {e}", p.name))?
            .into_inner()
            .pod_sandbox_id;
        let mut ids = Vec::new();
        for c in p.containers {
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
                    resources: Some(proto::LinuxContainerResources {
                        cpu_shares: c.cpu_shares,
                        cpu_quota: c.cpu_quota,
                        cpu_period: c.cpu_period,
                        memory_limit_in_bytes: c.memory_limit_in_bytes,
                        oom_score_adj: c.oom_score_adj,
                        ..Default::default()
                    }),
                    security_context: Some(proto::LinuxContainerSecurityContext {
                        namespace_options: Some(ns.clone()),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            };
            let id = rs
                .create_container(proto::CreateContainerRequest {
                    pod_sandbox_id: sandbox.clone(),
                    config: Some(cfg),
                    sandbox_config: Some(config.clone()),
                })
                .await
                .map_err(|e| format!("CreateContainer {}: {e}", c.name))?
                .into_inner()
                .container_id;
            rs.start_container(proto::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .map_err(|e| format!("StartContainer {}: {e}", c.name))?;
            ids.push(id);
        }
        println!("POD {} {} {}", p.name, sandbox, ids.join(" "));
    }
    Ok(())
}

#[derive(Deserialize)]
struct Node {
    pod_name: String,
    uid: String,
    image: String,
    cgroup_parent: String,
    config_root: String,
    log_directory: String,
}

/// The kubelet's part before the runtime's: volumes laid out on the node.
fn volumes(pod: &daemonset_pod::DaemonSetPod, node: &Node) -> Result<(), String> {
    for (name, files) in &pod.config_maps {
        let dir = std::path::Path::new(&node.config_root).join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (file, text) in files {
            let p = dir.join(file);
            std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    for m in &pod.mounts {
        if let (Some(p), Some("DirectoryOrCreate")) = (&m.host_path, m.host_path_type.as_deref()) {
            std::fs::create_dir_all(p).map_err(|e| format!("{p}: {e}"))?;
        }
    }
    std::fs::create_dir_all(&node.log_directory).map_err(|e| format!("{}: {e}", node.log_directory))
}

async fn daemonset(endpoint: &str, pod: &str, node: &str) -> Result<(), String> {
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
    let pod: daemonset_pod::DaemonSetPod =
        serde_json::from_str(&read(pod)?).map_err(|e| format!("{pod}: {e}"))?;
    let node: Node = serde_json::from_str(&read(node)?).map_err(|e| format!("{node}: {e}"))?;
    volumes(&pod, &node)?;
    let hostname = read("/proc/sys/kernel/hostname")?.trim().to_string();
    let env = pod.env_values(&|f| (f == "spec.nodeName").then(|| hostname.clone()))?;
    let mounts = pod.cri_mounts(&|m| match (&m.host_path, &m.config_map) {
        (Some(p), _) => p.clone(),
        (None, Some(cm)) => format!("{}/{cm}", node.config_root),
        (None, None) => String::new(),
    });
    let sandbox = pod.sandbox_config(
        &node.pod_name,
        &node.uid,
        &node.cgroup_parent,
        true,
        &node.log_directory,
    );
    let config = pod.container_config(&daemonset_pod::ContainerInputs {
        pod_name: &node.pod_name,
        uid: &node.uid,
        image: &node.image,
        env,
        mounts,
        log_path: "qosd.log",
        node_network: true,
    });
    let client = CriClient::connect(endpoint, slow_runtime())
        .await
        .map_err(|e| format!("connect {endpoint}: {e}"))?;
    let mut rs = client.runtime_service();
    let sandbox_id = rs
        .run_pod_sandbox(proto::RunPodSandboxRequest {
            config: Some(sandbox.clone()),
            runtime_handler: String::new(),
        })
        .await
        .map_err(|e| format!("RunPodSandbox {}: {e}", node.pod_name))?
        .into_inner()
        .pod_sandbox_id;
    let id = rs
        .create_container(proto::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.clone(),
            config: Some(config),
            sandbox_config: Some(sandbox),
        })
        .await
        .map_err(|e| format!("CreateContainer {}: {e}", pod.container))?
        .into_inner()
        .container_id;
    rs.start_container(proto::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .map_err(|e| format!("StartContainer {}: {e}", pod.container))?;
    println!("POD {} {sandbox_id} {id}", node.pod_name);
    Ok(())
}

async fn remove(endpoint: &str, id: &str) -> Result<(), String> {
    let client = CriClient::connect(endpoint, slow_runtime())
        .await
        .map_err(|e| format!("connect {endpoint}: {e}"))?;
    client
        .stop_pod_sandbox(id)
        .await
        .map_err(|e| format!("StopPodSandbox {id}: {e}"))?;
    client
        .remove_pod_sandbox(id)
        .await
        .map_err(|e| format!("RemovePodSandbox {id}: {e}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let res = match (args.first().map(String::as_str), args.len()) {
        (Some("run"), 3) => rt.block_on(run(&args[1], &args[2])),
        (Some("remove"), 3) => rt.block_on(remove(&args[1], &args[2])),
        (Some("daemonset"), 4) => rt.block_on(daemonset(&args[1], &args[2], &args[3])),
        _ => Err(
            "usage: qosd-cri-pod run ENDPOINT SPEC.json | remove ENDPOINT SANDBOX_ID \
                  | daemonset ENDPOINT POD.json NODE.json"
                .into(),
        ),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qosd-cri-pod: {e}");
            ExitCode::FAILURE
        }
    }
}
