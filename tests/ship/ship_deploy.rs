//! deploy/ (a kustomize base, the overlays `kubelet` (the default, rendered
//! into deploy/daemonset.yaml) and `standalone`) and Dockerfile: Kubernetes
//! OpenAPI schema validation (offline, `kubernetes-validate` from PyPI) and
//! the properties the issue asks for (Guaranteed, node-critical, probes,
//! least privilege, every Linux node, only the mounts qosd uses, the
//! kubelet's config beside a kubelet).
//!
//! CI: scripts/test installs `kubernetes-validate` in a venv under
//! target/ (bundles the schemas; no cluster and no network needed) and
//! `kubectl` (kustomize). Those tests are `#[ignore]`d: scripts/test runs
//! them as root; without the tools they fail.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use yaml_serde::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The effective configuration `qosd config check -o json` prints for a
/// config file's text (the binary's own validation; panics when invalid).
/// A `kubeletConfig` the text names is replaced by a kubeadm-like one.
fn checked_config(text: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let kubelet = dir.path().join("kubelet.yaml");
    std::fs::write(
        &kubelet,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n",
    )
    .unwrap();
    let text = match kubelet_config_key(text) {
        Some(k) => text.replace(&k, kubelet.to_str().unwrap()),
        None => text.to_string(),
    };
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args(["config", "check", "-o", "json"])
        .arg(&path)
        .env_remove("QOSD_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "config invalid: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn manifest_text() -> String {
    std::fs::read_to_string(root().join("deploy/daemonset.yaml")).unwrap()
}

fn docs(text: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} in deploy/daemonset.yaml"))
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

/// How to run kubernetes-validate, if installed: `QOSD_KUBERNETES_VALIDATE`,
/// the venv scripts/test makes (target/venv), or one on PATH.
fn validator() -> Option<Vec<String>> {
    if let Ok(cmd) = std::env::var("QOSD_KUBERNETES_VALIDATE") {
        return Some(cmd.split_whitespace().map(String::from).collect());
    }
    let venv = root().join("target/venv/bin/kubernetes-validate");
    let venv = venv.to_str().unwrap();
    let candidates: [&[&str]; 3] = [
        &[venv],
        &["kubernetes-validate"],
        &["python3", "-m", "kubernetes_validate"],
    ];
    for c in candidates {
        let ok = Command::new(c[0])
            .args(&c[1..])
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(c.iter().map(|s| s.to_string()).collect());
        }
    }
    None
}

fn validate(cmd: &[String], file: &Path, k8s_version: &str) -> (bool, String) {
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .args(["--strict", "--kubernetes-version", k8s_version])
        .arg(file)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && !text.contains("ERROR"), text)
}

/// `kubectl kustomize DIR` (panics when kubectl is missing or fails).
fn kustomize(dir: &str) -> String {
    let out = Command::new("kubectl")
        .args(["kustomize", dir])
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("kubectl not runnable ({e}); scripts/test installs it as root"));
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[ignore = "needs root: kubectl (scripts/test installs it as root)"]
fn daemonset_yaml_is_the_rendered_default_overlay() {
    let rendered = docs(&kustomize("deploy/overlays/kubelet"));
    let shipped = docs(&manifest_text());
    assert_eq!(
        shipped, rendered,
        "deploy/daemonset.yaml differs from `kubectl kustomize deploy/overlays/kubelet`: run scripts/render-deploy"
    );
    // The other overlay renders too, from the same base.
    let standalone = docs(&kustomize("deploy/overlays/standalone"));
    let kinds =
        |d: &[Value]| -> Vec<String> { d.iter().map(|d| s(&d["kind"]).to_string()).collect() };
    assert_eq!(kinds(&standalone), kinds(&rendered));
}

#[test]
#[ignore = "needs root: kubernetes-validate and kubectl (scripts/test installs them as root)"]
fn manifests_pass_kubernetes_openapi_schema() {
    let cmd = validator().expect(
        "kubernetes-validate not installed; scripts/test installs it as root \
         (a venv in target/venv)",
    );
    let dir = tempfile::tempdir().unwrap();
    let standalone = dir.path().join("standalone.yaml");
    std::fs::write(&standalone, kustomize("deploy/overlays/standalone")).unwrap();
    let shipped = root().join("deploy/daemonset.yaml");
    // The oldest Kubernetes qosd targets and the newest the validator knows.
    for file in [&shipped, &standalone] {
        for version in ["1.30.0", "1.35.0"] {
            let (ok, out) = validate(&cmd, file, version);
            assert!(ok, "{} schema {version}:\n{out}", file.display());
            for k in [
                "namespace/",
                "serviceaccount/",
                "configmap/",
                "daemonset/",
                "clusterrole/",
                "clusterrolebinding/",
                "service/",
            ] {
                assert!(out.contains(k), "{k} not validated:\n{out}");
            }
        }
    }
    // The check can fail: a misspelt field is rejected in strict mode.
    let bad: PathBuf = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        manifest_text().replace("hostPID: true", "hostPid: true"),
    )
    .unwrap();
    let (ok, out) = validate(&cmd, &bad, "1.35.0");
    assert!(!ok && out.contains("hostPid"), "typo not caught:\n{out}");
}

