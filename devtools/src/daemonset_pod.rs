//! The rendered DaemonSet's pod as a node runs it: what the kubelet takes
//! from `deploy/daemonset.yaml` (`kubectl kustomize deploy/overlays/kubelet`)
//! and hands to the container runtime — the container's args and env, the
//! volume mounts with their host paths and `readOnly`, the probes' paths
//! and ports, hostPID, the securityContext and the resources — and the CRI
//! requests that run it.
//!
//! One translation for every test that runs the pod (tests/kube/kube_daemonset.rs
//! on this host's containerd, tests/vm/daemonset_vm.rs on the systemd VM's
//! through `qosd-cri-pod daemonset`); included with `#[path]` where used.
//! The node-specific part (where a volume comes from on this node, the
//! node's name, the pod's cgroup parent) is the caller's.
#![allow(dead_code)]

use std::collections::HashMap;

use qosd_node::cri::proto;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One environment variable of the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    /// The variable's name.
    pub name: String,
    /// A literal `value`.
    pub value: Option<String>,
    /// `valueFrom.fieldRef.fieldPath` (e.g. `spec.nodeName`).
    pub field_path: Option<String>,
}

/// One volume mount, joined with its volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodMount {
    /// The volume's name.
    pub volume: String,
    /// Where the container sees it.
    pub container_path: String,
    /// `hostPath.path` (None for a ConfigMap or another non-host volume).
    pub host_path: Option<String>,
    /// `hostPath.type` (`Directory`, `DirectoryOrCreate`, ...).
    pub host_path_type: Option<String>,
    /// `configMap.name`, for a ConfigMap volume.
    pub config_map: Option<String>,
    /// `readOnly: true`.
    pub read_only: bool,
    /// `mountPropagation: HostToContainer`.
    pub host_to_container: bool,
}

/// An HTTP probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// `liveness`, `readiness` or `startup`.
    pub kind: String,
    /// `httpGet.path`.
    pub path: String,
    /// `httpGet.port`, a named port resolved to its number.
    pub port: u16,
}

/// The container's securityContext (and the pod's seccomp profile).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Security {
    /// `runAsUser`.
    pub run_as_user: i64,
    /// `runAsGroup`.
    pub run_as_group: i64,
    /// `privileged`.
    pub privileged: bool,
    /// `allowPrivilegeEscalation` (false → no_new_privs).
    pub allow_privilege_escalation: bool,
    /// `readOnlyRootFilesystem`.
    pub read_only_root: bool,
    /// `capabilities.add`.
    pub caps_add: Vec<String>,
    /// `capabilities.drop`.
    pub caps_drop: Vec<String>,
    /// `seccompProfile.type` (`RuntimeDefault`).
    pub seccomp: String,
}

/// The DaemonSet's pod, as the node runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonSetPod {
    /// The DaemonSet's name (the pod's name prefix).
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// The container's name.
    pub container: String,
    /// The container's image.
    pub image: String,
    /// `args` (the image's entrypoint is `qosd`).
    pub args: Vec<String>,
    /// `env`.
    pub env: Vec<EnvVar>,
    /// Every volume mount with its volume.
    pub mounts: Vec<PodMount>,
    /// The liveness, readiness and startup probes.
    pub probes: Vec<Probe>,
    /// `hostPID`.
    pub host_pid: bool,
    /// `hostNetwork`.
    pub host_network: bool,
    /// The container's securityContext.
    pub security: Security,
    /// CPU limit in millicores.
    pub cpu_limit_milli: i64,
    /// Memory limit in bytes.
    pub memory_limit_bytes: i64,
    /// requests == limits: the pod is Guaranteed.
    pub guaranteed: bool,
    /// The ConfigMap's files (`data`), by the ConfigMap's name.
    pub config_maps: Vec<(String, Vec<(String, String)>)>,
}

/// The kubelet's CFS period (µs).
pub const CPU_PERIOD: i64 = 100_000;
/// oom_score_adj the kubelet gives a system-node-critical pod's containers.
pub const CRITICAL_OOM_SCORE_ADJ: i64 = -997;

fn text(v: &Value, what: &str) -> Result<String, String> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{what}: not a string: {v}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn kind<'a>(docs: &'a [Value], k: &str) -> Result<&'a Value, String> {
    docs.iter()
        .find(|d| d["kind"] == k)
        .ok_or_else(|| format!("no {k} in the manifests"))
}

fn quantity(v: &Value, what: &str, milli: bool) -> Result<i64, String> {
    let q = qosd_model::core::quantity::Quantity::parse(&text(v, what)?)
        .map_err(|e| format!("{what}: {e}"))?;
    Ok(if milli {
        q.milli_ceil()
    } else {
        q.value_ceil()
    })
}

fn mounts(pod: &Value, c: &Value) -> Result<Vec<PodMount>, String> {
    let volumes = pod["volumes"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for vm in c["volumeMounts"].as_array().cloned().unwrap_or_default() {
        let volume = text(&vm["name"], "volumeMounts.name")?;
        let vol = volumes
            .iter()
            .find(|v| v["name"] == vm["name"])
            .ok_or_else(|| format!("volumeMount {volume}: no such volume"))?;
        out.push(PodMount {
            container_path: text(&vm["mountPath"], "mountPath")?,
            host_path: vol["hostPath"]["path"].as_str().map(str::to_string),
            host_path_type: vol["hostPath"]["type"].as_str().map(str::to_string),
            config_map: vol["configMap"]["name"].as_str().map(str::to_string),
            read_only: vm["readOnly"].as_bool().unwrap_or(false),
            host_to_container: vm["mountPropagation"] == "HostToContainer",
            volume,
        });
    }
    Ok(out)
}

fn probes(c: &Value) -> Result<Vec<Probe>, String> {
    let port_named = |p: &Value| -> Result<u16, String> {
        if let Some(n) = p.as_u64() {
            return u16::try_from(n).map_err(|e| format!("probe port {n}: {e}"));
        }
        let name = text(p, "probe port")?;
        c["ports"]
            .as_array()
            .and_then(|ps| ps.iter().find(|q| q["name"] == name.as_str()))
            .and_then(|q| q["containerPort"].as_u64())
            .and_then(|n| u16::try_from(n).ok())
            .ok_or_else(|| format!("probe port {name}: no such container port"))
    };
    let mut out = Vec::new();
    for kind in ["liveness", "readiness", "startup"] {
        let p = &c[format!("{kind}Probe")];
        if p.is_null() {
            continue;
        }
        out.push(Probe {
            kind: kind.to_string(),
            path: text(&p["httpGet"]["path"], "probe path")?,
            port: port_named(&p["httpGet"]["port"])?,
        });
    }
    Ok(out)
}

fn security(pod: &Value, c: &Value) -> Security {
    let sc = &c["securityContext"];
    let seccomp = sc["seccompProfile"]["type"]
        .as_str()
        .or(pod["securityContext"]["seccompProfile"]["type"].as_str())
        .unwrap_or("Unconfined")
        .to_string();
    Security {
        run_as_user: sc["runAsUser"].as_i64().unwrap_or(0),
        run_as_group: sc["runAsGroup"].as_i64().unwrap_or(0),
        privileged: sc["privileged"].as_bool().unwrap_or(false),
        allow_privilege_escalation: sc["allowPrivilegeEscalation"].as_bool().unwrap_or(true),
        read_only_root: sc["readOnlyRootFilesystem"].as_bool().unwrap_or(false),
        caps_add: strings(&sc["capabilities"]["add"]),
        caps_drop: strings(&sc["capabilities"]["drop"]),
        seccomp,
    }
}

impl DaemonSetPod {
    /// The pod of the (single) DaemonSet in `docs` (every document of the
    /// rendered manifest, as JSON values), its first container, and the
    /// ConfigMaps of the same manifest.
    pub fn from_manifest(docs: &[Value]) -> Result<DaemonSetPod, String> {
        let ds = kind(docs, "DaemonSet")?;
        let pod = &ds["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        let mut env = Vec::new();
        for e in c["env"].as_array().cloned().unwrap_or_default() {
            env.push(EnvVar {
                name: text(&e["name"], "env.name")?,
                value: e["value"].as_str().map(str::to_string),
                field_path: e["valueFrom"]["fieldRef"]["fieldPath"]
                    .as_str()
                    .map(str::to_string),
            });
        }
        let res = &c["resources"];
        let config_maps = docs
            .iter()
            .filter(|d| d["kind"] == "ConfigMap")
            .map(|cm| {
                let files = cm["data"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                (
                    cm["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    files,
                )
            })
            .collect();
        Ok(DaemonSetPod {
            name: text(&ds["metadata"]["name"], "metadata.name")?,
            namespace: text(&ds["metadata"]["namespace"], "metadata.namespace")?,
            container: text(&c["name"], "container name")?,
            image: text(&c["image"], "image")?,
            args: strings(&c["args"]),
            env,
            mounts: mounts(pod, c)?,
            probes: probes(c)?,
            host_pid: pod["hostPID"].as_bool().unwrap_or(false),
            host_network: pod["hostNetwork"].as_bool().unwrap_or(false),
            security: security(pod, c),
            cpu_limit_milli: quantity(&res["limits"]["cpu"], "limits.cpu", true)?,
            memory_limit_bytes: quantity(&res["limits"]["memory"], "limits.memory", false)?,
            guaranteed: !res["limits"].is_null() && res["requests"] == res["limits"],
            config_maps,
        })
    }

    /// The probe of `kind` (`liveness`, `readiness`, `startup`).
    pub fn probe(&self, kind: &str) -> Option<&Probe> {
        self.probes.iter().find(|p| p.kind == kind)
    }

    /// The mount of volume `name`.
    pub fn mount(&self, name: &str) -> Option<&PodMount> {
        self.mounts.iter().find(|m| m.volume == name)
    }

    /// The files of ConfigMap `name`.
    pub fn config_map(&self, name: &str) -> Option<&[(String, String)]> {
        self.config_maps
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f.as_slice())
    }

    /// The env the container gets: literal values, and `fieldRef`s resolved
    /// by `field` (e.g. `spec.nodeName` → the node's name).
    pub fn env_values(
        &self,
        field: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<(String, String)>, String> {
        self.env
            .iter()
            .map(|e| {
                let v = match (&e.value, &e.field_path) {
                    (Some(v), _) => v.clone(),
                    (None, Some(f)) => field(f)
                        .ok_or_else(|| format!("env {}: fieldRef {f} unknown here", e.name))?,
                    (None, None) => String::new(),
                };
                Ok((e.name.clone(), v))
            })
            .collect()
    }

    /// The namespaces the pod asks for: hostPID → the node's PID namespace.
    /// The network is the node's when `hostNetwork` is set or when the node
    /// has no CNI (`node_network`).
    pub fn namespaces(&self, node_network: bool) -> proto::NamespaceOption {
        let mode = |host: bool, own: proto::NamespaceMode| {
            if host {
                proto::NamespaceMode::Node as i32
            } else {
                own as i32
            }
        };
        proto::NamespaceOption {
            network: mode(self.host_network || node_network, proto::NamespaceMode::Pod),
            pid: mode(self.host_pid, proto::NamespaceMode::Container),
            ipc: proto::NamespaceMode::Pod as i32,
            ..Default::default()
        }
    }

    /// The pod's labels as the kubelet sets them.
    pub fn labels(&self, pod_name: &str, uid: &str) -> HashMap<String, String> {
        [
            ("io.kubernetes.pod.name", pod_name),
            ("io.kubernetes.pod.namespace", self.namespace.as_str()),
            ("io.kubernetes.pod.uid", uid),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// RunPodSandbox's config: `cgroup_parent` as the node's driver names
    /// the pod's cgroup (`kubepods-pod<uid>.slice`, `/kubepods/pod<uid>`).
    pub fn sandbox_config(
        &self,
        pod_name: &str,
        uid: &str,
        cgroup_parent: &str,
        node_network: bool,
        log_directory: &str,
    ) -> proto::PodSandboxConfig {
        proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: pod_name.to_string(),
                uid: uid.to_string(),
                namespace: self.namespace.clone(),
                attempt: 0,
            }),
            labels: self.labels(pod_name, uid),
            annotations: [("kubernetes.io/config.source".to_string(), "api".to_string())].into(),
            log_directory: log_directory.to_string(),
            linux: Some(proto::LinuxPodSandboxConfig {
                cgroup_parent: cgroup_parent.to_string(),
                security_context: Some(proto::LinuxSandboxSecurityContext {
                    namespace_options: Some(self.namespaces(node_network)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The CRI mounts: every volume mount at its path, `readOnly` and
    /// propagation as written; `host_path` says where each volume is on
    /// this node (a ConfigMap's directory, a host path as is or moved).
    pub fn cri_mounts(&self, host_path: &dyn Fn(&PodMount) -> String) -> Vec<proto::Mount> {
        self.mounts
            .iter()
            .map(|m| proto::Mount {
                container_path: m.container_path.clone(),
                host_path: host_path(m),
                readonly: m.read_only,
                propagation: if m.host_to_container {
                    proto::MountPropagation::PropagationHostToContainer as i32
                } else {
                    proto::MountPropagation::PropagationPrivate as i32
                },
                ..Default::default()
            })
            .collect()
    }

    /// The container's resources as the kubelet maps them (cpu shares and
    /// quota from the limit, the memory limit, a node-critical pod's
    /// oom_score_adj).
    pub fn cri_resources(&self) -> proto::LinuxContainerResources {
        let m = self.cpu_limit_milli;
        proto::LinuxContainerResources {
            cpu_shares: (m * 1024 / 1000).max(2),
            cpu_quota: (m * CPU_PERIOD / 1000).max(1000),
            cpu_period: CPU_PERIOD,
            memory_limit_in_bytes: self.memory_limit_bytes,
            oom_score_adj: CRITICAL_OOM_SCORE_ADJ,
            ..Default::default()
        }
    }

    /// The container's security context (capabilities, root, no privilege
    /// escalation, read-only root, the runtime's default seccomp profile).
    pub fn cri_security(&self, node_network: bool) -> proto::LinuxContainerSecurityContext {
        let s = &self.security;
        let seccomp = match s.seccomp.as_str() {
            "RuntimeDefault" => proto::security_profile::ProfileType::RuntimeDefault,
            _ => proto::security_profile::ProfileType::Unconfined,
        };
        proto::LinuxContainerSecurityContext {
            capabilities: Some(proto::Capability {
                add_capabilities: s.caps_add.clone(),
                drop_capabilities: s.caps_drop.clone(),
                ..Default::default()
            }),
            privileged: s.privileged,
            namespace_options: Some(self.namespaces(node_network)),
            run_as_user: Some(proto::Int64Value {
                value: s.run_as_user,
            }),
            run_as_group: Some(proto::Int64Value {
                value: s.run_as_group,
            }),
            readonly_rootfs: s.read_only_root,
            no_new_privs: !s.allow_privilege_escalation,
            seccomp: Some(proto::SecurityProfile {
                profile_type: seccomp as i32,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// CreateContainer's config: the manifest's args, `env`, mounts,
    /// resources and securityContext, with `image` (the node's copy of the
    /// manifest's image).
    pub fn container_config(&self, pod: &ContainerInputs<'_>) -> proto::ContainerConfig {
        let mut labels = self.labels(pod.pod_name, pod.uid);
        labels.insert(
            "io.kubernetes.container.name".into(),
            self.container.clone(),
        );
        proto::ContainerConfig {
            metadata: Some(proto::ContainerMetadata {
                name: self.container.clone(),
                attempt: 0,
            }),
            image: Some(proto::ImageSpec {
                image: pod.image.to_string(),
                ..Default::default()
            }),
            args: self.args.clone(),
            envs: pod
                .env
                .iter()
                .map(|(k, v)| proto::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            mounts: pod.mounts.clone(),
            labels,
            log_path: pod.log_path.to_string(),
            linux: Some(proto::LinuxContainerConfig {
                resources: Some(self.cri_resources()),
                security_context: Some(self.cri_security(pod.node_network)),
            }),
            ..Default::default()
        }
    }
}

/// What the node adds to [`DaemonSetPod::container_config`].
pub struct ContainerInputs<'a> {
    /// The pod's name (the DaemonSet's name and a suffix).
    pub pod_name: &'a str,
    /// The pod's uid.
    pub uid: &'a str,
    /// The image as the node's runtime knows it.
    pub image: &'a str,
    /// The environment (see [`DaemonSetPod::env_values`]; the caller may
    /// add what the kubelet adds, e.g. the service's address).
    pub env: Vec<(String, String)>,
    /// The mounts (see [`DaemonSetPod::cri_mounts`]; the caller may add the
    /// service account token's).
    pub mounts: Vec<proto::Mount>,
    /// The container's log, relative to the sandbox's log directory ("" none).
    pub log_path: &'a str,
    /// The pod uses the node's network namespace (no CNI on the node).
    pub node_network: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest() -> Vec<Value> {
        vec![
            json!({"kind": "ConfigMap", "metadata": {"name": "qosd-config"},
                   "data": {"config.yaml": "mode: dry-run\n"}}),
            json!({"kind": "DaemonSet", "metadata": {"name": "qosd", "namespace": "qosd-system"},
            "spec": {"template": {"spec": {
              "hostPID": true,
              "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
              "containers": [{
                "name": "qosd", "image": "q:1", "args": ["run"],
                "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "X", "value": "1"}],
                "ports": [{"name": "http", "containerPort": 9847}],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 9848}},
                "resources": {"requests": {"cpu": "200m", "memory": "128Mi"},
                              "limits": {"cpu": "200m", "memory": "128Mi"}},
                "securityContext": {"allowPrivilegeEscalation": false,
                  "capabilities": {"drop": ["ALL"], "add": ["KILL"]}},
                "volumeMounts": [
                  {"name": "config", "mountPath": "/etc/qosd", "readOnly": true},
                  {"name": "sock", "mountPath": "/run/containerd", "readOnly": true,
                   "mountPropagation": "HostToContainer"}]
              }],
              "volumes": [
                {"name": "config", "configMap": {"name": "qosd-config"}},
                {"name": "sock", "hostPath": {"path": "/run/containerd", "type": "Directory"}}]
            }}}}),
        ]
    }

    #[test]
    fn translates_the_pod() {
        let p = DaemonSetPod::from_manifest(&manifest()).unwrap();
        assert_eq!(p.args, ["run"]);
        assert!(p.host_pid && p.guaranteed);
        assert_eq!(p.cpu_limit_milli, 200);
        assert_eq!(p.memory_limit_bytes, 128 << 20);
        assert_eq!(p.probe("readiness").unwrap().port, 9847);
        assert_eq!(p.probe("liveness").unwrap().port, 9848);
        assert_eq!(p.security.seccomp, "RuntimeDefault", "the pod's profile");
        let sock = p.mount("sock").unwrap();
        assert!(sock.read_only && sock.host_to_container);
        assert_eq!(sock.host_path.as_deref(), Some("/run/containerd"));
        assert_eq!(
            p.mount("config").unwrap().config_map.as_deref(),
            Some("qosd-config")
        );
        assert_eq!(p.config_map("qosd-config").unwrap()[0].1, "mode: dry-run\n");
        let env = p
            .env_values(&|f| (f == "spec.nodeName").then(|| "n1".to_string()))
            .unwrap();
        assert_eq!(
            env,
            [("NODE_NAME".into(), "n1".into()), ("X".into(), "1".into())]
        );
        assert!(p.env_values(&|_| None).is_err());
        let r = p.cri_resources();
        assert_eq!((r.cpu_shares, r.cpu_quota), (204, 20_000));
        let s = p.cri_security(true);
        assert!(s.no_new_privs && !s.privileged);
        let ns = s.namespace_options.unwrap();
        assert_eq!(ns.pid, proto::NamespaceMode::Node as i32);
        let m = p.cri_mounts(&|m| m.host_path.clone().unwrap_or_else(|| "/cm".into()));
        assert_eq!((m[0].host_path.as_str(), m[0].readonly), ("/cm", true));
    }

    #[test]
    fn an_unknown_named_port_is_an_error() {
        let mut docs = manifest();
        docs[1]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] =
            json!("metrics");
        let e = DaemonSetPod::from_manifest(&docs).unwrap_err();
        assert!(e.contains("metrics"), "{e}");
    }
}