#[test]
fn daemonset_properties() {
    let all = docs(&manifest_text());
    let ns = kind(&all, "Namespace");
    let ds = kind(&all, "DaemonSet");
    let sa = kind(&all, "ServiceAccount");
    let namespace = s(&ns["metadata"]["name"]);
    assert_eq!(s(&ds["metadata"]["namespace"]), namespace);
    assert_eq!(s(&sa["metadata"]["namespace"]), namespace);
    assert_eq!(sa["automountServiceAccountToken"].as_bool(), Some(true));

    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(s(&pod["serviceAccountName"]), s(&sa["metadata"]["name"]));
    assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(true));
    assert_eq!(s(&pod["priorityClassName"]), "system-node-critical");
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    assert_ne!(pod["hostNetwork"].as_bool(), Some(true));
    // Linux nodes only, whatever their taints.
    assert_eq!(s(&pod["nodeSelector"]["kubernetes.io/os"]), "linux");
    let tol = pod["tolerations"].as_sequence().unwrap();
    assert!(
        tol.iter().any(|t| t["operator"].as_str() == Some("Exists")
            && t["key"].is_null()
            && t["effect"].is_null()),
        "{tol:?}"
    );

    let containers = pod["containers"].as_sequence().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    // Guaranteed: requests == limits for cpu and memory.
    let res = &c["resources"];
    for r in ["cpu", "memory"] {
        let req = s(&res["requests"][r]);
        let lim = s(&res["limits"][r]);
        assert_eq!(
            qosd_model::core::quantity::Quantity::parse(req).unwrap(),
            qosd_model::core::quantity::Quantity::parse(lim).unwrap(),
            "{r}: requests {req} != limits {lim}"
        );
    }
    // Least privilege.
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"].as_bool(), Some(false));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    let drop: Vec<&str> = sc["capabilities"]["drop"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(s)
        .collect();
    let add: Vec<&str> = sc["capabilities"]["add"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(s)
        .collect();
    assert_eq!(drop, ["ALL"]);
    assert_eq!(add, ["KILL"]);

    // Probes on the health endpoints, on the port the config listens on.
    assert_eq!(s(&c["livenessProbe"]["httpGet"]["path"]), "/healthz");
    assert_eq!(s(&c["readinessProbe"]["httpGet"]["path"]), "/readyz");
    let port = c["ports"].as_sequence().unwrap()[0]["containerPort"]
        .as_u64()
        .unwrap();

    // The embedded config is valid and consistent with the mounts.
    let cm = kind(&all, "ConfigMap");
    let cfg_text = s(&cm["data"]["config.yaml"]);
    let cfg = checked_config(cfg_text);
    let metrics: std::net::SocketAddr = cfg["metricsAddress"].as_str().unwrap().parse().unwrap();
    assert_eq!(u64::from(metrics.port()), port);
    assert!(metrics.ip().is_unspecified(), "probes reach the pod IP");

    let args: Vec<&str> = c["args"].as_sequence().unwrap().iter().map(s).collect();
    let cfg_path = args[args.iter().position(|a| *a == "--config").unwrap() + 1];

    let mounts = c["volumeMounts"].as_sequence().unwrap();
    let volumes = pod["volumes"].as_sequence().unwrap();
    let mount = |path: &Path| -> (&Value, &Value) {
        let m = mounts
            .iter()
            .filter(|m| path.starts_with(s(&m["mountPath"])))
            .max_by_key(|m| s(&m["mountPath"]).len())
            .unwrap_or_else(|| panic!("{} is not mounted", path.display()));
        let v = volumes
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap_or_else(|| panic!("no volume {:?}", m["name"]));
        (m, v)
    };
    let (m, v) = mount(Path::new(cfg["cgroupfs"].as_str().unwrap()));
    assert_eq!(s(&v["hostPath"]["path"]), "/sys/fs/cgroup");
    assert_ne!(
        m["readOnly"].as_bool(),
        Some(true),
        "cgroupfs must be writable"
    );
    // The socket's directory, not the file (a restarted runtime's new
    // socket must be visible).
    let endpoint = cfg["runtimeEndpoint"].as_str().unwrap();
    let sock = PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
    let (m, v) = mount(&sock);
    assert_eq!(s(&v["hostPath"]["type"]), "Directory");
    assert_eq!(Path::new(s(&m["mountPath"])), sock.parent().unwrap());
    assert_eq!(Path::new(s(&v["hostPath"]["path"])), sock.parent().unwrap());
    assert_eq!(m["readOnly"].as_bool(), Some(true), "socket dir read-only");
    let (m, v) = mount(Path::new(cfg["rootDir"].as_str().unwrap()));
    assert_eq!(s(&v["hostPath"]["path"]), "/var/lib/kubelet");
    assert_eq!(m["readOnly"].as_bool(), Some(true));
    // stateDir: on the host (it must outlive the pod), writable.
    let state = Path::new(cfg["stateDir"].as_str().expect("stateDir set"));
    let (m, v) = mount(state);
    assert_eq!(s(&v["hostPath"]["path"]), "/var/lib/qosd");
    assert_eq!(Path::new(s(&m["mountPath"])), state);
    assert_ne!(m["readOnly"].as_bool(), Some(true));
    let (_, v) = mount(Path::new(cfg_path));
    assert_eq!(s(&v["configMap"]["name"]), s(&cm["metadata"]["name"]));
    assert!(
        Path::new(cfg_path).file_name().unwrap().to_str().unwrap() == "config.yaml",
        "{cfg_path}"
    );
    // The kubelet's config is read through the kubelet root's mount.
    let kubelet_config = kubelet_config_key(cfg_text).expect("kubeletConfig set");
    let (m, v) = mount(Path::new(&kubelet_config));
    assert_eq!(s(&v["hostPath"]["path"]), "/var/lib/kubelet");
    assert_eq!(m["readOnly"].as_bool(), Some(true));
    // Every other mount is read-only, and every mount is one qosd uses:
    // the config, cgroupfs, the socket's directory, the kubelet root, the
    // state dir, the instance lock's directory (shared with the host: a
    // hostPath) (no /host/proc: with hostPID the pod's /proc is the host's).
    let lock_dir = Path::new("/run/qosd");
    let (_, v) = mount(lock_dir);
    assert_eq!(s(&v["hostPath"]["path"]), "/run/qosd");
    let used = [
        Path::new(cfg_path),
        Path::new(cfg["cgroupfs"].as_str().unwrap()),
        &sock,
        Path::new(cfg["rootDir"].as_str().unwrap()),
        state,
        lock_dir,
    ];
    for m in mounts {
        let p = s(&m["mountPath"]);
        assert!(
            used.iter().any(|u| u.starts_with(p)),
            "{p} is mounted but qosd uses nothing below it"
        );
        if p != "/host/sys/fs/cgroup" && Path::new(p) != state && Path::new(p) != lock_dir {
            assert_eq!(
                m["readOnly"].as_bool(),
                Some(true),
                "{p} should be read-only"
            );
        }
    }
    assert_eq!(mounts.len(), used.len(), "{mounts:?}");
    assert_eq!(volumes.len(), used.len(), "{volumes:?}");
}

/// The `kubeletConfig` key of a qosd config file.
fn kubelet_config_key(cfg_text: &str) -> Option<String> {
    let v: Value = yaml_serde::from_str(cfg_text).unwrap();
    v["kubeletConfig"].as_str().map(String::from)
}

/// `qosd config show -o json` of an overlay's ConfigMap, with the kubelet
/// config `kubelet` (if any) in place of the node's.
fn effective_config(overlay_config: &str, kubelet: Option<&Path>) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(&cfg, overlay_config).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qosd"));
    cmd.args(["config", "show", "-o", "json", "--config"])
        .arg(&cfg);
    if let Some(k) = kubelet {
        cmd.arg("--kubelet-config").arg(k);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "qosd config show: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn default_overlay_takes_the_kubelets_config_audits_and_runs_dry() {
    let text = std::fs::read_to_string(root().join("deploy/overlays/kubelet/config.yaml")).unwrap();
    assert_eq!(
        kubelet_config_key(&text).as_deref(),
        Some("/var/lib/kubelet/config.yaml")
    );
    // A kubeadm node's kubelet config: the systemd driver, its thresholds.
    let dir = tempfile::tempdir().unwrap();
    let kubelet = dir.path().join("config.yaml");
    std::fs::write(
        &kubelet,
        "apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         cgroupDriver: systemd\n\
         containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n\
         evictionHard:\n  memory.available: 321Mi\n\
         systemReserved:\n  memory: 123Mi\n",
    )
    .unwrap();
    let eff = effective_config(&text, Some(&kubelet));
    assert_eq!(eff["cgroupDriver"], "systemd", "{eff}");
    assert_eq!(eff["cgroupEnforcement"], "audit", "{eff}");
    assert_eq!(eff["mode"], "dry-run", "{eff}");
    assert!(
        eff["evictionHard"].to_string().contains("321Mi"),
        "kubelet thresholds not taken: {eff}"
    );
    assert!(eff["systemReserved"].to_string().contains("123Mi"), "{eff}");
    assert_eq!(eff["kubeletConfig"], kubelet.to_str().unwrap());
    // The same through the config file's own key: the overlay names the
    // kubelet's file, so without it qosd refuses to start (no silent
    // fallback to cgroupfs defaults).
    let dir2 = tempfile::tempdir().unwrap();
    let cfg = dir2.path().join("config.yaml");
    std::fs::write(
        &cfg,
        text.replace("/var/lib/kubelet/config.yaml", "/nonexistent/kubelet.yaml"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args(["config", "check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        out.status.code(),
        Some(2),
        "bad config exits 2 (RestartPreventExitStatus)"
    );

    // The standalone overlay: no kubelet config, enforce.
    let text =
        std::fs::read_to_string(root().join("deploy/overlays/standalone/config.yaml")).unwrap();
    assert!(kubelet_config_key(&text).is_none());
    let eff = effective_config(&text, None);
    assert_eq!(eff["cgroupEnforcement"], "enforce", "{eff}");
    assert_eq!(eff["mode"], "enforce", "{eff}");
}

#[test]
fn kubernetes_api_settings_rbac_and_service() {
    let all = docs(&manifest_text());
    let ds = kind(&all, "DaemonSet");
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    let env = c["env"].as_sequence().unwrap();
    let node = env
        .iter()
        .find(|e| e["name"].as_str() == Some("NODE_NAME"))
        .expect("NODE_NAME env");
    assert_eq!(
        s(&node["valueFrom"]["fieldRef"]["fieldPath"]),
        "spec.nodeName"
    );
    let cm = kind(&all, "ConfigMap");
    let cfg = checked_config(s(&cm["data"]["config.yaml"]));
    assert_eq!(cfg["evictionBackend"], "api");
    assert_eq!(cfg["runtimeUnhealthyAfter"], "2m0s");
    assert!(cfg["kubeconfig"].is_null(), "in-cluster config");

    // Least RBAC: exactly these verbs, bound to the DaemonSet's account.
    let role = kind(&all, "ClusterRole");
    let mut grants: Vec<String> = Vec::new();
    for r in role["rules"].as_sequence().unwrap() {
        let groups: Vec<&str> = r["apiGroups"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(s)
            .collect();
        assert_eq!(groups, [""], "core group only");
        assert!(r.get("resourceNames").is_none() && r.get("nonResourceURLs").is_none());
        for res in r["resources"].as_sequence().unwrap() {
            for v in r["verbs"].as_sequence().unwrap() {
                grants.push(format!("{} {}", s(res), s(v)));
            }
        }
    }
    grants.sort();
    assert_eq!(
        grants,
        [
            "events create",
            "pods get",
            "pods list",
            "pods watch",
            "pods/eviction create",
            "pods/status patch"
        ]
    );
    let binding = kind(&all, "ClusterRoleBinding");
    assert_eq!(s(&binding["roleRef"]["name"]), s(&role["metadata"]["name"]));
    let sa = kind(&all, "ServiceAccount");
    let subject = &binding["subjects"][0];
    assert_eq!(s(&subject["kind"]), "ServiceAccount");
    assert_eq!(s(&subject["name"]), s(&sa["metadata"]["name"]));
    assert_eq!(s(&subject["namespace"]), s(&sa["metadata"]["namespace"]));

    // The optional metrics Service selects the DaemonSet's pods.
    let svc = kind(&all, "Service");
    assert_eq!(
        svc["spec"]["selector"], ds["spec"]["selector"]["matchLabels"],
        "Service selects the qosd pods"
    );
    assert_eq!(s(&svc["spec"]["ports"][0]["targetPort"]), "http");
}

#[test]
fn dockerfile_builds_a_small_static_image() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let froms: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().to_ascii_uppercase().starts_with("FROM "))
        .collect();
    assert!(froms.len() >= 2, "multi-stage build expected: {froms:?}");
    let last = froms.last().unwrap().to_ascii_lowercase();
    assert!(
        last.contains("scratch") || last.contains("distroless/static"),
        "final stage should be scratch or distroless-static: {last}"
    );
    // One recipe for the image and the DaemonSet pod test.
    assert!(text.contains("scripts/build-static-qosd /out/qosd --release"));
    let script = std::fs::read_to_string(root().join("scripts/build-static-qosd")).unwrap();
    assert!(script.contains("+crt-static"), "static binary expected");
    assert!(script.contains("ldd"), "a dynamic result is refused");
    assert!(text.contains("ENTRYPOINT [\"/usr/local/bin/qosd\"]"));
    // The image's default config validates.
    let cfg = root().join("config/qosd.yaml");
    assert!(text.contains("config/qosd.yaml"));
    checked_config(&std::fs::read_to_string(&cfg).unwrap());
}
